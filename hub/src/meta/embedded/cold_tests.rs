//! Tests of the meta store's cold keys: runs found and scanned across blocks, merges that
//! keep the newest place and drop gone keys, the compaction policy, and stopping.

use std::collections::BTreeMap;
use std::time::Instant;

use super::*;

fn at(n: u64) -> FramePos {
    FramePos {
        segment: (n % 3) as u32,
        offset: n * 101,
        len: (n % 500) as u32,
    }
}

fn seat(n: u64) -> Key {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&n.to_be_bytes());
    Key::Hashed(1, hash)
}

fn code(n: u64) -> Key {
    let mut hash = [0u8; 32];
    hash[..8].copy_from_slice(&n.to_be_bytes());
    Key::Hashed(0, hash)
}

/// Keys in memory, none of them cold yet, and no spill to come: compactions alone.
fn store(dir: &Path) -> RwLock<Keys> {
    RwLock::new(Keys {
        map: BTreeMap::new(),
        spillable: [0; CLASSES],
        spill_at: 0,
        cold: Cold::create(dir),
    })
}

fn spill_run(keys: &RwLock<Keys>, class: usize, run: &[(Key, FramePos)]) {
    let mut keys = keys.write();
    let written = keys.cold.write(run.iter().map(|(k, a)| (k, a)), run.len());
    assert!(keys.cold.install(class, written));
}

/// A spill that cannot make its file (here its directory is gone) keeps the keys in
/// memory and stops spilling for a while, not for good: the next try after
/// [`SPILL_RETRY`] writes the run.
#[test]
fn a_failed_spill_is_tried_again_later() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).expect("cache directory");
    let keys = store(&cache);
    let run: Vec<(Key, FramePos)> = (0..100u64).map(|n| (seat(n), at(n))).collect();
    std::fs::remove_dir(&cache).expect("the directory goes");
    {
        let mut keys = keys.write();
        let written = keys.cold.write(run.iter().map(|(k, a)| (k, a)), run.len());
        assert!(written.is_err());
        assert!(!keys.cold.install(1, written), "nothing was listed");
        assert!(!keys.cold.spilling());
        let later = Instant::now() + SPILL_RETRY;
        assert!(keys.cold.spilling_at(later), "tried again after the pause");
    }
    std::fs::create_dir(&cache).expect("the directory is back");
    keys.write().cold.failed_at = Some(Instant::now() - SPILL_RETRY);
    assert!(keys.read().cold.spilling());
    spill_run(&keys, 1, &run);
    assert!(keys.read().cold.spilling());
    assert_eq!(keys.read().cold.keys(), 100);
}

