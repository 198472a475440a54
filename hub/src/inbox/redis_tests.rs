//! The Redis inbox against a private `redis-server` (a free loopback port, a temporary
//! directory): positions, indexes, listings, and the fence on verdicts. A missing
//! `redis-server` fails these tests naming `scripts/test`, which installs it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use games::{Reason, Seat};

use super::redis::{keys, Fence, RedisInbox};
use super::{Capture, Inbox, StoredVerdict};

struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server() -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let child = Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run redis-server ({e}); scripts/test installs it (Debian redis-server)")
        });
    let s = Server {
        child,
        port,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

struct FixedFence(Option<String>);

impl Fence for FixedFence {
    fn lease_value(&self, _shard: u32) -> Option<String> {
        self.0.clone()
    }
}

fn raw(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_indexes_and_listings() {
    let s = server();
    let inbox = RedisInbox::open(&format!("redis://127.0.0.1:{}", s.port), 4)
        .await
        .expect("open");
    // The shard count is fixed by the first node: a later open keeps it.
    let again = RedisInbox::open(&format!("redis://127.0.0.1:{}", s.port), 9)
        .await
        .expect("open again");
    assert_eq!(again.shards(), 4);
    let mut captures = Vec::new();
    for i in 0..5 {
        let game = if i % 2 == 0 { "even" } else { "odd" };
        captures.push(
            inbox
                .append("box", game, Some(Seat::O), raw(&format!("{{\"n\":{i}}}")))
                .await
                .expect("append"),
        );
    }
    let even = inbox.shard_of("box", "even");
    let evens: Vec<u64> = captures
        .iter()
        .filter(|c| c.shard == even)
        .map(|c| c.pos)
        .collect();
    assert!(
        evens.windows(2).all(|w| w[1] == w[0] + 1),
        "gapless: {evens:?}"
    );
    let records = inbox.game_records("box", "even").await.expect("records");
    assert_eq!(records.len(), 3);
    assert_eq!(records[2].raw, raw("{\"n\":4}"));
    assert_eq!(records[0].seat, Some(Seat::O));
    assert_eq!(inbox.count("box", "odd").await.expect("count"), 2);
    let shard = inbox.read_shard(even, evens[1], 10).await.expect("read");
    assert_eq!(shard.first().map(|r| r.capture.pos), Some(evens[1]));
    assert_eq!(
        *inbox.watch_shard(even).expect("watch").borrow(),
        *evens.last().unwrap_or(&0)
    );

    let page = inbox.list("box", None, None, 2).await.expect("list");
    assert_eq!(page.items.len(), 2);
    let rest = inbox
        .list("box", None, page.next.as_deref(), 10)
        .await
        .expect("list");
    assert_eq!(rest.items.len(), 3);
    assert_eq!(rest.next, None);
    let order: Vec<Capture> = page
        .items
        .iter()
        .chain(rest.items.iter())
        .map(|(r, _)| r.capture)
        .collect();
    assert_eq!(order, captures, "inbox order");
    assert!(inbox.list("box", None, Some("x"), 2).await.is_err());
    let games = inbox.games("box", None, 10).await.expect("games");
    let names: Vec<&str> = games.iter().map(|g| g.game.as_str()).collect();
    assert_eq!(names, ["odd", "even"], "newest first");
    assert_eq!(games[1].captures, 3);
    assert_eq!((games[0].order, games[1].order), (1, 0));
    let older = inbox.games("box", Some(1), 10).await.expect("games");
    assert_eq!(
        older.iter().map(|g| g.game.as_str()).collect::<Vec<_>>(),
        ["even"]
    );
    assert!(inbox
        .games("box", Some(0), 10)
        .await
        .expect("games")
        .is_empty());
    assert!(inbox
        .get("other", captures[0])
        .await
        .expect("get")
        .is_none());
    assert!(inbox.get("box", captures[0]).await.expect("get").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verdicts_are_fenced_by_the_lease() {
    let s = server();
    let inbox = RedisInbox::open(&format!("redis://127.0.0.1:{}", s.port), 2)
        .await
        .expect("open");
    let c = inbox
        .append("box", "g", None, raw("{}"))
        .await
        .expect("append");
    let v = StoredVerdict::Rejected {
        reason: Reason::StaleSeq,
        detail: None,
    };
    // The lease moved on to another node: the old owner's verdict is refused in Redis.
    let mut con = inbox.connection();
    let _: () = redis::cmd("SET")
        .arg(keys::lease(c.shard))
        .arg("new-owner:2")
        .query_async(&mut con)
        .await
        .expect("set lease");
    inbox.set_fence(Arc::new(FixedFence(Some("old-owner:1".into()))));
    assert!(inbox.put_verdict(c, v.clone()).await.is_err());
    assert_eq!(inbox.verdict(c).await.expect("verdict"), None);
    inbox.set_fence(Arc::new(FixedFence(None)));
    assert!(
        inbox.put_verdict(c, v.clone()).await.is_err(),
        "no lease held"
    );
    inbox.set_fence(Arc::new(FixedFence(Some("new-owner:2".into()))));
    inbox
        .put_verdict(c, v.clone())
        .await
        .expect("the holder records");
    assert_eq!(inbox.verdict(c).await.expect("verdict"), Some(v));
}

/// A Redis meta store on a server of its own, with the inbox whose connection it shares
/// (both kept alive by the caller).
async fn redis_meta() -> (Server, Arc<RedisInbox>, crate::meta_redis::RedisMeta) {
    let s = server();
    let inbox = RedisInbox::open(&format!("redis://127.0.0.1:{}", s.port), 4)
        .await
        .expect("open");
    let meta = crate::meta_redis::RedisMeta::new(inbox.connection(), inbox.health());
    (s, inbox, meta)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_meta_store_walks_a_scan_by_pages() {
    let (_s, _inbox, meta) = redis_meta().await;
    crate::meta::check_scan_pages(&meta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_meta_store_replaces_only_what_it_was_told() {
    let (_s, _inbox, meta) = redis_meta().await;
    crate::meta::check_replace(&meta).await;
}

/// A store that lost acknowledged events hands their positions out again: the node that
/// appended them must not take the reissued positions for new ones, nor go on serving
/// what it remembers. Both ways of seeing it are checked: an append here, and the
/// watcher reading the counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_went_back_in_time_is_noticed_and_takes_no_more_writes() {
    let s = server();
    let url = format!("redis://127.0.0.1:{}", s.port);
    for (lost, by_append) in [(2, true), (1, false)] {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut super::redis::connect(&url).await.expect("connect"))
            .await
            .expect("flushed");
        let inbox = RedisInbox::open(&url, 1).await.expect("open");
        let mut went_back = inbox.went_back();
        let mut con = super::redis::connect(&url).await.expect("connect");
        let mut older = Vec::new();
        for i in 0..4 {
            if i == 4 - lost {
                // What an older AOF or snapshot holds: every key as it stands now.
                older = dump_keys(&mut con).await;
            }
            inbox
                .append("box", "g", None, raw(&format!("{{\"n\":{i}}}")))
                .await
                .expect("append");
        }
        assert!(inbox.ready());
        // Redis restarted from it: the last `lost` events are gone.
        replace_keys(&mut con, &older).await;
        if by_append {
            let err = inbox
                .append("box", "g", None, raw("{\"n\":4}"))
                .await
                .expect_err("a reissued position is not a fresh one");
            assert!(err.to_string().contains("went back in time"), "{err}");
        }
        // Otherwise this node appends nothing: its watcher reads the counter.
        tokio::time::timeout(Duration::from_secs(10), went_back.wait_for(Option::is_some))
            .await
            .expect("noticed within 10 s")
            .expect("the inbox lives");
        let what = went_back.borrow().clone().unwrap_or_default();
        assert!(
            what.contains(&format!("stood at position 4 and now at {}", 4 - lost)),
            "{what}"
        );
        assert!(!inbox.ready());
        let refused = inbox.append("box", "g", None, raw("{\"n\":5}")).await;
        assert!(refused.is_err(), "{refused:?}");
    }
}

/// A loss that another node's appends covered before this node looked: the counter stands
/// above what this node has seen, but the positions it appended at hold other events. The
/// node notices that the last event it appended is no longer where it put it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_covered_by_another_nodes_appends_is_noticed() {
    noticed_after_a_covered_loss(false).await;
}

/// The events lost were written by a node that is gone; the node that read them (a
/// shard's owner reads every event of its shards) notices that the last one it read is
/// no longer where it was, after a third node's appends covered the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_of_events_a_gone_node_wrote_is_noticed_by_their_reader() {
    noticed_after_a_covered_loss(true).await;
}

/// Four events appended to shard 0 (by the node under test, or by another node that is
/// then gone and whose events the node under test reads), the last two lost and covered.
async fn noticed_after_a_covered_loss(written_elsewhere: bool) {
    let s = server();
    let url = format!("redis://127.0.0.1:{}", s.port);
    let inbox = RedisInbox::open(&url, 1).await.expect("open");
    let mut went_back = inbox.went_back();
    let mut con = super::redis::connect(&url).await.expect("connect");
    let writer = match written_elsewhere {
        true => RedisInbox::open(&url, 1).await.expect("open"),
        false => inbox.clone(),
    };
    let mut older = Vec::new();
    for i in 0..4 {
        if i == 2 {
            older = dump_keys(&mut con).await;
        }
        writer
            .append("box", "g", None, raw(&format!("{{\"n\":{i}}}")))
            .await
            .expect("append");
    }
    drop(writer);
    if written_elsewhere {
        let read = inbox.read_shard(0, 1, 10).await.expect("read");
        assert_eq!(read.len(), 4);
    }
    cover_a_loss(&url, &mut con, &older).await;
    tokio::time::timeout(Duration::from_secs(15), went_back.wait_for(Option::is_some))
        .await
        .expect("noticed within 15 s")
        .expect("the inbox lives");
    let what = went_back.borrow().clone().unwrap_or_default();
    assert!(
        what.contains(
            "shard 0 no longer holds at position 4 the event this node appended or read there"
        ),
        "{what}"
    );
    assert!(!inbox.ready());
}

/// Leaves database 0 as a node other than the ones under test would: restarted from
/// `older`, then three appends of that node's own (built aside in database 1), swapped in
/// at once, so no watcher ever reads a counter below what it saw.
async fn cover_a_loss(
    url: &str,
    con: &mut redis::aio::ConnectionManager,
    older: &[(Vec<u8>, Vec<u8>)],
) {
    let aside = format!("{url}/1");
    let mut built = super::redis::connect(&aside).await.expect("connect");
    replace_keys(&mut built, older).await;
    let other = RedisInbox::open(&aside, 1).await.expect("open");
    for i in 0..3 {
        other
            .append("box", "h", None, raw(&format!("{{\"m\":{i}}}")))
            .await
            .expect("append");
    }
    let newer = dump_keys(&mut built).await;
    replace_keys(con, &newer).await;
}

/// Every key of the hub's, as `DUMP` gives it: what an older AOF or snapshot holds.
async fn dump_keys(con: &mut redis::aio::ConnectionManager) -> Vec<(Vec<u8>, Vec<u8>)> {
    let names: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("ph:*")
        .query_async(con)
        .await
        .expect("keys");
    let mut out = Vec::new();
    for name in names {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&name)
            .query_async(con)
            .await
            .expect("dump");
        out.push((name, dump));
    }
    out
}

/// Replaces the database's keys with `dumped` in one transaction, as a restart from an
/// older copy would leave them.
async fn replace_keys(con: &mut redis::aio::ConnectionManager, dumped: &[(Vec<u8>, Vec<u8>)]) {
    let mut swap = redis::pipe();
    swap.atomic().cmd("FLUSHDB").ignore();
    for (name, dump) in dumped {
        swap.cmd("RESTORE").arg(name).arg(0).arg(dump).ignore();
    }
    let _: () = swap.query_async(con).await.expect("replaced");
}

/// Damage in what Redis holds is an error that says where, never a record left out of a
/// listing or a verdict read as not yet given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_verdicts_and_index_entries_are_errors_not_absences() {
    let s = server();
    let url = format!("redis://127.0.0.1:{}", s.port);
    let inbox = RedisInbox::open(&url, 1).await.expect("open");
    let capture = inbox
        .append("box", "g", Some(Seat::X), raw("{\"n\":0}"))
        .await
        .expect("append");
    let mut con = super::redis::connect(&url).await.expect("connect");
    let _: () = redis::cmd("HSET")
        .arg(keys::verdicts(0))
        .arg(capture.pos)
        .arg("{\"v\":\"?\"}")
        .query_async(&mut con)
        .await
        .expect("hset");
    let err = inbox.verdict(capture).await.expect_err("a damaged verdict");
    assert!(
        err.to_string().contains("the verdict of capture 0:1"),
        "{err}"
    );
    let _: () = redis::cmd("HDEL")
        .arg(keys::verdicts(0))
        .arg(capture.pos)
        .query_async(&mut con)
        .await
        .expect("hdel");
    assert_eq!(inbox.verdict(capture).await.expect("read"), None);
    assert_eq!(
        inbox
            .list("box", None, None, 10)
            .await
            .expect("list")
            .items
            .len(),
        1
    );
    for (name, says) in [("0:9", "which is not stored"), ("x", "names \"x\"")] {
        let _: () = redis::cmd("RPUSH")
            .arg(keys::inbox("box"))
            .arg(name)
            .query_async(&mut con)
            .await
            .expect("rpush");
        let err = inbox
            .list("box", None, None, 10)
            .await
            .expect_err("a damaged index");
        assert!(err.to_string().contains(says), "{err}");
        let _: () = redis::cmd("RPOP")
            .arg(keys::inbox("box"))
            .query_async(&mut con)
            .await
            .expect("rpop");
    }
    // A seat field that names no seat.
    let _: () = redis::cmd("XADD")
        .arg(keys::stream(0))
        .arg("0-2")
        .arg(&["i", "box", "g", "g", "s", "Z", "r", "{}", "t", "0"])
        .query_async(&mut con)
        .await
        .expect("xadd");
    let err = inbox
        .get("box", Capture { shard: 0, pos: 2 })
        .await
        .expect_err("a damaged seat");
    assert!(err.to_string().contains("stream entry 0-2"), "{err}");
}
