//! Reading a segment back at open: its intact frames front to back, a chunk at a time,
//! and, where they end in the newest segment, whether what follows is the end of the
//! data, a write a crash cut short, or damage.
//!
//! A crash tears only what was written after the last fsync that completed, and the zeros
//! allocated ahead are where the data ends; anything else (a changed byte, a lost block,
//! damage that a later batch's mark records as synced, damage far from the data's end) may
//! have acknowledged frames after it. [`damage_at`] tells them apart, and
//! [`SegmentLog::open`](super::SegmentLog::open) cuts the first two and refuses the
//! third. The marks that end each batch are checked and stepped over here, and never
//! handed to the log's owner.
//!
//! What it deliberately does not do: change a file. Cutting, and what to tell the
//! operator, are the opener's.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::mark::{self, MARK, MARK_BYTES};
use super::{FramePos, Replayed, HEADER, MAX_PAYLOAD, TORN_MAX};
use crate::inbox::StoreError;

/// Why [`scan`] stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// A zero header (where the data ends), an impossible length, a bad checksum or a
    /// mark that names another place than its own.
    Damage,
    /// The next frame goes on past the buffer: this many more bytes, at least, are needed.
    More(usize),
}

/// Visits the intact frames of `data`, which lies at `base` in `segment`; returns where
/// in `data` the intact frames end and why they end there.
fn scan(
    data: &[u8],
    base: u64,
    segment: u32,
    replayed: &mut Replayed,
    visit: &mut impl FnMut(FramePos, &[u8]) -> Result<(), StoreError>,
) -> Result<(usize, Stop), StoreError> {
    let mut at = 0;
    loop {
        if at + HEADER > data.len() {
            return Ok((at, Stop::More(at + HEADER - data.len())));
        }
        let mut word = [0u8; 4];
        word.copy_from_slice(&data[at..at + 4]);
        let kind = u32::from_le_bytes(word);
        word.copy_from_slice(&data[at + 4..at + 8]);
        let crc = u32::from_le_bytes(word);
        let start = at + HEADER;
        let Some(len) = payload_len(kind) else {
            return Ok((at, Stop::Damage));
        };
        if start + len > data.len() {
            return Ok((at, Stop::More(start + len - data.len())));
        }
        let payload = &data[start..start + len];
        if crc32fast::hash(payload) != crc {
            return Ok((at, Stop::Damage));
        }
        if kind != MARK {
            visit(
                FramePos {
                    segment,
                    offset: base + start as u64,
                    len: len as u32,
                },
                payload,
            )?;
            replayed.frames += 1;
        } else if mark::synced(payload, base + at as u64).is_none() {
            // Intact, but not where it says it was written: a copy, or damage.
            return Ok((at, Stop::Damage));
        }
        replayed.bytes += (HEADER + len) as u64;
        at = start + len;
    }
}

/// The payload length that a frame header's length word gives: a frame's, or a batch's
/// mark's; `None` for a zero (no frame is empty: where the data ends) or a length no frame
/// has.
fn payload_len(word: u32) -> Option<usize> {
    match word {
        MARK => Some(MARK_BYTES - HEADER),
        0 => None,
        len if len as usize <= MAX_PAYLOAD => Some(len as usize),
        _ => None,
    }
}

/// How much of a segment open reads at a time: replaying a log needs this much memory
/// (or one frame, when a frame is longer), however long the segment has grown.
pub(super) const READ_CHUNK: usize = 1 << 20;

/// Visits the intact frames of one segment file front to back, reading `chunk` bytes at
/// a time; returns where the intact part ends and the file's length.
pub(super) fn replay(
    file: &File,
    segment: u32,
    chunk: usize,
    replayed: &mut Replayed,
    visit: &mut impl FnMut(FramePos, &[u8]) -> Result<(), StoreError>,
) -> Result<(u64, u64), StoreError> {
    let len = file.metadata()?.len();
    // `buf` holds the file's bytes from `base` on: what the last scan left of a frame,
    // then the next chunk.
    let mut buf = Vec::with_capacity(chunk);
    let mut base = 0u64;
    loop {
        let (at, stop) = scan(&buf, base, segment, replayed, visit)?;
        let end = base + buf.len() as u64;
        let need = match stop {
            Stop::More(need) if end < len => need,
            _ => return Ok((base + at as u64, len)),
        };
        buf.drain(..at);
        base += at as u64;
        let more = need.max(chunk).min((len - end) as usize);
        let filled = buf.len();
        buf.resize(filled + more, 0);
        file.read_exact_at(&mut buf[filled..], end)?;
    }
}

