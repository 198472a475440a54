//! `pipehub loadgen` against a real hub: short runs that play real games over WebSockets,
//! checked through the `--json` report (DESIGN.md section 5) and the hub's own metrics.
//! They are smoke tests of the load generator, not benchmarks: nothing here is timed
//! beyond the bounds every run must stop within.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pipehub_tests::{metric_sum, pipehub_bin, Client, Hub};
use serde_json::Value;

/// Limits that let one client address play many games at once.
const HUB_FLAGS: &[&str] = &[
    "--rate-limit",
    "1000000/1",
    "--max-open-games",
    "1000",
    "--max-captures-per-game",
    "1000",
];

/// A `pipehub loadgen --hub HUB ARGS --json` running in the background, its report and its
/// standard error going to files.
struct Run {
    child: Child,
    dir: tempfile::TempDir,
}

impl Run {
    fn start(hub: &Hub, args: &[&str]) -> Run {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = |name: &str| std::fs::File::create(dir.path().join(name)).expect("a file");
        let child = Command::new(pipehub_bin())
            .arg("loadgen")
            .args(["--hub", &hub.base])
            .args(args)
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(file("report.json"))
            .stderr(file("stderr.txt"))
            .spawn()
            .expect("pipehub loadgen starts");
        Run { child, dir }
    }

    /// Waits for the run to end, at most `within` (then kills it and fails); returns its
    /// exit code, report and standard error (which is also echoed, for a failing test).
    fn finish(mut self, within: Duration) -> (i32, Value, String) {
        let status = pipehub_tests::wait_within(&mut self.child, within);
        let read = |name: &str| {
            std::fs::read_to_string(self.dir.path().join(name)).expect("a readable file")
        };
        let err = read("stderr.txt");
        eprint!("{err}");
        let Some(status) = status else {
            panic!("pipehub loadgen ran longer than {within:?}");
        };
        let text = read("report.json");
        let report = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("the report is not JSON ({e}): {text:?}"));
        (status.code().unwrap_or(-1), report, err)
    }
}

/// Runs `pipehub loadgen --hub HUB ARGS --json` and returns its exit code and report; kills
/// it after `within`.
fn loadgen(hub: &Hub, args: &[&str], within: Duration) -> (i32, Value) {
    let (code, report, _) = Run::start(hub, args).finish(within);
    (code, report)
}

/// One metric's value from the hub's `/metrics`, summed over its labels.
fn metric(hub: &Hub, name: &str) -> f64 {
    metric_sum(&Client::new(), hub, name)
}

