//! Rooms: where a game's actor hands each accepted event's views to whoever watches.
//!
//! An actor computes the per-seat views of a game once per accepted event (X's view, O's
//! view, the spectator view: each only when someone watches it, see [`Rooms::watchers`])
//! and publishes them here exactly once; the room fans them out.
//! Subscribers (WebSocket sockets, among them an agent's, which its `game_wait` reads) live
//! in rooms, never in actors, so an actor can stop after its idle timeout whatever its
//! audience.
//!
//! [`Rooms`] is the interface; the WebSocket relay's rooms implement it through
//! [`crate::relay::HubRooms`] (across hub nodes, fed through Redis pub/sub by
//! `cluster/relay.rs`), and [`NoRooms`] drops everything. [`LocalRooms`] is the in-memory
//! implementation the hub's own tests subscribe through: one bounded broadcast channel per
//! game, created when the first subscriber arrives and dropped when the last one leaves. A
//! slow subscriber there loses old views (it sees `Lagged`), it never slows the actor down.
//!
//! What this module deliberately does not do: it computes no views and knows no game
//! rules; it never sees a raw board, only `GameState`s that were redacted for their seat.

use std::sync::Arc;

use dashmap::DashMap;
use games::key::GameIds;
use games::Seat;
use tokio::sync::broadcast;

use crate::game::SharedState;

pub use relay::Watchers;

/// The views of one game at one moment, each already redacted for its viewer; only those
/// somebody will read (a watcher, or the poster waiting for its verdict) are built.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Views {
    pub x: Option<Arc<SharedState>>,
    pub o: Option<Arc<SharedState>>,
    pub spectator: Option<Arc<SharedState>>,
}

impl Views {
    /// The view for a seat, or the spectator view for `None`, when it was built.
    pub fn for_seat(&self, seat: Option<Seat>) -> Option<&Arc<SharedState>> {
        match seat {
            Some(Seat::X) => self.x.as_ref(),
            Some(Seat::O) => self.o.as_ref(),
            None => self.spectator.as_ref(),
        }
    }
}

/// Why views are being published, so the relay can tag the mover's message with its `ref`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// An event was accepted; `seat` is the seat that posted it (if any).
    Accepted { seat: Option<Seat>, hash: String },
    /// A seat joined or the game's phase changed without an event (O paired), or a
    /// rebuilt actor tells its room where the game stands.
    Phase,
    /// A seat's rock-paper-scissors choice is held for its commit turn: only that seat's
    /// own view changed (it shows the choice), at the same seq.
    Held { seat: Seat },
    /// The host cancelled the game before anyone joined: it is gone, and there are no
    /// views to publish (see [`Publication::cancelled`]).
    Cancelled,
}

/// One publication: what happened and everyone's view of the game afterwards.
#[derive(Clone, Debug, PartialEq)]
pub struct Publication {
    /// The game's ids, shared with its actor.
    pub inbox: Arc<str>,
    pub game: Arc<str>,
    pub cause: Cause,
    pub views: Arc<Views>,
}

impl Publication {
    /// The news that a game was cancelled: it has no state left to show.
    pub fn cancelled(inbox: &str, game: &str) -> Publication {
        Publication {
            inbox: inbox.into(),
            game: game.into(),
            cause: Cause::Cancelled,
            views: Arc::default(),
        }
    }
}

/// The fan-out interface. Actors call [`Rooms::publish`] once per accepted event (and once
/// per held choice, with that seat's view alone); it must not block (the actor is
/// adjudicating other events meanwhile).
pub trait Rooms: Send + Sync {
    fn publish(&self, publication: Publication);

    /// Who watches the game now: the actor builds only their views (and the poster's).
    fn watchers(&self, inbox: &str, game: &str) -> Watchers;
}

/// How many publications a subscriber may fall behind before it loses the oldest.
const ROOM_BACKLOG: usize = 64;

/// The in-process rooms: a broadcast channel per subscribed game.
#[derive(Default)]
pub struct LocalRooms {
    rooms: DashMap<(String, String), broadcast::Sender<Publication>>,
}

impl LocalRooms {
    pub fn new() -> Self {
        Self::default()
    }

    /// Subscribes to one game's publications from now on.
    pub fn subscribe(&self, inbox: &str, game: &str) -> broadcast::Receiver<Publication> {
        self.rooms
            .entry((inbox.to_string(), game.to_string()))
            .or_insert_with(|| broadcast::channel(ROOM_BACKLOG).0)
            .subscribe()
    }

    /// How many games currently have a room (at least one subscriber since the last
    /// publication).
    pub fn len(&self) -> usize {
        self.rooms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rooms.is_empty()
    }
}

impl Rooms for LocalRooms {
    fn publish(&self, publication: Publication) {
        let (inbox, game) = (publication.inbox.clone(), publication.game.clone());
        let key = (&*inbox, &*game);
        let Some(sender) = self.rooms.get(&key as &dyn GameIds).map(|s| s.clone()) else {
            return;
        };
        if sender.send(publication).is_err() {
            // Nobody listens any more: drop the room, unless a subscriber arrived between
            // the send and now.
            self.rooms
                .remove_if(&key as &dyn GameIds, |_, s| s.receiver_count() == 0);
        }
    }

    /// A subscriber here takes every viewer's publication.
    fn watchers(&self, inbox: &str, game: &str) -> Watchers {
        if self.rooms.contains_key(&(inbox, game) as &dyn GameIds) {
            Watchers::ALL
        } else {
            Watchers::default()
        }
    }
}

/// Rooms that drop everything: for a hub with no relay and no subscribers.
#[derive(Debug, Default)]
pub struct NoRooms;

impl Rooms for NoRooms {
    fn publish(&self, _publication: Publication) {}

    fn watchers(&self, _inbox: &str, _game: &str) -> Watchers {
        Watchers::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::game::{GameState, Phase};

    fn state(seat: Option<Seat>) -> GameState {
        GameState {
            inbox: "i".into(),
            game: "g".into(),
            seat,
            phase: Phase::Waiting,
            protocol: None,
            protocol_id: None,
            rules: None,
            signed: false,
            keys: None,
            seq: None,
            head: None,
            result: None,
            view: None,
            board: String::new(),
            notice: None,
        }
    }

    fn publication(game: &str) -> Publication {
        Publication {
            inbox: "i".into(),
            game: game.into(),
            cause: Cause::Phase,
            views: Arc::new(Views {
                x: Some(SharedState::new(state(Some(Seat::X)))),
                o: Some(SharedState::new(state(Some(Seat::O)))),
                spectator: Some(SharedState::new(state(None))),
            }),
        }
    }

    #[test]
    fn subscribers_get_their_game_only_and_empty_rooms_are_dropped() {
        let rooms = LocalRooms::new();
        rooms.publish(publication("g"));
        assert!(rooms.is_empty(), "nobody listens: no room");
        let mut rx = rooms.subscribe("i", "g");
        rooms.publish(publication("other"));
        rooms.publish(publication("g"));
        let got = rx.try_recv().expect("one publication");
        assert_eq!(&*got.game, "g");
        let seat_of = |seat| got.views.for_seat(seat).map(|s| s.seat);
        assert_eq!(seat_of(Some(Seat::O)), Some(Some(Seat::O)));
        assert_eq!(seat_of(None), Some(None));
        assert!(rx.try_recv().is_err());
        drop(rx);
        rooms.publish(publication("g"));
        assert!(
            rooms.is_empty(),
            "the last subscriber left: the room is gone"
        );
    }
}
