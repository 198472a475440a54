//! Benchmarks of the embedded inbox: durable appends per second under many concurrent
//! appenders (with the group-commit batch sizes they produce, paced as the hub paces them
//! and not), and the replay rate at open.
//!
//! Run with `cargo bench -p pipehub-hub --bench inbox`. The stores live under Cargo's
//! target temporary directory (a real disk, so fsync costs what it costs in production),
//! or under `PIPEHUB_BENCH_DIR` when set. Each append is acknowledged only after its batch
//! is fdatasynced, exactly as in the hub.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hub::inbox::embedded::{self, EmbeddedInbox};
use hub::inbox::log::Pacing;
use hub::inbox::Inbox;

/// A signed tic-tac-toe move is about this long on the wire.
const EVENT_BYTES: usize = 300;
const SHARDS: u32 = 8;
const REPLAY_EVENTS: u64 = 200_000;

fn bench_dir() -> PathBuf {
    std::env::var_os("PIPEHUB_BENCH_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from)
}

fn event(game: u64, seq: u64) -> Bytes {
    let head = format!(r#"{{"game":"g{game}","seq":{seq},"action":"move","sig":""#);
    let mut text = head.into_bytes();
    text.resize(EVENT_BYTES - 2, b'0');
    text.extend_from_slice(b"\"}");
    Bytes::from(text)
}

fn runtime() -> tokio::runtime::Runtime {
    // The bench's own setup: failing to build a runtime is not something to recover from.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `appenders` tasks share `total` appends, each to its own game, all waiting for
/// durability; returns the wall time.
async fn append_all(inbox: &Arc<EmbeddedInbox>, appenders: u64, total: u64) -> Duration {
    let started = Instant::now();
    let per = total.div_ceil(appenders);
    let mut tasks = Vec::new();
    for writer in 0..appenders {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            for seq in 0..per {
                let game = format!("g{writer}");
                inbox
                    .append("bench", &game, None, event(writer, seq))
                    .await
                    .expect("append");
            }
        }));
    }
    for task in tasks {
        task.await.expect("appender task");
    }
    started.elapsed()
}

fn appends(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("inbox_append");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(1));
    // The hub's default pacing, and every batch fsynced at once (`--inbox-pacing-us 0`).
    let pacings = [("paced", embedded::PACING), ("unpaced", Pacing::OFF)];
    for ((name, pacing), appenders) in pacings
        .into_iter()
        .flat_map(|p| [1u64, 16, 64, 256].map(|a| (p, a)))
    {
        let dir = tempfile::tempdir_in(bench_dir()).expect("bench dir");
        let inbox = Arc::new(EmbeddedInbox::open_paced(dir.path(), SHARDS, pacing).expect("open"));
        group.bench_with_input(
            BenchmarkId::new(name, appenders),
            &appenders,
            |b, &appenders| {
                b.iter_custom(|iters| {
                    rt.block_on(append_all(&inbox, appenders, iters.max(appenders)))
                });
            },
        );
        let stats = inbox.stats();
        let (syncs, total) = (
            stats.syncs.load(Ordering::Relaxed),
            stats.appends.load(Ordering::Relaxed),
        );
        println!(
            "inbox_append/{name}/{appenders}: {total} appends in {syncs} fsyncs, mean batch {:.1}, max batch {}",
            total as f64 / syncs.max(1) as f64,
            stats.max_batch.load(Ordering::Relaxed)
        );
    }
    group.finish();
}

fn replay(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir_in(bench_dir()).expect("bench dir");
    {
        let inbox = Arc::new(EmbeddedInbox::open(dir.path(), SHARDS).expect("open"));
        rt.block_on(append_all(&inbox, 256, REPLAY_EVENTS));
        // Half the events get a verdict, as a running hub's would.
        rt.block_on(async {
            for shard in 0..SHARDS {
                for record in inbox.read_shard(shard, 1, usize::MAX).await.expect("read") {
                    if record.capture.pos % 2 == 0 {
                        let verdict = hub::inbox::StoredVerdict::Accepted {
                            hash: "ab".repeat(32),
                        };
                        inbox
                            .put_verdict(record.capture, verdict)
                            .await
                            .expect("verdict");
                    }
                }
            }
            inbox.sync().await.expect("sync");
        });
    }
    let mut group = c.benchmark_group("inbox_replay");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(REPLAY_EVENTS));
    group.bench_function("open", |b| {
        // Each store is dropped (which joins its writer thread and releases the data
        // directory's lock) before the next opens, outside the timing.
        b.iter_custom(|iters| {
            let mut opening = Duration::ZERO;
            for _ in 0..iters {
                let started = Instant::now();
                let inbox = EmbeddedInbox::open(dir.path(), SHARDS).expect("open");
                opening += started.elapsed();
                assert_eq!(
                    inbox.open_report().events,
                    REPLAY_EVENTS.div_ceil(256) * 256
                );
                drop(inbox);
            }
            opening
        })
    });
    group.finish();
}

criterion_group!(benches, appends, replay);
criterion_main!(benches);
