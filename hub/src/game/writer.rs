//! Events the hub writes itself: a hub-held seat's moves and resigns, the start of a seated
//! game whose host's key is hub-held (or that is unsigned), and custodial
//! rock-paper-scissors commits and reveals.
//!
//! Each one is built from the actor's head (seq + 1, prevHash = head), signed with the
//! seat's HKDF-derived key when the game is signed, and then appended and adjudicated like
//! any posted event: the hub gets no shortcut past its own referee. A second writer racing
//! it (the seat's own other tab, say) simply gets `stale_seq`.
//!
//! Keys are derived from the hub secret. A game's desk (`super::desk`, shared by its actor
//! and the posters' threads) keeps the two it has derived ([`SeatKeys`]) for as long as
//! the actor lives: deriving one (HKDF, then the Ed25519 public point) cost more than the
//! signature it is for, on every hub-held move.
//!
//! The hub writes nothing that a reader would refuse before any game logic (DESIGN.md
//! section 1): a seat's move fits the limits of the message it came in, but the event the
//! hub wraps it in is larger by its envelope (ids, the previous hash, the signature) and
//! one level deeper, so [`check_move`] and [`check_size`] refuse it first.
//!
//! What it deliberately does not do: decide *whether* the hub may write for a seat (the
//! facade and the actor check that against the registration), or keep keys anywhere but
//! on the game's desk (they are dropped, and wiped, with it and its actor).

use std::sync::Arc;

use bytes::Bytes;
use games::reason::Refusal;
use games::verify::Prepared;
use games::{crypto, Action, Event, Reason, Seat};
use serde_json::{Map, Value};

use super::seats::Registration;

/// An event ready to append: the typed event, its bytes as stored, and its hash.
#[derive(Clone, Debug)]
pub struct Draft {
    pub event: Event,
    pub raw: Bytes,
    pub prepared: Prepared,
    pub seat: Seat,
}

/// What appending a draft takes: its bytes as stored, its hash and its seat. The game's
/// desk keeps the draft itself (`Desk::draft`) and hands out only this, so a draft is
/// never copied.
#[derive(Clone, Debug)]
pub struct Posting {
    pub raw: Bytes,
    pub hash: String,
    pub seat: Seat,
}

impl Draft {
    pub fn posting(&self) -> Posting {
        Posting {
            raw: self.raw.clone(),
            hash: self.prepared.hash.clone(),
            seat: self.seat,
        }
    }
}

/// A game's hub-held signing keys, each derived on first use. Behind a pointer: an
/// expanded key is about 220 bytes, and every game's desk has the two slots, signed or
/// not. Shared (`Arc`) so that a draft is signed outside the desk's lock without copying
/// the secret.
#[derive(Default)]
pub struct SeatKeys([Option<Arc<crypto::SecretKey>>; 2]);

impl SeatKeys {
    /// `seat`'s key in `inbox`/`game`, derived from `secret` the first time.
    pub fn get(
        &mut self,
        secret: &[u8],
        inbox: &str,
        game: &str,
        seat: Seat,
    ) -> Arc<crypto::SecretKey> {
        let slot = &mut self.0[match seat {
            Seat::X => 0,
            Seat::O => 1,
        }];
        slot.get_or_insert_with(|| Arc::new(crypto::seat_key(secret, inbox, game, seat)))
            .clone()
    }
}

/// Signs `event` with `seat`'s hub-held key when `signed`, and serializes it, deriving the
/// key afresh: the reference the desk's cached keys are tested against.
#[cfg(test)]
pub fn finish(secret: &[u8], inbox: &str, event: Event, signed: bool) -> Draft {
    let key = signed.then(|| crypto::seat_key(secret, inbox, &event.game, event.player));
    finish_with(key.as_ref(), event)
}

/// Signs `event` with `key` (the event's player's, for a signed game), and serializes it.
pub fn finish_with(key: Option<&crypto::SecretKey>, mut event: Event) -> Draft {
    let mut prepared = Prepared::of(&event);
    if let Some(key) = key {
        event.sig = Some(prepared.sign(key));
    }
    let raw = Bytes::from(event.to_json());
    let seat = event.player;
    Draft {
        event,
        raw,
        prepared,
        seat,
    }
}

/// The public key (64 hex) of a hub-held seat.
pub fn hub_public_key(secret: &[u8], inbox: &str, game: &str, seat: Seat) -> String {
    let key = crypto::seat_key(secret, inbox, game, seat);
    crypto::public_key_hex(&key.verifying_key())
}

