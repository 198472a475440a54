//! The relay on its own: a real actix-web server on 127.0.0.1:0 with the `/v1/ws` route and
//! a scripted [`Games`] service standing in for the hub, driven by a WebSocket client.
//!
//! The script publishes each accepted move into the rooms *before* answering the mover, as
//! the hub's actors do, so these tests pin down the session's ordering rules: the mover
//! gets exactly one state per move, carrying its ref; everyone else gets it once, without.
//!
//! No test sleeps to put one event before another: the script answers a move only once
//! every socket in the room has taken its publication ([`Rooms::unread`]), a publication
//! meant to come after the answer is made by the test once the answer has arrived, and
//! "nothing else was sent" is checked by a later move whose answer must come next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpServer};
use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use games::Seat;
use relay::{
    Cause, Delivery, Ended, Failure, Games, Heartbeat, Outcome, Relay, Rooms, SeatRef, StateFrame,
    Views,
};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(5);

/// One game "i/g" whose seq goes up by one per accepted move.
struct Script {
    rooms: Rooms,
    seq: AtomicU64,
    /// How many plays the scripted limiter lets through.
    budget: AtomicU64,
    /// Publish each accepted move only after answering the mover (the other order): the
    /// script keeps the publication here, and the test makes it once the answer arrived.
    late: Option<Late>,
    /// Why each socket that closed did, in the order they closed.
    closed: Closed,
}

type Closed = Arc<Mutex<Vec<Ended>>>;

/// Publications of accepted moves held back for the test to make, in the late order.
type Late = Arc<Mutex<Vec<Delivery>>>;

impl Script {
    fn frame(&self, seat: Option<Seat>, seq: u64) -> StateFrame {
        let seat = seat.map(Seat::as_str);
        StateFrame::encode(Some(seq), &json!({"game": "g", "seat": seat, "seq": seq}))
            .expect("an object")
    }

    fn views(&self, seq: u64) -> Views {
        Views {
            x: Some(self.frame(Some(Seat::X), seq)),
            o: Some(self.frame(Some(Seat::O), seq)),
            spectator: Some(self.frame(None, seq)),
        }
    }

    /// Waits until every socket in the room has taken what was published, so that the
    /// answer that follows comes after it. The mover's own session takes it while this
    /// play waits (both run on its one task), the others on the relay's worker.
    async fn seen(&self) {
        taken(&self.rooms).await;
    }
}

/// Waits, within [`WAIT`], until every socket in the game's room has taken every
/// publication (a session handles what it takes at once).
async fn taken(rooms: &Rooms) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while rooms.unread("i", "g") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the room's sockets did not take its publications within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[async_trait]
impl Games for Script {
    async fn open_seat(&self, token: &str) -> Result<Option<SeatRef>, Failure> {
        let seat = match token {
            "tx" => Seat::X,
            "to" => Seat::O,
            "down" => return Err(Failure::new("unavailable", "the store is down")),
            _ => return Ok(None),
        };
        Ok(Some(SeatRef {
            inbox: "i".into(),
            game: "g".into(),
            seat,
            person: [seat as u8; 32],
        }))
    }

    async fn state(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
    ) -> Result<StateFrame, Failure> {
        if (inbox, game) != ("i", "g") {
            return Err(Failure::new("not_found", "no such game"));
        }
        Ok(self.frame(seat, self.seq.load(Ordering::SeqCst)))
    }

