//! Tests of the embedded inbox: durability across reopen, torn tails, indexes, ordering,
//! concurrency, verdicts and cursors, and a child process killed mid-append.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use games::{Reason, Seat};

use super::*;
use crate::inbox::shard_for;

fn open(dir: &Path) -> EmbeddedInbox {
    EmbeddedInbox::open(dir, 4).expect("open inbox")
}

fn event(game: &str, seq: u64) -> Bytes {
    Bytes::from(format!(r#"{{"game":"{game}","seq":{seq}}}"#))
}

async fn append(inbox: &EmbeddedInbox, name: &str, game: &str, seq: u64) -> Capture {
    inbox
        .append(name, game, Some(Seat::X), event(game, seq))
        .await
        .expect("append")
}

#[tokio::test]
async fn appends_wait_out_a_segment_that_cannot_be_opened_and_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = |dir: &Path| {
        EmbeddedInbox::open_sized(dir, 1, PACING, lock(dir).expect("lock"), 2048)
            .expect("open inbox")
    };
    // Something squats on the second segment's name (as no descriptor left would make
    // its open fail): the first segment fills, and the next append finds nowhere to go.
    let squatter = dir.path().join("inbox-00000001.log");
    let mut acknowledged = Vec::new();
    {
        let inbox = small(dir.path());
        std::fs::create_dir(&squatter).expect("a directory in the way");
        let refused = loop {
            let seq = acknowledged.len() as u64;
            match inbox.append("box", "g", None, event("g", seq)).await {
                Ok(capture) => acknowledged.push(capture),
                Err(e) => break e,
            }
            assert!(acknowledged.len() < 100, "the first segment never filled");
        };
        assert!(
            matches!(&refused, StoreError::Unavailable(d) if d.contains("cannot start log segment")),
            "{refused}"
        );
        assert!(inbox.ready(), "the store still takes writes");
        // Refused again while the name is taken, and the refused appends take no position.
        assert!(inbox.append("box", "g", None, event("g", 0)).await.is_err());
        std::fs::remove_dir(&squatter).expect("the squatter goes");
        for _ in 0..20 {
            let seq = acknowledged.len() as u64;
            acknowledged.push(
                inbox
                    .append("box", "g", None, event("g", seq))
                    .await
                    .expect("appends go on in the next segment"),
            );
        }
    }
    let positions: Vec<u64> = acknowledged.iter().map(|c| c.pos).collect();
    let gapless: Vec<u64> = (1..=acknowledged.len() as u64).collect();
    assert_eq!(positions, gapless);
    assert!(
        squatter.is_file(),
        "the second segment holds the later appends"
    );
    let inbox = small(dir.path());
    let stored = inbox.game_records("box", "g").await.expect("records");
    let seqs: Vec<String> = stored
        .iter()
        .map(|r| String::from_utf8_lossy(&r.raw).into_owned())
        .collect();
    let expected: Vec<String> = (0..acknowledged.len() as u64)
        .map(|seq| String::from_utf8_lossy(&event("g", seq)).into_owned())
        .collect();
    assert_eq!(seqs, expected, "every acknowledged event, once, in order");
}

#[tokio::test]
async fn a_missing_first_segment_is_refused_and_named() {
    // Deleting the first of several segments stopped the start with "event 1:N out of
    // order" in the second, which did not say which file to restore.
    let dir = tempfile::tempdir().expect("tempdir");
    let small =
        |dir: &Path| EmbeddedInbox::open_sized(dir, 1, PACING, lock(dir).expect("lock"), 2048);
    let first = dir.path().join("inbox-00000000.log");
    let third = dir.path().join("inbox-00000002.log");
    {
        let inbox = small(dir.path()).expect("open inbox");
        let mut seq = 0;
        while !third.exists() {
            inbox
                .append("box", "g", None, event("g", seq))
                .await
                .expect("append");
            seq += 1;
            assert!(seq < 1000, "2 KiB segments never rolled");
        }
    }
    assert!(small(dir.path()).is_ok(), "whole, it opens");
    fs::remove_file(&first).expect("remove");
    let opened = small(dir.path());
    let Err(StoreError::Corrupt(why)) = opened else {
        panic!("a store without its first segment opened");
    };
    assert!(
        why.contains(&format!("{} is missing", first.display())),
        "{why}"
    );
    assert!(!first.exists(), "it was made afresh");
}

#[tokio::test]
async fn records_and_verdicts_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut captures = Vec::new();
    {
        let inbox = open(dir.path());
        for seq in 0..5 {
            captures.push((append(&inbox, "box", "g1", seq).await, "g1", seq));
            captures.push((append(&inbox, "box", "g2", seq).await, "g2", seq));
        }
        let anonymous = inbox
            .append("other", "g1", None, event("g1", 0))
            .await
            .expect("append");
        inbox
            .put_verdict(
                captures[0].0,
                StoredVerdict::Accepted {
                    hash: "ab".repeat(32),
                },
            )
            .await
            .expect("verdict");
        let rejected = StoredVerdict::Rejected {
            reason: Reason::StaleSeq,
            detail: Some("racing".into()),
        };
        inbox
            .put_verdict(captures[1].0, rejected)
            .await
            .expect("verdict");
        inbox
            .put_verdict(anonymous, StoredVerdict::Skipped)
            .await
            .expect("verdict");
        // No sync: dropping the store must still leave the verdicts on disk.
    }
    let inbox = open(dir.path());
    assert_eq!(inbox.open_report().events, 11);
    assert_eq!(inbox.open_report().truncated, 0);
    for (capture, game, seq) in &captures {
        let (record, _) = inbox
            .get("box", *capture)
            .await
            .expect("get")
            .expect("present");
        assert_eq!((record.game.as_str(), record.seat), (*game, Some(Seat::X)));
        assert_eq!(record.raw, event(game, *seq));
        assert!(record.at_ms > 0);
    }
    assert_eq!(
        inbox.verdict(captures[0].0).await.expect("verdict"),
        Some(StoredVerdict::Accepted {
            hash: "ab".repeat(32)
        })
    );
    assert_eq!(
        inbox.verdict(captures[1].0).await.expect("verdict"),
        Some(StoredVerdict::Rejected {
            reason: Reason::StaleSeq,
            detail: Some("racing".into())
        })
    );
    assert_eq!(inbox.verdict(captures[2].0).await.expect("verdict"), None);
    let other = inbox.list("other", None, None, 10).await.expect("list");
    assert_eq!(other.items.len(), 1);
    assert_eq!(other.items[0].0.seat, None);
    assert_eq!(other.items[0].1, Some(StoredVerdict::Skipped));
    // Appends after a reopen continue each shard's positions without a gap.
    let shard = inbox.shard_of("box", "g1");
    let high_water = *inbox.watch_shard(shard).expect("watch").borrow();
    assert!(high_water > 0);
    assert_eq!(
        append(&inbox, "box", "g1", 5).await,
        Capture {
            shard,
            pos: high_water + 1
        }
    );
    assert_eq!(inbox.count("box", "g1").await.expect("count"), 6);
}

