//! The actor's messages: one documented struct each, with one handler each. Callers use
//! `send` (and the consumer `try_send` first), so a full mailbox pushes back on them.

use std::sync::Arc;
use std::time::Instant;

use actix::prelude::*;
use games::reason::{Reason, Refusal};
use games::{Seat, Viewer};
use serde_json::Value;
use tokio::sync::oneshot;

use super::{idx, GameActor, FINISHED_LINGER};
use crate::game::custody;
use crate::game::state::{GameState, SharedState};
use crate::game::types::GameSummary;
use crate::game::writer::{self, Posting};
use crate::game::HubError;
use crate::inbox::{Capture, Record};
use crate::rooms::Cause;

/// A durable record of this game, from its shard's consumer, in shard order.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Deliver(pub Record);

impl Handler<Deliver> for GameActor {
    type Result = ();

    fn handle(&mut self, msg: Deliver, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        if self.copy_delivered(&msg.0, ctx) {
            return;
        }
        if msg.0.capture.pos > self.last_pos {
            self.adjudicate(&msg.0, ctx);
        }
    }
}

/// One viewer's state of the game.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<GameState, HubError>")]
pub struct Snapshot(pub Viewer);

impl Handler<Snapshot> for GameActor {
    type Result = Result<GameState, HubError>;

    fn handle(&mut self, msg: Snapshot, _ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        self.state(msg.0)
    }
}

/// One viewer's state for a reader, shared and kept while it is read again unchanged
/// ([`GameActor::read`]).
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Arc<SharedState>, HubError>")]
pub struct ReadState(pub Viewer);

impl Handler<ReadState> for GameActor {
    type Result = Result<Arc<SharedState>, HubError>;

    fn handle(&mut self, msg: ReadState, _ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        self.read(msg.0)
    }
}

/// A game's listing entry, for a listing that holds none for it (or, on a node where
/// another node adjudicates the game, none it knows to be final). `catch_up`: the game is
/// adjudicated on another node, so this actor first follows the verdicts recorded there
/// (as [`CatchUp`](super::CatchUp) does).
///
/// Unlike every other message it is not activity. An actor started only to be listed stops
/// as soon as a finished game's would, not after the idle time, so a reader paging through
/// an inbox after a restart does not keep every unfinished game it lists in memory. The
/// entry it leaves behind answers the next listing without an actor.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<GameSummary, HubError>")]
pub struct Summarize {
    pub catch_up: bool,
}

impl Handler<Summarize> for GameActor {
    type Result = AtomicResponse<Self, Result<GameSummary, HubError>>;

    fn handle(&mut self, msg: Summarize, ctx: &mut Self::Context) -> Self::Result {
        if self.last_active == self.born {
            ctx.run_later(FINISHED_LINGER, |act, ctx| {
                if act.last_active == act.born && act.writing.is_none() {
                    act.stop_if_idle(FINISHED_LINGER, ctx);
                }
            });
        }
        let caught_up = if msg.catch_up {
            self.caught_up()
        } else {
            Box::pin(fut::ready(Ok(())))
        };
        AtomicResponse::new(Box::pin(caught_up.map(|res, act, _| {
            res?;
            Ok(super::summary(&act.state(Viewer::Spectator)?))
        })))
    }
}

/// The next event for a hub-held seat: a move (`Some`) or a resign (`None`), built from
/// the head and signed; the facade appends it.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Posting, HubError>")]
pub struct DraftMove {
    pub seat: Seat,
    pub mv: Option<Value>,
}

impl Handler<DraftMove> for GameActor {
    type Result = Result<Posting, HubError>;

    fn handle(&mut self, msg: DraftMove, _ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        let (Some(seq), Some(head)) = (self.chain.seq(), self.chain.head()) else {
            return Err(HubError::NotStarted);
        };
        let event = writer::next_event(&self.game, seq, head, msg.seat, msg.mv);
        let signed = self.chain.signed();
        Ok(self.draft(event, signed))
    }
}

/// What became of a rock-paper-scissors choice.
#[derive(Debug)]
pub enum Chosen {
    /// It is the seat's commit turn: append this commit.
    Commit(Posting),
    /// Not its turn yet: held, committed on its turn. The seat's state, and, when the seat
    /// had no choice held before, the durable mark that tells it after a restart that the
    /// choice was lost: the answer waits for it ([`Held::marked`]).
    Held(Held),
}

/// A held choice's answer.
#[derive(Debug)]
pub struct Held {
    /// The seat's state, showing the held choice (the same one its room was handed).
    pub state: Arc<SharedState>,
    /// Resolves once the seat's held mark is in the store (true) or could not be put
    /// (false). Written by the actor, so that it stays ordered with the mark's removal
    /// when the choice is committed.
    pub marked: Option<oneshot::Receiver<bool>>,
}

impl Held {
    /// Waits until the seat's held mark is in the store, so that a hub stopping right after
    /// the answer still tells the seat, when it is back, that its choice was lost.
    pub async fn marked(self) -> Arc<SharedState> {
        if let Some(marked) = self.marked {
            if !marked.await.unwrap_or(false) {
                tracing::warn!("held choice's mark not stored: a restart would not tell its seat");
            }
        }
        self.state
    }
}

/// A hub-held seat's rock-paper-scissors choice.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Chosen, HubError>")]
pub struct Choose {
    pub seat: Seat,
    pub choice: &'static str,
}

impl Handler<Choose> for GameActor {
    type Result = Result<Chosen, HubError>;

