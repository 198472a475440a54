//! One WebSocket per open seat: the hub's pushes wake the agent.
//!
//! The relay sends a seat's `game.state` after every accepted event of its game and when O
//! pairs. The agent does not take those frames as truth (a hub could push anything): a
//! frame only means "look again". On each one the watcher runs the seat's sync — verify
//! the captures, then write what the agent owes (the start, a held choice's commit, a
//! reveal) — and then bumps the seat's `changed` counter, which `game_wait` waits on. So a
//! person's opponent never waits for a reveal on the model's next tool call.
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
use tokio_tungstenite::tungstenite::Message;

use super::seat::{Ctx, SeatHandle};
use super::state;

/// The first pause before reconnecting, and the longest.
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(15);

/// Starts watching a seat. The task ends by itself when the game is over; abort it to
/// stop earlier.
pub fn spawn(ctx: Arc<Ctx>, seat: Arc<SeatHandle>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = BACKOFF_MIN;
        loop {
            if wake(&ctx, &seat).await {
                return;
            }
            match watch_once(&ctx, &seat).await {
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

/// Syncs the seat and tells waiters; true when the game is over.
async fn wake(ctx: &Ctx, seat: &SeatHandle) -> bool {
    let over = match seat.sync(ctx).await {
        Ok(snap) => state::is_over(&snap),
        Err(e) => {
            tracing::warn!(game = %seat.game, seat = %seat.seat, error = %e, "sync after a push failed");
            false
        }
    };
    seat.changed.send_modify(|n| *n = n.wrapping_add(1));
    over
}

/// One connection: hello, then a sync per frame. `Ok(true)` when the game ended.
async fn watch_once(ctx: &Ctx, seat: &SeatHandle) -> Result<bool, String> {
    let (mut ws, _) = tokio_tungstenite::connect_async(ctx.client.ws_url())
        .await
        .map_err(|e| e.to_string())?;
    let token = seat.token().await.unwrap_or_default();
    let hello = json!({"t": "hello", "token": token}).to_string();
    ws.send(Message::text(hello))
        .await
        .map_err(|e| e.to_string())?;
    while let Some(msg) = ws.next().await {
        match msg.map_err(|e| e.to_string())? {
            Message::Text(text) => {
                if text.contains("\"t\":\"error\"") {
                    tracing::warn!(game = %seat.game, seat = %seat.seat, "the relay refused this seat's socket");
                }
                if wake(ctx, seat).await {
                    let _ = ws.close(None).await;
                    return Ok(true);
                }
            }
            Message::Close(_) => return Ok(false),
            _ => {}
        }
    }
    Ok(false)
}
