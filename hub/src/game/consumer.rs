//! Shard consumers: one task per shard reads durable records in order and hands each to
//! its game's actor.
//!
//! A consumer starts at its shard's high-water mark as it stands when the hub opens.
//! Older records need no replay here: an actor rebuilds its game from the store's per-game
//! index when it starts, and adjudicates then any record that never got a verdict (the hub
//! stopped in between). So opening a hub costs nothing per stored record, and a record is
//! adjudicated exactly once per actor life, by position.
//!
//! In a cluster a shard has exactly one adjudicator: only the node holding its lease
//! consumes it. The consumer of a shard this node does not own reads nothing and waits for
//! the lease. When the lease comes (at start, or when another node died or gave the shard
//! up) it takes over: it retires the shard's resident actors (copies of games another
//! node adjudicated, see [`super::actor`]) so that each is rebuilt as the referee, and
//! resumes [`RESUME_MARGIN`] records before the last position the shard's verdict stream
//! covers, however far behind the shard's end that is. Every record from there on reaches
//! its actor; an actor started for it rebuilds its game (recording the verdicts the old
//! owner left unrecorded and writing what the hub owes) and ignores what it already has.
//! Beside it, the shard's games still marked open are rebuilt once
//! ([`Engine::settle_shard`]), so that a game whose close the old owner did not live to
//! write is closed. When the lease goes, the consumer stops reading at once.
//!
//! What it deliberately does not do: look inside records. Ordering within a game follows
//! from ordering within the shard; a slow actor slows only its own shard (the consumer
//! waits on a full mailbox), never a poster.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::actor::TakenOver;
use super::engine::Engine;
use crate::inbox::StoreError;

/// Records read from a shard per batch.
const BATCH: usize = 512;
/// How far before the verdict stream's last position a new owner resumes: verdicts are
/// recorded a few at a time, not strictly in order, so some just before it may be missing.
const RESUME_MARGIN: u64 = 1024;
/// How often a consumer of a shard this node does not own looks for the lease, and an
/// owner's idle consumer checks it still holds it.
const LEASE_LOOK: Duration = Duration::from_millis(100);

/// Where a shard's consumer starts: just past the records durable now. Read before the
/// hub takes any post, so that no record appended after opening is left behind.
pub fn start(engine: &Engine, shard: u32) -> Result<(watch::Receiver<u64>, u64), StoreError> {
    let durable = engine.inbox.watch_shard(shard)?;
    let next = *durable.borrow() + 1;
    Ok((durable, next))
}

/// Runs one shard's consumer from `next` until `stop` turns true.
pub async fn run(
    engine: Arc<Engine>,
    shard: u32,
    (mut durable, mut next): (watch::Receiver<u64>, u64),
    mut stop: watch::Receiver<bool>,
) {
    let label = shard.to_string();
    let backlog = engine.metrics.consumer_backlog.with_label_values(&[&label]);
    let running = engine.metrics.consumer_running.with_label_values(&[&label]);
    let clustered = engine.config.cluster.is_some();
    let mut owner = false;
    loop {
        if *stop.borrow() {
            running.set(0);
            return;
        }
        let leased = engine
            .config
            .cluster
            .as_ref()
            .is_none_or(|c| c.leased(shard));
        if !leased {
            if owner {
                tracing::info!(shard, "shard lease gone: consumer stops");
            }
            owner = false;
            running.set(0);
            backlog.set(0);
            tokio::select! {
                _ = tokio::time::sleep(LEASE_LOOK) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        // Leased but not adjudicated yet: the lease is new (or was lost and taken again
        // between two looks).
        if clustered && !engine.owns(shard) {
            match take_over(&engine, shard).await {
                Ok(from) => {
                    next = from;
                    let (engine, stop) = (engine.clone(), stop.clone());
                    tokio::spawn(async move { engine.settle_shard(shard, stop).await });
                }
                Err(e) => {
                    tracing::warn!(shard, error = %e, "take-over could not read the verdict stream; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        // Set on every round, not only when the lease came: a scrape that found the lease's
        // renewal late (see `Hub::refresh_ownership_gauges`) may have set it to 0 meanwhile.
        owner = true;
        running.set(1);
        let batch = match engine.inbox.read_shard(shard, next, BATCH).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(shard, error = %e, "shard read failed; retrying");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        if batch.is_empty() {
            backlog.set(0);
            tokio::select! {
                changed = durable.changed() => if changed.is_err() { return },
                _ = stop.changed() => {}
                _ = tokio::time::sleep(LEASE_LOOK), if clustered => {}
            }
            continue;
        }
        for record in batch {
            next = record.capture.pos + 1;
            engine.deliver(record).await;
        }
        let high = *durable.borrow();
        backlog.set(high.saturating_sub(next.saturating_sub(1)) as i64);
    }
}

/// This node has just taken `shard`'s lease: marks the shard adjudicated here, retires
/// the shard's resident actors that are not referees under this lease (copies, or referees
/// of an earlier lease that missed what another owner judged), and returns where its
/// consumer resumes. Actors started from the mark on are referees under this lease, so
/// none is retired halfway through writing what the hub owes.
async fn take_over(engine: &Arc<Engine>, shard: u32) -> Result<u64, StoreError> {
    let Some(cluster) = &engine.config.cluster else {
        return Ok(*engine.inbox.watch_shard(shard)?.borrow() + 1);
    };
    let covered = cluster.covered(shard).await?;
    cluster.adjudicate(shard);
    let Some(lease) = cluster.adjudicating_under(shard) else {
        return Err(StoreError::Unavailable(format!(
            "shard {shard}: lease lost"
        )));
    };
    let residents: Vec<_> = engine
        .resident_games()
        .into_iter()
        .filter(|(i, g)| engine.inbox.shard_of(i, g) == shard)
        .collect();
    for (inbox, game) in &residents {
        let _ = engine.ask(inbox, game, TakenOver(lease.clone())).await;
    }
    let from = covered.saturating_sub(RESUME_MARGIN) + 1;
    tracing::info!(
        shard,
        covered,
        from,
        residents = residents.len(),
        "shard taken over: consuming"
    );
    Ok(from)
}
