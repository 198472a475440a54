//! The Redis Streams backend of the [`Inbox`]: several hub nodes share one Redis and act
//! as one hub (DESIGN.md section 6).
//!
//! Each shard is one stream, `ph:s:{shard}`. An append is one Lua script, so it is atomic
//! on the server: it takes the shard's next position from a counter (`ph:seq:{shard}`),
//! adds the entry with the explicit stream id `0-{pos}` (positions stay gapless and start at
//! 1, exactly as the embedded log's, so captures read `shard:pos` whatever the backend),
//! and pushes the position onto the game's index, the capture onto the inbox's index and,
//! for a game's first capture, the game onto the inbox's game list. A capture is answered
//! only after the script returned, so nothing is acknowledged that Redis did not take; how
//! durable "took" is depends on the server's persistence (`appendfsync always`: every
//! acknowledged event survives a crash of Redis; `everysec`: up to a second can be lost;
//! no AOF: back to the last snapshot). deploy/README.md says the same for operators.
//!
//! Verdicts go to a hash per shard (`ph:v:{shard}`, for lookups; every verdict) and a
//! verdict stream per shard (`ph:vs:{shard}`, which the other nodes follow for the
//! verdicts their posters wait for; trimmed to about [`VERDICT_STREAM_MAXLEN`] entries, far
//! more than any node falls behind while it lives). Writing one is
//! *fenced*: the script records it only while the caller's lease value still sits in
//! `ph:lease:{shard}` (see [`crate::cluster`]), so an owner that paused past its lease
//! cannot overwrite its successor's verdicts. A standalone user of this type (no cluster)
//! writes unfenced.
//!
//! Waiting for records: appends made here bump their shard's watch at once; appends made by
//! other nodes are noticed by one background task that blocks in `XREAD` on every shard
//! stream and then reads the shard counters. The same task is the health check: when Redis
//! does not answer, [`Inbox::ready`] turns false (503 and a failing `/readyz`) until it does
//! again. The connection manager reconnects by itself.
//!
//! A store that goes back in time (Redis restarted from an older AOF or snapshot, or a
//! replica without the last writes took over) has lost acknowledged events, and hands
//! their positions out again. A node notices it in three ways, and says so once
//! ([`RedisInbox::went_back`]): the store gives out or shows a position no higher than one
//! the node has already seen; or the last event the node appended to a shard, or read
//! from it, is no longer at its position. The last check catches a loss that other nodes'
//! appends have covered (the counter is back above what this node saw, but with other
//! events), including the loss of events another node wrote and this node read as the
//! shard's owner, after the writer is gone; the watcher makes it once Redis answers again
//! after not answering, and every [`KNOWN_CHECK_EVERY`] besides. What the node holds in
//! memory (its referees' chains, verdicts, seats) is then newer than the store, and only a
//! fresh start rebuilds it from what the store holds. Until then it takes no more writes and is not ready.
//!
//! What it deliberately does not do: work on Redis Cluster (the keys of one append span
//! several hash slots; one Redis primary, with replicas if wanted, is the supported shape),
//! or trim the shard streams (a game's history is its chain).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use games::Seat;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script};
use tokio::sync::watch;

use super::{Capture, GameEntry, Inbox, Listed, Page, Record, StoreError, StoredVerdict};
use crate::clock::now_ms;

mod codec;
pub mod keys;
mod scripts;

pub use codec::decode_verdict;
use codec::{encode_verdict, record, Entry};
use scripts::{APPEND, PUT_VERDICT};

/// How long one command may take before the store counts as unreachable.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the watcher blocks in `XREAD` before it looks again anyway.
const WATCH_BLOCK_MS: u64 = 1000;
/// About how many entries a verdict stream keeps (the verdict hash keeps every verdict).
pub const VERDICT_STREAM_MAXLEN: u64 = 100_000;
/// How often the watcher checks that the store still holds the last event this node
/// appended to or read from each shard, besides each time Redis answers again after not
/// answering.
pub const KNOWN_CHECK_EVERY: Duration = Duration::from_secs(5);

/// The last event this node appended to a shard or read from it: its position and bytes.
struct Known {
    pos: u64,
    raw: Bytes,
}

/// The lease value to fence a shard's verdicts with, if the caller is a cluster node.
pub trait Fence: Send + Sync {
    /// The value this node last held in `ph:lease:{shard}` (Redis checks it is still
    /// there), or `None` when it does not hold the shard.
    fn lease_value(&self, shard: u32) -> Option<String>;
}

