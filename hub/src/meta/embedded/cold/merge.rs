//! Merging neighbouring runs of one class into one: the compactor's work, and an open's
//! once its replay is done (when: [`compact`](super::compact),
//! [`bound_gone`](super::bound_gone) and [`merge_replayed`](super::merge_replayed)).
//!
//! The runs are read, and the new one written, with no lock held: memory is consulted a
//! batch of [`BATCH`] merged keys at a time under a read lock, the new run takes the old
//! ones' place under a short write lock, and the gone keys it left out are forgotten
//! afterwards, a batch at a time. [`next_merged`] is also how a scan reads a class's runs
//! as one.
//!
//! What it deliberately does not do: choose what to merge (the policy is
//! [`Cold`](super::Cold)'s), or run two merges at once (its callers see to that).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use super::run::{Cursor, Run, RunWriter, FLUSH};
use super::{Keys, Listed, Tier};
use crate::inbox::log::FramePos;
use crate::inbox::StoreError;
use crate::meta::embedded::key::Key;

/// How many merged keys a compaction checks against memory under one read lock, and how
/// many gone entries it forgets under one write lock.
const BATCH: usize = 4096;
/// How many gone keys a compaction leaves out before it stops listing them, and finds them
/// again by reading its old runs once more instead (see [`LeftOut`]).
#[cfg(not(test))]
const LEFT_OUT: usize = 65_536;
#[cfg(test)]
const LEFT_OUT: usize = 2;

/// Neighbouring runs of one class to be made into one.
struct Job {
    class: usize,
    /// Where the first of them is listed.
    first: usize,
    runs: Vec<Arc<Run>>,
    /// How many deletions had been counted against them as the job began.
    gone: u64,
}

/// Merges `count` neighbouring runs of `class` from its `first` into one, as
/// [`compact`](super::compact) describes; false when `stop` was set meanwhile.
pub(super) fn merge(
    keys: &RwLock<Keys>,
    stop: &AtomicBool,
    (class, first, count): (usize, usize, usize),
) -> Result<bool, StoreError> {
    let (job, dir) = {
        let keys = keys.read();
        let Some(listed) = keys.cold.tiers[class].runs.get(first..first + count) else {
            return Ok(false);
        };
        let job = Job {
            class,
            first,
            runs: listed.iter().map(|listed| listed.run.clone()).collect(),
            gone: listed.iter().map(|listed| listed.gone).sum(),
        };
        (job, keys.cold.dir.clone())
    };
    let expected: u64 = job.runs.iter().map(|run| run.keys).sum();
    let mut writer = RunWriter::new(&dir, expected as usize)?;
    let mut cursors: Vec<Cursor> = job
        .runs
        .iter()
        .map(|run| Cursor::at(run, 0, FLUSH))
        .collect();
    // Gone keys left out, to be forgotten once the new run is listed.
    let mut left_out = LeftOut::Few(Vec::new());
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        while batch.len() < BATCH {
            match next_merged(&mut cursors)? {
                Some(record) => batch.push(record),
                None => break,
            }
        }
        if batch.is_empty() {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        let kept: Vec<(Key, FramePos)> = {
            let keys = keys.read();
            let gone = &keys.cold.tiers[job.class].gone;
            batch
                .drain(..)
                .filter_map(|(key, at)| {
                    if gone.contains(&key) {
                        left_out.push(key);
                        None
                    } else if keys.map.contains_key(&key) {
                        None
                    } else {
                        Some((key, at))
                    }
                })
                .collect()
        };
        for (key, at) in &kept {
            writer.push(key, *at)?;
        }
    }
    let run = writer.finish()?;
    let replaced: Vec<Listed> = {
        let mut keys = keys.write();
        let tier = &mut keys.cold.tiers[job.class];
        let still_listed = job.runs.iter().enumerate().all(|(i, run)| {
            tier.runs
                .get(job.first + i)
                .is_some_and(|listed| Arc::ptr_eq(&listed.run, run))
        });
        if !still_listed {
            return Err(StoreError::Unavailable(
                "the meta cache's runs changed under a compaction".into(),
            ));
        }
        // Keys deleted meanwhile were counted against the old runs; the new one may hold
        // them (counted once too many when their batch was checked after the deletion).
        let range = job.first..job.first + job.runs.len();
        let gone: u64 = tier.runs[range.clone()].iter().map(|l| l.gone).sum();
        let new = run.map(|run| Listed {
            run: Arc::new(run),
            gone: gone - job.gone,
        });
        let replaced = tier.runs.splice(range, new).collect();
        if tier.runs.is_empty() {
            tier.gone.clear();
        }
        replaced
    };
    drop(replaced);
    // The gone keys left out are forgotten where no run admits them any more, a batch at a
    // time under short write locks: a purge may have left out millions, and the store's
    // readers and writer must not wait for them all.
    match left_out {
        LeftOut::Few(list) => {
            for chunk in list.chunks(BATCH) {
                forget_unlisted(keys, job.class, chunk);
            }
        }
        LeftOut::Many => {
            for run in &job.runs {
                let mut cursor = Cursor::at(run, 0, FLUSH);
                let mut chunk = Vec::with_capacity(BATCH);
                loop {
                    while chunk.len() < BATCH {
                        match cursor.pop()? {
                            Some((key, _)) => chunk.push(key),
                            None => break,
                        }
                    }
                    if chunk.is_empty() {
                        break;
                    }
                    if stop.load(Ordering::Relaxed) {
                        // Closing: what is left costs memory until then, never an answer.
                        return Ok(true);
                    }
                    forget_unlisted(keys, job.class, &chunk);
                    chunk.clear();
                }
            }
        }
    }
    // The old runs' files close here, outside the lock, as their last references go.
    drop(job);
    Ok(true)
}

