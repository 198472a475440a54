//! The engine's errors: why a request to a game was refused before (or instead of) a
//! verdict.
//!
//! A refereed rejection is not an error: an event that reached the inbox and was refused by
//! the chain comes back as a [`super::Posted`] with verdict `rejected`, its capture kept.
//! [`HubError`] covers everything else — credentials, seat rules, caps, malformed requests,
//! and a store that cannot take writes — and knows its HTTP status and wire code, so the
//! HTTP layer, the relay and the agent all answer the same way. The store's own failures
//! stay what they are ([`HubError::Store`] keeps the [`StoreError`], with its causes and
//! its kind: down, or damaged, which is logged at ERROR as it is converted), and the hub's
//! own reasons for a 503 are named by [`Unavailable`], each with its underlying error as
//! the source where there is one; on the wire both kinds of 503 read `unavailable`, with
//! the reason's text as the detail.

use games::reason::Refusal;

use crate::inbox::{BadCapture, StoreError};

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
    /// An `Idempotency-Key` sent again with another request than the one it was first
    /// sent with, or after the time a repeat is answered.
    #[error("idempotency_key_reused: {0}")]
    KeyReused(String),
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
    Unavailable(#[source] Unavailable),
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
            HubError::Refused(_) | HubError::KeyReused(_) => 422,
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
            HubError::KeyReused(_) => "idempotency_key_reused",
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
            | HubError::KeyReused(d) => Some(d.clone()),
            HubError::Unavailable(why) => Some(why.to_string()),
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

/// Why the hub, for a reason of its own and not its store's, cannot serve a request now
/// (503 `unavailable`). Each reason's text is the wire `detail`, so clients read exactly
/// what they read before these reasons had names; an underlying error is kept as the
/// source, and named in the text only where the text always named it.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// A change of a game's seating lost to other nodes' changes every time it tried.
    #[error("the game kept changing on other hub nodes; try again")]
    Contended,
    /// Creates racing on several nodes took each other's room under the per-person cap,
    /// and this one gave its game back: a try again may pass.
    #[error("games were being created at once on other hub nodes; try again")]
    CreatesRacing,
    /// Another game already holds the new game's id.
    #[error("game id already reserved")]
    IdReserved,
    /// Every pairing code drawn for the game was already another game's.
    #[error("could not draw a fresh pairing code")]
    NoFreshCode,
    /// A seating record could not be written as JSON.
    #[error("cannot encode a record: {0}")]
    Encode(#[source] serde_json::Error),
    /// The inbox cannot take writes, so nobody is seated: the game could not start.
    #[error("the store cannot take writes: no game can start now")]
    InboxReadOnly,
    /// The game's actor stopped, or did not answer in time, each time it was asked.
    #[error("the game's actor did not answer")]
    ActorSilent,
    /// Redis failed while a write was handed to the shard's owner.
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    /// The shard's owner did not reply to a handed-over write within the wait.
    #[error("the shard's owner did not answer in time; try again")]
    OwnerTimeout,
    /// The owner's reply to a handed-over write was not JSON.
    #[error("an unreadable reply from the owner")]
    OwnerReply(#[source] serde_json::Error),
    /// The owner's reply named a capture that is not `shard:pos`.
    #[error("an unreadable capture from the owner")]
    OwnerCapture(#[source] BadCapture),
    /// The owner refused a handed-over write with a code this node does not answer with
    /// itself (the owner's own 503, a cap): its detail, or else its code, is passed on.
    #[error("{}", .detail.as_deref().unwrap_or(.code))]
    Owner {
        code: String,
        detail: Option<String>,
    },
}

impl From<Unavailable> for HubError {
    fn from(why: Unavailable) -> Self {
        HubError::Unavailable(why)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of the hub's own reasons answers 503 `unavailable` with the detail text it had
    /// when it was a free string: clients read the text, so naming the reasons changed
    /// nothing on the wire.
    #[test]
    fn the_hubs_own_reasons_keep_their_wire_detail() {
        let json_error = || serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let redis_error = || redis::RedisError::from((redis::ErrorKind::ResponseError, "no"));
        let table: Vec<(Unavailable, String)> = vec![
            (
                Unavailable::Contended,
                "the game kept changing on other hub nodes; try again".into(),
            ),
            (
                Unavailable::CreatesRacing,
                "games were being created at once on other hub nodes; try again".into(),
            ),
            (Unavailable::IdReserved, "game id already reserved".into()),
            (
                Unavailable::NoFreshCode,
                "could not draw a fresh pairing code".into(),
            ),
            (
                Unavailable::Encode(json_error()),
                format!("cannot encode a record: {}", json_error()),
            ),
            (
                Unavailable::InboxReadOnly,
                "the store cannot take writes: no game can start now".into(),
            ),
            (
                Unavailable::ActorSilent,
                "the game's actor did not answer".into(),
            ),
            (
                Unavailable::Redis(redis_error()),
                format!("redis: {}", redis_error()),
            ),
            (
                Unavailable::OwnerTimeout,
                "the shard's owner did not answer in time; try again".into(),
            ),
            (
                Unavailable::OwnerReply(json_error()),
                "an unreadable reply from the owner".into(),
            ),
            (
                Unavailable::OwnerCapture(BadCapture),
                "an unreadable capture from the owner".into(),
            ),
            (
                Unavailable::Owner {
                    code: "too_many_captures".into(),
                    detail: Some("at most 9 captures per game".into()),
                },
                "at most 9 captures per game".into(),
            ),
            (
                Unavailable::Owner {
                    code: "mystery".into(),
                    detail: None,
                },
                "mystery".into(),
            ),
        ];
        for (why, detail) in table {
            let err = HubError::from(why);
            assert_eq!(
                (err.status(), err.code(), err.detail()),
                (503, "unavailable", Some(detail.clone())),
                "{err:?}"
            );
            assert_eq!(err.to_string(), format!("unavailable: {detail}"));
        }
    }

    /// An underlying failure stays reachable as the source, not only as text.
    #[test]
    fn the_underlying_failure_is_kept_as_the_source() {
        use std::error::Error as _;
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let err = HubError::from(Unavailable::OwnerReply(json));
        let why = err.source().expect("the reason");
        let cause = why.source().expect("the JSON error");
        assert!(cause.is::<serde_json::Error>(), "{cause:?}");
        let err = HubError::from(Unavailable::OwnerCapture(BadCapture));
        let cause = err.source().and_then(|why| why.source());
        assert!(cause.is_some_and(|c| c.is::<BadCapture>()));
        assert!(HubError::from(Unavailable::IdReserved)
            .source()
            .and_then(|why| why.source())
            .is_none());
    }
}
