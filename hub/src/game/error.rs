//! The engine's errors: why a request to a game was refused before (or instead of) a
//! verdict.
//!
//! A refereed rejection is not an error: an event that reached the inbox and was refused by
//! the chain comes back as a [`super::Posted`] with verdict `rejected`, its capture kept.
//! [`HubError`] covers everything else — credentials, seat rules, caps, malformed requests,
//! and a store that cannot take writes — and knows its HTTP status and wire code, so the
//! HTTP layer, the relay and the agent all answer the same way. The store's own failures
//! stay what they are ([`HubError::Store`] keeps the [`StoreError`], with its causes and
//! its kind: down, or damaged, which is logged at ERROR as it is converted); on the wire
//! both kinds of 503 read `unavailable`.

use games::reason::Refusal;

use crate::inbox::StoreError;

/// A request the engine refused, or could not serve.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// No seat token, or one this hub does not know.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// A token of another seat or another game, a start that differs from the registered
    /// one, or an anonymous post to a reserved game.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// `POST …/moves` for a seat whose key its agent holds: it must post signed events.
    #[error("agent_held: this seat holds its own key and posts signed events")]
    AgentHeld,
    /// A move (or resign) before the game's start was accepted.
    #[error("not_started: the game has no accepted start yet")]
    NotStarted,
    /// Cancel or a fresh code after O paired.
    #[error("already_paired: the game already has both seats")]
    AlreadyPaired,
    #[error("code_used: this pairing code was used, or replaced by a newer one, or its game was cancelled")]
    CodeUsed,
    #[error("code_expired: this pairing code has expired")]
    CodeExpired,
    /// The person already has the maximum number of open seated games.
    #[error("too_many_games: at most {0} open games per person")]
    TooManyGames(u64),
    /// The game already has the maximum number of captures.
    #[error("too_many_captures: at most {0} captures per game")]
    TooManyCaptures(u64),
    /// Input refused before it was an event (a section-1 reason: `schema`, `bad_json`, …).
    #[error("bad input: {0}")]
    Input(Refusal),
    /// A request the engine refuses on the game's rules without appending anything
    /// (`bad_rules` at create, `unknown_protocol`, an RPS choice that is no choice).
    #[error("refused: {0}")]
    Refused(Refusal),
    /// A malformed request that is not an event (a bad key, a bad cursor, a bad capture).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The hub cannot take this request right now, for a reason of its own (the inbox
    /// cannot take writes, so nobody is seated; a shard's owner cannot be reached).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The store failed to answer: down, out of space, or damaged.
    #[error("unavailable: {0}")]
    Store(#[source] StoreError),
}

impl HubError {
    /// The HTTP status of this error.
    pub fn status(&self) -> u16 {
        match self {
            HubError::Unauthorized(_) => 401,
            HubError::Forbidden(_) => 403,
            HubError::NotFound(_) => 404,
            HubError::AgentHeld
            | HubError::NotStarted
            | HubError::AlreadyPaired
            | HubError::TooManyGames(_)
            | HubError::TooManyCaptures(_) => 409,
            HubError::CodeUsed | HubError::CodeExpired => 410,
            HubError::Input(r) if r.reason == games::Reason::TooLarge => 413,
            HubError::Input(_) | HubError::BadRequest(_) => 400,
            HubError::Refused(_) => 422,
            HubError::Unavailable(_) | HubError::Store(_) => 503,
        }
    }

    /// The wire code of `{"error": CODE, "detail": …}`.
    pub fn code(&self) -> &'static str {
        match self {
            HubError::Unauthorized(_) => "unauthorized",
            HubError::Forbidden(_) => "forbidden",
            HubError::NotFound(_) => "not_found",
            HubError::AgentHeld => "agent_held",
            HubError::NotStarted => "not_started",
            HubError::AlreadyPaired => "already_paired",
            HubError::CodeUsed => "code_used",
            HubError::CodeExpired => "code_expired",
            HubError::TooManyGames(_) => "too_many_games",
            HubError::TooManyCaptures(_) => "too_many_captures",
            HubError::Input(r) | HubError::Refused(r) => r.reason.code(),
            HubError::BadRequest(_) => "bad_request",
            HubError::Unavailable(_) | HubError::Store(_) => "unavailable",
        }
    }

    /// The `detail` of the wire error: a human sentence, or a refusal's detail code.
    pub fn detail(&self) -> Option<String> {
        match self {
            HubError::Unauthorized(d)
            | HubError::Forbidden(d)
            | HubError::NotFound(d)
            | HubError::BadRequest(d)
            | HubError::Unavailable(d) => Some(d.clone()),
            HubError::Store(e) => Some(e.to_string()),
            HubError::Input(r) | HubError::Refused(r) => r.detail.clone(),
            HubError::TooManyGames(n) => Some(format!("at most {n} open games per person")),
            HubError::TooManyCaptures(n) => Some(format!("at most {n} captures per game")),
            HubError::AgentHeld => {
                Some("this seat holds its own key: post signed events to …/events".into())
            }
            HubError::NotStarted => Some("the game has no accepted start yet".into()),
            HubError::AlreadyPaired => Some("the game already has both seats".into()),
            HubError::CodeUsed => Some(
                "this pairing code was used, or replaced by a newer one, or its game was cancelled"
                    .into(),
            ),
            HubError::CodeExpired => Some("this pairing code has expired".into()),
        }
    }
}

impl From<StoreError> for HubError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::BadCursor => HubError::BadRequest("bad cursor".into()),
            StoreError::Corrupt(what) => {
                // Every edge answers 503 (and the HTTP layer logs it at WARN with the
                // route); damage is an operator's matter whatever the edge, so it is
                // said here, once, at ERROR.
                tracing::error!(what = %what, "the store holds damaged data");
                HubError::Store(StoreError::Corrupt(what))
            }
            other => HubError::Store(other),
        }
    }
}
