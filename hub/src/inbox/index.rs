//! The embedded inbox's in-memory indexes, rebuilt from the log at every open.
//!
//! Per shard, a vector of slots indexed by position: where the event's frame lies on disk,
//! its place in the store's global append order, and its verdict. Per inbox, every capture
//! in append order and, per game, that game's captures, so a listing and an actor rebuild
//! touch only what they return. Raw events stay on disk (the page cache keeps the recent
//! ones warm); a slot costs about 64 bytes plus its verdict's detail, so ten million
//! events fit in well under a gigabyte.
//!
//! What it deliberately does not do: any I/O, or any locking. The embedded backend holds it
//! behind one lock, and only the writer adds to it, after the events are durable.

use std::collections::HashMap;

use games::Reason;

use super::log::FramePos;
use super::{Capture, GameEntry, StoredVerdict};

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
                let lowercase = !hash.bytes().any(|b| b.is_ascii_uppercase());
                match hex::decode_to_slice(hash, &mut bytes) {
                    Ok(()) if lowercase => Compact::Accepted(bytes),
                    _ => Compact::AcceptedText(hash.as_str().into()),
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
                hash: hex::encode(bytes),
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

/// One event of a shard.
#[derive(Clone, Debug)]
pub struct Slot {
    pub frame: FramePos,
    /// Place in the store's global append order: inbox order across shards.
    pub order: u64,
    pub verdict: Option<Compact>,
}

#[derive(Default)]
struct InboxIndex {
    all: Vec<Capture>,
    games: HashMap<String, Vec<Capture>>,
    /// Game ids by first capture, oldest first.
    game_order: Vec<String>,
}

/// All indexes of one store.
pub struct Index {
    shards: Vec<Vec<Slot>>,
    inboxes: HashMap<String, InboxIndex>,
    next_order: u64,
}

impl Index {
    pub fn new(shards: u32) -> Index {
        Index {
            shards: (0..shards).map(|_| Vec::new()).collect(),
            inboxes: HashMap::new(),
            next_order: 0,
        }
    }

    /// The last position of `shard` (0 when empty).
    pub fn high_water(&self, shard: u32) -> u64 {
        self.shards
            .get(shard as usize)
            .map_or(0, |s| s.len() as u64)
    }

    /// Adds one durable event. Its position must be the shard's next one.
    pub fn push(
        &mut self,
        capture: Capture,
        inbox: &str,
        game: &str,
        frame: FramePos,
    ) -> Result<(), String> {
        let next = self.high_water(capture.shard) + 1;
        let Some(shard) = self.shards.get_mut(capture.shard as usize) else {
            return Err(format!(
                "event {capture} names a shard this store does not have"
            ));
        };
        if capture.pos != next {
            return Err(format!(
                "event {capture} out of order (expected position {next})"
            ));
        }
        shard.push(Slot {
            frame,
            order: self.next_order,
            verdict: None,
        });
        self.next_order += 1;
        let entry = self.inboxes.entry_ref(inbox);
        entry.all.push(capture);
        match entry.games.get_mut(game) {
            Some(captures) => captures.push(capture),
            None => {
                entry.games.insert(game.to_string(), vec![capture]);
                entry.game_order.push(game.to_string());
            }
        }
        Ok(())
    }

    pub fn slot(&self, capture: Capture) -> Option<&Slot> {
        let index = usize::try_from(capture.pos.checked_sub(1)?).ok()?;
        self.shards.get(capture.shard as usize)?.get(index)
    }

    /// Records a verdict; false when the capture does not exist.
    pub fn set_verdict(&mut self, capture: Capture, verdict: &StoredVerdict) -> bool {
        let Some(index) = capture
            .pos
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return false;
        };
        match self
            .shards
            .get_mut(capture.shard as usize)
            .and_then(|s| s.get_mut(index))
        {
            Some(slot) => {
                slot.verdict = Some(Compact::pack(verdict));
                true
            }
            None => false,
        }
    }

    /// Slots of `shard` from position `from` (inclusive), at most `max`.
    pub fn shard_range(&self, shard: u32, from: u64, max: usize) -> Vec<(Capture, Slot)> {
        let Some(slots) = self.shards.get(shard as usize) else {
            return Vec::new();
        };
        let start = usize::try_from(from.max(1) - 1)
            .unwrap_or(usize::MAX)
            .min(slots.len());
        slots[start..]
            .iter()
            .take(max)
            .enumerate()
            .map(|(i, slot)| {
                (
                    Capture {
                        shard,
                        pos: (start + i + 1) as u64,
                    },
                    slot.clone(),
                )
            })
            .collect()
    }

    /// The captures of one game, or of a whole inbox, in inbox order.
    pub fn captures(&self, inbox: &str, game: Option<&str>) -> &[Capture] {
        let Some(entry) = self.inboxes.get(inbox) else {
            return &[];
        };
        match game {
            None => &entry.all,
            Some(game) => entry.games.get(game).map_or(&[], Vec::as_slice),
        }
    }

    /// Up to `limit` captures of one game or inbox that come after `after` in inbox order.
    pub fn page(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<Capture>,
        limit: usize,
    ) -> Vec<(Capture, Slot)> {
        let captures = self.captures(inbox, game);
        let start = match after.and_then(|c| self.slot(c)) {
            // Orders grow along each list, so the first capture past the cursor is found
            // by bisection, even when the cursor came from a listing of another game.
            Some(cursor) => {
                captures.partition_point(|c| self.slot(*c).is_some_and(|s| s.order <= cursor.order))
            }
            None => 0,
        };
        captures[start..]
            .iter()
            .take(limit)
            .filter_map(|c| self.slot(*c).map(|s| (*c, s.clone())))
            .collect()
    }

    /// The games of an inbox, newest first; with `before`, those listed before that
    /// place in the inbox's list.
    pub fn games(&self, inbox: &str, before: Option<u64>, limit: usize) -> Vec<GameEntry> {
        let Some(entry) = self.inboxes.get(inbox) else {
            return Vec::new();
        };
        let end = before.map_or(entry.game_order.len(), |b| {
            (b.min(entry.game_order.len() as u64)) as usize
        });
        entry.game_order[..end]
            .iter()
            .enumerate()
            .rev()
            .take(limit)
            .filter_map(|(order, game)| {
                let captures = entry.games.get(game)?;
                Some(GameEntry {
                    game: game.clone(),
                    order: order as u64,
                    first: *captures.first()?,
                    captures: captures.len() as u64,
                })
            })
            .collect()
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
mod tests {
    use super::*;

    fn frame(n: u64) -> FramePos {
        FramePos {
            segment: 0,
            offset: n * 100,
            len: 10,
        }
    }

    #[test]
    fn pages_follow_inbox_order_across_shards_and_games() {
        let mut index = Index::new(2);
        let seq = [(0, "a"), (1, "b"), (0, "a"), (1, "a"), (0, "b")];
        let mut next = [1u64, 1];
        let mut caps = Vec::new();
        for (i, (shard, game)) in seq.iter().enumerate() {
            let capture = Capture {
                shard: *shard,
                pos: next[*shard as usize],
            };
            next[*shard as usize] += 1;
            index
                .push(capture, "box", game, frame(i as u64))
                .expect("push");
            caps.push(capture);
        }
        let all: Vec<Capture> = index
            .page("box", None, None, 10)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(all, caps);
        let after_second: Vec<Capture> = index
            .page("box", None, Some(caps[1]), 2)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(after_second, caps[2..4]);
        // A cursor taken from the whole inbox also works on one game's listing.
        let game_a: Vec<Capture> = index
            .page("box", Some("a"), Some(caps[1]), 10)
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        assert_eq!(game_a, vec![caps[2], caps[3]]);
        assert!(index.page("other", None, None, 10).is_empty());
        let games = index.games("box", None, 10);
        assert_eq!(
            games.iter().map(|g| g.game.as_str()).collect::<Vec<_>>(),
            vec!["b", "a"]
        );
        assert_eq!((games[1].first, games[1].captures), (caps[0], 3));
        assert_eq!((games[0].order, games[1].order), (1, 0));
        // The next page starts below the last place listed.
        let older = index.games("box", Some(games[0].order), 10);
        assert_eq!(
            older.iter().map(|g| g.game.as_str()).collect::<Vec<_>>(),
            vec!["a"]
        );
        assert!(index.games("box", Some(0), 10).is_empty());
        assert_eq!(index.games("box", Some(99), 1)[0].game, "b");
    }

    #[test]
    fn out_of_order_positions_are_refused() {
        let mut index = Index::new(1);
        assert!(index
            .push(Capture { shard: 0, pos: 2 }, "i", "g", frame(0))
            .is_err());
        assert!(index
            .push(Capture { shard: 1, pos: 1 }, "i", "g", frame(0))
            .is_err());
        assert!(index
            .push(Capture { shard: 0, pos: 1 }, "i", "g", frame(0))
            .is_ok());
    }

    #[test]
    fn verdicts_pack_compactly_and_unpack_exactly() {
        for verdict in [
            StoredVerdict::Accepted {
                hash: "0f".repeat(32),
            },
            StoredVerdict::Accepted {
                hash: "0F".repeat(32),
            },
            StoredVerdict::Accepted {
                hash: "short".into(),
            },
            StoredVerdict::Rejected {
                reason: Reason::BadSeq,
                detail: Some("x".into()),
            },
            StoredVerdict::Skipped,
        ] {
            assert_eq!(Compact::pack(&verdict).unpack(), verdict);
        }
        assert!(matches!(
            Compact::pack(&StoredVerdict::Accepted {
                hash: "0f".repeat(32)
            }),
            Compact::Accepted(_)
        ));
    }
}
