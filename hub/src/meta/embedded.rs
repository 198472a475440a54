//! The embedded meta store: every change appended to a checksummed log (see
//! [`crate::inbox::log`]) and fsynced before the call returns; the keys in memory, each
//! with where its value lies in the log.
//!
//! Values stay on disk (the page cache keeps the recent ones warm) and are read back with
//! one `pread` by `get`, `scan` and `take`. The store holds a registration, two seats and
//! a code tombstone for every game the hub ever seated, so values kept in memory were
//! about a kilobyte of every finished game's footprint. Keys that name a SHA-256 (`seat/`
//! and `code/`, three of a finished game's four) are held as its 32 bytes inline rather
//! than as 69 bytes of text on the heap (see [`Key`]).
//!
//! Changes are group-committed by one writer thread, like the inbox's appends: a caller
//! stages its change and waits; the writer takes every staged change, writes them with one
//! `write` and one `fdatasync`, applies them to the map, and only then answers. (`take`
//! alone does not wait: see [`Meta::take`]. The log is one sequence, so whatever a later
//! change's fsync covers includes it.) Meta
//! writes come in bursts (creating a game is five of them, pairing four, finishing one),
//! so at a few hundred games a second a store that fsynced each change under a lock spent
//! most of its time in fsync and, worse, blocked the async threads that called it.
//!
//! The map holds durable contents only: `get` and `scan` never show a change that a crash
//! could still take back. The checks of `insert_new` and `take` look at the staged changes
//! too (newest per key), under the one lock that also fixes the order in which changes
//! reach the writer, so two callers racing for a key still get one winner. What they find
//! of the durable keys is looked up before that lock, so that no change waits behind the
//! reads of a cold key's run or of a value, and trusted under it only if the writer has
//! applied nothing since.
//!
//! The log is compacted at open when it has grown well past the live data: the live
//! entries are written to a fresh segment, synced, and the old segments removed oldest
//! first, so a crash at any point replays to the same map; a compaction that fails makes
//! the open replay the log again and keep it as it is. An open holds about as many keys
//! in memory as the running store: cold keys go to their runs as they are replayed, and
//! the compaction copies values through a small buffer.
//!
//! The keys of seats and registrations, three of every game ever seated and read by a
//! running hub only for finished games, and those of pairing codes, dead a day before the
//! purge deletes them, do not stay in memory: once enough have gathered, the writer moves
//! them to runs in unlinked cache files, of which memory keeps a few bytes a key, and a
//! thread of their own compacts the runs (see [`cold`]).
//!
//! The open (replay and compaction at open) is in `open`, the writer's and the compactor's
//! threads in `writer`; this file keeps the shared state, the staging of changes and the
//! [`Meta`] implementation.
//!
//! What it deliberately does not do: cache values, or retry after a failed write or fsync
//! (the store stops taking writes: the kernel may have dropped the pages).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use prometheus::Histogram;
use tokio::sync::{mpsc, oneshot};

use super::Meta;
use crate::inbox::log::{self, FramePos, Segments};
use crate::inbox::StoreError;
use cold::{class, Cold, CLASSES};

/// How many keys of a cold class (seats and registrations, or pairing codes) gather in
/// memory before they go cold (see `cold`): about 6 MiB of map. Four in tests, so that
/// every test of the store spills, and compacts.
pub const COLD_KEYS: usize = if cfg!(test) { 4 } else { 65_536 };

mod cold;
mod key;
mod open;
mod writer;

use key::Key;

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// Group commit under load (see [`log::Pacing`]): a burst of game set-ups shares one fsync
/// every 2 ms rather than taking one each. Seating a game stages up to four changes at
/// once, so pacing starts when more than two set-ups' worth wait.
pub const PACING: log::Pacing = log::Pacing {
    interval: std::time::Duration::from_millis(2),
    siblings: 8,
};

/// The embedded meta store. See the module documentation.
pub struct EmbeddedMeta {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The compactor's thread, and what wakes it (see [`writer::compactor`]).
    compactor: Mutex<Option<(SyncSender<()>, JoinHandle<()>)>>,
    /// The most keys memory held at once while the log was replayed at open, gone entries
    /// included.
    replay_peak: usize,
}

/// What callers and the writer share.
struct Shared {
    /// Durable contents: each key with where its value lies in the log.
    keys: RwLock<Keys>,
    segments: Segments,
    /// Lock order: `staged` before `keys`.
    staged: Mutex<Staged>,
    failed: AtomicBool,
    syncs: AtomicU64,
    /// How many batches the writer has applied to `keys`, moved on while it holds both
    /// `staged` and `keys`: a lookup made outside `staged` is still good under it while
    /// this has not moved (see [`EmbeddedMeta::change`]).
    applied: AtomicU64,
    /// Where the time of each write and fsync of a batch goes, once the hub's metrics are
    /// attached (`pipehub_meta_fsync_seconds`).
    flush_seconds: OnceLock<Histogram>,
    /// Held for a whole compaction: one runs at a time.
    compacting: Mutex<()>,
    /// Set as the store closes: a compaction under way gives up.
    stop: AtomicBool,
}

