//! Shard consumers: one task per shard reads durable records in order and hands each to
//! its game's actor.
//!
//! A consumer starts at its shard's high-water mark as it stands when the hub opens.
//! Older records need no replay here: an actor rebuilds its game from the store's per-game
//! index when it starts, and adjudicates then any record that never got a verdict (the hub
//! stopped in between). So opening a hub costs nothing per stored record, and a record is
//! adjudicated exactly once per actor life, by position.
//!
//! What it deliberately does not do: look inside records. Ordering within a game follows
//! from ordering within the shard; a slow actor slows only its own shard (the consumer
//! waits on a full mailbox), never a poster.

use std::sync::Arc;

use tokio::sync::watch;

use super::engine::Engine;
use crate::inbox::StoreError;

/// Records read from a shard per batch.
const BATCH: usize = 512;

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
    loop {
        if *stop.borrow() {
            return;
        }
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
