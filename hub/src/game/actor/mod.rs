//! One actor per game id: the game's only referee on this hub.
//!
//! A [`GameActor`] holds the game's [`GameChain`] (the games crate's verifier) and
//! adjudicates the game's durable records in inbox order: each gets a verdict, recorded
//! beside its capture and handed to the poster waiting for it; each accepted event's
//! per-seat views are computed once and published to the game's room. The actor also
//! writes what the hub owes the game: the start of a seated game whose host key is hub-held
//! (or that is unsigned), and custodial rock-paper-scissors commits and reveals.
//!
//! Lifecycle: started on the game's first record or on demand, it rebuilds itself from the
//! store's per-game index before it reads its mailbox (`ctx.wait`), so it never sees a
//! record out of order; records it already replayed are recognized by position and
//! ignored. It stops after the configured idle time without messages and is rebuilt on
//! the next one.
//!
//! This file holds the actor's state, its adjudication and its lifecycle. What the hub
//! writes on its own and the choices it keeps are in `custody`; each viewer's state, the
//! views built from it and their publication are in `views`.
//!
//! What it deliberately does not do: check who may post (the facade does that before the
//! inbox), or hold anything that cannot be rebuilt from the store — except a held
//! rock-paper-scissors choice, whose loss is announced (`held_choice_lost`).

mod cluster;
mod custody;
mod messages;
mod views;

pub use cluster::{CatchUp, Kick, Retire, TakenOver};
pub use messages::{
    Choose, Chosen, Deliver, DraftMove, Export, Paired, ReadState, Snapshot, Summarize, Unchosen,
};
pub use views::summary;

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use games::reason::{Reason, Refusal};
use games::verify::{GameChain, Prepared, Verdict as ChainVerdict};
use games::{Action, Event, Seat};
use tokio::sync::oneshot;

use super::desk::{Desk, Tip};
use super::engine::Engine;
use super::seats::Registration;
use super::state::{Phase, ProtocolNames, ResultView};
use super::types::Verdict;
use super::waiters::Outcome;
use crate::inbox::{Capture, Record, StoredVerdict};
use crate::rooms::{Cause, Watchers};

/// How long an idle actor keeps reading its mailbox after leaving the directory.
const STOP_GRACE: Duration = Duration::from_millis(200);

/// How long a finished game's actor stays without messages before it stops. Nothing is
/// owed to a finished game, and a read rebuilds it from the store, so a hub that plays
/// thousands of games a minute keeps only the open ones (and the last moment's worth) in
/// memory rather than a minute's worth. Long enough for the late move of a player who had
/// not yet seen the end, and for the reads that follow the last move at once.
const FINISHED_LINGER: Duration = Duration::from_millis(500);

fn idx(seat: Seat) -> usize {
    match seat {
        Seat::X => 0,
        Seat::O => 1,
    }
}

