//! The values the engine hands to its callers (HTTP, the relay, the agent).
//!
//! Each serializes to its wire form (camelCase) so that every edge answers with the same
//! shapes. Wire-level envelopes (HTTP status, `t` fields of WebSocket frames) are the
//! edges' business, not this module's.

use std::borrow::Cow;
use std::sync::Arc;

use games::reason::Refusal;
use games::Seat;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::SharedState;
use crate::inbox::Capture;

pub(crate) fn ser_seat<S: Serializer>(seat: &Seat, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(seat.as_str())
}

pub(crate) fn ser_opt_seat<S: Serializer>(seat: &Option<Seat>, s: S) -> Result<S::Ok, S::Error> {
    match seat {
        Some(seat) => s.serialize_str(seat.as_str()),
        None => s.serialize_none(),
    }
}

pub(crate) fn ser_opt_capture<S: Serializer>(c: &Option<Capture>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.collect_str(c),
        None => s.serialize_none(),
    }
}

/// The seat a token opens: one seat of one game of one inbox. Its ids are shared: a seat
/// names its game on every move it makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatAuth {
    pub inbox: Arc<str>,
    pub game: Arc<str>,
    pub seat: Seat,
}

/// The verdict a poster gets back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Accepted into the game's chain (HTTP 201).
    Accepted,
    /// Refused by the referee; the capture is kept (HTTP 422).
    Rejected,
    /// No verdict within the wait (HTTP 202); ask `GET …/events/{capture}` later.
    Pending,
    /// A game of a protocol this hub does not know: stored, not refereed (HTTP 202).
    Skipped,
    /// A rock-paper-scissors choice held until its seat's commit turn; nothing was
    /// appended (HTTP 202).
    Held,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Rejected => "rejected",
            Verdict::Pending => "pending",
            Verdict::Skipped => "skipped",
            Verdict::Held => "held",
        }
    }

    /// The HTTP status of a post that ended with this verdict.
    pub fn status(self) -> u16 {
        match self {
            Verdict::Accepted => 201,
            Verdict::Rejected => 422,
            Verdict::Pending | Verdict::Skipped | Verdict::Held => 202,
        }
    }
}

/// The outcome of a post: where it went, what the referee said, and the game afterwards.
#[derive(Clone, Debug, PartialEq)]
pub struct Posted {
    /// `None` only for a held choice (nothing was appended).
    pub capture: Option<Capture>,
    /// The event's hash; `None` for a held choice.
    pub hash: Option<String>,
    pub verdict: Verdict,
    /// The game as the poster may see it after the verdict (`None` when pending), shared
    /// with the room that relays it.
    pub state: Option<std::sync::Arc<SharedState>>,
    /// Why the referee refused it (verdict `rejected`), or why it was skipped.
    pub refusal: Option<Refusal>,
}

/// `POST /v1/inboxes/{inbox}/games`: a new seated game.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateGame {
    /// A protocol ref; `None` means the hub's default protocol.
    pub protocol: Option<String>,
    /// The protocol's rules (`keys` and `inboxes` are not allowed here).
    pub rules: Option<Map<String, Value>>,
    /// Signed play (the default).
    pub signed: bool,
    /// X's public key (64 hex) when X's agent holds its own key; `None`: hub-held.
    pub key: Option<String>,
}

/// What the host gets back from creating a game.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    pub inbox: String,
    pub game: String,
    #[serde(serialize_with = "ser_seat")]
    pub seat: Seat,
    pub token: String,
    pub pairing_code: String,
    /// RFC 3339 UTC time at which the code stops working.
    pub expires_at: String,
}

/// A fresh pairing code (the previous one no longer works).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewCode {
    pub inbox: String,
    pub game: String,
    pub pairing_code: String,
    pub expires_at: String,
}

/// What the guest gets back from `POST /v1/pair`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Paired {
    pub inbox: String,
    pub game: String,
    #[serde(serialize_with = "ser_seat")]
    pub seat: Seat,
    pub token: String,
}

/// One game of an inbox listing, for spectators.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GameSummary {
    pub game: String,
    pub protocol: Option<String>,
    pub phase: super::state::Phase,
    pub result: Option<super::state::ResultView>,
}

/// What the hub keeps of a game for the listing: a [`GameSummary`] without the game's id
/// (the key it is kept under), naming a built-in protocol without a copy of the name.
/// The hub keeps one for every game it has seen since it opened; a finished game's is
/// kept packed instead (`finished.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Listed {
    pub protocol: Option<Cow<'static, str>>,
    pub phase: super::state::Phase,
    pub result: Option<super::state::ResultView>,
}

impl Listed {
    /// A game's entry as its state shows it.
    pub fn of(state: &super::GameState) -> Listed {
        Listed {
            protocol: state.protocol.as_deref().map(|p| Cow::Owned(p.to_string())),
            phase: state.phase,
            result: state.result,
        }
    }

    /// Whether the entry is final: a started game with a result other than in progress.
    pub fn is_over(&self) -> bool {
        self.phase == super::state::Phase::Started
            && self.result.is_some_and(|r| r.status != "in_progress")
    }

    pub fn summary(&self, game: &str) -> GameSummary {
        GameSummary {
            game: game.to_string(),
            protocol: self.protocol.as_deref().map(str::to_string),
            phase: self.phase,
            result: self.result,
        }
    }
}

/// One capture of an inbox listing.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaptureItem {
    #[serde(serialize_with = "ser_opt_capture")]
    pub capture: Option<Capture>,
    pub game: String,
    /// The event as it was posted (its JSON), or the raw text when it is not JSON.
    pub event: Value,
    pub verdict: Verdict,
    /// The event's hash, as its post answered it whatever the verdict (a `pending` capture
    /// has one too); null only for stored bytes that are not an event.
    pub hash: Option<String>,
    pub reason: Option<String>,
    pub detail: Option<String>,
    /// The seat whose token posted it (or for which the hub wrote it); null when anonymous.
    #[serde(serialize_with = "ser_opt_seat")]
    pub seat: Option<Seat>,
    /// When the inbox sequenced it, milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// A page of a listing: `{"items": […], "next": CURSOR|null}`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Listing<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}
