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
//! The agent also remembers what it saw and signed (in the seat's record, across restarts),
//! since a log that verifies on its own can still be an older one: the log must still hold
//! the newest head this agent verified, and the newest event it signed once the hub said it
//! accepted it. For seat X it checks that the game's protocol and rules are the ones the
//! person asked for at `game_new`, with the protocol's defaults filled in.
//!
//! Any difference is a [`Failure`]: the hub lied (a tampered event, a forged verdict, a
//! dropped event, a rolled-back log, a swapped game), and the tools report that to the
//! model instead of a board.
//!
//! What it deliberately does not do: fetch (the caller hands it the captures) or render
//! (the caller builds the seat's state from the verified chain).

use games::protocol::RuleError;
use games::verify::{GameChain, Verdict};
use games::{Action, Event, Registry, Seat};
use serde_json::{Map, Value};

use super::client::CaptureItem;
use super::store::{Mark, Signed};

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
    /// The protocol ref the person asked for (seat X), and the rules as sent.
    pub protocol: Option<&'a str>,
    pub rules: Option<&'a Map<String, Value>>,
    /// The newest event this agent signed, and the newest head it verified, earlier.
    pub signed: Option<&'a Signed>,
    pub verified: Option<&'a Mark>,
    /// Events this agent signed that the hub refused before its inbox.
    pub withdrawn: &'a [Mark],
}

/// An event the chain accepted.
struct Accepted {
    seq: u64,
    hash: String,
    player: Seat,
    action: Action,
}

/// Replays `items` and returns the verified chain (not started when the log is empty).
pub fn verify(
    registry: &Registry,
    expect: &Expect<'_>,
    items: &[CaptureItem],
) -> Result<GameChain, Failure> {
    let mut chain = GameChain::new(registry);
    let mut accepted = Vec::new();
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
            Ok(event) => {
                let mine = offer(&mut chain, &event, expect);
                if let Mine::Accepted(hash) = &mine {
                    accepted.push(Accepted {
                        seq: event.seq,
                        hash: hash.clone(),
                        player: event.player,
                        action: event.action,
                    });
                }
                mine
            }
        };
        match (item.verdict.as_str(), &mine) {
            ("accepted", Mine::Accepted(_)) | ("skipped", Mine::Skipped) => {}
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
    if let (Some(p), Some(rules)) = (chain.protocol(), chain.rules()) {
        check_asked(registry, expect, p.refs().first().copied(), Some(rules))?;
    }
    check_marks(&accepted, expect)?;
    Ok(chain)
}

/// Whether a game's protocol and rules (from a verified start, or the hub's view before the
/// start) are the ones this agent asked for. Only seat X asked: the guest did not choose.
pub fn check_asked(
    registry: &Registry,
    expect: &Expect<'_>,
    protocol: Option<&str>,
    rules: Option<&Map<String, Value>>,
) -> Result<(), Failure> {
    let Some(want) = expect.protocol.and_then(|p| registry.get(p)) else {
        return Ok(());
    };
    let name = want.refs().first().copied().unwrap_or_default();
    if protocol.and_then(|p| registry.get(p)).map(|p| p.id()) != Some(want.id()) {
        // The name the hub gave is not quoted: it may be any text.
        return Err(Failure(format!(
            "the game is not the {name} this agent's person asked for, but {}",
            protocol
                .and_then(|p| registry.get(p))
                .and_then(|p| p.refs().first().copied())
                .unwrap_or("a protocol this agent does not know")
        )));
    }
    // Both sides through the protocol's own reading, so that defaults filled in by the hub
    // compare equal to the rules the person left out, and `keys` and `inboxes` (the
    // start's, not the person's) are left aside.
    // A record made before the agent kept the rules it asked for has none to compare.
    let Some(asked) = expect.rules else {
        return Ok(());
    };
    let asked = want.rules(&plain_rules(Some(asked)));
    let got = want.rules(&plain_rules(rules));
    if asked.is_err() || asked != got {
        let shown = |r: &Result<Map<String, Value>, RuleError>| match r {
            Ok(r) => Value::Object(r.clone()).to_string(),
            Err(_) => "rules this protocol refuses".into(),
        };
        return Err(Failure(format!(
            "the game's rules are {}, not the {} this agent's person asked for",
            shown(&got),
            shown(&asked)
        )));
    }
    Ok(())
}

/// The rules without the start's own fields.
fn plain_rules(rules: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut rules = rules.cloned().unwrap_or_default();
    rules.remove("keys");
    rules.remove("inboxes");
    rules
}

