//! Keys the embedded meta store keeps out of memory: the seats and the registrations
//! (`seat/…` and `game/…`), three of every game ever seated, which a running hub reads
//! only for games that finished (an open game's are cached by the seats module).
//!
//! Once enough of them have gathered in memory ([`super::COLD_KEYS`] unless the hub is
//! told otherwise), the store's writer moves them all to a *run*: the keys in order, each
//! with where its value lies in the log, written in blocks of about 4 KiB to an unlinked
//! cache file in the data directory. A run keeps in memory
//! only the first key of each block and a Bloom filter of its keys (a few bytes a key
//! instead of about ninety), so finding a key costs one `pread` for each run whose filter
//! admits it (about one in a thousand admits a key it does not hold). Runs are never
//! merged. A key deleted after it was spilled is remembered in memory as gone, and a key
//! written again lives in memory, so what memory holds always has the last word.
//!
//! Like the inbox's index cache, the file is never synced and has no recovery: it is
//! rebuilt from the log at every open and goes when the store closes. After a failed write
//! every key stays in memory; a failed read is an error the caller gets (a 503), never a
//! key reported missing.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::ops::Bound;
use std::os::unix::fs::FileExt;
use std::path::Path;

use fastbloom::BloomFilter;

use super::{Key, HASHED, HASHED_LEN};
use crate::inbox::log::{self, FramePos};
use crate::inbox::StoreError;

/// About what one `pread` of a run reads.
const BLOCK: usize = 4096;
/// The prefixes of the keys that go cold.
const FAMILIES: [&str; 2] = ["game/", "seat/"];
/// Bytes of a record besides its key's text: the text's length, and where the value lies.
const RECORD: usize = 2 + 4 + 8 + 4;

/// True for the keys that go cold (a record spells its key's length in two bytes).
pub(super) fn is_cold(key: &Key) -> bool {
    match key {
        Key::Hashed(place, _) => HASHED.get(usize::from(*place)) == Some(&"seat/"),
        Key::Text(text) => text.starts_with("game/") && text.len() <= usize::from(u16::MAX),
    }
}

/// True when a key starting with `prefix` may be a cold one.
fn may_be_cold(prefix: &str) -> bool {
    FAMILIES
        .iter()
        .any(|family| family.starts_with(prefix) || prefix.starts_with(family))
}

/// The runs, and the keys deleted since they were written.
pub(super) struct Cold {
    /// `None` when the file could not be made.
    file: Option<File>,
    /// Set after a failed write: no key goes cold from then on.
    failed: bool,
    end: u64,
    /// Oldest first.
    runs: Vec<Run>,
    /// Keys deleted while a run may still hold them: they shadow every run.
    gone: HashSet<Key>,
    /// How many keys the runs hold.
    keys: u64,
}

struct Run {
    /// The first key of each block, and where the block lies.
    blocks: Vec<(Key, u64, u32)>,
    bloom: BloomFilter,
}

/// A run written to the file and not yet listed.
pub(super) struct Written {
    run: Run,
    end: u64,
    keys: u64,
}

impl Cold {
    /// A fresh cache file in `dir`, unlinked at once. Without one, every key stays in
    /// memory (and the log says so).
    pub(super) fn create(dir: &Path) -> Cold {
        let file = log::unlinked(dir, "meta.cache")
            .inspect_err(
                |e| tracing::warn!(error = %e, "no meta cache file: every key stays in memory"),
            )
            .ok();
        Cold {
            file,
            failed: false,
            end: 0,
            runs: Vec::new(),
            gone: HashSet::new(),
            keys: 0,
        }
    }

    /// False when keys cannot go cold (no file, or a write failed).
    pub(super) fn spilling(&self) -> bool {
        self.file.is_some() && !self.failed
    }

