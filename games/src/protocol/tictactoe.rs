//! `pipehub:tic-tac-toe` (alias `flurryport:tic-tac-toe`): the m,n,k game.
//!
//! A move is `{"row": r, "col": c}`, 0-indexed, on an empty cell. `winLength` or more in
//! a row wins; a full board without a line is a draw. The board logic is shared with
//! connect-four in `super::grid`; this module only parses the payload.

use super::grid::{self, coordinate, exact_fields, Grid};
use super::spec::{RuleError, Spec};
use super::{Board, GameResult, MoveError, Protocol, View, Viewer};
use crate::event::Seat;
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
        Box::new(TicTacToeBoard {
            grid: Grid::new(rules),
        })
    }
}

#[derive(Clone, Debug)]
struct TicTacToeBoard {
    grid: Grid,
}

impl TicTacToeBoard {
    fn cell(&self, mv: &Value) -> Result<(usize, usize), MoveError> {
        let [row, col] = exact_fields(mv, ["row", "col"])?;
        // Both must be integers before either is judged out of bounds.
        if !(row.is_i64() || row.is_u64()) || !(col.is_i64() || col.is_u64()) {
            return Err(MoveError::BadMove);
        }
        let (r, c) = (
            coordinate(row, self.grid.rows)?,
            coordinate(col, self.grid.cols)?,
        );
        self.grid.check_open()?;
        if self.grid.get(r, c).is_some() {
            return Err(MoveError::Occupied);
        }
        Ok((r, c))
    }
}

impl Board for TicTacToeBoard {
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
