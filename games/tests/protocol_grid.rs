//! Reducer tables for the k-in-a-row games: tic-tac-toe and connect-four.
//!
//! Each case is a ref, rules, and the moves in order (X first, then alternating, as the
//! chain's parity demands); the expectation is the outcome after the last move, or the
//! detail with which the last move is refused (every earlier move must be accepted).

use games::event::Seat;
use games::protocol::{Board, GameResult, Registry, Viewer, WinBy};
use serde_json::{json, Value};

#[derive(Debug, PartialEq)]
enum Expect {
    InProgress,
    Draw,
    Win(Seat),
    Refused(&'static str),
}

fn check(r: &str, rules: Value, moves: &[Value], expected: Expect) {
    let registry = Registry::builtin();
    let protocol = registry.get(r).expect("built-in protocol");
    let rules = protocol
        .rules(rules.as_object().expect("rules object"))
        .expect("valid rules");
    let mut board = protocol.new_board(&rules);
    let mut got = None;
    for (i, mv) in moves.iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        let legal = board.legal(seat, mv);
        let applied = board.apply(seat, mv);
        assert_eq!(legal, applied, "legal and apply disagree on move {i} {mv}");
        if let Err(e) = applied {
            assert_eq!(i, moves.len() - 1, "move {i} {mv} refused early: {e}");
            got = Some(Expect::Refused(e.detail()));
        }
    }
    let got = got.unwrap_or_else(|| match board.outcome() {
        r if r == GameResult::IN_PROGRESS => Expect::InProgress,
        r if r == GameResult::DRAW => Expect::Draw,
        r => {
            assert_eq!(r.by, Some(WinBy::Line));
            Expect::Win(r.winner.expect("a win has a winner"))
        }
    });
    assert_eq!(got, expected, "{r} {moves:?}");
}

fn rc(r: i64, c: i64) -> Value {
    json!({"row": r, "col": c})
}

fn col(c: i64) -> Value {
    json!({"col": c})
}

const TTT: &str = "pipehub:tic-tac-toe";
const C4: &str = "pipehub:connect-four";

#[test]
fn tic_tac_toe_reducer() {
    use Expect::*;
    let d = || json!({});
    check(
        TTT,
        d(),
        &[rc(0, 0), rc(1, 0), rc(0, 1), rc(1, 1), rc(0, 2)],
        Win(Seat::X),
    );
    check(
        TTT,
        d(),
        &[rc(0, 0), rc(0, 2), rc(1, 1), rc(1, 2), rc(2, 0), rc(2, 2)],
        Win(Seat::O),
    );
    check(
        TTT,
        d(),
        &[rc(0, 0), rc(0, 1), rc(1, 1), rc(0, 2), rc(2, 2)],
        Win(Seat::X),
    );
    check(
        TTT,
        d(),
        &[rc(0, 2), rc(0, 0), rc(1, 1), rc(0, 1), rc(2, 0)],
        Win(Seat::X),
    );
    check(TTT, d(), &[rc(0, 0), rc(0, 1)], InProgress);
    let draw = [
        rc(0, 0),
        rc(0, 1),
        rc(0, 2),
        rc(1, 1),
        rc(1, 0),
        rc(1, 2),
        rc(2, 1),
        rc(2, 0),
        rc(2, 2),
    ];
    check(TTT, d(), &draw, Draw);
    // Five in a row with winLength 3: the gap is filled last, so only "or more" wins.
    let five = [
        rc(0, 0),
        rc(1, 0),
        rc(0, 1),
        rc(1, 1),
        rc(0, 3),
        rc(1, 3),
        rc(0, 4),
        rc(1, 4),
        rc(0, 2),
    ];
    check(
        TTT,
        json!({"rows": 2, "cols": 5, "winLength": 3}),
        &five,
        Win(Seat::X),
    );
    check(
        TTT,
        json!({"rows": 1, "cols": 1, "winLength": 1}),
        &[rc(0, 0)],
        Win(Seat::X),
    );
    check(TTT, d(), &[rc(0, 0), rc(0, 0)], Refused("occupied"));
    check(TTT, d(), &[rc(3, 0)], Refused("out_of_bounds"));
    check(TTT, d(), &[rc(0, -1)], Refused("out_of_bounds"));
    check(
        TTT,
        d(),
        &[json!({"row": u64::MAX, "col": 0})],
        Refused("out_of_bounds"),
    );
    check(TTT, d(), &[json!({"row": 0})], Refused("bad_move"));
    check(
        TTT,
        d(),
        &[json!({"row": 0, "col": 0, "x": 1})],
        Refused("bad_move"),
    );
    check(
        TTT,
        d(),
        &[json!({"row": "0", "col": 0})],
        Refused("bad_move"),
    );
    check(
        TTT,
        d(),
        &[json!({"row": 9, "col": true})],
        Refused("bad_move"),
    );
    check(TTT, d(), &[json!([0, 0])], Refused("bad_move"));
    check(TTT, d(), &[json!({"col": 0})], Refused("bad_move"));
    let mut after = draw.to_vec();
    after.push(rc(0, 0));
    check(TTT, d(), &after, Refused("game_over"));
}