/// The start of a seated game, as the hub (or X's agent) must write it: the registered
/// protocol and rules, both keys when signed, and `rules.inboxes: [inbox]`.
pub fn start_event(reg: &Registration) -> Event {
    let mut rules: Map<String, Value> = Map::clone(&reg.rules);
    if reg.signed {
        let mut keys = Map::new();
        keys.insert(
            "X".into(),
            Value::from(reg.key_x.clone().unwrap_or_default()),
        );
        keys.insert(
            "O".into(),
            Value::from(reg.key_o.clone().unwrap_or_default()),
        );
        rules.insert("keys".into(), Value::Object(keys));
    }
    rules.insert(
        "inboxes".into(),
        Value::Array(vec![Value::from(reg.inbox.as_str())]),
    );
    Event {
        game: reg.game.clone(),
        seq: 0,
        prev_hash: String::new(),
        player: Seat::X,
        action: Action::Start,
        mv: None,
        protocol: Some(reg.protocol.to_string()),
        rules: Some(rules),
        status: None,
        sig: None,
    }
}

/// The next event after `head` (at `seq`) by `seat`: a move with `mv`, or a resign.
pub fn next_event(game: &str, seq: u64, head: &str, seat: Seat, mv: Option<Value>) -> Event {
    Event {
        game: game.to_string(),
        seq: seq + 1,
        prev_hash: head.to_string(),
        player: seat,
        action: if mv.is_some() {
            Action::Move
        } else {
            Action::Resign
        },
        mv,
        protocol: None,
        rules: None,
        status: None,
        sig: None,
    }
}

/// Refuses a move the event around it would nest deeper than every reader accepts (the
/// event object is level 1, its move level 2): `bad_json`, as the event would be.
pub fn check_move(mv: &Value) -> Result<(), Refusal> {
    if 1 + depth(mv) > games::json::MAX_DEPTH {
        return Err(Refusal::with(
            Reason::BadJson,
            format!(
                "the move nests deeper than an event may: at most {} levels",
                games::json::MAX_DEPTH - 1
            ),
        ));
    }
    Ok(())
}

/// Refuses a drafted event over the size every reader accepts: `too_large`, as it would be.
pub fn check_size(raw: &[u8]) -> Result<(), Refusal> {
    if raw.len() > games::json::MAX_BYTES {
        return Err(Refusal::with(
            Reason::TooLarge,
            format!(
                "the event this move makes would be {} bytes, over {}",
                raw.len(),
                games::json::MAX_BYTES
            ),
        ));
    }
    Ok(())
}

/// How deep `v` nests: 0 for a scalar, 1 for an object or array of scalars.
fn depth(v: &Value) -> usize {
    let inner = match v {
        Value::Array(items) => items.iter().map(depth).max(),
        Value::Object(map) => map.values().map(depth).max(),
        _ => return 0,
    };
    1 + inner.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_signed_draft_verifies_under_the_derived_key() {
        let secret = b"0123456789abcdef-hub-secret";
        let ev = next_event(
            "g1",
            4,
            &"a".repeat(64),
            Seat::O,
            Some(serde_json::json!({"col": 3})),
        );
        let draft = finish(secret, "lobby", ev, true);
        let public = hub_public_key(secret, "lobby", "g1", Seat::O);
        let key = crypto::public_key(&public).expect("a derived key is a valid public key");
        let sig = draft.event.sig.as_deref().expect("signed");
        assert!(crypto::verify(&key, &draft.prepared.canonical, sig));
        // What is stored parses back to the same event.
        assert_eq!(Event::parse(&draft.raw).as_ref(), Ok(&draft.event));
        assert_eq!(draft.event.seq, 5);
    }

    #[test]
    fn an_unsigned_draft_has_no_sig() {
        let ev = next_event("g1", 1, &"b".repeat(64), Seat::X, None);
        let draft = finish(b"0123456789abcdef", "lobby", ev, false);
        assert_eq!(draft.event.sig, None);
        assert_eq!(draft.event.action, Action::Resign);
    }

    #[test]
    fn a_move_is_refused_where_its_event_would_be() {
        let mut mv = json!(1);
        for _ in 0..31 {
            mv = json!({ "a": mv });
        }
        assert_eq!(check_move(&mv), Ok(()));
        let deeper = json!({ "a": mv });
        let refused = check_move(&deeper).expect_err("33 levels with its event");
        assert_eq!(refused.reason, Reason::BadJson);
        // What every reader does with the event it would make.
        let ev = next_event("g1", 0, &"0".repeat(64), Seat::X, Some(deeper));
        let raw = finish(b"0123456789abcdef-hub-secret", "lobby", ev, true).raw;
        assert_eq!(
            Event::parse(&raw).map(|_| ()).map_err(|r| r.reason),
            Err(Reason::BadJson)
        );

        let long = json!({ "a": "x".repeat(4080) });
        let ev = next_event("g1", 0, &"0".repeat(64), Seat::X, Some(long));
        let raw = finish(b"0123456789abcdef-hub-secret", "lobby", ev, true).raw;
        assert_eq!(
            check_size(&raw).map_err(|r| r.reason),
            Err(Reason::TooLarge)
        );
        assert_eq!(
            Event::parse(&raw).map(|_| ()).map_err(|r| r.reason),
            Err(Reason::TooLarge)
        );
    }
}
