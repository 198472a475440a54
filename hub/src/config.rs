//! The settings of `pipehub serve`, as plain data.
//!
//! [`Config`] is what [`crate::serve::run`] needs to start a hub, independent of how it was
//! obtained: the command line (`cli::serve`) fills it from flags and environment
//! variables, tests build it directly. Checks that need no I/O happen when it is built
//! (a secret too short, a zero shard count); the hub secret's file in the data directory
//! is read or created by [`Config::secret_bytes`] at start.
//!
//! This module deliberately holds no defaults of the engine's own (pairing-code lifetime,
//! actor idle time): those belong to `game::HubConfig`.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use rand::RngCore;

use crate::inbox::log::Pacing;
use crate::limits::RateSpec;

/// The shortest hub secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;
/// The name of the generated secret inside the data directory.
pub const SECRET_FILE: &str = "secret";
/// The name of the secret's check inside the data directory ([`Config::check_secret`]).
pub const SECRET_CHECK_FILE: &str = "secret.pub";

/// Everything `pipehub serve` is told.
#[derive(Clone, Debug)]
pub struct Config {
    /// Address for HTTP (and, later, WebSocket), e.g. `127.0.0.1:8080`; port 0 picks one.
    pub listen: String,
    /// A second address serving only `/healthz`, `/readyz` and `/metrics`, outside the
    /// connection cap, so that probes and scrapes reach a hub whose sockets are at it.
    pub admin_listen: Option<String>,
    /// Data directory of the embedded store and the generated secret.
    pub data: PathBuf,
    /// Redis URL of the shared backend: several hub nodes on one Redis. Hidden from
    /// `Debug`: it may hold a password.
    pub redis: Option<Hidden>,
    /// The hub secret given by the operator (raw bytes of the string), else generated.
    pub secret: Option<Hidden>,
    /// Events and games one person may post or create.
    pub rate_limit: RateSpec,
    /// Failed pairing attempts per client address.
    pub pairing_limit: RateSpec,
    /// Open seated games one person may host at once.
    pub max_open_games: u64,
    /// WebSockets one client address (an IPv6 /64) may hold open; 0: no cap.
    pub max_sockets_per_address: u32,
    /// TCP connections one peer address (an IPv6 /64) may hold open, trusted proxies and
    /// loopback aside; 0: no cap.
    pub max_connections_per_address: u32,
    /// How long a connection may hold data its client does not take before the kernel
    /// closes it (`TCP_USER_TIMEOUT`); `None`: the system's default.
    pub send_timeout: Option<std::time::Duration>,
    /// Captures one game may have.
    pub max_captures_per_game: u64,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Protocol of starts that name none.
    pub default_protocol: String,
    /// Shard count of a store created now (an existing store keeps its own).
    pub shards: u32,
    /// Group-commit pacing of the embedded inbox and meta store.
    pub inbox_pacing: Pacing,
    pub meta_pacing: Pacing,
    /// How many seat and registration keys the embedded meta store gathers in memory
    /// before it moves them to its cache file (0: they stay in memory).
    pub meta_cold_keys: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            admin_listen: None,
            data: PathBuf::from("./data"),
            redis: None,
            secret: None,
            rate_limit: RateSpec::DEFAULT_EVENTS,
            pairing_limit: RateSpec::DEFAULT_PAIRING,
            max_open_games: 20,
            max_sockets_per_address: 256,
            max_connections_per_address: 512,
            send_timeout: Some(std::time::Duration::from_secs(30)),
            max_captures_per_game: 10_000,
            trusted_proxies: Vec::new(),
            default_protocol: games::Registry::DEFAULT_REF.into(),
            shards: 8,
            inbox_pacing: crate::inbox::embedded::PACING,
            meta_pacing: crate::meta::PACING,
            meta_cold_keys: crate::meta::COLD_KEYS,
        }
    }
}

/// A setting that must not be shown: the hub secret, or a URL that may hold a password.
/// It reads as the text it holds, and its `Debug` prints `[hidden]`, so that a config or
/// a flag set written to a log leaks neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Hidden(String);

impl std::ops::Deref for Hidden {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[hidden]")
    }
}

