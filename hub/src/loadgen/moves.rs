//! Random legal moves, chosen from a seat's own view.
//!
//! The view a seat receives is the protocol's redacted board (`games`' `Board::view`), and
//! it carries everything a legal move needs: the grid's empty cells, the column that still
//! has room, whether this seat has chosen in this round. Choosing from the view keeps the
//! load generator free of a second copy of each game's state; the hub referees every move
//! anyway, and a refusal is counted, so a wrong guess would show in the report.
//!
//! Rock-paper-scissors seats are hub-held custodial seats: they send `{"choice"}` on their
//! commit turn only, and the hub writes the commits and reveals.

use super::wire::ViewMsg;
use games::event::Seat;
use games::protocol::Registry;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{json, Value};

/// The games the load generator knows how to play.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TicTacToe,
    ConnectFour,
    RockPaperScissors,
}

impl Kind {
    /// The kind of game a catalog ref names, by its canonical ref in the built-in registry
    /// (so aliases work). The error says what went wrong, for the command line.
    pub fn from_ref(r: &str) -> Result<(Kind, String), String> {
        let registry = Registry::builtin();
        let protocol = registry
            .get(r)
            .ok_or_else(|| format!("unknown protocol {r:?}"))?;
        let canonical = protocol.refs().first().copied().unwrap_or(r);
        let kind = match canonical {
            "pipehub:tic-tac-toe" => Kind::TicTacToe,
            "pipehub:connect-four" => Kind::ConnectFour,
            "pipehub:rock-paper-scissors" => Kind::RockPaperScissors,
            other => return Err(format!("loadgen cannot play {other}")),
        };
        Ok((kind, canonical.to_string()))
    }

    /// A random legal move for `seat`, or `None` when this view asks nothing of it (not its
    /// turn, the game is over, or the hub is writing this seat's reveal).
    pub fn pick(self, seat: Seat, view: &ViewMsg, rng: &mut impl Rng) -> Option<Value> {
        if view.to_move.as_deref() != Some(seat.as_str()) {
            return None;
        }
        match self {
            Kind::TicTacToe => {
                let free: Vec<(usize, usize)> = free_cells(view).collect();
                let (r, c) = *free.choose(rng)?;
                Some(json!({"row": r, "col": c}))
            }
            Kind::ConnectFour => {
                let mut open: Vec<usize> = free_cells(view).map(|(_, c)| c).collect();
                open.sort_unstable();
                open.dedup();
                let c = *open.choose(rng)?;
                Some(json!({"col": c}))
            }
            Kind::RockPaperScissors => {
                let committed = view.committed.as_ref()?;
                let mine = match seat {
                    Seat::X => committed.x,
                    Seat::O => committed.o,
                };
                if view.phase.as_deref() != Some("commit") || mine {
                    return None;
                }
                let choice = ["rock", "paper", "scissors"].choose(rng)?;
                Some(json!({"choice": choice}))
            }
        }
    }
}

fn free_cells(view: &ViewMsg) -> impl Iterator<Item = (usize, usize)> + '_ {
    view.cells
        .iter()
        .flatten()
        .enumerate()
        .flat_map(|(r, row)| {
            row.iter()
                .enumerate()
                .filter(|(_, cell)| cell.is_none())
                .map(move |(c, _)| (r, c))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::wire::Committed;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use serde::de::IgnoredAny;

    fn grid(to_move: &str, cells: Vec<Vec<Option<&str>>>) -> ViewMsg {
        ViewMsg {
            to_move: Some(to_move.into()),
            cells: Some(
                cells
                    .into_iter()
                    .map(|r| r.into_iter().map(|c| c.map(|_| IgnoredAny)).collect())
                    .collect(),
            ),
            ..ViewMsg::default()
        }
    }

    #[test]
    fn aliases_resolve_and_unknown_refs_are_refused() {
        assert_eq!(
            Kind::from_ref("flurryport:tic-tac-toe").map(|k| k.0),
            Ok(Kind::TicTacToe)
        );
        assert!(Kind::from_ref("pipehub:chess").is_err());
    }

    #[test]
    fn grid_moves_land_on_free_cells_only_on_our_turn() {
        let mut rng = StdRng::seed_from_u64(1);
        let view = grid("X", vec![vec![Some("X"), None], vec![Some("O"), Some("X")]]);
        for _ in 0..20 {
            assert_eq!(
                Kind::TicTacToe.pick(Seat::X, &view, &mut rng),
                Some(json!({"row": 0, "col": 1}))
            );
        }
        assert_eq!(Kind::TicTacToe.pick(Seat::O, &view, &mut rng), None);
        let full = grid("X", vec![vec![Some("X")]]);
        assert_eq!(Kind::TicTacToe.pick(Seat::X, &full, &mut rng), None);
    }

    #[test]
    fn connect_four_picks_a_column_with_room() {
        let mut rng = StdRng::seed_from_u64(2);
        let view = grid(
            "O",
            vec![
                vec![Some("X"), None, Some("O")],
                vec![Some("X"), Some("O"), Some("O")],
            ],
        );
        for _ in 0..20 {
            assert_eq!(
                Kind::ConnectFour.pick(Seat::O, &view, &mut rng),
                Some(json!({"col": 1}))
            );
        }
    }

    #[test]
    fn rock_paper_scissors_chooses_once_per_round_on_commit_turns() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut view = ViewMsg {
            to_move: Some("O".into()),
            phase: Some("commit".into()),
            committed: Some(Committed { x: true, o: false }),
            ..ViewMsg::default()
        };
        let mv = Kind::RockPaperScissors
            .pick(Seat::O, &view, &mut rng)
            .expect("O's commit turn");
        assert!(["rock", "paper", "scissors"].contains(&mv["choice"].as_str().unwrap_or("")));
        view.phase = Some("reveal".into());
        assert_eq!(Kind::RockPaperScissors.pick(Seat::O, &view, &mut rng), None);
    }
}
