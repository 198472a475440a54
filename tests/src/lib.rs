//! Helpers for pipehub's end-to-end tests: they build, start and stop the real `pipehub`
//! binary and talk to it over HTTP on 127.0.0.1.
//!
//! [`Hub::start`] runs `pipehub serve --listen 127.0.0.1:0` on a fresh temporary data
//! directory, reads the port it chose from its standard output, and waits for `/readyz`;
//! dropping the [`Hub`] kills the process, so a failing test leaves nothing running.
//! [`Client`] is a small blocking HTTP client (keep-alive, a timeout on every request)
//! that returns every status as a [`Response`] rather than an error, since most tests are
//! about the error answers.
//!
//! Nothing here installs anything or reaches beyond the loopback address.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a hub may take to start and become ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The timeout of every request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// Waits for `child` to exit, at most `within`; past that it kills it and returns `None`,
/// so a test that runs another program always ends.
pub fn wait_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("a child process can be waited for") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The path of the `pipehub` binary, built once per test run. `PIPEHUB_BIN` overrides it.
pub fn pipehub_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("PIPEHUB_BIN") {
            return PathBuf::from(bin);
        }
        // This crate does not depend on the hub crate's binary, so cargo does not build it
        // for us; building it here is a no-op when it is up to date.
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "--quiet", "-p", "pipehub-hub", "--bin", "pipehub"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building pipehub failed");
        let mut dir = std::env::current_exe().expect("the test binary knows its own path");
        dir.pop();
        if dir.ends_with("deps") {
            dir.pop();
        }
        dir.join(format!("pipehub{}", std::env::consts::EXE_SUFFIX))
    })
    .clone()
}

