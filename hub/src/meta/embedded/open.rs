//! Opening the embedded meta store: its log replayed into the keys (the cold ones going to
//! their runs as the replay goes) and compacted when it has grown well past the live data;
//! then the writer's and the compactor's threads are started.
//!
//! A compaction writes the live entries to a fresh segment, synced, and removes the old
//! segments oldest first, so that a crash at any point replays to the same keys. One that
//! fails makes the open replay the log again and keep it as it is ([`NotOpened`]).
//!
//! What it deliberately does not do: write a change (the writer does, once the store is
//! open), compact the cache's runs while the store runs (the compactor does; an open only
//! merges the runs its replay made), or tell what a crash left from damage (the segment
//! log's own open does, and refuses damage).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use tokio::sync::mpsc;

use super::cold::{self, Cold, CLASSES};
use super::key::{Key, HASHED_LEN};
use super::writer::{compactor, run};
use super::{
    encode, entry_bytes, spill, spill_when, EmbeddedMeta, Keys, Shared, Staged, COLD_KEYS, DELETE,
    PACING, PUT,
};
use crate::inbox::log::{self, FramePos, SegmentLog};
use crate::inbox::StoreError;

/// Compact at open when the log is this much larger than the live data (and not tiny:
/// 256 bytes in tests, so that their reopens compact logs holding cold keys too).
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = if cfg!(test) { 256 } else { 1 << 20 };

/// Writes the live entries to a fresh segment, which becomes the first and only one
/// (segment 0) once the older ones are removed, and moves every key's place to it; returns
/// the bytes written. The cold keys' entries are written first and memory's last, so that
/// memory's copy of a key it shares with a run is the one a replay keeps. They are written
/// a megabyte at a time, each synced before the next, and all before any old segment
/// goes: a crash on the way replays to the same keys.
fn compact_log(
    keys: &mut Keys,
    log: &mut SegmentLog,
    segments: &log::Segments,
) -> Result<u64, StoreError> {
    // A megabyte; 256 bytes in tests, so that a compaction that fails has written some.
    const CHUNK: usize = if cfg!(test) { 256 } else { 1 << 20 };
    log.roll()?;
    let (_, start) = log.reserve(0)?;
    let mut base = start;
    let mut buf = Vec::with_capacity(CHUNK + 4096);
    let mut spelled = [0u8; HASHED_LEN];
    let mut copy = |key: &Key, at: FramePos, buf: &mut Vec<u8>| -> Result<FramePos, StoreError> {
        #[cfg(test)]
        super::tests::copying()?;
        let value = segments.read(at)?;
        let text = std::str::from_utf8(key.text(&mut spelled))
            .map_err(|_| StoreError::Corrupt("a meta key is not UTF-8".into()))?;
        let moved = encode(buf, PUT, text, &value, (0, base));
        if buf.len() >= CHUNK {
            // Each chunk synced before the next, so that a crash tears at most the last
            // (`log::TORN_MAX`).
            log.write_batch(buf, true)?;
            base = log.active_len();
            buf.clear();
        }
        Ok(moved)
    };
    keys.cold.rewrite(|key, at| copy(key, at, &mut buf))?;
    for (key, at) in keys.map.iter_mut() {
        *at = copy(key, *at, &mut buf)?;
    }
    log.write_batch(&mut buf, false)?;
    log.sync()?;
    log.drop_older_segments()?;
    Ok(log.active_len() - start)
}

/// Replays one change read from the log at `frame`.
fn apply(keys: &mut Keys, frame: FramePos, payload: &[u8]) -> Result<(), StoreError> {
    let damaged = || StoreError::Corrupt("a meta entry cannot be read".into());
    let (&kind, rest) = payload.split_first().ok_or_else(damaged)?;
    let len_bytes = rest.get(..4).ok_or_else(damaged)?;
    let mut word = [0u8; 4];
    word.copy_from_slice(len_bytes);
    let len = u32::from_le_bytes(word) as usize;
    let key = rest.get(4..4 + len).ok_or_else(damaged)?;
    let key = Key::of(std::str::from_utf8(key).map_err(|_| damaged())?);
    let skip = 1 + 4 + len;
    let value = FramePos {
        segment: frame.segment,
        offset: frame.offset + skip as u64,
        len: frame.len - skip as u32,
    };
    match kind {
        PUT => {
            keys.insert(key, value);
        }
        DELETE => {
            keys.remove(&key);
        }
        _ => return Err(damaged()),
    }
    Ok(())
}

/// Why one try at opening the store gave none.
enum NotOpened {
    /// The log could not be compacted: another try, without compacting, may open it.
    Compaction(StoreError),
    Failed(StoreError),
}

impl NotOpened {
    fn into_error(self) -> StoreError {
        match self {
            NotOpened::Compaction(e) | NotOpened::Failed(e) => e,
        }
    }
}

impl From<StoreError> for NotOpened {
    fn from(e: StoreError) -> NotOpened {
        NotOpened::Failed(e)
    }
}

impl From<std::io::Error> for NotOpened {
    fn from(e: std::io::Error) -> NotOpened {
        NotOpened::Failed(e.into())
    }
}

impl EmbeddedMeta {
    /// Opens (or creates) the meta store in `dir`; its files are `meta-*.log`, so it may
    /// share a directory with the inbox.
    pub fn open(dir: &Path) -> Result<EmbeddedMeta, StoreError> {
        EmbeddedMeta::open_with(dir, PACING, COLD_KEYS)
    }

