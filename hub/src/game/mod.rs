//! The engine: every way into a game goes through [`Hub`].
//!
//! HTTP, the WebSocket relay and the MCP agent never touch the inbox or an actor directly:
//! they call the facade, which checks seats and caps *before* anything reaches the inbox,
//! appends, and then waits (up to 5 s) for the verdict on its own capture. Adjudication
//! happens elsewhere, in order: one consumer task per shard reads durable records and
//! routes each to its game's actor (one actix actor per game id, rebuilt from the store's
//! per-game index on demand and stopped after 60 s idle), which runs the games crate's
//! chain verifier, records the verdict beside the capture, publishes the per-seat views to
//! the game's room once, and writes the events the hub owes (a hub-held seat's start,
//! custodial rock-paper-scissors commits and reveals).
//!
//! What the engine deliberately does not do: parse HTTP, rate-limit (the edges do, per
//! person), or judge a move itself — every verdict comes from `games::verify`, the same
//! verifier `pipehub verify` and the agent run.

mod error;
pub mod state;
mod types;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use games::{Event, Registry, Viewer};
use serde_json::Value;

pub use error::HubError;
pub use state::{GameState, KeysView, Notice, Phase, ResultView};
pub use types::{
    CaptureItem, CreateGame, Created, GameSummary, Listing, NewCode, Paired, Posted, SeatAuth,
    Verdict,
};

use crate::inbox::{Capture, Inbox};
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::rooms::Rooms;

/// The engine's settings (the `serve` flags that concern games).
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// The protocols this hub referees; its default ref is used for starts that name none.
    pub registry: Registry,
    /// The hub secret: hub-held seat keys and custodial nonces are derived from it.
    pub secret: Vec<u8>,
    /// Open seated games one person may host at once; `None`: no cap.
    pub max_open_games: Option<u64>,
    /// Captures one game may have; `None`: no cap.
    pub max_captures_per_game: Option<u64>,
    /// How long a pairing code works.
    pub code_ttl: Duration,
    /// How long a poster waits for its capture's verdict before answering `pending`.
    pub verdict_wait: Duration,
    /// How long an actor lives without events.
    pub actor_idle: Duration,
}

impl HubConfig {
    /// The defaults of DESIGN.md: 10-minute codes, 5 s verdict wait, 60 s idle actors.
    pub fn new(registry: Registry, secret: Vec<u8>) -> Self {
        HubConfig {
            registry,
            secret,
            max_open_games: None,
            max_captures_per_game: None,
            code_ttl: Duration::from_secs(600),
            verdict_wait: Duration::from_secs(5),
            actor_idle: Duration::from_secs(60),
        }
    }
}

/// The facade. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

#[allow(dead_code)]
struct Inner {
    config: HubConfig,
    inbox: Arc<dyn Inbox>,
    meta: Arc<dyn Meta>,
    metrics: Arc<Metrics>,
    rooms: Arc<dyn Rooms>,
}

/// The answer of every method that is not wired to the actors yet.
fn not_wired() -> HubError {
    HubError::Unavailable("the game engine is not wired in this build yet".into())
}

impl Hub {
    /// Opens the engine: loads seats and reservations from `meta` and starts one consumer
    /// per shard. Must be called inside an actix system (actors are started on it).
    pub async fn open(
        config: HubConfig,
        inbox: Arc<dyn Inbox>,
        meta: Arc<dyn Meta>,
        metrics: Arc<Metrics>,
        rooms: Arc<dyn Rooms>,
    ) -> Result<Hub, HubError> {
        Ok(Hub {
            inner: Arc::new(Inner {
                config,
                inbox,
                meta,
                metrics,
                rooms,
            }),
        })
    }

    /// Stops the consumers after the records they hold are adjudicated, and makes every
    /// verdict durable. Posts still waiting answer `pending`.
    pub async fn shutdown(&self) {}

    /// The seat a bearer token opens, or `None` (401) for an unknown token.
    pub async fn seat_for_token(&self, _token: &str) -> Option<SeatAuth> {
        None
    }

    /// True when the store can take writes.
    pub fn ready(&self) -> bool {
        self.inner.inbox.ready() && self.inner.meta.ready()
    }

    /// `POST …/events`: a whole event (already parsed from `raw`, which is stored as is).
    /// A reserved game needs `auth` for that game with `player` equal to its seat; a start
    /// of a seated game must match what was registered.
    pub async fn post_event(
        &self,
        _inbox: &str,
        _event: Event,
        _raw: Bytes,
        _auth: Option<SeatAuth>,
    ) -> Result<Posted, HubError> {
        Err(not_wired())
    }

    /// `POST …/moves`: `body` is `{"move": …}` (or `{"choice": …}` in rock-paper-scissors)
    /// for a hub-held seat; the hub writes seq, prevHash, player and sig.
    pub async fn post_move(&self, _auth: &SeatAuth, _body: Value) -> Result<Posted, HubError> {
        Err(not_wired())
    }

    /// `POST …/resign` by seat token: the hub writes the resign for a hub-held seat.
    pub async fn resign(&self, _auth: &SeatAuth) -> Result<Posted, HubError> {
        Err(not_wired())
    }

    /// `POST /v1/inboxes/{inbox}/games`: seats X, reserves a fresh game id, and returns X's
    /// token and a pairing code. `person` is who the open-games cap counts against.
    pub async fn create_game(
        &self,
        _inbox: &str,
        _req: CreateGame,
        _person: &str,
    ) -> Result<Created, HubError> {
        Err(not_wired())
    }

    /// `POST /v1/pair`: redeems a code, seats O (with its own public key, or hub-held), and
    /// when the hub owes the start, answers only once that start is accepted.
    pub async fn pair(&self, _code: &str, _key: Option<String>) -> Result<Paired, HubError> {
        Err(not_wired())
    }

    /// `POST …/code` by X's token before pairing: a fresh code; the old one dies.
    pub async fn new_code(&self, _auth: &SeatAuth) -> Result<NewCode, HubError> {
        Err(not_wired())
    }

    /// `DELETE …/games/{game}` by X's token before pairing.
    pub async fn cancel(&self, _auth: &SeatAuth) -> Result<(), HubError> {
        Err(not_wired())
    }

    /// A game's state for one viewer (`Viewer::Spectator` for `GET …/games/{game}`).
    pub async fn state(
        &self,
        _inbox: &str,
        _game: &str,
        _viewer: Viewer,
    ) -> Result<GameState, HubError> {
        Err(not_wired())
    }

    /// One capture with its verdict.
    pub async fn capture(&self, _inbox: &str, _capture: Capture) -> Result<CaptureItem, HubError> {
        Err(not_wired())
    }

    /// Captures of an inbox in inbox order, optionally of one game.
    pub async fn captures(
        &self,
        _inbox: &str,
        _game: Option<&str>,
        _after: Option<&str>,
        _limit: usize,
    ) -> Result<Listing<CaptureItem>, HubError> {
        Err(not_wired())
    }

    /// Games of an inbox, newest first, optionally only those in `phase`.
    pub async fn games(
        &self,
        _inbox: &str,
        _phase: Option<Phase>,
        _limit: usize,
    ) -> Result<Listing<GameSummary>, HubError> {
        Err(not_wired())
    }

    /// The accepted chain of a game as JSON Lines (each event as it was posted).
    pub async fn export(&self, _inbox: &str, _game: &str) -> Result<String, HubError> {
        Err(not_wired())
    }
}
