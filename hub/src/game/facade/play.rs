//! The facade's writes of play: a whole event posted to a game, and what the hub writes
//! for a hub-held seat (a move, a resign, a rock-paper-scissors choice). Each checks the
//! seat and the capture cap first, appends only what passed, and then waits for the
//! verdict on its own capture ([`Hub::await_verdict`]).
//!
//! What it deliberately does not do: judge the event (the game's actor does, with the
//! games crate's verifier), or draft a hub-held event on a head it does not know (the
//! actor's desk, or the actor itself, gives the head; in a cluster the shard's owner
//! drafts it, `cluster.rs`).

use std::sync::Arc;

use bytes::Bytes;
use games::protocol::MoveError;
use games::reason::{Reason, Refusal};
use games::verify::Prepared;
use games::{Action, Event, Seat, Viewer};
use serde_json::{Map, Value};

use super::Hub;
use crate::game::actor::{Choose, Chosen, DraftMove, Snapshot, Unchosen};
use crate::game::custody;
use crate::game::seats::Registration;
use crate::game::state::Phase;
use crate::game::types::{Posted, SeatAuth, Verdict};
use crate::game::waiters::Outcome;
use crate::game::writer::{self, Posting};
use crate::game::HubError;
use crate::inbox::Capture;

/// How many times a hub-held seat's resign is drafted, when its seq is taken first.
const RESIGN_TRIES: u32 = 3;

impl Hub {
    /// `POST …/events`: a whole event (already parsed from `raw`, which is stored as is).
    /// A reserved game needs `auth` for that game with `player` equal to its seat; a start
    /// of a seated game must match what was registered.
    pub async fn post_event(
        &self,
        inbox: &str,
        event: Event,
        raw: Bytes,
        auth: Option<SeatAuth>,
    ) -> Result<Posted, HubError> {
        let reg = self.registration(inbox, &event.game).await?;
        if let Some(a) = &auth {
            if *a.inbox != *inbox || *a.game != *event.game {
                return Err(HubError::Forbidden("this token is for another game".into()));
            }
            if a.seat != event.player {
                return Err(HubError::Forbidden(format!(
                    "this token is seat {}'s; the event's player is {}",
                    a.seat, event.player
                )));
            }
        }
        if let Some(reg) = &reg {
            if auth.is_none() {
                return Err(HubError::Unauthorized(
                    "this game is seated: post with its seat token".into(),
                ));
            }
            if event.action == Action::Start {
                if reg.hub_writes_start() {
                    // The hub writes this start as O pairs. One from X's token raced it:
                    // when it came first it became the genesis (without the hub's
                    // `rules.inboxes`), and after it, it was one more capture to reject.
                    return Err(HubError::Forbidden(
                        "the hub writes this game's start: X's key is hub-held or the game \
                         is unsigned"
                            .into(),
                    ));
                }
                self.check_registered_start(reg, inbox, &event)?;
            } else if !self.is_started(inbox, &event.game).await? {
                return Err(HubError::NotStarted);
            }
        } else if auth.is_some() {
            return Err(HubError::Forbidden("this game is no longer seated".into()));
        }
        self.check_capture_cap(inbox, &event.game, event.action == Action::Resign)
            .await?;
        let seat = auth.map(|a| a.seat);
        let capture = self
            .engine
            .inbox
            .append(inbox, &event.game, seat, raw)
            .await?;
        // The actor hashes the event as it adjudicates it; the poster hashes it only when
        // it must answer `pending` without the actor's word.
        let game = (inbox, event.game.as_str());
        Ok(self
            .await_verdict(capture, game, || Prepared::of(&event).hash, seat)
            .await)
    }

    /// `POST …/moves`: `body` is `{"move": …}` (or `{"choice": …}` in rock-paper-scissors)
    /// for a hub-held seat; the hub writes seq, prevHash, player and sig.
    pub async fn post_move(&self, auth: &SeatAuth, body: Value) -> Result<Posted, HubError> {
        let reg = self.hub_held(auth).await?;
        let Value::Object(mut body) = body else {
            return Err(HubError::Input(Refusal::with(Reason::Schema, "move")));
        };
        match (body.remove("choice"), body.remove("move")) {
            (Some(c), None) if body.is_empty() => {
                let choice = [("choice".to_string(), c)]
                    .into_iter()
                    .collect::<Map<_, _>>();
                self.choose(auth, Value::Object(choice)).await
            }
            (None, Some(mv)) if body.is_empty() => self.play_held(auth, &reg, mv).await,
            (_, _) => {
                let field = body.keys().next().cloned().unwrap_or_else(|| "move".into());
                Err(HubError::Input(Refusal::with(Reason::Schema, field)))
            }
        }
    }

