//! Independent verification of a game the agent plays, before anything of it is shown.
//!
//! The hub is a referee the agent does not have to trust. For every board it shows, the
//! agent fetches all of the game's captures and replays them through the same verifier the
//! hub uses ([`games::verify::GameChain`]), in inbox order, and compares its own verdict
//! with the hub's for each capture: an event the hub calls accepted must be accepted here
//! (signature, chain, turn, move), a rejection must be a rejection for the same reason.
//! It also checks that the genesis is the game this seat joined: the seat's own public key
//! at its seat in `rules.keys`, and this inbox in `rules.inboxes`, so a chain signed for
//! another pair or replayed from another inbox is not taken for ours.
//!
//! Any difference is a [`Failure`]: the hub lied (a tampered event, a forged verdict, a
//! dropped event), and the tools report that to the model instead of a board.
//!
//! What it deliberately does not do: fetch (the caller hands it the captures) or render
//! (the caller builds the seat's state from the verified chain).

use games::verify::{GameChain, Verdict};
use games::{Event, Registry, Seat};
use serde_json::Value;

use super::client::CaptureItem;

/// Why a game's log did not verify. The text names the capture and the disagreement; it
/// never quotes an event (whose strings an opponent may have chosen).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

/// What the agent expects of its own game.
pub struct Expect<'a> {
    pub inbox: &'a str,
    pub game: &'a str,
    pub seat: Seat,
    /// This seat's public key, 64 hex.
    pub public_key: &'a str,
}

/// Replays `items` and returns the verified chain (not started when the log is empty).
pub fn verify(
    registry: &Registry,
    expect: &Expect<'_>,
    items: &[CaptureItem],
) -> Result<GameChain, Failure> {
    let mut chain = GameChain::new(registry);
    for (i, item) in items.iter().enumerate() {
        let at = item.capture.clone().unwrap_or_else(|| format!("#{i}"));
        let fail = |what: String| Failure(format!("capture {at}: {what}"));
        let raw = serde_json::to_vec(&item.event).unwrap_or_default();
        let mine = match Event::parse(&raw) {
            Err(refusal) => Mine::Rejected(refusal.reason.code().to_string()),
            Ok(event) if event.game != expect.game => {
                return Err(fail(
                    "an event of another game in this game's listing".into(),
                ));
            }
            Ok(event) => offer(&mut chain, &event, expect),
        };
        match (item.verdict.as_str(), &mine) {
            ("accepted", Mine::Accepted) | ("skipped", Mine::Skipped) => {}
            // The hub had no verdict yet: ours stands.
            ("pending", _) => {}
            ("rejected", Mine::Rejected(reason)) => {
                if item.reason.as_deref().is_some_and(|r| r != reason) {
                    return Err(fail(format!(
                        "the hub rejected it as {}, this agent as {reason}",
                        item.reason.as_deref().unwrap_or("?")
                    )));
                }
            }
            (hub, mine) => {
                return Err(fail(format!(
                    "the hub's verdict is {hub}, this agent's is {}",
                    mine.name()
                )));
            }
        }
    }
    check_genesis(&chain, expect)?;
    Ok(chain)
}

enum Mine {
    Accepted,
    Rejected(String),
    Skipped,
}

impl Mine {
    fn name(&self) -> &str {
        match self {
            Mine::Accepted => "accepted",
            Mine::Rejected(_) => "rejected",
            Mine::Skipped => "skipped",
        }
    }
}

/// One event through the chain, with the hub's extra rule for starts: `rules.inboxes`, when
/// present, must name this inbox (the chain checks only its shape).
fn offer(chain: &mut GameChain, event: &Event, expect: &Expect<'_>) -> Mine {
    let foreign = !chain.is_started()
        && event
            .rules
            .as_ref()
            .and_then(|r| r.get("inboxes"))
            .and_then(Value::as_array)
            .is_some_and(|a| !a.iter().any(|i| i.as_str() == Some(expect.inbox)));
    if foreign && event.action == games::Action::Start {
        return Mine::Rejected("bad_rules".into());
    }
    match chain.offer(event) {
        Verdict::Accepted { .. } => Mine::Accepted,
        Verdict::Rejected(r) => Mine::Rejected(r.reason.code().to_string()),
        Verdict::Skipped => Mine::Skipped,
    }
}

