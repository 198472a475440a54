//! A load program for a running hub over HTTP (not a test: nothing here is timed by the
//! test suite).
//!
//! It plays `--games` seated games at once, each on its own keep-alive connection: create,
//! pair, then the two hub-held seats post `…/moves` in turn as fast as the answers come
//! (or paced so that all games together offer `--rate` moves per second), and when a game
//! has used its moves it resigns and a new game starts on the same connection. Every move
//! is a whole round trip: append, fsync, adjudication, answer.
//!
//! It reports accepted moves per second, the client's round-trip latency per move, and the
//! hub's own capture→verdict latency read from the difference of its
//! `pipehub_capture_to_verdict_seconds` histogram before and after the run (quantiles
//! interpolated within buckets, as Prometheus does).
//!
//! The hub must allow the load: start it with e.g.
//! `pipehub serve --rate-limit 1000000/1 --max-open-games 1000000`.
//!
//! Usage: `http_bench --hub URL [--games G] [--duration S] [--rate MOVES_PER_S]
//! [--unsigned]`. The hub must be on this machine (127.0.0.1).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pipehub_tests::Client;
use serde_json::{json, Value};

/// The board: 10×10, ten in a row to win; filling the first five rows row by row never
/// makes a line, so every game has 50 legal moves.
const ROWS: u64 = 10;
const COLS: u64 = 10;
const MOVES_PER_GAME: u64 = 50;

struct Options {
    hub: String,
    games: usize,
    duration: Duration,
    rate: Option<f64>,
    signed: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        hub: String::new(),
        games: 64,
        duration: Duration::from_secs(10),
        rate: None,
        signed: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--hub" => o.hub = value()?.trim_end_matches('/').to_string(),
            "--games" => o.games = value()?.parse().map_err(|_| "--games N")?,
            "--duration" => {
                o.duration = Duration::from_secs(value()?.parse().map_err(|_| "--duration S")?)
            }
            "--rate" => o.rate = Some(value()?.parse().map_err(|_| "--rate MOVES_PER_S")?),
            "--unsigned" => o.signed = false,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if !(o.hub.starts_with("http://127.") || o.hub.starts_with("http://localhost")) {
        return Err("--hub must be http://127.x.x.x:PORT or http://localhost:PORT".into());
    }
    if o.games == 0 {
        return Err("--games must be at least 1".into());
    }
    Ok(o)
}

#[derive(Default)]
struct Totals {
    moves: AtomicU64,
    refused: AtomicU64,
    errors: AtomicU64,
    games: AtomicU64,
}

/// One connection playing games back to back until `stop`.
fn player(o: Arc<Options>, totals: Arc<Totals>, stop: Arc<AtomicBool>, lat: Arc<Mutex<Vec<u32>>>) {
    let c = Client::new();
    let interval = o.rate.map(|r| Duration::from_secs_f64(o.games as f64 / r));
    let mut next = Instant::now();
    let mut local = Vec::new();
    'games: while !stop.load(Ordering::Relaxed) {
        let created = c.post(
            &format!("{}/v1/inboxes/bench/games", o.hub),
            None,
            &json!({"protocol": "pipehub:tic-tac-toe", "signed": o.signed,
                    "rules": {"rows": ROWS, "cols": COLS, "winLength": 10}}),
        );
        if created.status != 201 {
            eprintln!("create: {} {}", created.status, created.body);
            totals.errors.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let created = created.json();
        let paired = c.post(
            &format!("{}/v1/pair", o.hub),
            None,
            &json!({"code": created["pairingCode"]}),
        );
        if paired.status != 200 {
            eprintln!("pair: {} {}", paired.status, paired.body);
            totals.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let tokens = [
            created["token"].as_str().unwrap_or_default().to_string(),
            paired.json()["token"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ];
        let game = created["game"].as_str().unwrap_or_default().to_string();
        let base = format!("{}/v1/inboxes/bench/games/{game}", o.hub);
        for i in 0..MOVES_PER_GAME {
            if stop.load(Ordering::Relaxed) {
                break 'games;
            }
            if let Some(interval) = interval {
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                next = next.max(now) + interval;
            }
            let mv = json!({"move": {"row": i / COLS, "col": i % COLS}});
            let sent = Instant::now();
            let res = c.post(
                &format!("{base}/moves"),
                Some(&tokens[(i % 2) as usize]),
                &mv,
            );
            let micros = sent.elapsed().as_micros().min(u32::MAX as u128) as u32;
            match res.status {
                201 => {
                    totals.moves.fetch_add(1, Ordering::Relaxed);
                    local.push(micros);
                }
                422 => {
                    totals.refused.fetch_add(1, Ordering::Relaxed);
                    continue 'games;
                }
                _ => {
                    eprintln!("move: {} {}", res.status, res.body);
                    totals.errors.fetch_add(1, Ordering::Relaxed);
                    continue 'games;
                }
            }
        }
        let _ = c.send(
            "POST",
            &format!("{base}/resign"),
            Some(&tokens[0]),
            None,
            None,
        );
        totals.games.fetch_add(1, Ordering::Relaxed);
    }
    if let Ok(mut all) = lat.lock() {
        all.extend(local);
    }
}

/// The cumulative buckets of one histogram in a Prometheus text page: `le` → count.
fn histogram(page: &str, name: &str) -> BTreeMap<u64, f64> {
    let prefix = format!("{name}_bucket{{le=\"");
    page.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            // Keyed by nanoseconds so the map sorts numerically.
            let key = if le.is_finite() {
                (le * 1e9) as u64
            } else {
                u64::MAX
            };
            Some((key, count.trim().parse().ok()?))
        })
        .collect()
}