/// The unit a disk writes whole. A write that a crash cut short leaves some of its
/// sectors unwritten, and in space allocated ahead those read as zeros.
pub(super) const SECTOR: u64 = 512;

/// Why the frame at `good` in a newest segment of `len` bytes, where its intact frames end,
/// is damage rather than the end of the data or a write a crash cut short; `None` when it
/// is one of those. A crash tears only what was written after the last fsync that
/// completed, so damage that an intact mark after it records as synced is damage, whatever
/// it looks like (see `mark`); so is anything followed by more than [`TORN_MAX`] bytes of
/// data (what the writers can have written unsynced, and all that tells a log written
/// before marks). Within that, the end of the data is a zero length (no frame is empty;
/// the zeros allocated ahead), and a write cut short is a frame with a sector's share of it
/// all zeros (as etcd's write-ahead log tells a torn write from damage) or one that runs
/// past the end of the file with no intact frame after its start. Anything else — a
/// checksum that fails over fully written sectors, a length no frame has, a length that
/// skips over intact frames — is a changed byte, and the frames after it may have been
/// acknowledged.
pub(super) fn damage_at(
    file: &File,
    good: u64,
    len: u64,
) -> Result<Option<&'static str>, StoreError> {
    let header_end = good + HEADER as u64;
    if header_end > len {
        return Ok(None);
    }
    let mut header = [0u8; HEADER];
    file.read_exact_at(&mut header, good)?;
    let mut word = [0u8; 4];
    word.copy_from_slice(&header[..4]);
    let word = u32::from_le_bytes(word);
    let size = payload_len(word).map_or(u64::from(word), |n| n as u64);
    // A mark is written once the fsync it records has returned: what it records as synced
    // no crash can tear.
    if mark::synced_after(file, good, len)? > good {
        return Ok(Some(if size == 0 {
            "a stretch of zeros that a later batch's mark records as synced"
        } else {
            "a damaged frame that a later batch's mark records as synced"
        }));
    }
    // Whatever a crash tore lies within the last write it interrupted: data far beyond is
    // what was synced after, so this is damage.
    let data_end = last_nonzero(file, good, len, READ_CHUNK)?.map_or(good, |at| at + 1);
    if data_end - good > TORN_MAX {
        return Ok(Some(if size == 0 {
            "a stretch of zeros with data after it"
        } else {
            "a damaged frame with data after it"
        }));
    }
    if size == 0 {
        return Ok(None);
    }
    let past_the_end = size <= MAX_PAYLOAD as u64 && header_end + size > len;
    let (end, why) = if size > MAX_PAYLOAD as u64 {
        (header_end, "a frame length no frame has")
    } else if past_the_end {
        (len, "a frame length that runs past intact frames")
    } else {
        (header_end + size, "a frame whose checksum fails")
    };
    let mut buf = [0u8; SECTOR as usize];
    let mut at = good;
    while at < end {
        let stop = (at / SECTOR + 1) * SECTOR;
        let n = (stop.min(end) - at) as usize;
        file.read_exact_at(&mut buf[..n], at)?;
        if buf[..n].iter().all(|&b| b == 0) {
            return Ok(None);
        }
        at += n as u64;
    }
    if past_the_end && !intact_frame_after(file, good, len)? {
        // The file ends inside the frame, and only its own bytes follow: a torn write.
        return Ok(None);
    }
    Ok(Some(why))
}

