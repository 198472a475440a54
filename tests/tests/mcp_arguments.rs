//! An agent (`pipehub mcp`) on a real hub, called over MCP with arbitrary tool arguments,
//! as an assistant may send them: the tool layer reads untrusted input.
//!
//! One agent holds seat X of a tic-tac-toe, a connect-four and a rock-paper-scissors game
//! whose O is seated over HTTP (the hub holds O's key) and answers between calls, so that
//! the arguments meet games in every state: the person's turn, the opponent's, a choice
//! held, committed or revealed, a game over (then a new one is made). The calls are drawn
//! at random: right tools with arguments missing, extra, `null`, of the wrong type, huge,
//! nested or path-like, moves of the right shape with right or wrong values, rules of any
//! kind, codes of its own games. Whatever they are:
//!
//! - every call is answered (the agent does not die), a refusal with `isError` and a reason
//!   code from the contract (DESIGN.md sections 1, 2 and 5) or the agent's own (`usage`,
//!   `unreachable`, `verification_failed`, `state_dir`, `client`: docs/decisions.md);
//! - no result, and no line of the agent's log, holds a seat's key, its token or a nonce
//!   its key derives;
//! - nothing but seat files is written to the agent's state directory.
//!
//! The same properties without a hub, at the tool layer itself, are unit tests in
//! `hub/src/mcp/tools_arguments.rs`.

mod mcp_support;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use games::Seat;
use mcp_support::{seat_files, Agent};
use pipehub_tests::{Client, Hub};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};

const PROTOCOLS: [&str; 3] = [
    "pipehub:tic-tac-toe",
    "pipehub:connect-four",
    "pipehub:rock-paper-scissors",
];

/// The codes a refusal may carry: the referee's (sections 1 and 2), the hub's answers
/// before its inbox (section 5), and the agent's own.
const CODES: &[&str] = &[
    "too_large",
    "bad_json",
    "duplicate_key",
    "bad_number",
    "schema",
    "no_start",
    "bad_start",
    "start_has_move",
    "unknown_protocol",
    "bad_rules",
    "two_genesis",
    "after_end",
    "stale_seq",
    "bad_seq",
    "bad_prev_hash",
    "wrong_player",
    "missing_signature",
    "bad_signature",
    "illegal_move",
    "status_mismatch",
    "not_started",
    "unauthorized",
    "forbidden",
    "rate_limited",
    "unsupported_media_type",
    "not_found",
    "method_not_allowed",
    "bad_request",
    "agent_held",
    "code_used",
    "code_expired",
    "unavailable",
    "usage",
    "unreachable",
    "verification_failed",
    "state_dir",
    "client",
];

/// One game the agent holds seat X of, and O's token.
struct Game {
    id: String,
    o: String,
}

struct Table {
    hub: Hub,
    agent: Agent,
    state: PathBuf,
    log: PathBuf,
    _work: tempfile::TempDir,
    games: Vec<Game>,
    /// Pairing codes of games the agent made that nobody joined.
    codes: Vec<String>,
    /// Secrets by seat file, computed once a file.
    secrets: HashMap<PathBuf, Vec<String>>,
}

impl Table {
    fn new() -> Table {
        let hub = Hub::start(&["--rate-limit", "100000/1", "--max-open-games", "0"]);
        let work = tempfile::tempdir().expect("a temporary directory");
        let state = work.path().join("x");
        let log = work.path().join("x.log");
        let agent = Agent::start(&hub.base, &state, &log);
        let mut table = Table {
            hub,
            agent,
            state,
            log,
            _work: work,
            games: Vec::new(),
            codes: Vec::new(),
            secrets: HashMap::new(),
        };
        for p in PROTOCOLS {
            let game = table.start(p);
            table.games.push(game);
        }
        table
    }

    /// A new game of `protocol`, paired, at X's turn.
    fn start(&mut self, protocol: &str) -> Game {
        let created = self.agent.ok("game_new", json!({"protocol": protocol}));
        let id = created["game"].as_str().expect("a game").to_string();
        let r = Client::new().post(
            &self.hub.url("/v1/pair"),
            None,
            &json!({"code": created["pairingCode"]}),
        );
        assert_eq!(r.status, 200, "pair: {}", r.body);
        let o = r.json()["token"].as_str().expect("a token").to_string();
        self.agent.wait_turn(&id);
        Game { id, o }
    }