/// Changes handed to the writer and not yet durable.
struct Staged {
    next: u64,
    /// Per key, the newest staged change: (its number, the value it sets or `None`).
    newest: HashMap<String, (u64, Option<Bytes>)>,
    /// `None` once the store is being dropped.
    tx: Option<mpsc::UnboundedSender<Change>>,
}

/// One staged change, as the writer gets it.
struct Change {
    number: u64,
    key: String,
    value: Option<Bytes>,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// Appends one change's frame to `out`; returns where its value will lie once `out` is
/// written at `base` in `segment`.
fn encode(
    out: &mut Vec<u8>,
    kind: u8,
    key: &str,
    value: &[u8],
    (segment, base): (u32, u64),
) -> FramePos {
    let offset = base + (out.len() + log::HEADER + 5 + key.len()) as u64;
    log::frame(out, |out| {
        out.push(kind);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(value);
    });
    FramePos {
        segment,
        offset,
        len: value.len() as u32,
    }
}

/// The durable keys: in memory, or cold (see [`cold`]).
struct Keys {
    map: BTreeMap<Key, FramePos>,
    /// How many of `map`'s keys of each cold class wait to be spilled.
    spillable: [usize; CLASSES],
    /// How many wait before they are spilled (0: never).
    spill_at: usize,
    cold: Cold,
}

impl Keys {
    /// Where `key`'s value lies, if it has one.
    fn place(&self, key: &Key) -> Result<Option<FramePos>, StoreError> {
        match self.map.get(key) {
            Some(at) => Ok(Some(*at)),
            None if class(key).is_some() => self.cold.get(key),
            None => Ok(None),
        }
    }

    fn insert(&mut self, key: Key, at: FramePos) {
        let class = class(&key);
        if class.is_some() {
            self.cold.revive(&key);
        }
        if let (None, Some(class)) = (self.map.insert(key, at), class) {
            self.spillable[class] += 1;
        }
    }

    fn remove(&mut self, key: &Key) {
        match class(key) {
            Some(class) => {
                let in_memory = self.map.remove(key).is_some();
                if in_memory {
                    self.spillable[class] -= 1;
                }
                self.cold.forget(key, in_memory);
            }
            None => {
                self.map.remove(key);
            }
        }
    }
}

/// Moves the keys of each cold class in memory to a run, once `spill_at` of them have
/// gathered; true when it moved some. Called by the writer alone (or before it starts), so
/// nothing changes the map meanwhile; readers find each key in memory until it is in a
/// listed run. The map without them is made beside the old one under the read lock, so
/// that the write lock is held only to swap them: taking 65,536 keys out of the map in
/// place held it for about 4 ms, and every reader and change of the store waited.
fn spill(keys: &RwLock<Keys>) -> bool {
    spill_when(keys, |keys, c| keys.spillable[c] >= keys.spill_at)
}

/// [`spill`] for each class for which `due` holds (and that has keys in memory).
fn spill_when(keys: &RwLock<Keys>, due: impl Fn(&Keys, usize) -> bool) -> bool {
    let mut moved = false;
    for c in 0..CLASSES {
        let (written, rest) = {
            let keys = keys.read();
            let count = keys.spillable[c];
            if keys.spill_at == 0 || count == 0 || !due(&keys, c) || !keys.cold.spilling() {
                continue;
            }
            let cold = keys.map.iter().filter(|(key, _)| class(key) == Some(c));
            let written = keys.cold.write(cold, count);
            let rest: BTreeMap<Key, FramePos> = match &written {
                Ok(_) => keys
                    .map
                    .iter()
                    .filter(|(key, _)| class(key) != Some(c))
                    .map(|(key, at)| (key.clone(), *at))
                    .collect(),
                Err(_) => BTreeMap::new(),
            };
            (written, rest)
        };
        let old = {
            let mut keys = keys.write();
            if keys.cold.install(c, written) {
                keys.spillable[c] = 0;
                moved = true;
                Some(std::mem::replace(&mut keys.map, rest))
            } else {
                None
            }
        };
        // The keys moved leave memory here, outside the lock.
        drop(old);
    }
    moved
}

/// What one key's entry takes in the log: its frame, with the key and the value.
fn entry_bytes(key_len: usize, at: FramePos) -> u64 {
    (log::HEADER + 5 + key_len) as u64 + u64::from(at.len)
}

fn unavailable() -> StoreError {
    StoreError::Unavailable("the meta store stopped taking writes after a failed write".into())
}

impl EmbeddedMeta {
    /// Compacts the cache's runs until there is nothing worth doing, on the caller's thread.
    #[cfg(test)]
    fn compact_now(&self) {
        let _one = self.shared.compacting.lock();
        while cold::compact(&self.shared.keys, &self.shared.stop).expect("compact") {}
    }

