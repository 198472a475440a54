//! The embedded inbox: a checksummed, segmented append-only log on local disk, with
//! in-memory indexes rebuilt at open.
//!
//! Why a plain log rather than an embedded database: the inbox is append-only, read in
//! order, and needs exactly one durability point per batch. A log gives that with one
//! `write` and one `fdatasync` per batch and nothing else on the write path (no B-tree
//! pages, no compaction stalls), its crash story is one rule (cut the torn tail), and its
//! indexes are small enough to rebuild from a sequential read at open (see the replay
//! rate in the report of `cargo bench -p pipehub-hub --bench inbox`).
//!
//! One writer thread owns the log. [`EmbeddedInbox::append`] hands the event to it over a
//! bounded channel and waits. The writer takes every request that is waiting (up to a
//! batch cap), gives each event the next position of its shard, encodes the batch into one
//! buffer, writes it, fdatasyncs once, and only then adds the events to the indexes,
//! raises the shards' high-water marks and answers the appenders: a reader can never see
//! an event that is not durable. Verdicts ride in the same log: they are visible at once in
//! memory and written with the next batch, fsynced with the next batch of appends (or by
//! [`Inbox::sync`]); a verdict lost to a crash is recomputed from the chain.
//!
//! If a write or fsync fails, the store stops taking writes ([`Inbox::ready`] turns false):
//! after a failed fsync the kernel may have dropped the dirty pages, so retrying could
//! acknowledge data that is gone. Reads keep working.
//!
//! Reads take the index lock only to copy a few slot positions (an old one with a `pread`
//! of the index's spill file, see `super::index`), then read the frames with positioned
//! reads outside it. Those reads are synchronous: recent frames come from the
//! page cache in microseconds, which costs an async caller less than a hop to a blocking
//! thread pool would.
//!
//! What it deliberately does not do: retention or compaction (every event is kept), share
//! a data directory between processes (one hub per directory), or parse events.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use games::Seat;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot, watch};

use super::codec::{self, Entry};
use super::index::{Index, Slot, Spill};
use super::log::{self, FramePos, Replayed, SegmentLog};
pub use super::writer::WriterStats;
use super::writer::{unavailable, Request, Shared, Writer};
use super::{Capture, GameEntry, Inbox, Listed, Page, Record, StoreError, StoredVerdict};

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 256 << 20;
/// Requests waiting for the writer; appenders wait for room beyond this (backpressure).
const QUEUE: usize = 16 * 1024;

/// Group commit under load (see [`log::Pacing`]): while more than two appends share an
/// fsync, one begins at most every millisecond, which adds at most that much to a move.
pub const PACING: log::Pacing = log::Pacing {
    interval: std::time::Duration::from_millis(1),
    siblings: 2,
};

const HEADER_FILE: &str = "HEADER";
const HEADER_MAGIC: &str = "pipehub-inbox 2";
/// What `HEADER` began with before each batch of the logs ended in a mark (see `log`). Such
/// a store opens as it is, and its header is then rewritten: a binary from before marks
/// refuses the store for its header, rather than take the first mark for damage.
const HEADER_MAGIC_UNMARKED: &str = "pipehub-inbox 1";

/// What the store found at open.
#[derive(Clone, Copy, Debug)]
pub struct OpenReport {
    pub events: u64,
    pub frames: u64,
    pub bytes: u64,
    /// Bytes of a torn tail cut at open.
    pub truncated: u64,
    pub elapsed: std::time::Duration,
}

/// The embedded inbox. Dropping it stops the writer after the requests already queued.
pub struct EmbeddedInbox {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Request>,
    writer: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
    /// An exclusive lock on `dir`, held while the store is open: two hubs writing one
    /// directory would interleave their logs, so the second one refuses to start.
    _lock: DirLock,
}

/// A data directory's lock (see [`lock`]), released when dropped.
pub struct DirLock {
    _file: fs::File,
    _legacy: fs::File,
}

/// Creates `dir` if it is missing and takes its lock, or says which directory is in use.
/// With it held, the stores that share the directory may open side by side.
pub fn lock(dir: &Path) -> Result<DirLock, StoreError> {
    fs::create_dir_all(dir)?;
    lock_dir(dir)
}

