//! The facade's part in a cluster of hub nodes (see [`crate::cluster`]): the shard owner's
//! answers to intents handed over by other nodes, and a non-owner's side of a game another
//! node adjudicates — waiting for the owner's verdict on what it appended, catching its
//! copy of the game up from the recorded verdicts before a read, and handing hub-held
//! writes and rock-paper-scissors choices to the owner. Seats are read fresh from the
//! shared store, since another node may have created, paired or cancelled a game.
//!
//! On a single hub (no cluster) every shard is this hub's and the reads here are the
//! in-memory ones, as before.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use games::protocol::MoveError;
use games::{Seat, Viewer};
use tokio::sync::oneshot;

use super::Hub;

use crate::cluster::{verdicts, Forward, Forwarded};
use crate::game::actor::{CatchUp, Choose, Chosen, DraftMove, Kick, Retire, Snapshot};
use crate::game::seats::Registration;
use crate::game::state::{Phase, SharedState};
use crate::game::types::{Posted, SeatAuth, Verdict};
use crate::game::waiters::Outcome;
use crate::game::{custody, HubError};
use crate::inbox::{Capture, StoredVerdict};

impl Hub {
    /// True when this hub is one node of a cluster.
    pub fn clustered(&self) -> bool {
        self.engine.config.cluster.is_some()
    }

    /// True when another node adjudicates `shard` (this node is one of a cluster and
    /// does not hold the shard's lease).
    pub(crate) fn adjudicated_elsewhere(&self, shard: u32) -> bool {
        self.engine
            .config
            .cluster
            .as_ref()
            .is_some_and(|c| !c.owns(shard))
    }

    pub(super) fn elsewhere(&self, inbox: &str, game: &str) -> bool {
        self.adjudicated_elsewhere(self.engine.inbox.shard_of(inbox, game))
    }

    /// Brings the ownership gauges up to this very moment, for a scrape: the lease rounds
    /// and the shards' consumers set them as they go, and a node that resumes after a pause
    /// longer than its leases (a stall, SIGSTOP) answers the scrape that waited for it
    /// before either has run, with the shards it held before the pause. What it holds is
    /// what [`crate::cluster::Ownership::leased`] says now, from the last renewal's age.
    pub fn refresh_ownership_gauges(&self) {
        let Some(cluster) = &self.engine.config.cluster else {
            return;
        };
        let metrics = &self.engine.metrics;
        let mut held = 0;
        for shard in 0..self.engine.inbox.shards() {
            if cluster.leased(shard) {
                held += 1;
            } else {
                // A consumer whose lease is gone stops reading at its next look, and says
                // so then; it already reads nothing it may judge.
                metrics
                    .consumer_running
                    .with_label_values(&[&shard.to_string()])
                    .set(0);
            }
        }
        metrics.cluster_shards_owned.set(held);
    }

    /// A verdict another node recorded (from the verdict feed), for a poster of this node
    /// waiting for it.
    pub fn verdict_recorded_elsewhere(&self, capture: Capture, verdict: StoredVerdict) {
        let (verdict, hash, refusal) = verdicts::outcome_parts(verdict);
        let outcome = Outcome {
            verdict,
            hash,
            refusal,
            views: None,
        };
        self.engine.waiters.resolve_if_waiting(capture, outcome);
    }

    /// Brings this node's copy of a game that another node adjudicates up to the verdicts
    /// recorded so far (a no-op for a game this node adjudicates).
    pub(super) async fn catch_up(&self, inbox: &str, game: &str) -> Result<(), HubError> {
        if !self.elsewhere(inbox, game) {
            return Ok(());
        }
        self.engine.ask(inbox, game, CatchUp).await?
    }

    /// Waits up to `wait` for the verdict another node records on `capture` (appended
    /// here), then reads the poster's view of the game after it.
    pub(super) async fn remote_verdict(
        &self,
        capture: Capture,
        (inbox, game): (&str, &str),
        seat: Option<Seat>,
        wait: Duration,
        ours: impl Fn(&Outcome) -> bool,
    ) -> (Option<Outcome>, Option<Arc<SharedState>>) {
        // The waiter is registered (first poll) before the store is asked, so a verdict
        // recorded in between reaches one or the other.
        let waiting = self.engine.waiters.wait(capture, wait, &ours);
        tokio::pin!(waiting);
        let outcome = match waiting.as_mut().now_or_never() {
            Some(o) => o,
            None => match self.engine.inbox.verdict(capture).await {
                Ok(Some(v)) => {
                    let (verdict, hash, refusal) = verdicts::outcome_parts(v);
                    Some(Outcome {
                        verdict,
                        hash,
                        refusal,
                        views: None,
                    })
                }
                _ => waiting.await,
            },
        };
        let state = match &outcome {
            Some(_) => {
                let viewer = seat.map_or(Viewer::Spectator, Viewer::Seat);
                match self.catch_up(inbox, game).await {
                    Ok(()) => self
                        .engine
                        .ask(inbox, game, Snapshot(viewer))
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .map(SharedState::new),
                    Err(_) => None,
                }
            }
            None => None,
        };
        (outcome, state)
    }

