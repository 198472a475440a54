//! A segmented append-only log of checksummed frames: the on-disk layer of the embedded
//! inbox and of the embedded meta store.
//!
//! A frame is `len: u32 LE`, `crc32(payload): u32 LE`, then `len` bytes of payload. Frames
//! are appended to the newest segment file (`{stem}-{n:08}.log`) a batch at a time, and
//! each batch ends in a mark (`mark`): a frame of the log's own, never handed to its
//! owner, that records how much of the segment had been fsynced when the batch was
//! written. When a segment passes its size limit the next batch goes to a fresh segment.
//! Older segments are complete: the last batch written to one was fsynced before the next
//! segment was made.
//!
//! At open every segment is read front to back, a chunk at a time (a log's size does not
//! decide how much memory opening it takes). In the *newest* segment, a frame that the
//! file's end cuts short, or one with a sector's share of it all zeros, marks a torn tail —
//! a batch that was being written when the process died, never acknowledged — and the
//! segment is cut there, provided it lies where a crash can tear: after what every later
//! batch's mark records as synced, and within [`TORN_MAX`] of the end of the data. Any
//! other damage is a changed byte or a lost block, which no crash leaves: the frames after
//! it may be acknowledged ones, so open refuses it and says how to cut the file by hand,
//! as it refuses any damage in an older segment (`recovery` reads the frames and tells the
//! three apart).
//!
//! The newest segment is allocated ahead of its data by writing zeros (from
//! [`AHEAD_MIN`] bytes at a time, doubling up to [`AHEAD_MAX`]), so an append neither
//! changes the file's size nor lands in space the file system has yet to initialise: the
//! `fdatasync` after it then writes the data alone, not the inode, the block bitmaps or an
//! extent's conversion from unwritten to written (which `fallocate`d space needs on its
//! first write). A frame is never empty, so a zero header is where the data ends; the
//! zeros after it are cut silently at open (they are not a torn tail), when a segment is
//! closed, and when the log is dropped.
//!
//! What it deliberately does not do: interpret payloads, keep an index, compact, or decide
//! when to fsync. Its owner batches frames and calls [`SegmentLog::write_batch`] once per
//! batch, which writes them with one `write` and one `fdatasync`; under load a [`Pacer`]
//! tells the owner how long to let a batch gather first.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::StoreError;

mod mark;
mod pacing;
mod recovery;

pub use mark::MARK_BYTES;
pub use pacing::{Pacer, Pacing};
use recovery::{damage_at, last_nonzero, replay, READ_CHUNK};

/// Bytes of a frame header: length and checksum.
pub const HEADER: usize = 8;
/// No payload this store writes comes near this; a larger length field is damage.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// A writer of these logs stops adding to a batch once it holds this many bytes (or its
/// first request alone is longer).
pub const MAX_BATCH_BYTES: usize = 512 << 10;
/// The most a crash can leave written and not synced at the end of a segment: one batch,
/// the verdicts written without an fsync before it, and a compaction's chunk (each synced
/// before the next is written), with room to spare. Damage further from the data's end
/// than this is no torn write, whatever it looks like. (The batches' marks tell it closer
/// than this; in a log written before them, this is all that does.)
pub const TORN_MAX: u64 = 4 << 20;
/// The first stretch of zeros a segment is allocated ahead with: a store that holds
/// little (the tests open hundreds) writes little.
pub const AHEAD_MIN: u64 = 64 << 10;
/// The longest: each stretch is as long as the segment's allocation so far, up to this.
pub const AHEAD_MAX: u64 = 1 << 20;
/// What the zeros are written from (in `.bss`: reading it costs no memory).
static ZEROS: [u8; AHEAD_MIN as usize] = [0; AHEAD_MIN as usize];

/// Where one frame's payload sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramePos {
    pub segment: u32,
    /// Offset of the payload (after the header) in its segment.
    pub offset: u64,
    pub len: u32,
}

/// How many segments before the newest keep a read handle open. An older one is opened
/// again when it is read, so that a log's file descriptors stay bounded however long it
/// grows: a hub caps its sockets at what its open-files limit leaves (`crate::files`).
pub const OPEN_OLDER: usize = 16;

/// Read handles of the segments, shared with readers while the owner appends: the newest
/// always open, at most [`OPEN_OLDER`] of the others.
#[derive(Clone, Default)]
pub struct Segments(Arc<RwLock<Handles>>);

#[derive(Default)]
struct Handles {
    /// Per segment, oldest first: its path and, while open, its handle.
    slots: Vec<(PathBuf, Option<Arc<File>>)>,
    /// The segments before the newest that hold a handle, in the order they got it.
    older_open: std::collections::VecDeque<usize>,
}

impl Handles {
    /// Adds the newest segment; the one before it joins the older handles.
    fn push(&mut self, path: PathBuf, file: Arc<File>) {
        if !self.slots.is_empty() {
            self.older_open.push_back(self.slots.len() - 1);
            self.bound();
        }
        self.slots.push((path, Some(file)));
    }

    /// Closes the older handles held longest, past [`OPEN_OLDER`].
    fn bound(&mut self) {
        while self.older_open.len() > OPEN_OLDER {
            if let Some(i) = self.older_open.pop_front() {
                self.slots[i].1 = None;
            }
        }
    }

    fn clear(&mut self) {
        self.slots.clear();
        self.older_open.clear();
    }

    /// How many segments hold a handle here.
    fn open(&self) -> usize {
        self.slots.iter().filter(|(_, f)| f.is_some()).count()
    }
}

