//! One seat of the agent: verify the game, then do what the agent owes on its own.
//!
//! [`SeatHandle::sync`] is the one step every tool and every WebSocket wake-up runs: fetch
//! the game's captures, verify them ([`super::verify`]), and perform the seat's duties
//! until none is left — write the start when the seat is X of a paired game, commit a
//! rock-paper-scissors choice the person made once it is the seat's commit turn, reveal a
//! commit once it is the seat's reveal turn. Each duty is a whole event the agent builds
//! from the verified head and signs with the seat key. The seat's lock is held for the
//! whole step, so a tool call and a wake-up never write the same event twice.
//!
//! The reveal needs no stored secret: the nonce is HKDF of the seat key with
//! `inbox|game|seat|seq-of-the-commit`, and the choice is found by testing the three
//! choices against the commit in the log ([`crate::game::custody::Custodian`]).
//!
//! What it deliberately does not do: decide the person's moves, or show anything: it
//! returns a verified [`Snapshot`] and [`super::state`] shapes it.

use games::crypto::{self, SecretKey};
use games::protocol::CustodyStep;
use games::verify::GameChain;
use games::{Action, Event, Registry, Seat, Viewer};
use serde_json::{Map, Value};
use tokio::sync::{watch, Mutex, MutexGuard};

use super::client::{CaptureItem, HubClient, PostAnswer};
use super::store::{Mark, SeatRecord, Signed, Store};
use super::verify::{self, Expect};
use super::AgentError;
use crate::game::custody::{self, Custodian};

/// How many duties one sync performs at most (a start, a commit and a reveal at most are
/// ever due at once; the bound only guards against a hub that keeps answering oddly).
const MAX_DUTIES: usize = 4;

/// What the agent needs to reach the hub and keep its seats.
pub struct Ctx {
    pub client: HubClient,
    pub store: Store,
    pub registry: Registry,
}

/// A verified look at the game.
pub struct Snapshot {
    pub inbox: String,
    pub game: String,
    pub seat: Seat,
    /// The chain, verified by this agent (not started before the start).
    pub chain: GameChain,
    /// The hub's view of the seat while the game has no start (phase, protocol, keys).
    pub before_start: Option<Value>,
    /// The choice the person made that waits for the seat's commit turn.
    pub held_choice: Option<String>,
    /// The choice committed for the person and not revealed yet, recomputed from the log.
    pub committed_choice: Option<&'static str>,
    /// How many captures were checked.
    pub captures: usize,
}

/// One seat of this agent.
pub struct SeatHandle {
    pub inbox: String,
    pub game: String,
    pub seat: Seat,
    record: Mutex<SeatRecord>,
    /// Bumped whenever the hub pushes something for this seat; `game_wait` waits on it.
    pub changed: watch::Sender<u64>,
}

impl SeatHandle {
    /// A handle for a complete record (game and token known).
    pub fn new(record: SeatRecord) -> Option<SeatHandle> {
        Some(SeatHandle {
            inbox: record.inbox.clone(),
            game: record.game.clone()?,
            seat: record.seat()?,
            record: Mutex::new(record),
            changed: watch::Sender::new(0),
        })
    }

    /// The seat token, for the WebSocket hello.
    pub async fn token(&self) -> Option<String> {
        self.record.lock().await.token.clone()
    }

