//! The meta store's keys as its map holds them: those naming a SHA-256 as its 32 bytes,
//! the rest as text, all ordered as their text is.

use std::cmp::Ordering as Order;

/// A key as the map holds it. `seat/` and `code/` keys name a SHA-256 in lowercase hex:
/// they are held as its 32 bytes inline instead of 69 bytes of text on the heap. Every
/// other key is held as its text. A key has one form (a hashed key is never held as text),
/// so equality is the form's; order is always the text's. Two hashed keys compare without
/// being spelled out: their prefixes are the same length, and lowercase hex sorts as the
/// bytes it spells do.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum Key {
    /// A place in [`HASHED`], and the hash.
    Hashed(u8, [u8; 32]),
    Text(Box<str>),
}

/// The prefixes of hashed keys, in order.
pub(super) const HASHED: [&str; 2] = ["code/", "seat/"];
/// The length of a hashed key's text: a prefix and 64 hex digits.
pub(super) const HASHED_LEN: usize = 5 + 64;

impl Key {
    pub(super) fn of(text: &str) -> Key {
        for (place, prefix) in HASHED.iter().enumerate() {
            if let Some(bytes) = text.strip_prefix(prefix).and_then(lower_hex) {
                return Key::Hashed(place as u8, bytes);
            }
        }
        Key::Text(text.into())
    }

    /// Its text, spelled out in `buf` when it is hashed.
    pub(super) fn text<'a>(&'a self, buf: &'a mut [u8; HASHED_LEN]) -> &'a [u8] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        match self {
            Key::Text(text) => text.as_bytes(),
            Key::Hashed(place, bytes) => {
                let prefix = HASHED[usize::from(*place) % HASHED.len()].as_bytes();
                buf[..prefix.len()].copy_from_slice(prefix);
                for (i, b) in bytes.iter().enumerate() {
                    buf[prefix.len() + 2 * i] = DIGITS[usize::from(b >> 4)];
                    buf[prefix.len() + 2 * i + 1] = DIGITS[usize::from(b & 15)];
                }
                &buf[..]
            }
        }
    }

    pub(super) fn to_text(&self) -> String {
        let mut buf = [0u8; HASHED_LEN];
        String::from_utf8_lossy(self.text(&mut buf)).into_owned()
    }

    pub(super) fn len(&self) -> usize {
        match self {
            Key::Text(text) => text.len(),
            Key::Hashed(..) => HASHED_LEN,
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> Order {
        match (self, other) {
            (Key::Hashed(p, a), Key::Hashed(q, b)) => (p, a).cmp(&(q, b)),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            (Key::Hashed(p, _), Key::Text(text)) => {
                hashed_against_text(*p, text).unwrap_or_else(|| self.spelled_cmp(other))
            }
            (Key::Text(text), Key::Hashed(p, _)) => hashed_against_text(*p, text)
                .map(Order::reverse)
                .unwrap_or_else(|| self.spelled_cmp(other)),
        }
    }
}

impl Key {
    /// The order of the two keys' texts, spelled out.
    fn spelled_cmp(&self, other: &Key) -> Order {
        let (mut a, mut b) = ([0u8; HASHED_LEN], [0u8; HASHED_LEN]);
        self.text(&mut a).cmp(other.text(&mut b))
    }
}

/// How a hashed key with prefix number `place` orders against a text key, when its prefix
/// alone says (`None`: the text starts with the prefix, and the digits must be spelled out).
/// A map of both kinds compares them at every step of a search that crosses from one to
/// the other, and the prefixes nearly always differ from the text key's start.
fn hashed_against_text(place: u8, text: &str) -> Option<Order> {
    let prefix = HASHED[usize::from(place) % HASHED.len()].as_bytes();
    let text = text.as_bytes();
    let shared = prefix.len().min(text.len());
    match prefix[..shared].cmp(&text[..shared]) {
        Order::Equal if text.len() < prefix.len() => Some(Order::Greater),
        Order::Equal => None,
        unequal => Some(unequal),
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Order> {
        Some(self.cmp(other))
    }
}

/// The 32 bytes that exactly 64 lowercase hex digits spell.
fn lower_hex(hex: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    games::crypto::from_lower_hex(hex, &mut bytes).then_some(bytes)
}
