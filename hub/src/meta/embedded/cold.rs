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
use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fastbloom::BloomFilter;
use parking_lot::RwLock;

use super::key::{Key, HASHED, HASHED_LEN};
use super::{entry_bytes, Keys};
use crate::inbox::log::FramePos;
use crate::inbox::StoreError;

/// How many classes of cold keys there are: lasting keys, and codes.
pub(super) const CLASSES: usize = 2;
/// The prefixes of each class's keys.
const FAMILIES: [&[&str]; CLASSES] = [&["game/", "seat/"], &["code/"]];
/// About what one `pread` of a run reads.
const BLOCK: usize = 4096;
/// What a run's writer gathers before a `write`, and a compaction reads at once.
const FLUSH: usize = 1 << 20;
/// Bytes of a record besides its key's text: the text's length, and where the value lies.
const RECORD: usize = 2 + 4 + 8 + 4;
/// How long after a failed spill keys stay in memory before a spill is tried again.
pub(super) const SPILL_RETRY: Duration = Duration::from_secs(10);
/// A run of which this share is gone is written again without them.
const GARBAGE: u64 = 16;
/// How many neighbouring runs of about one size a compaction merges at once. Merging two
/// at a time rewrote a key about log₂(keys / COLD_KEYS) times, about twelve after a day of
/// a busy hub; four at a time halves that, for up to three runs of each size where there
/// was one, each a Bloom filter to ask (about 50 ns) before a block is read.
const FAN_IN: usize = 4;
/// How many merged keys a compaction checks against memory under one read lock, and how
/// many gone entries it forgets under one write lock.
const BATCH: usize = 4096;
/// How many gone keys a compaction leaves out before it stops listing them, and finds them
/// again by reading its old runs once more instead (see [`LeftOut`]).
#[cfg(not(test))]
const LEFT_OUT: usize = 65_536;
#[cfg(test)]
const LEFT_OUT: usize = 2;

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

/// A sorted run in a file of its own. It never changes; compaction makes new ones.
pub(super) struct Run {
    file: File,
    blocks: Blocks,
    bloom: BloomFilter,
    keys: u64,
    /// What its keys' entries take in the log: frames of keys and values.
    bytes: u64,
}

/// Where a run's blocks lie (they follow each other from the file's start), with the first
/// key of each spelled out in one buffer. A key of its own each would be as many small
/// allocations that live as long as the run, scattered among the many short-lived ones of
/// a compaction, which then could not give their memory back.
#[derive(Default)]
struct Blocks {
    firsts: Vec<u8>,
    /// Each block: where its first key's text ends in `firsts`, where the block lies, and
    /// its length.
    places: Vec<(usize, u64, u32)>,
}

impl Blocks {
    fn len(&self) -> usize {
        self.places.len()
    }

    fn first(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |before| self.places[before].0);
        &self.firsts[start..self.places[i].0]
    }

    /// Where block `i` lies, and its length.
    fn place(&self, i: usize) -> (u64, usize) {
        let (_, at, len) = self.places[i];
        (at, len as usize)
    }

    fn push(&mut self, first: &[u8], at: u64) {
        self.firsts.extend_from_slice(first);
        self.places.push((self.firsts.len(), at, 0));
    }

    /// The block that would hold the key spelled `text`: the last whose first key is not
    /// past it.
    fn find(&self, text: &[u8]) -> Option<usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.first(middle) <= text {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low.checked_sub(1)
    }
}

impl Run {
    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, StoreError> {
        let mut bytes = vec![0u8; len];
        self.file.read_exact_at(&mut bytes, at)?;
        Ok(bytes)
    }

    /// Where this run puts `key`, if it holds it.
    fn find(&self, key: &Key) -> Result<Option<FramePos>, StoreError> {
        if !self.bloom.contains(key) {
            return Ok(None);
        }
        let mut text = [0u8; HASHED_LEN];
        let spelled = key.text(&mut text);
        let Some((at, len)) = self.blocks.find(spelled).map(|i| self.blocks.place(i)) else {
            return Ok(None);
        };
        let block = self.read(at, len)?;
        let found = records(&block)?.into_iter().find(|(k, _)| *k == spelled);
        Ok(found.map(|(_, at)| at))
    }
}

/// Writes a run a record at a time, in key order.
pub(super) struct RunWriter {
    file: File,
    buf: Vec<u8>,
    /// Where `buf` goes in the file, and where its open block starts in it.
    base: u64,
    block: usize,
    blocks: Blocks,
    bloom: BloomFilter,
    keys: u64,
    bytes: u64,
}

impl RunWriter {
    /// A writer of a run of about `expected` keys, in a fresh unlinked file in `dir`.
    fn new(dir: &Path, expected: usize) -> Result<RunWriter, StoreError> {
        Ok(RunWriter {
            file: tempfile::tempfile_in(dir)?,
            buf: Vec::with_capacity(FLUSH + BLOCK),
            base: 0,
            block: 0,
            blocks: Blocks::default(),
            bloom: BloomFilter::with_false_pos(0.001).expected_items(expected.max(1)),
            keys: 0,
            bytes: 0,
        })
    }