    pub async fn lock(&self) -> MutexGuard<'_, SeatRecord> {
        self.record.lock().await
    }

    /// Verifies the game and performs every duty that is due.
    pub async fn sync(&self, ctx: &Ctx) -> Result<Snapshot, AgentError> {
        let mut rec = self.record.lock().await;
        self.sync_locked(ctx, &mut rec).await
    }

    /// [`Self::sync`] with the lock already held.
    pub async fn sync_locked(
        &self,
        ctx: &Ctx,
        rec: &mut SeatRecord,
    ) -> Result<Snapshot, AgentError> {
        for _ in 0..MAX_DUTIES {
            let snap = self.fetch(ctx, rec).await?;
            let Some((event, duty)) = self.duty(&snap, rec)? else {
                return Ok(snap);
            };
            let answer = self.post(ctx, rec, event).await?;
            match answer.verdict() {
                "accepted" => {
                    if duty == Duty::Commit {
                        rec.held_choice = None;
                        ctx.store.save(rec)?;
                    }
                    tracing::info!(game = %self.game, seat = %self.seat, ?duty, "wrote");
                }
                verdict => {
                    tracing::warn!(game = %self.game, seat = %self.seat, ?duty,
                        verdict, reason = answer.body["error"].as_str().unwrap_or(""),
                        "the hub did not accept an event this agent owed");
                    return self.fetch(ctx, rec).await;
                }
            }
        }
        self.fetch(ctx, rec).await
    }

    /// The captures, verified; before the start, also the hub's view of the seat. The
    /// newest verified head is kept in the record (on disk) for the next verification.
    pub async fn fetch(&self, ctx: &Ctx, rec: &mut SeatRecord) -> Result<Snapshot, AgentError> {
        let token = rec.token.clone().unwrap_or_default();
        let public = rec.public_key().unwrap_or_default();
        let expect = Expect {
            inbox: &self.inbox,
            game: &self.game,
            seat: self.seat,
            public_key: &public,
            protocol: rec.protocol.as_deref().filter(|_| self.seat == Seat::X),
            rules: rec.rules.as_ref(),
            signed: rec.signed.as_ref(),
            verified: rec.verified.as_ref(),
            withdrawn: &rec.withdrawn,
        };
        let items = ctx.client.captures(&self.inbox, &self.game).await?;
        let chain = verify::verify(&ctx.registry, &expect, &items)
            .map_err(|f| AgentError::Verification(f.0))?;
        let before_start = if chain.is_started() {
            None
        } else {
            let view = ctx.client.view(&self.inbox, &self.game, &token).await?;
            verify::check_asked(
                &ctx.registry,
                &expect,
                view["protocol"].as_str(),
                view["rules"].as_object(),
            )
            .map_err(|f| AgentError::Verification(f.0))?;
            Some(view)
        };
        if let (Some(seq), Some(head)) = (chain.seq(), chain.head()) {
            if rec.verified.as_ref().is_none_or(|v| v.seq < seq) {
                rec.verified = Some(Mark {
                    seq,
                    hash: head.to_string(),
                });
                // The chain is fixed up to its head: a withdrawn event at or below it can
                // no longer appear.
                rec.withdrawn.retain(|w| w.seq > seq);
                ctx.store.save(rec)?;
            }
        }
        let committed_choice = self.committed_choice(rec, &chain, &items);
        Ok(Snapshot {
            inbox: self.inbox.clone(),
            game: self.game.clone(),
            seat: self.seat,
            chain,
            before_start,
            held_choice: rec.held_choice.clone(),
            committed_choice,
            captures: items.len(),
        })
    }

    /// The person's choice behind this seat's commit of the current round, while it is not
    /// revealed: recovered from the seat's last accepted commit in the (verified) log.
    fn committed_choice(
        &self,
        rec: &SeatRecord,
        chain: &GameChain,
        items: &[CaptureItem],
    ) -> Option<&'static str> {
        let view = chain.board()?.view(Viewer::Seat(self.seat)).0;
        let me = self.seat.as_str();
        if !is_custodial(chain) || view["committed"][me] != true || !view["revealed"][me].is_null()
        {
            return None;
        }
        let commit = items.iter().rev().find(|i| {
            i.verdict == "accepted"
                && i.event["player"] == me
                && i.event["move"]["commit"].is_string()
        })?;
        let seq = commit.event["seq"].as_u64()?;
        let hash = commit.event["move"]["commit"].as_str()?;
        self.custodian(rec, |c| c.recover(self.seat, seq, hash))
    }

    /// The event the agent owes now, if any.
    fn duty(&self, snap: &Snapshot, rec: &SeatRecord) -> Result<Option<(Event, Duty)>, AgentError> {
        if let Some(view) = &snap.before_start {
            if self.seat == Seat::X && view["phase"] == "paired" {
                return Ok(Some((self.start_event(view, rec)?, Duty::Start)));
            }
            return Ok(None);
        }
        let chain = &snap.chain;
        let Some(board) = chain.board() else {
            return Ok(None);
        };
        if chain.result().is_some_and(|r| r.is_over()) {
            return Ok(None);
        }
        let mv = match board.custody(self.seat) {
            Some(CustodyStep::Commit) => match &rec.held_choice {
                Some(choice) => {
                    let seq = chain.seq().unwrap_or_default() + 1;
                    let mv = self.custodian(rec, |c| Some(c.commit_move(self.seat, seq, choice)));
                    mv.map(|m| (m, Duty::Commit))
                }
                None => None,
            },
            Some(CustodyStep::Reveal { commit, commit_seq }) => {
                let mv = self.custodian(rec, |c| c.reveal_move(self.seat, commit_seq, &commit));
                match mv {
                    Some(m) => Some((m, Duty::Reveal)),
                    None => {
                        return Err(AgentError::Verification(
                            "this seat's commit in the log is not one this agent wrote".into(),
                        ))
                    }
                }
            }
            None => None,
        };
        Ok(mv.map(|(mv, duty)| (self.next_event(chain, Action::Move, Some(mv)), duty)))
    }

    /// Runs `f` with this seat's custodian (the seat key as the HKDF secret).
    fn custodian<T>(
        &self,
        rec: &SeatRecord,
        f: impl FnOnce(&Custodian<'_>) -> Option<T>,
    ) -> Option<T> {
        let key = rec.signing_key()?;
        let secret = key.to_bytes();
        f(&Custodian {
            secret: &secret,
            inbox: &self.inbox,
            game: &self.game,
        })
    }

    /// The next event of this seat after the verified head.
    pub fn next_event(&self, chain: &GameChain, action: Action, mv: Option<Value>) -> Event {
        Event {
            game: self.game.clone(),
            seq: chain.seq().map_or(0, |s| s + 1),
            prev_hash: chain.head().unwrap_or_default().to_string(),
            player: self.seat,
            action,
            mv,
            protocol: None,
            rules: None,
            status: None,
            sig: None,
        }
    }

    /// X's start of a paired game: the registered protocol and rules, both keys, and this
    /// inbox in `rules.inboxes`, so the signed chain cannot be replayed elsewhere.
    fn start_event(&self, view: &Value, rec: &SeatRecord) -> Result<Event, AgentError> {
        let mine = rec.public_key().unwrap_or_default();
        let (Some(x), Some(o)) = (view["keys"]["X"].as_str(), view["keys"]["O"].as_str()) else {
            return Err(AgentError::Verification(
                "the paired game does not show both seats' keys".into(),
            ));
        };
        if x != mine || crypto::public_key(o).is_none() {
            return Err(AgentError::Verification(
                "the hub shows a key for X that is not this agent's, or a bad key for O".into(),
            ));
        }
        // The hub's view was checked against what the person asked for when it was fetched
        // ([`Self::fetch`]); the start carries it as the hub registered it.
        let protocol = view["protocol"].as_str().or(rec.protocol.as_deref());
        let mut rules: Map<String, Value> = view["rules"].as_object().cloned().unwrap_or_default();
        let mut keys = Map::new();
        keys.insert("X".into(), Value::from(x));
        keys.insert("O".into(), Value::from(o));
        rules.insert("keys".into(), Value::Object(keys));
        rules.insert("inboxes".into(), Value::from(vec![self.inbox.clone()]));
        Ok(Event {
            game: self.game.clone(),
            seq: 0,
            prev_hash: String::new(),
            player: Seat::X,
            action: Action::Start,
            mv: None,
            protocol: protocol.map(str::to_string),
            rules: Some(rules),
            status: None,
            sig: None,
        })
    }

    /// Signs and posts one event of this seat. The event is recorded (on disk) before it
    /// is posted, and the agent refuses to sign a different event at a seq it signed
    /// already: two signed events on one head would let a hub choose which one counts. The
    /// same event again (a retried duty, the same move sent again) is the same bytes, as
    /// Ed25519 signatures are deterministic, and may be posted again.
    ///
    /// One answer frees the seq again: a refusal the hub gives before its inbox (section
    /// 5's checks before the append: token, rate limit, size, type, JSON, seat rules) to
    /// the first post of an event. That event was never appended anywhere, so the person
    /// may play another move or resign; it is remembered as withdrawn, and a log that
    /// ever holds it shows the hub answered falsely.
    pub async fn post(
        &self,
        ctx: &Ctx,
        rec: &mut SeatRecord,
        mut event: Event,
    ) -> Result<PostAnswer, AgentError> {
        let key = rec
            .signing_key()
            .ok_or_else(|| AgentError::Usage("this seat's key file is damaged".into()))?;
        sign(&mut event, &key);
        let hash = games::canonical::hash_hex(&event);
        if let Some(s) = &rec.signed {
            if event.seq < s.seq || (event.seq == s.seq && hash != s.hash) {
                let what = described(s, "another event");
                return Err(AgentError::Usage(format!(
                    "this agent already signed {what} at seq {} of this game, and the hub has not \
answered whether it recorded it; it never signs two events at one seq, so only that one can be \
sent again (game_move with that very move, or game_resign if it was a resign)",
                    s.seq
                )));
            }
        }
        let earlier = rec.signed.clone();
        let first_post = rec.signed.as_ref().is_none_or(|s| s.seq != event.seq);
        if first_post {
            rec.signed = Some(Signed {
                seq: event.seq,
                hash: hash.clone(),
                accepted: false,
                what: Some(describe(&event)),
            });
            rec.withdrawn.retain(|w| w.hash != hash);
            ctx.store.save(rec)?;
        }
        let token = rec.token.clone().unwrap_or_default();
        let answer = match ctx
            .client
            .post_event(&self.inbox, &token, event.to_json())
            .await
        {
            Err(e) if first_post && e.refused_before_the_inbox() => {
                rec.withdrawn.push(Mark {
                    seq: event.seq,
                    hash,
                });
                rec.signed = earlier;
                ctx.store.save(rec)?;
                return Err(e);
            }
            // The hub may have recorded it: say which event is the only one the seat may
            // send at this seq now, so the person is not asked for another move.
            Err(e) => return Err(unsettled(e, rec.signed.as_ref())),
            Ok(answer) => answer,
        };
        if answer.verdict() == "accepted" {
            // From here on the log must hold this very event at its seq.
            if let Some(s) = rec.signed.as_mut().filter(|s| !s.accepted) {
                s.accepted = true;
                ctx.store.save(rec)?;
            }
        }
        Ok(answer)
    }
}

