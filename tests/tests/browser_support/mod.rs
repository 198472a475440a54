//! WebDriver plumbing for the browser tests: chromedriver on a free 127.0.0.1 port in its
//! own process group (so that dropping [`Driver`] ends every chromium it started), headless
//! chromium sessions with fresh profiles at a phone's viewport, and bounded waits on
//! JavaScript expressions that report what the page said when they time out.
//!
//! It installs nothing: a missing chromedriver or chromium fails the test and names
//! `scripts/test`. It knows nothing of pipehub's page beyond the ids it prints on failure.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// How long any one condition in the page may take to become true.
pub const WAIT: Duration = Duration::from_secs(15);
/// How long chromedriver may take to listen.
pub const DRIVER_START: Duration = Duration::from_secs(20);
/// Where Debian's packages put the two programs; `PIPEHUB_CHROMEDRIVER` and
/// `PIPEHUB_CHROMIUM` name others.
const CHROMEDRIVER: (&str, &str) = ("PIPEHUB_CHROMEDRIVER", "/usr/bin/chromedriver");
const CHROMIUM: (&str, &str) = ("PIPEHUB_CHROMIUM", "/usr/bin/chromium");

fn tool(which: (&str, &str)) -> PathBuf {
    std::env::var_os(which.0).map_or_else(|| PathBuf::from(which.1), PathBuf::from)
}

/// A chromedriver process in its own process group, so that dropping it also ends every
/// browser it started, whatever state the test left them in.
pub struct Driver {
    child: Child,
    chromium: PathBuf,
    url: String,
    profiles: PathBuf,
}

impl Driver {
    pub fn start() -> Driver {
        let (chromedriver, chromium) = (tool(CHROMEDRIVER), tool(CHROMIUM));
        for tool in [&chromedriver, &chromium] {
            assert!(
                tool.exists(),
                "{} is missing: the browser tests need Debian's chromium and chromium-driver; \
                 run scripts/test, which installs them",
                tool.display()
            );
        }
        let port = free_port();
        let mut command = Command::new(&chromedriver);
        command
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().unwrap_or_else(|e| {
            panic!(
                "cannot start {} ({e}); run scripts/test, which installs it",
                chromedriver.display()
            )
        });
        let profiles =
            std::env::temp_dir().join(format!("pipehub-browser-{}-{port}", std::process::id()));
        let driver = Driver {
            child,
            chromium,
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
    pub async fn browser(&self, name: &str) -> Client {
        let profile = self.profiles.join(name);
        std::fs::create_dir_all(&profile).expect("a temporary profile directory can be made");
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": self.chromium.display().to_string(),
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
pub fn step(started: Instant, what: &str) {
    eprintln!(
        "browser test: {:>6} ms  {what}",
        started.elapsed().as_millis()
    );
}

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free local port");
    listener
        .local_addr()
        .expect("a bound listener has an address")
        .port()
}

/// Evaluates `expr` (a JavaScript expression) in the page.
pub async fn eval(c: &Client, expr: &str) -> Value {
    c.execute(&format!("return ({expr});"), vec![])
        .await
        .unwrap_or_else(|e| panic!("the page could not evaluate {expr}: {e}"))
}

/// Waits until `expr` is `want` in the page, or fails with what the page says.
pub async fn wait_eq(c: &Client, who: &str, expr: &str, want: Value) {
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

pub async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no element {css}: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("cannot click {css}: {e}"));
}

/// Sends `keys` to whatever has the focus, as a keyboard user would press them.
pub async fn press(c: &Client, keys: &str) {
    c.active_element()
        .await
        .unwrap_or_else(|e| panic!("nothing has the focus to press {keys:?} on: {e}"))
        .send_keys(keys)
        .await
        .unwrap_or_else(|e| panic!("cannot press {keys:?}: {e}"));
}

pub async fn type_into(c: &Client, css: &str, text: &str) {
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

pub async fn screenshot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).expect("the target directory is writable");
    let png = c
        .screenshot()
        .await
        .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
    std::fs::write(dir.join(format!("{name}.png")), png).expect("the screenshot can be written");
}
