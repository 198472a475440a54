//! The embedded inbox's single writer: one thread that drains append and verdict
//! requests in batches and gives each batch one `write` and one `fdatasync`.
//!
//! Only after the fsync does it add the batch's events to the indexes, raise the shards'
//! high-water marks and answer the appenders, so nothing a reader or a consumer sees can be
//! lost to a crash. Before raising a mark it also leaves the shard's new records, as they
//! were appended, where the shard's consumer takes them ([`Fresh`]), so the consumer does
//! not read back from disk what was written a moment ago. Verdicts are written with
//! whatever batch comes next and fsynced with the next batch that has appends (or a sync
//! request): they are recomputable.
//!
//! What it deliberately does not do: read, or decide positions from anything but the
//! index, which only this thread extends.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use games::Seat;
use parking_lot::{Mutex, RwLock};
use prometheus::Histogram;
use tokio::sync::{mpsc, oneshot, watch};

use super::codec;
use super::index::Index;
use super::log::{self, FramePos, SegmentLog, Segments};
use super::{Capture, Record, StoreError, StoredVerdict};
use crate::clock::now_ms;

/// At most this many requests share one write and fsync, so one batch's latency stays
/// bounded however many appenders wait.
const MAX_BATCH: usize = 4096;

pub(super) enum Request {
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

impl Request {
    /// About what the request adds to a batch's bytes.
    fn bytes(&self) -> usize {
        match self {
            Request::Append {
                inbox, game, raw, ..
            } => raw.len() + inbox.len() + game.len() + 64,
            Request::Verdict { .. } => 128,
            Request::Sync { .. } => 0,
        }
    }
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
    /// Where the time of each write and fsync of a batch goes, once the hub's metrics are
    /// attached (`pipehub_inbox_fsync_seconds`).
    pub flush_seconds: OnceLock<Histogram>,
}

/// How many durable records a shard keeps in memory for its consumer; when the consumer is
/// further behind than that, the oldest are dropped and it reads them from disk.
const FRESH_MAX: usize = 1024;

/// A shard's newest durable records that its consumer has not taken yet, in order.
#[derive(Default)]
pub(super) struct Fresh(Mutex<VecDeque<Record>>);

impl Fresh {
    fn push(&self, record: Record) {
        let mut q = self.0.lock();
        if q.len() == FRESH_MAX {
            q.pop_front();
        }
        q.push_back(record);
    }

    /// Up to `max` records from position `from` on, taken out, when the oldest kept (after
    /// dropping those before `from`) is at `from`; otherwise none (read them from disk).
    pub(super) fn take(&self, from: u64, max: usize) -> Vec<Record> {
        let mut q = self.0.lock();
        while q.front().is_some_and(|r| r.capture.pos < from) {
            q.pop_front();
        }
        if q.front().is_none_or(|r| r.capture.pos != from) {
            return Vec::new();
        }
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().len()
    }
}

/// State shared by the handle, the writer thread and readers.
pub(super) struct Shared {
    pub(super) shards: u32,
    pub(super) index: RwLock<Index>,
    pub(super) segments: Segments,
    pub(super) watches: Vec<watch::Sender<u64>>,
    /// Per shard, what its consumer takes before reading the disk.
    pub(super) fresh: Vec<Fresh>,
    pub(super) failed: AtomicBool,
    pub(super) stats: WriterStats,
}

pub(super) fn unavailable() -> StoreError {
    StoreError::Unavailable("the inbox stopped taking writes after a failed write or fsync".into())
}

/// The single writer: drains requests in batches, one write and one fsync per batch.
pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    pub(super) log: SegmentLog,
    pub(super) rx: mpsc::Receiver<Request>,
    pub(super) pacer: log::Pacer,
    /// The last batch found no next segment to go to (see [`log::ReserveError`]).
    pub(super) rolling: bool,
}

/// An append of the current batch, waiting for the fsync.
struct Pending {
    capture: Capture,
    inbox: String,
    game: String,
    seat: Option<Seat>,
    raw: Bytes,
    frame_index: usize,
    reply: oneshot::Sender<Result<Capture, StoreError>>,
}

