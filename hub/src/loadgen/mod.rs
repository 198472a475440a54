//! `pipehub loadgen`: drives a running hub with G concurrent seated games over WebSockets
//! and reports what it sustained (DESIGN.md section 5).
//!
//! A run has three acts. *Setup*: G tables ([`table`]) each seat a game over HTTP, open two
//! sockets and say `hello` with the seats' tokens; nothing is measured yet. *Play*: once
//! every table is seated (or the setup time is up) the clock starts, and for `--duration`
//! seconds each table plays random legal moves, game after game, on the same sockets.
//! *Hold*: at the deadline the tables stop moving but keep their last games open while the
//! hub's `/metrics` is read, so `hub_rss_bytes` is the hub's memory with G open games and
//! 2G sockets (and whatever the games finished during the run left behind); then every
//! socket is closed and every game still open is resigned ([`open`]), since an open game
//! counts against the hub's cap per person for good. The memory is also read once setup is
//! done (`hub_rss_seated_bytes`):
//! G open games and 2G sockets, and no history yet. The CPU each side uses while the clock
//! runs is reported too (`cpu_s`: the hub's from its `/metrics`, this process's own), since
//! hub and load generator usually share one machine. Every act is bounded, so a run ends by
//! itself within setup + duration + some seconds of grace and of resigning, whatever the
//! hub does.
//!
//! It is a benchmark client, not a test: it trusts the hub's answers except to count
//! refusals and errors, and it does not verify chains.

pub mod http;
pub mod moves;
pub mod open;
pub mod stats;
pub mod table;
pub mod wire;

use http::HubClient;
use moves::Kind;
use open::OpenGames;
use serde::Serialize;
use stats::{Pacer, Percentiles, Stats, MIN_RATE};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use table::Control;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Sockets being opened at once (keeps the hub's accept backlog from overflowing).
const MAX_CONNECTING: usize = 128;
/// Time to close sockets at the end before the tables are abandoned.
const GRACE: Duration = Duration::from_secs(5);
/// Time to resign the games left open at the end, besides a millisecond a game (a hub
/// resigns thousands a second).
const RESIGN_TIME: Duration = Duration::from_secs(10);
/// File descriptors the load generator needs besides its 2G sockets.
const SPARE_FDS: u64 = 100;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The hub's base URL, e.g. `http://127.0.0.1:8080`.
    pub hub: String,
    pub games: usize,
    pub duration: Duration,
    /// Offered moves a second across all games; `None` for as fast as the hub answers.
    pub rate: Option<f64>,
    /// A catalog ref of a protocol the load generator can play.
    pub protocol: String,
    /// Signed games with hub-held keys, rather than unsigned ones.
    pub signed: bool,
}

/// The `--json` report: DESIGN.md's keys, and the memory once seated.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub games: usize,
    pub duration_s: f64,
    pub moves: u64,
    pub moves_per_s: f64,
    pub refused: u64,
    pub errors: u64,
    pub latency_ms: Percentiles,
    pub hub_rss_bytes: Option<u64>,
    /// Beyond DESIGN.md's keys: the hub's memory once every table was seated (G open games,
    /// 2G sockets) and before any move, so it holds no finished game's history.
    pub hub_rss_seated_bytes: Option<u64>,
    /// Beyond DESIGN.md's keys: CPU seconds the hypervisor took from this machine while
    /// the clock ran (the `steal` column of `/proc/stat`, summed over its CPUs), or `None`
    /// where that cannot be read. On a virtual machine whose CPU is capped, this is what
    /// sets the latency tail of a saturated run; it says of the hub only when the hub runs
    /// on the same machine.
    pub machine_steal_s: Option<f64>,
    /// Beyond DESIGN.md's keys: the CPU each side used while the clock ran, so that a
    /// move's cost can be split between the hub and the load generator that share a
    /// machine.
    pub cpu_s: CpuSeconds,
}