    fn handle(&mut self, msg: Choose, ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        let s = idx(msg.seat);
        let commit_at = match (
            self.chain.protocol(),
            self.chain.board(),
            self.chain.seq(),
            self.chain.head(),
        ) {
            (Some(p), Some(board), Some(seq), Some(head)) => {
                if !custody::is_custodial(p.as_ref()) {
                    return Err(HubError::Refused(Refusal::with(
                        Reason::IllegalMove,
                        "bad_move",
                    )));
                }
                if board.outcome().is_over() {
                    return Err(HubError::Refused(Refusal::new(Reason::AfterEnd)));
                }
                // A seat that chose this round (its commit sealed, or being written by the
                // hub or by a poster) chooses again once the round is over. Held until then,
                // a second choice shared the slot of the committed one: the reveal emptied
                // it, the held choice was never committed, and the seat stayed marked as
                // holding one for good. (A commit of ours that the referee refused leaves
                // `writing` and `committing` empty: the seat may choose again.)
                let committing = self.committing[s].is_some()
                    || (self.writing.is_some() && self.choice[s].is_some() && !self.held[s]);
                if committing || board.sealed_commit(msg.seat).is_some() {
                    return Err(HubError::Refused(Refusal::with(
                        Reason::IllegalMove,
                        "already_chosen",
                    )));
                }
                let my_turn = matches!(
                    board.custody(msg.seat),
                    Some(games::protocol::CustodyStep::Commit)
                );
                (my_turn && self.writing.is_none() && !self.held[s])
                    .then(|| (seq, head.to_string()))
            }
            _ => {
                // Before the start (X's agent has yet to write it): a choice for a
                // custodial game is held like any early choice.
                let registry = &self.engine.config.registry;
                let custodial = self
                    .registration()
                    .and_then(|r| registry.get(&r.protocol).cloned())
                    .is_some_and(|p| custody::is_custodial(p.as_ref()));
                if !custodial {
                    return Err(HubError::NotStarted);
                }
                None
            }
        };
        self.lost[s] = false;
        if let Some((seq, head)) = commit_at {
            let mv = self.custodian().commit_move(msg.seat, seq + 1, msg.choice);
            let event = writer::next_event(&self.game, seq, &head, msg.seat, Some(mv));
            let signed = self.chain.signed();
            let draft = self.draft(event, signed);
            self.choice[s] = Some(msg.choice);
            self.committing[s] = Some(draft.hash.clone());
            return Ok(Chosen::Commit(draft));
        }
        self.choice[s] = Some(msg.choice);
        let mut marked = None;
        if !self.held[s] {
            self.held[s] = true;
            let engine = self.engine.clone();
            let (inbox, game, seat) = (self.inbox.clone(), self.game.clone(), msg.seat);
            let (done, rx) = oneshot::channel();
            actix::spawn(async move {
                let stored = engine.seats.mark_held(&inbox, &game, seat).await.is_ok();
                let _ = done.send(stored);
            });
            marked = Some(rx);
            self.engine.metrics.held_choices.inc();
        }
        // It may be this seat's commit turn with a write of ours in flight: commit then.
        self.write_owed(ctx);
        let state = SharedState::new(self.state(Viewer::Seat(msg.seat))?);
        self.show_held(msg.seat, &state);
        Ok(Chosen::Held(Held { state, marked }))
    }
}

/// A choice's commit ([`Chosen::Commit`]) that its poster could not append (the store
/// refused it): the seat has not chosen after all, and may choose again.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Unchosen {
    pub seat: Seat,
    pub hash: String,
}

impl Handler<Unchosen> for GameActor {
    type Result = ();

    fn handle(&mut self, msg: Unchosen, _ctx: &mut Self::Context) {
        let s = idx(msg.seat);
        if self.committing[s].as_deref() == Some(msg.hash.as_str()) {
            self.committing[s] = None;
            if !self.held[s] {
                self.choice[s] = None;
            }
        }
    }
}

/// O has paired: tell the room, write the start if the hub owes it, and answer once the
/// game has its start.
#[derive(Clone, Debug, Message)]
#[rtype(result = "oneshot::Receiver<()>")]
pub struct Paired;

impl Handler<Paired> for GameActor {
    type Result = MessageResult<Paired>;

    fn handle(&mut self, _msg: Paired, ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        let (tx, rx) = oneshot::channel();
        if self.chain.is_started() {
            let _ = tx.send(());
        } else {
            self.start_waiters.push(tx);
        }
        let watchers = self.engine.rooms.watchers(&self.inbox, &self.game);
        if let Some(views) = self.views(watchers, None) {
            self.publish(Cause::Phase, Arc::new(views));
        }
        self.write_failures = 0;
        self.write_owed(ctx);
        MessageResult(rx)
    }
}

/// Where the accepted chain's events are in the inbox, in chain order. A game that has
/// no state has no chain to export either (a refused or skipped start): not found, as
/// its state is, rather than an empty export. A seated game still waiting for its start
/// exports an empty chain.
#[derive(Clone, Debug, Message)]
#[rtype(result = "Result<Vec<Capture>, HubError>")]
pub struct Export;

impl Handler<Export> for GameActor {
    type Result = Result<Vec<Capture>, HubError>;

    fn handle(&mut self, _msg: Export, _ctx: &mut Self::Context) -> Self::Result {
        self.last_active = Instant::now();
        if self.accepted.is_empty() && self.registration().is_none() {
            return Err(self.absent());
        }
        Ok(self.accepted.clone())
    }
}
