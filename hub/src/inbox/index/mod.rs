//! The embedded inbox's in-memory indexes, rebuilt from the log at every open.
//!
//! Per shard, a vector of slots indexed by position: where the event's frame lies on disk,
//! its place in the store's global append order, and its verdict. Per inbox, every capture
//! in append order, each linked to the next capture of its game, and its games with their
//! first and last captures, so a listing and an actor rebuild touch only what they return.
//! Raw events stay on disk (the page cache keeps the recent ones warm). An event costs 72
//! bytes (a 56-byte slot and a 16-byte link) while it is recent, and a game about 90 (its
//! record with its id, and its place in the table that finds it by id) while it is among
//! its inbox's newest. Lists grow by fixed chunks, so no push copies a long list.
//!
//! Every event and game the store ever held is indexed, so old ones would be most of what
//! a finished game leaves in memory. With a [`Spill`], the slot, link and game lists keep
//! only their newest [`HOT`](spill::HOT) chunks in memory: older chunks, which are rarely read and
//! almost never changed, are written to an unlinked file in the data directory and read
//! back with one `pread` per record, or per run of records for a listing (an old game
//! keeps its place and its id's hash in memory, in the table that finds it by id, so
//! that the table can grow without reading it back). The file is a cache of what
//! the log holds, rebuilt at every open like the rest of the index, so it is never synced
//! and needs no recovery. A failed spill read or write is an error the caller sees
//! ([`IndexError::Spill`], a 503 at the HTTP edge), never an answer with a record missing;
//! an event whose links cannot be written is not indexed at all, and the store stops
//! taking writes until it is reopened.
//!
//! What it deliberately does not do: any locking, or any I/O but the spill file's. The
//! embedded backend holds it behind one lock, and only the writer adds to it, after the
//! events are durable.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::io;

use games::{crypto, Reason};
use hashbrown::{DefaultHashBuilder, HashTable};

use super::log::FramePos;
use super::{Capture, GameEntry, StoreError, StoredVerdict};

mod spill;

pub use spill::Spill;
use spill::{word, Chunked, Record, MAX_RECORD};

/// Why the index cannot take an event or answer a question.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// An event that does not fit where it says it goes (a shard it does not have, a
    /// position out of order, a position too large to pack).
    #[error("{0}")]
    OutOfStep(String),
    /// The spill file failed: what it holds cannot be read or changed now.
    #[error("the index's spill file: {0}")]
    Spill(#[from] io::Error),
}

impl From<IndexError> for StoreError {
    fn from(err: IndexError) -> Self {
        match err {
            IndexError::OutOfStep(what) => StoreError::Corrupt(what),
            IndexError::Spill(e) => StoreError::Io(e),
        }
    }
}

/// A verdict stored compactly: an accepted hash as its 32 bytes, not 64 characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compact {
    Accepted([u8; 32]),
    /// An accepted hash that is not 64 lowercase hex characters, kept as given.
    AcceptedText(Box<str>),
    Rejected(Reason, Option<Box<str>>),
    Skipped,
}

impl Compact {
    pub fn pack(verdict: &StoredVerdict) -> Compact {
        match verdict {
            StoredVerdict::Accepted { hash } => {
                let mut bytes = [0u8; 32];
                if crypto::from_lower_hex(hash, &mut bytes) {
                    Compact::Accepted(bytes)
                } else {
                    Compact::AcceptedText(hash.as_str().into())
                }
            }
            StoredVerdict::Rejected { reason, detail } => {
                Compact::Rejected(*reason, detail.as_deref().map(Into::into))
            }
            StoredVerdict::Skipped => Compact::Skipped,
        }
    }

    pub fn unpack(&self) -> StoredVerdict {
        match self {
            Compact::Accepted(bytes) => StoredVerdict::Accepted {
                hash: crypto::to_hex(bytes),
            },
            Compact::AcceptedText(hash) => StoredVerdict::Accepted {
                hash: hash.to_string(),
            },
            Compact::Rejected(reason, detail) => StoredVerdict::Rejected {
                reason: *reason,
                detail: detail.as_deref().map(str::to_string),
            },
            Compact::Skipped => StoredVerdict::Skipped,
        }
    }
}

