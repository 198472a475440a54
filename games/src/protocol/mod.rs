//! Game plugins.
//!
//! A protocol is a game's rules packaged so that any reader can referee it: a spec document
//! (the `spec.json` format of the Aigenora protocol reference) whose contract subset hashes
//! to the **protocol id**, rule validation against the spec's declared parameters, a pure
//! reducer, a per-seat redactor and a text renderer.
//!
//! The raw state of a game is a [`Board`]. `Board` is deliberately not `Serialize`: the only
//! way to turn a game into something a client can see is [`Board::view`], which returns a
//! [`View`] for one viewer. A raw state (with the other seat's secrets in it) therefore
//! cannot be sent to a seat by mistake: it does not compile.
//!
//! Adding a game means adding one module that implements [`Protocol`] and one line in
//! [`Registry::builtin`].

pub mod connect_four;
mod grid;
pub mod rps;
pub mod spec;
pub mod specjson;
pub mod tictactoe;

use crate::event::{Seat, Status};
use crate::reason::{Reason, Refusal};
use serde::Serialize;
use serde_json::{Map, Value};
pub use spec::{RuleError, RuleFault};
use std::fmt;
use std::sync::Arc;

/// Who is looking at a game.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Viewer {
    Seat(Seat),
    Spectator,
}

/// How a game was won.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WinBy {
    /// k in a row.
    Line,
    /// The other seat resigned.
    Resign,
    /// First to the target score (rock-paper-scissors).
    Score,
}

/// A game's result: `{"status", "winner", "by"}` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GameResult {
    pub status: Status,
    pub winner: Option<Seat>,
    pub by: Option<WinBy>,
}

impl GameResult {
    pub const IN_PROGRESS: GameResult = GameResult {
        status: Status::InProgress,
        winner: None,
        by: None,
    };
    pub const DRAW: GameResult = GameResult {
        status: Status::Draw,
        winner: None,
        by: None,
    };

    pub fn win(winner: Seat, by: WinBy) -> Self {
        GameResult {
            status: Status::Win,
            winner: Some(winner),
            by: Some(by),
        }
    }

    pub fn is_over(&self) -> bool {
        self.status != Status::InProgress
    }
}

/// What one viewer may see of a game: the only serializable form of a board.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(transparent)]
pub struct View(pub Value);

impl View {
    /// Adds `pendingChoice` to a seat's *own* view: the choice its custodian holds or has
    /// committed for it (rock-paper-scissors). The board never knows an unrevealed choice,
    /// so only the custodian can add it, and only to the view it sends to that seat.
    pub fn with_pending_choice(mut self, choice: &str) -> View {
        if let Value::Object(map) = &mut self.0 {
            map.insert("pendingChoice".to_string(), Value::from(choice));
        }
        self
    }
}

/// Why a protocol refuses a move. [`MoveError::detail`] is its wire text, the detail of
/// an `illegal_move` refusal; the verifier makes that refusal, the boards never do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveError {
    /// Not a move of this game's shape (missing or extra fields, a field of the wrong type,
    /// a choice that is no choice).
    BadMove,
    /// A coordinate outside the board.
    OutOfBounds,
    /// A cell that already holds a mark.
    Occupied,
    /// A column with no free cell.
    ColumnFull,
    /// A move after the game ended.
    GameOver,
    /// Commit-reveal: a commit when a reveal is due, or a reveal when a commit is.
    Phase,
    /// Commit-reveal: a reveal whose choice and nonce do not hash to the seat's commit.
    CommitMismatch,
}

impl MoveError {
    /// The wire detail of `illegal_move`, e.g. `out_of_bounds`.
    pub fn detail(self) -> &'static str {
        match self {
            MoveError::BadMove => "bad_move",
            MoveError::OutOfBounds => "out_of_bounds",
            MoveError::Occupied => "occupied",
            MoveError::ColumnFull => "column_full",
            MoveError::GameOver => "game_over",
            MoveError::Phase => "phase",
            MoveError::CommitMismatch => "commit_mismatch",
        }
    }
}

impl fmt::Display for MoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.detail())
    }
}

impl std::error::Error for MoveError {}

impl From<MoveError> for Refusal {
    /// A refused move is an `illegal_move` refusal whose detail says why.
    fn from(err: MoveError) -> Self {
        Refusal::with(Reason::IllegalMove, err.detail())
    }
}

/// What a custodian (the hub for a hub-held seat, or the local agent) must write for the
/// seat whose turn it is, in a commit-reveal protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustodyStep {
    /// The seat commits to a choice: the custodian writes `{"commit": sha256(choice:nonce)}`.
    Commit,
    /// The seat reveals the choice behind its own earlier commit, written at `commit_seq`.
    Reveal { commit: String, commit_seq: u64 },
}

