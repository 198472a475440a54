//! Two AI-assistant agents (`pipehub mcp`) play full games against a real hub, driven by a
//! real MCP client nobody here wrote: the official MCP Python SDK (see `mcp_support`).
//!
//! One run plays tic-tac-toe, connect-four and rock-paper-scissors to a win, and a
//! tic-tac-toe game that O resigns after a refused move; the test looks at that one run
//! twice. First it checks the games as both seats saw them and what the hub exported; then
//! it scans every tool result and every log line of it for the agents' secrets: seat keys,
//! seat tokens and every rock-paper-scissors nonce the agents could have derived. (One
//! test rather than two sharing a static: a static is never dropped, so the hub it holds
//! would outlive the test process.)

mod mcp_support;

use std::path::PathBuf;
use std::time::Duration;

use games::Seat;
use mcp_support::{drive, seat_files, unhex, Run};
use pipehub_tests::{verify, Client, Hub};
use serde_json::{json, Value};

struct Played {
    hub: Hub,
    run: Run,
    states: [PathBuf; 2],
    _work: tempfile::TempDir,
}

/// Plays the one run.
fn play() -> Played {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let states = [work.path().join("agent-x"), work.path().join("agent-o")];
    let run = drive(
        "play",
        &hub.base,
        &[&states[0], &states[1]],
        work.path(),
        Duration::from_secs(240),
    );
    Played {
        hub,
        run,
        states,
        _work: work,
    }
}

#[test]
fn two_agents_play_every_protocol_and_no_secret_leaks() {
    let played = play();
    every_protocol_played_to_the_end(&played);
    no_key_token_or_nonce_in_any_tool_result_or_log(&played);
}

fn result(state: &Value) -> (String, String, String) {
    let r = &state["result"];
    let s = |v: &Value| v.as_str().unwrap_or("null").to_string();
    (s(&r["status"]), s(&r["winner"]), s(&r["by"]))
}

