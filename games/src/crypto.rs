//! The cryptography of a log: SHA-256 hashes, Ed25519 signatures, and the HKDF
//! derivations by which a custodian (the hub, or the local agent) recreates a seat's key
//! or a rock-paper-scissors nonce instead of storing it.
//!
//! Verification is strict on purpose. Signatures are checked with `verify_strict`, which
//! refuses malleable (non-canonical) signatures, and a public key that decodes to a point
//! of small order is refused outright ([`public_key`]): with such a key, one signature can
//! verify for many messages, so a chain signed under it would prove nothing.
//!
//! HKDF-SHA-256 is used with no salt: the input secret is already uniformly random or a
//! high-entropy operator secret, and a salt would be one more value every hub node must
//! agree on. The info strings separate the derivations (`inbox|game|seat` for a seat key,
//! `inbox|game|seat|seq` for a nonce), so one never equals another.
//!
//! This module holds no secrets and does no I/O: callers pass the secret in.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use hkdf::Hkdf;
use sha2::{Digest, Sha256};

pub use ed25519_dalek::{SigningKey as SecretKey, VerifyingKey as PublicKey};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`. The `hex` crate's encoder goes char by char through an
/// iterator; on the verifier's hot path (one hash per event) a table is several times faster.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    // Only ASCII digits were written, so this is valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Decodes lowercase hex into `out`, filling it exactly: false (and `out` left
/// unspecified) unless `hex` is `2 × out.len()` characters of `0-9a-f`. The `hex` crate's
/// decoder goes char by char with a branch for each case and takes uppercase too, so a
/// caller wanting the one spelling went over the text twice; this checks as it decodes,
/// through the inverse of [`to_hex`]'s table. A store reads one hash per event back this
/// way as it opens.
pub fn from_lower_hex(hex: &str, out: &mut [u8]) -> bool {
    /// Each byte's value as a lowercase hex digit, or 0xff.
    const VALUES: [u8; 256] = {
        let mut values = [0xff; 256];
        let mut i = 0;
        while i < 16 {
            values[b"0123456789abcdef"[i] as usize] = i as u8;
            i += 1;
        }
        values
    };
    let hex = hex.as_bytes();
    if hex.len() != 2 * out.len() {
        return false;
    }
    // A digit's value fits in four bits; 0xff does not, and the or of all keeps it.
    let mut seen = 0u8;
    for (pair, byte) in hex.chunks_exact(2).zip(out.iter_mut()) {
        let (high, low) = (VALUES[usize::from(pair[0])], VALUES[usize::from(pair[1])]);
        seen |= high | low;
        *byte = high << 4 | low;
    }
    seen < 16
}

/// Decodes a public key from 64 lowercase hex characters, refusing keys that are not a
/// curve point or whose point has small order.
pub fn public_key(hex_key: &str) -> Option<VerifyingKey> {
    let mut bytes = [0u8; 32];
    if !from_lower_hex(hex_key, &mut bytes) {
        return None;
    }
    let key = VerifyingKey::from_bytes(&bytes).ok()?;
    (!key.is_weak()).then_some(key)
}

/// The public key as 64 lowercase hex characters.
pub fn public_key_hex(key: &VerifyingKey) -> String {
    to_hex(key.as_bytes())
}

/// Checks a signature given as 128 lowercase hex characters over `msg`, strictly.
pub fn verify(key: &VerifyingKey, msg: &[u8], sig_hex: &str) -> bool {
    let mut bytes = [0u8; 64];
    if hex::decode_to_slice(sig_hex, &mut bytes).is_err() {
        return false;
    }
    key.verify_strict(msg, &Signature::from_bytes(&bytes))
        .is_ok()
}

/// Signs `msg`; the signature as 128 lowercase hex characters.
pub fn sign(key: &SigningKey, msg: &[u8]) -> String {
    to_hex(&key.sign(msg).to_bytes())
}

/// A hub-held seat's signing key: HKDF-SHA-256 of the hub secret, info `inbox|game|seat`.
pub fn seat_key(secret: &[u8], inbox: &str, game: &str, seat: crate::Seat) -> SigningKey {
    let info = format!("{inbox}|{game}|{seat}");
    SigningKey::from_bytes(&hkdf32(secret, info.as_bytes()))
}

/// A rock-paper-scissors nonce: HKDF-SHA-256 of the custodian's secret, info
/// `inbox|game|seat|seq` where seq is that of the commit event, as 64 lowercase hex.
pub fn rps_nonce(secret: &[u8], inbox: &str, game: &str, seat: crate::Seat, seq: u64) -> String {
    let info = format!("{inbox}|{game}|{seat}|{seq}");
    to_hex(&hkdf32(secret, info.as_bytes()))
}

/// The commit to a rock-paper-scissors choice: SHA-256 of the text `choice:nonce`, with
/// the nonce as its hex text (not decoded).
pub fn rps_commit(choice: &str, nonce: &str) -> String {
    let mut h = Sha256::new();
    h.update(choice.as_bytes());
    h.update(b":");
    h.update(nonce.as_bytes());
    to_hex(&h.finalize())
}

/// 32 bytes derived by HKDF-SHA-256 from `secret` for `info`: the derivation of seat keys
/// and nonces above, and of the hub's other values that must be the same on every node
/// and unguessable without the secret.
pub fn hkdf32(secret: &[u8], info: &[u8]) -> [u8; 32] {
    let mut okm = [0u8; 32];
    // 32 bytes is far below HKDF-SHA-256's limit of 255 × 32, so expand cannot fail.
    let _ = Hkdf::<Sha256>::new(None, secret).expand(info, &mut okm);
    okm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Seat;

    #[test]
    fn hex_matches_the_hex_crate() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(to_hex(&bytes), hex::encode(&bytes));
    }

    #[test]
    fn lower_hex_decodes_what_to_hex_writes_and_nothing_else() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = vec![0u8; 256];
        assert!(from_lower_hex(&to_hex(&bytes), &mut out));
        assert_eq!(out, bytes);
        let mut out = [0u8; 2];
        for refused in ["ABCD", "abcD", "0xab", "abc", "abcde", "ab d", "ab\u{e9}"] {
            assert!(!from_lower_hex(refused, &mut out), "{refused:?}");
        }
        // Every byte value in every place: exactly the sixteen digits decode.
        for c in 0..=255u8 {
            for at in 0..4 {
                let mut text = *b"0a1b";
                text[at] = c;
                let Ok(text) = std::str::from_utf8(&text) else {
                    continue;
                };
                let digit = c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
                assert_eq!(from_lower_hex(text, &mut out), digit, "{text:?}");
            }
        }
    }

    #[test]
    fn sha256_of_abc() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn sign_and_verify() {
        let key = seat_key(b"0123456789abcdef", "default", "g1", Seat::X);
        let public = public_key(&public_key_hex(&key.verifying_key())).unwrap();
        let sig = sign(&key, b"hello");
        assert!(verify(&public, b"hello", &sig));
        assert!(!verify(&public, b"hellO", &sig));
        let other = seat_key(b"0123456789abcdef", "default", "g1", Seat::O);
        assert_ne!(public, other.verifying_key());
    }

    #[test]
    fn weak_and_malformed_keys_are_refused() {
        // The identity point (order 1) and a point of order 8 are small-order keys.
        let identity = format!("01{}", "00".repeat(31));
        assert!(public_key(&identity).is_none());
        let order8 = "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a";
        assert!(public_key(order8).is_none());
        assert!(public_key(&"AB".repeat(32)).is_none());
        assert!(public_key("00").is_none());
    }

    #[test]
    fn malleable_signature_is_refused() {
        let key = seat_key(b"secret secret secret", "i", "g", Seat::O);
        let sig = key.sign(b"m").to_bytes();
        // Adding the group order to s gives a signature that lax verification accepts.
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut forged = sig;
        let mut carry = 0u16;
        for i in 0..32 {
            let s = u16::from(forged[32 + i]) + u16::from(L[i]) + carry;
            forged[32 + i] = s as u8;
            carry = s >> 8;
        }
        assert!(!verify(&key.verifying_key(), b"m", &hex::encode(forged)));
        assert!(verify(&key.verifying_key(), b"m", &hex::encode(sig)));
    }

    #[test]
    fn derivations_are_stable_and_separated() {
        let n = rps_nonce(b"k", "inbox", "game", Seat::X, 1);
        assert_eq!(n.len(), 64);
        assert_eq!(n, rps_nonce(b"k", "inbox", "game", Seat::X, 1));
        assert_ne!(n, rps_nonce(b"k", "inbox", "game", Seat::X, 3));
        assert_ne!(n, rps_nonce(b"k", "inbox", "game", Seat::O, 1));
        assert_eq!(
            rps_commit("rock", "00"),
            sha256_hex(b"rock:00"),
            "the nonce is hashed as text"
        );
    }
}