#[test]
fn a_short_run_plays_real_games_and_reports_them() {
    let hub = Hub::start(HUB_FLAGS);
    let (code, report) = loadgen(
        &hub,
        &["--games", "4", "--duration", "2"],
        Duration::from_secs(60),
    );
    assert_eq!(code, 0, "report: {report}");
    assert_eq!(report["games"], 4);
    let moves = report["moves"].as_u64().expect("moves");
    assert!(moves > 0, "no move was played: {report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["refused"], 0, "{report}");
    let ms = |k: &str| report["latency_ms"][k].as_f64().expect("a latency");
    assert!(ms("p50") <= ms("p90") && ms("p90") <= ms("p99") && ms("p99") <= ms("max"));
    assert!(ms("p50") > 0.0, "{report}");
    for key in ["hub_rss_bytes", "hub_rss_seated_bytes"] {
        assert!(
            report[key].as_u64().is_some_and(|b| b > 0),
            "{key}: {report}"
        );
    }
    // Linux counts stolen time: the report carries what the 2 s run saw, at most 2 s of
    // each CPU (and a little for the clock's slack), never a negative.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let steal = report["machine_steal_s"].as_f64().expect("machine_steal_s");
    assert!((0.0..=2.5 * cpus).contains(&steal), "{report}");
    // Both sides worked while the clock ran, and neither used more CPU than the machine
    // has in that time (the hub's reads bracket the clock, hence the slack).
    for side in ["hub", "loadgen"] {
        let cpu = report["cpu_s"][side].as_f64().expect("cpu_s");
        assert!(cpu > 0.0 && cpu <= 3.0 * cpus, "cpu_s.{side}: {report}");
    }
    // The hub accepted at least the moves the report counts (each table's starts too),
    // and the load generator closed every socket it opened.
    assert!(metric(&hub, "pipehub_events_total") >= moves as f64);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&hub, "pipehub_websocket_connections") > 0.0 {
        assert!(Instant::now() < deadline, "sockets left open after the run");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// At a low `--rate` over many games a move can wait in the pacer for longer than the
/// stall bound; the bound counts from the move, so such a move is not an error. (On two
/// threads: the other tests run the default single-threaded load generator.)
#[test]
fn a_move_the_pacer_holds_back_is_not_counted_as_stalled() {
    let hub = Hub::start(HUB_FLAGS);
    // Eight tables at one move a second: the last one's first move waits about 7 s.
    let (code, report) = loadgen(
        &hub,
        &[
            "--games",
            "8",
            "--rate",
            "1",
            "--duration",
            "9",
            "--threads",
            "2",
        ],
        Duration::from_secs(90),
    );
    assert_eq!(code, 0, "report: {report}");
    assert_eq!(report["errors"], 0, "{report}");
    let moves = report["moves"].as_u64().expect("moves");
    assert!(
        (6..=10).contains(&moves),
        "about one move a second: {report}"
    );
}

/// The games a run held open at its end are resigned once it has read the hub's memory:
/// under a cap of 25 open games per person, a second run of 15 games seats them all (at
/// the default cap of 20 it seated 6 when the first run's 15 stayed open), and after both
/// the address can open 25 games of its own. (Not 20: a game's end frees its place just
/// after its last state is sent, so a table that starts its next game at once can find
/// the place still taken, and on a busy machine five places of slack were too few.)
#[test]
fn a_run_leaves_no_game_open() {
    let hub = Hub::start(&["--rate-limit", "1000000/1", "--max-open-games", "25"]);
    for run in 1..=2 {
        let (code, report) = loadgen(
            &hub,
            &["--games", "15", "--duration", "1"],
            Duration::from_secs(60),
        );
        assert_eq!(code, 0, "run {run}: {report}");
        assert_eq!(report["errors"], 0, "run {run}: {report}");
    }
    // This address (the same loopback person) can still open the whole cap: the runs
    // hold none of it.
    let client = Client::new();
    let body = serde_json::json!({"protocol": "pipehub:tic-tac-toe"});
    for n in 1..=25 {
        let created = client.post(&hub.url("/v1/inboxes/after/games"), None, &body);
        assert_eq!(created.status, 201, "game {n} of 25: {}", created.body);
    }
}

/// A run whose pairs the hub refuses for its failed-pairing limit (spent here by codes
/// this address got wrong) cancels each game it made for them, and says which limit it
/// met: one no flag raises, not `--rate-limit`.
#[test]
fn a_run_refused_its_pairs_leaves_no_game_waiting_and_names_the_limit() {
    let hub = Hub::start(&["--rate-limit", "1000000/1", "--max-open-games", "25"]);
    let client = Client::new();
    for n in 0..10 {
        let wrong = serde_json::json!({"code": format!("ZZZZZZZ{n}")});
        let r = client.post(&hub.url("/v1/pair"), None, &wrong);
        assert_eq!(r.status, 404, "{}", r.body);
    }
    let (code, report, err) =
        Run::start(&hub, &["--games", "3", "--duration", "2"]).finish(Duration::from_secs(60));
    assert_eq!(code, 1, "{report}");
    assert!(err.contains("failed pairing attempts"), "{err}");
    assert!(!err.contains("--rate-limit"), "{err}");
    // Every game made for a refused pair was cancelled: the whole cap is free.
    let body = serde_json::json!({"protocol": "pipehub:tic-tac-toe"});
    for n in 1..=25 {
        let created = client.post(&hub.url("/v1/inboxes/after/games"), None, &body);
        assert_eq!(created.status, 201, "game {n} of 25: {}", created.body);
    }
}

/// A hub killed in the middle of a run fails the run (exit 1) and says so, although the
/// report is still printed: its figures cover only the part of the run the hub was there.
#[test]
fn a_hub_that_dies_mid_run_fails_the_run() {
    let mut hub = Hub::start(HUB_FLAGS);
    let run = Run::start(&hub, &["--games", "4", "--duration", "3"]);
    // Killed once the run is under way: moves are coming, so the four tables are seated and
    // the clock, which starts then and runs for 3 s, has not run out (the events are the
    // games' starts and their moves; a look at the metrics takes milliseconds).
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&hub, "pipehub_events_total") < 8.0 {
        assert!(Instant::now() < deadline, "the run never got under way");
        std::thread::sleep(Duration::from_millis(20));
    }
    hub.kill9();
    let (code, report, err) = run.finish(Duration::from_secs(60));
    assert_eq!(code, 1, "report: {report}");
    assert!(err.contains("the hub went away"), "{err}");
    assert!(report["hub_rss_bytes"].is_null(), "{report}");
}

/// A flag out of range is a usage error (exit 2) that names the flag, before any
/// connection is tried.
#[test]
fn a_thread_count_out_of_range_is_a_usage_error() {
    for threads in ["0", "65"] {
        let out = Command::new(pipehub_bin())
            .args(["loadgen", "--hub", "http://127.0.0.1:9", "--games", "1"])
            .args(["--duration", "1", "--threads", threads])
            .stdin(Stdio::null())
            .output()
            .expect("pipehub loadgen runs");
        assert_eq!(out.status.code(), Some(2), "--threads {threads}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--threads must be between 1 and 64"),
            "--threads {threads}: {err}"
        );
    }
}

/// A rate too small to pace anything is a usage error that names the floor (it used to
/// pass, and overflow the pacer's next slot).
#[test]
fn a_rate_below_the_floor_is_a_usage_error() {
    for rate in ["1e-300", "1e-10", "0.0005", "0", "nan"] {
        let out = Command::new(pipehub_bin())
            .args(["loadgen", "--hub", "http://127.0.0.1:9", "--games", "1"])
            .args(["--duration", "1", &format!("--rate={rate}")])
            .stdin(Stdio::null())
            .output()
            .expect("pipehub loadgen runs");
        assert_eq!(out.status.code(), Some(2), "--rate {rate}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--rate must be a number of moves a second, at least 0.001"),
            "--rate {rate}: {err}"
        );
    }
}