impl Writer {
    pub(super) fn run(mut self) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while let Some(first) = self.rx.blocking_recv() {
            let mut bytes = first.bytes();
            batch.push(first);
            self.pacer.wait();
            // Bounded in bytes too, so that what a crash can tear stays within
            // `log::TORN_MAX` of the end.
            while batch.len() < MAX_BATCH && bytes < log::MAX_BATCH_BYTES {
                match self.rx.try_recv() {
                    Ok(request) => {
                        bytes += request.bytes();
                        batch.push(request);
                    }
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
        // The same moment on the monotonic clock, for the records handed on in memory
        // (`Record::written`): one clock read a batch.
        let stamped = Instant::now();
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
                        seat,
                        raw,
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
        if sync {
            self.pacer.syncing(pending.len() + syncs.len());
        }
        let written = self.log.reserve(buf.len()).and_then(|(segment, base)| {
            let began = Instant::now();
            self.log.write_batch(&mut buf, sync)?;
            if let (true, Some(h)) = (sync, self.shared.stats.flush_seconds.get()) {
                h.observe(began.elapsed().as_secs_f64());
            }
            Ok((segment, base))
        });
        let e = match written {
            Ok(at) => {
                if std::mem::take(&mut self.rolling) {
                    tracing::info!("inbox: the next log segment is open; appends go on");
                }
                return self.publish(pending, syncs, &buf, at, (at_ms, stamped));
            }
            Err(e @ log::ReserveError::NextSegment { .. }) => {
                // Nothing was written and the log is as it was: these appends are refused
                // (503, none acknowledged) and the next batch tries again. The batch's
                // verdicts stay in the index, and are computed again at the next open, as
                // any verdict not yet on disk is.
                if !std::mem::replace(&mut self.rolling, true) {
                    tracing::error!(error = %e, "inbox: appends are refused until the next log segment can be opened");
                }
                e
            }
            Err(e) => {
                tracing::error!(error = %e, "inbox write failed; the store stops taking writes");
                self.shared.failed.store(true, Ordering::Release);
                e
            }
        };
        let detail = e.to_string();
        for p in pending {
            let _ = p.reply.send(Err(StoreError::Unavailable(detail.clone())));
        }
        for reply in syncs {
            let _ = reply.send(Err(StoreError::Unavailable(detail.clone())));
        }
    }

    /// The batch is durable: index it, raise the high-water marks, answer the appenders.
    fn publish(
        &self,
        pending: Vec<Pending>,
        syncs: Vec<oneshot::Sender<Result<(), StoreError>>>,
        buf: &[u8],
        (segment, base): (u32, u64),
        (at_ms, stamped): (u64, Instant),
    ) {
        let offsets = log::frames_in(buf);
        let mut touched = vec![false; self.shared.shards as usize];
        // How many of the batch's events the index took: all of them, or those before
        // the first it could not take.
        let mut indexed = 0;
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
                    // Positions are assigned from the index by this thread alone, so only
                    // the spill file can fail here. The event and the rest of the batch
                    // are durable but not indexed, so they are not answered as appended
                    // (reopening the store indexes them).
                    tracing::error!(error = %e, "inbox index cannot take an event; the store stops taking writes");
                    self.shared.failed.store(true, Ordering::Release);
                    break;
                }
                indexed += 1;
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
        // The indexed records go where their consumers look first, before the marks that
        // tell the consumers to look rise.
        let mut replies = Vec::with_capacity(pending.len());
        for (i, p) in pending.into_iter().enumerate() {
            if i >= indexed {
                replies.push((p.reply, Err(unavailable())));
                continue;
            }
            self.shared.fresh[p.capture.shard as usize].push(Record {
                capture: p.capture,
                inbox: p.inbox,
                game: p.game,
                seat: p.seat,
                raw: p.raw,
                at_ms,
                written: Some(stamped),
            });
            replies.push((p.reply, Ok(p.capture)));
        }
        let index = self.shared.index.read();
        for (shard, touched) in touched.into_iter().enumerate() {
            if touched {
                self.shared.watches[shard].send_replace(index.high_water(shard as u32));
            }
        }
        drop(index);
        for (reply, answer) in replies {
            let _ = reply.send(answer);
        }
        // What was written is durable, whether or not the index took it.
        for reply in syncs {
            let _ = reply.send(Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pos: u64) -> Record {
        Record {
            capture: Capture { shard: 0, pos },
            inbox: "box".into(),
            game: "g".into(),
            seat: None,
            raw: Bytes::from_static(b"{}"),
            at_ms: 0,
            written: None,
        }
    }

    #[test]
    fn fresh_records_are_bounded_and_taken_only_from_where_the_reader_is() {
        let fresh = Fresh::default();
        for pos in 1..=(FRESH_MAX as u64 + 10) {
            fresh.push(record(pos));
        }
        assert_eq!(fresh.len(), FRESH_MAX, "the oldest ten went");
        // The reader is at 1, which memory no longer holds: it reads the disk.
        assert!(fresh.take(1, 100).is_empty());
        let from_11: Vec<u64> = fresh.take(11, 3).iter().map(|r| r.capture.pos).collect();
        assert_eq!(from_11, [11, 12, 13]);
        // A reader further on drops what it skipped.
        assert_eq!(fresh.take(20, 1)[0].capture.pos, 20);
        assert_eq!(fresh.len(), FRESH_MAX + 10 - 20);
        assert!(
            fresh.take(FRESH_MAX as u64 + 11, 5).is_empty(),
            "nothing past the end"
        );
    }
}