impl EmbeddedInbox {
    /// Opens the inbox under `dir` (created when missing). A new store gets `shards`
    /// shards; an existing store keeps the count it was created with, whatever `shards`
    /// says (the caller can compare with [`Inbox::shards`]).
    pub fn open(dir: &Path, shards: u32) -> Result<EmbeddedInbox, StoreError> {
        EmbeddedInbox::open_paced(dir, shards, PACING)
    }

    /// [`EmbeddedInbox::open`] with the writer's group-commit pacing given.
    pub fn open_paced(
        dir: &Path,
        shards: u32,
        pacing: log::Pacing,
    ) -> Result<EmbeddedInbox, StoreError> {
        EmbeddedInbox::open_locked(dir, shards, pacing, lock(dir)?)
    }

    /// [`EmbeddedInbox::open_paced`] in a directory whose lock the caller took.
    pub fn open_locked(
        dir: &Path,
        shards: u32,
        pacing: log::Pacing,
        lock: DirLock,
    ) -> Result<EmbeddedInbox, StoreError> {
        EmbeddedInbox::open_sized(dir, shards, pacing, lock, SEGMENT_BYTES)
    }

    /// [`EmbeddedInbox::open_locked`] with the log's segments `segment_bytes` long (tests
    /// roll them sooner).
    fn open_sized(
        dir: &Path,
        shards: u32,
        pacing: log::Pacing,
        lock: DirLock,
        segment_bytes: u64,
    ) -> Result<EmbeddedInbox, StoreError> {
        let started = Instant::now();
        let (shards, current) = read_or_write_header(dir, shards)?;
        first_segment_on_disk(dir)?;
        let mut index = Index::spilling(shards, Spill::create(dir)?);
        let mut events = 0u64;
        let (log, replayed) = SegmentLog::open(dir, "inbox", segment_bytes, |frame, payload| {
            replay(&mut index, frame, payload, &mut events)
        })?;
        // Only once the log opened whole: a store that does not open is left as it was.
        if !current {
            write_header(dir, shards)?;
        }
        let Replayed {
            frames,
            bytes,
            truncated,
        } = replayed;
        let watches = (0..shards)
            .map(|s| watch::channel(index.high_water(s)).0)
            .collect();
        let shared = Arc::new(Shared {
            shards,
            index: RwLock::new(index),
            segments: log.segments(),
            watches,
            fresh: (0..shards).map(|_| Default::default()).collect(),
            failed: AtomicBool::new(false),
            stats: WriterStats::default(),
        });
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("inbox-writer".into())
            .spawn(move || {
                Writer {
                    shared: writer_shared,
                    log,
                    rx,
                    pacer: log::Pacer::new(pacing),
                    rolling: false,
                }
                .run()
            })?;
        let report = OpenReport {
            events,
            frames,
            bytes,
            truncated,
            elapsed: started.elapsed(),
        };
        tracing::info!(dir = %dir.display(), shards, events, bytes, truncated, elapsed_ms = report.elapsed.as_millis() as u64, "inbox open");
        Ok(EmbeddedInbox {
            shared,
            tx,
            writer: Mutex::new(Some(writer)),
            report,
            _lock: lock,
        })
    }

    pub fn open_report(&self) -> OpenReport {
        self.report
    }

    pub fn stats(&self) -> &WriterStats {
        &self.shared.stats
    }

    /// Records the time of every later write and fsync of a batch in `seconds`.
    pub fn observe_flushes(&self, seconds: prometheus::Histogram) {
        let _ = self.shared.stats.flush_seconds.set(seconds);
    }

    fn record(&self, capture: Capture, slot: &Slot) -> Result<Listed, StoreError> {
        let payload = Bytes::from(self.shared.segments.read(slot.frame)?);
        match codec::decode(payload)? {
            Entry::Event(record) if record.capture == capture => {
                Ok((record, slot.verdict.as_ref().map(|v| v.unpack())))
            }
            _ => Err(StoreError::Corrupt(format!(
                "the frame indexed for {capture} holds something else"
            ))),
        }
    }

    fn records(&self, slots: Vec<(Capture, Slot)>) -> Result<Vec<Listed>, StoreError> {
        slots
            .into_iter()
            .map(|(capture, slot)| self.record(capture, &slot))
            .collect()
    }

