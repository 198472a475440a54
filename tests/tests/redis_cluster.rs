//! Several hub nodes on one private Redis act as one hub: games created, paired and played
//! through all of them, WebSocket subscribers on one node fed by moves posted to another,
//! `kill -9` of a node with its shards moving to the survivors and nothing acknowledged
//! lost, and a paused owner fenced out of writing verdicts after its lease moved on. Each
//! shard has exactly one adjudicator: only its lease holder consumes it and judges its
//! records; another node that receives an event answers with the owner's verdict.

mod redis_support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use pipehub_tests::{Client, Hub, Seated};
use redis_support::{
    await_one_consumer_per_shard, await_owners, counter_sum, lease_holder, node, node_id,
    node_with, owned, verdict_fences, Game, RedisServer, SHARDS,
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
    let owner_id = lease_holder(&redis, &shard);
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
    // The resumed node finds its leases gone and takes back only its fair share; its
    // consumers of the shards it lost stopped reading.
    await_owners(&client, &all, Duration::from_secs(20));
    let ids = [node_id(&nodes[0]), node_id(&nodes[1])];
    await_one_consumer_per_shard(&client, &redis, &all, &ids);
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

    // Creates racing on both nodes stay under the cap too: each node counts the store's
    // games, and ten at once all passed that count (6 to 11 games under a cap of 3).
    for created in [&a, &b] {
        let game = created.json()["game"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let token = created.json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let url = nodes[0].url(&format!("/v1/inboxes/span/games/{game}"));
        let cancel = client.send("DELETE", &url, Some(&token), None, None);
        assert!(cancel.status < 300, "{} {}", cancel.status, cancel.body);
    }
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..10)
            .map(|i| {
                let hub = &nodes[i % 2];
                s.spawn(move || create_on(hub).status)
            })
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().expect("a racer"))
            .collect()
    });
    let made = statuses.iter().filter(|s| **s == 201).count();
    assert!(
        made <= 2,
        "{made} games made under a cap of 2: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| [201, 409, 503].contains(s)),
        "{statuses:?}"
    );
    let marks = open_marks(&redis);
    assert!(marks.len() <= 2, "{marks:?}");
    // And once the race is over, the cap's room is there to take.
    while open_marks(&redis).len() < 2 {
        assert_eq!(create_on(&nodes[0]).status, 201);
    }
    assert_eq!(create_on(&nodes[1]).error(), "too_many_games");
}

#[test]
fn a_create_sent_again_to_another_node_answers_with_the_same_game() {
    // A host whose create's answer was lost sends it again, and a load balancer takes it
    // to another node: the game is the one the first try made, under a cap of one. Tries
    // racing on both nodes make one game too.
    let redis = RedisServer::start();
    let nodes = [
        node_with(&redis, &["--max-open-games", "1"]),
        node_with(&redis, &["--max-open-games", "1"]),
    ];
    let client = Client::new();
    let create = |hub: &Hub, inbox: &str, key: &str| {
        let url = hub.url(&format!("/v1/inboxes/{inbox}/games"));
        client.post_keyed(&url, key, &json!({"protocol": "pipehub:tic-tac-toe"}))
    };
    let first = create(&nodes[0], "again", "6c0f1e7a-host-key-one");
    let again = create(&nodes[1], "again", "6c0f1e7a-host-key-one");
    assert_eq!(
        (first.status, again.status),
        (201, 201),
        "{} {}",
        first.body,
        again.body
    );
    let game = first.json()["game"].clone();
    assert_eq!(again.json()["game"], game, "{}", again.body);
    let view = format!(
        "/v1/inboxes/again/games/{}/view",
        game.as_str().unwrap_or_default()
    );
    for answer in [&first, &again] {
        let token = answer.json()["token"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let seen = client.get_auth(&nodes[0].url(&view), &token);
        assert_eq!(seen.json()["seat"], "X", "{}", seen.body);
    }
    // The first answer's code died with the repeat; the last one's seats O.
    let pair = |hub: &Hub, answer: &pipehub_tests::Response| {
        let code = answer.json()["pairingCode"].clone();
        client.post(&hub.url("/v1/pair"), None, &json!({"code": code}))
    };
    assert_eq!(pair(&nodes[1], &first).error(), "code_used");
    assert_eq!(pair(&nodes[0], &again).status, 200);
    let token = again.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let resign = format!(
        "/v1/inboxes/again/games/{}/resign",
        game.as_str().unwrap_or_default()
    );
    let resigned = client.post(&nodes[1].url(&resign), Some(&token), &json!({}));
    assert_eq!(resigned.status, 201, "{}", resigned.body);

    // Another key, sent to both nodes at once, a few times each: one game is made (the
    // person's cap of one is free again once the first game finished).
    let answers: Vec<pipehub_tests::Response> = std::thread::scope(|s| {
        let racers: Vec<_> = (0..6)
            .map(|i| {
                let create = &create;
                let hub = &nodes[i % 2];
                s.spawn(move || create(hub, "race", "0d9a7b3c-host-key-two"))
            })
            .collect();
        racers
            .into_iter()
            .map(|r| r.join().expect("a racer"))
            .collect()
    });
    let games: std::collections::BTreeSet<String> = answers
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| a.json()["game"].as_str().unwrap_or_default().to_string())
        .collect();
    let seen: Vec<_> = answers.iter().map(|a| (a.status, a.body.clone())).collect();
    assert_eq!(games.len(), 1, "one game: {seen:?}");
    for answer in &answers {
        // A try that lost a race with one changing the same game may be told to try again.
        assert!(
            [201, 503].contains(&answer.status),
            "{} {}",
            answer.status,
            answer.body
        );
    }
    let listed = client.get(&nodes[1].url("/v1/inboxes/race/games"));
    let items = listed.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", listed.body);
}

