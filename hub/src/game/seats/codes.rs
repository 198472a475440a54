//! The pairing-code lifecycle: a code is drawn (8 Crockford base32 characters, stored
//! only as its hash), issued for a game, replaced by a fresh one or spent by a pair (both
//! leave a `used` tombstone, so a late try hears `code_used`), and purged a day after it
//! died ([`CODE_KEEP`]). The hourly sweep also finds the waiting games stranded behind a
//! code dead that long ([`Seats::stranded`]), for the facade to cancel.
//!
//! What this module deliberately does not do: redeem a code. Pairing changes the game's
//! registration and seats O, so it is [`Seats::pair`]'s, in the game's turn with every
//! other change of its seating.

use games::crypto;
use rand::RngCore;

use super::records::{code_key, json_bytes, CodeRecord};
use super::{after_losing, changing_elsewhere, Registration, Seats, CHANGE_TRIES};
use crate::clock::now_ms;
use crate::game::types::SeatAuth;
use crate::game::{HubError, Unavailable};

/// How long a dead pairing code (expired, used or replaced) is remembered, so that a late
/// try is told why it failed, before it is purged.
pub const CODE_KEEP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How long after a pair its guest may make it again, with the same code and the same
/// `Idempotency-Key`, and be given O's seat once more: time enough for a client whose
/// answer was lost on its way to try again, not long enough for a code seen later to open
/// the seat.
pub const PAIR_REPEAT: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// How long after a create its host may send it again with the same `Idempotency-Key` and
/// be given X's seat once more, with a fresh code ([`Seats::repeat_create`]): as long as a
/// pair may be repeated, and for the same reasons.
pub const CREATE_REPEAT: std::time::Duration = PAIR_REPEAT;

/// Crockford base32: no I, L, O, U, so codes read aloud and typed by hand survive.
const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `n` random Crockford base32 characters.
pub fn random_base32(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut bytes);
    base32(&bytes)
}

/// One Crockford base32 character for each byte, from its low five bits.
fn base32(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| CROCKFORD[(b & 31) as usize] as char)
        .collect()
}

/// A fresh game id: `g` and 15 random base32 characters (75 bits).
pub fn new_game_id() -> String {
    format!("g{}", random_base32(15).to_ascii_lowercase())
}

/// The id of the game that a create sent with the `Idempotency-Key` `key` reserves in
/// `inbox`, in the form of [`new_game_id`]: the same for every try of that create, on every
/// node (they share the secret), so that a try finds the game an earlier one made
/// ([`Seats::repeat_create`]); without the secret it cannot be told from a random id. The
/// info cannot be a seat key's or a nonce's (`inbox|game|seat…`): no inbox holds a `/`.
pub fn repeat_game_id(secret: &[u8], inbox: &str, key: &str) -> String {
    let info = format!("pipehub/create|{inbox}|{key}");
    let derived = crypto::hkdf32(secret, info.as_bytes());
    format!("g{}", base32(&derived[..15]).to_ascii_lowercase())
}

/// Normalizes a pairing code as typed: Crockford's decoding (case-insensitive, I and L read
/// as 1, O as 0, hyphens ignored), and spaces ignored too (a code read out or copied in
/// two groups). `None` when it cannot be a code.
pub fn normalize_code(code: &str) -> Option<String> {
    let mut out = String::with_capacity(8);
    for c in code.chars() {
        let c = match c.to_ascii_uppercase() {
            '-' => continue,
            c if c.is_whitespace() => continue,
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

/// A fresh pairing code: (code, its hash, its deadline `ttl_ms` from now).
pub(super) fn draw_code(ttl_ms: u64) -> (String, String, u64) {
    let code = random_base32(8);
    let hash = crypto::sha256_hex(code.as_bytes());
    (code, hash, now_ms() + ttl_ms)
}

/// A fresh seat token: 256 random bits as 64 hex characters.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

impl Seats {
    /// Issues a pairing code for a registered game; returns the code, its hash and its
    /// deadline.
    pub(super) async fn issue_code(
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
        Err(Unavailable::NoFreshCode.into())
    }

    /// Stores a drawn code for `game` unless its hash is taken; true when stored.
    pub(super) async fn put_new_code(
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
            repeat_key: None,
        };
        Ok(self
            .meta
            .insert_new(&code_key(hash), json_bytes(&rec)?)
            .await?)
    }

    /// Kills a code: leaves a `used` tombstone so a later try answers `code_used` (its
    /// `expires_ms` is when it died, which [`Seats::purge_codes`] goes by).
    pub(super) async fn retire_code(
        &self,
        hash: &str,
        inbox: &str,
        game: &str,
    ) -> Result<(), HubError> {
        self.spend_code(hash, inbox, game, None).await
    }

    /// Kills a code a pair has spent, as [`Seats::retire_code`] does; its tombstone keeps
    /// the hash of the pair's `Idempotency-Key`, if it had one, so that its guest may make
    /// the pair again ([`PAIR_REPEAT`]).
    pub(super) async fn spend_code(
        &self,
        hash: &str,
        inbox: &str,
        game: &str,
        repeat_key: Option<&str>,
    ) -> Result<(), HubError> {
        let rec = CodeRecord {
            inbox: inbox.to_string(),
            game: game.to_string(),
            expires_ms: now_ms(),
            used: true,
            repeat_key: repeat_key.map(str::to_string),
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
}
