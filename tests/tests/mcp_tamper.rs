//! A hub that lies is reported, not believed.
//!
//! Two agents play the first moves of a game on a real hub. Then one agent is restarted
//! from its state directory (it resumes its seat) behind a small rewriting proxy — the
//! only test double here — that passes the hub's HTTP answers through, except that it can
//! rewrite the listing of a game's captures: edit a signed move, forge a verdict, or drop
//! an event. Through an honest proxy the agent shows the board; through a lying one,
//! `game_board` is an error result that says verification failed and carries no board.
//!
//! The other tests drive one agent straight over MCP (`mcp_support::Agent`) against an
//! opponent seated over HTTP, and change the proxy's lie between two calls: a log whose
//! end is rolled back, a move answered "accepted" and never written, a game registered
//! with another protocol or rules than asked, an owed reveal refused for a while by a
//! rate limit (which the agent must retry by itself), and a hub that hangs during a
//! `game_wait`.
//!
//! The proxy answers one request per connection; a WebSocket upgrade is passed through
//! byte for byte, so the agents play through it as they would against the hub itself (an
//! agent keeps its seats per hub URL: it never sends a token to another address).

mod mcp_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_support::{drive, Agent};
use pipehub_tests::Hub;
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq)]
enum Lie {
    None,
    EditMove,
    ForgeVerdict,
    DropEvent,
    /// The listing leaves out its last capture: the log's end rolled back.
    HideLast,
    /// A posted event is answered 201 accepted and never reaches the hub.
    SwallowPost,
    /// A create request has these fields replaced (another protocol or rules).
    CreateAs(Value),
    /// Requests are read and never answered: a hub that hangs rather than goes down.
    Hang,
    /// Requests reach the hub, and the connection closes before its answer is passed on.
    LoseAnswer,
    /// As `LoseAnswer`, for posted events only.
    LosePostAnswer,
}

/// What the proxy's connections share.
struct Shared {
    lie: Mutex<Lie>,
    /// How many more posted events to refuse with 429 and `Retry-After: 1`.
    refuse: AtomicUsize,
    /// The hub's answer to the last create that went through.
    created: Mutex<Value>,
    /// How many answers the proxy has lost (`LoseAnswer`, `LosePostAnswer`).
    lost: AtomicUsize,
}

