//! Canonical bytes of an event: RFC 8785 (JSON Canonicalization Scheme) of the event
//! without its `sig`, and the event hash, lowercase hex SHA-256 of those bytes.
//!
//! Two writers produce the same bytes. [`reference_bytes`] hands the event, as a JSON
//! value, to a maintained JCS implementation (tested below against RFC 8785's published
//! examples); it is the definition. [`canonical_bytes`] writes the typed [`Event`]'s
//! fields in their sorted order straight into a buffer, about ten times faster; a
//! property test (`fast_canonical_equals_reference` in `games/tests/chain_props.rs`)
//! proves it byte-for-byte equal to the reference on random events. The fast path only knows the JSON that section 1 lets in
//! (integers, no floats); should a writer ever hand it a float it falls back to the
//! reference rather than guess at ECMAScript number formatting.
//!
//! Nothing here checks that an event is valid: canonicalization is total.

use crate::crypto;
use crate::event::Event;
use crate::json::MAX_SAFE_INTEGER;
use serde_json::{Map, Value};

/// The canonical bytes of `event` (RFC 8785, `sig` left out), by the fast path.
pub fn canonical_bytes(event: &Event) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    write_event(event, false, &mut out);
    out
}

/// The event hash: lowercase hex SHA-256 of the canonical bytes.
pub fn hash_hex(event: &Event) -> String {
    crypto::sha256_hex(&canonical_bytes(event))
}

/// The canonical bytes by the reference JCS implementation.
pub fn reference_bytes(event: &Event) -> Vec<u8> {
    let mut value = event.to_value();
    if let Value::Object(m) = &mut value {
        m.remove("sig");
    }
    jcs(&value)
}

/// RFC 8785 of any JSON value, by the reference implementation.
pub fn jcs(value: &Value) -> Vec<u8> {
    // Serializing a serde_json::Value cannot fail: its keys are strings and its
    // numbers are finite by construction.
    serde_json_canonicalizer::to_vec(value).unwrap_or_default()
}

/// Appends the canonical form of `event` to `out`; with `include_sig`, the `sig` field
/// too (in its sorted place), which is the line a writer appends to a log.
pub fn write_event(event: &Event, include_sig: bool, out: &mut Vec<u8>) {
    let start = out.len();
    if !write_fast(event, include_sig, out) {
        out.truncate(start);
        let mut value = event.to_value();
        if let (false, Value::Object(m)) = (include_sig, &mut value) {
            m.remove("sig");
        }
        out.extend_from_slice(&jcs(&value));
    }
}

/// The fast path. Keys in the order RFC 8785 sorts them (all ASCII, so code-unit order is
/// byte order): action, game, move, player, prevHash, protocol, rules, seq, sig, status.
/// Returns false when it met a value it does not write: a float, or an integer beyond
/// ±(2^53 − 1), which RFC 8785 writes as the double nearest to it. Section 1 refuses both
/// in input; the fallback keeps a writer's typed event hashed as every reader would.
fn write_fast(e: &Event, include_sig: bool, out: &mut Vec<u8>) -> bool {
    out.extend_from_slice(b"{\"action\":\"");
    out.extend_from_slice(e.action.as_str().as_bytes());
    out.extend_from_slice(b"\",\"game\":");
    write_str(&e.game, out);
    if let Some(mv) = &e.mv {
        out.extend_from_slice(b",\"move\":");
        if !write_value(mv, out) {
            return false;
        }
    }
    out.extend_from_slice(b",\"player\":\"");
    out.extend_from_slice(e.player.as_str().as_bytes());
    out.extend_from_slice(b"\",\"prevHash\":");
    write_str(&e.prev_hash, out);
    if let Some(p) = &e.protocol {
        out.extend_from_slice(b",\"protocol\":");
        write_str(p, out);
    }
    if let Some(r) = &e.rules {
        out.extend_from_slice(b",\"rules\":");
        if !write_object(r, out) {
            return false;
        }
    }
    if e.seq > MAX_SAFE_INTEGER {
        return false;
    }
    out.extend_from_slice(b",\"seq\":");
    write_u64(e.seq, out);
    if let (true, Some(sig)) = (include_sig, &e.sig) {
        out.extend_from_slice(b",\"sig\":");
        write_str(sig, out);
    }
    if let Some(s) = e.status {
        out.extend_from_slice(b",\"status\":\"");
        out.extend_from_slice(s.as_str().as_bytes());
        out.push(b'"');
    }
    out.push(b'}');
    true
}

