//! [`Hub`]: the methods every edge calls. Each one checks seats and caps first, appends
//! only what passed, and then waits for the verdict on its own capture.

mod cluster;
mod reads;

use std::sync::Arc;
use std::time::Duration;

use actix::Arbiter;
use bytes::Bytes;
use games::reason::{Reason, Refusal};
use games::verify::Prepared;
use games::{crypto, Action, Event, Seat, Viewer};
use serde_json::{Map, Value};
use tokio::sync::watch;

use super::actor::{self, Choose, Chosen, DraftMove, Snapshot, Unchosen};
use super::custody;
use super::engine::Engine;
use super::seats::{self, Registration, Seats};
use super::state::Phase;
use super::types::{CreateGame, Created, NewCode, Paired, Posted, SeatAuth, Verdict};
use super::waiters::Outcome;
use super::writer::{self, Posting};
use super::{HubConfig, HubError};
use crate::inbox::{Capture, Inbox};
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::rooms::{Publication, Rooms};

/// How many times a hub-held seat's resign is drafted, when its seq is taken first.
const RESIGN_TRIES: u32 = 3;

/// How many arbiter threads run game actors.
fn arbiter_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8)
}

/// The facade. Cheap to clone; every clone is the same engine.
#[derive(Clone)]
pub struct Hub {
    engine: Arc<Engine>,
    lifecycle: Arc<Lifecycle>,
}

/// What `shutdown` stops: the consumers (through `stop`) and the actor threads.
struct Lifecycle {
    stop: watch::Sender<bool>,
    consumers: parking_lot::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    arbiters: parking_lot::Mutex<Vec<Arbiter>>,
}

