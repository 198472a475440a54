//! The event model (wire format v1, DESIGN.md section 1).
//!
//! [`Event`] is the typed form of one event. It is only ever built from input that has
//! passed every section-1 check (`Event::parse`), or by a writer that fills in a valid
//! event itself; both give the same canonical bytes as the raw input (see [`crate::canonical`]).
//!
//! Parsing stops at the event's *shape*: fields, types, enums and charsets. Whether the
//! event makes sense in its game (seq, chain, turn, signature, move) is the verifier's
//! business, so that a start with a `move` reaches it and is called `start_has_move`.

use crate::json;
use crate::reason::{Reason, Refusal};
use serde_json::{Map, Value};
use std::borrow::Cow;
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

impl Action {
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "start" => Some(Action::Start),
            "move" => Some(Action::Move),
            "resign" => Some(Action::Resign),
            _ => None,
        }
    }
}

impl Status {
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "in_progress" => Some(Status::InProgress),
            "win" => Some(Status::Win),
            "draw" => Some(Status::Draw),
            _ => None,
        }
    }
}

/// The top-level fields of an event; any other is `schema`.
const FIELDS: [&str; 10] = [
    "game", "seq", "prevHash", "player", "action", "move", "protocol", "rules", "status", "sig",
];

impl Event {
    /// Parses one raw input (a log line without its line ending, or an HTTP body) with the
    /// default size limit: the JSON checks of [`crate::json`], then the `schema` checks.
    pub fn parse(raw: &[u8]) -> Result<Event, Refusal> {
        Event::parse_with_limit(raw, json::MAX_BYTES)
    }

    /// [`Event::parse`] with another size limit.
    pub fn parse_with_limit(raw: &[u8], limit: usize) -> Result<Event, Refusal> {
        Event::from_members(json::parse_members(raw, limit)?)
    }

    /// The `schema` step alone, on an object that passed the JSON checks.
    pub fn from_object(map: Map<String, Value>) -> Result<Event, Refusal> {
        Event::from_members(map.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect())
    }

    /// The `schema` step on the members of an object with unique keys.
    pub fn from_members(members: json::Members<'_>) -> Result<Event, Refusal> {
        let mut slots: [Option<Value>; 10] = Default::default();
        for (key, value) in members {
            let i = FIELDS
                .iter()
                .position(|f| *f == key)
                .ok_or(schema("unknown"))?;
            slots[i] = Some(value);
        }
        let [game, seq, prev_hash, player, action, mv, protocol, rules, status, sig] = slots;
        let game = string(game, "game")?;
        if !is_game_id(&game) {
            return Err(schema("game"));
        }
        let seq = match seq {
            Some(Value::Number(n)) => n.as_u64().ok_or_else(|| schema("seq"))?,
            _ => return Err(schema("seq")),
        };
        let prev_hash = string(prev_hash, "prevHash")?;
        if !(prev_hash.is_empty() || is_lower_hex(&prev_hash, 64)) {
            return Err(schema("prevHash"));
        }
        let player = Seat::parse(&string(player, "player")?).ok_or(schema("player"))?;
        let action = Action::parse(&string(action, "action")?).ok_or(schema("action"))?;
        match (action, &mv) {
            (Action::Move, Some(Value::Object(_))) | (Action::Resign | Action::Start, None) => {}
            // A start with any move passes here so the verifier can say start_has_move.
            (Action::Start, Some(_)) => {}
            _ => return Err(schema("move")),
        }
        let protocol = match protocol {
            None => None,
            Some(Value::String(s)) if action == Action::Start => Some(s),
            Some(_) => return Err(schema("protocol")),
        };
        let rules = match rules {
            None => None,
            Some(Value::Object(m)) if action == Action::Start => Some(m),
            Some(_) => return Err(schema("rules")),
        };
        let status = match status {
            None => None,
            Some(Value::String(s)) => Some(Status::parse(&s).ok_or(schema("status"))?),
            Some(_) => return Err(schema("status")),
        };
        let sig = match sig {
            None => None,
            Some(Value::String(s)) if is_lower_hex(&s, 128) => Some(s),
            Some(_) => return Err(schema("sig")),
        };
        Ok(Event {
            game,
            seq,
            prev_hash,
            player,
            action,
            mv,
            protocol,
            rules,
            status,
            sig,
        })
    }

    /// The event as one line of JSON, `sig` included: its canonical form plus the
    /// signature, which is what writers append and what an export holds.
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(256);
        crate::canonical::write_event(self, true, &mut out);
        // The writer emits only UTF-8 (strings copied from Rust strings, ASCII around them).
        String::from_utf8(out).unwrap_or_default()
    }

    /// The event as a JSON value, `sig` included.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("game".into(), Value::from(self.game.as_str()));
        m.insert("seq".into(), Value::from(self.seq));
        m.insert("prevHash".into(), Value::from(self.prev_hash.as_str()));
        m.insert("player".into(), Value::from(self.player.as_str()));
        m.insert("action".into(), Value::from(self.action.as_str()));
        if let Some(mv) = &self.mv {
            m.insert("move".into(), mv.clone());
        }
        if let Some(p) = &self.protocol {
            m.insert("protocol".into(), Value::from(p.as_str()));
        }
        if let Some(r) = &self.rules {
            m.insert("rules".into(), Value::Object(r.clone()));
        }
        if let Some(s) = self.status {
            m.insert("status".into(), Value::from(s.as_str()));
        }
        if let Some(s) = &self.sig {
            m.insert("sig".into(), Value::from(s.as_str()));
        }
        Value::Object(m)
    }
}

/// A `schema` refusal. The offending field is not named on the wire: section 1 defines
/// no detail for it, and readers that match on the exact refusal must all agree.
fn schema(_field: &str) -> Refusal {
    Refusal::new(Reason::Schema)
}

fn string(value: Option<Value>, field: &str) -> Result<String, Refusal> {
    match value {
        Some(Value::String(s)) => Ok(s),
        _ => Err(schema(field)),
    }
}

/// 1–128 characters of `A-Z a-z 0-9 . _ : -`, the first alphanumeric.
pub fn is_game_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-'))
}

/// Exactly `len` characters of lowercase hex.
pub fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}
