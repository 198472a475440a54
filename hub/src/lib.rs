//! The pipehub hub and the commands of the `pipehub` binary.
//!
//! The binary in `src/bin/pipehub.rs` only parses flags; every command lives in [`cli`]
//! and calls into the library.

pub mod cli;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod files;
pub mod game;
pub mod http;
pub mod inbox;
pub mod limits;
pub mod loadgen;
pub mod mcp;
pub mod meta;
pub mod meta_redis;
pub mod metrics;
pub mod relay;
pub mod rooms;
pub mod serve;
#[cfg(test)]
mod test_log;
