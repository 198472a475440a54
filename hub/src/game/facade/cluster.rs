//! The facade's part in a cluster of hub nodes (see [`crate::cluster`]): taking over a
//! shard, answering an intent handed over by another node, and reading seats fresh from
//! the shared store, since another node may have created, paired or cancelled a game.
//!
//! On a single hub (no cluster) the reads here are the in-memory ones, as before.

use games::Viewer;

use super::Hub;
use games::Seat;

use crate::game::actor::{DraftMove, Kick, Retire, Snapshot};
use crate::game::seats::Registration;
use crate::game::types::{Posted, SeatAuth};
use crate::game::HubError;
use crate::inbox::Capture;

impl Hub {
    /// True when this hub is one node of a cluster.
    pub fn clustered(&self) -> bool {
        self.engine.config.cluster.is_some()
    }

    /// The durable high-water mark of `shard` as this node has seen it.
    pub fn shard_high(&self, shard: u32) -> u64 {
        self.engine
            .inbox
            .watch_shard(shard)
            .map(|w| *w.borrow())
            .unwrap_or(0)
    }

    /// This node has just taken `shard`'s lease: rebuilds every resident game of the shard
    /// and every game with a capture at or after `from` that lacks a recorded verdict, so
    /// the verdicts get recorded and the writes the hub owes get written.
    pub async fn take_over(&self, shard: u32, from: u64) {
        let engine = &self.engine;
        let mut games: Vec<(String, String)> = engine
            .resident_games()
            .into_iter()
            .filter(|(i, g)| engine.inbox.shard_of(i, g) == shard)
            .collect();
        let mut next = from.max(1);
        loop {
            let batch = match engine.inbox.read_shard(shard, next, 512).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(shard, error = %e, "take-over could not read the shard");
                    break;
                }
            };
            let Some(last) = batch.last() else { break };
            next = last.capture.pos + 1;
            for record in batch {
                let key = (record.inbox, record.game);
                if games.contains(&key) {
                    continue;
                }
                if matches!(engine.inbox.verdict(record.capture).await, Ok(None)) {
                    games.push(key);
                }
            }
        }
        tracing::info!(
            shard,
            games = games.len(),
            "rebuilding the games of a shard taken over"
        );
        for (inbox, game) in games {
            let _ = engine.ask(&inbox, &game, Retire).await;
            let _ = engine.ask(&inbox, &game, Snapshot(Viewer::Spectator)).await;
        }
    }

    /// Another node handed over an intent for this game: re-read its registration and let
    /// its actor write what the hub owes.
    pub async fn kick(&self, inbox: &str, game: &str) {
        if let Err(e) = self.engine.seats.refresh(inbox, game).await {
            tracing::warn!(error = %e, "kick: registration not refreshed");
        }
        let _ = self.engine.ask(inbox, game, Kick).await;
    }

    /// A game's registration: in a cluster read fresh from the shared store.
    pub(super) async fn registration(
        &self,
        inbox: &str,
        game: &str,
    ) -> Result<Option<Registration>, HubError> {
        if self.clustered() {
            self.engine.seats.refresh(inbox, game).await
        } else {
            Ok(self.engine.seats.registration(inbox, game))
        }
    }

    /// The seat a token opens; in a cluster a token another node issued is looked up in
    /// the shared store.
    pub(super) async fn lookup_token(&self, token: &str) -> Option<SeatAuth> {
        if let Some(auth) = self.engine.seats.seat_for_token(token) {
            return Some(auth);
        }
        if !self.clustered() {
            return None;
        }
        self.engine.seats.refresh_token(token).await.ok().flatten()
    }

    /// A hub-held write for a game whose shard another node owns: handed to the owner,
    /// then awaited here like any post. `None` when this node writes it itself.
    pub(super) async fn forward_write(
        &self,
        auth: &SeatAuth,
        mv: Option<&serde_json::Value>,
    ) -> Result<Option<Posted>, HubError> {
        let Some(cluster) = &self.engine.config.cluster else {
            return Ok(None);
        };
        let shard = self.engine.inbox.shard_of(&auth.inbox, &auth.game);
        if cluster.owns(shard) {
            return Ok(None);
        }
        let wait = self.engine.config.verdict_wait;
        let target = (auth.inbox.as_str(), auth.game.as_str(), auth.seat);
        let (capture, hash) = cluster.forward_write(shard, target, mv, wait).await?;
        Ok(Some(
            self.await_verdict(capture, || hash, Some(auth.seat)).await,
        ))
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
        let hash = draft.prepared.hash.clone();
        let capture = self
            .engine
            .inbox
            .append(inbox, game, Some(seat), draft.raw)
            .await?;
        Ok((capture, hash))
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
