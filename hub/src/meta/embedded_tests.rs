//! Tests of the embedded meta store: a model test against a plain map whatever goes cold,
//! reopens and compactions of the log at open, the replay's spills, the early lookup under
//! the staging lock, group commit and durability.

use std::cell::Cell;
use std::path::Path;
use std::sync::Arc;

use super::*;

thread_local! {
    /// How many values a compaction at open on this thread copies before it fails as on a
    /// full disk (`None`: it does not fail).
    static COPIES_LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Called by `compact_log` before it copies each value.
pub(super) fn copying() -> Result<(), StoreError> {
    COPIES_LEFT.with(|left| match left.get() {
        Some(0) => Err(StoreError::Io(std::io::ErrorKind::StorageFull.into())),
        Some(n) => {
            left.set(Some(n - 1));
            Ok(())
        }
        None => Ok(()),
    })
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn hashed(n: u8, prefix: &str) -> String {
    format!("{prefix}{}", hex::encode([n; 32]))
}

#[test]
fn keys_order_as_their_text_does() {
    let texts = [
        String::new(),
        "code/".into(),
        "code/ab".into(),
        hashed(0, "code/"),
        hashed(0xab, "code/"),
        hashed(0xff, "code/"),
        // Hashes that differ in their first byte, their eighth, ninth or last.
        format!("code/{}", "00".repeat(7) + "ff" + &"00".repeat(24)),
        format!("code/{}", "01".to_string() + &"00".repeat(31)),
        format!("code/{}", "ab".repeat(8) + &"00".repeat(24)),
        format!("code/{}", "ab".repeat(8) + "01" + &"00".repeat(23)),
        format!("code/{}", "ab".repeat(31) + "00"),
        format!("code/{}", "ab".repeat(31) + "ac"),
        format!("{}0", hashed(0xab, "code/")),
        "code/g".into(),
        "game/box/g1".into(),
        "seat".into(),
        "seat/".into(),
        hashed(1, "seat/"),
        hashed(0xab, "seat/").to_uppercase(),
        hashed(0xfe, "seat/"),
        "seat/zz".into(),
        "seau".into(),
    ];
    for a in &texts {
        let key = Key::of(a);
        assert_eq!(key.to_text(), *a);
        assert_eq!(key.len(), a.len());
        for b in &texts {
            assert_eq!(key.cmp(&Key::of(b)), a.cmp(b), "{a} against {b}");
            assert_eq!(key == Key::of(b), a == b);
        }
    }
    assert!(matches!(Key::of(&hashed(7, "seat/")), Key::Hashed(1, _)));
    assert!(matches!(
        Key::of(&hashed(7, "seat/").to_uppercase()),
        Key::Text(_)
    ));
    assert!(matches!(Key::of(&hashed(7, "game/")), Key::Text(_)));
}

#[tokio::test]
async fn hashed_and_text_keys_scan_together_and_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (low, high) = (hashed(0x10, "seat/"), hashed(0x20, "seat/"));
    let odd = format!("{}x", hashed(0x10, "seat/"));
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        for (key, value) in [(&high, "2"), (&odd, "3"), (&low, "1")] {
            meta.put(key, Bytes::copy_from_slice(value.as_bytes()))
                .await
                .expect("put");
        }
        meta.put("seat/short", b("4")).await.expect("put");
        meta.put(&hashed(0x10, "code/"), b("5")).await.expect("put");
        assert_eq!(
            meta.take(&hashed(0x10, "code/")).await.expect("take"),
            Some(b("5"))
        );
    }
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    let scanned = meta.scan("seat/").await.expect("scan");
    let keys: Vec<&str> = scanned.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [low.as_str(), odd.as_str(), high.as_str(), "seat/short"]
    );
    assert_eq!(
        meta.scan(&low).await.expect("scan").len(),
        2,
        "{low} and {odd}"
    );
    assert_eq!(meta.get(&high).await.expect("get"), Some(b("2")));
    assert!(meta.scan("code/").await.expect("scan").is_empty());
}

