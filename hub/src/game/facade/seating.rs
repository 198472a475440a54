//! The facade's seating: creating a seated game, pairing O with a code, a fresh code, a
//! host's cancel, the seat a token opens, and the hourly sweep of dead pairing codes. The
//! checks that belong to the edge of the hub live here (the open-games cap, a key's form,
//! a start that must match what was registered); the records themselves are kept by
//! [`Seats`](crate::game::seats::Seats).
//!
//! What it deliberately does not do: seat anyone while the inbox cannot take writes (a
//! game could not start, and a spent code would be lost), or write a game's start itself
//! (its actor writes the start the hub owes; in a cluster, the shard's owner does).

use std::sync::Arc;

use games::reason::{Reason, Refusal};
use games::{crypto, Event, Seat};
use serde_json::{Map, Value};

use super::Hub;
use crate::clock;
use crate::game::actor;
use crate::game::engine::Engine;
use crate::game::seats::{self, Registration};
use crate::game::types::{CreateGame, Created, NewCode, Paired, SeatAuth};
use crate::game::writer;
use crate::game::{HubError, Unavailable};
use crate::rooms::Publication;

impl Hub {
    /// The seat a bearer token opens, `None` (401) for an unknown token, or the store's
    /// error (503) when it could not be looked up.
    pub async fn seat_for_token(&self, token: &str) -> Result<Option<SeatAuth>, HubError> {
        self.lookup_token(token).await
    }

    /// `POST /v1/inboxes/{inbox}/games`: seats X, reserves a fresh game id, and returns X's
    /// token and a pairing code. `person` is who the open-games cap counts against.
    pub async fn create_game(
        &self,
        inbox: &str,
        req: CreateGame,
        person: &str,
    ) -> Result<Created, HubError> {
        self.create_game_again(inbox, req, person, None).await
    }