#[tokio::test]
async fn torn_tail_is_cut_at_open_and_acknowledged_events_stay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut acked = Vec::new();
    {
        let inbox = open(dir.path());
        for seq in 0..20 {
            acked.push(append(&inbox, "box", &format!("g{}", seq % 3), seq).await);
        }
    }
    // A batch the process was writing when it died: a frame header promising more bytes
    // than follow.
    let segment = dir.path().join("inbox-00000000.log");
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .expect("segment");
    file.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9, 9])
        .expect("tear");
    drop(file);
    let inbox = open(dir.path());
    assert_eq!(inbox.open_report().truncated, 11);
    assert_eq!(inbox.open_report().events, 20);
    for capture in &acked {
        assert!(
            inbox.get("box", *capture).await.expect("get").is_some(),
            "{capture} lost"
        );
    }
    let after = append(&inbox, "box", "g0", 20).await;
    drop(inbox);
    let inbox = open(dir.path());
    assert_eq!(inbox.open_report().truncated, 0);
    assert!(inbox.get("box", after).await.expect("get").is_some());
}

#[tokio::test]
async fn damage_before_acknowledged_events_is_refused_and_nothing_is_cut() {
    // A log smaller than `log::TORN_MAX` lay wholly where damage passed for a torn write:
    // the third of 300 events with its length word zeroed, or a zeroed sector near the
    // start, and the acknowledged events after it were cut with a warning.
    for zeros in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let inbox = open(dir.path());
            for seq in 0..300 {
                append(&inbox, "box", "g", seq).await;
            }
        }
        let segment = dir.path().join("inbox-00000000.log");
        let mut data = fs::read(&segment).expect("read");
        let damaged = log::damage_early(&mut data, zeros);
        fs::write(&segment, &data).expect("write");
        let Err(StoreError::Corrupt(why)) = EmbeddedInbox::open(dir.path(), 4) else {
            panic!("damage at byte {damaged} was cut with the events after it");
        };
        let at = format!("{} is damaged at byte {damaged} ", segment.display());
        assert!(why.contains(&at), "{why}");
        assert_eq!(
            fs::read(&segment).expect("read"),
            data,
            "the log was changed"
        );
    }
}