    async fn request(&self, request: Request) -> Result<(), StoreError> {
        if self.shared.failed.load(Ordering::Acquire) {
            return Err(unavailable());
        }
        self.tx.send(request).await.map_err(|_| unavailable())
    }
}

fn replay(
    index: &mut Index,
    frame: FramePos,
    payload: &[u8],
    events: &mut u64,
) -> Result<(), StoreError> {
    match codec::decode(Bytes::copy_from_slice(payload))? {
        Entry::Event(record) => {
            index.push(record.capture, &record.inbox, &record.game, frame)?;
            *events += 1;
        }
        Entry::Verdict(capture, verdict) => {
            index.set_verdict(capture, &verdict)?;
        }
    }
    Ok(())
}

/// Refuses an inbox log whose first segment is gone. The inbox never removes a segment
/// (every event is kept), so its log starts at segment 0; without this, a deleted first
/// segment showed only as an event "out of order" in the next one, and the operator was
/// not told which file to restore.
fn first_segment_on_disk(dir: &Path) -> Result<(), StoreError> {
    match log::oldest_segment(dir, "inbox")? {
        Some(oldest) if oldest > 0 => Err(StoreError::Corrupt(format!(
            "{} is missing: the inbox's segments on disk start at {}, and the inbox never \
             removes a segment. Restore the segments before it from a backup",
            log::segment_path(dir, "inbox", 0).display(),
            log::segment_path(dir, "inbox", oldest).display(),
        ))),
        _ => Ok(()),
    }
}

/// How long opening waits for a directory's lock before saying it is in use. A lock can
/// outlive the store that took it by a moment: a child process forked meanwhile by any
/// thread of the same process holds a copy of its descriptor until it execs (this crate's
/// tests, which spawn processes while others reopen stores, met it).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes the directory's lock, or says which directory is in use. The lock that counts is
/// on the directory itself: a lock file deleted while its hub ran (by hand, or by a
/// clean-up script) let a second hub lock a new one and write the same logs, and a
/// directory cannot be replaced under the files the first hub has open in it.
fn lock_dir(dir: &Path) -> Result<DirLock, StoreError> {
    // The `LOCK` file, which earlier releases locked alone, is locked too, so that a hub
    // of an earlier release and this one keep out of each other's way during an upgrade.
    let legacy = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("LOCK"))?;
    Ok(DirLock {
        _file: take_lock(fs::File::open(dir)?, dir)?,
        _legacy: take_lock(legacy, dir)?,
    })
}

/// Takes `file`'s exclusive lock, waiting up to [`LOCK_WAIT`].
fn take_lock(file: fs::File, dir: &Path) -> Result<fs::File, StoreError> {
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut taken = file.try_lock();
    while matches!(taken, Err(fs::TryLockError::WouldBlock)) && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
        taken = file.try_lock();
    }
    match taken {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            format!(
                "the data directory {} is in use by another process, which holds its lock \
                 (it goes when that process ends, however it ends)",
                dir.display(),
            ),
        ))),
        Err(fs::TryLockError::Error(e)) => Err(StoreError::Io(e)),
    }
}

/// The store's shard count, and whether its header is the current one; a new store's
/// header is written first.
fn read_or_write_header(dir: &Path, shards: u32) -> Result<(u32, bool), StoreError> {
    let path = dir.join(HEADER_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let (rest, current) = match text.strip_prefix(HEADER_MAGIC) {
                Some(rest) => (Some(rest), true),
                None => (text.strip_prefix(HEADER_MAGIC_UNMARKED), false),
            };
            let stored = rest
                .and_then(|rest| rest.trim().strip_prefix("shards "))
                .and_then(|n| n.trim().parse::<u32>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("{} is not an inbox header", path.display()))
                })?;
            if stored != shards {
                tracing::warn!(
                    stored,
                    asked = shards,
                    "the store keeps the shard count it was created with"
                );
            }
            Ok((stored, current))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if shards == 0 {
                return Err(StoreError::Corrupt(
                    "a store needs at least one shard".into(),
                ));
            }
            write_header(dir, shards)?;
            Ok((shards, true))
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes the current header: to a temporary name, synced, then renamed, so a crash never
/// leaves a half-written header that would make the store unopenable.
fn write_header(dir: &Path, shards: u32) -> Result<(), StoreError> {
    let tmp = dir.join("HEADER.tmp");
    fs::write(&tmp, format!("{HEADER_MAGIC}\nshards {shards}\n"))?;
    fs::File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, dir.join(HEADER_FILE))?;
    log::sync_dir(dir)
}

