//! The chain verifier (DESIGN.md section 2): one game's events, in inbox order, each
//! accepted or rejected with the first failing reason.
//!
//! [`GameChain`] is a per-game state machine. The hub's actor keeps one per game and
//! offers it each captured event; `pipehub verify` and the agent keep one per game of a
//! log through [`crate::report::LogVerifier`]. There is one verifier, so they cannot
//! disagree. An event's canonical bytes and hash are computed once, in [`Prepared`]: the
//! hub prepares an event when it appends it (it answers with the hash before the verdict)
//! and hands the same `Prepared` to [`GameChain::offer_prepared`].
//!
//! A game whose first well-formed start names a protocol this reader does not know is
//! **skipped for good**: every later event of that game id is ignored, even a start that
//! names a known protocol. Readers that know the first protocol take that start as the
//! genesis and call the later one `two_genesis`; a reader that does not must not verify a
//! different game under the same id, so it says nothing rather than something else.
//! Starts rejected before the protocol check (`bad_start`, `start_has_move`) do not skip.
//!
//! What it deliberately does not do: parse input (that is [`Event::parse`]), know about
//! inboxes (the hub checks `rules.inboxes` against the inbox it was posted to; here only
//! its shape is checked), or keep events (the caller stores captures).

use crate::canonical;
use crate::crypto::{self, PublicKey};
use crate::event::{Action, Event, Seat, Status};
use crate::protocol::{Board, GameResult, Protocol, Registry, WinBy};
use crate::reason::{Reason, Refusal};
use serde_json::{Map, Value};
use std::sync::Arc;

pub use crate::report::{verify_log, LogVerifier, Mode};

/// An event's canonical bytes and hash, computed once; and, for an event this process
/// signed itself ([`Prepared::sign`]), that signature and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub canonical: Vec<u8>,
    pub hash: String,
    /// The public key and signature of [`Prepared::sign`]: a chain that wants this very
    /// signature from this very key accepts it without verifying what was just signed.
    own_sig: Option<(PublicKey, String)>,
}

impl Prepared {
    pub fn of(event: &Event) -> Prepared {
        let canonical = canonical::canonical_bytes(event);
        let hash = crypto::sha256_hex(&canonical);
        Prepared {
            canonical,
            hash,
            own_sig: None,
        }
    }

    /// Signs the canonical bytes with `key` (the event's `sig`), remembering that the
    /// signature is good for `key`'s public key so that it is never verified again here.
    pub fn sign(&mut self, key: &crypto::SecretKey) -> String {
        let sig = crypto::sign(key, &self.canonical);
        self.own_sig = Some((key.verifying_key(), sig.clone()));
        sig
    }
}

/// What a chain made of one offered event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The event extends the chain; `hash` is its event hash, the chain's new head.
    Accepted { hash: String },
    /// The event is refused; the chain is unchanged.
    Rejected(Refusal),
    /// The game names a protocol this reader does not know; the event is ignored.
    Skipped,
}

/// A signed game's two public keys, from `rules.keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatKeys {
    x: PublicKey,
    o: PublicKey,
}

impl SeatKeys {
    /// Reads `rules.keys`: exactly `{"X": hex64, "O": hex64}`, each a large-order point.
    pub fn from_value(v: &Value) -> Option<SeatKeys> {
        let m = v.as_object().filter(|m| m.len() == 2)?;
        let key = |s: &str| crypto::public_key(m.get(s)?.as_str()?);
        Some(SeatKeys {
            x: key("X")?,
            o: key("O")?,
        })
    }

    pub fn get(&self, seat: Seat) -> &PublicKey {
        match seat {
            Seat::X => &self.x,
            Seat::O => &self.o,
        }
    }

    pub fn hex(&self, seat: Seat) -> String {
        crypto::public_key_hex(self.get(seat))
    }
}

/// A game's state once it has a genesis.
#[derive(Clone, Debug)]
struct Established {
    protocol: Arc<dyn Protocol>,
    rules: Map<String, Value>,
    keys: Option<SeatKeys>,
    inboxes: Option<Vec<String>>,
    board: Box<dyn Board>,
    seq: u64,
    head: String,
    result: GameResult,
    accepted: u64,
}

#[derive(Clone, Debug)]
enum State {
    NoGenesis,
    Skipped,
    Established(Box<Established>),
}