/// A run of many blocks, written in several flushes: every key is found where it was
/// put, keys it does not hold are not, and scans from any point list them in order.
#[test]
fn a_run_of_many_blocks_finds_every_key_and_scans_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cold = Cold::create(dir.path());
    let mut keys: Vec<(Key, FramePos)> = (0..30_000u64)
        .map(|n| (seat(n * 2), at(n)))
        .chain((0..3_000u64).map(|n| {
            (
                Key::of(&format!("game/box/{n:0>width$}", width = (n % 40) as usize)),
                at(n),
            )
        }))
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys.dedup_by(|a, b| a.0 == b.0);
    let written = cold.write(keys.iter().map(|(k, a)| (k, a)), keys.len());
    assert!(cold.install(0, written));
    let run = &cold.tiers[0].runs[0].run;
    assert!(run.blocks.len() > 600, "{} blocks", run.blocks.len());
    assert!((0..run.blocks.len()).all(|i| run.blocks.place(i).1 <= BLOCK));
    assert!((1..run.blocks.len()).all(|i| run.blocks.first(i - 1) < run.blocks.first(i)));
    let size = run.file.metadata().expect("metadata").len();
    assert!(size > 2 << 20, "written in several flushes");
    for (key, place) in &keys {
        assert_eq!(cold.get(key).expect("get"), Some(*place), "{key:?}");
    }
    assert_eq!(cold.get(&seat(7)).expect("get"), None);
    assert_eq!(cold.get(&Key::of("game/box/none")).expect("get"), None);
    // Scans: from the start of each family, and from a key in the middle, by pages.
    for prefix in ["seat/", "game/", ""] {
        let all: Vec<&(Key, FramePos)> = keys
            .iter()
            .filter(|(k, _)| k.to_text().starts_with(prefix))
            .collect();
        let from = Bound::Included(Key::of(prefix));
        let page = cold.scan(&from, prefix, 1_000).expect("scan");
        assert_eq!(page.len(), all.len().min(1_000));
        assert!(page.iter().zip(&all).all(|(a, b)| a.0 == b.0 && a.1 == b.1));
        let middle = &all[all.len() / 2].0;
        let rest = cold
            .scan(&Bound::Excluded(middle.clone()), prefix, 50)
            .expect("scan");
        let expected: Vec<_> = all[all.len() / 2 + 1..].iter().take(50).collect();
        assert_eq!(rest.len(), expected.len());
        assert!(rest.iter().zip(expected).all(|(a, b)| a.0 == b.0));
    }
    // Deleted: not found again, in a scan either.
    cold.forget(&keys[5].0, false);
    assert_eq!(cold.get(&keys[5].0).expect("get"), None);
    let scan = cold.scan(&Bound::Unbounded, "", 10).expect("scan");
    assert!(scan.iter().all(|(k, _)| *k != keys[5].0));
    assert!(cold
        .scan(&Bound::Unbounded, "code/", 10)
        .expect("scan")
        .is_empty());
}

/// Two runs merged into one keep the newer place of a key both hold, leave out the keys
/// gone and those memory holds again, and forget the gone ones; a run of which a
/// sixteenth is gone is written again without them; a run all gone leaves no run.
#[test]
fn compactions_merge_runs_and_drop_what_was_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = store(dir.path());
    let stop = AtomicBool::new(false);
    // Lasting keys: an older run of evens (place n), a newer of multiples of three
    // (place n + 1), each of several blocks.
    let older: Vec<_> = (0..3_000u64).step_by(2).map(|n| (seat(n), at(n))).collect();
    let newer: Vec<_> = (0..3_000u64)
        .step_by(3)
        .map(|n| (seat(n), at(n + 1)))
        .collect();
    spill_run(&keys, 0, &older);
    spill_run(&keys, 0, &newer);
    {
        let mut keys = keys.write();
        keys.cold.forget(&seat(4), false); // in the older run alone
        keys.cold.forget(&seat(6), false); // in both
        keys.map.insert(seat(8), at(9_999)); // written again since
        assert_eq!(keys.cold.gone(), 2);
    }
    assert!(merge(&keys, &stop, (0, 0, 2)).expect("merge"));
    {
        let keys = keys.read();
        assert_eq!(keys.cold.tiers[0].runs.len(), 1);
        // No run holds a gone key any more; the new run's filter may admit one falsely
        // (one in a thousand), which then stays gone.
        assert!(keys.cold.gone() <= 1, "{} gone", keys.cold.gone());
        let expected = 1_500 + 1_000 - 500 - 3; // evens and threes, sixes once, less 4, 6 and 8
        assert_eq!(keys.cold.keys(), expected);
        for n in 0..3_000u64 {
            let place = match n {
                4 | 6 | 8 => None,
                n if n % 3 == 0 => Some(at(n + 1)),
                n if n % 2 == 0 => Some(at(n)),
                _ => None,
            };
            assert_eq!(keys.cold.get(&seat(n)).expect("get"), place, "{n}");
        }
    }
    assert!(
        !compact(&keys, &stop).expect("compact"),
        "nothing left to do"
    );

    // Codes: a run of 160, of which 9 gone (not yet a sixteenth), then 10.
    let codes: Vec<_> = (0..160u64).map(|n| (code(n), at(n))).collect();
    spill_run(&keys, 1, &codes);
    for n in 0..9 {
        keys.write().cold.forget(&code(n), false);
    }
    // A key discarded twice counts once.
    keys.write().cold.forget(&code(3), false);
    assert!(!compact(&keys, &stop).expect("compact"));
    keys.write().cold.forget(&code(9), false);
    assert!(compact(&keys, &stop).expect("compact"));
    {
        let keys = keys.read();
        assert_eq!(keys.cold.tiers[1].runs[0].run.keys, 150);
        assert!(keys.cold.tiers[1].gone.len() <= 2, "as above");
        assert_eq!(keys.cold.get(&code(9)).expect("get"), None);
        assert_eq!(keys.cold.get(&code(10)).expect("get"), Some(at(10)));
    }
    // All gone: the run goes, and so do the gone keys.
    for n in 10..160 {
        keys.write().cold.forget(&code(n), false);
    }
    assert!(compact(&keys, &stop).expect("compact"));
    let keys = keys.read();
    assert_eq!(keys.cold.tiers[1].runs.len(), 0);
    assert_eq!(keys.cold.gone(), 0);
    assert_eq!(keys.cold.keys(), 1_997);
}