#[tokio::test]
async fn each_fsync_is_timed_once_metrics_are_attached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    meta.put("seat/a", b("1")).await.expect("put");
    let seconds = Histogram::with_opts(prometheus::HistogramOpts::new("fsync_seconds", "test"))
        .expect("histogram");
    meta.observe_flushes(seconds.clone());
    meta.put("seat/b", b("2")).await.expect("put");
    assert!(meta.delete("seat/a").await.expect("delete"));
    assert_eq!(meta.syncs(), 3);
    assert_eq!(seconds.get_sample_count(), 2);
    assert!(seconds.get_sample_sum() > 0.0);
}

/// Keys of every kind: seats (hashed, cold), registrations (text, cold), codes
/// (hashed, cold in a class of their own), an open mark, and a `seat/` and a `code/`
/// key that are not hashes (text, kept in memory).
fn pool() -> Vec<String> {
    let mut keys: Vec<String> = (0..6u8).map(|n| hashed(n * 40, "seat/")).collect();
    keys.extend((0..4).map(|n| format!("game/box/g{n}")));
    keys.extend((0..6u8).map(|n| hashed(n * 40 + 1, "code/")));
    keys.extend(["open/p/box/g1", "seat/short", "code/short"].map(String::from));
    keys
}

#[derive(Clone, Debug)]
enum Op {
    Put(usize, u8),
    Delete(usize),
    Discard(usize),
    InsertNew(usize, u8),
    Take(usize),
    Get(usize),
    Page(usize, usize),
    Compact,
    Reopen,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let key = 0..pool().len();
    prop_oneof![
        4 => (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => key.clone().prop_map(Op::Delete),
        1 => key.clone().prop_map(Op::Discard),
        2 => (key.clone(), any::<u8>()).prop_map(|(k, v)| Op::InsertNew(k, v)),
        1 => key.clone().prop_map(Op::Take),
        3 => key.prop_map(Op::Get),
        2 => (0..PREFIXES.len(), 1usize..5).prop_map(|(p, l)| Op::Page(p, l)),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

const PREFIXES: [&str; 7] = ["", "seat/", "game/", "code/", "open/", "game/box/g1", "s"];

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Whatever is spilled to runs, deleted after, written again, compacted (on the
    /// compactor's thread as it likes, and on the test's at chosen points) or reopened,
    /// the store answers as a plain map of its durable changes would (`COLD_KEYS` is 4
    /// in tests).
    #[test]
    fn the_store_answers_as_a_map_whatever_went_cold(ops in proptest::collection::vec(op(), 1..70)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let dir = tempfile::tempdir().expect("tempdir");
            let keys = pool();
            let mut meta = EmbeddedMeta::open(dir.path()).expect("open");
            let mut model: BTreeMap<String, Bytes> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        meta.put(&keys[k], Bytes::from(vec![v])).await.expect("put");
                        model.insert(keys[k].clone(), Bytes::from(vec![v]));
                    }
                    Op::Delete(k) => {
                        let was = meta.delete(&keys[k]).await.expect("delete");
                        assert_eq!(was, model.remove(&keys[k]).is_some(), "delete {}", keys[k]);
                    }
                    Op::Discard(k) => {
                        meta.discard(&keys[k]).await.expect("discard");
                        model.remove(&keys[k]);
                    }
                    Op::InsertNew(k, v) => {
                        let stored = meta.insert_new(&keys[k], Bytes::from(vec![v])).await.expect("insert");
                        assert_eq!(stored, !model.contains_key(&keys[k]), "insert_new {}", keys[k]);
                        model.entry(keys[k].clone()).or_insert_with(|| Bytes::from(vec![v]));
                    }
                    Op::Take(k) => {
                        let taken = meta.take(&keys[k]).await.expect("take");
                        assert_eq!(taken, model.remove(&keys[k]), "take {}", keys[k]);
                        // Durable with this caller's next change.
                        meta.put("zz", Bytes::new()).await.expect("put");
                        model.insert("zz".into(), Bytes::new());
                    }
                    Op::Get(k) => {
                        let got = meta.get(&keys[k]).await.expect("get");
                        assert_eq!(got.as_ref(), model.get(&keys[k]), "get {}", keys[k]);
                    }
                    Op::Page(p, limit) => {
                        let prefix = PREFIXES[p];
                        let expected: Vec<(String, Bytes)> = model
                            .iter()
                            .filter(|(k, _)| k.starts_with(prefix))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        assert_eq!(crate::meta::walk_pages(&meta, prefix, limit).await, expected, "{prefix:?} by {limit}");
                        assert_eq!(meta.scan(prefix).await.expect("scan"), expected);
                    }
                    Op::Compact => meta.compact_now(),
                    Op::Reopen => {
                        drop(meta);
                        meta = EmbeddedMeta::open(dir.path()).expect("reopen");
                    }
                }
            }
        });
    }
}

