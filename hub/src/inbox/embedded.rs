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
//! What it deliberately does not do: retention or compaction (every event is kept), share
//! a data directory between processes (one hub per directory), or parse events.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use games::Seat;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot, watch};

use super::codec::{self, Entry};
use super::index::{Index, Slot};
use super::log::{self, FramePos, Replayed, SegmentLog, Segments};
use super::{Capture, GameEntry, Inbox, Listed, Page, Record, StoreError, StoredVerdict};

/// A segment is closed and a new one started past this size.
const SEGMENT_BYTES: u64 = 256 << 20;
/// Requests waiting for the writer; appenders wait for room beyond this (backpressure).
const QUEUE: usize = 16 * 1024;
/// At most this many requests share one write and fsync, so one batch's latency stays
/// bounded however many appenders wait.
const MAX_BATCH: usize = 4096;
const HEADER_FILE: &str = "HEADER";
const HEADER_MAGIC: &str = "pipehub-inbox 1";

enum Request {
    Append {
        shard: u32,
        inbox: String,
        game: String,
        seat: Option<Seat>,
        raw: Bytes,
        reply: oneshot::Sender<Result<Capture, StoreError>>,
    },
    Verdict {
        capture: Capture,
        verdict: StoredVerdict,
    },
    Sync {
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

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

/// Counters of the writer, for metrics and the benchmark.
#[derive(Default)]
pub struct WriterStats {
    /// Batches written with an fsync.
    pub syncs: AtomicU64,
    /// Events appended.
    pub appends: AtomicU64,
    /// The largest number of events one fsync covered.
    pub max_batch: AtomicU64,
}

/// State shared by the handle, the writer thread and readers.
struct Shared {
    shards: u32,
    index: RwLock<Index>,
    segments: Segments,
    watches: Vec<watch::Sender<u64>>,
    failed: AtomicBool,
    stats: WriterStats,
}

/// The embedded inbox. Dropping it stops the writer after the requests already queued.
pub struct EmbeddedInbox {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Request>,
    writer: Mutex<Option<JoinHandle<()>>>,
    report: OpenReport,
}

impl EmbeddedInbox {
    /// Opens the inbox under `dir` (created when missing). A new store gets `shards`
    /// shards; an existing store keeps the count it was created with, whatever `shards`
    /// says (the caller can compare with [`Inbox::shards`]).
    pub fn open(dir: &Path, shards: u32) -> Result<EmbeddedInbox, StoreError> {
        let started = Instant::now();
        fs::create_dir_all(dir)?;
        let shards = read_or_write_header(dir, shards)?;
        let mut index = Index::new(shards);
        let mut events = 0u64;
        let (log, replayed) = SegmentLog::open(dir, "inbox", SEGMENT_BYTES, |frame, payload| {
            replay(&mut index, frame, payload, &mut events)
        })?;
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
        })
    }

    pub fn open_report(&self) -> OpenReport {
        self.report
    }

