//! The commands of `pipehub`, one module each. Each exposes its clap arguments and a `run`
//! that returns the process exit code.

pub mod loadgen;
pub mod mcp;
pub mod protocol;
pub mod serve;
pub mod verify;
