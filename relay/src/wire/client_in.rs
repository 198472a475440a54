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

use std::borrow::Cow;
use std::collections::BTreeMap;

use games::Reason;
use serde::Deserialize;
use serde_json::error::Category;
use serde_json::value::RawValue;
use serde_json::Value;

/// The longest `ref` a client may attach, in bytes of its JSON text.
pub const MAX_REF_BYTES: usize = 128;

/// One message from a client.
#[derive(Clone, Debug, PartialEq)]
pub enum ClientIn {
    Hello {
        token: Option<String>,
    },
    /// The move, or why the strict reader refused it ([`strict_move`]).
    Move {
        mv: Result<Value, Reason>,
        reference: Option<Ref>,
    },
    Resign {
        reference: Option<Ref>,
    },
    Board,
    Subscribe {
        inbox: String,
        game: String,
    },
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

/// A message's fields, each as the JSON text it arrived as: the frame is scanned once and
/// only the fields its type uses are decoded, so a move costs its payload's value and its
/// `ref`'s text, not a value tree of the whole frame. (A field sent twice keeps its last
/// value, as in any JSON object read into a map.)
type Fields<'a> = BTreeMap<Text<'a>, &'a RawValue>;

/// A JSON string borrowed from the frame, or decoded when it has escapes. (serde's own
/// `Cow<str>` always copies unless it is a struct's field marked to borrow.)
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

impl std::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// The fields each message may carry besides `t`.
fn allowed(t: &str) -> Option<&'static [&'static str]> {
    Some(match t {
        "hello" => &["token"],
        "game.move" => &["move", "ref"],
        "game.resign" => &["ref"],
        "game.board" => &[],
        "game.subscribe" => &["inbox", "game"],
        _ => return None,
    })
}

/// Decodes one field's text as `T`, naming the message and the field when it is not one.
fn decode<'a, T: Deserialize<'a>>(t: &str, name: &str, raw: &'a RawValue) -> Result<T, BadMessage> {
    serde_json::from_str(raw.get()).map_err(|e| BadMessage::schema(format!("{t}: `{name}`: {e}")))
}

fn required<'a, T: Deserialize<'a>>(
    t: &str,
    fields: &Fields<'a>,
    name: &str,
) -> Result<T, BadMessage> {
    match fields.get(name) {
        Some(raw) => decode(t, name, raw),
        None => Err(BadMessage::schema(format!("{t}: missing field `{name}`"))),
    }
}

/// An inbox name or a game id: no room is made for a name no game can have.
fn name(t: &str, fields: &Fields<'_>, field: &str) -> Result<String, BadMessage> {
    let name: String = required(t, fields, field)?;
    if games::event::is_game_id(&name) {
        Ok(name)
    } else {
        Err(BadMessage::schema(format!(
            "{t}: `{field}` is 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter \
             or digit"
        )))
    }
}

fn optional<'a, T: Deserialize<'a>>(
    t: &str,
    fields: &Fields<'a>,
    name: &str,
) -> Result<Option<T>, BadMessage> {
    // `null` is as good as absent.
    fields
        .get(name)
        .map_or(Ok(None), |raw| decode::<Option<T>>(t, name, raw))
}

/// A move's value, read by the strict reader of events and HTTP bodies
/// ([`games::json`]), or the section-1 reason it fails that reader with: a move sent over
/// a socket is refused for what refuses it in a `POST …/moves` body (`duplicate_key`;
/// `bad_number` for a fraction, an exponent, `-0` or an integer past 2^53 − 1), instead
/// of being read as serde_json reads it (the last of two keys winning, `1.0` a float)
/// and judged. The session answers such a move `game.refused` with its `ref`, as any
/// move refused before a verdict. The frame's own fields are read leniently
/// (docs/decisions.md, WebSocket).
fn strict_move(t: &str, fields: &Fields<'_>) -> Result<Result<Value, Reason>, BadMessage> {
    let Some(raw) = fields.get("move") else {
        return Err(BadMessage::schema(format!("{t}: missing field `move`")));
    };
    Ok(games::json::parse_with_limit(raw.get().as_bytes(), usize::MAX).map_err(|r| r.reason))
}

