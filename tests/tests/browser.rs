//! The web page in a real headless browser, against the real `pipehub` binary.
//!
//! Debian's `chromium`, driven through `chromedriver` over WebDriver, opens the page the hub
//! serves at `/` in three sessions at phone width (360 px): X creates a game, O joins it by
//! the pairing code, a third session finds it in the inbox listing and watches. They play
//! tic-tac-toe to X's win; on the way X tries a cell O holds, and the page must draw that
//! move at once and take it back when the hub refuses it; X reloads the tab mid-game and
//! must get its seat back, and plays one move from the keyboard (the board is one tab
//! stop, the arrow keys move between its cells); the spectator must see every move, two of
//! them made while its connection was down. Each event is read out once: the status line
//! tells the others' moves, the refusal is told by the notice alone, and the log, the
//! connection line and the game list are no live regions. At the end the page checks the
//! game's signed chain with the browser's own SHA-256 and Ed25519, and must refuse a log
//! altered on its way in. Then a game of rock-paper-scissors that O joins by its
//! invitation link, opened in the tab that still shows the first game, where O's early
//! choice is held by the hub (shown on O's page, never on X's), watched by the spectator;
//! and an unsigned one of connect-four that ends by resignation, whose chain the page
//! checks by its links alone. Then a waiting game cancelled from elsewhere, which sends
//! X's page and a spectator's back to the lobby saying so, and the lobby's edges: a hub
//! that cannot be reached, a spectator told that O joined, focus handed on when the
//! pairing box goes, Forget of a seat whose guest joined while X was away, double clicks
//! on Cancel and List, an inbox name the browser would take apart.
//! Screenshots of each step are written to
//! `target/tmp/browser/` for a person to look at.
//!
//! These tests install nothing: without `chromedriver` and `chromium` they fail and name
//! `scripts/test`, which installs them. Every wait is bounded, chromedriver listens on a
//! free 127.0.0.1 port, and everything started here is stopped at the end, also on panic.

mod browser_support;

use std::time::Instant;

use browser_support::{click, eval, press, screenshot, step, type_into, wait_eq, Driver};
use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::json;

fn cell(row: u32, col: u32) -> String {
    format!("(document.querySelector('#board .cell[data-row=\"{row}\"][data-col=\"{col}\"]') || {{}}).textContent || null")
}

const SEQ: &str = "document.getElementById('board').dataset.seq";
const PHASE: &str = "document.body.dataset.phase";
const OVER: &str = "document.body.dataset.over";
const STATUS: &str = "document.getElementById('status').textContent";
const CHECKED: &str = "document.getElementById('chain-check').dataset.ok || ''";
const CHECK_TEXT: &str = "document.getElementById('chain-check').textContent";
const ALERT: &str =
    "(() => { const a = document.getElementById('alert'); return !a.hidden && a.textContent; })()";
/// Counts the page's requests from here on in `window.openRequests`: each one is open from
/// its `fetch` until a task after its answer's body was read, by when the page has handled
/// the answer (what it does with it follows at once). A test that waits for none to be
/// open knows that no answer is still to come, without waiting for a fixed time.
const COUNT_REQUESTS: &str = "(() => {
  if (window.openRequests !== undefined) return true;
  window.openRequests = 0;
  const close = () => setTimeout(() => { window.openRequests -= 1; }, 0);
  const fetch = window.fetch;
  window.fetch = (...args) => {
    window.openRequests += 1;
    return fetch(...args).then((res) => {
      for (const read of ['json', 'text']) {
        const body = res[read].bind(res);
        res[read] = () => body().finally(close);
      }
      return res;
    }, (e) => { close(); throw e; });
  };
  return true;
})()";
const OPEN_REQUESTS: &str = "window.openRequests";
/// Every region a screen reader reads out by itself when it changes.
const LIVE: &str =
    "[aria-live]:not([aria-live=\"off\"]), [role=\"alert\"], [role=\"status\"], [role=\"log\"]";
/// The row and column of the focused element, as "row,col".
const FOCUSED_CELL: &str =
    "document.activeElement.dataset.row + ',' + document.activeElement.dataset.col";

/// The labels of the create form's rule inputs, in order.
async fn rule_labels(c: &Client) -> serde_json::Value {
    eval(
        c,
        "Array.from(document.querySelectorAll('#create-rules label'), (l) => l.textContent)",
    )
    .await
}

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