/// A quantile of the difference of two cumulative histograms, in milliseconds.
fn quantile(before: &BTreeMap<u64, f64>, after: &BTreeMap<u64, f64>, q: f64) -> Option<f64> {
    let diff: Vec<(u64, f64)> = after
        .iter()
        .map(|(le, n)| (*le, n - before.get(le).copied().unwrap_or(0.0)))
        .collect();
    let total = diff.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0u64, 0.0f64);
    for (le, n) in diff {
        if n >= rank {
            if le == u64::MAX {
                return Some(lower.0 as f64 / 1e6);
            }
            let frac = if n > lower.1 {
                (rank - lower.1) / (n - lower.1)
            } else {
                1.0
            };
            return Some((lower.0 as f64 + frac * (le - lower.0) as f64) / 1e6);
        }
        lower = (le, n);
    }
    None
}

fn percentile(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() {
    let o = match options() {
        Ok(o) => Arc::new(o),
        Err(e) => {
            eprintln!("http_bench: {e}");
            std::process::exit(2);
        }
    };
    let probe = Client::new();
    let metrics_url = format!("{}/metrics", o.hub);
    let before = histogram(
        &probe.get(&metrics_url).body,
        "pipehub_capture_to_verdict_seconds",
    );

    let totals = Arc::new(Totals::default());
    let stop = Arc::new(AtomicBool::new(false));
    let lat = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let threads: Vec<_> = (0..o.games)
        .map(|_| {
            let (o, t, s, l) = (o.clone(), totals.clone(), stop.clone(), lat.clone());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || player(o, t, s, l))
                .expect("a player thread")
        })
        .collect();
    std::thread::sleep(o.duration);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let elapsed = started.elapsed().as_secs_f64();

    let page = probe.get(&metrics_url).body;
    let after = histogram(&page, "pipehub_capture_to_verdict_seconds");
    let rss = page
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    let mut all = lat.lock().map(|v| v.clone()).unwrap_or_default();
    all.sort_unstable();
    let moves = totals.moves.load(Ordering::Relaxed);
    let report: Value = json!({
        "games": o.games,
        "signed": o.signed,
        "rate": o.rate,
        "duration_s": (elapsed * 100.0).round() / 100.0,
        "moves": moves,
        "moves_per_s": (moves as f64 / elapsed).round(),
        "games_finished": totals.games.load(Ordering::Relaxed),
        "refused": totals.refused.load(Ordering::Relaxed),
        "errors": totals.errors.load(Ordering::Relaxed),
        "round_trip_ms": {
            "p50": percentile(&all, 0.50), "p99": percentile(&all, 0.99),
            "max": percentile(&all, 1.0),
        },
        "capture_to_verdict_ms": {
            "p50": quantile(&before, &after, 0.50), "p99": quantile(&before, &after, 0.99),
        },
        "hub_rss_bytes": rss,
    });
    println!("{report}");
}