fn check_genesis(chain: &GameChain, expect: &Expect<'_>) -> Result<(), Failure> {
    if chain.is_skipped() {
        return Err(Failure(
            "the game's start names a protocol this agent does not know".into(),
        ));
    }
    if !chain.is_started() {
        return Ok(());
    }
    let Some(keys) = chain.keys() else {
        return Err(Failure(
            "the game is not signed, but this seat registered a key".into(),
        ));
    };
    if keys.hex(expect.seat) != expect.public_key {
        return Err(Failure(format!(
            "the start does not name this seat's key for {}",
            expect.seat
        )));
    }
    let inboxes = chain.inboxes().unwrap_or_default();
    if !inboxes.iter().any(|i| i == expect.inbox) {
        return Err(Failure(
            "the start does not name this inbox in rules.inboxes".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use games::crypto::{self, SecretKey};
    use serde_json::json;

    fn key(b: u8) -> SecretKey {
        SecretKey::from_bytes(&[b; 32])
    }

    fn signed(mut e: Value, k: &SecretKey) -> Value {
        let event = Event::parse(e.to_string().as_bytes()).expect("an event");
        let bytes = games::canonical::canonical_bytes(&event);
        e["sig"] = json!(crypto::sign(k, &bytes));
        e
    }

    fn game() -> (Vec<CaptureItem>, String) {
        let (x, o) = (key(1), key(2));
        let keys = json!({"X": crypto::public_key_hex(&x.verifying_key()),
                          "O": crypto::public_key_hex(&o.verifying_key())});
        let start = signed(
            json!({"game": "g", "seq": 0, "prevHash": "", "player": "X", "action": "start",
                   "protocol": "pipehub:tic-tac-toe", "rules": {"keys": keys, "inboxes": ["lobby"]}}),
            &x,
        );
        let head =
            games::canonical::hash_hex(&Event::parse(start.to_string().as_bytes()).expect("ok"));
        let mv = signed(
            json!({"game": "g", "seq": 1, "prevHash": head, "player": "X", "action": "move",
                   "move": {"row": 1, "col": 1}}),
            &x,
        );
        let item = |e: Value, v: &str| CaptureItem {
            capture: Some("0:1".into()),
            event: e,
            verdict: v.into(),
            reason: None,
        };
        (
            vec![item(start, "accepted"), item(mv, "accepted")],
            crypto::public_key_hex(&o.verifying_key()),
        )
    }

    fn expect(public: &str) -> Expect<'_> {
        Expect {
            inbox: "lobby",
            game: "g",
            seat: Seat::O,
            public_key: public,
        }
    }

    #[test]
    fn an_honest_log_verifies() {
        let (items, public) = game();
        let chain = verify(&Registry::builtin(), &expect(&public), &items).expect("verifies");
        assert_eq!(chain.seq(), Some(1));
    }

    #[test]
    fn a_tampered_event_or_a_forged_verdict_is_a_failure() {
        let (mut items, public) = game();
        items[1].event["move"]["row"] = json!(0);
        assert!(verify(&Registry::builtin(), &expect(&public), &items).is_err());
        let (mut items, public) = game();
        items[1].verdict = "rejected".into();
        assert!(verify(&Registry::builtin(), &expect(&public), &items).is_err());
    }

    #[test]
    fn a_start_without_this_seats_key_or_inbox_is_a_failure() {
        let (items, _) = game();
        let other = crypto::public_key_hex(&key(3).verifying_key());
        assert!(verify(&Registry::builtin(), &expect(&other), &items).is_err());
        let (items, public) = game();
        let mut e = expect(&public);
        e.inbox = "elsewhere";
        assert!(verify(&Registry::builtin(), &e, &items).is_err());
    }
}
