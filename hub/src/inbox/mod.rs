//! The inbox: the hub's single sequencer and store of posted events.
//!
//! Every event a client posts (or the hub writes for a seat) is appended here *before* any
//! game logic looks at it ("append first, then adjudicate", DESIGN.md section 6). The inbox
//! gives each event a [`Capture`] — its shard and its position in that shard — and answers
//! only once the event is durable, so an acknowledged capture survives a crash. Shard
//! consumers then read each shard in order and hand every record to its game's actor; the
//! verdict the actor reaches is recorded beside the capture with [`Inbox::put_verdict`].
//!
//! The store is split into N shards shared by all inboxes. An event's shard is the first
//! 8 bytes of SHA-256 of `inbox|game`, big-endian, mod N ([`shard_for`]); N is fixed when a
//! store is first created and stored in it, so a game never moves between shards.
//!
//! [`Inbox`] is an object-safe async trait used as `Arc<dyn Inbox>`. The embedded backend
//! ([`embedded`]) keeps a checksummed append-only log on local disk; a Redis Streams
//! backend (one stream per shard) fits the same trait. Callers never see how positions are
//! made: a capture's text `shard:pos` and a listing cursor are opaque to clients.
//!
//! What the inbox deliberately does not do: it never parses or judges an event. It stores
//! the bytes it is given, under the inbox, game and seat it is told, and remembers the
//! verdict it is handed. Which events are legal is the games crate's business, and which
//! writer may post to a game is the engine's.

mod codec;
pub mod embedded;
mod index;
pub mod log;
pub mod redis;
#[cfg(test)]
mod redis_tests;
mod writer;

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use games::{Reason, Seat};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

/// Where one event sits in the inbox: its shard and its position in that shard.
///
/// Positions start at 1 and grow by one per event of the shard, with no gaps, so 0 can mean
/// "nothing yet" in a high-water mark. The text form is `shard:pos`; clients treat it as
/// opaque.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Capture {
    pub shard: u32,
    pub pos: u64,
}

impl fmt::Display for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.shard, self.pos)
    }
}

/// The text of a capture could not be read as `shard:pos`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a capture (expected shard:pos)")]
pub struct BadCapture;

impl FromStr for Capture {
    type Err = BadCapture;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (shard, pos) = s.split_once(':').ok_or(BadCapture)?;
        // Only plain decimal digits: `u64::from_str` would also take a leading `+`, and a
        // capture must have exactly one spelling.
        let digits =
            |t: &str| !t.is_empty() && t.len() <= 20 && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(shard) || !digits(pos) {
            return Err(BadCapture);
        }
        Ok(Capture {
            shard: shard.parse().map_err(|_| BadCapture)?,
            pos: pos.parse().map_err(|_| BadCapture)?,
        })
    }
}

/// The shard of a game: the first 8 bytes of SHA-256 of `inbox|game`, as a big-endian
/// integer, mod `shards`. Every backend and every hub node must agree on it.
pub fn shard_for(inbox: &str, game: &str, shards: u32) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(inbox.as_bytes());
    hasher.update(b"|");
    hasher.update(game.as_bytes());
    let digest = hasher.finalize();
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    // `shards.max(1)` keeps a misconfigured zero from dividing by zero; stores refuse 0.
    (u64::from_be_bytes(head) % u64::from(shards.max(1))) as u32
}

/// One stored event: where it is, whose it is, and the bytes exactly as they were posted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub capture: Capture,
    pub inbox: String,
    pub game: String,
    /// The seat whose token posted the event, or `None` for an anonymous post. Events the
    /// hub writes for a hub-held seat carry that seat.
    pub seat: Option<Seat>,
    /// The event's JSON, exactly as the hub will re-read it.
    pub raw: Bytes,
    /// When the inbox sequenced it, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The same moment on this process's monotonic clock, for a record handed from the
    /// embedded inbox's batch write to its consumer in memory; `None` for one read back
    /// from the log or from Redis (written by another node, or before a restart). Never
    /// stored: it only gives [`Record::age`] a finer measure than `at_ms`'s milliseconds.
    pub written: Option<Instant>,
}

impl Record {
    /// How long ago the inbox stamped this record: to the nanosecond when this process
    /// wrote it ([`Record::written`]), else in whole milliseconds of the wall clock from
    /// `at_ms` (with Redis, the appending node's clock).
    pub fn age(&self) -> Duration {
        match self.written {
            Some(written) => written.elapsed(),
            None => Duration::from_millis(crate::clock::now_ms().saturating_sub(self.at_ms)),
        }
    }
}

/// The referee's verdict on one capture, as recorded beside it.
///
/// Verdicts are recomputable from the chain, so backends may make them durable lazily; a
/// capture without a stored verdict is `pending` to clients. `held` is not a verdict of a
/// capture (a held choice is never appended), so it has no variant here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredVerdict {
    Accepted {
        hash: String,
    },
    Rejected {
        reason: Reason,
        detail: Option<String>,
    },
    Skipped,
}

/// One capture of a listing, with its verdict when one has been recorded.
pub type Listed = (Record, Option<StoredVerdict>);

/// One page of an inbox listing, in inbox order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<Listed>,
    /// Pass this back as `after` to read the next page; `None` when this page reached the
    /// end of the listing as it stood.
    pub next: Option<String>,
}

