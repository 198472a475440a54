//! A session's sending side: a bounded sender that never waits on its client.
//!
//! Frames go straight into the socket's own bounded channel to the connection (actix-ws's,
//! [`SOCKET_CHANNEL`] frames); what does not fit waits in a short backlog, drained as the
//! connection takes frames. A frame is handed on, queued, or refused at once: a client
//! whose backlog is full does not read, and one whose channel is closed is gone, and the
//! caller is told to drop it ([`Ended::Slow`], [`Ended::Disconnected`]). The session's
//! `select!` waits for room ([`Outbox::ready`]) only while frames wait, with its own
//! waker.
//!
//! What it does not do: decide when a client that takes no frame has waited too long (the
//! session's heartbeat does, from [`Outbox::stalled`]), know what a frame says, or close
//! the connection (dropping the socket's sender does, once the session ends).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use actix_ws::Message;
use futures_util::Sink;

use super::SEND_QUEUE;
use crate::service::Ended;

/// Of [`SEND_QUEUE`], what actix-ws's channel to the connection holds (`actix_ws::handle`);
/// the rest wait in the session's backlog.
const SOCKET_CHANNEL: usize = 32;

pub(super) struct Outbox {
    /// The sending half of the socket: a bounded channel to the connection.
    socket: actix_ws::Session,
    /// Frames the socket's channel had no room for yet, oldest first.
    backlog: VecDeque<Message>,
    /// Since when the backlog has not been empty.
    stalled: Option<Instant>,
}

impl Outbox {
    pub(super) fn new(socket: actix_ws::Session) -> Outbox {
        Outbox {
            socket,
            backlog: VecDeque::new(),
            stalled: None,
        }
    }

    /// Whether no frame waits in the backlog.
    pub(super) fn is_empty(&self) -> bool {
        self.backlog.is_empty()
    }

    /// Since when the backlog has not been empty, if it is not.
    pub(super) fn stalled(&self) -> Option<Instant> {
        self.stalled
    }

    /// Hands one frame to the socket, or to the backlog when the socket's channel is full
    /// (or frames already wait there); a client with a full backlog is to be dropped.
    pub(super) fn push(&mut self, message: Message) -> Result<(), Ended> {
        if self.backlog.is_empty() {
            match self.offer() {
                Poll::Ready(true) => {
                    if Pin::new(&mut self.socket).start_send(message).is_err() {
                        return Err(Ended::Disconnected);
                    }
                    return Ok(());
                }
                Poll::Ready(false) => return Err(Ended::Disconnected),
                Poll::Pending => {}
            }
        }
        if self.backlog.len() >= SEND_QUEUE - SOCKET_CHANNEL {
            return Err(Ended::Slow);
        }
        self.backlog.push_back(message);
        self.stalled.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Whether the socket's channel has room now (`Ready(true)`), is full (`Pending`) or
    /// is closed (`Ready(false)`); never waits. The session's `select!` waits for room
    /// whenever the backlog is not empty, with its own waker.
    fn offer(&mut self) -> Poll<bool> {
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        Pin::new(&mut self.socket)
            .poll_ready(&mut cx)
            .map(|ready| ready.is_ok())
    }

    /// Resolves once the socket's channel has room, or is closed.
    pub(super) async fn ready(&mut self) -> Result<(), actix_ws::Closed> {
        poll_fn(|cx| Pin::new(&mut self.socket).poll_ready(cx)).await
    }

    /// Moves frames from the backlog to the socket while its channel has room.
    pub(super) fn drain(&mut self) -> Result<(), Ended> {
        while let Some(message) = self.backlog.pop_front() {
            if Pin::new(&mut self.socket).start_send(message).is_err() {
                return Err(Ended::Disconnected);
            }
            if self.backlog.is_empty() {
                break;
            }
            match self.offer() {
                Poll::Ready(true) => {}
                Poll::Ready(false) => return Err(Ended::Disconnected),
                Poll::Pending => {
                    // Progress: the stall is timed from the last frame the socket took.
                    self.stalled = Some(Instant::now());
                    return Ok(());
                }
            }
        }
        self.backlog = VecDeque::new();
        self.stalled = None;
        Ok(())
    }

    /// Sends what waits in the backlog, waiting for the connection as long as it takes.
    pub(super) async fn flush(&mut self) -> Result<(), Ended> {
        while !self.backlog.is_empty() {
            if self.ready().await.is_err() {
                return Ok(());
            }
            self.drain()?;
        }
        Ok(())
    }

    /// Forgets every frame that waits: the client is being dropped.
    pub(super) fn clear(&mut self) {
        self.backlog = VecDeque::new();
        self.stalled = None;
    }
}
