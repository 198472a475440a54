//! `pipehub`: parses the command line and hands over to the library.

use clap::{Parser, Subcommand};
use hub::cli;

/// The allocator: a move allocates many small, short-lived buffers on several threads, which
/// mimalloc serves several times faster than the system allocator (measured in docs/decisions.md).
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

/// mimalloc's `arena_eager_commit` option (`mi_option_t` 4, `MIMALLOC_ARENA_EAGER_COMMIT`).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
/// mimalloc's `purge_delay` option (`mi_option_t` 15, `MIMALLOC_PURGE_DELAY`), in ms.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Two of mimalloc's options, for a server that holds many small, long-lived connections:
///
/// - Arena memory is committed as it is used, not the whole arena up front: with eager
///   commit, memory freed by one thread stays resident, and the hub held about 40 % more
///   memory per open game for no throughput gain.
/// - Freed memory is returned to the system at once rather than a second later (mimalloc
///   3's default): under load the moves in flight churn through memory that the delay
///   kept resident, and the hub held about 5 % more at the end of a saturated run, for no
///   throughput we could measure.
///
/// (Both measured with loadgen, back to back; docs/decisions.md, Performance.) They must be
/// set before the first allocation reserves an arena, so this runs as a constructor, before
/// the Rust runtime allocates anything. `MIMALLOC_ARENA_EAGER_COMMIT` and
/// `MIMALLOC_PURGE_DELAY` in the environment still decide when they are set.
extern "C" fn tune_allocator() {
    // Nothing here may allocate: an allocation would reserve the first arena.
    // SAFETY: getenv reads the environment without allocating (nothing else runs yet), and
    // mi_option_set sets one of mimalloc's documented options.
    unsafe {
        if libc::getenv(c"MIMALLOC_ARENA_EAGER_COMMIT".as_ptr()).is_null() {
            libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        }
        if libc::getenv(c"MIMALLOC_PURGE_DELAY".as_ptr()).is_null() {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
        }
    }
}

#[used]
#[link_section = ".init_array"]
static TUNE_ALLOCATOR: extern "C" fn() = tune_allocator;

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
            eprintln!("pipehub: {}", cli::error_text(&err));
            std::process::exit(2);
        }
    }
}