/// One game of an inbox, as the inbox knows it (by its captures, not by its chain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GameEntry {
    pub game: String,
    /// The game's place in its inbox's list of games: 0 for the inbox's first game, one
    /// more for each game after it. Stable, so it serves as a listing cursor.
    pub order: u64,
    /// The game's first capture.
    pub first: Capture,
    /// How many captures the game has, whatever their verdicts.
    pub captures: u64,
}

/// Infrastructure failures of a store. Rule violations never show up here: the inbox does
/// not judge events.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot take writes (a failed fsync, a lost connection, shutting down).
    /// HTTP answers 503 `unavailable`.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A listing cursor that this store did not hand out. HTTP answers 400.
    #[error("bad cursor")]
    BadCursor,
    /// A shard number at or beyond the store's shard count.
    #[error("no shard {0}")]
    NoShard(u32),
    /// Stored data that cannot be read back (not a torn tail, which is repaired at open).
    #[error("store corrupt: {0}")]
    Corrupt(String),
    #[error("store i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// The hub's sequencer and event store. See the module documentation.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// The store's shard count, fixed when it was created.
    fn shards(&self) -> u32;

    /// The shard that `inbox|game` belongs to in this store.
    fn shard_of(&self, inbox: &str, game: &str) -> u32 {
        shard_for(inbox, game, self.shards())
    }

    /// Appends one event and returns its capture once it is durable. Concurrent appends
    /// share one write and one fsync.
    async fn append(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
        raw: Bytes,
    ) -> Result<Capture, StoreError>;

    /// Up to `max` durable records of `shard` in order, starting at position `from`
    /// (inclusive; positions start at 1). Empty when nothing that far is durable yet.
    async fn read_shard(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, StoreError>;

    /// The durable high-water mark of `shard` (its last durable position, 0 when empty),
    /// updated whenever more of the shard becomes durable. Consumers wait on it for new
    /// records.
    fn watch_shard(&self, shard: u32) -> Result<watch::Receiver<u64>, StoreError>;

    /// Every record of one game in inbox order (a per-game index), so its actor can be
    /// rebuilt without reading the whole shard.
    async fn game_records(&self, inbox: &str, game: &str) -> Result<Vec<Record>, StoreError>;

    /// The records of one game after the first `skip` of its per-game index, in order (a
    /// reader that follows a game catches up from where it stopped).
    async fn game_records_from(
        &self,
        inbox: &str,
        game: &str,
        skip: usize,
    ) -> Result<Vec<Record>, StoreError> {
        let mut all = self.game_records(inbox, game).await?;
        Ok(all.split_off(skip.min(all.len())))
    }

    /// The verdicts recorded for several captures, in the same order.
    async fn verdicts(
        &self,
        captures: &[Capture],
    ) -> Result<Vec<Option<StoredVerdict>>, StoreError> {
        let mut out = Vec::with_capacity(captures.len());
        for c in captures {
            out.push(self.verdict(*c).await?);
        }
        Ok(out)
    }

    /// Captures of an inbox in inbox order, optionally of one game only, after a cursor
    /// from an earlier page, at most `limit` of them.
    async fn list(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError>;

    /// The games of an inbox, newest (by first capture) first, at most `limit`; with
    /// `before`, only games whose [`GameEntry::order`] is below it (the next page).
    async fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<GameEntry>, StoreError>;

    /// One capture of `inbox` with its verdict; `None` when the capture does not exist or
    /// belongs to another inbox.
    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError>;

    /// Records the verdict of a capture. It is visible to readers at once and made durable
    /// lazily (with the next batch of appends, or by [`Inbox::sync`]).
    async fn put_verdict(&self, capture: Capture, verdict: StoredVerdict)
        -> Result<(), StoreError>;

    /// The verdict recorded for a capture, if any.
    async fn verdict(&self, capture: Capture) -> Result<Option<StoredVerdict>, StoreError>;

    /// How many captures a game has, whatever their verdicts (for the per-game cap).
    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError>;

    /// Makes everything recorded so far durable, verdicts included (graceful shutdown).
    async fn sync(&self) -> Result<(), StoreError>;

    /// False when the store cannot take writes; the hub then answers 503 and `/readyz` fails.
    fn ready(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_text_round_trips() {
        let c = Capture { shard: 3, pos: 42 };
        assert_eq!(c.to_string(), "3:42");
        assert_eq!("3:42".parse::<Capture>(), Ok(c));
    }

    #[test]
    fn capture_text_has_one_spelling() {
        for bad in [
            "",
            "3",
            "3:",
            ":4",
            "+3:4",
            "3:+4",
            "3:4:5",
            "a:1",
            "3: 4",
            "99999999999:1",
        ] {
            assert_eq!(bad.parse::<Capture>(), Err(BadCapture), "{bad:?}");
        }
    }

    #[test]
    fn shard_is_stable_and_in_range() {
        // Pinned against an independent SHA-256 computation, so every node and backend
        // keeps agreeing on where a game lives.
        assert_eq!(shard_for("default", "g1", 8), 5);
        assert_eq!(shard_for("default", "g1", 5), 3);
        assert_eq!(shard_for("box", "game-7", 8), 3);
        assert_eq!(shard_for("box", "game-7", 5), 2);
        for i in 0..200 {
            assert!(shard_for("inbox", &format!("game-{i}"), 8) < 8);
        }
        assert_eq!(shard_for("a", "b", 1), 0);
    }
}
