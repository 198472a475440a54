//! Keys the embedded meta store keeps out of memory. Two classes of them:
//! - *lasting* keys, the seats and the registrations (`seat/…` and `game/…`), three of
//!   every game ever seated, which a running hub reads only for games that finished (an
//!   open game's are cached by the seats module);
//! - *codes* (`code/…`), one of every game seated, whose tombstone answers a late try
//!   for a day and is then purged.
//!
//! Once enough keys of a class have gathered in memory ([`super::COLD_KEYS`] unless the hub
//! is told otherwise), the store's writer moves them all to a *run*: the keys in order, each
//! with where its value lies in the log, written in blocks of about 4 KiB to an unlinked
//! cache file of its own in the data directory. A run keeps in memory only the first key of
//! each block and a Bloom filter of its keys (a few bytes a key instead of about ninety), so
//! finding a key costs one `pread` for each run of its class whose filter admits it (about
//! one in a thousand admits a key it does not hold).
//!
//! A key deleted after it was spilled is remembered in memory as *gone*, and a key written
//! again lives in memory, so what memory holds always has the last word. Gone keys and
//! stale copies are dropped when runs are *compacted*, on a thread of their own (see
//! [`compact`]): [`FAN_IN`] neighbouring runs of a class are merged into one once the
//! oldest of them holds less than twice the newest's keys, so a class keeps up to three
//! runs of each size, about 3·log₄ of its keys over [`super::COLD_KEYS`] in all, and a key
//! is rewritten about log₄ of that many times; and a run of which a
//! sixteenth is gone is written again without them, so that the codes the hourly purge
//! deletes leave memory too. A gone key is forgotten once no run of its class admits it.
//!
//! Like the inbox's index cache, the files are never synced and have no recovery: they are
//! made again from the log at every open (spilled as it is replayed, then merged into one
//! run a class: see [`bound_gone`] and [`merge_replayed`]) and go when the store closes.
//! After a failed
//! spill the keys stay in memory, and no spill is tried for [`SPILL_RETRY`] (a file could
//! not be made: no descriptor or no space left); a failed compaction leaves the runs as
//! they were; a failed read is an error the caller gets (a 503), never a key reported
//! missing.

use std::collections::HashSet;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

use super::key::{Key, HASHED, HASHED_LEN};
use super::Keys;
use crate::inbox::log::FramePos;
use crate::inbox::StoreError;

mod merge;
mod run;

use merge::{merge, next_merged};
use run::{Cursor, Run, RunWriter, BLOCK, FLUSH};

/// How many classes of cold keys there are: lasting keys, and codes.
pub(super) const CLASSES: usize = 2;
/// The prefixes of each class's keys.
const FAMILIES: [&[&str]; CLASSES] = [&["game/", "seat/"], &["code/"]];
/// How long after a failed spill keys stay in memory before a spill is tried again.
pub(super) const SPILL_RETRY: Duration = Duration::from_secs(10);
/// A run of which this share is gone is written again without them.
const GARBAGE: u64 = 16;
/// How many neighbouring runs of about one size a compaction merges at once. Merging two
/// at a time rewrote a key about log₂(keys / COLD_KEYS) times, about twelve after a day of
/// a busy hub; four at a time halves that, for up to three runs of each size where there
/// was one, each a Bloom filter to ask (about 50 ns) before a block is read.
const FAN_IN: usize = 4;
/// The class of a key that goes cold, if it is one (a record spells its key's length in
/// two bytes).
pub(super) fn class(key: &Key) -> Option<usize> {
    match key {
        Key::Hashed(place, _) => match HASHED.get(usize::from(*place)) {
            Some(&"seat/") => Some(0),
            Some(&"code/") => Some(1),
            _ => None,
        },
        Key::Text(text) => {
            (text.starts_with("game/") && text.len() <= usize::from(u16::MAX)).then_some(0)
        }
    }
}

/// True when a key starting with `prefix` may belong to `class`.
fn may_hold(class: usize, prefix: &str) -> bool {
    FAMILIES[class]
        .iter()
        .any(|family| family.starts_with(prefix) || prefix.starts_with(family))
}

