//! `pipehub:rock-paper-scissors`: best-of-N with SHA-256 commit-reveal.
//!
//! Each round takes four moves, which keeps the chain's parity (X odd, O even): X commits,
//! O commits, X reveals, O reveals. A commit is `{"commit": hex64}`, the lowercase hex
//! SHA-256 of `choice:nonce`; a reveal is `{"choice", "nonce"}` with the nonce as its
//! lowercase hex text (16–64 characters). A payload's shape is judged first (`bad_move`),
//! then the phase (`phase`), then the commit (`commit_mismatch`). A tied round is replayed;
//! the first seat to `(bestOf + 1) / 2` wins by score.
//!
//! **Private state.** What a seat has committed to lives in `Sealed`, which is not
//! `Serialize`: the only way out is [`Board::view`], which says *whether* a seat has
//! committed but never shows the commit itself, so two games that differ only in one
//! seat's unrevealed choice look byte-identical to the other seat and to spectators. (The
//! commit hash is public in the log; leaving it out of views is what makes that property
//! hold.) A choice becomes visible once revealed, which is also when it enters the log.
//!
//! **Custody.** [`Board::custody`] tells a custodian what to write for a seat. A reveal
//! needs the seq of the commit it opens, because the custodian derives its nonce from it;
//! the board counts the moves it has applied, and the k-th move is event seq k (seq 0 is
//! the start, and only moves are applied to a board).

use super::spec::{int_rule, RuleError, RuleFault, Spec};
use super::{Board, CustodyStep, GameResult, MoveError, Protocol, View, Viewer, WinBy};
use crate::crypto::rps_commit;
use crate::event::Seat;
use serde_json::{json, Map, Value};

const SPEC: &str = include_str!("../../protocols/rock-paper-scissors/spec.json");

#[derive(Debug)]
pub struct RockPaperScissors {
    spec: Spec,
}

impl RockPaperScissors {
    pub fn new() -> RockPaperScissors {
        RockPaperScissors {
            // The embedded spec is fixed at build time and loaded by this module's tests.
            spec: Spec::load(SPEC).expect("the embedded rock-paper-scissors spec loads"),
        }
    }
}

impl Default for RockPaperScissors {
    fn default() -> Self {
        Self::new()
    }
}

impl Protocol for RockPaperScissors {
    fn refs(&self) -> &[&'static str] {
        &["pipehub:rock-paper-scissors"]
    }

    fn spec(&self) -> &Value {
        self.spec.doc()
    }

    fn id(&self) -> &str {
        self.spec.id()
    }

    fn rules(&self, given: &Map<String, Value>) -> Result<Map<String, Value>, RuleError> {
        let rules = self.spec.validate(given)?;
        if int_rule(&rules, "bestOf", 1) % 2 == 0 {
            return Err(RuleError::new("bestOf", RuleFault::Odd));
        }
        Ok(rules)
    }

    fn new_board(&self, rules: &Map<String, Value>) -> Box<dyn Board> {
        let best_of = u32::try_from(int_rule(rules, "bestOf", 3)).unwrap_or(3);
        Box::new(RpsBoard {
            best_of,
            target: best_of / 2 + 1,
            scores: [0, 0],
            moves: 0,
            phase: Phase::Commit(Seat::X),
            sealed: [None, None],
            history: Vec::new(),
            resigned: None,
        })
    }
}

/// One of the three choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Rock,
    Paper,
    Scissors,
}

impl Choice {
    pub const ALL: [Choice; 3] = [Choice::Rock, Choice::Paper, Choice::Scissors];

    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Rock => "rock",
            Choice::Paper => "paper",
            Choice::Scissors => "scissors",
        }
    }

    pub fn parse(s: &str) -> Option<Choice> {
        Choice::ALL.into_iter().find(|c| c.as_str() == s)
    }

    fn beats(self, other: Choice) -> bool {
        matches!(
            (self, other),
            (Choice::Rock, Choice::Scissors)
                | (Choice::Scissors, Choice::Paper)
                | (Choice::Paper, Choice::Rock)
        )
    }
}

/// What a seat has committed to in the current round. Deliberately not `Serialize`.
#[derive(Clone, Debug)]
struct Sealed {
    commit: String,
    commit_seq: u64,
    revealed: Option<Choice>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Commit(Seat),
    Reveal(Seat),
    Over,
}

/// A finished round, public once both reveals are in the log.
#[derive(Clone, Copy, Debug)]
struct Round {
    x: Choice,
    o: Choice,
    winner: Option<Seat>,
}

