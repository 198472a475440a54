//! The board shared by the k-in-a-row games (tic-tac-toe and connect-four).
//!
//! A [`Grid`] holds the cells, counts the moves applied and notices a line of `winLength`
//! *or more* through the last piece placed, in any of the four directions. The games
//! differ only in how a move names its cell: each game gives a [`Cell`] that parses its own
//! payload, and [`GridBoard`] is the board of both. Nothing on a grid is secret: every
//! viewer gets the same view.
//!
//! Row 0 is the top row, as drawn. Whose turn it is follows the chain's parity: after `n`
//! moves the next move is event `n + 1` (the start is seq 0), which is X's when odd.

use super::spec::{int_rule, RuleError, RuleFault};
use super::{Board, GameResult, MoveError, View, Viewer, WinBy};
use crate::canonical::write_u64;
use crate::event::Seat;
use serde_json::{json, Map, Value};

/// A move payload's value as a 0-based coordinate below `bound`.
pub(crate) fn coordinate(value: &Value, bound: usize) -> Result<usize, MoveError> {
    if let Some(n) = value.as_i64() {
        return usize::try_from(n)
            .ok()
            .filter(|n| *n < bound)
            .ok_or(MoveError::OutOfBounds);
    }
    if value.is_u64() {
        // Beyond i64, so far beyond any board.
        return Err(MoveError::OutOfBounds);
    }
    Err(MoveError::BadMove)
}

/// The fields of a move payload that must be an object with exactly `names` as keys.
pub(crate) fn exact_fields<'a, const N: usize>(
    mv: &'a Value,
    names: [&str; N],
) -> Result<[&'a Value; N], MoveError> {
    let map = mv.as_object().ok_or(MoveError::BadMove)?;
    if map.len() != N {
        return Err(MoveError::BadMove);
    }
    let mut out = [&Value::Null; N];
    for (slot, name) in out.iter_mut().zip(names) {
        *slot = map.get(name).ok_or(MoveError::BadMove)?;
    }
    Ok(out)
}

/// How a game's move payload names its cell on `grid`: the cell, or why the move takes
/// none (a bad payload, a cell out of bounds or taken, a game already over).
pub(crate) type Cell = fn(grid: &Grid, mv: &Value) -> Result<(usize, usize), MoveError>;

/// The board of a k-in-a-row game: its grid, and how its moves name a cell.
#[derive(Clone, Debug)]
pub(crate) struct GridBoard {
    grid: Grid,
    cell: Cell,
}

impl GridBoard {
    pub fn new(rules: &Map<String, Value>, cell: Cell) -> GridBoard {
        GridBoard {
            grid: Grid::new(rules),
            cell,
        }
    }
}

impl Board for GridBoard {
    fn legal(&self, _seat: Seat, mv: &Value) -> Result<(), MoveError> {
        (self.cell)(&self.grid, mv).map(|_| ())
    }

