//! Messages from a client: one JSON text frame each, tagged by `t`.
//!
//! | `t` | fields |
//! |---|---|
//! | `hello` | `token`? — with a seat token the socket acts for that seat; without, it watches |
//! | `game.move` | `move` (rock-paper-scissors: `{"choice"}`), `ref`? |
//! | `game.resign` | `ref`? |
//! | `game.board` | — |
//! | `game.subscribe` | `inbox`, `game` |
//!
//! Parsing is strict: unknown `t` values and unknown fields are refused, so a client that
//! misspells a field hears about it instead of being silently ignored. A `ref` is the
//! client's own id for an attempt, a string of at most [`MAX_REF_BYTES`] bytes or an
//! integer; it is echoed back exactly as sent. The frame-size limit is the session's
//! business (the socket refuses larger frames before they are parsed).
//!
//! What this module does not do: judge a move's payload. It is the protocol's to refuse
//! (`illegal_move` / `bad_move`), so it is passed on as any JSON value.

use serde::Deserialize;
use serde_json::{Map, Value};

/// The longest `ref` a client may attach, in bytes of its JSON text.
pub const MAX_REF_BYTES: usize = 128;

/// One message from a client.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientIn {
    Hello { token: Option<String> },
    Move { mv: Value, reference: Option<Ref> },
    Resign { reference: Option<Ref> },
    Board,
    Subscribe { inbox: String, game: String },
}

/// A client's id for an attempt, kept as the JSON text it arrived as (a string or an
/// integer), so that echoing it back needs no re-encoding and cannot change it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ref(String);

impl Ref {
    /// The ref's JSON text, e.g. `"m1"` (with quotes) or `17`.
    pub fn json(&self) -> &str {
        &self.0
    }

    fn from_value(value: Value) -> Result<Ref, BadMessage> {
        let text = match &value {
            Value::String(_) => value.to_string(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => return Err(BadMessage::schema("`ref` must be a string or an integer")),
        };
        if text.len() > MAX_REF_BYTES {
            return Err(BadMessage::schema(format!(
                "`ref` is over {MAX_REF_BYTES} bytes"
            )));
        }
        Ok(Ref(text))
    }
}

/// A frame that is no message of this table: a wire error code and a detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadMessage {
    pub error: &'static str,
    pub detail: String,
}

