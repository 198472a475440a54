//! Where the index's old chunks go: a vector grown by fixed chunks ([`Chunked`]) whose
//! oldest chunks, past the newest [`HOT`], are written to an unlinked file ([`Spill`])
//! and read back, or changed in place, one record or one run of records at a time.
//!
//! It knows nothing of events, inboxes or games: an element is any [`Record`], a fixed
//! number of bytes (at most [`MAX_RECORD`]) it writes and reads itself. A chunk holding an
//! element that does not fit stays in memory, and so does every chunk after it.
//!
//! What it deliberately does not do: sync, recover or ever reopen the file. It is a cache
//! of what the log holds, made again at every open; a write that fails leaves every later
//! chunk in memory, and a read that fails is the caller's error, never a missing element.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Chunks of a spilling list kept in memory: the newest, which is being filled, and the one
/// before, where the last events of the games in progress mostly lie (each new event of a
/// game updates its previous one's link).
pub(super) const HOT: usize = 2;

/// Elements per chunk of a [`Chunked`] vector (small in tests, so that they cross many;
/// a shard's slots smaller still, so that the two sizes differ).
#[cfg(not(test))]
pub(super) const CHUNK: usize = 4096;
#[cfg(test)]
pub(super) const CHUNK: usize = 64;

/// The largest [`Record::SIZE`]: a record is read back into a buffer this long.
pub(super) const MAX_RECORD: usize = 160;

/// A fixed-size array from a slice of its length.
pub(super) fn word<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

/// A list element that can be written to the spill file: `SIZE` bytes, at most
/// [`MAX_RECORD`].
pub(super) trait Record: Clone {
    const SIZE: usize;
    fn put(&self, out: &mut Vec<u8>);
    /// From exactly `SIZE` bytes written by [`Record::put`].
    fn take(bytes: &[u8]) -> Self;
    /// False when this element does not fit in `SIZE` bytes: its chunk, and every chunk
    /// after it, then stays in memory.
    fn spillable(&self) -> bool {
        true
    }
}

/// Where old chunks of the index go (see the module documentation).
pub struct Spill {
    pub(super) file: File,
    end: u64,
    /// Set after a failed write: from then on every chunk stays in memory.
    failed: bool,
}

impl Spill {
    /// A fresh spill file in `dir`, unlinked at once: it goes when the store closes.
    pub fn create(dir: &Path) -> io::Result<Spill> {
        let file = crate::inbox::log::unlinked(dir, "index.cache")?;
        Ok(Spill {
            file,
            end: 0,
            failed: false,
        })
    }

    /// Writes `bytes` at the end of the file; where they lie.
    fn append(&mut self, bytes: &[u8]) -> io::Result<u64> {
        if self.failed {
            return Err(io::Error::other("the spill file failed before"));
        }
        let at = self.end;
        if let Err(e) = self.file.write_all_at(bytes, at) {
            self.failed = true;
            tracing::warn!(error = %e, "cannot write the index's spill file: old events stay in memory");
            return Err(e);
        }
        self.end += bytes.len() as u64;
        Ok(at)
    }

    fn read<T: Record>(&self, at: u64) -> io::Result<T> {
        let mut buf = [0u8; MAX_RECORD];
        let buf = &mut buf[..T::SIZE];
        self.file.read_exact_at(buf, at)?;
        Ok(T::take(buf))
    }

    /// `n` records written one after another from `at`, with one read.
    fn read_run<T: Record>(&self, at: u64, n: usize, out: &mut Vec<T>) -> io::Result<()> {
        let mut buf = vec![0u8; n * T::SIZE];
        self.file.read_exact_at(&mut buf, at)?;
        out.extend(buf.chunks_exact(T::SIZE).map(T::take));
        Ok(())
    }

    fn write<T: Record>(&self, at: u64, value: &T) -> io::Result<()> {
        let mut buf = Vec::with_capacity(T::SIZE);
        value.put(&mut buf);
        self.file.write_all_at(&buf, at)
    }
}

