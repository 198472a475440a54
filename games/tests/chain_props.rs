//! Properties of canonical bytes and of whole chains.
//!
//! 1. The fast canonical writer equals the reference RFC 8785 implementation byte for
//!    byte, on random events with random strings (non-ASCII, control characters, keys that
//!    sort differently in UTF-16 and in code points) and random nested move/rules objects.
//! 2. Random legal games of every protocol verify in strict mode, and every single-event
//!    edit of the exported log is refused: a reorder of two neighbours, a change of any
//!    field, a deletion. Two edits are undetectable by design and are left out: deleting
//!    the *last* event (a log may end anywhere) and, in an unsigned game, changing the last
//!    event or any `sig` (nothing later commits to it; a sig is outside the hash).

mod verify_support;

use games::canonical::{canonical_bytes, reference_bytes};
use games::report::{verify_log, EntryVerdict, Mode};
use games::verify::{GameChain, Verdict};
use games::{Action, Event, Registry, Seat, Status};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use verify_support::{commit, lines, reveal, Writer};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,6}",
        any::<String>(),
        "[\u{0}-\u{1f}\"\\\\\u{7f}\u{80}\u{2028}\u{e000}\u{fb33}\u{ffff}\u{10000}\u{1f600}a]{0,8}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            object(inner).prop_map(Value::Object),
        ]
    })
}

fn object(inner: impl Strategy<Value = Value>) -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::btree_map(text(), inner, 0..5).prop_map(|m| m.into_iter().collect())
}

fn event() -> impl Strategy<Value = Event> {
    (
        (
            text(),
            0u64..(1 << 53),
            prop_oneof![Just(String::new()), "[0-9a-f]{64}"],
        ),
        (any::<bool>(), 0u8..3, proptest::option::of(json_value())),
        (
            proptest::option::of(text()),
            proptest::option::of(object(json_value())),
        ),
        (
            proptest::option::of(0u8..3),
            proptest::option::of("[0-9a-f]{128}"),
        ),
    )
        .prop_map(
            |((game, seq, prev_hash), (x, action, mv), (protocol, rules), (status, sig))| Event {
                game,
                seq,
                prev_hash,
                player: if x { Seat::X } else { Seat::O },
                action: [Action::Start, Action::Move, Action::Resign][usize::from(action)],
                mv,
                protocol,
                rules,
                status: status
                    .map(|s| [Status::InProgress, Status::Win, Status::Draw][usize::from(s)]),
                sig,
            },
        )
}

/// Every move worth trying in a protocol (the board says which are legal).
fn candidates(reference: &str) -> Vec<Value> {
    match reference {
        "pipehub:connect-four" => (0..7).map(|c| json!({"col": c})).collect(),
        "pipehub:rock-paper-scissors" => ["rock", "paper", "scissors"]
            .into_iter()
            .flat_map(|c| [Seat::X, Seat::O].map(|s| [commit(c, s), reveal(c, s)]))
            .flatten()
            .collect(),
        _ => (0..3)
            .flat_map(|r| (0..3).map(move |c| json!({"row": r, "col": c})))
            .collect(),
    }
}

/// A random legal game: `picks` choose among the legal moves; `resign` may end it early.
fn random_game(
    reference: &str,
    signed: bool,
    picks: &[usize],
    resign: Option<usize>,
) -> Vec<Event> {
    let registry = Registry::builtin();
    let mut w = if signed {
        Writer::signed("p", "prop")
    } else {
        Writer::unsigned("p")
    };
    let mut chain = GameChain::new(&registry);
    let mut log = vec![w.start(Some(reference), json!({}))];
    assert!(matches!(chain.offer(&log[0]), Verdict::Accepted { .. }));
    for (turn, pick) in picks.iter().enumerate() {
        let Some(board) = chain.board() else { break };
        if chain.result().is_some_and(|r| r.is_over()) {
            break;
        }
        let seat = Seat::to_move_at(turn as u64 + 1);
        let e = if resign == Some(turn) {
            w.resign(if pick % 2 == 0 { Seat::X } else { Seat::O })
        } else {
            let legal: Vec<Value> = candidates(reference)
                .into_iter()
                .filter(|m| board.legal(seat, m).is_ok())
                .collect();
            if legal.is_empty() {
                break;
            }
            w.play(legal[pick % legal.len()].clone())
        };
        assert!(matches!(chain.offer(&e), Verdict::Accepted { .. }), "{e:?}");
        log.push(e);
    }
    log
}

fn strict_ok(events: &[Event]) -> bool {
    let report = verify_log(lines(events).as_bytes(), Mode::Strict, &Registry::builtin());
    report.iter().all(|e| e.verdict == EntryVerdict::Ok)
}

/// Every single-field edit of one event; each changes its canonical bytes or its sig.
fn edits(e: &Event) -> Vec<(&'static str, Event)> {
    let mut out = Vec::new();
    let mut push = |name, f: &dyn Fn(&mut Event)| {
        let mut edited = e.clone();
        f(&mut edited);
        out.push((name, edited));
    };
    push("game", &|e| e.game.push('x'));
    push("seq", &|e| e.seq += 1);
    push("prevHash", &|e| {
        e.prev_hash = if e.prev_hash.starts_with('0') {
            "1"
        } else {
            "0"
        }
        .repeat(64)
    });
    push("player", &|e| e.player = e.player.other());
    push("action", &|e| {
        (e.action, e.mv) = match e.action {
            Action::Resign => (Action::Move, Some(json!({"col": 0}))),
            _ => (Action::Resign, None),
        }
    });
    push("move", &|e| e.mv = Some(json!({"edited": true})));
    push("status", &|e| {
        e.status = match e.status {
            None => Some(Status::Draw),
            Some(_) => None,
        }
    });
    push("sig", &|e| e.sig = Some("ab".repeat(64)));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_canonical_equals_reference(e in event()) {
        prop_assert_eq!(canonical_bytes(&e), reference_bytes(&e));
        let line = e.to_json();
        let back: Value = serde_json::from_str(&line).unwrap();
        prop_assert_eq!(back, e.to_value());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn legal_games_verify_and_every_edit_is_refused(
        proto in 0usize..3,
        signed in any::<bool>(),
        picks in proptest::collection::vec(0usize..64, 1..14),
        resign in proptest::option::of(0usize..14),
    ) {
        let reference =
            ["pipehub:tic-tac-toe", "pipehub:connect-four", "pipehub:rock-paper-scissors"][proto];
        let log = random_game(reference, signed, &picks, resign);
        prop_assert!(strict_ok(&log));
        let last = log.len() - 1;
        for i in 0..log.len() {
            if i < last {
                let mut deleted = log.clone();
                deleted.remove(i);
                prop_assert!(!strict_ok(&deleted), "deleting event {} went unnoticed", i);
                let mut swapped = log.clone();
                swapped.swap(i, i + 1);
                prop_assert!(!strict_ok(&swapped), "swapping {} and {} went unnoticed", i, i + 1);
            }
            for (field, edited) in edits(&log[i]) {
                if !signed && (i == last || field == "sig") {
                    continue;
                }
                let mut changed = log.clone();
                changed[i] = edited;
                prop_assert!(!strict_ok(&changed), "editing {} of event {} went unnoticed", field, i);
            }
        }
    }
}
