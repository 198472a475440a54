//! Messages to a client: `hello.ok`, `game.state`, `game.refused` and `error`.
//!
//! `game.state` is the hot path: every accepted event sends one to every socket watching
//! the game. A [`StateFrame`] is therefore the finished frame text, built once per viewer
//! per event (`{"t":"game.state",` followed by the state's own fields) and shared by
//! reference count with every socket of that viewer; only the mover's copy is rebuilt, to
//! splice its `ref` in after the type tag. The state's fields are whatever the service
//! serialized (the hub's `GameState`: inbox, game, seat, phase, protocol, protocolId, rules,
//! signed, keys, seq, head, result, view, board, notice), so this module never re-encodes
//! or inspects a view.
//!
//! The other messages are rare and small and are written with `serde_json` directly.

use bytestring::ByteString;
use games::Seat;
use serde::Serialize;
use serde_json::{json, Value};

use super::client_in::Ref;

/// The head every `game.state` frame starts with.
const STATE_HEAD: &str = r#"{"t":"game.state""#;

thread_local! {
    /// Where [`StateFrame::encode`] serializes a state before copying it out at its size:
    /// reused, so a frame costs one allocation however its buffer would have grown.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A finished `game.state` frame for one viewer, with the `seq` it shows (`None` before
/// the game's start) so that a session can tell a newer state from an older one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateFrame {
    seq: Option<u64>,
    frame: ByteString,
}

impl StateFrame {
    /// Serializes a state (a JSON object) into a frame, once: straight after the head, so
    /// the state's bytes are written once and never copied.
    pub fn encode<T: Serialize>(
        seq: Option<u64>,
        state: &T,
    ) -> Result<StateFrame, serde_json::Error> {
        use serde::ser::Error;
        SCRATCH.with_borrow_mut(|buf| {
            buf.clear();
            buf.extend_from_slice(STATE_HEAD.as_bytes());
            serde_json::to_writer(&mut *buf, state)?;
            // The state's `{` becomes the `,` after the type tag (or goes, for `{}`).
            let at = STATE_HEAD.len();
            match buf.get(at..) {
                Some([b'{', b'}']) => {
                    buf.remove(at);
                }
                Some([b'{', ..]) => buf[at] = b',',
                _ => {
                    return Err(serde_json::Error::custom(
                        "a game state must serialize to a JSON object",
                    ))
                }
            }
            let frame = std::str::from_utf8(buf).map_err(serde_json::Error::custom)?;
            // Copied out at its exact size: a socket keeps its newest frame for as long as
            // the game is open, so a grown buffer's slack would be kept too.
            Ok(StateFrame {
                seq,
                frame: ByteString::from(frame),
            })
        })
    }

    /// A frame another process built with [`StateFrame::encode`], from its text (a hub
    /// node relaying another node's views); `None` unless it is a `game.state` frame.
    pub fn from_text(seq: Option<u64>, frame: &str) -> Option<StateFrame> {
        (frame.starts_with(STATE_HEAD) && frame.ends_with('}')).then(|| StateFrame {
            seq,
            frame: ByteString::from(frame),
        })
    }

    /// The `seq` this state shows; `None` before the start.
    pub fn seq(&self) -> Option<u64> {
        self.seq
    }

    /// The frame without a `ref` (a cheap, shared copy).
    pub fn frame(&self) -> ByteString {
        self.frame.clone()
    }

    /// The state alone, without the type tag: the JSON its service serialized, as an HTTP
    /// read answers it (copied out of the frame, not serialized again).
    pub fn state_json(&self) -> String {
        match self.frame[STATE_HEAD.len()..].strip_prefix(',') {
            Some(fields) => format!("{{{fields}"),
            None => "{}".to_string(),
        }
    }

    /// The frame with the mover's `ref` after the type tag.
    pub fn with_ref(&self, reference: &Ref) -> ByteString {
        let rest = &self.frame[STATE_HEAD.len()..];
        let mut frame = String::with_capacity(self.frame.len() + reference.json().len() + 8);
        frame.push_str(STATE_HEAD);
        frame.push_str(",\"ref\":");
        frame.push_str(reference.json());
        frame.push_str(rest);
        ByteString::from(frame)
    }

    /// The frame, with the ref when there is one.
    pub fn to_frame(&self, reference: Option<&Ref>) -> ByteString {
        match reference {
            Some(r) => self.with_ref(r),
            None => self.frame(),
        }
    }
}

fn text(value: Value) -> ByteString {
    ByteString::from(value.to_string())
}

