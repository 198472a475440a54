//! Redis going away under a running cluster: while it is unreachable `/readyz` fails and
//! moves are refused with 503 `unavailable` (nothing acknowledged that was not stored);
//! when it comes back (its AOF replayed) the nodes reconnect by themselves and the game
//! finishes with every acknowledged move in place. A Redis that answers but takes no
//! write reads as down in `pipehub_store_up`.

mod redis_support;

use std::time::{Duration, Instant};

use pipehub_tests::{metric_sum, Client, Hub};
use redis_support::{await_owners, node, Game, RedisServer};
use serde_json::json;

fn await_ready(client: &Client, hub: &Hub, status: u16) -> Duration {
    let started = Instant::now();
    while client.get(&hub.url("/readyz")).status != status {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "/readyz never answered {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

#[test]
fn redis_stopped_and_restarted_mid_game() {
    let mut redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let g = Game::new(&client, &nodes[0], &nodes[1], "faults");
    let mut acked = vec![
        g.play_until_accepted(&client, &nodes[0], 0),
        g.play_until_accepted(&client, &nodes[1], 1),
    ];

    redis.kill9();
    for n in &nodes {
        await_ready(&client, n, 503);
        // The scrape says what /readyz says.
        assert_eq!(metric_sum(&client, n, "pipehub_store_up"), 0.0);
    }
    let r = g.play(&client, &nodes[0], 2);
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.error(), "unavailable");
    // X's token was issued on the first node and never used on the second, which must
    // look it up in Redis: a lookup that fails is 503, not 401 (a client told its token is
    // unknown may throw it away).
    let r = g.play(&client, &nodes[1], 2);
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.error(), "unavailable");

    redis.restart();
    for n in &nodes {
        let took = await_ready(&client, n, 200);
        println!("ready again {took:?} after Redis restarted");
        // Up once a lease round has written to it again (one every 0.75 s).
        let deadline = Instant::now() + Duration::from_secs(5);
        while metric_sum(&client, n, "pipehub_store_up") != 1.0 {
            assert!(Instant::now() < deadline, "pipehub_store_up stayed 0");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    await_owners(&client, &all, Duration::from_secs(20));
    for i in 2..5 {
        acked.push(g.play_until_accepted(&client, &nodes[i % 2], i));
    }
    for capture in &acked {
        assert_eq!(g.await_verdict(&client, &nodes[0], capture), "accepted");
    }
    let st = g.state(&client, &nodes[1]);
    assert_eq!(st["seq"], json!(5));
    assert_eq!(st["result"]["status"], json!("win"));
}

#[test]
fn a_node_with_another_hub_secret_refuses_to_join() {
    // It joined without a word, and the starts it wrote for the games of its shards
    // failed `bad_signature`: those games never started.
    let redis = RedisServer::start();
    let first = node(&redis);
    let client = Client::new();
    await_owners(&client, &[&first], Duration::from_secs(15));
    let data = tempfile::tempdir().expect("a data directory");
    let mut other = std::process::Command::new(pipehub_tests::pipehub_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
        .args(["--secret", "another-secret-than-the-first-node-has"])
        .arg("--data")
        .arg(data.path())
        .env("PIPEHUB_LOG", "error")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("a node runs");
    let status = pipehub_tests::wait_within(&mut other, Duration::from_secs(20));
    let mut stderr = String::new();
    if let Some(mut pipe) = other.stderr.take() {
        std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("stderr");
    }
    if status.is_none() {
        let _ = other.kill();
        let _ = other.wait();
    }
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{stderr}");
    assert!(stderr.contains("another hub secret"), "{stderr}");
    // The first node goes on.
    assert_eq!(client.get(&first.url("/readyz")).status, 200);
}

#[test]
fn nodes_stop_when_redis_comes_back_without_acknowledged_events() {
    // Redis restored from an older AOF (or a replica without the last writes taking over)
    // has lost acknowledged events and hands their positions out again. The nodes went
    // on serving the states they remembered, answered moves `pending` for good or 201 with
    // states the store did not hold, and exported chains that failed verification.
    let mut redis = RedisServer::start();
    let mut nodes = [node(&redis), node(&redis)];
    let client = Client::new();
    await_owners(
        &client,
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(15),
    );
    let g = Game::new(&client, &nodes[0], &nodes[1], "rollback");
    g.play_until_accepted(&client, &nodes[0], 0);
    let older = redis.persisted();
    g.play_until_accepted(&client, &nodes[1], 1);
    g.play_until_accepted(&client, &nodes[0], 2);
    assert_eq!(g.state(&client, &nodes[1])["seq"], json!(3));

    redis.restart_from(older.path());
    for n in &mut nodes {
        let code = n.exited_within(Duration::from_secs(20));
        let log = n.log();
        assert_eq!(code, Some(2), "{log}");
        assert!(log.contains("went back in time"), "{log}");
    }
    // Started again, they hold what the store holds, and the game goes on from there.
    for n in &mut nodes {
        n.restart();
    }
    await_owners(
        &client,
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(20),
    );
    for n in &nodes {
        assert_eq!(g.state(&client, n)["seq"], json!(1), "{}", n.log());
    }
    g.play_until_accepted(&client, &nodes[1], 1);
    let export = client.get(&nodes[0].url(&g.path("/export")));
    assert_eq!(export.status, 200, "{}", export.body);
    let (code, report) = pipehub_tests::verify(&[], &export.body);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn a_redis_that_answers_but_takes_no_write_reads_as_down() {
    // Out of memory, Redis refuses the lease round's writes while it still answers, so
    // /readyz, which asks only whether it answers, passes; pipehub_store_up says the store
    // takes no write, and comes back once it does.
    let redis = RedisServer::start();
    let hub = node(&redis);
    let client = Client::new();
    await_owners(&client, &[&hub], Duration::from_secs(15));
    let store_up_reaches = |up: f64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while metric_sum(&client, &hub, "pipehub_store_up") != up {
            assert!(
                Instant::now() < deadline,
                "pipehub_store_up never read {up}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    store_up_reaches(1.0);
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    store_up_reaches(0.0);
    assert_eq!(client.get(&hub.url("/readyz")).status, 200);
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    store_up_reaches(1.0);
}