/// One game's chain: offer it the game's events in inbox order.
#[derive(Clone, Debug)]
pub struct GameChain {
    registry: Registry,
    state: State,
}

impl GameChain {
    pub fn new(registry: &Registry) -> GameChain {
        GameChain {
            registry: registry.clone(),
            state: State::NoGenesis,
        }
    }

    /// Offers the next event of this game; computes its canonical bytes and hash.
    pub fn offer(&mut self, event: &Event) -> Verdict {
        self.offer_prepared(event, &Prepared::of(event))
    }

    /// Offers an event whose canonical bytes and hash the caller already computed
    /// (`prepared` must be `Prepared::of(event)`).
    pub fn offer_prepared(&mut self, event: &Event, prepared: &Prepared) -> Verdict {
        let outcome = match &mut self.state {
            State::Skipped => return Verdict::Skipped,
            State::Established(game) => game.offer(event, prepared),
            State::NoGenesis => match self.start(event, prepared) {
                Ok(Some(game)) => {
                    self.state = State::Established(Box::new(game));
                    Ok(())
                }
                Ok(None) => {
                    self.state = State::Skipped;
                    return Verdict::Skipped;
                }
                Err(r) => Err(r),
            },
        };
        match outcome {
            Ok(()) => Verdict::Accepted {
                hash: prepared.hash.clone(),
            },
            Err(r) => Verdict::Rejected(r),
        }
    }

    /// Checks a would-be genesis. `Ok(None)`: the protocol is unknown, skip the game.
    fn start(&self, e: &Event, prepared: &Prepared) -> Result<Option<Established>, Refusal> {
        if e.action != Action::Start {
            return Err(Reason::NoStart.into());
        }
        // Which field was wrong is not part of the wire: section 2 defines no detail here.
        let bad_start = |_field: &str| Err(Refusal::new(Reason::BadStart));
        if e.seq != 0 {
            return bad_start("seq");
        }
        if !e.prev_hash.is_empty() {
            return bad_start("prevHash");
        }
        if e.player != Seat::X {
            return bad_start("player");
        }
        if e.status.is_some_and(|s| s != Status::InProgress) {
            return bad_start("status");
        }
        if e.mv.is_some() {
            return Err(Reason::StartHasMove.into());
        }
        let Some(protocol) = self.registry.resolve(e.protocol.as_deref()) else {
            return Ok(None);
        };
        let mut given = e.rules.clone().unwrap_or_default();
        let keys = match given.remove("keys") {
            None => None,
            Some(v) => Some(SeatKeys::from_value(&v).ok_or(bad_rules("keys"))?),
        };
        let inboxes = match given.remove("inboxes") {
            None => None,
            Some(v) => Some(inboxes_shape(&v).ok_or(bad_rules("inboxes"))?),
        };
        let rules = protocol.rules(&given).map_err(Refusal::from)?;
        if let Some(keys) = &keys {
            check_sig(keys.get(Seat::X), e, prepared)?;
        }
        let board = protocol.new_board(&rules);
        Ok(Some(Established {
            protocol: protocol.clone(),
            result: board.outcome(),
            rules,
            keys,
            inboxes,
            board,
            seq: 0,
            head: prepared.hash.clone(),
            accepted: 1,
        }))
    }

    fn established(&self) -> Option<&Established> {
        match &self.state {
            State::Established(g) => Some(g),
            _ => None,
        }
    }

    /// True once an unknown protocol made this reader skip the game.
    pub fn is_skipped(&self) -> bool {
        matches!(self.state, State::Skipped)
    }

    /// True once the game has a genesis.
    pub fn is_started(&self) -> bool {
        self.established().is_some()
    }

    pub fn protocol(&self) -> Option<&Arc<dyn Protocol>> {
        self.established().map(|g| &g.protocol)
    }

    /// The protocol's rules with defaults filled in (without `keys` and `inboxes`).
    pub fn rules(&self) -> Option<&Map<String, Value>> {
        self.established().map(|g| &g.rules)
    }

    /// The seats' public keys of a signed game.
    pub fn keys(&self) -> Option<&SeatKeys> {
        self.established().and_then(|g| g.keys.as_ref())
    }

    /// `rules.inboxes` of the genesis, when it named any.
    pub fn inboxes(&self) -> Option<&[String]> {
        self.established().and_then(|g| g.inboxes.as_deref())
    }

