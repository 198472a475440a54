//! The actor as one node of a cluster (see [`crate::cluster`]).
//!
//! An actor started on a node that does not own its game's shard is a **copy**, not a
//! referee: it never settles a record. It rebuilds the game from the per-game index up to
//! the first record without a recorded verdict (the owner's), and on each read the facade
//! sends it [`CatchUp`], which reads the index on from where the copy stopped and offers
//! the newly verdicted records to its chain. The verifier is deterministic, so the copy's
//! chain is the owner's; it only ever lags, never disagrees. No shard consumer delivers to
//! a copy: when this node takes the shard over, its consumer retires the shard's resident
//! actors so that each is rebuilt as the referee, and a record delivered to a copy anyway
//! (it started just before the lease came) makes the copy stop and the record go to a
//! fresh referee.
//!
//! A node that becomes a shard's owner retires the shard's resident actors so that each is
//! rebuilt from the store: the rebuild records the verdicts the old owner never recorded
//! and writes whatever the hub owes, now that this node may write. And when another node
//! hands over an intent for a game (its registration changed there), the owner kicks the
//! game's actor to write what it owes.
//!
//! What it deliberately does not do: decide who owns what (the cluster's leases do).

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use games::verify::Verdict as ChainVerdict;
use games::Viewer;

use super::GameActor;
use crate::game::engine::Engine;
use crate::game::types::Listed;
use crate::game::HubError;
use crate::inbox::{Record, StoredVerdict};

/// Whether the actor is a copy of a game adjudicated elsewhere, and how far it has read.
#[derive(Debug, Default)]
pub struct Following {
    /// True when the actor started on a node that does not own the game's shard.
    pub copy: bool,
    /// The lease under which the actor started as the referee (`None`: a copy, or a
    /// single hub).
    lease: Option<String>,
    /// How many entries of the per-game index the chain has taken in (a copy's only).
    indexed: Option<usize>,
    /// When this copy last asked the owner to look at a record left without a verdict.
    nudged: Option<Instant>,
}

/// A record this long without a recorded verdict makes a copy ask the owner to rebuild the
/// game (its verdict was lost, e.g. its owner's lease lapsed while it recorded it).
const STUCK_AFTER: Duration = Duration::from_secs(10);

type Fetched = (Vec<Record>, Vec<Option<StoredVerdict>>);

/// The game's records after the first `skip` of its index, each with its recorded verdict.
async fn fetch(
    engine: Arc<Engine>,
    inbox: Arc<str>,
    game: Arc<str>,
    skip: usize,
) -> Result<Fetched, HubError> {
    let records = engine.inbox.game_records_from(&inbox, &game, skip).await?;
    let captures: Vec<_> = records.iter().map(|r| r.capture).collect();
    let verdicts = engine.inbox.verdicts(&captures).await?;
    Ok((records, verdicts))
}

impl GameActor {
    /// At start: true (and the rebuild is under way) when this actor is a copy.
    pub(super) fn start_copy(&mut self, ctx: &mut Context<Self>) -> bool {
        let shard = self.engine.inbox.shard_of(&self.inbox, &self.game);
        self.copy.copy = !self.engine.owns(shard);
        self.copy.lease = self
            .engine
            .config
            .cluster
            .as_ref()
            .and_then(|c| c.adjudicating_under(shard));
        if !self.copy.copy {
            return false;
        }
        let fut = fetch(
            self.engine.clone(),
            self.inbox.clone(),
            self.game.clone(),
            0,
        );
        ctx.wait(fut.into_actor(self).map(|res, act, ctx| match res {
            Ok(fetched) => act.follow(fetched, 0),
            Err(e) => {
                tracing::warn!(game = %act.game, error = %e, "copy could not rebuild; stopping");
                ctx.stop();
            }
        }));
        true
    }

    /// Offers the records (the index from entry `skip` on) that have a recorded verdict
    /// to the chain, in order, stopping at the first without one.
    fn follow(&mut self, (records, verdicts): Fetched, skip: usize) {
        let mut indexed = skip;
        let mut moved = false;
        for (record, verdict) in records.iter().zip(verdicts) {
            if record.capture.pos > self.last_pos {
                let Some(recorded) = verdict else {
                    self.nudge_if_stuck(record);
                    break;
                };
                self.last_pos = record.capture.pos;
                moved = true;
                let (verdict, _, event) = self.judge(record);
                if let (ChainVerdict::Accepted { hash }, Some(event)) = (&verdict, &event) {
                    self.on_accepted(record.capture, event, hash, record.seat);
                }
                if matches!(verdict, ChainVerdict::Accepted { .. })
                    != matches!(recorded, StoredVerdict::Accepted { .. })
                {
                    tracing::error!(capture = %record.capture, "a copy's verdict differs from the owner's");
                }
            }
            indexed += 1;
        }
        self.copy.indexed = Some(indexed);
        if moved {
            if let Ok(spectator) = self.state(Viewer::Spectator) {
                self.engine
                    .list(&self.inbox, &self.game, Listed::of(&spectator));
            }
        }
    }