impl Segments {
    /// Reads one payload back. The caller got `pos` from this log, so a short read means
    /// the file changed under us. An older segment whose handle was closed is opened
    /// again (read-only), and may then close another's.
    pub fn read(&self, pos: FramePos) -> Result<Vec<u8>, StoreError> {
        let segment = pos.segment as usize;
        let found = self
            .0
            .read()
            .slots
            .get(segment)
            .map(|(path, file)| match file {
                Some(file) => Ok(file.clone()),
                None => Err(path.clone()),
            });
        let file = match found {
            None => return Err(StoreError::Corrupt(format!("no segment {}", pos.segment))),
            Some(Ok(file)) => file,
            Some(Err(path)) => {
                let opened = Arc::new(File::open(&path)?);
                let mut handles = self.0.write();
                match handles.slots.get_mut(segment) {
                    // Opened meanwhile by another reader.
                    Some((_, Some(file))) => file.clone(),
                    Some((_, slot)) => {
                        *slot = Some(opened.clone());
                        handles.older_open.push_back(segment);
                        handles.bound();
                        opened
                    }
                    None => return Err(StoreError::Corrupt(format!("no segment {}", pos.segment))),
                }
            }
        };
        let mut buf = vec![0u8; pos.len as usize];
        file.read_exact_at(&mut buf, pos.offset)?;
        Ok(buf)
    }

    /// How many segments hold a read handle (for tests and operators).
    pub fn open_handles(&self) -> usize {
        self.0.read().open()
    }
}

/// What open found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    pub frames: u64,
    pub bytes: u64,
    /// Bytes cut from the newest segment's torn tail.
    pub truncated: u64,
}

/// The writable log. Owned by one writer; readers use [`Segments`].
pub struct SegmentLog {
    dir: PathBuf,
    stem: &'static str,
    max_segment: u64,
    segments: Segments,
    /// File number of the first segment still on disk; `FramePos::segment` counts from it.
    first: u32,
    active: Arc<File>,
    active_index: u32,
    active_len: u64,
    /// The active segment's size on disk: `active_len` plus the zeros allocated ahead.
    allocated: u64,
    /// How much of the active segment an fsync that returned has made durable: what the
    /// next batch's mark records.
    synced: u64,
    /// How much of the active segment a mark written since the log was opened records as
    /// synced; where the log was opened, nothing since (what was there is not this
    /// process's to vouch for).
    vouched: u64,
    /// Whether a write or an fsync failed since the log was opened: its close then adds no
    /// mark, which would vouch for what the disk may not hold.
    failed: bool,
}

/// Appends one frame holding whatever `payload` writes into `out`.
pub fn frame(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER]);
    payload(out);
    let len = (out.len() - start - HEADER) as u32;
    // A zero header is where a preallocated segment's data ends.
    debug_assert!(len > 0, "a log frame is never empty");
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The frames of a batch buffer built with [`frame`], as (offset in buffer, payload length).
pub fn frames_in(buf: &[u8]) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + HEADER <= buf.len() {
        let mut len = [0u8; 4];
        len.copy_from_slice(&buf[at..at + 4]);
        let len = u32::from_le_bytes(len);
        out.push((at + HEADER, len));
        at += HEADER + len as usize;
    }
    out
}

/// Where each frame starts in a segment's bytes, up to the zeros allocated ahead, and
/// whether it is a batch's mark rather than a frame of the log's owner (for tests that
/// damage a log at a chosen frame).
#[cfg(test)]
pub(crate) fn frames_and_marks(data: &[u8]) -> Vec<(usize, bool)> {
    let mut frames = Vec::new();
    let mut at = 0;
    while let Some(word) = data.get(at..at + 4) {
        let word = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        if word == 0 {
            break;
        }
        frames.push((at, word == mark::MARK));
        at += HEADER + (word & !(1 << 31)) as usize;
    }
    frames
}

/// A segment's bytes as a crash just before its log's close would have left them: without
/// the mark alone that [`SegmentLog::close`] ends a log with (for tests that tear the last
/// batch, which a close vouches for).
#[cfg(test)]
pub(crate) fn unclosed(data: &mut Vec<u8>) {
    if let [.., (_, true), (last, true)] = frames_and_marks(data)[..] {
        data.truncate(last);
    }
}

/// Damages a segment's bytes early on, as no crash can: a zeroed 512-byte sector at
/// 1 KiB (`zeros`), or else the third frame of the log's owner with its length word
/// zeroed. Returns where the damaged frame starts (for the stores' damage tests).
#[cfg(test)]
pub(crate) fn damage_early(data: &mut [u8], zeros: bool) -> usize {
    let frames = frames_and_marks(data);
    if zeros {
        data[1024..1536].fill(0);
        frames
            .iter()
            .rev()
            .find(|(at, _)| *at <= 1024)
            .expect("a frame")
            .0
    } else {
        let third = frames.iter().filter(|(_, mark)| !mark).nth(2).expect("3").0;
        data[third..third + 4].fill(0);
        third
    }
}

/// The file of segment `index` of the log `stem` in `dir`.
pub fn segment_path(dir: &Path, stem: &str, index: u32) -> PathBuf {
    dir.join(format!("{stem}-{index:08}.log"))
}

/// Where a log records the number of its newest segment, each time it starts one. The
/// segments' names say which come before the newest found, but nothing in them says that
/// a newer one is missing: a deleted newest segment went unnoticed, and its acknowledged
/// events with it.
fn newest_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!("{stem}.newest"))
}