#[tokio::test]
async fn seats_and_registrations_leave_memory_and_are_still_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seats: Vec<String> = (0..20u8).map(|n| hashed(n, "seat/")).collect();
    let runs = |meta: &EmbeddedMeta| meta.shared.keys.read().cold.runs();
    let in_memory = |meta: &EmbeddedMeta| meta.shared.keys.read().map.len();
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        for (i, key) in seats.iter().enumerate() {
            meta.put(key, b(&i.to_string())).await.expect("put");
            meta.put(&format!("game/box/g{i:02}"), b("reg"))
                .await
                .expect("put");
        }
        meta.put(&hashed(1, "code/"), b("code")).await.expect("put");
        // Every COLD_KEYS cold keys of a class went to a run, and the runs were merged;
        // one code is too few to go.
        assert!(meta.cold_keys() >= 40 - 3, "{} cold", meta.cold_keys());
        meta.compact_now();
        assert!(runs(&meta) <= 4, "{} runs", runs(&meta));
        assert!(
            in_memory(&meta) < COLD_KEYS + 1,
            "{} in memory",
            in_memory(&meta)
        );
        for (i, key) in seats.iter().enumerate() {
            assert_eq!(meta.get(key).await.expect("get"), Some(b(&i.to_string())));
        }
        assert_eq!(meta.get(&hashed(99, "seat/")).await.expect("get"), None);
        // Deleted after going cold: gone, and not found again; written again: back.
        assert!(meta.delete(&seats[3]).await.expect("delete"));
        assert!(!meta.delete(&seats[3]).await.expect("delete"));
        assert_eq!(meta.get(&seats[3]).await.expect("get"), None);
        assert!(meta
            .insert_new(&seats[3], b("again"))
            .await
            .expect("insert"));
        assert!(!meta.insert_new(&seats[4], b("no")).await.expect("insert"));
        assert_eq!(meta.scan("game/").await.expect("scan").len(), 20);
        assert_eq!(meta.scan("seat/").await.expect("scan").len(), 20);
    }
    // Reopened: the runs are made again from the log.
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert!(runs(&meta) >= 1);
    assert_eq!(meta.get(&seats[3]).await.expect("get"), Some(b("again")));
    assert_eq!(meta.get(&seats[19]).await.expect("get"), Some(b("19")));
    assert_eq!(
        meta.get(&hashed(1, "code/")).await.expect("get"),
        Some(b("code"))
    );
}

