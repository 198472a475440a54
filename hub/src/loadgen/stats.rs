//! What a load run counts, and the pace it keeps.
//!
//! [`Stats`] is shared by every game task: plain atomic counters, and one latency
//! histogram behind a mutex. A histogram per game would cost tens of kilobytes each, which
//! at 10,000 games is more memory than the hub under test; one shared histogram is taken a
//! few thousand times a second for well under a microsecond, which is cheaper than the
//! frame it measures.
//!
//! [`Pacer`] caps the offered load (`--rate`). It hands out send slots spaced evenly in
//! time and keeps no credit for idle periods, so a pause is never followed by a burst. It
//! does not queue fairly between games; under the cap every game waits about as long.

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The largest latency the histogram records exactly (a minute, in microseconds); anything
/// slower is clamped to it, which a minute-long stall deserves anyway.
const MAX_LATENCY_US: u64 = 60_000_000;

/// Counters shared by every game of a run.
#[derive(Debug)]
pub struct Stats {
    /// Moves whose resulting state reached the opponent's socket inside the measured window.
    pub moves: AtomicU64,
    /// `game.refused` answers (rate limits included).
    pub refused: AtomicU64,
    /// Transport failures, `error` messages, lost states, and HTTP calls that failed.
    pub errors: AtomicU64,
    /// Times the hub answered `rate_limited`, over HTTP or the socket.
    pub rate_limited: AtomicU64,
    /// Times a pair was refused for the hub's limit on failed pairing attempts.
    pub pairing_limited: AtomicU64,
    /// Games the hub refused to open because of its open-games cap, each counted once
    /// however often its table asked again.
    pub open_games_cap: AtomicU64,
    /// The open-games cap the hub named in its refusals (0: none named).
    pub open_games_limit: AtomicU64,
    /// Times the hub refused a WebSocket because this client held the most it may.
    pub sockets_cap: AtomicU64,
    /// Connections the hub closed as they opened, unanswered: its cap on connections per
    /// peer address.
    pub connections_cap: AtomicU64,
    latency: Mutex<Histogram<u64>>,
    /// The longest a move waited without its state reaching the opponent, in µs: one
    /// still waiting when the clock stopped, or given up after the stall time. Not a
    /// latency sample (its state never came, or came too late to be measured), but the
    /// report's `max` is at least this: a run through a failover must not report a small
    /// maximum because the moves that waited longest were never answered in time.
    unanswered_max_us: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// When the counters were made, the origin of `last_move_ns`.
    origin: Instant,
    /// When the latest move was counted, in nanoseconds from `origin` (0: none yet), so
    /// that a run whose hub went away can say how long the hub was there.
    last_move_ns: AtomicU64,
}