    /// Asks the owner (through the intent stream) to rebuild the game when `record` has
    /// waited too long for its verdict; at most once per [`STUCK_AFTER`].
    fn nudge_if_stuck(&mut self, record: &Record) {
        let age = crate::clock::now_ms().saturating_sub(record.at_ms);
        let recently = self.copy.nudged.is_some_and(|t| t.elapsed() < STUCK_AFTER);
        if age < STUCK_AFTER.as_millis() as u64 || recently {
            return;
        }
        self.copy.nudged = Some(Instant::now());
        let Some(cluster) = self.engine.config.cluster.clone() else {
            return;
        };
        let shard = record.capture.shard;
        let (inbox, game) = (self.inbox.clone(), self.game.clone());
        tracing::warn!(capture = %record.capture, "no verdict recorded yet; asking the owner to rebuild the game");
        actix::spawn(async move { cluster.hand_over(shard, &inbox, &game).await });
    }

    /// A record delivered by this node's consumer to a copy (the copy started just before
    /// this node took the shard): the copy stops and the record goes to a fresh referee.
    pub(super) fn copy_delivered(&mut self, record: &Record, ctx: &mut Context<Self>) -> bool {
        if !self.copy.copy {
            return false;
        }
        self.engine.forget(&self.inbox, &self.game, &ctx.address());
        ctx.stop();
        // Only while this node adjudicates the shard: else the record is the next owner's.
        if self.engine.owns(record.capture.shard) {
            let (engine, record) = (self.engine.clone(), record.clone());
            actix::spawn(async move { engine.deliver(record).await });
        }
        true
    }
}

/// Catch up with the verdicts recorded since the last read (a copy), or with every
/// recorded verdict past the chain's last record (a referee whose node lost the shard).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<(), HubError>")]
pub struct CatchUp;

impl Handler<CatchUp> for GameActor {
    type Result = AtomicResponse<Self, Result<(), HubError>>;

    fn handle(&mut self, _msg: CatchUp, _ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        AtomicResponse::new(self.caught_up())
    }
}

impl GameActor {
    /// Reads the verdicts recorded since the last read and follows them.
    pub(super) fn caught_up(&mut self) -> ResponseActFuture<Self, Result<(), HubError>> {
        let skip = self.copy.indexed.unwrap_or(0);
        let fut = fetch(
            self.engine.clone(),
            self.inbox.clone(),
            self.game.clone(),
            skip,
        );
        Box::pin(fut.into_actor(self).map(move |res, act, _| {
            act.follow(res?, skip);
            Ok(())
        }))
    }
}

/// Leave the directory and stop now; the next ask starts a fresh actor that rebuilds.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

impl Handler<Retire> for GameActor {
    type Result = ();

    fn handle(&mut self, _msg: Retire, ctx: &mut Self::Context) {
        // A held choice lives only in this actor: keep it rather than lose it.
        if self.held.contains(&true) {
            return;
        }
        self.engine.forget(&self.inbox, &self.game, &ctx.address());
        ctx.stop();
    }
}

/// This node now adjudicates the game's shard under `lease`: an actor that started as a
/// copy, or as the referee under an earlier lease (it missed what another owner judged
/// meanwhile), leaves the directory and stops, to be rebuilt as the referee. A choice an
/// earlier referee held is lost with it (the rebuilt actor tells the seat): its chain
/// missed events, so it must not judge the records to come.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct TakenOver(pub String);

impl Handler<TakenOver> for GameActor {
    type Result = ();

    fn handle(&mut self, msg: TakenOver, ctx: &mut Self::Context) {
        if self.copy.lease.as_deref() == Some(msg.0.as_str()) {
            return;
        }
        self.engine.forget(&self.inbox, &self.game, &ctx.address());
        ctx.stop();
    }
}

/// Look again at what the hub owes the game (its registration was refreshed).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Kick;

impl Handler<Kick> for GameActor {
    type Result = ();

    fn handle(&mut self, _msg: Kick, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        self.write_failures = 0;
        self.write_owed(ctx);
    }
}