    /// [`Hub::create_game`] for a request that may be sent again: `repeat_key` is its
    /// `Idempotency-Key`. The game's id is derived from it, so a try after one whose answer
    /// was lost finds that game and is answered with a fresh token for X and a fresh code
    /// ([`Seats::repeat_create`]); no second game is made, and none is counted under the
    /// cap. A try whose predecessors made nothing makes the game.
    ///
    /// [`Seats::repeat_create`]: crate::game::seats::Seats::repeat_create
    pub async fn create_game_again(
        &self,
        inbox: &str,
        req: CreateGame,
        person: &str,
        repeat_key: Option<&str>,
    ) -> Result<Created, HubError> {
        self.inbox_writable()?;
        let config = &self.engine.config;
        // Checked first, so that a person at the cap hears so before anything else (but a
        // repeat, which makes no game and is answered below); on one hub the seats count
        // the game again as they create it (`create_capped`), so that creates racing each
        // other cannot pass the cap between this check and their count. Nodes sharing a
        // store count the store's open games, which another node's creates change too.
        if let Some(max) = config.max_open_games.filter(|_| repeat_key.is_none()) {
            self.check_open_games(person, max).await?;
        }
        let cap = config.max_open_games.filter(|_| !self.clustered());
        let protocol = config
            .registry
            .resolve(req.protocol.as_deref())
            .ok_or_else(|| HubError::Refused(Refusal::new(Reason::UnknownProtocol)))?
            .clone();
        let given = req.rules.unwrap_or_default();
        for reserved in ["keys", "inboxes"] {
            if given.contains_key(reserved) {
                return Err(HubError::Refused(Refusal::with(Reason::BadRules, reserved)));
            }
        }
        let rules = protocol
            .rules(&given)
            .map(Arc::new)
            .map_err(|e| HubError::Refused(e.into()))?;
        if req.key.is_some() && !req.signed {
            return Err(HubError::BadRequest("a key needs signed play".into()));
        }
        if let Some(k) = &req.key {
            check_key(k)?;
        }
        let ttl_ms = config.code_ttl.as_millis() as u64;
        let repeat_hash = repeat_key.map(|k| crypto::sha256_hex(k.as_bytes()));
        let game = match repeat_key {
            Some(k) => seats::repeat_game_id(&config.secret, inbox, k),
            None => seats::new_game_id(),
        };
        // What a game made by an earlier try of this request must have been made with.
        let same = |reg: &Registration| {
            *reg.protocol_id == *protocol.id()
                && reg.rules == rules
                && reg.signed == req.signed
                && reg.agent_x == req.key.is_some()
                && (req.key.is_none() || reg.key_x == req.key)
        };
        if let Some(hash) = &repeat_hash {
            if let Some(again) = self
                .repeat_create(inbox, &game, hash, ttl_ms, &same)
                .await?
            {
                return Ok(again);
            }
            if let Some(max) = config.max_open_games {
                if let Err(capped) = self.check_open_games(person, max).await {
                    // A try of this create racing this one may have made its game since
                    // the look above: that game is the one the cap counts.
                    let again = self
                        .repeat_create(inbox, &game, hash, ttl_ms, &same)
                        .await?;
                    return again.ok_or(capped);
                }
            }
        }
        let key_x = match (&req.key, req.signed) {
            (_, false) => None,
            (Some(k), true) => Some(k.clone()),
            (None, true) => Some(writer::hub_public_key(
                &config.secret,
                inbox,
                &game,
                Seat::X,
            )),
        };
        let reg = Registration {
            inbox: inbox.to_string(),
            game: game.clone(),
            protocol: protocol.refs().first().copied().unwrap_or("").into(),
            protocol_id: protocol.id().into(),
            rules: Arc::clone(&rules),
            signed: req.signed,
            key_x,
            key_o: None,
            agent_x: req.key.is_some(),
            agent_o: false,
            paired: false,
            host: person.to_string(),
            created_ms: clock::now_ms(),
            code_hash: None,
            create_key: repeat_hash.clone(),
        };
        let made = self.engine.seats.create_capped(reg, ttl_ms, cap).await;
        let (token, code, expires_ms) = match (made, &repeat_hash) {
            // A try of the same create racing this one reserved the id, or took the last
            // place under the cap, first: answer as a repeat of it.
            (
                Err(
                    e
                    @ (HubError::Unavailable(Unavailable::IdReserved) | HubError::TooManyGames(_)),
                ),
                Some(hash),
            ) => {
                let again = self
                    .repeat_create(inbox, &game, hash, ttl_ms, &same)
                    .await?;
                return again.ok_or(e);
            }
            (made, _) => made?,
        };
        if let Some(max) = config.max_open_games.filter(|_| self.clustered()) {
            // Nodes count the store's open games, and creates racing on several nodes all
            // passed the check above (10 at once made 6 to 11 games under a cap of 3). So
            // each counts again once its own game is written, and takes it back if that
            // made too many. Of the games kept, the one written last counted every other
            // kept one, so at most `max` are kept; racing creates may all take theirs back,
            // and are told to try again (503) when the cap was not the reason.
            if self.engine.seats.open_games_stored(person).await? > max {
                let auth = SeatAuth {
                    inbox: inbox.into(),
                    game: game.as_str().into(),
                    seat: Seat::X,
                };
                self.engine.seats.cancel(&auth).await?;
                // Under the cap once this one is gone: racing creates took each other's
                // room, and a try again may pass. Else the person is at the cap.
                if self.engine.seats.open_games_stored(person).await? < max {
                    return Err(Unavailable::CreatesRacing.into());
                }
                return Err(HubError::TooManyGames(max));
            }
        }
        self.engine.metrics.games_created.inc();
        Ok(Created {
            inbox: inbox.to_string(),
            game,
            seat: Seat::X,
            token,
            pairing_code: code,
            expires_at: clock::rfc3339(expires_ms),
        })
    }