    async fn play(&self, seat: &SeatRef, mv: Value) -> Result<Outcome, Failure> {
        if self.budget.fetch_sub(1, Ordering::SeqCst) == 0 {
            self.budget.store(0, Ordering::SeqCst);
            return Err(Failure::new("rate_limited", "retry after 1 s"));
        }
        let now = self.seq.load(Ordering::SeqCst);
        if mv["bad"] == true {
            return Ok(Outcome::Rejected {
                error: "illegal_move".into(),
                detail: Some("occupied".into()),
                state: self.frame(Some(seat.seat), now),
            });
        }
        if mv["custodial"] == true {
            // As a custodial move makes: the seat's event, one more the hub writes for it,
            // then the other seat's, all published before the mover is answered with the
            // state after the first (a node that does not own the game hears them first).
            let other = if seat.seat == Seat::X {
                Seat::O
            } else {
                Seat::X
            };
            for (i, cause) in [seat.seat, seat.seat, other].into_iter().enumerate() {
                let delivery = Delivery {
                    cause: Cause::Accepted { seat: Some(cause) },
                    views: self.views(now + 1 + i as u64),
                };
                self.rooms.publish("i", "g", delivery);
            }
            self.seq.store(now + 3, Ordering::SeqCst);
            self.seen().await;
            return Ok(Outcome::Accepted(self.frame(Some(seat.seat), now + 1)));
        }
        if let Some(choice) = mv["hold"].as_str() {
            // A rock-paper-scissors choice held for the seat's commit turn: no event, the
            // seat's own view alone shows it, at the seq it had, published to the room
            // (every socket of that seat) as the mover is answered with it.
            let held = |choice: &str| {
                let frame = StateFrame::encode(
                    Some(now),
                    &json!({"game": "g", "seat": seat.seat.as_str(), "seq": now, "held": choice}),
                )
                .expect("an object");
                let mut views = Views::default();
                match seat.seat {
                    Seat::X => views.x = Some(frame.clone()),
                    Seat::O => views.o = Some(frame.clone()),
                }
                let delivery = Delivery {
                    cause: Cause::Held { seat: seat.seat },
                    views,
                };
                (frame, delivery)
            };
            if let Some(first) = mv["after"].as_str() {
                // The seat's other tab chose `first` a moment before: its publication
                // reaches this socket while its own choice is in flight.
                self.rooms.publish("i", "g", held(first).1);
                self.seen().await;
            }
            let (held, delivery) = held(choice);
            if let Some(late) = &self.late {
                late.lock().expect("not poisoned").push(delivery);
            } else {
                self.rooms.publish("i", "g", delivery);
                self.seen().await;
            }
            return Ok(Outcome::Held(held));
        }
        let seq = now + 1;
        self.seq.store(seq, Ordering::SeqCst);
        let delivery = Delivery {
            cause: Cause::Accepted {
                seat: Some(seat.seat),
            },
            views: self.views(seq),
        };
        if mv["lost_race"] == true {
            // Another socket of the same seat won this seq: its event is published (to
            // every socket of the seat, this one too) before this move is refused.
            self.rooms.publish("i", "g", delivery);
            self.seen().await;
            return Ok(Outcome::Rejected {
                error: "stale_seq".into(),
                detail: None,
                state: self.frame(Some(seat.seat), seq),
            });
        }
        if let Some(late) = &self.late {
            late.lock().expect("not poisoned").push(delivery);
        } else {
            self.rooms.publish("i", "g", delivery);
            // The publication reaches the sockets before the answer does.
            self.seen().await;
        }
        Ok(Outcome::Accepted(self.frame(Some(seat.seat), seq)))
    }

    async fn resign(&self, seat: &SeatRef) -> Result<Outcome, Failure> {
        self.play(seat, json!({})).await
    }

