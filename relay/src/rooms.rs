//! Rooms: who watches which game, and the fan-out of each publication to them.
//!
//! A room is keyed by (inbox, game) and exists while at least one socket watches the game.
//! The hub's actor for the game publishes each accepted event (and each phase change, such
//! as O pairing, and each held rock-paper-scissors choice) once, as a [`Delivery`] holding
//! the finished frames (X's, O's and the spectator's view, those someone watches); the room
//! hands the same `Arc` to every subscriber, each of which picks its own viewer's frame. Nothing is serialized or copied per socket.
//!
//! Every subscriber has a bounded queue ([`ROOM_QUEUE`]). Publishing never waits: a
//! subscriber whose queue is full is removed from the room on the spot, and its session,
//! seeing its queue closed, drops the connection. A slow or dead client thus costs its own
//! connection and never delays the actor, the room, or anyone else's game.
//!
//! The queue is a `Mailbox` of this module's own rather than a `tokio::sync::mpsc`
//! channel: a bounded tokio channel allocates its first 32-slot block and its semaphore's
//! state up front, about 850 bytes per subscriber, two per open game, where a mailbox is
//! about 100 bytes and grows only while publications wait.
//!
//! What rooms do not do: keep history (a subscriber asks the service for the current state
//! when it joins) or decide who may watch (the session checked the seat before joining).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use dashmap::DashMap;
use games::key::GameIds;
use games::Seat;

use crate::wire::client_out::StateFrame;

/// How many publications a subscriber may have waiting before it is dropped as too slow.
pub const ROOM_QUEUE: usize = 32;

/// The views of a game at one moment, each a finished frame: only those of viewers who
/// watch the game (see [`Rooms::watchers`]), so nobody's view is encoded for nobody.
#[derive(Clone, Debug, Default)]
pub struct Views {
    pub x: Option<StateFrame>,
    pub o: Option<StateFrame>,
    pub spectator: Option<StateFrame>,
}

impl Views {
    pub fn for_seat(&self, seat: Option<Seat>) -> Option<&StateFrame> {
        match seat {
            Some(Seat::X) => self.x.as_ref(),
            Some(Seat::O) => self.o.as_ref(),
            None => self.spectator.as_ref(),
        }
    }
}

/// Which viewers of a game have a socket in its room: X's seat, O's seat, spectators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watchers {
    pub x: bool,
    pub o: bool,
    pub spectator: bool,
}

impl Watchers {
    /// Every viewer (for a publisher that cannot tell).
    pub const ALL: Watchers = Watchers {
        x: true,
        o: true,
        spectator: true,
    };

    /// True when `viewer` (a seat, or `None` for a spectator) watches.
    pub fn watches(&self, viewer: Option<Seat>) -> bool {
        match viewer {
            Some(Seat::X) => self.x,
            Some(Seat::O) => self.o,
            None => self.spectator,
        }
    }

    /// True when anyone watches.
    pub fn any(&self) -> bool {
        self.x || self.o || self.spectator
    }

    fn add(&mut self, viewer: Option<Seat>) {
        match viewer {
            Some(Seat::X) => self.x = true,
            Some(Seat::O) => self.o = true,
            None => self.spectator = true,
        }
    }
}

/// Why a publication happened, so a session can recognise its own seat's moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// An event was accepted; `seat` is the seat that posted it, if any.
    Accepted { seat: Option<Seat> },
    /// A phase change without an event (O paired).
    Phase,
    /// A seat's rock-paper-scissors choice is held for its commit turn: its own view, the
    /// only one published, shows the choice at the seq it already had.
    Held { seat: Seat },
    /// The host cancelled the game before anyone joined: it is gone, and its publication
    /// carries no views. Its sockets are told, and stop watching it.
    Cancelled,
}

/// One publication of a game, shared by every subscriber.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub cause: Cause,
    pub views: Views,
}

type Key = (Box<str>, Box<str>);

struct Subscriber {
    id: u64,
    viewer: Option<Seat>,
    mailbox: Arc<Mailbox>,
}

