//! Seats and pairing (DESIGN.md section 4): who may write to a seated game.
//!
//! Creating a game reserves its id in its inbox and seats X; redeeming X's pairing code
//! seats O. Every record here lives in the durable [`Meta`] store (fsynced before we
//! answer); the registrations and seat tokens of *open* games (created and not yet finished
//! or cancelled) are also kept in memory for lookups on the hot path. A finished game
//! leaves that cache when it closes (its tokens at the next sweep, within a second), so the memory a hub
//! needs follows its open games, not every game it ever seated; a lookup that misses the
//! cache reads the store:
//!
//! - `game/{inbox}/{game}`: the [`Registration`] (protocol, validated rules, keys and who
//!   holds them, paired or not, the host person).
//! - `seat/{sha256(token)}`: the seat a token opens. Tokens are 256 random bits and only
//!   their hash is stored, so a copy of the data directory opens no seat.
//! - `code/{sha256(code)}`: a pairing code (8 Crockford base32 characters, 40 random
//!   bits), its deadline and whether it was used. Redeeming takes the record atomically, so
//!   a code works once; a used code leaves a tombstone so a second try answers `code_used`.
//!   A day after a code expired or died it is purged ([`CODE_KEEP`]); a try then answers
//!   `not_found`.
//! - `open/{person}/{inbox}/{game}`: the host's open games, for the per-person cap.
//! - `held/{inbox}/{game}/{seat}`: a rock-paper-scissors choice was held in memory; if the
//!   hub restarts before committing it, the seat is told (`held_choice_lost`). A choice is
//!   answered `held` only once its mark is stored, so a hub stopped right after the answer
//!   still tells the seat.
//!
//! What this module deliberately does not do: judge events, or write to the inbox. It
//! answers "which seat is this" and "what was registered"; the facade enforces it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use dashmap::DashMap;
use games::key::GameIds;
use games::{crypto, Seat};
use parking_lot::Mutex;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::types::SeatAuth;
use super::HubError;
use crate::meta::Meta;

/// What a seated game was created with, and how far its seating got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registration {
    pub inbox: String,
    pub game: String,
    /// The protocol's canonical ref and id.
    pub protocol: Arc<str>,
    pub protocol_id: Arc<str>,
    /// The validated rules, defaults filled in, without `keys` and `inboxes`.
    pub rules: Arc<Map<String, Value>>,
    pub signed: bool,
    /// Public keys (64 hex) once known; `None` for an unsigned game.
    pub key_x: Option<String>,
    pub key_o: Option<String>,
    /// True when that seat's agent holds its own key (it posts signed events itself).
    pub agent_x: bool,
    pub agent_o: bool,
    pub paired: bool,
    /// The person whose open-games cap this game counts against.
    pub host: String,
    pub created_ms: u64,
    /// Hash of the live pairing code (`None` once paired).
    pub code_hash: Option<String>,
}

impl Registration {
    /// True when the hub writes the start: X's key is hub-held, or the game is unsigned.
    pub fn hub_writes_start(&self) -> bool {
        !self.signed || !self.agent_x
    }