/// A one-request-per-connection HTTP proxy that may rewrite capture listings.
struct Proxy {
    base: String,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let shared = Arc::new(Shared {
            lie: Mutex::new(Lie::None),
            refuse: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            created: Mutex::new(Value::Null),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s, up) = (shared.clone(), stop.clone(), upstream.to_string());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (l, up) = (l.clone(), up.clone());
                        std::thread::spawn(move || {
                            let _ = serve(conn, &up, &l);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Proxy {
            base,
            shared,
            stop,
            thread: Some(thread),
        }
    }

    fn lie(&self, lie: Lie) {
        *self.shared.lie.lock().expect("the lie") = lie;
    }

    /// Refuses the next `n` posted events with 429 `rate_limited`.
    fn refuse_posts(&self, n: usize) {
        self.shared.refuse.store(n, Ordering::SeqCst);
    }

    fn created(&self) -> Value {
        self.shared.created.lock().expect("created").clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(conn: TcpStream, upstream: &str, shared: &Shared) -> std::io::Result<()> {
    let lie = shared.lie.lock().expect("the lie").clone();
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("GET").to_string(),
        parts.next().unwrap_or("/").to_string(),
    );
    let mut headers = Vec::new();
    let mut head = line.clone();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        head.push_str(&h);
        let h = h.trim_end().to_string();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            if k == "content-length" {
                length = v.parse().unwrap_or(0);
            }
            headers.push((k, v));
        }
    }
    if path.starts_with("/v1/ws") {
        return tunnel(conn, reader, upstream, &head);
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    if lie == Lie::Hang {
        // Longer than the agent's requests wait (20 s); the connection then just closes.
        // A fixed wait, as a hub that hangs never answers: what it must outlast is the
        // agent's request timeout, a constant with no flag to shorten it, and no test waits
        // on this thread (a test that makes the hub hang waits on the agent instead).
        std::thread::sleep(Duration::from_secs(25));
        return Ok(());
    }
    let posted_event = method == "POST" && path.ends_with("/events");
    let refused = posted_event
        && shared
            .refuse
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
    let (status, text, extra) = if refused {
        let body = json!({"error": "rate_limited", "detail": "retry after 1 s"});
        (429, body.to_string(), "retry-after: 1\r\n")
    } else if posted_event && lie == Lie::SwallowPost {
        (201, json!({"verdict": "accepted"}).to_string(), "")
    } else {
        let created = method == "POST" && path.ends_with("/games");
        if let (true, Lie::CreateAs(fields)) = (created, &lie) {
            let mut asked: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            for (k, v) in fields.as_object().into_iter().flatten() {
                asked[k] = v.clone();
            }
            body = asked.to_string().into_bytes();
        }
        let (status, text) = forward(upstream, &method, &path, &headers, &body);
        if created && status == 201 {
            *shared.created.lock().expect("created") =
                serde_json::from_str(&text).unwrap_or(Value::Null);
        }
        if lie == Lie::LoseAnswer || (posted_event && lie == Lie::LosePostAnswer) {
            shared.lost.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let text = if path.contains("/events?") && status == 200 {
            rewrite(&text, &lie)
        } else {
            text
        };
        (status, text, "")
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )?;
    conn.flush()
}

/// Passes a WebSocket connection through unchanged, both ways, until either side closes.
fn tunnel(
    conn: TcpStream,
    mut reader: BufReader<TcpStream>,
    upstream: &str,
    head: &str,
) -> std::io::Result<()> {
    let address = upstream.trim_start_matches("http://");
    let mut up = TcpStream::connect(address)?;
    up.write_all(head.as_bytes())?;
    conn.set_read_timeout(None)?;
    let mut up_read = up.try_clone()?;
    let mut down = conn.try_clone()?;
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut up_read, &mut down);
        let _ = down.shutdown(std::net::Shutdown::Both);
    });
    // The reader hands over what it buffered first, then the rest of the stream.
    let _ = std::io::copy(&mut reader, &mut up);
    let _ = up.shutdown(std::net::Shutdown::Both);
    let _ = back.join();
    Ok(())
}

fn forward(
    upstream: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let mut req =
        ureq::request(method, &format!("{upstream}{path}")).timeout(Duration::from_secs(20));
    for (k, v) in headers {
        if k == "authorization" || k == "content-type" || k == "idempotency-key" {
            req = req.set(k, v);
        }
    }
    let resp = if body.is_empty() && method == "GET" {
        req.call()
    } else {
        req.send_bytes(body)
    };
    match resp {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => (
            502,
            json!({"error": "bad_gateway", "detail": e.to_string()}).to_string(),
        ),
    }
}

/// The lie told about a game's captures.
fn rewrite(text: &str, lie: &Lie) -> String {
    let Ok(mut page) = serde_json::from_str::<Value>(text) else {
        return text.to_string();
    };
    let Some(items) = page["items"].as_array_mut() else {
        return text.to_string();
    };
    let last_move = items.iter().rposition(|i| i["event"]["action"] == "move");
    match (lie, last_move) {
        (Lie::EditMove, Some(i)) => {
            // O's signed move at (0, 0) becomes (2, 2): still legal, no longer signed.
            items[i]["event"]["move"] = json!({"row": 2, "col": 2});
        }
        (Lie::ForgeVerdict, Some(i)) => {
            items[i]["verdict"] = json!("rejected");
            items[i]["reason"] = json!("illegal_move");
        }
        (Lie::HideLast, _) => {
            items.pop();
        }
        (Lie::DropEvent, Some(_)) => {
            let first = items.iter().position(|i| i["event"]["action"] == "move");
            if let Some(f) = first {
                items.remove(f);
            }
        }
        _ => {}
    }
    page.to_string()
}

