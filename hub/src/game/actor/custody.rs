//! The actor's side of custody: what the hub writes on its own for a game, one event at a
//! time, and the rock-paper-scissors choices it keeps for hub-held seats.
//!
//! [`GameActor::write_owed`] writes the next event the hub owes the game: the start of a
//! paired game whose host key is hub-held (or that is unsigned), a held choice's commit on
//! its seat's turn, and the reveal of a commit the hub made. The start and reveals are the
//! shard owner's to write; a held choice's commit is written by the node that holds it,
//! as nobody else knows it. The choice a seat's view shows follows the commits and reveals
//! the chain accepts, and is dropped when the game is over.
//!
//! What it deliberately does not do: derive nonces, commits or reveals (the [`Custodian`]
//! in `game/custody.rs` does), judge what it writes (a write is appended to the inbox and
//! comes back to the actor as any record does), or take a seat's choice (the `Choose` and
//! `Unchosen` handlers in `messages.rs` do).

use actix::prelude::*;
use games::{Action, Event, Seat};

use super::{idx, GameActor};
use crate::game::custody::{self, Custodian};
use crate::game::writer::{self, Posting};

/// After this many consecutive failed hub writes the actor stops retrying until the next
/// accepted event, so a write the referee keeps refusing cannot fill the inbox.
const MAX_WRITE_FAILURES: u32 = 3;

impl GameActor {
    /// Keeps the choice a seat's view shows in step with its accepted commit or reveal, and
    /// lets go of a held choice once its commit is in.
    pub(super) fn track_choice(&mut self, event: &Event, seat: Option<Seat>) {
        if let (Action::Move, Some(mv)) = (event.action, &event.mv) {
            let s = idx(event.player);
            if mv.get("choice").is_some() {
                // The seat's reveal: its round is over.
                self.choice[s] = None;
            } else if let Some(commit) = mv.get("commit").and_then(|c| c.as_str()) {
                // The seat's view shows the choice this commit seals, whichever of two
                // racing choices won the seq (none when the commit is not the hub's).
                self.choice[s] = self.custodian().recover(event.player, event.seq, commit);
                if self.held[s] && seat == Some(event.player) {
                    self.held[s] = false;
                    self.engine.metrics.held_choices.dec();
                    self.clear_held_mark(event.player);
                }
            }
        }
    }

    /// Forgets every choice kept for a game that is over, held ones with their marks.
    pub(super) fn drop_choices(&mut self) {
        // A round cut short by a resign has nothing left to commit or reveal: a
        // choice kept for it is dropped, so no view goes on showing it.
        for seat in [Seat::X, Seat::O] {
            let s = idx(seat);
            self.choice[s] = None;
            self.lost[s] = false;
            if std::mem::take(&mut self.held[s]) {
                self.engine.metrics.held_choices.dec();
                self.clear_held_mark(seat);
            }
        }
    }

    fn clear_held_mark(&self, seat: Seat) {
        let engine = self.engine.clone();
        let (inbox, game) = (self.inbox.clone(), self.game.clone());
        actix::spawn(async move {
            let _ = engine.seats.clear_held(&inbox, &game, seat).await;
        });
    }

