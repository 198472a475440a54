//! `pipehub:tic-tac-toe` (alias `flurryport:tic-tac-toe`): the m,n,k game.
//!
//! A move is `{"row": r, "col": c}`, 0-indexed, on an empty cell. `winLength` or more in
//! a row wins; a full board without a line is a draw. The board logic is shared with
//! connect-four in `super::grid`; this module only parses the payload.

use super::grid::{self, coordinate, exact_fields, Grid, GridBoard};
use super::spec::{RuleError, Spec};
use super::{Board, MoveError, Protocol};
use serde_json::{Map, Value};

const SPEC: &str = include_str!("../../protocols/tic-tac-toe/spec.json");

#[derive(Debug)]
pub struct TicTacToe {
    spec: Spec,
}

impl TicTacToe {
    pub fn new() -> TicTacToe {
        TicTacToe {
            // The embedded spec is fixed at build time and loaded by this module's tests.
            spec: Spec::load(SPEC).expect("the embedded tic-tac-toe spec loads"),
        }
    }
}

impl Default for TicTacToe {
    fn default() -> Self {
        Self::new()
    }
}

impl Protocol for TicTacToe {
    fn refs(&self) -> &[&'static str] {
        &["pipehub:tic-tac-toe", "flurryport:tic-tac-toe"]
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

/// The cell a move names: its payload parsed, and the cell checked free.
fn cell(grid: &Grid, mv: &Value) -> Result<(usize, usize), MoveError> {
    let [row, col] = exact_fields(mv, ["row", "col"])?;
    // Both must be integers before either is judged out of bounds.
    if !(row.is_i64() || row.is_u64()) || !(col.is_i64() || col.is_u64()) {
        return Err(MoveError::BadMove);
    }
    let (r, c) = (coordinate(row, grid.rows)?, coordinate(col, grid.cols)?);
    grid.check_open()?;
    if grid.get(r, c).is_some() {
        return Err(MoveError::Occupied);
    }
    Ok((r, c))
}
