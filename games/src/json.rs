//! Strict JSON for events: one raw input (a log line or an HTTP body) into a
//! [`serde_json::Value`], or the section-1 refusal that says why not.
//!
//! Every reader of a log must compute the same canonical bytes for the same input, so the
//! inputs on which JSON libraries quietly disagree are refused instead of "fixed":
//! duplicate keys (which one wins?), fractions, exponents, `-0` and integers beyond
//! ±(2^53−1) (which one reads as what?), lone surrogate escapes (not text at all), a
//! byte-order mark and invalid UTF-8. The refusals come in a fixed precedence (DESIGN.md
//! section 2, "precise points"): `too_large`, then `bad_json` (any syntax error anywhere,
//! nesting deeper than [`MAX_DEPTH`]), then `duplicate_key`, then `bad_number`.
//!
//! This is a small hand-written recursive-descent parser rather than serde_json's own,
//! because the precedence needs the *whole* input checked for syntax before a duplicate
//! key or a bad number may be reported: the parser records those two as flags and keeps
//! going, and only a syntax error stops it. serde_json would also have to be taught to
//! keep `-0` apart from `0`, to count depth our way (its limit is 128), and to refuse
//! duplicates, which costs as much code as this and is slower. Recursion is bounded by
//! [`MAX_DEPTH`], so no input can overflow the stack, and no byte sequence panics.
//!
//! It deliberately does not check what the JSON means (that is [`crate::event`]'s
//! `schema` step) and does not accept "JSON-ish" input (comments, trailing commas, NaN).

use crate::reason::{Reason, Refusal};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;

/// The default size limit of one input, in bytes, without its line ending.
pub const MAX_BYTES: usize = 4096;

/// The deepest nesting of objects and arrays accepted; the event object itself is level 1.
pub const MAX_DEPTH: usize = 32;

/// The largest integer magnitude every JSON reader represents exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Parses one input with the default size limit.
pub fn parse(raw: &[u8]) -> Result<Value, Refusal> {
    parse_with_limit(raw, MAX_BYTES)
}

/// Parses one input that must be at most `limit` bytes long.
pub fn parse_with_limit(raw: &[u8], limit: usize) -> Result<Value, Refusal> {
    if raw.len() > limit {
        return Err(Refusal::new(Reason::TooLarge));
    }
    let text = std::str::from_utf8(raw).map_err(|_| Refusal::new(Reason::BadJson))?;
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
        duplicate: false,
        bad_number: false,
    };
    let value = p.document().map_err(|()| Refusal::new(Reason::BadJson))?;
    if p.duplicate {
        Err(Refusal::new(Reason::DuplicateKey))
    } else if p.bad_number {
        Err(Refusal::new(Reason::BadNumber))
    } else {
        Ok(value)
    }
}

/// Parses one input that must be a JSON object; anything else is `bad_json`.
pub fn parse_object(raw: &[u8], limit: usize) -> Result<Map<String, Value>, Refusal> {
    // "Not an object" is bad_json, which outranks duplicate_key and bad_number, so a
    // syntactically valid non-object is bad_json whatever flags its contents raised.
    match parse_with_limit(raw, limit) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Refusal::new(Reason::BadJson)),
        Err(r) if r.reason > Reason::BadJson && !starts_with_object(raw) => {
            Err(Refusal::new(Reason::BadJson))
        }
        Err(r) => Err(r),
    }
}

/// The members of a top-level object in input order, keys borrowed from the input when
/// they hold no escapes. Events are read this way: a top-level map would cost a tree of
/// allocations only to be taken apart again at once.
pub type Members<'a> = Vec<(Cow<'a, str>, Value)>;

