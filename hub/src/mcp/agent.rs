//! The tools' logic: the agent's seats and what each tool does with them.
//!
//! [`Agent`] holds the seats of this agent on one hub (loaded from the state directory at
//! start, so a restarted agent resumes its games), one watcher task per open seat, and the
//! hub client. Each tool verifies the game before it answers ([`SeatHandle::sync`]); a
//! person's move is checked locally against the verified board first, then signed and
//! posted, and the answer is the verified state after it.
//!
//! What it deliberately does not do: speak MCP (that is [`super::tools`]) or shape results
//! (that is [`super::state`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use games::{Action, Registry, Seat, Viewer};
use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;

use super::client::{HubClient, Seated};
use super::seat::{is_custodial, Ctx, SeatHandle, Snapshot};
use super::store::{Kept, SeatRecord, Store, ASKED_KEEP};
use super::{state, watch, AgentError, Config};
use crate::game::custody;

/// `game_wait`'s default and longest wait.
pub const WAIT_DEFAULT: Duration = Duration::from_secs(30);
pub const WAIT_MAX: Duration = Duration::from_secs(300);
/// Even with a healthy socket, a waiting tool looks again this often, so a socket that
/// silently died costs a few seconds, not the whole wait.
const WAIT_RECHECK: Duration = Duration::from_secs(10);
/// The least time a `game_wait` gives one look at the game, even when its wait is shorter
/// or over: a wait of 0 s still looks once.
const WAIT_LOOK_MIN: Duration = Duration::from_secs(2);
/// How soon a `game_wait` looks again after the hub could not be reached.
const WAIT_RETRY: Duration = Duration::from_secs(1);

/// What a tool answers: the seat's state and a note for the model.
pub struct Answer {
    pub state: Value,
    pub note: Option<String>,
    pub captures: usize,
}

impl Answer {
    fn of(snap: &Snapshot, note: Option<String>) -> Answer {
        Answer {
            state: state::state(snap),
            note,
            captures: snap.captures,
        }
    }
}

/// The agent: its seats on one hub.
pub struct Agent {
    ctx: Arc<Ctx>,
    inbox: String,
    seats: Mutex<HashMap<String, Arc<SeatHandle>>>,
    /// Each seat's watcher, by game id.
    watchers: Mutex<HashMap<String, JoinHandle<()>>>,
    /// Seat files found at start that could not be read: `game_list` names them.
    damaged: Vec<String>,
    /// Seats kept in the state directory for other hubs, as (hub, game).
    elsewhere: Vec<(String, String)>,
    /// Held by a `game_new` or `game_join` from its look for a waiting seat until the
    /// seat is saved with its token: two calls at once must not both send one waiting
    /// seat's request.
    asking: tokio::sync::Mutex<()>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(w) = self.watchers.lock() {
            w.values().for_each(JoinHandle::abort);
        }
    }
}

impl Agent {
    /// Opens the state directory and resumes every seat this agent holds on the hub.
    pub async fn open(config: Config) -> Result<Arc<Agent>, AgentError> {
        let store = Store::open(&config.state_dir)?;
        let client = HubClient::new(&config.hub)?;
        let Kept {
            seats: mut records,
            damaged,
            elsewhere,
        } = store.load(client.base())?;
        // Seat X first: should two records of one game remain (an agent of an earlier
        // release could redeem its own code), the seat it made is the one it keeps.
        records.sort_by_key(|r| r.seat != "X");
        let agent = Arc::new(Agent {
            ctx: Arc::new(Ctx {
                client,
                store,
                registry: Registry::builtin(),
            }),
            inbox: config.inbox,
            seats: Mutex::new(HashMap::new()),
            watchers: Mutex::new(HashMap::new()),
            damaged,
            elsewhere,
            asking: tokio::sync::Mutex::new(()),
        });
        for record in records {
            agent.adopt(record);
        }
        tracing::info!(seats = agent.handles().len(), "the agent resumed its seats");
        Ok(agent)
    }

