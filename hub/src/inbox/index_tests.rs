//! Tests of the inbox's index: records and verdicts packed, chunks spilled to the cache
//! file and read back (and its failures), pages in inbox order, and a model test against
//! plain lists.

use std::fs::File;

use super::spill::CHUNK;
use super::*;

fn frame(n: u64) -> FramePos {
    FramePos {
        segment: 0,
        offset: n * 100,
        len: 10,
    }
}

/// An index that spills to a file in a fresh directory (kept alive beside it).
fn spilling(shards: u32) -> (Index, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let spill = Spill::create(dir.path()).expect("a spill file");
    (Index::spilling(shards, spill), dir)
}

/// The index's spill file opened again, read-only or write-only: swapped in for the
/// real one, it fails every write or every read as a failing disk would.
fn reopened_spill(index: &Index, write: bool) -> File {
    use std::os::fd::AsRawFd;
    let fd = index.spill.as_ref().expect("spilling").file.as_raw_fd();
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .open(format!("/proc/self/fd/{fd}"))
        .expect("the spill file opened again")
}

/// Game "old" at position 1, then enough of other games that its chunk, and its
/// game's record, are spilled.
fn index_with_an_old_game() -> (Index, tempfile::TempDir, u64) {
    let (mut index, dir) = spilling(1);
    let events = 6 * CHUNK as u64;
    for pos in 1..=events {
        let game = if pos == 1 {
            "old".to_string()
        } else {
            format!("g{}", pos / 2)
        };
        let capture = Capture { shard: 0, pos };
        index.push(capture, "box", &game, frame(pos)).expect("push");
    }
    assert!(
        !index.shards[0].spilled.is_empty(),
        "the first chunk is spilled"
    );
    assert!(
        !index.inboxes["box"].games.spilled.is_empty(),
        "the first game records are spilled"
    );
    (index, dir, events)
}

#[test]
fn an_event_whose_link_cannot_be_written_is_not_indexed() {
    let (mut index, _dir, events) = index_with_an_old_game();
    let read_only = reopened_spill(&index, false);
    let writable = std::mem::replace(&mut index.spill.as_mut().expect("spilling").file, read_only);
    let next = Capture {
        shard: 0,
        pos: events + 1,
    };
    let refused = index.push(next, "box", "old", frame(events + 1));
    assert!(matches!(refused, Err(IndexError::Spill(_))), "{refused:?}");
    // Nothing of it was taken: not its slot, not its link, not its game's count.
    assert_eq!(index.high_water(0), events);
    assert_eq!(index.count("box", "old").expect("readable"), 1);
    let all = index
        .page("box", None, None, usize::MAX)
        .expect("index readable");
    assert_eq!(all.len() as u64, events);
    // Once the file works again, the same event goes in whole.
    index.spill.as_mut().expect("spilling").file = writable;
    index
        .push(next, "box", "old", frame(events + 1))
        .expect("push");
    let old: Vec<u64> = index
        .page("box", Some("old"), None, usize::MAX)
        .expect("index readable")
        .into_iter()
        .map(|(c, _)| c.pos)
        .collect();
    assert_eq!(old, vec![1, events + 1]);
}

#[test]
fn a_spill_file_that_cannot_be_read_is_an_error_not_a_missing_record() {
    let (mut index, _dir, events) = index_with_an_old_game();
    let write_only = reopened_spill(&index, true);
    index.spill.as_mut().expect("spilling").file = write_only;
    let old = Capture { shard: 0, pos: 1 };
    assert!(index.slot(old).is_err());
    assert!(index.set_verdict(old, &StoredVerdict::Skipped).is_err());
    assert!(index.page("box", Some("old"), None, 10).is_err());
    assert!(index.page("box", None, None, 10).is_err());
    assert!(index.page("box", None, Some(old), 10).is_err());
    assert!(index.shard_range(0, 1, 10).is_err());
    assert!(index.games("box", None, usize::MAX).is_err());
    assert!(index.count("box", "old").is_err());
    // What is still in memory answers as before.
    let recent = Capture {
        shard: 0,
        pos: events,
    };
    let slot = index.slot(recent).expect("a recent slot needs no read");
    assert_eq!(slot.map(|s| s.frame.offset), Some(events * 100));
    assert_eq!(index.shard_range(0, events, 10).expect("recent").len(), 1);
}

