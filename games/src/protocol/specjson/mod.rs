//! The JSON of spec documents, read and written the way the Aigenora reference does.
//!
//! A protocol id is the SHA-256 of a spec's contract subset as Python's
//! `json.dumps(subset, sort_keys=True, ensure_ascii=False, separators=(",", ":"))` writes it,
//! after Python's `json.loads` read the file. Two things about numbers make `serde_json`
//! unfit for this: an integer of any size must come out exactly as written, and a float
//! must come out as Python's `repr` of the double it parsed to (`1E5` becomes `100000.0`).
//! `serde_json` only keeps a number's text with its `arbitrary_precision` feature, which
//! would change `Value` for every crate of the workspace through feature unification, so
//! this module carries its own small reader with a [`SpecValue`] that keeps integers as
//! their decimal text and floats as `f64`.
//!
//! The reader follows `json.loads`: a duplicate key keeps its last value; `-0` is the
//! integer 0; `NaN`, `Infinity` and `-Infinity` are accepted; a raw control character in a
//! string is refused; an escaped surrogate pair is one character. Where the reference
//! would crash rather than produce an id, this reader refuses with an error: a lone
//! surrogate escape (Python cannot encode it to UTF-8), an integer of more than 4300 digits
//! (Python 3.11's conversion limit), a byte-order mark. Nesting deeper than
//! [`MAX_DEPTH`] is refused to bound the stack; the reference's own limit is Python's
//! recursion limit (it hashes about 990 levels and fails beyond, the exact number depending
//! on its call stack), so only documents nested 900 to 990 deep get an id there and an
//! error here.
//!
//! This module does not decide what a spec means: see [`super::spec`].

mod write;

pub use write::{python_float_repr, write_value};

use std::collections::BTreeMap;

/// Deepest nesting of arrays and objects the reader accepts.
pub const MAX_DEPTH: usize = 900;

/// Python 3.11's limit on the digits of an integer converted from text.
const MAX_INT_DIGITS: usize = 4300;

/// A JSON value as Python's `json.loads` sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum SpecValue {
    Null,
    Bool(bool),
    /// An integer, as canonical decimal text (`-0` is `0`).
    Int(String),
    Float(f64),
    Str(String),
    Array(Vec<SpecValue>),
    /// Keys in code-point order, which is the byte order of UTF-8 and Python's `sort_keys`.
    Object(BTreeMap<String, SpecValue>),
}

impl SpecValue {
    /// Python's truthiness, used by the subset rule (`if flow.get("phases")`).
    pub fn is_truthy(&self) -> bool {
        match self {
            SpecValue::Null => false,
            SpecValue::Bool(b) => *b,
            SpecValue::Int(text) => text != "0",
            SpecValue::Float(f) => *f != 0.0,
            SpecValue::Str(s) => !s.is_empty(),
            SpecValue::Array(items) => !items.is_empty(),
            SpecValue::Object(map) => !map.is_empty(),
        }
    }

    pub fn as_object(&self) -> Option<&BTreeMap<String, SpecValue>> {
        match self {
            SpecValue::Object(map) => Some(map),
            _ => None,
        }
    }

    /// The compact, key-sorted text of the value (see [`write_value`]).
    pub fn dumps(&self) -> String {
        let mut out = String::new();
        write_value(self, &mut out);
        out
    }
}

/// Why a document could not be read; `offset` is a byte offset into the text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message} at byte {offset}")]
pub struct ReadError {
    pub message: &'static str,
    pub offset: usize,
}