    fn closed(&self, why: Ended) {
        self.closed.lock().expect("not poisoned").push(why);
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn start(budget: u64) -> String {
    start_with(budget, Heartbeat::default()).await
}

async fn start_with(budget: u64, heartbeat: Heartbeat) -> String {
    serve_recording(budget, heartbeat, false).await.url
}

/// A relay under test, and the script's handles the tests look at or drive.
struct Served {
    url: String,
    /// What the relay reported of each socket's end.
    closed: Closed,
    rooms: Rooms,
    /// In the late order, the publications the test is to make.
    late: Late,
}

impl Served {
    /// Makes the publications held back in the late order, and waits until every socket
    /// has taken them.
    async fn publish_late(&self) {
        let held = std::mem::take(&mut *self.late.lock().expect("not poisoned"));
        for delivery in held {
            self.rooms.publish("i", "g", delivery);
        }
        taken(&self.rooms).await;
    }
}

/// A relay whose script allows `budget` plays, publishing each accepted move before its
/// answer or, `late`, after it; with handles on what the script sees.
async fn serve_recording(budget: u64, heartbeat: Heartbeat, late: bool) -> Served {
    let rooms = Rooms::new();
    let closed = Closed::default();
    let held = Late::default();
    let script = Script {
        rooms: rooms.clone(),
        seq: AtomicU64::new(0),
        budget: AtomicU64::new(budget),
        late: late.then(|| held.clone()),
        closed: closed.clone(),
    };
    let relay = Relay::new(Arc::new(script), rooms.clone()).with_heartbeat(heartbeat);
    let server = HttpServer::new(move || App::new().configure(relay::configure(relay.clone())))
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .expect("a free port");
    let addr = server.addrs()[0];
    actix_rt::spawn(server.run());
    Served {
        url: format!("ws://{addr}/v1/ws"),
        closed,
        rooms,
        late: held,
    }
}

/// Waits, within [`WAIT`], until the relay has reported `n` sockets' ends; returns them.
async fn ends(closed: &Closed, n: usize) -> Vec<Ended> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let seen = closed.lock().expect("not poisoned").clone();
        if seen.len() >= n || tokio::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn connect(url: &str) -> Socket {
    let (socket, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("the relay accepts the WebSocket");
    socket
}

async fn send(ws: &mut Socket, v: Value) {
    ws.send(Message::text(v.to_string())).await.expect("sent");
}

/// The next JSON message, or `None` when nothing arrives within `wait` (pings and pongs
/// do not count as messages, nor extend the wait).
async fn next(ws: &mut Socket, wait: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return serde_json::from_str(&t).ok(),
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
            Ok(Some(Ok(_))) => continue,
        }
    }
}

/// What the relay sends until it closes the socket: its JSON messages, then the close
/// frame's code and reason (`None` when the connection ends without one).
async fn until_closed(ws: &mut Socket) -> (Vec<Value>, Option<(u16, String)>) {
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let frame = tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("the relay closes the socket within the wait");
        match frame {
            Some(Ok(Message::Text(t))) => seen.push(serde_json::from_str(&t).expect("JSON")),
            Some(Ok(Message::Close(frame))) => {
                let close = frame.map(|f| (u16::from(f.code), f.reason.as_str().to_owned()));
                return (seen, close);
            }
            None | Some(Err(_)) => return (seen, None),
            Some(Ok(_)) => continue,
        }
    }
}

async fn recv(ws: &mut Socket) -> Value {
    next(ws, WAIT).await.expect("a message")
}

/// Writes bytes to the socket's connection as they are, below the WebSocket layer.
async fn write_raw(ws: &mut Socket, raw: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let tcp = match ws.get_mut() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => tcp,
        _ => panic!("a plain socket"),
    };
    tcp.write_all(raw).await.expect("written");
    tcp.flush().await.expect("flushed");
}

async fn seated(url: &str, token: &str) -> Socket {
    let mut ws = connect(url).await;
    send(&mut ws, json!({"t": "hello", "token": token})).await;
    assert_eq!(recv(&mut ws).await["t"], "hello.ok");
    assert_eq!(recv(&mut ws).await["t"], "game.state");
    ws
}