impl Drop for EmbeddedInbox {
    fn drop(&mut self) {
        // Closing the channel lets the writer finish what is queued and exit; waiting for
        // it means a reopen in the same process finds everything on disk.
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.tx, closed));
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
    }
}

#[async_trait]
impl Inbox for EmbeddedInbox {
    fn shards(&self) -> u32 {
        self.shared.shards
    }

    async fn append(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
        raw: Bytes,
    ) -> Result<Capture, StoreError> {
        let shard = self.shard_of(inbox, game);
        let (reply, answer) = oneshot::channel();
        self.request(Request::Append {
            shard,
            inbox: inbox.to_string(),
            game: game.to_string(),
            seat,
            raw,
            reply,
        })
        .await?;
        answer.await.map_err(|_| unavailable())?
    }

    async fn read_shard(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if shard >= self.shared.shards {
            return Err(StoreError::NoShard(shard));
        }
        // What the writer has just made durable is still in memory, as it was appended.
        let fresh = self.shared.fresh[shard as usize].take(from, max);
        if !fresh.is_empty() {
            return Ok(fresh);
        }
        let slots = self.shared.index.read().shard_range(shard, from, max)?;
        Ok(self
            .records(slots)?
            .into_iter()
            .map(|(record, _)| record)
            .collect())
    }

    fn watch_shard(&self, shard: u32) -> Result<watch::Receiver<u64>, StoreError> {
        self.shared
            .watches
            .get(shard as usize)
            .map(|w| w.subscribe())
            .ok_or(StoreError::NoShard(shard))
    }

    async fn game_records(&self, inbox: &str, game: &str) -> Result<Vec<Record>, StoreError> {
        let slots = self
            .shared
            .index
            .read()
            .page(inbox, Some(game), None, usize::MAX)?;
        Ok(self
            .records(slots)?
            .into_iter()
            .map(|(record, _)| record)
            .collect())
    }

    async fn list(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        // The embedded cursor is the capture of the last item handed out.
        let after = match after {
            Some(text) => Some(text.parse::<Capture>().map_err(|_| StoreError::BadCursor)?),
            None => None,
        };
        let (slots, more) = {
            let index = self.shared.index.read();
            if let Some(c) = after {
                if index.slot(c)?.is_none() {
                    return Err(StoreError::BadCursor);
                }
            }
            let mut slots = index.page(inbox, game, after, limit.saturating_add(1))?;
            let more = slots.len() > limit;
            slots.truncate(limit);
            (slots, more)
        };
        let next = if more {
            slots.last().map(|(c, _)| c.to_string())
        } else {
            None
        };
        Ok(Page {
            items: self.records(slots)?,
            next,
        })
    }

    async fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<GameEntry>, StoreError> {
        Ok(self.shared.index.read().games(inbox, before, limit)?)
    }

    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError> {
        let Some(slot) = self.shared.index.read().slot(capture)? else {
            return Ok(None);
        };
        let listed = self.record(capture, &slot)?;
        Ok((listed.0.inbox == inbox).then_some(listed))
    }

    async fn put_verdict(
        &self,
        capture: Capture,
        verdict: StoredVerdict,
    ) -> Result<(), StoreError> {
        if !self.shared.index.write().set_verdict(capture, &verdict)? {
            return Err(StoreError::Corrupt(format!(
                "a verdict for {capture}, which is not in the store"
            )));
        }
        self.request(Request::Verdict { capture, verdict }).await
    }

    async fn verdict(&self, capture: Capture) -> Result<Option<StoredVerdict>, StoreError> {
        Ok(self
            .shared
            .index
            .read()
            .slot(capture)?
            .and_then(|s| s.verdict.as_ref().map(|v| v.unpack())))
    }

    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError> {
        Ok(self.shared.index.read().count(inbox, game)?)
    }

    async fn sync(&self) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        self.request(Request::Sync { reply }).await?;
        answer.await.map_err(|_| unavailable())?
    }

    fn ready(&self) -> bool {
        !self.shared.failed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;