/// Codes go cold in runs of their own; once the purge has deleted them, compactions
/// take them out of the runs and out of memory, gone entries and all, and what is left
/// still answers, after a reopen too.
#[tokio::test]
async fn purged_codes_leave_memory_once_their_runs_are_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let codes: Vec<String> = (0..=255u8).map(|n| hashed(n, "code/")).collect();
    let cold = |meta: &EmbeddedMeta| {
        let keys = meta.shared.keys.read();
        (keys.map.len(), keys.cold.gone(), keys.cold.keys())
    };
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        for code in &codes {
            meta.put(code, b("tombstone")).await.expect("put");
        }
        meta.compact_now();
        let (in_memory, gone, spilled) = cold(&meta);
        assert!(
            in_memory <= COLD_KEYS && gone == 0,
            "{in_memory} in memory, {gone} gone"
        );
        assert_eq!(spilled, 256 - in_memory as u64);
        // The purge discards all but every eighth, without looking them up; the
        // compactor's thread is free to start meanwhile, and the test's waits for it.
        for (n, code) in codes.iter().enumerate() {
            if n % 8 != 0 {
                meta.discard(code).await.expect("discard");
            }
        }
        // Discarding what is not there changes nothing.
        meta.discard(&hashed(0, "seat/")).await.expect("discard");
        meta.discard(&codes[1]).await.expect("discard");
        meta.compact_now();
        let (in_memory, gone, spilled) = cold(&meta);
        // A gone entry stays only where another run's filter admits its key by chance.
        assert!(gone <= 4, "{gone} gone");
        assert!(
            spilled + in_memory as u64 <= 32 + 4,
            "{spilled} cold, {in_memory} warm"
        );
        for (n, code) in codes.iter().enumerate() {
            let expected = (n % 8 == 0).then(|| b("tombstone"));
            assert_eq!(meta.get(code).await.expect("get"), expected, "{code}");
        }
        assert_eq!(meta.scan("code/").await.expect("scan").len(), 32);
        // The rest, and the runs go.
        for code in codes.iter().step_by(8) {
            assert!(meta.delete(code).await.expect("delete"));
        }
        meta.compact_now();
        assert_eq!(cold(&meta), (0, 0, 0));
        assert!(meta.scan("code/").await.expect("scan").is_empty());
        meta.put(&codes[3], b("again")).await.expect("put");
    }
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(
        meta.scan("code/").await.expect("scan"),
        vec![(codes[3].clone(), b("again"))]
    );
}

/// A store whose keys all stayed in memory as it ran (`cold_keys` 0), reopened with
/// keys going cold: they go as they are replayed, and deletions replayed after keys
/// went cold are merged out before they gather, so memory never holds what it did.
#[tokio::test]
async fn a_replay_spills_as_it_goes_and_keeps_few_deletions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seats: Vec<String> = (0..40u8).map(|n| hashed(n, "seat/")).collect();
    let codes: Vec<String> = (0..40u8).map(|n| hashed(n, "code/")).collect();
    {
        let meta = EmbeddedMeta::open_with(dir.path(), PACING, 0).expect("open");
        for (i, (seat, code)) in seats.iter().zip(&codes).enumerate() {
            meta.put(seat, b(&format!("s{i}"))).await.expect("put");
            meta.put(&format!("game/box/g{i:02}"), b("reg"))
                .await
                .expect("put");
            meta.put(code, b(&format!("c{i}"))).await.expect("put");
        }
        meta.put("open/box", b("mark")).await.expect("put");
        // The purge, long after: most codes go.
        for code in &codes[..36] {
            assert!(meta.delete(code).await.expect("delete"));
        }
        meta.put(&seats[5], b("again")).await.expect("put");
        assert_eq!(meta.replay_peak(), 0);
    }
    let meta = EmbeddedMeta::open_with(dir.path(), PACING, 4).expect("reopen");
    // 121 keys were live at once as the store ran.
    assert!(meta.replay_peak() <= 16, "{} at once", meta.replay_peak());
    {
        let keys = meta.shared.keys.read();
        assert!(keys.cold.runs() <= 2, "{} runs", keys.cold.runs());
        // What the replay left in memory of each class joined the runs: the mark alone is left.
        assert_eq!(keys.map.len(), 1, "{:?} in memory", keys.map.keys());
    }
    for (i, seat) in seats.iter().enumerate() {
        let expected = if i == 5 {
            b("again")
        } else {
            b(&format!("s{i}"))
        };
        assert_eq!(meta.get(seat).await.expect("get"), Some(expected));
    }
    for (i, code) in codes.iter().enumerate() {
        let expected = (i >= 36).then(|| b(&format!("c{i}")));
        assert_eq!(meta.get(code).await.expect("get"), expected, "{code}");
    }
    assert_eq!(meta.scan("game/").await.expect("scan").len(), 40);
    assert_eq!(meta.scan("").await.expect("scan").len(), 40 + 40 + 4 + 1);
}