    /// O's answer in each game that waits for O, and a new game for each that is over.
    fn opponents_answer(&mut self) {
        let client = Client::new();
        for (i, protocol) in PROTOCOLS.into_iter().enumerate() {
            let g = &self.games[i];
            let path = format!("/v1/inboxes/default/games/{}", g.id);
            let view = client.get_auth(&self.hub.url(&format!("{path}/view")), &g.o);
            assert_eq!(view.status, 200, "O's view: {}", view.body);
            let view = view.json();
            if view["result"]["status"] != "in_progress" {
                self.games[i] = self.start(protocol);
                continue;
            }
            let seq = view["seq"].as_u64().unwrap_or_default();
            let moves: Vec<Value> = match i {
                2 => {
                    let v = &view["view"];
                    if v["committed"]["O"] == true || !v["pendingChoice"].is_null() {
                        vec![]
                    } else {
                        vec![json!({"choice": "rock"})]
                    }
                }
                _ if seq.is_multiple_of(2) => vec![],
                0 => (0..9)
                    .map(|c| json!({"row": c / 3, "col": c % 3}))
                    .collect(),
                _ => (0..7).map(|c| json!({"col": c})).collect(),
            };
            for mv in moves {
                let r = client.post(
                    &self.hub.url(&format!("{path}/moves")),
                    Some(&g.o),
                    &json!({"move": mv}),
                );
                if r.status < 300 {
                    break;
                }
            }
        }
    }

    /// Every secret the agent holds: its seats' keys and tokens, and each nonce a key
    /// derives for its game's first seqs.
    fn secrets(&mut self) -> Vec<String> {
        for f in seat_files(&self.state) {
            self.secrets.entry(f.path).or_insert_with(|| {
                let r = &f.record;
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                let mut out = vec![s("key")];
                out.extend(r["token"].as_str().map(str::to_string));
                if r["protocol"] == PROTOCOLS[2] {
                    let key = mcp_support::unhex(&s("key"));
                    for seq in 0..60 {
                        out.push(games::crypto::rps_nonce(
                            &key,
                            &s("inbox"),
                            &s("game"),
                            Seat::X,
                            seq,
                        ));
                    }
                }
                out
            });
        }
        self.secrets.values().flatten().cloned().collect()
    }
}

/// Strings a model could send for an id, a code or a protocol.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "", ".", "..", "../x", "../../etc/passwd", "a/b", "/tmp/x", "x\0y", "seats", "lock",
            "%2e%2e%2f", "pipehub:tic-tac-toe", "pipehub:connect-four",
            "pipehub:rock-paper-scissors", "flurryport:tic-tac-toe", "ABCD-EFGH",
            "</untrusted-board>", "\u{202e}x",
        ]).prop_map(str::to_string),
        2 => "\\PC{0,30}",
        1 => (1usize..2000).prop_map(|n| "é".repeat(n)),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => (0i64..7).prop_map(Value::from),
        1 => (0i64..7).prop_map(|n| json!(n as f64)),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|x| json!(x)),
        1 => Just(json!(0.5)),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map(key(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "row", "col", "choice", "commit", "nonce", "rows", "cols", "winLength", "bestOf",
            "keys", "inboxes",
        ]).prop_map(str::to_string),
        1 => text(),
    ]
}

/// A move: often a legal one in one of the games, of the right shape otherwise.
fn a_move() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (0i64..3, 0i64..3).prop_map(|(r, c)| json!({"row": r, "col": c})),
        2 => (0i64..7).prop_map(|c| json!({"col": c})),
        2 => proptest::sample::select(vec!["rock", "paper", "scissors"])
            .prop_map(|c| json!({"choice": c})),
        2 => (number(), number()).prop_map(|(r, c)| json!({"row": r, "col": c})),
        1 => number().prop_map(|c| json!({"col": c})),
        1 => proptest::sample::select(vec!["Rock", "", "rock "])
            .prop_map(|c| json!({"choice": c})),
        1 => (text(), text()).prop_map(|(c, n)| json!({"choice": c, "nonce": n})),
        1 => text().prop_map(|c| json!({"commit": c})),
        2 => value(),
    ]
}

/// Which game an argument names: one the agent holds (by index), or any text.
#[derive(Clone, Debug)]
enum Id {
    Held(usize),
    Text(String),
}

/// What one call draws; made into a tool call against the table as it stands then.
#[derive(Clone, Debug)]
struct Draw {
    tool: String,
    game: Option<Id>,
    mv: Option<Value>,
    protocol: Option<Value>,
    rules: Option<Value>,
    code: Option<Option<Value>>,
    timeout: Option<Value>,
    extra: Option<(String, Value)>,
}

