//! Helpers for the Redis tests: a private `redis-server` on a free loopback port with its
//! own temporary directory (AOF on, `appendfsync always`), hub nodes started on it, and
//! small readers of the hub's metrics and of Redis itself (through `redis-cli`).
//!
//! The machine's own Redis (port 6379) is never touched. A missing `redis-server` fails
//! the test with a message naming `scripts/test`, which installs it; it never passes
//! silently.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pipehub_tests::{Client, Hub, Seated};
use serde_json::{json, Value};

/// The secret every node of a test cluster shares.
pub const SECRET: &str = "redis-tests-shared-secret-0123456789";
/// The shard count of test clusters.
pub const SHARDS: u32 = 8;

/// A `redis-server` of this test, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir: tempfile::tempdir().expect("a temporary directory"),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let dir: PathBuf = self.dir.path().to_path_buf();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => panic!(
                "cannot run redis-server ({e}): the Redis tests need it on PATH; \
                 scripts/test installs it (Debian package redis-server)"
            ),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `kill -9` of the server.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and directory (its AOF is replayed).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// A copy of what the server has persisted so far (its AOF directory), to start it
    /// from again later ([`RedisServer::restart_from`]).
    pub fn persisted(&self) -> tempfile::TempDir {
        let copy = tempfile::tempdir().expect("a temporary directory");
        copy_files(&self.dir.path().join("appendonlydir"), copy.path());
        copy
    }

    /// Kills the server and starts it again from `older` (see [`RedisServer::persisted`]),
    /// as a restore from an older backup, or a failover to a replica without the last
    /// writes, leaves it: the acknowledged events since are gone.
    pub fn restart_from(&mut self, older: &std::path::Path) {
        self.kill9();
        let aof = self.dir.path().join("appendonlydir");
        std::fs::remove_dir_all(&aof).expect("the AOF directory removed");
        std::fs::create_dir(&aof).expect("the AOF directory made");
        copy_files(older, &aof);
        self.spawn();
    }

    /// One command through `redis-cli --raw`; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "--raw"])
            .args(args)
            .output();
        match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => panic!("cannot run redis-cli ({e}); scripts/test installs it"),
        }
    }
}

/// Copies the files of directory `from` (not its subdirectories) into `to`.
fn copy_files(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("a directory") {
        let path = entry.expect("an entry").path();
        if path.is_file() {
            let name = path.file_name().expect("a file name");
            std::fs::copy(&path, to.join(name)).expect("copied");
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A hub node on `redis`.
pub fn node(redis: &RedisServer) -> Hub {
    node_with(redis, &[])
}

/// A hub node on `redis` with extra `serve` flags.
pub fn node_with(redis: &RedisServer, extra: &[&str]) -> Hub {
    let url = redis.url();
    let shards = SHARDS.to_string();
    let mut args = vec!["--redis", &url, "--secret", SECRET, "--shards", &shards];
    if !extra.contains(&"--rate-limit") {
        args.extend_from_slice(&["--rate-limit", "10000/1"]);
    }
    args.extend_from_slice(extra);
    Hub::start(&args)
}

/// A gauge's value in a node's `/metrics`, if the node answers.
pub fn gauge(client: &Client, hub: &Hub, name: &str) -> Option<i64> {
    let r = client.get(&hub.url("/metrics"));
    if r.status != 200 {
        return None;
    }
    r.body.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse::<f64>().ok().map(|v| v as i64))?
    })
}

/// The sum of a counter over all its label sets in a node's `/metrics` (0 when absent).
pub fn counter_sum(client: &Client, hub: &Hub, name: &str) -> i64 {
    pipehub_tests::metric_sum(client, hub, name) as i64
}

/// Per node, whether its consumer of `shard` runs (`pipehub_consumer_running{shard}`).
pub fn consuming(client: &Client, nodes: &[&Hub], shard: u32) -> Vec<i64> {
    let name = format!("pipehub_consumer_running{{shard=\"{shard}\"}}");
    nodes
        .iter()
        .map(|h| gauge(client, h, &name).unwrap_or(0))
        .collect()
}

/// Waits until every shard is consumed by exactly one of the nodes, and by the node that
/// holds its lease (read from Redis; `ids` are the nodes' ids in the same order).
pub fn await_one_consumer_per_shard(
    client: &Client,
    redis: &RedisServer,
    nodes: &[&Hub],
    ids: &[String],
) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut wrong = Vec::new();
        for s in 0..SHARDS {
            let running = consuming(client, nodes, s);
            let lease = redis.cli(&["GET", &format!("ph:lease:{s}")]);
            let owner = lease.trim().split_once(':').map(|(n, _)| n.to_string());
            let expected: Vec<i64> = ids
                .iter()
                .map(|id| i64::from(owner.as_deref() == Some(id.as_str())))
                .collect();
            if running != expected {
                wrong.push((s, running, expected));
            }
        }
        if wrong.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "shards not consumed by their lease holder alone (shard, running, lease): {wrong:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The node id in a node's log (`cluster node: taking shard leases node=…`).
pub fn node_id(hub: &Hub) -> String {
    let log = hub.log();
    let at = log.find("node=").expect("the node logs its id");
    log[at + 5..]
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect()
}

