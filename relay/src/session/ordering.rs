//! The order in which a socket sees states: the room's publications against the answers
//! to its own commands, which race.
//!
//! A [`Watch`] remembers the newest state the socket has shown (by `seq`), and a state no
//! newer is not shown again, so neither a late publication nor a late answer sends the
//! board backwards. While the socket's own move is in flight, publications from the first
//! of its seat's events on are held back (at most [`HELD_MAX`]), and the move's answer
//! releases them in the order of their seq, its own state carrying the mover's `ref`
//! once; a move refused, or turned down before any verdict, gets `game.refused` and then
//! the true state, unless what was released already showed it. A publication that the
//! game was cancelled ends the watch.
//!
//! What it does not do: read the socket, run commands, or know how a frame reaches the
//! client. It decides which states go out and in what order, and hands each frame to the
//! session's `send`.

use games::Seat;

use super::{Role, Session, CANCELLED};
use crate::rooms::{Cause, Delivery, Subscription};
use crate::service::{Failure, Outcome};
use crate::wire::client_in::Ref;
use crate::wire::client_out::{self, StateFrame};

/// The game a socket watches, and the newest state it has shown of it.
pub(super) struct Watch {
    pub(super) sub: Subscription,
    pub(super) viewer: Option<Seat>,
    latest: Option<StateFrame>,
    /// Publications held back during this seat's move, oldest first: from the first of its
    /// own events (whose state the move's answer sends, with the mover's ref) on, so that
    /// every state goes out in the order of its seq. A custodial move makes several events
    /// at once (a commit, then the reveals), and on a node that does not own the game
    /// their publications come before the answer.
    held: Vec<StateFrame>,
    /// The seq shown when holding began.
    held_after: Option<u64>,
}

/// Held publications past which the oldest is sent anyway: a move's events and the
/// opponent's answers to them are a handful.
const HELD_MAX: usize = 16;

impl Session {
    pub(super) fn on_played(
        &mut self,
        reference: Option<Ref>,
        result: Result<Outcome, Failure>,
        truth: Option<Result<StateFrame, Failure>>,
    ) {
        match result {
            Ok(Outcome::Accepted(state)) | Ok(Outcome::Held(state)) => {
                self.release(state, reference.as_ref());
            }
            Ok(Outcome::Rejected {
                error,
                detail,
                state,
            }) => {
                self.send(client_out::refused(
                    reference.as_ref(),
                    &error,
                    detail.as_deref(),
                    None,
                ));
                let released = self.release_held();
                self.show_truth(Ok(state), released);
            }
            Ok(Outcome::Pending) => {
                // No verdict yet: the room will publish it. Release what was held back.
                self.release_held();
            }
            Err(failure) => {
                self.send(client_out::refused(
                    reference.as_ref(),
                    &failure.error,
                    failure.detail.as_deref(),
                    failure.retry_after,
                ));
                let released = self.release_held();
                match truth {
                    Some(state) => self.show_truth(state, released),
                    None if !released => self.resend_latest(None),
                    None => {}
                }
            }
        }
    }

    /// Shows a state read from the service: the newest of it and what was already shown.
    pub(super) fn show(&mut self, state: Result<StateFrame, Failure>, reference: Option<&Ref>) {
        match state {
            Ok(state) => {
                if let Some(watch) = &mut self.watch {
                    watch.adopt(state);
                    self.resend_latest(reference);
                } else {
                    self.send(state.to_frame(reference));
                }
            }
            Err(failure) => self.send(client_out::error(
                &failure.error,
                failure.detail.as_deref(),
                false,
            )),
        }
    }

    /// After a refusal, the true state, unless the publications just released
    /// (`released`) ended with it or a newer one: a socket that lost its seq to another
    /// socket of its seat got the winner's state, held back during its move, and then the
    /// same state again.
    fn show_truth(&mut self, state: Result<StateFrame, Failure>, released: bool) {
        if let (true, Ok(truth), Some(watch)) = (released, &state, &self.watch) {
            if watch
                .latest
                .as_ref()
                .is_some_and(|l| l.seq() >= truth.seq())
            {
                return;
            }
        }
        self.show(state, None);
    }

    fn resend_latest(&mut self, reference: Option<&Ref>) {
        let frame = self
            .watch
            .as_ref()
            .and_then(|w| w.latest.as_ref())
            .map(|s| s.to_frame(reference));
        if let Some(frame) = frame {
            self.send(frame);
        }
    }