impl BadMessage {
    fn schema(detail: impl Into<String>) -> BadMessage {
        BadMessage {
            error: "schema",
            detail: detail.into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Hello {
    token: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Move {
    #[serde(rename = "move")]
    mv: Value,
    #[serde(rename = "ref")]
    reference: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Resign {
    #[serde(rename = "ref")]
    reference: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Board {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Subscribe {
    inbox: String,
    game: String,
}

fn fields<T: serde::de::DeserializeOwned>(
    t: &str,
    map: Map<String, Value>,
) -> Result<T, BadMessage> {
    serde_json::from_value(Value::Object(map)).map_err(|e| BadMessage::schema(format!("{t}: {e}")))
}

fn reference(value: Option<Value>) -> Result<Option<Ref>, BadMessage> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ref::from_value(v).map(Some),
    }
}

impl ClientIn {
    /// Parses one text frame.
    pub fn parse(text: &str) -> Result<ClientIn, BadMessage> {
        let value: Value = serde_json::from_str(text).map_err(|e| BadMessage {
            error: "bad_json",
            detail: e.to_string(),
        })?;
        let Value::Object(mut map) = value else {
            return Err(BadMessage::schema("a message is a JSON object"));
        };
        let t = match map.remove("t") {
            Some(Value::String(t)) => t,
            Some(_) => return Err(BadMessage::schema("`t` must be a string")),
            None => return Err(BadMessage::schema("a message needs its type `t`")),
        };
        match t.as_str() {
            "hello" => {
                let Hello { token } = fields(&t, map)?;
                Ok(ClientIn::Hello { token })
            }
            "game.move" => {
                let Move { mv, reference: r } = fields(&t, map)?;
                Ok(ClientIn::Move {
                    mv,
                    reference: reference(r)?,
                })
            }
            "game.resign" => {
                let Resign { reference: r } = fields(&t, map)?;
                Ok(ClientIn::Resign {
                    reference: reference(r)?,
                })
            }
            "game.board" => {
                let Board {} = fields(&t, map)?;
                Ok(ClientIn::Board)
            }
            "game.subscribe" => {
                let Subscribe { inbox, game } = fields(&t, map)?;
                Ok(ClientIn::Subscribe { inbox, game })
            }
            other => Err(BadMessage {
                error: "unknown_message",
                detail: format!("no message `{other}`"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(text: &str) -> ClientIn {
        match ClientIn::parse(text) {
            Ok(m) => m,
            Err(e) => panic!("{text} was refused: {e:?}"),
        }
    }

    fn refused(text: &str) -> &'static str {
        match ClientIn::parse(text) {
            Ok(m) => panic!("{text} was accepted as {m:?}"),
            Err(e) => e.error,
        }
    }

    #[test]
    fn every_message_of_the_table_parses() {
        assert_eq!(ok(r#"{"t":"hello"}"#), ClientIn::Hello { token: None });
        assert_eq!(
            ok(r#"{"t":"hello","token":"abc"}"#),
            ClientIn::Hello {
                token: Some("abc".into())
            }
        );
        assert_eq!(
            ok(r#"{"t":"game.move","move":{"row":1,"col":2},"ref":"m1"}"#),
            ClientIn::Move {
                mv: json!({"row": 1, "col": 2}),
                reference: Some(Ref("\"m1\"".into()))
            }
        );
        assert_eq!(
            ok(r#"{"t":"game.move","move":{"choice":"rock"},"ref":7}"#),
            ClientIn::Move {
                mv: json!({"choice": "rock"}),
                reference: Some(Ref("7".into()))
            }
        );
        assert_eq!(
            ok(r#"{"t":"game.resign","ref":"r"}"#),
            ClientIn::Resign {
                reference: Some(Ref("\"r\"".into()))
            }
        );
        assert_eq!(ok(r#"{"t":"game.board"}"#), ClientIn::Board);
        assert_eq!(
            ok(r#"{"t":"game.subscribe","inbox":"i","game":"g"}"#),
            ClientIn::Subscribe {
                inbox: "i".into(),
                game: "g".into()
            }
        );
    }

    #[test]
    fn a_ref_is_echoed_exactly_as_sent() {
        let ClientIn::Move {
            reference: Some(r), ..
        } = ok(r#"{"t":"game.move","move":{},"ref":"a\"b\u00e9"}"#)
        else {
            panic!("no ref");
        };
        assert_eq!(
            serde_json::from_str::<String>(r.json()).expect("a JSON string"),
            "a\"bé"
        );
    }

    #[test]
    fn malformed_messages_are_refused_with_a_code() {
        let long_ref = format!(r#"{{"t":"game.resign","ref":"{}"}}"#, "x".repeat(200));
        let table: &[(&str, &str)] = &[
            ("", "bad_json"),
            ("{", "bad_json"),
            ("[1]", "schema"),
            (r#"{"token":"x"}"#, "schema"),
            (r#"{"t":3}"#, "schema"),
            (r#"{"t":"game.jump"}"#, "unknown_message"),
            (r#"{"t":"hello","tokn":"x"}"#, "schema"),
            (r#"{"t":"hello","token":5}"#, "schema"),
            (r#"{"t":"game.move","ref":"m"}"#, "schema"),
            (r#"{"t":"game.move","move":{},"ref":1.5}"#, "schema"),
            (r#"{"t":"game.move","move":{},"ref":{"a":1}}"#, "schema"),
            (r#"{"t":"game.board","x":1}"#, "schema"),
            (r#"{"t":"game.subscribe","inbox":"i"}"#, "schema"),
            (&long_ref, "schema"),
        ];
        for (text, code) in table {
            assert_eq!(refused(text), *code, "{text}");
        }
    }
}