    /// True when `seat`'s agent holds its key (so the hub cannot write for it).
    pub fn agent_held(&self, seat: Seat) -> bool {
        match seat {
            Seat::X => self.agent_x,
            Seat::O => self.agent_o,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct CodeRecord {
    inbox: String,
    game: String,
    expires_ms: u64,
    used: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SeatRecord {
    inbox: String,
    game: String,
    seat: String,
}

/// How long a dead pairing code (expired, used or replaced) is remembered, so that a late
/// try is told why it failed, before it is purged.
pub const CODE_KEEP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// Crockford base32: no I, L, O, U, so codes read aloud and typed by hand survive.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `n` random Crockford base32 characters.
pub fn random_base32(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut bytes);
    bytes
        .iter()
        .map(|b| CROCKFORD[(b & 31) as usize] as char)
        .collect()
}

/// Normalizes a pairing code as typed: Crockford's decoding (case-insensitive, I and L read
/// as 1, O as 0, hyphens ignored). `None` when it cannot be a code.
pub fn normalize_code(code: &str) -> Option<String> {
    let mut out = String::with_capacity(8);
    for c in code.chars() {
        let c = match c.to_ascii_uppercase() {
            '-' => continue,
            'I' | 'L' => '1',
            'O' => '0',
            c => c,
        };
        if !CROCKFORD.contains(&(c as u8)) || !c.is_ascii() {
            return None;
        }
        out.push(c);
    }
    (out.len() == 8).then_some(out)
}

/// A fresh seat token: 256 random bits as 64 hex characters.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// RFC 3339 UTC text of a time in milliseconds since the epoch (whole seconds).
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

fn game_key(inbox: &str, game: &str) -> String {
    format!("game/{inbox}/{game}")
}

fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn code_key(code_hash: &str) -> String {
    format!("code/{code_hash}")
}

fn seat_key(token_hash: &[u8; 32]) -> String {
    format!("seat/{}", crypto::to_hex(token_hash))
}

/// A fresh pairing code: (code, its hash, its deadline `ttl_ms` from now).
fn draw_code(ttl_ms: u64) -> (String, String, u64) {
    let code = random_base32(8);
    let hash = crypto::sha256_hex(code.as_bytes());
    (code, hash, now_ms() + ttl_ms)
}

/// A `seat/{hash}` record: the token's hash and the seat it opens.
fn parse_seat(key: &str, value: &[u8]) -> Option<([u8; 32], SeatAuth)> {
    let mut hash = [0u8; 32];
    hex::decode_to_slice(key.strip_prefix("seat/")?, &mut hash).ok()?;
    let rec = serde_json::from_slice::<SeatRecord>(value).ok()?;
    let seat = Seat::parse(&rec.seat)?;
    Some((
        hash,
        SeatAuth {
            inbox: rec.inbox.into(),
            game: rec.game.into(),
            seat,
        },
    ))
}

pub(super) fn open_key(person: &str, inbox: &str, game: &str) -> String {
    format!("open/{person}/{inbox}/{game}")
}

/// The person, inbox and game of an [`open_key`]. The person may itself hold slashes only
/// in theory (addresses and token hashes do not), so the key is split by its known tail.
pub(super) fn parse_open_key(key: &str) -> Option<(&str, &str, &str)> {
    let mut parts = key.strip_prefix("open/")?.rsplitn(3, '/');
    let (game, inbox, person) = (parts.next()?, parts.next()?, parts.next()?);
    Some((person, inbox, game))
}

fn held_key(inbox: &str, game: &str, seat: Seat) -> String {
    format!("held/{inbox}/{game}/{seat}")
}

fn json_bytes<T: Serialize>(value: &T) -> Result<Bytes, HubError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| HubError::Unavailable(format!("cannot encode a record: {e}")))
}

/// The seats of every seated game: durable in [`Meta`], those of open games cached in
/// memory.
pub struct Seats {
    meta: Arc<dyn Meta>,
    /// Seats of open games (and of games closed since the last sweep), keyed by the
    /// token's SHA-256 as bytes (the store's keys spell it in hex).
    tokens: DashMap<[u8; 32], SeatAuth>,
    /// Registrations of open games. Shared, not copied: every move reads its game's.
    games: DashMap<(String, String), Arc<Registration>>,
    /// Open games per host person.
    open: DashMap<String, u64>,
    commons: Mutex<Commons>,
    /// Whether other hub nodes write to the same store (a cluster): then the store, not
    /// this cache, says what became of a game another node may have created.
    shared: bool,
    /// Turns at changing a game's seating, by stripe of game ([`Seats::turn`]).
    turns: Box<[tokio::sync::Mutex<()>]>,
}

/// A new game's place under its host's open-games cap ([`Seats::open_slot`]): counted
/// from when it is taken, and given back when dropped unless the game was made.
struct OpenSlot<'a> {
    seats: &'a Seats,
    person: String,
    kept: bool,
}

impl OpenSlot<'_> {
    fn keep(&mut self) {
        self.kept = true;
    }
}

impl Drop for OpenSlot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            if let Some(mut n) = self.seats.open.get_mut(&self.person) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

/// How many times a change of a game's seating reads it again after another hub node
/// changed it first ([`Seats::swap_registration`]) before it gives up.
const CHANGE_TRIES: u32 = 6;

/// A change of a game's seating that lost to other nodes' changes [`CHANGE_TRIES`] times.
fn changing_elsewhere() -> HubError {
    HubError::Unavailable("the game kept changing on other hub nodes; try again".into())
}

/// The pause before a change of a game's seating reads the game again after losing to
/// another node's (`lost` times so far): 1, 2, 4, … ms. The other node's change may not be
/// readable at once (a store whose reads show durable values only has it staged until its
/// next commit), and a read at once would only lose again.
async fn after_losing(lost: u32) {
    tokio::time::sleep(std::time::Duration::from_millis(1 << lost.min(6))).await;
}

/// How many stripes [`Seats::turn`] spreads games over. A turn is held across a group
/// commit of the meta store, so a stripe shared by games seated at the same moment makes
/// them take consecutive commits; with this many, a hub seating thousands of games a
/// second has one game in a stripe at a time nearly always.
const TURN_STRIPES: usize = 256;

/// At most this many distinct protocol names and rule sets are shared (see [`Commons`]).
const MAX_COMMONS: usize = 256;

/// What most registrations have in common, kept once: the protocol's ref and id and its
/// rules (nearly every game plays its protocol's defaults). A private copy of the rules was
/// most of a cached registration's memory. Bounded: past [`MAX_COMMONS`] distinct values a
/// registration keeps its own copy.
#[derive(Default)]
struct Commons {
    texts: HashSet<Arc<str>>,
    rules: HashMap<String, Arc<Map<String, Value>>>,
}

impl Commons {
    fn text(&mut self, text: &Arc<str>) -> Arc<str> {
        if let Some(shared) = self.texts.get(text) {
            return shared.clone();
        }
        if self.texts.len() < MAX_COMMONS {
            self.texts.insert(text.clone());
        }
        text.clone()
    }

    fn rules(&mut self, rules: &Arc<Map<String, Value>>) -> Arc<Map<String, Value>> {
        // A registration updated from a cached one (pairing) already holds a shared copy.
        if self.rules.values().any(|shared| Arc::ptr_eq(shared, rules)) {
            return rules.clone();
        }
        // A `Map` is ordered by key, so equal rules serialize alike.
        let Ok(text) = serde_json::to_string(&**rules) else {
            return rules.clone();
        };
        if let Some(shared) = self.rules.get(&text) {
            return shared.clone();
        }
        if self.rules.len() < MAX_COMMONS {
            self.rules.insert(text, rules.clone());
        }
        rules.clone()
    }