#[test]
fn a_tampered_log_is_reported_as_a_verification_failure_not_shown() {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let (x, o) = (work.path().join("agent-x"), work.path().join("agent-o"));
    let proxy = Proxy::start(&hub.base);
    let played = drive(
        "short",
        &proxy.base,
        &[&x, &o],
        work.path(),
        Duration::from_secs(120),
    );
    let game = played.summary["game"]
        .as_str()
        .expect("a game id")
        .to_string();

    // Honest: the restarted agent resumes its seat and shows the verified board.
    let honest = drive(
        "look",
        &proxy.base,
        &[&x],
        work.path(),
        Duration::from_secs(120),
    );
    let board = &honest.summary["boards"][0];
    assert_eq!(board["isError"], false, "{board}");
    assert_eq!(board["structuredContent"]["game"], game.as_str());
    assert_eq!(board["structuredContent"]["seq"], 2);

    for lie in [Lie::EditMove, Lie::ForgeVerdict, Lie::DropEvent] {
        proxy.lie(lie.clone());
        let dir = work.path().join(format!("{lie:?}"));
        std::fs::create_dir_all(&dir).expect("a directory");
        let run = drive("look", &proxy.base, &[&x], &dir, Duration::from_secs(120));
        let board = &run.summary["boards"][0];
        assert_eq!(board["isError"], true, "{lie:?}: {board}");
        let text = board["text"].as_str().unwrap_or_default();
        assert!(text.contains("verification failed"), "{lie:?}: {text}");
        assert!(
            !text.contains("untrusted-board"),
            "{lie:?}: no board is shown: {text}"
        );
        assert_eq!(board["structuredContent"]["error"], "verification_failed");
        assert!(board["structuredContent"].get("board").is_none());
        let listed = &run.summary["list"]["structuredContent"]["seats"][0];
        assert_eq!(listed["error"], "verification_failed", "{lie:?}: {listed}");
    }
}

/// A hub, a proxy in front of it, and agent X on the proxy with a game of `protocol`
/// (with `rules`) whose O is seated over HTTP, straight on the hub.
struct Table {
    hub: Hub,
    proxy: Proxy,
    work: tempfile::TempDir,
    x: Agent,
    game: String,
    o: String,
}

/// A hub, a lying proxy in front of it, and X's agent talking to the proxy, its state in
/// a directory of its own.
fn agent_behind_a_proxy() -> (Hub, Proxy, tempfile::TempDir, Agent) {
    let hub = Hub::start(&[]);
    let proxy = Proxy::start(&hub.base);
    let work = tempfile::tempdir().expect("a temporary directory");
    let x = Agent::start(
        &proxy.base,
        &work.path().join("x"),
        &work.path().join("x.log"),
    );
    (hub, proxy, work, x)
}

impl Table {
    fn new(protocol: &str, rules: Option<Value>) -> Table {
        let (hub, proxy, work, mut x) = agent_behind_a_proxy();
        let mut args = json!({"protocol": protocol});
        if let Some(r) = rules {
            args["rules"] = r;
        }
        let created = x.ok("game_new", args);
        let game = created["game"].as_str().expect("a game").to_string();
        let o = pair(&hub, &created["pairingCode"]);
        x.wait_turn(&game);
        Table {
            hub,
            proxy,
            work,
            x,
            game,
            o,
        }
    }

    /// The same agent, restarted on its state directory.
    fn restart_x(&mut self, n: usize) {
        let log = self.work.path().join(format!("x{n}.log"));
        self.x.stop();
        self.x = Agent::start(&self.proxy.base, &self.work.path().join("x"), &log);
    }

    /// O's move, posted over HTTP straight to the hub.
    fn o_moves(&self, mv: Value) {
        let path = format!("/v1/inboxes/default/games/{}/moves", self.game);
        let r = pipehub_tests::Client::new().post(
            &self.hub.url(&path),
            Some(&self.o),
            &json!({"move": mv}),
        );
        assert!(r.status < 300, "O's move: {} {}", r.status, r.body);
    }

    /// The captures of the game as the hub itself lists them.
    fn events(&self) -> Vec<Value> {
        events(&self.hub, &self.game)
    }
}