#[actix_rt::test]
async fn the_mover_gets_one_state_with_its_ref_and_everyone_else_one_without() {
    let url = start(100).await;
    let mut x = seated(&url, "tx").await;
    let mut o = seated(&url, "to").await;
    let mut watcher = connect(&url).await;
    send(&mut watcher, json!({"t": "hello"})).await;
    assert_eq!(
        recv(&mut watcher).await,
        json!({"t": "hello.ok", "seat": null, "inbox": null, "game": null})
    );
    send(
        &mut watcher,
        json!({"t": "game.subscribe", "inbox": "i", "game": "g"}),
    )
    .await;
    assert_eq!(recv(&mut watcher).await["seq"], 0);

    for (seq, r) in [(1, "a"), (2, "b"), (3, "c")] {
        send(&mut x, json!({"t": "game.move", "move": {}, "ref": r})).await;
        assert_eq!(
            recv(&mut x).await,
            json!({"t": "game.state", "ref": r, "game": "g", "seat": "X", "seq": seq})
        );
        assert_eq!(
            recv(&mut o).await,
            json!({"t": "game.state", "game": "g", "seat": "O", "seq": seq})
        );
        assert_eq!(
            recv(&mut watcher).await,
            json!({"t": "game.state", "game": "g", "seat": null, "seq": seq})
        );
    }
    // Nothing else was sent, no duplicate of the mover's own publication: what comes next
    // is the next move's state, on every socket.
    send(&mut x, json!({"t": "game.move", "move": {}, "ref": "d"})).await;
    assert_eq!(
        recv(&mut x).await,
        json!({"t": "game.state", "ref": "d", "game": "g", "seat": "X", "seq": 4})
    );
    assert_eq!(recv(&mut o).await["seq"], 4);
    assert_eq!(recv(&mut watcher).await["seq"], 4);
}

#[actix_rt::test]
async fn a_move_that_makes_several_events_shows_each_in_order_with_the_ref_on_its_own() {
    // The mover saw seq 3, then seq 3 again with its ref: the states of its own move's
    // first events were held back for the answer and only the newest was sent.
    let url = start(100).await;
    let mut x = seated(&url, "tx").await;
    let mut o = seated(&url, "to").await;
    send(
        &mut x,
        json!({"t": "game.move", "move": {"custodial": true}, "ref": "c"}),
    )
    .await;
    // A plain move after it, answered as before; the socket runs one command at a time,
    // so everything the first one sent comes before the second one's answer.
    send(&mut x, json!({"t": "game.move", "move": {}, "ref": "d"})).await;
    let mut seen = Vec::new();
    loop {
        let frame = recv(&mut x).await;
        seen.push((frame["seq"].clone(), frame.get("ref").cloned()));
        if frame["ref"] == "d" {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            (json!(1), Some(json!("c"))),
            (json!(2), None),
            (json!(3), None),
            (json!(4), Some(json!("d")))
        ]
    );
    for seq in 1..=4 {
        assert_eq!(recv(&mut o).await["seq"], seq);
    }
}

#[actix_rt::test]
async fn a_publication_that_comes_after_the_answer_is_not_shown_twice() {
    let served = serve_recording(100, Heartbeat::default(), true).await;
    let mut x = seated(&served.url, "tx").await;
    let mut o = seated(&served.url, "to").await;
    for (seq, r) in [(1, "a"), (2, "b"), (3, "c")] {
        send(&mut x, json!({"t": "game.move", "move": {}, "ref": r})).await;
        // What the previous move's publication might have sent again comes first.
        assert_eq!(
            recv(&mut x).await,
            json!({"t": "game.state", "ref": r, "game": "g", "seat": "X", "seq": seq})
        );
        // The answer has arrived: now the publication.
        served.publish_late().await;
        assert_eq!(
            recv(&mut o).await,
            json!({"t": "game.state", "game": "g", "seat": "O", "seq": seq})
        );
    }
}