fn create_on(hub: &Hub) -> pipehub_tests::Response {
    Client::new().post(
        &hub.url("/v1/inboxes/span/games"),
        None,
        &json!({"protocol": "pipehub:tic-tac-toe"}),
    )
}

/// The open-game marks (`open/{person}/{inbox}/{game}`) in the shared meta store.
fn open_marks(redis: &RedisServer) -> Vec<String> {
    redis
        .cli(&["ZRANGE", "ph:mk", "0", "-1"])
        .lines()
        .filter(|k| k.starts_with("open/"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_game_whose_close_died_with_its_owner_is_closed_by_the_next_owner() {
    let redis = RedisServer::start();
    let mut first = node_with(&redis, &["--max-open-games", "1"]);
    let client = Client::new();
    await_owners(&client, &[&first], Duration::from_secs(15));
    let game = Game::new(&client, &first, &first, "settle");
    let mark = open_marks(&redis)
        .into_iter()
        .find(|k| k.ends_with(&format!("/settle/{}", game.game)))
        .expect("an open game has its mark");
    let mut last = String::new();
    for i in 0..5 {
        last = game.play_until_accepted(&client, &first, i);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_marks(&redis).contains(&mark) {
        assert!(Instant::now() < deadline, "the won game was never closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // More records on the game's shard than a new owner's consumer goes back over (1,024), so
    // that only a settling of the shard's open games can reach the finished game: an
    // unseated game on the same shard, and events of it that the chain refuses.
    let shard = last
        .split(':')
        .next()
        .expect("a capture is shard:pos")
        .to_string();
    let events = first.url("/v1/inboxes/settle/events");
    let filler = (0..256)
        .map(|k| format!("filler-{k}"))
        .find(|id| {
            let r = client.post(&events, None, &start_event(id));
            assert_eq!(r.status, 201, "{}", r.body);
            r.json()["capture"]
                .as_str()
                .unwrap_or_default()
                .split(':')
                .next()
                == Some(&shard)
        })
        .expect("some game id falls on the shard");
    for seq in 1..=1100 {
        let stale = move_event(&filler, seq, &"0".repeat(64), "X", 0);
        let r = client.post(&events, None, &stale);
        assert!(r.status < 500, "{} {}", r.status, r.body);
    }
    // As if the owner had died between the last verdict and the close: the mark is back,
    // and the host's one open game is taken by a game nobody will come back to.
    redis.cli(&["HSET", "ph:m", &mark, ""]);
    redis.cli(&["ZADD", "ph:mk", "0", &mark]);
    let create = |hub: &Hub| {
        client.post(
            &hub.url("/v1/inboxes/settle/games"),
            None,
            &json!({"protocol": "pipehub:tic-tac-toe"}),
        )
    };
    assert_eq!(create(&first).error(), "too_many_games");
    // Nor is the game among the intents a new owner reads again (its pairing's hand-over):
    // the streams keep only the newest thousand or so, and on a busy cluster it is gone.
    for s in 0..SHARDS {
        redis.cli(&["DEL", &format!("ph:x:{s}")]);
    }
    first.kill9();
    let next = node_with(&redis, &["--max-open-games", "1"]);
    await_owners(&client, &[&next], Duration::from_secs(20));
    let deadline = Instant::now() + Duration::from_secs(20);
    while open_marks(&redis).contains(&mark) {
        assert!(
            Instant::now() < deadline,
            "the next owner never closed the finished game: {}",
            next.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let fresh = create(&next);
    assert_eq!(fresh.status, 201, "{}", fresh.body);
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
    // O chooses early on node 2: held by the shard's owner (node 2 hands it over unless it
    // is the owner). X chooses on node 1: committed at once.
    let held = client.post(&nodes[2].url(&moves), Some(&o), &json!({"choice": "paper"}));
    assert_eq!(held.status, 202, "{}", held.body);
    assert_eq!(held.json()["verdict"], json!("held"));
    let commit = client.post(
        &nodes[1].url(&moves),
        Some(&x),
        &json!({"move": {"choice": "scissors"}}),
    );
    assert_eq!(commit.status, 201, "{}", commit.body);
    // The owner commits the choice it holds and reveals both; every node sees it.
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
    // Each attempt takes from the shared budget as it begins; a success gives it back.
    for i in 0..11 {
        Seated::create_and_pair(
            &client,
            &nodes[i % 2],
            &nodes[(i + 1) % 2],
            "pairs",
            &json!({"protocol": "pipehub:tic-tac-toe"}),
        );
    }
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

fn start_event(game: &str) -> Value {
    json!({"game": game, "seq": 0, "prevHash": "", "player": "X", "action": "start",
           "protocol": "pipehub:tic-tac-toe"})
}

fn move_event(game: &str, seq: u64, head: &str, player: &str, col: u64) -> Value {
    json!({"game": game, "seq": seq, "prevHash": head, "player": player,
           "action": "move", "move": {"row": if player == "X" { 0 } else { 1 }, "col": col}})
}

#[test]
fn a_node_that_does_not_own_a_shard_answers_with_the_owners_verdict() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let ids = [node_id(&nodes[0]), node_id(&nodes[1])];
    await_one_consumer_per_shard(&client, &redis, &all, &ids);
    let url = nodes[1].url("/v1/inboxes/whole/events");
    // Whole events posted to node 1 for a game whose shard node 0 owns.
    let (game, shard, mut head) = (0..64)
        .find_map(|k| {
            let game = format!("w{k}");
            let r = client.post(&url, None, &start_event(&game));
            assert_eq!(r.status, 201, "{}", r.body);
            let capture = r.json()["capture"].as_str().unwrap_or_default().to_string();
            let shard = capture.split(':').next().unwrap_or_default().to_string();
            let hash = r.json()["hash"].as_str().unwrap_or_default().to_string();
            (lease_holder(&redis, &shard) == ids[0]).then_some((game, shard, hash))
        })
        .expect("a game on a shard of node 0");
    let shard_no: u32 = shard.parse().expect("a shard number");
    let judged = [
        counter_sum(&client, &nodes[0], "pipehub_events_total"),
        counter_sum(&client, &nodes[1], "pipehub_events_total"),
    ];
    let mut captures = Vec::new();
    for (seq, player, col) in [(1, "X", 0), (2, "O", 0), (3, "X", 1)] {
        let ev = move_event(&game, seq, &head, player, col);
        let r = client.post(&url, None, &ev);
        assert_eq!(r.status, 201, "move {seq}: {}", r.body);
        assert_eq!(r.json()["verdict"], json!("accepted"));
        assert_eq!(r.json()["state"]["seq"], json!(seq), "{}", r.body);
        head = r.json()["hash"].as_str().unwrap_or_default().to_string();
        captures.push(r.json()["capture"].as_str().unwrap_or_default().to_string());
    }
    // A stale event: refused by the owner, with its reason and the current state.
    let stale = client.post(&url, None, &move_event(&game, 2, &head, "O", 2));
    assert_eq!(stale.status, 422, "{}", stale.body);
    assert_eq!(stale.error(), "stale_seq");
    assert_eq!(stale.json()["state"]["seq"], json!(3), "{}", stale.body);
    // Its capture reads back on either node as the 422 answered: rejected, with the hash
    // of the event as posted (the owner records no hash with a rejection).
    let stale_capture = stale.json()["capture"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for n in &nodes {
        let r = client.get(&n.url(&format!("/v1/inboxes/whole/events/{stale_capture}")));
        assert_eq!(r.json()["verdict"], json!("rejected"), "{}", r.body);
        assert_eq!(r.json()["hash"], stale.json()["hash"], "{}", r.body);
    }
    // Node 0 judged all four; node 1 judged none, and reads what node 0 recorded.
    assert_eq!(
        counter_sum(&client, &nodes[0], "pipehub_events_total") - judged[0],
        4
    );
    assert_eq!(
        counter_sum(&client, &nodes[1], "pipehub_events_total") - judged[1],
        0,
        "node 1 adjudicated a record of a shard it does not own"
    );
    for capture in &captures {
        let r = client.get(&nodes[1].url(&format!("/v1/inboxes/whole/events/{capture}")));
        assert_eq!(r.json()["verdict"], json!("accepted"), "{}", r.body);
    }
    let st = client.get(&nodes[1].url(&format!("/v1/inboxes/whole/games/{game}")));
    assert_eq!(st.json()["seq"], json!(3), "{}", st.body);
    // Only node 0 reads the shard.
    assert_eq!(
        redis_support::consuming(&client, &all, shard_no),
        vec![1, 0]
    );
}

#[test]
fn sockets_on_a_node_that_does_not_adjudicate_get_only_their_own_seats_view() {
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let body = json!({"protocol": "pipehub:rock-paper-scissors", "rules": {"bestOf": 1}});
    let g = pipehub_tests::Seated::create_and_pair(&client, &nodes[0], &nodes[0], "rps2", &body);
    // The hub writes the start once O paired: its capture names the game's shard.
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        let list = client.get(&nodes[0].url(&format!("/v1/inboxes/rps2/events?game={}", g.game)));
        if let Some(c) = list.json()["items"][0]["capture"].as_str() {
            break c.to_string();
        }
        assert!(Instant::now() < deadline, "no start: {}", list.body);
        std::thread::sleep(Duration::from_millis(50));
    };
    let shard = first.split(':').next().unwrap_or_default().to_string();
    let owner = lease_holder(&redis, &shard);
    let (owner, other) = if node_id(&nodes[0]) == owner {
        (&nodes[0], &nodes[1])
    } else {
        (&nodes[1], &nodes[0])
    };
    let judged = counter_sum(&client, other, "pipehub_events_total");
    let ws_url = other.url("/v1/ws").replace("http://", "ws://");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let (x_frames, o_frames) = rt.block_on(async {
        let (mut x, _) = tokio_tungstenite::connect_async(&ws_url).await.expect("ws");
        let (mut o, _) = tokio_tungstenite::connect_async(&ws_url).await.expect("ws");
        for (ws, token) in [(&mut x, &g.x), (&mut o, &g.o)] {
            ws.send(Message::text(
                json!({"t": "hello", "token": token}).to_string(),
            ))
            .await
            .expect("hello");
            next_state(ws, |v| v["seq"] == json!(0)).await;
        }
        // O chooses first (held by the owner), then X: the owner commits both and
        // reveals both; the sockets on the other node hear every step.
        o.send(Message::text(
            json!({"t": "game.move", "move": {"choice": "rock"}, "ref": "o1"}).to_string(),
        ))
        .await
        .expect("O's choice");
        let held = next_state(&mut o, |v| v["ref"] == json!("o1")).await;
        assert!(
            held.to_string().contains("rock"),
            "O sees its held choice: {held}"
        );
        x.send(Message::text(
            json!({"t": "game.move", "move": {"choice": "paper"}, "ref": "x1"}).to_string(),
        ))
        .await
        .expect("X's choice");
        let mut frames = Vec::new();
        for ws in [&mut x, &mut o] {
            let mut seen = Vec::new();
            loop {
                let v = next_state(ws, |_| true).await;
                seen.push(v.clone());
                if v["result"]["status"] == json!("win") {
                    assert_eq!(v["result"]["winner"], json!("X"), "{v}");
                    break;
                }
            }
            frames.push(seen);
        }
        let o_frames = frames.pop().unwrap_or_default();
        let x_frames = frames.pop().unwrap_or_default();
        (x_frames, o_frames)
    });
    // Reveals are X's (seq 3) then O's (seq 4): before its reveal, a seat's choice is in
    // no other seat's view.
    let leaks = |frames: &[Value], seat: &str, before: u64, word: &str| {
        for f in frames {
            assert_eq!(f["seat"], json!(seat), "a view for another seat: {f}");
            let mut f = f.clone();
            if let Some(state) = f.as_object_mut() {
                state.remove("protocol"); // the protocol's name mentions every choice
            }
            if f["seq"].as_u64().is_some_and(|s| s < before) {
                assert!(!f.to_string().contains(word), "{word} leaked: {f}");
            }
        }
    };
    leaks(&x_frames, "X", 4, "rock");
    leaks(&o_frames, "O", 3, "paper");
    assert!(
        x_frames.iter().any(|f| f["seq"] == json!(2)),
        "X's socket heard the commits adjudicated on the other node: {x_frames:?}"
    );
    assert_eq!(
        counter_sum(&client, other, "pipehub_events_total"),
        judged,
        "the node with the sockets adjudicated nothing"
    );
    assert!(counter_sum(&client, owner, "pipehub_events_total") >= 5);
}

/// The shards a node's `/metrics` text claims: the owned-shards gauge and the shards whose
/// consumer it says runs.
fn claimed(metrics: &str) -> (i64, Vec<u32>) {
    let mut owned = -1;
    let mut running = Vec::new();
    for line in metrics.lines() {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        if name == "pipehub_cluster_shards_owned" {
            owned = value as i64;
        } else if let Some(shard) = name
            .strip_prefix("pipehub_consumer_running{shard=\"")
            .and_then(|s| s.strip_suffix("\"}"))
        {
            if value == 1.0 {
                running.push(shard.parse().expect("a shard number"));
            }
        }
    }
    (owned, running)
}

#[test]
fn a_resumed_owner_claims_no_shard_it_lost_in_its_first_scrape() {
    // A node paused past its leases (a long GC-like stall, SIGSTOP) answers the scrape that
    // waited for it as soon as it resumes. Its gauges were those of before the pause: it
    // claimed the shards another node had taken meanwhile, and two nodes reported a running
    // consumer for the same shard.
    use std::io::{Read, Write};
    let redis = RedisServer::start();
    let nodes = [node(&redis), node(&redis)];
    let all: Vec<&Hub> = nodes.iter().collect();
    let client = Client::new();
    await_owners(&client, &all, Duration::from_secs(15));
    let (paused, live) = (&nodes[0], &nodes[1]);
    let paused_id = node_id(paused);
    let before = redis_support::gauge(&client, paused, "pipehub_cluster_shards_owned");
    assert!(
        before.is_some_and(|n| n > 0),
        "the node owns shards: {before:?}"
    );
    signal(paused, "-STOP");
    await_owners_one(&client, live);
    // The scrape is queued by the kernel while the node is stopped, and answered first
    // thing once it runs again.
    let addr = paused
        .url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let mut scrape = std::net::TcpStream::connect(&addr).expect("the kernel accepts");
    scrape
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    scrape
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
        .expect("the scrape is sent");
    signal(paused, "-CONT");
    let mut answer = String::new();
    scrape
        .read_to_string(&mut answer)
        .expect("the scrape is answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Leases only move on: a shard the node claims must be its own in Redis after the
    // answer (it may have taken some back meanwhile, never given them up so soon).
    let held: Vec<u32> = (0..SHARDS)
        .filter(|s| lease_holder_or_none(&redis, *s).as_deref() == Some(paused_id.as_str()))
        .collect();
    let (owned, running) = claimed(&answer);
    assert!(
        owned >= 0 && owned <= held.len() as i64,
        "the resumed node claims {owned} shards and holds {held:?}"
    );
    assert!(
        running.iter().all(|s| held.contains(s)),
        "the resumed node says it consumes {running:?} and holds {held:?}"
    );
}

fn lease_holder_or_none(redis: &RedisServer, shard: u32) -> Option<String> {
    let lease = redis.cli(&["GET", &format!("ph:lease:{shard}")]);
    lease
        .trim()
        .split_once(':')
        .map(|(owner, _)| owner.to_string())
}