    pub(super) fn keys(&self) -> u64 {
        self.keys
    }

    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Writes `keys` (in order, every one cold; `count` of them) after what the file holds,
    /// a megabyte at a time. Takes `&self`, so that readers go on meanwhile: only the
    /// store's writer spills.
    pub(super) fn write<'a>(
        &self,
        keys: impl Iterator<Item = (&'a Key, &'a FramePos)>,
        count: usize,
    ) -> Result<Written, StoreError> {
        const FLUSH: usize = 1 << 20;
        let Some(file) = &self.file else {
            return Err(StoreError::Unavailable("no meta cache file".into()));
        };
        let mut bloom = BloomFilter::with_false_pos(0.001).expected_items(count.max(1));
        let mut blocks: Vec<(Key, u64, u32)> = Vec::new();
        let mut buf = Vec::with_capacity(FLUSH + BLOCK);
        // Where `buf` goes in the file, and where its open block starts in it.
        let mut base = self.end;
        let mut block = 0;
        let mut text = [0u8; HASHED_LEN];
        let mut written = 0;
        for (key, at) in keys {
            written += 1;
            let spelled = key.text(&mut text);
            if blocks.is_empty() || buf.len() - block + RECORD + spelled.len() > BLOCK {
                if let Some(last) = blocks.last_mut() {
                    last.2 = (buf.len() - block) as u32;
                }
                if buf.len() >= FLUSH {
                    file.write_all_at(&buf, base)?;
                    base += buf.len() as u64;
                    buf.clear();
                }
                block = buf.len();
                blocks.push((key.clone(), base + block as u64, 0));
            }
            buf.extend_from_slice(&(spelled.len() as u16).to_le_bytes());
            buf.extend_from_slice(spelled);
            buf.extend_from_slice(&at.segment.to_le_bytes());
            buf.extend_from_slice(&at.offset.to_le_bytes());
            buf.extend_from_slice(&at.len.to_le_bytes());
            bloom.insert(key);
        }
        if let Some(last) = blocks.last_mut() {
            last.2 = (buf.len() - block) as u32;
        }
        file.write_all_at(&buf, base)?;
        Ok(Written {
            run: Run { blocks, bloom },
            end: base + buf.len() as u64,
            keys: written,
        })
    }

    /// Lists a run [`Cold::write`] wrote, or after its failure keeps every key in memory.
    pub(super) fn install(&mut self, written: Result<Written, StoreError>) -> bool {
        match written {
            Ok(written) => {
                self.end = written.end;
                self.keys += written.keys;
                self.runs.push(written.run);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the meta cache file: every key stays in memory from now on");
                self.failed = true;
                false
            }
        }
    }

    /// `key`, cold, was deleted: it must not be found in a run again.
    pub(super) fn forget(&mut self, key: &Key) {
        if self.runs.iter().any(|run| run.bloom.contains(key)) {
            self.gone.insert(key.clone());
        }
    }

    /// `key`, cold, was written again: memory has it now.
    pub(super) fn revive(&mut self, key: &Key) {
        if !self.gone.is_empty() {
            self.gone.remove(key);
        }
    }

    /// Where a cold key's value lies, newest run first.
    pub(super) fn get(&self, key: &Key) -> Result<Option<FramePos>, StoreError> {
        if self.gone.contains(key) {
            return Ok(None);
        }
        let mut text = [0u8; HASHED_LEN];
        let spelled = key.text(&mut text);
        for run in self.runs.iter().rev() {
            if !run.bloom.contains(key) {
                continue;
            }
            let i = run.blocks.partition_point(|(first, _, _)| first <= key);
            let Some((_, at, len)) = i.checked_sub(1).map(|i| &run.blocks[i]) else {
                continue;
            };
            let block = self.read(*at, *len)?;
            if let Some((_, pos)) = records(&block)?.into_iter().find(|(k, _)| *k == spelled) {
                return Ok(Some(pos));
            }
        }
        Ok(None)
    }

    /// The first `limit` cold keys from `from` on that start with `prefix`, in order, with
    /// where their values lie.
    pub(super) fn scan(
        &self,
        from: &Bound<Key>,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(Key, FramePos)>, StoreError> {
        if self.runs.is_empty() || !may_be_cold(prefix) {
            return Ok(Vec::new());
        }
        let past = |key: &Key| match from {
            Bound::Included(from) => key >= from,
            Bound::Excluded(from) => key > from,
            Bound::Unbounded => true,
        };
        // Each run's first `limit` keys: among them are the first `limit` of all runs.
        // Oldest first, so that a newer run's place for a key is the one kept.
        let mut found = BTreeMap::new();
        for run in &self.runs {
            let first = match from {
                Bound::Included(from) | Bound::Excluded(from) => run
                    .blocks
                    .partition_point(|(first, _, _)| first <= from)
                    .saturating_sub(1),
                Bound::Unbounded => 0,
            };
            let mut taken = 0;
            'blocks: for (_, at, len) in &run.blocks[first..] {
                let block = self.read(*at, *len)?;
                for (text, pos) in records(&block)? {
                    let text = std::str::from_utf8(text).map_err(|_| damaged())?;
                    let key = Key::of(text);
                    if !past(&key) || self.gone.contains(&key) {
                        continue;
                    }
                    if !text.starts_with(prefix) {
                        break 'blocks; // in order: every key after it is past the prefix
                    }
                    found.insert(key, pos);
                    taken += 1;
                    if taken == limit {
                        break 'blocks;
                    }
                }
            }
        }
        Ok(found.into_iter().take(limit).collect())
    }

    fn read(&self, at: u64, len: u32) -> Result<Vec<u8>, StoreError> {
        let Some(file) = &self.file else {
            return Err(StoreError::Unavailable("no meta cache file".into()));
        };
        let mut block = vec![0u8; len as usize];
        file.read_exact_at(&mut block, at)?;
        Ok(block)
    }
}