/// CPU seconds (user and system) used while the clock ran; `None` where not known.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CpuSeconds {
    /// The hub's, from its `/metrics` (`process_cpu_seconds_total`) read once every table
    /// was seated and again at the end, so it includes the moment the two reads take.
    pub hub: Option<f64>,
    /// This process's own.
    pub loadgen: Option<f64>,
}

/// CPU seconds stolen from this machine since it booted, from the `steal` column (in
/// clock ticks) of `/proc/stat`'s `cpu` line.
fn machine_steal_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    steal_ticks(&stat)
        .filter(|_| ticks > 0)
        .map(|t| t as f64 / ticks as f64)
}

/// The `steal` column (the eighth number) of the `cpu` line of a `/proc/stat` text.
fn steal_ticks(stat: &str) -> Option<u64> {
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))?;
    line.split_whitespace().nth(8)?.parse().ok()
}

/// The report, and what the plain output and the exit code add to it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub report: Report,
    /// Tables that had their first game seated when the clock started.
    pub seated: usize,
    /// The hub's resident memory before the run seated anything.
    pub rss_before: Option<u64>,
    pub rate_limited: u64,
    pub pairing_limited: u64,
    pub open_games_cap: u64,
    pub sockets_cap: u64,
    pub connections_cap: u64,
    pub first_error: Option<String>,
    /// Why the hub's figures could not be read at the end of the run (the hub went away,
    /// or stopped answering), if they could not.
    pub hub_gone: Option<String>,
    /// Seconds from the start of the clock to the latest move counted, if any.
    pub last_move_s: Option<f64>,
    /// The open-games cap the hub named when it refused a game, if it did.
    pub open_games_limit: Option<u64>,
    /// This run's games that could not be resigned at its end, so stay open on the hub,
    /// and why the first could not.
    pub left_open: open::Left,
}

/// A run that could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach the hub at {hub}: {detail}")]
    Unreachable { hub: String, detail: String },
}

/// What every table shares.
pub struct Shared {
    pub http: HubClient,
    pub ws_url: String,
    pub inbox: String,
    pub protocol: String,
    pub kind: Kind,
    pub signed: bool,
    pub stats: Stats,
    pub pacer: Pacer,
    pub connects: Semaphore,
    pub seated: AtomicUsize,
    /// The games seated and not yet seen to end, resigned when the run is over.
    pub open: OpenGames,
}