fn events(hub: &Hub, game: &str) -> Vec<Value> {
    let url = hub.url(&format!(
        "/v1/inboxes/default/events?game={game}&limit=1000"
    ));
    let r = pipehub_tests::Client::new().get(&url);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["items"].as_array().cloned().unwrap_or_default()
}

/// Seats O over HTTP with `code` (the hub holds O's key); O's token.
fn pair(hub: &Hub, code: &Value) -> String {
    let r = pipehub_tests::Client::new().post(&hub.url("/v1/pair"), None, &json!({"code": code}));
    assert_eq!(r.status, 200, "pair: {}", r.body);
    r.json()["token"].as_str().expect("a token").to_string()
}

/// Asserts a tool result is a failed verification whose text says `why`.
fn assert_failed(result: &Value, why: &str) {
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"]["error"], "verification_failed",
        "{result}"
    );
    let text = result["text"].as_str().unwrap_or_default();
    assert!(text.contains(why), "{why:?} not in {text}");
    assert!(
        !text.contains("untrusted-board"),
        "no board is shown: {text}"
    );
}

#[test]
fn a_rolled_back_log_is_a_failure_and_no_second_event_is_signed_at_its_seq() {
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    let played = t.x.ok(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 0}}),
    );
    assert_eq!(played["seq"], 1);

    // The hub hides X's accepted move: the stale board must not pass for verified, and no
    // second seq-1 event may be signed on it.
    t.proxy.lie(Lie::HideLast);
    assert_failed(
        &t.x.call("game_board", json!({"game": game})),
        "rolled the game back",
    );
    let again = t.x.call(
        "game_move",
        json!({"game": game, "move": {"row": 1, "col": 1}}),
    );
    assert_failed(&again, "rolled the game back");
    // The agent remembers across a restart.
    t.restart_x(1);
    assert_failed(
        &t.x.call("game_board", json!({"game": game})),
        "rolled the game back",
    );
    let at_one: Vec<_> = t
        .events()
        .into_iter()
        .filter(|i| i["event"]["seq"] == 1)
        .collect();
    assert_eq!(at_one.len(), 1, "one event at seq 1: {at_one:?}");

    t.proxy.lie(Lie::None);
    let board = t.x.ok("game_board", json!({"game": game}));
    assert_eq!(board["seq"], 1);
}

fn assert_rate_limited(result: &Value) {
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"]["error"], "rate_limited",
        "{result}"
    );
    // The wait is a number, and the text says to send the call again after it rather
    // than ask the person for another move.
    assert_eq!(result["structuredContent"]["retryAfter"], 1, "{result}");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("wait 1 s, then send the same call again"),
        "{text}"
    );
}

#[test]
fn a_move_refused_before_the_inbox_leaves_the_person_free_to_play_another_or_resign() {
    // Section 5: what the rate limiter refuses never reaches the inbox. The seq of a move
    // refused so is free again: the person may change their mind, or resign.
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    t.proxy.refuse_posts(1);
    let refused = t.x.call(
        "game_move",
        json!({"game": game, "move": {"row": 2, "col": 1}}),
    );
    assert_rate_limited(&refused);
    let played = t.x.ok(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 0}}),
    );
    assert_eq!(played["seq"], 1);
    t.o_moves(json!({"row": 1, "col": 1}));
    t.x.wait_turn(&game);
    // A resign refused so, then a resign that goes through; the agent restarted between
    // them keeps nothing that would stop it.
    t.proxy.refuse_posts(1);
    assert_rate_limited(&t.x.call("game_resign", json!({"game": game})));
    t.restart_x(1);
    let resigned = t.x.ok("game_resign", json!({"game": game}));
    assert_eq!(resigned["result"]["by"], "resign", "{resigned}");
    let x_events: Vec<_> = t
        .events()
        .into_iter()
        .filter(|i| i["event"]["player"] == "X")
        .map(|i| i["event"].clone())
        .collect();
    assert_eq!(
        x_events.len(),
        3,
        "start, one move, one resign: {x_events:?}"
    );
}

