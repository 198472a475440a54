//! One WebSocket connection, from handshake to close.
//!
//! A session is one task running one `select!` over six things: frames from the client,
//! publications from the room it watches, the reply of the command it is running, a
//! heartbeat tick, the server's shutdown and, while frames wait, room in the socket's
//! sending queue. Frames go straight into the socket's own bounded channel to the
//! connection (actix-ws's, 32 frames); what does not fit waits in a short backlog of the
//! session's (`outbox`), drained as the connection takes frames. The session never waits
//! on the client: a client that lets [`SEND_QUEUE`] frames pile up, or takes none for
//! [`WRITE_TIMEOUT`], does not read, and is dropped on the spot; it never slows the
//! session's room or anyone's game. (No writer task of its own: that cost a task, a second
//! queue and a thread hop per frame, and about 4 KiB of memory per open game.)
//!
//! Commands run one at a time, in the order they arrived (a lane): at most one call into
//! the service is in flight per socket, and while [`COMMAND_QUEUE`] commands wait, or
//! frames wait in the backlog, the session stops reading the socket, so a flooding client
//! is held back by TCP rather than by memory. While frames wait it starts no command
//! either, so a burst's answers go out at the pace the connection takes them, and only a
//! client that does not read fills the backlog. Rate limits are the service's: every move
//! and resign is charged to the person's budget, shared with HTTP.
//!
//! Ordering: a session remembers the newest state it has shown (by `seq`) and never shows
//! an older one, so the room's publication and the reply to a move, which race, cannot
//! send the board backwards. While this socket's own move is in flight, publications caused
//! by its seat are held back and the reply sends the newest state with the mover's `ref`,
//! once; a refusal sends `game.refused` and then the true state. A move the service turns
//! down before any verdict (`rate_limited`, `not_started`, `forbidden`, …) is answered the
//! same way, so a chat box that drew the move early takes it back; `error` is kept for
//! messages that are malformed or out of place (no seat, no `hello`). How is in
//! `ordering`.
//!
//! When the server shuts down, a session reads no more, answers the command it is running
//! (its move is judged: the hub's engine stops only after the server), drops those not
//! begun, and closes with 1001 (going away), so clients reconnect at once, to another node
//! in a cluster, instead of when the server's grace period for requests runs out.
//!
//! A session that ends tells the service why, by the first cause it met ([`Ended`]: a
//! close frame, the connection gone, a bad frame, the idle timeout, a client too slow to
//! read, or the server shutting down), for the hub's `pipehub_websocket_closed_total`.
//!
//! What it does not do: buffer history, retry, or speak for more than one seat at a time
//! (a later `hello` switches seat; `game.subscribe` makes the socket a spectator of any
//! game).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use actix_ws::{
    AggregatedMessage, AggregatedMessageStream, CloseCode, CloseReason, Message, MessageStream,
};
use bytestring::ByteString;
use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::cap::Admitted;
use crate::endpoint::{Heartbeat, Relay};
use crate::rooms::{Delivery, Subscription};
use crate::service::{Ended, Failure, Outcome, SeatRef};
use crate::wire::client_in::{ClientIn, Ref};
use crate::wire::client_out::{self, StateFrame};

mod ordering;
mod outbox;

use ordering::Watch;
use outbox::Outbox;

/// The largest frame a client may send, in bytes (DESIGN.md section 5: 4 KiB).
pub const MAX_FRAME_BYTES: usize = 4096;
/// How often the hub pings a client it has not heard from lately.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// How long a client may stay silent (no frame, no pong) before it is dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames waiting for the connection to take them; a client that lets it fill is dropped.
pub const SEND_QUEUE: usize = 64;
/// Commands waiting for the lane; while it is full the socket is not read.
pub const COMMAND_QUEUE: usize = 16;
/// The longest the connection may take no frame while some wait, before the client is
/// dropped; also the bound on sending what is left and the close frame at the end.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a socket acts as.
enum Role {
    /// No `hello` yet.
    Unknown,
    Spectator,
    Seated(SeatRef),
}

/// The `detail` of the `error` a socket gets when the game it watches is cancelled.
pub const CANCELLED: &str = "the game was cancelled before anyone joined";

