//! Every metric the hub exports, in one place.
//!
//! Operators read the hub through Prometheus: this module owns the registry, names every
//! series `pipehub_*` with its unit in the name (`_seconds`, `_bytes`, `_total`), and adds
//! the standard `process_*` series (resident memory, CPU, open descriptors) through the
//! prometheus crate's process collector (its CPU counter made exact to the microsecond: the
//! crate's counts whole seconds). Keeping all of them here means a dashboard author
//! reads one file to learn what exists, and two modules cannot register the same name.
//!
//! Callers get an `Arc<Metrics>` and touch its public fields (or the small helpers below)
//! directly; the prometheus types are cheap, lock-free atomics. This module deliberately
//! does not decide *when* something is counted — the rate limiter, the store, the actors and
//! the HTTP layer do — and it never labels a series with anything a client controls freely
//! (game ids, inbox names, tokens), so a client cannot blow up the number of series.
//! Labels are closed sets: verdicts, reason codes, built-in protocol refs, phases, shards.

use std::time::Duration;

use games::Reason;
use prometheus::{
    exponential_buckets, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// The hub's metrics and the registry that exposes them at `/metrics`.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `pipehub_events_total{verdict, reason, protocol}`: adjudicated events. `verdict` is
    /// `accepted`, `rejected` or `skipped`; `reason` is the reason code of a rejection or
    /// skip and `""` for an accepted event; `protocol` the game's protocol ref (`""` before
    /// a genesis names one).
    pub events: IntCounterVec,
    /// `pipehub_input_refused_total{reason}`: bodies refused before they were events
    /// (section 1 reasons: `too_large`, `bad_json`, …); they never reach the inbox.
    pub input_refused: IntCounterVec,
    /// `pipehub_games{phase}`: seated and anonymous games known to this hub, by phase
    /// (`waiting`, `paired`, `started`, `finished`). Waiting and paired are every seated
    /// game not started; started and finished are the games an actor of this hub has
    /// judged since the hub started (after a restart: the open seated games it rebuilds,
    /// and any other game once something reads or plays it), so they are not the store's
    /// totals. `pipehub_games_ended_total` counts ends across restarts.
    pub games: IntGaugeVec,
    /// `pipehub_games_created_total`: seated games created through the API.
    pub games_created: IntCounter,
    /// `pipehub_games_ended_total`: games this hub refereed to their end (a win, a draw or
    /// a resign), counted once, by the referee that judged the last event.
    pub games_ended: IntCounter,
    /// `pipehub_actors_resident`: game actors currently in memory.
    pub actors_resident: IntGauge,
    /// `pipehub_websocket_connections`: open WebSocket connections.
    pub websocket_connections: IntGauge,
    /// `pipehub_websocket_closed_total{reason}`: WebSocket connections ended, by the first
    /// cause the relay met (`relay::Ended`): `client` (a close frame), `disconnected`
    /// (gone without one), `bad_frame`, `idle` (no frame or pong within the idle timeout),
    /// `slow` (dropped for not reading its frames) or `shutdown`. Every label is present
    /// from the start.
    pub websocket_closed: IntCounterVec,
    /// `pipehub_capture_to_verdict_seconds`: from a capture's stamp (taken as its batch is
    /// written, before the fsync) to its verdict. A capture the embedded inbox hands from
    /// its write to the consumer in memory is timed on the monotonic clock, to well under
    /// a millisecond; one read back from the log (a consumer behind, a game rebuilt after a
    /// restart) or from Redis (perhaps appended by another node, by that node's clock) is
    /// timed from the stamp the store keeps, in whole milliseconds, so it counts as 0, 1,
    /// 2… ms. See [`crate::inbox::Record::age`].
    pub capture_to_verdict: Histogram,
    /// `pipehub_verdict_to_relay_seconds`: from a verdict to its views handed to the room.
    pub verdict_to_relay: Histogram,
    /// `pipehub_rate_limited_requests_total{limit}`: requests the limiter refused; `limit`
    /// is `events` (the per-person event budget), `pairing` (failed pairing attempts),
    /// `sockets` (WebSockets refused for their client's cap) or `connections` (TCP
    /// connections closed for their peer's cap).
    pub rate_limited: IntCounterVec,
    /// `pipehub_pairing_failures_total{reason}`: pairing attempts with an unknown, used or
    /// expired code.
    pub pairing_failures: IntCounterVec,
    /// `pipehub_inbox_append_seconds`: from an append call to its record being durable.
    pub inbox_append: Histogram,
    /// `pipehub_inbox_fsyncs_total`: fsyncs of the inbox's log; appends per fsync is the
    /// group-commit factor (`pipehub_inbox_appended_total` / this).
    pub inbox_fsyncs: IntCounter,
    /// `pipehub_inbox_fsync_batch_max_records`: the most records one fsync made durable.
    pub inbox_fsync_batch_max: IntGauge,
    /// `pipehub_inbox_appended_total`: records appended to the inbox.
    pub inbox_appended: IntCounter,
    /// `pipehub_inbox_fsync_seconds`: one write and fsync of a batch of the inbox's log.
    /// On a virtual disk the flush after a pause can take many times one in a stream,
    /// and every move waits for one (README, Performance).
    pub inbox_fsync: Histogram,
    /// `pipehub_meta_fsync_seconds`: the same for the embedded meta store's log.
    pub meta_fsync: Histogram,
    /// `pipehub_meta_fsyncs_total`: fsyncs of the embedded meta store's log (seats, codes,
    /// registrations), each making a batch of changes durable.
    pub meta_fsyncs: IntCounter,
    /// `pipehub_meta_cold_keys`: keys of seats, registrations and pairing codes the
    /// embedded meta store keeps in its cache files rather than in memory.
    pub meta_cold_keys: IntGauge,
    /// `pipehub_consumer_backlog_records{shard}`: durable records of a shard not yet
    /// routed to their actor.
    pub consumer_backlog: IntGaugeVec,
    /// `pipehub_consumer_running{shard}`: 1 while this node's consumer reads the shard
    /// (on a cluster node: while it holds the shard's lease), else 0.
    pub consumer_running: IntGaugeVec,
    /// `pipehub_held_choices`: rock-paper-scissors choices held for their seat's turn.
    pub held_choices: IntGauge,
    /// `pipehub_cluster_shards_owned`: shard leases this node holds (Redis backend).
    pub cluster_shards_owned: IntGauge,
    /// `pipehub_cluster_shards`: the store's shard count (Redis backend; 0 embedded).
    pub cluster_shards: IntGauge,
    /// `pipehub_store_up`: 1 while the store takes writes, else 0: what `/readyz` answers
    /// of the store at that moment, read as the scrape is answered (`Hub::refresh_gauges`).
    /// The embedded store: until a write or fsync fails, after which it takes none until
    /// the hub restarts. The Redis backend: while Redis answers this node (a command that
    /// meets a broken connection turns it 0, the inbox's stream watch, which asks Redis
    /// at least once a second, turns it 1 again) and has not gone back in time, and the
    /// node's last lease round (every 750 ms) could write to it: a Redis that answers but
    /// takes no write (out of memory, read-only) is down here, though `/readyz`, which
    /// counts only whether it answers, passes.
    pub store_up: IntGauge,
    /// `pipehub_http_requests_total{method, route, status}`: HTTP requests answered, by
    /// route pattern (never the raw path).
    pub http_requests: IntCounterVec,
    /// `pipehub_http_request_duration_seconds{route}`: HTTP handling time by route pattern.
    pub http_duration: HistogramVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Latency buckets from 50 µs to about 6.5 s: the hub's verdicts take well under a
/// millisecond, the tail and a slow disk's fsync are what the upper buckets catch.
fn latency_buckets() -> Vec<f64> {
    // 18 doublings from 50 µs; the arguments are constants that exponential_buckets
    // accepts (start > 0, factor > 1, count ≥ 1), so this cannot fail.
    exponential_buckets(0.000_05, 2.0, 18).unwrap_or_default()
}

impl Metrics {
    /// Builds the registry with every `pipehub_*` series and the process collector.
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let counter = |name: &str, help: &str| {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok::<_, prometheus::Error>(g)
        };
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))?;
            registry.register(Box::new(h.clone()))?;
            Ok::<_, prometheus::Error>(h)
        };

        let metrics = Metrics {
            events: counter_vec(
                "pipehub_events_total",
                "Adjudicated events by verdict, reason code and protocol.",
                &["verdict", "reason", "protocol"],
            )?,
            input_refused: counter_vec(
                "pipehub_input_refused_total",
                "Bodies refused before they were events, by section-1 reason.",
                &["reason"],
            )?,
            games: gauge_vec(
                "pipehub_games",
                "Games known to this hub, by phase: waiting and paired, every seated game not started; started and finished, those an actor of this hub judged since it started.",
                &["phase"],
            )?,
            games_created: counter(
                "pipehub_games_created_total",
                "Seated games created through the API.",
            )?,
            games_ended: counter(
                "pipehub_games_ended_total",
                "Games this hub refereed to their end (a win, a draw or a resign).",
            )?,
            actors_resident: gauge(
                "pipehub_actors_resident",
                "Game actors currently resident in memory.",
            )?,
            websocket_connections: gauge(
                "pipehub_websocket_connections",
                "Open WebSocket connections.",
            )?,
            websocket_closed: {
                let closed = counter_vec(
                    "pipehub_websocket_closed_total",
                    "WebSocket connections ended, by cause: client, disconnected, bad_frame, idle, slow (dropped for not reading) or shutdown.",
                    &["reason"],
                )?;
                for why in ::relay::Ended::ALL {
                    closed.with_label_values(&[why.label()]);
                }
                closed
            },
            capture_to_verdict: histogram(
                "pipehub_capture_to_verdict_seconds",
                "Time from a capture's stamp (taken as it is written) to its verdict: to the microsecond for a capture this process wrote and handed on in memory, else in whole milliseconds (read back from the log, or from Redis).",
                latency_buckets(),
            )?,
            verdict_to_relay: histogram(
                "pipehub_verdict_to_relay_seconds",
                "Time from a verdict to its per-seat views reaching the room.",
                latency_buckets(),
            )?,
            rate_limited: counter_vec(
                "pipehub_rate_limited_requests_total",
                "Requests refused by a rate limit, by limit.",
                &["limit"],
            )?,
            pairing_failures: counter_vec(
                "pipehub_pairing_failures_total",
                "Pairing attempts with an unknown, used or expired code.",
                &["reason"],
            )?,
            inbox_append: histogram(
                "pipehub_inbox_append_seconds",
                "Time from an append call to its record being durable.",
                latency_buckets(),
            )?,
            inbox_fsyncs: counter(
                "pipehub_inbox_fsyncs_total",
                "Fsyncs of the inbox log (each makes a batch of appends durable).",
            )?,
            inbox_fsync_batch_max: gauge(
                "pipehub_inbox_fsync_batch_max_records",
                "The most records one fsync of the inbox log made durable.",
            )?,
            inbox_appended: counter(
                "pipehub_inbox_appended_total",
                "Records appended to the inbox.",
            )?,
            inbox_fsync: histogram(
                "pipehub_inbox_fsync_seconds",
                "Time one write and fsync of a batch of the embedded inbox's log took.",
                latency_buckets(),
            )?,
            meta_fsync: histogram(
                "pipehub_meta_fsync_seconds",
                "Time one write and fsync of a batch of the embedded meta store's log took.",
                latency_buckets(),
            )?,
            meta_fsyncs: counter(
                "pipehub_meta_fsyncs_total",
                "Fsyncs of the embedded meta store's log (each makes a batch of changes durable).",
            )?,
            meta_cold_keys: gauge(
                "pipehub_meta_cold_keys",
                "Keys of seats, registrations and pairing codes the embedded meta store keeps in its cache files rather than in memory.",
            )?,
            consumer_backlog: gauge_vec(
                "pipehub_consumer_backlog_records",
                "Durable records of a shard not yet routed to their game actor.",
                &["shard"],
            )?,
            consumer_running: gauge_vec(
                "pipehub_consumer_running",
                "1 while this node's consumer reads the shard (its lease holder in a cluster).",
                &["shard"],
            )?,
            held_choices: gauge(
                "pipehub_held_choices",
                "Rock-paper-scissors choices held until their seat's turn.",
            )?,
            cluster_shards_owned: gauge(
                "pipehub_cluster_shards_owned",
                "Shard leases this node holds (Redis backend).",
            )?,
            cluster_shards: gauge(
                "pipehub_cluster_shards",
                "The store's shard count, set by nodes of the Redis backend.",
            )?,
            store_up: gauge(
                "pipehub_store_up",
                "1 while the store takes writes: the embedded store has had no failed write, or Redis answers this node (as /readyz says) and took its last lease round's writes.",
            )?,
            http_requests: counter_vec(
                "pipehub_http_requests_total",
                "HTTP requests answered, by method, route pattern and status.",
                &["method", "route", "status"],
            )?,
            http_duration: {
                let h = HistogramVec::new(
                    HistogramOpts::new(
                        "pipehub_http_request_duration_seconds",
                        "HTTP request handling time by route pattern.",
                    )
                    .buckets(latency_buckets()),
                    &["route"],
                )?;
                registry.register(Box::new(h.clone()))?;
                h
            },
            registry: registry.clone(),
        };
        register_process_collector(&registry)?;
        Ok(metrics)
    }

    /// Counts one adjudicated event. `reason` is `None` for an accepted event.
    pub fn event(&self, verdict: &str, reason: Option<Reason>, protocol: &str) {
        let reason = reason.map(Reason::code).unwrap_or("");
        self.events
            .with_label_values(&[verdict, reason, protocol])
            .inc();
    }

    /// Records the time from a capture's stamp to its verdict.
    pub fn observe_capture_to_verdict(&self, elapsed: Duration) {
        self.capture_to_verdict.observe(elapsed.as_secs_f64());
    }

    /// Records the time from a verdict to its views reaching the room.
    pub fn observe_verdict_to_relay(&self, elapsed: Duration) {
        self.verdict_to_relay.observe(elapsed.as_secs_f64());
    }

    /// Records one durable append and its latency.
    pub fn observe_append(&self, elapsed: Duration) {
        self.inbox_appended.inc();
        self.inbox_append.observe(elapsed.as_secs_f64());
    }

    /// Brings the fsync series up to the embedded stores' own running totals.
    pub fn store_totals(&self, fsyncs: u64, max_batch: u64, meta_fsyncs: u64, cold_keys: u64) {
        for (counter, total) in [
            (&self.inbox_fsyncs, fsyncs),
            (&self.meta_fsyncs, meta_fsyncs),
        ] {
            let seen = counter.get();
            if total > seen {
                counter.inc_by(total - seen);
            }
        }
        self.inbox_fsync_batch_max
            .set(i64::try_from(max_batch).unwrap_or(i64::MAX));
        self.meta_cold_keys
            .set(i64::try_from(cold_keys).unwrap_or(i64::MAX));
    }

    /// Sets the backlog of one shard's consumer.
    pub fn set_backlog(&self, shard: u32, records: u64) {
        let records = i64::try_from(records).unwrap_or(i64::MAX);
        self.consumer_backlog
            .with_label_values(&[&shard.to_string()])
            .set(records);
    }

    /// Moves one game from one phase gauge to another (`from` is `None` for a new game).
    pub fn game_phase(&self, from: Option<&str>, to: Option<&str>) {
        if let Some(from) = from {
            self.games.with_label_values(&[from]).dec();
        }
        if let Some(to) = to {
            self.games.with_label_values(&[to]).inc();
        }
    }

    /// The registry in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // A failure here means a collector produced an inconsistent family; expose what
        // encoded rather than failing the scrape.
        if let Err(err) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %err, "encoding metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(target_os = "linux")]
