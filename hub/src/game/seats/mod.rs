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
//!   holds them, paired or not, the host person). A create sent with an `Idempotency-Key`
//!   reserves the id that key derives and keeps the key's hash, so that its host may send
//!   it again for ten minutes and be seated again ([`Seats::repeat_create`]).
//! - `seat/{sha256(token)}`: the seat a token opens. Tokens are 256 random bits and only
//!   their hash is stored, so a copy of the data directory opens no seat.
//! - `code/{sha256(code)}`: a pairing code (8 Crockford base32 characters, 40 random
//!   bits), its deadline and whether it was used. Redeeming takes the record atomically, so
//!   a code works once; a used code leaves a tombstone so a second try answers `code_used`
//!   (but for the guest that spent it, who may repeat its pair with the same
//!   `Idempotency-Key` for ten minutes: [`Seats::pair`]).
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

mod cache;
mod codes;
mod records;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use dashmap::DashMap;
use games::key::GameIds;
use games::{crypto, Seat};
use parking_lot::Mutex;

pub use codes::{new_game_id, new_token, normalize_code, repeat_game_id, CODE_KEEP, CREATE_REPEAT};
pub use records::Registration;
pub(super) use records::{open_key, parse_open_key};

use cache::Commons;
use codes::draw_code;
use records::{
    code_key, game_key, held_key, json_bytes, seat_key, token_hash, CodeRecord, SeatRecord,
};

use super::types::SeatAuth;
use super::{HubError, Unavailable};
use crate::clock::now_ms;
use crate::meta::Meta;

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
    Unavailable::Contended.into()
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
            return Err(Unavailable::IdReserved.into());
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

    /// Redeems a pairing code: seats O with `key_o` (`Some` when O's agent holds its key,
    /// with the public key; for a hub-held O pass the derived public key and `agent=false`).
    /// Returns O's token and the updated registration.
    ///
    /// `repeat_key` is the request's `Idempotency-Key`, if it had one. A pair made with
    /// one may be made again with the same code and key for [`PAIR_REPEAT`](codes::PAIR_REPEAT)
    /// ([`Seats::repeat_pair`]), so that a guest whose answer was lost is not left
    /// outside a game it was seated in.
    pub async fn pair(
        &self,
        code: &str,
        repeat_key: Option<&str>,
        o_key: impl FnOnce(&Registration) -> Result<(Option<String>, bool), HubError>,
    ) -> Result<(String, Registration), HubError> {
        let code = normalize_code(code).ok_or_else(|| HubError::NotFound("unknown code".into()))?;
        let hash = crypto::sha256_hex(code.as_bytes());
        let key = code_key(&hash);
        // Only the key's hash is stored, as a token's is.
        let repeat_key = repeat_key.map(|k| crypto::sha256_hex(k.as_bytes()));
        let Some(rec) = self.meta.take(&key).await? else {
            return Err(self.code_not_there(&key).await);
        };
        let rec: CodeRecord = serde_json::from_slice(&rec)
            .map_err(|_| HubError::NotFound("unknown pairing code".into()))?;
        if rec.used || now_ms() > rec.expires_ms {
            // Put it back as it was, so a second try gets the same answer.
            self.meta.put(&key, json_bytes(&rec)?).await?;
            if rec.repeats(repeat_key.as_deref(), now_ms()) {
                return self.repeat_pair(&rec, o_key).await;
            }
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
            self.spend_code(&hash, &rec.inbox, &rec.game, repeat_key.as_deref()),
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

    /// Makes a pair again for its guest ([`CodeRecord::repeats`]): a fresh token for O's
    /// seat, issued only while the game is seated as that pair left it, with the key this
    /// request asks for. The first answer's token keeps working: both went to the one
    /// guest that holds the code and the `Idempotency-Key`.
    async fn repeat_pair(
        &self,
        rec: &CodeRecord,
        o_key: impl FnOnce(&Registration) -> Result<(Option<String>, bool), HubError>,
    ) -> Result<(String, Registration), HubError> {
        let _turn = self.turn(&rec.inbox, &rec.game).lock().await;
        // Read from the store where the cache may not know (another node's change, or a
        // game finished since, which the cache of open games no longer holds).
        let reg = match self.registration(&rec.inbox, &rec.game) {
            Some(reg) if !self.shared => Some(reg),
            _ => self
                .read_registration(&rec.inbox, &rec.game)
                .await?
                .map(|(reg, _)| reg),
        };
        // A registration gone from the store, or not paired, has no seat to give again.
        let Some(reg) = reg.filter(|reg| reg.paired) else {
            return Err(HubError::CodeUsed);
        };
        let (key_o, agent_o) = o_key(&reg)?;
        if reg.key_o != key_o || reg.agent_o != agent_o {
            // Another key than the pair was made with: not the same request again.
            return Err(HubError::CodeUsed);
        }
        let token = self.issue_token(&reg.inbox, &reg.game, Seat::O).await?;
        Ok((token, Registration::clone(&reg)))
    }

    /// Seats X once more for a create sent again with its `Idempotency-Key` (hashed:
    /// `key_hash`), whose game id is the one that key derives
    /// ([`repeat_game_id`](codes::repeat_game_id)): a fresh token for X's seat and a fresh
    /// pairing code, the one the lost answer carried dying (nobody saw it). `None` when no
    /// game holds the id: no try of this create made one (or it was cancelled since), and
    /// this one makes it. `same` says whether the stored game is what this request asks
    /// for. Refused, without a change, when the game was made by another request with this
    /// key (`idempotency_key_reused`), more than [`CREATE_REPEAT`](codes::CREATE_REPEAT)
    /// ago, or is paired by now (409). The first answer's token keeps working: both went
    /// to the one host that holds the key.
    pub async fn repeat_create(
        &self,
        (inbox, game): (&str, &str),
        key_hash: &str,
        ttl_ms: u64,
        same: impl FnOnce(&Registration) -> bool,
    ) -> Result<Option<(String, String, u64)>, HubError> {
        // The store, not the cache, where another node may have made the game.
        let reg = match self.registration(inbox, game) {
            Some(reg) if !self.shared => Some(reg),
            _ => self
                .read_registration(inbox, game)
                .await?
                .map(|(reg, _)| reg),
        };
        let Some(reg) = reg else {
            return Ok(None);
        };
        if reg.create_key.as_deref() != Some(key_hash) {
            // Another game holds the id (75 bits of HKDF output: all but impossible).
            return Err(Unavailable::IdReserved.into());
        }
        if !same(&reg) {
            return Err(HubError::KeyReused(
                "this Idempotency-Key was sent with another create: draw a new key for each request"
                    .into(),
            ));
        }
        let window = codes::CREATE_REPEAT.as_millis() as u64;
        if now_ms() > reg.created_ms.saturating_add(window) {
            return Err(HubError::KeyReused(format!(
                "the create sent with this Idempotency-Key was made more than {} minutes ago: draw a new key",
                window / 60_000
            )));
        }
        let auth = SeatAuth {
            inbox: inbox.into(),
            game: game.into(),
            seat: Seat::X,
        };
        // In the game's turn, and only while it is unpaired (409 else); the old code dies.
        let (code, expires_ms) = self.new_code(&auth, ttl_ms).await?;
        let token = self.issue_token(inbox, game, Seat::X).await?;
        Ok(Some((token, code, expires_ms)))
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
mod tests;
