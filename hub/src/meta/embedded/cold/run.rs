//! A cold run's file: its records, in key order, in blocks of about [`BLOCK`] bytes, and
//! what a [`Run`] keeps of it in memory (each block's first key, and a Bloom filter of
//! its keys).
//!
//! A record is its key's text, after its length in two bytes, then where the key's value
//! lies in the log ([`RECORD`] bytes besides the text). A [`RunWriter`] writes a run a
//! record at a time, [`FLUSH`] bytes to a `write`; [`Run::find`] reads the one block that
//! may hold a key, and a [`Cursor`] reads a run's records in order, some blocks at a time.
//!
//! What it deliberately does not do: decide which keys go cold, know which are gone or
//! written again since, or merge runs. A run never changes once written, and its file is
//! never synced: the whole cache is made again from the log at every open.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use fastbloom::BloomFilter;

use super::super::entry_bytes;
use super::super::key::{Key, HASHED_LEN};
use crate::inbox::log::FramePos;
use crate::inbox::StoreError;

/// About what one `pread` of a run reads.
pub(super) const BLOCK: usize = 4096;
/// What a run's writer gathers before a `write`, and a compaction reads at once.
pub(super) const FLUSH: usize = 1 << 20;
/// Bytes of a record besides its key's text: the text's length, and where the value lies.
const RECORD: usize = 2 + 4 + 8 + 4;

/// A sorted run in a file of its own. It never changes; compaction makes new ones.
pub(in crate::meta::embedded) struct Run {
    pub(super) file: File,
    pub(super) blocks: Blocks,
    pub(super) bloom: BloomFilter,
    pub(super) keys: u64,
    /// What its keys' entries take in the log: frames of keys and values.
    pub(super) bytes: u64,
}

/// Where a run's blocks lie (they follow each other from the file's start), with the first
/// key of each spelled out in one buffer. A key of its own each would be as many small
/// allocations that live as long as the run, scattered among the many short-lived ones of
/// a compaction, which then could not give their memory back.
#[derive(Default)]
pub(super) struct Blocks {
    firsts: Vec<u8>,
    /// Each block: where its first key's text ends in `firsts`, where the block lies, and
    /// its length.
    places: Vec<(usize, u64, u32)>,
}

impl Blocks {
    pub(super) fn len(&self) -> usize {
        self.places.len()
    }

    pub(super) fn first(&self, i: usize) -> &[u8] {
        let start = i.checked_sub(1).map_or(0, |before| self.places[before].0);
        &self.firsts[start..self.places[i].0]
    }

    /// Where block `i` lies, and its length.
    pub(super) fn place(&self, i: usize) -> (u64, usize) {
        let (_, at, len) = self.places[i];
        (at, len as usize)
    }

    fn push(&mut self, first: &[u8], at: u64) {
        self.firsts.extend_from_slice(first);
        self.places.push((self.firsts.len(), at, 0));
    }

    /// The block that would hold the key spelled `text`: the last whose first key is not
    /// past it.
    pub(super) fn find(&self, text: &[u8]) -> Option<usize> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.first(middle) <= text {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low.checked_sub(1)
    }
}

impl Run {
    fn read(&self, at: u64, len: usize) -> Result<Vec<u8>, StoreError> {
        let mut bytes = vec![0u8; len];
        self.file.read_exact_at(&mut bytes, at)?;
        Ok(bytes)
    }

    /// Where this run puts `key`, if it holds it.
    pub(super) fn find(&self, key: &Key) -> Result<Option<FramePos>, StoreError> {
        if !self.bloom.contains(key) {
            return Ok(None);
        }
        let mut text = [0u8; HASHED_LEN];
        let spelled = key.text(&mut text);
        let Some((at, len)) = self.blocks.find(spelled).map(|i| self.blocks.place(i)) else {
            return Ok(None);
        };
        let block = self.read(at, len)?;
        let found = records(&block)?.into_iter().find(|(k, _)| *k == spelled);
        Ok(found.map(|(_, at)| at))
    }
}

/// Writes a run a record at a time, in key order.
pub(super) struct RunWriter {
    file: File,
    buf: Vec<u8>,
    /// Where `buf` goes in the file, and where its open block starts in it.
    base: u64,
    block: usize,
    blocks: Blocks,
    bloom: BloomFilter,
    keys: u64,
    bytes: u64,
}