/// One subscriber's queue of publications: the room puts, the subscription takes.
#[derive(Default)]
struct Mailbox(Mutex<Queue>);

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Arc<Delivery>>,
    /// Set when the subscriber fell [`ROOM_QUEUE`] behind: it gets what waits, then `None`.
    closed: bool,
    /// The subscription's task, parked until a publication arrives.
    waker: Option<Waker>,
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Nothing panics while holding the lock; should something, the queue is still whole.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `delivery` without waiting; false (and closed from now on) when full.
    fn put(&self, delivery: &Arc<Delivery>) -> bool {
        let mut queue = self.lock();
        let kept = !queue.closed && queue.waiting.len() < ROOM_QUEUE;
        if kept {
            queue.waiting.push_back(delivery.clone());
        } else {
            queue.closed = true;
        }
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
        kept
    }

    async fn take(&self) -> Option<Arc<Delivery>> {
        poll_fn(|cx| {
            let mut queue = self.lock();
            if let Some(delivery) = queue.waiting.pop_front() {
                return Poll::Ready(Some(delivery));
            }
            if queue.closed {
                return Poll::Ready(None);
            }
            match &mut queue.waker {
                Some(waker) => waker.clone_from(cx.waker()),
                none => *none = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }
}

#[derive(Default)]
struct Inner {
    rooms: DashMap<Key, Vec<Subscriber>>,
    next_id: AtomicU64,
}

/// Every room of this relay. Cheap to clone; every clone is the same rooms.
#[derive(Clone, Default)]
pub struct Rooms {
    inner: Arc<Inner>,
}

fn key(inbox: &str, game: &str) -> Key {
    (inbox.into(), game.into())
}

impl Rooms {
    pub fn new() -> Rooms {
        Rooms::default()
    }

    /// Joins a game's room from now on as `viewer` (a seat, or `None` for a spectator).
    /// Leaving is dropping the [`Subscription`].
    pub fn subscribe(&self, inbox: &str, game: &str, viewer: Option<Seat>) -> Subscription {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let mailbox = Arc::new(Mailbox::default());
        self.inner
            .rooms
            .entry(key(inbox, game))
            .or_default()
            .push(Subscriber {
                id,
                viewer,
                mailbox: mailbox.clone(),
            });
        Subscription {
            rooms: self.clone(),
            key: key(inbox, game),
            id,
            mailbox,
        }
    }

    /// True when someone watches the game, so a publisher can skip encoding views nobody
    /// would read.
    pub fn is_watched(&self, inbox: &str, game: &str) -> bool {
        self.inner
            .rooms
            .contains_key(&(inbox, game) as &dyn GameIds)
    }

    /// Which viewers watch the game, so a publisher encodes only their views.
    pub fn watchers(&self, inbox: &str, game: &str) -> Watchers {
        let mut watchers = Watchers::default();
        if let Some(room) = self.inner.rooms.get(&(inbox, game) as &dyn GameIds) {
            for sub in room.iter() {
                watchers.add(sub.viewer);
            }
        }
        watchers
    }

    /// How many publications of the game wait in its subscribers' queues, not yet taken:
    /// zero once every socket watching it has taken all that was published. (A subscriber
    /// handles what it takes at once, so a test can wait on this, instead of sleeping, to
    /// know that its sockets have seen a publication.)
    pub fn unread(&self, inbox: &str, game: &str) -> usize {
        self.inner
            .rooms
            .get(&(inbox, game) as &dyn GameIds)
            .map_or(0, |room| {
                room.iter()
                    .map(|sub| sub.mailbox.lock().waiting.len())
                    .sum()
            })
    }

    /// Hands a publication to every subscriber of the game without waiting, dropping those
    /// whose queue is full. Returns how many received it.
    pub fn publish(&self, inbox: &str, game: &str, delivery: Delivery) -> usize {
        let key: &dyn GameIds = &(inbox, game);
        let delivery = Arc::new(delivery);
        let mut dropped = Vec::new();
        let mut delivered = 0;
        if let Some(room) = self.inner.rooms.get(key) {
            for sub in room.iter() {
                if sub.mailbox.put(&delivery) {
                    delivered += 1;
                } else {
                    dropped.push(sub.id);
                }
            }
        }
        // The read guard is gone here; taking the write lock under it would deadlock.
        if !dropped.is_empty() {
            self.remove(key, |sub| dropped.contains(&sub.id));
        }
        delivered
    }

    /// The (inbox, game) of every room, e.g. to send each its current state again.
    pub fn games(&self) -> Vec<(String, String)> {
        self.inner
            .rooms
            .iter()
            .map(|r| (r.key().0.to_string(), r.key().1.to_string()))
            .collect()
    }

    /// How many games have a room.
    pub fn len(&self) -> usize {
        self.inner.rooms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.rooms.is_empty()
    }

    fn remove(&self, key: &dyn GameIds, gone: impl Fn(&Subscriber) -> bool) {
        if let Some(mut room) = self.inner.rooms.get_mut(key) {
            room.retain(|sub| !gone(sub));
        }
        self.inner.rooms.remove_if(key, |_, room| room.is_empty());
    }
}

/// A seat in a room: publications arrive on [`Subscription::recv`]; dropping it leaves.
pub struct Subscription {
    rooms: Rooms,
    key: Key,
    id: u64,
    mailbox: Arc<Mailbox>,
}

impl Subscription {
    /// The next publication, or `None` once the room dropped this subscriber as too slow.
    pub async fn recv(&mut self) -> Option<Arc<Delivery>> {
        self.mailbox.take().await
    }

    /// The (inbox, game) this subscription watches.
    pub fn game(&self) -> (&str, &str) {
        (&self.key.0, &self.key.1)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let id = self.id;
        self.rooms.remove(&self.key, |sub| sub.id == id);
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("inbox", &self.key.0)
            .field("game", &self.key.1)
            .field("id", &self.id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delivery(seq: u64) -> Delivery {
        let frame = |who: &str| {
            StateFrame::encode(Some(seq), &json!({"seq": seq, "who": who})).expect("an object")
        };
        Delivery {
            cause: Cause::Accepted {
                seat: Some(Seat::X),
            },
            views: Views {
                x: Some(frame("X")),
                o: Some(frame("O")),
                spectator: Some(frame("spectator")),
            },
        }
    }

    #[tokio::test]
    async fn a_publication_reaches_every_subscriber_of_its_game_only() {
        let rooms = Rooms::new();
        let mut a = rooms.subscribe("i", "g", Some(Seat::X));
        let mut b = rooms.subscribe("i", "g", None);
        let other = rooms.subscribe("i", "h", Some(Seat::O));
        assert!(rooms.is_watched("i", "g"));
        assert!(!rooms.is_watched("j", "g"));
        let watchers = rooms.watchers("i", "g");
        assert_eq!(
            (watchers.x, watchers.o, watchers.spectator),
            (true, false, true)
        );
        assert!(!rooms.watchers("j", "g").any());
        assert_eq!(rooms.publish("i", "g", delivery(1)), 2);
        assert_eq!((rooms.unread("i", "g"), rooms.unread("i", "h")), (2, 0));
        for (sub, unread) in [(&mut a, 1), (&mut b, 0)] {
            let got = sub.recv().await.expect("a delivery");
            assert_eq!(
                got.views.for_seat(Some(Seat::O)).and_then(StateFrame::seq),
                Some(1)
            );
            assert_eq!(rooms.unread("i", "g"), unread);
        }
        assert!(other.mailbox.lock().waiting.is_empty());
        // Both subscribers share one delivery: nothing was copied per socket.
        rooms.publish("i", "g", delivery(2));
        let (x, y) = (a.recv().await, b.recv().await);
        assert!(Arc::ptr_eq(
            &x.expect("a delivery"),
            &y.expect("a delivery")
        ));
    }

    #[tokio::test]
    async fn leaving_the_last_seat_removes_the_room() {
        let rooms = Rooms::new();
        let a = rooms.subscribe("i", "g", Some(Seat::X));
        let b = rooms.subscribe("i", "g", Some(Seat::O));
        drop(a);
        assert_eq!(rooms.len(), 1);
        drop(b);
        assert!(rooms.is_empty());
        assert_eq!(rooms.publish("i", "g", delivery(1)), 0);
    }

    #[tokio::test]
    async fn a_waiting_subscriber_wakes_for_each_publication_and_ends_when_dropped() {
        let rooms = Rooms::new();
        let mut sub = rooms.subscribe("i", "g", Some(Seat::X));
        let waiter = tokio::spawn(async move {
            let mut seqs = Vec::new();
            while let Some(d) = sub.recv().await {
                seqs.push(d.views.for_seat(Some(Seat::X)).and_then(StateFrame::seq));
                if seqs.len() == 3 {
                    break;
                }
            }
            (seqs, sub)
        });
        // Published while the subscriber waits, from another task: each one wakes it.
        for seq in 1..=3 {
            tokio::task::yield_now().await;
            assert_eq!(rooms.publish("i", "g", delivery(seq)), 1);
        }
        let (seqs, sub) = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the subscriber woke up")
            .expect("the task ran");
        assert_eq!(seqs, [Some(1), Some(2), Some(3)]);
        drop(sub);
        assert!(rooms.is_empty());
    }

    #[tokio::test]
    async fn a_subscriber_that_does_not_keep_up_is_dropped_without_delaying_others() {
        let rooms = Rooms::new();
        let mut slow = rooms.subscribe("i", "g", Some(Seat::X));
        let mut quick = rooms.subscribe("i", "g", Some(Seat::O));
        for seq in 0..(ROOM_QUEUE as u64 + 5) {
            rooms.publish("i", "g", delivery(seq));
            assert!(quick.recv().await.is_some());
        }
        // The slow one got its queue's worth, then its queue was closed.
        let mut got = 0;
        while slow.recv().await.is_some() {
            got += 1;
        }
        assert_eq!(got, ROOM_QUEUE);
        assert_eq!(rooms.publish("i", "g", delivery(99)), 1);
        assert!(quick.recv().await.is_some());
    }
}