/// Parses one input that must be a JSON object into its [`Members`], with the same
/// refusals and precedence as [`parse_object`].
pub fn parse_members(raw: &[u8], limit: usize) -> Result<Members<'_>, Refusal> {
    if raw.len() > limit {
        return Err(Refusal::new(Reason::TooLarge));
    }
    let text = std::str::from_utf8(raw).map_err(|_| Refusal::new(Reason::BadJson))?;
    if !starts_with_object(raw) {
        return Err(Refusal::new(Reason::BadJson));
    }
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        pos: 0,
        duplicate: false,
        bad_number: false,
    };
    let members = p
        .members_document()
        .map_err(|()| Refusal::new(Reason::BadJson))?;
    if p.duplicate || has_duplicate(&members) {
        Err(Refusal::new(Reason::DuplicateKey))
    } else if p.bad_number {
        Err(Refusal::new(Reason::BadNumber))
    } else {
        Ok(members)
    }
}

fn has_duplicate(members: &Members<'_>) -> bool {
    if members.len() <= 16 {
        return members
            .iter()
            .enumerate()
            .any(|(i, (k, _))| members[..i].iter().any(|(seen, _)| seen == k));
    }
    let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2).any(|w| w[0] == w[1])
}

fn starts_with_object(raw: &[u8]) -> bool {
    raw.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|&b| b == b'{')
}

/// A syntax error; the input is `bad_json` whatever else is wrong with it.
type Syntax<T> = Result<T, ()>;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
    duplicate: bool,
    bad_number: bool,
}