    /// After O paired here (in a cluster): waits, up to `wait`, until the game has the start
    /// the shard's owner writes. `started` answers when the actor asked at pairing sees it,
    /// but that actor may be a copy retired meanwhile (this node just took the shard over),
    /// so the game's state is also read again whenever a verdict of its shard is recorded.
    pub(super) async fn await_start_clustered(
        &self,
        inbox: &str,
        game: &str,
        mut started: oneshot::Receiver<()>,
        wait: Duration,
    ) {
        let shard = self.engine.inbox.shard_of(inbox, game);
        let mut seen = self
            .engine
            .config
            .cluster
            .as_ref()
            .and_then(|c| c.verdicts_seen(shard));
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if started.try_recv().is_ok() {
                return;
            }
            let _ = self.catch_up(inbox, game).await;
            let state = self
                .engine
                .ask(inbox, game, Snapshot(Viewer::Spectator))
                .await;
            if matches!(state, Ok(Ok(s)) if s.phase == Phase::Started) {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                return;
            }
            let pause = tokio::time::Instant::now() + Duration::from_millis(50);
            match &mut seen {
                Some(rx) => {
                    let _ = tokio::time::timeout_at(pause.min(deadline), rx.changed()).await;
                }
                None => tokio::time::sleep_until(pause.min(deadline)).await,
            }
        }
    }

    /// Another node handed over an intent for this game: re-read its registration and
    /// rebuild its actor, which records any verdict of the game still missing and writes
    /// what the hub owes.
    pub async fn kick(&self, inbox: &str, game: &str) {
        if let Err(e) = self.engine.seats.refresh(inbox, game).await {
            tracing::warn!(error = %e, "kick: registration not refreshed");
        }
        // An actor holding a rock-paper-scissors choice stays (and is only kicked).
        let _ = self.engine.ask(inbox, game, Retire).await;
        let _ = self.engine.ask(inbox, game, Kick).await;
    }

    /// A game's registration: in a cluster read fresh from the shared store.
    pub(super) async fn registration(
        &self,
        inbox: &str,
        game: &str,
    ) -> Result<Option<Arc<Registration>>, HubError> {
        if self.clustered() {
            self.engine.seats.refresh(inbox, game).await
        } else if let Some(reg) = self.engine.seats.registration(inbox, game) {
            Ok(Some(reg))
        } else {
            // Not open: finished (and out of the cache), or not seated at all.
            self.engine.seats.stored_registration(inbox, game).await
        }
    }

    /// The seat a token opens; in a cluster a token another node issued is looked up in
    /// the shared store.
    /// A store that cannot be read is an error, not an unknown token: a node told another
    /// node's token was unknown while Redis was down answered 401, and a client may throw
    /// away a token it is told is unknown.
    pub(super) async fn lookup_token(&self, token: &str) -> Result<Option<SeatAuth>, HubError> {
        if let Some(auth) = self.engine.seats.seat_for_token(token) {
            return Ok(Some(auth));
        }
        let stored = if self.clustered() {
            self.engine.seats.refresh_token(token).await
        } else {
            // A finished game's seat is no longer cached, and an open game's is cached
            // from its first use after the hub opened.
            self.engine.seats.load_token(token).await
        };
        stored.inspect_err(|e| tracing::warn!(error = %e, "a seat token could not be looked up"))
    }

    /// A hub-held write for a game whose shard another node owns: handed to the owner,
    /// then awaited here like any post. `None` when this node writes it itself.
    pub(super) async fn forward_write(
        &self,
        auth: &SeatAuth,
        mv: Option<&serde_json::Value>,
    ) -> Result<Option<Posted>, HubError> {
        self.forward(auth, Forward::Move(mv)).await
    }

    /// A rock-paper-scissors choice for a game whose shard another node owns: handed to
    /// the owner, which commits it now or holds it for the seat's turn. `None` when this
    /// node is the owner.
    pub(super) async fn forward_choice(
        &self,
        auth: &SeatAuth,
        choice: &'static str,
    ) -> Result<Option<Posted>, HubError> {
        self.forward(auth, Forward::Choice(choice)).await
    }

    async fn forward(
        &self,
        auth: &SeatAuth,
        what: Forward<'_>,
    ) -> Result<Option<Posted>, HubError> {
        let Some(cluster) = &self.engine.config.cluster else {
            return Ok(None);
        };
        let shard = self.engine.inbox.shard_of(&auth.inbox, &auth.game);
        if cluster.owns(shard) {
            return Ok(None);
        }
        let wait = self.engine.config.verdict_wait;
        let target = (&*auth.inbox, &*auth.game, auth.seat);
        let game = (&*auth.inbox, &*auth.game);
        match cluster.forward_write(shard, target, what, wait).await? {
            Forwarded::Appended(capture, hash) => Ok(Some(
                self.await_verdict(capture, game, || hash, Some(auth.seat))
                    .await,
            )),
            Forwarded::Held => {
                self.catch_up(&auth.inbox, &auth.game).await?;
                let viewer = Viewer::Seat(auth.seat);
                let mut state = self
                    .engine
                    .ask(&auth.inbox, &auth.game, Snapshot(viewer))
                    .await??;
                // The owner holds the choice; the seat's own view shows it, as there.
                if let Forward::Choice(c) = what {
                    state.view = state.view.take().map(|v| v.with_pending_choice(c));
                }
                Ok(Some(Posted {
                    capture: None,
                    hash: None,
                    verdict: Verdict::Held,
                    state: Some(SharedState::new(state)),
                    refusal: None,
                }))
            }
        }
    }

    /// Runs a choice intent handed over by another node: commits the seat's choice from
    /// this owner's head now, or holds it for the seat's turn.
    pub async fn choose_intent(
        &self,
        inbox: &str,
        game: &str,
        seat: Seat,
        choice: &str,
    ) -> Result<Forwarded, HubError> {
        if let Err(e) = self.engine.seats.refresh(inbox, game).await {
            tracing::warn!(error = %e, "choice intent: registration not refreshed");
        }
        let choice = custody::parse_choice(&serde_json::json!({ "choice": choice }))
            .ok_or_else(|| HubError::Refused(MoveError::BadMove.into()))?;
        match self
            .engine
            .ask(inbox, game, Choose { seat, choice })
            .await??
        {
            Chosen::Commit(draft) => {
                let hash = draft.hash.clone();
                match self.append_for(inbox, game, seat, draft).await {
                    Ok((capture, hash)) => Ok(Forwarded::Appended(capture, hash)),
                    Err(e) => {
                        self.unchosen(inbox, game, seat, hash).await;
                        Err(e)
                    }
                }
            }
            Chosen::Held(held) => {
                held.marked().await;
                Ok(Forwarded::Held)
            }
        }
    }

    /// Runs a write intent handed over by another node: drafts the seat's move (`None`: a
    /// resign) from this owner's head and appends it.
    pub async fn write_intent(
        &self,
        inbox: &str,
        game: &str,
        seat: Seat,
        mv: Option<serde_json::Value>,
    ) -> Result<(Capture, String), HubError> {
        if let Err(e) = self.engine.seats.refresh(inbox, game).await {
            tracing::warn!(error = %e, "write intent: registration not refreshed");
        }
        let draft = self
            .engine
            .ask(inbox, game, DraftMove { seat, mv })
            .await??;
        crate::game::writer::check_size(&draft.raw).map_err(HubError::Input)?;
        self.append_for(inbox, game, seat, draft).await
    }

    /// Appends an event the owner drafted for a seat; its capture and hash.
    async fn append_for(
        &self,
        inbox: &str,
        game: &str,
        seat: Seat,
        draft: crate::game::writer::Posting,
    ) -> Result<(Capture, String), HubError> {
        let capture = self
            .engine
            .inbox
            .append(inbox, game, Some(seat), draft.raw)
            .await?;
        Ok((capture, draft.hash))
    }

    /// After O paired here: in a cluster, the shard's owner is told, since it writes the
    /// start the hub owes.
    pub(super) async fn hand_over(&self, inbox: &str, game: &str) {
        if let Some(cluster) = &self.engine.config.cluster {
            let shard = self.engine.inbox.shard_of(inbox, game);
            if !cluster.owns(shard) {
                cluster.hand_over(shard, inbox, game).await;
            }
        }
    }
}