    fn apply(&mut self, seat: Seat, mv: &Value) -> Result<(), MoveError> {
        let (r, c) = (self.cell)(&self.grid, mv)?;
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

#[derive(Clone, Debug)]
pub(crate) struct Grid {
    pub rows: usize,
    pub cols: usize,
    win_length: usize,
    cells: Vec<Option<Seat>>,
    moves: u64,
    last: Option<(usize, usize)>,
    line: Vec<(usize, usize)>,
    winner: Option<Seat>,
    /// The seat that resigned, if one did.
    resigned: Option<Seat>,
}

impl Grid {
    /// A grid for rules already validated against the spec (rows, cols, winLength).
    pub fn new(rules: &Map<String, Value>) -> Grid {
        let dim = |name, fallback| usize::try_from(int_rule(rules, name, fallback)).unwrap_or(1);
        let (rows, cols) = (dim("rows", 3), dim("cols", 3));
        Grid {
            rows,
            cols,
            win_length: dim("winLength", 3),
            cells: vec![None; rows * cols],
            moves: 0,
            last: None,
            line: Vec::new(),
            winner: None,
            resigned: None,
        }
    }

    pub fn get(&self, row: usize, col: usize) -> Option<Seat> {
        self.cells[row * self.cols + col]
    }

    fn is_full(&self) -> bool {
        self.moves as usize >= self.cells.len()
    }

    pub fn is_over(&self) -> bool {
        self.winner.is_some() || self.resigned.is_some() || self.is_full()
    }

    /// `seat` resigned: the game is over unless it already was.
    pub fn resign(&mut self, seat: Seat) {
        if !self.is_over() {
            self.resigned = Some(seat);
        }
    }

    /// Refuses a move on a finished board (the verifier says `after_end` before asking).
    pub fn check_open(&self) -> Result<(), MoveError> {
        if self.is_over() {
            Err(MoveError::GameOver)
        } else {
            Ok(())
        }
    }

    /// Puts `seat`'s piece on an empty, in-bounds cell and looks for a line through it.
    pub fn place(&mut self, seat: Seat, row: usize, col: usize) {
        self.cells[row * self.cols + col] = Some(seat);
        self.moves += 1;
        self.last = Some((row, col));
        for (dr, dc) in [(0, 1), (1, 0), (1, 1), (1, -1)] {
            let back = self.run(seat, row, col, -dr, -dc);
            let ahead = self.run(seat, row, col, dr, dc);
            if back + 1 + ahead >= self.win_length {
                self.winner = Some(seat);
                // The line from its far end behind the piece to its far end ahead.
                self.line = (-(back as isize)..=ahead as isize)
                    .map(|i| {
                        let r = row.wrapping_add_signed(i * dr);
                        let c = col.wrapping_add_signed(i * dc);
                        (r, c)
                    })
                    .collect();
                return;
            }
        }
    }

    /// How many cells after (row, col) in direction (dr, dc) hold `seat`'s pieces in a row.
    fn run(&self, seat: Seat, row: usize, col: usize, dr: isize, dc: isize) -> usize {
        let mut n = 0;
        let (mut r, mut c) = (row as isize, col as isize);
        loop {
            r += dr;
            c += dc;
            if r < 0 || c < 0 || r >= self.rows as isize || c >= self.cols as isize {
                return n;
            }
            if self.get(r as usize, c as usize) != Some(seat) {
                return n;
            }
            n += 1;
        }
    }

    pub fn outcome(&self) -> GameResult {
        match (self.winner, self.resigned) {
            (Some(seat), _) => GameResult::win(seat, WinBy::Line),
            (None, Some(resigned)) => GameResult::win(resigned.other(), WinBy::Resign),
            (None, None) if self.is_full() => GameResult::DRAW,
            (None, None) => GameResult::IN_PROGRESS,
        }
    }

    fn to_move(&self) -> Option<Seat> {
        (!self.is_over()).then(|| Seat::to_move_at(self.moves + 1))
    }

    /// Everyone sees the same grid; `viewer` is only echoed so a client knows its seat.
    pub fn view(&self, viewer: Viewer) -> View {
        let cells: Vec<Vec<Value>> = (0..self.rows)
            .map(|r| {
                (0..self.cols)
                    .map(|c| match self.get(r, c) {
                        Some(seat) => Value::from(seat.as_str()),
                        None => Value::Null,
                    })
                    .collect()
            })
            .collect();
        let seat = match viewer {
            Viewer::Seat(s) => Value::from(s.as_str()),
            Viewer::Spectator => Value::Null,
        };
        View(json!({
            "seat": seat,
            "rows": self.rows,
            "cols": self.cols,
            "winLength": self.win_length,
            "cells": cells,
            "moves": self.moves,
            "toMove": self.to_move().map(Seat::as_str),
            "lastMove": self.last.map(|(r, c)| json!({"row": r, "col": c})),
            "line": (!self.line.is_empty())
                .then(|| self.line.iter().map(|(r, c)| json!({"row": r, "col": c})).collect::<Vec<_>>()),
        }))
    }

    /// [`Grid::view`] as JSON text, the bytes `serde_json` writes for it (keys in their
    /// sorted order), without building the value: a view is written for each seat after
    /// every move, and the tree cost dozens of small allocations.
    pub fn write_view(&self, viewer: Viewer, out: &mut Vec<u8>) {
        fn seat_json(seat: Option<Seat>) -> &'static [u8] {
            match seat {
                Some(Seat::X) => b"\"X\"",
                Some(Seat::O) => b"\"O\"",
                None => b"null",
            }
        }
        fn cell(out: &mut Vec<u8>, (row, col): (usize, usize)) {
            out.extend_from_slice(b"{\"col\":");
            write_u64(col as u64, out);
            out.extend_from_slice(b",\"row\":");
            write_u64(row as u64, out);
            out.push(b'}');
        }
        out.extend_from_slice(b"{\"cells\":[");
        for r in 0..self.rows {
            if r > 0 {
                out.push(b',');
            }
            out.push(b'[');
            for c in 0..self.cols {
                if c > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(seat_json(self.get(r, c)));
            }
            out.push(b']');
        }
        out.extend_from_slice(b"],\"cols\":");
        write_u64(self.cols as u64, out);
        out.extend_from_slice(b",\"lastMove\":");
        match self.last {
            Some(at) => cell(out, at),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"line\":");
        if self.line.is_empty() {
            out.extend_from_slice(b"null");
        } else {
            out.push(b'[');
            for (i, &at) in self.line.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                cell(out, at);
            }
            out.push(b']');
        }
        out.extend_from_slice(b",\"moves\":");
        write_u64(self.moves, out);
        out.extend_from_slice(b",\"rows\":");
        write_u64(self.rows as u64, out);
        out.extend_from_slice(b",\"seat\":");
        out.extend_from_slice(seat_json(match viewer {
            Viewer::Seat(s) => Some(s),
            Viewer::Spectator => None,
        }));
        out.extend_from_slice(b",\"toMove\":");
        out.extend_from_slice(seat_json(self.to_move()));
        out.extend_from_slice(b",\"winLength\":");
        write_u64(self.win_length as u64, out);
        out.push(b'}');
    }