pub struct GameActor {
    engine: Arc<Engine>,
    inbox: Arc<str>,
    game: Arc<str>,
    chain: GameChain,
    /// The started game's protocol as its states name it, built at its first state (and
    /// forgotten with the chain, if its start is undone).
    protocol: OnceCell<ProtocolNames>,
    /// The shard position of the last record adjudicated.
    last_pos: u64,
    /// Where each accepted event of the chain is in the inbox, in chain order, for export.
    /// Only the captures: the events themselves are read back from the inbox, so an open
    /// game's memory does not grow with its length.
    accepted: Vec<Capture>,
    /// Per seat: the choice the hub keeps for it (held, or committed and not yet revealed).
    choice: [Option<&'static str>; 2],
    /// Per seat: the choice is held, not yet committed.
    held: [bool; 2],
    /// Per seat: a held choice was lost to a restart.
    lost: [bool; 2],
    /// Per seat: the hash of the commit of its choice on its way to the store and not yet
    /// adjudicated, handed to a poster to append or written by the actor for a held
    /// choice. A second choice meanwhile is refused `already_chosen`, as once the commit
    /// is in: drafted on the same head it would race the first for its seq, and put in
    /// the place of a held choice being committed it would be lost with it.
    committing: [Option<String>; 2],
    /// The hash of an event the hub is writing on its own and has not seen adjudicated.
    writing: Option<String>,
    /// The head, keys and drafts shared with posters' threads ([`Desk`]). Events drafted
    /// there or here (a hub-held seat's moves, the hub's own writes) that come back from
    /// the inbox byte for byte are not parsed, hashed or their signature verified again.
    desk: Arc<Desk>,
    write_failures: u32,
    /// Answered when the game gets its start (`pair` waits on it).
    start_waiters: Vec<oneshot::Sender<()>>,
    /// The phase and result of the game's listing entry as last written (they are all
    /// that changes in it).
    listed: Option<(Phase, Option<ResultView>)>,
    last_active: Instant,
    /// When the actor started: `last_active` is still this while only listings
    /// ([`Summarize`]) have asked for it.
    born: Instant,
    /// In a cluster: whether this is a copy of a game another node adjudicates.
    copy: cluster::Following,
    /// The states readers last asked for, kept once read twice unchanged ([`views::Reads`]).
    reads: views::Reads,
}

impl GameActor {
    pub fn new(engine: Arc<Engine>, inbox: String, game: String, desk: Arc<Desk>) -> Self {
        let chain = GameChain::new(&engine.config.registry);
        let born = Instant::now();
        GameActor {
            engine,
            inbox: inbox.into(),
            game: game.into(),
            chain,
            protocol: OnceCell::new(),
            last_pos: 0,
            accepted: Vec::new(),
            choice: [None, None],
            held: [false, false],
            lost: [false, false],
            committing: [None, None],
            writing: None,
            desk,
            write_failures: 0,
            start_waiters: Vec::new(),
            listed: None,
            last_active: born,
            born,
            copy: cluster::Following::default(),
            reads: views::Reads::default(),
        }
    }

    fn registration(&self) -> Option<Arc<Registration>> {
        self.engine.seats.registration(&self.inbox, &self.game)
    }

    /// Offers one record to the chain. Returns the verdict and the event's hash.
    fn judge(&mut self, record: &Record) -> (ChainVerdict, Option<String>, Option<Event>) {
        let own = self.desk.take(&record.raw, record.seat);
        let (event, prepared) = match own {
            Some(draft) => (draft.event, draft.prepared),
            None => match Event::parse(&record.raw) {
                Ok(e) => {
                    let prepared = Prepared::of(&e);
                    (e, prepared)
                }
                Err(r) => return (ChainVerdict::Rejected(r), None, None),
            },
        };
        if *event.game != *self.game {
            return (
                ChainVerdict::Rejected(Refusal::with(Reason::Schema, "game")),
                None,
                None,
            );
        }
        let was_started = self.chain.is_started();
        let mut verdict = self.chain.offer_prepared(&event, &prepared);
        if !was_started && matches!(verdict, ChainVerdict::Accepted { .. }) {
            // A start that names `rules.inboxes` counts only in one of them, so a signed
            // chain cannot be replayed into another inbox. A chain without a genesis is
            // exactly a fresh chain, so undoing the acceptance is starting over.
            let foreign = self
                .chain
                .inboxes()
                .is_some_and(|list| !list.iter().any(|i| **i == *self.inbox));
            if foreign {
                self.chain = GameChain::new(&self.engine.config.registry);
                self.protocol = OnceCell::new();
                verdict = ChainVerdict::Rejected(Refusal::with(Reason::BadRules, "inbox"));
            }
        }
        self.share_tip();
        (verdict, Some(prepared.hash), Some(event))
    }

    /// Bookkeeping after an accepted event.
    fn on_accepted(&mut self, capture: Capture, event: &Event, hash: &str, seat: Option<Seat>) {
        self.accepted.push(capture);
        self.write_failures = 0;
        if self.writing.as_deref() == Some(hash) {
            self.writing = None;
        }
        if event.action == Action::Start {
            for tx in self.start_waiters.drain(..) {
                let _ = tx.send(());
            }
        }
        self.track_choice(event, seat);
        if self.chain.result().is_some_and(|r| r.is_over()) {
            self.drop_choices();
            if let Some(reg) = self.registration() {
                // Its place under the host's cap is given back now, before its last
                // state is published; the store's mark follows.
                self.engine.seats.forget_open(&reg);
                let engine = self.engine.clone();
                actix::spawn(async move {
                    if let Err(e) = engine.seats.close(&reg).await {
                        tracing::warn!(error = %e, "could not close a finished game");
                    }
                });
            }
        }
    }