#[actix_rt::test]
async fn a_held_choice_reaches_every_socket_of_its_seat_once_whichever_comes_first() {
    for late in [false, true] {
        let served = serve_recording(100, Heartbeat::default(), late).await;
        let mut x = seated(&served.url, "tx").await;
        let mut x_tab = seated(&served.url, "tx").await;
        let mut o = seated(&served.url, "to").await;
        send(
            &mut x,
            json!({"t": "game.move", "move": {"hold": "rock"}, "ref": "h"}),
        )
        .await;
        let held = json!({"t": "game.state", "game": "g", "seat": "X", "seq": 0, "held": "rock"});
        let mut with_ref = held.clone();
        with_ref["ref"] = json!("h");
        assert_eq!(recv(&mut x).await, with_ref, "late: {late}");
        served.publish_late().await;
        assert_eq!(recv(&mut x_tab).await, held, "late: {late}");
        // Nothing more on the chooser's socket (the same state again) nor on O's: the next
        // move's state is what comes next on each.
        send(&mut o, json!({"t": "game.move", "move": {}, "ref": "o"})).await;
        assert_eq!(recv(&mut o).await["ref"], "o", "late: {late}");
        served.publish_late().await;
        let next = recv(&mut x).await;
        assert_eq!(
            (next["seq"].clone(), next.get("held")),
            (json!(1), None),
            "late: {late}"
        );
        assert_eq!(recv(&mut x_tab).await["seq"], 1, "late: {late}");
    }
}

#[actix_rt::test]
async fn a_choice_that_overtook_another_tabs_is_what_the_socket_shows_last() {
    // Paper from the other tab, then rock from this socket: the hub holds rock. The
    // socket was answered with rock while paper's publication waited for the answer, and
    // remembered rock as shown; rock's own publication, arriving after, was then dropped as
    // a duplicate, and the socket kept showing paper.
    let served = serve_recording(100, Heartbeat::default(), true).await;
    let mut x = seated(&served.url, "tx").await;
    send(
        &mut x,
        json!({"t": "game.move", "move": {"hold": "rock", "after": "paper"}, "ref": "h"}),
    )
    .await;
    let mut shown = Vec::new();
    while shown.last().is_none_or(|s: &Value| s["held"] != "rock") {
        let frame = next(&mut x, WAIT).await;
        let Some(frame) = frame else {
            panic!("the socket shows {shown:?}, not the rock the hub holds");
        };
        shown.push(frame);
        served.publish_late().await;
    }
    // Each choice was shown once, the move's ref on one of them.
    let held: Vec<_> = shown.iter().map(|s| s["held"].clone()).collect();
    assert_eq!(held, [json!("paper"), json!("rock")], "{shown:?}");
    let refs = shown.iter().filter(|s| s.get("ref").is_some()).count();
    assert_eq!(refs, 1, "{shown:?}");
}

#[actix_rt::test]
async fn a_move_that_lost_its_seq_to_the_same_seat_sees_the_winners_state_once() {
    let url = start(100).await;
    let mut x = seated(&url, "tx").await;
    send(
        &mut x,
        json!({"t": "game.move", "move": {"lost_race": true}, "ref": "late"}),
    )
    .await;
    let refused = recv(&mut x).await;
    assert_eq!(
        (&refused["t"], &refused["error"]),
        (&json!("game.refused"), &json!("stale_seq")),
        "{refused}"
    );
    assert_eq!(
        recv(&mut x).await,
        json!({"t": "game.state", "game": "g", "seat": "X", "seq": 1})
    );
    // Once: what comes next is the next move's answer.
    send(&mut x, json!({"t": "game.move", "move": {}, "ref": "m"})).await;
    assert_eq!(
        recv(&mut x).await,
        json!({"t": "game.state", "ref": "m", "game": "g", "seat": "X", "seq": 2})
    );
}