    /// A hub-held seat's move as the relay's `game.move` carries it (what `post_move` takes
    /// under `"move"`), without wrapping it in a body only to take it out again.
    pub async fn play(&self, auth: &SeatAuth, mv: Value) -> Result<Posted, HubError> {
        let reg = self.hub_held(auth).await?;
        self.play_held(auth, &reg, mv).await
    }

    /// A move object for a seat `hub_held` allowed: a choice in a custodial game, anything
    /// else a move the actor drafts. In a custodial game a hub-held seat sends only its
    /// choice (DESIGN.md section 3): a commit it wrote itself is refused (422 `bad_move`)
    /// like a reveal, since the hub, which holds no nonce for it, could never reveal it and
    /// the game would wait for that reveal for good.
    async fn play_held(
        &self,
        auth: &SeatAuth,
        reg: &Registration,
        mv: Value,
    ) -> Result<Posted, HubError> {
        if !mv.is_object() {
            return Err(HubError::Input(Refusal::with(Reason::Schema, "move")));
        }
        if self.is_custodial_game(reg) {
            self.choose(auth, mv).await
        } else {
            self.write_for(auth, Some(mv)).await
        }
    }

    /// A rock-paper-scissors choice (`{"choice": …}`) for a hub-held seat: committed now
    /// when it is the seat's turn to commit, else held until it is.
    async fn choose(&self, auth: &SeatAuth, choice: Value) -> Result<Posted, HubError> {
        let choice = custody::parse_choice(&choice)
            .ok_or_else(|| HubError::Refused(MoveError::BadMove.into()))?;
        self.check_capture_cap(&auth.inbox, &auth.game, false)
            .await?;
        if let Some(posted) = self.forward_choice(auth, choice).await? {
            return Ok(posted);
        }
        let msg = Choose {
            seat: auth.seat,
            choice,
        };
        match self.engine.ask(&auth.inbox, &auth.game, msg).await?? {
            Chosen::Commit(draft) => {
                let hash = draft.hash.clone();
                let posted = self.append_draft(auth, draft).await;
                if posted.is_err() {
                    self.unchosen(&auth.inbox, &auth.game, auth.seat, hash)
                        .await;
                }
                posted
            }
            Chosen::Held(held) => Ok(Posted {
                capture: None,
                hash: None,
                verdict: Verdict::Held,
                state: Some(held.marked().await),
                refusal: None,
            }),
        }
    }

    /// `POST …/resign` by seat token: the hub writes the resign for a hub-held seat.
    ///
    /// A resign stands at any seq of a game under way, but it is drafted on the head the
    /// hub knows, and a move of the same seat still in flight (from another socket, or an
    /// HTTP client) can take that seq first. A resign that lost its seq so is drafted again
    /// on the new head, up to [`RESIGN_TRIES`] times in all, instead of being lost to a
    /// `stale_seq` that names a field the seat never wrote.
    pub async fn resign(&self, auth: &SeatAuth) -> Result<Posted, HubError> {
        self.hub_held(auth).await?;
        let mut tries = 1;
        loop {
            let posted = self.write_for(auth, None).await?;
            let lost_seq = posted
                .refusal
                .as_ref()
                .is_some_and(|r| r.reason == Reason::StaleSeq);
            if !lost_seq || tries == RESIGN_TRIES {
                return Ok(posted);
            }
            tries += 1;
        }
    }

    // ---- helpers ----

    /// Waits, up to the configured verdict wait, for the verdict on `capture` (this
    /// node's waiters, or the owner's recorded verdict when another node adjudicates the
    /// shard), and answers `pending` with the posted event's hash when none came.
    pub(super) async fn await_verdict(
        &self,
        capture: Capture,
        game: (&str, &str),
        hash: impl FnOnce() -> String,
        seat: Option<Seat>,
    ) -> Posted {
        let wait = self.engine.config.verdict_wait;
        // The posted event's hash, worked out once and only when needed: to answer
        // without a verdict, or to tell this event's outcome from one left at the same
        // capture for an earlier event (`Waiters::wait`).
        let make = std::sync::Mutex::new(Some(hash));
        let posted = std::sync::OnceLock::new();
        let posted_hash = || {
            posted.get_or_init(|| {
                let make = make.lock().ok().and_then(|mut m| m.take());
                make.map(|h| h()).unwrap_or_default()
            })
        };
        let ours = |o: &Outcome| o.hash.as_deref().is_none_or(|h| h == posted_hash());
        let (outcome, state) = if self.adjudicated_elsewhere(capture.shard) {
            self.remote_verdict(capture, game, seat, wait, &ours).await
        } else {
            let o = self.engine.waiters.wait(capture, wait, &ours).await;
            let state = o
                .as_ref()
                .and_then(|o| o.views.as_ref())
                .and_then(|v| v.for_seat(seat).cloned());
            (o, state)
        };
        match outcome {
            Some(o) => Posted {
                capture: Some(capture),
                hash: o.hash.or_else(|| Some(posted_hash().clone())),
                verdict: o.verdict,
                state,
                refusal: o.refusal,
            },
            None => Posted {
                capture: Some(capture),
                hash: Some(posted_hash().clone()),
                verdict: Verdict::Pending,
                state: None,
                refusal: None,
            },
        }
    }

