//! Rock-paper-scissors custody (DESIGN.md section 3): the hub keeps a seat's secret when
//! the seat cannot (a chat box, a seated HTTP client).
//!
//! The seat sends only `{"choice"}`. On the seat's commit turn the hub writes
//! `{"commit": sha256(choice:nonce)}`; once both commits are in, it writes the reveal on the
//! seat's turn (X's first). The nonce is never stored: it is HKDF of the hub secret with
//! `inbox|game|seat|seq-of-the-commit`, so at reveal time any hub node recomputes it and
//! recovers the choice by testing the three choices against the commit.
//!
//! A choice sent before its seat's commit turn is *held* in the actor's memory until that
//! turn. Only the fact that a choice is held is written down (in the Meta store), never the
//! choice; after a restart the seat is told `held_choice_lost` and chooses again.
//!
//! What it deliberately does not do: decide whose turn it is (the protocol's
//! `Board::custody` says so) or check the game's rules (the referee does, on the event).

use games::crypto;
use games::protocol::Protocol;
use games::Seat;
use serde_json::{json, Value};

pub const CHOICES: [&str; 3] = ["rock", "paper", "scissors"];

/// True when `protocol` is played with commit-reveal custody (its spec has a
/// `commit_reveal` section): the hub (or the agent) writes commits and reveals, and the
/// seat sends `{"choice"}`. The commit and reveal payloads written are rock-paper-scissors'
/// (`CHOICES`, `{"commit"}`, `{"choice", "nonce"}`), the one such game there is.
pub fn is_custodial(protocol: &dyn Protocol) -> bool {
    protocol
        .spec()
        .get("commit_reveal")
        .is_some_and(|v| !v.is_null())
}

/// Reads `{"choice": …}` from a move body; `None` when it is not exactly a known choice.
pub fn parse_choice(mv: &Value) -> Option<&'static str> {
    let m = mv.as_object().filter(|m| m.len() == 1)?;
    let c = m.get("choice")?.as_str()?;
    CHOICES.into_iter().find(|k| *k == c)
}

/// Everything needed to derive a seat's nonces.
pub struct Custodian<'a> {
    pub secret: &'a [u8],
    pub inbox: &'a str,
    pub game: &'a str,
}

impl Custodian<'_> {
    fn nonce(&self, seat: Seat, commit_seq: u64) -> String {
        crypto::rps_nonce(self.secret, self.inbox, self.game, seat, commit_seq)
    }

    /// The commit move for `choice`, to be written at `seq`.
    pub fn commit_move(&self, seat: Seat, seq: u64, choice: &str) -> Value {
        let nonce = self.nonce(seat, seq);
        json!({ "commit": crypto::rps_commit(choice, &nonce) })
    }

    /// The choice behind a commit this custodian wrote at `commit_seq`, if it wrote it.
    pub fn recover(&self, seat: Seat, commit_seq: u64, commit: &str) -> Option<&'static str> {
        let nonce = self.nonce(seat, commit_seq);
        CHOICES
            .into_iter()
            .find(|c| crypto::rps_commit(c, &nonce) == commit)
    }

    /// The reveal move of the commit written at `commit_seq`, when this custodian wrote it.
    pub fn reveal_move(&self, seat: Seat, commit_seq: u64, commit: &str) -> Option<Value> {
        let choice = self.recover(seat, commit_seq, commit)?;
        Some(json!({ "choice": choice, "nonce": self.nonce(seat, commit_seq) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn custodian() -> Custodian<'static> {
        Custodian {
            secret: b"a hub secret of some length",
            inbox: "lobby",
            game: "g7",
        }
    }

    #[test]
    fn a_commit_is_revealed_by_recomputing_its_nonce() {
        let c = custodian();
        for choice in CHOICES {
            let mv = c.commit_move(Seat::O, 2, choice);
            let commit = mv["commit"].as_str().expect("commit text");
            assert_eq!(c.recover(Seat::O, 2, commit), Some(choice));
            let reveal = c.reveal_move(Seat::O, 2, commit).expect("revealable");
            assert_eq!(reveal["choice"], choice);
            let nonce = reveal["nonce"].as_str().expect("nonce text");
            assert_eq!(nonce.len(), 64);
            assert_eq!(crypto::rps_commit(choice, nonce), commit);
        }
    }

    #[test]
    fn a_commit_of_another_seat_or_seq_is_not_recovered() {
        let c = custodian();
        let mv = c.commit_move(Seat::X, 1, "paper");
        let commit = mv["commit"].as_str().expect("commit text");
        assert_eq!(c.recover(Seat::O, 1, commit), None);
        assert_eq!(c.recover(Seat::X, 3, commit), None);
    }

    #[test]
    fn choices_are_read_strictly() {
        assert_eq!(parse_choice(&json!({"choice": "rock"})), Some("rock"));
        assert_eq!(parse_choice(&json!({"choice": "Rock"})), None);
        assert_eq!(
            parse_choice(&json!({"choice": "rock", "nonce": "00"})),
            None
        );
        assert_eq!(parse_choice(&json!({"commit": "rock"})), None);
        assert_eq!(parse_choice(&json!("rock")), None);
    }
}
