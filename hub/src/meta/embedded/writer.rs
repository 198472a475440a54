//! The embedded meta store's threads: the single writer, which drains staged changes in
//! batches and gives each batch one `write` and one `fdatasync`, and the compactor of the
//! cache's runs, which the writer wakes.
//!
//! Only after the fsync does the writer apply a batch to the keys, move `applied` on and
//! answer the callers, so that `get` and `scan` never show a change a crash could take
//! back; then it spills the keys gone cold. After a failed write or fsync it answers
//! every change unavailable, and the store takes no more.
//!
//! What it deliberately does not do: stage changes or check what they ask of their keys
//! (callers do, under the staging lock), or choose what to merge (the cache's policy,
//! `cold::compact`, does).

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Instant;

use tokio::sync::mpsc;

use super::cold;
use super::key::Key;
use super::{encode, spill, unavailable, Change, Shared, DELETE, PUT};
use crate::inbox::log::{self, SegmentLog};
use crate::inbox::StoreError;

/// At most this many changes share one write and fsync.
const MAX_BATCH: usize = 4096;

/// The writer thread: one write and one fsync per batch of staged changes.
pub(super) fn run(
    shared: &Shared,
    mut log: SegmentLog,
    mut rx: mpsc::UnboundedReceiver<Change>,
    pacing: log::Pacing,
    compactor: SyncSender<()>,
) {
    let mut batch = Vec::with_capacity(64);
    let mut places = Vec::with_capacity(64);
    let mut buf = Vec::new();
    let mut pacer = log::Pacer::new(pacing);
    while let Some(first) = rx.blocking_recv() {
        let size = |c: &Change| c.key.len() + c.value.as_ref().map_or(0, |v| v.len()) + 16;
        let mut bytes = size(&first);
        batch.push(first);
        pacer.wait();
        // Bounded in bytes too, so that what a crash can tear stays within
        // `log::TORN_MAX` of the end.
        while batch.len() < MAX_BATCH && bytes < log::MAX_BATCH_BYTES {
            match rx.try_recv() {
                Ok(change) => {
                    bytes += size(&change);
                    batch.push(change);
                }
                Err(_) => break,
            }
        }
        buf.clear();
        places.clear();
        let failed = shared.failed.load(Ordering::Acquire);
        let written = if failed {
            Err(unavailable())
        } else {
            log.reserve(0).map_err(StoreError::from).and_then(|at| {
                for c in &batch {
                    places.push(match &c.value {
                        Some(v) => encode(&mut buf, PUT, &c.key, v, at),
                        None => encode(&mut buf, DELETE, &c.key, &[], at),
                    });
                }
                pacer.syncing(batch.len());
                let began = Instant::now();
                log.write_batch(&mut buf, true)?;
                if let Some(h) = shared.flush_seconds.get() {
                    h.observe(began.elapsed().as_secs_f64());
                }
                Ok(())
            })
        };
        if let Err(e) = &written {
            if !failed {
                // After a failed fsync nothing written since the last good one can be
                // trusted, so the store stops taking writes rather than retry.
                tracing::error!(error = %e, "meta write failed; the store stops taking writes");
                shared.failed.store(true, Ordering::Release);
            }
        } else {
            shared.syncs.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut staged = shared.staged.lock();
            let mut keys = shared.keys.write();
            for (i, c) in batch.iter().enumerate() {
                if written.is_ok() {
                    match (&c.value, places.get(i)) {
                        (Some(_), Some(at)) => keys.insert(Key::of(&c.key), *at),
                        _ => keys.remove(&Key::of(&c.key)),
                    };
                }
                if staged
                    .newest
                    .get(&c.key)
                    .is_some_and(|(n, _)| *n == c.number)
                {
                    staged.newest.remove(&c.key);
                }
            }
            shared.applied.fetch_add(1, Ordering::Release);
        }
        for c in batch.drain(..) {
            let answer = match &written {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::Unavailable(e.to_string())),
            };
            // The caller may have been cancelled meanwhile; the change stands anyway.
            let _ = c.reply.send(answer);
        }
        spill(&shared.keys);
        if shared.keys.read().cold.wants_compaction() {
            // Full: the compactor is awake already, and looks again before it sleeps.
            let _ = compactor.try_send(());
        }
    }
}

/// The compactor's thread: woken by the writer when the cache's runs are worth compacting,
/// it compacts them until they are not (see [`cold::compact`]). After a failure it waits
/// ten seconds before it tries again; the runs meanwhile stay as they were, and answer.
pub(super) fn compactor(shared: &Shared, nudged: Receiver<()>) {
    const BACK_OFF: std::time::Duration = std::time::Duration::from_secs(10);
    let mut failed_at: Option<Instant> = None;
    while nudged.recv().is_ok() {
        if failed_at.is_some_and(|at| at.elapsed() < BACK_OFF) {
            continue;
        }
        let _one = shared.compacting.lock();
        loop {
            match cold::compact(&shared.keys, &shared.stop) {
                Ok(true) => failed_at = None,
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "a compaction of the meta cache failed; its runs stay as they were");
                    failed_at = Some(Instant::now());
                    break;
                }
            }
        }
    }
}