/// Reads one JSON document (surrounding whitespace allowed) as `json.loads` would.
pub fn parse(text: &str) -> Result<SpecValue, ReadError> {
    if text.starts_with('\u{feff}') {
        return Err(ReadError {
            message: "unexpected byte-order mark",
            offset: 0,
        });
    }
    let mut reader = Reader {
        bytes: text.as_bytes(),
        text,
        pos: 0,
    };
    reader.skip_ws();
    let value = reader.value(0)?;
    reader.skip_ws();
    if reader.pos != reader.bytes.len() {
        return Err(reader.error("extra data after the document"));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Reader<'_> {
    fn error(&self, message: &'static str) -> ReadError {
        ReadError {
            message,
            offset: self.pos,
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> bool {
        if self.text[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<SpecValue, ReadError> {
        match self.bytes.get(self.pos) {
            None => Err(self.error("expected a value")),
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => self.string().map(SpecValue::Str),
            Some(b'-' | b'0'..=b'9') => {
                if self.eat("-Infinity") {
                    Ok(SpecValue::Float(f64::NEG_INFINITY))
                } else {
                    self.number()
                }
            }
            Some(_) => {
                for (literal, value) in [
                    ("null", SpecValue::Null),
                    ("true", SpecValue::Bool(true)),
                    ("false", SpecValue::Bool(false)),
                    ("NaN", SpecValue::Float(f64::NAN)),
                    ("Infinity", SpecValue::Float(f64::INFINITY)),
                ] {
                    if self.eat(literal) {
                        return Ok(value);
                    }
                }
                Err(self.error("expected a value"))
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<SpecValue, ReadError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.pos += 1;
        let mut map = BTreeMap::new();
        self.skip_ws();
        if self.eat("}") {
            return Ok(SpecValue::Object(map));
        }
        loop {
            if self.bytes.get(self.pos) != Some(&b'"') {
                return Err(self.error("expected a string key"));
            }
            let key = self.string()?;
            self.skip_ws();
            if !self.eat(":") {
                return Err(self.error("expected ':'"));
            }
            self.skip_ws();
            let value = self.value(depth)?;
            // Python's dict keeps the last value of a duplicate key.
            map.insert(key, value);
            self.skip_ws();
            if self.eat("}") {
                return Ok(SpecValue::Object(map));
            }
            if !self.eat(",") {
                return Err(self.error("expected ',' or '}'"));
            }
            self.skip_ws();
        }
    }

    fn array(&mut self, depth: usize) -> Result<SpecValue, ReadError> {
        if depth > MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_ws();
        if self.eat("]") {
            return Ok(SpecValue::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            if self.eat("]") {
                return Ok(SpecValue::Array(items));
            }
            if !self.eat(",") {
                return Err(self.error("expected ',' or ']'"));
            }
            self.skip_ws();
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Python's number grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`; with a
    /// fraction or an exponent it is a float, else an integer. A `.` or `e` that does not
    /// continue the number is left for the caller, which then refuses it as extra text.
    fn number(&mut self) -> Result<SpecValue, ReadError> {
        let start = self.pos;
        self.eat("-");
        let int_start = self.pos;
        if !self.eat("0") && self.digits() == 0 {
            return Err(self.error("expected a value"));
        }
        let int_end = self.pos;
        let mut is_float = false;
        if self.bytes.get(self.pos) == Some(&b'.')
            && self.bytes.get(self.pos + 1).is_some_and(u8::is_ascii_digit)
        {
            self.pos += 1;
            self.digits();
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.pos) {
            let mark = self.pos;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.pos) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                self.pos = mark;
            } else {
                is_float = true;
            }
        }
        let text = &self.text[start..self.pos];
        if is_float {
            // Rust's parser, like Python's float(), rounds correctly and overflows to ±inf.
            return text
                .parse::<f64>()
                .map(SpecValue::Float)
                .map_err(|_| self.error("bad number"));
        }
        let digits = &self.text[int_start..int_end];
        if digits.len() > MAX_INT_DIGITS {
            return Err(self.error("integer of more than 4300 digits"));
        }
        if digits == "0" {
            Ok(SpecValue::Int("0".to_string()))
        } else {
            Ok(SpecValue::Int(text.to_string()))
        }
    }

    fn string(&mut self) -> Result<String, ReadError> {
        self.pos += 1;
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while let Some(&b) = self.bytes.get(self.pos) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.text[run_start..self.pos]);
            match self.bytes.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.error("control character in a string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), ReadError> {
        let Some(&b) = self.bytes.get(self.pos) else {
            return Err(self.error("unterminated string"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => return self.unicode_escape(out),
            _ => return Err(self.error("invalid escape")),
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, ReadError> {
        let hex = self
            .text
            .get(self.pos..self.pos + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error("invalid \\u escape"))?;
        self.pos += 4;
        u32::from_str_radix(hex, 16).map_err(|_| self.error("invalid \\u escape"))
    }

    fn unicode_escape(&mut self, out: &mut String) -> Result<(), ReadError> {
        let first = self.hex4()?;
        let code = if (0xd800..0xdc00).contains(&first) {
            let mark = self.pos;
            if self.eat("\\u") {
                let second = self.hex4()?;
                if (0xdc00..0xe000).contains(&second) {
                    0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                } else {
                    self.pos = mark;
                    return Err(self.error("lone surrogate escape"));
                }
            } else {
                return Err(self.error("lone surrogate escape"));
            }
        } else {
            first
        };
        let c = char::from_u32(code).ok_or_else(|| self.error("lone surrogate escape"))?;
        out.push(c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: &str) {
        let value = parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(value.dumps(), expected, "input {input}");
    }

    #[test]
    fn strings_and_keys_follow_python() {
        check(r#"{"b":1,"a":2,"b":3}"#, r#"{"a":2,"b":3}"#);
        check(r#""\u00e9\u0001\n\"\\\/""#, "\"é\\u0001\\n\\\"\\\\/\"");
        check(r#""\ud83d\ude00""#, "\"😀\"");
        check(r#"{"é":1,"z":2,"😀":3}"#, r#"{"z":2,"é":1,"😀":3}"#);
        check(" [ 1 , true , null ] ", "[1,true,null]");
    }

    #[test]
    fn refuses_what_python_refuses_or_cannot_hash() {
        for bad in [
            "",
            "01",
            "1.",
            ".5",
            "[1,]",
            "{\"a\" 1}",
            "\"\u{1}\"",
            r#""\ud800""#,
            "\u{feff}{}",
            "{} x",
            "[",
            "tru",
            r#"{1:2}"#,
            r#""\x""#,
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse(&"9".repeat(4301)).is_err());
        assert!(parse(&"9".repeat(4300)).is_ok());
        assert!(parse(&"[".repeat(MAX_DEPTH + 1)).is_err());
        let deepest = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(parse(&deepest).map(|v| v.dumps()), Ok(deepest));
    }
}
