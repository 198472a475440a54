//! The per-person event budget kept in Redis, so that every hub node of a cluster charges
//! the same bucket: a person whose requests a load balancer spreads over three nodes gets
//! the rate `--rate-limit` names, not three times it.
//!
//! The bucket is the same GCRA as the single hub's (burst of the whole budget): one Lua
//! script reads the person's theoretical arrival time, refuses when it runs further ahead of
//! now than the burst allows, else moves it on by one interval. Time is the Redis server's
//! (`TIME`), so nodes with skewed clocks still agree. Keys expire once the bucket is full
//! again, so idle people cost nothing.
//!
//! The budget of failed pairing attempts per address (10 a minute) is the same script:
//! charged as an attempt begins, and given back (`refund`) when it did not fail.
//!
//! What it deliberately does not do: decide what counts (the callers charge, as on a single
//! hub), or fail closed: when Redis cannot answer, the node's own bucket decides (the
//! request will meet a 503 from the store right after anyway).

use async_trait::async_trait;
use redis::aio::ConnectionManager;
use redis::Script;

use crate::inbox::redis::unavailable;
use crate::inbox::StoreError;
use std::net::IpAddr;

use crate::limits::{Person, RateLimited, RateSpec, SharedBudget, SharedFailures};

/// `ARGV[3]` is the mode: `charge` (refuse or spend) or `refund` (give one interval back, a
/// pairing attempt that did not fail).
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local mode = ARGV[3]
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
if mode == 'refund' then
  local back = tat - interval
  if back <= now then redis.call('DEL', KEYS[1])
  else redis.call('SET', KEYS[1], back, 'PX', back - now + 1000) end
  return 0
end
local allowed_at = tat - tolerance
if allowed_at > now then return allowed_at - now end
local new = tat + interval
redis.call('SET', KEYS[1], new, 'PX', new - now + 1000)
return 0
";

/// The Redis event budget. See the module documentation.
pub struct RedisBudget {
    con: ConnectionManager,
    interval_ms: u64,
    tolerance_ms: u64,
    script: Script,
}

impl RedisBudget {
    pub fn new(con: ConnectionManager, spec: RateSpec) -> RedisBudget {
        let interval_ms = (spec.per.as_millis() as u64 / u64::from(spec.count.get())).max(1);
        RedisBudget {
            con,
            interval_ms,
            tolerance_ms: interval_ms * u64::from(spec.count.get() - 1),
            script: Script::new(GCRA),
        }
    }
}

/// The Redis key of a person's bucket; a seat is known by its token's hash, never the token.
fn key(person: &Person) -> String {
    match person {
        Person::Seat(hash) => format!("ph:rl:s:{}", hex::encode(hash)),
        Person::Address(addr) => format!("ph:rl:a:{addr}"),
    }
}

impl RedisBudget {
    async fn run(&self, key: String, mode: &str) -> Result<Result<(), RateLimited>, StoreError> {
        let mut con = self.con.clone();
        let wait_ms: u64 = self
            .script
            .key(key)
            .arg(self.interval_ms)
            .arg(self.tolerance_ms)
            .arg(mode)
            .invoke_async(&mut con)
            .await
            .map_err(unavailable)?;
        if wait_ms == 0 {
            Ok(Ok(()))
        } else {
            Ok(Err(RateLimited::after(std::time::Duration::from_millis(
                wait_ms,
            ))))
        }
    }
}

#[async_trait]
impl SharedBudget for RedisBudget {
    async fn charge(&self, person: &Person) -> Result<Result<(), RateLimited>, StoreError> {
        self.run(key(person), "charge").await
    }
}

/// The key of an address's failed pairing attempts.
fn pairing_key(addr: IpAddr) -> String {
    format!("ph:rl:p:{addr}")
}

#[async_trait]
impl SharedFailures for RedisBudget {
    async fn take(&self, addr: IpAddr) -> Result<Result<(), RateLimited>, StoreError> {
        self.run(pairing_key(addr), "charge").await
    }

    async fn refund(&self, addr: IpAddr) -> Result<(), StoreError> {
        self.run(pairing_key(addr), "refund").await.map(|_| ())
    }
}
