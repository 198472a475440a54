//! A batch's mark: the frame that ends every batch a log writes, and records how much of
//! its segment had been fsynced when the batch was written.
//!
//! Why it is there: a crash can damage only what was written after the last fsync that
//! completed, and nothing in the frames themselves says where that was. Without it, a
//! sector of zeros (a lost block) a few kilobytes into a small log looked exactly like a
//! batch torn by a crash, and was cut with every acknowledged record after it. A mark is
//! written only after the fsync it records has returned, so any intact mark after damage
//! that records the damaged byte as synced proves the damage is no torn write: the open
//! refuses it. Damage that no later mark vouches for lies in the last batches written,
//! where the frames' own look (zeros where a sector was never written) still decides.
//!
//! The format: a frame header whose length word is [`MARK`] (the top bit set: no payload
//! is that long, so a log written before marks holds none, and a binary from before marks
//! refuses a log holding one as damage, changing nothing), the payload's checksum, then
//! `synced: u64 LE`, the segment's bytes fsynced before the batch was written, and `at:
//! u64 LE`, the offset of the mark itself. A payload that holds a mark's bytes, by chance
//! or by design, is not taken for one unless it also names the very offset it lies at.
//!
//! What it deliberately does not do: vouch for the batch it ends (a batch is synced after
//! its mark is written, so only a later mark can say it was: a log closed in good order
//! ends with a mark alone for that, [`SegmentLog::close`](super::SegmentLog::close)), or
//! span segments: an older
//! segment was synced whole before the next one was made, and any damage in it is refused.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{HEADER, READ_CHUNK};
use crate::inbox::StoreError;

/// The length word of a mark's header.
pub(super) const MARK: u32 = (1 << 31) | PAYLOAD as u32;
/// Bytes of a mark's payload: `synced` and `at`.
const PAYLOAD: usize = 16;
/// Bytes a mark adds to each batch.
pub const MARK_BYTES: usize = HEADER + PAYLOAD;

/// Appends to `out` the mark of a batch whose mark lies at `at` in its segment, written
/// when the segment's first `synced` bytes had been fsynced.
pub(super) fn write(out: &mut Vec<u8>, synced: u64, at: u64) {
    let mut payload = [0u8; PAYLOAD];
    payload[..8].copy_from_slice(&synced.to_le_bytes());
    payload[8..].copy_from_slice(&at.to_le_bytes());
    out.extend_from_slice(&MARK.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// What the mark payload `payload`, found at `at`, records as synced; `None` when it does
/// not name `at` as its place, or records more than lies before it.
pub(super) fn synced(payload: &[u8], at: u64) -> Option<u64> {
    let word = |i: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(payload.get(i..i + 8)?);
        Some(u64::from_le_bytes(bytes))
    };
    let (synced, place) = (word(0)?, word(8)?);
    (payload.len() == PAYLOAD && place == at && synced <= at).then_some(synced)
}

/// Whether the bytes `bytes`, at `at` in their segment, start an intact mark; what it
/// records as synced if so.
fn intact(bytes: &[u8], at: u64) -> Option<u64> {
    let frame = bytes.get(..MARK_BYTES)?;
    let word = |i: usize| u32::from_le_bytes([frame[i], frame[i + 1], frame[i + 2], frame[i + 3]]);
    if word(0) != MARK || word(4) != crc32fast::hash(&frame[HEADER..]) {
        return None;
    }
    synced(&frame[HEADER..], at)
}

/// The most that any intact mark between `from` and `to` in `file` records as synced (0
/// when none does), reading [`READ_CHUNK`] bytes at a time. Marks are looked for at every
/// byte, not frame by frame: the frames after damage cannot be walked from it.
pub(super) fn synced_after(file: &File, from: u64, to: u64) -> Result<u64, StoreError> {
    let mut most = 0;
    let mut buf = vec![0u8; READ_CHUNK.min((to - from) as usize)];
    let mut at = from;
    while at + MARK_BYTES as u64 <= to {
        let n = buf.len().min((to - at) as usize);
        file.read_exact_at(&mut buf[..n], at)?;
        // Each chunk but the last gives back its last bytes, where a mark may begin that
        // the next chunk holds whole.
        let starts = if at + (n as u64) < to {
            n - MARK_BYTES + 1
        } else {
            n
        };
        for i in 0..starts {
            if let Some(synced) = intact(&buf[i..n], at + i as u64) {
                most = most.max(synced);
            }
        }
        at += starts as u64;
    }
    Ok(most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_found_at_its_own_place_only_and_across_chunks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("segment");
        let mut data = vec![7u8; READ_CHUNK - 10];
        write(&mut data, 100, (READ_CHUNK - 10) as u64);
        // The same mark's bytes somewhere else: a payload that holds them.
        let copy = data[READ_CHUNK - 10..].to_vec();
        data.extend_from_slice(&copy);
        data.extend_from_slice(&[0u8; 40]);
        std::fs::write(&path, &data).expect("write");
        let file = File::open(&path).expect("open");
        let len = data.len() as u64;
        assert_eq!(synced_after(&file, 0, len).expect("scan"), 100);
        assert_eq!(synced_after(&file, 50, len).expect("scan"), 100);
        let after = (READ_CHUNK - 9) as u64;
        assert_eq!(
            synced_after(&file, after, len).expect("scan"),
            0,
            "the copy"
        );
        assert_eq!(
            synced_after(&file, 0, after + 5).expect("scan"),
            0,
            "cut short"
        );
        // Recording more than lies before it, it is no mark.
        let mut bad = Vec::new();
        write(&mut bad, 30, 20);
        assert_eq!(intact(&bad, 20), None);
    }
}