fn ref_value(reference: Option<&Ref>) -> Value {
    // A Ref holds JSON text that was parsed from the client's frame, so it parses again;
    // should it not, the refusal still goes out, only without its ref.
    reference
        .and_then(|r| serde_json::from_str(r.json()).ok())
        .unwrap_or(Value::Null)
}

/// `{"t":"hello.ok","seat","inbox","game"}`: all null for a spectator that has not
/// subscribed to a game yet.
pub fn hello_ok(seat: Option<Seat>, inbox: Option<&str>, game: Option<&str>) -> ByteString {
    text(json!({
        "t": "hello.ok",
        "seat": seat.map(Seat::as_str),
        "inbox": inbox,
        "game": game,
    }))
}

/// `{"t":"game.refused","ref","error","detail"}`, and `"retryAfter"` (whole seconds)
/// when the refusal is `rate_limited`: always followed by the true state.
pub fn refused(
    reference: Option<&Ref>,
    error: &str,
    detail: Option<&str>,
    retry_after: Option<u64>,
) -> ByteString {
    let mut frame = json!({
        "t": "game.refused",
        "ref": ref_value(reference),
        "error": error,
        "detail": detail,
    });
    if let Some(secs) = retry_after {
        frame["retryAfter"] = json!(secs);
    }
    text(frame)
}

/// `{"t":"error","error","detail","close"}`: the socket closes after it when `close`.
pub fn error(error: &str, detail: Option<&str>, close: bool) -> ByteString {
    text(json!({
        "t": "error",
        "error": error,
        "detail": detail,
        "close": close,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::client_in::ClientIn;

    fn parse(frame: &str) -> Value {
        serde_json::from_str(frame).expect("every frame is JSON")
    }

    fn reference(json_ref: &str) -> Ref {
        let text = format!(r#"{{"t":"game.resign","ref":{json_ref}}}"#);
        match ClientIn::parse(&text) {
            Ok(ClientIn::Resign { reference: Some(r) }) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_frame_gives_back_its_state_as_it_was_serialized() {
        for state in [
            json!({"inbox": "i", "seq": 3, "board": "a\n\"b\"", "view": {"cells": [[null]]}}),
            json!({}),
        ] {
            let frame = StateFrame::encode(Some(3), &state).expect("an object");
            assert_eq!(frame.state_json(), state.to_string());
        }
    }

    #[test]
    fn a_state_frame_is_the_state_with_its_tag_and_the_ref_is_spliced_in() {
        let state = json!({"inbox": "i", "game": "g", "seq": 3, "view": {"cells": [1, 2]}});
        let frame = StateFrame::encode(Some(3), &state).expect("an object");
        assert_eq!(frame.seq(), Some(3));
        let mut expected = state.clone();
        expected["t"] = json!("game.state");
        assert_eq!(parse(&frame.frame()), expected);
        for r in [r#""m-1""#, "42", r#""quo\"te""#] {
            let with = frame.with_ref(&reference(r));
            let mut expected = expected.clone();
            expected["ref"] = parse(r);
            assert_eq!(parse(&with), expected, "{with}");
        }
        // An empty object still makes valid frames.
        let empty = StateFrame::encode(None, &json!({})).expect("an object");
        assert_eq!(parse(&empty.frame()), json!({"t": "game.state"}));
        assert_eq!(
            parse(&empty.with_ref(&reference("1"))),
            json!({"t": "game.state", "ref": 1})
        );
    }

    #[test]
    fn only_objects_make_state_frames() {
        assert!(StateFrame::encode(None, &json!([1])).is_err());
        assert!(StateFrame::encode(None, &json!("x")).is_err());
    }

    #[test]
    fn small_messages_have_the_fields_of_the_table() {
        assert_eq!(
            parse(&hello_ok(Some(Seat::O), Some("i"), Some("g"))),
            json!({"t": "hello.ok", "seat": "O", "inbox": "i", "game": "g"})
        );
        assert_eq!(
            parse(&hello_ok(None, None, None)),
            json!({"t": "hello.ok", "seat": null, "inbox": null, "game": null})
        );
        assert_eq!(
            parse(&refused(
                Some(&reference(r#""a""#)),
                "illegal_move",
                Some("occupied"),
                None,
            )),
            json!({"t": "game.refused", "ref": "a", "error": "illegal_move", "detail": "occupied"})
        );
        assert_eq!(
            parse(&refused(
                Some(&reference("7")),
                "rate_limited",
                Some("retry after 3 s"),
                Some(3),
            )),
            json!({"t": "game.refused", "ref": 7, "error": "rate_limited", "detail": "retry after 3 s", "retryAfter": 3})
        );
        assert_eq!(
            parse(&error("schema", None, true)),
            json!({"t": "error", "error": "schema", "detail": null, "close": true})
        );
    }
}
