//! [`Hub`]: the one API every edge calls. The HTTP routes (which the MCP agent, like any
//! client, goes through), the WebSocket relay (through `crate::relay`) and the intents
//! other nodes of a cluster hand over never touch the inbox, the meta store or a game
//! actor themselves; they call these methods, so that every way into a game passes the
//! same checks in the same order.
//!
//! A write goes the same way wherever it comes from: the seat and the caps are checked
//! first (a token for another game, a seated game posted to without its token, a start
//! that differs from the registered game, too many captures), only what passed is
//! appended to the inbox, and then the poster waits for the verdict on *its own* capture
//! (`play.rs`, [`Hub::await_verdict`]). That wait is bounded by `HubConfig::verdict_wait`
//! (5 s by default): a poster that hears nothing in time is answered `pending` with its
//! event's hash, and the durable capture is adjudicated all the same, so nothing is lost
//! by answering early.
//!
//! In a cluster the adjudicator of a shard is the node holding its lease (`cluster.rs`).
//! Any node appends a whole event it receives and then waits for the owner's recorded
//! verdict instead of its own; a write the hub makes for a hub-held seat (a move, a
//! resign, a rock-paper-scissors choice) is handed to the owner, which drafts it on the
//! head it knows, and a pairing is handed over so that the owner writes the start the hub
//! owes. Reads catch this node's copy of the game up from the recorded verdicts first.
//!
//! The methods are split by what they do: `seating.rs` seats players (create, pair, a
//! fresh code, cancel, the hourly sweep of dead codes), `play.rs` writes to games,
//! `reads.rs` reads them, and `cluster.rs` holds a node's part in a cluster. This file
//! keeps the facade's lifecycle: [`Hub::open`] starts the shard consumers, the rebuild of
//! open games and the sweeper; [`Hub::shutdown`] stops them and makes the verdicts durable.
//!
//! What the facade deliberately does not do: parse HTTP or wire messages, rate-limit (the
//! edges do, per person), or judge a move (every verdict comes from a game's actor running
//! the games crate's verifier). Nor does it publish views: actors publish each accepted
//! event's per-seat views, and the facade publishes only a cancel, which has none.

mod cluster;
mod play;
mod reads;
mod seating;

pub(super) use seating::sweep_codes;

use std::sync::Arc;
use std::time::Duration;

use actix::Arbiter;
use tokio::sync::watch;

use super::engine::Engine;
use super::seats::Seats;
use super::{HubConfig, HubError};
use crate::inbox::Inbox;
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::rooms::Rooms;

/// How many arbiter threads run game actors.
fn arbiter_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8)
}

/// The facade. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Hub {
    /// Visible to the engine's own modules only for the test probes in `testkit`.
    pub(super) engine: Arc<Engine>,
    lifecycle: Arc<Lifecycle>,
}

/// What `shutdown` stops: the consumers (through `stop`) and the actor threads.
struct Lifecycle {
    stop: watch::Sender<bool>,
    consumers: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    arbiters: parking_lot::Mutex<Vec<Arbiter>>,
}

impl Hub {
    /// Opens the engine: loads seats and reservations from `meta`, starts one consumer per
    /// shard and, on a single hub, rebuilds the open games in the background
    /// (`Engine::settle_open_games`). Must be called inside an actix system (actors are
    /// started on it).
    pub async fn open(
        config: HubConfig,
        inbox: Arc<dyn Inbox>,
        meta: Arc<dyn Meta>,
        metrics: Arc<Metrics>,
        rooms: Arc<dyn Rooms>,
    ) -> Result<Hub, HubError> {
        let seats = Seats::load(meta.clone(), config.cluster.is_some()).await?;
        let arbiters: Vec<Arbiter> = (0..arbiter_count()).map(|_| Arbiter::new()).collect();
        let handles = arbiters.iter().map(|a| a.handle()).collect();
        let shards = inbox.shards();
        let engine = Arc::new(Engine::new(
            config, inbox, meta, metrics, rooms, seats, handles,
        ));
        let (stop, stop_rx) = watch::channel(false);
        let mut consumers = Vec::new();
        for shard in 0..shards {
            let from = super::consumer::start(&engine, shard)?;
            consumers.push(tokio::spawn(super::consumer::run(
                engine.clone(),
                shard,
                from,
                stop_rx.clone(),
            )));
        }
        if engine.config.cluster.is_none() {
            let settle = engine.clone();
            let stop = stop_rx.clone();
            consumers.push(tokio::spawn(async move {
                settle.settle_open_games(stop).await;
            }));
        }
        let sweeper = engine.clone();
        let mut sweep_stop = stop_rx;
        consumers.push(tokio::spawn(async move {
            for tick in 0u64.. {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        // Every second: closed games' tokens leave the cache (a walk of
                        // the open games' tokens, well under a millisecond at 10,000).
                        sweeper.seats.forget_closed_seats();
                        if tick % 10 != 0 {
                            continue;
                        }
                        sweeper.waiters.sweep(super::waiters::DONE_TTL);
                        sweeper.count_games();
                        // Hourly (and soon after start): forget pairing codes dead for a
                        // day, and cancel the games still waiting behind expired ones.
                        if tick % 3600 == 0 {
                            let keep = super::seats::CODE_KEEP.as_millis() as u64;
                            sweep_codes(&sweeper, crate::clock::now_ms(), keep).await;
                        }
                    }
                    _ = sweep_stop.changed() => return,
                }
            }
        }));
        Ok(Hub {
            engine,
            lifecycle: Arc::new(Lifecycle {
                stop,
                consumers: parking_lot::Mutex::new(consumers),
                arbiters: parking_lot::Mutex::new(arbiters),
            }),
        })
    }

    /// Stops the consumers and the actors, and makes every verdict durable. Posts still
    /// waiting answer `pending`; their captures are durable and are adjudicated when the
    /// hub opens again.
    pub async fn shutdown(&self) {
        let _ = self.lifecycle.stop.send(true);
        let consumers: Vec<_> = self.lifecycle.consumers.lock().drain(..).collect();
        for c in consumers {
            let _ = c.await;
        }
        for arbiter in self.lifecycle.arbiters.lock().drain(..) {
            arbiter.stop();
        }
        if let Err(e) = self.engine.inbox.sync().await {
            tracing::warn!(error = %e, "verdicts not synced at shutdown");
        }
    }

    /// True when the store can take writes.
    pub fn ready(&self) -> bool {
        self.engine.inbox.ready() && self.engine.meta.ready()
    }

    /// Brings the gauges that say what this hub is now up to this very moment, for a
    /// scrape: `pipehub_store_up` to what `/readyz` answers of the store ([`Hub::ready`]),
    /// and, with Redis, to whether the last lease round could write to it, and the shards
    /// this node holds ([`Hub::refresh_ownership_gauges`]). Set by a task between scrapes
    /// instead, a store that had just stopped taking writes read as up for as long as the
    /// task's period, while `/readyz` already failed.
    pub fn refresh_gauges(&self) {
        let rounds = self
            .engine
            .config
            .cluster
            .as_ref()
            .is_none_or(|c| c.rounds_succeed());
        self.engine
            .metrics
            .store_up
            .set(i64::from(self.ready() && rounds));
        self.refresh_ownership_gauges();
    }

    /// How many game actors are resident (for tests and operators).
    pub fn resident_actors(&self) -> usize {
        self.engine.resident()
    }
}