/// The result of a command's call into the service.
enum Reply {
    Seated {
        seat: SeatRef,
        sub: Subscription,
        state: Result<StateFrame, Failure>,
    },
    Unauthorized,
    /// A request the service could not answer (a `hello` whose token could not be looked
    /// up): the socket stays open, and its seat as it was.
    Failed(Failure),
    Watching {
        sub: Subscription,
        state: Result<StateFrame, Failure>,
    },
    Board(Result<StateFrame, Failure>),
    Played {
        reference: Option<Ref>,
        result: Result<Outcome, Failure>,
        /// The true state after a failure, so a box that drew the move takes it back.
        truth: Option<Result<StateFrame, Failure>>,
    },
}

/// Reports the connection to the service for as long as it lives, and at its end why it
/// ended.
struct Connected {
    relay: Relay,
    why: Ended,
}

impl Drop for Connected {
    fn drop(&mut self) {
        self.relay.games.closed(self.why);
        self.relay.games.connection(false);
    }
}

/// Runs one connection until either side closes it. `admitted` is its slot under its
/// client's cap, given back when the session ends.
pub async fn run(
    relay: Relay,
    socket: actix_ws::Session,
    stream: MessageStream,
    admitted: Option<Admitted>,
) {
    let _admitted = admitted;
    relay.games.connection(true);
    let mut connected = Connected {
        relay: relay.clone(),
        why: Ended::Disconnected,
    };
    let relay_shutdown = relay.shutdown.clone();
    let mut stream = stream
        .max_frame_size(MAX_FRAME_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_FRAME_BYTES);
    let mut session = Session {
        relay,
        outbox: Outbox::new(socket),
        role: Role::Unknown,
        watch: None,
        queue: VecDeque::new(),
        inflight: None,
        playing: false,
        last_heard: Instant::now(),
        closing: None,
        ended: None,
        shutdown: relay_shutdown,
        stopping: false,
    };
    session.serve(&mut stream).await;
    connected.why = session.ended.unwrap_or(Ended::Disconnected);
    let goodbye = match session.closing.take() {
        Some(Closing::Dropped) => return,
        Some(Closing::Close(reason)) => Some(reason),
        None => None,
    };
    session.push(Message::Close(goodbye));
    // What is queued, then the close frame, within the bound; then dropping the socket's
    // sender ends the connection.
    let _ = tokio::time::timeout(WRITE_TIMEOUT, session.flush()).await;
}

/// Whether the client's text message is not UTF-8 (RFC 6455 closes with 1007 for that,
/// and 1002 for the other faults of a frame). actix-ws reports it as an I/O error that
/// wraps the `Utf8Error`, for a message in one frame or in several
/// (`vendor/actix-ws`'s `stream.rs` and `aggregated.rs`).
fn is_invalid_utf8(e: &actix_ws::ProtocolError) -> bool {
    matches!(e, actix_ws::ProtocolError::Io(io)
        if io.get_ref().is_some_and(|inner| inner.is::<std::str::Utf8Error>()))
}

/// Whether the client's message is over [`MAX_FRAME_BYTES`]: one frame that says so in
/// its header, or fragments that add up past it (which actix-ws's aggregation reports as
/// an I/O error with this message, and no kind of its own: `vendor/actix-ws`'s
/// `aggregated.rs`; the relay's test of a fragmented message pins it).
fn is_oversized(e: &actix_ws::ProtocolError) -> bool {
    match e {
        actix_ws::ProtocolError::Overflow => true,
        actix_ws::ProtocolError::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.to_string() == "Exceeded maximum continuation size"),
        _ => false,
    }
}

/// Whether an error from the client's stream is its connection going away (the request
/// payload under the socket ended early or failed), not a frame the client got wrong.
fn is_disconnect(e: &actix_ws::ProtocolError) -> bool {
    matches!(e, actix_ws::ProtocolError::Io(io)
        if io.get_ref().is_some_and(|inner| inner.is::<actix_web::error::PayloadError>()))
}

/// How a session ends.
enum Closing {
    /// A close frame, then the end.
    Close(CloseReason),
    /// The client cannot take more frames: no goodbye.
    Dropped,
}

