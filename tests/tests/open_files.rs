//! A hub near its open-files limit: a flood of connections takes at most what the store's
//! files leave, the players' own connections are still served, probes reach its admin
//! address, and once the flood goes new connections are served again.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use pipehub_tests::{Client, Hub, Seated};
use serde_json::json;

/// The hub's open-files limit in this test: about a hundred and fifty sockets.
const LIMIT: u64 = 256;

/// A move posted by hand on `conn`, a keep-alive connection; its status code.
fn raw_move(conn: &mut TcpStream, g: &Seated, seat: &str, row: u64, col: u64) -> u16 {
    let body = json!({"move": {"row": row, "col": col}}).to_string();
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        g.path("/moves"),
        g.token(seat),
        body.len()
    );
    conn.write_all(request.as_bytes()).expect("send the move");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = conn.read(&mut byte).expect("read the answer");
        assert_eq!(n, 1, "the hub closed the connection; so far: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a content length");
    let mut rest = vec![0u8; length];
    conn.read_exact(&mut rest).expect("read the body");
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status line")
}

/// How many files the process `pid` has open.
fn open_files(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the hub's descriptors are listed")
        .count() as u64
}

#[test]
fn a_flood_of_connections_leaves_the_store_its_files_and_passes() {
    let hub = Hub::start_with_open_files(LIMIT, &["--admin-listen", "127.0.0.1:0"]);
    let admin = hub.admin.clone().expect("the hub prints its admin address");
    let pid = hub.pid().expect("the hub runs");
    let c = Client::new();
    let g = Seated::new(&hub, &c, "flood", "pipehub:tic-tac-toe");
    let addr = hub.base.trim_start_matches("http://").to_string();
    let mut player = TcpStream::connect(&addr).expect("the player connects");
    player
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("a read timeout");
    assert_eq!(raw_move(&mut player, &g, "X", 0, 0), 201);

    // Three times the limit: every connect succeeds (the listen backlog holds those the
    // hub does not take), and the hub takes as many as its cap allows.
    let flood: Vec<TcpStream> = (0..3 * LIMIT)
        .map(|_| TcpStream::connect(&addr).expect("a flood connection"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut held = open_files(pid);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let now = open_files(pid);
        if now == held || Instant::now() > deadline {
            break;
        }
        held = now;
    }
    assert!(
        held > LIMIT / 2,
        "the hub took only {held} files: the flood never reached its cap"
    );
    assert!(
        held + 32 <= LIMIT,
        "the hub holds {held} of its {LIMIT} files: its sockets took what the store needs"
    );
    // The players are still served, and the store still writes.
    assert_eq!(raw_move(&mut player, &g, "O", 1, 0), 201);
    // A probe on a new connection to the admin address is answered, though the main
    // address takes no new connection now; the admin address serves nothing else.
    let probe = Client::new();
    assert_eq!(probe.get(&format!("{admin}/readyz")).status, 200);
    let metrics = probe.get(&format!("{admin}/metrics"));
    assert!(
        metrics.body.contains("process_open_fds"),
        "{}",
        metrics.body
    );
    let elsewhere = probe.get(&format!("{admin}{}", g.path("")));
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    let log = hub.log();
    assert!(
        !log.contains("Too many open files"),
        "the hub ran out of files:\n{log}"
    );
    assert!(
        log.contains("open files: sockets may take what the store's files leave"),
        "{log}"
    );

    drop(flood);
    // New connections are served again once the flood has gone.
    let fresh = Client::new();
    let moved = fresh.post(
        &hub.url(&g.path("/moves")),
        Some(g.token("X")),
        &json!({"move": {"row": 0, "col": 1}}),
    );
    assert_eq!(moved.status, 201, "{}", moved.body);
}