/// The runs of each class, and the keys deleted since they were written.
pub(super) struct Cold {
    dir: PathBuf,
    /// When a spill last failed: no key goes cold for [`SPILL_RETRY`] after.
    failed_at: Option<Instant>,
    tiers: [Tier; CLASSES],
}

/// One class's runs.
#[derive(Default)]
struct Tier {
    /// Oldest first: a newer run's place for a key is the one that counts.
    runs: Vec<Listed>,
    /// Keys deleted while a run may still hold them: they shadow every run of the class.
    gone: HashSet<Key>,
}

struct Listed {
    run: Arc<Run>,
    /// How many keys were deleted whose newest copy is in this run.
    gone: u64,
}

impl Cold {
    /// Runs to be made in `dir` (none yet).
    pub(super) fn create(dir: &Path) -> Cold {
        Cold {
            dir: dir.to_path_buf(),
            failed_at: None,
            tiers: Default::default(),
        }
    }

    /// False while keys cannot go cold: for [`SPILL_RETRY`] after a spill failed.
    pub(super) fn spilling(&self) -> bool {
        self.spilling_at(Instant::now())
    }

    /// [`Cold::spilling`] at `now`.
    pub(super) fn spilling_at(&self, now: Instant) -> bool {
        self.failed_at
            .is_none_or(|at| now.saturating_duration_since(at) >= SPILL_RETRY)
    }