/// A post's error that leaves open whether the hub recorded the event (a lost answer, a
/// 5xx), with what the seat may do next.
fn unsettled(e: AgentError, signed: Option<&Signed>) -> AgentError {
    let Some(s) = signed else { return e };
    let what = described(s, "an event");
    let next = format!(
        "the hub did not say whether it recorded {what} (seq {}); it is the only event this seat \
may send there now: game_move with that very move (or game_resign if it was a resign) sends it \
again, and game_board shows whether it was played",
        s.seq
    );
    match e {
        AgentError::Transport(cause) => AgentError::Transport(format!("{cause}; {next}")),
        AgentError::Hub {
            status,
            code,
            detail,
            retry_after,
        } => AgentError::Hub {
            status,
            code,
            detail: Some(match detail {
                Some(d) => format!("{d}; {next}"),
                None => next,
            }),
            retry_after,
        },
        e => e,
    }
}

/// What an event does, in the words the agent uses to the person. The agent's own
/// rock-paper-scissors events are named, never quoted: a reveal carries the nonce.
fn describe(event: &Event) -> String {
    match (event.action, &event.mv) {
        (Action::Resign, _) => "a resign".into(),
        (Action::Start, _) => "the start".into(),
        (_, Some(mv)) if mv.get("commit").is_some() => "a commit".into(),
        (_, Some(mv)) if mv.get("nonce").is_some() => "a reveal".into(),
        (_, Some(mv)) => format!("the move {mv}"),
        (_, None) => "a move".into(),
    }
}