/// The newest segment's number as recorded, if a record was ever written.
fn recorded_newest(dir: &Path, stem: &str) -> Result<Option<u32>, StoreError> {
    let path = newest_path(dir, stem);
    match fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            StoreError::Corrupt(format!("{} does not hold a segment number", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Records `index` as the newest segment's number, durably, once its file is durable.
fn record_newest(dir: &Path, stem: &str, index: u32) -> Result<(), StoreError> {
    let path = newest_path(dir, stem);
    let tmp = path.with_extension("newest.tmp");
    fs::write(&tmp, format!("{index}\n"))?;
    File::open(&tmp)?.sync_all()?;
    fs::rename(&tmp, &path)?;
    sync_dir(dir)
}

/// Makes a newly created or removed directory entry durable.
pub fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)?.sync_all()?;
    Ok(())
}

/// A fresh file `name` in `dir`, unlinked at once: a cache that goes when the store closes
/// (or the process dies), and that nothing opens again.
pub fn unlinked(dir: &Path, name: &str) -> std::io::Result<File> {
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    fs::remove_file(&path)?;
    Ok(file)
}

fn open_segment(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

/// Why [`SegmentLog::reserve`] found no room.
#[derive(Debug, thiserror::Error)]
pub enum ReserveError {
    /// The next segment could not be opened (no file descriptor or inode left, say).
    /// Nothing was written and the log is as it was: a later reserve tries again.
    #[error("cannot start log segment {}: {source}", path.display())]
    NextSegment {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The full segment could not be synced or trimmed: what it holds is in doubt.
    #[error(transparent)]
    Failed(#[from] StoreError),
}

impl From<ReserveError> for StoreError {
    fn from(e: ReserveError) -> StoreError {
        match e {
            ReserveError::NextSegment { .. } => StoreError::Unavailable(e.to_string()),
            ReserveError::Failed(e) => e,
        }
    }
}

impl SegmentLog {
    /// Opens (or creates) the log `stem` in `dir` and hands every intact payload to
    /// `visit`, in order, with its position.
    pub fn open(
        dir: &Path,
        stem: &'static str,
        max_segment: u64,
        mut visit: impl FnMut(FramePos, &[u8]) -> Result<(), StoreError>,
    ) -> Result<(SegmentLog, Replayed), StoreError> {
        fs::create_dir_all(dir)?;
        let indexes = segment_indexes(dir, stem)?;
        if let Some(recorded) = recorded_newest(dir, stem)? {
            let found = indexes.last().copied();
            if found.is_none_or(|found| found < recorded) {
                return Err(StoreError::Corrupt(format!(
                    "{} is missing: {} records it as the log's newest segment. Restore it \
                     from a backup; or, to give up the events it held, delete {} and \
                     start again",
                    segment_path(dir, stem, recorded).display(),
                    newest_path(dir, stem).display(),
                    newest_path(dir, stem).display(),
                )));
            }
        }
        let mut handles = Handles::default();
        let mut replayed = Replayed::default();
        let mut active_len = 0;
        let first = indexes.first().copied().unwrap_or(0);
        for (i, &index) in indexes.iter().enumerate() {
            // A compaction removes old segments from the front, so what is left is always
            // a run of consecutive numbers; a gap means a segment went missing.
            if index != first + i as u32 {
                return Err(StoreError::Corrupt(format!(
                    "{} is missing: the log's segments on disk run from {first} to {} \
                     with a gap",
                    segment_path(dir, stem, first + i as u32).display(),
                    indexes.last().copied().unwrap_or(index),
                )));
            }
            let path = segment_path(dir, stem, index);
            let file = open_segment(&path)?;
            // A frame intact as a frame whose payload its owner cannot read is damage the
            // checksum did not catch: say where it lies.
            let mut visit = |at: FramePos, payload: &[u8]| {
                visit(at, payload).map_err(|e| match e {
                    StoreError::Corrupt(why) => StoreError::Corrupt(format!(
                        "{} at byte {}: {why}",
                        path.display(),
                        at.offset - HEADER as u64
                    )),
                    other => other,
                })
            };
            let (good, len) = replay(&file, i as u32, READ_CHUNK, &mut replayed, &mut visit)?;
            if good < len {
                if i + 1 != indexes.len() {
                    return Err(StoreError::Corrupt(format!(
                        "{} is damaged at byte {good} and is not the newest segment",
                        path.display()
                    )));
                }
                // Damage that no interrupted write leaves is not cut: the frames after
                // it may be acknowledged ones, and an operator decides what to give up.
                if let Some(why) = damage_at(&file, good, len)? {
                    return Err(StoreError::Corrupt(format!(
                        "{path} is damaged at byte {good} ({why}; no interrupted write \
                         leaves that, so the {after} bytes after it may hold acknowledged \
                         data). Nothing was changed. Restore the file from a backup, or give \
                         up everything from that byte on by cutting the file there \
                         (`truncate -s {good} {path}`) and starting again",
                        path = path.display(),
                        after = len - good,
                    )));
                }
                // Zeros alone are space allocated ahead (the process stopped without
                // cutting it), not a torn batch.
                let torn =
                    last_nonzero(&file, good, len, READ_CHUNK)?.map_or(0, |at| at + 1 - good);
                if torn > 0 {
                    tracing::warn!(segment = %path.display(), offset = good, bytes = torn, "cutting a torn tail");
                }
                file.set_len(good)?;
                file.sync_all()?;
                replayed.truncated = torn;
            }
            if i + 1 == indexes.len() && good == len && good > 0 {
                // The next batch's mark records all of it as synced, so it must be: a
                // process that died may have left its last writes in the page cache alone.
                file.sync_data()?;
            }
            active_len = good;
            handles.push(path, Arc::new(file));
        }
        if handles.slots.is_empty() {
            let path = segment_path(dir, stem, first);
            handles.push(path.clone(), Arc::new(open_segment(&path)?));
            sync_dir(dir)?;
        }
        let active_index = (handles.slots.len() - 1) as u32;
        let active = handles
            .slots
            .last()
            .and_then(|(_, file)| file.clone())
            .ok_or_else(|| StoreError::Corrupt(format!("{stem}: no open newest segment")))?;
        let log = SegmentLog {
            dir: dir.to_path_buf(),
            stem,
            max_segment,
            segments: Segments(Arc::new(RwLock::new(handles))),
            first,
            active,
            active_index,
            active_len,
            allocated: active_len,
            synced: active_len,
            vouched: active_len,
            failed: false,
        };
        Ok((log, replayed))
    }

    pub fn segments(&self) -> Segments {
        self.segments.clone()
    }

    /// Where the next batch of `len` bytes will go: (segment, offset). Starts a new
    /// segment first when the active one is full, so a batch (and its mark) never spans
    /// two segments.
    pub fn reserve(&mut self, len: usize) -> Result<(u32, u64), ReserveError> {
        let len = len + MARK_BYTES;
        if self.active_len > 0 && self.active_len + len as u64 > self.max_segment {
            // Frames written without an fsync (verdicts) must be on disk, and the zeros
            // allocated ahead cut, before a newer segment exists: damage in an older
            // segment is refused at open, not cut.
            self.cut_allocation()?;
            self.active.sync_all().map_err(StoreError::from)?;
            let index = self.active_index + 1;
            let path = segment_path(&self.dir, self.stem, self.first + index);
            // Nothing has changed yet but the full segment's trim, done again at no cost
            // by the next try.
            let file = match open_segment(&path) {
                Ok(file) => Arc::new(file),
                Err(source) => return Err(ReserveError::NextSegment { path, source }),
            };
            sync_dir(&self.dir)?;
            record_newest(&self.dir, self.stem, self.first + index)?;
            self.segments.0.write().push(path, file.clone());
            self.active = file;
            self.active_index = index;
            self.active_len = 0;
            self.allocated = 0;
            self.synced = 0;
            self.vouched = 0;
        }
        Ok((self.active_index, self.active_len))
    }

    /// Allocates the active segment ahead when `len` more bytes would pass its allocation:
    /// writes zeros up to past the end of those bytes, a stretch at least as long as the
    /// allocation so far (from [`AHEAD_MIN`] to [`AHEAD_MAX`]). They reach the disk with
    /// the next `fdatasync`, once; every later one within them writes data alone.
    fn allocate_for(&mut self, len: u64) -> Result<(), StoreError> {
        let end = self.active_len + len;
        if end <= self.allocated {
            return Ok(());
        }
        let step = self
            .allocated
            .clamp(AHEAD_MIN, AHEAD_MAX)
            .next_power_of_two()
            .min(AHEAD_MAX);
        let target = end.next_multiple_of(step);
        let mut at = self.allocated;
        while at < target {
            let n = (target - at).min(AHEAD_MIN) as usize;
            self.active.write_all_at(&ZEROS[..n], at)?;
            at += n as u64;
        }
        self.allocated = target;
        Ok(())
    }

    /// Gives back the zeros allocated past the data of the active segment.
    fn cut_allocation(&mut self) -> Result<(), StoreError> {
        if self.allocated > self.active_len {
            self.active.set_len(self.active_len)?;
            self.allocated = self.active_len;
        }
        Ok(())
    }

    /// Writes a batch at the reserved place, then fdatasyncs it when `sync` is set. The
    /// batch's mark (see `mark`) goes on the end of `buf` for the one write, and comes off
    /// again. On failure it tries to cut the partial batch so later frames do not follow
    /// garbage.
    pub fn write_batch(&mut self, buf: &mut Vec<u8>, sync: bool) -> Result<(), StoreError> {
        let at = self.active_len;
        let frames = buf.len();
        let recorded = self.synced;
        mark::write(buf, recorded, at + frames as u64);
        let written = self.write_at(buf, at, sync);
        buf.truncate(frames);
        if written.is_ok() {
            self.vouched = recorded;
        }
        written
    }

    /// Ends the log in good order. A batch's mark vouches only for what was synced before
    /// it, so the last batch written would have no mark after it saying that it was
    /// synced, and damage in it (a sector of zeros) would read at the next open as a write
    /// a crash cut short, and be cut with the acknowledged records it holds. So when this
    /// process wrote batches no mark vouches for, they are synced and a mark alone, which
    /// records them, is written and synced after them. Nothing is added to a log that
    /// failed a write or an fsync, that took no batch since it was opened, or whose last
    /// batch holds nothing but its mark (an explicit sync's: the inbox writes one as the
    /// hub stops, and it vouches for all before it).
    pub fn close(&mut self) -> Result<(), StoreError> {
        if self.failed || self.active_len <= self.vouched + MARK_BYTES as u64 {
            return Ok(());
        }
        self.sync()?;
        let mut closing = Vec::with_capacity(MARK_BYTES);
        mark::write(&mut closing, self.synced, self.active_len);
        let at = self.active_len;
        self.write_at(&closing, at, true)?;
        self.vouched = at;
        Ok(())
    }

    /// Writes `batch`, its mark included, at `at`; what the log has synced moves on only
    /// once an fsync has returned.
    fn write_at(&mut self, batch: &[u8], at: u64, sync: bool) -> Result<(), StoreError> {
        self.allocate_for(batch.len() as u64)?;
        let written = self.active.write_all_at(batch, at).and_then(|()| {
            if sync {
                self.active.sync_data()
            } else {
                Ok(())
            }
        });
        match written {
            Ok(()) => {
                self.active_len += batch.len() as u64;
                if sync {
                    self.synced = self.active_len;
                }
                Ok(())
            }
            Err(e) => {
                self.failed = true;
                let _ = self.active.set_len(at);
                self.allocated = at;
                Err(e.into())
            }
        }
    }

    /// Makes everything written so far durable.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if let Err(e) = self.active.sync_data() {
            self.failed = true;
            return Err(e.into());
        }
        self.synced = self.active_len;
        Ok(())
    }

    /// Removes every segment before the active one, oldest first, after a compaction
    /// wrote the whole state into the active segment and synced it. A crash halfway leaves
    /// a run of consecutive segments whose replay still ends in the compacted state.
    pub fn drop_older_segments(&mut self) -> Result<(), StoreError> {
        for index in 0..self.active_index {
            fs::remove_file(segment_path(&self.dir, self.stem, self.first + index))?;
        }
        sync_dir(&self.dir)?;
        self.first += self.active_index;
        self.active_index = 0;
        let mut handles = self.segments.0.write();
        handles.clear();
        handles.push(
            segment_path(&self.dir, self.stem, self.first),
            self.active.clone(),
        );
        Ok(())
    }

    /// Forces the next batch into a fresh segment.
    pub fn roll(&mut self) -> Result<(), StoreError> {
        if self.active_len > 0 {
            let max = self.max_segment;
            self.max_segment = 0;
            let rolled = self.reserve(1);
            self.max_segment = max;
            rolled?;
        }
        Ok(())
    }

    pub fn active_len(&self) -> u64 {
        self.active_len
    }
}

impl Drop for SegmentLog {
    /// A log closed in good order ends in a mark that vouches for its last batch
    /// ([`SegmentLog::close`]), and leaves each segment exactly as long as its frames.
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!(error = %e, "could not end a log with a mark of its last batch; the next open reads that batch as unvouched");
        }
        if let Err(e) = self.cut_allocation() {
            tracing::warn!(error = %e, "could not cut a log's space allocated ahead; the next open will");
        }
    }
}