#[test]
fn runs_read_across_spilled_and_resident_chunks_as_single_reads_would() {
    let (mut index, _dir) = spilling(2);
    let events = 5 * CHUNK + 7;
    for i in 0..events {
        let capture = Capture {
            shard: (i % 2) as u32,
            pos: (i / 2) as u64 + 1,
        };
        let game = format!("g{}", i % 13);
        index
            .push(capture, "box", &game, frame(i as u64))
            .expect("push");
    }
    let list = &index.inboxes["box"].all;
    assert!(list.spilled.len() >= 2, "some chunks are spilled");
    let spill = index.spill.as_ref();
    for (start, end) in [
        (0, events),
        (3, CHUNK + 5),
        (CHUNK - 1, 3 * CHUNK + 1),
        (events - 2, events + 9),
        (events, events + 1),
    ] {
        let one_by_one: Vec<Link> = (start..end.min(events))
            .map(|i| list.fetch(i, spill).expect("readable").expect("present"))
            .collect();
        assert_eq!(
            list.fetch_run(start..end, spill).expect("readable"),
            one_by_one
        );
    }
    let high = index.high_water(1);
    for (from, max) in [
        (1, usize::MAX),
        (2, 70),
        (CHUNK as u64, 2 * CHUNK),
        (high, 5),
        (high + 1, 5),
    ] {
        let run = index.shard_range(1, from, max).expect("readable");
        let one_by_one: Vec<(Capture, FramePos)> = (from.max(1)..=high)
            .take(max)
            .map(|pos| {
                let c = Capture { shard: 1, pos };
                (c, index.slot(c).expect("readable").expect("present").frame)
            })
            .collect();
        let got: Vec<(Capture, FramePos)> = run.into_iter().map(|(c, s)| (c, s.frame)).collect();
        assert_eq!(got, one_by_one, "from {from}, at most {max}");
    }
}

#[test]
fn records_round_trip_through_their_bytes() {
    let stored = Stored {
        hash: [7; 32],
        order: u64::MAX - 3,
        segment: 9,
        offset: u32::MAX,
        len: 12345,
        tag: REJECTED,
        reason: 4,
    };
    let mut bytes = Vec::new();
    stored.put(&mut bytes);
    assert_eq!(bytes.len(), Stored::SIZE);
    assert_eq!(Stored::take(&bytes), stored);
    let link = Link {
        capture: Packed(u64::MAX - 1),
        next: 77,
    };
    bytes.clear();
    link.put(&mut bytes);
    assert_eq!(bytes.len(), Link::SIZE);
    assert_eq!(Link::take(&bytes), link);
    for id in ["g", "a-b_c.d:e", &"x".repeat(GAME_ID_MAX)] {
        let game = GameRec {
            id: id.into(),
            span: Span {
                first: 3,
                last: u64::MAX - 5,
                captures: 1 << 40,
            },
        };
        assert!(game.spillable());
        bytes.clear();
        game.put(&mut bytes);
        assert_eq!(bytes.len(), GameRec::SIZE);
        assert_eq!(GameRec::take(&bytes), game);
    }
}

#[test]
fn a_game_id_too_long_to_spill_keeps_its_chunk_and_later_ones_in_memory() {
    let (mut index, _dir) = spilling(1);
    let long = "y".repeat(GAME_ID_MAX + 1);
    let games = 4 * CHUNK as u64;
    for pos in 1..=games {
        let game = if pos == 2 {
            long.clone()
        } else {
            format!("g{pos}")
        };
        let capture = Capture { shard: 0, pos };
        index.push(capture, "box", &game, frame(pos)).expect("push");
    }
    let list = &index.inboxes["box"].games;
    assert!(list.spilled.is_empty(), "no game record was spilled");
    assert_eq!(list.len() as u64, games);
    assert_eq!(index.count("box", &long).expect("readable"), 1);
    let oldest = index.games("box", Some(3), 3).expect("readable");
    let ids: Vec<_> = oldest.iter().map(|g| g.game.as_str()).collect();
    assert_eq!(ids, ["g3", long.as_str(), "g1"]);
}