/// A key deleted that an older run outside the merge holds too stays gone: the new run
/// does not hold it, but the older one would answer for it.
#[test]
fn a_gone_key_an_older_run_holds_stays_gone_after_a_merge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = store(dir.path());
    let stop = AtomicBool::new(false);
    let oldest: Vec<_> = (0..1_000u64).map(|n| (seat(n), at(n))).collect();
    let older: Vec<_> = (0..100u64).map(|n| (seat(n), at(n + 1))).collect();
    let newer: Vec<_> = (100..200u64).map(|n| (seat(n), at(n + 1))).collect();
    spill_run(&keys, 0, &oldest);
    spill_run(&keys, 0, &older);
    spill_run(&keys, 0, &newer);
    keys.write().cold.forget(&seat(5), false);
    assert!(merge(&keys, &stop, (0, 1, 2)).expect("merge"));
    let keys = keys.read();
    let sizes: Vec<u64> = keys.cold.tiers[0].runs.iter().map(|l| l.run.keys).collect();
    assert_eq!(sizes, [1_000, 199], "the newer two merged");
    assert_eq!(keys.cold.get(&seat(5)).expect("get"), None);
    assert_eq!(keys.cold.get(&seat(6)).expect("get"), Some(at(7)));
    assert_eq!(keys.cold.gone(), 1);
}

/// Spilled again and again, a class keeps a few runs, at most three of each size (the
/// runs count spills in base four: 100 spills are one run of 64 of them, two of 16 and
/// one of 4), and every key answers from them.
#[test]
fn runs_stay_few_as_spills_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = store(dir.path());
    let stop = AtomicBool::new(false);
    for spill in 0..100u64 {
        let run: Vec<_> = (0..64u64)
            .map(|n| (seat(n * 100 + spill), at(spill)))
            .collect();
        spill_run(&keys, 0, &run);
        while compact(&keys, &stop).expect("compact") {}
    }
    let keys = keys.read();
    let sizes: Vec<u64> = keys.cold.tiers[0].runs.iter().map(|l| l.run.keys).collect();
    assert_eq!(sizes, [64 * 64, 16 * 64, 16 * 64, 4 * 64]);
    assert!(!keys.cold.wants_compaction());
    for spill in 0..100u64 {
        for n in [0, 31, 63] {
            let key = seat(n * 100 + spill);
            assert_eq!(keys.cold.get(&key).expect("get"), Some(at(spill)));
        }
    }
}

/// A compaction told to stop gives up and leaves the runs as they were.
#[test]
fn a_stopped_compaction_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys = store(dir.path());
    let run: Vec<_> = (0..100u64).map(|n| (seat(n), at(n))).collect();
    for _ in 0..FAN_IN {
        spill_run(&keys, 0, &run);
    }
    assert!(keys.read().cold.wants_compaction());
    assert!(!compact(&keys, &AtomicBool::new(true)).expect("compact"));
    assert_eq!(keys.read().cold.runs(), FAN_IN);
}