    /// How many keys the runs hold (some may be stale: written again since, or gone).
    pub(super) fn keys(&self) -> u64 {
        self.tiers
            .iter()
            .flat_map(|tier| &tier.runs)
            .map(|listed| listed.run.keys)
            .sum()
    }

    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.tiers.iter().map(|tier| tier.runs.len()).sum()
    }

    /// True when `class` has a run.
    pub(super) fn holds_class(&self, class: usize) -> bool {
        !self.tiers[class].runs.is_empty()
    }

    /// How many keys are gone from the runs (deleted while a run may hold them).
    pub(super) fn gone(&self) -> usize {
        self.tiers.iter().map(|tier| tier.gone.len()).sum()
    }

    /// Writes `keys` (in order, every one of one class; `count` of them) to a new run.
    /// Takes `&self`, so that readers go on meanwhile: only the store's writer spills.
    pub(super) fn write<'a>(
        &self,
        keys: impl Iterator<Item = (&'a Key, &'a FramePos)>,
        count: usize,
    ) -> Result<Option<Run>, StoreError> {
        let mut writer = RunWriter::new(&self.dir, count)?;
        for (key, at) in keys {
            writer.push(key, *at)?;
        }
        writer.finish()
    }

    /// Lists a run [`Cold::write`] wrote for `class`, or after its failure keeps the keys
    /// in memory and spills nothing for [`SPILL_RETRY`].
    pub(super) fn install(
        &mut self,
        class: usize,
        written: Result<Option<Run>, StoreError>,
    ) -> bool {
        match written {
            Ok(run) => {
                if let Some(run) = run {
                    self.tiers[class].runs.push(Listed {
                        run: Arc::new(run),
                        gone: 0,
                    });
                }
                self.failed_at = None;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_s = SPILL_RETRY.as_secs(), "cannot write a meta cache file: keys stay in memory until a spill is tried again");
                self.failed_at = Some(Instant::now());
                false
            }
        }
    }

    /// `key`, cold, was deleted: it must not be found in a run again. A key deleted from
    /// the runs was found in one (or discarded just after it was read), and its newest
    /// run's filter admits it. One deleted from memory (`in_memory`) may be in none, and a
    /// filter that admits it falsely would leave a gone entry no compaction meets: a run is
    /// read to be sure (a failed read counts as holding it; a gone entry too many costs
    /// memory, not a wrong answer). A key gone already (discarded twice) changes nothing.
    pub(super) fn forget(&mut self, key: &Key, in_memory: bool) {
        let Some(tier) = class(key).map(|class| &mut self.tiers[class]) else {
            return;
        };
        if !in_memory && tier.gone.contains(key) {
            return;
        }
        let holds = |run: &Run| match in_memory {
            false => run.bloom.contains(key),
            true => !matches!(run.find(key), Ok(None)),
        };
        if let Some(newest) = tier.runs.iter_mut().rev().find(|l| holds(&l.run)) {
            newest.gone += 1;
            tier.gone.insert(key.clone());
        }
    }

    /// `key`, cold, was written again: memory has it now.
    pub(super) fn revive(&mut self, key: &Key) {
        if let Some(tier) = class(key).map(|class| &mut self.tiers[class]) {
            if !tier.gone.is_empty() {
                tier.gone.remove(key);
            }
        }
    }

    /// Where a cold key's value lies, newest run first.
    pub(super) fn get(&self, key: &Key) -> Result<Option<FramePos>, StoreError> {
        let Some(tier) = class(key).map(|class| &self.tiers[class]) else {
            return Ok(None);
        };
        if tier.gone.contains(key) {
            return Ok(None);
        }
        for run in tier.runs.iter().rev().map(|listed| &listed.run) {
            if let Some(at) = run.find(key)? {
                return Ok(Some(at));
            }
        }
        Ok(None)
    }

    /// The first `limit` cold keys from `from` on that start with `prefix`, in order, with
    /// where their values lie.
    pub(super) fn scan(
        &self,
        from: &Bound<Key>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(Key, FramePos)>, StoreError> {
        let past = |key: &Key| match from {
            Bound::Included(from) => key >= from,
            Bound::Excluded(from) => key > from,
            Bound::Unbounded => true,
        };
        let mut spelled = [0u8; HASHED_LEN];
        let from_text = match from {
            Bound::Included(from) | Bound::Excluded(from) => Some(from.text(&mut spelled)),
            Bound::Unbounded => None,
        };
        // The runs merged from `from` on, a block at a time, so that a page reads about
        // what it keeps (and a block a run more). A class's runs oldest first, so that a
        // newer run's place for a key is the one kept; the classes' keys never meet.
        let mut cursors: Vec<Cursor> = Vec::new();
        for (class, tier) in self.tiers.iter().enumerate() {
            if may_hold(class, prefix) {
                cursors.extend(tier.runs.iter().map(|listed| {
                    let first = from_text.and_then(|from| listed.run.blocks.find(from));
                    Cursor::at(&listed.run, first.unwrap_or(0), BLOCK)
                }));
            }
        }
        let mut found = Vec::new();
        while found.len() < limit {
            let Some((key, at)) = next_merged(&mut cursors)? else {
                break;
            };
            let mut text = [0u8; HASHED_LEN];
            let spelled = key.text(&mut text);
            if !past(&key) || spelled < prefix.as_bytes() {
                continue;
            }
            if !spelled.starts_with(prefix.as_bytes()) {
                break; // in order: every key after it is past the prefix
            }
            let gone = class(&key).is_some_and(|class| self.tiers[class].gone.contains(&key));
            if !gone {
                found.push((key, at));
            }
        }
        Ok(found)
    }

    /// What the runs' entries take in the log (stale ones too: see [`merge_replayed`]).
    pub(super) fn bytes(&self) -> u64 {
        self.tiers
            .iter()
            .flat_map(|tier| &tier.runs)
            .map(|listed| listed.run.bytes)
            .sum()
    }

    /// Writes every run again with its keys' new places, as an open compacts the log:
    /// `moved` writes a key's value again, given where it lies now, and says where it lies
    /// then. Gone keys are left out, and so forgotten. Keys memory holds are not: the
    /// caller writes memory's entries after these, so that a replay ends with them.
    pub(super) fn rewrite(
        &mut self,
        mut moved: impl FnMut(&Key, FramePos) -> Result<FramePos, StoreError>,
    ) -> Result<(), StoreError> {
        let dir = &self.dir;
        for tier in &mut self.tiers {
            let mut fresh = Vec::with_capacity(tier.runs.len());
            for listed in &tier.runs {
                let mut writer = RunWriter::new(dir, listed.run.keys as usize)?;
                let mut cursor = Cursor::at(&listed.run, 0, FLUSH);
                while let Some((key, at)) = cursor.pop()? {
                    if tier.gone.is_empty() || !tier.gone.contains(&key) {
                        writer.push(&key, moved(&key, at)?)?;
                    }
                }
                fresh.extend(writer.finish()?.map(|run| Listed {
                    run: Arc::new(run),
                    gone: 0,
                }));
            }
            tier.runs = fresh;
            tier.gone.clear();
        }
        Ok(())
    }

    /// The next compaction worth doing, if any, as (class, first run, how many runs): a run
    /// of which a sixteenth is gone, written again alone; else the newest [`FAN_IN`]
    /// neighbours of a class of which the oldest holds less than twice the newest's keys,
    /// merged.
    fn plan(&self) -> Option<(usize, usize, usize)> {
        if !self.spilling() {
            return None;
        }
        for (class, tier) in self.tiers.iter().enumerate() {
            let garbage = tier
                .runs
                .iter()
                .position(|listed| listed.gone > 0 && listed.gone * GARBAGE >= listed.run.keys);
            if let Some(first) = garbage {
                return Some((class, first, 1));
            }
        }
        for (class, tier) in self.tiers.iter().enumerate() {
            let window = tier
                .runs
                .windows(FAN_IN)
                .rposition(|runs| runs[0].run.keys < 2 * runs[FAN_IN - 1].run.keys);
            if let Some(first) = window {
                return Some((class, first, FAN_IN));
            }
        }
        None
    }

    /// True when [`compact`] has something to do.
    pub(super) fn wants_compaction(&self) -> bool {
        self.plan().is_some()
    }
}

