//! The protocol core of pipehub: everything a reader of a game log needs, and nothing else.
//!
//! An event is one JSON object (see [`event`]). Its canonical bytes are its RFC 8785 form
//! without `sig` ([`canonical`]); the SHA-256 of those bytes chains it to the next event of
//! its game, and an Ed25519 signature over the same bytes ties it to its seat ([`crypto`]).
//! The rules of each game live in a protocol plugin ([`protocol`]): a pure reducer, a
//! per-seat redactor and a text renderer. [`verify`] walks a game's events in inbox order
//! and gives each one a verdict with the first failing reason ([`reason`]).
//!
//! This crate does no I/O and knows nothing of HTTP, actors, Redis or files: the hub, the
//! `pipehub verify` command and the MCP agent all use the same verifier, so they cannot
//! disagree about what a log means.

pub mod canonical;
pub mod crypto;
pub mod event;
pub mod json;
pub mod key;
pub mod protocol;
pub mod reason;
pub mod report;
pub mod verify;

pub use event::{Action, Event, Seat, Status};
pub use protocol::{Board, GameResult, Protocol, Registry, Viewer, WinBy};
pub use reason::Reason;
