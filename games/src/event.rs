//! The event model (wire format v1, DESIGN.md section 1).
//!
//! [`Event`] is the typed form of one event. It is only ever built from input that has
//! passed every section-1 check (`Event::parse`), or by a writer that fills in a valid
//! event itself; both give the same canonical bytes as the raw input (see [`crate::canonical`]).

use serde_json::{Map, Value};
use std::fmt;

/// A seat: X authors the start and moves on odd seq, O moves on even seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Seat {
    X,
    O,
}

impl Seat {
    pub fn as_str(self) -> &'static str {
        match self {
            Seat::X => "X",
            Seat::O => "O",
        }
    }

    pub fn other(self) -> Seat {
        match self {
            Seat::X => Seat::O,
            Seat::O => Seat::X,
        }
    }

    /// The seat whose turn it is to author event `seq` (a move; a resign may come anytime).
    pub fn to_move_at(seq: u64) -> Seat {
        if seq % 2 == 1 || seq == 0 {
            Seat::X
        } else {
            Seat::O
        }
    }

    pub fn parse(s: &str) -> Option<Seat> {
        match s {
            "X" => Some(Seat::X),
            "O" => Some(Seat::O),
            _ => None,
        }
    }
}

impl fmt::Display for Seat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Start,
    Move,
    Resign,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Move => "move",
            Action::Resign => "resign",
        }
    }
}

/// A claimed or computed game status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    InProgress,
    Win,
    Draw,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Win => "win",
            Status::Draw => "draw",
        }
    }
}

/// One event. Field names follow the wire (`prevHash` is `prev_hash`, `move` is `mv`).
///
/// `mv` and `rules` hold JSON that passed the section-1 checks: objects with unique keys,
/// integers within ±(2^53−1), no floats.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub game: String,
    pub seq: u64,
    pub prev_hash: String,
    pub player: Seat,
    pub action: Action,
    pub mv: Option<Value>,
    pub protocol: Option<String>,
    pub rules: Option<Map<String, Value>>,
    pub status: Option<Status>,
    pub sig: Option<String>,
}