    /// `reg` with its common parts shared.
    fn share(&mut self, mut reg: Registration) -> Arc<Registration> {
        reg.protocol = self.text(&reg.protocol);
        reg.protocol_id = self.text(&reg.protocol_id);
        reg.rules = self.rules(&reg.rules);
        Arc::new(reg)
    }
}

impl Seats {
    /// Loads the open-game records and the registrations of those games, one read each.
    /// It reads nothing of the games that finished, however many the store holds: their
    /// records are read when asked for. Nor the seats: a token is read from the store the
    /// first time it is used after the hub opened (and cached while its game is open).
    pub async fn load(meta: Arc<dyn Meta>, shared: bool) -> Result<Seats, HubError> {
        let seats = Seats {
            meta,
            tokens: DashMap::new(),
            games: DashMap::new(),
            open: DashMap::new(),
            commons: Mutex::new(Commons::default()),
            shared,
            turns: (0..TURN_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        };
        let mut open_games = HashSet::new();
        for (key, _) in seats.meta.scan("open/").await? {
            if let Some((person, inbox, game)) = parse_open_key(&key) {
                *seats.open.entry(person.to_string()).or_insert(0) += 1;
                open_games.insert((inbox.to_string(), game.to_string()));
            }
        }
        let keys = open_games.iter().map(|(inbox, game)| game_key(inbox, game));
        for (key, value) in seats.read_many(keys).await? {
            match value.map(|v| serde_json::from_slice::<Registration>(&v)) {
                Some(Ok(reg)) => {
                    seats.cache(reg);
                }
                Some(Err(_)) => tracing::warn!(%key, "unreadable game registration skipped"),
                None => tracing::warn!(%key, "an open game without a registration skipped"),
            }
        }
        Ok(seats)
    }

    /// The values of `keys`, read a few dozen at a time (one round trip each to Redis).
    async fn read_many(
        &self,
        keys: impl Iterator<Item = String>,
    ) -> Result<Vec<(String, Option<Bytes>)>, HubError> {
        use futures_util::{StreamExt, TryStreamExt};
        futures_util::stream::iter(keys)
            .map(|key| async move {
                let value = self.meta.get(&key).await?;
                Ok::<_, HubError>((key, value))
            })
            .buffer_unordered(32)
            .try_collect()
            .await
    }

    /// The seat a token opens, if its game is open (else see [`Seats::stored_token`]).
    pub fn seat_for_token(&self, token: &str) -> Option<SeatAuth> {
        self.tokens.get(&token_hash(token)).map(|s| s.clone())
    }

    /// The seat a token opens, read from the store (a finished game's, or one another hub
    /// node issued). Not cached.
    pub async fn stored_token(
        &self,
        token: &str,
    ) -> Result<Option<(SeatAuth, [u8; 32])>, HubError> {
        let hash = token_hash(token);
        let key = seat_key(&hash);
        Ok(self
            .meta
            .get(&key)
            .await?
            .and_then(|value| parse_seat(&key, &value))
            .map(|(_, auth)| (auth, hash)))
    }

    /// A registration read from the store (a finished game's, or one another hub node
    /// wrote). Not cached.
    pub async fn stored_registration(
        &self,
        inbox: &str,
        game: &str,
    ) -> Result<Option<Arc<Registration>>, HubError> {
        let Some(value) = self.meta.get(&game_key(inbox, game)).await? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<Registration>(&value)
            .ok()
            .map(|reg| self.commons.lock().share(reg)))
    }

    /// Forgets the cached seats of games that are no longer open (run now and then: a
    /// closing game does not look its two tokens up among every open game's).
    pub fn forget_closed_seats(&self) -> usize {
        let before = self.tokens.len();
        self.tokens.retain(|_, auth| {
            self.games
                .contains_key(&(&*auth.inbox, &*auth.game) as &dyn GameIds)
        });
        before - self.tokens.len()
    }