#[tokio::test]
async fn a_torn_last_batch_is_cut_and_every_acknowledged_event_stays() {
    let dir = tempfile::tempdir().expect("tempdir");
    let segment = dir.path().join("inbox-00000000.log");
    let mut acked = Vec::new();
    {
        let inbox = open(dir.path());
        for seq in 0..50 {
            acked.push(append(&inbox, "box", "g", seq).await);
        }
    }
    let synced = fs::metadata(&segment).expect("metadata").len();
    {
        let inbox = open(dir.path());
        let long = format!(r#"{{"game":"g","seq":50,"pad":"{}"}}"#, "x".repeat(2000));
        inbox
            .append("box", "g", None, Bytes::from(long))
            .await
            .expect("append");
    }
    // The crash came during that batch's fsync, before the close: the disk took its first
    // sector and not its second.
    let mut data = fs::read(&segment).expect("read");
    log::unclosed(&mut data);
    let lost = (synced as usize / 512 + 1) * 512;
    data[lost..lost + 512].fill(0);
    fs::write(&segment, &data).expect("write");
    let inbox = open(dir.path());
    assert_eq!(inbox.open_report().events, 50);
    assert!(inbox.open_report().truncated > 0);
    for capture in &acked {
        assert!(
            inbox.get("box", *capture).await.expect("get").is_some(),
            "{capture} lost"
        );
    }
    assert_eq!(fs::metadata(&segment).expect("metadata").len(), synced);
}

#[tokio::test]
async fn a_store_from_before_marks_opens_and_then_gets_the_current_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let inbox = open(dir.path());
        for seq in 0..3 {
            append(&inbox, "box", "g", seq).await;
        }
    }
    // As a hub from before marks left it: the first header, frames without marks.
    let header = dir.path().join("HEADER");
    fs::write(&header, "pipehub-inbox 1\nshards 4\n").expect("header");
    let segment = dir.path().join("inbox-00000000.log");
    let marked = fs::read(&segment).expect("read");
    let frames = log::frames_and_marks(&marked);
    let mut unmarked = Vec::new();
    for (i, &(at, mark)) in frames.iter().enumerate() {
        let end = frames.get(i + 1).map_or(marked.len(), |f| f.0);
        if !mark {
            unmarked.extend_from_slice(&marked[at..end]);
        }
    }
    // Damaged, it is refused, and its header left as it was.
    let mut damaged = unmarked.clone();
    damaged[log::HEADER + 1] ^= 0x40;
    fs::write(&segment, &damaged).expect("write");
    assert!(
        EmbeddedInbox::open(dir.path(), 4).is_err(),
        "damage was cut"
    );
    assert!(fs::read_to_string(&header)
        .expect("header")
        .starts_with("pipehub-inbox 1\n"));
    fs::write(&segment, &unmarked).expect("write");
    let inbox = open(dir.path());
    assert_eq!(inbox.open_report().events, 3);
    let text = fs::read_to_string(&header).expect("header");
    assert_eq!(text, format!("{HEADER_MAGIC}\nshards 4\n"));
    assert_ne!(HEADER_MAGIC, "pipehub-inbox 1");
}