fn every_protocol_played_to_the_end(p: &Played) {
    let summary = &p.run.summary;
    let expected = [
        ("tic-tac-toe", "pipehub:tic-tac-toe", "line"),
        ("connect-four", "pipehub:connect-four", "line"),
        (
            "rock-paper-scissors",
            "pipehub:rock-paper-scissors",
            "score",
        ),
        ("resign", "pipehub:tic-tac-toe", "resign"),
    ];
    let client = Client::new();
    for (name, protocol, by) in expected {
        let game = &summary[name];
        for seat in ["X", "O"] {
            let state = &game[seat];
            assert_eq!(state["seat"], seat, "{name}: {state}");
            assert_eq!(state["protocol"], protocol, "{name}");
            assert_eq!(state["signed"], true, "{name}: signed play is the default");
            assert_eq!(
                result(state),
                ("win".into(), "X".into(), by.into()),
                "{name} as {seat} saw it: {state}"
            );
            assert_eq!(state["yourTurn"], false);
        }
        // Both seats verified the same chain head, and so does the hub's export.
        assert_eq!(game["X"]["head"], game["O"]["head"], "{name}");
        let id = game["game"].as_str().expect("a game id");
        let export = client.get(&p.hub.url(&format!("/v1/inboxes/default/games/{id}/export")));
        assert_eq!(export.status, 200, "{name}: {}", export.body);
        let (code, report) = verify(&["--json"], &export.body);
        assert_eq!(code, 0, "{name}: the exported chain verifies: {report}");
        let state = client
            .get(&p.hub.url(&format!("/v1/inboxes/default/games/{id}")))
            .json();
        assert_eq!(state["head"], game["X"]["head"], "{name}: the hub agrees");
        assert_eq!(
            state["keys"], game["X"]["keys"],
            "{name}: the agents' own keys"
        );
    }
    // The guest's choice was held by its agent until its commit turn, and shown to it.
    let held = p.run.results.iter().any(|r| {
        r["agent"] == "b"
            && r["tool"] == "game_move"
            && r["structuredContent"]["view"]["pendingChoice"] == "rock"
    });
    assert!(held, "O saw its own pending choice");
    // X's first choice was committed at once; its own view shows it until the reveal.
    let committed = p.run.results.iter().any(|r| {
        r["agent"] == "a"
            && r["tool"] == "game_move"
            && r["structuredContent"]["view"]["committed"]["X"] == true
            && r["structuredContent"]["view"]["pendingChoice"] == "rock"
    });
    assert!(committed, "X saw its own committed choice");
    // Neither seat ever saw a pending choice of the other: O chose only scissors and rock.
    for r in &p.run.results {
        let pending = &r["structuredContent"]["view"]["pendingChoice"];
        if r["agent"] == "b" && !pending.is_null() {
            assert!(pending == "scissors" || pending == "rock", "{r}");
        }
    }
    // A refused move is an error result that names the reason, with the seat's true
    // state beside it: the board as it is, still the person's turn.
    let refused = p
        .run
        .results
        .iter()
        .find(|r| r["isError"] == true)
        .expect("the refused move");
    assert!(refused["text"]
        .as_str()
        .is_some_and(|t| t.contains("occupied") && t.contains("<untrusted-board>\n")));
    let truth = &refused["structuredContent"];
    assert_eq!(truth["error"], "illegal_move", "{refused}");
    assert_eq!(truth["seat"], "O", "{refused}");
    assert_eq!(truth["yourTurn"], true, "{refused}");
    assert_eq!(truth["view"]["cells"][1][1], "X", "{refused}");
    // So is one the agent refuses itself: a move after the game ended.
    let late = p
        .run
        .results
        .iter()
        .find(|r| r["isError"] == true && r["structuredContent"]["error"] == "after_end")
        .expect("the move after the end, refused as after_end");
    let truth = &late["structuredContent"];
    assert_eq!(truth["seat"], "O", "{late}");
    assert_eq!(truth["result"]["status"], "win", "{late}");
    assert!(late["text"]
        .as_str()
        .is_some_and(|t| t.contains("the game is over") && t.contains("<untrusted-board>\n")));
    for (list, seat) in [("listX", "X"), ("listO", "O")] {
        let seats = summary[list]["seats"].as_array().expect("seats");
        assert_eq!(seats.len(), 4, "{list}");
        assert!(seats
            .iter()
            .all(|s| s["seat"] == seat && s["phase"] == "started"));
    }
    // Every game ended before the listing, and its text says how, not only "started".
    let lists: Vec<&Value> = p
        .run
        .results
        .iter()
        .filter(|r| r["tool"] == "game_list")
        .collect();
    assert_eq!(lists.len(), 2, "one listing of each agent");
    for r in lists {
        let text = r["text"].as_str().unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("- game ")).collect();
        assert_eq!(lines.len(), 4, "{text}");
        for line in lines {
            assert!(
                line.ends_with(": over, your person won")
                    || line.ends_with(": over, your person lost")
                    || line.ends_with(": over, a draw"),
                "{line}"
            );
        }
    }
    // Every successful result shows the board as untrusted text.
    for r in p.run.results.iter().filter(|r| r["isError"] == false) {
        if r["tool"] != "game_list" {
            let text = r["text"].as_str().unwrap_or_default();
            assert!(text.contains("<untrusted-board>\n"), "{text}");
            assert!(text.ends_with("</untrusted-board>"), "{text}");
        }
    }
}

