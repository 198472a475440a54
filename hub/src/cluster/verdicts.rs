//! The verdict feed: how a node learns the verdicts that other nodes (the shards' owners)
//! record.
//!
//! Every verdict an owner records is added, in the same Lua script that stores it, to its
//! shard's verdict stream `ph:vs:{shard}` (fields `c` position, `v` verdict, `l` lease).
//! One task per node blocks in `XREAD` on the verdict streams of the shards this node does
//! not adjudicate, from where it last read. Each verdict is handed to a poster of this node
//! waiting for that capture (a whole event or a hub-held write received here and appended
//! for the owner to judge), and each shard's last seen position is published so that a
//! reader can wait for the owner (a pairing here waits for the start the owner writes). It
//! reads positions and verdicts only: no record, and no verification. A node alone in the
//! cluster reads nothing.
//!
//! The streams are durable, so a reconnect resumes where the feed stopped and misses
//! nothing; a poster that waited past its 5 s has answered `pending` meanwhile and its
//! client reads the verdict later with `GET …/events/{capture}`. A shard this node stops
//! adjudicating is read from its stream's end as it stands then (a poster that started
//! waiting in that instant may answer `pending`).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::sync::watch;

use super::{Ownership, RedisCluster};
use crate::game::Hub;
use crate::inbox::redis::{decode_verdict, keys};
use crate::inbox::{Capture, StoreError, StoredVerdict};

/// How long one `XREAD` blocks before it is issued again.
const BLOCK_MS: u64 = 1000;
/// Verdicts read per stream and call.
const COUNT: usize = 1024;

/// One stream of an `XREAD` reply: its key and its entries (id, flat fields).
type Stream = (String, Vec<(String, Vec<String>)>);

/// The position named by the last entry of `shard`'s verdict stream (0 when it is empty).
/// Verdicts are recorded in shard order give or take the few in flight at once, so a new
/// owner that resumes a little before this position adjudicates every capture its
/// predecessor left without a verdict.
pub async fn covered(con: &mut ConnectionManager, shard: u32) -> Result<u64, StoreError> {
    let last = last_entry(con, shard)
        .await
        .map_err(crate::inbox::redis::unavailable)?;
    Ok(last
        .and_then(|(_, fields)| field(&fields, "c").and_then(|c| c.parse().ok()))
        .unwrap_or(0))
}

fn field<'a>(fields: &'a [String], name: &str) -> Option<&'a str> {
    fields
        .chunks(2)
        .find(|p| p.first().is_some_and(|k| k == name))
        .and_then(|p| p.get(1))
        .map(String::as_str)
}

/// The last entry of `shard`'s verdict stream, if any.
async fn last_entry(
    con: &mut ConnectionManager,
    shard: u32,
) -> redis::RedisResult<Option<(String, Vec<String>)>> {
    let last: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
        .arg(keys::verdict_stream(shard))
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(con)
        .await?;
    Ok(last.into_iter().next())
}

/// Follows the verdict streams of the shards this node does not adjudicate until `stop`
/// turns true. See the module documentation.
pub async fn follow(cluster: Arc<RedisCluster>, hub: Hub, stop: watch::Receiver<bool>) {
    let mut con = match crate::inbox::redis::connect(cluster.url()).await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "the verdict feed could not connect");
            return;
        }
    };
    let shards = cluster.shards();
    let mut last: Vec<Option<String>> = vec![None; shards as usize];
    while !*stop.borrow() {
        let followed: Vec<u32> = (0..shards).filter(|s| !cluster.owns(*s)).collect();
        for s in 0..shards {
            if !followed.contains(&s) {
                last[s as usize] = None;
            }
        }
        if followed.is_empty() {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        // Start at each stream's end as it stands when the feed (re)starts reading it:
        // verdicts recorded before any poster of this node waited need not be seen.
        let mut ready = true;
        for &s in &followed {
            if last[s as usize].is_none() {
                match last_entry(&mut con, s).await {
                    Ok(entry) => {
                        last[s as usize] =
                            Some(entry.map_or_else(|| "0-0".to_string(), |(id, _)| id))
                    }
                    Err(_) => ready = false,
                }
            }
        }
        if !ready {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT")
            .arg(COUNT)
            .arg("BLOCK")
            .arg(BLOCK_MS)
            .arg("STREAMS");
        for &s in &followed {
            cmd.arg(keys::verdict_stream(s));
        }
        for &s in &followed {
            cmd.arg(last[s as usize].as_deref().unwrap_or("0-0"));
        }
        let reply: redis::RedisResult<Option<Vec<Stream>>> = cmd.query_async(&mut con).await;
        let streams = match reply {
            Ok(r) => r.unwrap_or_default(),
            Err(e) => {
                tracing::debug!(error = %e, "verdict feed read failed");
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
        };
        for (key, entries) in streams {
            let Some(shard) = key.rsplit(':').next().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let mine = cluster.owns(shard);
            let mut high = 0;
            for (id, fields) in entries {
                let read = (
                    field(&fields, "c").and_then(|c| c.parse::<u64>().ok()),
                    field(&fields, "v").and_then(decode_verdict),
                );
                if read.0.is_none() || read.1.is_none() {
                    // Damage, told to the operator; a read of the capture goes to the
                    // verdict hash, which answers that the store is damaged there.
                    tracing::error!(shard, id, "a verdict stream entry that cannot be read");
                }
                if let Some(slot) = last.get_mut(shard as usize) {
                    *slot = Some(id);
                }
                let (Some(pos), Some(verdict)) = read else {
                    continue;
                };
                high = high.max(pos);
                if !mine {
                    hub.verdict_recorded_elsewhere(Capture { shard, pos }, verdict);
                }
            }
            cluster.saw_verdict(shard, high);
        }
    }
}

/// The verdict kind, hash and refusal of a stored verdict, as a poster reports them.
pub fn outcome_parts(
    verdict: StoredVerdict,
) -> (
    crate::game::Verdict,
    Option<String>,
    Option<games::reason::Refusal>,
) {
    use games::reason::{Reason, Refusal};
    match verdict {
        StoredVerdict::Accepted { hash } => (crate::game::Verdict::Accepted, Some(hash), None),
        StoredVerdict::Rejected { reason, detail } => (
            crate::game::Verdict::Rejected,
            None,
            Some(Refusal { reason, detail }),
        ),
        StoredVerdict::Skipped => (
            crate::game::Verdict::Skipped,
            None,
            Some(Refusal::new(Reason::UnknownProtocol)),
        ),
    }
}
