//! Shard leases with fencing, node liveness, and the intent streams (see [`super`]).
//!
//! One task per node runs [`RedisCluster::run`]: every [`RENEW_EVERY`] it renews the
//! leases it holds, drops a lease it holds beyond its fair share, and takes free leases up
//! to its fair share. A second task follows the intent streams of the shards it owns, and
//! a third the verdict streams of the shards it does not own ([`super::verdicts`]).
//! [`Ownership::owns`] answers from memory, and stops answering true once [`LEASE_TTL`]
//! has passed since the last renewal this node saw succeed, so a node cut off from Redis
//! stops writing for its shards on its own (Redis fencing refuses its verdicts anyway).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use rand::RngCore;
use redis::aio::ConnectionManager;
use redis::Script;
use tokio::sync::watch;

use super::Ownership;
use crate::clock::now_ms;
use crate::game::Hub;
use crate::inbox::redis::{keys, Fence};
use crate::metrics::Metrics;

/// How long a lease lives without renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(3);
/// How often leases are renewed and free ones sought.
pub const RENEW_EVERY: Duration = Duration::from_millis(750);
/// Intent streams keep about this many entries.
const INTENT_MAXLEN: u64 = 1000;
const NODES: &str = "ph:nodes";

const ACQUIRE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local f = redis.call('INCR', KEYS[2])
local v = ARGV[1] .. ':' .. f
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return v
";
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
";
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
";

/// One stream of an `XREAD` reply: its key and its entries (id, flat fields).
type IntentStream = (String, Vec<(String, Vec<String>)>);

struct Held {
    value: String,
    renewed: Instant,
    /// Set once this node's consumer took the shard over; only then does it adjudicate.
    adjudicating: bool,
}

/// This node's view of the cluster. See the module documentation.
pub struct RedisCluster {
    node: String,
    con: ConnectionManager,
    /// A connection of its own for blocking reads, which would stall the shared one.
    blocking: ConnectionManager,
    /// Where Redis is, for the connections of the verdict feed and the relay.
    url: String,
    shards: u32,
    held: Vec<Mutex<Option<Held>>>,
    /// Per shard: the last position whose verdict this node saw recorded.
    seen: Vec<watch::Sender<u64>>,
    /// How many live nodes the last lease round counted (this one included).
    live: Arc<std::sync::atomic::AtomicU32>,
    /// Whether the last lease round succeeded ([`Ownership::rounds_succeed`]).
    round_ok: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
}

