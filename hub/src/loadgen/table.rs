//! One game slot of a load run: two WebSocket seats playing game after game.
//!
//! A table seats a game over HTTP, says `hello` with each seat's token on its two sockets,
//! and plays: each seat moves as soon as its own `game.state` says it is its turn, and the
//! move's latency is taken when the *other* socket receives a state past the move's seq.
//! When the game ends the table seats a new one and says `hello` again on the same sockets.
//! Both sockets live in one task, so one clock measures both ends of every move.
//!
//! Only one move is ever in flight per table (the games are turn-based), which makes the
//! offered load a closed loop of G moves at most, capped by the shared [`Pacer`].
//! A table never waits without a bound: a move whose state does not arrive within
//! `STALL` is counted as an error and the table asks for the board again; three stalls
//! in a row, or a broken socket, and it starts over with fresh sockets (the game it leaves
//! stays noted as open, for the run to resign at its end).
//!
//! [`Pacer`]: super::stats::Pacer

use super::http::{CallError, Seated};
use super::stats::Stats;
use super::wire::{self, Incoming};
use super::Shared;
use futures_util::{SinkExt, StreamExt};
use games::event::Seat;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a move may wait for its state before the table resynchronises.
const STALL: Duration = Duration::from_secs(5);
/// Consecutive stalls after which the sockets are replaced.
const MAX_STALLS: u32 = 3;
/// Time limit on opening one socket.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a refusal by the rate limiter (the relay sends no Retry-After), or by a hub
/// whose store cannot take writes (which a move sent at once would only meet again).
const RATE_LIMIT_PAUSE: Duration = Duration::from_secs(1);
/// Each socket's read buffer. The library zeroes the whole buffer before every read: its
/// default (128 KiB) cost this client a quarter of its CPU (and 128 KiB of memory per
/// socket), and 8 KiB still about 5 %. The states of the games it plays are about a
/// kilobyte at most (a signed connect-four state, keys and all); a larger frame is simply
/// read in more than one go.
const READ_BUFFER_BYTES: usize = 2 * 1024;

/// What the run's conductor tells every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Seat the first game and wait.
    Setup,
    /// Play until the deadline, then hold the games open.
    Play { deadline: Instant },
    /// Close the sockets and finish (the run then resigns the games still open).
    Release,
}

impl Control {
    fn stopped(self) -> bool {
        match self {
            Control::Setup => false,
            Control::Play { deadline } => Instant::now() >= deadline,
            Control::Release => true,
        }
    }
}

/// How a game ended for the table.
enum Played {
    Ended,
    Stopped,
    Broken,
}

/// The move in flight.
struct Pending {
    mover: usize,
    base_seq: u64,
    sent_at: Instant,
}