fn write_value(v: &Value, out: &mut Vec<u8>) -> bool {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64().filter(|u| *u <= MAX_SAFE_INTEGER) {
                write_u64(u, out);
            } else if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= MAX_SAFE_INTEGER) {
                out.push(b'-');
                write_u64(i.unsigned_abs(), out);
            } else {
                return false;
            }
        }
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_value(item, out) {
                    return false;
                }
            }
            out.push(b']');
        }
        Value::Object(m) => return write_object(m, out),
    }
    true
}

fn write_object(m: &Map<String, Value>, out: &mut Vec<u8>) -> bool {
    out.push(b'{');
    // serde_json's map iterates in code-point order, which is RFC 8785's UTF-16 code-unit
    // order except between U+E000..U+FFFF and supplementary characters; only keys outside
    // ASCII can tell them apart, so only then is it worth sorting again.
    let mut first = true;
    let mut entry = |k: &String, v: &Value, out: &mut Vec<u8>| {
        if !first {
            out.push(b',');
        }
        first = false;
        write_str(k, out);
        out.push(b':');
        write_value(v, out)
    };
    if m.keys().all(|k| k.is_ascii()) {
        for (k, v) in m {
            if !entry(k, v, out) {
                return false;
            }
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = m.iter().collect();
        entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        for (k, v) in entries {
            if !entry(k, v, out) {
                return false;
            }
        }
    }
    out.push(b'}');
    true
}

/// A JSON string as ECMAScript's `JSON.stringify` writes it: only `"`, `\` and control
/// characters below U+0020 escaped, the usual five by name, the rest as `\u00xx`.
fn write_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 15) as usize],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        out.extend_from_slice(escaped);
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// Writes `n` in decimal, as JSON writes an unsigned integer.
pub(crate) fn write_u64(mut n: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Action, Seat, Status};

    /// Integers past ±(2^53 − 1) are written as RFC 8785 writes them (the nearest double),
    /// by the reference: no input holds one, but a writer's typed event might.
    #[test]
    fn integers_past_the_safe_range_take_the_reference_path() {
        let big = MAX_SAFE_INTEGER + 2;
        let e = Event {
            game: "g".into(),
            seq: big,
            prev_hash: "0".repeat(64),
            player: Seat::O,
            action: Action::Move,
            mv: Some(serde_json::json!({"a": big, "b": -(big as i64)})),
            protocol: None,
            rules: None,
            status: None,
            sig: None,
        };
        let bytes = canonical_bytes(&e);
        assert_eq!(bytes, reference_bytes(&e));
        let text = String::from_utf8(bytes).expect("UTF-8");
        assert!(text.contains("\"seq\":9007199254740992"), "{text}");
    }

    /// RFC 8785 section 3.2.2's example, as published.
    #[test]
    fn rfc8785_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let want = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
        let value: Value = serde_json::from_str(input).unwrap();
        assert_eq!(String::from_utf8(jcs(&value)).unwrap(), want);
    }

    /// RFC 8785 section 3.2.3's sorting example: UTF-16 code-unit order.
    #[test]
    fn rfc8785_sorting() {
        let input = r#"{
          "\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let want = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        let value: Value = serde_json::from_str(input).unwrap();
        assert_eq!(String::from_utf8(jcs(&value)).unwrap(), want);
        // The fast path's object writer sorts the same way.
        let mut out = Vec::new();
        assert!(write_value(&value, &mut out));
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn fast_path_matches_reference_on_a_full_event() {
        let mut rules = Map::new();
        rules.insert("rows".into(), Value::from(3));
        rules.insert("keys".into(), serde_json::json!({"X": "ab", "O": "cd"}));
        let e = Event {
            game: "g-1".into(),
            seq: 0,
            prev_hash: String::new(),
            player: Seat::X,
            action: Action::Start,
            mv: Some(serde_json::json!({"row": -1, "é\u{1}": [null, true, "\u{7f}\u{2028}"]})),
            protocol: Some("pipehub:tic-tac-toe".into()),
            rules: Some(rules),
            status: Some(Status::InProgress),
            sig: Some("00".repeat(64)),
        };
        assert_eq!(canonical_bytes(&e), reference_bytes(&e));
        let line = e.to_json();
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e.to_value());
        assert_eq!(line.into_bytes(), jcs(&e.to_value()));
    }
}