/// The number of the oldest segment of the log `stem` on disk, if it has one.
pub fn oldest_segment(dir: &Path, stem: &str) -> Result<Option<u32>, StoreError> {
    Ok(segment_indexes(dir, stem)?.first().copied())
}

fn segment_indexes(dir: &Path, stem: &str) -> Result<Vec<u32>, StoreError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(stem).and_then(|r| r.strip_prefix('-')) else {
            continue;
        };
        if let Some(Ok(n)) = rest.strip_suffix(".log").map(str::parse::<u32>) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::recovery::SECTOR;
    use super::*;

    fn collect(dir: &Path, max: u64) -> (SegmentLog, Replayed, Vec<Vec<u8>>) {
        let mut seen = Vec::new();
        let (log, replayed) = SegmentLog::open(dir, "t", max, |_, p| {
            seen.push(p.to_vec());
            Ok(())
        })
        .expect("open");
        (log, replayed, seen)
    }

    fn batch(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for p in payloads {
            frame(&mut buf, |out| out.extend_from_slice(p));
        }
        buf
    }

    fn len_of(path: &Path) -> u64 {
        fs::metadata(path).expect("metadata").len()
    }

    #[test]
    fn space_allocated_ahead_is_cut_on_close_and_is_no_torn_tail_after_a_crash() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = segment_path(dir.path(), "t", 0);
        let (mut log, _, _) = collect(dir.path(), 1 << 30);
        let mut buf = batch(&[b"one", b"two"]);
        log.reserve(buf.len()).expect("reserve");
        log.write_batch(&mut buf, true).expect("write");
        assert_eq!(len_of(&path), AHEAD_MIN, "allocated ahead of the data");
        // Closed in good order: exactly the frames, the batch's mark and the mark alone
        // that vouches for the batch.
        drop(log);
        assert_eq!(len_of(&path), (buf.len() + 2 * MARK_BYTES) as u64);

        // A crash leaves the zeros; open cuts them without calling them torn.
        let (mut log, replayed, seen) = collect(dir.path(), 1 << 30);
        assert_eq!((replayed.frames, replayed.truncated), (2, 0));
        assert_eq!(seen, [b"one".to_vec(), b"two".to_vec()]);
        let mut more = batch(&[b"three"]);
        log.reserve(more.len()).expect("reserve");
        log.write_batch(&mut more, true).expect("write");
        std::mem::forget(log);
        assert_eq!(len_of(&path), AHEAD_MIN);
        let (log, replayed, seen) = collect(dir.path(), 1 << 30);
        assert_eq!((replayed.frames, replayed.truncated), (3, 0));
        assert_eq!(seen.len(), 3);
        assert_eq!(
            len_of(&path),
            (buf.len() + more.len() + 3 * MARK_BYTES) as u64
        );

        // A torn batch inside the allocated space is still a torn tail, however many
        // zeros follow it: the crash wrote the frame's first sector and not its second.
        let mut log = log;
        let torn = batch(&[&[4u8; 600]]);
        log.reserve(torn.len()).expect("reserve");
        log.allocate_for(torn.len() as u64).expect("allocate");
        let at = log.active_len();
        let written = (SECTOR - at) as usize;
        log.active.write_all_at(&torn[..written], at).expect("tear");
        std::mem::forget(log);
        let (_, replayed, seen) = collect(dir.path(), 1 << 30);
        assert_eq!(seen.len(), 3);
        assert_eq!(replayed.truncated, written as u64);
    }

    #[test]
    fn each_stretch_allocated_ahead_doubles_up_to_the_longest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = segment_path(dir.path(), "t", 0);
        let (mut log, _, _) = collect(dir.path(), 1 << 30);
        let big = vec![7u8; 40 << 10];
        let mut sizes = Vec::new();
        while log.active_len() < 3 * AHEAD_MAX {
            let mut buf = batch(&[&big]);
            log.reserve(buf.len()).expect("reserve");
            log.write_batch(&mut buf, false).expect("write");
            let len = len_of(&path);
            assert!(len >= log.active_len(), "the data is inside the allocation");
            if sizes.last() != Some(&len) {
                sizes.push(len);
            }
        }
        let k = AHEAD_MIN;
        assert_eq!(sizes[..5], [k, 2 * k, 4 * k, 8 * k, 16 * k]);
        let steps: Vec<u64> = sizes.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.iter().all(|&s| s <= AHEAD_MAX), "{steps:?}");
        assert_eq!(steps.last(), Some(&AHEAD_MAX));
        drop(log);
        let (_, replayed, _) = collect(dir.path(), 1 << 30);
        assert_eq!(replayed.truncated, 0);
    }

    #[test]
    fn a_closed_segment_holds_its_frames_and_no_allocated_space() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 64);
        let mut written = 0;
        for i in 0..6u8 {
            let mut buf = batch(&[&[i + 1; 30]]);
            log.reserve(buf.len()).expect("reserve");
            log.write_batch(&mut buf, false).expect("write");
            written += (buf.len() + MARK_BYTES) as u64;
        }
        std::mem::forget(log);
        // Every segment but the newest was closed by a roll: cut to its frames, so a
        // reopen does not take its end for damage.
        let closed: u64 = (0..5)
            .map(|i| len_of(&segment_path(dir.path(), "t", i)))
            .sum();
        assert_eq!(closed, written - 38 - MARK_BYTES as u64);
        let (_, replayed, seen) = collect(dir.path(), 64);
        assert_eq!((seen.len(), replayed.truncated), (6, 0));
    }

    /// A log of many segments keeps at most [`OPEN_OLDER`] of the older ones open, as it
    /// grows and after it reopens, and still reads every frame of every segment back.
    #[test]
    fn a_long_log_keeps_its_open_handles_bounded_and_reads_every_segment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 64);
        let mut written = Vec::new();
        for i in 0..(3 * OPEN_OLDER as u32) {
            let payload = i.to_le_bytes().repeat(10);
            let mut buf = batch(&[&payload]);
            let (segment, offset) = log.reserve(buf.len()).expect("reserve");
            let (at, len) = frames_in(&buf)[0];
            log.write_batch(&mut buf, true).expect("write");
            let pos = FramePos {
                segment,
                offset: offset + at as u64,
                len,
            };
            written.push((pos, payload));
            assert!(log.segments().open_handles() <= OPEN_OLDER + 1);
        }
        let segments = log.segments();
        assert!(
            segments.0.read().slots.len() > 2 * OPEN_OLDER,
            "64-byte segments rolled"
        );
        // Oldest first, newest first: every closed segment is opened again to be read.
        for (pos, payload) in written.iter().chain(written.iter().rev()) {
            assert_eq!(&segments.read(*pos).expect("read"), payload);
            assert!(segments.open_handles() <= OPEN_OLDER + 1);
        }
        drop(log);
        let (log, _, seen) = collect(dir.path(), 64);
        assert_eq!(seen.len(), written.len());
        assert_eq!(log.segments().open_handles(), OPEN_OLDER + 1);
        let (pos, payload) = &written[0];
        assert_eq!(&log.segments().read(*pos).expect("read"), payload);
        assert_eq!(log.segments().open_handles(), OPEN_OLDER + 1);
    }

    #[test]
    fn frames_survive_reopen_across_segments() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, seen) = collect(dir.path(), 64);
        assert!(seen.is_empty());
        for i in 0..10u8 {
            let mut buf = batch(&[&[i; 20], &[i + 100; 5]]);
            let (seg, off) = log.reserve(buf.len()).expect("reserve");
            let frames = frames_in(&buf);
            log.write_batch(&mut buf, true).expect("write");
            let read = log
                .segments()
                .read(FramePos {
                    segment: seg,
                    offset: off + frames[0].0 as u64,
                    len: frames[0].1,
                })
                .expect("read");
            assert_eq!(read, vec![i; 20]);
        }
        drop(log);
        let (log, replayed, seen) = collect(dir.path(), 64);
        assert_eq!(seen.len(), 20);
        assert_eq!(seen[19], vec![109; 5]);
        assert_eq!(replayed.truncated, 0);
        assert!(
            log.segments().0.read().slots.len() > 1,
            "64-byte segments must have rolled"
        );
    }

    #[test]
    fn torn_tail_is_cut_and_later_writes_follow_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 1 << 20);
        let mut buf = batch(&[b"one", b"two"]);
        log.reserve(buf.len()).expect("reserve");
        log.write_batch(&mut buf, true).expect("write");
        // A batch that died half-written, in a file not allocated ahead: a whole frame and
        // a partial one, and no mark.
        let torn = batch(&[b"three", b"four-four-four"]);
        let at = log.active_len();
        let written = &torn[..torn.len() - 3];
        log.active.write_all_at(written, at).expect("tear");
        log.active.set_len(at + written.len() as u64).expect("size");
        std::mem::forget(log);
        let (mut log, replayed, seen) = collect(dir.path(), 1 << 20);
        assert_eq!(
            seen,
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        assert_eq!(replayed.truncated, (HEADER + 14 - 3) as u64);
        let mut more = batch(&[b"five"]);
        log.write_batch(&mut more, true).expect("write");
        drop(log);
        let (_, replayed, seen) = collect(dir.path(), 1 << 20);
        assert_eq!(seen.last(), Some(&b"five".to_vec()));
        assert_eq!(replayed.truncated, 0);
    }

    #[test]
    fn a_changed_byte_in_the_newest_segment_is_refused_and_nothing_is_cut() {
        // It was cut as a torn tail, with every frame after it: a byte flipped in the
        // middle of a hub's current log silently lost the acknowledged events after it.
        // A payload byte in the middle, with two intact frames after it; a payload byte
        // of the last frame; a length byte that makes a frame run past the file's end.
        for (in_the_middle, length) in [(true, false), (false, false), (true, true)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut log, _, _) = collect(dir.path(), 1 << 20);
            let mut buf = batch(&[b"keep", b"flipped", b"after", b"and after"]);
            log.write_batch(&mut buf, true).expect("write");
            drop(log);
            let path = segment_path(dir.path(), "t", 0);
            let mut data = fs::read(&path).expect("read");
            let at = match (in_the_middle, length) {
                (true, false) => HEADER + 4 + HEADER + 2,
                (false, _) => data.len() - MARK_BYTES - 1,
                (true, true) => HEADER + 4 + 2,
            };
            data[at] ^= if length { 0x01 } else { 0xff };
            fs::write(&path, &data).expect("write");
            let opened = SegmentLog::open(dir.path(), "t", 1 << 20, |_, _| Ok(()));
            let Err(StoreError::Corrupt(why)) = opened else {
                panic!("damage at byte {at} was taken for a torn tail");
            };
            assert!(why.contains(&path.display().to_string()), "{why}");
            assert!(why.contains("truncate -s"), "{why}");
            assert_eq!(fs::read(&path).expect("read"), data, "the file was changed");
        }
    }

    #[test]
    fn zeros_or_damage_far_from_the_end_of_the_data_are_refused() {
        // A zeroed block 10 MB into a 21 MB log passed for a torn write and was cut with
        // everything after it: a crash tears only its last write.
        for zeros in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut log, _, _) = collect(dir.path(), 1 << 30);
            let frames: Vec<Vec<u8>> = (0..1200).map(|i| vec![(i % 250 + 1) as u8; 4000]).collect();
            let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            log.write_batch(&mut batch(&refs), true).expect("write");
            drop(log);
            let path = segment_path(dir.path(), "t", 0);
            let mut data = fs::read(&path).expect("read");
            // As a crash before the close would leave it: no mark vouches for the batch.
            unclosed(&mut data);
            let at = 100 * (HEADER + 4000) + 1024;
            if zeros {
                data[at..at + 512].fill(0);
            } else {
                data[at] ^= 0x01;
                data[at + 1000] = 0;
            }
            fs::write(&path, &data).expect("write");
            let opened = SegmentLog::open(dir.path(), "t", 1 << 30, |_, _| Ok(()));
            let Err(StoreError::Corrupt(why)) = opened else {
                panic!(
                    "damage {} MB before the end was cut",
                    (data.len() - at) >> 20
                );
            };
            assert!(why.contains("with data after it"), "{why}");
            assert_eq!(fs::read(&path).expect("read"), data, "the file was changed");
        }
    }

    #[test]
    fn a_frame_with_an_unwritten_sector_is_a_torn_tail_wherever_its_checksum_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 1 << 30);
        let mut buf = batch(&[b"keep", &[3u8; 1500]]);
        log.write_batch(&mut buf, true).expect("write");
        drop(log);
        // The crash, before the close, wrote the second frame's first and third sectors,
        // not its second.
        let path = segment_path(dir.path(), "t", 0);
        let mut data = fs::read(&path).expect("read");
        let closed = data.clone();
        unclosed(&mut data);
        data[512..1024].fill(0);
        fs::write(&path, &data).expect("write");
        let (_, replayed, seen) = collect(dir.path(), 1 << 20);
        assert_eq!(seen, vec![b"keep".to_vec()]);
        // Up to the last byte not zero: the frame and its batch's mark.
        let data_end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        assert_eq!(replayed.truncated, (data_end - HEADER - 4) as u64);
        assert!(data_end > HEADER + 4 + HEADER + 1500);
        assert_eq!(len_of(&path), (HEADER + 4) as u64);

        // The same sector zeroed in a log closed in good order is damage: the close's mark
        // records the batch as synced, so no crash can have torn it.
        let mut data = closed;
        data[512..1024].fill(0);
        fs::write(&path, &data).expect("write");
        let why = refused(dir.path(), "a zeroed sector of a batch a close vouched for");
        assert!(why.contains("records as synced"), "{why}");
    }

    /// What opening the log `t` in `dir` refuses with, or a panic naming `what` when it
    /// opens: the file must be as it was.
    fn refused(dir: &Path, what: &str) -> String {
        let path = segment_path(dir, "t", 0);
        let before = fs::read(&path).expect("read");
        let opened = SegmentLog::open(dir, "t", 1 << 30, |_, _| Ok(()));
        let Err(StoreError::Corrupt(why)) = opened else {
            panic!("{what} was taken for a torn tail and cut");
        };
        assert!(why.contains(&path.display().to_string()), "{why}");
        assert_eq!(
            fs::read(&path).expect("read"),
            before,
            "the file was changed"
        );
        why
    }

    #[test]
    fn damage_that_a_later_mark_records_as_synced_is_refused_in_a_small_log() {
        // A log smaller than `TORN_MAX` lay wholly where damage could pass for a torn
        // write: a zero length word (one bit flipped in a 64-byte frame's) or a zeroed
        // sector near its start was cut with every acknowledged batch after it.
        let each = HEADER + 64 + MARK_BYTES;
        for zeros in [false, true] {
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut log, _, _) = collect(dir.path(), 1 << 30);
            for i in 0..1000 {
                let mut buf = batch(&[&[(i % 250 + 1) as u8; 64]]);
                log.write_batch(&mut buf, true).expect("write");
            }
            drop(log);
            let path = segment_path(dir.path(), "t", 0);
            let mut data = fs::read(&path).expect("read");
            let damaged = if zeros {
                // The sector after the third batch's start; the damage begins at the
                // frame or the mark that holds its first byte.
                let sector = (2 * each) / SECTOR as usize * SECTOR as usize + SECTOR as usize;
                data[sector..sector + SECTOR as usize].fill(0);
                let (batch, within) = (sector / each, sector % each);
                batch * each + if within < HEADER + 64 { 0 } else { HEADER + 64 }
            } else {
                data[2 * each] ^= 64;
                2 * each
            };
            fs::write(&path, &data).expect("write");
            let why = refused(dir.path(), &format!("damage at byte {damaged}"));
            assert!(why.contains(&format!("at byte {damaged} ")), "{why}");
            assert!(why.contains("records as synced"), "{why}");
        }
    }

    #[test]
    fn batches_written_since_the_last_fsync_are_cut_even_when_a_later_one_landed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 1 << 30);
        let mut acknowledged = batch(&[b"acknowledged"]);
        log.write_batch(&mut acknowledged, true).expect("write");
        let synced = log.active_len();
        // Verdicts written without an fsync, then appends whose fsync the crash cut short:
        // the disk took the appends' sectors, and of the verdicts' not the second.
        let mut verdicts = batch(&[&[5u8; 1500]]);
        log.write_batch(&mut verdicts, false).expect("write");
        let mut appends = batch(&[b"never answered"]);
        log.write_batch(&mut appends, true).expect("write");
        std::mem::forget(log);
        let path = segment_path(dir.path(), "t", 0);
        let mut data = fs::read(&path).expect("read");
        data[SECTOR as usize..2 * SECTOR as usize].fill(0);
        fs::write(&path, &data).expect("write");
        let (_, replayed, seen) = collect(dir.path(), 1 << 30);
        assert_eq!(seen, vec![b"acknowledged".to_vec()]);
        assert!(replayed.truncated > 0);
        assert_eq!(len_of(&path), synced);
    }

    #[test]
    fn a_log_written_before_marks_opens_and_the_next_batch_vouches_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = segment_path(dir.path(), "t", 0);
        // Frames as the log wrote them before its batches had marks.
        fs::write(&path, batch(&[b"one", b"two", &[7u8; 64]])).expect("write");
        let (mut log, replayed, seen) = collect(dir.path(), 1 << 30);
        assert_eq!((seen.len(), replayed.truncated), (3, 0));
        let mut more = batch(&[b"four"]);
        log.write_batch(&mut more, true).expect("write");
        drop(log);
        let (_, _, seen) = collect(dir.path(), 1 << 30);
        assert_eq!(seen.len(), 4);
        // The third frame's length zeroed reads as the end of the data; the mark of the
        // batch written since records it as synced.
        let mut data = fs::read(&path).expect("read");
        data[2 * HEADER + 6] = 0;
        fs::write(&path, &data).expect("write");
        let why = refused(dir.path(), "a zero length before a synced batch");
        assert!(why.contains("records as synced"), "{why}");
    }

    /// A log of 16-byte segments holding three one-frame segments.
    fn three_segments() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut log, _, _) = collect(dir.path(), 16);
        for _ in 0..3 {
            let mut buf = batch(&[b"0123456789"]);
            log.reserve(buf.len()).expect("reserve");
            log.write_batch(&mut buf, true).expect("write");
        }
        dir
    }

    #[test]
    fn a_missing_newest_segment_is_refused() {
        // Deleting the newest of several segments went unnoticed, and the acknowledged
        // events in it with it.
        let dir = three_segments();
        let newest = segment_path(dir.path(), "t", 2);
        assert!(newest.exists());
        let (_, _, seen) = collect(dir.path(), 16);
        assert_eq!(seen.len(), 3, "whole, it opens");
        fs::remove_file(&newest).expect("remove");
        let opened = SegmentLog::open(dir.path(), "t", 16, |_, _| Ok(()));
        let Err(StoreError::Corrupt(why)) = opened else {
            panic!("a missing newest segment was not noticed");
        };
        assert!(why.contains(&newest.display().to_string()), "{why}");
        assert!(!newest.exists(), "it was made afresh");
    }

    #[test]
    fn damage_in_an_older_segment_is_refused() {
        let dir = three_segments();
        let path = segment_path(dir.path(), "t", 0);
        let mut data = fs::read(&path).expect("read");
        data[HEADER] ^= 1;
        fs::write(&path, &data).expect("write");
        let opened = SegmentLog::open(dir.path(), "t", 16, |_, _| Ok(()));
        assert!(matches!(opened, Err(StoreError::Corrupt(_))));
    }
}