/// Runs one table until the conductor releases it.
pub async fn run(shared: Arc<Shared>, mut control: watch::Receiver<Control>) {
    let mut rng = StdRng::from_entropy();
    let mut sockets: Option<[Ws; 2]> = None;
    let mut counted_ready = false;
    let mut next_ref = 0u64;
    while !control.borrow().stopped() {
        // Sockets first: a game seated for sockets that cannot open would stay open on
        // the hub and count against its open-games cap.
        let mut socks = match sockets.take() {
            Some(s) => s,
            None => match connect_pair(&shared).await {
                Ok(s) => s,
                Err(e) => {
                    shared.stats.error(|| format!("websocket connect: {e}"));
                    sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
        };
        // The sockets are read while the game is seated: under load seating can take
        // longer than the relay's idle timeout, and unanswered pings close a socket.
        let seated = match reading_while(&mut socks, seat(&shared, &control)).await {
            Ok(Some(seated)) => seated,
            Ok(None) => {
                sockets = Some(socks);
                break;
            }
            Err(e) => {
                shared
                    .stats
                    .error(|| format!("a socket closed while seating a game: {e}"));
                continue;
            }
        };
        let hellos = [wire::hello(&seated.token_x), wire::hello(&seated.token_o)];
        if let Err(e) = send_both(&mut socks, &hellos).await {
            shared.stats.error(|| format!("websocket hello: {e}"));
            continue;
        }
        if !counted_ready {
            counted_ready = true;
            shared
                .seated
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if *control.borrow() == Control::Setup {
            // The first games wait for every table to be seated, so the measured window
            // sees all G games playing at once. The sockets are read meanwhile (the hub
            // drops a socket whose pings go unanswered); the states read are stale by
            // the time play starts, so each seat asks for its board again.
            let go = control.wait_for(|c| *c != Control::Setup);
            if let Err(e) = reading_while(&mut socks, go).await {
                shared
                    .stats
                    .error(|| format!("a socket closed while the run was being set up: {e}"));
                continue;
            }
            let board = [wire::game_board(), wire::game_board()];
            if let Err(e) = send_both(&mut socks, &board).await {
                shared.stats.error(|| format!("websocket: {e}"));
                continue;
            }
        }
        let deadline = match *control.borrow() {
            Control::Play { deadline } => deadline,
            _ => break,
        };
        match play(
            &shared,
            &mut socks,
            &seated,
            deadline,
            &mut rng,
            &mut next_ref,
        )
        .await
        {
            Played::Ended => {
                shared.open.ended(&seated.game);
                sockets = Some(socks);
            }
            Played::Stopped => {
                sockets = Some(socks);
                break;
            }
            Played::Broken => {}
        }
    }
    // Hold the last games open until the hub's memory has been read; the run resigns
    // them once every table has closed its sockets.
    let _ = control.wait_for(|c| *c == Control::Release).await;
    if let Some(socks) = sockets {
        for mut ws in socks {
            let _ = timeout(Duration::from_secs(1), ws.close(None)).await;
        }
    }
}

/// Runs `work` while reading and dropping the sockets' frames (so pings are answered);
/// the error says why a socket closed first.
async fn reading_while<T>(
    socks: &mut [Ws; 2],
    work: impl std::future::Future<Output = T>,
) -> Result<T, String> {
    tokio::pin!(work);
    loop {
        let [a, b] = &mut *socks;
        let frame = tokio::select! {
            out = &mut work => return Ok(out),
            f = a.next() => f,
            f = b.next() => f,
        };
        match frame {
            Some(Ok(Message::Text(text))) if text.contains("\"close\":true") => {
                return Err(text.to_string())
            }
            Some(Ok(Message::Close(reason))) => return Err(format!("close frame {reason:?}")),
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("end of stream".into()),
            Some(Ok(_)) => {}
        }
    }
}

/// Seats a game, retrying (bounded by the run) when the hub refuses, and notes it as open
/// (the run resigns what is still open at its end).
async fn seat(shared: &Shared, control: &watch::Receiver<Control>) -> Option<Seated> {
    let mut capped = false;
    loop {
        if control.borrow().stopped() {
            return None;
        }
        let pause = match shared
            .http
            .seat_game(&shared.inbox, &shared.protocol, shared.signed)
            .await
        {
            Ok(seated) => {
                shared.open.seated(&seated);
                return Some(seated);
            }
            Err(CallError::RateLimited { retry_after_s }) => {
                Stats::count(&shared.stats.rate_limited);
                Duration::from_secs(retry_after_s.clamp(1, 5))
            }
            Err(CallError::PairingLimited { retry_after_s }) => {
                Stats::count(&shared.stats.pairing_limited);
                Duration::from_secs(retry_after_s.clamp(1, 5))
            }
            Err(CallError::OpenGamesCap { cap, .. }) => {
                // One game refused, however many times it is asked for again.
                if !capped {
                    capped = true;
                    Stats::count(&shared.stats.open_games_cap);
                }
                if let Some(cap) = cap {
                    shared
                        .stats
                        .open_games_limit
                        .store(cap, std::sync::atomic::Ordering::Relaxed);
                }
                Duration::from_secs(1)
            }
            Err(e) => {
                shared.stats.error(|| format!("seating a game: {e}"));
                Duration::from_secs(1)
            }
        };
        sleep(pause).await;
    }
}

async fn connect_pair(shared: &Shared) -> Result<[Ws; 2], String> {
    Ok([connect(shared).await?, connect(shared).await?])
}

async fn connect(shared: &Shared) -> Result<Ws, String> {
    let _permit = shared.connects.acquire().await;
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
    let attempt =
        tokio_tungstenite::connect_async_with_config(shared.ws_url.as_str(), Some(config), true);
    match timeout(CONNECT_TIMEOUT, attempt).await {
        Ok(Ok((ws, _))) => Ok(ws),
        Ok(Err(tokio_tungstenite::tungstenite::Error::Http(response)))
            if response.status() == 429 =>
        {
            Stats::count(&shared.stats.sockets_cap);
            Err("429: the hub's cap on sockets per address".into())
        }
        Ok(Err(e)) if closed_unanswered(&e) => {
            Stats::count(&shared.stats.connections_cap);
            Err(format!(
                "the hub closed the connection unanswered, as its cap on connections per \
                 address does (`pipehub serve --max-connections-per-address`): {e}"
            ))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

/// Whether the hub closed a connection before it answered the handshake, as its cap on
/// connections per peer address does (it shuts such a connection down as it accepts it).
fn closed_unanswered(e: &tokio_tungstenite::tungstenite::Error) -> bool {
    use std::io::ErrorKind;
    use tokio_tungstenite::tungstenite::error::{Error, ProtocolError};
    match e {
        Error::Protocol(ProtocolError::HandshakeIncomplete) => true,
        Error::ConnectionClosed | Error::AlreadyClosed => true,
        Error::Io(io) => matches!(
            io.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof
        ),
        _ => false,
    }
}

async fn send_both(socks: &mut [Ws; 2], texts: &[String; 2]) -> Result<(), String> {
    for (ws, text) in socks.iter_mut().zip(texts) {
        ws.send(Message::text(text.as_str()))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Plays one game on the two sockets until it ends, the deadline passes, or a socket breaks.
async fn play(
    shared: &Shared,
    socks: &mut [Ws; 2],
    seated: &Seated,
    deadline: Instant,
    rng: &mut StdRng,
    next_ref: &mut u64,
) -> Played {
    let stats = &shared.stats;
    let mut pending: Option<Pending> = None;
    let mut ended = false;
    let mut stalls = 0u32;
    let mut last_activity = Instant::now();
    // Two timers for the whole game, not two a message: the stall timer is moved on only
    // when it fires early (activity since it was set), about once per STALL of play.
    let end = sleep_until(deadline);
    let stall = sleep_until(last_activity + STALL);
    tokio::pin!(end, stall);
    loop {
        let [a, b] = &mut *socks;
        let (idx, frame) = tokio::select! {
            f = a.next() => (0usize, f),
            f = b.next() => (1usize, f),
            () = &mut end => {
                if let Some(p) = &pending {
                    stats.unanswered(deadline - p.sent_at);
                }
                return Played::Stopped;
            }
            () = &mut stall => {
                if last_activity + STALL > Instant::now() {
                    stall.as_mut().reset(last_activity + STALL);
                    continue;
                }
                stalls += 1;
                if let Some(p) = pending.take() {
                    stats.unanswered(p.sent_at.elapsed());
                    stats.error(|| "a move's game.state did not arrive within 5 s".into());
                }
                if stalls >= MAX_STALLS {
                    stats.error(|| "a game stalled; reconnecting".into());
                    return Played::Broken;
                }
                let board = [wire::game_board(), wire::game_board()];
                if send_both(socks, &board).await.is_err() {
                    return Played::Broken;
                }
                last_activity = Instant::now();
                stall.as_mut().reset(last_activity + STALL);
                continue;
            }
        };
        let text = match frame {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_))) | None => {
                stats.error(|| "the hub closed a socket".into());
                return Played::Broken;
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => {
                stats.error(|| format!("websocket: {e}"));
                return Played::Broken;
            }
        };
        // The mover's own copy of the state its move made (the one frame that carries a
        // `ref`; a refusal's true state does not) asks nothing of the mover, whose next
        // turn comes with the opponent's move, and the opponent's copy times the move and
        // says whether the game is over. Not parsing it spares this client half its parsing.
        if wire::is_echo(text.as_str()) {
            last_activity = Instant::now();
            continue;
        }
        let msg = match Incoming::parse(text.as_str()) {
            Ok(m) => m,
            Err(e) => {
                stats.error(|| format!("unreadable message from the hub: {e}"));
                continue;
            }
        };
        match msg.t.as_str() {
            "game.state" => {
                if msg.game.as_deref() != Some(seated.game.as_str()) {
                    continue; // the end of the previous game, read late
                }
                let now = Instant::now();
                last_activity = now;
                stalls = 0;
                let seq = msg.seq.unwrap_or(0);
                if let Some(p) = &pending {
                    if p.mover != idx && msg.seq.is_some_and(|s| s > p.base_seq) {
                        stats.record_move(now - p.sent_at);
                        pending = None;
                    }
                }
                ended |= msg.is_over();
                if ended {
                    if pending.is_none() {
                        return Played::Ended;
                    }
                    continue;
                }
                if pending.is_some() {
                    continue;
                }
                let seat = if idx == 0 { Seat::X } else { Seat::O };
                let Some(mv) = msg
                    .view
                    .as_ref()
                    .and_then(|v| shared.kind.pick(seat, v, rng))
                else {
                    continue;
                };
                // A slot past the deadline (a low --rate over many games) is not waited
                // for: the table stops with the clock, like every other.
                tokio::select! {
                    () = shared.pacer.wait() => {}
                    () = sleep_until(deadline) => return Played::Stopped,
                }
                if Instant::now() >= deadline {
                    return Played::Stopped;
                }
                *next_ref += 1;
                let sent_at = Instant::now();
                if let Err(e) = socks[idx]
                    .send(Message::text(wire::game_move(&mv, *next_ref)))
                    .await
                {
                    stats.error(|| format!("websocket send: {e}"));
                    return Played::Broken;
                }
                pending = Some(Pending {
                    mover: idx,
                    base_seq: seq,
                    sent_at,
                });
                // The stall clock runs from the move, not from the state it answers: at a
                // low --rate over many games the pacer may hold a move back for seconds.
                last_activity = sent_at;
            }
            "game.refused" => {
                Stats::count(&stats.refused);
                if pending.as_ref().is_some_and(|p| p.mover == idx) {
                    pending = None;
                }
                let pause = match msg.error.as_deref() {
                    Some("rate_limited") => {
                        Stats::count(&stats.rate_limited);
                        true
                    }
                    Some("unavailable") => {
                        stats.error(|| "the hub's store cannot take writes (unavailable)".into());
                        true
                    }
                    _ => false,
                };
                if pause {
                    sleep_until(deadline.min(Instant::now() + RATE_LIMIT_PAUSE)).await;
                    last_activity = Instant::now();
                    stall.as_mut().reset(last_activity + STALL);
                }
            }
            "error" => {
                stats.error(|| {
                    format!(
                        "hub error {} {}",
                        msg.error.as_deref().unwrap_or("?"),
                        msg.detail
                            .as_ref()
                            .map(|d| d.to_string())
                            .unwrap_or_default()
                    )
                });
                if msg.close == Some(true) {
                    return Played::Broken;
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener that shuts each connection down as it accepts it, as the hub does past
    /// its cap on connections per address: the handshake fails in a way the load
    /// generator counts as that cap.
    #[tokio::test]
    async fn a_connection_shut_as_it_is_accepted_is_the_hubs_connection_cap() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bound");
        let addr = listener.local_addr().expect("an address");
        let closer = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.expect("accepted");
            socket2::SockRef::from(&tcp)
                .shutdown(std::net::Shutdown::Both)
                .expect("shut down");
            // Held until the client gave up, so the close is the shutdown's alone.
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        let url = format!("ws://{addr}/v1/ws");
        let failed = timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(url.as_str()),
        )
        .await
        .expect("no hang")
        .expect_err("the handshake fails");
        assert!(closed_unanswered(&failed), "{failed:?}");
        closer.abort();

        let refused = tokio_tungstenite::tungstenite::Error::Http(
            tokio_tungstenite::tungstenite::http::Response::builder()
                .status(429)
                .body(None)
                .expect("a response"),
        );
        assert!(!closed_unanswered(&refused), "a 429 is the socket cap's");
    }
}