impl RedisCluster {
    /// A node with a fresh random id; it holds nothing until [`RedisCluster::run`] runs.
    pub fn new(
        con: ConnectionManager,
        blocking: ConnectionManager,
        url: &str,
        shards: u32,
        metrics: Arc<Metrics>,
    ) -> Arc<RedisCluster> {
        let mut id = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut id);
        Arc::new(RedisCluster {
            node: hex::encode(id),
            con,
            blocking,
            url: url.to_string(),
            shards,
            held: (0..shards).map(|_| Mutex::new(None)).collect(),
            seen: (0..shards).map(|_| watch::channel(0).0).collect(),
            live: Arc::new(std::sync::atomic::AtomicU32::new(1)),
            round_ok: std::sync::atomic::AtomicBool::new(true),
            metrics,
        })
    }

    /// A connection to the cluster's Redis, for other shared state (rate limits).
    pub fn connection(&self) -> ConnectionManager {
        self.con.clone()
    }

    /// This node's id, as it appears in lease values.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The Redis URL the nodes share.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// How many live nodes the last lease round counted, shared (the relay publishes
    /// nothing for other nodes while this node is alone).
    pub fn live_nodes(&self) -> Arc<std::sync::atomic::AtomicU32> {
        self.live.clone()
    }

    /// The store's shard count.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// Notes that `shard`'s verdict for `pos` was recorded (the verdict feed calls this).
    pub fn saw_verdict(&self, shard: u32, pos: u64) {
        if let Some(tx) = self.seen.get(shard as usize) {
            tx.send_if_modified(|p| {
                let newer = pos > *p;
                if newer {
                    *p = pos;
                }
                newer
            });
        }
    }

    fn owned_count(&self) -> u32 {
        (0..self.shards).filter(|s| self.leased(*s)).count() as u32
    }

    /// Keeps the leases until `stop` turns true, then releases them so the survivors take
    /// over at once rather than after a lease lifetime.
    pub async fn run(self: Arc<Self>, hub: Hub, mut stop: watch::Receiver<bool>) {
        tokio::spawn(self.clone().follow_intents(hub.clone(), stop.clone()));
        tokio::spawn(super::verdicts::follow(
            self.clone(),
            hub.clone(),
            stop.clone(),
        ));
        let mut tick = tokio::time::interval(RENEW_EVERY);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.changed() => break,
            }
            // Read at each scrape with what `/readyz` says (`Hub::refresh_gauges`).
            let round = self.round().await;
            self.round_ok
                .store(round.is_ok(), std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = round {
                tracing::warn!(error = %e, "lease round failed");
            }
            self.metrics
                .cluster_shards_owned
                .set(i64::from(self.owned_count()));
        }
        for shard in 0..self.shards {
            self.release(shard).await;
        }
        let mut con = self.con.clone();
        let _: Result<i64, _> = redis::cmd("ZREM")
            .arg(NODES)
            .arg(&self.node)
            .query_async(&mut con)
            .await;
    }

    async fn round(&self) -> redis::RedisResult<()> {
        let mut con = self.con.clone();
        let ttl_ms = LEASE_TTL.as_millis() as u64;
        let now = now_ms();
        let live: u32 = redis::pipe()
            .cmd("ZADD")
            .arg(NODES)
            .arg(now + ttl_ms)
            .arg(&self.node)
            .ignore()
            .cmd("ZREMRANGEBYSCORE")
            .arg(NODES)
            .arg("-inf")
            .arg(now)
            .ignore()
            .cmd("ZCARD")
            .arg(NODES)
            .query_async::<(u32,)>(&mut con)
            .await?
            .0;
        self.live
            .store(live.max(1), std::sync::atomic::Ordering::Relaxed);
        let fair = self.shards.div_ceil(live.max(1));
        for shard in 0..self.shards {
            let value = self.held[shard as usize]
                .lock()
                .as_ref()
                .map(|h| h.value.clone());
            let Some(value) = value else { continue };
            let renewed: i64 = Script::new(RENEW)
                .key(keys::lease(shard))
                .arg(&value)
                .arg(ttl_ms)
                .invoke_async(&mut con)
                .await?;
            let mut held = self.held[shard as usize].lock();
            if renewed == 1 {
                if let Some(h) = held.as_mut() {
                    h.renewed = Instant::now();
                }
            } else {
                tracing::warn!(shard, "shard lease lost");
                *held = None;
            }
        }
        let mut owned = self.owned_count();
        // Start at a node-dependent shard, so nodes starting together do not all race for
        // shard 0 first.
        let offset = (u32::from_str_radix(&self.node[..4], 16).unwrap_or(0)) % self.shards;
        for i in 0..self.shards {
            let shard = (i + offset) % self.shards;
            let mine = self.held[shard as usize].lock().is_some();
            if mine && owned > fair {
                self.release(shard).await;
                owned -= 1;
            } else if !mine && owned < fair {
                let got: Option<String> = Script::new(ACQUIRE)
                    .key(keys::lease(shard))
                    .key(keys::fence(shard))
                    .arg(&self.node)
                    .arg(ttl_ms)
                    .invoke_async(&mut con)
                    .await?;
                if let Some(value) = got {
                    tracing::info!(shard, lease = %value, "shard taken");
                    *self.held[shard as usize].lock() = Some(Held {
                        value,
                        renewed: Instant::now(),
                        adjudicating: false,
                    });
                    // The shard's consumer on this node sees the lease and takes over.
                    owned += 1;
                }
            }
        }
        Ok(())
    }

    async fn release(&self, shard: u32) {
        let Some(held) = self.held[shard as usize].lock().take() else {
            return;
        };
        let mut con = self.con.clone();
        let released: Result<i64, _> = Script::new(RELEASE)
            .key(keys::lease(shard))
            .arg(&held.value)
            .invoke_async(&mut con)
            .await;
        tracing::info!(shard, ok = released.is_ok(), "shard released");
    }

    /// Reads the intent streams of the shards this node owns and kicks the named games.
    async fn follow_intents(self: Arc<Self>, hub: Hub, stop: watch::Receiver<bool>) {
        let mut con = self.blocking.clone();
        let mut last: Vec<String> = vec!["0-0".to_string(); self.shards as usize];
        let mut was_owned = vec![false; self.shards as usize];
        while !*stop.borrow() {
            let owned: Vec<u32> = (0..self.shards).filter(|s| self.owns(*s)).collect();
            for s in 0..self.shards as usize {
                let now = owned.contains(&(s as u32));
                if now && !was_owned[s] {
                    // A fresh owner reads the recent intents again: kicks are idempotent.
                    last[s] = "0-0".to_string();
                }
                was_owned[s] = now;
            }
            if owned.is_empty() {
                tokio::time::sleep(RENEW_EVERY).await;
                continue;
            }
            let mut cmd = redis::cmd("XREAD");
            cmd.arg("COUNT")
                .arg(256)
                .arg("BLOCK")
                .arg(500)
                .arg("STREAMS");
            for s in &owned {
                cmd.arg(keys::intents(*s));
            }
            for s in &owned {
                cmd.arg(&last[*s as usize]);
            }
            let reply: redis::RedisResult<Option<Vec<IntentStream>>> =
                cmd.query_async(&mut con).await;
            let streams = match reply {
                Ok(r) => r.unwrap_or_default(),
                Err(e) => {
                    tracing::debug!(error = %e, "intent read failed");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            };
            for (key, entries) in streams {
                let Some(shard) = key.rsplit(':').next().and_then(|s| s.parse::<usize>().ok())
                else {
                    continue;
                };
                for (id, fields) in entries {
                    // The shard may have passed to another node while this read blocked:
                    // that node reads the recent intents again and runs them.
                    if !self.owns(shard as u32) {
                        break;
                    }
                    if let Some(slot) = last.get_mut(shard) {
                        *slot = id;
                    }
                    let pairs: Vec<(String, String)> = fields
                        .chunks(2)
                        .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                        .collect();
                    let field = |n: &str| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v);
                    if field("k").is_some_and(|k| k == "w" || k == "c") {
                        tokio::spawn(super::writes::run(hub.clone(), self.con.clone(), pairs));
                    } else if let (Some(inbox), Some(game)) = (field("i"), field("g")) {
                        let (hub, inbox, game) = (hub.clone(), inbox.clone(), game.clone());
                        tokio::spawn(async move { hub.kick(&inbox, &game).await });
                    }
                }
            }
        }
    }
}