#[test]
fn old_chunks_leave_memory_and_still_answer() {
    let (mut index, _dir) = spilling(1);
    let events = 10 * CHUNK + 3;
    for i in 0..events {
        // Game "long" has an event every 3 * CHUNK, so each of its links is updated
        // after its chunk was spilled.
        let game = if i % (3 * CHUNK) == 0 {
            "long".to_string()
        } else {
            format!("g{}", i / 5)
        };
        let capture = Capture {
            shard: 0,
            pos: i as u64 + 1,
        };
        index
            .push(capture, "box", &game, frame(i as u64))
            .expect("push");
    }
    let in_memory: usize = index.shards[0].chunks.iter().map(Vec::len).sum();
    assert_eq!(
        in_memory,
        SLOT_CHUNK + events % SLOT_CHUNK,
        "only the newest chunks stay in memory"
    );
    assert_eq!(index.shards[0].spilled.len(), events / SLOT_CHUNK - 1);
    // A verdict on a spilled slot is written through, and its extra kept beside it.
    let old = Capture { shard: 0, pos: 2 };
    let verdicts = [
        StoredVerdict::Accepted {
            hash: "ab".repeat(32),
        },
        StoredVerdict::Rejected {
            reason: Reason::BadSeq,
            detail: Some("late".into()),
        },
    ];
    for verdict in verdicts {
        assert!(index.set_verdict(old, &verdict).expect("index readable"));
        let slot = index.slot(old).expect("index readable").expect("slot");
        assert_eq!(slot.verdict.map(|v| v.unpack()), Some(verdict));
        assert_eq!(slot.frame.offset, 100);
    }
    let long: Vec<u64> = index
        .page("box", Some("long"), None, usize::MAX)
        .expect("index readable")
        .into_iter()
        .map(|(c, _)| c.pos)
        .collect();
    let want: Vec<u64> = (0..events)
        .filter(|i| i % (3 * CHUNK) == 0)
        .map(|i| i as u64 + 1)
        .collect();
    assert_eq!(long, want);
    let all = index
        .page("box", None, Some(Capture { shard: 0, pos: 5 }), 7)
        .expect("index readable");
    let positions: Vec<u64> = all.iter().map(|(c, _)| c.pos).collect();
    assert_eq!(positions, (6..13).collect::<Vec<u64>>());
    assert_eq!(
        index.games("box", Some(1), 1).expect("index readable")[0].first,
        Capture { shard: 0, pos: 1 }
    );
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
        .expect("index readable")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(all, caps);
    let after_second: Vec<Capture> = index
        .page("box", None, Some(caps[1]), 2)
        .expect("index readable")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(after_second, caps[2..4]);
    // A cursor taken from the whole inbox also works on one game's listing.
    let game_a: Vec<Capture> = index
        .page("box", Some("a"), Some(caps[1]), 10)
        .expect("index readable")
        .into_iter()
        .map(|(c, _)| c)
        .collect();
    assert_eq!(game_a, vec![caps[2], caps[3]]);
    assert!(index
        .page("other", None, None, 10)
        .expect("index readable")
        .is_empty());
    let games = index.games("box", None, 10).expect("index readable");
    assert_eq!(
        games.iter().map(|g| g.game.as_str()).collect::<Vec<_>>(),
        vec!["b", "a"]
    );
    assert_eq!((games[1].first, games[1].captures), (caps[0], 3));
    assert_eq!((games[0].order, games[1].order), (1, 0));
    // The next page starts below the last place listed.
    let older = index
        .games("box", Some(games[0].order), 10)
        .expect("index readable");
    assert_eq!(
        older.iter().map(|g| g.game.as_str()).collect::<Vec<_>>(),
        vec!["a"]
    );
    assert!(index
        .games("box", Some(0), 10)
        .expect("index readable")
        .is_empty());
    assert_eq!(
        index.games("box", Some(99), 1).expect("index readable")[0].game,
        "b"
    );
}

