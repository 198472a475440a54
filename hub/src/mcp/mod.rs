//! `pipehub mcp`: the local agent through which an AI assistant plays on a hub for its
//! person, over the Model Context Protocol on standard input and output.
//!
//! The model never holds a secret. The agent mints each seat's Ed25519 key, keeps it with
//! the seat token in a private directory ([`store`]), registers only the public key, and
//! signs every event itself — the start too, when its seat is X (DESIGN.md section 4). In
//! rock-paper-scissors the model sends only `{"choice"}`: the agent is the custodian and
//! writes the commit on its seat's turn and the reveal once both commits are in, with a
//! nonce derived from the seat key (section 3), so nothing but the key needs keeping.
//!
//! The agent does not trust the hub. Before it shows a board it fetches the game's
//! captures and replays them through the same verifier the hub runs ([`verify`]); a log
//! that does not verify is reported to the model as a failure, never shown. The state it
//! returns is built from its own verified chain and the protocol's redactor for its seat.
//!
//! Layout: [`client`] speaks the hub's HTTP API, [`watch`] keeps one WebSocket per open
//! seat (it wakes `game_wait` and triggers the agent's own duties: starts, commits of held
//! choices, reveals), [`seat`] is one seat's serialized sync-and-act step, [`agent`] the
//! tools' logic, [`state`] the shape of a result, [`tools`] the MCP server.
//!
//! It also remembers, per seat and on disk, the newest event it signed and the newest head
//! it verified, so that a hub cannot roll a game back or collect two signed events at one
//! seq, even across a restart of the agent.
//!
//! What it deliberately does not do: choose moves (the person does, through the model),
//! hold more than one seat of the same game (it refuses its own pairing code), or write
//! anything to standard output that is not MCP (its logs go to standard error).

pub mod agent;
pub mod client;
pub mod seat;
pub mod state;
pub mod store;
pub mod tools;
pub mod verify;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

/// What the agent is started with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The hub's base URL, e.g. `http://127.0.0.1:8080`.
    pub hub: String,
    /// Where new games go.
    pub inbox: String,
    /// The directory of the agent's seats (keys and tokens).
    pub state_dir: PathBuf,
}

/// Everything that can go wrong in a tool. Messages name the reason and never a key,
/// nonce or token.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The hub answered with an error: a refusal before the inbox (4xx), or a failure of
    /// its own (5xx), after which a post may or may not have been recorded.
    #[error("the hub {}: {code}{}", if *status >= 500 { "failed" } else { "refused" }, detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Hub {
        status: u16,
        code: String,
        detail: Option<String>,
        /// How long the hub asked to wait before trying again (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The hub could not be reached or answered nonsense.
    #[error("the hub could not be reached: {0}")]
    Transport(String),
    /// No connection to the hub could be made, on any try: nothing was sent, so the hub
    /// did nothing (a create or pair that was never sent leaves no seat to wait for).
    #[error("the hub could not be reached: {0}")]
    Unsent(String),
    /// The hub's log of the game does not verify.
    #[error("verification failed: {0}")]
    Verification(String),
    /// The request makes no sense for this seat or game.
    #[error("{0}")]
    Usage(String),
    /// Rules for a new game that its protocol refuses (the hub would answer `bad_rules`),
    /// refused before a seat is made for it.
    #[error("the rules are refused: {0}")]
    Rules(String),
    /// The referee rejected an event this agent wrote (a move, a choice or a resign).
    #[error("the referee refused it: {reason}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Rejected {
        reason: String,
        detail: Option<String>,
    },
    /// The seats directory could not be read or written.
    #[error("the agent's state directory: {0}")]
    Store(#[from] std::io::Error),
    /// The MCP client on standard input and output went away or spoke no MCP.
    #[error("the MCP client: {0}")]
    Client(String),
}

impl AgentError {
    /// A short code for the structured part of an error result.
    pub fn code(&self) -> &str {
        match self {
            AgentError::Hub { code, .. } => code,
            AgentError::Transport(_) | AgentError::Unsent(_) => "unreachable",
            AgentError::Verification(_) => "verification_failed",
            AgentError::Usage(_) => "usage",
            AgentError::Rules(_) => "bad_rules",
            AgentError::Rejected { reason, .. } => reason,
            AgentError::Store(_) => "state_dir",
            AgentError::Client(_) => "client",
        }
    }

    /// Whether the hub refused a post before its inbox (section 5's checks before the
    /// append), so that the event was not appended: 400 (JSON), 401 and 403 (token, seat
    /// rules), 404 (route), 409 (seat rules, the game's capture cap), 413, 415 and 429.
    /// Not 5xx, nor a lost answer: the event may have been appended then.
    pub fn refused_before_the_inbox(&self) -> bool {
        matches!(
            self,
            AgentError::Hub {
                status: 400 | 401 | 403 | 404 | 409 | 413 | 415 | 429,
                ..
            }
        )
    }

    /// True when a request's answer never came, or came as the hub's failure (5xx): the
    /// hub may have done what was asked, and only sending it again can tell.
    pub fn answer_lost(&self) -> bool {
        match self {
            AgentError::Transport(_) => true,
            AgentError::Hub { status, .. } => *status >= 500,
            _ => false,
        }
    }

    /// How long to wait before trying again, when the hub said (a rate limit).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AgentError::Hub { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The default seats directory: `$XDG_CONFIG_HOME/pipehub`, else `~/.config/pipehub`.
pub fn default_state_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("pipehub"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config").join("pipehub"))
}

/// Runs the agent on standard input and output until the client hangs up.
pub async fn run(config: Config) -> Result<(), AgentError> {
    let agent = agent::Agent::open(config).await?;
    tools::serve_stdio(agent).await
}