#[tokio::test]
async fn shards_read_in_order_and_indexes_split_games_and_inboxes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = open(dir.path());
    let mut by_game: HashMap<(String, String), Vec<Capture>> = HashMap::new();
    for i in 0..60u64 {
        let name = if i % 4 == 0 { "a" } else { "b" };
        let game = format!("g{}", i % 7);
        let capture = append(&inbox, name, &game, i).await;
        assert_eq!(capture.shard, shard_for(name, &game, 4));
        by_game
            .entry((name.into(), game))
            .or_default()
            .push(capture);
    }
    let mut total = 0;
    for shard in 0..4 {
        let records = inbox.read_shard(shard, 1, 1000).await.expect("read");
        let positions: Vec<u64> = records.iter().map(|r| r.capture.pos).collect();
        assert_eq!(
            positions,
            (1..=records.len() as u64).collect::<Vec<_>>(),
            "shard {shard} has a gap"
        );
        let tail = inbox.read_shard(shard, 3, 2).await.expect("read");
        assert!(tail
            .iter()
            .map(|r| r.capture.pos)
            .eq((3..5).take(records.len().saturating_sub(2))));
        assert_eq!(
            *inbox.watch_shard(shard).expect("watch").borrow(),
            records.len() as u64
        );
        total += records.len();
    }
    assert_eq!(total, 60);
    for ((name, game), captures) in &by_game {
        let records = inbox.game_records(name, game).await.expect("records");
        assert_eq!(
            records.iter().map(|r| r.capture).collect::<Vec<_>>(),
            *captures
        );
        assert!(records.iter().all(|r| &r.inbox == name && &r.game == game));
        assert_eq!(
            inbox.count(name, game).await.expect("count"),
            captures.len() as u64
        );
    }
    assert!(inbox
        .game_records("a", "nope")
        .await
        .expect("records")
        .is_empty());
    let games = inbox.games("a", None, 100).await.expect("games");
    assert_eq!(games.len(), 7);
    // g0 appeared first in inbox "a" (i = 0), so it is listed last.
    assert_eq!(games.last().map(|g| g.game.as_str()), Some("g0"));
    // A capture is only found through its own inbox.
    let a_capture = by_game[&("a".to_string(), "g0".to_string())][0];
    assert!(inbox.get("b", a_capture).await.expect("get").is_none());
    assert!(inbox
        .get(
            "a",
            Capture {
                shard: 0,
                pos: 10_000
            }
        )
        .await
        .expect("get")
        .is_none());
    assert!(matches!(
        inbox.read_shard(4, 1, 1).await,
        Err(StoreError::NoShard(4))
    ));
}