    /// Records the time of every later write and fsync of a batch in `seconds`.
    pub fn observe_flushes(&self, seconds: Histogram) {
        let _ = self.shared.flush_seconds.set(seconds);
    }

    /// How many keys the runs of the cache file hold (some may be stale: written again
    /// since, or gone).
    pub fn cold_keys(&self) -> u64 {
        self.shared.keys.read().cold.keys()
    }

    /// The most keys memory held at once while the log was replayed at open (a store
    /// that keeps every key in memory held all its live keys).
    pub fn replay_peak(&self) -> usize {
        self.replay_peak
    }

    /// Fsyncs so far (each made a batch of changes durable).
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Stages a change if what it asks of its key (`ask`) holds, and waits until it is
    /// durable when `wait` is set. `Ok(None)`: it did not hold; otherwise, for
    /// [`Ask::Value`], the value the key had (`Some(None)` for any other ask).
    ///
    /// The key is looked up before the staging lock, which every change takes (a cold
    /// key's lookup reads its run, and a value a frame of the log): see [`Shared::look`].
    async fn change(
        &self,
        key: &str,
        value: Option<Bytes>,
        ask: Ask<'_>,
        wait: bool,
    ) -> Result<Option<Option<Bytes>>, StoreError> {
        let early = self.shared.look(key, ask);
        self.stage(key, value, ask, early, wait).await
    }

    /// [`EmbeddedMeta::change`] once the key has been looked up (`early`; `None`: not
    /// looked up, or the lookup failed). Under the staging lock, a staged change of the key
    /// says what it holds; else the early lookup does if the writer has applied nothing
    /// since it was made, and otherwise the key is looked up again there.
    async fn stage(
        &self,
        key: &str,
        value: Option<Bytes>,
        ask: Ask<'_>,
        early: Option<Looked>,
        wait: bool,
    ) -> Result<Option<Option<Bytes>>, StoreError> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(unavailable());
        }
        let (reply, answer) = oneshot::channel();
        let before = {
            let mut staged = self.shared.staged.lock();
            let before = match staged.newest.get(key) {
                _ if ask == Ask::Nothing => Before::Staged(None),
                Some((_, v)) => Before::Staged(v.clone()),
                None => match early {
                    // The writer changes `keys` only while it holds this lock, and moves
                    // `applied` on before it lets go: the keys are as the lookup saw them.
                    Some(looked)
                        if looked.applied == self.shared.applied.load(Ordering::Acquire) =>
                    {
                        match looked.found {
                            Some((at, v)) => Before::Durable(at, v),
                            None => Before::Staged(None),
                        }
                    }
                    _ => match self.shared.keys.read().place(&Key::of(key))? {
                        Some(at) => Before::Durable(at, None),
                        None => Before::Staged(None),
                    },
                },
            };
            if !ask.holds(!matches!(before, Before::Staged(None))) {
                return Ok(None);
            }
            // Read under the lock, before staging, when the lookup did not read it: after a
            // failed read nothing changes.
            let before = match before {
                _ if !ask.reads() => None,
                Before::Staged(v) => v,
                Before::Durable(_, Some(v)) => Some(v),
                Before::Durable(at, None) => Some(self.shared.read(at)?),
            };
            if let Ask::Equal(expected) = ask {
                if before.as_deref() != Some(expected) {
                    return Ok(None);
                }
            }
            let number = staged.next;
            staged.next += 1;
            let change = Change {
                number,
                key: key.to_string(),
                value: value.clone(),
                reply,
            };
            let sent = staged.tx.as_ref().is_some_and(|tx| tx.send(change).is_ok());
            if !sent {
                return Err(unavailable());
            }
            staged.newest.insert(key.to_string(), (number, value));
            before
        };
        if wait {
            answer.await.map_err(|_| unavailable())??;
        }
        Ok(Some(before))
    }
}

/// What a change asks of its key before it is staged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask<'a> {
    /// Nothing: the key is not looked up (a put, a discard).
    Nothing,
    /// That it holds no value (`insert_new`).
    Absent,
    /// That it holds a value (`delete`).
    Present,
    /// That it holds a value, and what the value is (`take`).
    Value,
    /// That it holds exactly these bytes (`replace`).
    Equal(&'a [u8]),
}

