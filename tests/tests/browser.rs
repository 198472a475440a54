//! The web page in a real headless browser, against the real `pipehub` binary.
//!
//! Debian's `chromium`, driven through `chromedriver` over WebDriver, opens the page the hub
//! serves at `/` in three sessions at phone width (360 px): X creates a game, O joins it by
//! the pairing code, a third session finds it in the inbox listing and watches. They play
//! tic-tac-toe to X's win; on the way X tries a cell O holds, and the page must draw that
//! move at once and take it back when the hub refuses it; X reloads the tab mid-game and
//! must get its seat back; the spectator must see every move. A second game of
//! connect-four ends by resignation. Screenshots of each step are written under the
//! target directory (`browser/`) for a person to look at.
//!
//! These tests install nothing: without `chromedriver` and `chromium` they fail and name
//! `scripts/test`, which installs them. Every wait is bounded, chromedriver listens on a
//! free 127.0.0.1 port, and everything started here is stopped at the end, also on panic.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// How long any one condition in the page may take to become true.
const WAIT: Duration = Duration::from_secs(15);
/// How long chromedriver may take to listen.
const DRIVER_START: Duration = Duration::from_secs(20);
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// A chromedriver process in its own process group, so that dropping it also ends every
/// browser it started, whatever state the test left them in.
struct Driver {
    child: Child,
    url: String,
    profiles: PathBuf,
}

impl Driver {
    fn start() -> Driver {
        for tool in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: the browser tests need Debian's chromium and chromium-driver; \
                 run scripts/test, which installs them"
            );
        }
        let port = free_port();
        let mut command = Command::new(CHROMEDRIVER);
        command
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!("cannot start {CHROMEDRIVER} ({e}); run scripts/test, which installs it")
        });
        let profiles =
            std::env::temp_dir().join(format!("pipehub-browser-{}-{port}", std::process::id()));
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            profiles,
        };
        let deadline = Instant::now() + DRIVER_START;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on port {port} within {DRIVER_START:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    /// A new browser session with a fresh profile, headless, at phone width.
    async fn browser(&self, name: &str) -> Client {
        let profile = self.profiles.join(name);
        std::fs::create_dir_all(&profile).expect("a temporary profile directory can be made");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                // A phone's viewport: chromium's windows are never narrower than 500 px.
                "mobileEmulation": {"deviceMetrics": {"width": 360, "height": 740, "pixelRatio": 1.0}},
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-extensions",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--window-size=500,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
        });
        let caps = match caps {
            Value::Object(map) => map,
            _ => unreachable!("a json! object literal is an object"),
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut builder = ClientBuilder::new(connector);
        let connecting = builder.capabilities(caps).connect(&self.url);
        match tokio::time::timeout(WAIT, connecting).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => panic!("chromedriver could not start chromium for {name}: {e}"),
            Err(_) => panic!("chromium for {name} did not start within {WAIT:?}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group holds chromedriver and every chromium it started; its id is the
        // driver's pid (process_group(0) above). A pid of 0 or one that does not fit would
        // name our own group or every process, so only a real positive id is signalled.
        if let Ok(group) = libc::pid_t::try_from(self.child.id()) {
            if group > 0 {
                // SAFETY: killpg only sends a signal; it touches no memory of ours.
                unsafe {
                    libc::killpg(group, libc::SIGKILL);
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profiles);
    }
}

/// Notes how far the test got, so a slow or failed run says where its time went.
fn step(started: Instant, what: &str) {
    eprintln!(
        "browser test: {:>6} ms  {what}",
        started.elapsed().as_millis()
    );
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free local port");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
}

/// Evaluates `expr` (a JavaScript expression) in the page.
async fn eval(c: &Client, expr: &str) -> Value {
    c.execute(&format!("return ({expr});"), vec![])
        .await
        .unwrap_or_else(|e| panic!("the page could not evaluate {expr}: {e}"))
}

/// Waits until `expr` is `want` in the page, or fails with what the page says.
async fn wait_eq(c: &Client, who: &str, expr: &str, want: Value) {
    let deadline = Instant::now() + WAIT;
    loop {
        let got = eval(c, expr).await;
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            let status = eval(c, "document.getElementById('status').textContent").await;
            let alert = eval(c, "document.getElementById('alert').textContent").await;
            let log = eval(c, "document.getElementById('log').innerText").await;
            let board = eval(c, "document.getElementById('board').outerHTML").await;
            let conn = eval(
                c,
                "document.body.dataset.conn + ', frames ' + document.body.dataset.frames",
            )
            .await;
            panic!(
                "{who}: `{expr}` is {got}, not {want}, after {WAIT:?}\nstatus: {status}\nalert: {alert}\nlog: {log}\nboard: {board}\nconnection: {conn}"
            );
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
}

async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
}

async fn type_into(c: &Client, css: &str, text: &str) {
    let input = c
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"));
    input
        .clear()
        .await
        .unwrap_or_else(|e| panic!("cannot clear {css}: {e}"));
    input
        .send_keys(text)
        .await
        .unwrap_or_else(|e| panic!("cannot type into {css}: {e}"));
}

async fn screenshot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).expect("the target directory is writable");
    let png = c
        .screenshot()
        .await
        .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
    std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot can be written");
}