fn no_key_token_or_nonce_in_any_tool_result_or_log(p: &Played) {
    let haystack = format!("{}\n{}", p.run.transcript, p.hub.log());
    let mut secrets = Vec::new();
    for state in &p.states {
        for file in seat_files(state) {
            assert_private(&file.path, 0o600);
            let r = &file.record;
            let key = r["key"].as_str().expect("the seat key").to_string();
            let token = r["token"].as_str().expect("the seat token").to_string();
            let seat = Seat::parse(r["seat"].as_str().expect("a seat")).expect("X or O");
            let (inbox, game) = (
                r["inbox"].as_str().expect("inbox"),
                r["game"].as_str().expect("game"),
            );
            // Every nonce the agent could derive for this seat, revealed or not.
            for seq in 0..64 {
                secrets.push(games::crypto::rps_nonce(
                    &unhex(&key),
                    inbox,
                    game,
                    seat,
                    seq,
                ));
            }
            secrets.push(key);
            secrets.push(token);
        }
        assert_private(&state.join("seats"), 0o700);
        assert_private(state, 0o700);
    }
    assert_eq!(secrets.len(), 8 * 66, "four games, two seats each");
    assert!(p.run.results.len() > 40, "the scan has something to scan");
    for secret in &secrets {
        assert!(
            !haystack.contains(secret.as_str()),
            "a secret appears in a tool result or a log"
        );
    }
}

#[cfg(unix)]
fn assert_private(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(m, mode, "{} has mode {m:o}", path.display());
}

#[cfg(not(unix))]
fn assert_private(_path: &std::path::Path, _mode: u32) {}