impl Hub {
    /// Opens the engine: loads seats and reservations from `meta`, starts one consumer per
    /// shard and, on a single hub, rebuilds the open games in the background
    /// (`Engine::settle_open_games`). Must be called inside an actix system (actors are
    /// started on it).
    pub async fn open(
        config: HubConfig,
        inbox: Arc<dyn Inbox>,
        meta: Arc<dyn Meta>,
        metrics: Arc<Metrics>,
        rooms: Arc<dyn Rooms>,
    ) -> Result<Hub, HubError> {
        let seats = Seats::load(meta.clone(), config.cluster.is_some()).await?;
        let arbiters: Vec<Arbiter> = (0..arbiter_count()).map(|_| Arbiter::new()).collect();
        let handles = arbiters.iter().map(|a| a.handle()).collect();
        let shards = inbox.shards();
        let engine = Arc::new(Engine::new(
            config, inbox, meta, metrics, rooms, seats, handles,
        ));
        let (stop, stop_rx) = watch::channel(false);
        let mut consumers = Vec::new();
        for shard in 0..shards {
            let from = super::consumer::start(&engine, shard)?;
            consumers.push(tokio::spawn(super::consumer::run(
                engine.clone(),
                shard,
                from,
                stop_rx.clone(),
            )));
        }
        if engine.config.cluster.is_none() {
            let settle = engine.clone();
            let stop = stop_rx.clone();
            consumers.push(tokio::spawn(async move {
                settle.settle_open_games(stop).await;
            }));
        }
        let sweeper = engine.clone();
        let mut sweep_stop = stop_rx;
        consumers.push(tokio::spawn(async move {
            for tick in 0u64.. {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {
                        // Every second: closed games' tokens leave the cache (a walk of
                        // the open games' tokens, well under a millisecond at 10,000).
                        sweeper.seats.forget_closed_seats();
                        if tick % 10 != 0 {
                            continue;
                        }
                        sweeper.waiters.sweep(super::waiters::DONE_TTL);
                        sweeper.count_games();
                        // Hourly (and soon after start): forget pairing codes dead for a
                        // day, and cancel the games still waiting behind expired ones.
                        if tick % 3600 == 0 {
                            let keep = super::seats::CODE_KEEP.as_millis() as u64;
                            sweep_codes(&sweeper, super::seats::now_ms(), keep).await;
                        }
                    }
                    _ = sweep_stop.changed() => return,
                }
            }
        }));
        Ok(Hub {
            engine,
            lifecycle: Arc::new(Lifecycle {
                stop,
                consumers: parking_lot::Mutex::new(consumers),
                arbiters: parking_lot::Mutex::new(arbiters),
            }),
        })
    }

    /// Stops the consumers and the actors, and makes every verdict durable. Posts still
    /// waiting answer `pending`; their captures are durable and are adjudicated when the
    /// hub opens again.
    pub async fn shutdown(&self) {
        let _ = self.lifecycle.stop.send(true);
        let consumers: Vec<_> = self.lifecycle.consumers.lock().drain(..).collect();
        for c in consumers {
            let _ = c.await;
        }
        for arbiter in self.lifecycle.arbiters.lock().drain(..) {
            arbiter.stop();
        }
        if let Err(e) = self.engine.inbox.sync().await {
            tracing::warn!(error = %e, "verdicts not synced at shutdown");
        }
    }

    /// The seat a bearer token opens, `None` (401) for an unknown token, or the store's
    /// error (503) when it could not be looked up.
    pub async fn seat_for_token(&self, token: &str) -> Result<Option<SeatAuth>, HubError> {
        self.lookup_token(token).await
    }

    /// True when the store can take writes.
    pub fn ready(&self) -> bool {
        self.engine.inbox.ready() && self.engine.meta.ready()
    }

    /// Refuses (503) to seat anyone while the inbox cannot take writes (a full disk, a
    /// failed fsync, Redis gone): the meta store may still take the seat, but the game
    /// could not start, and a pairing code spent on it would be lost.
    fn inbox_writable(&self) -> Result<(), HubError> {
        match self.engine.inbox.ready() {
            true => Ok(()),
            false => Err(HubError::Unavailable(
                "the store cannot take writes: no game can start now".into(),
            )),
        }
    }

    /// How many game actors are resident (for tests and operators).
    pub fn resident_actors(&self) -> usize {
        self.engine.resident()
    }

    /// `POST …/events`: a whole event (already parsed from `raw`, which is stored as is).
    /// A reserved game needs `auth` for that game with `player` equal to its seat; a start
    /// of a seated game must match what was registered.
    pub async fn post_event(
        &self,
        inbox: &str,
        event: Event,
        raw: Bytes,
        auth: Option<SeatAuth>,
    ) -> Result<Posted, HubError> {
        let reg = self.registration(inbox, &event.game).await?;
        if let Some(a) = &auth {
            if *a.inbox != *inbox || *a.game != *event.game {
                return Err(HubError::Forbidden("this token is for another game".into()));
            }
            if a.seat != event.player {
                return Err(HubError::Forbidden(format!(
                    "this token is seat {}'s; the event's player is {}",
                    a.seat, event.player
                )));
            }
        }
        if let Some(reg) = &reg {
            if auth.is_none() {
                return Err(HubError::Unauthorized(
                    "this game is seated: post with its seat token".into(),
                ));
            }
            if event.action == Action::Start {
                self.check_registered_start(reg, inbox, &event)?;
            } else if !self.is_started(inbox, &event.game).await? {
                return Err(HubError::NotStarted);
            }
        } else if auth.is_some() {
            return Err(HubError::Forbidden("this game is no longer seated".into()));
        }
        self.check_capture_cap(inbox, &event.game, event.action == Action::Resign)
            .await?;
        let seat = auth.map(|a| a.seat);
        let capture = self
            .engine
            .inbox
            .append(inbox, &event.game, seat, raw)
            .await?;
        // The actor hashes the event as it adjudicates it; the poster hashes it only when
        // it must answer `pending` without the actor's word.
        let game = (inbox, event.game.as_str());
        Ok(self
            .await_verdict(capture, game, || Prepared::of(&event).hash, seat)
            .await)
    }

    /// `POST …/moves`: `body` is `{"move": …}` (or `{"choice": …}` in rock-paper-scissors)
    /// for a hub-held seat; the hub writes seq, prevHash, player and sig.
    pub async fn post_move(&self, auth: &SeatAuth, body: Value) -> Result<Posted, HubError> {
        let reg = self.hub_held(auth).await?;
        let Value::Object(mut body) = body else {
            return Err(HubError::Input(Refusal::with(Reason::Schema, "move")));
        };
        match (body.remove("choice"), body.remove("move")) {
            (Some(c), None) if body.is_empty() => {
                let choice = [("choice".to_string(), c)]
                    .into_iter()
                    .collect::<Map<_, _>>();
                self.choose(auth, Value::Object(choice)).await
            }
            (None, Some(mv)) if body.is_empty() => self.play_held(auth, &reg, mv).await,
            (_, _) => {
                let field = body.keys().next().cloned().unwrap_or_else(|| "move".into());
                Err(HubError::Input(Refusal::with(Reason::Schema, field)))
            }
        }
    }

    /// A hub-held seat's move as the relay's `game.move` carries it (what `post_move` takes
    /// under `"move"`), without wrapping it in a body only to take it out again.
    pub async fn play(&self, auth: &SeatAuth, mv: Value) -> Result<Posted, HubError> {
        let reg = self.hub_held(auth).await?;
        self.play_held(auth, &reg, mv).await
    }

    /// A move object for a seat `hub_held` allowed: a choice in a custodial game, anything
    /// else a move the actor drafts. In a custodial game a hub-held seat sends only its
    /// choice (DESIGN.md section 3): a commit it wrote itself is refused (422 `bad_move`)
    /// like a reveal, since the hub, which holds no nonce for it, could never reveal it and
    /// the game would wait for that reveal for good.
    async fn play_held(
        &self,
        auth: &SeatAuth,
        reg: &Registration,
        mv: Value,
    ) -> Result<Posted, HubError> {
        if !mv.is_object() {
            return Err(HubError::Input(Refusal::with(Reason::Schema, "move")));
        }
        if self.is_custodial_game(reg) {
            self.choose(auth, mv).await
        } else {
            self.write_for(auth, Some(mv)).await
        }
    }

    /// A rock-paper-scissors choice (`{"choice": …}`) for a hub-held seat: committed now
    /// when it is the seat's turn to commit, else held until it is.
    async fn choose(&self, auth: &SeatAuth, choice: Value) -> Result<Posted, HubError> {
        let choice = custody::parse_choice(&choice)
            .ok_or_else(|| HubError::Refused(Refusal::with(Reason::IllegalMove, "bad_move")))?;
        self.check_capture_cap(&auth.inbox, &auth.game, false)
            .await?;
        if let Some(posted) = self.forward_choice(auth, choice).await? {
            return Ok(posted);
        }
        let msg = Choose {
            seat: auth.seat,
            choice,
        };
        match self.engine.ask(&auth.inbox, &auth.game, msg).await?? {
            Chosen::Commit(draft) => {
                let hash = draft.hash.clone();
                let posted = self.append_draft(auth, draft).await;
                if posted.is_err() {
                    self.unchosen(&auth.inbox, &auth.game, auth.seat, hash)
                        .await;
                }
                posted
            }
            Chosen::Held(held) => Ok(Posted {
                capture: None,
                hash: None,
                verdict: Verdict::Held,
                state: Some(super::SharedState::new(*held.marked().await)),
                refusal: None,
            }),
        }
    }

    /// `POST …/resign` by seat token: the hub writes the resign for a hub-held seat.
    ///
    /// A resign stands at any seq of a game under way, but it is drafted on the head the
    /// hub knows, and a move of the same seat still in flight (from another socket, or an
    /// HTTP client) can take that seq first. A resign that lost its seq so is drafted again
    /// on the new head, up to [`RESIGN_TRIES`] times in all, instead of being lost to a
    /// `stale_seq` that names a field the seat never wrote.
    pub async fn resign(&self, auth: &SeatAuth) -> Result<Posted, HubError> {
        self.hub_held(auth).await?;
        let mut tries = 1;
        loop {
            let posted = self.write_for(auth, None).await?;
            let lost_seq = posted
                .refusal
                .as_ref()
                .is_some_and(|r| r.reason == Reason::StaleSeq);
            if !lost_seq || tries == RESIGN_TRIES {
                return Ok(posted);
            }
            tries += 1;
        }
    }

    /// `POST /v1/inboxes/{inbox}/games`: seats X, reserves a fresh game id, and returns X's
    /// token and a pairing code. `person` is who the open-games cap counts against.
    pub async fn create_game(
        &self,
        inbox: &str,
        req: CreateGame,
        person: &str,
    ) -> Result<Created, HubError> {
        self.inbox_writable()?;
        let config = &self.engine.config;
        // Checked first, so that a person at the cap hears so before anything else; on one
        // hub the seats count the game again as they create it (`create_capped`), so that
        // creates racing each other cannot pass the cap between this check and their
        // count. Nodes sharing a store count the store's open games, which another node's
        // creates change too.
        if let Some(max) = config.max_open_games {
            let open = if self.clustered() {
                self.engine.seats.open_games_stored(person).await?
            } else {
                self.engine.seats.open_games(person)
            };
            if open >= max {
                return Err(HubError::TooManyGames(max));
            }
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
            .map_err(|d| HubError::Refused(Refusal::with(Reason::BadRules, d)))?;
        if req.key.is_some() && !req.signed {
            return Err(HubError::BadRequest("a key needs signed play".into()));
        }
        if let Some(k) = &req.key {
            check_key(k)?;
        }
        let game = format!("g{}", seats::random_base32(15).to_ascii_lowercase());
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
            rules: Arc::new(rules),
            signed: req.signed,
            key_x,
            key_o: None,
            agent_x: req.key.is_some(),
            agent_o: false,
            paired: false,
            host: person.to_string(),
            created_ms: seats::now_ms(),
            code_hash: None,
        };
        let ttl_ms = config.code_ttl.as_millis() as u64;
        let (token, code, expires_ms) = self.engine.seats.create_capped(reg, ttl_ms, cap).await?;
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
                    return Err(HubError::Unavailable(
                        "games were being created at once on other hub nodes; try again".into(),
                    ));
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
            expires_at: seats::rfc3339(expires_ms),
        })
    }

    /// `POST /v1/pair`: redeems a code, seats O (with its own public key, or hub-held), and
    /// when the hub owes the start, answers only once that start is accepted.
    pub async fn pair(&self, code: &str, key: Option<String>) -> Result<Paired, HubError> {
        if let Some(k) = &key {
            // Checked before the code is spent, so a typo in the key does not burn it.
            check_key(k)?;
        }
        self.inbox_writable()?;
        let secret = self.engine.config.secret.clone();
        let (token, reg) = self
            .engine
            .seats
            .pair(code, |reg| match (reg.signed, key) {
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
        let ttl_ms = self.engine.config.code_ttl.as_millis() as u64;
        let (code, expires_ms) = self.engine.seats.new_code(auth, ttl_ms).await?;
        Ok(NewCode {
            inbox: auth.inbox.to_string(),
            game: auth.game.to_string(),
            pairing_code: code,
            expires_at: seats::rfc3339(expires_ms),
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

    #[cfg(test)]
    pub(crate) fn engine_open_games(&self, person: &str) -> u64 {
        self.engine.seats.open_games(person)
    }

    /// Whether the game is among the open ones this hub caches.
    #[cfg(test)]
    pub(crate) fn engine_holds_open(&self, inbox: &str, game: &str) -> bool {
        self.engine.seats.registration(inbox, game).is_some()
    }

    /// The hourly sweep of pairing codes, now; returns how many codes it forgot and how
    /// many games it cancelled.
    #[cfg(test)]
    pub(crate) async fn sweep_codes(&self, now_ms: u64, keep_ms: u64) -> (usize, usize) {
        sweep_codes(&self.engine, now_ms, keep_ms).await
    }

    #[cfg(test)]
    pub(crate) fn count_games_now(&self) {
        self.engine.count_games();
    }

    #[cfg(test)]
    pub(crate) fn seat_for_token_count(&self) -> usize {
        self.engine.seats.token_count()
    }

    #[cfg(test)]
    pub(crate) fn registration_cached(&self, inbox: &str, game: &str) -> bool {
        self.engine.seats.registration(inbox, game).is_some()
    }

    #[cfg(test)]
    pub(crate) fn forget_closed_seats(&self) -> usize {
        self.engine.seats.forget_closed_seats()
    }

    // ---- helpers ----

    async fn await_verdict(
        &self,
        capture: Capture,
        game: (&str, &str),
        hash: impl FnOnce() -> String,
        seat: Option<Seat>,
    ) -> Posted {
        let wait = self.engine.config.verdict_wait;
        // The posted event's hash, worked out once and only when needed: to answer
        // without a verdict, or to tell this event's outcome from one left at the same
        // capture for an earlier event (`Waiters::wait`).
        let make = std::sync::Mutex::new(Some(hash));
        let posted = std::sync::OnceLock::new();
        let posted_hash = || {
            posted.get_or_init(|| {
                let make = make.lock().ok().and_then(|mut m| m.take());
                make.map(|h| h()).unwrap_or_default()
            })
        };
        let ours = |o: &Outcome| o.hash.as_deref().is_none_or(|h| h == posted_hash());
        let (outcome, state) = if self.adjudicated_elsewhere(capture.shard) {
            self.remote_verdict(capture, game, seat, wait, &ours).await
        } else {
            let o = self.engine.waiters.wait(capture, wait, &ours).await;
            let state = o
                .as_ref()
                .and_then(|o| o.views.as_ref())
                .and_then(|v| v.for_seat(seat).cloned());
            (o, state)
        };
        match outcome {
            Some(o) => Posted {
                capture: Some(capture),
                hash: o.hash.or_else(|| Some(posted_hash().clone())),
                verdict: o.verdict,
                state,
                refusal: o.refusal,
            },
            None => Posted {
                capture: Some(capture),
                hash: Some(posted_hash().clone()),
                verdict: Verdict::Pending,
                state: None,
                refusal: None,
            },
        }
    }

    /// Tells a game's actor that the commit of `seat`'s choice (`hash`) never reached the
    /// inbox, so that the seat may choose again.
    pub(super) async fn unchosen(&self, inbox: &str, game: &str, seat: Seat, hash: String) {
        let _ = self.engine.ask(inbox, game, Unchosen { seat, hash }).await;
    }

    async fn append_draft(&self, auth: &SeatAuth, draft: Posting) -> Result<Posted, HubError> {
        let capture = self
            .engine
            .inbox
            .append(&auth.inbox, &auth.game, Some(auth.seat), draft.raw)
            .await?;
        let game = (&*auth.inbox, &*auth.game);
        Ok(self
            .await_verdict(capture, game, || draft.hash, Some(auth.seat))
            .await)
    }

    /// Writes a move (or a resign, `None`) for a hub-held seat.
    async fn write_for(&self, auth: &SeatAuth, mv: Option<Value>) -> Result<Posted, HubError> {
        self.check_capture_cap(&auth.inbox, &auth.game, mv.is_none())
            .await?;
        if let Some(posted) = self.forward_write(auth, mv.as_ref()).await? {
            return Ok(posted);
        }
        // Drafted here on the head the actor left on its desk when it can be, so the
        // move reaches the inbox without a round trip through the actor's thread.
        let draft = match self.engine.desk(&auth.inbox, &auth.game) {
            Some((desk, tip)) => {
                let event = writer::next_event(&auth.game, tip.seq, &tip.head, auth.seat, mv);
                desk.draft(&self.engine.config.secret, &auth.inbox, event, tip.signed)
            }
            None => {
                let msg = DraftMove {
                    seat: auth.seat,
                    mv,
                };
                self.engine.ask(&auth.inbox, &auth.game, msg).await??
            }
        };
        self.append_draft(auth, draft).await
    }

    /// The registration of `auth`'s game when the hub may write for its seat.
    async fn hub_held(&self, auth: &SeatAuth) -> Result<Arc<Registration>, HubError> {
        let reg = self
            .registration(&auth.inbox, &auth.game)
            .await?
            .ok_or_else(|| HubError::NotFound("no such seated game".into()))?;
        if reg.signed && reg.agent_held(auth.seat) {
            return Err(HubError::AgentHeld);
        }
        if !reg.paired {
            return Err(HubError::NotStarted);
        }
        Ok(reg)
    }

    fn is_custodial_game(&self, reg: &Registration) -> bool {
        self.engine
            .config
            .registry
            .get(&reg.protocol)
            .is_some_and(|p| custody::is_custodial(p.as_ref()))
    }

    async fn is_started(&self, inbox: &str, game: &str) -> Result<bool, HubError> {
        if self
            .engine
            .listed(inbox, game)
            .is_some_and(|s| s.phase == Phase::Started)
        {
            return Ok(true);
        }
        self.catch_up(inbox, game).await?;
        let state = self
            .engine
            .ask(inbox, game, Snapshot(Viewer::Spectator))
            .await?;
        Ok(state.is_ok_and(|s| s.phase == Phase::Started))
    }

    /// Refuses a post once its game holds `--max-captures-per-game` captures (409
    /// `too_many_captures`), but for a resign (`resign`) of a game still in progress: a game
    /// at its cap (filled with one seat's refused moves, or an anonymous game's by anyone)
    /// could otherwise never end, and its seats' open-game counts never fall. A resign
    /// ends the game, and after it the cap holds for every post again, so the cap is
    /// passed by no more than the resigns in flight at once.
    async fn check_capture_cap(
        &self,
        inbox: &str,
        game: &str,
        resign: bool,
    ) -> Result<(), HubError> {
        if let Some(max) = self.engine.config.max_captures_per_game {
            if self.engine.inbox.count(inbox, game).await? >= max {
                let in_progress = || {
                    self.engine.listed(inbox, game).is_some_and(|l| {
                        l.phase == Phase::Started
                            && l.result.is_some_and(|r| r.status == "in_progress")
                    })
                };
                if !(resign && in_progress()) {
                    return Err(HubError::TooManyCaptures(max));
                }
            }
        }
        Ok(())
    }

    /// A start posted to a seated game must be X's and name what was registered: the same
    /// protocol, rule values and keys (`rules.inboxes` is not compared; the actor checks
    /// it against the inbox).
    fn check_registered_start(
        &self,
        reg: &Registration,
        inbox: &str,
        event: &Event,
    ) -> Result<(), HubError> {
        let _ = inbox;
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
async fn sweep_codes(engine: &Engine, now_ms: u64, keep_ms: u64) -> (usize, usize) {
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