#[test]
fn lists_span_many_chunks_and_follow_each_game() {
    // Enough events that every list crosses chunk boundaries, in games of uneven
    // lengths interleaved over two shards.
    let (mut index, _dir) = spilling(2);
    let mut next = [1u64, 1];
    let mut by_game: HashMap<String, Vec<Capture>> = HashMap::new();
    let mut all = Vec::new();
    let events = 3 * CHUNK + 17;
    for i in 0..events {
        let shard = (i % 3 == 0) as u32;
        let game = format!("g{}", (i * 7) % 11 + i / 1000);
        let capture = Capture {
            shard,
            pos: next[shard as usize],
        };
        next[shard as usize] += 1;
        index
            .push(capture, "box", &game, frame(i as u64))
            .expect("push");
        by_game.entry(game).or_default().push(capture);
        all.push(capture);
    }
    let listed = |game: Option<&str>, after: Option<Capture>| -> Vec<Capture> {
        index
            .page("box", game, after, usize::MAX)
            .expect("index readable")
            .into_iter()
            .map(|(c, _)| c)
            .collect()
    };
    assert_eq!(listed(None, None), all);
    for cut in [0, 1, CHUNK - 1, CHUNK, 2 * CHUNK + 5, events - 1] {
        assert_eq!(listed(None, Some(all[cut])), all[cut + 1..]);
    }
    for (game, captures) in &by_game {
        assert_eq!(listed(Some(game), None), *captures, "game {game}");
        assert_eq!(
            index.count("box", game).expect("readable"),
            captures.len() as u64
        );
        // A cursor from the whole inbox's listing, inside this game's run.
        let middle = captures[captures.len() / 2];
        let place = all.iter().position(|c| *c == middle).expect("listed");
        let expected: Vec<Capture> = captures
            .iter()
            .copied()
            .filter(|c| all.iter().position(|a| a == c) > Some(place))
            .collect();
        assert_eq!(listed(Some(game), Some(middle)), expected);
    }
    let games = index
        .games("box", None, usize::MAX)
        .expect("index readable");
    assert_eq!(games.len(), by_game.len());
    for entry in &games {
        assert_eq!(entry.first, by_game[&entry.game][0]);
        assert_eq!(entry.captures, by_game[&entry.game].len() as u64);
    }
    assert_eq!(index.count("box", "nope").expect("readable"), 0);
    assert_eq!(index.high_water(1), next[1] - 1);
    let last = index
        .shard_range(0, next[0] - 1, 10)
        .expect("index readable");
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].1.frame.offset, (events as u64 - 1) * 100);
}

#[test]
fn a_verdict_set_again_replaces_what_was_kept_beside_it() {
    let mut index = Index::new(1);
    let capture = Capture { shard: 0, pos: 1 };
    index.push(capture, "i", "g", frame(0)).expect("push");
    assert!(index
        .slot(capture)
        .expect("index readable")
        .expect("slot")
        .verdict
        .is_none());
    let verdicts = [
        StoredVerdict::Rejected {
            reason: Reason::BadSignature,
            detail: Some("why".into()),
        },
        StoredVerdict::Accepted {
            hash: "ab".repeat(32),
        },
        StoredVerdict::Accepted {
            hash: "not hex".into(),
        },
        StoredVerdict::Rejected {
            reason: *Reason::ALL.last().expect("reasons"),
            detail: None,
        },
        StoredVerdict::Skipped,
    ];
    for verdict in verdicts {
        assert!(index
            .set_verdict(capture, &verdict)
            .expect("index readable"));
        let kept = index
            .slot(capture)
            .expect("index readable")
            .and_then(|s| s.verdict)
            .map(|v| v.unpack());
        assert_eq!(kept, Some(verdict));
    }
    assert!(index.extras.is_empty());
    assert!(!index
        .set_verdict(Capture { shard: 0, pos: 2 }, &StoredVerdict::Skipped)
        .expect("index readable"));
    assert!(!index
        .set_verdict(Capture { shard: 0, pos: 0 }, &StoredVerdict::Skipped)
        .expect("index readable"));
}

/// What the index must answer, kept the plain way: every event in append order.
struct Model {
    events: Vec<(Capture, String, String)>,
}

impl Model {
    fn place(&self, capture: Capture) -> Option<usize> {
        self.events.iter().position(|(c, _, _)| *c == capture)
    }

    fn page(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<Capture>,
        limit: usize,
    ) -> Vec<Capture> {
        let from = after.and_then(|c| self.place(c)).map_or(0, |p| p + 1);
        self.events[from..]
            .iter()
            .filter(|(_, i, g)| i == inbox && game.is_none_or(|game| g == game))
            .map(|(c, _, _)| *c)
            .take(limit)
            .collect()
    }