    /// The choice behind `seat`'s commit of the round under way, recovered from the commit
    /// as a reveal recovers it, where this actor does not hold it: a copy on a node that
    /// does not own the game, or a referee rebuilt after a restart. (On such nodes a seat's
    /// own view lacked its choice, which a box reloaded there took for lost.) `None` when
    /// the commit is not the hub's (an agent's own nonce) or there is none.
    pub(super) fn recovered_choice(&self, seat: Seat) -> Option<&'static str> {
        let (commit, commit_seq) = self.chain.board()?.sealed_commit(seat)?;
        self.custodian().recover(seat, commit_seq, &commit)
    }

    pub(super) fn custodian(&self) -> Custodian<'_> {
        Custodian {
            secret: &self.engine.config.secret,
            inbox: &self.inbox,
            game: &self.game,
        }
    }

    /// Writes the next event the hub owes this game, if any (one at a time).
    pub(super) fn write_owed(&mut self, ctx: &mut Context<Self>) {
        if self.writing.is_some() || self.write_failures >= MAX_WRITE_FAILURES {
            return;
        }
        // A started game is owed something only while it is custodial and not over: most
        // games are decided here, before the registration is read.
        if let (Some(p), Some(board)) = (self.chain.protocol(), self.chain.board()) {
            if board.outcome().is_over() || !custody::is_custodial(p.as_ref()) {
                return;
            }
        }
        let Some(reg) = self.registration() else {
            return;
        };
        // Only the shard's owner writes what the hub owes on its own; another node writes
        // only the commit of a choice it holds, which nobody else knows.
        let owner = self
            .engine
            .owns(self.engine.inbox.shard_of(&self.inbox, &self.game));
        if !owner && !self.held.contains(&true) {
            return;
        }
        if !self.chain.is_started() {
            if !owner {
                return;
            }
            if reg.paired && reg.hub_writes_start() && !self.chain.is_skipped() {
                let posting = self.draft(writer::start_event(&reg), reg.signed);
                self.spawn_write(posting, ctx);
            }
            return;
        }
        let (Some(p), Some(board), Some(seq), Some(head)) = (
            self.chain.protocol(),
            self.chain.board(),
            self.chain.seq(),
            self.chain.head(),
        ) else {
            return;
        };
        if board.outcome().is_over() || !custody::is_custodial(p.as_ref()) {
            return;
        }
        for seat in [Seat::X, Seat::O] {
            if reg.signed && reg.agent_held(seat) {
                continue;
            }
            let mut commits = false;
            let mv = match board.custody(seat) {
                Some(games::protocol::CustodyStep::Commit) => match self.choice[idx(seat)] {
                    Some(choice) if self.held[idx(seat)] => {
                        commits = true;
                        self.custodian().commit_move(seat, seq + 1, choice)
                    }
                    _ => continue,
                },
                Some(games::protocol::CustodyStep::Reveal { commit, commit_seq }) if owner => {
                    match self.custodian().reveal_move(seat, commit_seq, &commit) {
                        Some(mv) => mv,
                        None => {
                            tracing::warn!(game = %self.game, %seat, "a commit the hub cannot reveal");
                            continue;
                        }
                    }
                }
                _ => continue,
            };
            let event = writer::next_event(&self.game, seq, head, seat, Some(mv));
            let signed = self.chain.signed();
            let posting = self.draft(event, signed);
            if commits {
                // The held choice is being committed: from now until its verdict, a new
                // choice would no longer replace it, only be lost with it.
                self.committing[idx(seat)] = Some(posting.hash.clone());
            }
            self.spawn_write(posting, ctx);
            return;
        }
    }

    /// An event the hub writes for a seat, signed with that seat's key when `signed`.
    pub(super) fn draft(&self, event: Event, signed: bool) -> Posting {
        self.desk
            .draft(&self.engine.config.secret, &self.inbox, event, signed)
    }

    fn spawn_write(&mut self, draft: Posting, ctx: &mut Context<Self>) {
        self.writing = Some(draft.hash.clone());
        let inbox = self.engine.inbox.clone();
        let (name, game) = (self.inbox.clone(), self.game.clone());
        let fut = async move {
            inbox
                .append(&name, &game, Some(draft.seat), draft.raw)
                .await
        };
        ctx.spawn(fut.into_actor(self).map(|res, act, _| {
            if let Err(e) = res {
                tracing::warn!(game = %act.game, error = %e, "hub write not appended");
                // A held choice whose commit this was stays held, to be committed later.
                for drafted in &mut act.committing {
                    if *drafted == act.writing {
                        *drafted = None;
                    }
                }
                act.writing = None;
                act.write_failures += 1;
            }
        }));
    }
}