/// The bytes of a store's meta log, and how many segments it has.
fn meta_log(dir: &Path) -> (u64, usize) {
    let segments: Vec<u64> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_name().to_string_lossy().starts_with("meta-"))
        .map(|e| e.metadata().expect("metadata").len())
        .collect();
    (segments.iter().sum(), segments.len())
}

/// Writes 24 seats' keys eight times over (spilled to runs as they go, four keys a run),
/// deletes six, writes the first again, and one key that stays in memory; returns the
/// seats' keys. The log is then far larger than the live data: the next open compacts it.
async fn seats_rewritten(dir: &Path) -> Vec<String> {
    let seats: Vec<String> = (0..24u8).map(|n| hashed(n, "seat/")).collect();
    let meta = EmbeddedMeta::open_with(dir, PACING, 4).expect("open");
    for round in 0..8 {
        for (i, seat) in seats.iter().enumerate() {
            let value = format!("{round}:{i}:{}", "x".repeat(100));
            meta.put(seat, b(&value)).await.expect("put");
        }
    }
    for seat in &seats[..6] {
        assert!(meta.delete(seat).await.expect("delete"));
    }
    meta.put(&seats[0], b("back")).await.expect("put");
    meta.put("other", b("kept")).await.expect("put");
    seats
}

/// What [`seats_rewritten`] left: every key with its newest value, the deleted ones gone.
async fn check_seats_rewritten(meta: &EmbeddedMeta, seats: &[String]) {
    assert_eq!(meta.get(&seats[0]).await.expect("get"), Some(b("back")));
    for seat in &seats[1..6] {
        assert_eq!(meta.get(seat).await.expect("get"), None, "{seat}");
    }
    for (i, seat) in seats.iter().enumerate().skip(6) {
        let value = format!("7:{i}:{}", "x".repeat(100));
        assert_eq!(meta.get(seat).await.expect("get"), Some(b(&value)));
    }
    assert_eq!(meta.get("other").await.expect("get"), Some(b("kept")));
    assert_eq!(meta.scan("seat/").await.expect("scan").len(), 18 + 1);
}

/// A log compacted at open holds every live key once, the cold ones too, with their
/// newest values: a key deleted after it went cold stays deleted, and one written again
/// keeps its newest value, through the compaction and the reopen after it.
#[tokio::test]
async fn a_log_compacted_at_open_keeps_cold_keys_as_they_were() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seats = seats_rewritten(dir.path()).await;
    let (before, _) = meta_log(dir.path());
    let meta = EmbeddedMeta::open_with(dir.path(), PACING, 4).expect("reopen");
    check_seats_rewritten(&meta, &seats).await;
    assert_eq!(meta.scan("").await.expect("scan").len(), 18 + 1 + 1);
    drop(meta);
    let (after, _) = meta_log(dir.path());
    assert!(after * 4 < before, "{before} bytes of log, {after} after");
    // Replayed from the compacted log alone, with nothing going cold this time.
    let meta = EmbeddedMeta::open_with(dir.path(), PACING, 0).expect("reopen compacted");
    check_seats_rewritten(&meta, &seats).await;
    drop(meta);
    assert_eq!(meta_log(dir.path()).0, after);
}

