//! A game's desk: what its actor lets a poster's thread read and write without a message.
//!
//! A hub-held seat's move is drafted from the chain's head (seq + 1, prevHash = head),
//! signed with the seat's key when the game is signed, and then appended like any post.
//! Asking the actor for that draft costs two thread hand-offs a move (to the actor's thread
//! and back) before the append even starts. So each resident actor keeps on its desk the
//! head it last judged ([`Tip`]), the seat keys it has derived, and the drafts it expects
//! back from the inbox; the facade drafts a move there, on the thread that read it, and
//! leaves the draft on the desk so that when the record comes back the actor takes it
//! byte for byte instead of parsing, hashing and verifying it again.
//!
//! The draft is exactly the one the actor would have made: the same head, the same key,
//! the same bytes. The tip is replaced before the actor publishes the event that moved it,
//! so a client that saw a state and answers it drafts on that state's head. A draft on a
//! head that moved in between (two writers racing) is refused by the referee with
//! `stale_seq`, as it always was: the desk decides nothing.
//!
//! What it deliberately does not do: serve a game that is not resident or not yet rebuilt
//! (there is no tip; the caller asks the actor, which rebuilds), or a cluster's games,
//! whose actors may be copies of a game adjudicated elsewhere (the tip stays empty).

use std::collections::VecDeque;

use games::{Event, Seat};
use parking_lot::Mutex;

use super::writer::{self, Draft, Posting, SeatKeys};

/// How many drafts a desk keeps until they come back from the inbox.
const MAX_DRAFTS: usize = 8;

/// The chain's head as its actor last judged it.
#[derive(Clone, Debug)]
pub struct Tip {
    pub seq: u64,
    pub head: String,
    pub signed: bool,
}

#[derive(Default)]
pub struct Desk(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    /// `None` until the actor has rebuilt a started chain, and in a cluster.
    tip: Option<Tip>,
    /// The hub-held seats' signing keys, derived once per actor life.
    keys: SeatKeys,
    /// Drafts not yet back from the inbox, oldest first.
    drafts: VecDeque<Draft>,
}

impl Desk {
    pub fn tip(&self) -> Option<Tip> {
        self.0.lock().tip.clone()
    }

    /// Replaced by the actor after every judged event (`None`: nothing to draft on).
    pub fn set_tip(&self, tip: Option<Tip>) {
        self.0.lock().tip = tip;
    }

    /// Signs `event` with its player's hub-held key when `signed`, serializes it, and keeps
    /// the draft until it comes back; returns what appending it takes.
    pub fn draft(&self, secret: &[u8], inbox: &str, event: Event, signed: bool) -> Posting {
        let key = signed.then(|| {
            self.0
                .lock()
                .keys
                .get(secret, inbox, &event.game, event.player)
        });
        // Hashed, signed and serialized outside the lock: the actor takes it to judge.
        let draft = writer::finish_with(key.as_deref(), event);
        let posting = draft.posting();
        let mut inner = self.0.lock();
        if inner.drafts.len() == MAX_DRAFTS {
            inner.drafts.pop_front();
        }
        inner.drafts.push_back(draft);
        posting
    }

    /// The draft whose bytes and seat are these, if this desk made it.
    pub fn take(&self, raw: &[u8], seat: Option<Seat>) -> Option<Draft> {
        let mut inner = self.0.lock();
        let i = inner
            .drafts
            .iter()
            .position(|d| d.raw == raw && Some(d.seat) == seat)?;
        let draft = inner.drafts.remove(i);
        if inner.drafts.is_empty() {
            // Most games have one draft in flight at a time: give the room back rather
            // than keep it for every resident game.
            inner.drafts = VecDeque::new();
        }
        draft
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef-hub-secret";

    fn move_on(tip: &Tip, seat: Seat, col: i64) -> Event {
        writer::next_event("g1", tip.seq, &tip.head, seat, Some(json!({"col": col})))
    }

    #[test]
    fn a_draft_is_the_actors_own_and_comes_back_once() {
        let desk = Desk::default();
        assert!(desk.tip().is_none(), "nothing to draft on before a rebuild");
        let tip = Tip {
            seq: 4,
            head: "a".repeat(64),
            signed: true,
        };
        desk.set_tip(Some(tip.clone()));
        let posting = desk.draft(SECRET, "lobby", move_on(&tip, Seat::O, 3), true);
        // Byte for byte what the actor's own path (a fresh key, the same event) makes.
        let fresh = writer::finish(SECRET, "lobby", move_on(&tip, Seat::O, 3), true);
        assert_eq!(posting.raw, fresh.raw);
        assert_eq!(posting.hash, fresh.prepared.hash);
        // Another seat's bytes, or other bytes, are not this draft.
        assert!(desk.take(&posting.raw, Some(Seat::X)).is_none());
        assert!(desk.take(b"{}", Some(Seat::O)).is_none());
        let back = desk.take(&posting.raw, Some(Seat::O)).expect("the draft");
        assert_eq!(back.event.seq, 5);
        assert!(
            desk.take(&posting.raw, Some(Seat::O)).is_none(),
            "taken once"
        );
    }

    #[test]
    fn a_desk_keeps_only_its_newest_drafts() {
        let desk = Desk::default();
        let tip = Tip {
            seq: 1,
            head: "b".repeat(64),
            signed: false,
        };
        let postings: Vec<Posting> = (0..MAX_DRAFTS as i64 + 1)
            .map(|col| desk.draft(SECRET, "lobby", move_on(&tip, Seat::X, col), false))
            .collect();
        assert!(
            desk.take(&postings[0].raw, Some(Seat::X)).is_none(),
            "the oldest went"
        );
        for p in &postings[1..] {
            assert!(desk.take(&p.raw, Some(Seat::X)).is_some());
        }
    }
}