/// The Redis inbox. Cheap to share behind an `Arc`.
pub struct RedisInbox {
    con: ConnectionManager,
    shards: u32,
    durable: Vec<watch::Sender<u64>>,
    up: Arc<AtomicBool>,
    /// Set once the store is seen to have gone back in time: what happened, for the log
    /// and the operator.
    went_back: watch::Sender<Option<String>>,
    /// Per shard, the last event appended or read here: a store that went back in time no
    /// longer holds it at its position, even when other nodes' appends raised the counter
    /// again.
    known: Vec<parking_lot::Mutex<Option<Known>>>,
    fence: parking_lot::RwLock<Option<Arc<dyn Fence>>>,
    append: Script,
    put_verdict: Script,
}

/// A connection manager with the hub's timeouts; it reconnects by itself.
pub async fn connect(url: &str) -> Result<ConnectionManager, StoreError> {
    let client = redis::Client::open(url).map_err(|e| {
        StoreError::Unavailable(format!(
            "--redis: {e} (a Redis URL reads redis://[:PASSWORD@]HOST[:PORT][/DB])"
        ))
    })?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(RESPONSE_TIMEOUT)
        .set_connection_timeout(RESPONSE_TIMEOUT)
        .set_number_of_retries(2)
        .set_max_delay(500);
    // Where it tried, for the message: host and port (or socket path), never the password.
    let at = client.get_connection_info().addr.to_string();
    ConnectionManager::new_with_config(client, config)
        .await
        .map_err(|e| match e.kind() {
            redis::ErrorKind::ParseError => StoreError::Unavailable(format!(
                "--redis: the server at {at} does not answer as Redis does ({})",
                e.to_string().lines().next().unwrap_or_default()
            )),
            _ => StoreError::Unavailable(format!("redis at {at}: {e}")),
        })
}

pub fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {e}"))
}

impl RedisInbox {
    /// Connects to `url` and fixes the shard count in Redis if no node did before
    /// (`shards` is then kept; a later node's `--shards` is ignored, as with the embedded
    /// store). Starts the watcher task, so it must run inside a tokio runtime.
    pub async fn open(url: &str, shards: u32) -> Result<Arc<RedisInbox>, StoreError> {
        if shards == 0 {
            return Err(StoreError::Corrupt(
                "a store needs at least one shard".into(),
            ));
        }
        let mut con = connect(url).await?;
        let _: bool = redis::cmd("SET")
            .arg(keys::SHARDS)
            .arg(shards)
            .arg("NX")
            .query_async::<Option<String>>(&mut con)
            .await
            .map_err(unavailable)?
            .is_some();
        let asked = shards;
        let shards: u32 = redis::cmd("GET")
            .arg(keys::SHARDS)
            .query_async(&mut con)
            .await
            .map_err(unavailable)?;
        if shards != asked {
            tracing::warn!(
                stored = shards,
                asked,
                "the store keeps the shard count its first node gave it"
            );
        }
        let highs = counters(&mut con, shards).await?;
        let durable = highs.iter().map(|h| watch::channel(*h).0).collect();
        let inbox = Arc::new(RedisInbox {
            con,
            shards,
            durable,
            up: Arc::new(AtomicBool::new(true)),
            went_back: watch::channel(None).0,
            known: (0..shards).map(|_| parking_lot::Mutex::new(None)).collect(),
            fence: parking_lot::RwLock::new(None),
            append: Script::new(APPEND),
            put_verdict: Script::new(PUT_VERDICT),
        });
        let watcher = connect(url).await?;
        tokio::spawn(watch_streams(Arc::downgrade(&inbox), watcher));
        Ok(inbox)
    }

    /// Fences verdict writes with the cluster's leases from now on.
    pub fn set_fence(&self, fence: Arc<dyn Fence>) {
        *self.fence.write() = Some(fence);
    }

    /// Resolves to what happened once the store is seen to have gone back in time (see the
    /// module documentation); the node must then stop.
    pub fn went_back(&self) -> watch::Receiver<Option<String>> {
        self.went_back.subscribe()
    }