/// A running `pipehub serve`, killed on drop.
pub struct Hub {
    child: Option<Child>,
    data: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    args: Vec<String>,
    /// The open-files limit the process starts with, when a test sets one.
    open_files: Option<u64>,
    /// The largest file the process may write, in bytes, when a test sets one.
    file_size: Option<u64>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `http://ADDR` of `--admin-listen`, when the hub was given one.
    pub admin: Option<String>,
    /// What the hub wrote on standard error (its logs), collected in the background.
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Hub {
    /// Starts a hub on a fresh data directory with extra `serve` flags.
    pub fn start(args: &[&str]) -> Hub {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let data = tmp.path().join("data");
        let mut hub = Hub::start_in(&data, args);
        hub._tmp = Some(tmp);
        hub
    }

    /// Starts a hub on the given data directory (to restart on the same store).
    pub fn start_in(data: &Path, args: &[&str]) -> Hub {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut hub = Hub {
            child: None,
            data: data.to_path_buf(),
            _tmp: None,
            args,
            open_files: None,
            file_size: None,
            base: String::new(),
            admin: None,
            stderr: Default::default(),
        };
        hub.spawn();
        hub
    }

    /// [`Hub::start`] in a process that may open at most `limit` files (its soft and hard
    /// open-files limits both).
    pub fn start_with_open_files(limit: u64, args: &[&str]) -> Hub {
        Hub::start_limited(Some(limit), None, args)
    }

    /// [`Hub::start`] in a process that may write no file past `bytes` (its soft and hard
    /// file-size limits both): a write that would pass it fails, as on a full disk. The
    /// signal such a write sends (SIGXFSZ, which would end the process) is ignored.
    pub fn start_with_file_size(bytes: u64, args: &[&str]) -> Hub {
        Hub::start_limited(None, Some(bytes), args)
    }

    fn start_limited(open_files: Option<u64>, file_size: Option<u64>, args: &[&str]) -> Hub {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let mut hub = Hub {
            child: None,
            data: tmp.path().join("data"),
            _tmp: Some(tmp),
            args: args.iter().map(|s| s.to_string()).collect(),
            open_files,
            file_size,
            base: String::new(),
            admin: None,
            stderr: Default::default(),
        };
        hub.spawn();
        hub
    }

    fn spawn(&mut self) {
        let mut command = Command::new(pipehub_bin());
        let limits = [
            (libc::RLIMIT_NOFILE, self.open_files),
            (libc::RLIMIT_FSIZE, self.file_size),
        ];
        if limits.iter().any(|(_, limit)| limit.is_some()) {
            use std::os::unix::process::CommandExt;
            let limits = limits.map(|(resource, limit)| {
                let lim = limit.map(|l| libc::rlimit {
                    rlim_cur: l,
                    rlim_max: l,
                });
                (resource, lim)
            });
            // SAFETY: between fork and exec the child only calls `setrlimit` and `signal`,
            // which are async-signal-safe, on values copied into the closure.
            unsafe {
                command.pre_exec(move || {
                    for (resource, lim) in &limits {
                        let Some(lim) = lim else { continue };
                        if libc::setrlimit(*resource, lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // A write past the file-size limit then fails with EFBIG, and the
                        // process goes on (ignored, the signal stays ignored across exec).
                        if *resource == libc::RLIMIT_FSIZE {
                            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                        }
                    }
                    Ok(())
                });
            }
        }
        let mut child = command
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(&self.data)
            .args(&self.args)
            .env("PIPEHUB_LOG", "warn,hub=info")
            .env_remove("PIPEHUB_SECRET")
            .env_remove("PIPEHUB_REDIS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pipehub starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send((false, addr.to_string()));
                } else if let Some(addr) = line.strip_prefix("admin listening on ") {
                    let _ = tx.send((true, addr.to_string()));
                }
            }
        });
        let log = self.stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut log) = log.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        self.child = Some(child);
        let wants_admin = self.args.iter().any(|a| a.starts_with("--admin-listen"));
        self.admin = None;
        let mut main = None;
        while main.is_none() || (wants_admin && self.admin.is_none()) {
            match rx.recv_timeout(START_TIMEOUT) {
                Ok((false, addr)) => main = Some(addr),
                Ok((true, addr)) => self.admin = Some(format!("http://{addr}")),
                Err(_) => panic!("the hub did not start; its log:\n{}", self.log()),
            }
        }
        self.base = format!("http://{}", main.unwrap_or_default());
        let client = Client::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if client.get(&self.url("/readyz")).status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the hub never became ready; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The full URL of a path on this hub.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The data directory.
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The hub's log so far.
    pub fn log(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The process id while it runs (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `kill -9`: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `within` for the hub to stop by itself; its exit code (`None` if it is
    /// still running, or was killed by a signal).
    pub fn exited_within(&mut self, within: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let status = wait_within(child, within)?;
        self.child = None;
        status.code()
    }

    /// SIGTERM, then waits for a clean exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the hub again on the same data directory and flags (after a kill).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One HTTP answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The body as JSON; panics with the body when it is not JSON (a test failure).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header's value (names compared case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `error` code of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// A blocking HTTP client with keep-alive.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    pub fn new() -> Client {
        Client {
            agent: ureq::AgentBuilder::new()
                .timeout(REQUEST_TIMEOUT)
                .max_idle_connections_per_host(64)
                .build(),
        }
    }

    /// Any request. `token` becomes `Authorization: Bearer`; `body` is sent with
    /// `content_type` (default `application/json`).
    pub fn send(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Response {
        self.send_with(method, url, token, &[], content_type, body)
    }

    /// A JSON post sent with the `Idempotency-Key` `key`.
    pub fn post_keyed(&self, url: &str, key: &str, body: &Value) -> Response {
        let body = body.to_string();
        let headers = [("Idempotency-Key", key)];
        self.send_with("POST", url, None, &headers, None, Some(body.as_bytes()))
    }

    /// [`Client::send`], with `headers` too.
    pub fn send_with(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Response {
        let mut req = self.agent.request(method, url);
        for (name, value) in headers {
            req = req.set(name, value);
        }
        if let Some(token) = token {
            req = req.set("Authorization", &format!("Bearer {token}"));
        }
        let result = match body {
            Some(body) => req
                .set("Content-Type", content_type.unwrap_or("application/json"))
                .send_bytes(body),
            None => req.call(),
        };
        let res = match result {
            Ok(res) => res,
            Err(ureq::Error::Status(_, res)) => res,
            Err(err) => panic!("{method} {url}: {err}"),
        };
        let status = res.status();
        let headers = res
            .headers_names()
            .into_iter()
            .filter_map(|n| res.header(&n).map(|v| (n.clone(), v.to_string())))
            .collect();
        let body = res.into_string().unwrap_or_default();
        Response {
            status,
            headers,
            body,
        }
    }

    pub fn get(&self, url: &str) -> Response {
        self.send("GET", url, None, None, None)
    }

    pub fn get_auth(&self, url: &str, token: &str) -> Response {
        self.send("GET", url, Some(token), None, None)
    }

    /// POST a JSON value.
    pub fn post(&self, url: &str, token: Option<&str>, body: &Value) -> Response {
        let body = body.to_string();
        self.send("POST", url, token, None, Some(body.as_bytes()))
    }

    /// POST raw bytes as JSON.
    pub fn post_raw(&self, url: &str, token: Option<&str>, body: &[u8]) -> Response {
        self.send("POST", url, token, None, Some(body))
    }
}

/// A seated game created and paired through the API, both seats hub-held.
#[derive(Debug, Clone)]
pub struct Seated {
    pub inbox: String,
    pub game: String,
    pub x: String,
    pub o: String,
}

impl Seated {
    /// Creates a game of `protocol` in `inbox` and pairs it.
    pub fn new(hub: &Hub, client: &Client, inbox: &str, protocol: &str) -> Seated {
        Seated::create_and_pair(
            client,
            hub,
            hub,
            inbox,
            &serde_json::json!({ "protocol": protocol }),
        )
    }

    /// Creates a game with the create body `body` on `host` and pairs it through `guest`
    /// (another hub node, or the same hub).
    pub fn create_and_pair(
        client: &Client,
        host: &Hub,
        guest: &Hub,
        inbox: &str,
        body: &Value,
    ) -> Seated {
        let created = client.post(&host.url(&format!("/v1/inboxes/{inbox}/games")), None, body);
        assert_eq!(created.status, 201, "create: {}", created.body);
        let created = created.json();
        let paired = client.post(
            &guest.url("/v1/pair"),
            None,
            &serde_json::json!({ "code": created["pairingCode"] }),
        );
        assert_eq!(paired.status, 200, "pair: {}", paired.body);
        let str_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
        Seated {
            inbox: inbox.to_string(),
            game: str_of(&created["game"]),
            x: str_of(&created["token"]),
            o: str_of(&paired.json()["token"]),
        }
    }

    /// The path of this game under `/v1`, plus `rest`.
    pub fn path(&self, rest: &str) -> String {
        format!("/v1/inboxes/{}/games/{}{rest}", self.inbox, self.game)
    }

    /// The token of a seat ("X" or "O").
    pub fn token(&self, seat: &str) -> &str {
        if seat == "X" {
            &self.x
        } else {
            &self.o
        }
    }
}

/// The sum of a metric over all its label sets in a hub's `/metrics` (0 when absent).
pub fn metric_sum(client: &Client, hub: &Hub, name: &str) -> f64 {
    let r = client.get(&hub.url("/metrics"));
    assert_eq!(r.status, 200, "metrics: {}", r.body);
    let prefix = format!("{name}{{");
    r.body
        .lines()
        .filter(|l| l.starts_with(&prefix) || l.split(' ').next() == Some(name))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum()
}

/// Runs `pipehub verify [args] FILE` on `input`; returns the exit code and standard output.
pub fn verify(args: &[&str], input: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("log.jsonl");
    std::fs::write(&file, input).expect("write the log");
    let out = Command::new(pipehub_bin())
        .arg("verify")
        .args(args)
        .arg(&file)
        .output()
        .expect("pipehub verify runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
