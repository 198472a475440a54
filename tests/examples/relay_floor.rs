//! The transport's floor: what relaying a move over loopback WebSockets costs on this
//! machine when nothing else is done (not a test: nothing here is timed by the test suite).
//!
//! It runs the same closed loop as `pipehub loadgen` (`--games` pairs of sockets; a seat
//! moves, both seats get the new state, the opponent moves as soon as it has it) against
//! the least a relay can do: a server that answers each move frame with one state frame
//! to each seat of the pair, the mover's written by the task that read the move and the
//! opponent's by the opponent's task, woken through a channel, as the hub's rooms do. No
//! game, no store, no fsync, no JSON. The server runs in a child process with
//! `--server-threads` threads (two, as the hub's actix-web workers here), and is one of
//! two: `--server tungstenite` (the default), tokio-tungstenite on a tokio runtime, the
//! least there is; or `--server actix`, the hub's own WebSocket stack (actix-web and
//! actix-ws, as patched in `vendor/`), so that what the stack costs and what the hub's
//! code costs can be told apart. The driver runs on one thread in this process, as
//! `pipehub loadgen` does by default, one task per pair, with tungstenite (2 KiB read
//! buffers, as the load generator's).
//!
//! It reports moves per second, the move→opponent latency, and the CPU each process
//! spent per move (from `/proc`): the part of the hub's and the load generator's per-move
//! CPU that no change to the hub's own code can take away while a move is three
//! WebSocket frames on loopback TCP.
//!
//! Usage: `relay_floor [--server tungstenite|actix] [--games G] [--duration S]
//! [--server-threads N] [--move-bytes B] [--state-bytes B] [--json]`; the sizes default to those of
//! an unsigned tic-tac-toe game's frames on the hub (a `game.move` about 60 bytes, a
//! `game.state` about 630). Everything binds to 127.0.0.1; the child stops with the driver
//! (it exits when its stdin, held by the driver, closes).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

struct Options {
    server: String,
    games: usize,
    duration: Duration,
    server_threads: usize,
    move_bytes: usize,
    state_bytes: usize,
    /// One JSON object on stdout instead of the lines for people.
    json: bool,
}

fn usage(problem: &str) -> ! {
    eprintln!("relay_floor: {problem}");
    eprintln!(
        "usage: relay_floor [--server tungstenite|actix] [--games G] [--duration S] [--server-threads N] [--move-bytes B] [--state-bytes B] [--json]"
    );
    std::process::exit(2)
}

fn parse(args: &[String]) -> Options {
    let mut o = Options {
        server: "tungstenite".into(),
        games: 1000,
        duration: Duration::from_secs(10),
        server_threads: 2,
        move_bytes: 60,
        state_bytes: 630,
        json: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--json" {
            o.json = true;
            continue;
        }
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        if flag == "--server" {
            if !["tungstenite", "actix"].contains(&value.as_str()) {
                usage(&format!("--server: tungstenite or actix, not {value}"));
            }
            o.server = value.clone();
            continue;
        }
        let n: u64 = value
            .parse()
            .unwrap_or_else(|_| usage(&format!("{flag}: not a whole number: {value}")));
        if n == 0 {
            usage(&format!("{flag} must be at least 1"));
        }
        match flag.as_str() {
            "--games" => o.games = n as usize,
            "--duration" => o.duration = Duration::from_secs(n),
            "--server-threads" => o.server_threads = n as usize,
            "--move-bytes" => o.move_bytes = n as usize,
            "--state-bytes" => o.state_bytes = n as usize,
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    o
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        let threads = args.get(2).and_then(|t| t.parse().ok()).unwrap_or(2);
        let state_bytes = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(630);
        // The driver holds this process's stdin: when it ends, however it ends, so does this.
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(0);
        });
        let state: Arc<str> = "s".repeat(state_bytes).into();
        match args.get(1).map(String::as_str) {
            Some("actix") => serve_actix(threads, state),
            _ => serve(threads, state),
        }
        return;
    }
    let options = parse(&args);
    drive(&options);
}

/// Both ends read into 2 KiB buffers, as `pipehub loadgen` does: tungstenite zeroes its
/// whole read buffer before every read, and its default of 128 KiB would make the floor
/// mostly `memset`.
fn config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(2 * 1024)
}

// ---- the server (child process) ----

/// Each pair's two sockets' wake-ups: a message on a seat's channel asks its task to send
/// the state.
type Pairs = Arc<Mutex<HashMap<u64, [Option<mpsc::Sender<()>>; 2]>>>;

/// Reads "PAIR SEAT".
fn hello(text: &str) -> Option<(u64, usize)> {
    let mut parts = text.split_whitespace().map(|p| p.parse::<u64>());
    match (parts.next(), parts.next()) {
        (Some(Ok(pair)), Some(Ok(seat @ 0..=1))) => Some((pair, seat as usize)),
        _ => None,
    }
}