/// Whether an intact frame (a plausible length and a matching checksum) starts within
/// [`READ_CHUNK`] bytes after `good`. A changed length field makes a frame seem to run
/// past the end of the file; the frame that was written after it is then found here. A
/// torn last frame has nothing after it but its own bytes, where a frame with a matching
/// checksum turns up by chance once in about four billion tries.
fn intact_frame_after(file: &File, good: u64, len: u64) -> Result<bool, StoreError> {
    let mut buf = vec![0u8; (len - good).min(READ_CHUNK as u64) as usize];
    file.read_exact_at(&mut buf, good)?;
    for at in 1..buf.len().saturating_sub(HEADER) {
        let mut word = [0u8; 4];
        word.copy_from_slice(&buf[at..at + 4]);
        let kind = u32::from_le_bytes(word);
        let start = at + HEADER;
        let Some(size) = payload_len(kind).filter(|&n| n <= buf.len() - start) else {
            continue;
        };
        word.copy_from_slice(&buf[at + 4..start]);
        let payload = &buf[start..start + size];
        if crc32fast::hash(payload) == u32::from_le_bytes(word)
            && (kind != MARK || mark::synced(payload, good + at as u64).is_some())
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Where the last byte that is not zero lies in `file` between `from` and `to`, reading
/// `chunk` bytes at a time.
pub(super) fn last_nonzero(
    file: &File,
    from: u64,
    to: u64,
    chunk: usize,
) -> Result<Option<u64>, StoreError> {
    let mut buf = vec![0u8; chunk.min((to - from) as usize)];
    let mut last = None;
    let mut at = from;
    while at < to {
        let n = buf.len().min((to - at) as usize);
        file.read_exact_at(&mut buf[..n], at)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            last = Some(at + i as u64);
        }
        at += n as u64;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::frame;
    use super::*;

    /// Replays `file` reading `chunk` bytes at a time: every frame visited (where and
    /// what), where the intact part ends, and the last byte after it that is not zero.
    type Replay = (Vec<(FramePos, Vec<u8>)>, u64, Option<u64>);

    fn replay_by(file: &File, chunk: usize) -> Replay {
        let mut seen = Vec::new();
        let mut replayed = Replayed::default();
        let (good, len) = replay(file, 3, chunk, &mut replayed, &mut |at, p| {
            seen.push((at, p.to_vec()));
            Ok(())
        })
        .expect("replay");
        assert_eq!(replayed.frames, seen.len() as u64);
        let last = last_nonzero(file, good, len, chunk).expect("read");
        (seen, good, last)
    }

    proptest::proptest! {
        /// A segment read a chunk at a time, whatever the chunk's size against its frames
        /// and marks, replays exactly as when read whole: the same frames at the same
        /// places, and the same end, whether the segment ends cleanly, in zeros allocated
        /// ahead, in a torn frame or in a damaged one.
        #[test]
        fn a_segment_read_by_chunks_replays_as_one_read_whole(
            lens in proptest::collection::vec(1usize..300, 0..40),
            tail in 0u8..5,
            chunk in 1usize..700,
        ) {
            let mut data = Vec::new();
            let mut marks = 0;
            for (i, len) in lens.iter().enumerate() {
                frame(&mut data, |out| out.extend((0..*len).map(|j| (i * 7 + j) as u8)));
                // Batches of up to three frames, each ending in its mark.
                if i % 3 == 2 {
                    let at = data.len() as u64;
                    mark::write(&mut data, at / 2, at);
                    marks += 1;
                }
            }
            match tail {
                1 => data.extend_from_slice(&[0u8; 333]),
                2 => {
                    let mut torn = Vec::new();
                    frame(&mut torn, |out| out.extend_from_slice(&[9u8; 50]));
                    data.extend_from_slice(&torn[..torn.len() - 20]);
                }
                3 => {
                    let mut bad = Vec::new();
                    frame(&mut bad, |out| out.extend_from_slice(&[5u8; 40]));
                    bad[HEADER + 3] ^= 1;
                    data.extend_from_slice(&bad);
                    data.extend_from_slice(&[0u8; 100]);
                }
                4 => data.extend_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes()),
                _ => {}
            }
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("segment");
            fs::write(&path, &data).expect("write");
            let file = File::open(&path).expect("open");
            let whole = replay_by(&file, data.len().max(1));
            proptest::prop_assert_eq!(whole.0.len(), lens.len());
            let framed: u64 = lens.iter().map(|l| (HEADER + l) as u64).sum::<u64>()
                + (marks * MARK_BYTES) as u64;
            proptest::prop_assert_eq!(whole.1, framed);
            proptest::prop_assert_eq!(whole.2.is_some(), tail >= 2);
            proptest::prop_assert_eq!(replay_by(&file, chunk), whole);
        }
    }
}