fn cell(row: u32, col: u32) -> String {
    format!("(document.querySelector('#board .cell[data-row=\"{row}\"][data-col=\"{col}\"]') || {{}}).textContent || null")
}

const SEQ: &str = "document.getElementById('board').dataset.seq";
const PHASE: &str = "document.body.dataset.phase";
const OVER: &str = "document.body.dataset.over";
const STATUS: &str = "document.getElementById('status').textContent";

/// Opens the page and waits until its script has run and the protocols are listed.
async fn open(c: &Client, hub: &str) {
    c.goto(hub)
        .await
        .unwrap_or_else(|e| panic!("cannot open {hub}: {e}"));
    wait_eq(c, "page", "document.body.dataset.ready === 'true' && document.querySelectorAll('#create-protocol option[value]').length >= 3", json!(true)).await;
}

/// X creates a game of `protocol` in `inbox`; returns its id and the pairing code.
async fn create(
    x: &Client,
    inbox: &str,
    protocol: &str,
    rules: &[(&str, &str)],
) -> (String, String) {
    type_into(x, "#create-inbox", inbox).await;
    x.find(Locator::Css("#create-protocol"))
        .await
        .unwrap_or_else(|e| panic!("no protocol select: {e}"))
        .select_by_value(protocol)
        .await
        .unwrap_or_else(|e| panic!("cannot choose {protocol}: {e}"));
    for (rule, value) in rules {
        type_into(x, &format!("#rule-{rule}"), value).await;
    }
    click(x, "#create-button").await;
    wait_eq(
        x,
        "X",
        "document.getElementById('pairing-code').textContent.length > 0",
        json!(true),
    )
    .await;
    let code = eval(x, "document.getElementById('pairing-code').textContent").await;
    let title = eval(x, "document.getElementById('game-title').textContent").await;
    let game = title
        .as_str()
        .and_then(|t| t.strip_prefix("Game "))
        .unwrap_or_default()
        .to_owned();
    assert!(!game.is_empty(), "the game view names no game: {title}");
    (game, code.as_str().unwrap_or_default().to_owned())
}

/// O joins by `code` and must land in X's `game`.
async fn join(o: &Client, code: &str, game: &str) {
    type_into(o, "#join-code", code).await;
    click(o, "#join-button").await;
    let title = "document.getElementById('game-title').textContent";
    wait_eq(o, "O", title, json!(format!("Game {game}"))).await;
}