    #[cfg(test)]
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Re-reads one registration from the store into the cache (another hub node may have
    /// created, paired or cancelled the game).
    pub async fn refresh(
        &self,
        inbox: &str,
        game: &str,
    ) -> Result<Option<Arc<Registration>>, HubError> {
        match self.meta.get(&game_key(inbox, game)).await? {
            Some(value) => match serde_json::from_slice::<Registration>(&value) {
                Ok(reg) => Ok(Some(self.cache(reg))),
                Err(_) => Ok(self.registration(inbox, game)),
            },
            None => {
                self.games.remove(&(inbox, game) as &dyn GameIds);
                Ok(None)
            }
        }
    }

    /// Re-reads the registrations of one inbox's open games from the store (for the game
    /// listing of a hub node whose peers create games too): the open-game marks of every
    /// host, and the registration of each of the inbox's, one read a game. A finished
    /// game's is not read, nor cached: the cache holds open games only.
    pub async fn refresh_inbox(&self, inbox: &str) -> Result<(), HubError> {
        let mut open = HashSet::new();
        for (key, _) in self.meta.scan("open/").await? {
            if let Some((_, i, game)) = parse_open_key(&key) {
                if i == inbox {
                    open.insert(game.to_string());
                }
            }
        }
        let mut fresh = Vec::with_capacity(open.len());
        for (key, value) in self
            .read_many(open.iter().map(|g| game_key(inbox, g)))
            .await?
        {
            // None: cancelled meanwhile.
            match value.map(|v| serde_json::from_slice::<Registration>(&v)) {
                Some(Ok(reg)) => fresh.push(reg),
                Some(Err(_)) => tracing::warn!(%key, "unreadable game registration skipped"),
                None => {}
            }
        }
        self.games
            .retain(|(i, g), _| i != inbox || open.contains(g));
        for reg in fresh {
            self.cache(reg);
        }
        Ok(())
    }

    /// Puts `reg` in the cache, its common parts shared; returns the cached copy.
    fn cache(&self, reg: Registration) -> Arc<Registration> {
        let reg = self.commons.lock().share(reg);
        self.games
            .insert((reg.inbox.clone(), reg.game.clone()), reg.clone());
        reg
    }

    /// How many open games `person` hosts, counted in the store (every hub node's).
    pub async fn open_games_stored(&self, person: &str) -> Result<u64, HubError> {
        Ok(self.meta.scan(&format!("open/{person}/")).await?.len() as u64)
    }

    /// Looks a token up in the store and caches it when its game is open here: a finished
    /// game's token, or one issued before the hub opened.
    pub async fn load_token(&self, token: &str) -> Result<Option<SeatAuth>, HubError> {
        let Some((auth, hash)) = self.stored_token(token).await? else {
            return Ok(None);
        };
        if self.registration(&auth.inbox, &auth.game).is_some() {
            self.tokens.insert(hash, auth.clone());
        }
        Ok(Some(auth))
    }

    /// Looks a token up in the store (issued by another hub node) and caches it.
    pub async fn refresh_token(&self, token: &str) -> Result<Option<SeatAuth>, HubError> {
        let Some((auth, hash)) = self.stored_token(token).await? else {
            return Ok(None);
        };
        self.tokens.insert(hash, auth.clone());
        Ok(Some(auth))
    }

    /// The registration of an open game (else see [`Seats::stored_registration`]).
    pub fn registration(&self, inbox: &str, game: &str) -> Option<Arc<Registration>> {
        self.games
            .get(&(inbox, game) as &dyn GameIds)
            .map(|r| r.clone())
    }

    /// Every registration (for the games gauge).
    pub fn all_registrations(&self) -> Vec<Arc<Registration>> {
        self.games.iter().map(|e| e.value().clone()).collect()
    }

    /// Registrations of one inbox (for the game listing).
    pub fn registrations(&self, inbox: &str) -> Vec<Arc<Registration>> {
        self.games
            .iter()
            .filter(|e| e.key().0 == inbox)
            .map(|e| e.value().clone())
            .collect()
    }

    /// How many open games `person` hosts.
    pub fn open_games(&self, person: &str) -> u64 {
        self.open.get(person).map(|n| *n).unwrap_or(0)
    }

    /// The turn at changing a game's seating. Redeeming its code, a fresh code and a
    /// cancel each read the registration, write it (or delete it) and retire a code, with
    /// awaits between; two of them interleaved would each act on what the other was
    /// replacing (a fresh code issued for a game just paired stayed live and seated a
    /// second O; a cancel racing a pair left a started game with no seat). Each holds its
    /// game's turn from its read to its last write, so on this hub they happen one after
    /// the other, and each reads what the one before it left. (Nodes sharing a store take
    /// no turns with each other: there a registration is written only over the bytes it
    /// was read from, see [`Seats::swap_registration`].)
    fn turn(&self, inbox: &str, game: &str) -> &tokio::sync::Mutex<()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (inbox, game).hash(&mut h);
        &self.turns[(h.finish() % self.turns.len() as u64) as usize]
    }

    async fn put_registration(&self, reg: &Registration) -> Result<(), HubError> {
        self.meta
            .put(&game_key(&reg.inbox, &reg.game), json_bytes(reg)?)
            .await?;
        self.cache(reg.clone());
        Ok(())
    }

    /// Issues a seat token and stores its hash.
    async fn issue_token(&self, inbox: &str, game: &str, seat: Seat) -> Result<String, HubError> {
        let token = new_token();
        let hash = token_hash(&token);
        let rec = SeatRecord {
            inbox: inbox.to_string(),
            game: game.to_string(),
            seat: seat.as_str().to_string(),
        };
        self.meta.put(&seat_key(&hash), json_bytes(&rec)?).await?;
        self.tokens.insert(
            hash,
            SeatAuth {
                inbox: inbox.into(),
                game: game.into(),
                seat,
            },
        );
        Ok(token)
    }

    /// Issues a pairing code for a registered game; returns the code, its hash and its
    /// deadline.
    async fn issue_code(
        &self,
        inbox: &str,
        game: &str,
        ttl_ms: u64,
    ) -> Result<(String, String, u64), HubError> {
        // 40 random bits: a collision with a live code is unlikely, and insert_new makes
        // it harmless (we draw again).
        for _ in 0..8 {
            let drawn = draw_code(ttl_ms);
            if self.put_new_code(&drawn, inbox, game).await? {
                return Ok(drawn);
            }
        }
        Err(HubError::Unavailable(
            "could not draw a fresh pairing code".into(),
        ))
    }

    /// Stores a drawn code for `game` unless its hash is taken; true when stored.
    async fn put_new_code(
        &self,
        (_, hash, expires_ms): &(String, String, u64),
        inbox: &str,
        game: &str,
    ) -> Result<bool, HubError> {
        let rec = CodeRecord {
            inbox: inbox.to_string(),
            game: game.to_string(),
            expires_ms: *expires_ms,
            used: false,
        };
        Ok(self
            .meta
            .insert_new(&code_key(hash), json_bytes(&rec)?)
            .await?)
    }