/// Latency percentiles in milliseconds; each `None` (`null` in JSON) when no move was
/// measured, since a latency of 0 ms would be a figure nobody saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Stats {
    pub fn new() -> Stats {
        // Three significant digits over 1 µs..60 s: fixed bounds that are valid by
        // construction, so this cannot fail.
        let histogram = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
            .expect("constant histogram bounds are valid");
        Stats {
            moves: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            pairing_limited: AtomicU64::new(0),
            open_games_cap: AtomicU64::new(0),
            open_games_limit: AtomicU64::new(0),
            sockets_cap: AtomicU64::new(0),
            connections_cap: AtomicU64::new(0),
            latency: Mutex::new(histogram),
            unanswered_max_us: AtomicU64::new(0),
            first_error: Mutex::new(None),
            origin: Instant::now(),
            last_move_ns: AtomicU64::new(0),
        }
    }

    /// Counts one move that reached the opponent after `latency`.
    pub fn record_move(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(MAX_LATENCY_US)
            .clamp(1, MAX_LATENCY_US);
        self.moves.fetch_add(1, Ordering::Relaxed);
        self.latency.lock().saturating_record(us);
        let since = u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last_move_ns.fetch_max(since.max(1), Ordering::Relaxed);
    }

    /// Notes a move that had waited `waited` for its state when it stopped being waited
    /// for (the clock stopped, or the stall time passed).
    pub fn unanswered(&self, waited: Duration) {
        let us = u64::try_from(waited.as_micros()).unwrap_or(MAX_LATENCY_US);
        self.unanswered_max_us
            .fetch_max(us.min(MAX_LATENCY_US), Ordering::Relaxed);
    }

    /// When the latest move was counted, if any was.
    pub fn last_move_at(&self) -> Option<Instant> {
        match self.last_move_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => self.origin.checked_add(Duration::from_nanos(ns)),
        }
    }

    /// Counts one error and keeps the first one's text for the report.
    pub fn error(&self, what: impl FnOnce() -> String) {
        if self.errors.fetch_add(1, Ordering::Relaxed) == 0 {
            let mut first = self.first_error.lock();
            if first.is_none() {
                *first = Some(what());
            }
        }
    }

    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().clone()
    }

    pub fn percentiles(&self) -> Percentiles {
        let h = self.latency.lock();
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: u64| Some(us as f64 / 1000.0);
        let unanswered = self.unanswered_max_us.load(Ordering::Relaxed);
        Percentiles {
            p50: ms(h.value_at_quantile(0.50)),
            p90: ms(h.value_at_quantile(0.90)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max().max(unanswered)),
        }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

/// The lowest `--rate` a run takes, in moves a second: one move every 1,000 s. A slower
/// rate would not make a second move in most runs, and a rate small enough to spread slots
/// beyond what a `u64` of nanoseconds holds is no rate at all.
pub const MIN_RATE: f64 = 0.001;

/// Evenly spaced send slots: at most `rate` moves a second across all games.
#[derive(Debug)]
pub struct Pacer {
    interval_ns: u64,
    origin: Instant,
    next_ns: AtomicU64,
}

impl Pacer {
    /// `None` or a non-positive rate means no cap. A rate below [`MIN_RATE`] is refused
    /// before a run starts; here it only makes slots far apart (the interval saturates at
    /// `u64::MAX` nanoseconds, as a float-to-integer cast does).
    pub fn new(rate: Option<f64>) -> Pacer {
        let interval_ns = match rate {
            Some(r) if r > 0.0 => (1e9 / r).round().max(1.0) as u64,
            _ => 0,
        };
        Pacer {
            interval_ns,
            origin: Instant::now(),
            next_ns: AtomicU64::new(0),
        }
    }

    /// Waits for this caller's slot.
    pub async fn wait(&self) {
        if self.interval_ns == 0 {
            return;
        }
        let now = self.elapsed_ns();
        let mut next = self.next_ns.load(Ordering::Relaxed);
        let slot = loop {
            // No credit for idle time: a slot is never earlier than now.
            let slot = next.max(now);
            // Saturating: a huge interval makes every later slot "never", not a wrap to
            // the past (or a panic in a debug build).
            match self.next_ns.compare_exchange_weak(
                next,
                slot.saturating_add(self.interval_ns),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break slot,
                Err(seen) => next = seen,
            }
        };
        if slot > now {
            match self.origin.checked_add(Duration::from_nanos(slot)) {
                Some(at) => tokio::time::sleep_until(at).await,
                // A slot past what the clock can name never comes; the caller bounds its
                // wait by the run's deadline.
                None => std::future::pending().await,
            }
        }
    }

    fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_recorded_moves() {
        let stats = Stats::new();
        for ms in 1..=100u64 {
            stats.record_move(Duration::from_millis(ms));
        }
        let p = stats.percentiles();
        assert_eq!(Stats::get(&stats.moves), 100);
        let near = |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() < 0.1);
        assert!(near(p.p50, 50.0), "{p:?}");
        assert!(near(p.p99, 99.0), "{p:?}");
        assert!(near(p.max, 100.0), "{p:?}");
    }

    /// A move still unanswered when the clock stopped (a failover mid-run) waited longer
    /// than any measured one: the maximum says so, the percentiles stay those measured.
    #[test]
    fn the_maximum_counts_moves_left_unanswered() {
        let stats = Stats::new();
        for ms in 1..=100 {
            stats.record_move(Duration::from_millis(ms));
        }
        stats.unanswered(Duration::from_millis(3_200));
        stats.unanswered(Duration::from_millis(40));
        let p = stats.percentiles();
        assert_eq!(Stats::get(&stats.moves), 100);
        let near = |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() < 0.1);
        assert!(near(p.p99, 99.0), "{p:?}");
        assert!(near(p.max, 3_200.0), "{p:?}");
    }

    /// No move measured, no latency: null in JSON rather than a made-up 0 ms.
    #[test]
    fn percentiles_of_no_move_are_absent() {
        let p = Stats::new().percentiles();
        assert_eq!(p, Percentiles::default());
        let json = serde_json::to_value(p).expect("serializable");
        assert_eq!(
            json,
            serde_json::json!({"p50": null, "p90": null, "p99": null, "max": null})
        );
    }

    #[test]
    fn the_latest_move_is_remembered() {
        let stats = Stats::new();
        assert_eq!(stats.last_move_at(), None);
        stats.record_move(Duration::from_millis(1));
        let at = stats.last_move_at().expect("a move was counted");
        assert!(at > stats.origin && at <= Instant::now(), "{at:?}");
    }

    #[test]
    fn first_error_is_kept() {
        let stats = Stats::new();
        stats.error(|| "one".into());
        stats.error(|| "two".into());
        assert_eq!(Stats::get(&stats.errors), 2);
        assert_eq!(stats.first_error().as_deref(), Some("one"));
    }

    #[tokio::test]
    async fn pacer_spaces_slots_and_keeps_no_credit() {
        let pacer = Pacer::new(Some(200.0));
        let start = Instant::now();
        for _ in 0..5 {
            pacer.wait().await;
        }
        // Slots at 0, 5, 10, 15, 20 ms.
        let spaced = start.elapsed();
        assert!(spaced >= Duration::from_millis(20), "{spaced:?}");
        assert!(spaced < Duration::from_millis(500), "{spaced:?}");
        // After an idle spell the next slot is now, not a burst of saved-up slots.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let idle = Instant::now();
        pacer.wait().await;
        pacer.wait().await;
        assert!(
            idle.elapsed() >= Duration::from_millis(4),
            "{:?}",
            idle.elapsed()
        );
        let free = Instant::now();
        Pacer::new(None).wait().await;
        assert!(free.elapsed() < Duration::from_millis(5));
    }

    /// A rate so small that its interval saturates (it used to overflow the next slot's
    /// sum and panic): the first slot is now, the next one never comes, and nothing wraps.
    #[tokio::test]
    async fn a_vanishing_rate_makes_far_slots_without_overflow() {
        for rate in [1e-10, 1e-300] {
            let pacer = Pacer::new(Some(rate));
            tokio::time::timeout(Duration::from_millis(100), pacer.wait())
                .await
                .expect("the first slot is now");
            for _ in 0..3 {
                let later = tokio::time::timeout(Duration::from_millis(20), pacer.wait()).await;
                assert!(later.is_err(), "rate {rate}: a slot came at once");
            }
        }
    }
}