/// The id of the node holding `shard`'s lease, from Redis.
pub fn lease_holder(redis: &RedisServer, shard: &str) -> String {
    let lease = redis.cli(&["GET", &format!("ph:lease:{shard}")]);
    let (owner, _) = lease.trim().split_once(':').expect("a lease node:fence");
    owner.to_string()
}

/// Shards owned by each node, as their metrics say.
pub fn owned(client: &Client, nodes: &[&Hub]) -> Vec<i64> {
    nodes
        .iter()
        .map(|h| gauge(client, h, "pipehub_cluster_shards_owned").unwrap_or(0))
        .collect()
}

/// Waits until the nodes together own every shard, each at most its fair share; returns
/// how long that took.
pub fn await_owners(client: &Client, nodes: &[&Hub], within: Duration) -> Duration {
    let started = Instant::now();
    let fair = i64::from(SHARDS.div_ceil(nodes.len() as u32));
    loop {
        let o = owned(client, nodes);
        if o.iter().sum::<i64>() == i64::from(SHARDS) && o.iter().all(|n| *n <= fair) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "shards not all owned after {within:?}: {o:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every shard's lease holder fence, in verdict-stream order: (fence number) per entry.
pub fn verdict_fences(redis: &RedisServer, shard: u32) -> Vec<u64> {
    let out = redis.cli(&["XRANGE", &format!("ph:vs:{shard}"), "-", "+"]);
    let lines: Vec<&str> = out.lines().collect();
    let mut fences = Vec::new();
    for pair in lines.windows(2) {
        if pair[0] == "l" {
            if let Some((_, f)) = pair[1].rsplit_once(':') {
                fences.push(f.parse().expect("a fence number"));
            }
        }
    }
    fences
}

/// A seated game with hub-held seats, created on `host` and paired on `guest`.
pub struct Game {
    pub inbox: String,
    pub game: String,
    pub x: String,
    pub o: String,
}

impl Game {
    pub fn new(client: &Client, host: &Hub, guest: &Hub, inbox: &str) -> Game {
        let body = json!({"protocol": "pipehub:tic-tac-toe"});
        let s = Seated::create_and_pair(client, host, guest, inbox, &body);
        Game {
            inbox: s.inbox,
            game: s.game,
            x: s.x,
            o: s.o,
        }
    }

    pub fn path(&self, rest: &str) -> String {
        format!("/v1/inboxes/{}/games/{}{rest}", self.inbox, self.game)
    }

    /// Move `i` of the script X(0,0) O(1,0) X(0,1) O(1,1) X(0,2): X wins on the top row.
    pub fn script(i: usize) -> (&'static str, Value) {
        let (seat, row, col) = [
            ("X", 0, 0),
            ("O", 1, 0),
            ("X", 0, 1),
            ("O", 1, 1),
            ("X", 0, 2),
        ][i];
        (seat, json!({"move": {"row": row, "col": col}}))
    }

    /// Posts move `i` of the script through `hub`; the answer.
    pub fn play(&self, client: &Client, hub: &Hub, i: usize) -> pipehub_tests::Response {
        let (seat, body) = Game::script(i);
        let token = if seat == "X" { &self.x } else { &self.o };
        client.post(&hub.url(&self.path("/moves")), Some(token), &body)
    }

    /// Plays move `i` through `hub`, retrying while a shard changes owner (503, or 202
    /// `pending`, whose capture then gets its verdict); returns the accepted capture.
    pub fn play_until_accepted(&self, client: &Client, hub: &Hub, i: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.play(client, hub, i);
            let body = r.json();
            match (r.status, body["verdict"].as_str()) {
                (201, Some("accepted")) => {
                    return body["capture"].as_str().unwrap_or_default().to_string()
                }
                (202, Some("pending")) => {
                    let capture = body["capture"].as_str().unwrap_or_default().to_string();
                    if self.await_verdict(client, hub, &capture) == "accepted" {
                        return capture;
                    }
                }
                (422, _) if body["state"]["seq"].as_u64() == Some(i as u64 + 1) => {
                    // An earlier try that answered late was accepted meanwhile.
                    let list = client.get(&hub.url(&format!(
                        "/v1/inboxes/{}/events?game={}&limit=100",
                        self.inbox, self.game
                    )));
                    let items = list.json()["items"].as_array().cloned().unwrap_or_default();
                    if let Some(item) = items.iter().rev().find(|it| it["verdict"] == "accepted") {
                        return item["capture"].as_str().unwrap_or_default().to_string();
                    }
                }
                (503, _) => {}
                _ => panic!("move {i}: {} {}", r.status, r.body),
            }
            assert!(Instant::now() < deadline, "move {i} never accepted");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Polls a capture until it has a verdict other than pending.
    pub fn await_verdict(&self, client: &Client, hub: &Hub, capture: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = client.get(&hub.url(&format!("/v1/inboxes/{}/events/{capture}", self.inbox)));
            if r.status == 200 {
                let v = r.json()["verdict"].as_str().unwrap_or_default().to_string();
                if v != "pending" {
                    return v;
                }
            }
            assert!(
                Instant::now() < deadline,
                "capture {capture} never got a verdict"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The spectator state through `hub`.
    pub fn state(&self, client: &Client, hub: &Hub) -> Value {
        let r = client.get(&hub.url(&self.path("")));
        assert_eq!(r.status, 200, "state: {}", r.body);
        r.json()
    }
}