#[test]
fn connect_four_reducer() {
    use Expect::*;
    let d = || json!({});
    check(
        C4,
        d(),
        &[col(0), col(1), col(0), col(1), col(0), col(1), col(0)],
        Win(Seat::X),
    );
    check(
        C4,
        d(),
        &[col(0), col(0), col(1), col(1), col(2), col(2), col(3)],
        Win(Seat::X),
    );
    check(
        C4,
        d(),
        &[
            col(6),
            col(0),
            col(6),
            col(1),
            col(5),
            col(2),
            col(5),
            col(3),
        ],
        Win(Seat::O),
    );
    let small = || json!({"rows": 3, "cols": 3, "winLength": 3});
    check(
        C4,
        small(),
        &[col(0), col(1), col(1), col(2), col(2), col(0), col(2)],
        Win(Seat::X),
    );
    check(
        C4,
        small(),
        &[col(2), col(1), col(1), col(0), col(0), col(2), col(0)],
        Win(Seat::X),
    );
    let draw = [col(0), col(1), col(2), col(0), col(1), col(2)];
    check(
        C4,
        json!({"rows": 2, "cols": 3, "winLength": 3}),
        &draw,
        Draw,
    );
    let four = [col(0), col(0), col(1), col(1), col(3), col(3), col(2)];
    check(
        C4,
        json!({"rows": 2, "cols": 5, "winLength": 3}),
        &four,
        Win(Seat::X),
    );
    check(C4, d(), &[col(3)], InProgress);
    check(
        C4,
        json!({"rows": 2}),
        &[col(0), col(0), col(0)],
        Refused("column_full"),
    );
    check(C4, d(), &[col(7)], Refused("out_of_bounds"));
    check(C4, d(), &[col(-1)], Refused("out_of_bounds"));
    check(C4, d(), &[json!({"col": "1"})], Refused("bad_move"));
    check(C4, d(), &[rc(0, 0)], Refused("bad_move"));
    check(C4, d(), &[json!({})], Refused("bad_move"));
}

#[test]
fn grid_rules_are_validated() {
    let registry = Registry::builtin();
    let cases: &[(&str, Value, Result<Value, &str>)] = &[
        (
            TTT,
            json!({}),
            Ok(json!({"rows": 3, "cols": 3, "winLength": 3})),
        ),
        (
            C4,
            json!({}),
            Ok(json!({"rows": 6, "cols": 7, "winLength": 4})),
        ),
        (
            TTT,
            json!({"rows": 1, "cols": 64, "winLength": 64}),
            Ok(json!({"rows": 1, "cols": 64, "winLength": 64})),
        ),
        (TTT, json!({"winLength": 4}), Err("winLength:range")),
        (
            C4,
            json!({"rows": 2, "cols": 3, "winLength": 4}),
            Err("winLength:range"),
        ),
        (TTT, json!({"rows": 65}), Err("rows:range")),
        (TTT, json!({"cols": 0}), Err("cols:range")),
        (TTT, json!({"winLength": 0}), Err("winLength:range")),
        (C4, json!({"rows": true}), Err("rows:type")),
        (C4, json!({"bestOf": 3}), Err("bestOf:unknown")),
    ];
    for (r, given, expected) in cases {
        let protocol = registry.get(r).expect("built-in protocol");
        let got = protocol
            .rules(given.as_object().expect("object"))
            .map(Value::Object)
            .map_err(|e| e.to_string());
        assert_eq!(got, expected.clone().map_err(str::to_string), "{r} {given}");
    }
}

#[test]
fn aliases_resolve_exactly() {
    let registry = Registry::builtin();
    let ttt = registry.get("flurryport:tic-tac-toe").expect("alias");
    assert_eq!(ttt.refs()[0], TTT);
    assert!(registry.get("pipehub:Tic-Tac-Toe").is_none());
    assert_eq!(registry.resolve(None).map(|p| p.refs()[0]), Some(TTT));
    for p in registry.iter() {
        assert_eq!(p.id().len(), 64);
    }
}

