//! The engine's shared parts, and the directory of resident game actors.
//!
//! [`Engine`] is what the facade, the shard consumers and every actor share: the stores,
//! the seats, the verdict waiters, the rooms, and the map from `(inbox, game)` to the
//! actor adjudicating that game. [`Engine::actor`] finds the game's actor or starts it
//! (on one of a few arbiter threads, picked by the game's shard so one shard's games share
//! a thread); a starting actor rebuilds itself from the store before it reads its mailbox.
//! An actor that stopped after its idle timeout is simply started again on the next ask.
//!
//! What it deliberately does not do: check seats or caps (the facade does) or adjudicate
//! (the actors do).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use actix::dev::ToEnvelope;
use actix::prelude::*;
use dashmap::DashMap;
use games::key::GameIds;
use tokio::sync::watch;

use super::actor::{Deliver, GameActor, Snapshot};
use super::desk::{Desk, Tip};
use super::finished::{self, Finished};
use super::seats::Seats;
use super::types::Listed;
use super::waiters::Waiters;
use super::{HubConfig, HubError, Unavailable};
use crate::inbox::{Inbox, Record};
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::rooms::Rooms;

pub type GameKey = (String, String);

pub struct Engine {
    pub config: HubConfig,
    pub inbox: Arc<dyn Inbox>,
    pub meta: Arc<dyn Meta>,
    pub metrics: Arc<Metrics>,
    pub rooms: Arc<dyn Rooms>,
    pub seats: Seats,
    pub waiters: Waiters,
    /// The last known listing entry of each game an actor has seen, but for finished
    /// games', which are kept packed in `finished`: both written only through
    /// [`Engine::list`], which keeps `listed` in step.
    summaries: DashMap<(Box<str>, Box<str>), Listed>,
    finished: Finished,
    /// How many of those entries are started and in progress, and finished, kept as
    /// entries change: the games gauge does not walk every game the hub has seen.
    listed: [AtomicI64; 2],
    actors: DashMap<GameKey, Resident>,
    arbiters: Vec<ArbiterHandle>,
}