fn register_process_collector(registry: &Registry) -> Result<(), prometheus::Error> {
    registry.register(Box::new(ProcessMetrics(
        prometheus::process_collector::ProcessCollector::for_self(),
    )))
}

/// The prometheus crate's process collector, but for `process_cpu_seconds_total`, which it
/// counts in whole seconds: too coarse for the CPU a 10 s benchmark spends (`pipehub
/// loadgen` reads it before and after its clock) or for a `rate()` over a short window.
/// The same series, from the same clock, to the microsecond.
#[cfg(target_os = "linux")]
struct ProcessMetrics(prometheus::process_collector::ProcessCollector);

#[cfg(target_os = "linux")]
impl prometheus::core::Collector for ProcessMetrics {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.0.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let mut families = self.0.collect();
        let Some(seconds) = process_cpu_seconds() else {
            return families;
        };
        let cpu = families
            .iter_mut()
            .filter(|f| f.name() == "process_cpu_seconds_total");
        for metric in cpu.flat_map(|f| f.mut_metric().iter_mut()) {
            let mut counter = prometheus::proto::Counter::default();
            counter.set_value(seconds);
            metric.set_counter(counter);
        }
        families
    }
}

/// The CPU this process has used, user and system, in seconds (`getrusage`).
pub fn process_cpu_seconds() -> Option<f64> {
    // SAFETY: an all-zero rusage is a valid value of that plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a pointer to a live rusage, which getrusage fills in.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

#[cfg(not(target_os = "linux"))]
fn register_process_collector(_registry: &Registry) -> Result<(), prometheus::Error> {
    // The process collector reads /proc; elsewhere the process_* series are absent.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_named_for_the_hub_and_process_memory_is_exported() {
        let m = Metrics::new().expect("a fresh registry takes every metric");
        m.event("accepted", None, "pipehub:tic-tac-toe");
        m.event("rejected", Some(Reason::StaleSeq), "pipehub:tic-tac-toe");
        m.rate_limited.with_label_values(&["events"]).inc();
        m.observe_capture_to_verdict(Duration::from_micros(300));
        m.set_backlog(3, 7);
        m.game_phase(None, Some("waiting"));
        m.game_phase(Some("waiting"), Some("paired"));
        let text = m.render();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.starts_with("pipehub_") || line.starts_with("process_"),
                "unexpected series: {line}"
            );
        }
        assert!(text.contains(
            "pipehub_events_total{protocol=\"pipehub:tic-tac-toe\",reason=\"stale_seq\",verdict=\"rejected\"} 1"
        ));
        assert!(text.contains("pipehub_consumer_backlog_records{shard=\"3\"} 7"));
        assert!(text.contains("pipehub_games{phase=\"paired\"} 1"));
        assert!(text.contains("pipehub_games{phase=\"waiting\"} 0"));
        assert!(text.contains("pipehub_websocket_closed_total{reason=\"slow\"} 0"));
        assert!(text.contains("pipehub_capture_to_verdict_seconds_bucket"));
        #[cfg(target_os = "linux")]
        assert!(text.contains("process_resident_memory_bytes"));
    }

    /// The CPU counter moves by less than a second (the crate's own moves by whole ones).
    #[cfg(target_os = "linux")]
    #[test]
    fn process_cpu_seconds_are_exported_to_below_a_second() {
        let m = Metrics::new().expect("registry");
        let read = |text: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix("process_cpu_seconds_total "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .expect("process_cpu_seconds_total")
        };
        let before = read(&m.render());
        let spent = process_cpu_seconds().expect("getrusage");
        let mut x = 0u64;
        while process_cpu_seconds().expect("getrusage") - spent < 0.05 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = read(&m.render());
        assert!(
            after - before >= 0.05 && after - before < 1.0,
            "{before} -> {after}"
        );
    }

    #[test]
    fn two_hubs_in_one_process_do_not_collide() {
        let a = Metrics::new().expect("first registry");
        let b = Metrics::new().expect("second registry, independent of the first");
        a.games_created.inc();
        assert_eq!(b.games_created.get(), 0);
    }
}