    /// Seats X of a new game: reserves `reg`'s id, issues X's token and a pairing code.
    /// Returns (token, code, expires_ms). `reg.code_hash` is filled in here.
    pub async fn create(
        &self,
        reg: Registration,
        ttl_ms: u64,
    ) -> Result<(String, String, u64), HubError> {
        self.create_capped(reg, ttl_ms, None).await
    }

    /// [`Seats::create`] under a cap of `cap` open games for the host person, counted
    /// here: the game's place under the cap is taken before anything is written and given
    /// back if the game is not made, so creates racing each other cannot pass the cap
    /// between their check and their count (they did: 21 open games under a cap of 20).
    /// `TooManyGames` when the person is at the cap.
    pub async fn create_capped(
        &self,
        mut reg: Registration,
        ttl_ms: u64,
        cap: Option<u64>,
    ) -> Result<(String, String, u64), HubError> {
        let mut slot = self.open_slot(&reg.host, cap)?;
        // The registration (naming a code drawn here), X's seat, the code and the
        // open-game mark are staged together and share one group commit, instead of
        // waiting for three in turn: each fsync costs CPU (on a VM, a trap to the
        // hypervisor to notify the disk), and seating was most of a short game's time
        // under load. Nothing is answered before all four are durable, so a crash between
        // them leaves only records no client was told of.
        let drawn = draw_code(ttl_ms);
        reg.code_hash = Some(drawn.1.clone());
        let key = game_key(&reg.inbox, &reg.game);
        let open = open_key(&reg.host, &reg.inbox, &reg.game);
        let (reserved, token, code_stored, ()) = futures_util::try_join!(
            async { Ok(self.meta.insert_new(&key, json_bytes(&reg)?).await?) },
            self.issue_token(&reg.inbox, &reg.game, Seat::X),
            self.put_new_code(&drawn, &reg.inbox, &reg.game),
            async {
                self.meta
                    .put(&open, Bytes::new())
                    .await
                    .map_err(HubError::from)
            },
        )?;
        if !reserved {
            // Another game holds the id (75 random bits: all but impossible). Undo what
            // is ours; the open mark may be that game's, so it stays.
            let hash = token_hash(&token);
            self.tokens.remove(&hash);
            self.meta.delete(&seat_key(&hash)).await?;
            if code_stored {
                self.meta.delete(&code_key(&drawn.1)).await?;
            }
            return Err(HubError::Unavailable("game id already reserved".into()));
        }
        slot.keep();
        let (code, _, expires_ms) = if code_stored {
            self.cache(reg);
            drawn
        } else {
            // The code's hash was another game's: draw again, and name the new one.
            let (code, hash, expires_ms) = self.issue_code(&reg.inbox, &reg.game, ttl_ms).await?;
            reg.code_hash = Some(hash.clone());
            self.put_registration(&reg).await?;
            (code, hash, expires_ms)
        };
        Ok((token, code, expires_ms))
    }