/// A compaction at open that fails part way, as on a full disk, does not keep the store
/// from opening: the log is replayed again and kept, with the copies the compaction wrote
/// before it failed, and every key reads as it was. The next open compacts it.
#[tokio::test]
async fn a_compaction_that_fails_at_open_leaves_the_keys_as_they_were() {
    let dir = tempfile::tempdir().expect("tempdir");
    let seats = seats_rewritten(dir.path()).await;
    let (before, segments) = meta_log(dir.path());
    COPIES_LEFT.set(Some(10));
    let meta = EmbeddedMeta::open_with(dir.path(), PACING, 4).expect("open without compacting");
    COPIES_LEFT.set(None);
    check_seats_rewritten(&meta, &seats).await;
    meta.put("new", b("after")).await.expect("put");
    drop(meta);
    let (kept, kept_segments) = meta_log(dir.path());
    assert_eq!(
        kept_segments,
        segments + 1,
        "the compaction's segment stays"
    );
    assert!(
        kept > before + 10 * 100,
        "{before} bytes of log, {kept} with ten values copied and one change"
    );
    let meta = EmbeddedMeta::open_with(dir.path(), PACING, 4).expect("reopen");
    check_seats_rewritten(&meta, &seats).await;
    assert_eq!(meta.get("new").await.expect("get"), Some(b("after")));
    drop(meta);
    let (after, _) = meta_log(dir.path());
    assert!(after * 4 < before, "{before} bytes of log, {after} after");
}

#[tokio::test]
async fn pages_of_a_scan_walk_every_key_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    crate::meta::check_scan_pages(&meta).await;
}

#[tokio::test]
async fn a_replace_writes_only_over_the_value_expected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    crate::meta::check_replace(&meta).await;
    // Against a value staged and not yet durable, too: the newest value is the one
    // compared, as for every other check of the store.
    let (put, replaced) = tokio::join!(
        meta.put("r/b", Bytes::from_static(b"1")),
        meta.replace("r/b", b"1", Some(Bytes::from_static(b"2")))
    );
    put.expect("put");
    assert!(replaced.expect("replace"));
    drop(meta);
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(
        meta.get("r/b").await.expect("get"),
        Some(Bytes::from_static(b"2"))
    );
    assert_eq!(
        meta.get("r/a").await.expect("get"),
        Some(Bytes::from_static(b"again"))
    );
}

#[tokio::test]
async fn changes_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        meta.put("seat/a", b("1")).await.expect("put");
        meta.put("seat/b", b("2")).await.expect("put");
        meta.put("seat/a", b("3")).await.expect("put");
        meta.put("code/x", b("4")).await.expect("put");
        assert!(meta.delete("seat/b").await.expect("delete"));
        assert!(!meta.delete("seat/b").await.expect("delete"));
    }
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(meta.get("seat/a").await.expect("get"), Some(b("3")));
    assert_eq!(meta.get("seat/b").await.expect("get"), None);
    let scanned = meta.scan("seat/").await.expect("scan");
    assert_eq!(scanned, vec![("seat/a".to_string(), b("3"))]);
    assert_eq!(meta.scan("").await.expect("scan").len(), 2);
    assert!(meta.scan("zzz").await.expect("scan").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_new_and_take_are_atomic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = Arc::new(EmbeddedMeta::open(dir.path()).expect("open"));
    meta.put("code/c", b("once")).await.expect("put");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let meta = meta.clone();
        tasks.push(tokio::spawn(async move {
            let reserved = meta
                .insert_new("game/g", b(&i.to_string()))
                .await
                .expect("insert");
            let taken = meta.take("code/c").await.expect("take").is_some();
            (reserved, taken)
        }));
    }
    let (mut reserved, mut taken) = (0, 0);
    for task in tasks {
        let (r, t) = task.await.expect("task");
        reserved += usize::from(r);
        taken += usize::from(t);
    }
    assert_eq!((reserved, taken), (1, 1));
    // The take is durable with the next change (until then `get`, which shows durable
    // contents only, may still see the code).
    meta.put("seat/o", b("after")).await.expect("put");
    assert_eq!(meta.get("code/c").await.expect("get"), None);
    assert!(!meta.insert_new("game/g", b("again")).await.expect("insert"));
}