/// A signed event's description as a tool repeats it. A seat file written before reveals
/// were named rather than quoted holds a reveal's nonce in it: that one is not repeated.
fn described<'a>(s: &'a Signed, otherwise: &'a str) -> &'a str {
    match s.what.as_deref() {
        Some(w) if w.contains("\"nonce\"") => "a reveal",
        Some(w) => w,
        None => otherwise,
    }
}

/// What a duty was, for logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duty {
    Start,
    Commit,
    Reveal,
}

fn sign(event: &mut Event, key: &SecretKey) {
    event.sig = None;
    let bytes = games::canonical::canonical_bytes(event);
    event.sig = Some(crypto::sign(key, &bytes));
}

/// True when the game is played with commit-reveal custody (the person sends `{"choice"}`).
pub fn is_custodial(chain: &GameChain) -> bool {
    chain
        .protocol()
        .is_some_and(|p| custody::is_custodial(p.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reveal of `choice`, as the agent writes it, and its nonce.
    fn reveal(choice: &str) -> (Event, String) {
        let secret = [7u8; 32];
        let c = Custodian {
            secret: &secret,
            inbox: "default",
            game: "g",
        };
        let commit = c.commit_move(Seat::X, 1, choice);
        let mv = c
            .reveal_move(Seat::X, 1, commit["commit"].as_str().unwrap_or_default())
            .unwrap_or_default();
        let nonce = mv["nonce"].as_str().unwrap_or_default().to_string();
        assert_eq!(nonce.len(), 64, "{mv}");
        let event = Event {
            game: "g".into(),
            seq: 3,
            prev_hash: "0".repeat(64),
            player: Seat::X,
            action: Action::Move,
            mv: Some(mv),
            protocol: None,
            rules: None,
            status: None,
            sig: None,
        };
        (event, nonce)
    }

    #[test]
    fn a_signed_reveal_is_named_never_quoted_so_its_nonce_stays_out_of_any_answer() {
        let (event, nonce) = reveal("paper");
        let what = describe(&event);
        assert_eq!(what, "a reveal");
        let signed = Signed {
            seq: 3,
            hash: "h".into(),
            accepted: false,
            what: Some(what),
        };
        let lost = unsettled(AgentError::Transport("lost".into()), Some(&signed));
        assert!(lost.to_string().contains("a reveal"), "{lost}");
        // A seat file from before holds the reveal quoted: it is not repeated.
        let old = Signed {
            what: Some(format!("the move {}", event.mv.clone().unwrap_or_default())),
            ..signed
        };
        let failed = AgentError::Hub {
            status: 503,
            code: "unavailable".into(),
            detail: None,
            retry_after: None,
        };
        let text = unsettled(failed, Some(&old)).to_string();
        assert!(!text.contains(&nonce), "{text}");
        assert!(text.contains("a reveal"), "{text}");
        let mv = Event {
            mv: Some(serde_json::json!({"row": 2, "col": 1})),
            ..event
        };
        assert_eq!(describe(&mv), "the move {\"col\":1,\"row\":2}");
    }
}
