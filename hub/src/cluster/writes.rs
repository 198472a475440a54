//! Hub-held writes handed to the shard's owner through the intent stream.
//!
//! A node that receives a hub-held seat's move (or resign, or rock-paper-scissors choice)
//! for a game whose shard it does not own does not draft it itself: it adds a write intent
//! (`k=w` with the move, or `k=c` with the choice; the seat, a fresh request id, the time)
//! to the shard's intent stream and waits, polling `ph:r:{id}`, for the owner's reply: the
//! capture and hash of the event the owner drafted from its actor's head and appended, a
//! choice the owner now holds for the seat's turn, or the refusal. Then it waits for that
//! capture's verdict like any poster. Choices go to the owner because only the game's
//! adjudicator sees the turn come round on which a held choice must be committed.
//!
//! The owner runs each intent at most once: it claims `ph:r:{id}` with `SET NX` before it
//! drafts, and skips intents older than [`INTENT_TTL`] (a new owner reads the recent intent
//! history again, and must not replay a move a client has long given up on).
//!
//! What it deliberately does not do: retry. A reply that does not come within the wait is
//! answered 503 `unavailable` (the shard is changing owner); the client tries again and
//! the chain settles any duplicate (`stale_seq`).

use std::time::{Duration, Instant};

use games::reason::{Reason, Refusal};
use games::Seat;
use rand::RngCore;
use redis::aio::ConnectionManager;
use serde_json::{json, Value};

use super::{Forward, Forwarded};
use crate::clock::now_ms;
use crate::game::{Hub, HubError, Unavailable};
use crate::inbox::redis::keys;
use crate::inbox::Capture;

/// Intents older than this are not run.
pub const INTENT_TTL: Duration = Duration::from_secs(5);
/// How long a reply is kept.
const REPLY_TTL_MS: u64 = 30_000;
/// How often a waiting node looks for its reply.
const POLL: Duration = Duration::from_millis(3);

fn reply_key(id: &str) -> String {
    format!("ph:r:{id}")
}