/// The spectator lists `inbox` and clicks Watch on `game`.
async fn watch_from_list(s: &Client, inbox: &str, game: &str) {
    type_into(s, "#list-inbox", inbox).await;
    click(s, "#list-button").await;
    let watch = format!("#game-list button[data-game=\"{game}\"]");
    wait_eq(
        s,
        "spectator",
        &format!("document.querySelector('{watch}') !== null"),
        json!(true),
    )
    .await;
    // The list is not read out game by game: one line says how many came.
    let said = eval(s, "document.getElementById('list-said').textContent").await;
    let said = said.as_str().unwrap_or_default();
    let counted = said.split(' ').next().and_then(|n| n.parse::<u32>().ok());
    assert!(
        counted.is_some() && said.contains(" listed"),
        "the listing's count line says {said:?}"
    );
    click(s, &watch).await;
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
    let first = tic_tac_toe(x.clone(), o.clone(), s.clone(), &base, &inbox, t0).await;
    step(t0, "tic-tac-toe: end seen by all");
    rock_paper_scissors(x.clone(), o.clone(), s.clone(), &base, &inbox, &first).await;
    step(t0, "rock-paper-scissors over");
    connect_four_resigned(x.clone(), o.clone(), &inbox).await;
    step(t0, "resigned game over");
    cancelled_elsewhere(x.clone(), s.clone(), &hub, &inbox).await;
    step(t0, "cancelled game left");
    lobby_edges(x.clone(), s.clone(), &hub, &inbox).await;
    step(t0, "lobby edges");
    for c in [x, o, s] {
        let _ = c.close().await;
    }
    drop(driver);
}

