//! What the relay needs of games, stated as a trait the hub implements.
//!
//! The relay cannot depend on the hub (the hub depends on the relay), so it says here, in
//! its own terms, the five things a socket may ask: open a seat by token, read one viewer's
//! state, play a move, resign, and (for the connection gauge) note a socket opening or
//! closing. Every state crosses this boundary already redacted for its viewer and already
//! serialized ([`StateFrame`]), so the relay copies bytes, never views.
//!
//! The service, not the relay, charges the per-person rate limit on `play` and `resign`:
//! the budget is shared with HTTP, and the hub owns it. What the limiter refuses comes back
//! as a [`Failure`] with the code `rate_limited`.

use std::sync::Arc;

use async_trait::async_trait;
use games::Seat;
use serde_json::Value;

use crate::wire::client_out::StateFrame;

/// The seat a token opens. The relay keeps it for as long as the socket acts for that seat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatRef {
    pub inbox: Arc<str>,
    pub game: Arc<str>,
    pub seat: Seat,
    /// The key under which the service counts this person's events (a digest of the token;
    /// the token itself is not kept).
    pub person: [u8; 32],
}

/// Why the service refused a request without a referee's verdict: a wire error code
/// (`unauthorized`, `forbidden`, `not_found`, `not_started`, `rate_limited`, …) and a
/// human detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub error: String,
    pub detail: Option<String>,
    /// For `rate_limited`: whole seconds until the budget lets one more through (HTTP's
    /// `Retry-After`), so a client can back off without reading the detail's words.
    pub retry_after: Option<u64>,
}

impl Failure {
    pub fn new(error: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            error: error.into(),
            detail: Some(detail.into()),
            retry_after: None,
        }
    }

    /// `rate_limited`, to be tried again in `secs` seconds.
    pub fn rate_limited(secs: u64) -> Failure {
        Failure {
            retry_after: Some(secs),
            ..Failure::new("rate_limited", format!("retry after {secs} s"))
        }
    }
}

/// What became of a move or a resign that reached the referee.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Accepted; the mover's view afterwards.
    Accepted(StateFrame),
    /// A rock-paper-scissors choice held until its seat's commit turn; the mover's view,
    /// which shows the held choice.
    Held(StateFrame),
    /// Refused by the referee (the capture is kept); the reason and the true state.
    Rejected {
        error: String,
        detail: Option<String>,
        state: StateFrame,
    },
    /// No verdict in time (a shard changing owner); the state follows through the room.
    Pending,
}

/// Why a socket closed: the first cause the session met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The client sent a close frame.
    Client,
    /// The connection went away without one.
    Disconnected,
    /// The client sent a frame over the size limit, or one that is not a WebSocket frame.
    BadFrame,
    /// Nothing was heard from the client (no frame, no pong) within the idle timeout.
    Idle,
    /// The client did not read: its frames filled the send queue, a room's queue for it,
    /// or waited longer than the write timeout.
    Slow,
    /// The server shut down.
    Shutdown,
}

impl Ended {
    /// Every cause, for metrics that want each label present from the start.
    pub const ALL: [Ended; 6] = [
        Ended::Client,
        Ended::Disconnected,
        Ended::BadFrame,
        Ended::Idle,
        Ended::Slow,
        Ended::Shutdown,
    ];

    /// The cause as a metric label: `client`, `disconnected`, `bad_frame`, `idle`, `slow`
    /// or `shutdown`.
    pub fn label(self) -> &'static str {
        match self {
            Ended::Client => "client",
            Ended::Disconnected => "disconnected",
            Ended::BadFrame => "bad_frame",
            Ended::Idle => "idle",
            Ended::Slow => "slow",
            Ended::Shutdown => "shutdown",
        }
    }
}

/// The games a relay plays and shows. Implemented by the hub on its facade.
#[async_trait]
pub trait Games: Send + Sync + 'static {
    /// The seat a bearer token opens, `None` for an unknown token, or why it could not be
    /// looked up (a store that is down: not the token's fault, so not `unauthorized`).
    async fn open_seat(&self, token: &str) -> Result<Option<SeatRef>, Failure>;

    /// One viewer's current state of a game (`seat` `None`: the spectator view).
    async fn state(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
    ) -> Result<StateFrame, Failure>;

    /// Plays `mv` (the protocol's move payload; rock-paper-scissors: `{"choice"}`) for the
    /// seat, charging the person's rate limit first.
    async fn play(&self, seat: &SeatRef, mv: Value) -> Result<Outcome, Failure>;

    /// Resigns for the seat, charging the person's rate limit first.
    async fn resign(&self, seat: &SeatRef) -> Result<Outcome, Failure>;

    /// A socket opened (`true`) or closed (`false`).
    fn connection(&self, _opened: bool) {}

    /// Why a socket that closed did (told just before its `connection(false)`).
    fn closed(&self, _why: Ended) {}

    /// A socket was refused because its client holds the most it may.
    fn socket_refused(&self) {}
}