    /// Starts holding a seat. A second seat of a game already held is not adopted: the
    /// seats are kept by game id, and replacing one would hide the other.
    fn adopt(&self, record: SeatRecord) -> Option<Arc<SeatHandle>> {
        let handle = Arc::new(SeatHandle::new(record)?);
        if self.seat(&handle.game).is_ok() {
            tracing::warn!(game = %handle.game, seat = %handle.seat,
                "a second seat of a game this agent holds is not adopted");
            return None;
        }
        let task = watch::spawn(self.ctx.clone(), handle.clone());
        if let Ok(mut w) = self.watchers.lock() {
            w.retain(|_, t| !t.is_finished());
            w.insert(handle.game.clone(), task);
        }
        if let Ok(mut seats) = self.seats.lock() {
            seats.insert(handle.game.clone(), handle.clone());
        }
        Some(handle)
    }

    /// Stops holding a seat: its watcher stops and its game leaves the list.
    fn forget(&self, game: &str) {
        if let Some(task) = self.watchers.lock().ok().and_then(|mut w| w.remove(game)) {
            task.abort();
        }
        if let Ok(mut seats) = self.seats.lock() {
            seats.remove(game);
        }
    }

    fn handles(&self) -> Vec<Arc<SeatHandle>> {
        let mut v: Vec<_> = self
            .seats
            .lock()
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.game.cmp(&b.game));
        v
    }

    fn seat(&self, game: &str) -> Result<Arc<SeatHandle>, AgentError> {
        let found = self.seats.lock().ok().and_then(|s| s.get(game).cloned());
        found.ok_or_else(|| {
            if let Some((hub, _)) = self.elsewhere.iter().find(|(_, g)| g == game) {
                return AgentError::Usage(format!(
                    "this agent plays on {}, and its seat in game {} is of the hub {hub}: start \
the agent with --hub {hub} to play it",
                    self.ctx.client.base(),
                    shown_id(game)
                ));
            }
            AgentError::Usage(format!(
                "this agent holds no seat in game {}; game_list shows the games it holds",
                shown_id(game)
            ))
        })
    }

    /// `game_new`: seat X of a new signed game; the answer carries the pairing code.
    pub async fn new_game(
        &self,
        protocol: &str,
        rules: Option<Map<String, Value>>,
    ) -> Result<Answer, AgentError> {
        let Some(p) = self.ctx.registry.get(protocol) else {
            let known: Vec<_> = self.ctx.registry.iter().map(|p| p.refs()[0]).collect();
            return Err(AgentError::Usage(format!(
                "unknown protocol; this agent plays {}",
                known.join(", ")
            )));
        };
        let protocol = p.refs()[0].to_string();
        // Rules the hub would refuse are refused here, before a seat is made: a create that
        // cannot be made is nothing to send again, and rules of any shape (nested deeper
        // than a JSON reader follows, say) would be kept in a seat file waiting for it.
        if let Some(given) = &rules {
            let reserved = ["keys", "inboxes"]
                .into_iter()
                .find(|k| given.contains_key(*k));
            let checked = match reserved {
                Some(k) => Err(format!("{k} is the hub's to set")),
                None => p.rules(given).map(|_| ()).map_err(|e| e.to_string()),
            };
            checked.map_err(AgentError::Rules)?;
        }
        // Kept even when empty (the protocol's defaults): a record without rules is one
        // made before rules were kept, whose rules the agent cannot check.
        let asked_rules = Some(rules.clone().unwrap_or_default());
        // A create of the same game whose answer was lost is sent again, as it was, so
        // that the hub answers with the game it made instead of making a second.
        let _asking = self.asking.lock().await;
        let waiting = self.pending(|r| {
            r.seat() == Some(Seat::X)
                && r.protocol.as_deref() == Some(protocol.as_str())
                && r.rules == asked_rules
        })?;
        let sent_before = waiting.is_some();
        let mut record = match waiting {
            Some(record) => record,
            None => {
                let mut record = SeatRecord::mint(
                    self.ctx.client.base(),
                    &self.inbox,
                    Seat::X,
                    Some(protocol.clone()),
                );
                record.rules = asked_rules;
                record.ask(None);
                self.ctx.store.save(&record)?;
                record
            }
        };
        let key = record.public_key().unwrap_or_default();
        let repeat_key = asked_key(&record);
        let seated = self
            .ctx
            .client
            .create_game(&self.inbox, &protocol, rules, &key, &repeat_key)
            .await;
        let seated = self.forget_if_unmade(&record, sent_before, seated)?;
        let code = seated.pairing_code.clone();
        record.pairing_code = code.clone();
        record.code_expires_at = seated.expires_at.clone();
        let expires = seated.expires_at.clone();
        let mut answer = self.seated(record, seated).await?;
        // In the text too, not only in the structured answer: a client may hand its model
        // the text alone.
        answer.note = Some(format!(
            "Give the pairing code {} to the opponent's person (it works until {}); the game \
starts when they join.",
            code.as_deref().map(state::escape).unwrap_or_default(),
            expires.as_deref().map(state::escape).unwrap_or_default(),
        ));
        answer.state["pairingCode"] = json!(code);
        answer.state["expiresAt"] = json!(expires);
        Ok(answer)
    }

    /// `game_join`: seat O of a game, by its pairing code.
    ///
    /// The agent holds one seat per game, so it refuses its own code before redeeming it.
    /// A game made before codes were kept is only found once the hub answered: the new O
    /// seat is then dropped (its key forgotten) and the X seat kept, and the error says so.
    pub async fn join(&self, code: &str) -> Result<Answer, AgentError> {
        // A code that cannot be one is refused here: sent, it would count against the
        // person's failed pairing attempts at the hub, and a real code then wait.
        let Some(normal) = crate::game::seats::normalize_code(code) else {
            return Err(AgentError::Usage(
                "that is not a pairing code: a code is 8 letters and digits, as the other person \
was given it (case, spaces and hyphens do not matter)"
                    .into(),
            ));
        };
        if let Some(game) = self.own_code(&normal).await {
            return Err(AgentError::Usage(format!(
                "that pairing code is this agent's own: it holds seat X of game {game}; give the code to the \
opponent's person instead"
            )));
        }
        // A pair with this code whose answer was lost is sent again, with the same seat key
        // and `Idempotency-Key`: the hub then seats this agent again, where a new key
        // would hear that the code is used.
        let _asking = self.asking.lock().await;
        let waiting = self.pending(|r| {
            let asked = r.asked.as_ref().and_then(|a| a.code.as_ref());
            r.seat() == Some(Seat::O) && asked == Some(&normal)
        })?;
        let sent_before = waiting.is_some();
        let record = match waiting {
            Some(record) => record,
            None => {
                let mut record =
                    SeatRecord::mint(self.ctx.client.base(), &self.inbox, Seat::O, None);
                record.ask(Some(&normal));
                self.ctx.store.save(&record)?;
                record
            }
        };
        let key = record.public_key().unwrap_or_default();
        let seated = self
            .ctx
            .client
            .pair(&normal, &key, &asked_key(&record))
            .await;
        let seated = self.forget_if_unmade(&record, sent_before, seated)?;
        if let Ok(held) = self.seat(&seated.game) {
            self.ctx.store.remove(&record)?;
            return Err(AgentError::Usage(format!(
                "that pairing code was this agent's own game {}, where it holds seat {}: the hub has now \
seated O with a key this agent dropped, as it plays one seat per game, so no one can move for O",
                held.game,
                held.seat
            )));
        }
        self.seated(record, seated).await
    }

    /// The game of this agent whose pairing code the normalized `code` is, as the hub
    /// reads codes.
    async fn own_code(&self, code: &str) -> Option<String> {
        for handle in self.handles() {
            let rec = handle.lock().await;
            let mine = rec
                .pairing_code
                .as_deref()
                .and_then(crate::game::seats::normalize_code);
            if mine.as_deref() == Some(code) {
                return Some(handle.game.clone());
            }
        }
        None
    }

    /// A seat the hub refused to make is forgotten, its file and key with it. One whose
    /// answer was lost (a create or pair only once it was sent again and lost each time:
    /// [`HubClient::pair`]) is kept, waiting: the hub may have made it, and its token comes
    /// only in an answer, which the person's next `game_new` of the same game or
    /// `game_join` with the same code asks for again ([`Agent::pending`]). The error says
    /// so. One whose request never left this computer (no connection could be made, on
    /// any try) is forgotten too, unless an earlier call sent it (`sent_before`): the hub
    /// may have made that one.
    fn forget_if_unmade(
        &self,
        record: &SeatRecord,
        sent_before: bool,
        seated: Result<Seated, AgentError>,
    ) -> Result<Seated, AgentError> {
        let again = if record.seat() == Some(Seat::O) {
            "game_join with the same code"
        } else {
            "game_new with the same protocol and rules"
        };
        let hint = format!(
            "the hub may have seated this agent all the same: call {again} within {} minutes to take that seat",
            ASKED_KEEP.as_secs() / 60
        );
        match seated {
            Ok(seated) => Ok(seated),
            Err(AgentError::Transport(why)) => Err(AgentError::Transport(format!("{why}; {hint}"))),
            Err(AgentError::Unsent(why)) if sent_before => {
                Err(AgentError::Transport(format!("{why}; {hint}")))
            }
            Err(AgentError::Hub {
                status,
                code,
                detail,
                retry_after,
            }) if status >= 500 => Err(AgentError::Hub {
                status,
                code,
                detail: Some(match detail {
                    Some(detail) => format!("{detail}; {hint}"),
                    None => hint,
                }),
                retry_after,
            }),
            Err(e) => {
                self.ctx.store.remove(record)?;
                Err(e)
            }
        }
    }

    /// The first seat of this agent's inbox still waiting for the answer to the create or
    /// pair that is to make it that `wanted` picks ([`SeatRecord::asked`]).
    fn pending(
        &self,
        wanted: impl Fn(&SeatRecord) -> bool,
    ) -> Result<Option<SeatRecord>, AgentError> {
        let pending = self
            .ctx
            .store
            .pending(self.ctx.client.base(), &self.inbox)?;
        Ok(pending.into_iter().find(|r| wanted(r)))
    }

    /// Completes a record with the hub's answer, saves it, and starts watching the seat.
    async fn seated(&self, mut record: SeatRecord, seated: Seated) -> Result<Answer, AgentError> {
        record.inbox = seated.inbox;
        record.game = Some(seated.game);
        record.token = Some(seated.token);
        record.asked = None;
        self.ctx.store.save(&record)?;
        let handle = self
            .adopt(record)
            .ok_or_else(|| AgentError::Usage("the hub answered with an unusable seat".into()))?;
        let snap = handle.sync(&self.ctx).await?;
        Ok(Answer::of(&snap, None))
    }

    /// `game_move`: the person's move (rock-paper-scissors: their choice).
    pub async fn play(&self, game: &str, mv: Value) -> Result<Answer, AgentError> {
        let handle = self.seat(game)?;
        let mut rec = handle.lock().await;
        let snap = handle.sync_locked(&self.ctx, &mut rec).await?;
        playable(&snap)?;
        let chain = &snap.chain;
        if is_custodial(chain) {
            let choice = custody::parse_choice(&mv).ok_or_else(|| AgentError::Rejected {
                reason: "illegal_move".into(),
                detail: Some(
                    "bad_move: send {\"choice\": \"rock\" | \"paper\" | \"scissors\"}".into(),
                ),
            })?;
            // A commit signed for the next seq and not yet in the log (refused for now: a
            // rate limit, a hub that did not answer) is the choice: the agent signs no
            // other event there, so a new choice could never be committed, and the game
            // would wait for it for good.
            let next = chain.seq().map_or(0, |s| s + 1);
            let signed = rec.signed.as_ref().is_some_and(|s| s.seq == next);
            if snap.committed_choice.is_some() || committed(&snap) || signed {
                return Err(AgentError::Usage(
                    "your person's choice for this round is already committed; it is revealed by itself".into(),
                ));
            }
            rec.held_choice = Some(choice.to_string());
            self.ctx.store.save(&rec)?;
            let snap = handle.sync_locked(&self.ctx, &mut rec).await?;
            return Ok(Answer::of(&snap, Some(state::choice_note(&snap).into())));
        }
        let seq = chain.seq().unwrap_or_default();
        if Seat::to_move_at(seq + 1) != handle.seat {
            return Err(AgentError::Rejected {
                reason: "wrong_player".into(),
                detail: Some("it is not your person's turn: use game_wait".into()),
            });
        }
        if let Some(board) = chain.board() {
            board
                .legal(handle.seat, &mv)
                .map_err(|e| AgentError::Rejected {
                    reason: "illegal_move".into(),
                    detail: Some(e.detail().to_string()),
                })?;
        }
        let event = handle.next_event(chain, Action::Move, Some(mv));
        let answer = handle.post(&self.ctx, &mut rec, event).await?;
        let note = refereed(&answer)?;
        let snap = handle.sync_locked(&self.ctx, &mut rec).await?;
        Ok(Answer::of(&snap, note))
    }

    /// `game_board`: the verified state. A game this agent created that nobody has joined
    /// shows its pairing code again (a fresh one once it expired).
    pub async fn board(&self, game: &str) -> Result<Answer, AgentError> {
        let handle = self.seat(game)?;
        let snap = handle.sync(&self.ctx).await?;
        let mut answer = Answer::of(&snap, None);
        if waiting_host(&snap) {
            answer.note = Some(self.show_code(&handle, &mut answer.state).await);
        }
        Ok(answer)
    }

    /// Puts a waiting game's live pairing code in its state (asking the hub for a fresh
    /// one when the kept one expired); returns the note that tells the person.
    async fn show_code(&self, handle: &SeatHandle, state: &mut Value) -> String {
        let mut rec = handle.lock().await;
        let now = crate::clock::rfc3339(crate::clock::now_ms());
        // Both are RFC 3339 in UTC to the second, as the hub writes them: they sort as
        // text. A record made before expiries were kept asks for a fresh code too.
        let live = rec.pairing_code.is_some()
            && rec
                .code_expires_at
                .as_deref()
                .is_some_and(|e| now.as_str() < e);
        let mut note = String::new();
        if !live {
            let token = rec.token.clone().unwrap_or_default();
            match self
                .ctx
                .client
                .fresh_code(&handle.inbox, &handle.game, &token)
                .await
            {
                Ok(fresh) => {
                    rec.pairing_code = Some(fresh.pairing_code);
                    rec.code_expires_at = Some(fresh.expires_at);
                    if let Err(e) = self.ctx.store.save(&rec) {
                        tracing::warn!(game = %handle.game, error = %e, "a fresh pairing code was not saved");
                    }
                    note.push_str("The earlier pairing code had expired; this is a fresh one. ");
                }
                Err(e) => {
                    return format!(
                        "Nobody has joined yet, and the pairing code expired; a fresh one could not be had: {e}"
                    )
                }
            }
        }
        let code = rec.pairing_code.clone().unwrap_or_default();
        let until = rec.code_expires_at.clone().unwrap_or_default();
        state["pairingCode"] = json!(code);
        state["expiresAt"] = json!(until);
        note.push_str(&format!(
            "Nobody has joined yet: give the pairing code {code} to the opponent's person (it works until \
{until}). game_resign cancels the game."
        ));
        note
    }

    /// `game_wait`: until it is the person's turn or the game is over, or `timeout`.
    pub async fn wait(&self, game: &str, timeout: Duration) -> Result<Answer, AgentError> {
        let handle = self.seat(game)?;
        let deadline = tokio::time::Instant::now() + timeout.min(WAIT_MAX);
        let mut changed = handle.changed.subscribe();
        let mut last: Option<Snapshot> = None;
        // Once the hub could not be reached, the watcher's socket may be down too, and
        // pushes late: the wait looks for itself more often.
        let mut recheck = WAIT_RECHECK;
        loop {
            changed.borrow_and_update();
            // Each look is bounded by what is left of the wait: against a hub that hangs
            // (not down), a look would take its requests' own timeout, 20 s, past the wait
            // the person asked for. A look cut short is one that did not happen: what the
            // agent signs is on disk before it is sent (see `SeatHandle::post`).
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let snap = match tokio::time::timeout(left.max(WAIT_LOOK_MIN), handle.sync(&self.ctx))
                .await
            {
                // A hub that is down for a moment (restarting, say), or that asked for a duty
                // the look wrote to wait (a rate limit), ends no wait: the agent looks again
                // while the wait lasts, and only its end tells.
                Ok(Err(e))
                    if matches!(e, AgentError::Transport(_)) || e.retry_after().is_some() =>
                {
                    let now = tokio::time::Instant::now();
                    if now + WAIT_RETRY >= deadline {
                        return match last {
                            Some(snap) => {
                                let note = format!(
                                        "The wait timed out, and the hub did not answer the last look ({e}): \
this is the game as last verified. Call game_wait again."
                                    );
                                Ok(Answer::of(&snap, Some(note)))
                            }
                            None => Err(e),
                        };
                    }
                    recheck = WAIT_RETRY * 2;
                    tokio::time::sleep(WAIT_RETRY).await;
                    continue;
                }
                Ok(snap) => snap?,
                Err(_) => {
                    return match last {
                        Some(snap) => {
                            let note =
                                "The wait timed out, and the hub did not answer the last look: \
this is the game as last verified. Call game_wait again.";
                            Ok(Answer::of(&snap, Some(note.into())))
                        }
                        None => Err(AgentError::Transport(
                            "the hub did not answer within the wait".into(),
                        )),
                    };
                }
            };
            if state::your_turn(&snap) || state::is_over(&snap) {
                return Ok(Answer::of(&snap, None));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                let mut note =
                    "The wait timed out: the game still waits for the opponent. Call game_wait again."
                        .to_string();
                let mut answer = Answer::of(&snap, None);
                if waiting_host(&snap) {
                    // The code the person shared may have expired while they waited: the live
                    // one (a fresh one if so, said so) goes with the answer.
                    let shown = self.show_code(&handle, &mut answer.state).await;
                    note = format!("{note} {shown}");
                }
                answer.note = Some(note);
                return Ok(answer);
            }
            last = Some(snap);
            let step = (deadline - now).min(recheck);
            let _ = tokio::time::timeout(step, changed.changed()).await;
        }
    }

    /// `game_resign`: the person gives up the game; a game of theirs that nobody has
    /// joined yet is cancelled, and this agent forgets it.
    pub async fn resign(&self, game: &str) -> Result<Answer, AgentError> {
        let handle = self.seat(game)?;
        let mut rec = handle.lock().await;
        let snap = handle.sync_locked(&self.ctx, &mut rec).await?;
        if waiting_host(&snap) {
            let token = rec.token.clone().unwrap_or_default();
            self.ctx
                .client
                .cancel(&handle.inbox, &handle.game, &token)
                .await?;
            self.ctx.store.remove(&rec)?;
            drop(rec);
            self.forget(&handle.game);
            let mut answer = Answer::of(
                &snap,
                Some(
                    "Nobody had joined: the game is cancelled, and this agent no longer holds it."
                        .into(),
                ),
            );
            answer.state["cancelled"] = json!(true);
            answer.state["board"] = json!("cancelled before anyone joined");
            return Ok(answer);
        }
        playable(&snap)?;
        let event = handle.next_event(&snap.chain, Action::Resign, None);
        let answer = handle.post(&self.ctx, &mut rec, event).await?;
        let note = refereed(&answer)?;
        let snap = handle.sync_locked(&self.ctx, &mut rec).await?;
        Ok(Answer::of(&snap, note))
    }

    /// `game_list`: every seat of this agent with its state (or why it cannot be shown).
    /// The seats are brought up to date together, not one after another: against a hub
    /// that does not answer, each waits out its request's timeout, and in turn a few
    /// seats took longer than an assistant waits for a tool.
    pub async fn list(&self) -> Value {
        let handles = self.handles();
        let synced =
            futures_util::future::join_all(handles.iter().map(|h| h.sync(&self.ctx))).await;
        let mut seats = Vec::with_capacity(handles.len());
        for (handle, synced) in handles.iter().zip(synced) {
            seats.push(match synced {
                Ok(snap) => {
                    let mut st = state::state(&snap);
                    if waiting_host(&snap) {
                        self.show_code(handle, &mut st).await;
                    }
                    st
                }
                Err(e) => json!({"inbox": handle.inbox, "game": handle.game,
                                 "seat": handle.seat.as_str(), "error": e.code(), "detail": e.to_string()}),
            });
        }
        let mut list = json!({ "seats": seats });
        if !self.elsewhere.is_empty() {
            let mut hubs: Vec<(String, usize)> = Vec::new();
            for (hub, _) in &self.elsewhere {
                match hubs.last_mut() {
                    Some((last, n)) if last == hub => *n += 1,
                    _ => hubs.push((hub.clone(), 1)),
                }
            }
            list["otherHubs"] = hubs
                .into_iter()
                .map(|(hub, seats)| json!({"hub": hub, "seats": seats}))
                .collect();
        }
        if !self.damaged.is_empty() {
            list["damaged"] = json!(self.damaged);
        }
        list
    }
}

