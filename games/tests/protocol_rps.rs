//! Reducer table for rock-paper-scissors, and what its custody steps tell a custodian.
//! Every move of every case also checks `outcome_after` (the result a status claim is
//! checked against) against the same move applied to a whole copy of the board.
//!
//! Moves are written as X commits, O commits, X reveals, O reveals per round; the chain's
//! parity gives move i (0-based) to X when i is even. The expectation is the outcome after
//! the last move, or the detail with which the last move is refused.

use games::crypto::rps_commit;
use games::event::Seat;
use games::protocol::{Board, CustodyStep, GameResult, Registry, WinBy};
use serde_json::{json, Value};

const RPS: &str = "pipehub:rock-paper-scissors";
const NX: &str = "00112233445566778899aabbccddeeff";
const NO: &str = "0123456789abcdef";

#[derive(Debug, PartialEq)]
enum Expect {
    InProgress { scores: (u64, u64), round: u64 },
    Win(Seat),
    Refused(&'static str),
}

fn board(rules: Value) -> Box<dyn Board> {
    let registry = Registry::builtin();
    let protocol = registry.get(RPS).expect("built-in protocol");
    let rules = protocol
        .rules(rules.as_object().expect("rules object"))
        .expect("valid rules");
    protocol.new_board(&rules)
}

fn check(rules: Value, moves: &[Value], expected: Expect) {
    let mut board = board(rules);
    for (i, mv) in moves.iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        let legal = board.legal(seat, mv);
        // The result a reader checks a status claim against, without the history of
        // rounds, is the result of the move on a whole copy.
        let mut copy = board.clone();
        let on_copy = copy.apply(seat, mv).map(|()| copy.outcome());
        assert_eq!(board.outcome_after(seat, mv), on_copy, "move {i} {mv}");
        let applied = board.apply(seat, mv);
        assert_eq!(legal, applied, "legal and apply disagree on move {i} {mv}");
        if let Err(e) = applied {
            assert_eq!(i, moves.len() - 1, "move {i} {mv} refused early: {e}");
            assert_eq!(Expect::Refused(e.detail()), expected, "{moves:?}");
            return;
        }
    }
    let got = match board.outcome() {
        r if r == GameResult::IN_PROGRESS => {
            let view = serde_json::to_value(board.view(games::Viewer::Spectator)).expect("json");
            Expect::InProgress {
                scores: (
                    view["scores"]["X"].as_u64().expect("score"),
                    view["scores"]["O"].as_u64().expect("score"),
                ),
                round: view["round"].as_u64().expect("round"),
            }
        }
        r => {
            assert_eq!(r.by, Some(WinBy::Score));
            Expect::Win(r.winner.expect("a win has a winner"))
        }
    };
    assert_eq!(got, expected, "{moves:?}");
}

fn commit(choice: &str, nonce: &str) -> Value {
    json!({"commit": rps_commit(choice, nonce)})
}

fn reveal(choice: &str, nonce: &str) -> Value {
    json!({"choice": choice, "nonce": nonce})
}

/// The four moves of one round.
fn round(x: &str, o: &str) -> Vec<Value> {
    vec![commit(x, NX), commit(o, NO), reveal(x, NX), reveal(o, NO)]
}

fn rounds(list: &[(&str, &str)]) -> Vec<Value> {
    list.iter().flat_map(|(x, o)| round(x, o)).collect()
}

fn then(mut moves: Vec<Value>, more: &[Value]) -> Vec<Value> {
    moves.extend_from_slice(more);
    moves
}