impl From<String> for Hidden {
    fn from(text: String) -> Self {
        Hidden(text)
    }
}

impl From<&str> for Hidden {
    fn from(text: &str) -> Self {
        Hidden(text.to_string())
    }
}

impl std::str::FromStr for Hidden {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Hidden(text.to_string()))
    }
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("the hub secret must be at least {MIN_SECRET_BYTES} bytes (it has {0})")]
    ShortSecret(usize),
    #[error("--shards must be between 1 and 1024 (got {0})")]
    Shards(u32),
    #[error("unknown --default-protocol `{0}`; `pipehub protocol list` shows the built-in ones")]
    UnknownProtocol(String),
    #[error(
        "--redis needs the hub secret (--secret / PIPEHUB_SECRET), the same on every node, \
         so that hub-held keys and nonces agree across nodes"
    )]
    RedisNeedsSecret,
    #[error("hub secret file {path}: {source}")]
    SecretFile { path: PathBuf, source: io::Error },
    #[error(
        "this data directory was first used with another hub secret ({path} does not match \
         this one): its games' hub-held seats would sign with keys nobody registered. Start \
         it with the secret it was made with, or use another data directory"
    )]
    SecretChanged { path: PathBuf },
    #[error(
        "{flag} `{addr}` is not an address to listen on (HOST:PORT, e.g. 127.0.0.1:8080): {source}"
    )]
    Listen {
        flag: &'static str,
        addr: String,
        source: io::Error,
    },
}

