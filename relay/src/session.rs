//! One WebSocket connection, from handshake to close.
//!
//! A session is one task running one `select!` over four things: frames from the client,
//! publications from the room it watches, the reply of the command it is running, and a
//! heartbeat tick. A second task, the writer, owns the socket's sending half and drains a
//! bounded queue ([`SEND_QUEUE`]); the session never waits on the client, it only
//! `try_send`s into that queue. A client that does not read fills it and is dropped on the
//! spot (its writer is aborted); it never slows the session's room or anyone's game.
//!
//! Commands run one at a time, in the order they arrived (a lane): at most one call into
//! the service is in flight per socket, and while [`COMMAND_QUEUE`] commands wait the
//! session stops reading the socket, so a flooding client is held back by TCP rather than
//! by memory. Rate limits are the service's: every move and resign is charged to the
//! person's budget, shared with HTTP.
//!
//! Ordering: a session remembers the newest state it has shown (by `seq`) and never shows
//! an older one, so the room's publication and the reply to a move, which race, cannot
//! send the board backwards. While this socket's own move is in flight, publications caused
//! by its seat are held back and the reply sends the newest state with the mover's `ref`,
//! once; a refusal sends `game.refused` and then the true state. A move the service turns
//! down before any verdict (`rate_limited`, `not_started`, `forbidden`, …) is answered the
//! same way, so a chat box that drew the move early takes it back; `error` is kept for
//! messages that are malformed or out of place (no seat, no `hello`).
//!
//! What it does not do: buffer history, retry, or speak for more than one seat at a time
//! (a later `hello` switches seat; `game.subscribe` makes the socket a spectator of any
//! game).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use actix_ws::{AggregatedMessage, AggregatedMessageStream, CloseCode, CloseReason, MessageStream};
use bytestring::ByteString;
use futures_util::future::BoxFuture;
use games::Seat;
use tokio::sync::mpsc;

use crate::endpoint::Relay;
use crate::rooms::{Cause, Delivery, Subscription};
use crate::service::{Failure, Outcome, SeatRef};
use crate::wire::client_in::{ClientIn, Ref};
use crate::wire::client_out::{self, StateFrame};

/// The largest frame a client may send, in bytes (DESIGN.md section 5: 4 KiB).
pub const MAX_FRAME_BYTES: usize = 4096;
/// How often the hub pings an idle client.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// How long a client may stay silent (no frame, no pong) before it is dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Frames waiting for the socket; a client that lets it fill is dropped.
pub const SEND_QUEUE: usize = 64;
/// Commands waiting for the lane; while it is full the socket is not read.
pub const COMMAND_QUEUE: usize = 16;
/// The longest one frame may take to reach the socket's buffer before the writer gives up.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the writer sends.
enum Out {
    Text(ByteString),
    Ping,
    Pong(Bytes),
    Close(CloseReason),
}

/// What a socket acts as.
enum Role {
    /// No `hello` yet.
    Unknown,
    Spectator,
    Seated(SeatRef),
}

/// The game a socket watches, and the newest state it has shown of it.
struct Watch {
    sub: Subscription,
    viewer: Option<Seat>,
    latest: Option<StateFrame>,
    /// A publication of this seat's own event arrived during its move and was not sent.
    held: bool,
}

/// The result of a command's call into the service.
enum Reply {
    Seated {
        seat: SeatRef,
        sub: Subscription,
        state: Result<StateFrame, Failure>,
    },
    Unauthorized,
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

/// Reports the connection to the service for as long as it lives.
struct Connected(Relay);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.games.connection(false);
    }
}