    /// `POST /v1/pair`: redeems a code, seats O (with its own public key, or hub-held), and
    /// when the hub owes the start, answers only once that start is accepted.
    /// `repeat_key` is the request's `Idempotency-Key`: the same pair sent again with it
    /// is answered again, with a fresh token for the same seat ([`Seats::pair`]).
    ///
    /// [`Seats::pair`]: crate::game::seats::Seats::pair
    pub async fn pair(
        &self,
        code: &str,
        key: Option<String>,
        repeat_key: Option<&str>,
    ) -> Result<Paired, HubError> {
        if let Some(k) = &key {
            // Checked before the code is spent, so a typo in the key does not burn it.
            check_key(k)?;
        }
        self.inbox_writable()?;
        let secret = self.engine.config.secret.clone();
        let (token, reg) = self
            .engine
            .seats
            .pair(code, repeat_key, |reg| match (reg.signed, key) {
                (false, Some(_)) => Err(HubError::BadRequest(
                    "this game is unsigned: pair without a key".into(),
                )),
                (false, None) => Ok((None, false)),
                (true, Some(k)) => Ok((Some(k), true)),
                (true, None) => Ok((
                    Some(writer::hub_public_key(
                        &secret,
                        &reg.inbox,
                        &reg.game,
                        Seat::O,
                    )),
                    false,
                )),
            })
            .await?;
        let started = self
            .engine
            .ask(&reg.inbox, &reg.game, actor::Paired)
            .await?;
        self.hand_over(&reg.inbox, &reg.game).await;
        if reg.hub_writes_start() {
            let wait = self.engine.config.verdict_wait;
            if self.clustered() {
                self.await_start_clustered(&reg.inbox, &reg.game, started, wait)
                    .await;
            } else {
                let _ = tokio::time::timeout(wait, started).await;
            }
        }
        Ok(Paired {
            inbox: reg.inbox,
            game: reg.game,
            seat: Seat::O,
            token,
        })
    }

    /// `POST …/code` by X's token before pairing: a fresh code; the old one dies.
    pub async fn new_code(&self, auth: &SeatAuth) -> Result<NewCode, HubError> {
        // A code that could not be redeemed until the inbox takes writes again.
        self.inbox_writable()?;
        let ttl_ms = self.engine.config.code_ttl.as_millis() as u64;
        let (code, expires_ms) = self.engine.seats.new_code(auth, ttl_ms).await?;
        Ok(NewCode {
            inbox: auth.inbox.to_string(),
            game: auth.game.to_string(),
            pairing_code: code,
            expires_at: clock::rfc3339(expires_ms),
        })
    }

    /// `DELETE …/games/{game}` by X's token before pairing. Whoever watches the game (X's
    /// own socket, spectators) is told it is gone.
    pub async fn cancel(&self, auth: &SeatAuth) -> Result<(), HubError> {
        self.engine.seats.cancel(auth).await?;
        self.engine
            .rooms
            .publish(Publication::cancelled(&auth.inbox, &auth.game));
        Ok(())
    }

    /// A start posted to a seated game must be X's and name what was registered: the same
    /// protocol, rule values and keys (`rules.inboxes` is not compared; the actor checks
    /// it against the inbox).
    pub(super) fn check_registered_start(
        &self,
        reg: &Registration,
        inbox: &str,
        event: &Event,
    ) -> Result<(), HubError> {
        let _ = inbox;
        if event.player != Seat::X {
            return Err(HubError::Forbidden("only X starts a seated game".into()));
        }
        if !reg.paired {
            return Err(HubError::Forbidden(
                "the game has no second seat yet: start it once O has paired".into(),
            ));
        }
        let differs = |what: &str| {
            Err(HubError::Forbidden(format!(
                "the start's {what} differ from the registered game"
            )))
        };
        let registry = &self.engine.config.registry;
        let Some(protocol) = registry.resolve(event.protocol.as_deref()) else {
            return differs("protocol");
        };
        if protocol.id() != &*reg.protocol_id {
            return differs("protocol");
        }
        let mut given = event.rules.clone().unwrap_or_default();
        let keys = given.remove("keys");
        given.remove("inboxes");
        match protocol.rules(&given) {
            Ok(rules) if rules == *reg.rules => {}
            _ => return differs("rules"),
        }
        let want = reg.signed.then(|| {
            let mut m = Map::new();
            m.insert(
                "X".into(),
                Value::from(reg.key_x.clone().unwrap_or_default()),
            );
            m.insert(
                "O".into(),
                Value::from(reg.key_o.clone().unwrap_or_default()),
            );
            Value::Object(m)
        });
        if keys != want {
            return differs("keys");
        }
        Ok(())
    }