/// One event of a shard, as readers get it.
#[derive(Clone, Debug)]
pub struct Slot {
    pub frame: FramePos,
    pub verdict: Option<Compact>,
}

/// How a verdict is kept in a [`Stored`] slot.
const NO_VERDICT: u8 = 0;
const ACCEPTED: u8 = 1;
/// An accepted hash kept as text, in [`Index::extras`].
const ACCEPTED_TEXT: u8 = 2;
const REJECTED: u8 = 3;
const SKIPPED: u8 = 4;

/// One event of a shard as the index keeps it: 56 bytes, where a [`Slot`] is 64. An
/// accepted hash is inline; what is rare and of any length (a rejection's detail, a hash
/// that is not 64 lowercase hex characters) lives in [`Index::extras`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stored {
    hash: [u8; 32],
    /// Place in the store's global append order: inbox order across shards.
    order: u64,
    segment: u32,
    /// Within its segment; inbox segments are at most 256 MiB and one frame.
    offset: u32,
    len: u32,
    tag: u8,
    /// A place in [`Reason::ALL`] when `tag` is [`REJECTED`].
    reason: u8,
}

impl Record for Stored {
    const SIZE: usize = 54;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hash);
        out.extend_from_slice(&self.order.to_le_bytes());
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&[self.tag, self.reason]);
    }

    fn take(bytes: &[u8]) -> Stored {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&bytes[..32]);
        Stored {
            hash,
            order: u64::from_le_bytes(word(&bytes[32..40])),
            segment: u32::from_le_bytes(word(&bytes[40..44])),
            offset: u32::from_le_bytes(word(&bytes[44..48])),
            len: u32::from_le_bytes(word(&bytes[48..52])),
            tag: bytes[52],
            reason: bytes[53],
        }
    }
}

// The spill file reads a record into a buffer of `MAX_RECORD` bytes.
const _: () =
    assert!(Stored::SIZE <= MAX_RECORD && Link::SIZE <= MAX_RECORD && GameRec::SIZE <= MAX_RECORD);

/// Slots per chunk of a shard's list. A slot is 56 bytes and changes only when its verdict
/// comes, within milliseconds, so a shard's hot chunks are kept at 56 KiB each rather
/// than 224: eight shards' two hot chunks each were 3.5 MiB of a hub's memory whatever
/// its load. An inbox's list of links keeps [`CHUNK`](spill::CHUNK): a link changes when its game's next
/// event comes, which can be seconds later.
#[cfg(not(test))]
const SLOT_CHUNK: usize = 1024;
#[cfg(test)]
const SLOT_CHUNK: usize = 16;

/// A capture in one word: the shard in the top 16 bits, the position below.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Packed(u64);

impl Record for Link {
    const SIZE: usize = 16;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.capture.0.to_le_bytes());
        out.extend_from_slice(&self.next.to_le_bytes());
    }

    fn take(bytes: &[u8]) -> Link {
        Link {
            capture: Packed(u64::from_le_bytes(word(&bytes[..8]))),
            next: u64::from_le_bytes(word(&bytes[8..16])),
        }
    }
}

impl Packed {
    const POS_BITS: u32 = 48;

    fn pack(capture: Capture) -> Option<Packed> {
        (capture.shard < 1 << 16 && capture.pos < 1 << Self::POS_BITS)
            .then(|| Packed(u64::from(capture.shard) << Self::POS_BITS | capture.pos))
    }

    fn unpack(self) -> Capture {
        Capture {
            shard: (self.0 >> Self::POS_BITS) as u32,
            pos: self.0 & ((1 << Self::POS_BITS) - 1),
        }
    }
}

/// No next capture in the game.
const END: u64 = u64::MAX;

/// One capture of an inbox: what it is, and where in the inbox's list the next capture
/// of its game is (a game's captures are a chain through the list, not a list of their
/// own per game).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Link {
    capture: Packed,
    next: u64,
}

/// One game of an inbox. Its place in [`InboxIndex::games`] is its [`GameEntry::order`].
/// Spilled like the other lists' elements, in [`GameRec::SIZE`] bytes: its id padded to
/// the longest a game id can be.
#[derive(Clone, Debug, PartialEq)]
struct GameRec {
    id: Box<str>,
    span: Span,
}