impl Ask<'_> {
    /// Whether a key that holds a value (`present`) or not may be changed (for
    /// [`Ask::Equal`], whether it may be once its value is compared).
    fn holds(self, present: bool) -> bool {
        match self {
            Ask::Nothing => true,
            Ask::Absent => !present,
            Ask::Present | Ask::Value | Ask::Equal(_) => present,
        }
    }

    /// Whether the change needs the key's value, not only whether it has one.
    fn reads(self) -> bool {
        matches!(self, Ask::Value | Ask::Equal(_))
    }
}

/// A durable key as a lookup outside the staging lock found it: how many batches the
/// writer had applied before it looked, and the key's place with its value when it was
/// asked for (`None`: the key had no value).
struct Looked {
    applied: u64,
    found: Option<(FramePos, Option<Bytes>)>,
}

/// A key's value before a change: staged (`None`: deleted or absent), or durable at a
/// place in the log (with the value, when it has been read).
enum Before {
    Staged(Option<Bytes>),
    Durable(FramePos, Option<Bytes>),
}

impl Shared {
    /// A durable value, read back from the log.
    fn read(&self, at: FramePos) -> Result<Bytes, StoreError> {
        if at.len == 0 {
            return Ok(Bytes::new());
        }
        self.segments.read(at).map(Bytes::from)
    }

    /// Looks `key` up in the durable keys as `ask` needs (not at all for
    /// [`Ask::Nothing`]; its value too for [`Ask::Value`]), without the staging lock.
    /// `None` when it did not look, or a read failed: the caller looks again under the
    /// lock, where a failure changes nothing. (The log's frames do not move while the store
    /// is open: it is compacted only at open.)
    fn look(&self, key: &str, ask: Ask) -> Option<Looked> {
        if ask == Ask::Nothing {
            return None;
        }
        let applied = self.applied.load(Ordering::Acquire);
        // The keys' read lock is let go before the value is read: a writer waiting for
        // its write lock holds the staging lock meanwhile.
        let place = self.keys.read().place(&Key::of(key)).ok()?;
        let found = match place {
            Some(at) if ask.reads() => Some((at, Some(self.read(at).ok()?))),
            Some(at) => Some((at, None)),
            None => None,
        };
        Some(Looked { applied, found })
    }
}

impl Drop for EmbeddedMeta {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is staged and exit; waiting for
        // it means a reopen in the same process finds everything on disk.
        self.shared.staged.lock().tx = None;
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some((nudge, compactor)) = self.compactor.lock().take() {
            drop(nudge);
            let _ = compactor.join();
        }
    }
}

#[async_trait]
impl Meta for EmbeddedMeta {
    async fn put(&self, key: &str, value: Bytes) -> Result<(), StoreError> {
        self.change(key, Some(value), Ask::Nothing, true)
            .await
            .map(|_| ())
    }

    async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, StoreError> {
        Ok(self
            .change(key, Some(value), Ask::Absent, true)
            .await?
            .is_some())
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let at = self.shared.keys.read().place(&Key::of(key))?;
        at.map(|at| self.shared.read(at)).transpose()
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.change(key, None, Ask::Present, true).await?.is_some())
    }

    async fn discard(&self, key: &str) -> Result<(), StoreError> {
        // Neither a check nor the value before: the key is not looked up. The writer
        // takes a cold key that a run's filter admits for one the run holds, as it does
        // when a delete found it there; a key discarded that was not there after all
        // costs a gone entry where a filter admits it falsely (one in a thousand).
        self.change(key, None, Ask::Nothing, true).await.map(|_| ())
    }

    async fn replace(
        &self,
        key: &str,
        expected: &[u8],
        value: Option<Bytes>,
    ) -> Result<bool, StoreError> {
        Ok(self
            .change(key, value, Ask::Equal(expected), true)
            .await?
            .is_some())
    }

    async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        // Staged, not waited for: the trait's contract (durable with the caller's next
        // durable change, which the log orders after it).
        Ok(self.change(key, None, Ask::Value, false).await?.flatten())
    }

    async fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Bytes)>, StoreError> {
        let from = super::page_start(prefix, after).map(Key::of);
        let places: Vec<(String, FramePos)> = {
            let keys = self.shared.keys.read();
            let cold = keys.cold.scan(&from, prefix, limit)?;
            let warm = keys
                .map
                .range((from, std::ops::Bound::Unbounded))
                .map(|(k, at)| (k.to_text(), *at))
                .take_while(|(k, _)| k.starts_with(prefix))
                .take(limit);
            if cold.is_empty() {
                warm.collect()
            } else {
                // Memory's place for a key is newer than a run's.
                let mut merged: BTreeMap<String, FramePos> =
                    cold.into_iter().map(|(k, at)| (k.to_text(), at)).collect();
                merged.extend(warm);
                merged.into_iter().take(limit).collect()
            }
        };
        places
            .into_iter()
            .map(|(k, at)| Ok((k, self.shared.read(at)?)))
            .collect()
    }

    fn ready(&self) -> bool {
        !self.shared.failed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;