impl Config {
    /// Checks the settings that need no I/O.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.redis.is_some() && self.secret.is_none() {
            return Err(ConfigError::RedisNeedsSecret);
        }
        if let Some(secret) = &self.secret {
            if secret.len() < MIN_SECRET_BYTES {
                return Err(ConfigError::ShortSecret(secret.len()));
            }
        }
        if !(1..=1024).contains(&self.shards) {
            return Err(ConfigError::Shards(self.shards));
        }
        if games::Registry::builtin()
            .get(&self.default_protocol)
            .is_none()
        {
            return Err(ConfigError::UnknownProtocol(self.default_protocol.clone()));
        }
        // Before the data directory, its store and a new secret are made: an address that
        // names nothing to listen on fails the start anyway. (One that is taken can only be
        // found by binding it, later.)
        let addresses = [
            ("--listen", Some(&self.listen)),
            ("--admin-listen", self.admin_listen.as_ref()),
        ];
        for (flag, addr) in addresses {
            if let Some(addr) = addr {
                if let Err(source) = std::net::ToSocketAddrs::to_socket_addrs(addr.as_str()) {
                    return Err(ConfigError::Listen {
                        flag,
                        addr: addr.clone(),
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// The hub secret: the operator's, else the one in the data directory, generated (32
    /// random bytes, readable by this user only) on first run.
    pub fn secret_bytes(&self) -> Result<Vec<u8>, ConfigError> {
        if let Some(secret) = &self.secret {
            if secret.len() < MIN_SECRET_BYTES {
                return Err(ConfigError::ShortSecret(secret.len()));
            }
            return Ok(secret.as_bytes().to_vec());
        }
        let path = self.data.join(SECRET_FILE);
        load_or_create_secret(&path).map_err(|source| ConfigError::SecretFile { path, source })
    }

    /// Refuses a hub secret other than the one this data directory was first used with.
    /// Hub-held seats' keys and custodial nonces derive from the secret, so a hub started
    /// on another one (a `--secret` given to a directory that made its own, or changed)
    /// would sign its games' moves with keys nobody registered and could not reveal their
    /// commits. The check is the public key the secret derives for a seat of no game (as
    /// public as any hub-held seat's key), written on the first start.
    pub fn check_secret(&self, secret: &[u8]) -> Result<(), ConfigError> {
        let path = self.data.join(SECRET_CHECK_FILE);
        let check = crate::game::writer::hub_public_key(secret, "", "", games::Seat::X);
        let failed = |source| ConfigError::SecretFile {
            path: path.clone(),
            source,
        };
        match fs::read_to_string(&path) {
            Ok(stored) if stored.trim() == check => Ok(()),
            Ok(_) => Err(ConfigError::SecretChanged { path }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                write_durably(&path, format!("{check}\n").as_bytes()).map_err(failed)
            }
            Err(e) => Err(failed(e)),
        }
    }
}

fn load_or_create_secret(path: &Path) -> io::Result<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) if bytes.len() >= MIN_SECRET_BYTES => return Ok(bytes),
        Ok(bytes) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("holds {} bytes, fewer than {MIN_SECRET_BYTES}", bytes.len()),
            ))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let mut secret = vec![0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    write_durably(path, &secret)?;
    Ok(secret)
}

/// Writes a small file whole or not at all, readable by this user only: to a temporary
/// name, synced, then renamed, so that a crash never leaves half of it for a restart to
/// refuse.
fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // The rename is durable only once the directory is.
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_directory_keeps_the_secret_it_was_first_used_with() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = Config {
            data: dir.path().to_path_buf(),
            ..Config::default()
        };
        let generated = config.secret_bytes().expect("generated");
        config.check_secret(&generated).expect("first use");
        config.check_secret(&generated).expect("the same secret");
        let check = fs::read_to_string(dir.path().join(SECRET_CHECK_FILE)).expect("written");
        assert_eq!(check.trim().len(), 64);
        let other = b"another secret, given by --secret";
        match config.check_secret(other) {
            Err(ConfigError::SecretChanged { path }) => {
                assert_eq!(path, dir.path().join(SECRET_CHECK_FILE))
            }
            refused => panic!("{refused:?}"),
        }
    }

    #[test]
    fn an_address_that_names_nothing_to_listen_on_is_refused_up_front() {
        assert!(Config::default().validate().is_ok());
        for (listen, admin) in [
            ("nonsense", None),
            ("127.0.0.1:99999", None),
            ("127.0.0.1", None),
            ("127.0.0.1:8080", Some("8090")),
        ] {
            let config = Config {
                listen: listen.into(),
                admin_listen: admin.map(String::from),
                ..Config::default()
            };
            match config.validate() {
                Err(ConfigError::Listen { addr, .. }) => {
                    assert!(addr == listen || Some(addr.as_str()) == admin)
                }
                other => panic!("{listen} {admin:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_secret_is_generated_once_private_and_then_reused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = Config {
            data: dir.path().join("data"),
            ..Config::default()
        };
        let first = config.secret_bytes().expect("generated");
        assert_eq!(first.len(), 32);
        assert_eq!(config.secret_bytes().expect("read back"), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(dir.path().join("data").join(SECRET_FILE))
                .expect("the file exists")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let short = Config {
            secret: Some("too short".into()),
            ..Config::default()
        };
        assert!(matches!(short.validate(), Err(ConfigError::ShortSecret(9))));
        let redis = Config {
            redis: Some("redis://127.0.0.1".into()),
            ..Config::default()
        };
        let err = redis
            .validate()
            .expect_err("redis without a secret is refused");
        assert!(err.to_string().contains("PIPEHUB_SECRET"));
        let redis = Config {
            redis: Some("redis://127.0.0.1".into()),
            secret: Some("0123456789abcdef".into()),
            ..Config::default()
        };
        assert!(redis.validate().is_ok());
        let shards = Config {
            shards: 0,
            ..Config::default()
        };
        assert!(shards.validate().is_err());
        let protocol = Config {
            default_protocol: "nope:chess".into(),
            ..Config::default()
        };
        assert!(protocol.validate().is_err());
        assert!(Config::default().validate().is_ok());
        let given = Config {
            secret: Some("0123456789abcdef".into()),
            ..Config::default()
        };
        assert_eq!(given.secret_bytes().expect("given"), b"0123456789abcdef");
    }

    #[test]
    fn a_config_written_out_shows_neither_the_secret_nor_the_redis_url() {
        let config = Config {
            redis: Some("redis://:hunter2hunter2@127.0.0.1:6379/0".into()),
            secret: Some("0123456789abcdef-topsecret".into()),
            ..Config::default()
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("topsecret"), "{shown}");
        assert!(shown.contains("secret: Some([hidden])"), "{shown}");
        assert!(shown.contains("listen: \"127.0.0.1:8080\""), "{shown}");
    }
}
