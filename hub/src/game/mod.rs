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

mod actor;
mod consumer;
pub mod custody;
mod desk;
mod engine;
mod error;
mod facade;
mod finished;
pub mod seats;
pub mod state;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
mod types;
mod waiters;
pub mod writer;

use std::time::Duration;

use games::Registry;

pub use error::{HubError, Unavailable};
pub use facade::Hub;
pub use state::{GameState, KeysView, Notice, Phase, ResultView, SharedState};
pub use types::{
    CaptureItem, CreateGame, Created, GameSummary, Listing, NewCode, Paired, Posted, SeatAuth,
    Verdict,
};

/// The engine's settings (the `serve` flags that concern games). Its `Debug` leaves the
/// secret out, so a logged config leaks nothing.
#[derive(Clone)]
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
    /// The cluster this hub is a node of (Redis backend); `None`: it owns every shard.
    pub cluster: Option<crate::cluster::SharedOwnership>,
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
            cluster: None,
        }
    }
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("default_protocol", &self.registry.default_ref())
            .field("secret", &"<redacted>")
            .field("max_open_games", &self.max_open_games)
            .field("max_captures_per_game", &self.max_captures_per_game)
            .field("code_ttl", &self.code_ttl)
            .field("verdict_wait", &self.verdict_wait)
            .field("actor_idle", &self.actor_idle)
            .field("clustered", &self.cluster.is_some())
            .finish()
    }
}