#[tokio::test]
async fn a_lookup_made_before_the_writer_applied_a_change_is_looked_up_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    meta.put("code/c", b("first")).await.expect("put");
    // A taker looks the code up outside the staging lock; before it stages its take,
    // another takes the code and it is put again, both applied by the writer.
    let early = meta.shared.look("code/c", Ask::Value);
    assert!(early.as_ref().is_some_and(|l| l.found.is_some()));
    assert_eq!(meta.take("code/c").await.expect("take"), Some(b("first")));
    meta.put("code/c", b("second")).await.expect("put");
    let taken = meta
        .stage("code/c", None, Ask::Value, early, true)
        .await
        .expect("take");
    assert_eq!(taken, Some(Some(b("second"))), "not the value taken before");
    // The same the other way: looked up while absent, put meanwhile.
    let early = meta.shared.look("game/g", Ask::Absent);
    assert!(early.as_ref().is_some_and(|l| l.found.is_none()));
    meta.put("game/g", b("reserved")).await.expect("put");
    let inserted = meta
        .stage("game/g", Some(b("again")), Ask::Absent, early, true)
        .await
        .expect("insert");
    assert_eq!(inserted, None, "a second reservation");
    assert_eq!(meta.get("game/g").await.expect("get"), Some(b("reserved")));
}

#[tokio::test]
async fn a_lookup_made_while_the_writer_applied_nothing_is_used_as_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    meta.put("code/c", b("durable")).await.expect("put");
    let looked = meta.shared.look("code/c", Ask::Value).expect("look");
    let Some((at, Some(value))) = looked.found else {
        panic!("the code's value was not read");
    };
    assert_eq!(value, b("durable"));
    // What the lookup read is what the take answers: the frame is not read again
    // under the staging lock (a value the log does not hold shows it).
    let early = Looked {
        applied: looked.applied,
        found: Some((at, Some(b("read early")))),
    };
    let taken = meta
        .stage("code/c", None, Ask::Value, Some(early), true)
        .await
        .expect("take");
    assert_eq!(taken, Some(Some(b("read early"))));
    assert_eq!(meta.get("code/c").await.expect("get"), None);
}

#[tokio::test]
async fn a_take_is_durable_with_the_next_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = EmbeddedMeta::open(dir.path()).expect("open");
    meta.put("code/a", b("once")).await.expect("put");
    assert_eq!(meta.take("code/a").await.expect("take"), Some(b("once")));
    // Staged: a second taker finds nothing, at once.
    assert_eq!(meta.take("code/a").await.expect("take"), None);
    meta.put("seat/o", b("token")).await.expect("put");
    // A copy taken while the store is still open (no shutdown flush): the put is
    // durable, and the log orders the take before it.
    let copy = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), copy.path().join(entry.file_name())).expect("copy");
    }
    let reopened = EmbeddedMeta::open(copy.path()).expect("reopen the copy");
    assert_eq!(reopened.get("code/a").await.expect("get"), None);
    assert_eq!(reopened.get("seat/o").await.expect("get"), Some(b("token")));
}

#[tokio::test]
async fn a_torn_tail_is_cut_and_a_large_log_is_compacted() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        let big = Bytes::from(vec![7u8; 4096]);
        for _ in 0..400 {
            meta.put("k", big.clone()).await.expect("put");
        }
        meta.put("last", b("kept")).await.expect("put");
    }
    let segment = dir.path().join("meta-00000000.log");
    let mut data = std::fs::read(&segment).expect("read");
    data.extend_from_slice(&[99, 0, 0, 0, 1]);
    std::fs::write(&segment, &data).expect("tear");
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(meta.get("last").await.expect("get"), Some(b("kept")));
    assert!(
        !segment.exists(),
        "the compacted log replaces the old segment"
    );
    // Values are read back from the compacted segment, and new ones from after it.
    meta.put("new", b("after")).await.expect("put");
    assert_eq!(meta.get("new").await.expect("get"), Some(b("after")));
    assert_eq!(meta.take("last").await.expect("take"), Some(b("kept")));
    meta.put("last", b("kept")).await.expect("put");
    assert!(meta.delete("new").await.expect("delete"));
    drop(meta);
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen compacted");
    assert_eq!(
        meta.get("k").await.expect("get").map(|v| v.len()),
        Some(4096)
    );
    assert_eq!(meta.scan("").await.expect("scan").len(), 2);
}