    /// Tells a game's actor that the commit of `seat`'s choice (`hash`) never reached the
    /// inbox, so that the seat may choose again.
    pub(super) async fn unchosen(&self, inbox: &str, game: &str, seat: Seat, hash: String) {
        let _ = self.engine.ask(inbox, game, Unchosen { seat, hash }).await;
    }

    async fn append_draft(&self, auth: &SeatAuth, draft: Posting) -> Result<Posted, HubError> {
        let capture = self
            .engine
            .inbox
            .append(&auth.inbox, &auth.game, Some(auth.seat), draft.raw)
            .await?;
        let game = (&*auth.inbox, &*auth.game);
        Ok(self
            .await_verdict(capture, game, || draft.hash, Some(auth.seat))
            .await)
    }

    /// Writes a move (or a resign, `None`) for a hub-held seat.
    async fn write_for(&self, auth: &SeatAuth, mv: Option<Value>) -> Result<Posted, HubError> {
        if let Some(mv) = &mv {
            writer::check_move(mv).map_err(HubError::Input)?;
        }
        self.check_capture_cap(&auth.inbox, &auth.game, mv.is_none())
            .await?;
        if let Some(posted) = self.forward_write(auth, mv.as_ref()).await? {
            return Ok(posted);
        }
        // Drafted here on the head the actor left on its desk when it can be, so the
        // move reaches the inbox without a round trip through the actor's thread.
        let draft = match self.engine.desk(&auth.inbox, &auth.game) {
            Some((desk, tip)) => {
                let event = writer::next_event(&auth.game, tip.seq, &tip.head, auth.seat, mv);
                desk.draft(&self.engine.config.secret, &auth.inbox, event, tip.signed)
            }
            None => {
                let msg = DraftMove {
                    seat: auth.seat,
                    mv,
                };
                self.engine.ask(&auth.inbox, &auth.game, msg).await??
            }
        };
        writer::check_size(&draft.raw).map_err(HubError::Input)?;
        self.append_draft(auth, draft).await
    }

    /// The registration of `auth`'s game when the hub may write for its seat.
    async fn hub_held(&self, auth: &SeatAuth) -> Result<Arc<Registration>, HubError> {
        let reg = self
            .registration(&auth.inbox, &auth.game)
            .await?
            .ok_or_else(|| HubError::NotFound("no such seated game".into()))?;
        if reg.signed && reg.agent_held(auth.seat) {
            return Err(HubError::AgentHeld);
        }
        if !reg.paired {
            return Err(HubError::NotStarted);
        }
        Ok(reg)
    }

    fn is_custodial_game(&self, reg: &Registration) -> bool {
        self.engine
            .config
            .registry
            .get(&reg.protocol)
            .is_some_and(|p| custody::is_custodial(p.as_ref()))
    }

    async fn is_started(&self, inbox: &str, game: &str) -> Result<bool, HubError> {
        if self
            .engine
            .listed(inbox, game)
            .is_some_and(|s| s.phase == Phase::Started)
        {
            return Ok(true);
        }
        self.catch_up(inbox, game).await?;
        let state = self
            .engine
            .ask(inbox, game, Snapshot(Viewer::Spectator))
            .await?;
        Ok(state.is_ok_and(|s| s.phase == Phase::Started))
    }

    /// Refuses a post once its game holds `--max-captures-per-game` captures (409
    /// `too_many_captures`), but for a resign (`resign`) of a game still in progress: a game
    /// at its cap (filled with one seat's refused moves, or an anonymous game's by anyone)
    /// could otherwise never end, and its seats' open-game counts never fall. A resign
    /// ends the game, and after it the cap holds for every post again, so the cap is
    /// passed by no more than the resigns in flight at once.
    async fn check_capture_cap(
        &self,
        inbox: &str,
        game: &str,
        resign: bool,
    ) -> Result<(), HubError> {
        if let Some(max) = self.engine.config.max_captures_per_game {
            if self.engine.inbox.count(inbox, game).await? >= max {
                let in_progress = || {
                    self.engine.listed(inbox, game).is_some_and(|l| {
                        l.phase == Phase::Started
                            && l.result.is_some_and(|r| r.status == "in_progress")
                    })
                };
                if !(resign && in_progress()) {
                    return Err(HubError::TooManyCaptures(max));
                }
            }
        }
        Ok(())
    }
}