/// A game id as an error repeats it: whole when it could be one (1–128 characters), else
/// cut, so that a tool call with a huge "id" does not come back twice its size. (A tool
/// error's text is escaped once, where it is built.)
fn shown_id(game: &str) -> String {
    match game.char_indices().nth(128) {
        None => game.to_string(),
        Some((cut, _)) => format!(
            "{}… ({} characters; an id has at most 128)",
            &game[..cut],
            game.chars().count()
        ),
    }
}

/// True for a game this agent's person created that nobody has joined yet.
fn waiting_host(snap: &Snapshot) -> bool {
    snap.seat == Seat::X
        && !snap.chain.is_started()
        && snap
            .before_start
            .as_ref()
            .is_some_and(|v| v["phase"] == "waiting")
}

/// A move or resign needs a started game that is not over.
fn playable(snap: &Snapshot) -> Result<(), AgentError> {
    // Refused as the referee would refuse them (`not_started`, `after_end`), so that the
    // result carries the seat's true state, as any refused move's does.
    if !snap.chain.is_started() {
        return Err(AgentError::Rejected {
            reason: "not_started".into(),
            detail: Some(
                "the game has not started yet: use game_wait until the opponent has joined".into(),
            ),
        });
    }
    if state::is_over(snap) {
        return Err(AgentError::Rejected {
            reason: "after_end".into(),
            detail: Some("the game is over".into()),
        });
    }
    Ok(())
}

/// Whether the seat already committed in this round (rock-paper-scissors).
fn committed(snap: &Snapshot) -> bool {
    snap.chain
        .board()
        .is_some_and(|b| b.view(Viewer::Seat(snap.seat)).0["committed"][snap.seat.as_str()] == true)
}

/// The referee's answer to a post: an error when rejected, a note when not judged yet.
fn refereed(answer: &super::client::PostAnswer) -> Result<Option<String>, AgentError> {
    match answer.verdict() {
        "accepted" => Ok(None),
        "rejected" => Err(AgentError::Rejected {
            reason: answer.body["error"]
                .as_str()
                .unwrap_or("rejected")
                .to_string(),
            detail: answer.body["detail"].as_str().map(str::to_string),
        }),
        other => Ok(Some(format!(
            "The hub answered {other}: the referee has not judged the event yet."
        ))),
    }
}

/// The `Idempotency-Key` of the request that is to make `record`'s seat.
fn asked_key(record: &SeatRecord) -> String {
    record
        .asked
        .as_ref()
        .map(|a| a.idempotency_key.clone())
        .unwrap_or_else(crate::game::seats::new_token)
}