/// Where a game's captures lie: places in [`InboxIndex::all`] of its first and last,
/// and how many there are.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    first: u64,
    last: u64,
    captures: u64,
}

/// The longest game id (DESIGN.md: 1–128 characters); a record with a longer one, which
/// no post can carry, is never spilled.
const GAME_ID_MAX: usize = 128;

impl Record for GameRec {
    const SIZE: usize = 8 * 3 + 1 + GAME_ID_MAX;

    fn put(&self, out: &mut Vec<u8>) {
        let id = self.id.as_bytes();
        out.extend_from_slice(&self.span.first.to_le_bytes());
        out.extend_from_slice(&self.span.last.to_le_bytes());
        out.extend_from_slice(&self.span.captures.to_le_bytes());
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out.resize(out.len() + GAME_ID_MAX - id.len(), 0);
    }

    fn take(bytes: &[u8]) -> GameRec {
        let len = usize::from(bytes[24]).min(GAME_ID_MAX);
        GameRec {
            id: String::from_utf8_lossy(&bytes[25..25 + len]).into(),
            span: Span {
                first: u64::from_le_bytes(word(&bytes[..8])),
                last: u64::from_le_bytes(word(&bytes[8..16])),
                captures: u64::from_le_bytes(word(&bytes[16..24])),
            },
        }
    }

    fn spillable(&self) -> bool {
        self.id.len() <= GAME_ID_MAX
    }
}

#[derive(Default)]
struct InboxIndex {
    /// Every capture of the inbox, in append order.
    all: Chunked<Link>,
    /// Its games, by first capture, oldest first.
    games: Chunked<GameRec>,
    /// Each game's place in `games` and the hash of its id (kept once, in its
    /// [`GameRec`], which may be spilled: the hash is what the table grows by, and what
    /// spares a `pread` for every other game a probe meets).
    by_id: HashTable<(u64, u64)>,
}

impl InboxIndex {
    /// The place in `games` of the game whose id hashes to `hash`, and its span; an error
    /// when a spilled record that may be it cannot be read.
    fn game(&self, hash: u64, id: &str, spill: Option<&Spill>) -> io::Result<Option<(u64, Span)>> {
        let mut failed = None;
        let mut span = None;
        self.by_id.find(hash, |&(h, g)| {
            if h != hash || failed.is_some() {
                return false;
            }
            let found = match self.games.get(g as usize) {
                Some(rec) => (&*rec.id == id).then_some(rec.span),
                None => match self.games.fetch(g as usize, spill) {
                    Ok(rec) => rec.filter(|r| &*r.id == id).map(|r| r.span),
                    Err(e) => {
                        failed = Some(e);
                        None
                    }
                },
            };
            span = found.map(|s| (g, s));
            found.is_some()
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(span),
        }
    }

    /// The captures of one game, in inbox order, from its first; an error ends it.
    fn chain<'a>(
        &'a self,
        game: Span,
        spill: Option<&'a Spill>,
    ) -> impl Iterator<Item = io::Result<Capture>> + 'a {
        let mut next = Some(game.first);
        std::iter::from_fn(move || {
            let place = usize::try_from(next?).ok()?;
            match self.all.fetch(place, spill) {
                Ok(Some(link)) => {
                    next = Some(link.next);
                    Some(Ok(link.capture.unpack()))
                }
                Ok(None) => None,
                Err(e) => {
                    next = None;
                    Some(Err(e))
                }
            }
        })
    }
}

/// All indexes of one store: per shard, a slot for each position; per inbox, its
/// captures in append order and its games. About 72 bytes an event and 90 a game while
/// they are recent; with a [`Spill`], 16 bytes an old game (its place in the table that
/// finds it by id, with its id's hash) and nothing an old event.
pub struct Index {
    shards: Vec<Chunked<Stored, SLOT_CHUNK>>,
    inboxes: HashMap<String, InboxIndex>,
    /// Rejection details and hashes kept as text, by capture (rare).
    extras: HashMap<Capture, Box<str>>,
    hasher: DefaultHashBuilder,
    next_order: u64,
    /// Where old chunks go; `None` keeps everything in memory.
    spill: Option<Spill>,
}

