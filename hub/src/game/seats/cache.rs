//! The memory side of [`Seats`]: the registrations and seat tokens of open games, kept for
//! lookups on the hot path, with what registrations have in common kept once
//! ([`Commons`]), and the lookups that fall back to the store on a miss (a finished game's
//! records, or ones another hub node wrote).
//!
//! What this module deliberately does not do: hold every game ever seated. A game leaves
//! the cache when it closes ([`Seats::forget_open`]) and its tokens at the next sweep
//! ([`Seats::forget_closed_seats`]), so the memory follows the open games; and nothing
//! here writes a record to the store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use games::key::GameIds;
use serde_json::{Map, Value};

use super::records::{game_key, parse_open_key, parse_seat, seat_key, token_hash};
use super::{Registration, Seats};
use crate::game::types::SeatAuth;
use crate::game::HubError;

/// At most this many distinct protocol names and rule sets are shared (see [`Commons`]).
const MAX_COMMONS: usize = 256;

/// What most registrations have in common, kept once: the protocol's ref and id and its
/// rules (nearly every game plays its protocol's defaults). A private copy of the rules was
/// most of a cached registration's memory. Bounded: past [`MAX_COMMONS`] distinct values a
/// registration keeps its own copy.
#[derive(Default)]
pub(super) struct Commons {
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
    pub(super) fn share(&mut self, mut reg: Registration) -> Arc<Registration> {
        reg.protocol = self.text(&reg.protocol);
        reg.protocol_id = self.text(&reg.protocol_id);
        reg.rules = self.rules(&reg.rules);
        Arc::new(reg)
    }
}

impl Seats {
    /// The values of `keys`, read a few dozen at a time (one round trip each to Redis).
    pub(super) async fn read_many(
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
    pub(super) fn cache(&self, reg: Registration) -> Arc<Registration> {
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
}