    /// Adjudicates a fresh record, then writes whatever the hub now owes the game.
    fn adjudicate(&mut self, record: &Record, ctx: &mut Context<Self>) {
        let was_over = self.is_over();
        self.settle(record);
        self.write_owed(ctx);
        if !was_over && self.is_over() {
            self.engine.metrics.games_ended.inc();
            ctx.run_later(FINISHED_LINGER, |act, ctx| {
                act.stop_if_idle(FINISHED_LINGER, ctx)
            });
        }
    }

    fn is_over(&self) -> bool {
        self.chain.result().is_some_and(|r| r.is_over())
    }

    /// Stops the actor when it has had no message for `idle`. Leaves the directory first,
    /// then stops a moment later: a consumer that looked this actor up just before may
    /// still put a record in its mailbox, and a stopped actor's mailbox is dropped unread.
    fn stop_if_idle(&mut self, idle: Duration, ctx: &mut Context<Self>) {
        // A held choice lives only here: an actor holding one stays until it is
        // committed, or the seat would be told it was lost without any restart.
        if self.last_active.elapsed() >= idle && !self.held.contains(&true) {
            self.engine.forget(&self.inbox, &self.game, &ctx.address());
            ctx.run_later(STOP_GRACE, |_, ctx| ctx.stop());
        }
    }

    /// A fresh record's verdict: recorded, handed to its poster, and (when accepted)
    /// published to the room.
    fn settle(&mut self, record: &Record) {
        self.last_pos = record.capture.pos;
        let (verdict, hash, event) = self.judge(record);
        let protocol = self
            .chain
            .protocol()
            .and_then(|p| p.refs().first().copied())
            .unwrap_or("");
        let metrics = &self.engine.metrics;
        let (stored, verdict_kind, refusal) = classify(&verdict);
        metrics.event(
            verdict_kind.as_str(),
            refusal.as_ref().map(|r| r.reason),
            protocol,
        );
        // An event the actor wrote on its own (a start, a custodial step) has no poster:
        // its outcome, views and all, is not left behind for one to pick up.
        let own_write = hash.is_some() && hash == self.writing;
        for drafted in &mut self.committing {
            if hash.is_some() && *drafted == hash {
                *drafted = None;
            }
        }
        metrics.observe_capture_to_verdict(record.age());
        if let (ChainVerdict::Accepted { hash }, Some(event)) = (&verdict, &event) {
            self.on_accepted(record.capture, event, hash, record.seat);
        } else if hash.is_some() && hash == self.writing {
            // The referee refused a write of ours (a racing writer won): try again later.
            self.writing = None;
            self.write_failures += 1;
        }
        let capture = record.capture;
        // The poster's view (a seat's, or the spectator's for an anonymous post) and, for an
        // accepted event, those of whoever watches the game: nobody else's is built.
        let watchers = match verdict {
            ChainVerdict::Accepted { .. } => self.engine.rooms.watchers(&self.inbox, &self.game),
            _ => Watchers::default(),
        };
        let views = self.views(watchers, Some(record.seat)).map(Arc::new);
        if let ChainVerdict::Accepted { hash } = &verdict {
            self.publish(
                Cause::Accepted {
                    seat: record.seat,
                    hash: hash.clone(),
                },
                views.clone().unwrap_or_default(),
            );
        }
        let outcome = Outcome {
            verdict: verdict_kind,
            hash,
            refusal,
            views,
        };
        // The poster hears its verdict only once it is recorded, so a read of the capture
        // right after the answer agrees with it. The actor does not wait for the store.
        // In a cluster only a referee whose node still adjudicates the shard records it (a
        // node that just lost the shard hands its poster the verdict the next owner reaches).
        let engine = self.engine.clone();
        let record_it = engine.owns(capture.shard);
        actix::spawn(async move {
            if record_it {
                if let Err(e) = engine.inbox.put_verdict(capture, stored).await {
                    tracing::warn!(%capture, error = %e, "verdict not recorded");
                }
            }
            if own_write {
                engine.waiters.resolve_if_waiting(capture, outcome);
            } else {
                engine.waiters.resolve(capture, outcome);
            }
        });
    }