/// The largest integer a JSON number carries exactly everywhere (2^53 − 1).
const MAX_SAFE: u64 = (1 << 53) - 1;

fn reference(fields: &Fields<'_>) -> Result<Option<Ref>, BadMessage> {
    let Some(raw) = fields.get("ref") else {
        return Ok(None);
    };
    let text = raw.get();
    let text = if text.starts_with('"') {
        // A string, kept as sent once it decodes (the scan alone lets a lone surrogate's
        // escape through).
        serde_json::from_str::<Text<'_>>(text)
            .map_err(|e| BadMessage::schema(format!("`ref`: {e}")))?;
        text.to_string()
    } else {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Null) => return Ok(None),
            // Within ±(2^53 − 1), as every number of section 1: a JavaScript box reads a
            // larger one back rounded, and could not match the answer to its move.
            Ok(Value::Number(n)) if n.as_i64().is_some_and(|i| i.unsigned_abs() <= MAX_SAFE) => {
                n.to_string()
            }
            Ok(Value::Number(n)) if n.is_i64() || n.is_u64() => return Err(BadMessage::schema(
                "`ref` as an integer is at most 2^53 - 1 either way; send a larger one as a string",
            )),
            _ => return Err(BadMessage::schema("`ref` must be a string or an integer")),
        }
    };
    if text.len() > MAX_REF_BYTES {
        return Err(BadMessage::schema(format!(
            "`ref` is over {MAX_REF_BYTES} bytes"
        )));
    }
    Ok(Some(Ref(text)))
}

