//! One WebSocket per open seat: the hub's pushes wake the agent.
//!
//! The relay sends a seat's `game.state` after every accepted event of its game and when O
//! pairs. The agent does not take those frames as truth (a hub could push anything): a
//! frame only means "look again". On each one the watcher runs the seat's sync — verify
//! the captures, then write what the agent owes (the start, a held choice's commit, a
//! reveal) — and then bumps the seat's `changed` counter, which `game_wait` waits on. So a
//! person's opponent never waits for a reveal on the model's next tool call.
//!
//! A duty the hub refused for now with a `Retry-After` (its rate limiter) is tried again
//! by the watcher once that time has passed, up to [`RETRIES`] times in a row, and not
//! only on the next push or tool call: the opponent would otherwise wait for a reveal
//! that nothing triggers.
//!
//! The socket is reopened with a growing pause when it drops, and closed for good once the
//! game is over. The seat token is sent in the first frame only, never in a URL or a log.
//!
//! What it deliberately does not do: move for the person, or write anything over the
//! socket but `hello` (the agent's events are whole signed events, posted over HTTP).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::seat::{Ctx, SeatHandle};
use super::state;

/// The first pause before reconnecting, and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(15);
/// How many times in a row a sync the hub asked to retry later is tried again by itself,
/// and the bounds put on the wait it asked for (a hostile hub could ask for a day, or 0).
const RETRIES: u32 = 8;
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(300);

/// When to sync again without a push: after a refusal that said when to retry.
#[derive(Default)]
struct Retry {
    at: Option<Instant>,
    tries: u32,
}

impl Retry {
    /// Takes a sync's outcome: schedules the next try, or clears the schedule.
    fn after(&mut self, seat: &SeatHandle, wait: Option<Duration>) {
        let Some(wait) = wait else {
            *self = Retry::default();
            return;
        };
        if self.tries >= RETRIES {
            tracing::warn!(game = %seat.game, seat = %seat.seat, tries = self.tries,
                "gave up retrying a refused sync; the next push or tool call tries again");
            *self = Retry::default();
            return;
        }
        let wait = wait.clamp(RETRY_MIN, RETRY_MAX);
        self.tries += 1;
        self.at = Some(Instant::now() + wait);
        tracing::info!(game = %seat.game, seat = %seat.seat, tries = self.tries,
            wait_s = wait.as_secs(), "the hub asked to retry later; the agent will");
    }
}

/// Starts watching a seat. The task ends by itself when the game is over; abort it to
/// stop earlier.
pub fn spawn(ctx: Arc<Ctx>, seat: Arc<SeatHandle>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = BACKOFF_MIN;
        let mut retry = Retry::default();
        loop {
            let woke = wake(&ctx, &seat).await;
            if woke.over {
                return;
            }
            retry.after(&seat, woke.retry);
            match watch_once(&ctx, &seat, &mut retry).await {
                Ok(true) => return,
                Ok(false) => backoff = BACKOFF_MIN,
                Err(e) => {
                    tracing::debug!(game = %seat.game, seat = %seat.seat, error = %e, "the seat's socket failed");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    })
}

/// What a sync found: the game is over, or the hub asked to try again later.
struct Woke {
    over: bool,
    retry: Option<Duration>,
}

/// Syncs the seat and tells waiters.
async fn wake(ctx: &Ctx, seat: &SeatHandle) -> Woke {
    let woke = match seat.sync(ctx).await {
        Ok(snap) => Woke {
            over: state::is_over(&snap),
            retry: None,
        },
        Err(e) => {
            tracing::warn!(game = %seat.game, seat = %seat.seat, error = %e, "sync after a push failed");
            Woke {
                over: false,
                retry: e.retry_after(),
            }
        }
    };
    seat.changed.send_modify(|n| *n = n.wrapping_add(1));
    woke
}

/// One connection: hello, then a sync per frame, and one when a retry is due. `Ok(true)`
/// when the game ended.
async fn watch_once(ctx: &Ctx, seat: &SeatHandle, retry: &mut Retry) -> Result<bool, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ctx.client.ws_url())
        .await
        .map_err(|e| e.to_string())?;
    let token = seat.token().await.unwrap_or_default();
    let hello = json!({"t": "hello", "token": token}).to_string();
    ws.send(Message::text(hello))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let due = retry.at;
        let msg = tokio::select! {
            msg = ws.next() => msg,
            () = sleep_until(due) => {
                tracing::info!(game = %seat.game, seat = %seat.seat, "retrying what the hub refused for now");
                let woke = wake(ctx, seat).await;
                if woke.over {
                    let _ = ws.close(None).await;
                    return Ok(true);
                }
                retry.after(seat, woke.retry);
                continue;
            }
        };
        let Some(msg) = msg else { return Ok(false) };
        match msg.map_err(|e| e.to_string())? {
            Message::Text(text) => {
                if text.contains("\"t\":\"error\"") {
                    tracing::warn!(game = %seat.game, seat = %seat.seat, "the relay refused this seat's socket");
                }
                let woke = wake(ctx, seat).await;
                if woke.over {
                    let _ = ws.close(None).await;
                    return Ok(true);
                }
                retry.after(seat, woke.retry);
            }
            Message::Close(_) => return Ok(false),
            _ => {}
        }
    }
}

/// Sleeps until `at`, or forever when nothing is due.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
