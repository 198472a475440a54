//! The agent's seats on disk: one small JSON file per seat, readable by its user only.
//!
//! A seat file holds what makes the agent a seat: the hub and inbox, the game id, X or O,
//! the seat token, the Ed25519 secret key the agent minted for it, and a rock-paper-scissors
//! choice the person made before the seat's commit turn (held by the agent, as the hub holds
//! one for a hub-held seat). For X it also keeps the rules asked for and the pairing code;
//! for every seat, the newest event the agent signed and the newest head it verified
//! ([`super::verify`] holds later logs to them). The key is written **before** the agent posts its public key,
//! so a crash between the post and the answer loses a token, never a key that signs a
//! registered game; the token is added as soon as the hub answers. A seat whose answer
//! never came waits, with its request's `Idempotency-Key`, for the person's next call of
//! the same create or pair to send it again ([`SeatRecord::asked`], [`Store::pending`]).
//! Files are written whole (a temporary file, then a rename) with mode 0600 in a
//! directory of mode 0700.
//!
//! The file name comes from the seat's public key, which is known before the post and
//! unique per seat. Nonces are never stored: they are derived from the key when needed.
//!
//! What this module deliberately does not do: talk to the hub or judge a game. It also
//! never prints a record: [`SeatRecord`]'s `Debug` leaves out the token and the key.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use games::crypto::{self, SecretKey};
use games::Seat;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One seat of this agent, as stored.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeatRecord {
    /// The hub's base URL, as given with `--hub`.
    pub hub: String,
    pub inbox: String,
    /// `None` until the hub answered the create or the pair.
    pub game: Option<String>,
    /// `"X"` or `"O"`.
    pub seat: String,
    /// The protocol ref the game was created with (the guest learns it from its view).
    pub protocol: Option<String>,
    /// The seat token; `None` until the hub answered.
    pub token: Option<String>,
    /// The seat's Ed25519 secret key, 64 hex characters.
    key: String,
    /// A rock-paper-scissors choice waiting for this seat's commit turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_choice: Option<String>,
    /// The rules the person asked for at `game_new`, as sent, empty for the defaults (X
    /// only): the start this agent signs, and the chain it shows, must carry them with the
    /// protocol's defaults. `None` in a record made before rules were kept: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Map<String, Value>>,
    /// The game's pairing code (X only), so that the agent can refuse to redeem its own
    /// code, which would seat it on both sides of one game.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairing_code: Option<String>,
    /// When that code dies, as the hub said (RFC 3339, UTC, to the second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_expires_at: Option<String>,
    /// The newest event this agent signed for the seat, written before it is posted. The
    /// agent never signs another event at that seq, and a log that loses it once the hub
    /// accepted it does not verify: a hub could otherwise hide the event and collect a
    /// second, conflicting one signed with the person's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed: Option<Signed>,
    /// The newest head of the game this agent verified. A later log must still hold it:
    /// one that ends before it, or holds another event there, was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<Mark>,
    /// Events this agent signed and the hub refused before its inbox (section 5: a token,
    /// rate-limit, size, type, JSON or seat-rule refusal never appends), so their seqs were
    /// free again. A log that holds one of them shows the hub answered falsely. Kept
    /// until the verified head passes their seq.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub withdrawn: Vec<Mark>,
    /// The create or pair that is to make this seat, while no answer to it has come (and
    /// with the answer, the seat's token): kept so that the person's next `game_new` of the
    /// same protocol and rules, or `game_join` with the same code, sends it again with the
    /// same `Idempotency-Key` and seat key, and the hub answers with the seat its first
    /// try made instead of making a second game or refusing a spent code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<Asked>,
}

/// A create or a pair sent and not yet answered ([`SeatRecord::asked`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Asked {
    /// The request's `Idempotency-Key`: random, for this seat alone.
    pub idempotency_key: String,
    /// The pairing code a pair redeems (O), as the hub reads it (upper case, no hyphen);
    /// `None` for a create, or a code that cannot be one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// When the request was first sent, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// How long a request whose answer was lost may be sent again: a hub answers a repeat for
/// ten minutes after the create or pair (`CREATE_REPEAT`, `PAIR_REPEAT`). A seat file
/// still waiting for its answer after that is removed ([`Store::pending`]).
pub const ASKED_KEEP: std::time::Duration = crate::game::seats::CREATE_REPEAT;

/// One accepted event of a game: its seq and hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    pub seq: u64,
    pub hash: String,
}