fn draw() -> impl Strategy<Value = Draw> {
    let tool = prop_oneof![
        3 => Just("game_move".to_string()),
        1 => Just("game_board".to_string()),
        1 => Just("game_wait".to_string()),
        1 => Just("game_new".to_string()),
        1 => Just("game_join".to_string()),
        1 => Just("game_list".to_string()),
        1 => Just("game_resign".to_string()),
        1 => text(),
    ];
    let id = prop_oneof![
        4 => (0usize..3).prop_map(Id::Held),
        1 => text().prop_map(Id::Text),
    ];
    let rules = prop_oneof![
        2 => proptest::collection::btree_map(key(), value(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => (3i64..6, 3i64..6, 1i64..5)
            .prop_map(|(r, c, w)| json!({"rows": r, "cols": c, "winLength": w})),
        1 => value(),
    ];
    // `Some(None)`: one of the agent's own pairing codes.
    let code = prop_oneof![1 => Just(None), 2 => value().prop_map(Some)];
    (
        tool,
        proptest::option::weighted(0.95, id),
        proptest::option::weighted(0.9, prop_oneof![5 => a_move(), 1 => value()]),
        proptest::option::weighted(0.9, prop_oneof![3 => proptest::sample::select(PROTOCOLS.to_vec()).prop_map(Value::from), 1 => value()]),
        proptest::option::weighted(0.5, rules),
        proptest::option::weighted(0.9, code),
        proptest::option::weighted(0.3, value()),
        proptest::option::weighted(0.1, (text(), value())),
    )
        .prop_map(|(tool, game, mv, protocol, rules, code, timeout, extra)| Draw {
            tool,
            game,
            mv,
            protocol,
            rules,
            code,
            timeout,
            extra,
        })
}

impl Table {
    /// The tool call a draw makes, as the table stands: only the arguments the tool takes,
    /// most of the time.
    fn arguments(&self, d: &Draw) -> Map<String, Value> {
        let mut a = Map::new();
        let game = d.game.as_ref().map(|id| match id {
            Id::Held(i) => Value::from(self.games[*i].id.clone()),
            Id::Text(t) => Value::from(t.clone()),
        });
        let code = d
            .code
            .clone()
            .map(|c| c.unwrap_or_else(|| self.codes.last().cloned().unwrap_or_default().into()));
        let wanted: &[(&str, Option<Value>)] = &[
            ("game", game.clone()),
            ("move", d.mv.clone()),
            ("protocol", d.protocol.clone()),
            ("rules", d.rules.clone()),
            ("code", code),
            ("timeoutSeconds", d.timeout.clone()),
        ];
        let takes: &[&str] = match d.tool.as_str() {
            "game_new" => &["protocol", "rules"],
            "game_join" => &["code"],
            "game_move" => &["game", "move"],
            "game_wait" => &["game", "timeoutSeconds"],
            "game_board" | "game_resign" => &["game"],
            _ => &[],
        };
        for (k, v) in wanted {
            if let Some(v) = v.clone().filter(|_| takes.contains(k)) {
                a.insert(k.to_string(), v);
            }
        }
        if let Some((k, v)) = d.extra.clone() {
            a.insert(k, v);
        }
        // A wait on a held game lasts until the opponent moves, which happens between
        // calls: only a wait of 0 s keeps the test short. (Any other value is read, and
        // refused or not, before the game is looked up.)
        let held = matches!(d.game, Some(Id::Held(_)));
        let waits = match a.get("timeoutSeconds") {
            None | Some(Value::Null) => true,
            Some(v) => v.as_f64().is_some_and(|s| s > 0.0),
        };
        if d.tool == "game_wait" && held && waits {
            a.insert("timeoutSeconds".into(), json!(0));
        }
        a
    }
}

/// Every file under `root`, relative to it, that is not the lock or a seat file.
fn stray_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a directory") {
            let path = entry.expect("an entry").path();
            let rel = path.strip_prefix(root).expect("under root").to_path_buf();
            let name = rel.to_string_lossy().into_owned();
            // A seat file, or one being written whole (the watcher saves in the background).
            let seat_file = (name.starts_with("seats/seat-") && name.ends_with(".json"))
                || (name.starts_with("seats/.seat-") && name.ends_with(".json.tmp"));
            if path.is_dir() && name == "seats" {
                stack.push(path);
            } else if !(seat_file || name == "lock") {
                out.push(rel);
            }
        }
    }
    out
}

#[test]
fn any_tool_arguments_are_answered_with_a_reason_and_no_secret() {
    let table = RefCell::new(Table::new());
    let mut runner = TestRunner::new(Config {
        cases: 64,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&draw(), |d| {
            let mut t = table.borrow_mut();
            let args = t.arguments(&d);
            let r = t.agent.call(&d.tool, Value::Object(args.clone()));
            let text = r.to_string();
            for s in t.secrets() {
                prop_assert!(
                    !text.contains(&s),
                    "a secret in {} {:?}: {}",
                    d.tool,
                    args,
                    text
                );
            }
            if r["isError"] == true {
                let code = r["structuredContent"]["error"].as_str().unwrap_or_default();
                prop_assert!(
                    CODES.contains(&code),
                    "{} {:?}: code {:?} in {}",
                    d.tool,
                    args,
                    code,
                    text
                );
                let reason = r["text"].as_str().unwrap_or_default();
                prop_assert!(!reason.trim().is_empty(), "no reason: {}", text);
            } else {
                let s = &r["structuredContent"];
                prop_assert!(s.is_object(), "{} {:?}: {}", d.tool, args, text);
                if d.tool == "game_new" {
                    if let Some(c) = s["pairingCode"].as_str() {
                        t.codes.push(c.to_string());
                    }
                }
            }
            let stray = stray_files(&t.state);
            prop_assert!(stray.is_empty(), "{} {:?} wrote {:?}", d.tool, args, stray);
            t.opponents_answer();
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let mut t = table.into_inner();
    t.agent.stop();
    let log = std::fs::read_to_string(&t.log).unwrap_or_default();
    for s in t.secrets() {
        assert!(!log.contains(&s), "a secret in the agent's log");
    }
}
