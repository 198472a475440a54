//! What the agent tests share: the MCP client (the official MCP Python SDK, driven by
//! `tests/mcp/driver.py`), run with a deadline, and the secrets of an agent's state
//! directory to scan for.
//!
//! The client is the Python of the virtual environment `scripts/test` creates
//! (`.venv/mcp`, PyPI `mcp` 2.3.0), found at `$PIPEHUB_MCP_PYTHON`, else at
//! `<workspace>/.venv/mcp/bin/python`. When it is missing the tests fail and say how to
//! create it; they never skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

const SETUP: &str = "run scripts/test, which creates it (python3 -m venv .venv/mcp && \
                     .venv/mcp/bin/pip install mcp==2.3.0) and exports PIPEHUB_MCP_PYTHON";

/// The Python that has the MCP SDK; panics, naming scripts/test, when there is none.
pub fn python() -> PathBuf {
    let path = std::env::var_os("PIPEHUB_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".venv/mcp/bin/python"));
    let ok = Command::new(&path)
        .args(["-c", "import mcp.client.stdio"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "no Python with the MCP SDK at {}: {SETUP}",
        path.display()
    );
    path
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// What one run of the driver left behind.
pub struct Run {
    /// The scenario's summary (its standard output, one JSON object).
    pub summary: Value,
    /// Every tool result, in call order.
    pub results: Vec<Value>,
    /// The raw text of the results file, of the agents' logs and of the driver's output.
    pub transcript: String,
}

/// Runs one scenario of `tests/mcp/driver.py` against `hub`, one agent per state directory.
pub fn drive(scenario: &str, hub: &str, states: &[&Path], work: &Path, deadline: Duration) -> Run {
    let python = python();
    let logs = work.join(format!("logs-{scenario}"));
    std::fs::create_dir_all(&logs).expect("a log directory");
    let out = work.join(format!("{scenario}.jsonl"));
    let mut cmd = Command::new(python);
    cmd.arg(workspace().join("tests/mcp/driver.py"))
        .arg(scenario)
        .args([
            "--pipehub".as_ref(),
            pipehub_tests::pipehub_bin().as_os_str(),
        ])
        .args(["--hub", hub])
        .args(["--logs".as_ref(), logs.as_os_str()])
        .args(["--out".as_ref(), out.as_os_str()]);
    for s in states {
        cmd.args(["--state".as_ref(), s.as_os_str()]);
    }
    let stdout_path = work.join(format!("{scenario}.stdout"));
    let stderr_path = work.join(format!("{scenario}.stderr"));
    cmd.stdout(std::fs::File::create(&stdout_path).expect("a file"))
        .stderr(std::fs::File::create(&stderr_path).expect("a file"));
    let mut child = cmd.spawn().expect("the driver starts");
    let Some(status) = pipehub_tests::wait_within(&mut child, deadline) else {
        panic!(
            "the {scenario} scenario took over {deadline:?}; its stderr:\n{}",
            read(&stderr_path)
        );
    };
    let stdout = read(&stdout_path);
    assert!(
        status.success(),
        "the {scenario} scenario failed ({status}):\n{}\n{stdout}",
        read(&stderr_path)
    );
    let results_text = read(&out);
    let results = results_text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a result line is JSON"))
        .collect();
    let mut transcript = format!("{results_text}\n{stdout}\n{}\n", read(&stderr_path));
    for entry in std::fs::read_dir(&logs).expect("the log directory") {
        transcript.push_str(&read(&entry.expect("an entry").path()));
    }
    Run {
        summary: serde_json::from_str(stdout.trim()).expect("the summary is JSON"),
        results,
        transcript,
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// One seat file of an agent's state directory.
pub struct SeatFile {
    pub path: PathBuf,
    pub record: Value,
}

/// Every seat file under `state/seats`.
pub fn seat_files(state: &Path) -> Vec<SeatFile> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(state.join("seats")).expect("the seats directory") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let record = serde_json::from_str(&read(&path)).expect("a seat file is JSON");
            files.push(SeatFile { path, record });
        }
    }
    files
}

/// Decodes lowercase hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// One `pipehub mcp` driven straight over its standard input and output (MCP's stdio
/// transport: one JSON-RPC message a line), for tests that change what a hub says between
/// two calls of one agent, which a scripted driver run cannot.
pub struct Agent {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: u64,
}

impl Agent {
    /// Starts an agent on `hub` with the state directory `state`; its log goes to `log`.
    pub fn start(hub: &str, state: &Path, log: &Path) -> Agent {
        use std::io::BufRead;
        let mut child = Command::new(pipehub_tests::pipehub_bin())
            .args(["mcp", "--hub", hub, "--inbox", "default", "--state-dir"])
            .arg(state)
            .env("PIPEHUB_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("a log file"))
            .spawn()
            .expect("the agent starts");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut agent = Agent {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        agent.request(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "pipehub-tests", "version": "0"}}),
        );
        agent.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        agent
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").expect("the agent reads its input");
        self.stdin.flush().expect("flushed");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|e| panic!("no answer to {method} in 120 s: {e}"));
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
        }
    }

    /// Calls a tool: `{"isError", "structuredContent", "text"}`.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        let result = self.request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": args}),
        );
        let text: Vec<&str> = result["content"]
            .as_array()
            .map(|c| c.iter().filter_map(|b| b["text"].as_str()).collect())
            .unwrap_or_default();
        serde_json::json!({
            "isError": result["isError"].as_bool().unwrap_or(false),
            "structuredContent": result["structuredContent"],
            "text": text.join("\n"),
        })
    }

    /// Calls a tool that must succeed; its `structuredContent`.
    pub fn ok(&mut self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args.clone());
        assert_eq!(r["isError"], false, "{tool} {args}: {r}");
        r["structuredContent"].clone()
    }

    /// Waits (game_wait) until it is the person's turn.
    pub fn wait_turn(&mut self, game: &str) -> Value {
        for _ in 0..10 {
            let s = self.ok(
                "game_wait",
                serde_json::json!({"game": game, "timeoutSeconds": 10}),
            );
            if s["yourTurn"] == true {
                return s;
            }
        }
        panic!("never this seat's turn in {game}");
    }
}

impl Agent {
    /// Stops the agent (and lets go of its state directory) now.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stop();
    }
}
