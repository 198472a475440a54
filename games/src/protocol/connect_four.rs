//! `pipehub:connect-four`: pieces drop to the lowest empty cell of a column.
//!
//! A move is `{"col": c}`, 0-indexed. A full column is `column_full`. `winLength` or more
//! in a row wins; a full grid without a line is a draw. The board logic is shared with
//! tic-tac-toe in `super::grid`; this module only parses the payload and finds the row.

use super::grid::{self, coordinate, exact_fields, Grid};
use super::spec::{RuleError, Spec};
use super::{Board, GameResult, MoveError, Protocol, View, Viewer};
use crate::event::Seat;
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
        Box::new(ConnectFourBoard {
            grid: Grid::new(rules),
        })
    }
}

#[derive(Clone, Debug)]
struct ConnectFourBoard {
    grid: Grid,
}

impl ConnectFourBoard {
    fn cell(&self, mv: &Value) -> Result<(usize, usize), MoveError> {
        let [col] = exact_fields(mv, ["col"])?;
        let c = coordinate(col, self.grid.cols)?;
        self.grid.check_open()?;
        (0..self.grid.rows)
            .rev()
            .find(|r| self.grid.get(*r, c).is_none())
            .map(|r| (r, c))
            .ok_or(MoveError::ColumnFull)
    }
}

impl Board for ConnectFourBoard {
    fn legal(&self, _seat: Seat, mv: &Value) -> Result<(), MoveError> {
        self.cell(mv).map(|_| ())
    }

    fn apply(&mut self, seat: Seat, mv: &Value) -> Result<(), MoveError> {
        let (r, c) = self.cell(mv)?;
        self.grid.place(seat, r, c);
        Ok(())
    }

    fn resign(&mut self, seat: Seat) {
        self.grid.resign(seat);
    }

    fn outcome(&self) -> GameResult {
        self.grid.outcome()
    }

    fn view(&self, viewer: Viewer) -> View {
        self.grid.view(viewer)
    }

    fn write_view(&self, viewer: Viewer, out: &mut Vec<u8>) {
        self.grid.write_view(viewer, out)
    }

    fn render(&self, _viewer: Viewer) -> String {
        self.grid.render()
    }

    fn box_clone(&self) -> Box<dyn Board> {
        Box::new(self.clone())
    }
}