#[actix_rt::test]
async fn refusals_and_failures_are_followed_by_the_true_state() {
    let url = start(2).await;
    let mut x = seated(&url, "tx").await;
    send(
        &mut x,
        json!({"t": "game.move", "move": {"bad": true}, "ref": 1}),
    )
    .await;
    assert_eq!(
        recv(&mut x).await,
        json!({"t": "game.refused", "ref": 1, "error": "illegal_move", "detail": "occupied"})
    );
    assert_eq!(recv(&mut x).await["seq"], 0);
    // A move that is not strict JSON is refused with its section-1 reason before it
    // reaches the game, and spends none of the budget.
    for (text, reason) in [
        (
            r#"{"t":"game.move","move":{"col":1,"col":2},"ref":"d"}"#,
            "duplicate_key",
        ),
        (
            r#"{"t":"game.move","move":{"col":1.0},"ref":"d"}"#,
            "bad_number",
        ),
    ] {
        x.send(Message::text(text)).await.expect("sent");
        let refused = recv(&mut x).await;
        assert_eq!(
            (&refused["t"], &refused["ref"], &refused["error"]),
            (&json!("game.refused"), &json!("d"), &json!(reason)),
            "{refused}"
        );
        assert_eq!(recv(&mut x).await["seq"], 0);
    }
    send(&mut x, json!({"t": "game.move", "move": {}, "ref": 2})).await;
    assert_eq!(recv(&mut x).await["ref"], 2);
    // The budget is spent: refused by the limiter, then the board as it is.
    send(&mut x, json!({"t": "game.resign", "ref": "r"})).await;
    let limited = recv(&mut x).await;
    assert_eq!(
        (limited["t"].clone(), limited["error"].clone()),
        (json!("game.refused"), json!("rate_limited"))
    );
    assert_eq!(
        recv(&mut x).await,
        json!({"t": "game.state", "game": "g", "seat": "X", "seq": 1})
    );
}

#[actix_rt::test]
async fn messages_out_of_place_get_errors_that_leave_the_socket_open() {
    let url = start(10).await;
    let mut ws = connect(&url).await;
    let expect_error = |v: Value, code: &str| {
        assert_eq!(
            (v["t"].clone(), v["error"].clone(), v["close"].clone()),
            (json!("error"), json!(code), json!(false)),
            "{v}"
        );
    };
    // Before a hello, every command is refused alike.
    for command in [
        json!({"t": "game.subscribe", "inbox": "i", "game": "g"}),
        json!({"t": "game.board"}),
        json!({"t": "game.move", "move": {"row": 0, "col": 0}, "ref": 1}),
        json!({"t": "game.resign", "ref": 2}),
    ] {
        send(&mut ws, command.clone()).await;
        let refused = recv(&mut ws).await;
        expect_error(refused.clone(), "unauthorized");
        assert_eq!(refused["detail"], "say hello first", "{command}");
    }
    send(&mut ws, json!({"t": "hello", "token": "nobody"})).await;
    expect_error(recv(&mut ws).await, "unauthorized");
    // A token that could not be looked up is not an unknown one: a client told
    // `unauthorized` may throw its token away.
    send(&mut ws, json!({"t": "hello", "token": "down"})).await;
    expect_error(recv(&mut ws).await, "unavailable");
    send(&mut ws, json!({"t": "hello"})).await;
    assert_eq!(recv(&mut ws).await["t"], "hello.ok");
    send(&mut ws, json!({"t": "game.board"})).await;
    expect_error(recv(&mut ws).await, "not_found");
    send(
        &mut ws,
        json!({"t": "game.subscribe", "inbox": "i", "game": "nope"}),
    )
    .await;
    expect_error(recv(&mut ws).await, "not_found");
    send(&mut ws, json!({"t": "game.resign", "ref": 1})).await;
    expect_error(recv(&mut ws).await, "forbidden");
    ws.send(Message::binary(vec![1, 2, 3])).await.expect("sent");
    expect_error(recv(&mut ws).await, "bad_json");
    // Still serving: a subscription works.
    send(
        &mut ws,
        json!({"t": "game.subscribe", "inbox": "i", "game": "g"}),
    )
    .await;
    assert_eq!(recv(&mut ws).await["t"], "game.state");
}

