//! Several hub nodes on one private Redis act as one hub: games created, paired and played
//! through all of them, WebSocket subscribers on one node fed by moves posted to another,
//! `kill -9` of a node with its shards moving to the survivors and nothing acknowledged
//! lost, and a paused owner fenced out of writing verdicts after its lease moved on.

mod redis_support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use pipehub_tests::{Client, Hub};
use redis_support::{
    await_owners, node, node_with, owned, verdict_fences, Game, RedisServer, SHARDS,
};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

#[test]
fn three_nodes_play_as_one_hub() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    assert!(
        owned(&client, &all).iter().all(|n| *n >= 2),
        "eight shards split over three nodes: {:?}",
        owned(&client, &all)
    );
    let games: Vec<Game> = (0..6)
        .map(|k| Game::new(&client, &nodes[k % 3], &nodes[(k + 1) % 3], "lobby"))
        .collect();
    for i in 0..5 {
        for (k, g) in games.iter().enumerate() {
            let r = g.play(&client, &nodes[(k + i) % 3], i);
            assert_eq!(r.status, 201, "game {k} move {i}: {}", r.body);
            assert_eq!(r.json()["state"]["seq"], json!(i as u64 + 1));
        }
    }
    for g in &games {
        for n in &nodes {
            let st = g.state(&client, n);
            assert_eq!(st["seq"], json!(5));
            assert_eq!(
                st["result"],
                json!({"status": "win", "winner": "X", "by": "line"})
            );
        }
        // A move after the end is refused alike through every node (two of them hand it
        // to the shard's owner, which drafts it).
        let answers: Vec<(u16, String)> = nodes
            .iter()
            .map(|n| {
                let r = client.post(
                    &n.url(&g.path("/moves")),
                    Some(&g.o),
                    &json!({"move": {"row": 2, "col": 2}}),
                );
                (r.status, r.error())
            })
            .collect();
        assert!(
            answers.iter().all(|a| a == &answers[0] && a.0 >= 400),
            "{answers:?}"
        );
        // Every capture carries its owner's recorded verdict, whichever node reads it.
        let list = client.get(&nodes[2].url(&format!("/v1/inboxes/lobby/events?game={}", g.game)));
        let items = list.json()["items"].as_array().cloned().unwrap_or_default();
        let accepted = items
            .iter()
            .filter(|it| it["verdict"] == "accepted")
            .count();
        assert_eq!(accepted, 6, "start and five moves: {}", list.body);
        assert!(
            items[6..].iter().all(|it| it["reason"] == "after_end"),
            "{}",
            list.body
        );
    }
}

/// Reads frames until one satisfies `want`, within ten seconds.
async fn next_state<S>(ws: &mut S, want: impl Fn(&Value) -> bool) -> Value
where
    S: StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let frame = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a game.state in time")
            .expect("the socket stays open")
            .expect("a frame");
        if let Message::Text(text) = frame {
            let v: Value = serde_json::from_str(&text).expect("JSON frames");
            if v["t"] == "game.state" && want(&v) {
                return v;
            }
        }
    }
}

#[test]
fn a_socket_on_one_node_sees_moves_adjudicated_on_another() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let g = Game::new(&client, &nodes[0], &nodes[0], "relay");
    let ws_url = nodes[1].url("/v1/ws").replace("http://", "ws://");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let (mut seat_o, _) = tokio_tungstenite::connect_async(&ws_url).await.expect("ws");
        let (mut watcher, _) = tokio_tungstenite::connect_async(&ws_url).await.expect("ws");
        seat_o
            .send(Message::text(
                json!({"t": "hello", "token": g.o}).to_string(),
            ))
            .await
            .expect("hello");
        watcher
            .send(Message::text(json!({"t": "hello"}).to_string()))
            .await
            .expect("hello");
        watcher
            .send(Message::text(
                json!({"t": "game.subscribe", "inbox": g.inbox, "game": g.game}).to_string(),
            ))
            .await
            .expect("subscribe");
        next_state(&mut seat_o, |v| v["seq"] == json!(0)).await;
        next_state(&mut watcher, |v| v["seq"] == json!(0)).await;
        // X moves on node 0; node 1's sockets hear it, each with its own view.
        let r = g.play(&client, &nodes[0], 0);
        assert_eq!(r.status, 201, "{}", r.body);
        let o_view = next_state(&mut seat_o, |v| v["seq"] == json!(1)).await;
        assert_eq!(o_view["seat"], json!("O"));
        let spectator = next_state(&mut watcher, |v| v["seq"] == json!(1)).await;
        assert_eq!(spectator["seat"], Value::Null);
    });
}

