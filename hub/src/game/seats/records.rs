//! The records seats keep in the [`Meta`](crate::meta::Meta) store, and the keys they are
//! kept under (the key layout is listed in the module essay of [`super`]). Each record is
//! JSON; a seat token is stored only as its SHA-256, so a copy of the store opens no seat.
//!
//! What this module deliberately does not do: read or write the store. It says what a
//! record is and where it lives; [`Seats`](super::Seats) does the reading and writing.

use std::sync::Arc;

use bytes::Bytes;
use games::{crypto, Seat};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::game::types::SeatAuth;
use crate::game::{HubError, Unavailable};

/// What a seated game was created with, and how far its seating got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    pub inbox: String,
    pub game: String,
    /// The protocol's canonical ref and id.
    pub protocol: Arc<str>,
    pub protocol_id: Arc<str>,
    /// The validated rules, defaults filled in, without `keys` and `inboxes`.
    pub rules: Arc<Map<String, Value>>,
    pub signed: bool,
    /// Public keys (64 hex) once known; `None` for an unsigned game.
    pub key_x: Option<String>,
    pub key_o: Option<String>,
    /// True when that seat's agent holds its own key (it posts signed events itself).
    pub agent_x: bool,
    pub agent_o: bool,
    pub paired: bool,
    /// The person whose open-games cap this game counts against.
    pub host: String,
    pub created_ms: u64,
    /// Hash of the live pairing code (`None` once paired).
    pub code_hash: Option<String>,
    /// The hex SHA-256 of the `Idempotency-Key` the create was sent with, by which its
    /// host may send it again ([`CREATE_REPEAT`](super::codes::CREATE_REPEAT)). Absent
    /// from older records and from creates sent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_key: Option<String>,
}

impl Registration {
    /// True when the hub writes the start: X's key is hub-held, or the game is unsigned.
    pub fn hub_writes_start(&self) -> bool {
        !self.signed || !self.agent_x
    }

    /// True when `seat`'s agent holds its key (so the hub cannot write for it).
    pub fn agent_held(&self, seat: Seat) -> bool {
        match seat {
            Seat::X => self.agent_x,
            Seat::O => self.agent_o,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct CodeRecord {
    pub(super) inbox: String,
    pub(super) game: String,
    pub(super) expires_ms: u64,
    pub(super) used: bool,
    /// On the tombstone of a code a pair spent: the hex SHA-256 of the `Idempotency-Key`
    /// that pair was sent with, by which its guest may make it again
    /// ([`PAIR_REPEAT`](super::codes::PAIR_REPEAT)). Absent from older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) repeat_key: Option<String>,
}

impl CodeRecord {
    /// True when this is the tombstone of a pair made with `repeat_key` (hashed) no longer
    /// ago than [`PAIR_REPEAT`](super::codes::PAIR_REPEAT) before `now_ms`.
    pub(super) fn repeats(&self, repeat_key: Option<&str>, now_ms: u64) -> bool {
        let window = super::codes::PAIR_REPEAT.as_millis() as u64;
        self.used
            && repeat_key.is_some()
            && self.repeat_key.as_deref() == repeat_key
            && now_ms <= self.expires_ms.saturating_add(window)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct SeatRecord {
    pub(super) inbox: String,
    pub(super) game: String,
    pub(super) seat: String,
}

pub(super) fn game_key(inbox: &str, game: &str) -> String {
    format!("game/{inbox}/{game}")
}

pub(super) fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

pub(super) fn code_key(code_hash: &str) -> String {
    format!("code/{code_hash}")
}

pub(super) fn seat_key(token_hash: &[u8; 32]) -> String {
    format!("seat/{}", crypto::to_hex(token_hash))
}

/// A `seat/{hash}` record: the token's hash and the seat it opens.
pub(super) fn parse_seat(key: &str, value: &[u8]) -> Option<([u8; 32], SeatAuth)> {
    let mut hash = [0u8; 32];
    hex::decode_to_slice(key.strip_prefix("seat/")?, &mut hash).ok()?;
    let rec = serde_json::from_slice::<SeatRecord>(value).ok()?;
    let seat = Seat::parse(&rec.seat)?;
    Some((
        hash,
        SeatAuth {
            inbox: rec.inbox.into(),
            game: rec.game.into(),
            seat,
        },
    ))
}

pub(in crate::game) fn open_key(person: &str, inbox: &str, game: &str) -> String {
    format!("open/{person}/{inbox}/{game}")
}

/// The person, inbox and game of an [`open_key`]. The person may itself hold slashes only
/// in theory (addresses and token hashes do not), so the key is split by its known tail.
pub(in crate::game) fn parse_open_key(key: &str) -> Option<(&str, &str, &str)> {
    let mut parts = key.strip_prefix("open/")?.rsplitn(3, '/');
    let (game, inbox, person) = (parts.next()?, parts.next()?, parts.next()?);
    Some((person, inbox, game))
}

pub(super) fn held_key(inbox: &str, game: &str, seat: Seat) -> String {
    format!("held/{inbox}/{game}/{seat}")
}

pub(super) fn json_bytes<T: Serialize>(value: &T) -> Result<Bytes, HubError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| Unavailable::Encode(e).into())
}