impl ClientIn {
    /// Parses one text frame.
    pub fn parse(text: &str) -> Result<ClientIn, BadMessage> {
        let fields: Fields<'_> = serde_json::from_str(text).map_err(|e| match e.classify() {
            Category::Data => BadMessage::schema("a message is a JSON object"),
            _ => BadMessage {
                error: "bad_json",
                detail: e.to_string(),
            },
        })?;
        let Text(t) = match fields.get("t") {
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|_| BadMessage::schema("`t` must be a string"))?,
            None => return Err(BadMessage::schema("a message needs its type `t`")),
        };
        let Some(allowed) = allowed(&t) else {
            return Err(BadMessage {
                error: "unknown_message",
                detail: format!("no message `{t}`"),
            });
        };
        if let Some(name) = fields
            .keys()
            .map(|name| name.0.as_ref())
            .find(|name| *name != "t" && !allowed.contains(name))
        {
            return Err(BadMessage::schema(format!(
                "{t}: unknown field `{name}`, expected {}",
                match allowed {
                    [] => "none".to_string(),
                    names => names
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(" or "),
                }
            )));
        }
        Ok(match t.as_ref() {
            "hello" => ClientIn::Hello {
                token: optional(&t, &fields, "token")?,
            },
            "game.move" => ClientIn::Move {
                mv: strict_move(&t, &fields)?,
                reference: reference(&fields)?,
            },
            "game.resign" => ClientIn::Resign {
                reference: reference(&fields)?,
            },
            "game.board" => ClientIn::Board,
            // `game.subscribe`, the one type left that `allowed` knows.
            _ => ClientIn::Subscribe {
                inbox: name(&t, &fields, "inbox")?,
                game: name(&t, &fields, "game")?,
            },
        })
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
    fn a_move_is_read_as_strictly_as_an_http_body() {
        let mv = |text: &str| match ClientIn::parse(text) {
            Ok(ClientIn::Move { mv, .. }) => mv,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(
            mv(r#"{"t":"game.move","move":{"row":0,"row":2,"col":0}}"#),
            Err(Reason::DuplicateKey)
        );
        for number in ["1.0", "-0", "1e0", "9007199254740992"] {
            let text = format!(r#"{{"t":"game.move","move":{{"col":{number}}},"ref":"r"}}"#);
            assert_eq!(mv(&text), Err(Reason::BadNumber), "{number}");
        }
        assert_eq!(
            mv(r#"{"t":"game.move","move":{"col":9007199254740991}}"#),
            Ok(json!({"col": 9007199254740991u64}))
        );
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
                mv: Ok(json!({"row": 1, "col": 2})),
                reference: Some(Ref("\"m1\"".into()))
            }
        );
        assert_eq!(
            ok(r#"{"t":"game.move","move":{"choice":"rock"},"ref":7}"#),
            ClientIn::Move {
                mv: Ok(json!({"choice": "rock"})),
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
        assert_eq!(r.json(), r#""a\"b\u00e9""#);
        assert_eq!(
            serde_json::from_str::<String>(r.json()).expect("a JSON string"),
            "a\"bé"
        );
    }

    #[test]
    fn names_without_escapes_are_borrowed_from_the_frame() {
        let fields: Fields<'_> =
            serde_json::from_str(r#"{"t":"game.move","\u0074x":1}"#).expect("an object");
        let borrowed: Vec<(&str, bool)> = fields
            .keys()
            .map(|k| (k.0.as_ref(), matches!(k.0, Cow::Borrowed(_))))
            .collect();
        assert_eq!(borrowed, [("t", true), ("tx", false)]);
    }

    #[test]
    fn null_is_as_good_as_absent_except_for_a_move() {
        assert_eq!(
            ok(r#"{"t":"hello","token":null}"#),
            ClientIn::Hello { token: None }
        );
        assert_eq!(
            ok(r#"{"t":"game.resign","ref":null}"#),
            ClientIn::Resign { reference: None }
        );
        // A null move is the protocol's to refuse, as any other payload.
        assert_eq!(
            ok(r#"{"t":"game.move","move":null}"#),
            ClientIn::Move {
                mv: Ok(Value::Null),
                reference: None
            }
        );
    }

    #[test]
    fn fields_are_read_by_name_whatever_their_spelling_or_order() {
        assert_eq!(
            ok(r#"{"ref":-3, "move" : [1], "\u0074":"game.move"}"#),
            ClientIn::Move {
                mv: Ok(json!([1])),
                reference: Some(Ref("-3".into()))
            }
        );
        assert_eq!(
            ok(r#"{"t":"game.resign","ref":-9007199254740991}"#),
            ClientIn::Resign {
                reference: Some(Ref("-9007199254740991".into()))
            }
        );
        // A field sent twice keeps its last value.
        assert_eq!(
            ok(r#"{"t":"game.subscribe","inbox":"a","game":"g","inbox":"b"}"#),
            ClientIn::Subscribe {
                inbox: "b".into(),
                game: "g".into()
            }
        );
    }

    #[test]
    fn a_refusal_names_the_message_and_the_field() {
        let detail = |text: &str| ClientIn::parse(text).expect_err("refused").detail;
        assert_eq!(
            detail(r#"{"t":"game.move","move":1,"token":"x"}"#),
            "game.move: unknown field `token`, expected `move` or `ref`"
        );
        assert_eq!(
            detail(r#"{"t":"game.board","x":1}"#),
            "game.board: unknown field `x`, expected none"
        );
        assert_eq!(
            detail(r#"{"t":"game.move"}"#),
            "game.move: missing field `move`"
        );
        assert!(detail(r#"{"t":"hello","token":5}"#).starts_with("hello: `token`: "));
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
            (r#"{"t":"game.subscribe","inbox":"","game":"g"}"#, "schema"),
            (
                r#"{"t":"game.subscribe","inbox":"i","game":"-g"}"#,
                "schema",
            ),
            (
                r#"{"t":"game.subscribe","inbox":"i","game":"a/b"}"#,
                "schema",
            ),
            (&long_ref, "schema"),
            (r#"{"t":"game.resign","ref":"\ud800"}"#, "schema"),
            (r#"{"t":"game.resign","ref":true}"#, "schema"),
            (r#"{"t":"game.resign","ref":1e2}"#, "schema"),
            (r#"{"t":"game.resign","ref":9007199254740992}"#, "schema"),
            (r#"{"t":"game.resign","ref":-9007199254740992}"#, "schema"),
            (
                r#"{"t":"game.resign","ref":12345678901234567890}"#,
                "schema",
            ),
            (r#"{"t":"hello"} x"#, "bad_json"),
            (r#""hello""#, "schema"),
        ];
        for (text, code) in table {
            assert_eq!(refused(text), *code, "{text}");
        }
    }
}