#[tokio::test]
async fn damage_before_acknowledged_changes_is_refused_and_nothing_is_cut() {
    // The meta log of a small hub lies wholly within `log::TORN_MAX`: the third of 300
    // changes with its length word zeroed, or a zeroed sector near the start, passed for a
    // torn write and was cut with every change after it.
    for zeros in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let meta = EmbeddedMeta::open(dir.path()).expect("open");
            for i in 0..300 {
                meta.put(&format!("k/{i:03}"), b("v")).await.expect("put");
            }
        }
        let segment = dir.path().join("meta-00000000.log");
        let mut data = std::fs::read(&segment).expect("read");
        let damaged = log::damage_early(&mut data, zeros);
        std::fs::write(&segment, &data).expect("write");
        let Err(StoreError::Corrupt(why)) = EmbeddedMeta::open(dir.path()) else {
            panic!("damage at byte {damaged} was cut with the changes after it");
        };
        let at = format!("{} is damaged at byte {damaged} ", segment.display());
        assert!(why.contains(&at), "{why}");
        assert_eq!(
            std::fs::read(&segment).expect("read"),
            data,
            "the log was changed"
        );
    }
}

#[tokio::test]
async fn a_torn_last_batch_is_cut_and_every_acknowledged_change_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = dir.path().join("meta-00000000.log");
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        for i in 0..50 {
            meta.put(&format!("k/{i:02}"), b("v")).await.expect("put");
        }
    }
    let synced = std::fs::metadata(&segment).expect("metadata").len();
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        let long = Bytes::from(vec![b'x'; 2000]);
        meta.put("long", long).await.expect("put");
    }
    // The crash came during that batch's fsync, before the close: the disk took its first
    // sector and not its second.
    let mut data = std::fs::read(&segment).expect("read");
    log::unclosed(&mut data);
    let lost = (synced as usize / 512 + 1) * 512;
    data[lost..lost + 512].fill(0);
    std::fs::write(&segment, &data).expect("write");
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(meta.scan("k/").await.expect("scan").len(), 50);
    assert_eq!(meta.get("long").await.expect("get"), None);
    assert_eq!(std::fs::metadata(&segment).expect("metadata").len(), synced);
}

#[tokio::test]
async fn a_zeroed_sector_in_the_last_batch_of_a_store_closed_in_good_order_is_refused() {
    // Its close ends the log with a mark that records the last batch as synced: no crash
    // can have torn it, so zeros there are damage, and the acknowledged change in them
    // is not cut away unseen.
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = dir.path().join("meta-00000000.log");
    {
        let meta = EmbeddedMeta::open(dir.path()).expect("open");
        meta.put("k", b("v")).await.expect("put");
        meta.put("long", Bytes::from(vec![b'x'; 2000]))
            .await
            .expect("put");
    }
    let mut data = std::fs::read(&segment).expect("read");
    let end = data.len() - 2 * log::MARK_BYTES;
    let zeroed = (end - 1024) / 512 * 512;
    data[zeroed..zeroed + 512].fill(0);
    std::fs::write(&segment, &data).expect("write");
    let Err(refused) = EmbeddedMeta::open(dir.path()) else {
        panic!("the zeroed sector was cut as a torn write");
    };
    assert!(
        refused.to_string().contains("records as synced"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read(&segment).expect("read"),
        data,
        "the log was changed"
    );
}

#[tokio::test]
async fn concurrent_changes_share_fsyncs_and_are_durable_when_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta = Arc::new(EmbeddedMeta::open(dir.path()).expect("open"));
    let before = meta.syncs();
    // On a current-thread runtime the tasks run only once this one waits, so all of
    // them stage their change before the writer has answered the first.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let meta = meta.clone();
        tasks.spawn(async move {
            let key = format!("k/{i}");
            meta.put(&key, b("v")).await.expect("put");
            // Answered means durable, and so visible.
            assert_eq!(meta.get(&key).await.expect("get"), Some(b("v")));
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let syncs = meta.syncs() - before;
    assert!(
        (1..=100).contains(&syncs),
        "200 changes took {syncs} fsyncs"
    );
    drop(meta);
    let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
    assert_eq!(meta.scan("k/").await.expect("scan").len(), 200);
}