enum RpsMove {
    Commit(String),
    Reveal(Choice, String),
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The payload's shape, before any look at the phase.
fn parse_move(mv: &Value) -> Result<RpsMove, MoveError> {
    let map = mv.as_object().ok_or(MoveError::BadMove)?;
    match (
        map.len(),
        map.get("commit"),
        map.get("choice"),
        map.get("nonce"),
    ) {
        (1, Some(Value::String(c)), None, None) if c.len() == 64 && is_lower_hex(c) => {
            Ok(RpsMove::Commit(c.clone()))
        }
        (2, None, Some(Value::String(choice)), Some(Value::String(nonce)))
            if (16..=64).contains(&nonce.len()) && is_lower_hex(nonce) =>
        {
            let choice = Choice::parse(choice).ok_or(MoveError::BadMove)?;
            Ok(RpsMove::Reveal(choice, nonce.clone()))
        }
        _ => Err(MoveError::BadMove),
    }
}

fn idx(seat: Seat) -> usize {
    match seat {
        Seat::X => 0,
        Seat::O => 1,
    }
}

#[derive(Clone, Debug)]
struct RpsBoard {
    best_of: u32,
    target: u32,
    scores: [u32; 2],
    /// Moves applied so far; the k-th move is event seq k.
    moves: u64,
    phase: Phase,
    sealed: [Option<Sealed>; 2],
    history: Vec<Round>,
    /// The seat that resigned, if one did (the phase is then `Over`).
    resigned: Option<Seat>,
}

impl RpsBoard {
    fn check(&self, seat: Seat, mv: &RpsMove) -> Result<(), MoveError> {
        match (self.phase, mv) {
            (Phase::Over, _) => Err(MoveError::GameOver),
            (Phase::Commit(s), RpsMove::Commit(_)) if s == seat => Ok(()),
            (Phase::Reveal(s), RpsMove::Reveal(choice, nonce)) if s == seat => {
                let sealed = self.sealed[idx(seat)].as_ref().ok_or(MoveError::Phase)?;
                if rps_commit(choice.as_str(), nonce) == sealed.commit {
                    Ok(())
                } else {
                    Err(MoveError::CommitMismatch)
                }
            }
            _ => Err(MoveError::Phase),
        }
    }

    fn finish_round(&mut self) {
        let choice = |s: &Option<Sealed>| s.as_ref().and_then(|s| s.revealed);
        let (Some(x), Some(o)) = (choice(&self.sealed[0]), choice(&self.sealed[1])) else {
            return;
        };
        let winner = if x.beats(o) {
            Some(Seat::X)
        } else if o.beats(x) {
            Some(Seat::O)
        } else {
            None
        };
        self.history.push(Round { x, o, winner });
        self.sealed = [None, None];
        self.phase = Phase::Commit(Seat::X);
        if let Some(w) = winner {
            self.scores[idx(w)] += 1;
            if self.scores[idx(w)] >= self.target {
                self.phase = Phase::Over;
            }
        }
    }

    fn to_move(&self) -> Option<Seat> {
        match self.phase {
            Phase::Commit(s) | Phase::Reveal(s) => Some(s),
            Phase::Over => None,
        }
    }

    fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::Commit(_) => "commit",
            Phase::Reveal(_) => "reveal",
            Phase::Over => "over",
        }
    }
}

impl Board for RpsBoard {
    fn legal(&self, seat: Seat, mv: &Value) -> Result<(), MoveError> {
        self.check(seat, &parse_move(mv)?)
    }

    fn apply(&mut self, seat: Seat, mv: &Value) -> Result<(), MoveError> {
        let parsed = parse_move(mv)?;
        self.check(seat, &parsed)?;
        self.moves += 1;
        match parsed {
            RpsMove::Commit(commit) => {
                self.sealed[idx(seat)] = Some(Sealed {
                    commit,
                    commit_seq: self.moves,
                    revealed: None,
                });
                self.phase = match seat {
                    Seat::X => Phase::Commit(Seat::O),
                    Seat::O => Phase::Reveal(Seat::X),
                };
            }
            RpsMove::Reveal(choice, _) => {
                if let Some(sealed) = self.sealed[idx(seat)].as_mut() {
                    sealed.revealed = Some(choice);
                }
                match seat {
                    Seat::X => self.phase = Phase::Reveal(Seat::O),
                    Seat::O => self.finish_round(),
                }
            }
        }
        Ok(())
    }

