//! Leak properties of the redactors: what one seat keeps secret never shows in the other
//! seat's view, nor in the spectator's, nor in their text boards.
//!
//! For rock-paper-scissors, two games are played with the same public history and then
//! differ only in the choice and nonce behind one seat's unrevealed commit; the other
//! seat's view and the spectator view must be byte-identical between the two. For the grid
//! games, which have no secrets, every viewer must learn exactly the same thing.

use games::crypto::rps_commit;
use games::event::Seat;
use games::protocol::{Board, Registry, Viewer};
use proptest::prelude::*;
use serde_json::{json, Value};

const CHOICES: [&str; 3] = ["rock", "paper", "scissors"];

fn rps_board() -> Box<dyn Board> {
    let registry = Registry::builtin();
    let protocol = registry
        .get("pipehub:rock-paper-scissors")
        .expect("built-in");
    let rules = protocol
        .rules(json!({"bestOf": 99}).as_object().expect("object"))
        .expect("valid rules");
    protocol.new_board(&rules)
}

fn apply_all(board: &mut Box<dyn Board>, moves: &[Value]) {
    for (i, mv) in moves.iter().enumerate() {
        let seat = if i % 2 == 0 { Seat::X } else { Seat::O };
        board.apply(seat, mv).expect("the generated move is legal");
    }
}

/// A seat's secret: a choice and a nonce (lowercase hex, 16–64 characters).
fn secret() -> impl Strategy<Value = (usize, String)> {
    (0..3usize, "[0-9a-f]{16,64}")
}

fn observed(board: &dyn Board, viewer: Viewer) -> String {
    let view = serde_json::to_string(&board.view(viewer)).expect("a view serializes");
    format!("{view}\n{}", board.render(viewer))
}

proptest! {
    /// `stage` is how far into the current round the game is: 1 = X committed, 2 = both
    /// committed, 3 = both committed and X revealed. The hidden seat is X for stages 1 and
    /// 2 and O for stages 2 and 3 (at stage 2 both are hidden; `hide_o` picks one).
    #[test]
    fn rps_views_hide_the_other_seats_secret(
        past in prop::collection::vec((0..3usize, 0..3usize), 0..6),
        stage in 1..4usize,
        hide_o in any::<bool>(),
        open in secret(),
        a in secret(),
        b in secret(),
    ) {
        let hidden = match stage { 1 => Seat::X, 3 => Seat::O, _ if hide_o => Seat::O, _ => Seat::X };
        let nonce = "0123456789abcdef";
        let mut prefix = Vec::new();
        for (x, o) in &past {
            let (x, o) = (CHOICES[*x], CHOICES[*o]);
            prefix.push(json!({"commit": rps_commit(x, nonce)}));
            prefix.push(json!({"commit": rps_commit(o, nonce)}));
            prefix.push(json!({"choice": x, "nonce": nonce}));
            prefix.push(json!({"choice": o, "nonce": nonce}));
        }
        let round = |secret: &(usize, String)| {
            let (hidden_c, hidden_n) = (CHOICES[secret.0], secret.1.as_str());
            let (open_c, open_n) = (CHOICES[open.0], open.1.as_str());
            let (x, o) = match hidden {
                Seat::X => ((hidden_c, hidden_n), (open_c, open_n)),
                Seat::O => ((open_c, open_n), (hidden_c, hidden_n)),
            };
            let mut moves = vec![json!({"commit": rps_commit(x.0, x.1)})];
            if stage >= 2 {
                moves.push(json!({"commit": rps_commit(o.0, o.1)}));
            }
            if stage >= 3 {
                moves.push(json!({"choice": x.0, "nonce": x.1}));
            }
            moves
        };
        let mut first = rps_board();
        let mut second = rps_board();
        apply_all(&mut first, &[prefix.clone(), round(&a)].concat());
        apply_all(&mut second, &[prefix, round(&b)].concat());
        for viewer in [Viewer::Seat(hidden.other()), Viewer::Spectator] {
            let (one, two) = (observed(&*first, viewer), observed(&*second, viewer));
            prop_assert_eq!(&one, &two, "viewer {:?}", viewer);
            prop_assert!(!one.contains(&a.1) && !one.contains(&rps_commit(CHOICES[a.0], &a.1)));
        }
    }

    /// Grid games have no secrets: the seats and the spectator see the same board.
    #[test]
    fn grid_views_are_the_same_for_everyone(
        c4 in any::<bool>(),
        cells in prop::collection::vec((0..4i64, 0..4i64), 0..16),
    ) {
        let registry = Registry::builtin();
        let r = if c4 { "pipehub:connect-four" } else { "pipehub:tic-tac-toe" };
        let protocol = registry.get(r).expect("built-in");
        let rules = json!({"rows": 4, "cols": 4, "winLength": 4});
        let mut board = protocol.new_board(&protocol.rules(rules.as_object().expect("object")).expect("valid"));
        let mut n = 0;
        for (row, col) in cells {
            let mv = if c4 { json!({"col": col}) } else { json!({"row": row, "col": col}) };
            let seat = if n % 2 == 0 { Seat::X } else { Seat::O };
            if board.apply(seat, &mv).is_ok() {
                n += 1;
            }
        }
        let without_seat = |viewer| {
            let mut v = serde_json::to_value(board.view(viewer)).expect("json");
            v.as_object_mut().expect("object").remove("seat");
            (v, board.render(viewer))
        };
        let spectator = without_seat(Viewer::Spectator);
        prop_assert_eq!(&without_seat(Viewer::Seat(Seat::X)), &spectator);
        prop_assert_eq!(&without_seat(Viewer::Seat(Seat::O)), &spectator);
    }
}