/// Whether the log still holds what this agent verified and signed before. The chain is
/// hash-linked, so holding the newest verified head holds every event before it.
fn check_marks(accepted: &[Accepted], expect: &Expect<'_>) -> Result<(), Failure> {
    let at = |seq: u64| accepted.iter().find(|a| a.seq == seq);
    if let Some(v) = expect.verified {
        match at(v.seq) {
            None => {
                return Err(Failure(format!(
                    "the log ends before seq {}, which this agent verified earlier: the hub rolled the game back",
                    v.seq
                )))
            }
            Some(a) if a.hash != v.hash => {
                return Err(Failure(format!(
                    "the log holds another event at seq {} than the one this agent verified earlier",
                    v.seq
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(w) = expect
        .withdrawn
        .iter()
        .find(|w| at(w.seq).is_some_and(|a| a.hash == w.hash))
    {
        return Err(Failure(format!(
            "the log holds this agent's event at seq {}, which the hub refused before its inbox: \
the hub answered falsely",
            w.seq
        )));
    }
    if let Some(s) = expect.signed {
        match at(s.seq) {
            None if s.accepted => {
                return Err(Failure(format!(
                    "the hub answered that it accepted this agent's event at seq {}, but its log does not hold it",
                    s.seq
                )))
            }
            // Refused before the inbox, or not judged yet: the agent may post it again.
            None => {}
            Some(a) if a.hash == s.hash => {}
            // The one event that may take a seat's turn from it: the opponent resigned
            // first, and the referee rejected this agent's event as stale.
            Some(a) if !s.accepted && a.action == Action::Resign && a.player != expect.seat => {}
            Some(_) => {
                return Err(Failure(format!(
                    "the log holds another event at seq {} than the one this agent signed",
                    s.seq
                )))
            }
        }
    }
    Ok(())
}

enum Mine {
    Accepted(String),
    Rejected(String),
    Skipped,
}

impl Mine {
    fn name(&self) -> &str {
        match self {
            Mine::Accepted(_) => "accepted",
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
        Verdict::Accepted { hash } => Mine::Accepted(hash),
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
            protocol: None,
            rules: None,
            signed: None,
            verified: None,
            withdrawn: &[],
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

    /// The game of [`game`] after its move, and the marks an agent would keep of it.
    fn marks(items: &[CaptureItem]) -> (Mark, Mark) {
        let hash = |i: usize| {
            let raw = items[i].event.to_string();
            games::canonical::hash_hex(&Event::parse(raw.as_bytes()).expect("an event"))
        };
        let start = Mark {
            seq: 0,
            hash: hash(0),
        };
        let mv = Mark {
            seq: 1,
            hash: hash(1),
        };
        (start, mv)
    }

    #[test]
    fn a_log_that_lost_what_this_agent_verified_or_signed_is_a_failure() {
        let (items, public) = game();
        let (start, mv) = marks(&items);
        let registry = Registry::builtin();
        // Rolled back: the log ends before the head verified earlier.
        let mut e = expect(&public);
        e.verified = Some(&mv);
        assert!(verify(&registry, &e, &items).is_ok());
        let err = verify(&registry, &e, &items[..1]).expect_err("rolled back");
        assert!(err.0.contains("rolled the game back"), "{err:?}");
        // Another event at a seq verified earlier.
        let other = Mark {
            seq: 1,
            hash: start.hash.clone(),
        };
        e.verified = Some(&other);
        let err = verify(&registry, &e, &items).expect_err("another event");
        assert!(err.0.contains("verified earlier"), "{err:?}");
        // An event answered accepted must be in the log; one not answered may be missing.
        let mut signed = Signed {
            seq: 1,
            hash: mv.hash.clone(),
            accepted: true,
            what: None,
        };
        let mut e = expect(&public);
        e.signed = Some(&signed);
        assert!(verify(&registry, &e, &items).is_ok());
        let err = verify(&registry, &e, &items[..1]).expect_err("accepted, then lost");
        assert!(err.0.contains("does not hold it"), "{err:?}");
        signed.accepted = false;
        let e = Expect {
            signed: Some(&signed),
            ..expect(&public)
        };
        assert!(verify(&registry, &e, &items[..1]).is_ok());
        let forked = Signed {
            seq: 1,
            hash: start.hash,
            accepted: false,
            what: None,
        };
        let e = Expect {
            signed: Some(&forked),
            ..expect(&public)
        };
        let err = verify(&registry, &e, &items).expect_err("another event where it signed");
        assert!(err.0.contains("than the one this agent signed"), "{err:?}");
        // An event the hub refused before its inbox must never show up in its log.
        let withdrawn = [mv.clone()];
        let e = Expect {
            withdrawn: &withdrawn,
            ..expect(&public)
        };
        let err = verify(&registry, &e, &items).expect_err("a withdrawn event in the log");
        assert!(err.0.contains("answered falsely"), "{err:?}");
        assert!(verify(&registry, &e, &items[..1]).is_ok());
    }

    #[test]
    fn a_game_other_than_the_one_asked_for_is_a_failure() {
        let registry = Registry::builtin();
        let (items, public) = game();
        let mut e = expect(&public);
        e.seat = Seat::X;
        e.public_key = "";
        let x = crypto::public_key_hex(&key(1).verifying_key());
        e.public_key = &x;
        e.protocol = Some("pipehub:tic-tac-toe");
        assert!(
            verify(&registry, &e, &items).is_ok(),
            "defaults filled in compare equal"
        );
        // No rules given: kept as an empty map, the protocol's defaults.
        let none_given = Map::new();
        e.rules = Some(&none_given);
        assert!(
            verify(&registry, &e, &items).is_ok(),
            "an empty map is the defaults"
        );
        let defaults = json!({"rows": 3, "cols": 3, "winLength": 3});
        let given = defaults.as_object().cloned();
        e.rules = given.as_ref();
        assert!(verify(&registry, &e, &items).is_ok());
        let bigger = json!({"rows": 4}).as_object().cloned();
        e.rules = bigger.as_ref();
        let err = verify(&registry, &e, &items).expect_err("other rules");
        assert!(err.0.contains("rules"), "{err:?}");
        e.rules = None;
        e.protocol = Some("pipehub:connect-four");
        let err = verify(&registry, &e, &items).expect_err("another protocol");
        assert!(err.0.contains("pipehub:connect-four"), "{err:?}");
        // Before the start, the hub's view is held to the same.
        let view = json!({"rows": 3});
        assert!(check_asked(&registry, &e, Some("pipehub:tic-tac-toe"), view.as_object()).is_err());
    }
}