fn damaged() -> StoreError {
    StoreError::Corrupt("a meta cache block cannot be read".into())
}

/// The records of one block: each key's text, and where its value lies.
fn records(block: &[u8]) -> Result<Vec<(&[u8], FramePos)>, StoreError> {
    let mut out = Vec::with_capacity(64);
    let mut rest = block;
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<2>().ok_or_else(damaged)?;
        let len = usize::from(u16::from_le_bytes(*len));
        let text = tail.get(..len).ok_or_else(damaged)?;
        let tail = &tail[len..];
        let (segment, tail) = tail.split_first_chunk::<4>().ok_or_else(damaged)?;
        let (offset, tail) = tail.split_first_chunk::<8>().ok_or_else(damaged)?;
        let (size, tail) = tail.split_first_chunk::<4>().ok_or_else(damaged)?;
        out.push((
            text,
            FramePos {
                segment: u32::from_le_bytes(*segment),
                offset: u64::from_le_bytes(*offset),
                len: u32::from_le_bytes(*size),
            },
        ));
        rest = tail;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: u64) -> FramePos {
        FramePos {
            segment: (n % 3) as u32,
            offset: n * 101,
            len: (n % 500) as u32,
        }
    }

    /// A run of many blocks, written in several flushes: every key is found where it was
    /// put, keys it does not hold are not, and scans from any point list them in order.
    #[test]
    fn a_run_of_many_blocks_finds_every_key_and_scans_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cold = Cold::create(dir.path());
        let mut keys: Vec<(Key, FramePos)> = (0..30_000u64)
            .map(|n| {
                let mut hash = [0u8; 32];
                hash[..8].copy_from_slice(&(n * 2).to_be_bytes());
                (Key::Hashed(1, hash), at(n))
            })
            .chain((0..3_000u64).map(|n| {
                (
                    Key::of(&format!("game/box/{n:0>width$}", width = (n % 40) as usize)),
                    at(n),
                )
            }))
            .collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys.dedup_by(|a, b| a.0 == b.0);
        let written = cold.write(keys.iter().map(|(k, a)| (k, a)), keys.len());
        assert!(cold.install(written));
        let run = &cold.runs[0];
        assert!(run.blocks.len() > 600, "{} blocks", run.blocks.len());
        assert!(run.blocks.iter().all(|b| b.2 as usize <= BLOCK));
        assert!(cold.end > 2 << 20, "written in several flushes");
        for (key, place) in &keys {
            assert_eq!(cold.get(key).expect("get"), Some(*place), "{key:?}");
        }
        let mut missing = [0u8; 32];
        missing[..8].copy_from_slice(&7u64.to_be_bytes());
        assert_eq!(cold.get(&Key::Hashed(1, missing)).expect("get"), None);
        assert_eq!(cold.get(&Key::of("game/box/none")).expect("get"), None);
        // Scans: from the start of each family, and from a key in the middle, by pages.
        for prefix in ["seat/", "game/", ""] {
            let all: Vec<&(Key, FramePos)> = keys
                .iter()
                .filter(|(k, _)| k.to_text().starts_with(prefix))
                .collect();
            let from = Bound::Included(Key::of(prefix));
            let page = cold.scan(&from, prefix, 1_000).expect("scan");
            assert_eq!(page.len(), all.len().min(1_000));
            assert!(page.iter().zip(&all).all(|(a, b)| a.0 == b.0 && a.1 == b.1));
            let middle = &all[all.len() / 2].0;
            let rest = cold
                .scan(&Bound::Excluded(middle.clone()), prefix, 50)
                .expect("scan");
            let expected: Vec<_> = all[all.len() / 2 + 1..].iter().take(50).collect();
            assert_eq!(rest.len(), expected.len());
            assert!(rest.iter().zip(expected).all(|(a, b)| a.0 == b.0));
        }
        // Deleted: not found again, in a scan either.
        cold.forget(&keys[5].0);
        assert_eq!(cold.get(&keys[5].0).expect("get"), None);
        let scan = cold.scan(&Bound::Unbounded, "", 10).expect("scan");
        assert!(scan.iter().all(|(k, _)| *k != keys[5].0));
        assert!(cold
            .scan(&Bound::Unbounded, "code/", 10)
            .expect("scan")
            .is_empty());
    }
}