impl<'a> Parser<'a> {
    fn members_document(&mut self) -> Syntax<Members<'a>> {
        self.ws();
        self.eat(b'{')?;
        let mut members = Vec::with_capacity(8);
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.ws();
                if self.peek() != Some(b'"') {
                    return Err(());
                }
                let key = self.key()?;
                self.ws();
                self.eat(b':')?;
                self.ws();
                members.push((key, self.value(1)?));
                self.ws();
                match self.peek() {
                    Some(b',') => self.pos += 1,
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(()),
                }
            }
        }
        self.ws();
        if self.pos == self.s.len() {
            Ok(members)
        } else {
            Err(())
        }
    }

    /// A string borrowed from the input when it holds no escapes.
    fn key(&mut self) -> Syntax<Cow<'a, str>> {
        let start = self.pos + 1;
        let mut i = start;
        while let Some(&b) = self.s.get(i) {
            if b == b'"' {
                let key = self.text.get(start..i).ok_or(())?;
                self.pos = i + 1;
                return Ok(Cow::Borrowed(key));
            }
            if b == b'\\' || b < 0x20 {
                break;
            }
            i += 1;
        }
        self.escaped_string().map(Cow::Owned)
    }

    fn document(&mut self) -> Syntax<Value> {
        self.ws();
        let v = self.value(0)?;
        self.ws();
        if self.pos == self.s.len() {
            Ok(v)
        } else {
            Err(())
        }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> Syntax<()> {
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(())
        }
    }

    fn value(&mut self, depth: usize) -> Syntax<Value> {
        match self.peek().ok_or(())? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(Value::String),
            b't' => self.literal(b"true", Value::Bool(true)),
            b'f' => self.literal(b"false", Value::Bool(false)),
            b'n' => self.literal(b"null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(()),
        }
    }

    fn literal(&mut self, word: &[u8], v: Value) -> Syntax<Value> {
        if self.s[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(v)
        } else {
            Err(())
        }
    }

    fn object(&mut self, depth: usize) -> Syntax<Value> {
        if depth > MAX_DEPTH {
            return Err(());
        }
        self.pos += 1;
        let mut map = Map::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(());
            }
            let key = self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            let v = self.value(depth)?;
            if map.insert(key, v).is_some() {
                self.duplicate = true;
            }
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(()),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Syntax<Value> {
        if depth > MAX_DEPTH {
            return Err(());
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(()),
            }
        }
    }

    /// Reads a number. A fraction, an exponent, `-0` or a magnitude beyond 2^53 − 1 is
    /// syntactically fine but flagged; the value then is a placeholder that nobody sees,
    /// since the input will be refused.
    fn number(&mut self) -> Syntax<Value> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut magnitude: u64 = 0;
        let mut too_big = false;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                while let Some(d @ b'0'..=b'9') = self.peek() {
                    self.pos += 1;
                    match magnitude
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(u64::from(d - b'0')))
                    {
                        Some(m) => magnitude = m,
                        None => too_big = true,
                    }
                }
            }
            _ => return Err(()),
        }
        let mut exact = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.digits()?;
            exact = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits()?;
            exact = false;
        }
        if !exact || too_big || magnitude > MAX_SAFE_INTEGER || (negative && magnitude == 0) {
            self.bad_number = true;
            return Ok(Value::Null);
        }
        Ok(if negative {
            // magnitude ≤ 2^53 − 1, so the negation fits in an i64.
            Value::Number(Number::from(-(magnitude as i64)))
        } else {
            Value::Number(Number::from(magnitude))
        })
    }

    fn digits(&mut self) -> Syntax<()> {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        if self.pos == start {
            Err(())
        } else {
            Ok(())
        }
    }

    fn string(&mut self) -> Syntax<String> {
        self.key().map(Cow::into_owned)
    }

    /// A string with escapes (or a syntax error) in it, decoded piece by piece.
    fn escaped_string(&mut self) -> Syntax<String> {
        self.pos += 1; // the opening quote
        let mut out = String::new();
        loop {
            let start = self.pos;
            while let Some(&b) = self.s.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // Both ends sit on ASCII bytes of valid UTF-8, so this slice is on char bounds.
            out.push_str(self.text.get(start..self.pos).ok_or(())?);
            match self.peek().ok_or(())? {
                b'"' => {
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                _ => return Err(()), // a raw control character
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Syntax<()> {
        let c = self.peek().ok_or(())?;
        self.pos += 1;
        let ch = match c {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                match hi {
                    0xD800..=0xDBFF => {
                        if !self.s[self.pos..].starts_with(b"\\u") {
                            return Err(()); // a lone high surrogate
                        }
                        self.pos += 2;
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return Err(());
                        }
                        let code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        char::from_u32(code).ok_or(())?
                    }
                    0xDC00..=0xDFFF => return Err(()), // a lone low surrogate
                    _ => char::from_u32(hi).ok_or(())?,
                }
            }
            _ => return Err(()),
        };
        out.push(ch);
        Ok(())
    }

    fn hex4(&mut self) -> Syntax<u32> {
        let digits = self.s.get(self.pos..self.pos + 4).ok_or(())?;
        let mut v = 0u32;
        for &d in digits {
            v = v * 16 + char::from(d).to_digit(16).ok_or(())?;
        }
        self.pos += 4;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(input: &str) -> Option<Reason> {
        parse(input.as_bytes()).err().map(|r| r.reason)
    }

    #[test]
    fn accepts_plain_json() {
        let v = parse(br#" {"a":[1,-2,true,null,"x\u00e9\ud83d\ude00"],"b":{}} "#).unwrap();
        assert_eq!(v["a"][4], Value::String("xé😀".into()));
        assert_eq!(v["a"][1], Value::from(-2));
    }

    #[test]
    fn refusals_and_their_precedence() {
        let cases: &[(&str, Option<Reason>)] = &[
            (r#"{"a":1}"#, None),
            (r#"{"a":9007199254740991,"b":-9007199254740991}"#, None),
            (r#"{"a":9007199254740992}"#, Some(Reason::BadNumber)),
            (r#"{"a":-9007199254740992}"#, Some(Reason::BadNumber)),
            (r#"{"a":99999999999999999999999}"#, Some(Reason::BadNumber)),
            (r#"{"a":1.0}"#, Some(Reason::BadNumber)),
            (r#"{"a":1e2}"#, Some(Reason::BadNumber)),
            (r#"{"a":-0}"#, Some(Reason::BadNumber)),
            (r#"{"a":0}"#, None),
            (r#"{"a":01}"#, Some(Reason::BadJson)),
            (r#"{"a":1,"a":2}"#, Some(Reason::DuplicateKey)),
            (r#"{"a":{"b":1,"b":1}}"#, Some(Reason::DuplicateKey)),
            (r#"{"a":1.5,"a":2}"#, Some(Reason::DuplicateKey)),
            (
                r#"{"a":1.5,"b":[{"c":1,"c":2}]}"#,
                Some(Reason::DuplicateKey),
            ),
            (r#"{"a":1,"a":2,"b":}"#, Some(Reason::BadJson)),
            (r#"{"a":1.5,"b":tru}"#, Some(Reason::BadJson)),
            (r#"{"a":"\ud800"}"#, Some(Reason::BadJson)),
            (r#"{"a":"\udc00"}"#, Some(Reason::BadJson)),
            (r#"{"a":"\ud800\u0041"}"#, Some(Reason::BadJson)),
            ("{\"a\":\"\u{1}\"}", Some(Reason::BadJson)),
            ("\u{feff}{}", Some(Reason::BadJson)),
            (r#"{"a":1,}"#, Some(Reason::BadJson)),
            (r#"{"a":1} x"#, Some(Reason::BadJson)),
            ("", Some(Reason::BadJson)),
        ];
        for (input, want) in cases {
            assert_eq!(reason(input), *want, "input {input}");
        }
    }

    #[test]
    fn invalid_utf8_is_bad_json() {
        assert_eq!(
            parse(b"{\"a\":\"\xff\"}").unwrap_err().reason,
            Reason::BadJson
        );
    }

    #[test]
    fn depth_limit() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(reason(&nest(32)), None);
        assert_eq!(reason(&nest(33)), Some(Reason::BadJson));
        assert_eq!(reason(&nest(2000)), Some(Reason::BadJson));
        let deep = nest(100_000);
        assert!(parse_with_limit(deep.as_bytes(), usize::MAX).is_err());
        let objs = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        assert_eq!(reason(&objs(32)), None);
        assert_eq!(reason(&objs(33)), Some(Reason::BadJson));
    }

    #[test]
    fn size_limit_is_a_parameter() {
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(4089));
        assert_eq!(big.len(), 4097);
        assert_eq!(reason(&big), Some(Reason::TooLarge));
        assert_eq!(reason(&big[..0]), Some(Reason::BadJson));
        assert!(parse_with_limit(big.as_bytes(), 5000).is_ok());
        let fits = format!("{{\"a\":\"{}\"}}", "x".repeat(4088));
        assert_eq!(reason(&fits), None);
    }

    #[test]
    fn objects_only() {
        for input in ["[1]", "1", "\"a\"", "null", "[1.5]", "[{\"a\":1,\"a\":1}]"] {
            let r = parse_object(input.as_bytes(), MAX_BYTES).unwrap_err();
            assert_eq!(r.reason, Reason::BadJson, "input {input}");
        }
        assert!(parse_object(b"{}", MAX_BYTES).is_ok());
    }

    #[test]
    fn members_refuse_like_objects() {
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let unique = format!("{{{}}}", many.join(","));
        let dup = format!("{{{},\"k7\":1}}", many.join(","));
        for input in [
            unique.as_str(),
            dup.as_str(),
            r#"{"a":1,"a":2}"#,
            r#"{"a\u0062":1,"ab":2}"#,
            r#" {"a":1.5} "#,
            r#"{"a":1,"a":1.5,"b":}"#,
            "[1]",
            "{}",
        ] {
            let want = parse_object(input.as_bytes(), MAX_BYTES).map(|m| m.len());
            let got = parse_members(input.as_bytes(), MAX_BYTES).map(|m| m.len());
            assert_eq!(got, want, "{input}");
        }
    }
}
