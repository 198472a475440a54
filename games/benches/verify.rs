//! Throughput of the verifier, through the same path `pipehub verify` takes
//! (`verify_log`: parse, schema, canonical bytes, hash, signature, protocol), on a log of
//! many interleaved tic-tac-toe games, unsigned and signed; and the cost of one raw
//! `verify_strict`, which bounds the signed figure from below.
//!
//! `cargo bench -p pipehub-games --bench verify` (short runs: about 20 s in all).

#[path = "../tests/verify_support/mod.rs"]
mod verify_support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use games::canonical::{canonical_bytes, reference_bytes};
use games::report::{verify_log, EntryVerdict, Mode};
use games::{Event, Registry};
use serde_json::json;
use std::hint::black_box;
use std::time::Duration;
use verify_support::Writer;

const GAMES: usize = 500;

/// `GAMES` drawn games of ten events each, interleaved move by move.
fn log(signed: bool) -> (String, u64) {
    let draw = [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 0),
        (2, 2),
    ];
    let mut writers: Vec<Writer> = (0..GAMES)
        .map(|i| {
            let id = format!("bench-{i}");
            if signed {
                Writer::signed(&id, "bench")
            } else {
                Writer::unsigned(&id)
            }
        })
        .collect();
    let mut events: Vec<Event> = writers
        .iter_mut()
        .map(|w| w.start(Some("pipehub:tic-tac-toe"), json!({})))
        .collect();
    for (r, c) in draw {
        for w in &mut writers {
            events.push(w.play(json!({"row": r, "col": c})));
        }
    }
    let text: String = events.iter().map(|e| e.to_json() + "\n").collect();
    (text, events.len() as u64)
}

/// This thread's CPU time so far, from `/proc/thread-self/schedstat` (Linux), in ns.
fn cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// Prints events per second of CPU time: on a shared machine, wall-clock figures measure
/// the neighbours as much as the code.
fn per_cpu_second(label: &str, events: u64, mut f: impl FnMut()) {
    let (Some(start), wall) = (cpu_ns(), std::time::Instant::now()) else {
        return;
    };
    let mut runs = 0u64;
    while wall.elapsed() < Duration::from_secs(2) {
        f();
        runs += 1;
    }
    if let Some(end) = cpu_ns() {
        let secs = (end - start) as f64 / 1e9;
        println!(
            "{label}: {:.0} events per CPU-second ({runs} runs, {secs:.2} s CPU)",
            (runs * events) as f64 / secs
        );
    }
}

fn bench_verify_log(c: &mut Criterion) {
    let registry = Registry::builtin();
    let mut group = c.benchmark_group("verify_log");
    for signed in [false, true] {
        let (text, n) = log(signed);
        let report = verify_log(text.as_bytes(), Mode::Strict, &registry);
        assert!(report.iter().all(|e| e.verdict == EntryVerdict::Ok));
        group.throughput(Throughput::Elements(n));
        let name = if signed { "signed" } else { "unsigned" };
        per_cpu_second(&format!("verify_log/{name}"), n, || {
            black_box(verify_log(
                black_box(text.as_bytes()),
                Mode::Strict,
                &registry,
            ));
        });
        group.bench_function(name, |b| {
            b.iter(|| verify_log(black_box(text.as_bytes()), Mode::Strict, &registry))
        });
    }
    group.finish();
}

fn bench_primitives(c: &mut Criterion) {
    let mut w = Writer::signed("g", "bench");
    w.start(None, json!({}));
    let e = w.play(json!({"row": 1, "col": 1}));
    let bytes = canonical_bytes(&e);
    let line = e.to_json();
    let key = games::crypto::public_key(w.keys_value().unwrap()["X"].as_str().unwrap()).unwrap();
    let sig = e.sig.clone().unwrap();
    per_cpu_second("verify_strict", 1, || {
        black_box(games::crypto::verify(&key, black_box(&bytes), &sig));
    });
    let mut group = c.benchmark_group("per_event");
    group.throughput(Throughput::Elements(1));
    group.bench_function("verify_strict", |b| {
        b.iter(|| games::crypto::verify(&key, black_box(&bytes), &sig))
    });
    group.bench_function("parse", |b| {
        b.iter(|| Event::parse(black_box(line.as_bytes())))
    });
    group.bench_function("canonical_fast", |b| {
        b.iter(|| canonical_bytes(black_box(&e)))
    });
    group.bench_function("canonical_reference", |b| {
        b.iter(|| reference_bytes(black_box(&e)))
    });
    group.bench_function("sha256", |b| {
        b.iter(|| games::crypto::sha256_hex(black_box(&bytes)))
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(10)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_verify_log, bench_primitives
}
criterion_main!(benches);