#[test]
fn a_move_answered_accepted_that_the_log_does_not_hold_is_a_failure() {
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    t.x.ok(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 0}}),
    );
    t.o_moves(json!({"row": 2, "col": 2}));
    t.x.wait_turn(&game);

    t.proxy.lie(Lie::SwallowPost);
    let swallowed = t.x.call(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 1}}),
    );
    assert_failed(&swallowed, "does not hold it");
    t.proxy.lie(Lie::None);
    // The hub never had it, and the agent still does not take the log for verified.
    assert!(t.events().iter().all(|i| i["event"]["seq"] != 3));
    assert_failed(
        &t.x.call("game_board", json!({"game": game})),
        "does not hold it",
    );
}

/// A `game_new` whose answer is lost (the hub made the game) keeps its seat file waiting:
/// the next `game_new` of the same game sends the create again with the same
/// `Idempotency-Key` and key, and takes the seat of the game the hub made, with no second
/// game left stranded on the hub.
#[test]
fn a_new_game_whose_answer_is_lost_is_taken_by_the_next_game_new() {
    let (hub, proxy, work, mut x) = agent_behind_a_proxy();
    let state = work.path().join("x");
    proxy.lie(Lie::LoseAnswer);
    let lost = x.call("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    assert_eq!(lost["isError"], true, "{lost}");
    assert_eq!(lost["structuredContent"]["error"], "unreachable", "{lost}");
    let text = lost["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("call game_new with the same protocol"),
        "{text}"
    );
    assert_eq!(
        proxy.shared.lost.load(Ordering::SeqCst),
        3,
        "the agent tried three times"
    );
    let made = proxy.created()["game"].clone();
    assert!(
        made.as_str().is_some_and(|g| g.starts_with('g')),
        "the hub made the game: {made}"
    );
    let waiting = mcp_support::seat_files(&state);
    assert_eq!(waiting.len(), 1, "one seat file, waiting for its answer");
    assert!(
        waiting[0].record["token"].is_null(),
        "{}",
        waiting[0].record
    );

    proxy.lie(Lie::None);
    let taken = x.ok("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    assert_eq!(taken["game"], made, "the game the lost answer was about");
    let files = mcp_support::seat_files(&state);
    assert_eq!(files.len(), 1);
    assert!(files[0].record["token"].is_string(), "{}", files[0].record);
    assert!(
        files[0].record.get("asked").is_none(),
        "{}",
        files[0].record
    );
    let listed = pipehub_tests::Client::new().get(&hub.url("/v1/inboxes/default/games"));
    assert_eq!(listed.status, 200, "{}", listed.body);
    let games = listed.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(games.len(), 1, "no second game: {}", listed.body);
    // The game is the agent's to play: a guest joins and it starts with the agent's key.
    pair(&hub, &taken["pairingCode"]);
    let game = made.as_str().expect("an id");
    assert_eq!(x.wait_turn(game)["yourTurn"], true);
    // Another game is a new one.
    x.ok("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    assert_eq!(mcp_support::seat_files(&state).len(), 2);
}

/// A `game_join` whose answer is lost (the hub seated O) keeps its seat file waiting: the
/// next `game_join` with the same code pairs again with the same key and takes O's seat,
/// where a fresh key would hear that the code is used.
#[test]
fn a_join_whose_answer_is_lost_is_taken_by_the_next_game_join() {
    let (hub, proxy, work, mut o) = agent_behind_a_proxy();
    let state = work.path().join("x");
    let made = pipehub_tests::Client::new().post(
        &hub.url("/v1/inboxes/default/games"),
        None,
        &json!({"protocol": "pipehub:tic-tac-toe"}),
    );
    assert_eq!(made.status, 201, "{}", made.body);
    let made = made.json();
    let game = made["game"].as_str().expect("an id").to_string();
    proxy.lie(Lie::LoseAnswer);
    let lost = o.call("game_join", json!({"code": made["pairingCode"]}));
    assert_eq!(lost["structuredContent"]["error"], "unreachable", "{lost}");
    let text = lost["text"].as_str().unwrap_or_default();
    assert!(text.contains("call game_join with the same code"), "{text}");
    let seen =
        pipehub_tests::Client::new().get(&hub.url(&format!("/v1/inboxes/default/games/{game}")));
    assert_eq!(
        seen.json()["phase"],
        "started",
        "the hub seated O: {}",
        seen.body
    );
    assert_eq!(mcp_support::seat_files(&state).len(), 1);

    proxy.lie(Lie::None);
    // As the person typed it again: lower case, with a hyphen.
    let code = made["pairingCode"]
        .as_str()
        .expect("a code")
        .to_ascii_lowercase();
    let typed = format!("{}-{}", &code[..4], &code[4..]);
    let taken = o.ok("game_join", json!({"code": typed}));
    assert_eq!(taken["game"], game.as_str(), "{taken}");
    assert_eq!(taken["seat"], "O", "{taken}");
    let files = mcp_support::seat_files(&state);
    assert_eq!(files.len(), 1);
    assert!(files[0].record["token"].is_string(), "{}", files[0].record);
    // The seat is O's: X moves on the hub, and the agent is told it is its turn.
    let x_token = made["token"].as_str().expect("X's token");
    let moved = pipehub_tests::Client::new().post(
        &hub.url(&format!("/v1/inboxes/default/games/{game}/moves")),
        Some(x_token),
        &json!({"move": {"row": 1, "col": 1}}),
    );
    assert_eq!(moved.status, 201, "{}", moved.body);
    assert_eq!(o.wait_turn(&game)["yourTurn"], true);
}

/// `game_wait` against a hub that hangs (not down) ends within the wait asked for, as an
/// error saying the hub did not answer, instead of when the agent's request gives up.
#[test]
fn a_wait_on_a_hub_that_hangs_ends_within_its_timeout() {
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    t.x.ok(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 0}}),
    );
    t.proxy.lie(Lie::Hang);
    let began = std::time::Instant::now();
    let waited =
        t.x.call("game_wait", json!({"game": game, "timeoutSeconds": 3}));
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "game_wait of 3 s took {took:?}: {waited}"
    );
    assert_eq!(waited["isError"], true, "{waited}");
    assert!(
        waited["text"]
            .as_str()
            .is_some_and(|t| t.contains("did not answer within the wait")),
        "{waited}"
    );
    // Once the hub answers again, so does the agent: at the latest once the look its
    // socket's watcher began during the hang gives up (the agent's 20 s request timeout).
    t.proxy.lie(Lie::None);
    t.o_moves(json!({"row": 2, "col": 2}));
    let back = (0..6).any(|_| {
        let r =
            t.x.call("game_wait", json!({"game": game, "timeoutSeconds": 10}));
        r["isError"] == false && r["structuredContent"]["yourTurn"] == true
    });
    assert!(
        back,
        "the agent never saw its turn once the hub answered again"
    );
}

