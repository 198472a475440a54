//! Reason codes: why an input or an event was refused.
//!
//! The codes are part of the wire contract (DESIGN.md sections 1 and 2): the CLI prints
//! them, the HTTP API answers with them, and other programs match on the strings, so each
//! variant's text is fixed here once.

use std::fmt;

/// A reason an input line or an event was refused. The order of the variants follows the
/// order in which the checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    // Section 1: refused before any game logic runs.
    TooLarge,
    BadJson,
    DuplicateKey,
    BadNumber,
    Schema,
    // Section 2: before a genesis.
    NoStart,
    BadStart,
    StartHasMove,
    UnknownProtocol,
    BadRules,
    // Section 2: after a genesis.
    TwoGenesis,
    AfterEnd,
    StaleSeq,
    BadSeq,
    BadPrevHash,
    WrongPlayer,
    MissingSignature,
    BadSignature,
    IllegalMove,
    StatusMismatch,
}

impl Reason {
    pub const ALL: [Reason; 20] = [
        Reason::TooLarge,
        Reason::BadJson,
        Reason::DuplicateKey,
        Reason::BadNumber,
        Reason::Schema,
        Reason::NoStart,
        Reason::BadStart,
        Reason::StartHasMove,
        Reason::UnknownProtocol,
        Reason::BadRules,
        Reason::TwoGenesis,
        Reason::AfterEnd,
        Reason::StaleSeq,
        Reason::BadSeq,
        Reason::BadPrevHash,
        Reason::WrongPlayer,
        Reason::MissingSignature,
        Reason::BadSignature,
        Reason::IllegalMove,
        Reason::StatusMismatch,
    ];

    /// The wire code, e.g. `bad_prev_hash`.
    pub fn code(self) -> &'static str {
        match self {
            Reason::TooLarge => "too_large",
            Reason::BadJson => "bad_json",
            Reason::DuplicateKey => "duplicate_key",
            Reason::BadNumber => "bad_number",
            Reason::Schema => "schema",
            Reason::NoStart => "no_start",
            Reason::BadStart => "bad_start",
            Reason::StartHasMove => "start_has_move",
            Reason::UnknownProtocol => "unknown_protocol",
            Reason::BadRules => "bad_rules",
            Reason::TwoGenesis => "two_genesis",
            Reason::AfterEnd => "after_end",
            Reason::StaleSeq => "stale_seq",
            Reason::BadSeq => "bad_seq",
            Reason::BadPrevHash => "bad_prev_hash",
            Reason::WrongPlayer => "wrong_player",
            Reason::MissingSignature => "missing_signature",
            Reason::BadSignature => "bad_signature",
            Reason::IllegalMove => "illegal_move",
            Reason::StatusMismatch => "status_mismatch",
        }
    }

    /// Parses a wire code back into a reason.
    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// True for the refusals of section 1, which happen before an input is an event.
    pub fn is_input(self) -> bool {
        self <= Reason::Schema
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A refusal: a reason code and an optional detail (e.g. `illegal_move` / `occupied`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub detail: Option<String>,
}

impl Refusal {
    pub fn new(reason: Reason) -> Self {
        Refusal {
            reason,
            detail: None,
        }
    }

    pub fn with(reason: Reason, detail: impl Into<String>) -> Self {
        Refusal {
            reason,
            detail: Some(detail.into()),
        }
    }
}

impl From<Reason> for Refusal {
    fn from(reason: Reason) -> Self {
        Refusal::new(reason)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.detail {
            Some(d) => write!(f, "{} ({d})", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

impl std::error::Error for Refusal {}