#[test]
fn kill9_of_a_node_moves_its_shards_and_loses_nothing() {
    let redis = RedisServer::start();
    let mut nodes = [node(&redis), node(&redis), node(&redis)];
    let client = Client::new();
    await_owners(
        &client,
        &nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(15),
    );
    let games: Vec<Game> = (0..8)
        .map(|k| Game::new(&client, &nodes[k % 3], &nodes[(k + 2) % 3], "fail"))
        .collect();
    let mut acked: Vec<Vec<String>> = vec![Vec::new(); games.len()];
    for i in 0..3 {
        for (k, g) in games.iter().enumerate() {
            acked[k].push(g.play_until_accepted(&client, &nodes[(k + i) % 3], i));
        }
    }
    let killed = Instant::now();
    nodes[0].kill9();
    let survivors: Vec<&Hub> = nodes[1..].iter().collect();
    let failover = await_owners(&client, &survivors, Duration::from_secs(20));
    println!("failover after kill -9: every shard owned again within {failover:?}");
    assert!(
        failover < Duration::from_secs(10),
        "failover took {failover:?}"
    );
    for i in 3..5 {
        for (k, g) in games.iter().enumerate() {
            acked[k].push(g.play_until_accepted(&client, survivors[(k + i) % 2], i));
        }
    }
    println!("all games finished {:?} after the kill", killed.elapsed());
    for (k, g) in games.iter().enumerate() {
        for capture in &acked[k] {
            let v = g.await_verdict(&client, survivors[k % 2], capture);
            assert_eq!(v, "accepted", "game {k} capture {capture}");
        }
        let st = g.state(&client, survivors[(k + 1) % 2]);
        assert_eq!(st["result"]["status"], json!("win"), "game {k}: {st}");
    }
}

fn signal(hub: &Hub, sig: &str) {
    let pid = hub.pid().expect("the node runs").to_string();
    let ok = Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("kill runs");
    assert!(ok.success());
}

/// The node id in a node's log (`cluster node: taking shard leases node=…`).
fn node_id(hub: &Hub) -> String {
    let log = hub.log();
    let at = log.find("node=").expect("the node logs its id");
    log[at + 5..]
        .trim_start_matches('"')
        .chars()
        .take_while(|c| c.is_ascii_hexdigit())
        .collect()
}

#[test]
fn a_paused_owner_is_fenced_and_two_nodes_never_share_a_shard() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let g = Game::new(&client, &nodes[0], &nodes[1], "fence");
    let first = g.play_until_accepted(&client, &nodes[1], 0);
    let shard = first.split(':').next().expect("shard:pos").to_string();
    let lease = redis.cli(&["GET", &format!("ph:lease:{shard}")]);
    let (owner_id, _) = lease.trim().split_once(':').expect("a lease node:fence");
    let (paused, live) = if node_id(&nodes[0]) == owner_id {
        (&nodes[0], &nodes[1])
    } else {
        (&nodes[1], &nodes[0])
    };
    signal(paused, "-STOP");
    // The live node takes the paused one's shards once their leases run out, and the game
    // goes on through it, with verdicts recorded under the new lease.
    await_owners_one(&client, live);
    let second = g.play_until_accepted(&client, live, 1);
    assert_eq!(g.await_verdict(&client, live, &second), "accepted");
    signal(paused, "-CONT");
    // The resumed node finds its leases gone and takes back only its fair share.
    await_owners(&client, &all, Duration::from_secs(20));
    for i in 2..5 {
        g.play_until_accepted(&client, &nodes[i % 2], i);
    }
    // In every shard's verdict stream, a lease's fence number never goes back: once a new
    // owner wrote, the old one wrote nothing more.
    for s in 0..SHARDS {
        let fences = verdict_fences(&redis, s);
        assert!(
            fences.windows(2).all(|w| w[0] <= w[1]),
            "shard {s} fences out of order: {fences:?}"
        );
    }
    let fences = verdict_fences(&redis, shard.parse().expect("a shard number"));
    assert!(
        fences.first() < fences.last(),
        "the shard changed owner while its first owner was paused: {fences:?}"
    );
}