impl RunWriter {
    /// A writer of a run of about `expected` keys, in a fresh unlinked file in `dir`.
    pub(super) fn new(dir: &Path, expected: usize) -> Result<RunWriter, StoreError> {
        Ok(RunWriter {
            file: tempfile::tempfile_in(dir)?,
            buf: Vec::with_capacity(FLUSH + BLOCK),
            base: 0,
            block: 0,
            blocks: Blocks::default(),
            bloom: BloomFilter::with_false_pos(0.001).expected_items(expected.max(1)),
            keys: 0,
            bytes: 0,
        })
    }

    pub(super) fn push(&mut self, key: &Key, at: FramePos) -> Result<(), StoreError> {
        let mut text = [0u8; HASHED_LEN];
        let spelled = key.text(&mut text);
        let len = self.buf.len();
        if self.blocks.len() == 0 || len - self.block + RECORD + spelled.len() > BLOCK {
            if let Some(last) = self.blocks.places.last_mut() {
                last.2 = (len - self.block) as u32;
            }
            if len >= FLUSH {
                self.file.write_all_at(&self.buf, self.base)?;
                self.base += len as u64;
                self.buf.clear();
            }
            self.block = self.buf.len();
            self.blocks.push(spelled, self.base + self.block as u64);
        }
        self.buf
            .extend_from_slice(&(spelled.len() as u16).to_le_bytes());
        self.buf.extend_from_slice(spelled);
        self.buf.extend_from_slice(&at.segment.to_le_bytes());
        self.buf.extend_from_slice(&at.offset.to_le_bytes());
        self.buf.extend_from_slice(&at.len.to_le_bytes());
        self.bloom.insert(key);
        self.keys += 1;
        self.bytes += entry_bytes(spelled.len(), at);
        Ok(())
    }

    /// The run written; `None` when it holds no key.
    pub(super) fn finish(mut self) -> Result<Option<Run>, StoreError> {
        if self.keys == 0 {
            return Ok(None);
        }
        if let Some(last) = self.blocks.places.last_mut() {
            last.2 = (self.buf.len() - self.block) as u32;
        }
        self.file.write_all_at(&self.buf, self.base)?;
        Ok(Some(Run {
            file: self.file,
            blocks: self.blocks,
            bloom: self.bloom,
            keys: self.keys,
            bytes: self.bytes,
        }))
    }
}

/// A run's records in order, read some blocks at a time.
pub(super) struct Cursor<'a> {
    run: &'a Run,
    /// The next block to read.
    block: usize,
    /// About how many bytes of blocks to read at once.
    chunk: usize,
    read: std::vec::IntoIter<(Key, FramePos)>,
    pub(super) head: Option<(Key, FramePos)>,
}

impl<'a> Cursor<'a> {
    /// A cursor at block `block` of `run`, reading about `chunk` bytes at once.
    pub(super) fn at(run: &'a Run, block: usize, chunk: usize) -> Cursor<'a> {
        Cursor {
            run,
            block,
            chunk,
            read: Vec::new().into_iter(),
            head: None,
        }
    }

    /// The record at the cursor, reading on when it has none.
    pub(super) fn peek(&mut self) -> Result<Option<&(Key, FramePos)>, StoreError> {
        if self.head.is_none() {
            self.head = match self.read.next() {
                Some(record) => Some(record),
                None => self.refill()?,
            };
        }
        Ok(self.head.as_ref())
    }

    /// The record at the cursor, moving past it.
    pub(super) fn pop(&mut self) -> Result<Option<(Key, FramePos)>, StoreError> {
        self.peek()?;
        Ok(self.head.take())
    }

    fn refill(&mut self) -> Result<Option<(Key, FramePos)>, StoreError> {
        let blocks = &self.run.blocks;
        if self.block == blocks.len() {
            return Ok(None);
        }
        let (at, _) = blocks.place(self.block);
        let mut end = self.block;
        let mut len = 0usize;
        while end < blocks.len() {
            let (_, size) = blocks.place(end);
            if len > 0 && len + size > self.chunk {
                break;
            }
            len += size;
            end += 1;
        }
        let bytes = self.run.read(at, len)?;
        let mut read = Vec::new();
        let mut offset = 0;
        for i in self.block..end {
            let (_, size) = blocks.place(i);
            let block = bytes.get(offset..offset + size).ok_or_else(damaged)?;
            for (text, pos) in records(block)? {
                let text = std::str::from_utf8(text).map_err(|_| damaged())?;
                read.push((Key::of(text), pos));
            }
            offset += size;
        }
        self.block = end;
        self.read = read.into_iter();
        Ok(self.read.next())
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