/// Runs the load and returns its figures.
pub async fn run(config: Config) -> Result<Outcome, LoadgenError> {
    let (kind, protocol) = Kind::from_ref(&config.protocol).map_err(LoadgenError::Usage)?;
    if config.games == 0 || config.duration.is_zero() {
        return Err(LoadgenError::Usage(
            "--games and --duration must be positive".into(),
        ));
    }
    if let Some(rate) = config.rate {
        check_rate(rate).map_err(LoadgenError::Usage)?;
    }
    check_fd_limit(config.games)?;
    let http = HubClient::new(&config.hub).map_err(|e| LoadgenError::Usage(e.to_string()))?;
    let rss_before = http
        .resident_memory()
        .await
        .map_err(|e| LoadgenError::Unreachable {
            hub: config.hub.clone(),
            detail: e.to_string(),
        })?;
    let shared = Arc::new(Shared {
        ws_url: http.ws_url(),
        http,
        inbox: format!("loadgen-{:08x}", rand::random::<u32>()),
        protocol,
        kind,
        signed: config.signed,
        stats: Stats::new(),
        pacer: Pacer::new(config.rate),
        connects: Semaphore::new(MAX_CONNECTING),
        seated: AtomicUsize::new(0),
        open: OpenGames::default(),
    });

    let (control, watcher) = watch::channel(Control::Setup);
    let mut tables = JoinSet::new();
    for _ in 0..config.games {
        tables.spawn(table::run(shared.clone(), watcher.clone()));
    }

    // Setup: wait for every table's first game, within a limit that grows with G.
    let setup_limit =
        Instant::now() + Duration::from_secs(30) + Duration::from_millis(20) * config.games as u32;
    while shared.seated.load(Ordering::Relaxed) < config.games && Instant::now() < setup_limit {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Every table failed three times and none got a game: the hub cannot be driven
        // (no relay, a wrong URL); say why now rather than after the setup limit.
        let failures = Stats::get(&shared.stats.errors) as usize;
        if shared.seated.load(Ordering::Relaxed) == 0 && failures >= 3 * config.games {
            let _ = control.send(Control::Release);
            tables.abort_all();
            // No table seated a game, but one may have lost its sockets after seating.
            let _ = (shared.open)
                .resign_all(&shared.http, &shared.inbox, GRACE)
                .await;
            return Err(LoadgenError::Unreachable {
                hub: config.hub.clone(),
                detail: shared.stats.first_error().unwrap_or_default(),
            });
        }
    }
    let seated = shared.seated.load(Ordering::Relaxed);
    // The memory of G open games and their 2G sockets alone, before play adds history.
    let seated_process = shared.http.process().await.ok();
    let rss_seated = seated_process.map(|p| p.rss_bytes);

    // Play.
    let steal_before = machine_steal_s();
    let own_cpu_before = crate::metrics::process_cpu_seconds();
    let start = Instant::now();
    let deadline = start + config.duration;
    let _ = control.send(Control::Play { deadline });
    tokio::time::sleep_until(deadline).await;
    let elapsed = start.elapsed().as_secs_f64();
    let own_cpu = own_cpu_before
        .zip(crate::metrics::process_cpu_seconds())
        .map(|(before, after)| (after - before).max(0.0));
    let steal = steal_before
        .zip(machine_steal_s())
        // Clock ticks are hundredths of a second: say no more than that.
        .map(|(before, after)| ((after - before).max(0.0) * 100.0).round() / 100.0);

    // Hold: the games are still open; read the hub's memory, then release them.
    // A hub that does not answer here went away during the run (or stopped answering):
    // its figures then cover only part of the run, which `Outcome::problems` says.
    let (end_process, hub_gone) = match shared.http.process().await {
        Ok(p) => (Some(p), None),
        Err(e) => {
            shared.stats.error(|| format!("reading /metrics: {e}"));
            (None, Some(e.to_string()))
        }
    };
    let last_move_s = shared
        .stats
        .last_move_at()
        .map(|at| at.saturating_duration_since(start).as_secs_f64());
    let hub_rss_bytes = end_process.map(|p| p.rss_bytes);
    let hub_cpu = seated_process
        .and_then(|p| p.cpu_s)
        .zip(end_process.and_then(|p| p.cpu_s))
        .map(|(before, after)| (after - before).max(0.0));
    let _ = control.send(Control::Release);
    let _ =
        tokio::time::timeout(GRACE, async { while tables.join_next().await.is_some() {} }).await;
    tables.abort_all();
    // End: the games are resigned once their sockets are closed, so the hub does not send
    // each resign's state to sockets nobody reads any more.
    let resign_time = RESIGN_TIME + Duration::from_millis(config.games as u64);
    let left_open = (shared.open)
        .resign_all(&shared.http, &shared.inbox, resign_time)
        .await;

    let stats = &shared.stats;
    let moves = Stats::get(&stats.moves);
    Ok(Outcome {
        report: Report {
            games: config.games,
            duration_s: elapsed,
            moves,
            moves_per_s: moves as f64 / elapsed.max(f64::MIN_POSITIVE),
            refused: Stats::get(&stats.refused),
            errors: Stats::get(&stats.errors),
            latency_ms: stats.percentiles(),
            hub_rss_bytes,
            hub_rss_seated_bytes: rss_seated,
            machine_steal_s: steal,
            cpu_s: CpuSeconds {
                hub: hub_cpu,
                loadgen: own_cpu,
            },
        },
        seated,
        rss_before: Some(rss_before),
        rate_limited: Stats::get(&stats.rate_limited),
        pairing_limited: Stats::get(&stats.pairing_limited),
        open_games_cap: Stats::get(&stats.open_games_cap),
        sockets_cap: Stats::get(&stats.sockets_cap),
        connections_cap: Stats::get(&stats.connections_cap),
        first_error: stats.first_error(),
        hub_gone,
        last_move_s,
        open_games_limit: Some(Stats::get(&stats.open_games_limit)).filter(|&cap| cap > 0),
        left_open,
    })
}