fn await_owners_one(client: &Client, hub: &Hub) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while redis_support::gauge(client, hub, "pipehub_cluster_shards_owned")
        != Some(i64::from(SHARDS))
    {
        assert!(
            Instant::now() < deadline,
            "the live node never took every shard"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn listings_and_the_open_games_cap_span_the_nodes() {
    let redis = RedisServer::start();
    let nodes = [
        node_with(&redis, &["--max-open-games", "2"]),
        node_with(&redis, &["--max-open-games", "2"]),
    ];
    let client = Client::new();
    let create = |hub: &Hub| {
        client.post(
            &hub.url("/v1/inboxes/span/games"),
            None,
            &json!({"protocol": "pipehub:tic-tac-toe"}),
        )
    };
    let a = create(&nodes[0]);
    let b = create(&nodes[1]);
    assert_eq!((a.status, b.status), (201, 201), "{} {}", a.body, b.body);
    // The same person (this client's address) hosts two games, one on each node: a third
    // is refused on either node.
    let c = create(&nodes[0]);
    assert_eq!(c.error(), "too_many_games", "{} {}", c.status, c.body);
    for hub in &nodes {
        let list = client.get(&hub.url("/v1/inboxes/span/games?phase=waiting"));
        let ids: Vec<String> = list.json()["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|g| g["game"].as_str().map(str::to_string))
            .collect();
        for created in [&a, &b] {
            let id = created.json()["game"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(ids.contains(&id), "{id} missing from {}", list.body);
        }
    }
    // X's token from node 0 opens its seat on node 1, and the game's view reads the same.
    let token = a.json()["token"].as_str().unwrap_or_default().to_string();
    let game = a.json()["game"].as_str().unwrap_or_default().to_string();
    let view = client.get_auth(
        &nodes[1].url(&format!("/v1/inboxes/span/games/{game}/view")),
        &token,
    );
    assert_eq!(view.status, 200, "{}", view.body);
    assert_eq!(view.json()["phase"], json!("waiting"));
    assert_eq!(view.json()["seat"], json!("X"));
}

#[test]
fn one_person_has_one_budget_across_the_nodes() {
    let redis = RedisServer::start();
    let limited = ["--rate-limit", "4/60"];
    let nodes = [node_with(&redis, &limited), node_with(&redis, &limited)];
    let client = Client::new();
    let mut statuses = Vec::new();
    for i in 0..6 {
        let r = client.post(
            &nodes[i % 2].url("/v1/inboxes/budget/games"),
            None,
            &json!({"protocol": "pipehub:tic-tac-toe"}),
        );
        if r.status == 429 {
            assert_eq!(r.error(), "rate_limited");
            assert!(r.header("retry-after").is_some(), "{r:?}");
        }
        statuses.push(r.status);
    }
    // Four games created in all (two through each node), then refused on both nodes.
    assert_eq!(statuses, [201, 201, 201, 201, 429, 429]);
}

#[test]
fn rock_paper_scissors_custody_across_nodes() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let created = client.post(
        &nodes[0].url("/v1/inboxes/rps/games"),
        None,
        &json!({"protocol": "pipehub:rock-paper-scissors"}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let created = created.json();
    let paired = client.post(
        &nodes[1].url("/v1/pair"),
        None,
        &json!({"code": created["pairingCode"]}),
    );
    assert_eq!(paired.status, 200, "{}", paired.body);
    let game = created["game"].as_str().unwrap_or_default().to_string();
    let x = created["token"].as_str().unwrap_or_default().to_string();
    let o = paired.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let moves = format!("/v1/inboxes/rps/games/{game}/moves");
    // O chooses early on node 2: held there. X chooses on node 1: committed at once.
    let held = client.post(&nodes[2].url(&moves), Some(&o), &json!({"choice": "paper"}));
    assert_eq!(held.status, 202, "{}", held.body);
    assert_eq!(held.json()["verdict"], json!("held"));
    let commit = client.post(
        &nodes[1].url(&moves),
        Some(&x),
        &json!({"move": {"choice": "scissors"}}),
    );
    assert_eq!(commit.status, 201, "{}", commit.body);
    // Node 2 commits the choice it holds; the owner reveals both; every node sees it.
    for hub in &nodes {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = client.get(&hub.url(&format!("/v1/inboxes/rps/games/{game}")));
            if st.json()["seq"].as_u64().unwrap_or(0) >= 4 {
                break;
            }
            assert!(Instant::now() < deadline, "no reveals: {}", st.body);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let export = client.get(&nodes[0].url(&format!("/v1/inboxes/rps/games/{game}/export")));
    let lines: Vec<Value> = export
        .body
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    assert_eq!(lines[3]["player"], json!("X"));
    assert_eq!(lines[3]["move"]["choice"], json!("scissors"));
    assert_eq!(lines[4]["player"], json!("O"));
    assert_eq!(lines[4]["move"]["choice"], json!("paper"));
    let (code, out) = pipehub_tests::verify(&[], &export.body);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn failed_pairing_attempts_share_one_budget_across_the_nodes() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let client = Client::new();
    let statuses: Vec<u16> = (0..12)
        .map(|i| {
            client
                .post(
                    &nodes[i % 2].url("/v1/pair"),
                    None,
                    &json!({"code": "ZZZZZZZZ"}),
                )
                .status
        })
        .collect();
    // Ten failures a minute per address, counted across both nodes.
    assert_eq!(statuses[..10], [404; 10], "{statuses:?}");
    assert_eq!(statuses[10..], [429, 429], "{statuses:?}");
}