#[actix_rt::test]
async fn only_a_client_not_heard_from_lately_is_pinged() {
    // An interval far above a stall of this test's thread on a busy machine: a talker
    // that stalled that long would be pinged, rightly.
    let heartbeat = Heartbeat {
        interval: Duration::from_millis(400),
        timeout: Duration::from_secs(10),
    };
    let url = start_with(10, heartbeat).await;
    let mut talker = seated(&url, "tx").await;
    let mut listener = seated(&url, "to").await;
    // For 2.4 s the talker asks for its board every 10 ms; the listener only reads.
    let (mut talker_pings, mut listener_pings, mut boards) = (0, 0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(2400);
    let mut ask = tokio::time::interval(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = ask.tick() => {
                if tokio::time::Instant::now() >= deadline {
                    break;
                }
                send(&mut talker, json!({"t": "game.board"})).await;
            }
            message = talker.next() => match message {
                Some(Ok(Message::Ping(_))) => talker_pings += 1,
                Some(Ok(Message::Text(_))) => boards += 1,
                other => panic!("the talker's socket ended: {other:?}"),
            },
            message = listener.next() => match message {
                Some(Ok(Message::Ping(_))) => listener_pings += 1,
                other => panic!("the listener got {other:?}"),
            },
        }
    }
    assert!(boards > 20, "the talker was answered ({boards} boards)");
    assert_eq!(talker_pings, 0, "a client that keeps talking is not pinged");
    assert!(
        listener_pings >= 3,
        "a client that only listens is pinged every interval ({listener_pings} pings)"
    );
}

#[actix_rt::test]
async fn a_client_that_answers_no_ping_is_dropped_after_the_idle_timeout() {
    // A timeout far above a stall of this test's thread on a busy machine, so that the
    // lively client, which answers pings only while the test reads it, stays lively.
    let heartbeat = Heartbeat {
        interval: Duration::from_millis(100),
        timeout: Duration::from_millis(600),
    };
    let Served { url, closed, .. } = serve_recording(10, heartbeat, false).await;
    let mut silent = seated(&url, "tx").await;
    let mut lively = seated(&url, "to").await;
    // The client library answers pings only while it reads: the lively one reads, the
    // silent one does not.
    for _ in 0..6 {
        assert_eq!(next(&mut lively, Duration::from_millis(200)).await, None);
    }
    let (said, close) = until_closed(&mut silent).await;
    assert_eq!(
        said.last(),
        Some(
            &json!({"t": "error", "error": "timeout", "detail": "no frame or pong within the idle timeout", "close": true})
        )
    );
    // Going away (1001), as a server that ends a connection does, not a policy breach.
    assert_eq!(close, Some((1001, "timeout".to_owned())));
    // The lively one is still served.
    send(&mut lively, json!({"t": "game.board"})).await;
    assert_eq!(recv(&mut lively).await["t"], "game.state");
    assert_eq!(ends(&closed, 1).await, vec![Ended::Idle]);
}

#[actix_rt::test]
async fn each_socket_that_ends_is_reported_with_its_cause() {
    let Served { url, closed, .. } = serve_recording(10, Heartbeat::default(), false).await;
    // A close frame.
    let mut ws = seated(&url, "tx").await;
    ws.close(None).await.expect("closed");
    assert_eq!(ends(&closed, 1).await, vec![Ended::Client]);
    // The connection dropped without one.
    drop(seated(&url, "tx").await);
    assert_eq!(ends(&closed, 2).await[1], Ended::Disconnected);
    // A frame over the size limit.
    let mut ws = seated(&url, "tx").await;
    ws.send(Message::text(
        "x".repeat(relay::session::MAX_FRAME_BYTES + 1),
    ))
    .await
    .expect("sent");
    assert_eq!(recv(&mut ws).await["error"], "too_large");
    assert_eq!(ends(&closed, 3).await[2], Ended::BadFrame);
}