/// Clicks a tic-tac-toe cell as `mover` and waits until every browser shows the mark.
async fn play_cell(
    mover: &Client,
    all: &[(&str, &Client)],
    row: u32,
    col: u32,
    mark: &str,
    seq: u64,
) {
    click(
        mover,
        &format!("#board .cell[data-row=\"{row}\"][data-col=\"{col}\"]"),
    )
    .await;
    for (who, c) in all {
        wait_eq(c, who, &cell(row, col), json!(mark)).await;
        wait_eq(c, who, SEQ, json!(seq.to_string())).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_players_and_a_spectator_play_in_real_browsers() {
    let t0 = Instant::now();
    let hub = pipehub_tests::Hub::start(&[]);
    step(t0, "hub up");
    let base = hub.url("/");
    let driver = Driver::start();
    let inbox = format!("web-{}", std::process::id());

    step(t0, "hub and chromedriver up");
    let x = driver.browser("x").await;
    let o = driver.browser("o").await;
    let s = driver.browser("spectator").await;
    step(t0, "browsers started");
    open(&x, &base).await;
    screenshot(&x, "lobby").await;

    step(t0, "lobby open");
    // X creates, O joins by code, both see the started game.
    let (game, code) = create(&x, &inbox, "pipehub:tic-tac-toe", &[]).await;
    assert_eq!(code.len(), 8, "a pairing code is 8 characters: {code:?}");
    screenshot(&x, "x-waiting").await;
    open(&o, &base).await;
    join(&o, &code, &game).await;
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    wait_eq(&x, "X", STATUS, json!("Your turn.")).await;
    wait_eq(&o, "O", STATUS, json!("Waiting for X.")).await;

    step(t0, "game started for X and O");
    // The spectator finds the game in the inbox's listing and watches it.
    open(&s, &base).await;
    type_into(&s, "#list-inbox", &inbox).await;
    click(&s, "#list-button").await;
    let watch = format!("#game-list button[data-game=\"{game}\"]");
    wait_eq(
        &s,
        "spectator",
        &format!("document.querySelector('{watch}') !== null"),
        json!(true),
    )
    .await;
    click(&s, &watch).await;
    wait_eq(&s, "spectator", PHASE, json!("started")).await;

    step(t0, "spectator watching");
    let all = [("X", &x), ("O", &o), ("spectator", &s)];
    play_cell(&x, &all, 0, 0, "X", 1).await;
    play_cell(&o, &all, 1, 1, "O", 2).await;

    step(t0, "two moves");
    // A reload keeps X's seat: the token is in the tab's sessionStorage.
    x.refresh()
        .await
        .unwrap_or_else(|e| panic!("X cannot reload: {e}"));
    wait_eq(&x, "X after reload", SEQ, json!("2")).await;
    wait_eq(&x, "X after reload", STATUS, json!("Your turn.")).await;

    step(t0, "reloaded");
    // X tries O's cell: the page draws X there at once, the hub refuses, the page takes it
    // back. A MutationObserver records every mark the cell showed in between.
    eval(
        &x,
        "(() => { const c = document.querySelector('#board .cell[data-row=\"1\"][data-col=\"1\"]'); \
          window.seen = []; new MutationObserver(() => window.seen.push(c.textContent)) \
          .observe(c, {childList: true, characterData: true, subtree: true}); return true; })()",
    )
    .await;
    click(&x, "#board .cell[data-row=\"1\"][data-col=\"1\"]").await;
    wait_eq(&x, "X", "Array.from(document.querySelectorAll('#log li')).some(li => li.textContent.includes('refused your move'))", json!(true)).await;
    wait_eq(&x, "X", &cell(1, 1), json!("O")).await;
    wait_eq(
        &x,
        "X",
        "document.getElementById('board').dataset.pending",
        json!("false"),
    )
    .await;
    let seen = eval(&x, "window.seen").await;
    assert_eq!(
        seen,
        json!(["X", "O"]),
        "the refused move was not drawn and then taken back"
    );
    assert_eq!(
        eval(&x, SEQ).await,
        json!("2"),
        "a refused move changed the chain"
    );
    screenshot(&x, "x-refused").await;

    step(t0, "refused move taken back");
    play_cell(&x, &all, 0, 1, "X", 3).await;
    play_cell(&o, &all, 2, 2, "O", 4).await;
    play_cell(&x, &all, 0, 2, "X", 5).await;

    step(t0, "five moves");
    // Everyone sees the end, the same verified head, and the spectator saw every move.
    for (who, c) in all {
        wait_eq(c, who, OVER, json!("true")).await;
        wait_eq(
            c,
            who,
            "document.getElementById('chain-seq').textContent",
            json!("seq 5"),
        )
        .await;
    }
    wait_eq(
        &x,
        "X",
        STATUS,
        json!("Game over: you won (X wins, by line)."),
    )
    .await;
    wait_eq(
        &o,
        "O",
        STATUS,
        json!("Game over: you lost (X wins, by line)."),
    )
    .await;
    wait_eq(
        &s,
        "spectator",
        STATUS,
        json!("Game over: X wins, by line."),
    )
    .await;
    let head = eval(&x, "document.getElementById('chain-head').textContent").await;
    let head = head.as_str().unwrap_or_default().to_owned();
    assert!(
        head.len() == 64 && head.bytes().all(|b| b.is_ascii_hexdigit()),
        "head {head:?}"
    );
    for (who, c) in [("O", &o), ("spectator", &s)] {
        assert_eq!(
            eval(c, "document.getElementById('chain-head').textContent").await,
            json!(head),
            "{who}"
        );
    }
    let moves = eval(&s, "Array.from(document.querySelectorAll('#log li')).map(li => li.textContent).filter(t => t.includes(' played '))").await;
    assert_eq!(
        moves,
        json!([
            "X played row 1, column 1.",
            "O played row 2, column 2.",
            "X played row 1, column 2.",
            "O played row 3, column 3.",
            "X played row 1, column 3.",
        ]),
        "the spectator did not see every move in order"
    );
    screenshot(&x, "x-won").await;
    screenshot(&o, "o-lost").await;
    screenshot(&s, "spectator-end").await;

    step(t0, "end seen by all");
    // Rock-paper-scissors, best of one: O chooses first, so the hub holds O's choice until
    // its turn; O's page shows it, X's page must not. Then X chooses and the hub commits
    // and reveals both.
    click(&x, "#leave").await;
    click(&o, "#leave").await;
    let (game, code) = create(
        &x,
        &inbox,
        "pipehub:rock-paper-scissors",
        &[("bestOf", "1")],
    )
    .await;
    join(&o, &code, &game).await;
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    click(&o, "#board .choice[data-choice=\"paper\"]").await;
    wait_eq(
        &o,
        "O",
        "document.querySelector('#board .mine').textContent",
        json!("Your choice this round: paper"),
    )
    .await;
    screenshot(&o, "o-rock-paper-scissors").await;
    let x_sees = eval(
        &x,
        "document.querySelector('#board .mine').textContent + document.getElementById('log').textContent",
    )
    .await;
    assert!(
        !x_sees.as_str().unwrap_or_default().contains("paper"),
        "X's page shows O's choice: {x_sees}"
    );
    click(&x, "#board .choice[data-choice=\"rock\"]").await;
    wait_eq(
        &x,
        "X",
        STATUS,
        json!("Game over: you lost (O wins, by score)."),
    )
    .await;
    wait_eq(
        &o,
        "O",
        STATUS,
        json!("Game over: you won (O wins, by score)."),
    )
    .await;
    wait_eq(
        &x,
        "X",
        "document.querySelector('#board .rounds').textContent",
        json!("X rock, O paper — O wins"),
    )
    .await;
    screenshot(&x, "x-rock-paper-scissors-end").await;

    step(t0, "rock-paper-scissors over");

    // A second game, of connect-four, ends when O resigns.
    click(&x, "#leave").await;
    click(&o, "#leave").await;
    let (game, code) = create(&x, &inbox, "pipehub:connect-four", &[]).await;
    join(&o, &code, &game).await;
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    click(&x, "#board .drop[data-col=\"3\"]").await;
    for (who, c) in [("X", &x), ("O", &o)] {
        wait_eq(c, who, &cell(5, 3), json!("X")).await;
    }
    screenshot(&o, "o-connect-four").await;
    click(&o, "#resign").await;
    click(&o, "#resign-yes").await;
    wait_eq(
        &x,
        "X",
        STATUS,
        json!("Game over: you won (X wins, O resigned)."),
    )
    .await;
    wait_eq(
        &o,
        "O",
        STATUS,
        json!("Game over: you lost (X wins, O resigned)."),
    )
    .await;

    step(t0, "resigned game over");
    for c in [x, o, s] {
        let _ = c.close().await;
    }
    drop(driver);
}