#[test]
fn a_move_whose_answer_is_lost_is_named_as_the_only_one_that_may_be_sent_again() {
    // The hub records the move and its answer is lost: the agent cannot know which, so it
    // says which move is the only one it may send at that seq, and does not ask the
    // person for another.
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    t.proxy.lie(Lie::LosePostAnswer);
    let lost = t.x.call(
        "game_move",
        json!({"game": game, "move": {"row": 2, "col": 1}}),
    );
    t.proxy.lie(Lie::None);
    assert_eq!(lost["isError"], true, "{lost}");
    let text = lost["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(r#"did not say whether it recorded the move {"col":1,"row":2}"#),
        "{text}"
    );
    assert!(!text.contains("your person's turn"), "{text}");
    // It was recorded: the board shows it, and the same move sent again is stale, not a
    // second event.
    let board = t.x.ok("game_board", json!({"game": game}));
    assert_eq!(board["seq"], 1, "{board}");
}

#[test]
fn a_wait_outlives_a_hub_that_cannot_be_reached_for_a_moment() {
    // The hub drops every connection (as while it restarts) until the wait has met the
    // outage twice, a look and the look it tries again, then the opponent moves: a wait of
    // 12 s sees the move, not the outage.
    let mut t = Table::new("pipehub:tic-tac-toe", None);
    let game = t.game.clone();
    t.x.ok(
        "game_move",
        json!({"game": game, "move": {"row": 0, "col": 0}}),
    );
    t.proxy.lie(Lie::LoseAnswer);
    let Table {
        x, proxy, hub, o, ..
    } = &mut t;
    let t0 = std::time::Instant::now();
    let waited = std::thread::scope(|scope| {
        scope.spawn(|| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while proxy.shared.lost.load(Ordering::SeqCst) < 2 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the wait never met the outage"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            proxy.lie(Lie::None);
            let path = format!("/v1/inboxes/default/games/{game}/moves");
            let r = pipehub_tests::Client::new().post(
                &hub.url(&path),
                Some(o.as_str()),
                &json!({"move": {"row": 1, "col": 1}}),
            );
            assert_eq!(r.status, 201, "{}", r.body);
        });
        x.call("game_wait", json!({"game": game, "timeoutSeconds": 12}))
    });
    assert_eq!(waited["isError"], false, "{waited}");
    assert_eq!(waited["structuredContent"]["yourTurn"], true, "{waited}");
    assert_eq!(waited["structuredContent"]["seq"], 2, "{waited}");
    assert!(
        t0.elapsed() < Duration::from_secs(11),
        "before the wait ran out: {:?}",
        t0.elapsed()
    );
}