    fn games(&self, inbox: &str) -> Vec<(String, Capture, u64)> {
        let mut games: Vec<(String, Capture, u64)> = Vec::new();
        for (c, i, g) in &self.events {
            if i != inbox {
                continue;
            }
            match games.iter_mut().find(|(id, _, _)| id == g) {
                Some(entry) => entry.2 += 1,
                None => games.push((g.clone(), *c, 1)),
            }
        }
        games
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Random interleavings of games, inboxes and shards, long enough to cross chunk
    /// boundaries: every listing, count and verdict agrees with the plain model.
    #[test]
    fn the_index_answers_as_a_plain_list_would(
        // Game ids from a few (long games) or from many (enough games that an
        // inbox's oldest game records are spilled).
        spec in proptest::collection::vec(
            (0u32..3, 0u8..2, proptest::prop_oneof![0u16..60, 0u16..1000]),
            0..(4 * CHUNK + 400),
        ),
        probes in proptest::collection::vec((proptest::prelude::any::<usize>(), 0u8..2, 0u16..60, 1usize..40), 12),
    ) {
        let (mut index, _dir) = spilling(3);
        let mut next = [1u64; 3];
        let mut model = Model { events: Vec::new() };
        for (i, (shard, inbox, game)) in spec.iter().enumerate() {
            let capture = Capture { shard: *shard, pos: next[*shard as usize] };
            next[*shard as usize] += 1;
            let (inbox, game) = (format!("box{inbox}"), format!("game-{game}"));
            proptest::prop_assert!(index.push(capture, &inbox, &game, frame(i as u64)).is_ok());
            // Every third event gets a verdict, some of them rejections with a detail.
            if i % 3 == 0 {
                let verdict = if i % 2 == 0 {
                    StoredVerdict::Accepted { hash: format!("{i:064x}") }
                } else {
                    StoredVerdict::Rejected { reason: Reason::BadSeq, detail: Some(format!("event {i}")) }
                };
                proptest::prop_assert!(index.set_verdict(capture, &verdict).expect("index readable"));
            }
            model.events.push((capture, inbox, game));
        }
        for (i, (capture, _, _)) in model.events.iter().enumerate() {
            let slot = index.slot(*capture).expect("index readable").expect("every event has a slot");
            proptest::prop_assert_eq!(slot.frame.offset, i as u64 * 100);
            proptest::prop_assert_eq!(slot.verdict.is_some(), i % 3 == 0);
        }
        let listed = |inbox: &str, game: Option<&str>, after: Option<Capture>, limit: usize| -> Vec<Capture> {
            index.page(inbox, game, after, limit).expect("index readable").into_iter().map(|(c, _)| c).collect()
        };
        for &(pick, inbox, game, limit) in &probes {
            let (inbox, game) = (format!("box{inbox}"), format!("game-{game}"));
            // A cursor from anywhere in the store: this inbox's or another's.
            let after = (!model.events.is_empty()).then(|| model.events[pick % model.events.len()].0);
            let after = after.filter(|_| pick % 5 != 0);
            proptest::prop_assert_eq!(listed(&inbox, None, after, limit), model.page(&inbox, None, after, limit));
            proptest::prop_assert_eq!(
                listed(&inbox, Some(&game), after, limit),
                model.page(&inbox, Some(&game), after, limit)
            );
            let expected = model.games(&inbox);
            let count = expected.iter().find(|(g, _, _)| *g == game).map_or(0, |e| e.2);
            proptest::prop_assert_eq!(index.count(&inbox, &game).expect("index readable"), count);
            let before = (pick % (expected.len() + 2)) as u64;
            let got: Vec<(String, Capture, u64, u64)> = index
                .games(&inbox, Some(before), limit).expect("index readable")
                .into_iter()
                .map(|e| (e.game, e.first, e.captures, e.order))
                .collect();
            let want: Vec<(String, Capture, u64, u64)> = expected
                .iter()
                .enumerate()
                .take(before as usize)
                .rev()
                .take(limit)
                .map(|(order, (g, first, n))| (g.clone(), *first, *n, order as u64))
                .collect();
            proptest::prop_assert_eq!(got, want);
        }
        // Verdicts set late, on old events as well as recent ones, read back exactly.
        for (pick, _, game, _) in probes {
            if model.events.is_empty() {
                break;
            }
            let capture = model.events[pick % model.events.len()].0;
            let verdict = StoredVerdict::Accepted { hash: format!("{game:064x}") };
            proptest::prop_assert!(index.set_verdict(capture, &verdict).expect("index readable"));
            let slot = index.slot(capture).expect("index readable").expect("slot");
            proptest::prop_assert_eq!(slot.verdict.map(|v| v.unpack()), Some(verdict));
        }
    }
}

#[test]
fn a_stored_slot_is_56_bytes() {
    assert_eq!(std::mem::size_of::<Stored>(), 56);
    assert_eq!(std::mem::size_of::<Link>(), 16);
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