/// X and O play tic-tac-toe to X's win while a spectator watches: a refused move is drawn
/// and taken back, a reload keeps X's seat, and the spectator sees every move. Returns
/// the game's id.
async fn tic_tac_toe(
    x: Client,
    o: Client,
    s: Client,
    base: &str,
    inbox: &str,
    t0: Instant,
) -> String {
    // X creates, O joins by code, both see the started game.
    let (game, code) = create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    assert_eq!(code.len(), 8, "a pairing code is 8 characters: {code:?}");
    // The rules are named in words, rows before columns.
    assert_eq!(
        rule_labels(&x).await,
        json!([
            "Rows (1–64)",
            "Columns (1–64)",
            "In a row to win (1 to the longer side)"
        ])
    );
    screenshot(&x, "x-waiting").await;
    // Before the start the chain says nothing, and is not shown; Copy says what it did
    // beside the button (headless, the clipboard may refuse: the code is selected then).
    assert_eq!(
        eval(&x, "document.getElementById('chain').hidden").await,
        json!(true)
    );
    // The clipboard answers in its own time; on a slow machine, after the click returns.
    click(&x, "#copy-code").await;
    wait_eq(
        &x,
        "X",
        "['Copied.', 'Selected: copy it by hand.'].includes(document.getElementById('copy-said').textContent)",
        json!(true),
    )
    .await;
    open(&o, base).await;
    join(&o, &code, &game).await;
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    // X's status may have told the join on its own line before the start.
    wait_eq(
        &x,
        "X",
        &format!("{STATUS}.endsWith('Your turn.')"),
        json!(true),
    )
    .await;
    wait_eq(&o, "O", STATUS, json!("Waiting for X.")).await;
    // A tab in the background tells whose turn it is.
    wait_eq(&x, "X", "document.title", json!("Your turn · pipehub")).await;
    assert_eq!(eval(&o, "document.title").await, json!("pipehub"));
    // A square pressed out of turn sends nothing, and says why.
    click(&o, "#board .cell[data-row=\"2\"][data-col=\"2\"]").await;
    wait_eq(
        &o,
        "O",
        "(() => { const n = document.getElementById('notice'); return !n.hidden && n.textContent; })()",
        json!("It is not your turn yet."),
    )
    .await;
    assert_eq!(eval(&o, &cell(2, 2)).await, json!(null), "an empty square");
    // The message log, the connection line and the list of games are not live regions:
    // the status line and the notice tell each event once.
    assert_eq!(
        eval(
            &x,
            &format!(
                "['log', 'conn', 'game-list'].filter((id) => document.getElementById(id).closest('{LIVE}'))"
            )
        )
        .await,
        json!([]),
        "a region that repeats what the status says is read out"
    );

    step(t0, "game started for X and O");
    // The spectator finds the game in the inbox's listing and watches it. Its page's
    // sockets are kept where the test can close them, and can be refused a new one, so
    // that it misses moves later.
    open(&s, base).await;
    eval(
        &s,
        "(() => { const Real = window.WebSocket; window.sockets = []; \
           window.attempts = 0; \
           window.WebSocket = class extends Real { constructor(url, protocols) { \
             window.attempts += 1; if (window.blockWs) throw new Error('offline'); \
             super(url, protocols); window.sockets.push(this); } }; return true; })()",
    )
    .await;
    watch_from_list(&s, inbox, &game).await;
    wait_eq(&s, "spectator", PHASE, json!("started")).await;

    step(t0, "spectator watching");
    let all = [("X", &x), ("O", &o), ("spectator", &s)];
    play_cell(&x, &all, 0, 0, "X", 1).await;
    // The status line tells the others' move before where the game stands; the mover's
    // says only that.
    wait_eq(
        &o,
        "O",
        STATUS,
        json!("X played row 1, column 1. Your turn."),
    )
    .await;
    wait_eq(
        &s,
        "spectator",
        STATUS,
        json!("X played row 1, column 1. O to move."),
    )
    .await;
    wait_eq(&x, "X", STATUS, json!("Waiting for O.")).await;
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
    // The reason is told next to the board, not only in the log below it.
    wait_eq(
        &x,
        "X",
        "(() => { const n = document.getElementById('notice'); return !n.hidden && n.textContent; })()",
        json!("Your move was refused: that square is taken (illegal_move: occupied)."),
    )
    .await;
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
    // The refusal is read out once, by the notice, and its code is shown, not read out.
    assert_eq!(
        eval(
            &x,
            &format!(
                "Array.from(document.querySelectorAll('{LIVE}')).filter((n) => n.textContent.includes('square is taken')).map((n) => n.id)"
            )
        )
        .await,
        json!(["notice"]),
        "the refusal is read out more than once"
    );
    assert_eq!(
        eval(
            &x,
            "Array.from(document.querySelectorAll('#notice [aria-hidden=\"true\"]'), (n) => n.textContent)"
        )
        .await,
        json!([" (illegal_move: occupied)"]),
        "the hub's code is read out"
    );
    assert_eq!(
        eval(&x, SEQ).await,
        json!("2"),
        "a refused move changed the chain"
    );
    screenshot(&x, "x-refused").await;

    step(t0, "refused move taken back");
    // The spectator's page loses its connection for the next two moves.
    eval(
        &s,
        "(() => { window.blockWs = true; window.sockets.forEach((w) => w.close()); return true; })()",
    )
    .await;
    wait_eq(
        &s,
        "spectator",
        "document.body.dataset.conn",
        json!("reconnecting"),
    )
    .await;
    // When the browser says it is online again, the page tries at once rather than at the
    // end of its backoff (refused here, so it goes on waiting).
    assert_eq!(
        eval(
            &s,
            "(() => { const n = window.attempts; window.dispatchEvent(new Event('online')); return window.attempts - n; })()"
        )
        .await,
        json!(1)
    );
    let players = [("X", &x), ("O", &o)];
    // This move is made from the keyboard. The board is one tab stop, where the focus was
    // last (the refused cell); the arrow keys, Home and End move between the cells, Tab
    // leaves the board and Shift+Tab comes back to the same cell; Enter plays.
    let stops = "Array.from(document.querySelectorAll('#board button'), (b) => b.tabIndex).filter((t) => t >= 0).length";
    assert_eq!(
        eval(&x, stops).await,
        json!(1),
        "the board is not one tab stop"
    );
    eval(
        &x,
        "document.querySelector('#board .cell[data-row=\"1\"][data-col=\"1\"]').focus() || true",
    )
    .await;
    for (key, at) in [
        (Key::Home, "1,0"),
        (Key::End, "1,2"),
        (Key::Left, "1,1"),
        (Key::Up, "0,1"),
        (Key::Up, "0,1"),
    ] {
        press(&x, &key.to_string()).await;
        assert_eq!(eval(&x, FOCUSED_CELL).await, json!(at), "after {key:?}");
    }
    press(&x, &Key::Tab.to_string()).await;
    assert_eq!(
        eval(&x, "document.activeElement.id").await,
        json!("resign"),
        "Tab did not leave the board"
    );
    press(&x, &(Key::Shift + &Key::Tab)).await;
    assert_eq!(eval(&x, FOCUSED_CELL).await, json!("0,1"), "Shift+Tab");
    assert_eq!(eval(&x, stops).await, json!(1));
    press(&x, &Key::Enter.to_string()).await;
    for (who, c) in players {
        wait_eq(c, who, &cell(0, 1), json!("X")).await;
        wait_eq(c, who, SEQ, json!("3")).await;
    }
    // The cell keeps the focus, since the board is updated in place rather than redrawn.
    assert_eq!(
        eval(&x, FOCUSED_CELL).await,
        json!("0,1"),
        "the pressed cell lost the focus"
    );
    play_cell(&o, &players, 2, 2, "O", 4).await;
    // Back online, the spectator's page gets the board of seq 4 and tells both moves.
    eval(
        &s,
        "(() => { window.blockWs = false; window.dispatchEvent(new Event('online')); return true; })()",
    )
    .await;
    wait_eq(&s, "spectator", SEQ, json!("4")).await;
    wait_eq(
        &s,
        "spectator",
        "document.body.dataset.conn",
        json!("connected"),
    )
    .await;
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
        json!("X played row 1, column 3. Game over: you lost (X wins, by line)."),
    )
    .await;
    wait_eq(
        &s,
        "spectator",
        STATUS,
        json!("X played row 1, column 3. Game over: X wins, by line."),
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
    // The page checks the chain itself, with the browser's own SHA-256 and Ed25519 (the
    // page's games are signed by default, with keys the hub holds: a seat is told so)...
    for (who, c, signed) in [
        (
            "X",
            &x,
            "each signed with its seat's key (the hub holds your seat's key and signs with it for you).",
        ),
        ("spectator", &s, "each signed with its seat's key."),
    ] {
        click(c, "#check-chain").await;
        wait_eq(c, who, CHECKED, json!("true")).await;
        assert_eq!(
            eval(c, CHECK_TEXT).await,
            json!(format!(
                "Checked in this browser: 6 events link up to the head, {signed}"
            )),
            "{who}"
        );
    }
    // The same log with every object's keys in reverse order is the same chain (the page
    // canonicalizes what it reads); one with X's first move rewritten, its signature kept,
    // is not. The spectator's page gets the log through a fetch that alters it so.
    eval(
        &s,
        "(() => { const real = window.fetch; \
           const rev = (v) => Array.isArray(v) ? v.map(rev) : (v && typeof v === 'object') \
             ? Object.fromEntries(Object.keys(v).reverse().map((k) => [k, rev(v[k])])) : v; \
           window.fetch = async (url, opts) => { \
             const res = await real(url, opts); \
             if (!String(url).endsWith('/export')) return res; \
             const lines = (await res.text()).split('\\n').filter((l) => l !== ''); \
             const events = lines.map((l) => JSON.parse(l)); \
             if (window.alterLog === 'move') events[1].move = { row: 2, col: 2 }; \
             const text = events.map((e) => JSON.stringify(rev(e))).join('\\n'); \
             return new Response(text, { status: 200 }); }; \
           return true; })()",
    )
    .await;
    for (alter, ok, text) in [
        (
            "keys",
            "true",
            "Checked in this browser: 6 events link up to the head, each signed with its seat's key.",
        ),
        (
            "move",
            "false",
            "The check failed: seq 1 has a bad signature.",
        ),
    ] {
        eval(&s, &format!("window.alterLog = '{alter}'")).await;
        click(&s, "#check-chain").await;
        wait_eq(&s, "spectator", CHECKED, json!(ok)).await;
        assert_eq!(
            eval(&s, CHECK_TEXT).await,
            json!(text),
            "log altered: {alter}"
        );
    }
    let moves = eval(&s, "Array.from(document.querySelectorAll('#log li')).map(li => li.textContent).filter(t => t.includes(' played '))").await;
    assert_eq!(
        moves,
        json!([
            "X played row 1, column 1.",
            "O played row 2, column 2.",
            "While this page was away, 1 move came before the last: X played row 1, column 2.",
            "O played row 3, column 3.",
            "X played row 1, column 3.",
        ]),
        "the spectator did not see every move in order, or missed one while offline"
    );
    screenshot(&x, "x-won").await;
    screenshot(&o, "o-lost").await;
    screenshot(&s, "spectator-end").await;
    game
}

