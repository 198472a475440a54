//! `pipehub serve`: flags and environment variables in, a running hub out.
//!
//! Every flag has an environment variable (`PIPEHUB_*`), so a container can be configured
//! without a command line. This module turns them into a [`Config`], sets up logging, waits
//! for SIGTERM or SIGINT as the shutdown signal, and hands all of it to
//! [`crate::serve::run`]; it contains no server logic of its own.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use ipnet::IpNet;

use crate::config::Config;
use crate::inbox::log::Pacing;
use crate::limits::RateSpec;
use crate::{inbox, meta};

/// The long help of `pipehub serve` (`pipehub serve --help`).
pub const LONG_ABOUT: &str =
    "Run the hub: an embedded durable inbox under --data, one referee per game, \
the HTTP API under /v1 (OpenAPI at /v1/openapi.json), the WebSocket relay at /v1/ws, \
Prometheus metrics at /metrics, and /healthz and /readyz for orchestrators.

SIGTERM or SIGINT stops it gracefully: it stops taking requests, answers the ones in \
flight, and makes every acknowledged event durable first.

Logs go to standard error; PIPEHUB_LOG (or RUST_LOG) sets the filter, e.g. \
PIPEHUB_LOG=hub=debug.";

/// Arguments of `pipehub serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on for HTTP. Port 0 picks a free port; the chosen address is
    /// printed on standard output as `listening on ADDR`.
    #[arg(
        long,
        env = "PIPEHUB_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: String,

    /// Also serve /healthz, /readyz and /metrics, and nothing else, on this address, with
    /// a few connections of its own outside the connection cap: probes and scrapes then
    /// reach a hub whose sockets are at the cap. Printed as `admin listening on ADDR`.
    #[arg(long, env = "PIPEHUB_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<String>,

    /// Directory of the embedded store and of the generated hub secret. Created if absent,
    /// readable by this user only (mode 0700).
    #[arg(
        long,
        env = "PIPEHUB_DATA",
        default_value = "./data",
        value_name = "DIR"
    )]
    pub data: PathBuf,

    /// Redis URL (redis://HOST:PORT/DB) of a store shared by several hub nodes, which then
    /// act as one hub: shards are leased to live nodes and move when one dies. Needs
    /// --secret / PIPEHUB_SECRET, the same on every node. (Its value is not shown in
    /// `--help`: the URL may hold a password.)
    #[arg(
        long,
        env = "PIPEHUB_REDIS",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis: Option<crate::config::Hidden>,

    /// The hub secret (at least 16 bytes, used as raw bytes): hub-held seat keys and
    /// custodial nonces derive from it, so it must not change for a data directory.
    /// Without it a random secret is generated into DIR/secret (mode 0600) on first run.
    #[arg(
        long,
        env = "PIPEHUB_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub secret: Option<crate::config::Hidden>,

    /// Events and games one person (a seat token, else a client address) may post or
    /// create: N per SECONDS, as a token bucket with a burst of N. Refused requests get
    /// 429 with Retry-After and do not count.
    #[arg(
        long,
        env = "PIPEHUB_RATE_LIMIT",
        default_value = "60/10",
        value_name = "N/SECONDS"
    )]
    pub rate_limit: RateSpec,

    /// Open seated games one client address may host at once (waiting, paired or
    /// unfinished; 0: no cap).
    #[arg(
        long,
        env = "PIPEHUB_MAX_OPEN_GAMES",
        default_value_t = 20,
        value_name = "N"
    )]
    pub max_open_games: u64,

    /// WebSockets one client (an IPv4 address or an IPv6 /64, through trusted proxies) may
    /// hold open at once; a further upgrade gets 429 (0: no cap). Loopback clients are
    /// not counted: they are this host's own, such as a load generator.
    #[arg(
        long,
        env = "PIPEHUB_MAX_SOCKETS_PER_ADDRESS",
        default_value_t = 256,
        value_name = "N"
    )]
    pub max_sockets_per_address: u32,

    /// TCP connections one peer (an IPv4 address or an IPv6 /64) may hold open at once; a
    /// further one is closed as it is accepted, unanswered (0: no cap). Trusted proxies
    /// and loopback peers are not counted.
    #[arg(
        long,
        env = "PIPEHUB_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 512,
        value_name = "N"
    )]
    pub max_connections_per_address: u32,

    /// Seconds a connection may hold data its client does not take (its receive window
    /// shut) before the kernel closes it (TCP_USER_TIMEOUT; 0: the system's default, about
    /// 15 minutes). A WebSocket client that does not read is dropped by the relay after
    /// 10 s; this frees what its connection still holds.
    #[arg(
        long,
        env = "PIPEHUB_SEND_TIMEOUT",
        default_value_t = 30,
        value_name = "SECONDS",
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub send_timeout: u64,

    /// Captures (accepted or not) one game may have; further posts get 409 (0: no cap).
    #[arg(
        long,
        env = "PIPEHUB_MAX_CAPTURES_PER_GAME",
        default_value_t = 10_000,
        value_name = "N"
    )]
    pub max_captures_per_game: u64,

    /// A reverse proxy (address or CIDR; repeat for several, or comma-separate in the
    /// variable) whose X-Forwarded-For header names the client. From anyone else the
    /// header is ignored.
    #[arg(
        long,
        env = "PIPEHUB_TRUSTED_PROXY",
        value_name = "CIDR",
        value_delimiter = ',',
        value_parser = parse_net
    )]
    pub trusted_proxy: Vec<IpNet>,

    /// Protocol of a start that names none.
    #[arg(
        long,
        env = "PIPEHUB_DEFAULT_PROTOCOL",
        default_value = games::Registry::DEFAULT_REF,
        value_name = "REF"
    )]
    pub default_protocol: String,

    /// Shards of a store created now (fixed at creation; an existing store keeps its own).
    #[arg(long, env = "PIPEHUB_SHARDS", default_value_t = 8, value_name = "N")]
    pub shards: u32,

    /// Embedded store: under load, the inbox fsyncs at most once per this many
    /// microseconds so that concurrent moves share one (0: every batch at once; at most
    /// 100000).
    #[arg(long, env = "PIPEHUB_INBOX_PACING_US", default_value_t = micros(inbox::embedded::PACING), value_name = "MICROS", value_parser = clap::value_parser!(u64).range(0..=MAX_PACING_US))]
    pub inbox_pacing_us: u64,

    /// Embedded store: the same for the meta store (seats, codes), where game set-ups
    /// share one fsync.
    #[arg(long, env = "PIPEHUB_META_PACING_US", default_value_t = micros(meta::PACING), value_name = "MICROS", value_parser = clap::value_parser!(u64).range(0..=MAX_PACING_US))]
    pub meta_pacing_us: u64,

    /// Embedded store: how many keys of seats and registrations, or of pairing codes,
    /// gather in memory before they move to the meta store's cache files, where memory
    /// keeps a few bytes of each (0: they all stay in memory).
    #[arg(long, env = "PIPEHUB_META_COLD_KEYS", default_value_t = meta::COLD_KEYS, value_name = "N")]
    pub meta_cold_keys: usize,
}