#[actix_rt::test]
async fn a_message_in_fragments_over_the_limit_is_too_large_as_one_frame_is() {
    let Served { url, closed, .. } = serve_recording(10, Heartbeat::default(), false).await;
    let mut ws = seated(&url, "tx").await;
    // A text message in three masked fragments of 2,000 bytes (a zero mask): 6,000 in all.
    let fragment = |opcode: u8, fin: bool| {
        let mut frame = vec![opcode | if fin { 0x80 } else { 0 }, 0x80 | 126, 0x07, 0xd0];
        frame.extend([0u8; 4]);
        frame.extend(std::iter::repeat_n(b'a', 2000));
        frame
    };
    let raw = [
        fragment(0x1, false),
        fragment(0x0, false),
        fragment(0x0, true),
    ]
    .concat();
    write_raw(&mut ws, &raw).await;
    let (said, close) = until_closed(&mut ws).await;
    assert_eq!(
        said,
        [
            json!({"t": "error", "error": "too_large", "detail": "messages are at most 4096 bytes, in one frame or several", "close": true})
        ]
    );
    assert_eq!(close, Some((1009, "too_large".to_owned())));
    assert_eq!(ends(&closed, 1).await, vec![Ended::BadFrame]);
}

#[actix_rt::test]
async fn a_frame_that_declares_more_than_the_limit_is_refused_at_its_header() {
    // Before, the relay read an oversized frame to its end before refusing it, and a
    // client that declared 2^40 bytes and kept sending filled the hub's memory.
    let Served { url, closed, .. } = serve_recording(10, Heartbeat::default(), false).await;
    let mut ws = seated(&url, "tx").await;
    // A masked text frame declaring 2^40 bytes, and its first 64 KiB.
    let mut raw = vec![0x81u8, 0xff, 0, 0, 0x01, 0, 0, 0, 0, 0, 1, 2, 3, 4];
    raw.extend(std::iter::repeat_n(b'a', 64 << 10));
    write_raw(&mut ws, &raw).await;
    // Refused now, not once 2^40 bytes have come.
    let (said, close) = until_closed(&mut ws).await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert_eq!(said[0]["error"], "too_large", "{said:?}");
    assert_eq!(said[0]["close"], true);
    assert_eq!(close, Some((1009, "too_large".to_owned())));
    assert_eq!(ends(&closed, 1).await, vec![Ended::BadFrame]);
}

#[actix_rt::test]
async fn a_frame_the_protocol_forbids_closes_with_the_code_rfc_6455_gives_it() {
    let Served { url, closed, .. } = serve_recording(10, Heartbeat::default(), false).await;
    // Masked frames (a zero mask): the payload goes as it is.
    let frame = |first: u8, payload: &[u8]| {
        let mut raw = vec![first, 0x80 | payload.len() as u8, 0, 0, 0, 0];
        raw.extend_from_slice(payload);
        raw
    };
    let cases: [(&str, Vec<u8>, u16); 5] = [
        (
            "a text frame that is not UTF-8",
            frame(0x81, b"{\"t\":\"\xff\"}"),
            1007,
        ),
        (
            "a text message in two fragments that is not UTF-8",
            [frame(0x01, b"{\"t\":\"\xc3"), frame(0x80, b"\x28\"}")].concat(),
            1007,
        ),
        ("a reserved bit set", frame(0xc1, b"{}"), 1002),
        ("an opcode no frame has", frame(0x83, b"{}"), 1002),
        (
            "a continuation with nothing to continue",
            frame(0x80, b"{}"),
            1002,
        ),
    ];
    for (n, (what, raw, code)) in cases.into_iter().enumerate() {
        let mut ws = seated(&url, "tx").await;
        write_raw(&mut ws, &raw).await;
        let (said, close) = until_closed(&mut ws).await;
        assert_eq!(said.len(), 1, "{what}: {said:?}");
        assert_eq!(said[0]["error"], "bad_frame", "{what}: {said:?}");
        assert_eq!(said[0]["close"], true, "{what}");
        assert_eq!(close, Some((code, "bad_frame".to_owned())), "{what}");
        assert_eq!(ends(&closed, n + 1).await[n], Ended::BadFrame, "{what}");
    }
}