#[test]
fn rock_paper_scissors_reducer() {
    use Expect::*;
    let d = || json!({});
    let progress = |x, o, round| InProgress {
        scores: (x, o),
        round,
    };
    check(d(), &[], progress(0, 0, 1));
    check(
        d(),
        &rounds(&[("rock", "scissors"), ("paper", "rock")]),
        Win(Seat::X),
    );
    check(
        d(),
        &rounds(&[
            ("rock", "paper"),
            ("rock", "scissors"),
            ("scissors", "rock"),
        ]),
        Win(Seat::O),
    );
    check(d(), &rounds(&[("rock", "scissors")]), progress(1, 0, 2));
    // A tie is replayed: no score, next round.
    check(
        d(),
        &rounds(&[("rock", "rock"), ("paper", "paper")]),
        progress(0, 0, 3),
    );
    check(
        json!({"bestOf": 1}),
        &rounds(&[("rock", "paper")]),
        Win(Seat::O),
    );
    check(
        json!({"bestOf": 5}),
        &rounds(&[("rock", "scissors"), ("rock", "scissors")]),
        progress(2, 0, 3),
    );
    check(
        json!({"bestOf": 5}),
        &rounds(&[("rock", "scissors"); 3]),
        Win(Seat::X),
    );
    // Phase: a reveal before both commits, a commit when a reveal is due.
    check(d(), &[reveal("rock", NX)], Refused("phase"));
    check(
        d(),
        &[commit("rock", NX), reveal("paper", NO)],
        Refused("phase"),
    );
    check(
        d(),
        &[commit("rock", NX), commit("paper", NO), commit("rock", NX)],
        Refused("phase"),
    );
    check(
        d(),
        &then(round("rock", "paper")[..3].to_vec(), &[commit("rock", NO)]),
        Refused("phase"),
    );
    // The commit must match.
    check(
        d(),
        &[commit("rock", NX), commit("paper", NO), reveal("paper", NX)],
        Refused("commit_mismatch"),
    );
    let other_nonce = "00112233445566778899aabbccddeef0";
    check(
        d(),
        &[
            commit("rock", NX),
            commit("paper", NO),
            reveal("rock", other_nonce),
        ],
        Refused("commit_mismatch"),
    );
    check(
        d(),
        &then(round("rock", "paper")[..3].to_vec(), &[reveal("rock", NO)]),
        Refused("commit_mismatch"),
    );
    // Shape before phase.
    check(d(), &[reveal("lizard", NX)], Refused("bad_move"));
    check(
        d(),
        &[
            commit("rock", NX),
            commit("paper", NO),
            json!({"commit": "ab"}),
        ],
        Refused("bad_move"),
    );
    let upper = rps_commit("rock", NX).to_uppercase();
    for bad in [
        json!({"commit": upper}),
        json!({"commit": &rps_commit("rock", NX)[..63]}),
        json!({"commit": rps_commit("rock", NX), "x": 1}),
        json!({"commit": 5}),
        json!({"choice": "rock"}),
        json!({"choice": "rock", "nonce": "0123456789abcde"}),
        json!({"choice": "rock", "nonce": "0".repeat(65)}),
        json!({"choice": "rock", "nonce": "0123456789ABCDEF"}),
        json!({"choice": "Rock", "nonce": NO}),
        json!({"choice": "rock", "nonce": NO, "commit": rps_commit("rock", NO)}),
        json!("rock"),
        json!({}),
    ] {
        check(d(), &[bad], Refused("bad_move"));
    }
    // A 64-character nonce is fine, and so is an odd length.
    let long = "a".repeat(64);
    check(
        d(),
        &[
            commit("rock", &long),
            commit("paper", "abcdefabcdefabcde"),
            reveal("rock", &long),
        ],
        progress(0, 0, 1),
    );
    let done = rounds(&[("rock", "scissors"), ("rock", "scissors")]);
    check(
        d(),
        &then(done, &[commit("rock", NX)]),
        Refused("game_over"),
    );
}

#[test]
fn best_of_must_be_odd_and_in_range() {
    let registry = Registry::builtin();
    let protocol = registry.get(RPS).expect("built-in protocol");
    let cases = [
        (json!({}), Ok(json!({"bestOf": 3}))),
        (json!({"bestOf": 99}), Ok(json!({"bestOf": 99}))),
        (json!({"bestOf": 1}), Ok(json!({"bestOf": 1}))),
        (json!({"bestOf": 2}), Err("bestOf:odd")),
        (json!({"bestOf": 101}), Err("bestOf:range")),
        (json!({"bestOf": 0}), Err("bestOf:range")),
        (json!({"bestOf": -1}), Err("bestOf:range")),
        (json!({"rows": 3}), Err("rows:unknown")),
    ];
    for (given, expected) in cases {
        let got = protocol
            .rules(given.as_object().expect("object"))
            .map(Value::Object)
            .map_err(|e| e.to_string());
        assert_eq!(got, expected.map_err(str::to_string), "{given}");
    }
}