    fn push(&mut self, key: &Key, at: FramePos) -> Result<(), StoreError> {
        let mut text = [0u8; HASHED_LEN];
        let spelled = key.text(&mut text);
        let len = self.buf.len();
        if self.blocks.len() == 0 || len - self.block + RECORD + spelled.len() > BLOCK {
            if let Some(last) = self.blocks.places.last_mut() {
                last.2 = (len - self.block) as u32;
            }
            if len >= FLUSH {
                self.file.write_all_at(&self.buf, self.base)?;
                self.base += len as u64;
                self.buf.clear();
            }
            self.block = self.buf.len();
            self.blocks.push(spelled, self.base + self.block as u64);
        }
        self.buf
            .extend_from_slice(&(spelled.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(spelled);
        self.buf.extend_from_slice(&at.segment.to_le_bytes());
        self.buf.extend_from_slice(&at.offset.to_le_bytes());
        self.buf.extend_from_slice(&at.len.to_le_bytes());
        self.bloom.insert(key);
        self.keys += 1;
        self.bytes += entry_bytes(spelled.len(), at);
        Ok(())
    }

    /// The run written; `None` when it holds no key.
    fn finish(mut self) -> Result<Option<Run>, StoreError> {
        if self.keys == 0 {
            return Ok(None);
        }
        if let Some(last) = self.blocks.places.last_mut() {
            last.2 = (self.buf.len() - self.block) as u32;
        }
        self.file.write_all_at(&self.buf, self.base)?;
        Ok(Some(Run {
            file: self.file,
            blocks: self.blocks,
            bloom: self.bloom,
            keys: self.keys,
            bytes: self.bytes,
        }))
    }
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

/// Neighbouring runs of one class to be made into one.
struct Job {
    class: usize,
    /// Where the first of them is listed.
    first: usize,
    runs: Vec<Arc<Run>>,
    /// How many deletions had been counted against them as the job began.
    gone: u64,
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

/// Merges `count` neighbouring runs of `class` from its `first` into one, as [`compact`]
/// describes; false when `stop` was set meanwhile.
fn merge(
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

/// A run's records in order, read some blocks at a time.
struct Cursor<'a> {
    run: &'a Run,
    /// The next block to read.
    block: usize,
    /// About how many bytes of blocks to read at once.
    chunk: usize,
    read: std::vec::IntoIter<(Key, FramePos)>,
    head: Option<(Key, FramePos)>,
}

impl<'a> Cursor<'a> {
    /// A cursor at block `block` of `run`, reading about `chunk` bytes at once.
    fn at(run: &'a Run, block: usize, chunk: usize) -> Cursor<'a> {
        Cursor {
            run,
            block,
            chunk,
            read: Vec::new().into_iter(),
            head: None,
        }
    }

    /// The record at the cursor, reading on when it has none.
    fn peek(&mut self) -> Result<Option<&(Key, FramePos)>, StoreError> {
        if self.head.is_none() {
            self.head = match self.read.next() {
                Some(record) => Some(record),
                None => self.refill()?,
            };
        }
        Ok(self.head.as_ref())
    }

    /// The record at the cursor, moving past it.
    fn pop(&mut self) -> Result<Option<(Key, FramePos)>, StoreError> {
        self.peek()?;
        Ok(self.head.take())
    }

    fn refill(&mut self) -> Result<Option<(Key, FramePos)>, StoreError> {
        let blocks = &self.run.blocks;
        if self.block == blocks.len() {
            return Ok(None);
        }
        let (at, _) = blocks.place(self.block);
        let mut end = self.block;
        let mut len = 0usize;
        while end < blocks.len() {
            let (_, size) = blocks.place(end);
            if len > 0 && len + size > self.chunk {
                break;
            }
            len += size;
            end += 1;
        }
        let bytes = self.run.read(at, len)?;
        let mut read = Vec::new();
        let mut offset = 0;
        for i in self.block..end {
            let (_, size) = blocks.place(i);
            let block = bytes.get(offset..offset + size).ok_or_else(damaged)?;
            for (text, pos) in records(block)? {
                let text = std::str::from_utf8(text).map_err(|_| damaged())?;
                read.push((Key::of(text), pos));
            }
            offset += size;
        }
        self.block = end;
        self.read = read.into_iter();
        Ok(self.read.next())
    }
}

/// The least key at the cursors' heads, with the place the newest run gives it; every
/// cursor holding it moves past it.
fn next_merged(cursors: &mut [Cursor]) -> Result<Option<(Key, FramePos)>, StoreError> {
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

fn damaged() -> StoreError {
    StoreError::Corrupt("a meta cache block cannot be read".into())
}

/// The records of one block: each key's text, and where its value lies.
fn records(block: &[u8]) -> Result<Vec<(&[u8], FramePos)>, StoreError> {
    let mut out = Vec::with_capacity(64);
    let mut rest = block;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<2>().ok_or_else(damaged)?;
        let len = usize::from(u16::from_le_bytes(*len));
        let text = tail.get(..len).ok_or_else(damaged)?;
        let tail = &tail[len..];
        let (segment, tail) = tail.split_first_chunk::<4>().ok_or_else(damaged)?;
        let (offset, tail) = tail.split_first_chunk::<8>().ok_or_else(damaged)?;
        let (size, tail) = tail.split_first_chunk::<4>().ok_or_else(damaged)?;
        out.push((
            text,
            FramePos {
                segment: u32::from_le_bytes(*segment),
                offset: u64::from_le_bytes(*offset),
                len: u32::from_le_bytes(*size),
            },
        ));
        rest = tail;
    }
    Ok(out)
}

#[cfg(test)]
#[path = "cold_tests.rs"]
mod tests;