    /// [`EmbeddedMeta::open`] with the writer's group-commit pacing given, and how many
    /// keys of a cold class gather in memory before they go cold (0: never).
    ///
    /// A log that cannot be compacted (no space left for the compacted copy, say) is
    /// replayed again and kept as it is: the store opens, and the next open tries again.
    pub fn open_with(
        dir: &Path,
        pacing: log::Pacing,
        cold_keys: usize,
    ) -> Result<EmbeddedMeta, StoreError> {
        match EmbeddedMeta::open_once(dir, pacing, cold_keys, true) {
            Ok(meta) => Ok(meta),
            Err(NotOpened::Compaction(e)) => {
                tracing::warn!(error = %e, "cannot compact the meta log at open; it is replayed again and kept as it is");
                EmbeddedMeta::open_once(dir, pacing, cold_keys, false)
                    .map_err(NotOpened::into_error)
            }
            Err(NotOpened::Failed(e)) => Err(e),
        }
    }

    /// One try at [`EmbeddedMeta::open_with`], compacting the log if `compact` and it is
    /// worth it. A compaction that fails part way leaves the log a state that replays to
    /// the same keys: the old segments whole (or, past the sync, those newer than the ones
    /// removed) and after them a newest segment of copies of live values, maybe torn at
    /// its end. What it did to the keys in memory and to the cache's runs is dropped with
    /// this try.
    fn open_once(
        dir: &Path,
        pacing: log::Pacing,
        cold_keys: usize,
        compact: bool,
    ) -> Result<EmbeddedMeta, NotOpened> {
        let mut keys = RwLock::new(Keys {
            map: BTreeMap::new(),
            spillable: [0; CLASSES],
            spill_at: cold_keys,
            cold: Cold::create(dir),
        });
        // Keys go cold as they are replayed, so that memory holds about as many as it does
        // while the store runs, not every live key at once (see `cold::bound_gone`).
        let mut replay_peak = 0;
        let mut bounding = true;
        let (mut log, replayed) = SegmentLog::open(dir, "meta", u64::MAX, |frame, payload| {
            let now = keys.get_mut();
            apply(now, frame, payload)?;
            let due = now.spill_at > 0 && now.spillable.iter().any(|n| *n >= now.spill_at);
            let gone = now.cold.gone();
            replay_peak = replay_peak.max(now.map.len() + gone);
            if due {
                spill(&keys);
            }
            if bounding && gone > cold_keys {
                // A merge that fails leaves the runs as they were, and their gone entries
                // in memory, as the compactor's would; the replay goes on without merging.
                if let Err(e) = cold::bound_gone(&keys, cold_keys) {
                    tracing::warn!(error = %e, "cannot merge the meta cache's runs as the log is replayed; deleted keys stay in memory until the compactor runs");
                    bounding = false;
                }
            }
            Ok(())
        })?;
        let segments = log.segments();
        // What the replay left in memory of a class that went cold joins its runs, as all
        // of it did when the replay spilled only at its end: an open keeps fewer keys in
        // memory than the running store gathers between two spills.
        spill_when(&keys, |keys, c| keys.cold.holds_class(c));
        // The replay's runs, merged into one a class, hold each cold key once and no other:
        // the live data is memory's entries and theirs. A failed merge leaves the runs as
        // they were (they still answer), and the log as it is.
        let merged = cold::merge_replayed(&keys);
        if let Err(e) = &merged {
            tracing::warn!(error = %e, "cannot merge the meta cache's runs; the meta log is not compacted at this open");
        }
        let now = keys.get_mut();
        let live = now.cold.bytes()
            + now
                .map
                .iter()
                .map(|(k, at)| entry_bytes(k.len(), *at))
                .sum::<u64>();
        if compact
            && merged.is_ok()
            && replayed.bytes > COMPACT_MIN_BYTES
            && replayed.bytes > COMPACT_RATIO * live
        {
            let written = compact_log(now, &mut log, &segments).map_err(NotOpened::Compaction)?;
            tracing::info!(from = replayed.bytes, to = written, "meta log compacted");
        }
        tracing::info!(
            log_bytes = replayed.bytes,
            live_bytes = live,
            in_memory = now.map.len(),
            cold = now.cold.keys(),
            replay_peak,
            "meta store opened"
        );
        // Unbounded, because changes are sent under the `staged` lock, which must not be
        // held across an await; bounded all the same by who sends: every change but a
        // `take` is waited for by its caller (one in flight per request, and requests are
        // capped by the connection cap and the rate limit), and a `take` stages only a key
        // that holds a value (a pairing code, spent once).
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            keys,
            segments,
            staged: Mutex::new(Staged {
                next: 0,
                newest: HashMap::new(),
                tx: Some(tx),
            }),
            failed: AtomicBool::new(false),
            syncs: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            flush_seconds: OnceLock::new(),
            compacting: Mutex::new(()),
            stop: AtomicBool::new(false),
        });
        let (nudge, nudged) = std::sync::mpsc::sync_channel(1);
        let compactor_shared = shared.clone();
        let compactor = std::thread::Builder::new()
            .name("meta-compactor".into())
            .spawn(move || compactor(&compactor_shared, nudged))?;
        let writer_shared = shared.clone();
        let writer_nudge = nudge.clone();
        let writer = std::thread::Builder::new()
            .name("meta-writer".into())
            .spawn(move || run(&writer_shared, log, rx, pacing, writer_nudge))?;
        Ok(EmbeddedMeta {
            shared,
            writer: Mutex::new(Some(writer)),
            compactor: Mutex::new(Some((nudge, compactor))),
            replay_peak,
        })
    }
}
