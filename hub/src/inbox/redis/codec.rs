//! How a capture and a verdict are spelled in Redis: a stream entry's fields read back as
//! a [`Record`], and a verdict as a short JSON object.
//!
//! An entry holds `i` (inbox), `g` (game), `s` (seat, empty for an anonymous poster), `r`
//! (the raw event) and `t` (when it was appended, in ms), at stream id `0-{pos}`. A verdict
//! is `{"v": "a", "h": hash}`, `{"v": "r", "r": reason, "d": detail}` or `{"v": "s"}`.
//!
//! What it deliberately does not do: talk to Redis. An entry that does not read back is
//! damage ([`StoreError::Corrupt`]), never a record with a field missing.

use bytes::Bytes;
use games::{Reason, Seat};

use crate::inbox::{Capture, Record, StoreError, StoredVerdict};

/// One stream entry as `XRANGE` returns it: id and flat field/value list.
pub(super) type Entry = (String, Vec<Vec<u8>>);

pub(super) fn record(shard: u32, (id, fields): Entry) -> Result<Record, StoreError> {
    let bad = || StoreError::Corrupt(format!("stream entry {id} of shard {shard}"));
    let pos = id
        .strip_prefix("0-")
        .and_then(|p| p.parse::<u64>().ok())
        .ok_or_else(bad)?;
    let (mut inbox, mut game, mut seat, mut raw, mut at_ms) = (None, None, None, None, 0);
    for pair in fields.chunks(2) {
        let [name, value] = pair else {
            return Err(bad());
        };
        let text = || String::from_utf8(value.clone()).map_err(|_| bad());
        match name.as_slice() {
            b"i" => inbox = Some(text()?),
            b"g" => game = Some(text()?),
            // Empty for an anonymous poster; anything else names a seat.
            b"s" => {
                let text = text()?;
                seat = Some(if text.is_empty() {
                    None
                } else {
                    Some(Seat::parse(&text).ok_or_else(bad)?)
                });
            }
            b"r" => raw = Some(Bytes::copy_from_slice(value)),
            b"t" => at_ms = text()?.parse().map_err(|_| bad())?,
            _ => {}
        }
    }
    Ok(Record {
        capture: Capture { shard, pos },
        inbox: inbox.ok_or_else(bad)?,
        game: game.ok_or_else(bad)?,
        seat: seat.flatten(),
        raw: raw.ok_or_else(bad)?,
        at_ms,
        // Read from Redis, perhaps appended by another node: only `at_ms` says when.
        written: None,
    })
}

pub(super) fn encode_verdict(v: &StoredVerdict) -> String {
    let value = match v {
        StoredVerdict::Accepted { hash } => serde_json::json!({"v": "a", "h": hash}),
        StoredVerdict::Rejected { reason, detail } => {
            serde_json::json!({"v": "r", "r": reason.code(), "d": detail})
        }
        StoredVerdict::Skipped => serde_json::json!({"v": "s"}),
    };
    value.to_string()
}

pub fn decode_verdict(text: &str) -> Option<StoredVerdict> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    match v.get("v")?.as_str()? {
        "a" => Some(StoredVerdict::Accepted {
            hash: v.get("h")?.as_str()?.to_string(),
        }),
        "r" => Some(StoredVerdict::Rejected {
            reason: Reason::from_code(v.get("r")?.as_str()?)?,
            detail: v.get("d").and_then(|d| d.as_str()).map(str::to_string),
        }),
        "s" => Some(StoredVerdict::Skipped),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_round_trip() {
        for v in [
            StoredVerdict::Accepted {
                hash: "ab".repeat(32),
            },
            StoredVerdict::Rejected {
                reason: Reason::StaleSeq,
                detail: None,
            },
            StoredVerdict::Rejected {
                reason: Reason::IllegalMove,
                detail: Some("occupied".into()),
            },
            StoredVerdict::Skipped,
        ] {
            assert_eq!(decode_verdict(&encode_verdict(&v)), Some(v));
        }
        assert_eq!(decode_verdict("{\"v\":\"x\"}"), None);
    }

    #[test]
    fn entries_read_back_as_records() {
        let fields = vec![
            b"i".to_vec(),
            b"box".to_vec(),
            b"g".to_vec(),
            b"g1".to_vec(),
            b"s".to_vec(),
            b"O".to_vec(),
            b"r".to_vec(),
            b"{}".to_vec(),
            b"t".to_vec(),
            b"12".to_vec(),
        ];
        let r = record(3, ("0-7".into(), fields)).expect("a whole entry");
        assert_eq!(r.capture, Capture { shard: 3, pos: 7 });
        assert_eq!((r.inbox.as_str(), r.game.as_str()), ("box", "g1"));
        assert_eq!(r.seat, Some(Seat::O));
        assert_eq!(r.at_ms, 12);
        assert!(record(3, ("5-1".into(), Vec::new())).is_err());
    }
}
