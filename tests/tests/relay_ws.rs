//! End-to-end tests of the WebSocket relay (`GET /v1/ws`) against the real `pipehub serve`:
//! the message table of DESIGN.md section 5 as a chat box, a spectator and a misbehaving
//! client meet it.

mod relay_support;

use std::time::{Duration, Instant};

use futures_util::SinkExt;
use pipehub_tests::{metric_sum, verify, Client, Hub};
use relay_support::{Game, Ws};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const TTT: &str = "pipehub:tic-tac-toe";
const RPS: &str = "pipehub:rock-paper-scissors";

fn ttt(hub: &Hub, c: &Client, inbox: &str) -> Game {
    Game::new(hub, c, inbox, json!({"protocol": TTT}))
}

/// A move over the socket; returns the answer meant for the mover (state or refusal).
async fn play(ws: &mut Ws, row: u64, col: u64, r: &str) -> Value {
    ws.send(json!({"t": "game.move", "move": {"row": row, "col": col}, "ref": r}))
        .await;
    loop {
        let m = ws.recv().await;
        if m["ref"] == r {
            return m;
        }
    }
}

fn http_move(hub: &Hub, c: &Client, g: &Game, token: &str, row: u64, col: u64) -> Value {
    let res = c.post(
        &hub.url(&g.path("/moves")),
        Some(token),
        &json!({"move": {"row": row, "col": col}}),
    );
    assert_eq!(res.status, 201, "({row},{col}): {}", res.body);
    res.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_over_the_socket_and_over_http_meet_one_referee_and_a_spectator_sees_every_one() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-mixed");

    let mut x = Ws::connect(&hub).await;
    let (ok, state) = x.hello(Some(&g.x)).await;
    assert_eq!(
        ok,
        json!({"t": "hello.ok", "seat": "X", "inbox": g.inbox, "game": g.game})
    );
    let state = state.expect("a state after hello");
    assert_eq!(
        (state["seat"].clone(), state["seq"].clone()),
        (json!("X"), json!(0))
    );
    assert_eq!(state["phase"], "started");

    let mut o = Ws::connect(&hub).await;
    o.hello(Some(&g.o)).await;
    let mut watcher = Ws::connect(&hub).await;
    let (ok, _) = watcher.hello(None).await;
    assert_eq!(ok["seat"], Value::Null);
    watcher
        .send(json!({"t": "game.subscribe", "inbox": g.inbox, "game": g.game}))
        .await;
    let first = watcher.until("game.state", None).await;
    assert_eq!(
        (first["seat"].clone(), first["seq"].clone()),
        (Value::Null, json!(0))
    );

    // X over the socket, O over HTTP, alternately, to X's win.
    let mine = play(&mut x, 0, 0, "x1").await;
    assert_eq!(
        (mine["t"].clone(), mine["seq"].clone()),
        (json!("game.state"), json!(1))
    );
    tokio::task::block_in_place(|| http_move(&hub, &c, &g, &g.o, 1, 0));
    assert_eq!(x.until("game.state", Some(2)).await["ref"], Value::Null);
    play(&mut x, 0, 1, "x2").await;
    tokio::task::block_in_place(|| http_move(&hub, &c, &g, &g.o, 1, 1));
    x.until("game.state", Some(4)).await;
    let last = play(&mut x, 0, 2, "x3").await;
    assert_eq!(
        last["result"],
        json!({"status": "win", "winner": "X", "by": "line"})
    );

    // O's socket and the spectator saw every event, in order, each in its own view.
    for (ws, seat) in [(&mut o, json!("O")), (&mut watcher, Value::Null)] {
        let mut seen = Vec::new();
        while seen.last() != Some(&5) {
            let m = ws.until("game.state", None).await;
            assert_eq!(m["seat"], seat);
            assert_eq!(
                m.get("ref"),
                None,
                "only the mover's socket gets a ref: {m}"
            );
            seen.push(m["seq"].as_u64().expect("a seq"));
        }
        assert_eq!(seen, (1..=5).collect::<Vec<_>>(), "{seat}");
    }

    // One chain: the export verifies, with the socket's and HTTP's moves alike.
    let export = tokio::task::block_in_place(|| c.get(&hub.url(&g.path("/export"))));
    assert_eq!(export.status, 200, "{}", export.body);
    let (code, out) = verify(&[], &export.body);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("win X line"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_move_gets_game_refused_then_the_true_board() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-refused");
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    let mut o = Ws::connect(&hub).await;
    o.hello(Some(&g.o)).await;

    play(&mut x, 1, 1, "x1").await;
    o.until("game.state", Some(1)).await;
    // O takes X's square: refused by the referee, then the board as it really is.
    let refused = play(&mut o, 1, 1, "o-bad").await;
    assert_eq!(refused["t"], "game.refused", "{refused}");
    assert_eq!(refused["error"], "illegal_move");
    assert_eq!(refused["detail"], "occupied");
    let truth = o.recv().await;
    assert_eq!(truth["t"], "game.state", "{truth}");
    assert_eq!(truth["seq"], 1);
    assert_eq!(truth["seat"], "O");
    // A move out of turn is refused the same way.
    let refused = play(&mut x, 0, 0, "x-again").await;
    assert_eq!(refused["t"], "game.refused", "{refused}");
    assert_eq!(x.recv().await["t"], "game.state");
    // The game goes on.
    let ok = play(&mut o, 0, 0, "o1").await;
    assert_eq!(
        (ok["t"].clone(), ok["seq"].clone()),
        (json!("game.state"), json!(2))
    );

    // Malformed messages get an error and leave the socket open; a frame over 4 KiB
    // closes it.
    x.send_text("{not json".into()).await;
    let err = x.until("error", None).await;
    assert_eq!(
        (err["error"].clone(), err["close"].clone()),
        (json!("bad_json"), json!(false))
    );
    x.send(json!({"t": "game.jump"})).await;
    assert_eq!(x.until("error", None).await["error"], "unknown_message");
    x.send(json!({"t": "game.board"})).await;
    assert_eq!(x.until("game.state", None).await["seq"], 2);
    let mut watcher = Ws::connect(&hub).await;
    watcher.hello(None).await;
    watcher
        .send(json!({"t": "game.move", "move": {"row": 2, "col": 2}, "ref": "w"}))
        .await;
    assert_eq!(watcher.until("error", None).await["error"], "forbidden");
    // A frame near the limit, several times the connection's 1 KiB read buffer, is read
    // whole and answered.
    x.send_text(format!(r#"{{"t":"game.board"{}}}"#, " ".repeat(4000)))
        .await;
    assert_eq!(x.recv().await["seq"], 2);
    x.send_text(format!(
        r#"{{"t":"game.board","pad":"{}"}}"#,
        "x".repeat(5000)
    ))
    .await;
    let err = x.until("error", None).await;
    assert_eq!(
        (err["error"].clone(), err["close"].clone()),
        (json!("too_large"), json!(true))
    );
    assert_eq!(x.next().await, None, "the socket closes after close: true");
}

/// Every object key anywhere in a JSON value.
fn keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                keys(v, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rock_paper_scissors_views_never_carry_the_other_seats_choice_or_a_nonce() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let g = Game::new(
        &hub,
        &c,
        "ws-rps",
        json!({"protocol": RPS, "rules": {"bestOf": 1}}),
    );
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    let mut o = Ws::connect(&hub).await;
    o.hello(Some(&g.o)).await;
    let mut watcher = Ws::connect(&hub).await;
    watcher.hello(None).await;
    watcher
        .send(json!({"t": "game.subscribe", "inbox": g.inbox, "game": g.game}))
        .await;
    watcher.until("game.state", None).await;
    // O's seat is open in a second tab too.
    let mut o_tab = Ws::connect(&hub).await;
    o_tab.hello(Some(&g.o)).await;

    // O chooses before X has committed: held, and O's own view shows it, once, with the
    // choice's ref; O's other tab is shown it too, at the same seq.
    o.send(json!({"t": "game.move", "move": {"choice": "rock"}, "ref": "o1"}))
        .await;
    let held = o.until("game.state", None).await;
    assert_eq!(held["ref"], "o1", "{held}");
    assert_eq!(held["view"]["pendingChoice"], "rock", "{held}");
    let elsewhere = o_tab.until("game.state", None).await;
    assert_eq!(elsewhere["view"]["pendingChoice"], "rock", "{elsewhere}");
    assert_eq!(
        (elsewhere["seq"].clone(), elsewhere.get("ref")),
        (held["seq"].clone(), None)
    );
    // X chooses: the hub commits both and reveals both; the game ends.
    x.send(json!({"t": "game.move", "move": {"choice": "paper"}, "ref": "x1"}))
        .await;
    for ws in [&mut x, &mut o, &mut watcher] {
        loop {
            let m = ws.until("game.state", None).await;
            if m["result"]["status"] == "win" {
                assert_eq!(m["result"]["winner"], "X", "{m}");
                break;
            }
        }
    }

    // Reveals are X's (seq 3) then O's (seq 4): before its own reveal, a seat's choice is
    // in no view but its own.
    let before = |frames: &[String], seq_limit: u64, word: &str| {
        for f in frames {
            let mut v: Value = serde_json::from_str(f).expect("JSON");
            let mut k = Vec::new();
            keys(&v, &mut k);
            assert!(!k.iter().any(|k| k.contains("nonce")), "a nonce field: {f}");
            // The protocol's name mentions every choice; the rest of the state must not.
            if let Some(state) = v.as_object_mut() {
                state.remove("protocol");
            }
            if v["seq"].as_u64().is_some_and(|s| s < seq_limit) {
                let text = v.to_string();
                assert!(
                    !text.contains(word),
                    "{word} leaked before seq {seq_limit}: {f}"
                );
            }
        }
    };
    before(&x.frames, 4, "rock");
    before(&watcher.frames, 4, "rock");
    before(&o.frames, 3, "paper");
    before(&o_tab.frames, 3, "paper");
    before(&watcher.frames, 3, "paper");
    // The chooser's socket was told its held choice once: a frame of the same seq and
    // bytes is not sent twice.
    let held_frames = o.frames.iter().filter(|f| {
        let v: Value = serde_json::from_str(f).expect("JSON");
        v["seq"] == held["seq"] && v["view"]["pendingChoice"] == "rock"
    });
    assert_eq!(held_frames.count(), 1, "{:?}", o.frames);
    // The views did show the choices once revealed.
    assert!(x.frames.last().is_some_and(|f| f.contains("rock")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_the_same_token_resumes_the_game_and_hello_switches_seat() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-resume");
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    play(&mut x, 0, 0, "x1").await;
    x.close().await;

    let mut o = Ws::connect(&hub).await;
    o.hello(Some(&g.o)).await;
    play(&mut o, 1, 1, "o1").await;

    // X comes back on a new socket: the current board, then the game goes on.
    let mut x = Ws::connect(&hub).await;
    let (_, state) = x.hello(Some(&g.x)).await;
    let state = state.expect("a state");
    assert_eq!(
        (state["seq"].clone(), state["seat"].clone()),
        (json!(2), json!("X"))
    );
    let next = play(&mut x, 0, 1, "x2").await;
    assert_eq!(next["seq"], 3);
    assert_eq!(o.until("game.state", Some(3)).await["seat"], "O");

    // A later hello switches the socket to the other seat.
    let (ok, state) = x.hello(Some(&g.o)).await;
    assert_eq!(ok["seat"], "O");
    assert_eq!(state.expect("a state")["seat"], "O");
    let as_o = play(&mut x, 2, 2, "now-o").await;
    assert_eq!(
        (as_o["seq"].clone(), as_o["seat"].clone()),
        (json!(4), json!("O"))
    );
    // An unknown token is refused without closing the socket.
    x.send(json!({"t": "hello", "token": "no-such-token"}))
        .await;
    let err = x.until("error", None).await;
    assert_eq!(
        (err["error"].clone(), err["close"].clone()),
        (json!("unauthorized"), json!(false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_moves_is_rate_limited_with_the_budget_http_shares() {
    let hub = Hub::start(&["--rate-limit", "5/60"]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-flood");
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    // Written at once, as one burst: the hub reads them faster than it can write the
    // answers, which must wait for the client, not drop it as one that does not read.
    let flood = 300;
    for i in 0..flood {
        let (row, col) = (i / 3 % 3, i % 3);
        let text = json!({"t": "game.move", "move": {"row": row, "col": col}, "ref": i});
        x.socket
            .feed(Message::Text(text.to_string().into()))
            .await
            .expect("the burst is buffered");
    }
    x.socket.flush().await.expect("the burst is written");
    let (mut limited, mut refereed) = (0, 0);
    let mut answered = 0;
    while answered < flood {
        let m = x.recv().await;
        if m["ref"].is_null() {
            continue;
        }
        answered += 1;
        if m["t"] == "game.refused" && m["error"] == "rate_limited" {
            assert!(m["detail"]
                .as_str()
                .is_some_and(|d| d.contains("retry after")));
            // The wait in whole seconds, as HTTP's Retry-After, for a client to read.
            assert!(m["retryAfter"].as_u64().is_some_and(|s| s >= 1), "{m}");
            limited += 1;
        } else {
            refereed += 1;
        }
    }
    assert_eq!(refereed, 5, "the budget of 5 let exactly 5 through");
    assert_eq!(limited, flood - 5);
    // The same person over HTTP finds the budget spent.
    let res = tokio::task::block_in_place(|| {
        c.post(
            &hub.url(&g.path("/moves")),
            Some(&g.x),
            &json!({"move": {"row": 2, "col": 2}}),
        )
    });
    assert_eq!(res.status, 429, "{}", res.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_dropped_without_delaying_other_games() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    // A big board makes big states, so the lazy client's buffers fill quickly.
    let big = Game::new(
        &hub,
        &c,
        "ws-lazy",
        json!({"protocol": TTT, "rules": {"rows": 64, "cols": 64, "winLength": 5}}),
    );
    let g = ttt(&hub, &c, "ws-busy");

    let mut lazy = Ws::connect_small(&hub).await;
    lazy.hello(Some(&big.x)).await;
    let asked = 5000;
    let lazy_task = tokio::spawn(ask_boards_unread(lazy, asked));

    // Meanwhile another game is played over sockets, each move seen by the opponent fast.
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    let mut o = Ws::connect(&hub).await;
    o.hello(Some(&g.o)).await;
    let script = [
        ("X", 0, 0),
        ("O", 1, 0),
        ("X", 0, 1),
        ("O", 1, 1),
        ("X", 0, 2),
    ];
    let mut worst = Duration::ZERO;
    for (seq, (seat, row, col)) in script.into_iter().enumerate() {
        let (mover, other) = if seat == "X" {
            (&mut x, &mut o)
        } else {
            (&mut o, &mut x)
        };
        let started = Instant::now();
        play(mover, row, col, &format!("m{seq}")).await;
        other.until("game.state", Some(seq as u64 + 1)).await;
        worst = worst.max(started.elapsed());
    }
    assert!(
        worst < Duration::from_secs(1),
        "a move took {worst:?} to reach the opponent"
    );

    // The hub cuts the lazy client off while it still does not read: the connection
    // gauge drops to the two players' sockets.
    let dropped = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if websocket_connections(&hub, &c) == Some(2) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    });
    let mut lazy = lazy_task.await.expect("the lazy client sent its asks");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (got, closed) = lazy.drain(deadline).await;
    assert!(
        dropped,
        "the lazy client was never dropped ({got} answers read)"
    );
    assert!(
        closed,
        "the lazy client's socket stayed open ({got} answers read)"
    );
    assert!(
        got < asked,
        "the lazy client got all {got} answers: never dropped"
    );
    // Operators see why it went.
    assert_eq!(
        metric(&hub, &c, "pipehub_websocket_closed_total{reason=\"slow\"}"),
        Some(1)
    );
    // The players' sockets are still fine.
    x.send(json!({"t": "game.board"})).await;
    assert_eq!(x.until("game.state", None).await["seq"], 5);
}

/// Sends `asked` `game.board`s on `lazy` and reads nothing; stops early once the hub cuts
/// the client off. Gives the socket back, unread.
async fn ask_boards_unread(mut lazy: Ws, asked: usize) -> Ws {
    use futures_util::SinkExt;
    let ask = json!({"t": "game.board"}).to_string();
    for _ in 0..asked {
        let frame = tokio_tungstenite::tungstenite::Message::text(ask.clone());
        let sent = tokio::time::timeout(Duration::from_secs(2), lazy.socket.send(frame)).await;
        if !matches!(sent, Ok(Ok(()))) {
            break;
        }
    }
    lazy
}

/// The hub's open files, its connections among them.
fn open_files(hub: &Hub) -> usize {
    let pid = hub.pid().expect("the hub runs");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A client that never reads is not only dropped by its session: its connection, which
/// still held the frames handed to it (and their memory), is closed too, within the send
/// timeout. It stayed open for as long as the client kept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_has_its_connection_closed() {
    let hub = Hub::start(&["--send-timeout", "2"]);
    let c = Client::new();
    let big = Game::new(
        &hub,
        &c,
        "ws-never",
        json!({"protocol": TTT, "rules": {"rows": 64, "cols": 64, "winLength": 5}}),
    );
    let before = open_files(&hub);
    let mut lazy = Ws::connect_small(&hub).await;
    lazy.hello(Some(&big.x)).await;
    // Kept, unread, for the rest of the test.
    let sender = tokio::spawn(ask_boards_unread(lazy, 5000));
    let closed = tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            // Whichever came first, the session's drop (`slow`) or the kernel's close.
            if websocket_connections(&hub, &c) == Some(0) && open_files(&hub) <= before {
                return true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        false
    });
    let lazy = sender.await.expect("the asks were sent");
    assert!(
        closed,
        "the connection of a client that does not read stayed open: {} files against {before}",
        open_files(&hub)
    );
    drop(lazy);
}

/// `pipehub_websocket_connections` from the hub's metrics.
fn websocket_connections(hub: &Hub, c: &Client) -> Option<u64> {
    metric(hub, c, "pipehub_websocket_connections")
}

/// One series of the hub's metrics (its name, and labels as the exposition spells them).
fn metric(hub: &Hub, c: &Client, series: &str) -> Option<u64> {
    Some(metric_sum(c, hub, series) as u64)
}

/// A tic-tac-toe game created in `inbox` and not paired: the create's answer.
fn waiting_game(hub: &Hub, c: &Client, inbox: &str) -> Value {
    let created = c.post(
        &hub.url(&format!("/v1/inboxes/{inbox}/games")),
        None,
        &json!({"protocol": TTT}),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    created.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_hears_when_its_guest_pairs() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let created = waiting_game(&hub, &c, "ws-pair");
    let mut x = Ws::connect(&hub).await;
    let token = created["token"].as_str().expect("a token").to_string();
    let (_, state) = x.hello(Some(&token)).await;
    let state = state.expect("a state");
    assert_eq!(
        (state["phase"].clone(), state["seq"].clone()),
        (json!("waiting"), Value::Null)
    );

    let paired = tokio::task::block_in_place(|| {
        c.post(
            &hub.url("/v1/pair"),
            None,
            &json!({"code": created["pairingCode"]}),
        )
    });
    assert_eq!(paired.status, 200, "{}", paired.body);
    // The hub writes the start of this hub-held game; X's socket hears of it unasked,
    // and of nothing it was shown already: the waiting state came with the hello, once.
    let started = loop {
        let m = x.recv().await;
        assert_eq!(m["t"], "game.state", "{m}");
        assert_ne!(
            m["phase"], "waiting",
            "a state shown already came again: {m}"
        );
        if m["phase"] == "started" {
            break m;
        }
    };
    assert_eq!(started["seq"], 0);
    assert_eq!(started["keys"]["O"].as_str().map(str::len), Some(64));
}

/// A game its host cancels is gone, and whoever watched it hears so at once: X's own
/// socket (a chat box in another tab, say) and a spectator each get `error` `not_found`,
/// stay open, and watch nothing from then on; X's token opens nothing any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sockets_of_a_cancelled_game_are_told_it_is_gone() {
    let hub = Hub::start(&[]);
    let c = Client::new();
    let created = waiting_game(&hub, &c, "ws-cancel");
    let (game, token) = (
        created["game"].as_str().expect("a game").to_string(),
        created["token"].as_str().expect("a token").to_string(),
    );
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&token)).await;
    let mut watcher = Ws::connect(&hub).await;
    watcher.hello(None).await;
    watcher
        .send(json!({"t": "game.subscribe", "inbox": "ws-cancel", "game": game}))
        .await;
    assert_eq!(watcher.until("game.state", None).await["phase"], "waiting");

    let cancelled = tokio::task::block_in_place(|| {
        c.send(
            "DELETE",
            &hub.url(&format!("/v1/inboxes/ws-cancel/games/{game}")),
            Some(&token),
            None,
            None,
        )
    });
    assert_eq!(cancelled.status, 204, "{}", cancelled.body);
    // X's socket is as before its first hello, and is refused a board as any command is
    // then; the spectator's watches nothing.
    for (socket, board_error) in [(&mut x, "unauthorized"), (&mut watcher, "not_found")] {
        let told = socket.recv().await;
        assert_eq!(
            (&told["t"], &told["error"], &told["close"]),
            (&json!("error"), &json!("not_found"), &json!(false)),
            "{told}"
        );
        assert_eq!(
            told["detail"],
            "the game was cancelled before anyone joined"
        );
        // Open, and watching nothing.
        socket.send(json!({"t": "game.board"})).await;
        let board = socket.recv().await;
        assert_eq!(
            (&board["t"], &board["error"]),
            (&json!("error"), &json!(board_error)),
            "{board}"
        );
    }
    // X's socket is as before its first hello: a move is refused until it says hello.
    x.send(json!({"t": "game.move", "move": {"row": 0, "col": 0}, "ref": "late"}))
        .await;
    let late = x.recv().await;
    assert_eq!(
        (&late["t"], &late["error"]),
        (&json!("error"), &json!("unauthorized")),
        "{late}"
    );
    x.send(json!({"t": "hello", "token": token})).await;
    assert_eq!(x.recv().await["error"], "unauthorized");
}

/// A hub told to stop (SIGTERM) closes its sockets as going away (1001) at once, a seat's
/// and a spectator's alike, so that their clients reconnect rather than wait out the
/// grace period the hub gives HTTP requests (10 s); and it then exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_hub_closes_its_sockets_as_going_away() {
    let mut hub = Hub::start(&[]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-stop");
    let mut x = Ws::connect(&hub).await;
    x.hello(Some(&g.x)).await;
    let mut watcher = Ws::connect(&hub).await;
    watcher.hello(None).await;
    let began = Instant::now();
    let stopping = tokio::task::spawn_blocking(move || (hub.terminate(), began.elapsed()));
    assert_eq!(x.close_code().await, Some(1001));
    assert_eq!(watcher.close_code().await, Some(1001));
    let (exit, took) = stopping.await.expect("the stopping thread");
    assert_eq!(exit, Some(0));
    // Left open, the sockets held the hub for the whole 10 s.
    assert!(
        took < Duration::from_secs(5),
        "the hub took {took:?} to stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_cap_of_sockets_and_gets_a_slot_back_when_one_closes() {
    // Clients are named by X-Forwarded-For through a trusted proxy, as behind a real one.
    let hub = Hub::start(&[
        "--trusted-proxy",
        "127.0.0.1",
        "--max-sockets-per-address",
        "2",
    ]);
    let c = Client::new();
    let g = ttt(&hub, &c, "ws-cap");

    let mut first = Ws::connect_as(&hub, "203.0.113.7").await.expect("first");
    let second = Ws::connect_as(&hub, "203.0.113.7").await.expect("second");
    let (status, retry_after, body) = Ws::connect_as(&hub, "203.0.113.7")
        .await
        .err()
        .expect("a third socket from the same address is refused");
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"], "rate_limited", "{body}");
    assert!(
        body["detail"].as_str().is_some_and(|d| d.contains('2')),
        "{body}"
    );
    assert!(
        retry_after.is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n >= 1)),
        "a refusal says when to try again"
    );
    // The same /64 is the same client; another address or /64 is not.
    let mut v6 = Ws::connect_as(&hub, "2001:db8:7:7::1").await.expect("v6");
    let _v6b = Ws::connect_as(&hub, "2001:db8:7:7::2")
        .await
        .expect("v6, 2");
    assert_eq!(
        Ws::connect_as(&hub, "2001:db8:7:7:ffff::3")
            .await
            .err()
            .map(|e| e.0),
        Some(429)
    );
    let _other = Ws::connect_as(&hub, "203.0.113.8")
        .await
        .expect("another address");
    // Loopback clients (here: no forwarded address) are the host's own, and not counted.
    let mut own = Vec::new();
    for _ in 0..4 {
        own.push(Ws::connect(&hub).await);
    }

    // The sockets that were admitted work as any other.
    let (ok, _) = first.hello(Some(&g.x)).await;
    assert_eq!(ok["seat"], "X");
    let (ok, _) = v6.hello(None).await;
    assert_eq!(ok["seat"], Value::Null);

    // A closed socket gives its slot back (once the hub has seen it close).
    second.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let again = loop {
        match Ws::connect_as(&hub, "203.0.113.7").await {
            Ok(ws) => break ws,
            Err((429, _, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the slot never came back: {e:?}"),
        }
    };
    drop(again);

    // Operators see the refusals.
    let refused = metric(
        &hub,
        &c,
        "pipehub_rate_limited_requests_total{limit=\"sockets\"}",
    );
    assert!(refused >= Some(2), "{refused:?} sockets refused");
}

/// A small deterministic generator (xorshift64*), so the random frames below are the same
/// every run and a failure reproduces.
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Any JSON value, nested a little.
    fn value(&mut self, depth: u32) -> Value {
        match self.below(if depth > 2 { 6 } else { 8 }) {
            0 => Value::Null,
            1 => json!(self.below(2) == 0),
            2 => json!(self.below(20) as i64 - 5),
            3 => json!(*self.pick(&[1.5, -0.0, 1e300, 9_007_199_254_740_993.0])),
            4 => json!(*self.pick(&["", "rock", "x", "g", "\u{0}", "ü"])),
            5 => json!("y".repeat(self.below(60) as usize)),
            6 => Value::Array((0..self.below(3)).map(|_| self.value(depth + 1)).collect()),
            _ => {
                let keys = [
                    "t", "move", "ref", "row", "col", "choice", "token", "inbox", "game",
                ];
                let mut map = serde_json::Map::new();
                for _ in 0..self.below(4) {
                    map.insert((*self.pick(&keys)).into(), self.value(depth + 1));
                }
                Value::Object(map)
            }
        }
    }

    /// One client frame: mostly the relay's own messages with random or wrong fields,
    /// sometimes not JSON at all.
    fn frame(&mut self, tokens: &[String], games: &[(String, String)]) -> String {
        match self.below(20) {
            0 => "{".repeat(1 + self.below(40) as usize),
            1 => "not json at all".into(),
            2 => self.value(0).to_string(),
            _ => {
                let t = *self.pick(&[
                    "hello",
                    "game.move",
                    "game.resign",
                    "game.board",
                    "game.subscribe",
                    "game.jump",
                ]);
                let mut m = json!({ "t": t });
                match t {
                    "hello" if self.below(4) > 0 => {
                        m["token"] = json!(self.pick(tokens));
                    }
                    "hello" => m["token"] = self.value(1),
                    "game.move" => {
                        m["move"] = match self.below(3) {
                            0 => json!({"row": self.below(4), "col": self.below(4)}),
                            1 => json!({"choice": self.pick(&["rock", "paper", "lizard"])}),
                            _ => self.value(1),
                        };
                        m["ref"] = json!(format!("r{}", self.below(100)));
                    }
                    "game.subscribe" => {
                        let (inbox, game) = self.pick(games).clone();
                        m["inbox"] = json!(inbox);
                        m["game"] = if self.below(5) > 0 {
                            json!(game)
                        } else {
                            self.value(1)
                        };
                    }
                    _ => {}
                }
                if self.below(6) == 0 {
                    m[*self.pick(&["ref", "move", "extra", "t"])] = self.value(1);
                }
                m.to_string()
            }
        }
    }
}

/// Random frames from several sockets at once, the same every run: each answer is one of
/// the relay's messages with a reason code of its table, a socket is closed only after an
/// `error` that says so, and the hub stays up with its games playable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_frames_get_answers_from_the_message_table_and_never_break_the_hub() {
    let hub = Hub::start(&["--rate-limit", "1000000/1"]);
    let c = Client::new();
    let games: Vec<Game> = (0..4)
        .map(|i| {
            let protocol = if i % 2 == 0 { TTT } else { RPS };
            Game::new(
                &hub,
                &c,
                "fuzz",
                json!({"protocol": protocol, "signed": i < 2}),
            )
        })
        .collect();
    let tokens: Vec<String> = games
        .iter()
        .flat_map(|g| [g.x.clone(), g.o.clone()])
        .chain(["nope".to_string(), String::new()])
        .collect();
    let ids: Vec<(String, String)> = games
        .iter()
        .map(|g| (g.inbox.clone(), g.game.clone()))
        .chain([("nope".to_string(), "nope".to_string())])
        .collect();
    // The relay's own codes and the hub's (as HTTP answers them); a refusal may also
    // carry any reason of DESIGN.md sections 1-2.
    let codes = [
        "bad_json",
        "schema",
        "unknown_message",
        "unauthorized",
        "forbidden",
        "not_found",
        "bad_request",
        "rate_limited",
        "agent_held",
        "not_started",
        "too_many_captures",
        "unavailable",
    ];

    let sockets = (0..8u64).map(|n| {
        let (hub, tokens, ids) = (&hub, &tokens, &ids);
        async move {
            let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (n + 1));
            let mut ws = Ws::connect(hub).await;
            let mut answers = 0;
            for _ in 0..80 {
                ws.send_text(dice.frame(tokens, ids)).await;
                // Whatever came back by now, without waiting for anything in particular.
                loop {
                    let wait = tokio::time::Instant::now() + Duration::from_millis(20);
                    match tokio::time::timeout_at(wait, ws.next()).await {
                        Err(_) => break,
                        Ok(None) => panic!("socket {n} closed without an error saying so"),
                        Ok(Some(m)) => {
                            answers += 1;
                            let t = m["t"].as_str().unwrap_or_default().to_string();
                            assert!(
                                ["hello.ok", "game.state", "game.refused", "error"]
                                    .contains(&t.as_str()),
                                "{m}"
                            );
                            if t == "error" {
                                assert_eq!(m["close"], false, "{m}");
                            }
                        }
                    }
                }
            }
            (ws, answers)
        }
    });
    let results = futures_util::future::join_all(sockets).await;
    let answered: usize = results.iter().map(|(_, a)| a).sum();
    assert!(answered >= 8 * 80 / 2, "{answered} answers to 640 frames");
    for (ws, _) in results {
        for frame in &ws.frames {
            let m: Value = serde_json::from_str(frame).expect("JSON");
            if m["t"] == "error" || m["t"] == "game.refused" {
                let code = m["error"].as_str().unwrap_or_default();
                let refereed = games::Reason::ALL.iter().any(|r| r.code() == code);
                assert!(codes.contains(&code) || refereed, "unknown code in {m}");
            }
        }
        ws.close().await;
    }

    // The hub is up and every game still answers a seat.
    assert_eq!(c.get(&hub.url("/healthz")).status, 200);
    for g in &games {
        let mut ws = Ws::connect(&hub).await;
        let (ok, state) = ws.hello(Some(&g.x)).await;
        assert_eq!(ok["seat"], "X", "{ok}");
        assert!(state.is_some_and(|s| s["game"] == json!(g.game)));
    }
    assert!(!hub.log().contains("panicked"), "{}", hub.log());
}