struct Session {
    relay: Relay,
    /// The socket's sending half, and the frames that wait for it.
    outbox: Outbox,
    role: Role,
    watch: Option<Watch>,
    queue: VecDeque<ClientIn>,
    inflight: Option<BoxFuture<'static, Reply>>,
    /// The command in flight is this socket's move or resign.
    playing: bool,
    last_heard: Instant,
    closing: Option<Closing>,
    /// Why the session ends, once it does: the first cause met.
    ended: Option<Ended>,
    /// The server's shutdown signal, if it has one.
    shutdown: Option<watch::Receiver<bool>>,
    /// The server is shutting down: the command in flight is answered, then the socket
    /// closes as going away.
    stopping: bool,
}

async fn next_delivery(watch: &mut Option<Watch>) -> Option<Arc<Delivery>> {
    match watch {
        Some(w) => w.sub.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves once the server starts shutting down (never, without a signal, or once its
/// sender is gone).
async fn shutting_down(shutdown: &mut Option<watch::Receiver<bool>>) {
    let signalled = match shutdown {
        Some(rx) => rx.wait_for(|stop| *stop).await.is_ok(),
        None => false,
    };
    if !signalled {
        std::future::pending::<()>().await;
    }
}

async fn next_reply(inflight: &mut Option<BoxFuture<'static, Reply>>) -> Reply {
    match inflight {
        Some(future) => {
            let reply = future.as_mut().await;
            *inflight = None;
            reply
        }
        None => std::future::pending().await,
    }
}

impl Session {
    async fn serve(&mut self, stream: &mut AggregatedMessageStream) {
        let heartbeat = self.relay.heartbeat;
        let mut tick = tokio::time::interval(heartbeat.interval);
        tick.tick().await;
        while self.closing.is_none() {
            // While frames wait for the client, it gets no more answers to wait for.
            let can_read =
                self.queue.len() < COMMAND_QUEUE && self.outbox.is_empty() && !self.stopping;
            tokio::select! {
                message = stream.recv(), if can_read => match message {
                    Some(Ok(message)) => self.on_message(message),
                    Some(Err(e)) if is_oversized(&e) => self.fail(
                        Ended::BadFrame,
                        "too_large",
                        &format!("messages are at most {MAX_FRAME_BYTES} bytes, in one frame or several"),
                        CloseCode::Size,
                    ),
                    Some(Err(e)) if is_disconnect(&e) => self.drop_client(Ended::Disconnected),
                    Some(Err(e)) if is_invalid_utf8(&e) => self.fail(
                        Ended::BadFrame,
                        "bad_frame",
                        &format!("a text message that is not UTF-8: {e}"),
                        CloseCode::Invalid,
                    ),
                    Some(Err(e)) => self.fail(Ended::BadFrame, "bad_frame", &e.to_string(), CloseCode::Protocol),
                    None => return,
                },
                delivery = next_delivery(&mut self.watch) => match delivery {
                    Some(delivery) => self.on_delivery(&delivery),
                    // The room dropped this subscriber as too slow.
                    None => self.drop_client(Ended::Slow),
                },
                reply = next_reply(&mut self.inflight) => {
                    self.playing = false;
                    self.on_reply(reply);
                }
                _ = tick.tick() => self.on_tick(heartbeat),
                () = shutting_down(&mut self.shutdown), if !self.stopping => self.stopping = true,
                room = self.outbox.ready(), if !self.outbox.is_empty() => match room {
                    Ok(()) => self.drain(),
                    Err(_) => self.drop_client(Ended::Disconnected),
                },
            }
            if self.stopping && self.inflight.is_none() && self.closing.is_none() {
                // Commands not begun are dropped unanswered: the client reconnects and
                // gets the true board with its `hello.ok`.
                self.queue.clear();
                self.end(Ended::Shutdown);
                self.closing = Some(Closing::Close(CloseReason {
                    code: CloseCode::Away,
                    description: Some("the hub is shutting down".into()),
                }));
            }
            // Nor does it start the next command while frames wait: the answers of a
            // burst of commands refused at once (`rate_limited`) came faster than the
            // connection took them, and overflowed the backlog of a client that reads.
            if self.inflight.is_none() && self.outbox.is_empty() {
                if let Some(command) = self.queue.pop_front() {
                    self.start(command);
                }
            }
        }
    }

    fn on_message(&mut self, message: AggregatedMessage) {
        self.last_heard = Instant::now();
        match message {
            AggregatedMessage::Text(text) => match ClientIn::parse(&text) {
                // An idle lane runs the command at once: the queue, and its buffer, are
                // only for commands that arrive while another runs.
                Ok(command) if self.inflight.is_none() && self.queue.is_empty() => {
                    self.start(command)
                }
                Ok(command) => self.queue.push_back(command),
                Err(bad) => self.send(client_out::error(bad.error, Some(&bad.detail), false)),
            },
            AggregatedMessage::Binary(_) => self.send(client_out::error(
                "bad_json",
                Some("messages are JSON text frames"),
                false,
            )),
            AggregatedMessage::Ping(bytes) => self.push(Message::Pong(bytes)),
            AggregatedMessage::Pong(_) => {}
            AggregatedMessage::Close(_) => {
                self.end(Ended::Client);
                self.closing = Some(Closing::Close(CloseCode::Normal.into()));
            }
        }
    }

    /// A client heard from within the last half interval is alive and gets no ping: at
    /// 20,000 sockets, pinging every one every 5 s would be 4,000 pings and as many
    /// pongs a second, as many frames as the moves of a busy hub. (Half, so that a quiet
    /// client whose pong came back just after the last tick is still pinged every tick.)
    fn on_tick(&mut self, heartbeat: Heartbeat) {
        let busy = self.inflight.is_some() || !self.queue.is_empty();
        let silent = self.last_heard.elapsed();
        if self
            .outbox
            .stalled()
            .is_some_and(|since| since.elapsed() > WRITE_TIMEOUT)
        {
            self.drop_client(Ended::Slow);
        } else if !busy && silent > heartbeat.timeout {
            self.fail(
                Ended::Idle,
                "timeout",
                "no frame or pong within the idle timeout",
                CloseCode::Away,
            );
        } else if silent >= heartbeat.interval / 2 {
            self.push(Message::Ping(Bytes::new()));
        }
    }

    /// Sends an `error` with `close: true` and ends the session, for `why`, with a close
    /// frame of `code` whose reason is `error` (the code a client library acts on; the
    /// `error` message says more).
    fn fail(&mut self, why: Ended, error: &str, detail: &str, code: CloseCode) {
        self.end(why);
        self.send(client_out::error(error, Some(detail), true));
        if self.closing.is_none() {
            self.closing = Some(Closing::Close(CloseReason {
                code,
                description: Some(error.to_owned()),
            }));
        }
    }

    /// Hands one frame to the outbox; a client that cannot take it is dropped.
    fn push(&mut self, message: Message) {
        if matches!(self.closing, Some(Closing::Dropped)) {
            return;
        }
        if let Err(why) = self.outbox.push(message) {
            self.drop_client(why);
        }
    }

    /// Moves frames from the backlog to the socket while its channel has room.
    fn drain(&mut self) {
        if let Err(why) = self.outbox.drain() {
            self.drop_client(why);
        }
    }

    /// Sends what waits in the backlog, waiting for the connection as long as it takes.
    async fn flush(&mut self) {
        if let Err(why) = self.outbox.flush().await {
            self.drop_client(why);
        }
    }

    /// Ends the session with no goodbye: the client does not read (`Slow`) or its
    /// connection is gone (`Disconnected`).
    fn drop_client(&mut self, why: Ended) {
        self.end(why);
        if why == Ended::Slow && !matches!(self.closing, Some(Closing::Dropped)) {
            tracing::debug!("dropping a WebSocket client that does not read");
        }
        self.closing = Some(Closing::Dropped);
        self.outbox.clear();
    }

    /// Notes why the session ends, unless an earlier cause already did.
    fn end(&mut self, why: Ended) {
        self.ended.get_or_insert(why);
    }

    fn send(&mut self, frame: ByteString) {
        self.push(Message::Text(frame));
    }

    /// Starts a command's call into the service, or answers at once when it cannot run.
    fn start(&mut self, command: ClientIn) {
        let games = self.relay.games.clone();
        let rooms = self.relay.rooms.clone();
        let future: BoxFuture<'static, Reply> = match command {
            ClientIn::Hello { token: None } => {
                self.role = Role::Spectator;
                self.watch = None;
                self.send(client_out::hello_ok(None, None, None));
                return;
            }
            ClientIn::Hello { token: Some(token) } => Box::pin(async move {
                let seat = match games.open_seat(&token).await {
                    Ok(Some(seat)) => seat,
                    Ok(None) => return Reply::Unauthorized,
                    Err(failure) => return Reply::Failed(failure),
                };
                // Join before reading the state, so no publication falls in between.
                let sub = rooms.subscribe(&seat.inbox, &seat.game, Some(seat.seat));
                let state = games.state(&seat.inbox, &seat.game, Some(seat.seat)).await;
                Reply::Seated { seat, sub, state }
            }),
            ClientIn::Subscribe { inbox, game } => {
                if matches!(self.role, Role::Unknown) {
                    return self.refuse_unknown();
                }
                Box::pin(async move {
                    let sub = rooms.subscribe(&inbox, &game, None);
                    let state = games.state(&inbox, &game, None).await;
                    Reply::Watching { sub, state }
                })
            }
            ClientIn::Board => {
                if matches!(self.role, Role::Unknown) {
                    return self.refuse_unknown();
                }
                let Some(watch) = &self.watch else {
                    return self.send(client_out::error(
                        "not_found",
                        Some("this socket watches no game yet: game.subscribe to one, or hello with a seat token"),
                        false,
                    ));
                };
                let (inbox, game) = watch.sub.game();
                let (inbox, game, viewer) = (inbox.to_owned(), game.to_owned(), watch.viewer);
                Box::pin(async move { Reply::Board(games.state(&inbox, &game, viewer).await) })
            }
            ClientIn::Move { mv, reference } => {
                let Some(seat) = self.seat() else {
                    return self.refuse_unseated();
                };
                self.playing = true;
                Box::pin(async move {
                    let result = match mv {
                        Ok(mv) => games.play(&seat, mv).await,
                        Err(reason) => Err(Failure::new(
                            reason.code(),
                            "the move is not strict JSON (DESIGN.md section 1)",
                        )),
                    };
                    Reply::played(games.as_ref(), &seat, reference, result).await
                })
            }
            ClientIn::Resign { reference } => {
                let Some(seat) = self.seat() else {
                    return self.refuse_unseated();
                };
                self.playing = true;
                Box::pin(async move {
                    let result = games.resign(&seat).await;
                    Reply::played(games.as_ref(), &seat, reference, result).await
                })
            }
        };
        self.inflight = Some(future);
    }

    fn seat(&self) -> Option<SeatRef> {
        match &self.role {
            Role::Seated(seat) => Some(seat.clone()),
            _ => None,
        }
    }

    fn refuse_unknown(&mut self) {
        self.send(client_out::error(
            "unauthorized",
            Some("say hello first"),
            false,
        ));
    }

    fn refuse_unseated(&mut self) {
        match self.role {
            Role::Unknown => self.refuse_unknown(),
            _ => self.send(client_out::error(
                "forbidden",
                Some("a spectator cannot play: hello with a seat token"),
                false,
            )),
        }
    }

    fn on_reply(&mut self, reply: Reply) {
        match reply {
            Reply::Unauthorized => self.send(client_out::error(
                "unauthorized",
                Some("unknown seat token"),
                false,
            )),
            Reply::Failed(failure) => self.send(client_out::error(
                &failure.error,
                failure.detail.as_deref(),
                false,
            )),
            Reply::Seated { seat, sub, state } => {
                self.send(client_out::hello_ok(
                    Some(seat.seat),
                    Some(&seat.inbox),
                    Some(&seat.game),
                ));
                self.watch = Some(Watch::new(sub, Some(seat.seat)));
                self.role = Role::Seated(seat);
                self.show(state, None);
            }
            Reply::Watching { sub, state } => {
                if state.is_ok() {
                    self.role = Role::Spectator;
                    self.watch = Some(Watch::new(sub, None));
                }
                self.show(state, None);
            }
            Reply::Board(state) => self.show(state, None),
            Reply::Played {
                reference,
                result,
                truth,
            } => self.on_played(reference, result, truth),
        }
    }
}

impl Reply {
    async fn played(
        games: &dyn crate::service::Games,
        seat: &SeatRef,
        reference: Option<Ref>,
        result: Result<Outcome, Failure>,
    ) -> Reply {
        let truth = match &result {
            Err(_) => Some(games.state(&seat.inbox, &seat.game, Some(seat.seat)).await),
            Ok(_) => None,
        };
        Reply::Played {
            reference,
            result,
            truth,
        }
    }
}