/// Refuses a `--rate` that is not a number of moves a second of at least [`MIN_RATE`].
pub fn check_rate(rate: f64) -> Result<(), String> {
    if rate.is_finite() && rate >= MIN_RATE {
        Ok(())
    } else {
        Err(format!(
            "--rate must be a number of moves a second, at least {MIN_RATE} (one move every {:.0} s)",
            1.0 / MIN_RATE
        ))
    }
}

/// Raises this process's soft open-files limit to its hard one, then refuses to start
/// when it still cannot open 2G sockets, rather than failing halfway.
fn check_fd_limit(games: usize) -> Result<(), LoadgenError> {
    let Some(limit) = crate::files::raise_limit().map(|l| l.now) else {
        return Ok(());
    };
    let needed = 2 * games as u64 + SPARE_FDS;
    if limit < needed {
        return Err(LoadgenError::Usage(format!(
            "{games} games need {needed} open files but this process may open {limit}, its hard limit: raise that (`ulimit -Hn {needed}`, as root) for the hub too"
        )));
    }
    Ok(())
}

impl Outcome {
    /// Why the figures do not describe the hub, each said in a sentence for stderr; a run
    /// with any of these does not pass (exit 1) even when its figures are printed.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(why) = &self.hub_gone {
            let last = match self.last_move_s {
                Some(t) => format!(
                    "the last move was accepted {t:.1} s into the {:.1} s run, so moves_per_s is not the hub's rate",
                    self.report.duration_s
                ),
                None => "no move was accepted before".into(),
            };
            problems.push(format!(
                "the hub went away or stopped answering: its /metrics could not be read at the end of the run ({why}); {last}"
            ));
        }
        if self.report.moves == 0 {
            problems.push(
                "no move was accepted while the clock ran, so there is no rate or latency to report"
                    .into(),
            );
        }
        problems
    }

    /// A run of two games, both seated, that the hub's limits did not touch.
    #[cfg(test)]
    pub(crate) fn example(moves: u64) -> Outcome {
        Outcome {
            report: Report {
                games: 2,
                duration_s: 1.0,
                moves,
                moves_per_s: moves as f64,
                refused: 0,
                errors: 0,
                latency_ms: Percentiles::default(),
                hub_rss_bytes: Some(1 << 20),
                hub_rss_seated_bytes: Some(1 << 20),
                machine_steal_s: None,
                cpu_s: CpuSeconds::default(),
            },
            seated: 2,
            rss_before: None,
            rate_limited: 0,
            pairing_limited: 0,
            open_games_cap: 0,
            sockets_cap: 0,
            connections_cap: 0,
            first_error: None,
            hub_gone: None,
            last_move_s: (moves > 0).then_some(0.9),
            open_games_limit: None,
            left_open: open::Left::default(),
        }
    }

    /// What the open-games cap did, and its cure. The cap counts every game open at this
    /// client's address, so games left open there before the run (by an earlier run, or
    /// another client on the same host) take places this run cannot have: when the hub
    /// named its cap, the places the run could not seat are those.
    fn open_games_advice(&self) -> String {
        let games = self.report.games as u64;
        let refused = format!(
            "the hub refused to open {} games (each counted once, however often asked for again) for its cap on open games per person, which counts every game open at this address, not only this run's",
            self.open_games_cap
        );
        let Some(cap) = self.open_games_limit else {
            return format!(
                "{refused}: end the games this address already holds, or raise `pipehub serve --max-open-games` to at least {games} and those games"
            );
        };
        let held = if (self.seated as u64) < games {
            cap.saturating_sub(self.seated as u64)
        } else {
            0
        };
        if held == 0 {
            return format!(
                "{refused}: its cap is {cap}; raise `pipehub serve --max-open-games` to at least {}",
                games.max(cap + 1)
            );
        }
        format!(
            "{refused}: its cap is {cap}, and about {held} games were open at this address before the run (left by an earlier run, or by another client on this host): end them, or raise `pipehub serve --max-open-games` to at least {}",
            games + held
        )
    }

    /// What to know of a run that does not change what its figures are worth.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.left_open.games > 0 {
            warnings.push(format!(
                "{} of this run's games could not be resigned at its end ({}) and stay open on the hub, where they count against this address's open games (`pipehub serve --max-open-games`) until they are resigned",
                self.left_open.games,
                self.left_open.first_failure.as_deref().unwrap_or("no answer")
            ));
        }
        warnings
    }

    /// Plain advice when the hub's own limits refused the run, naming the flag to raise.
    pub fn limit_advice(&self) -> Vec<String> {
        let mut advice = Vec::new();
        if self.rate_limited > 0 {
            advice.push(format!(
                "the hub rate-limited {} requests: raise `pipehub serve --rate-limit` (e.g. --rate-limit 1000000/1)",
                self.rate_limited
            ));
        }
        if self.pairing_limited > 0 {
            advice.push(format!(
                "the hub refused {} pairings for its limit on failed pairing attempts per client address (10 a minute, no flag raises it): codes this address mistyped or reused in the last minute spent it; wait a minute and run again (the games made for those pairings were cancelled)",
                self.pairing_limited
            ));
        }
        if self.open_games_cap > 0 {
            advice.push(self.open_games_advice());
        }
        if self.sockets_cap > 0 {
            advice.push(format!(
                "the hub refused {} WebSockets for its per-address cap: raise `pipehub serve --max-sockets-per-address` to at least {} (0: no cap), or run the load generator on the hub's host, whose loopback clients are not counted",
                self.sockets_cap,
                2 * self.report.games
            ));
        }
        if self.connections_cap > 0 {
            advice.push(format!(
                "the hub closed {} connections as they opened, unanswered, as its cap on connections per address does: raise `pipehub serve --max-connections-per-address` to at least {} (0: no cap), or run the load generator on the hub's host, whose loopback connections are not counted",
                self.connections_cap,
                2 * self.report.games + http::MAX_IN_FLIGHT
            ));
        }
        if self.seated < self.report.games {
            advice.push(format!(
                "only {} of {} games were seated when the clock started",
                self.seated, self.report.games
            ));
        }
        advice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line() {
        let stat = "cpu  458448 254 64648 306095 6212 0 7671 8562 0 0\n\
                    cpu0 213792 127 30725 173093 1283 0 2894 4038 0 0\n";
        assert_eq!(steal_ticks(stat), Some(8562));
        // A kernel too old to count steal, or a text without a cpu line.
        assert_eq!(steal_ticks("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(steal_ticks("intr 1 2 3\n"), None);
    }

    /// A rate too small to pace anything is a usage error, found before the hub is asked
    /// anything (the hub here is a port nobody listens on).
    #[tokio::test]
    async fn a_rate_below_the_floor_is_refused_before_the_run() {
        for rate in [1e-300, 1e-10, MIN_RATE / 2.0, -5.0, f64::NAN, f64::INFINITY] {
            let config = Config {
                hub: "http://127.0.0.1:9".into(),
                games: 2,
                duration: Duration::from_secs(2),
                rate: Some(rate),
                protocol: "pipehub:tic-tac-toe".into(),
                signed: false,
            };
            match run(config).await {
                Err(LoadgenError::Usage(e)) => assert!(e.contains("--rate"), "{rate}: {e}"),
                other => panic!("rate {rate}: {other:?}"),
            }
        }
        assert!(check_rate(MIN_RATE).is_ok() && check_rate(5000.0).is_ok());
    }

    /// A run that measured nothing says so, which is why it does not pass.
    #[test]
    fn a_run_without_a_move_names_that_as_its_problem() {
        assert!(Outcome::example(10).problems().is_empty());
        let problems = Outcome::example(0).problems().join("\n");
        assert!(problems.contains("no move was accepted"), "{problems}");
    }

    /// A hub that could not be read at the end fails the run, which says how long the hub
    /// played.
    #[test]
    fn a_hub_gone_by_the_end_fails_the_run() {
        let mut o = Outcome::example(3010);
        o.report.duration_s = 8.0;
        o.hub_gone = Some("connection refused".into());
        o.last_move_s = Some(4.04);
        let problems = o.problems().join("\n");
        assert!(problems.contains("the hub went away"), "{problems}");
        assert!(problems.contains("connection refused"), "{problems}");
        assert!(problems.contains("4.0 s into the 8.0 s run"), "{problems}");
    }

    /// The open-games advice counts games, names the cap and the games this address held
    /// before the run, and asks for a cap that would have seated every table.
    #[test]
    fn the_open_games_advice_names_the_games_already_held() {
        let mut o = Outcome::example(10);
        o.report.games = 15;
        o.seated = 8;
        o.open_games_cap = 7;
        o.open_games_limit = Some(20);
        let advice = o.limit_advice().join("\n");
        for said in [
            "refused to open 7 games (each counted once",
            "its cap is 20, and about 12 games were open at this address before the run",
            "--max-open-games` to at least 27",
            "only 8 of 15 games were seated",
        ] {
            assert!(advice.contains(said), "{said}: {advice}");
        }
        // A cap below the games asked for, and nothing else open: the cap is the cure.
        o.report.games = 300;
        o.seated = 20;
        let advice = o.limit_advice().join("\n");
        assert!(advice.contains("at least 300"), "{advice}");
        assert!(!advice.contains("were open at this address"), "{advice}");
        // A cap the hub did not name: the games already held are still named as a cause.
        o.open_games_limit = None;
        let advice = o.limit_advice().join("\n");
        assert!(
            advice.contains("end the games this address already holds"),
            "{advice}"
        );
    }

    #[test]
    fn games_left_open_are_told() {
        let mut o = Outcome::example(10);
        assert!(o.warnings().is_empty());
        o.left_open = open::Left {
            games: 3,
            first_failure: Some("connection refused".into()),
        };
        let warnings = o.warnings().join("\n");
        assert!(
            warnings.contains(
                "3 of this run's games could not be resigned at its end (connection refused)"
            ),
            "{warnings}"
        );
    }

    #[test]
    fn each_limit_of_the_hub_that_refused_the_run_is_named_with_its_flag() {
        let refused = |rate_limited, open_games_cap, sockets_cap, connections_cap| {
            let mut o = Outcome::example(10);
            o.report.games = 300;
            o.seated = 300;
            o.rate_limited = rate_limited;
            o.open_games_cap = open_games_cap;
            o.sockets_cap = sockets_cap;
            o.connections_cap = connections_cap;
            o
        };
        assert!(refused(0, 0, 0, 0).limit_advice().is_empty());
        let advice = refused(1, 2, 3, 4).limit_advice().join("\n");
        let connections = format!(
            "--max-connections-per-address` to at least {}",
            600 + http::MAX_IN_FLIGHT
        );
        for flag in [
            "--rate-limit",
            "--max-open-games` to at least 300",
            "--max-sockets-per-address` to at least 600",
            &connections,
        ] {
            assert!(advice.contains(flag), "{flag}: {advice}");
        }
        // A refused pair is the failed-pairing limit, which no flag raises: the advice
        // says so, and not to raise --rate-limit.
        let mut o = refused(0, 0, 0, 0);
        o.pairing_limited = 3;
        let advice = o.limit_advice().join("\n");
        assert!(advice.contains("failed pairing attempts"), "{advice}");
        assert!(!advice.contains("--rate-limit"), "{advice}");
    }
}
