//! The payloads the embedded inbox writes into its log frames.
//!
//! Two kinds: an event (its capture, time, seat, inbox, game and raw bytes) and a verdict
//! (a capture and what the referee said of it). Integers are little-endian, strings are a
//! `u32` length and UTF-8 bytes, and the event's raw bytes run to the end of the payload.
//! The frame around a payload carries its length and checksum ([`super::log`]), so a
//! payload that fails to decode here is damage the checksum missed, or a newer format.
//!
//! What it deliberately does not do: look inside the raw event. The inbox stores the bytes
//! it was handed; only the games crate parses them.

use bytes::Bytes;
use games::{Reason, Seat};

use super::{Capture, Record, StoreError, StoredVerdict};

const EVENT: u8 = 1;
const VERDICT: u8 = 2;

const ACCEPTED: u8 = 1;
const REJECTED: u8 = 2;
const SKIPPED: u8 = 3;

/// One decoded payload.
pub enum Entry {
    Event(Record),
    Verdict(Capture, StoredVerdict),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_capture(out: &mut Vec<u8>, capture: Capture) {
    out.extend_from_slice(&capture.shard.to_le_bytes());
    out.extend_from_slice(&capture.pos.to_le_bytes());
}

pub fn encode_event(
    out: &mut Vec<u8>,
    capture: Capture,
    at_ms: u64,
    seat: Option<Seat>,
    inbox: &str,
    game: &str,
    raw: &[u8],
) {
    out.push(EVENT);
    put_capture(out, capture);
    out.extend_from_slice(&at_ms.to_le_bytes());
    out.push(match seat {
        None => 0,
        Some(Seat::X) => 1,
        Some(Seat::O) => 2,
    });
    put_str(out, inbox);
    put_str(out, game);
    out.extend_from_slice(raw);
}

pub fn encode_verdict(out: &mut Vec<u8>, capture: Capture, verdict: &StoredVerdict) {
    out.push(VERDICT);
    put_capture(out, capture);
    match verdict {
        StoredVerdict::Accepted { hash } => {
            out.push(ACCEPTED);
            put_str(out, hash);
        }
        StoredVerdict::Rejected { reason, detail } => {
            out.push(REJECTED);
            put_str(out, reason.code());
            match detail {
                Some(detail) => {
                    out.push(1);
                    put_str(out, detail);
                }
                None => out.push(0),
            }
        }
        StoredVerdict::Skipped => out.push(SKIPPED),
    }
}

/// A cursor over a payload; every read checks bounds so damage is an error, not a panic.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(short)?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        let mut word = [0u8; 4];
        word.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(word))
    }

    fn u64(&mut self) -> Result<u64, StoreError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn string(&mut self) -> Result<String, StoreError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| corrupt("a stored name is not UTF-8"))
    }

    fn capture(&mut self) -> Result<Capture, StoreError> {
        Ok(Capture {
            shard: self.u32()?,
            pos: self.u64()?,
        })
    }
}

fn short() -> StoreError {
    corrupt("a stored entry is shorter than its fields")
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Decodes one payload. `payload` is shared so the event's raw bytes are a slice of it,
/// not a copy.
pub fn decode(payload: Bytes) -> Result<Entry, StoreError> {
    let mut r = Reader {
        data: &payload,
        at: 0,
    };
    match r.u8()? {
        EVENT => {
            let capture = r.capture()?;
            let at_ms = r.u64()?;
            let seat = match r.u8()? {
                0 => None,
                1 => Some(Seat::X),
                2 => Some(Seat::O),
                _ => return Err(corrupt("a stored seat is neither X nor O")),
            };
            let inbox = r.string()?;
            let game = r.string()?;
            let raw = payload.slice(r.at..);
            Ok(Entry::Event(Record {
                capture,
                inbox,
                game,
                seat,
                raw,
                at_ms,
                // Read back from the log: only `at_ms` says when it was written.
                written: None,
            }))
        }
        VERDICT => {
            let capture = r.capture()?;
            let verdict = match r.u8()? {
                ACCEPTED => StoredVerdict::Accepted { hash: r.string()? },
                REJECTED => {
                    let code = r.string()?;
                    let reason = Reason::from_code(&code)
                        .ok_or_else(|| corrupt("a stored verdict names an unknown reason"))?;
                    let detail = match r.u8()? {
                        0 => None,
                        _ => Some(r.string()?),
                    };
                    StoredVerdict::Rejected { reason, detail }
                }
                SKIPPED => StoredVerdict::Skipped,
                _ => return Err(corrupt("a stored verdict has an unknown kind")),
            };
            Ok(Entry::Verdict(capture, verdict))
        }
        _ => Err(corrupt("a stored entry has an unknown kind")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_round_trips() {
        let capture = Capture {
            shard: 5,
            pos: 1 << 40,
        };
        for seat in [None, Some(Seat::X), Some(Seat::O)] {
            let mut buf = Vec::new();
            encode_event(&mut buf, capture, 1234, seat, "box", "g-1", br#"{"seq":0}"#);
            let Ok(Entry::Event(record)) = decode(Bytes::from(buf)) else {
                panic!("not an event");
            };
            assert_eq!(record.capture, capture);
            assert_eq!(record.seat, seat);
            assert_eq!(
                (record.inbox.as_str(), record.game.as_str()),
                ("box", "g-1")
            );
            assert_eq!(&record.raw[..], br#"{"seq":0}"#);
            assert_eq!(record.at_ms, 1234);
        }
    }

    #[test]
    fn verdicts_round_trip() {
        let capture = Capture { shard: 0, pos: 9 };
        for verdict in [
            StoredVerdict::Accepted {
                hash: "ab".repeat(32),
            },
            StoredVerdict::Rejected {
                reason: Reason::IllegalMove,
                detail: Some("occupied".into()),
            },
            StoredVerdict::Rejected {
                reason: Reason::StaleSeq,
                detail: None,
            },
            StoredVerdict::Skipped,
        ] {
            let mut buf = Vec::new();
            encode_verdict(&mut buf, capture, &verdict);
            let Ok(Entry::Verdict(c, v)) = decode(Bytes::from(buf)) else {
                panic!("not a verdict");
            };
            assert_eq!((c, v), (capture, verdict));
        }
    }

    #[test]
    fn truncated_payloads_are_errors_not_panics() {
        let mut buf = Vec::new();
        encode_event(
            &mut buf,
            Capture { shard: 1, pos: 2 },
            3,
            None,
            "inbox",
            "game",
            b"",
        );
        for cut in 0..buf.len() {
            assert!(
                decode(Bytes::copy_from_slice(&buf[..cut])).is_err(),
                "cut at {cut}"
            );
        }
    }
}