/// Rock-paper-scissors, best of one: O chooses first, so the hub holds O's choice until
/// its turn; O's page shows it, X's page must not. Then X chooses and the hub commits
/// and reveals both. O joins by the invitation link, opened in the tab that still shows
/// the finished tic-tac-toe game (`first`), and the spectator watches by the game's id.
async fn rock_paper_scissors(
    x: Client,
    o: Client,
    s: Client,
    base: &str,
    inbox: &str,
    first: &str,
) {
    click(&x, "#leave").await;
    let (game, code) = create(&x, inbox, "pipehub:rock-paper-scissors", &[("bestOf", "1")]).await;
    assert_eq!(rule_labels(&x).await, json!(["Best of (odd, 1–99)"]));
    // The link opens the lobby's Join with the code and the focus on Join, saying so; the
    // game the tab showed is not resumed, and stays under "Your games".
    o.goto(&format!("{base}?code={code}"))
        .await
        .unwrap_or_else(|e| panic!("O cannot open the invitation: {e}"));
    wait_eq(
        &o,
        "O",
        "document.body.dataset.ready === 'true'",
        json!(true),
    )
    .await;
    assert_eq!(
        eval(
            &o,
            &format!(
                "[document.getElementById('lobby').hidden, document.getElementById('join-code').value, \
                 document.activeElement.id, document.getElementById('join-invite').hidden, \
                 document.querySelector('#mine-list button[data-resume=\"{first}\"]') !== null]"
            )
        )
        .await,
        json!([false, code, "join-button", false, true]),
        "the invitation is not offered, or the tab's game is lost"
    );
    assert_eq!(
        eval(&o, "document.getElementById('join-invite').textContent").await,
        json!(format!("You opened an invitation to a game: press Join to take its free seat. The game this tab showed, {first}, stays under “Your games”.")),
    );
    screenshot(&o, "o-invitation").await;
    click(&o, "#join-button").await;
    wait_eq(
        &o,
        "O",
        "document.getElementById('game-title').textContent",
        json!(format!("Game {game}")),
    )
    .await;
    // Dealt with, the invitation leaves the address: a reload shows the game.
    assert_eq!(eval(&o, "location.search").await, json!(""));
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    click(&s, "#leave").await;
    type_into(&s, "#list-inbox", inbox).await;
    type_into(&s, "#watch-id", &game).await;
    click(&s, "#watch-button").await;
    wait_eq(&s, "spectator", PHASE, json!("started")).await;
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
    // The round's choices are news to all; the end is told by the status alone.
    let round = "Round 1: X rock, O paper — O takes the round.";
    for (who, c, end) in [
        ("X", &x, "you lost (O wins, by score)"),
        ("O", &o, "you won (O wins, by score)"),
        ("spectator", &s, "O wins, by score"),
    ] {
        wait_eq(c, who, STATUS, json!(format!("{round} Game over: {end}."))).await;
    }
    // Who has chosen speaks of a round under way: not under the final score.
    assert_eq!(
        eval(&s, "document.querySelector('#board .mine').textContent").await,
        json!(""),
        "the spectator is told who chose in a game that is over"
    );
    wait_eq(
        &x,
        "X",
        "document.querySelector('#board .rounds').textContent",
        json!("X rock, O paper — O wins"),
    )
    .await;
    screenshot(&x, "x-rock-paper-scissors-end").await;
}