    pub fn stats(&self) -> &WriterStats {
        &self.shared.stats
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

fn unavailable() -> StoreError {
    StoreError::Unavailable("the inbox stopped taking writes after a failed write or fsync".into())
}

fn replay(
    index: &mut Index,
    frame: FramePos,
    payload: &[u8],
    events: &mut u64,
) -> Result<(), StoreError> {
    match codec::decode(Bytes::copy_from_slice(payload))? {
        Entry::Event(record) => {
            index
                .push(record.capture, &record.inbox, &record.game, frame)
                .map_err(StoreError::Corrupt)?;
            *events += 1;
        }
        Entry::Verdict(capture, verdict) => {
            index.set_verdict(capture, &verdict);
        }
    }
    Ok(())
}

fn read_or_write_header(dir: &Path, shards: u32) -> Result<u32, StoreError> {
    let path = dir.join(HEADER_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let stored = text
                .strip_prefix(HEADER_MAGIC)
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
            Ok(stored)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if shards == 0 {
                return Err(StoreError::Corrupt(
                    "a store needs at least one shard".into(),
                ));
            }
            // Written to a temporary name, synced, then renamed, so a crash never leaves a
            // half-written header that would make the store unopenable.
            let tmp = dir.join("HEADER.tmp");
            fs::write(&tmp, format!("{HEADER_MAGIC}\nshards {shards}\n"))?;
            fs::File::open(&tmp)?.sync_all()?;
            fs::rename(&tmp, &path)?;
            log::sync_dir(dir)?;
            Ok(shards)
        }
        Err(e) => Err(e.into()),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The single writer: drains requests in batches, one write and one fsync per batch.
struct Writer {
    shared: Arc<Shared>,
    log: SegmentLog,
    rx: mpsc::Receiver<Request>,
}

/// An append of the current batch, waiting for the fsync.
struct Pending {
    capture: Capture,
    inbox: String,
    game: String,
    frame_index: usize,
    reply: oneshot::Sender<Result<Capture, StoreError>>,
}

impl Writer {
    fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = self.rx.blocking_recv() {
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match self.rx.try_recv() {
                    Ok(request) => batch.push(request),
                    Err(_) => break,
                }
            }
            self.write(&mut batch);
        }
        // The channel closed: the store is being dropped. Make trailing verdicts durable.
        if !self.shared.failed.load(Ordering::Acquire) {
            if let Err(e) = self.log.sync() {
                tracing::error!(error = %e, "inbox: final fsync failed");
            }
        }
    }

    fn write(&mut self, batch: &mut Vec<Request>) {
        let failed = self.shared.failed.load(Ordering::Acquire);
        let mut buf = Vec::new();
        let mut pending = Vec::new();
        let mut syncs = Vec::new();
        let mut frames = 0usize;
        let mut next: Vec<u64> = {
            let index = self.shared.index.read();
            (0..self.shared.shards)
                .map(|s| index.high_water(s))
                .collect()
        };
        let at_ms = now_ms();
        for request in batch.drain(..) {
            match request {
                Request::Append { reply, .. } if failed => {
                    let _ = reply.send(Err(unavailable()));
                }
                Request::Append {
                    shard,
                    inbox,
                    game,
                    seat,
                    raw,
                    reply,
                } => {
                    let Some(last) = next.get_mut(shard as usize) else {
                        let _ = reply.send(Err(StoreError::NoShard(shard)));
                        continue;
                    };
                    *last += 1;
                    let capture = Capture { shard, pos: *last };
                    log::frame(&mut buf, |out| {
                        codec::encode_event(out, capture, at_ms, seat, &inbox, &game, &raw)
                    });
                    pending.push(Pending {
                        capture,
                        inbox,
                        game,
                        frame_index: frames,
                        reply,
                    });
                    frames += 1;
                }
                Request::Verdict { capture, verdict } => {
                    if !failed {
                        log::frame(&mut buf, |out| {
                            codec::encode_verdict(out, capture, &verdict)
                        });
                        frames += 1;
                    }
                }
                Request::Sync { reply } => syncs.push(reply),
            }
        }
        if failed {
            for reply in syncs {
                let _ = reply.send(Err(unavailable()));
            }
            return;
        }
        // Verdicts alone do not need an fsync: they are recomputable, and the next batch
        // of appends (or an explicit sync) carries them to disk.
        let sync = !pending.is_empty() || !syncs.is_empty();
        let written = self.log.reserve(buf.len()).and_then(|(segment, base)| {
            self.log.write_batch(&buf, sync)?;
            Ok((segment, base))
        });
        let (segment, base) = match written {
            Ok(at) => at,
            Err(e) => {
                tracing::error!(error = %e, "inbox write failed; the store stops taking writes");
                self.shared.failed.store(true, Ordering::Release);
                let detail = e.to_string();
                for p in pending {
                    let _ = p.reply.send(Err(StoreError::Unavailable(detail.clone())));
                }
                for reply in syncs {
                    let _ = reply.send(Err(StoreError::Unavailable(detail.clone())));
                }
                return;
            }
        };
        self.publish(pending, syncs, &buf, segment, base);
    }

    /// The batch is durable: index it, raise the high-water marks, answer the appenders.
    fn publish(
        &self,
        pending: Vec<Pending>,
        syncs: Vec<oneshot::Sender<Result<(), StoreError>>>,
        buf: &[u8],
        segment: u32,
        base: u64,
    ) {
        let offsets = log::frames_in(buf);
        let mut touched = vec![false; self.shared.shards as usize];
        {
            let mut index = self.shared.index.write();
            for p in &pending {
                let (offset, len) = offsets[p.frame_index];
                let frame = FramePos {
                    segment,
                    offset: base + offset as u64,
                    len,
                };
                if let Err(e) = index.push(p.capture, &p.inbox, &p.game, frame) {
                    // Positions are assigned from the index by this thread alone, so this
                    // cannot happen; if it did, answering would break the no-gap promise.
                    tracing::error!(error = %e, "inbox index out of step; the store stops taking writes");
                    self.shared.failed.store(true, Ordering::Release);
                }
                touched[p.capture.shard as usize] = true;
            }
        }
        let stats = &self.shared.stats;
        if !pending.is_empty() {
            stats.syncs.fetch_add(1, Ordering::Relaxed);
            stats
                .appends
                .fetch_add(pending.len() as u64, Ordering::Relaxed);
            stats
                .max_batch
                .fetch_max(pending.len() as u64, Ordering::Relaxed);
        }
        let index = self.shared.index.read();
        for (shard, touched) in touched.into_iter().enumerate() {
            if touched {
                self.shared.watches[shard].send_replace(index.high_water(shard as u32));
            }
        }
        drop(index);
        let failed = self.shared.failed.load(Ordering::Acquire);
        for p in pending {
            let _ = p.reply.send(if failed {
                Err(unavailable())
            } else {
                Ok(p.capture)
            });
        }
        for reply in syncs {
            let _ = reply.send(Ok(()));
        }
    }
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
        let slots = self.shared.index.read().shard_range(shard, from, max);
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
            .page(inbox, Some(game), None, usize::MAX);
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
            if after.is_some_and(|c| index.slot(c).is_none()) {
                return Err(StoreError::BadCursor);
            }
            let mut slots = index.page(inbox, game, after, limit.saturating_add(1));
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

    async fn games(&self, inbox: &str, limit: usize) -> Result<Vec<GameEntry>, StoreError> {
        Ok(self.shared.index.read().games(inbox, limit))
    }

    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError> {
        let Some(slot) = self.shared.index.read().slot(capture).cloned() else {
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
        if !self.shared.index.write().set_verdict(capture, &verdict) {
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
            .slot(capture)
            .and_then(|s| s.verdict.as_ref().map(|v| v.unpack())))
    }

    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError> {
        Ok(self.shared.index.read().captures(inbox, Some(game)).len() as u64)
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