/// A resident game: its actor, and the desk it shares with posters' threads.
struct Resident {
    addr: Addr<GameActor>,
    desk: Arc<Desk>,
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: HubConfig,
        inbox: Arc<dyn Inbox>,
        meta: Arc<dyn Meta>,
        metrics: Arc<Metrics>,
        rooms: Arc<dyn Rooms>,
        seats: Seats,
        arbiters: Vec<ArbiterHandle>,
    ) -> Engine {
        Engine {
            finished: Finished::new(&config.registry),
            config,
            inbox,
            meta,
            metrics,
            rooms,
            seats,
            waiters: Waiters::default(),
            summaries: DashMap::new(),
            listed: [AtomicI64::new(0), AtomicI64::new(0)],
            actors: DashMap::new(),
            arbiters,
        }
    }

    /// The game's actor, started (and rebuilding) if it was not resident.
    pub fn actor(self: &Arc<Self>, inbox: &str, game: &str) -> Addr<GameActor> {
        if let Some(r) = self.actors.get(&(inbox, game) as &dyn GameIds) {
            if r.addr.connected() {
                return r.addr.clone();
            }
        }
        let shard = self.inbox.shard_of(inbox, game);
        let engine = self.clone();
        let mut entry = self
            .actors
            .entry((inbox.to_string(), game.to_string()))
            .or_insert_with(|| spawn_actor(&engine, self.arbiter_of(shard), inbox, game));
        if !entry.addr.connected() {
            *entry = spawn_actor(&engine, self.arbiter_of(shard), inbox, game);
        }
        entry.addr.clone()
    }

    /// The desk of the game's actor and the head on it, when the actor is resident and
    /// has a started chain to draft on (never in a cluster): see [`Desk`].
    pub fn desk(&self, inbox: &str, game: &str) -> Option<(Arc<Desk>, Tip)> {
        let r = self.actors.get(&(inbox, game) as &dyn GameIds)?;
        if !r.addr.connected() {
            return None;
        }
        let tip = r.desk.tip()?;
        Some((r.desk.clone(), tip))
    }

    /// The thread that runs `shard`'s actors.
    fn arbiter_of(&self, shard: u32) -> Option<&ArbiterHandle> {
        self.arbiters
            .get(shard as usize % self.arbiters.len().max(1))
    }

    /// Forgets `addr` as the game's actor (it is stopping).
    pub fn forget(&self, inbox: &str, game: &str, addr: &Addr<GameActor>) {
        self.actors
            .remove_if(&(inbox, game) as &dyn GameIds, |_, r| &r.addr == addr);
    }

    /// True when this node writes for `shard`: always on a single hub, while it holds the
    /// shard's lease in a cluster.
    pub fn owns(&self, shard: u32) -> bool {
        self.config.cluster.as_ref().is_none_or(|c| c.owns(shard))
    }

    /// The games whose actors are resident (a new shard owner rebuilds them).
    pub fn resident_games(&self) -> Vec<GameKey> {
        self.actors.iter().map(|e| e.key().clone()).collect()
    }

    /// How many actors are resident.
    pub fn resident(&self) -> usize {
        self.actors.len()
    }

    /// Hands a durable record to its game's actor, in shard order. Waits when the actor's
    /// mailbox is full (backpressure on the consumer, never on the poster).
    pub async fn deliver(self: &Arc<Self>, record: Record) {
        let mut msg = Deliver(record);
        // An actor may stop (idle) between lookup and send; a fresh one rebuilds from the
        // store, which already holds this record, so two tries are always enough.
        for _ in 0..3 {
            let addr = self.actor(&msg.0.inbox, &msg.0.game);
            match addr.try_send(msg) {
                Ok(()) => return,
                Err(SendError::Full(m)) => match addr.send(m.clone()).await {
                    Ok(()) => return,
                    Err(_) => msg = m,
                },
                Err(SendError::Closed(m)) => {
                    self.forget(&m.0.inbox, &m.0.game, &addr);
                    msg = m;
                }
            }
        }
        tracing::warn!(capture = %msg.0.capture, "record not delivered to its actor");
    }

    /// Asks the game's actor, starting it if needed.
    pub async fn ask<M>(
        self: &Arc<Self>,
        inbox: &str,
        game: &str,
        msg: M,
    ) -> Result<M::Result, HubError>
    where
        M: Message + Send + Clone + 'static,
        M::Result: Send,
        GameActor: Handler<M>,
        <GameActor as Actor>::Context: ToEnvelope<GameActor, M>,
    {
        for _ in 0..3 {
            let addr = self.actor(inbox, game);
            match addr.send(msg.clone()).await {
                Ok(r) => return Ok(r),
                Err(MailboxError::Closed) => self.forget(inbox, game, &addr),
                Err(MailboxError::Timeout) => break,
            }
        }
        Err(Unavailable::ActorSilent.into())
    }

    /// Records a game's listing entry, and keeps the started and finished counts.
    pub fn list(&self, inbox: &str, game: &str, entry: Listed) {
        let class = Self::listed_class(&entry);
        let key = finished::Key::of(inbox, game);
        // A game's entry is in one of the two maps, never both.
        let old = match self.finished.insert(key, &entry) {
            (true, was) => self
                .summaries
                .remove(&(inbox, game) as &dyn GameIds)
                .map(|(_, e)| e)
                .or(was),
            (false, _) => {
                let was = self.finished.remove(key);
                self.summaries
                    .insert((inbox.into(), game.into()), entry)
                    .or(was)
            }
        };
        if let Some(c) = old.as_ref().and_then(Self::listed_class) {
            self.listed[c].fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(c) = class {
            self.listed[c].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A game's listing entry, when an actor has seen the game.
    pub fn listed(&self, inbox: &str, game: &str) -> Option<Listed> {
        self.summaries
            .get(&(inbox, game) as &dyn GameIds)
            .map(|s| s.clone())
            .or_else(|| self.finished.get(finished::Key::of(inbox, game)))
    }

    /// Which count an entry is in: 0 started and in progress, 1 finished, else none.
    fn listed_class(entry: &Listed) -> Option<usize> {
        match entry.phase {
            _ if entry.is_over() => Some(1),
            super::Phase::Started => Some(0),
            _ => None,
        }
    }

    /// Recounts `pipehub_games{phase}` from what this hub knows: seated games waiting or
    /// paired, and every game an actor has seen since the hub opened, started or finished
    /// (those two counted as their entries change, not here).
    pub fn count_games(&self) {
        let (mut waiting, mut paired) = (0i64, 0i64);
        let started = self.listed[0].load(Ordering::Relaxed);
        let finished = self.listed[1].load(Ordering::Relaxed);
        for reg in self.seats.all_registrations() {
            let seen_started = self
                .listed(&reg.inbox, &reg.game)
                .is_some_and(|s| s.phase == super::Phase::Started);
            match (seen_started, reg.paired) {
                (true, _) => {}
                (false, true) => paired += 1,
                (false, false) => waiting += 1,
            }
        }
        let gauge = &self.metrics.games;
        gauge.with_label_values(&["waiting"]).set(waiting);
        gauge.with_label_values(&["paired"]).set(paired);
        gauge.with_label_values(&["started"]).set(started);
        gauge.with_label_values(&["finished"]).set(finished);
    }

    /// Rebuilds the game of every paired registration the hub holds as open, one at a time,
    /// until `stop` turns true: run once as a single hub opens. A game whose last verdict
    /// came just before the hub stopped can still be marked open, for its close follows
    /// that verdict and may not have reached the store; left alone it would count against
    /// its host's open games until someone came back to it. Its actor's rebuild closes it
    /// (and, for any game, writes what the hub owes it: a start, a reveal). In a cluster
    /// each shard's new owner does the same for the shard ([`Engine::settle_shard`]).
    pub async fn settle_open_games(self: &Arc<Self>, stop: watch::Receiver<bool>) {
        let paired: Vec<_> = self
            .seats
            .all_registrations()
            .into_iter()
            .filter(|reg| reg.paired)
            .collect();
        let mut rebuilt = 0;
        for reg in paired {
            if *stop.borrow() {
                break;
            }
            rebuilt += u32::from(self.rebuild(&reg.inbox, &reg.game).await);
        }
        if rebuilt > 0 {
            tracing::info!(games = rebuilt, "open games rebuilt");
        }
    }

    /// Makes the game's actor resident (rebuilding it from the store if it was not) by
    /// asking it for a snapshot; false, logged, when that fails.
    async fn rebuild(self: &Arc<Self>, inbox: &str, game: &str) -> bool {
        match self
            .ask(inbox, game, Snapshot(games::Viewer::Spectator))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(%game, error = %e, "open game not rebuilt");
                false
            }
        }
    }

    /// In a cluster, as this node takes `shard` over: rebuilds, one at a time, every
    /// paired game of the shard that the store (every node's) holds as open, while this
    /// node still owns the shard and `stop` is false. The cluster's counterpart of
    /// [`Engine::settle_open_games`]: an owner that died between a game's last verdict and
    /// its close left it counted against its host's open games, on every node.
    pub async fn settle_shard(self: &Arc<Self>, shard: u32, stop: watch::Receiver<bool>) {
        let marks = match self.meta.scan("open/").await {
            Ok(marks) => marks,
            Err(e) => {
                tracing::warn!(shard, error = %e, "open games of a taken shard not settled");
                return;
            }
        };
        let mut rebuilt = 0;
        for (key, _) in &marks {
            if *stop.borrow() || !self.owns(shard) {
                break;
            }
            let Some((_, inbox, game)) = super::seats::parse_open_key(key) else {
                continue;
            };
            if self.inbox.shard_of(inbox, game) != shard {
                continue;
            }
            // Another node may have created or paired it: the actor closes the game
            // through its registration as the store has it.
            match self.seats.refresh(inbox, game).await {
                Ok(Some(reg)) if reg.paired => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(%game, error = %e, "open game not settled");
                    continue;
                }
            }
            rebuilt += u32::from(self.rebuild(inbox, game).await);
        }
        if rebuilt > 0 {
            tracing::info!(
                shard,
                games = rebuilt,
                "open games of a taken shard rebuilt"
            );
        }
    }

    /// True when the game exists in some form: reserved, or with at least one capture.
    /// Reads check this first so that probing random ids starts no actors.
    pub async fn exists(&self, inbox: &str, game: &str) -> Result<bool, HubError> {
        if self.seats.registration(inbox, game).is_some()
            || self.summaries.contains_key(&(inbox, game) as &dyn GameIds)
            || self.finished.contains(finished::Key::of(inbox, game))
        {
            return Ok(true);
        }
        Ok(self.inbox.count(inbox, game).await? > 0)
    }
}

fn spawn_actor(
    engine: &Arc<Engine>,
    arbiter: Option<&ArbiterHandle>,
    inbox: &str,
    game: &str,
) -> Resident {
    let desk = Arc::new(Desk::default());
    let actor = GameActor::new(
        engine.clone(),
        inbox.to_string(),
        game.to_string(),
        desk.clone(),
    );
    let addr = match arbiter {
        Some(arbiter) => GameActor::start_in_arbiter(arbiter, move |_| actor),
        None => actor.start(),
    };
    Resident { addr, desk }
}