#[test]
fn custody_names_the_commit_and_its_seq() {
    let mut b = board(json!({}));
    let steps = |b: &dyn Board| (b.custody(Seat::X), b.custody(Seat::O));
    let reveal_of = |choice, nonce, commit_seq| CustodyStep::Reveal {
        commit: rps_commit(choice, nonce),
        commit_seq,
    };
    assert_eq!(steps(&*b), (Some(CustodyStep::Commit), None));
    let moves = rounds(&[("rock", "rock"), ("paper", "rock")]);
    let expected = [
        (None, Some(CustodyStep::Commit)),
        (Some(reveal_of("rock", NX, 1)), None),
        (None, Some(reveal_of("rock", NO, 2))),
        (Some(CustodyStep::Commit), None),
        (None, Some(CustodyStep::Commit)),
        (Some(reveal_of("paper", NX, 5)), None),
        (None, Some(reveal_of("rock", NO, 6))),
        (Some(CustodyStep::Commit), None),
    ];
    for (i, (mv, want)) in moves.iter().zip(expected).enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        b.apply(seat, mv).expect("legal");
        assert_eq!(steps(&*b), want, "after move {}", i + 1);
    }
}

#[test]
fn a_sealed_commit_is_named_until_its_reveal_and_never_after_the_end() {
    let mut b = board(json!({}));
    let sealed = |b: &dyn Board| (b.sealed_commit(Seat::X), b.sealed_commit(Seat::O));
    let of = |choice, nonce, seq| Some((rps_commit(choice, nonce), seq));
    assert_eq!(sealed(&*b), (None, None));
    let moves = rounds(&[("rock", "paper")]);
    let expected = [
        (of("rock", NX, 1), None),
        (of("rock", NX, 1), of("paper", NO, 2)),
        (None, of("paper", NO, 2)),
        (None, None),
    ];
    for (i, (mv, want)) in moves.iter().zip(expected).enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        b.apply(seat, mv).expect("legal");
        assert_eq!(sealed(&*b), want, "after move {}", i + 1);
    }
    b.apply(Seat::X, &commit("paper", NX)).expect("legal");
    assert_eq!(sealed(&*b).0, of("paper", NX, 5));
    b.resign(Seat::O);
    assert_eq!(sealed(&*b), (None, None), "the game is over");
}

#[test]
fn renders_a_score_line() {
    let mut b = board(json!({}));
    for (i, mv) in rounds(&[("rock", "scissors")]).iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        b.apply(seat, mv).expect("legal");
    }
    b.apply(Seat::X, &commit("paper", NX)).expect("legal");
    assert_eq!(
        b.render(games::Viewer::Spectator),
        "round 2 (first to 2): X 1 - O 0; last X rock O scissors; O to commit"
    );
    let view = serde_json::to_value(b.view(games::Viewer::Seat(Seat::O))).expect("json");
    assert_eq!(view["committed"], json!({"X": true, "O": false}));
    assert_eq!(view["revealed"], json!({"X": null, "O": null}));
    assert_eq!(
        view["history"],
        json!([{"X": "rock", "O": "scissors", "winner": "X"}])
    );
}

#[test]
fn a_finished_game_names_the_rounds_it_played_not_one_more() {
    let mut b = board(json!({}));
    let played = rounds(&[("rock", "scissors"), ("rock", "rock"), ("paper", "rock")]);
    for (i, mv) in played.iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        b.apply(seat, mv).expect("legal");
    }
    assert_eq!(
        b.render(games::Viewer::Spectator),
        "3 rounds played (first to 2): X 2 - O 0; last X paper O rock; X wins"
    );
    let mut one = board(json!({"bestOf": 1}));
    for (i, mv) in rounds(&[("scissors", "paper")]).iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        one.apply(seat, mv).expect("legal");
    }
    assert_eq!(
        one.render(games::Viewer::Spectator),
        "1 round played (first to 1): X 1 - O 0; last X scissors O paper; X wins"
    );
}

#[test]
fn a_custodian_adds_the_own_pending_choice() {
    let mut b = board(json!({}));
    b.apply(Seat::X, &commit("paper", NX)).expect("legal");
    let own = b
        .view(games::Viewer::Seat(Seat::X))
        .with_pending_choice("paper");
    let own = serde_json::to_value(own).expect("json");
    assert_eq!(own["pendingChoice"], "paper");
    let other = serde_json::to_value(b.view(games::Viewer::Seat(Seat::O))).expect("json");
    assert!(other.get("pendingChoice").is_none());
}