    pub(super) fn on_delivery(&mut self, delivery: &Delivery) {
        if delivery.cause == Cause::Cancelled {
            return self.on_cancelled();
        }
        let playing = self.playing;
        let Some(watch) = &mut self.watch else {
            return;
        };
        // No frame for this viewer: it subscribed after the publisher looked, and the
        // state it reads on joining is at least as new.
        let Some(state) = delivery.views.for_seat(watch.viewer) else {
            return;
        };
        // A publication follows an accepted event, so in a started game its seq is new
        // unless this socket has shown that state already (the reply to its own move, or
        // the state read on joining, came first): then it would be a duplicate. Before the
        // start there is no seq to go by, and a publication (a rebuilt actor telling its
        // room where the game stands) can be the very state read on joining: a duplicate
        // too, by its bytes. A held choice changes its seat's view at the same seq: it is
        // a duplicate only of those very bytes.
        let held = matches!(delivery.cause, Cause::Held { .. });
        let shown = watch.latest.as_ref().is_some_and(|l| match state.seq() {
            Some(_) if !held => l.seq() == state.seq(),
            _ => l.seq() == state.seq() && l.frame() == state.frame(),
        });
        let before = watch.latest.as_ref().and_then(StateFrame::seq);
        if shown || !watch.adopt(state.clone()) {
            return;
        }
        let own = watch.viewer.is_some_and(|seat| match delivery.cause {
            Cause::Accepted { seat: poster } => poster == Some(seat),
            Cause::Held { seat: chooser } => chooser == seat,
            Cause::Phase | Cause::Cancelled => false,
        });
        if playing && (own || !watch.held.is_empty()) {
            // The answer to this socket's move sends its own state, with the mover's ref;
            // what came after it waits, so as not to overtake it.
            if watch.held.is_empty() {
                watch.held_after = before;
            }
            watch.held.push(state.clone());
            if watch.held.len() > HELD_MAX {
                let oldest = watch.held.remove(0);
                self.send(oldest.frame());
            }
            return;
        }
        let frame = state.frame();
        self.send(frame);
    }

    /// The game this socket watches was cancelled (by its host, or by the hub once its
    /// code had been dead a day): there is no state left to show, so the socket is told
    /// with an `error` (not closing it: it may say `hello` with another token, or watch
    /// another game), and stops watching. A seat of that game no longer opens anything:
    /// the socket is as before its first `hello`.
    fn on_cancelled(&mut self) {
        let Some(watch) = self.watch.take() else {
            return;
        };
        if watch.viewer.is_some() {
            self.role = Role::Unknown;
        }
        self.send(client_out::error("not_found", Some(CANCELLED), false));
    }

    /// Sends the answer to this socket's move and whatever was held back meanwhile, in the
    /// order of their seq, the answer's state carrying the mover's ref. An answer no newer
    /// than what was shown before the hold puts its ref on the newest state instead.
    ///
    /// What the socket is left showing is the last frame sent, which is not always the
    /// answer: of two states of one seq (a seat's held choice, and another tab's choice
    /// just before it), the publication goes out in its place. It is remembered as shown,
    /// so that the other's publication, when it comes, is not taken for a duplicate.
    fn release(&mut self, answer: StateFrame, reference: Option<&Ref>) {
        let Some(watch) = &mut self.watch else {
            return self.send(answer.to_frame(reference));
        };
        let held = std::mem::take(&mut watch.held);
        if held.is_empty() {
            return self.show(Ok(answer), reference);
        }
        let fresh = answer.seq() > watch.held_after;
        let mut answer = fresh.then_some(answer);
        let last = held.len() - 1;
        let mut shown = None;
        for (i, frame) in held.into_iter().enumerate() {
            if let Some(a) = answer.take_if(|a| a.seq() <= frame.seq()) {
                if a.seq() < frame.seq() {
                    self.send(a.to_frame(reference));
                } else {
                    self.send(frame.to_frame(reference));
                    shown = Some(frame);
                    continue;
                }
            }
            // Not fresh: the ref goes on the newest state.
            let carries = i == last && !fresh;
            self.send(frame.to_frame(reference.filter(|_| carries)));
            shown = Some(frame);
        }
        if let Some(a) = answer {
            self.send(a.to_frame(reference));
            shown = Some(a);
        }
        if let (Some(watch), Some(shown)) = (&mut self.watch, shown) {
            watch.adopt(shown);
        }
    }

    /// Sends what was held back during a move that got no state of its own to answer with;
    /// true when there was any.
    fn release_held(&mut self) -> bool {
        let held = self
            .watch
            .as_mut()
            .map(|w| std::mem::take(&mut w.held))
            .unwrap_or_default();
        let released = !held.is_empty();
        for frame in held {
            self.send(frame.frame());
        }
        released
    }
}

impl Watch {
    pub(super) fn new(sub: Subscription, viewer: Option<Seat>) -> Watch {
        Watch {
            sub,
            viewer,
            latest: None,
            held: Vec::new(),
            held_after: None,
        }
    }

    /// Keeps `state` as the newest shown unless an older one; true when kept.
    fn adopt(&mut self, state: StateFrame) -> bool {
        let newer = self.latest.as_ref().is_none_or(|l| state.seq() >= l.seq());
        if newer {
            self.latest = Some(state);
        }
        newer
    }
}