    /// Puts the chain's head on the desk, for posters to draft on (never in a cluster,
    /// where this actor may be a copy of a game another node adjudicates).
    fn share_tip(&self) {
        let tip = match (self.chain.seq(), self.chain.head()) {
            (Some(seq), Some(head)) if self.engine.config.cluster.is_none() => Some(Tip {
                seq,
                head: head.to_string(),
                signed: self.chain.signed(),
            }),
            _ => None,
        };
        self.desk.set_tip(tip);
    }

    /// Replays the game's stored records in order (each with whether it already has a
    /// verdict). Records with a verdict only rebuild the chain; a record without one (the
    /// hub stopped before recording it) is settled as if fresh, in its place in the order.
    /// The caller writes what the hub owes once the whole history is in.
    fn replay(&mut self, records: Vec<(Record, bool)>) {
        for (record, has_verdict) in records {
            if record.capture.pos <= self.last_pos {
                continue;
            }
            if has_verdict {
                self.last_pos = record.capture.pos;
                if let (ChainVerdict::Accepted { hash }, _, Some(event)) = self.judge(&record) {
                    self.on_accepted(record.capture, &event, &hash, record.seat);
                }
            } else {
                self.settle(&record);
            }
        }
        self.list();
    }
}

/// The chain's verdict as it is stored beside its capture, as its poster hears it, and the
/// refusal it carries (a skipped event is refused `unknown_protocol`).
fn classify(verdict: &ChainVerdict) -> (StoredVerdict, Verdict, Option<Refusal>) {
    match verdict {
        ChainVerdict::Accepted { hash } => (
            StoredVerdict::Accepted { hash: hash.clone() },
            Verdict::Accepted,
            None,
        ),
        ChainVerdict::Rejected(r) => (
            StoredVerdict::Rejected {
                reason: r.reason,
                detail: r.detail.clone(),
            },
            Verdict::Rejected,
            Some(r.clone()),
        ),
        ChainVerdict::Skipped => (
            StoredVerdict::Skipped,
            Verdict::Skipped,
            Some(Refusal::new(Reason::UnknownProtocol)),
        ),
    }
}

impl Actor for GameActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.engine.metrics.actors_resident.inc();
        if self.start_copy(ctx) {
            self.stop_when_idle(ctx);
            return;
        }
        let engine = self.engine.clone();
        let (inbox, game) = (self.inbox.clone(), self.game.clone());
        let rebuild = async move {
            let records = engine.inbox.game_records(&inbox, &game).await?;
            let mut out = Vec::with_capacity(records.len());
            for r in records {
                let has = engine.inbox.verdict(r.capture).await?.is_some();
                out.push((r, has));
            }
            let marks = [
                engine.seats.is_marked_held(&inbox, &game, Seat::X).await,
                engine.seats.is_marked_held(&inbox, &game, Seat::O).await,
            ];
            Ok::<_, crate::inbox::StoreError>((out, marks))
        };
        ctx.wait(rebuild.into_actor(self).map(|res, act, ctx| match res {
            Ok((records, marks)) => {
                act.lost = marks;
                act.replay(records);
                act.announce();
                act.write_owed(ctx);
                // A game that was over already: nothing is owed to it, and the reads that
                // woke it are done in a moment (the idle check runs only every 5 s).
                if act.is_over() {
                    ctx.run_later(FINISHED_LINGER, |act, ctx| {
                        act.stop_if_idle(FINISHED_LINGER, ctx)
                    });
                }
            }
            Err(e) => {
                tracing::warn!(game = %act.game, error = %e, "actor could not rebuild; stopping");
                ctx.stop();
            }
        }));
        self.stop_when_idle(ctx);
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.engine.metrics.actors_resident.dec();
        let held = self.held.iter().filter(|h| **h).count() as i64;
        self.engine.metrics.held_choices.sub(held);
    }
}

impl GameActor {
    fn stop_when_idle(&mut self, ctx: &mut Context<Self>) {
        let idle = self.engine.config.actor_idle;
        ctx.run_interval(idle.min(Duration::from_secs(5)), move |act, ctx| {
            let limit = if act.is_over() {
                idle.min(FINISHED_LINGER)
            } else {
                idle
            };
            act.stop_if_idle(limit, ctx);
        });
    }
}