/// Sets the width of the page's column (a CSS length; "" for the page's own).
async fn column_width(c: &Client, width: &str) {
    let set = format!(
        "(() => {{ document.querySelector('main').style.maxWidth = '{width}'; return true; }})()"
    );
    eval(c, &set).await;
}

/// A game of connect-four that ends when O resigns.
async fn connect_four_resigned(x: Client, o: Client, inbox: &str) {
    click(&x, "#leave").await;
    click(&o, "#leave").await;
    // This one unsigned: the page's checkbox is on by default.
    click(&x, "#create-signed").await;
    let (game, code) = create(&x, inbox, "pipehub:connect-four", &[]).await;
    join(&o, &code, &game).await;
    for (who, c) in [("O", &o), ("X", &x)] {
        wait_eq(c, who, PHASE, json!("started")).await;
    }
    assert_eq!(
        eval(
            &x,
            "document.getElementById('game-meta').textContent.includes('signed')"
        )
        .await,
        json!(false)
    );
    click(&x, "#board .drop[data-col=\"3\"]").await;
    for (who, c) in [("X", &x), ("O", &o)] {
        wait_eq(c, who, &cell(5, 3), json!("X")).await;
    }
    // The drop buttons are one tab stop, where the focus was last.
    assert_eq!(
        eval(
            &x,
            "Array.from(document.querySelectorAll('#board .drop'), (b) => b.tabIndex).join(' ')"
        )
        .await,
        json!("-1 -1 -1 0 -1 -1 -1")
    );
    // The board sizes its cells to its own width, not the window's (which counts a
    // desktop's scrollbar): in a column narrower than the window, seven columns still fit.
    assert_eq!(
        eval(
            &x,
            "(() => { const main = document.querySelector('main'); main.style.maxWidth = '300px'; \
               const b = document.getElementById('board'); const fits = b.scrollWidth <= b.clientWidth; \
               main.style.maxWidth = ''; return fits; })()"
        )
        .await,
        json!(true),
        "the board overflows its column"
    );
    // In a column too narrow for the board, it scrolls sideways, and a line says so.
    let wide = "!document.getElementById('board-wide').hidden";
    assert_eq!(eval(&x, wide).await, json!(false));
    column_width(&x, "150px").await;
    wait_eq(&x, "X", wide, json!(true)).await;
    screenshot(&x, "x-board-wider-than-its-column").await;
    column_width(&x, "").await;
    wait_eq(&x, "X", wide, json!(false)).await;
    // Back in the lobby the seat is kept under "Your games", and resumes the game.
    click(&x, "#leave").await;
    let resume = format!("#mine-list button[data-resume=\"{game}\"]");
    wait_eq(
        &x,
        "X",
        &format!(
            "!document.getElementById('mine').hidden && !!document.querySelector('{}')",
            resume.replace('\'', "\\'")
        ),
        json!(true),
    )
    .await;
    // The list says where the game stands: O's move.
    wait_eq(
        &x,
        "X",
        &format!("(document.querySelector('#mine-list .seat-state[data-game=\"{game}\"]') || {{}}).textContent || null"),
        json!("(connect-four, waiting for O) "),
    )
    .await;
    click(&x, &resume).await;
    wait_eq(&x, "X", PHASE, json!("started")).await;
    wait_eq(&x, "X", &cell(5, 3), json!("X")).await;
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
    // An unsigned chain checks out by its links alone: start, X's move, O's resignation.
    click(&o, "#check-chain").await;
    wait_eq(&o, "O", CHECKED, json!("true")).await;
    assert_eq!(
        eval(&o, CHECK_TEXT).await,
        json!("Checked in this browser: 3 events link up to the head.")
    );
}