    /// Notes that shard `shard` of the store stands at `now`, where this node has seen
    /// `seen`: its acknowledged events after `now` are lost.
    fn gone_back(&self, shard: u32, seen: u64, now: u64) -> StoreError {
        self.lost(format!(
            "shard {shard} stood at position {seen} and now at {now}"
        ))
    }

    /// Notes that the store went back in time, `how` saying how it showed.
    fn lost(&self, how: String) -> StoreError {
        let what = format!(
            "the Redis store went back in time: {how}, so acknowledged events were lost \
             (Redis restarted from an older AOF or snapshot, or a replica without the last \
             writes took over)"
        );
        self.went_back.send_if_modified(|was| {
            let first = was.is_none();
            if first {
                tracing::error!("{what}");
                *was = Some(what.clone());
            }
            first
        });
        StoreError::Unavailable(what)
    }

    /// Remembers that `shard` holds `raw` at `pos`, if that is the furthest this node knows.
    fn know(&self, shard: u32, pos: u64, raw: &Bytes) {
        if let Some(known) = self.known.get(shard as usize) {
            let mut known = known.lock();
            if known.as_ref().is_none_or(|k| k.pos < pos) {
                *known = Some(Known {
                    pos,
                    raw: raw.clone(),
                });
            }
        }
    }

    fn high(&self, shard: u32) -> u64 {
        self.durable
            .get(shard as usize)
            .map_or(0, |tx| *tx.borrow())
    }

    /// The flag that says Redis answers, for other users of the same Redis to share.
    pub fn health(&self) -> Arc<AtomicBool> {
        self.up.clone()
    }

    /// A connection for other users of the same Redis (meta, leases).
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    fn con(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// Marks the store up or down after a command, and converts the error.
    fn seen<T>(&self, r: Result<T, RedisError>) -> Result<T, StoreError> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    self.up.store(false, Ordering::Release);
                }
                Err(unavailable(e))
            }
        }
    }

    fn bump(&self, shard: u32, pos: u64) {
        if let Some(tx) = self.durable.get(shard as usize) {
            tx.send_if_modified(|h| {
                let newer = pos > *h;
                if newer {
                    *h = pos;
                }
                newer
            });
        }
    }

    async fn records_at(&self, shard: u32, positions: &[u64]) -> Result<Vec<Record>, StoreError> {
        let mut pipe = redis::pipe();
        for pos in positions {
            let id = format!("0-{pos}");
            pipe.cmd("XRANGE")
                .arg(keys::stream(shard))
                .arg(&id)
                .arg(&id);
        }
        let replies: Vec<Vec<Entry>> = self.seen(pipe.query_async(&mut self.con()).await)?;
        replies
            .into_iter()
            .flatten()
            .map(|e| record(shard, e))
            .collect()
    }

    async fn verdicts_of(
        &self,
        captures: &[Capture],
    ) -> Result<Vec<Option<StoredVerdict>>, StoreError> {
        let mut pipe = redis::pipe();
        for c in captures {
            pipe.cmd("HGET").arg(keys::verdicts(c.shard)).arg(c.pos);
        }
        let raw: Vec<Option<String>> = self.seen(pipe.query_async(&mut self.con()).await)?;
        captures
            .iter()
            .zip(raw)
            .map(|(c, v)| {
                v.map(|text| {
                    decode_verdict(&text).ok_or_else(|| {
                        StoreError::Corrupt(format!("the verdict of capture {c}: {text}"))
                    })
                })
                .transpose()
            })
            .collect()
    }

    /// Lists records (with verdicts) named by `shard:pos` strings from an inbox's index.
    /// Streams are never trimmed, so a name that does not parse, or names no entry, is
    /// damage, not a record to leave out.
    async fn listed(&self, captures: &[String]) -> Result<Vec<Listed>, StoreError> {
        let parsed = captures
            .iter()
            .map(|c| {
                c.parse::<Capture>()
                    .map_err(|_| StoreError::Corrupt(format!("an inbox index names {c:?}")))
            })
            .collect::<Result<Vec<Capture>, StoreError>>()?;
        let verdicts = self.verdicts_of(&parsed).await?;
        let mut pipe = redis::pipe();
        for c in &parsed {
            let id = format!("0-{}", c.pos);
            pipe.cmd("XRANGE")
                .arg(keys::stream(c.shard))
                .arg(&id)
                .arg(&id);
        }
        let replies: Vec<Vec<Entry>> = self.seen(pipe.query_async(&mut self.con()).await)?;
        parsed
            .iter()
            .zip(replies)
            .zip(verdicts)
            .map(|((c, entries), v)| {
                let entry = entries.into_iter().next().ok_or_else(|| {
                    StoreError::Corrupt(format!("an inbox index names {c}, which is not stored"))
                })?;
                Ok((record(c.shard, entry)?, v))
            })
            .collect()
    }
}