/// Sends a write intent to `shard`'s owner and waits up to `wait` for its reply.
pub async fn forward(
    con: &ConnectionManager,
    shard: u32,
    (inbox, game, seat): (&str, &str, Seat),
    what: Forward<'_>,
    wait: Duration,
) -> Result<Forwarded, HubError> {
    let mut con = con.clone();
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    let id = hex::encode(raw);
    let (kind, mv) = match what {
        Forward::Move(mv) => ("w", mv.map(Value::to_string).unwrap_or_default()),
        Forward::Choice(choice) => ("c", choice.to_string()),
    };
    let _: String = redis::cmd("XADD")
        .arg(keys::intents(shard))
        .arg("MAXLEN")
        .arg("~")
        .arg(1000)
        .arg("*")
        .arg("i")
        .arg(inbox)
        .arg("g")
        .arg(game)
        .arg("k")
        .arg(kind)
        .arg("s")
        .arg(seat.as_str())
        .arg("m")
        .arg(mv)
        .arg("r")
        .arg(&id)
        .arg("t")
        .arg(now_ms())
        .query_async(&mut con)
        .await
        .map_err(Unavailable::Redis)?;
    let deadline = Instant::now() + wait;
    loop {
        let reply: Option<String> = redis::cmd("GET")
            .arg(reply_key(&id))
            .query_async(&mut con)
            .await
            .map_err(Unavailable::Redis)?;
        if let Some(reply) = reply.filter(|r| r != "claimed") {
            return decode(&reply);
        }
        if Instant::now() >= deadline {
            return Err(Unavailable::OwnerTimeout.into());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn decode(reply: &str) -> Result<Forwarded, HubError> {
    let v: Value = serde_json::from_str(reply).map_err(Unavailable::OwnerReply)?;
    if let (Some(c), Some(h)) = (v["c"].as_str(), v["h"].as_str()) {
        let capture: Capture = c.parse().map_err(Unavailable::OwnerCapture)?;
        return Ok(Forwarded::Appended(capture, h.to_string()));
    }
    if v["held"] == Value::Bool(true) {
        return Ok(Forwarded::Held);
    }
    let code = v["e"].as_str().unwrap_or("unavailable");
    let detail = v["d"].as_str().map(str::to_string);
    Err(match code {
        "not_started" => HubError::NotStarted,
        "agent_held" => HubError::AgentHeld,
        "not_found" => HubError::NotFound(detail.unwrap_or_default()),
        "forbidden" => HubError::Forbidden(detail.unwrap_or_default()),
        other => match Reason::from_code(other) {
            // A section-1 refusal of the event the owner drafted (too large, too deep).
            Some(reason) if reason.is_input() => HubError::Input(Refusal {
                reason,
                detail: detail.clone(),
            }),
            Some(reason) => HubError::Refused(Refusal {
                reason,
                detail: detail.clone(),
            }),
            None => Unavailable::Owner {
                code: other.to_string(),
                detail,
            }
            .into(),
        },
    })
}

/// Runs one write intent as the shard's owner (fields as read from the intent stream).
pub async fn run(hub: Hub, mut con: ConnectionManager, fields: Vec<(String, String)>) {
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let (Some(inbox), Some(game), Some(seat), Some(id), Some(at)) = (
        field("i"),
        field("g"),
        field("s").and_then(Seat::parse),
        field("r"),
        field("t").and_then(|t| t.parse::<u64>().ok()),
    ) else {
        return;
    };
    if now_ms().saturating_sub(at) > INTENT_TTL.as_millis() as u64 {
        return;
    }
    let claimed: Option<String> = redis::cmd("SET")
        .arg(reply_key(id))
        .arg("claimed")
        .arg("NX")
        .arg("PX")
        .arg(REPLY_TTL_MS)
        .query_async(&mut con)
        .await
        .unwrap_or(None);
    if claimed.is_none() {
        return; // another run of this intent (a re-read after an owner change) has it
    }
    let written = if field("k") == Some("c") {
        let choice = field("m").unwrap_or_default();
        hub.choose_intent(inbox, game, seat, choice).await
    } else {
        let mv = match field("m").filter(|m| !m.is_empty()) {
            Some(m) => match serde_json::from_str::<Value>(m) {
                Ok(v) => Some(v),
                Err(_) => return,
            },
            None => None,
        };
        hub.write_intent(inbox, game, seat, mv)
            .await
            .map(|(c, h)| Forwarded::Appended(c, h))
    };
    let reply = match written {
        Ok(Forwarded::Appended(capture, hash)) => json!({"c": capture.to_string(), "h": hash}),
        Ok(Forwarded::Held) => json!({"held": true}),
        Err(e) => json!({"e": e.code(), "d": e.detail()}),
    };
    let stored: redis::RedisResult<()> = redis::cmd("SET")
        .arg(reply_key(id))
        .arg(reply.to_string())
        .arg("PX")
        .arg(REPLY_TTL_MS)
        .query_async(&mut con)
        .await;
    if let Err(e) = stored {
        tracing::warn!(error = %e, "write intent reply not stored");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_to_captures_and_errors() {
        let ok = decode(r#"{"c":"3:9","h":"ab"}"#).expect("a capture");
        assert_eq!(
            ok,
            Forwarded::Appended(Capture { shard: 3, pos: 9 }, "ab".to_string())
        );
        assert_eq!(decode(r#"{"held":true}"#).ok(), Some(Forwarded::Held));
        assert!(matches!(
            decode(r#"{"e":"not_started","d":null}"#),
            Err(HubError::NotStarted)
        ));
        assert!(matches!(
            decode(r#"{"e":"after_end","d":null}"#),
            Err(HubError::Refused(r)) if r.reason == Reason::AfterEnd
        ));
        assert!(matches!(
            decode("nope"),
            Err(HubError::Unavailable(Unavailable::OwnerReply(_)))
        ));
        assert!(matches!(
            decode(r#"{"c":"3-9","h":"ab"}"#),
            Err(HubError::Unavailable(Unavailable::OwnerCapture(_)))
        ));
        // A refusal this node does not answer with itself passes on the owner's words.
        let owner = decode(r#"{"e":"too_many_captures","d":"at most 9 captures per game"}"#);
        let Err(err @ HubError::Unavailable(Unavailable::Owner { .. })) = owner else {
            panic!("{owner:?}");
        };
        assert_eq!(
            (err.status(), err.code(), err.detail().as_deref()),
            (503, "unavailable", Some("at most 9 captures per game"))
        );
        let bare = decode(r#"{"e":"internal","d":null}"#).expect_err("refused");
        assert_eq!(bare.detail().as_deref(), Some("internal"));
    }
}