/// A waiting game cancelled from elsewhere (X's other tab, say): X's page and a
/// spectator's, both showing it, go back to the lobby saying it is gone, and X's list of
/// games forgets it.
async fn cancelled_elsewhere(x: Client, s: Client, hub: &pipehub_tests::Hub, inbox: &str) {
    click(&x, "#leave").await;
    click(&s, "#leave").await;
    let (game, _) = create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    watch_from_list(&s, inbox, &game).await;
    wait_eq(&s, "spectator", PHASE, json!("waiting")).await;
    let token = eval(
        &x,
        "JSON.parse(sessionStorage.getItem('pipehub.session')).token",
    )
    .await;
    let token = token.as_str().expect("X's token in the tab").to_owned();
    let url = hub.url(&format!("/v1/inboxes/{inbox}/games/{game}"));
    let cancelled = tokio::task::block_in_place(|| {
        pipehub_tests::Client::new().send("DELETE", &url, Some(&token), None, None)
    });
    assert_eq!(cancelled.status, 204, "{}", cancelled.body);
    let told = json!(format!(
        "Game {game} is gone: the game was cancelled before anyone joined."
    ));
    for (who, c) in [("X", &x), ("spectator", &s)] {
        wait_eq(c, who, ALERT, told.clone()).await;
        wait_eq(
            c,
            who,
            "document.getElementById('lobby').hidden",
            json!(false),
        )
        .await;
    }
    screenshot(&s, "spectator-cancelled").await;
    let listed = format!("document.querySelector('#mine-list [data-game=\"{game}\"]') !== null");
    assert_eq!(eval(&x, &listed).await, json!(false));
}

/// Pairs a game over HTTP, as a guest elsewhere would, by its code.
fn pair_elsewhere(hub: &pipehub_tests::Hub, code: &str) {
    let paired = tokio::task::block_in_place(|| {
        pipehub_tests::Client::new().post(&hub.url("/v1/pair"), None, &json!({"code": code}))
    });
    assert_eq!(paired.status, 200, "{}", paired.body);
}