impl Index {
    /// An index that keeps everything in memory.
    pub fn new(shards: u32) -> Index {
        Index {
            shards: (0..shards).map(|_| Chunked::default()).collect(),
            inboxes: HashMap::new(),
            extras: HashMap::new(),
            hasher: DefaultHashBuilder::default(),
            next_order: 0,
            spill: None,
        }
    }

    /// An index that writes old chunks of its lists to `spill`.
    pub fn spilling(shards: u32, spill: Spill) -> Index {
        Index {
            spill: Some(spill),
            ..Index::new(shards)
        }
    }

    /// The last position of `shard` (0 when empty).
    pub fn high_water(&self, shard: u32) -> u64 {
        self.shards
            .get(shard as usize)
            .map_or(0, |s| s.len() as u64)
    }

    /// Adds one durable event. Its position must be the shard's next one. On an error
    /// nothing was added.
    pub fn push(
        &mut self,
        capture: Capture,
        inbox: &str,
        game: &str,
        frame: FramePos,
    ) -> Result<(), IndexError> {
        let next = self.high_water(capture.shard) + 1;
        let Some(shard) = self.shards.get_mut(capture.shard as usize) else {
            return Err(IndexError::OutOfStep(format!(
                "event {capture} names a shard this store does not have"
            )));
        };
        if capture.pos != next {
            return Err(IndexError::OutOfStep(format!(
                "event {capture} out of order (expected position {next})"
            )));
        }
        let (Some(packed), Ok(offset)) = (Packed::pack(capture), u32::try_from(frame.offset))
        else {
            return Err(IndexError::OutOfStep(format!(
                "event {capture} lies beyond what the index can hold"
            )));
        };
        let entry = self.inboxes.entry_ref(inbox);
        let place = entry.all.len() as u64;
        let hash = self.hasher.hash_one(game);
        let found = entry.game(hash, game, self.spill.as_ref())?;
        // What can fail comes first: linking the game's last capture to this one and
        // counting it in its game, either of which may lie in the spill file. If the count
        // fails after the link was written, the link names a place no capture takes (the
        // store stops taking writes), which a walk of the chain reads as its end.
        if let Some((g, span)) = found {
            let spill = self.spill.as_ref();
            entry
                .all
                .update(span.last as usize, spill, |link| link.next = place)?;
            let counted = entry.games.update(g as usize, spill, |rec| {
                rec.span.last = place;
                rec.span.captures += 1;
            })?;
            if !counted {
                return Err(IndexError::OutOfStep(format!(
                    "game {game} of event {capture} lost its place"
                )));
            }
        }
        shard.push_spilling(
            Stored {
                hash: [0; 32],
                order: self.next_order,
                segment: frame.segment,
                offset,
                len: frame.len,
                tag: NO_VERDICT,
                reason: 0,
            },
            self.spill.as_mut(),
        );
        self.next_order += 1;
        entry.all.push_spilling(
            Link {
                capture: packed,
                next: END,
            },
            self.spill.as_mut(),
        );
        if found.is_none() {
            let g = entry.games.len() as u64;
            entry.games.push_spilling(
                GameRec {
                    id: game.into(),
                    span: Span {
                        first: place,
                        last: place,
                        captures: 1,
                    },
                },
                self.spill.as_mut(),
            );
            entry.by_id.insert_unique(hash, (hash, g), |&(h, _)| h);
        }
        Ok(())
    }

    fn stored(&self, capture: Capture) -> io::Result<Option<Stored>> {
        let index = capture.pos.checked_sub(1).map(usize::try_from);
        match (index, self.shards.get(capture.shard as usize)) {
            (Some(Ok(index)), Some(shard)) => shard.fetch(index, self.spill.as_ref()),
            _ => Ok(None),
        }
    }

    /// The slot of one capture, with its verdict; `None` when the store has no such
    /// capture.
    pub fn slot(&self, capture: Capture) -> io::Result<Option<Slot>> {
        Ok(self
            .stored(capture)?
            .map(|stored| self.slot_of(capture, &stored)))
    }