#[test]
fn a_game_registered_with_another_protocol_or_rules_is_never_started() {
    for (asked, lie, named) in [
        (
            json!({"protocol": "pipehub:tic-tac-toe"}),
            json!({"protocol": "pipehub:connect-four"}),
            "pipehub:connect-four",
        ),
        (
            json!({"protocol": "pipehub:rock-paper-scissors", "rules": {"bestOf": 9}}),
            json!({"rules": {"bestOf": 1}}),
            "bestOf",
        ),
    ] {
        let (hub, proxy, _work, mut x) = agent_behind_a_proxy();
        proxy.lie(Lie::CreateAs(lie));
        let created = x.call("game_new", asked.clone());
        proxy.lie(Lie::None);
        assert_failed(&created, named);

        // O joins what the hub registered; X's agent must not sign its start.
        let registered = proxy.created();
        let game = registered["game"].as_str().expect("a game").to_string();
        pair(&hub, &registered["pairingCode"]);
        let waited = x.call("game_wait", json!({"game": game, "timeoutSeconds": 3}));
        assert_failed(&waited, named);
        // A seat's syncs (where the start would be written) run one at a time: once a
        // second look has failed too, what the watcher began on O's pairing is done.
        let again = x.call("game_wait", json!({"game": game, "timeoutSeconds": 1}));
        assert_failed(&again, named);
        assert!(
            events(&hub, &game).is_empty(),
            "{asked}: no start was written"
        );
    }
}

#[test]
fn an_owed_reveal_refused_by_a_rate_limit_is_retried_without_a_tool_call() {
    let mut t = Table::new("pipehub:rock-paper-scissors", Some(json!({"bestOf": 1})));
    let game = t.game.clone();
    t.x.ok(
        "game_move",
        json!({"game": game, "move": {"choice": "rock"}}),
    );
    // X's reveal, owed once O commits, is refused with Retry-After: 1 more times than the
    // hub pushes frames for O's commit, so only the agent's own retries can get it through.
    t.proxy.refuse_posts(7);
    t.o_moves(json!({"choice": "scissors"}));
    // A wait meanwhile is not ended by the refusals its looks meet: it sees the end.
    let waited =
        t.x.call("game_wait", json!({"game": game, "timeoutSeconds": 30}));
    assert_eq!(waited["isError"], false, "{waited}");
    assert_eq!(
        waited["structuredContent"]["result"]["winner"], "X",
        "{waited}"
    );
    let revealed = (0..80).any(|_| {
        std::thread::sleep(Duration::from_millis(500));
        t.events().iter().any(|i| {
            i["event"]["player"] == "X"
                && i["event"]["move"]["nonce"].is_string()
                && i["verdict"] == "accepted"
        })
    });
    assert_eq!(
        t.proxy.shared.refuse.load(Ordering::SeqCst),
        0,
        "every refusal was used"
    );
    assert!(
        revealed,
        "X's reveal was written by the agent on its own: {:?}",
        t.events()
    );
}