    /// On a copy without the history of rounds, which the result does not depend on.
    fn outcome_after(&self, seat: Seat, mv: &Value) -> Result<GameResult, MoveError> {
        let mut next = RpsBoard {
            best_of: self.best_of,
            target: self.target,
            scores: self.scores,
            moves: self.moves,
            phase: self.phase,
            sealed: self.sealed.clone(),
            history: Vec::new(),
            resigned: self.resigned,
        };
        next.apply(seat, mv)?;
        Ok(next.outcome())
    }

    fn resign(&mut self, seat: Seat) {
        if self.phase != Phase::Over {
            self.phase = Phase::Over;
            self.resigned = Some(seat);
        }
    }

    fn outcome(&self) -> GameResult {
        match self.phase {
            Phase::Over if let Some(resigned) = self.resigned => {
                GameResult::win(resigned.other(), WinBy::Resign)
            }
            Phase::Over if self.scores[0] > self.scores[1] => {
                GameResult::win(Seat::X, WinBy::Score)
            }
            Phase::Over => GameResult::win(Seat::O, WinBy::Score),
            _ => GameResult::IN_PROGRESS,
        }
    }

    /// Committed or not, and choices once revealed; never a commit, nonce or unrevealed choice.
    fn view(&self, viewer: Viewer) -> View {
        let committed = |s: Seat| self.sealed[idx(s)].is_some();
        let revealed = |s: Seat| {
            self.sealed[idx(s)]
                .as_ref()
                .and_then(|x| x.revealed)
                .map(Choice::as_str)
        };
        let history: Vec<Value> = self
            .history
            .iter()
            .map(|r| json!({"X": r.x.as_str(), "O": r.o.as_str(), "winner": r.winner.map(Seat::as_str)}))
            .collect();
        View(json!({
            "seat": match viewer { Viewer::Seat(s) => Some(s.as_str()), Viewer::Spectator => None },
            "bestOf": self.best_of,
            "target": self.target,
            "scores": {"X": self.scores[0], "O": self.scores[1]},
            "round": self.history.len() + 1,
            "phase": self.phase_name(),
            "toMove": self.to_move().map(Seat::as_str),
            "committed": {"X": committed(Seat::X), "O": committed(Seat::O)},
            "revealed": {"X": revealed(Seat::X), "O": revealed(Seat::O)},
            "history": history,
        }))
    }

    fn render(&self, _viewer: Viewer) -> String {
        // A game over names the rounds it played, not one more to come.
        let played = self.history.len();
        let round = match self.phase {
            Phase::Over => format!(
                "{played} round{} played",
                if played == 1 { "" } else { "s" }
            ),
            _ => format!("round {}", played + 1),
        };
        let mut out = format!(
            "{round} (first to {}): X {} - O {}",
            self.target, self.scores[0], self.scores[1]
        );
        if let Some(last) = self.history.last() {
            out.push_str(&format!(
                "; last X {} O {}",
                last.x.as_str(),
                last.o.as_str()
            ));
        }
        match (self.phase, self.outcome().winner) {
            (Phase::Over, Some(w)) => match self.resigned {
                Some(r) => out.push_str(&format!("; {w} wins ({r} resigned)")),
                None => out.push_str(&format!("; {w} wins")),
            },
            (Phase::Commit(s), _) => out.push_str(&format!("; {s} to commit")),
            (Phase::Reveal(s), _) => out.push_str(&format!("; {s} to reveal")),
            (Phase::Over, None) => {}
        }
        out
    }

    fn custody(&self, seat: Seat) -> Option<CustodyStep> {
        match self.phase {
            Phase::Commit(s) if s == seat => Some(CustodyStep::Commit),
            Phase::Reveal(s) if s == seat => {
                let sealed = self.sealed[idx(seat)].as_ref()?;
                Some(CustodyStep::Reveal {
                    commit: sealed.commit.clone(),
                    commit_seq: sealed.commit_seq,
                })
            }
            _ => None,
        }
    }

    fn sealed_commit(&self, seat: Seat) -> Option<(String, u64)> {
        if self.phase == Phase::Over {
            return None;
        }
        self.sealed[idx(seat)]
            .as_ref()
            .filter(|sealed| sealed.revealed.is_none())
            .map(|sealed| (sealed.commit.clone(), sealed.commit_seq))
    }

    fn box_clone(&self) -> Box<dyn Board> {
        Box::new(self.clone())
    }
}