async fn counters(con: &mut ConnectionManager, shards: u32) -> Result<Vec<u64>, StoreError> {
    let mut cmd = redis::cmd("MGET");
    for s in 0..shards {
        cmd.arg(keys::seq(s));
    }
    let highs: Vec<Option<u64>> = cmd.query_async(con).await.map_err(unavailable)?;
    Ok(highs.into_iter().map(|h| h.unwrap_or(0)).collect())
}

/// Follows every shard stream for appends made by other nodes, and keeps `up` true
/// while Redis answers. Ends when the inbox is dropped.
async fn watch_streams(inbox: std::sync::Weak<RedisInbox>, mut con: ConnectionManager) {
    let mut check_due = Instant::now() + KNOWN_CHECK_EVERY;
    loop {
        let Some(me) = inbox.upgrade() else { return };
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(1)
            .arg("BLOCK")
            .arg(WATCH_BLOCK_MS)
            .arg("STREAMS");
        for s in 0..me.shards {
            cmd.arg(keys::stream(s));
        }
        for tx in &me.durable {
            cmd.arg(format!("0-{}", *tx.borrow()));
        }
        drop(me);
        let woke: Result<redis::Value, _> = cmd.query_async(&mut con).await;
        let Some(me) = inbox.upgrade() else { return };
        // What this node had seen before it reads the counters: a counter read after it
        // is at least as high, unless the store went back (this node's own appends may
        // raise what it has seen while the read is under way).
        let seen: Vec<u64> = (0..me.shards).map(|s| me.high(s)).collect();
        let highs = match woke {
            Ok(_) => counters(&mut con, me.shards).await,
            Err(e) => Err(unavailable(e)),
        };
        match highs {
            Ok(highs) => {
                let again = !me.up.swap(true, Ordering::AcqRel);
                if again {
                    tracing::info!("redis reachable again");
                }
                for (shard, (high, seen)) in highs.into_iter().zip(seen).enumerate() {
                    if high < seen {
                        // Named by the furthest this node knows now: an append of its own
                        // that landed while the counters were read stood there too.
                        let furthest = seen.max(me.high(shard as u32));
                        me.gone_back(shard as u32, furthest, high);
                    }
                    me.bump(shard as u32, high);
                }
                if again || Instant::now() >= check_due {
                    check_due = Instant::now() + KNOWN_CHECK_EVERY;
                    match known_missing(&me, &mut con).await {
                        Ok(None) => {}
                        Ok(Some(how)) => {
                            me.lost(how);
                        }
                        // Checked again as soon as Redis answers again.
                        Err(_) => me.up.store(false, Ordering::Release),
                    }
                }
            }
            Err(e) => {
                if me.up.swap(false, Ordering::AcqRel) {
                    tracing::error!(error = %e, "redis unreachable");
                }
                drop(me);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// Where the store no longer holds, at its position, the last event this node appended
/// to a shard or read from it (`None` when it holds every one).
async fn known_missing(
    me: &RedisInbox,
    con: &mut ConnectionManager,
) -> Result<Option<String>, RedisError> {
    let marks: Vec<(u32, u64, Bytes)> = (0..me.shards)
        .zip(&me.known)
        .filter_map(|(shard, k)| k.lock().as_ref().map(|k| (shard, k.pos, k.raw.clone())))
        .collect();
    if marks.is_empty() {
        return Ok(None);
    }
    let mut pipe = redis::pipe();
    for (shard, pos, _) in &marks {
        let id = format!("0-{pos}");
        pipe.cmd("XRANGE")
            .arg(keys::stream(*shard))
            .arg(&id)
            .arg(&id);
    }
    let replies: Vec<Vec<Entry>> = pipe.query_async(con).await?;
    for ((shard, pos, raw), entries) in marks.iter().zip(replies) {
        let held = entries.iter().any(|(_, fields)| {
            fields
                .chunks(2)
                .any(|f| matches!(f, [name, value] if name == b"r" && value == raw))
        });
        if !held {
            return Ok(Some(format!(
                "shard {shard} no longer holds at position {pos} the event this node appended \
                 or read there"
            )));
        }
    }
    Ok(None)
}

#[async_trait]
impl Inbox for RedisInbox {
    fn shards(&self) -> u32 {
        self.shards
    }

    async fn append(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
        raw: Bytes,
    ) -> Result<Capture, StoreError> {
        let shard = self.shard_of(inbox, game);
        if let Some(what) = self.went_back.borrow().clone() {
            return Err(StoreError::Unavailable(what));
        }
        // Read before the append: the counter it takes its position from is at least this
        // high, and goes only up, unless the store lost what it held. (Read after, it could
        // already count this append, seen by the watcher meanwhile.)
        let seen = self.high(shard);
        let pos: u64 = self.seen(
            self.append
                .key(keys::seq(shard))
                .key(keys::stream(shard))
                .key(keys::game(inbox, game))
                .key(keys::inbox(inbox))
                .key(keys::game_list(inbox))
                .arg(inbox)
                .arg(game)
                .arg(seat.map_or("", |s| s.as_str()))
                .arg(raw.as_ref())
                .arg(now_ms())
                .arg(shard)
                .invoke_async(&mut self.con())
                .await,
        )?;
        if pos <= seen {
            return Err(self.gone_back(shard, seen, pos - 1));
        }
        self.know(shard, pos, &raw);
        self.bump(shard, pos);
        Ok(Capture { shard, pos })
    }

    async fn read_shard(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if shard >= self.shards {
            return Err(StoreError::NoShard(shard));
        }
        let entries: Vec<Entry> = self.seen(
            redis::cmd("XRANGE")
                .arg(keys::stream(shard))
                .arg(format!("0-{}", from.max(1)))
                .arg("+")
                .arg("COUNT")
                .arg(max)
                .query_async(&mut self.con())
                .await,
        )?;
        let records = entries
            .into_iter()
            .map(|e| record(shard, e))
            .collect::<Result<Vec<Record>, StoreError>>()?;
        if let Some(last) = records.last() {
            self.know(shard, last.capture.pos, &last.raw);
        }
        Ok(records)
    }

    fn watch_shard(&self, shard: u32) -> Result<watch::Receiver<u64>, StoreError> {
        self.durable
            .get(shard as usize)
            .map(|tx| tx.subscribe())
            .ok_or(StoreError::NoShard(shard))
    }

    async fn game_records(&self, inbox: &str, game: &str) -> Result<Vec<Record>, StoreError> {
        self.game_records_from(inbox, game, 0).await
    }

    async fn game_records_from(
        &self,
        inbox: &str,
        game: &str,
        skip: usize,
    ) -> Result<Vec<Record>, StoreError> {
        let positions: Vec<u64> = self.seen(
            redis::cmd("LRANGE")
                .arg(keys::game(inbox, game))
                .arg(skip)
                .arg(-1)
                .query_async(&mut self.con())
                .await,
        )?;
        if positions.is_empty() {
            return Ok(Vec::new());
        }
        let shard = self.shard_of(inbox, game);
        let mut out = Vec::with_capacity(positions.len());
        for chunk in positions.chunks(256) {
            out.extend(self.records_at(shard, chunk).await?);
        }
        Ok(out)
    }

    async fn verdicts(
        &self,
        captures: &[Capture],
    ) -> Result<Vec<Option<StoredVerdict>>, StoreError> {
        if captures.is_empty() {
            return Ok(Vec::new());
        }
        self.verdicts_of(captures).await
    }

    async fn list(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        // The cursor is the index in the listed Redis list where the next page starts.
        let start: usize = match after {
            None => 0,
            Some(c) => c.parse().map_err(|_| StoreError::BadCursor)?,
        };
        let limit = limit.max(1);
        let end = (start + limit) as i64; // one more than the page, to know if more follow
        let captures: Vec<String> = match game {
            None => self.seen(
                redis::cmd("LRANGE")
                    .arg(keys::inbox(inbox))
                    .arg(start)
                    .arg(end)
                    .query_async(&mut self.con())
                    .await,
            )?,
            Some(g) => {
                let shard = self.shard_of(inbox, g);
                let positions: Vec<u64> = self.seen(
                    redis::cmd("LRANGE")
                        .arg(keys::game(inbox, g))
                        .arg(start)
                        .arg(end)
                        .query_async(&mut self.con())
                        .await,
                )?;
                positions.iter().map(|p| format!("{shard}:{p}")).collect()
            }
        };
        let more = captures.len() > limit;
        let items = self.listed(&captures[..captures.len().min(limit)]).await?;
        Ok(Page {
            items,
            next: more.then(|| (start + limit).to_string()),
        })
    }

    async fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<GameEntry>, StoreError> {
        // The list only grows at its tail, so a place in it is stable.
        let len: u64 = self.seen(
            redis::cmd("LLEN")
                .arg(keys::game_list(inbox))
                .query_async(&mut self.con())
                .await,
        )?;
        let end = before.map_or(len, |b| b.min(len));
        if end == 0 || limit == 0 {
            return Ok(Vec::new());
        }
        let start = end.saturating_sub(limit as u64);
        let mut names: Vec<String> = self.seen(
            redis::cmd("LRANGE")
                .arg(keys::game_list(inbox))
                .arg(start)
                .arg(end - 1)
                .query_async(&mut self.con())
                .await,
        )?;
        let orders: Vec<u64> = (start..start + names.len() as u64).rev().collect();
        names.reverse();
        let mut pipe = redis::pipe();
        for g in &names {
            pipe.cmd("LINDEX").arg(keys::game(inbox, g)).arg(0);
            pipe.cmd("LLEN").arg(keys::game(inbox, g));
        }
        let facts: Vec<(Option<u64>, u64)> = if names.is_empty() {
            Vec::new()
        } else {
            let flat: Vec<redis::Value> = self.seen(pipe.query_async(&mut self.con()).await)?;
            flat.chunks(2)
                .map(|p| {
                    let first = p.first().and_then(|v| redis::from_redis_value(v).ok());
                    let n = p.get(1).and_then(|v| redis::from_redis_value(v).ok());
                    (first, n.unwrap_or(0))
                })
                .collect()
        };
        Ok(names
            .into_iter()
            .zip(orders)
            .zip(facts)
            .filter_map(|((game, order), (first, captures))| {
                let shard = self.shard_of(inbox, &game);
                Some(GameEntry {
                    first: Capture { shard, pos: first? },
                    game,
                    order,
                    captures,
                })
            })
            .collect())
    }

    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError> {
        if capture.shard >= self.shards {
            return Ok(None);
        }
        let Some(record) = self.records_at(capture.shard, &[capture.pos]).await?.pop() else {
            return Ok(None);
        };
        if record.inbox != inbox {
            return Ok(None);
        }
        let verdict = self.verdict(capture).await?;
        Ok(Some((record, verdict)))
    }

    async fn put_verdict(
        &self,
        capture: Capture,
        verdict: StoredVerdict,
    ) -> Result<(), StoreError> {
        let fence = self.fence.read().clone();
        let lease = match &fence {
            None => String::new(),
            Some(f) => f.lease_value(capture.shard).ok_or_else(|| {
                StoreError::Unavailable(format!("shard {} is not ours", capture.shard))
            })?,
        };
        let stored: u8 = self.seen(
            self.put_verdict
                .key(keys::lease(capture.shard))
                .key(keys::verdicts(capture.shard))
                .key(keys::verdict_stream(capture.shard))
                .arg(&lease)
                .arg(capture.pos)
                .arg(encode_verdict(&verdict))
                .arg(VERDICT_STREAM_MAXLEN)
                .invoke_async(&mut self.con())
                .await,
        )?;
        if stored == 0 {
            return Err(StoreError::Unavailable(format!(
                "the lease of shard {} moved on; verdict not recorded",
                capture.shard
            )));
        }
        Ok(())
    }

    async fn verdict(&self, capture: Capture) -> Result<Option<StoredVerdict>, StoreError> {
        Ok(self.verdicts_of(&[capture]).await?.pop().flatten())
    }

    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError> {
        self.seen(
            redis::cmd("LLEN")
                .arg(keys::game(inbox, game))
                .query_async(&mut self.con())
                .await,
        )
    }

    async fn sync(&self) -> Result<(), StoreError> {
        // Every write already went to Redis before its call returned; how durable that
        // is belongs to the server's persistence settings (see the module documentation).
        Ok(())
    }

    fn ready(&self) -> bool {
        self.up.load(Ordering::Acquire) && self.went_back.borrow().is_none()
    }
}
