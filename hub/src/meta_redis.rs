//! The Redis backend of [`Meta`]: seats, reservations and pairing codes shared by every hub
//! node, so any node can serve any client.
//!
//! Values live in one hash (`ph:m`) and their keys also in one sorted set of score 0
//! (`ph:mk`), whose lexical order gives `scan(prefix)` its key order. Each change touches
//! both in one Lua script, so `insert_new` (reserve a game id) and `take` (redeem a code
//! once) stay atomic across nodes as well as within one. "Durable when it returns" means
//! here: stored by the Redis server, as durable as its persistence setting makes it (see
//! [`crate::inbox::redis`]).
//!
//! What it deliberately does not do: expire keys (callers store deadlines in values, as
//! with the embedded store), or cache anything (each node's [`crate::game::seats`] keeps
//! its own cache and refreshes it from here when the hub runs clustered).

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use redis::aio::ConnectionManager;
use redis::{RedisError, Script};

use crate::inbox::redis::unavailable;
use crate::inbox::StoreError;
use crate::meta::Meta;

const VALUES: &str = "ph:m";
const KEYS: &str = "ph:mk";

const PUT: &str = r"
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
";
const INSERT_NEW: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
";
/// ARGV: the key, the value expected, then `1` and the new value, or `0` to remove.
const REPLACE: &str = r"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v ~= ARGV[2] then return 0 end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
";
const TAKE: &str = r"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return v
";

/// The Redis meta store. See the module documentation.
pub struct RedisMeta {
    con: ConnectionManager,
    up: Arc<AtomicBool>,
    put: Script,
    insert_new: Script,
    replace: Script,
    take: Script,
}

impl RedisMeta {
    /// A meta store over an existing connection. `up` is the health flag it shares with
    /// the inbox on the same Redis, whose watcher sets it again once Redis answers.
    pub fn new(con: ConnectionManager, up: Arc<AtomicBool>) -> RedisMeta {
        RedisMeta {
            con,
            up,
            put: Script::new(PUT),
            insert_new: Script::new(INSERT_NEW),
            replace: Script::new(REPLACE),
            take: Script::new(TAKE),
        }
    }

    fn seen<T>(&self, r: Result<T, RedisError>) -> Result<T, StoreError> {
        match r {
            Ok(v) => {
                self.up.store(true, Ordering::Release);
                Ok(v)
            }
            Err(e) => {
                if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
                    self.up.store(false, Ordering::Release);
                }
                Err(unavailable(e))
            }
        }
    }

    async fn script(
        &self,
        script: &Script,
        key: &str,
        value: &[u8],
    ) -> Result<redis::Value, StoreError> {
        let mut con = self.con.clone();
        self.seen(
            script
                .key(VALUES)
                .key(KEYS)
                .arg(key)
                .arg(value)
                .invoke_async(&mut con)
                .await,
        )
    }
}

fn as_bytes(v: redis::Value) -> Option<Bytes> {
    match v {
        redis::Value::BulkString(b) => Some(Bytes::from(b)),
        _ => None,
    }
}

#[async_trait]
impl Meta for RedisMeta {
    async fn put(&self, key: &str, value: Bytes) -> Result<(), StoreError> {
        self.script(&self.put, key, &value).await.map(|_| ())
    }

    async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, StoreError> {
        let v = self.script(&self.insert_new, key, &value).await?;
        Ok(matches!(v, redis::Value::Int(1)))
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let mut con = self.con.clone();
        let v: Option<Vec<u8>> = self.seen(
            redis::cmd("HGET")
                .arg(VALUES)
                .arg(key)
                .query_async(&mut con)
                .await,
        )?;
        Ok(v.map(Bytes::from))
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.take(key).await?.is_some())
    }

    async fn replace(
        &self,
        key: &str,
        expected: &[u8],
        value: Option<Bytes>,
    ) -> Result<bool, StoreError> {
        let mut con = self.con.clone();
        let (write, value) = match &value {
            Some(v) => ("1", v.as_ref()),
            None => ("0", &[][..]),
        };
        let replaced: redis::Value = self.seen(
            self.replace
                .key(VALUES)
                .key(KEYS)
                .arg(key)
                .arg(expected)
                .arg(write)
                .arg(value)
                .invoke_async(&mut con)
                .await,
        )?;
        Ok(matches!(replaced, redis::Value::Int(1)))
    }

    async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        Ok(as_bytes(self.script(&self.take, key, &[]).await?))
    }

    async fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Bytes)>, StoreError> {
        let mut con = self.con.clone();
        // `[prefix` (or `(after`) to `[prefix\xff`: the keys that start with the prefix,
        // in order (keys are UTF-8, so no key byte is 0xff).
        let low = match crate::meta::page_start(prefix, after) {
            Bound::Excluded(after) => format!("({after}"),
            _ => format!("[{prefix}"),
        };
        let mut high = format!("[{prefix}").into_bytes();
        high.push(0xff);
        let mut range = redis::cmd("ZRANGEBYLEX");
        range.arg(KEYS).arg(low).arg(high);
        if limit != usize::MAX {
            range.arg("LIMIT").arg(0).arg(limit);
        }
        let keys: Vec<String> = self.seen(range.query_async(&mut con).await)?;
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(512) {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(VALUES);
            for k in chunk {
                cmd.arg(k);
            }
            let values: Vec<Option<Vec<u8>>> = self.seen(cmd.query_async(&mut con).await)?;
            for (k, v) in chunk.iter().zip(values) {
                if let Some(v) = v {
                    out.push((k.clone(), Bytes::from(v)));
                }
            }
        }
        Ok(out)
    }

    fn ready(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }
}