/// The gone keys a compaction left out: listed while they are few, else only known to be
/// among its old runs' keys, which are read once more to find them. A purge's compaction
/// may leave out millions, and a list of them would be tens of megabytes at once.
enum LeftOut {
    Few(Vec<Key>),
    Many,
}

impl LeftOut {
    fn push(&mut self, key: Key) {
        if let LeftOut::Few(list) = self {
            if list.len() < LEFT_OUT {
                list.push(key);
            } else {
                *self = LeftOut::Many;
            }
        }
    }
}

/// Forgets those of `candidates` that are gone from `class` and that no run of it admits.
/// They are picked under a read lock and checked again under the write lock: meanwhile a
/// key may have been written again, spilled to a new run and deleted once more.
fn forget_unlisted(keys: &RwLock<Keys>, class: usize, candidates: &[Key]) {
    let unlisted = |tier: &Tier, key: &Key| {
        tier.gone.contains(key) && !tier.runs.iter().any(|l| l.run.bloom.contains(key))
    };
    let picked: Vec<&Key> = {
        let keys = keys.read();
        let tier = &keys.cold.tiers[class];
        if tier.gone.is_empty() {
            return;
        }
        candidates
            .iter()
            .filter(|key| unlisted(tier, key))
            .collect()
    };
    if picked.is_empty() {
        return;
    }
    let mut keys = keys.write();
    let tier = &mut keys.cold.tiers[class];
    for key in picked {
        if unlisted(tier, key) {
            tier.gone.remove(key);
        }
    }
}

/// The least key at the cursors' heads, with the place the newest run gives it; every
/// cursor holding it moves past it.
pub(super) fn next_merged(cursors: &mut [Cursor]) -> Result<Option<(Key, FramePos)>, StoreError> {
    let mut least: Option<(usize, Key)> = None;
    for (i, cursor) in cursors.iter_mut().enumerate() {
        if let Some((key, _)) = cursor.peek()? {
            // Later cursors are newer runs: on a tie, theirs wins.
            if least.as_ref().is_none_or(|(_, least)| key <= least) {
                least = Some((i, key.clone()));
            }
        }
    }
    let Some((newest, key)) = least else {
        return Ok(None);
    };
    let mut place = None;
    for (i, cursor) in cursors.iter_mut().enumerate() {
        if cursor.head.as_ref().is_some_and(|(k, _)| *k == key) {
            let (_, at) = cursor.head.take().expect("a head");
            if i == newest {
                place = Some(at);
            }
        }
    }
    Ok(place.map(|at| (key, at)))
}
