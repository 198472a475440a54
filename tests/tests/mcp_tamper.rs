//! A hub that lies is reported, not believed.
//!
//! Two agents play the first moves of a game on a real hub. Then one agent is restarted
//! from its state directory (it resumes its seat) behind a small rewriting proxy — the
//! only test double here — that passes the hub's HTTP answers through, except that it can
//! rewrite the listing of a game's captures: edit a signed move, forge a verdict, or drop
//! an event. Through an honest proxy the agent shows the board; through a lying one,
//! `game_board` is an error result that says verification failed and carries no board.
//!
//! The proxy answers one request per connection; a WebSocket upgrade is passed through
//! byte for byte, so the agents play through it as they would against the hub itself (an
//! agent keeps its seats per hub URL: it never sends a token to another address).

mod mcp_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_support::drive;
use pipehub_tests::Hub;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lie {
    None,
    EditMove,
    ForgeVerdict,
    DropEvent,
}

/// A one-request-per-connection HTTP proxy that may rewrite capture listings.
struct Proxy {
    base: String,
    lie: Arc<Mutex<Lie>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let base = format!("http://{}", listener.local_addr().expect("an address"));
        let lie = Arc::new(Mutex::new(Lie::None));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s, up) = (lie.clone(), stop.clone(), upstream.to_string());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (l, up) = (l.clone(), up.clone());
                        std::thread::spawn(move || {
                            let lie = *l.lock().expect("the lie");
                            let _ = serve(conn, &up, lie);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Proxy {
            base,
            lie,
            stop,
            thread: Some(thread),
        }
    }

    fn lie(&self, lie: Lie) {
        *self.lie.lock().expect("the lie") = lie;
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

fn serve(conn: TcpStream, upstream: &str, lie: Lie) -> std::io::Result<()> {
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
    let (status, text) = forward(upstream, &method, &path, &headers, &body);
    let text = if path.contains("/events?") && status == 200 {
        rewrite(&text, lie)
    } else {
        text
    };
    let mut conn = conn;
    write!(
        conn,
        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
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
        if k == "authorization" || k == "content-type" {
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
fn rewrite(text: &str, lie: Lie) -> String {
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
        proxy.lie(lie);
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
