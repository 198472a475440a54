//! `pipehub:connect-four`: pieces drop to the lowest empty cell of a column.
//!
//! A move is `{"col": c}`, 0-indexed. A full column is `column_full`. `winLength` or more
//! in a row wins; a full grid without a line is a draw. The board logic is shared with
//! tic-tac-toe in `super::grid`; this module only parses the payload and finds the row.

use super::grid::{self, coordinate, exact_fields, Grid, GridBoard};
use super::spec::{RuleError, Spec};
use super::{Board, MoveError, Protocol};
use serde_json::{Map, Value};

const SPEC: &str = include_str!("../../protocols/connect-four/spec.json");

#[derive(Debug)]
pub struct ConnectFour {
    spec: Spec,
}

impl ConnectFour {
    pub fn new() -> ConnectFour {
        ConnectFour {
            // The embedded spec is fixed at build time and loaded by this module's tests.
            spec: Spec::load(SPEC).expect("the embedded connect-four spec loads"),
        }
    }
}

impl Default for ConnectFour {
    fn default() -> Self {
        Self::new()
    }
}

impl Protocol for ConnectFour {
    fn refs(&self) -> &[&'static str] {
        &["pipehub:connect-four"]
    }

    fn spec(&self) -> &Value {
        self.spec.doc()
    }

    fn id(&self) -> &str {
        self.spec.id()
    }

    fn rules(&self, given: &Map<String, Value>) -> Result<Map<String, Value>, RuleError> {
        grid::validate_rules(&self.spec, given)
    }

    fn new_board(&self, rules: &Map<String, Value>) -> Box<dyn Board> {
        Box::new(GridBoard::new(rules, cell))
    }
}

/// The cell a move names: the lowest empty one of the column its payload names.
fn cell(grid: &Grid, mv: &Value) -> Result<(usize, usize), MoveError> {
    let [col] = exact_fields(mv, ["col"])?;
    let c = coordinate(col, grid.cols)?;
    grid.check_open()?;
    (0..grid.rows)
        .rev()
        .find(|r| grid.get(*r, c).is_none())
        .map(|r| (r, c))
        .ok_or(MoveError::ColumnFull)
}
