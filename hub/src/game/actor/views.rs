//! What the actor shows: each viewer's state of the game, the per-seat views built from
//! those states once per event, and their publication to the game's room, with the game's
//! listing entry kept current beside them; and, for readers who ask for the same state
//! again and again, that state kept until the game changes.
//!
//! A seat's own state shows the choice the hub keeps for it, and tells it when a held
//! choice was lost to a restart; the spectator's state never does. Only the views someone
//! will read are built: those of the room's watchers, and the poster's.
//!
//! What it deliberately does not do: redact a board (`state::assemble` reads it through
//! the protocol's redactor), decide who may see which viewer's state (the facade's seat
//! check does), or serialize and fan out to sockets (the room does).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use games::{Seat, Viewer};

use super::{idx, GameActor};
use crate::game::state::{
    self, GameState, KeysView, Notice, Phase, ProtocolNames, ResultView, SharedState,
};
use crate::game::types::{GameSummary, Listed};
use crate::game::HubError;
use crate::rooms::{Cause, Publication, Views, Watchers};

impl GameActor {
    /// Hands the rebuilt game's state to its room. A node that took a shard over rebuilds
    /// its games, and the node that died may have recorded a verdict and not published it:
    /// a socket elsewhere then missed that state for good (seen after a kill -9 of an
    /// owner). A socket that has it already drops it as a duplicate.
    pub(super) fn announce(&mut self) {
        let watchers = self.engine.rooms.watchers(&self.inbox, &self.game);
        if let Some(views) = self.views(watchers, None) {
            self.publish(Cause::Phase, Arc::new(views));
        }
    }

    /// Shows a seat's held choice (`state`, its own view) to every socket of that seat, the
    /// poster's and its other tabs' alike: no event was accepted, so no other view changed.
    pub(super) fn show_held(&mut self, seat: Seat, state: &Arc<SharedState>) {
        let watchers = self.engine.rooms.watchers(&self.inbox, &self.game);
        if !watchers.watches(Some(seat)) {
            return;
        }
        let mut views = Views::default();
        match seat {
            Seat::X => views.x = Some(state.clone()),
            Seat::O => views.o = Some(state.clone()),
        }
        self.publish(Cause::Held { seat }, Arc::new(views));
    }

    /// Keeps the game's listing entry current, then hands the views that were built to the
    /// room (when somebody watches).
    pub(super) fn publish(&mut self, cause: Cause, views: Arc<Views>) {
        let started = Instant::now();
        // What readers were kept is old news now; its memory goes.
        self.reads = Reads::default();
        self.list();
        if views.x.is_none() && views.o.is_none() && views.spectator.is_none() {
            return;
        }
        self.engine.rooms.publish(Publication {
            inbox: self.inbox.clone(),
            game: self.game.clone(),
            cause,
            views,
        });
        self.engine
            .metrics
            .verdict_to_relay
            .observe(started.elapsed().as_secs_f64());
    }

    /// Writes the game's listing entry when its phase or result changed since last time.
    pub(super) fn list(&mut self) {
        let (protocol, phase, result) = match (self.chain.protocol(), self.chain.result()) {
            (Some(p), Some(result)) => (
                Cow::Borrowed(p.refs().first().copied().unwrap_or("")),
                Phase::Started,
                Some(ResultView::from(result)),
            ),
            _ => match self.registration() {
                Some(reg) if !self.chain.is_skipped() => (
                    Cow::Owned(reg.protocol.to_string()),
                    if reg.paired {
                        Phase::Paired
                    } else {
                        Phase::Waiting
                    },
                    None,
                ),
                _ => return,
            },
        };
        if self.listed == Some((phase, result)) {
            return;
        }
        self.listed = Some((phase, result));
        self.engine.list(
            &self.inbox,
            &self.game,
            Listed {
                protocol: Some(protocol),
                phase,
                result,
            },
        );
    }

    /// One viewer's state for a reader (a socket's `hello` or `game.board`, an HTTP `GET`),
    /// shared, with its frame encoded at most once. A started game's state read twice
    /// unchanged is kept until it changes, so that a client asking for the same board again
    /// and again costs a lookup, not a board drawn and encoded (a 64×64 board's state is
    /// about 34 KB, and building and sending it took about 0.4 ms of CPU).
    pub fn read(&mut self, viewer: Viewer) -> Result<Arc<SharedState>, HubError> {
        let Some(key) = self.read_key(viewer) else {
            return Ok(SharedState::new(self.state(viewer)?));
        };
        let slot = Reads::slot(viewer);
        let kept = self.reads.0.as_ref().and_then(|r| r[slot].as_ref());
        if let Some(Read {
            key: k,
            state: Some(state),
        }) = kept
        {
            if *k == key {
                return Ok(state.clone());
            }
        }
        let again = kept.is_some_and(|r| r.key == key);
        let state = SharedState::new(self.state(viewer)?);
        self.reads.0.get_or_insert_default()[slot] = Some(Read {
            key,
            state: again.then(|| state.clone()),
        });
        Ok(state)
    }

    /// What a started game's state for `viewer` is made of, all but the chain itself,
    /// which its seq and head stand for (a chain only grows, but its start can be undone
    /// and another take its place); `None` before the start.
    fn read_key(&self, viewer: Viewer) -> Option<ReadKey> {
        let (seq, head) = (self.chain.seq()?, self.chain.head()?);
        let head = u64::from_str_radix(head.get(..16)?, 16).ok()?;
        let (lost, choice) = match viewer {
            Viewer::Seat(s) => (self.lost[idx(s)], self.choice[idx(s)]),
            Viewer::Spectator => (false, None),
        };
        Some(ReadKey {
            seq,
            head,
            lost,
            choice,
        })
    }