/// Registers a seat's socket; the receiver gets its wake-ups.
fn register(pairs: &Pairs, pair: u64, seat: usize) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(32);
    pairs.lock().expect("the pairs").entry(pair).or_default()[seat] = Some(tx);
    rx
}

/// Wakes the other seat of the pair, once it has registered; false if it cannot take it.
fn wake_other(pairs: &Pairs, other: &mut Option<mpsc::Sender<()>>, pair: u64, seat: usize) -> bool {
    if other.is_none() {
        *other = pairs.lock().expect("the pairs")[&pair][1 - seat].clone();
    }
    other.as_ref().is_none_or(|o| o.try_send(()).is_ok())
}

fn serve(threads: usize, state: Arc<str>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        println!("{}", listener.local_addr().expect("an address").port());
        let pairs: Pairs = Arc::default();
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(connection(stream, pairs.clone(), state.clone()));
        }
    });
}

/// One socket: the first text frame names its pair and seat ("PAIR SEAT") and is answered
/// "ok" once registered; every later one is a move, answered with a state frame here, and
/// the other seat's task is woken to send it one too.
async fn connection(stream: TcpStream, pairs: Pairs, state: Arc<str>) {
    let Ok(mut ws) = tokio_tungstenite::accept_async_with_config(stream, Some(config())).await
    else {
        return;
    };
    let Some(Ok(Message::Text(text))) = ws.next().await else {
        return;
    };
    let Some((pair, seat)) = hello(&text) else {
        return;
    };
    let mut rx = register(&pairs, pair, seat);
    // Registered: the driver starts the clock only once every socket has heard this.
    if ws.send(Message::text("ok")).await.is_err() {
        return;
    }
    let mut other = None;
    loop {
        tokio::select! {
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(_))) => {
                    if !wake_other(&pairs, &mut other, pair, seat)
                        || ws.send(Message::text(&*state)).await.is_err()
                    {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
            Some(()) = rx.recv() => {
                if ws.send(Message::text(&*state)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The same server on actix-web and actix-ws, as the hub runs them: `--server-threads`
/// workers, TCP_NODELAY, a session task per socket beside its connection's.
fn serve_actix(threads: usize, state: Arc<str>) {
    let pairs: Pairs = Arc::default();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    println!("{}", listener.local_addr().expect("an address").port());
    let served = actix_web::rt::System::new().block_on(async move {
        actix_web::HttpServer::new(move || {
            let shared = (pairs.clone(), state.clone());
            actix_web::App::new()
                .app_data(actix_web::web::Data::new(shared))
                .route("/", actix_web::web::get().to(actix_upgrade))
        })
        .workers(threads)
        .tcp_nodelay(true)
        .disable_signals()
        .listen(listener)?
        .run()
        .await
    });
    served.expect("the actix server runs");
}

async fn actix_upgrade(
    req: actix_web::HttpRequest,
    body: actix_web::web::Payload,
    shared: actix_web::web::Data<(Pairs, Arc<str>)>,
) -> actix_web::HttpResponse {
    match actix_ws::handle(&req, body) {
        Ok((response, session, stream)) => {
            let (pairs, state) = shared.get_ref().clone();
            actix_web::rt::spawn(actix_connection(session, stream, pairs, state));
            response
        }
        Err(_) => actix_web::HttpResponse::BadRequest().finish(),
    }
}

async fn actix_connection(
    mut session: actix_ws::Session,
    mut stream: actix_ws::MessageStream,
    pairs: Pairs,
    state: Arc<str>,
) {
    let Some(Ok(actix_ws::Message::Text(text))) = stream.next().await else {
        return;
    };
    let Some((pair, seat)) = hello(&text) else {
        return;
    };
    let mut rx = register(&pairs, pair, seat);
    if session.text("ok").await.is_err() {
        return;
    }
    let mut other = None;
    loop {
        tokio::select! {
            frame = stream.next() => match frame {
                Some(Ok(actix_ws::Message::Text(_))) => {
                    if !wake_other(&pairs, &mut other, pair, seat)
                        || session.text(&*state).await.is_err()
                    {
                        return;
                    }
                }
                Some(Ok(actix_ws::Message::Ping(bytes))) => {
                    if session.pong(&bytes).await.is_err() {
                        return;
                    }
                }
                Some(Ok(_)) => {}
                _ => return,
            },
            Some(()) = rx.recv() => {
                if session.text(&*state).await.is_err() {
                    return;
                }
            }
        }
    }
}

// ---- the driver (this process) ----

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The child server; killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// User plus system CPU seconds of a process so far.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

fn drive(o: &Options) {
    let exe = std::env::current_exe().expect("this program's path");
    let child = Command::new(exe)
        .args([
            "serve",
            &o.server,
            &o.server_threads.to_string(),
            &o.state_bytes.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server starts");
    let mut server = Server(child);
    let mut line = String::new();
    let stdout = server.0.stdout.take().expect("the server's output");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the server's port");
    let port: u16 = line.trim().parse().expect("a port number");
    let server_pid = server.0.id();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let url = format!("ws://127.0.0.1:{port}/");
    let (moves, latencies, elapsed, cpu) = runtime.block_on(async {
        let mut tables = Vec::with_capacity(o.games);
        for g in 0..o.games as u64 {
            let mut pair = Vec::with_capacity(2);
            for seat in 0..2 {
                let (mut ws, _) =
                    tokio_tungstenite::connect_async_with_config(&url, Some(config()), true)
                        .await
                        .expect("a socket");
                ws.send(Message::text(format!("{g} {seat}")))
                    .await
                    .expect("the hello");
                let Some(Ok(Message::Text(_))) = ws.next().await else {
                    panic!("the server did not take pair {g}'s hello");
                };
                pair.push(ws);
            }
            tables.push(pair);
        }
        let start = Instant::now();
        let deadline = start + o.duration;
        let cpu0 = (cpu_s(server_pid), cpu_s(std::process::id()));
        let mv: Arc<str> = "m".repeat(o.move_bytes).into();
        // One task per pair, as the load generator runs them, on this one thread.
        let plays: Vec<_> = tables
            .into_iter()
            .map(|pair| tokio::spawn(play(pair, mv.clone(), deadline)))
            .collect();
        let mut moves = 0u64;
        let mut latencies = Vec::new();
        for play in plays {
            let (m, l) = play.await.expect("a pair's play ends");
            moves += m;
            latencies.extend(l);
        }
        let elapsed = start.elapsed().min(o.duration);
        let cpu = (
            cpu_s(server_pid) - cpu0.0,
            cpu_s(std::process::id()) - cpu0.1,
        );
        (moves, latencies, elapsed, cpu)
    });
    drop(server);
    report(o, moves, latencies, elapsed, cpu);
}

/// Plays one pair until the deadline: the number of moves and each one's latency in µs.
async fn play(mut pair: Vec<Ws>, mv: Arc<str>, deadline: Instant) -> (u64, Vec<u32>) {
    let mut moves = 0;
    let mut latencies = Vec::new();
    let mut mover = 0;
    // A frame that does not come within a second of the deadline ends this pair's play.
    let give_up = tokio::time::Instant::from_std(deadline + Duration::from_secs(1));
    while Instant::now() < deadline {
        let sent = Instant::now();
        if pair[mover].send(Message::text(&*mv)).await.is_err() {
            break;
        }
        let other = 1 - mover;
        let Ok(Some(Ok(_))) = tokio::time::timeout_at(give_up, pair[other].next()).await else {
            break;
        };
        latencies.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
        let Ok(Some(Ok(_))) = tokio::time::timeout_at(give_up, pair[mover].next()).await else {
            break;
        };
        moves += 1;
        mover = other;
    }
    (moves, latencies)
}

fn report(o: &Options, moves: u64, mut latencies: Vec<u32>, elapsed: Duration, cpu: (f64, f64)) {
    latencies.sort_unstable();
    let at = |q: f64| -> f64 {
        if latencies.is_empty() {
            return f64::NAN;
        }
        let i = ((latencies.len() as f64 - 1.0) * q).round() as usize;
        latencies[i] as f64 / 1000.0
    };
    let per_move = |s: f64| {
        if moves == 0 {
            f64::NAN
        } else {
            s / moves as f64 * 1e6
        }
    };
    let moves_per_s = moves as f64 / elapsed.as_secs_f64();
    if o.json {
        // The keys of `pipehub loadgen --json` where they mean the same, so that one script
        // reads both.
        let report = serde_json::json!({
            "server": o.server,
            "games": o.games,
            "server_threads": o.server_threads,
            "moves": moves,
            "elapsed_s": elapsed.as_secs_f64(),
            "moves_per_s": moves_per_s,
            "latency_ms": {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0)},
            "cpu_us_per_move": {
                "server": per_move(cpu.0),
                "driver": per_move(cpu.1),
            },
        });
        println!("{report}");
        return;
    }
    println!(
        "relay floor: {} server, {} games, {} server threads, {} B moves, {} B states",
        o.server, o.games, o.server_threads, o.move_bytes, o.state_bytes
    );
    println!(
        "  {moves_per_s:.0} moves/s ({} moves in {:.1} s)",
        moves,
        elapsed.as_secs_f64()
    );
    println!(
        "  move→opponent latency ms: p50 {:.3}, p90 {:.3}, p99 {:.3}, max {:.3}",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    println!(
        "  CPU per move: server {:.1} µs, driver {:.1} µs, together {:.1} µs",
        per_move(cpu.0),
        per_move(cpu.1),
        per_move(cpu.0 + cpu.1)
    );
}