    pub fn signed(&self) -> bool {
        self.keys().is_some()
    }

    /// The seq of the last accepted event.
    pub fn seq(&self) -> Option<u64> {
        self.established().map(|g| g.seq)
    }

    /// The hash of the last accepted event: the `prevHash` the next event must carry.
    pub fn head(&self) -> Option<&str> {
        self.established().map(|g| g.head.as_str())
    }

    pub fn result(&self) -> Option<GameResult> {
        self.established().map(|g| g.result)
    }

    pub fn board(&self) -> Option<&dyn Board> {
        self.established().map(|g| &*g.board)
    }

    /// How many events this chain accepted, the genesis included.
    pub fn accepted(&self) -> u64 {
        self.established().map_or(0, |g| g.accepted)
    }
}

impl Established {
    fn offer(&mut self, e: &Event, prepared: &Prepared) -> Result<(), Refusal> {
        if e.action == Action::Start {
            return Err(Reason::TwoGenesis.into());
        }
        if self.result.is_over() {
            return Err(Reason::AfterEnd.into());
        }
        if e.seq <= self.seq {
            return Err(Reason::StaleSeq.into());
        }
        if e.seq > self.seq + 1 {
            return Err(Reason::BadSeq.into());
        }
        if e.prev_hash != self.head {
            return Err(Reason::BadPrevHash.into());
        }
        if e.action == Action::Move && e.player != Seat::to_move_at(e.seq) {
            return Err(Reason::WrongPlayer.into());
        }
        if let Some(keys) = &self.keys {
            check_sig(keys.get(e.player), e, prepared)?;
        }
        let result = match (e.action, &e.mv) {
            (Action::Move, Some(mv)) => self.apply(e.player, mv, e.status)?,
            (Action::Resign, _) => {
                if e.status.is_some_and(|s| s != Status::Win) {
                    return Err(Reason::StatusMismatch.into());
                }
                self.board.resign(e.player);
                GameResult::win(e.player.other(), WinBy::Resign)
            }
            // Parsing guarantees a move carries `move`; anything else is no event.
            _ => return Err(Refusal::with(Reason::Schema, "move")),
        };
        self.result = result;
        self.seq = e.seq;
        self.head.clone_from(&prepared.hash);
        self.accepted += 1;
        Ok(())
    }

    /// Applies a move; with a status claim, checks the claim first against the result
    /// the move would give, so that a mismatch leaves the board as it was.
    fn apply(
        &mut self,
        seat: Seat,
        mv: &Value,
        claim: Option<Status>,
    ) -> Result<GameResult, Refusal> {
        match claim {
            None => {
                self.board.apply(seat, mv).map_err(Refusal::from)?;
                Ok(self.board.outcome())
            }
            Some(claim) => {
                let outcome = self.board.outcome_after(seat, mv).map_err(Refusal::from)?;
                if outcome.status != claim {
                    return Err(Reason::StatusMismatch.into());
                }
                self.board.apply(seat, mv).map_err(Refusal::from)?;
                Ok(outcome)
            }
        }
    }
}

fn bad_rules(detail: &str) -> Refusal {
    Refusal::with(Reason::BadRules, detail)
}

/// `rules.inboxes`: 1–8 strings of at most 256 characters.
fn inboxes_shape(v: &Value) -> Option<Vec<String>> {
    let items = v.as_array().filter(|a| (1..=8).contains(&a.len()))?;
    items
        .iter()
        .map(|i| {
            i.as_str()
                .filter(|s| s.chars().count() <= 256)
                .map(str::to_string)
        })
        .collect()
}

fn check_sig(key: &PublicKey, e: &Event, prepared: &Prepared) -> Result<(), Refusal> {
    let own = |sig: &str| {
        prepared
            .own_sig
            .as_ref()
            .is_some_and(|(k, s)| k == key && s == sig)
    };
    match &e.sig {
        None => Err(Reason::MissingSignature.into()),
        // Signed in this process with the secret half of `key` over these very bytes: the
        // strict verification could only agree.
        Some(sig) if own(sig) => Ok(()),
        Some(sig) if crypto::verify(key, &prepared.canonical, sig) => Ok(()),
        Some(_) => Err(Reason::BadSignature.into()),
    }
}
