//! The pipehub WebSocket relay: the `/v1/ws` endpoint that the chat box, the load generator
//! and the agent keep open to play and to watch games.
//!
//! A connection is one [`session`]: it reads JSON text frames ([`wire::client_in`]), runs
//! the commands they carry one at a time through a [`Games`] service, and writes the
//! answers and every room publication back as JSON text frames ([`wire::client_out`]).
//! [`rooms`] keyed by (inbox, game) hold the subscribers; the hub's game actors publish each
//! accepted event's per-seat views into them once, already serialized, and the room hands
//! the same bytes to every socket of the same viewer.
//!
//! Crate boundaries: the hub depends on the relay, never the reverse. The relay states what
//! it needs of games as the [`Games`] trait (open a seat by token, read a state, play,
//! resign); the hub implements it on top of its facade, so a move over a WebSocket and a
//! move over HTTP reach the same referee. The relay holds no game rules, no tokens beyond
//! the connection that presented them, and never sees a raw board: every state it carries
//! was redacted for its viewer before it got here.
//!
//! It caps the sockets one client may hold open ([`cap`]), since a socket, unlike a
//! request, holds its connection for as long as the client likes.
//!
//! What it deliberately does not do: adjudicate, rate-limit events on its own (the service
//! charges the same per-person budget as HTTP), or keep history for reconnecting clients (a client
//! that reconnects says `hello` again and gets the current state, which is complete).

pub mod cap;
pub mod endpoint;
pub mod page;
pub mod rooms;
pub mod service;
pub mod session;
pub mod wire;

pub use cap::{Admitted, Client, SocketCap};
pub use endpoint::{configure, ws, AddressOf, Heartbeat, Relay};
pub use rooms::{Cause, Delivery, Rooms, Subscription, Views, Watchers};
pub use service::{Ended, Failure, Games, Outcome, SeatRef};
pub use wire::client_out::StateFrame;