/// Runs one connection until either side closes it.
pub async fn run(relay: Relay, socket: actix_ws::Session, stream: MessageStream) {
    relay.games.connection(true);
    let _connected = Connected(relay.clone());
    let mut stream = stream
        .max_frame_size(MAX_FRAME_BYTES)
        .aggregate_continuations()
        .max_continuation_size(MAX_FRAME_BYTES);
    let (out, rx) = mpsc::channel(SEND_QUEUE);
    let writer = actix_web::rt::spawn(write(socket, rx));
    let mut session = Session {
        relay,
        out,
        role: Role::Unknown,
        watch: None,
        queue: VecDeque::new(),
        inflight: None,
        playing: false,
        last_heard: Instant::now(),
        closing: None,
    };
    session.serve(&mut stream).await;
    let dropped = match session.closing.take() {
        Some(Closing::Dropped) => true,
        // If even the close frame does not fit, the client is not reading: drop it.
        Some(Closing::Close(reason)) => session.out.try_send(Out::Close(reason)).is_err(),
        None => false,
    };
    if dropped {
        writer.abort();
    }
    // Dropping the queue's sender lets the writer finish what is queued and stop.
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
    out: mpsc::Sender<Out>,
    role: Role,
    watch: Option<Watch>,
    queue: VecDeque<ClientIn>,
    inflight: Option<BoxFuture<'static, Reply>>,
    /// The command in flight is this socket's move or resign.
    playing: bool,
    last_heard: Instant,
    closing: Option<Closing>,
}