/// An event this agent signed, and whether the hub answered that it accepted it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed {
    pub seq: u64,
    pub hash: String,
    #[serde(default)]
    pub accepted: bool,
    /// What the event does, for the person (`the move {"row":2,"col":1}`, `a resign`),
    /// should it have to be sent again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

impl fmt::Debug for SeatRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeatRecord")
            .field("hub", &self.hub)
            .field("inbox", &self.inbox)
            .field("game", &self.game)
            .field("seat", &self.seat)
            .finish_non_exhaustive()
    }
}

impl SeatRecord {
    /// A new seat with a freshly minted key, before anything is posted.
    pub fn mint(hub: &str, inbox: &str, seat: Seat, protocol: Option<String>) -> SeatRecord {
        let mut bytes = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut bytes);
        let key = SecretKey::from_bytes(&bytes);
        SeatRecord {
            hub: hub.to_string(),
            inbox: inbox.to_string(),
            game: None,
            seat: seat.as_str().to_string(),
            protocol,
            token: None,
            key: hex::encode(key.to_bytes()),
            held_choice: None,
            rules: None,
            pairing_code: None,
            code_expires_at: None,
            signed: None,
            verified: None,
            withdrawn: Vec::new(),
            asked: None,
        }
    }

    /// Marks the record as the seat a request sent now, with a fresh `Idempotency-Key`,
    /// is to make (`code`: the pairing code of a pair).
    pub fn ask(&mut self, code: Option<&str>) {
        self.asked = Some(Asked {
            idempotency_key: crate::game::seats::new_token(),
            code: code.map(str::to_string),
            at_ms: crate::clock::now_ms(),
        });
    }

    pub fn seat(&self) -> Option<Seat> {
        Seat::parse(&self.seat)
    }

    /// The seat's signing key; `None` when the file was damaged.
    pub fn signing_key(&self) -> Option<SecretKey> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&self.key, &mut bytes).ok()?;
        Some(SecretKey::from_bytes(&bytes))
    }

    /// The public key the hub registers, 64 hex characters.
    pub fn public_key(&self) -> Option<String> {
        self.signing_key()
            .map(|k| crypto::public_key_hex(&k.verifying_key()))
    }

    /// The file name: derived from the public key, so known before the first post.
    fn file_name(&self) -> String {
        let public = self.public_key().unwrap_or_default();
        format!("seat-{}.json", &public[..public.len().min(32)])
    }
}

/// The directory of this agent's seats.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
    /// Held (locked) for as long as the store is open: one agent a state directory.
    _lock: std::sync::Arc<fs::File>,
}