/// What an outside audit of the page found at its edges: the focus on a control that goes
/// away (the pairing box once the guest joins), "Forget" judged by a code this browser kept
/// though the guest joined meanwhile, a double click on Cancel or List, and an inbox name
/// the browser would take apart as a path.
async fn lobby_edges(x: Client, s: Client, hub: &pipehub_tests::Hub, inbox: &str) {
    const FOCUSED: &str = "document.activeElement && document.activeElement.id";
    // A join the hub cannot be reached for says so in one sentence.
    eval(
        &s,
        "(() => { window.realFetch = window.fetch; \
           window.fetch = () => Promise.reject(new TypeError('offline')); return true; })()",
    )
    .await;
    type_into(&s, "#join-code", "ABCDEFGH").await;
    click(&s, "#join-button").await;
    wait_eq(
        &s,
        "spectator",
        ALERT,
        json!("Could not join: the hub cannot be reached."),
    )
    .await;
    // The alert sits above the forms: at phone width it is brought into sight.
    assert_eq!(
        eval(
            &s,
            "(() => { const b = document.getElementById('alert').getBoundingClientRect(); \
              return b.top >= 0 && b.bottom <= window.innerHeight; })()"
        )
        .await,
        json!(true),
        "the join's error is out of sight"
    );
    eval(
        &s,
        "(() => { window.fetch = window.realFetch; return true; })()",
    )
    .await;

    // The spectator watches a waiting game while its page cannot reach the hub (its
    // sockets are refused, see `tic_tac_toe`): the status says so, not "Connecting…".
    let (game, code) = create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    eval(&s, "(() => { window.blockWs = true; return true; })()").await;
    type_into(&s, "#list-inbox", inbox).await;
    type_into(&s, "#watch-id", &game).await;
    click(&s, "#watch-button").await;
    wait_eq(
        &s,
        "spectator",
        STATUS,
        json!("The hub cannot be reached; the page keeps trying."),
    )
    .await;
    eval(&s, "(() => { window.blockWs = false; return true; })()").await;
    wait_eq(&s, "spectator", PHASE, json!("waiting")).await;

    // The guest joins while X's focus is on Copy: it moves to the status line. The
    // spectator is told that O joined, not that its opponent did.
    eval(&x, "document.getElementById('copy-code').focus() || true").await;
    pair_elsewhere(hub, &code);
    wait_eq(
        &x,
        "X",
        "document.getElementById('pairing').hidden",
        json!(true),
    )
    .await;
    wait_eq(&x, "X", FOCUSED, json!("status")).await;
    click(&x, "#leave").await;
    wait_eq(&s, "spectator", PHASE, json!("started")).await;
    let joined = "Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).filter((t) => t.includes('joined'))";
    assert_eq!(eval(&s, joined).await, json!(["O joined."]));
    click(&s, "#leave").await;

    // X leaves a waiting game, and its guest joins while X is away: Forget warns of a seat
    // given up, not of a cancel, and the game goes on.
    let (game, code) = create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    click(&x, "#leave").await;
    pair_elsewhere(hub, &code);
    eval(
        &x,
        "(() => { window.asked = null; window.confirm = (q) => { window.asked = q; return true; }; return true; })()",
    )
    .await;
    click(
        &x,
        &format!("#mine-list button[aria-label=\"Forget seat X of game {game}\"]"),
    )
    .await;
    wait_eq(
        &x,
        "X",
        "String(window.asked).startsWith('Forget your seat X in game')",
        json!(true),
    )
    .await;
    let listed = format!("document.querySelector('#mine-list [data-game=\"{game}\"]') !== null");
    wait_eq(&x, "X", &listed, json!(false)).await;
    let state = tokio::task::block_in_place(|| {
        pipehub_tests::Client::new().get(&hub.url(&format!("/v1/inboxes/{inbox}/games/{game}")))
    });
    assert_eq!(state.status, 200, "{}", state.body);
    assert_ne!(state.json()["phase"], "waiting", "{}", state.body);

    // A double click on Cancel cancels once, and says so, once every answer is in.
    create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    eval(&x, COUNT_REQUESTS).await;
    eval(
        &x,
        "(() => { const b = document.getElementById('cancel-game'); b.click(); b.click(); return true; })()",
    )
    .await;
    wait_eq(&x, "X", ALERT, json!("The game was cancelled.")).await;
    wait_eq(&x, "X", OPEN_REQUESTS, json!(0)).await;
    assert_eq!(eval(&x, ALERT).await, json!("The game was cancelled."));

    // A double click on List lists each game once (the spectator is in the lobby), once
    // both answers are in.
    type_into(&s, "#list-inbox", inbox).await;
    eval(&s, COUNT_REQUESTS).await;
    eval(
        &s,
        "(() => { const b = document.getElementById('list-button'); b.click(); b.click(); return true; })()",
    )
    .await;
    let rows = "document.querySelectorAll('#game-list button[data-game]').length";
    wait_eq(&s, "spectator", &format!("{rows} > 0"), json!(true)).await;
    wait_eq(&s, "spectator", OPEN_REQUESTS, json!(0)).await;
    assert_eq!(
        eval(
            &s,
            "(() => { const ids = Array.from(document.querySelectorAll('#game-list button[data-game]'), (b) => b.dataset.game); return ids.length === new Set(ids).size; })()"
        )
        .await,
        json!(true),
        "a game listed twice"
    );
    // ".." is no inbox: the page says so rather than asking the hub for another path.
    type_into(&s, "#list-inbox", "..").await;
    click(&s, "#list-button").await;
    wait_eq(
        &s,
        "spectator",
        ALERT,
        json!("Check the inbox: an inbox name is 1 to 128 letters, digits and . _ : - and starts with a letter or digit."),
    )
    .await;

    // A join whose answer is lost on its way (the hub seated O, the page heard nothing):
    // Join pressed again sends the same pair with the same Idempotency-Key, and the page
    // sits at O of the game rather than hear that the code is used.
    let (game, code) = create(&x, inbox, "pipehub:tic-tac-toe", &[]).await;
    eval(
        &s,
        "(() => { window.realFetch = window.fetch; window.pairKeys = []; \
           window.fetch = (path, init) => { \
             if (path !== '/v1/pair') return window.realFetch(path, init); \
             window.pairKeys.push(init.headers['Idempotency-Key']); \
             const sent = window.realFetch(path, init); \
             return window.pairKeys.length === 1 \
               ? sent.then(() => Promise.reject(new TypeError('connection reset'))) : sent; }; \
           return true; })()",
    )
    .await;
    type_into(&s, "#join-code", &code).await;
    click(&s, "#join-button").await;
    wait_eq(
        &s,
        "guest",
        ALERT,
        json!("Could not join: the hub cannot be reached."),
    )
    .await;
    let paired = tokio::task::block_in_place(|| {
        pipehub_tests::Client::new().get(&hub.url(&format!("/v1/inboxes/{inbox}/games/{game}")))
    });
    assert_ne!(
        paired.json()["phase"],
        "waiting",
        "the first pair seated O: {}",
        paired.body
    );
    click(&s, "#join-button").await;
    let title = "document.getElementById('game-title').textContent";
    wait_eq(&s, "guest", title, json!(format!("Game {game}"))).await;
    let keys = eval(&s, "window.pairKeys").await;
    assert!(
        keys[0].as_str().is_some_and(|k| k.len() == 32) && keys[0] == keys[1],
        "one key for both tries: {keys}"
    );
    eval(
        &s,
        "(() => { window.fetch = window.realFetch; return true; })()",
    )
    .await;
    click(&s, "#leave").await;

    // A create whose answer is lost on its way (the hub made the game, the page heard
    // nothing): Create pressed again sends the same create with the same Idempotency-Key,
    // and the page sits at X of that game rather than make a second.
    let waiting = || {
        let url = hub.url(&format!(
            "/v1/inboxes/{inbox}/games?phase=waiting&limit=100"
        ));
        let listed = tokio::task::block_in_place(|| pipehub_tests::Client::new().get(&url));
        assert_eq!(listed.status, 200, "{}", listed.body);
        listed.json()["items"].as_array().map_or(0, Vec::len)
    };
    let before = waiting();
    let patch = format!(
        "(() => {{ window.realFetch = window.fetch; window.createKeys = []; \
           window.fetch = (path, init) => {{ \
             if (path !== '/v1/inboxes/{inbox}/games' || init.method !== 'POST') return window.realFetch(path, init); \
             window.createKeys.push(init.headers['Idempotency-Key']); \
             const sent = window.realFetch(path, init); \
             return window.createKeys.length === 1 \
               ? sent.then(() => Promise.reject(new TypeError('connection reset'))) : sent; }}; \
           return true; }})()"
    );
    // X still sits in the game the guest joined above.
    click(&x, "#leave").await;
    eval(&x, &patch).await;
    type_into(&x, "#create-inbox", inbox).await;
    click(&x, "#create-button").await;
    wait_eq(
        &x,
        "X",
        ALERT,
        json!("Could not create the game: the hub cannot be reached."),
    )
    .await;
    assert_eq!(waiting(), before + 1, "the first create made the game");
    click(&x, "#create-button").await;
    wait_eq(
        &x,
        "X",
        "document.getElementById('pairing-code').textContent.length > 0",
        json!(true),
    )
    .await;
    assert_eq!(waiting(), before + 1, "no second game");
    let keys = eval(&x, "window.createKeys").await;
    assert!(
        keys[0].as_str().is_some_and(|k| k.len() == 32) && keys[0] == keys[1],
        "one key for both tries: {keys}"
    );
    eval(
        &x,
        "(() => { window.fetch = window.realFetch; return true; })()",
    )
    .await;
    click(&x, "#leave").await;
}
