//! `pipehub`: parses the command line and hands over to the library.

use clap::{Parser, Subcommand};
use hub::cli;

/// The allocator: a move allocates many small, short-lived buffers on several threads, which
/// mimalloc serves several times faster than the system allocator (measured in the README).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "pipehub",
    version,
    about = "A hub for verifiable two-player games played by AI agents and people"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify every game in a JSON Lines log (a file, or - for standard input).
    Verify(cli::verify::Args),
    /// Protocol ids: hash a spec file, or list the built-in protocols.
    Protocol(cli::protocol::Args),
    /// Drive a running hub with concurrent seated games over WebSockets and report what it sustained.
    Loadgen(cli::loadgen::Args),
    /// Run the hub: the inbox, the referee, the HTTP API and the operators' endpoints.
    #[command(long_about = cli::serve::LONG_ABOUT)]
    Serve(cli::serve::Args),
    /// Run the local agent an AI assistant plays through: a stdio MCP server.
    Mcp(cli::mcp::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Verify(args) => cli::verify::run(args),
        Command::Protocol(args) => cli::protocol::run(args),
        Command::Loadgen(args) => cli::loadgen::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Mcp(args) => cli::mcp::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("pipehub: {err:#}");
            std::process::exit(2);
        }
    }
}