    /// `TooManyGames` when `person` holds `max` open games already: counted here on one
    /// hub, in the store where nodes share it (another node's creates change it too).
    async fn check_open_games(&self, person: &str, max: u64) -> Result<(), HubError> {
        let open = if self.clustered() {
            self.engine.seats.open_games_stored(person).await?
        } else {
            self.engine.seats.open_games(person)
        };
        if open >= max {
            return Err(HubError::TooManyGames(max));
        }
        Ok(())
    }

    /// The answer to a create sent again, if an earlier try made its game
    /// ([`Seats::repeat_create`](crate::game::seats::Seats::repeat_create)).
    async fn repeat_create(
        &self,
        inbox: &str,
        game: &str,
        key_hash: &str,
        ttl_ms: u64,
        same: impl FnOnce(&Registration) -> bool,
    ) -> Result<Option<Created>, HubError> {
        let again = self
            .engine
            .seats
            .repeat_create((inbox, game), key_hash, ttl_ms, same)
            .await?;
        Ok(again.map(|(token, code, expires_ms)| Created {
            inbox: inbox.to_string(),
            game: game.to_string(),
            seat: Seat::X,
            token,
            pairing_code: code,
            expires_at: clock::rfc3339(expires_ms),
        }))
    }

    /// Refuses (503) to seat anyone while the inbox cannot take writes (a full disk, a
    /// failed fsync, Redis gone): the meta store may still take the seat, but the game
    /// could not start, and a pairing code spent on it would be lost.
    fn inbox_writable(&self) -> Result<(), HubError> {
        match self.engine.inbox.ready() {
            true => Ok(()),
            false => Err(Unavailable::InboxReadOnly.into()),
        }
    }
}

/// A public key as a seat registers it: 64 lowercase hex, a point of large order.
fn check_key(k: &str) -> Result<(), HubError> {
    crypto::public_key(k).map(|_| ()).ok_or_else(|| {
        HubError::BadRequest(
            "key: 64 lowercase hex characters of an Ed25519 public key that is a point of \
             large order (not a small-order point such as all zeros)"
                .into(),
        )
    })
}

/// Cancels each waiting game nobody can join any more (its code dead for `keep_ms`, never
/// replaced): it would hold a place under its host's cap for good, and a host who lost its
/// token could never cancel it. Its sockets are told as for a host's cancel. Then forgets
/// the pairing codes dead that long. The games go first: should the hub stop between the
/// two, the next sweep finds them again. Returns how many codes it forgot and how many
/// games it cancelled.
pub(in crate::game) async fn sweep_codes(
    engine: &Engine,
    now_ms: u64,
    keep_ms: u64,
) -> (usize, usize) {
    let mut cancelled = 0;
    match engine.seats.stranded(now_ms, keep_ms).await {
        Ok(stranded) => {
            for (inbox, game, hash) in &stranded {
                match engine.seats.abandon(inbox, game, hash).await {
                    Ok(true) => {
                        engine.rooms.publish(Publication::cancelled(inbox, game));
                        cancelled += 1;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(%game, error = %e, "a game nobody can join was not cancelled")
                    }
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "waiting games behind dead codes not looked for"),
    }
    if cancelled > 0 {
        tracing::info!(
            games = cancelled,
            "games nobody could join any more were cancelled"
        );
    }
    let purged = match engine.seats.purge_codes(now_ms, keep_ms).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "pairing codes not purged");
            0
        }
    };
    if purged > 0 {
        tracing::info!(codes = purged, "dead pairing codes purged");
    }
    (purged, cancelled)
}