    /// The slot of a capture whose stored record is `stored`.
    fn slot_of(&self, capture: Capture, stored: &Stored) -> Slot {
        let extra = || self.extras.get(&capture).cloned();
        let verdict = match stored.tag {
            ACCEPTED => Some(Compact::Accepted(stored.hash)),
            ACCEPTED_TEXT => Some(Compact::AcceptedText(extra().unwrap_or_default())),
            REJECTED => Some(Compact::Rejected(
                Reason::ALL[usize::from(stored.reason).min(Reason::ALL.len() - 1)],
                extra(),
            )),
            SKIPPED => Some(Compact::Skipped),
            _ => None,
        };
        Slot {
            frame: FramePos {
                segment: stored.segment,
                offset: u64::from(stored.offset),
                len: stored.len,
            },
            verdict,
        }
    }

    /// The slots of `captures`, in their order, skipping any the store does not have.
    /// The captures of a listing lie close together in each shard, so each shard's are
    /// read as one run when the run is not much longer than they are.
    fn slots_of(&self, captures: &[Capture]) -> io::Result<Vec<(Capture, Slot)>> {
        // Per shard: the lowest and highest position asked for, and how many.
        let mut spans: HashMap<u32, (u64, u64, usize)> = HashMap::new();
        for c in captures.iter().filter(|c| c.pos > 0) {
            let span = spans.entry(c.shard).or_insert((c.pos, c.pos, 0));
            *span = (span.0.min(c.pos), span.1.max(c.pos), span.2 + 1);
        }
        let mut runs: HashMap<u32, (u64, Vec<Stored>)> = HashMap::new();
        for (shard, (low, high, count)) in spans {
            let (Some(list), Ok(start), Ok(end)) = (
                self.shards.get(shard as usize),
                usize::try_from(low - 1),
                usize::try_from(high),
            ) else {
                continue;
            };
            if end - start <= 4 * count {
                runs.insert(
                    shard,
                    (low, list.fetch_run(start..end, self.spill.as_ref())?),
                );
            }
        }
        let mut out = Vec::with_capacity(captures.len());
        for &c in captures {
            let from_run = runs.get(&c.shard).and_then(|(low, run)| {
                run.get(usize::try_from(c.pos.checked_sub(*low)?).ok()?)
                    .copied()
            });
            let stored = match from_run {
                Some(stored) => Some(stored),
                None => self.stored(c)?,
            };
            if let Some(stored) = stored {
                out.push((c, self.slot_of(c, &stored)));
            }
        }
        Ok(out)
    }

