//! `pipehub mcp --hub URL [--inbox NAME] [--state-dir DIR]`: the local agent an AI
//! assistant uses to play on a hub, as a stdio MCP server (the work is in [`crate::mcp`];
//! this module reads flags, sets up logging on standard error, and runs it).
//!
//! Standard output belongs to the MCP client: nothing else is ever written there.

use std::path::PathBuf;

use anyhow::Context;

use crate::client::HubUrl;
use crate::mcp::{self, Config};

/// Arguments of `pipehub mcp`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Run the local agent an AI assistant plays through: a stdio MCP server",
    long_about = "Run the local agent an AI assistant plays through: an MCP server on standard \
                  input and output with the tools game_new, game_join, game_move, game_board, \
                  game_wait, game_resign and game_list.\n\n\
                  The agent mints and keeps each seat's Ed25519 key and seat token in its state \
                  directory (readable by its user only), signs every event itself, keeps \
                  rock-paper-scissors choices secret until they are revealed, and verifies the \
                  hub's log of a game before it shows a board. The model never sees a key, a \
                  nonce or a token.\n\n\
                  Logs go to standard error; PIPEHUB_LOG (or RUST_LOG) sets the filter."
)]
pub struct Args {
    /// The hub's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long, env = "PIPEHUB_HUB", value_name = "URL")]
    pub hub: String,

    /// The inbox new games go to.
    #[arg(
        long,
        env = "PIPEHUB_INBOX",
        default_value = "default",
        value_name = "NAME"
    )]
    pub inbox: String,

    /// Where the agent keeps its seats (keys and tokens). Default:
    /// $XDG_CONFIG_HOME/pipehub, else ~/.config/pipehub.
    #[arg(long, env = "PIPEHUB_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Runs the agent until the MCP client closes standard input.
pub fn run(args: Args) -> anyhow::Result<i32> {
    init_logging();
    let state_dir = match args.state_dir {
        Some(d) => d,
        None => mcp::default_state_dir()
            .context("no state directory: set --state-dir, XDG_CONFIG_HOME or HOME")?,
    };
    let hub = HubUrl::parse(&args.hub).map_err(|e| anyhow::anyhow!("--hub: {e}"))?;
    let config = Config {
        hub: hub.as_str().to_string(),
        inbox: args.inbox,
        state_dir,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(mcp::run(config))?;
    // The watchers' sockets and a blocked read of standard input must not keep the
    // process alive once the client has gone.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    Ok(0)
}

/// Log directives that keep the seat token out of the transports' own logs.
const QUIET: [&str; 7] = [
    "tungstenite=info",
    "tokio_tungstenite=info",
    "hyper=info",
    "hyper_util=info",
    "reqwest=info",
    "rustls=info",
    "h2=info",
];

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("PIPEHUB_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    // The transports below log whole frames and headers at their most verbose levels, and
    // the seat token travels in those; they are capped whatever the filter asks for.
    let filter = QUIET
        .iter()
        .filter_map(|d| d.parse().ok())
        .fold(filter, EnvFilter::add_directive);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