/// How long an agent waits for another that still holds its state directory (one that
/// an MCP client is restarting may not have exited yet).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Store {
    /// Opens (creating it with mode 0700) the seats directory under `root`.
    ///
    /// The directory is locked for as long as the store is open: two agents on one
    /// directory would each overwrite what the other signed and verified, and one could
    /// sign a second event at a seq the other signed. A second agent waits up to
    /// [`LOCK_WAIT`] and then fails, saying so. A directory given that already exists
    /// keeps its mode; the seats directory in it, which holds the keys, is always 0700.
    pub fn open(root: &Path) -> std::io::Result<Store> {
        let dir = root.join("seats");
        let made = !root.exists();
        fs::create_dir_all(&dir)?;
        if made {
            restrict(root, 0o700)?;
        }
        restrict(&dir, 0o700)?;
        let lock = lock_file(&root.join("lock"))?;
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!(
                            "another pipehub mcp is using {}; give each agent its own --state-dir",
                            root.display()
                        ),
                    ))
                }
                Err(fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        Ok(Store {
            dir,
            _lock: std::sync::Arc::new(lock),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a record whole: a private temporary file, flushed, then renamed over the old.
    pub fn save(&self, record: &SeatRecord) -> std::io::Result<()> {
        let text = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        let path = self.dir.join(record.file_name());
        let tmp = self.dir.join(format!(".{}.tmp", record.file_name()));
        let mut file = private_file(&tmp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        Ok(())
    }

    /// Removes a seat that never came to be (the hub refused the create or the pair).
    pub fn remove(&self, record: &SeatRecord) -> std::io::Result<()> {
        match fs::remove_file(self.dir.join(record.file_name())) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The seats of `hub`'s inbox `inbox` still waiting for the answer to the create or
    /// pair that is to make them ([`SeatRecord::asked`]). Those older than [`ASKED_KEEP`],
    /// which a hub no longer answers, are removed: their token can never come, so their
    /// key could never act.
    pub fn pending(&self, hub: &str, inbox: &str) -> std::io::Result<Vec<SeatRecord>> {
        let now = crate::clock::now_ms();
        let mut pending = Vec::new();
        for record in self.records()?.into_iter().flatten() {
            let Some(asked) = record.asked.as_ref() else {
                continue;
            };
            if record.token.is_some() || record.hub != hub || record.inbox != inbox {
                continue;
            }
            if now.saturating_sub(asked.at_ms) > ASKED_KEEP.as_millis() as u64 {
                self.remove(&record)?;
            } else {
                pending.push(record);
            }
        }
        Ok(pending)
    }

    /// Every seat file, read: `Err` with its name for one that cannot be (damaged, cut
    /// short, or holding a key its name does not come from).
    fn records(&self) -> std::io::Result<Vec<Result<SeatRecord, String>>> {
        let mut records = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !(name.starts_with("seat-") && name.ends_with(".json")) {
                continue;
            }
            let name = name.to_string();
            let read = fs::read(&path)
                .ok()
                .and_then(|text| serde_json::from_slice::<SeatRecord>(&text).ok())
                // The name is derived from the key: a key changed on disk (a flipped
                // byte that is still hex) no longer matches it, and would otherwise sign
                // events the hub refuses, blamed on the hub.
                .filter(|r| r.signing_key().is_some() && r.file_name() == name);
            records.push(read.ok_or(name));
        }
        Ok(records)
    }

    /// What an agent of the hub `hub` starts from, in one reading of the directory.
    pub fn load(&self, hub: &str) -> std::io::Result<Kept> {
        let mut kept = Kept::default();
        for read in self.records()? {
            match read {
                Ok(r) => match (&r.game, &r.token) {
                    (Some(_), Some(_)) if r.hub == hub => kept.seats.push(r),
                    (Some(game), Some(_)) => kept.elsewhere.push((r.hub.clone(), game.clone())),
                    _ => {}
                },
                Err(name) => {
                    tracing::warn!(file = %self.dir.join(&name).display(), "an unreadable seat file");
                    kept.damaged.push(name);
                }
            }
        }
        kept.damaged.sort();
        kept.elsewhere.sort();
        Ok(kept)
    }
}

/// The seats a state directory keeps, as an agent starting on one hub sees them.
#[derive(Debug, Default)]
pub struct Kept {
    /// Every complete seat (game and token known) of this hub.
    pub seats: Vec<SeatRecord>,
    /// The names of the seat files that could not be read (damaged, cut short): their
    /// games cannot be played from here, and the person should hear of it.
    pub damaged: Vec<String>,
    /// The complete seats of other hubs, as (hub, game), sorted: an agent started with
    /// `--hub` written another way does not play them, and says so rather than let the
    /// person think them lost.
    pub elsewhere: Vec<(String, String)>,
}

#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn restrict(_path: &Path, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

#[cfg(unix)]
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    fs::File::create(path)
}

/// The state directory's lock file, opened (made if missing) without being emptied.
fn lock_file(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn one_agent_at_a_time_holds_a_state_directory() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let first = Store::open(tmp.path()).expect("opens");
        let t = std::time::Instant::now();
        let Err(second) = Store::open(tmp.path()) else {
            panic!("a second store opened the same directory");
        };
        assert!(t.elapsed() >= LOCK_WAIT, "it waited for the first");
        assert!(
            second.to_string().contains("another pipehub mcp is using"),
            "{second}"
        );
        drop(first);
        Store::open(tmp.path()).expect("opens once the first is gone");
    }

    #[cfg(unix)]
    #[test]
    fn a_state_directory_that_exists_keeps_its_mode_and_the_seats_in_it_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("a temporary directory");
        restrict(tmp.path(), 0o755).expect("chmod");
        let store = Store::open(tmp.path()).expect("opens");
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(tmp.path()), 0o755);
        assert_eq!(mode(store.dir()), 0o700);
        let fresh = tmp.path().join("fresh");
        Store::open(&fresh).expect("opens");
        assert_eq!(mode(&fresh), 0o700);
    }

    #[test]
    fn seats_waiting_for_an_answer_are_listed_until_a_hub_would_no_longer_give_it() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(tmp.path()).expect("opens");
        let waiting = |hub: &str, inbox: &str, age: Duration| {
            let mut r = SeatRecord::mint(hub, inbox, Seat::O, None);
            r.ask(Some("ABCD2345"));
            if let Some(asked) = r.asked.as_mut() {
                asked.at_ms -= age.as_millis() as u64;
            }
            store.save(&r).expect("saves");
            r
        };
        let minute = Duration::from_secs(60);
        let fresh = waiting("http://h", "lobby", minute);
        let old = waiting("http://h", "lobby", ASKED_KEEP + minute);
        waiting("http://other", "lobby", minute);
        waiting("http://h", "elsewhere", minute);
        let mut answered = waiting("http://h", "lobby", minute);
        answered.game = Some("g1".into());
        answered.token = Some("t".into());
        store.save(&answered).expect("saves");
        let mut unasked = SeatRecord::mint("http://h", "lobby", Seat::X, None);
        unasked.asked = None;
        store.save(&unasked).expect("saves");

        let pending = store.pending("http://h", "lobby").expect("lists");
        let keys: Vec<_> = pending.iter().map(SeatRecord::public_key).collect();
        assert_eq!(keys, [fresh.public_key()]);
        assert_ne!(
            fresh.asked.as_ref().map(|a| &a.idempotency_key),
            answered.asked.as_ref().map(|a| &a.idempotency_key),
            "a key per request"
        );
        // One a hub would no longer answer is gone, file and key; the others stay.
        assert!(!store.dir().join(old.file_name()).exists());
        assert!(store.dir().join(unasked.file_name()).exists());
        assert_eq!(fs::read_dir(store.dir()).expect("a directory").count(), 5);
    }

    #[test]
    fn a_seat_round_trips_and_only_complete_seats_of_this_hub_load() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(tmp.path()).expect("opens");
        let mut a = SeatRecord::mint("http://h", "lobby", Seat::X, Some("p".into()));
        store.save(&a).expect("saves before posting");
        assert!(store.load("http://h").expect("loads").seats.is_empty());
        a.game = Some("g1".into());
        a.token = Some("t".into());
        store.save(&a).expect("saves");
        let mut other = SeatRecord::mint("http://other", "lobby", Seat::O, None);
        store.save(&other).expect("saves");
        let kept = store.load("http://h").expect("loads");
        assert_eq!(kept.seats.len(), 1);
        assert_eq!(kept.seats[0].public_key(), a.public_key());
        assert!(!format!("{:?}", kept.seats[0]).contains(&a.key));
        assert!(kept.damaged.is_empty());
        // Another hub's seat is named once it is complete, and never played here.
        assert!(kept.elsewhere.is_empty());
        other.game = Some("g2".into());
        other.token = Some("u".into());
        store.save(&other).expect("saves");
        let kept = store.load("http://h").expect("loads");
        assert_eq!(kept.seats.len(), 1);
        assert_eq!(
            kept.elsewhere,
            [("http://other".to_string(), "g2".to_string())]
        );
        // A file cut short, or whose key is not one, is named, not silently passed over.
        let cut = store.dir().join("seat-cut.json");
        fs::write(&cut, b"{\"hub\": \"http://h\", \"inb").expect("written");
        let mut bad = a.clone();
        bad.key = "zz".repeat(32);
        fs::write(
            store.dir().join("seat-badkey.json"),
            serde_json::to_vec(&bad).expect("json"),
        )
        .expect("written");
        // A key damaged into another valid key no longer matches the file's name.
        let mut flipped = a.clone();
        let first = if flipped.key.starts_with('0') {
            "1"
        } else {
            "0"
        };
        flipped.key.replace_range(..1, first);
        fs::write(
            store.dir().join(a.file_name()),
            serde_json::to_vec(&flipped).expect("json"),
        )
        .expect("written");
        let Kept { seats, damaged, .. } = store.load("http://h").expect("loads");
        assert!(seats.is_empty());
        let mut expected = vec![
            a.file_name(),
            "seat-badkey.json".into(),
            "seat-cut.json".into(),
        ];
        expected.sort();
        assert_eq!(damaged, expected);
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(&tmp.path().join("state")).expect("opens");
        let r = SeatRecord::mint("http://h", "i", Seat::O, None);
        store.save(&r).expect("saves");
        let mode = |p: &Path| fs::metadata(p).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&tmp.path().join("state")), 0o700);
        assert_eq!(mode(&store.dir().join(r.file_name())), 0o600);
    }
}