#[tokio::test]
async fn a_shard_read_takes_fresh_records_from_memory_and_the_rest_from_disk() {
    // What the writer just made durable is read from memory, once; a read of the same
    // positions again, or of positions the memory no longer holds, reads the disk, and
    // both give the same records.
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = EmbeddedInbox::open(dir.path(), 1).expect("open");
    for seq in 0..5u64 {
        append(&inbox, "box", "g0", seq).await;
    }
    let kept = |inbox: &EmbeddedInbox| inbox.shared.fresh[0].len();
    assert_eq!(kept(&inbox), 5);
    let fresh = inbox.read_shard(0, 1, 2).await.expect("read");
    assert_eq!(kept(&inbox), 3, "two taken from memory");
    let again = inbox.read_shard(0, 1, 5).await.expect("read");
    assert_eq!(kept(&inbox), 3, "read from disk: memory starts at 3");
    let rest = inbox.read_shard(0, 3, 5).await.expect("read");
    assert_eq!(kept(&inbox), 0, "the other three taken from memory");
    let key = |r: &Record| {
        (
            r.capture,
            r.inbox.clone(),
            r.game.clone(),
            r.seat,
            r.raw.clone(),
            r.at_ms,
        )
    };
    assert_eq!(
        fresh.iter().map(key).collect::<Vec<_>>(),
        again[..2].iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(again.len(), 5);
    assert_eq!(
        rest.iter().map(key).collect::<Vec<_>>(),
        again[2..].iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(fresh[1].raw, event("g0", 1));
    // What memory hands on carries its write's moment on the monotonic clock; what the
    // disk gives back has only the stored milliseconds.
    assert!(fresh.iter().chain(&rest).all(|r| r.written.is_some()));
    assert!(again.iter().all(|r| r.written.is_none()));
    // Past the end: nothing, from memory or disk.
    assert!(inbox.read_shard(0, 6, 5).await.expect("read").is_empty());
}

#[tokio::test]
async fn listing_cursors_walk_the_inbox_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = open(dir.path());
    let mut order = Vec::new();
    for i in 0..10u64 {
        order.push(append(&inbox, "box", &format!("g{}", i % 2), i).await);
    }
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = inbox
            .list("box", None, after.as_deref(), 3)
            .await
            .expect("list");
        assert!(page.items.len() <= 3);
        walked.extend(page.items.iter().map(|(r, _)| r.capture));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(walked, order);
    let exact = inbox.list("box", None, None, 10).await.expect("list");
    assert_eq!((exact.items.len(), exact.next), (10, None));
    let g1 = inbox
        .list("box", Some("g1"), Some(&order[4].to_string()), 10)
        .await
        .expect("list");
    assert_eq!(
        g1.items.iter().map(|(r, _)| r.capture).collect::<Vec<_>>(),
        vec![order[5], order[7], order[9]]
    );
    assert!(matches!(
        inbox.list("box", None, Some("garbage"), 3).await,
        Err(StoreError::BadCursor)
    ));
    assert!(matches!(
        inbox.list("box", None, Some("3:999"), 3).await,
        Err(StoreError::BadCursor)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_all_acknowledged_and_share_fsyncs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = Arc::new(open(dir.path()));
    let mut tasks = Vec::new();
    for writer in 0..64u64 {
        let inbox = inbox.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for seq in 0..20 {
                let game = format!("w{writer}");
                mine.push((
                    inbox
                        .append("box", &game, None, event(&game, seq))
                        .await
                        .expect("append"),
                    game,
                    seq,
                ));
            }
            mine
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.expect("task"));
    }
    let distinct: HashSet<Capture> = acked.iter().map(|(c, _, _)| *c).collect();
    assert_eq!(distinct.len(), 64 * 20);
    for (capture, game, seq) in &acked {
        let (record, _) = inbox
            .get("box", *capture)
            .await
            .expect("get")
            .expect("present");
        assert_eq!(record.raw, event(game, *seq));
    }
    // Each writer's own events keep its order.
    for writer in 0..64 {
        let records = inbox
            .game_records("box", &format!("w{writer}"))
            .await
            .expect("records");
        assert!(records
            .windows(2)
            .all(|w| w[0].capture.pos < w[1].capture.pos));
    }
    let stats = inbox.stats();
    assert_eq!(stats.appends.load(Ordering::Relaxed), 64 * 20);
    assert!(
        stats.max_batch.load(Ordering::Relaxed) > 1,
        "64 waiting appenders never shared an fsync"
    );
    assert!(stats.syncs.load(Ordering::Relaxed) < 64 * 20);
}

#[tokio::test]
async fn each_fsync_of_appends_is_timed_once_metrics_are_attached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = open(dir.path());
    inbox
        .append("box", "g", None, event("g", 0))
        .await
        .expect("append");
    let seconds =
        prometheus::Histogram::with_opts(prometheus::HistogramOpts::new("fsync_seconds", "test"))
            .expect("histogram");
    inbox.observe_flushes(seconds.clone());
    for seq in 1..4 {
        inbox
            .append("box", "g", None, event("g", seq))
            .await
            .expect("append");
    }
    // One append at a time, each its own batch: three fsyncs timed, the first untimed.
    assert_eq!(inbox.stats().syncs.load(Ordering::Relaxed), 4);
    assert_eq!(seconds.get_sample_count(), 3);
    assert!(seconds.get_sample_sum() > 0.0);
}

#[tokio::test]
async fn watchers_see_only_durable_high_water_marks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inbox = open(dir.path());
    let shard = inbox.shard_of("box", "g");
    let mut watch = inbox.watch_shard(shard).expect("watch");
    assert_eq!(*watch.borrow_and_update(), 0);
    let capture = append(&inbox, "box", "g", 0).await;
    tokio::time::timeout(Duration::from_secs(5), watch.changed())
        .await
        .expect("in time")
        .expect("changed");
    assert_eq!(*watch.borrow(), capture.pos);
    assert_eq!(
        inbox
            .read_shard(shard, capture.pos, 10)
            .await
            .expect("read")
            .len(),
        1
    );
    inbox.sync().await.expect("sync");
    assert!(inbox.ready());
}