#[test]
fn renders_a_text_board() {
    let registry = Registry::builtin();
    let protocol = registry.get(TTT).expect("built-in");
    let rules = protocol.rules(&serde_json::Map::new()).expect("defaults");
    let mut board = protocol.new_board(&rules);
    board.apply(Seat::X, &rc(0, 0)).expect("legal");
    board.apply(Seat::O, &rc(1, 2)).expect("legal");
    let text = board.render(games::Viewer::Spectator);
    assert_eq!(text, "  0 1 2\n0 X . .\n1 . . O\n2 . . .\nX to move");
    // Numbers past 9 are padded, so the columns line up.
    let wide = protocol.rules(
        &json!({"rows": 2, "cols": 11})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let wide = protocol.new_board(&wide.expect("rules"));
    assert_eq!(
        wide.render(games::Viewer::Spectator),
        "    0  1  2  3  4  5  6  7  8  9 10\n 0  .  .  .  .  .  .  .  .  .  .  .\n 1  .  .  .  .  .  .  .  .  .  .  .\nX to move"
    );
    let view = serde_json::to_value(board.view(games::Viewer::Spectator)).expect("json");
    assert_eq!(view["toMove"], "X");
    assert_eq!(view["cells"][1][2], "O");
    assert_eq!(view["lastMove"], json!({"row": 1, "col": 2}));
}

/// The winning line runs from its far end behind the last piece to its far end ahead,
/// whichever of its cells came last; checked in each of the four directions with the
/// winning piece placed in the middle of its line.
#[test]
fn a_winning_line_runs_end_to_end_in_order() {
    let registry = Registry::builtin();
    let protocol = registry.get(TTT).expect("built-in");
    let given = json!({"rows": 5, "cols": 5, "winLength": 3});
    let rules = protocol
        .rules(given.as_object().expect("object"))
        .expect("valid");
    let pairs = |cells: &[(i64, i64)]| -> Value { cells.iter().map(|&(r, c)| rc(r, c)).collect() };
    // X's three cells, the middle one played last; O's moves elsewhere, out of any line.
    type Cells<const N: usize> = [(i64, i64); N];
    let cases: &[(Cells<3>, Cells<2>)] = &[
        ([(2, 1), (2, 3), (2, 2)], [(0, 0), (4, 4)]),
        ([(1, 2), (3, 2), (2, 2)], [(0, 0), (4, 4)]),
        ([(1, 1), (3, 3), (2, 2)], [(0, 4), (4, 0)]),
        ([(1, 3), (3, 1), (2, 2)], [(0, 0), (4, 4)]),
    ];
    let expected: [&[(i64, i64)]; 4] = [
        &[(2, 1), (2, 2), (2, 3)],
        &[(1, 2), (2, 2), (3, 2)],
        &[(1, 1), (2, 2), (3, 3)],
        &[(1, 3), (2, 2), (3, 1)],
    ];
    for ((x, o), line) in cases.iter().zip(expected) {
        let mut board = protocol.new_board(&rules);
        for (seat, (r, c)) in [
            (Seat::X, x[0]),
            (Seat::O, o[0]),
            (Seat::X, x[1]),
            (Seat::O, o[1]),
            (Seat::X, x[2]),
        ] {
            board.apply(seat, &rc(r, c)).expect("legal");
        }
        assert_eq!(board.outcome().winner, Some(Seat::X), "{x:?}");
        let view = serde_json::to_value(board.view(games::Viewer::Spectator)).expect("json");
        assert_eq!(view["line"], pairs(line), "{x:?}");
    }
}

/// Every viewer's written view against its serialized view.
fn written_views_match(board: &dyn Board) -> Result<(), proptest::test_runner::TestCaseError> {
    for viewer in [
        Viewer::Seat(Seat::X),
        Viewer::Seat(Seat::O),
        Viewer::Spectator,
    ] {
        let mut written = Vec::new();
        board.write_view(viewer, &mut written);
        let expected = serde_json::to_vec(&board.view(viewer)).expect("a view serializes");
        proptest::prop_assert_eq!(
            String::from_utf8(written).expect("UTF-8"),
            String::from_utf8(expected).expect("UTF-8")
        );
    }
    Ok(())
}

proptest::proptest! {
    /// The grid games write their views straight as JSON text; from the start and after
    /// every move, for every viewer, the text is byte for byte what serializing `view`
    /// gives (wins with their lines included: `winLength` goes down to 1).
    #[test]
    fn a_written_view_is_the_views_json_byte_for_byte(
        c4 in proptest::prelude::any::<bool>(),
        rows in 1..7i64,
        cols in 1..8i64,
        win in 1..8i64,
        cells in proptest::collection::vec((0..7i64, 0..8i64), 0..40),
    ) {
        let registry = Registry::builtin();
        let protocol = registry.get(if c4 { C4 } else { TTT }).expect("built-in");
        let given = json!({"rows": rows, "cols": cols, "winLength": win.min(rows.max(cols))});
        let rules = protocol.rules(given.as_object().expect("object")).expect("valid rules");
        let mut board = protocol.new_board(&rules);
        written_views_match(&*board)?;
        let mut n = 0;
        for (row, column) in cells {
            let mv = if c4 { col(column) } else { rc(row, column) };
            let seat = if n % 2 == 0 { Seat::X } else { Seat::O };
            if board.apply(seat, &mv).is_ok() {
                n += 1;
                written_views_match(&*board)?;
            }
        }
    }
}