    /// Takes a place for a new open game of `person`, unless they hold `cap` already.
    fn open_slot(&self, person: &str, cap: Option<u64>) -> Result<OpenSlot<'_>, HubError> {
        let mut open = self.open.entry(person.to_string()).or_insert(0);
        if let Some(cap) = cap.filter(|cap| *open >= *cap) {
            return Err(HubError::TooManyGames(cap));
        }
        *open += 1;
        Ok(OpenSlot {
            seats: self,
            person: person.to_string(),
            kept: false,
        })
    }

    /// Kills a code: leaves a `used` tombstone so a later try answers `code_used` (its
    /// `expires_ms` is when it died, which [`Seats::purge_codes`] goes by).
    async fn retire_code(&self, hash: &str, inbox: &str, game: &str) -> Result<(), HubError> {
        let rec = CodeRecord {
            inbox: inbox.to_string(),
            game: game.to_string(),
            expires_ms: now_ms(),
            used: true,
        };
        self.meta.put(&code_key(hash), json_bytes(&rec)?).await?;
        Ok(())
    }

    /// Forgets pairing codes that expired, or were used or replaced, more than `keep_ms`
    /// before `now_ms`: until then a late try answers `code_used` or `code_expired`,
    /// afterwards `not_found`, and the store does not grow with every code ever issued.
    /// Returns how many it removed (counted as read: one removed meanwhile by another
    /// caller is counted too).
    /// The codes are read a page at a time: a day's codes are as many as the games
    /// seated in a day, too many to hold at once on a busy hub. A page's dead codes are
    /// deleted together, so that the store commits them at once: one by one, each
    /// waiting for a commit of its own, the purge of a busy hub's hour of codes would
    /// take most of the next hour.
    pub async fn purge_codes(&self, now_ms: u64, keep_ms: u64) -> Result<usize, HubError> {
        use futures_util::{StreamExt, TryStreamExt};
        // Pages of two in tests, so that theirs walk several, deleting as they go.
        const PAGE: usize = if cfg!(test) { 2 } else { 256 };
        let mut purged = 0;
        let mut after: Option<String> = None;
        loop {
            let page = self.meta.scan_page("code/", after.as_deref(), PAGE).await?;
            let more = page.len() == PAGE;
            let mut dead = Vec::new();
            for (key, value) in &page {
                let dead_since = match serde_json::from_slice::<CodeRecord>(value) {
                    Ok(rec) => rec.expires_ms,
                    Err(_) => 0, // unreadable: nothing can redeem it
                };
                if dead_since.saturating_add(keep_ms) < now_ms {
                    dead.push(key.clone());
                }
            }
            // Discarded, not deleted: the page has just read them, and a delete would look
            // each up again (in an embedded store's cache file, once it has gone cold).
            let count = dead.len();
            futures_util::stream::iter(dead)
                .map(|key| async move { self.meta.discard(&key).await })
                .buffer_unordered(PAGE)
                .try_collect::<()>()
                .await?;
            purged += count;
            // Others' work goes between pages: a page reads its values on this thread.
            tokio::task::yield_now().await;
            match page.into_iter().last() {
                Some((key, _)) if more => after = Some(key),
                _ => return Ok(purged),
            }
        }
    }

    /// The waiting games this hub holds that nobody can join any more: their code expired
    /// more than `keep_ms` before `now_ms` and was never replaced, or is gone altogether
    /// (purged). Each as (inbox, game, code hash), for [`Seats::abandon`]. Read before the
    /// dead codes are purged, from the open games rather than from the codes, so that a
    /// game whose code was purged before (or while the hub stopped) is found too.
    pub async fn stranded(
        &self,
        now_ms: u64,
        keep_ms: u64,
    ) -> Result<Vec<(String, String, String)>, HubError> {
        let mut stranded = Vec::new();
        for reg in self.all_registrations() {
            let Some(hash) = reg.code_hash.as_deref().filter(|_| !reg.paired) else {
                continue;
            };
            // A game made less than that long ago has had no code dead that long.
            if reg.created_ms.saturating_add(keep_ms) >= now_ms {
                continue;
            }
            let dead = match self.meta.get(&code_key(hash)).await? {
                None => true,
                Some(bytes) => serde_json::from_slice::<CodeRecord>(&bytes).map_or(true, |c| {
                    !c.used && c.expires_ms.saturating_add(keep_ms) < now_ms
                }),
            };
            if dead {
                stranded.push((
                    reg.inbox.to_string(),
                    reg.game.to_string(),
                    hash.to_string(),
                ));
            }
        }
        Ok(stranded)
    }

    /// A fresh code for X before pairing; the old one dies.
    pub async fn new_code(&self, auth: &SeatAuth, ttl_ms: u64) -> Result<(String, u64), HubError> {
        let _turn = self.turn(&auth.inbox, &auth.game).lock().await;
        for lost in 0..CHANGE_TRIES {
            if lost > 0 {
                after_losing(lost - 1).await;
            }
            let (current, before) = self.owned_unpaired(auth).await?;
            let mut reg = Registration::clone(&current);
            let (code, hash, expires_ms) = self.issue_code(&auth.inbox, &auth.game, ttl_ms).await?;
            let old = reg.code_hash.replace(hash.clone());
            let ids = (&*auth.inbox, &*auth.game);
            if !self
                .swap_registration(ids, before.as_ref(), Some(&reg))
                .await?
            {
                // Another node paired, cancelled or renewed the game since it was read:
                // the code drawn dies unseen, and the game is read again.
                self.retire_code(&hash, &auth.inbox, &auth.game).await?;
                continue;
            }
            if let Some(old) = old {
                self.retire_code(&old, &auth.inbox, &auth.game).await?;
            }
            return Ok((code, expires_ms));
        }
        Err(changing_elsewhere())
    }

    /// X's registration while still unpaired, with the bytes it was read from when nodes
    /// share the store (the value a change of it must find there, see
    /// [`Seats::swap_registration`]); errors otherwise. On one hub a game that is not open
    /// here is read from the store: it finished (and was paired: 409, not 404).
    async fn owned_unpaired(
        &self,
        auth: &SeatAuth,
    ) -> Result<(Arc<Registration>, Option<Bytes>), HubError> {
        if auth.seat != Seat::X {
            return Err(HubError::Forbidden("only the host (X) may do this".into()));
        }
        let no_game = || HubError::NotFound("no such seated game".into());
        let (reg, before) = if self.shared {
            let (reg, bytes) = self
                .read_registration(&auth.inbox, &auth.game)
                .await?
                .ok_or_else(no_game)?;
            (reg, Some(bytes))
        } else {
            let reg = match self.registration(&auth.inbox, &auth.game) {
                Some(reg) => reg,
                None => self
                    .stored_registration(&auth.inbox, &auth.game)
                    .await?
                    .ok_or_else(no_game)?,
            };
            (reg, None)
        };
        if reg.paired {
            return Err(HubError::AlreadyPaired);
        }
        Ok((reg, before))
    }

    /// A registration as the store holds it now, with its bytes. Not cached.
    async fn read_registration(
        &self,
        inbox: &str,
        game: &str,
    ) -> Result<Option<(Arc<Registration>, Bytes)>, HubError> {
        let Some(bytes) = self.meta.get(&game_key(inbox, game)).await? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<Registration>(&bytes)
            .ok()
            .map(|reg| (self.commons.lock().share(reg), bytes)))
    }

    /// Writes a game's registration (`after`; `None` removes it). Where nodes share the
    /// store, only over `before`, the bytes it was read from, so that of two nodes changing
    /// one game at once one finds the other's change and answers by it instead of writing
    /// over it ([`Meta::replace`]); false when the store held something else. On one hub,
    /// where a game's changes take turns ([`Seats::turn`]), `before` is `None` and this is
    /// a plain write. The cache follows what was written, but for a removal.
    async fn swap_registration(
        &self,
        (inbox, game): (&str, &str),
        before: Option<&Bytes>,
        after: Option<&Registration>,
    ) -> Result<bool, HubError> {
        let key = game_key(inbox, game);
        let written = match (before, after) {
            (Some(before), after) => {
                let after = after.map(json_bytes).transpose()?;
                self.meta.replace(&key, before, after).await?
            }
            (None, Some(reg)) => {
                self.meta.put(&key, json_bytes(reg)?).await?;
                true
            }
            (None, None) => {
                self.meta.delete(&key).await?;
                true
            }
        };
        // A game removed leaves the cache with its place under the cap, in `forget_open`:
        // leaving here, it would not be counted out there.
        if let (true, Some(reg)) = (written, after) {
            self.cache(reg.clone());
        }
        Ok(written)
    }

    /// Cancels an unpaired game: its id, X's token and its code stop working.
    pub async fn cancel(&self, auth: &SeatAuth) -> Result<(), HubError> {
        self.cancel_when(auth, |_| true, true).await.map(|_| ())
    }

    /// Cancels a waiting game whose pairing code `code_hash` died long ago and was never
    /// replaced, as its host could: nobody can join it any more, yet it would hold a place
    /// under its host's cap for good (a host who lost its token cannot cancel it). False
    /// when the game is gone, paired, or has another code by now.
    pub async fn abandon(
        &self,
        inbox: &str,
        game: &str,
        code_hash: &str,
    ) -> Result<bool, HubError> {
        let auth = SeatAuth {
            inbox: inbox.into(),
            game: game.into(),
            seat: Seat::X,
        };
        let same_code = |reg: &Registration| reg.code_hash.as_deref() == Some(code_hash);
        // Its code is being purged: no tombstone is left for it.
        match self.cancel_when(&auth, same_code, false).await {
            Err(HubError::NotFound(_) | HubError::AlreadyPaired) => Ok(false),
            done => done,
        }
    }

    /// Cancels the host's unpaired game if `still` holds of its registration, read under
    /// the game's turn, and (`retire`) kills its code; true when it did.
    async fn cancel_when(
        &self,
        auth: &SeatAuth,
        still: impl Fn(&Registration) -> bool,
        retire: bool,
    ) -> Result<bool, HubError> {
        let _turn = self.turn(&auth.inbox, &auth.game).lock().await;
        let mut lost = 0;
        let reg = loop {
            let (reg, before) = self.owned_unpaired(auth).await?;
            if !still(&reg) {
                return Ok(false);
            }
            let ids = (&*auth.inbox, &*auth.game);
            if self.swap_registration(ids, before.as_ref(), None).await? {
                self.forget_open(&reg);
                break reg;
            }
            // Another node paired or renewed the game since it was read: read it again.
            if lost + 1 == CHANGE_TRIES {
                return Err(changing_elsewhere());
            }
            after_losing(lost).await;
            lost += 1;
        };
        // Its code dies with it: a pair that took the code meanwhile finds no game.
        if let Some(old) = reg.code_hash.as_ref().filter(|_| retire) {
            self.retire_code(old, &auth.inbox, &auth.game).await?;
        }
        self.close(&reg).await?;
        // X's token now opens nothing: drop it so it answers 401.
        let stale: Vec<[u8; 32]> = self
            .tokens
            .iter()
            .filter(|e| *e.value().inbox == *reg.inbox && *e.value().game == *reg.game)
            .map(|e| *e.key())
            .collect();
        for hash in stale {
            self.meta.delete(&seat_key(&hash)).await?;
            self.tokens.remove(&hash);
        }
        Ok(true)
    }

    /// The game no longer counts as open for its host (finished or cancelled): it leaves
    /// the cache and gives back its place under the cap at once ([`Seats::forget_open`]),
    /// then its open-game mark leaves the store.
    pub async fn close(&self, reg: &Registration) -> Result<(), HubError> {
        self.forget_open(reg);
        self.meta
            .delete(&open_key(&reg.host, &reg.inbox, &reg.game))
            .await?;
        Ok(())
    }

    /// The game leaves the cache, and its host's count of open games falls by one if it
    /// was there (so a game closed twice counts once). Synchronous, so that an actor can
    /// call it before it publishes a game's last state: a host who creates a game the
    /// moment it sees the last one end is not refused for the old one, whose mark is
    /// still being deleted from the store. The cache first, then the count: whoever sees
    /// the count fall sees the game gone from the cache too.
    pub fn forget_open(&self, reg: &Registration) {
        let cached = self
            .games
            .remove(&(reg.inbox.as_str(), reg.game.as_str()) as &dyn GameIds)
            .is_some();
        if cached {
            if let Some(mut n) = self.open.get_mut(&reg.host) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Redeems a pairing code: seats O with `key_o` (`Some` when O's agent holds its key,
    /// with the public key; for a hub-held O pass the derived public key and `agent=false`).
    /// Returns O's token and the updated registration.
    pub async fn pair(
        &self,
        code: &str,
        o_key: impl FnOnce(&Registration) -> Result<(Option<String>, bool), HubError>,
    ) -> Result<(String, Registration), HubError> {
        let code = normalize_code(code).ok_or_else(|| HubError::NotFound("unknown code".into()))?;
        let hash = crypto::sha256_hex(code.as_bytes());
        let key = code_key(&hash);
        let Some(rec) = self.meta.take(&key).await? else {
            return Err(self.code_not_there(&key).await);
        };
        let rec: CodeRecord = serde_json::from_slice(&rec)
            .map_err(|_| HubError::NotFound("unknown pairing code".into()))?;
        if rec.used || now_ms() > rec.expires_ms {
            // Put it back as it was, so a second try gets the same answer.
            self.meta.put(&key, json_bytes(&rec)?).await?;
            return Err(if rec.used {
                HubError::CodeUsed
            } else {
                HubError::CodeExpired
            });
        }
        // The game's registration is read and written in its turn: a fresh code or a
        // cancel of the same game waits, or went first and is seen below.
        let _turn = self.turn(&rec.inbox, &rec.game).lock().await;
        // From here on the code is spent whatever happens: a tombstone goes back, with
        // O's seat and the paired registration when all is well (one group commit for
        // the three), else alone.
        let spent = |e: HubError| async {
            self.retire_code(&hash, &rec.inbox, &rec.game).await?;
            Err(e)
        };
        // A single hub's cache holds every open game's registration as the store does
        // (every change goes through both; a game missing from it is read too). Nodes
        // sharing a store read the store, since another node may have created or changed
        // the game, and keep the bytes: the paired registration is written over them only
        // if no other node changed it meanwhile.
        let found = if self.shared {
            let read = self.read_registration(&rec.inbox, &rec.game).await;
            if let Ok(None) = read {
                self.games
                    .remove(&(rec.inbox.as_str(), rec.game.as_str()) as &dyn GameIds);
            }
            read.map(|r| r.map(|(reg, bytes)| (reg, Some(bytes))))
        } else {
            match self.registration(&rec.inbox, &rec.game) {
                Some(reg) => Ok(Some((reg, None))),
                None => self
                    .refresh(&rec.inbox, &rec.game)
                    .await
                    .map(|r| r.map(|reg| (reg, None))),
            }
        };
        let (reg, before) = match found {
            Ok(Some(found)) => found,
            // Cancelled while this pair waited for its turn: its code died with it, and is
            // answered as any dead code is (section 4: 410), not as one never issued.
            Ok(None) => return spent(HubError::CodeUsed).await,
            Err(e) => return spent(e).await,
        };
        if reg.paired || reg.code_hash.as_deref() != Some(hash.as_str()) {
            return spent(HubError::CodeUsed).await;
        }
        let (key_o, agent_o) = match o_key(&reg) {
            Ok(key) => key,
            Err(e) => return spent(e).await,
        };
        let mut reg = Registration::clone(&reg);
        reg.key_o = key_o;
        reg.agent_o = agent_o;
        reg.paired = true;
        reg.code_hash = None;
        let ids = (rec.inbox.as_str(), rec.game.as_str());
        let (token, (), paired) = futures_util::try_join!(
            self.issue_token(&reg.inbox, &reg.game, Seat::O),
            self.retire_code(&hash, &rec.inbox, &rec.game),
            self.swap_registration(ids, before.as_ref(), Some(&reg)),
        )?;
        if !paired {
            // Another node cancelled the game or gave it a fresh code since it was read:
            // this code is dead, and the seat just issued opens nothing.
            let seat = token_hash(&token);
            self.tokens.remove(&seat);
            self.meta.discard(&seat_key(&seat)).await?;
            return Err(HubError::CodeUsed);
        }
        Ok((token, reg))
    }

    /// Why a code's record was not there to take. Another guest's pair may have it, and
    /// puts it back as a tombstone once that pair is written: a guest who lost the race
    /// then hears `code_used`, as one who came a moment later would, rather than that the
    /// code is unknown. The record is looked at a few times over about 15 ms (a store that
    /// reads durable values only shows the tombstone once it is written); a code that
    /// stays absent is unknown. The wait also slows guessing a little.
    async fn code_not_there(&self, key: &str) -> HubError {
        for wait_ms in [1, 2, 4, 8] {
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
            match self.meta.get(key).await {
                Ok(Some(value)) => match serde_json::from_slice::<CodeRecord>(&value) {
                    Ok(rec) if rec.used => return HubError::CodeUsed,
                    // Still the live code: the pair that took it is not written yet.
                    Ok(_) => continue,
                    Err(_) => break,
                },
                Ok(None) => continue,
                Err(e) => return e.into(),
            }
        }
        HubError::NotFound("unknown pairing code".into())
    }

    /// Remembers durably that `seat` has a choice held in memory.
    pub async fn mark_held(&self, inbox: &str, game: &str, seat: Seat) -> Result<(), HubError> {
        self.meta
            .put(&held_key(inbox, game, seat), Bytes::new())
            .await?;
        Ok(())
    }

    /// Forgets the held mark (the choice was committed, or the seat was told it was lost).
    pub async fn clear_held(&self, inbox: &str, game: &str, seat: Seat) -> Result<(), HubError> {
        self.meta.delete(&held_key(inbox, game, seat)).await?;
        Ok(())
    }

    /// True when a held mark survives for `seat` (read when an actor is rebuilt).
    pub async fn is_marked_held(&self, inbox: &str, game: &str, seat: Seat) -> bool {
        matches!(
            self.meta.get(&held_key(inbox, game, seat)).await,
            Ok(Some(_))
        )
    }
}

#[cfg(test)]
#[path = "seats_tests.rs"]
mod tests;