    /// The board as text: the column numbers over it and each row's number before it,
    /// 0-based as a move names them (a reader counting dots across seven columns is
    /// easily off by one), a cell `X`, `O` or `.`; then who moves, or how it ended.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        // Every number as wide as the widest, so the columns line up. Written in place:
        // every state a move sends carries this text.
        let mut width = 1;
        let mut rest = self.rows.max(self.cols).saturating_sub(1) / 10;
        while rest > 0 {
            width += 1;
            rest /= 10;
        }
        let mut out = String::with_capacity((self.rows + 1) * (self.cols + 1) * (width + 1) + 12);
        // Writing to a `String` cannot fail.
        let _ = write!(out, "{:width$}", "");
        for c in 0..self.cols {
            let _ = write!(out, " {c:>width$}");
        }
        out.push('\n');
        for r in 0..self.rows {
            let _ = write!(out, "{r:>width$}");
            for c in 0..self.cols {
                let _ = write!(out, " {:>width$}", self.get(r, c).map_or(".", Seat::as_str));
            }
            out.push('\n');
        }
        match (self.winner, self.resigned, self.to_move()) {
            (Some(seat), _, _) => {
                out.push_str(seat.as_str());
                out.push_str(" wins");
            }
            (None, Some(resigned), _) => {
                out.push_str(resigned.other().as_str());
                out.push_str(" wins (");
                out.push_str(resigned.as_str());
                out.push_str(" resigned)");
            }
            (None, None, Some(seat)) => {
                out.push_str(seat.as_str());
                out.push_str(" to move");
            }
            (None, None, None) => out.push_str("draw"),
        }
        out
    }
}

/// The spec's checks plus what it cannot say: `winLength` at most `max(rows, cols)`.
pub(crate) fn validate_rules(
    spec: &super::spec::Spec,
    given: &Map<String, Value>,
) -> Result<Map<String, Value>, RuleError> {
    let rules = spec.validate(given)?;
    let side = int_rule(&rules, "rows", 1).max(int_rule(&rules, "cols", 1));
    if int_rule(&rules, "winLength", 1) > side {
        return Err(RuleError::new("winLength", RuleFault::Range));
    }
    Ok(rules)
}
