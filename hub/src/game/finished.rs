//! What the hub keeps of a finished game for its inbox's listing: four bytes under a
//! 16-byte digest of the game's ids, instead of a whole entry keyed by two strings.
//!
//! A hub keeps a listing entry for every game an actor has seen since it opened, so that a
//! page of finished games needs no actor rebuilt. Finished games are nearly all of them on
//! a hub that has run for a while, and a finished game's entry never changes again: it
//! names a built-in protocol and a result made of three small enums. [`Finished`] keeps
//! exactly that, packed, under the first 16 bytes of a SHA-256 of the ids. Two games would
//! share an entry only if their digests collided, which for any number of games a hub can
//! hold is far less likely than a flipped bit in its memory, and which nobody can bring
//! about on purpose: that is a preimage of SHA-256 cut to 128 bits, not a hash table's
//! collision.
//!
//! What it deliberately does not do: keep anything that does not pack (an entry of a game
//! still being played or seated, or of a protocol the registry does not know); the engine
//! keeps those whole.

use dashmap::DashMap;
use games::{Registry, Seat, Status, WinBy};
use sha2::{Digest, Sha256};

use super::state::ResultView;
use super::types::Listed;
use super::Phase;

/// Finished games' listing entries, packed.
pub struct Finished {
    games: DashMap<Key, Packed>,
    /// The registry's protocols by their first ref, as a packed entry numbers them.
    protocols: Vec<&'static str>,
}

/// A game's place in [`Finished`]: the first 16 bytes of SHA-256 over its inbox's length,
/// its inbox and its id (the length keeps `("ab", "c")` and `("a", "bc")` apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key([u64; 2]);

impl Key {
    pub fn of(inbox: &str, game: &str) -> Key {
        let digest = Sha256::new()
            .chain_update((inbox.len() as u64).to_le_bytes())
            .chain_update(inbox)
            .chain_update(game)
            .finalize();
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&digest[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Key([word(0), word(1)])
    }
}

/// A finished game's entry: its protocol's place in [`Finished::protocols`], and the
/// places of its result's status, winner and way of winning in the tables below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Packed([u8; 4]);

const STATUSES: [Status; 3] = [Status::InProgress, Status::Win, Status::Draw];
const WINNERS: [Option<Seat>; 3] = [None, Some(Seat::X), Some(Seat::O)];
const WAYS: [Option<WinBy>; 4] = [
    None,
    Some(WinBy::Line),
    Some(WinBy::Resign),
    Some(WinBy::Score),
];

/// Shards of the map: more than dashmap's default, so that growing one (a copy of its
/// table, under its lock) holds up a smaller share of the games' actors, for less time.
const SHARDS: usize = 64;

impl Finished {
    pub fn new(registry: &Registry) -> Finished {
        Finished {
            games: DashMap::with_shard_amount(SHARDS),
            protocols: registry
                .iter()
                .filter_map(|p| p.refs().first().copied())
                .collect(),
        }
    }

    /// Keeps `entry` under `key` when it is a finished game's entry that packs, and says
    /// whether it did; the game's previous entry here, if any, is returned beside.
    pub fn insert(&self, key: Key, entry: &Listed) -> (bool, Option<Listed>) {
        match self.pack(entry) {
            Some(packed) => (true, self.games.insert(key, packed).map(|p| self.unpack(p))),
            None => (false, None),
        }
    }

    pub fn get(&self, key: Key) -> Option<Listed> {
        self.games.get(&key).map(|p| self.unpack(*p))
    }

    pub fn contains(&self, key: Key) -> bool {
        self.games.contains_key(&key)
    }

    pub fn remove(&self, key: Key) -> Option<Listed> {
        self.games.remove(&key).map(|(_, p)| self.unpack(p))
    }

    fn pack(&self, entry: &Listed) -> Option<Packed> {
        let result = entry.result.as_ref()?;
        if entry.phase != Phase::Started || result.status == Status::InProgress.as_str() {
            return None;
        }
        let protocol = entry.protocol.as_deref()?;
        let place = |found: Option<usize>| found.and_then(|i| u8::try_from(i).ok());
        Some(Packed([
            place(self.protocols.iter().position(|p| *p == protocol))?,
            place(STATUSES.iter().position(|s| s.as_str() == result.status))?,
            place(WINNERS.iter().position(|w| *w == result.winner))?,
            place(WAYS.iter().position(|b| *b == result.by))?,
        ]))
    }

    fn unpack(&self, Packed([protocol, status, winner, by]): Packed) -> Listed {
        // Every place was found in these very tables by `pack`.
        let at = |i: u8| usize::from(i);
        Listed {
            protocol: Some(self.protocols[at(protocol)].into()),
            phase: Phase::Started,
            result: Some(ResultView {
                status: STATUSES[at(status)].as_str(),
                winner: WINNERS[at(winner)],
                by: WAYS[at(by)],
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn finished(protocol: &str, status: Status, winner: Option<Seat>, by: Option<WinBy>) -> Listed {
        Listed {
            protocol: Some(Cow::Owned(protocol.to_string())),
            phase: Phase::Started,
            result: Some(ResultView {
                status: status.as_str(),
                winner,
                by,
            }),
        }
    }

    #[test]
    fn every_finished_entry_of_every_protocol_comes_back_as_it_went_in() {
        let registry = Registry::builtin();
        let kept = Finished::new(&registry);
        let mut n = 0;
        for p in registry.iter() {
            for status in [Status::Win, Status::Draw] {
                for winner in WINNERS {
                    for by in WAYS {
                        let entry = finished(p.refs()[0], status, winner, by);
                        let key = Key::of("inbox", &format!("game-{n}"));
                        assert_eq!(kept.insert(key, &entry), (true, None));
                        assert_eq!(kept.get(key), Some(entry.clone()));
                        assert!(kept.contains(key));
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(kept.games.len(), n);
        let key = Key::of("inbox", "game-0");
        let first = kept.get(key).unwrap();
        assert_eq!(kept.remove(key), Some(first));
        assert_eq!(kept.get(key), None);
        assert!(!kept.contains(key));
    }

    #[test]
    fn entries_that_do_not_pack_are_left_to_the_caller() {
        let kept = Finished::new(&Registry::builtin());
        let key = Key::of("inbox", "game");
        let tic = "pipehub:tic-tac-toe";
        let in_progress = finished(tic, Status::InProgress, None, None);
        let unknown = finished(
            "someone:else",
            Status::Win,
            Some(Seat::X),
            Some(WinBy::Line),
        );
        let paired = Listed {
            protocol: Some(Cow::Borrowed(tic)),
            phase: Phase::Paired,
            result: None,
        };
        let no_protocol = Listed {
            protocol: None,
            ..finished(tic, Status::Draw, None, None)
        };
        for entry in [in_progress, unknown, paired, no_protocol] {
            assert_eq!(kept.insert(key, &entry), (false, None), "{entry:?}");
        }
        assert!(!kept.contains(key));
    }

    #[test]
    fn a_game_is_told_apart_by_both_ids_and_where_one_ends() {
        let keys = [
            Key::of("ab", "c"),
            Key::of("a", "bc"),
            Key::of("abc", ""),
            Key::of("", "abc"),
            Key::of("inbox", "game"),
            Key::of("inbox", "game2"),
            Key::of("inbox2", "game"),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(Key::of("inbox", "game"), keys[4]);
    }
}