/// A vector grown by fixed chunks once it is past one: a push never copies what is
/// already there (the writer pushes under the index's lock, and doubling a vector of
/// millions of slots would stall every reader and the next append behind a copy of
/// hundreds of megabytes), and no doubling leaves up to half of it unused. The first
/// chunk grows as a `Vec` does, so a small list costs what a small `Vec` costs.
pub(super) struct Chunked<T, const N: usize = CHUNK> {
    pub(super) chunks: Vec<Vec<T>>,
    len: usize,
    /// Where the first chunks lie in the [`Spill`] file, when they were written there
    /// (their vectors are then empty).
    pub(super) spilled: Vec<u64>,
}

impl<T, const N: usize> Default for Chunked<T, N> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
            spilled: Vec::new(),
        }
    }
}

impl<T, const N: usize> Chunked<T, N> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(chunk) if chunk.len() < N => chunk.push(value),
            _ => {
                // The first chunk starts small; later ones are taken whole, at once.
                let capacity = if self.chunks.is_empty() { 4 } else { N };
                let mut chunk = Vec::with_capacity(capacity);
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    pub(super) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / N)?.get(i % N)
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.chunks.get_mut(i / N)?.get_mut(i % N)
    }
}

/// A list that may spill: read and changed by value, wherever the element lies.
impl<T: Record, const N: usize> Chunked<T, N> {
    /// Where element `i` lies in the spill file, if its chunk was written there.
    fn spilled_at(&self, i: usize) -> Option<u64> {
        let at = *self.spilled.get(i / N)?;
        Some(at + ((i % N) * T::SIZE) as u64)
    }

    /// Element `i`, or `None` when there is none; an error when its chunk was spilled
    /// and cannot be read back.
    pub(super) fn fetch(&self, i: usize, spill: Option<&Spill>) -> io::Result<Option<T>> {
        match (self.spilled_at(i), spill) {
            (Some(at), Some(spill)) if i < self.len => spill.read(at).map(Some),
            (Some(_), _) => Ok(None),
            (None, _) => Ok(self.get(i).cloned()),
        }
    }

    /// Elements `range` (cut at the list's end), with one read per spilled chunk it
    /// crosses rather than one per element.
    pub(super) fn fetch_run(
        &self,
        range: Range<usize>,
        spill: Option<&Spill>,
    ) -> io::Result<Vec<T>> {
        let end = range.end.min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(range.start));
        let mut i = range.start;
        while i < end {
            let (chunk, from) = (i / N, i % N);
            let n = (N - from).min(end - i);
            match (self.spilled.get(chunk), spill) {
                (Some(&at), Some(spill)) => {
                    spill.read_run(at + (from * T::SIZE) as u64, n, &mut out)?
                }
                (Some(_), None) => break,
                (None, _) => match self.chunks.get(chunk).and_then(|c| c.get(from..from + n)) {
                    Some(values) => out.extend_from_slice(values),
                    None => break,
                },
            }
            i += n;
        }
        Ok(out)
    }

    /// Changes element `i` in place; false when it does not exist. An error when its
    /// chunk was spilled and cannot be read or rewritten: the element is then unchanged
    /// or, if the write went partly through, unknown until the index is rebuilt.
    pub(super) fn update(
        &mut self,
        i: usize,
        spill: Option<&Spill>,
        change: impl FnOnce(&mut T),
    ) -> io::Result<bool> {
        match (self.spilled_at(i), spill) {
            (Some(at), Some(spill)) if i < self.len => {
                let mut value = spill.read::<T>(at)?;
                change(&mut value);
                spill.write(at, &value)?;
                Ok(true)
            }
            (Some(_), _) => Ok(false),
            (None, _) => Ok(self.get_mut(i).map(change).is_some()),
        }
    }

    /// Pushes, then writes the oldest chunks kept in memory to `spill` while more than
    /// [`HOT`] are.
    pub(super) fn push_spilling(&mut self, value: T, spill: Option<&mut Spill>) {
        self.push(value);
        let Some(spill) = spill else { return };
        while self.chunks.len() - self.spilled.len() > HOT {
            let c = self.spilled.len();
            if !self.chunks[c].iter().all(Record::spillable) {
                return;
            }
            let mut bytes = Vec::with_capacity(N * T::SIZE);
            for value in &self.chunks[c] {
                value.put(&mut bytes);
            }
            let Ok(at) = spill.append(&bytes) else { return };
            self.spilled.push(at);
            self.chunks[c] = Vec::new();
        }
    }
}