    /// Records a verdict; false when the capture does not exist.
    pub fn set_verdict(&mut self, capture: Capture, verdict: &StoredVerdict) -> io::Result<bool> {
        let Some(index) = capture
            .pos
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return Ok(false);
        };
        let Some(shard) = self.shards.get_mut(capture.shard as usize) else {
            return Ok(false);
        };
        // What the slot takes: its tag, and an accepted hash or a rejection's reason.
        let (tag, hash, reason, extra) = match Compact::pack(verdict) {
            Compact::Accepted(hash) => (ACCEPTED, Some(hash), None, None),
            Compact::AcceptedText(hash) => (ACCEPTED_TEXT, None, None, Some(hash)),
            Compact::Rejected(reason, detail) => {
                let place = Reason::ALL.iter().position(|r| *r == reason);
                (REJECTED, None, Some(place.map_or(0, |i| i as u8)), detail)
            }
            Compact::Skipped => (SKIPPED, None, None, None),
        };
        let changed = shard.update(index, self.spill.as_ref(), |stored| {
            stored.tag = tag;
            if let Some(hash) = hash {
                stored.hash = hash;
            }
            if let Some(reason) = reason {
                stored.reason = reason;
            }
        })?;
        if !changed {
            return Ok(false);
        }
        match extra {
            Some(text) => self.extras.insert(capture, text),
            None => self.extras.remove(&capture),
        };
        Ok(true)
    }

    /// Slots of `shard` from position `from` (inclusive), at most `max`.
    pub fn shard_range(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> io::Result<Vec<(Capture, Slot)>> {
        let Some(slots) = self.shards.get(shard as usize) else {
            return Ok(Vec::new());
        };
        let start = usize::try_from(from.max(1) - 1)
            .unwrap_or(usize::MAX)
            .min(slots.len());
        let end = start.saturating_add(max).min(slots.len());
        let run = slots.fetch_run(start..end, self.spill.as_ref())?;
        Ok(run
            .iter()
            .zip(start..)
            .map(|(stored, i)| {
                let capture = Capture {
                    shard,
                    pos: i as u64 + 1,
                };
                (capture, self.slot_of(capture, stored))
            })
            .collect())
    }

    /// How many captures one game has.
    pub fn count(&self, inbox: &str, game: &str) -> io::Result<u64> {
        let Some(entry) = self.inboxes.get(inbox) else {
            return Ok(0);
        };
        let found = entry.game(self.hasher.hash_one(game), game, self.spill.as_ref())?;
        Ok(found.map_or(0, |(_, span)| span.captures))
    }

    /// Up to `limit` captures of one game or inbox that come after `after` in inbox order.
    pub fn page(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<Capture>,
        limit: usize,
    ) -> io::Result<Vec<(Capture, Slot)>> {
        let Some(entry) = self.inboxes.get(inbox) else {
            return Ok(Vec::new());
        };
        let spill = self.spill.as_ref();
        let cursor = match after {
            Some(c) => self.stored(c)?.map(|s| s.order),
            None => None,
        };
        let later = |c: Capture| -> io::Result<bool> {
            Ok(match cursor {
                Some(cursor) => self.stored(c)?.is_some_and(|s| s.order > cursor),
                None => true,
            })
        };
        let with_slot = |c: Capture| -> io::Result<Option<(Capture, Slot)>> {
            Ok(self.slot(c)?.map(|s| (c, s)))
        };
        let mut out = Vec::new();
        match game {
            // A game's captures are few: its chain is walked past the cursor (which may
            // come from a listing of another game).
            Some(game) => {
                let Some((_, span)) = entry.game(self.hasher.hash_one(game), game, spill)? else {
                    return Ok(Vec::new());
                };
                let mut past = false;
                for c in entry.chain(span, spill) {
                    if out.len() >= limit {
                        break;
                    }
                    let c = c?;
                    past = past || later(c)?;
                    if past {
                        out.extend(with_slot(c)?);
                    }
                }
            }
            // Orders grow along the inbox's list, so the first capture past the cursor
            // is found by bisection.
            None => {
                let (mut low, mut high) = (0, entry.all.len());
                while low < high {
                    let mid = low + (high - low) / 2;
                    match entry.all.fetch(mid, spill)? {
                        Some(link) if !later(link.capture.unpack())? => low = mid + 1,
                        _ => high = mid,
                    }
                }
                let end = low.saturating_add(limit);
                let captures: Vec<Capture> = entry
                    .all
                    .fetch_run(low..end, spill)?
                    .iter()
                    .map(|link| link.capture.unpack())
                    .collect();
                out = self.slots_of(&captures)?;
            }
        }
        Ok(out)
    }

    /// The games of an inbox, newest first; with `before`, those listed before that
    /// place in the inbox's list.
    pub fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> io::Result<Vec<GameEntry>> {
        let Some(entry) = self.inboxes.get(inbox) else {
            return Ok(Vec::new());
        };
        let count = entry.games.len() as u64;
        let end = before.map_or(count, |b| b.min(count));
        let mut out = Vec::new();
        for order in (0..end).rev().take(limit) {
            let Some(rec) = entry.games.fetch(order as usize, self.spill.as_ref())? else {
                continue;
            };
            let Some(first) = entry
                .all
                .fetch(rec.span.first as usize, self.spill.as_ref())?
            else {
                continue;
            };
            out.push(GameEntry {
                game: rec.id.into(),
                order,
                first: first.capture.unpack(),
                captures: rec.span.captures,
            });
        }
        Ok(out)
    }
}

/// `HashMap::entry` needs an owned key; this looks up first so the common case (a known
/// inbox) allocates nothing.
trait EntryRef {
    fn entry_ref(&mut self, key: &str) -> &mut InboxIndex;
}

impl EntryRef for HashMap<String, InboxIndex> {
    fn entry_ref(&mut self, key: &str) -> &mut InboxIndex {
        if !self.contains_key(key) {
            self.insert(key.to_string(), InboxIndex::default());
        }
        // The key was inserted just above when it was missing, so it is present.
        self.get_mut(key).expect("inbox entry present")
    }
}

#[cfg(test)]
#[path = "../index_tests.rs"]
mod tests;