    /// One viewer's state, or why there is none.
    pub fn state(&self, viewer: Viewer) -> Result<GameState, HubError> {
        let seat = match viewer {
            Viewer::Seat(s) => Some(s),
            Viewer::Spectator => None,
        };
        let notice = seat
            .filter(|s| self.lost[idx(*s)])
            .map(|_| Notice::HeldChoiceLost);
        let mut st = if let (Some(p), Some(board)) = (self.chain.protocol(), self.chain.board()) {
            let keys = self.chain.keys().map(|k| KeysView {
                x: Some(k.hex(Seat::X)),
                o: Some(k.hex(Seat::O)),
            });
            let protocol = self.protocol.get_or_init(|| {
                let name = p.refs().first().copied().unwrap_or("");
                let rules = self.chain.rules();
                // A seated game's registration holds the same names, shared with every
                // game of its protocol and rules: a copy of the rules per game would
                // cost an open game more than the copies per move did.
                match self.registration() {
                    Some(reg)
                        if *reg.protocol == *name
                            && *reg.protocol_id == *p.id()
                            && rules.is_some_and(|r| *r == *reg.rules) =>
                    {
                        ProtocolNames {
                            protocol: reg.protocol.clone(),
                            protocol_id: reg.protocol_id.clone(),
                            rules: reg.rules.clone(),
                        }
                    }
                    _ => ProtocolNames {
                        protocol: name.into(),
                        protocol_id: p.id().into(),
                        rules: Arc::new(rules.cloned().unwrap_or_default()),
                    },
                }
            });
            state::assemble(
                &self.inbox,
                &self.game,
                viewer,
                state::Source::Started(state::Started {
                    protocol,
                    keys,
                    seq: self.chain.seq().unwrap_or(0),
                    head: self.chain.head().unwrap_or(""),
                    result: self
                        .chain
                        .result()
                        .unwrap_or(games::GameResult::IN_PROGRESS),
                    board,
                }),
                notice,
            )
        } else if let Some(reg) = &self.registration() {
            state::assemble(
                &self.inbox,
                &self.game,
                viewer,
                state::Source::Pending(state::Pending {
                    phase: if reg.paired {
                        Phase::Paired
                    } else {
                        Phase::Waiting
                    },
                    protocol: ProtocolNames {
                        protocol: reg.protocol.clone(),
                        protocol_id: reg.protocol_id.clone(),
                        rules: reg.rules.clone(),
                    },
                    signed: reg.signed,
                    keys: KeysView {
                        x: reg.key_x.clone(),
                        o: reg.key_o.clone(),
                    },
                    x_starts: !reg.hub_writes_start(),
                }),
                notice,
            )
        } else {
            return Err(self.absent());
        };
        // A seat's own view shows the choice the hub keeps for it; nobody else's does.
        // (Only a seat's view is taken apart: the spectator's must come back whole.)
        if let Some(s) = seat {
            let choice = self.choice[idx(s)].or_else(|| self.recovered_choice(s));
            st.view = st.view.take().map(|view| match choice {
                Some(c) => view.with_pending_choice(c),
                None => view,
            });
        }
        Ok(st)
    }

    /// Why a game with neither an accepted start nor a seat registration has no state:
    /// its id names no game, or a game of a protocol this hub does not referee.
    pub(in crate::game) fn absent(&self) -> HubError {
        if self.chain.is_skipped() {
            HubError::NotFound(
                "this game names a protocol this hub does not know; it is stored, not \
                 refereed, and its captures are listed under …/events?game="
                    .into(),
            )
        } else {
            HubError::NotFound("no such game".into())
        }
    }

    /// The views of the viewers in `watchers`, and of `poster` (a seat, or `None` for the
    /// spectator) when there is one; `None` when the game has no state at all.
    pub(super) fn views(&self, watchers: Watchers, poster: Option<Option<Seat>>) -> Option<Views> {
        let build = |viewer: Option<Seat>| {
            if !watchers.watches(viewer) && poster != Some(viewer) {
                return Ok(None);
            }
            let state = self.state(viewer.map_or(Viewer::Spectator, Viewer::Seat))?;
            Ok::<_, HubError>(Some(SharedState::new(state)))
        };
        Some(Views {
            x: build(Some(Seat::X)).ok()?,
            o: build(Some(Seat::O)).ok()?,
            spectator: build(None).ok()?,
        })
    }
}

/// The states readers asked for last, one per viewer (X, O, spectator), each kept from
/// its second read until the game changes (a publication clears them all). An open game
/// nobody reads holds nothing here.
#[derive(Default)]
pub(super) struct Reads(Option<Box<[Option<Read>; 3]>>);

impl Reads {
    fn slot(viewer: Viewer) -> usize {
        match viewer {
            Viewer::Seat(s) => idx(s),
            Viewer::Spectator => 2,
        }
    }
}

/// A viewer's last read: what its state was made of, and, once read twice, the state.
struct Read {
    key: ReadKey,
    state: Option<Arc<SharedState>>,
}

/// What a started game's state for one viewer is made of (see `GameActor::read_key`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReadKey {
    seq: u64,
    /// The head's first 64 bits.
    head: u64,
    /// The seat's held choice was lost to a restart (the state says so).
    lost: bool,
    /// The choice the hub keeps for the seat (the seat's own view shows it).
    choice: Option<&'static str>,
}

/// The listing entry of a game, from its spectator state.
pub fn summary(spectator: &GameState) -> GameSummary {
    Listed::of(spectator).summary(&spectator.game)
}