impl Fence for RedisCluster {
    /// The value last taken or renewed, even when this node's renewal is late: Redis
    /// compares it with the lease inside the script that records a verdict, so a verdict
    /// is refused exactly when the lease really moved on, not when this node was slow.
    fn lease_value(&self, shard: u32) -> Option<String> {
        let held = self.held.get(shard as usize)?.lock();
        held.as_ref().map(|h| h.value.clone())
    }
}

#[async_trait]
impl Ownership for RedisCluster {
    fn owns(&self, shard: u32) -> bool {
        let Some(held) = self.held.get(shard as usize) else {
            return false;
        };
        held.lock()
            .as_ref()
            .is_some_and(|h| h.adjudicating && h.renewed.elapsed() < LEASE_TTL)
    }

    fn leased(&self, shard: u32) -> bool {
        let Some(held) = self.held.get(shard as usize) else {
            return false;
        };
        held.lock()
            .as_ref()
            .is_some_and(|h| h.renewed.elapsed() < LEASE_TTL)
    }

    fn rounds_succeed(&self) -> bool {
        self.round_ok.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn adjudicating_under(&self, shard: u32) -> Option<String> {
        let held = self.held.get(shard as usize)?.lock();
        held.as_ref()
            .filter(|h| h.adjudicating && h.renewed.elapsed() < LEASE_TTL)
            .map(|h| h.value.clone())
    }

    fn adjudicate(&self, shard: u32) {
        if let Some(held) = self.held.get(shard as usize) {
            if let Some(h) = held.lock().as_mut() {
                h.adjudicating = true;
            }
        }
    }

    async fn forward_write(
        &self,
        shard: u32,
        target: (&str, &str, games::Seat),
        what: super::Forward<'_>,
        wait: Duration,
    ) -> Result<super::Forwarded, crate::game::HubError> {
        super::writes::forward(&self.con, shard, target, what, wait).await
    }

    async fn covered(&self, shard: u32) -> Result<u64, crate::inbox::StoreError> {
        super::verdicts::covered(&mut self.con.clone(), shard).await
    }

    fn verdicts_seen(&self, shard: u32) -> Option<watch::Receiver<u64>> {
        self.seen.get(shard as usize).map(|tx| tx.subscribe())
    }

    async fn hand_over(&self, shard: u32, inbox: &str, game: &str) {
        let mut con = self.con.clone();
        let sent: redis::RedisResult<String> = redis::cmd("XADD")
            .arg(keys::intents(shard))
            .arg("MAXLEN")
            .arg("~")
            .arg(INTENT_MAXLEN)
            .arg("*")
            .arg("i")
            .arg(inbox)
            .arg("g")
            .arg(game)
            .query_async(&mut con)
            .await;
        if let Err(e) = sent {
            tracing::warn!(shard, error = %e, "intent not handed over");
        }
    }
}
