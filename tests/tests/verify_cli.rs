//! `pipehub verify`, run as the real binary: exact standard output and exit codes for the
//! README's example, refused lines, skipped games, both modes, standard input, and the
//! usage and input errors (exit 2).

use games::canonical::hash_hex;
use games::{Action, Event, Seat};
use pipehub_tests::{pipehub_bin, verify};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};

const EXAMPLE: &str = include_str!("../../examples/tic-tac-toe.jsonl");

/// An unsigned chain for `game`: a start naming `protocol` (or none), then `moves`.
fn chain(game: &str, protocol: Option<&str>, moves: &[Value]) -> Vec<String> {
    let mut events = Vec::new();
    let mut head = String::new();
    for seq in 0..=moves.len() {
        let e = Event {
            game: game.to_string(),
            seq: seq as u64,
            prev_hash: head.clone(),
            player: Seat::to_move_at(seq as u64),
            action: if seq == 0 {
                Action::Start
            } else {
                Action::Move
            },
            mv: seq.checked_sub(1).map(|i| moves[i].clone()),
            protocol: if seq == 0 {
                protocol.map(str::to_string)
            } else {
                None
            },
            rules: None,
            status: None,
            sig: None,
        };
        head = hash_hex(&e);
        events.push(e.to_json());
    }
    events
}

fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn the_example_in_both_modes() {
    assert_eq!(
        verify(&[], EXAMPLE),
        (
            1,
            "demo-won ok win X line\ndemo-signed ok draw\n\
             demo-race invalid line=19 seq=1 reason=stale_seq\n"
                .to_string()
        )
    );
    let (code, out) = verify(&["--inbox", "--json"], EXAMPLE);
    assert_eq!(code, 0);
    let want = [
        r#"{"game":"demo-won","verdict":"ok","result":{"status":"win","winner":"X","by":"line"},"line":16,"seq":5,"reason":null,"detail":null,"rejected":[]}"#,
        r#"{"game":"demo-signed","verdict":"ok","result":{"status":"draw","winner":null,"by":null},"line":17,"seq":9,"reason":null,"detail":null,"rejected":[]}"#,
        r#"{"game":"demo-race","verdict":"ok","result":{"status":"in_progress","winner":null,"by":null},"line":20,"seq":2,"reason":null,"detail":null,"rejected":[{"line":19,"seq":1,"reason":"stale_seq","detail":null}]}"#,
    ];
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    let (code, out) = verify(&["--json"], EXAMPLE);
    assert_eq!(code, 1);
    assert_eq!(
        out.lines().nth(2),
        Some(
            r#"{"game":"demo-race","verdict":"invalid","result":{"status":"in_progress","winner":null,"by":null},"line":19,"seq":1,"reason":"stale_seq","detail":null,"rejected":[]}"#
        )
    );
}

#[test]
fn refused_lines_stand_alone_in_both_modes() {
    let cell = |r: u64, c: u64| json!({"row": r, "col": c});
    let good = chain("g", None, &[cell(0, 0), cell(1, 1)]);
    let mut forged: Value = serde_json::from_str(&good[1]).unwrap();
    forged["extra"] = json!(1);
    let input = format!(
        "{}\n\n{}\r\n{{\"game\":\"g\",\"seq\":1.5}}\n\u{feff}{}\n{}\n{}\n{}\n",
        good[0],
        good[1],
        good[2],
        forged,
        "x".repeat(5000),
        r#"{"game":"g","game":"h"}"#,
    );
    // The forged line names game g but is not attached to it: g is still ok.
    let want = "g ok in_progress\n\
                - invalid line=4 reason=bad_number\n\
                - invalid line=5 reason=bad_json\n\
                - invalid line=6 reason=schema\n\
                - invalid line=7 reason=too_large\n\
                - invalid line=8 reason=duplicate_key\n";
    assert_eq!(verify(&[], &input), (1, want.to_string()));
    assert_eq!(verify(&["--inbox"], &input), (1, want.to_string()));
    let (_, json_out) = verify(&["--json"], &input);
    assert_eq!(
        json_out.lines().nth(1),
        Some(
            r#"{"game":null,"verdict":"invalid","result":null,"line":4,"seq":null,"reason":"bad_number","detail":null,"rejected":[]}"#
        )
    );
}

#[test]
fn skipped_games_and_the_default_protocol() {
    let unknown = chain("u", Some("acme:chess"), &[json!({"from": "e2"})]);
    let c4 = chain("c", None, &[json!({"col": 3}), json!({"col": 3})]);
    let input = joined(&[unknown, c4].concat());
    assert_eq!(
        verify(&["--default-protocol", "pipehub:connect-four"], &input),
        (
            0,
            "u skipped unknown_protocol\nc ok in_progress\n".to_string()
        )
    );
    // As tic-tac-toe, {"col": 3} is a payload of the wrong shape.
    assert_eq!(
        verify(&[], &input),
        (
            1,
            "u skipped unknown_protocol\nc invalid line=4 seq=1 reason=illegal_move bad_move\n"
                .to_string()
        )
    );
    let (_, out) = verify(&["--json"], &input);
    assert_eq!(
        out.lines().next(),
        Some(
            r#"{"game":"u","verdict":"skipped","result":null,"line":null,"seq":null,"reason":"unknown_protocol","detail":null,"rejected":[]}"#
        )
    );
}

#[test]
fn usage_and_input_errors_exit_2() {
    let (code, out) = verify(&["--default-protocol", "pipehub:Tic-Tac-Toe"], EXAMPLE);
    assert_eq!((code, out.as_str()), (2, ""));
    let missing = Command::new(pipehub_bin())
        .args(["verify", "/nonexistent/pipehub-log.jsonl"])
        .output()
        .expect("pipehub runs");
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("/nonexistent/pipehub-log.jsonl"),
        "{stderr}"
    );
    let dir = Command::new(pipehub_bin())
        .args(["verify", "/"])
        .output()
        .expect("pipehub runs");
    assert_eq!(dir.status.code(), Some(2));
    // An input with no events has no invalid game (exit 0), but says so: a closed
    // standard input reads as an empty one, and a script must not pass by verifying
    // nothing unheard.
    let closed = Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$0" verify - <&-"#)
        .arg(pipehub_bin())
        .output()
        .expect("sh runs");
    assert_eq!(closed.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert!(
        stderr.contains("standard input holds no events"),
        "{stderr}"
    );
}

#[test]
fn reads_standard_input() {
    let mut child = Command::new(pipehub_bin())
        .args(["verify", "--inbox", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pipehub runs");
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(EXAMPLE.as_bytes()).expect("write the log");
    drop(stdin);
    let out = child.wait_with_output().expect("pipehub exits");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "demo-won ok win X line\ndemo-signed ok draw\ndemo-race ok in_progress\n"
    );
}

#[test]
fn a_huge_line_is_too_large_and_not_held() {
    let start = &chain("h", None, &[])[0];
    let input = format!("{}\n{start}\n{}\r\n", "y".repeat(3 << 20), "z".repeat(4097));
    assert_eq!(
        verify(&[], &input),
        (
            1,
            "- invalid line=1 reason=too_large\nh ok in_progress\n\
             - invalid line=3 reason=too_large\n"
                .to_string()
        )
    );
    let padded = format!("{start}{}\r\n", " ".repeat(4096 - start.len()));
    assert_eq!(verify(&[], &padded), (0, "h ok in_progress\n".to_string()));
}