/// A game plugin. Implementations are stateless descriptions; per-game state is a [`Board`].
pub trait Protocol: Send + Sync + fmt::Debug {
    /// Every catalog ref this protocol answers to; the first is its canonical name
    /// (e.g. `pipehub:tic-tac-toe`, then the alias `flurryport:tic-tac-toe`).
    fn refs(&self) -> &[&'static str];

    /// The spec document (its JSON text, as shipped).
    fn spec(&self) -> &Value;

    /// The protocol id: SHA-256 of the spec's contract subset (see [`spec`]).
    fn id(&self) -> &str;

    /// Validates a start's `rules` (without `keys` and `inboxes`, which the verifier
    /// handles) against the spec's parameters and fills in defaults. The error names the
    /// parameter and the fault; its text is the `bad_rules` detail.
    fn rules(&self, given: &Map<String, Value>) -> Result<Map<String, Value>, RuleError>;

    /// A fresh board for validated rules.
    fn new_board(&self, rules: &Map<String, Value>) -> Box<dyn Board>;
}

/// The raw state of one game. Not serializable on purpose: see the module docs.
pub trait Board: Send + Sync + fmt::Debug {
    /// Checks a move by `seat` (a payload that passed the section-1 checks) without
    /// changing the board.
    fn legal(&self, seat: Seat, mv: &Value) -> Result<(), MoveError>;

    /// Applies a move. Leaves the board unchanged and returns the error when the move is
    /// not legal.
    fn apply(&mut self, seat: Seat, mv: &Value) -> Result<(), MoveError>;

    /// `seat` resigned (the verifier calls this once it has accepted the resign): the
    /// board offers nobody a turn from now on, and its view and text say the game is over,
    /// as they do after a winning move. A board that is already over stays as it is.
    fn resign(&mut self, seat: Seat);

    /// The result of the game as it stands, a resignation included.
    fn outcome(&self) -> GameResult;

    /// The result the game would have after `seat`'s move, the board left as it is (a
    /// reader checks a `status` claim with it before applying the move). By default a
    /// copy of the board takes the move; a board whose copy grows with the game (a
    /// history of rounds) answers from what decides the result instead, so that a long
    /// log of claims is not read in quadratic time.
    fn outcome_after(&self, seat: Seat, mv: &Value) -> Result<GameResult, MoveError> {
        let mut next = self.box_clone();
        next.apply(seat, mv)?;
        Ok(next.outcome())
    }

    /// The redactor: what `viewer` may know. A seat's view and the spectator view never
    /// contain the other seat's secrets.
    fn view(&self, viewer: Viewer) -> View;

    /// The same view as JSON text: exactly the bytes of `serde_json::to_vec(&self.view(viewer))`.
    /// A board whose view is built after every move may write it directly, without the
    /// value tree (the grid games do; a property test holds them to the same bytes).
    fn write_view(&self, viewer: Viewer, out: &mut Vec<u8>) {
        // Writing a `Value` (string keys only) into memory cannot fail.
        let _ = serde_json::to_writer(out, &self.view(viewer));
    }

    /// A small text board for `viewer`, built from the same redacted knowledge as `view`.
    fn render(&self, viewer: Viewer) -> String;

    /// For commit-reveal protocols: what `seat` must write next, if it is `seat`'s turn to
    /// commit or reveal. `None` for every other protocol.
    fn custody(&self, _seat: Seat) -> Option<CustodyStep> {
        None
    }

    /// For commit-reveal protocols: `seat`'s commit of the round under way that it has not
    /// revealed yet, and the seq it was written at (the custodian derives its nonce from
    /// that), so that a custodian that does not hold the choice in memory can recover it
    /// for the seat's own view. `None` once the game is over, and for every other protocol.
    fn sealed_commit(&self, _seat: Seat) -> Option<(String, u64)> {
        None
    }

    fn box_clone(&self) -> Box<dyn Board>;
}

impl Clone for Box<dyn Board> {
    fn clone(&self) -> Self {
        self.box_clone()
    }
}

/// The protocols a reader knows, looked up by ref. Every game's chain keeps one, so a
/// clone shares both fields rather than copying them.
#[derive(Clone, Debug)]
pub struct Registry {
    protocols: Arc<[Arc<dyn Protocol>]>,
    default_ref: Arc<str>,
}

impl Registry {
    pub const DEFAULT_REF: &'static str = "pipehub:tic-tac-toe";

    /// Every built-in protocol, with `pipehub:tic-tac-toe` as the default for starts that
    /// name none.
    pub fn builtin() -> Registry {
        // The specs are parsed and hashed once per process; every registry shares them.
        static BUILTIN: std::sync::OnceLock<Arc<[Arc<dyn Protocol>]>> = std::sync::OnceLock::new();
        let protocols = BUILTIN.get_or_init(|| {
            Arc::from(vec![
                // One line per game.
                Arc::new(tictactoe::TicTacToe::new()) as Arc<dyn Protocol>,
                Arc::new(connect_four::ConnectFour::new()),
                Arc::new(rps::RockPaperScissors::new()),
            ])
        });
        Registry {
            protocols: protocols.clone(),
            default_ref: Self::DEFAULT_REF.into(),
        }
    }

    /// Sets the protocol that a start with no `protocol` field means. Returns `None` when
    /// this registry does not know `r`.
    pub fn with_default(mut self, r: &str) -> Option<Registry> {
        self.get(r)?;
        self.default_ref = r.into();
        Some(self)
    }

    pub fn default_ref(&self) -> &str {
        &self.default_ref
    }

    /// Exact, case-sensitive lookup by any of a protocol's refs.
    pub fn get(&self, r: &str) -> Option<&Arc<dyn Protocol>> {
        self.protocols.iter().find(|p| p.refs().contains(&r))
    }

    /// The protocol a start means: its `protocol` field, or the default.
    pub fn resolve(&self, r: Option<&str>) -> Option<&Arc<dyn Protocol>> {
        self.get(r.unwrap_or(&self.default_ref))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Protocol>> {
        self.protocols.iter()
    }
}
