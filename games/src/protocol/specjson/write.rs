//! The writer half of [`super`]: Python's `json.dumps(value, sort_keys=True,
//! ensure_ascii=False, separators=(",", ":"))`, including its float text.
//!
//! Keys come out in code-point order because [`SpecValue::Object`] is a `BTreeMap` of
//! UTF-8 strings, whose byte order is code-point order. This module does not read JSON.

use super::SpecValue;
use std::fmt::Write as _;

/// Writes `value` as `json.dumps(value, sort_keys=True, ensure_ascii=False,
/// separators=(",", ":"))` does.
pub fn write_value(value: &SpecValue, out: &mut String) {
    match value {
        SpecValue::Null => out.push_str("null"),
        SpecValue::Bool(true) => out.push_str("true"),
        SpecValue::Bool(false) => out.push_str("false"),
        SpecValue::Int(text) => out.push_str(text),
        SpecValue::Float(f) => out.push_str(&python_float_repr(*f)),
        SpecValue::Str(s) => write_string(s, out),
        SpecValue::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        SpecValue::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_value(item, out);
            }
            out.push('}');
        }
    }
}

/// Only `"`, `\` and U+0000–U+001F are escaped; everything else is written raw.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)` (and `json.dumps`'s float text): the shortest digits that
/// round-trip, in positional notation when the decimal exponent is in -4..16, else as
/// `d.ddde±XX`; `NaN`, `Infinity` and `-Infinity` as `json.dumps` writes them.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    let sci = shortest_closest(f);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if exp >= 0 {
        let point = exp as usize + 1;
        if digits.len() <= point {
            out.push_str(&digits);
            out.push_str(&"0".repeat(point - digits.len()));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
    } else {
        out.push_str("0.");
        out.push_str(&"0".repeat((-exp - 1) as usize));
        out.push_str(&digits);
    }
    out
}

/// The shortest digits that round-trip and, among those, the closest to `f`, in Rust's
/// `{:e}` shape ("-1.2345e-7", "0e0"). Rust's `{:e}` finds the shortest length, but when
/// several strings of that length round-trip it does not always pick the closest, as
/// Python does (`-164193784243384.12`, not `…13`). Rounding `f` exactly to that many
/// digits gives the closest one; it is kept when it round-trips.
fn shortest_closest(f: f64) -> String {
    let shortest = format!("{f:e}");
    let digits = shortest
        .split('e')
        .next()
        .map_or(1, |m| m.bytes().filter(u8::is_ascii_digit).count());
    let closest = format!("{f:.*e}", digits.saturating_sub(1));
    if closest.parse::<f64>() == Ok(f) {
        closest
    } else {
        shortest
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    fn check(input: &str, expected: &str) {
        let value = parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(value.dumps(), expected, "input {input}");
    }

    #[test]
    fn numbers_follow_python() {
        check("1.0", "1.0");
        check("-0.0", "-0.0");
        check("-0", "0");
        check("1E5", "100000.0");
        check("0.000001", "1e-06");
        check("1e21", "1e+21");
        check("1e16", "1e+16");
        check("1e15", "1000000000000000.0");
        check("0.0001", "0.0001");
        check("123.456e-2", "1.23456");
        check("1.5e300", "1.5e+300");
        check("1e400", "Infinity");
        check("-1e400", "-Infinity");
        check("1e-400", "0.0");
        check("NaN", "NaN");
        check(
            "123456789012345678901234567890",
            "123456789012345678901234567890",
        );
        check("0.1", "0.1");
        check("5e-324", "5e-324");
        check("-164193784243384.12", "-164193784243384.12");
        check("5.88197768793114250000E+14", "588197768793114.2");
    }
}