#[tokio::test]
async fn a_new_store_keeps_its_shard_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    drop(EmbeddedInbox::open(dir.path(), 3).expect("open"));
    let again = EmbeddedInbox::open(dir.path(), 8).expect("open");
    assert_eq!(again.shards(), 3);
    let empty = tempfile::tempdir().expect("tempdir");
    assert!(EmbeddedInbox::open(empty.path(), 0).is_err());
}

#[tokio::test]
async fn a_second_hub_on_one_directory_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = open(dir.path());
    let refused = EmbeddedInbox::open(dir.path(), 4)
        .err()
        .expect("second open refused");
    let message = refused.to_string();
    assert!(
        message.contains("in use") && message.contains(&dir.path().display().to_string()),
        "{message}"
    );
    drop(first);
    open(dir.path());
}

const CHILD_DIR: &str = "PIPEHUB_INBOX_TEST_CHILD_DIR";

/// Runs in two roles. As the parent it starts this same test in a child process, which
/// appends as fast as it can and prints each acknowledged capture; the parent kills it
/// with SIGKILL mid-stream, reopens the store, and checks that every acknowledged capture
/// is there with its bytes.
#[test]
fn acknowledged_appends_survive_sigkill() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child_appender(Path::new(&dir));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "inbox::embedded::tests::acknowledged_appends_survive_sigkill",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(ack) = line.strip_prefix("ACK ") {
                if tx.send(ack.to_string()).is_err() {
                    break;
                }
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 2000 {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => acked.push(line),
            Err(_) => break,
        }
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    assert!(
        acked.len() >= 2000,
        "the child acknowledged only {} appends",
        acked.len()
    );
    // Lines already in the pipe when the child died are acknowledged too.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
        acked.push(line);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let inbox = open(dir.path());
    runtime.block_on(async {
        for line in &acked {
            let (capture, seq) = line.split_once(' ').expect("ack line");
            let capture: Capture = capture.parse().expect("capture");
            let (record, _) = inbox
                .get("box", capture)
                .await
                .expect("get")
                .expect("acknowledged capture lost");
            assert_eq!(record.raw, event("g", seq.parse().expect("seq")).slice(..));
        }
    });
}

fn child_appender(dir: &Path) -> ! {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let inbox = Arc::new(open(dir));
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1024);
        for writer in 0..16u64 {
            let (inbox, tx) = (inbox.clone(), tx.clone());
            tokio::spawn(async move {
                for n in 0.. {
                    let seq = n * 16 + writer;
                    let capture = inbox
                        .append("box", "g", None, event("g", seq))
                        .await
                        .expect("append");
                    if tx.send(format!("ACK {capture} {seq}")).await.is_err() {
                        return;
                    }
                }
            });
        }
        let mut out = std::io::stdout();
        while let Some(line) = rx.recv().await {
            // A failed write means the parent is gone; the kill is coming.
            let _ = writeln!(out, "{line}");
        }
    });
    // The appenders loop until killed; reaching here means they all failed.
    std::process::exit(3)
}