/// Keeps the gone entries of an open's replay few: the replay spills a run every
/// [`super::COLD_KEYS`] keys of a class, and each deletion it replays of a key already
/// spilled is a gone entry in memory. Once a class has more than `at_least` of them, and
/// at least one for every eight keys its runs hold, its runs are merged into one without
/// them. So memory keeps at most `at_least` gone entries a class or an eighth as many as
/// its cold keys, whichever is more, and a merge rewrites the class's keys once for every
/// eighth of them deleted.
pub(super) fn bound_gone(keys: &RwLock<Keys>, at_least: usize) -> Result<(), StoreError> {
    for class in 0..CLASSES {
        let runs = {
            let keys = keys.read();
            let tier = &keys.cold.tiers[class];
            let held: u64 = tier.runs.iter().map(|listed| listed.run.keys).sum();
            let gone = tier.gone.len();
            if gone <= at_least || (gone as u64) * 8 < held {
                continue;
            }
            tier.runs.len()
        };
        merge(keys, &AtomicBool::new(false), (class, 0, runs))?;
    }
    Ok(())
}

/// Merges each class's runs into one once an open's replay is done. The replay spilled
/// one every [`super::COLD_KEYS`] keys, and the compactor's policy would merge so many runs
/// of one size pairwise, writing the growing run again at every step. The merge leaves
/// out gone keys and keys memory holds, so that afterwards the runs hold every cold key
/// once and only those: what [`Cold::bytes`] counts and [`Cold::rewrite`] relies on.
pub(super) fn merge_replayed(keys: &RwLock<Keys>) -> Result<(), StoreError> {
    for class in 0..CLASSES {
        let runs = keys.read().cold.tiers[class].runs.len();
        if runs > 0 {
            merge(keys, &AtomicBool::new(false), (class, 0, runs))?;
        }
    }
    Ok(())
}

/// Does the next compaction worth doing (see [`Cold::plan`]); false when there was none,
/// or when `stop` was set meanwhile. The runs are read and the new one written with no
/// lock held; each batch of merged keys is checked against memory under a read lock (a key
/// gone, or written again since it was spilled, is left out), and the new run takes the old
/// ones' place under a short write lock; then the gone keys it left out are forgotten
/// where no run admits them any more, a batch at a time. Only one compaction runs at a
/// time (the caller sees to it); spills meanwhile only add newer runs, and deletions
/// meanwhile are gone entries that shadow the new run as they did the old ones.
pub(super) fn compact(keys: &RwLock<Keys>, stop: &AtomicBool) -> Result<bool, StoreError> {
    let plan = keys.read().cold.plan();
    match plan {
        Some(plan) => merge(keys, stop, plan),
        None => Ok(false),
    }
}

#[cfg(test)]
#[path = "../cold_tests.rs"]
mod tests;