/// A pacing interval longer than this would hold every write back for a noticeable time.
const MAX_PACING_US: u64 = 100_000;

fn micros(pacing: Pacing) -> u64 {
    pacing.interval.as_micros() as u64
}

/// `default` with its interval set to `us` microseconds; none means no pacing.
fn paced(default: Pacing, us: u64) -> Pacing {
    if us == 0 {
        return Pacing::OFF;
    }
    Pacing {
        interval: Duration::from_micros(us),
        ..default
    }
}

/// A CIDR, or a single address meaning just that address.
fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{s}` is neither an address nor a CIDR (e.g. 10.0.0.0/8)"))
}

impl Args {
    pub fn into_config(self) -> Config {
        Config {
            listen: self.listen,
            admin_listen: self.admin_listen,
            data: self.data,
            redis: self.redis,
            secret: self.secret,
            rate_limit: self.rate_limit,
            max_open_games: self.max_open_games,
            max_sockets_per_address: self.max_sockets_per_address,
            max_connections_per_address: self.max_connections_per_address,
            send_timeout: (self.send_timeout > 0).then(|| Duration::from_secs(self.send_timeout)),
            max_captures_per_game: self.max_captures_per_game,
            trusted_proxies: self.trusted_proxy,
            default_protocol: self.default_protocol,
            shards: self.shards,
            inbox_pacing: paced(inbox::embedded::PACING, self.inbox_pacing_us),
            meta_pacing: paced(meta::PACING, self.meta_pacing_us),
            meta_cold_keys: self.meta_cold_keys,
            ..Config::default()
        }
    }
}

/// Runs the hub until SIGTERM or SIGINT. Exit code 0 after a clean shutdown.
pub fn run(args: Args) -> anyhow::Result<i32> {
    init_logging();
    let config = args.into_config();
    config.validate()?;
    let system = actix_rt::System::new();
    system
        .block_on(crate::serve::run(config, shutdown_signal()))
        .context("the hub stopped with an error")?;
    Ok(0)
}

/// The log filter when neither PIPEHUB_LOG nor RUST_LOG sets one. actix-http logs at
/// ERROR every connection that sent something that is not HTTP (a NUL in a header, a
/// bad request line), which any client can do at will, and which an operator can do
/// nothing about: the client gets its 400 and the connection ends. Such lines would
/// drown the errors an operator should act on, so that one module is left out.
const DEFAULT_LOG: &str = "info,actix_http::h1::dispatcher=off";

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("PIPEHUB_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .or_else(|| EnvFilter::try_from_default_env().ok())
        .unwrap_or_else(|| EnvFilter::new(DEFAULT_LOG));
    // A second initialisation (only possible in tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Resolves on the first SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                    _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot watch SIGTERM; only SIGINT stops the hub");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    type Wrapper = crate::cli::Parsed<Args>;

    #[test]
    fn the_default_log_leaves_out_what_any_client_can_make_actix_http_say() {
        let lines = crate::test_log::Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(DEFAULT_LOG))
            .with_writer(lines.writer())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "actix_http::h1::dispatcher", "stream error: bad header");
            tracing::error!(target: "actix_server::worker", "a worker failed");
            tracing::info!(target: "pipehub_hub::serve", "listening");
            tracing::debug!(target: "pipehub_hub::serve", "chatter");
        });
        let text = lines.text();
        assert!(!text.contains("stream error"), "{text}");
        assert!(text.contains("a worker failed"), "{text}");
        assert!(text.contains("listening"), "{text}");
        assert!(!text.contains("chatter"), "{text}");
    }

    #[test]
    fn flags_parse_into_a_config() {
        let w = Wrapper::try_parse_from([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--rate-limit",
            "5/2",
            "--trusted-proxy",
            "10.0.0.0/8",
            "--trusted-proxy",
            "192.0.2.1",
            "--shards",
            "4",
            "--inbox-pacing-us",
            "0",
            "--meta-pacing-us",
            "500",
            "--max-sockets-per-address",
            "0",
            "--max-connections-per-address",
            "3",
            "--secret",
            "0123456789abcdef-topsecret",
            "--redis",
            "redis://:hunter2hunter2@127.0.0.1:6379/0",
        ])
        .expect("valid flags");
        // Flags written out show neither the secret nor the URL, which may hold a password.
        let shown = format!("{w:?}");
        assert!(
            !shown.contains("topsecret") && !shown.contains("hunter2"),
            "{shown}"
        );
        let c = w.args.into_config();
        assert_eq!(c.secret.as_deref(), Some("0123456789abcdef-topsecret"));
        assert_eq!(
            c.redis.as_deref(),
            Some("redis://:hunter2hunter2@127.0.0.1:6379/0")
        );
        assert_eq!(c.listen, "127.0.0.1:0");
        assert_eq!(c.rate_limit.to_string(), "5/2");
        assert_eq!(c.trusted_proxies.len(), 2);
        assert_eq!(c.shards, 4);
        assert_eq!(c.inbox_pacing, Pacing::OFF);
        assert_eq!(c.meta_pacing.interval, Duration::from_micros(500));
        assert_eq!(c.meta_pacing.siblings, meta::PACING.siblings);
        assert_eq!(c.max_sockets_per_address, 0, "0 turns the cap off");
        assert_eq!(c.max_connections_per_address, 3);
        assert_eq!(c.send_timeout, Some(Duration::from_secs(30)), "the default");
        let defaults = Wrapper::try_parse_from(["serve"]).expect("no flags").args;
        let defaults = defaults.into_config();
        assert_eq!(
            defaults.max_sockets_per_address,
            Config::default().max_sockets_per_address
        );
        assert_eq!(
            defaults.max_connections_per_address,
            Config::default().max_connections_per_address
        );
        assert!(Wrapper::try_parse_from(["serve", "--rate-limit", "fast"]).is_err());
        assert!(Wrapper::try_parse_from(["serve", "--trusted-proxy", "nope"]).is_err());
        assert!(Wrapper::try_parse_from(["serve", "--inbox-pacing-us", "100001"]).is_err());
        assert!(Wrapper::try_parse_from(["serve", "--meta-pacing-us", "-1"]).is_err());
        let off = Wrapper::try_parse_from(["serve", "--send-timeout", "0"]).expect("valid");
        assert_eq!(
            off.args.into_config().send_timeout,
            None,
            "0: the system's default"
        );
        assert!(Wrapper::try_parse_from(["serve", "--send-timeout", "3601"]).is_err());
    }
}