/// An agent holds one seat per game: its own pairing code, as typed by a person (in lower
/// case too), is refused before it is redeemed, and the code stays good for the opponent.
#[test]
fn an_agent_refuses_to_join_with_its_own_pairing_code() {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let mut x = mcp_support::Agent::start(
        &hub.base,
        &work.path().join("x"),
        &work.path().join("x.log"),
    );
    let created = x.ok("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    let code = created["pairingCode"].as_str().expect("a code");
    let spaced = format!(" {} {} ", &code[..4], &code[4..]).to_lowercase();
    for typed in [code.to_string(), code.to_lowercase(), spaced.clone()] {
        let joined = x.call("game_join", json!({"code": typed}));
        assert_eq!(joined["isError"], true, "{joined}");
        let text = joined["text"].as_str().unwrap_or_default();
        assert!(text.contains("this agent's own"), "{text}");
    }
    // What cannot be a code is refused by the agent, not sent to count against the
    // person's failed pairing attempts.
    for typed in ["", "abc", "ABCD-EFGH-J", "ABCDEFGU"] {
        let joined = x.call("game_join", json!({"code": typed}));
        assert_eq!(joined["isError"], true, "{joined}");
        let text = joined["text"].as_str().unwrap_or_default();
        assert!(
            text.contains("that is not a pairing code"),
            "{typed}: {text}"
        );
    }
    let listed = x.ok("game_list", json!({}));
    let seats = listed["seats"].as_array().cloned().unwrap_or_default();
    assert_eq!(seats.len(), 1, "{listed}");
    assert_eq!(seats[0]["seat"], "X");
    // The hub reads a code typed in two groups as the code.
    let paired =
        pipehub_tests::Client::new().post(&hub.url("/v1/pair"), None, &json!({"code": spaced}));
    assert_eq!(
        paired.status, 200,
        "the code is still good: {}",
        paired.body
    );
}

/// A game the person created that nobody joined: `game_board` and `game_list` show its
/// pairing code again, a fresh one once the kept one expired, and `game_resign` cancels it.
#[test]
fn a_game_nobody_joined_shows_its_code_a_fresh_one_once_expired_and_resign_cancels_it() {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let state = work.path().join("x");
    let start = |n: usize| {
        mcp_support::Agent::start(&hub.base, &state, &work.path().join(format!("x{n}.log")))
    };
    let mut x = start(0);
    // An id the agent does not hold comes back escaped once, and cut when it is huge.
    for (id, shown) in [
        ("<b>".to_string(), "game &lt;b&gt;;"),
        (
            "g".repeat(100_000),
            "(100000 characters; an id has at most 128)",
        ),
    ] {
        let unknown = x.call("game_board", json!({"game": id}));
        let text = unknown["text"].as_str().unwrap_or_default();
        assert!(
            text.contains(shown) && !text.contains("&amp;"),
            "{text:.300}"
        );
        assert!(text.len() < 1000, "{} bytes", text.len());
    }
    let made = x.call("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    let created = &made["structuredContent"];
    let code = created["pairingCode"].as_str().expect("a code").to_string();
    let game = created["game"].as_str().expect("a game").to_string();
    let until = created["expiresAt"].as_str().expect("an expiry");
    // The code is in the text too: a client may give its model the text alone.
    let text = made["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!("pairing code {code} ")) && text.contains(until),
        "{text}"
    );
    let board = x.call("game_board", json!({"game": game}));
    assert_eq!(
        board["structuredContent"]["pairingCode"],
        code.as_str(),
        "{board}"
    );
    let text = board["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&code) && text.contains("game_resign"),
        "{text}"
    );

    // The kept code expired (its expiry set back while the agent was stopped).
    x.stop();
    let file = &seat_files(&state)[0];
    let mut record = file.record.clone();
    record["codeExpiresAt"] = json!("2000-01-01T00:00:00Z");
    std::fs::write(&file.path, record.to_string()).expect("the seat file is written");
    let mut x = start(1);
    // A wait on the game that nobody joins tells the live code, and that the shared one
    // died.
    let waited = x.call("game_wait", json!({"game": game, "timeoutSeconds": 0}));
    let fresh = waited["structuredContent"]["pairingCode"]
        .as_str()
        .expect("a code")
        .to_string();
    assert_ne!(fresh, code, "a fresh code");
    let text = waited["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("The wait timed out")
            && text.contains("The earlier pairing code had expired")
            && text.contains(&fresh),
        "{text}"
    );
    let board = x.ok("game_board", json!({"game": game}));
    assert_eq!(board["pairingCode"], fresh.as_str(), "{board}");
    let listed = x.call("game_list", json!({}));
    let seat = &listed["structuredContent"]["seats"][0];
    assert_eq!(seat["pairingCode"], fresh.as_str(), "{listed}");
    let text = listed["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("(pairing code {fresh})")), "{text}");
    let c = Client::new();
    let old = c.post(&hub.url("/v1/pair"), None, &json!({"code": code}));
    assert_eq!(old.status, 410, "the old code died: {}", old.body);

    // Resign cancels it: the hub forgets the game, the agent its seat.
    let cancelled = x.ok("game_resign", json!({"game": game}));
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let gone = c.get(&hub.url(&format!("/v1/inboxes/default/games/{game}")));
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(x.ok("game_list", json!({}))["seats"], json!([]));
    assert!(seat_files(&state).is_empty(), "the seat file is gone");

    // A seat file damaged on this computer is named by game_list, not passed over.
    x.stop();
    std::fs::write(state.join("seats").join("seat-cut.json"), b"{\"hub\": \"ht").expect("written");
    let mut x = start(2);
    let listed = x.call("game_list", json!({}));
    assert_eq!(
        listed["structuredContent"]["damaged"],
        json!(["seat-cut.json"])
    );
    let text = listed["text"].as_str().unwrap_or_default();
    assert!(text.contains("could not read 1 seat file"), "{text}");
}

/// Seats are kept per hub: an agent started with `--hub` written another way does not
/// play them, and says where they are rather than show none.
#[test]
fn seats_of_another_hub_address_are_named_not_hidden() {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let state = work.path().join("x");
    let mut x = mcp_support::Agent::start(&hub.base, &state, &work.path().join("x0.log"));
    let created = x.ok("game_new", json!({"protocol": "pipehub:tic-tac-toe"}));
    let game = created["game"].as_str().expect("a game").to_string();
    x.stop();
    let other = hub.base.replace("127.0.0.1", "localhost");
    let mut x = mcp_support::Agent::start(&other, &state, &work.path().join("x1.log"));
    let listed = x.call("game_list", json!({}));
    assert_eq!(
        listed["structuredContent"]["otherHubs"],
        json!([{"hub": hub.base, "seats": 1}]),
        "{listed}"
    );
    let text = listed["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("1 seat of {}", hub.base)), "{text}");
    let board = x.call("game_board", json!({"game": game}));
    assert_eq!(board["isError"], true, "{board}");
    let text = board["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!("start the agent with --hub {}", hub.base)),
        "{text}"
    );
}