async fn next_delivery(watch: &mut Option<Watch>) -> Option<Arc<Delivery>> {
    match watch {
        Some(w) => w.sub.recv().await,
        None => std::future::pending().await,
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
            let can_read = self.queue.len() < COMMAND_QUEUE;
            tokio::select! {
                message = stream.recv(), if can_read => match message {
                    Some(Ok(message)) => self.on_message(message),
                    Some(Err(actix_ws::ProtocolError::Overflow)) => self.fail(
                        "too_large",
                        &format!("frames are at most {MAX_FRAME_BYTES} bytes"),
                    ),
                    Some(Err(e)) => self.fail("bad_frame", &e.to_string()),
                    None => return,
                },
                delivery = next_delivery(&mut self.watch) => match delivery {
                    Some(delivery) => self.on_delivery(&delivery),
                    None => self.closing = Some(Closing::Dropped),
                },
                reply = next_reply(&mut self.inflight) => {
                    self.playing = false;
                    self.on_reply(reply);
                }
                _ = tick.tick() => self.on_tick(heartbeat.timeout),
            }
            if self.inflight.is_none() {
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
                Ok(command) => self.queue.push_back(command),
                Err(bad) => self.send(client_out::error(bad.error, Some(&bad.detail), false)),
            },
            AggregatedMessage::Binary(_) => self.send(client_out::error(
                "bad_json",
                Some("messages are JSON text frames"),
                false,
            )),
            AggregatedMessage::Ping(bytes) => self.push(Out::Pong(bytes)),
            AggregatedMessage::Pong(_) => {}
            AggregatedMessage::Close(_) => {
                self.closing = Some(Closing::Close(CloseCode::Normal.into()));
            }
        }
    }

    fn on_tick(&mut self, timeout: Duration) {
        let busy = self.inflight.is_some() || !self.queue.is_empty();
        if !busy && self.last_heard.elapsed() > timeout {
            self.fail("timeout", "no frame or pong within the idle timeout");
        } else {
            self.push(Out::Ping);
        }
    }

    /// Sends an `error` with `close: true` and ends the session.
    fn fail(&mut self, error: &str, detail: &str) {
        self.send(client_out::error(error, Some(detail), true));
        if self.closing.is_none() {
            self.closing = Some(Closing::Close(CloseCode::Policy.into()));
        }
    }

    fn push(&mut self, out: Out) {
        if self.out.try_send(out).is_err() {
            tracing::debug!("dropping a WebSocket client that does not read");
            self.closing = Some(Closing::Dropped);
        }
    }

    fn send(&mut self, frame: ByteString) {
        self.push(Out::Text(frame));
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
                let Some(seat) = games.open_seat(&token).await else {
                    return Reply::Unauthorized;
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
                let Some(watch) = &self.watch else {
                    return self.send(client_out::error(
                        "not_found",
                        Some("this socket watches no game: hello with a token, or game.subscribe"),
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
                    let result = games.play(&seat, mv).await;
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

    fn on_played(
        &mut self,
        reference: Option<Ref>,
        result: Result<Outcome, Failure>,
        truth: Option<Result<StateFrame, Failure>>,
    ) {
        match result {
            Ok(Outcome::Accepted(state)) | Ok(Outcome::Held(state)) => {
                self.show(Ok(state), reference.as_ref());
            }
            Ok(Outcome::Rejected {
                error,
                detail,
                state,
            }) => {
                self.send(client_out::refused(
                    reference.as_ref(),
                    &error,
                    detail.as_deref(),
                ));
                self.show(Ok(state), None);
            }
            Ok(Outcome::Pending) => {
                // No verdict yet: the room will publish it. Release what was held back.
                if self.watch.as_ref().is_some_and(|w| w.held) {
                    self.resend_latest(None);
                }
            }
            Err(failure) => {
                self.send(client_out::refused(
                    reference.as_ref(),
                    &failure.error,
                    failure.detail.as_deref(),
                ));
                match truth {
                    Some(state) => self.show(state, None),
                    None => self.resend_latest(None),
                }
            }
        }
        if let Some(watch) = &mut self.watch {
            watch.held = false;
        }
    }

    /// Shows a state read from the service: the newest of it and what was already shown.
    fn show(&mut self, state: Result<StateFrame, Failure>, reference: Option<&Ref>) {
        match state {
            Ok(state) => {
                if let Some(watch) = &mut self.watch {
                    watch.adopt(state);
                    self.resend_latest(reference);
                } else {
                    self.send(state.to_frame(reference));
                }
            }
            Err(failure) => self.send(client_out::error(
                &failure.error,
                failure.detail.as_deref(),
                false,
            )),
        }
    }

    fn resend_latest(&mut self, reference: Option<&Ref>) {
        let frame = self
            .watch
            .as_ref()
            .and_then(|w| w.latest.as_ref())
            .map(|s| s.to_frame(reference));
        if let Some(frame) = frame {
            self.send(frame);
        }
    }

    fn on_delivery(&mut self, delivery: &Delivery) {
        let playing = self.playing;
        let Some(watch) = &mut self.watch else {
            return;
        };
        // No frame for this viewer: it subscribed after the publisher looked, and the
        // state it reads on joining is at least as new.
        let Some(state) = delivery.views.for_seat(watch.viewer) else {
            return;
        };
        // A publication follows an accepted event, so in a started game its seq is new
        // unless this socket has shown that state already (the reply to its own move, or
        // the state read on joining, came first): then it would be a duplicate.
        let shown = state.seq().is_some()
            && watch
                .latest
                .as_ref()
                .is_some_and(|l| l.seq() == state.seq());
        if shown || !watch.adopt(state.clone()) {
            return;
        }
        let own =
            delivery.cause == Cause::Accepted { seat: watch.viewer } && watch.viewer.is_some();
        if playing && own {
            // The reply to this socket's move sends it, with the mover's ref.
            watch.held = true;
            return;
        }
        let frame = state.frame();
        self.send(frame);
    }
}

impl Watch {
    fn new(sub: Subscription, viewer: Option<Seat>) -> Watch {
        Watch {
            sub,
            viewer,
            latest: None,
            held: false,
        }
    }

    /// Keeps `state` as the newest shown unless an older one; true when kept.
    fn adopt(&mut self, state: StateFrame) -> bool {
        let newer = self.latest.as_ref().is_none_or(|l| state.seq() >= l.seq());
        if newer {
            self.latest = Some(state);
        }
        newer
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

/// One frame handed to the socket: at once when its buffer has room (the usual case, and
/// then no timer is armed), else within [`WRITE_TIMEOUT`]. False when it could not be.
async fn within_timeout<E>(send: impl std::future::Future<Output = Result<(), E>>) -> bool {
    let mut send = std::pin::pin!(send);
    match futures_util::FutureExt::now_or_never(&mut send) {
        Some(sent) => sent.is_ok(),
        None => matches!(tokio::time::timeout(WRITE_TIMEOUT, send).await, Ok(Ok(()))),
    }
}

/// The writer: drains the queue into the socket, each frame within [`WRITE_TIMEOUT`].
async fn write(mut socket: actix_ws::Session, mut rx: mpsc::Receiver<Out>) {
    while let Some(out) = rx.recv().await {
        let sent = match out {
            Out::Text(text) => within_timeout(socket.text(text)).await,
            Out::Ping => within_timeout(socket.ping(b"")).await,
            Out::Pong(bytes) => within_timeout(socket.pong(&bytes)).await,
            Out::Close(reason) => {
                let _ = tokio::time::timeout(WRITE_TIMEOUT, socket.close(Some(reason))).await;
                return;
            }
        };
        if !sent {
            return;
        }
    }
    let _ = tokio::time::timeout(WRITE_TIMEOUT, socket.close(None)).await;
}
