//! Meta: a small durable key-value store for the hub's own records.
//!
//! Seats, reservations of game ids, pairing codes and the hub secret's companion data are
//! few and small, but each one must survive a crash once the hub has answered for it (a
//! seat token handed to a client must still open its seat after `kill -9`). So every write
//! here is fsynced before it returns. Keys are strings; values are opaque bytes the caller
//! serializes. A Redis backend implements the same trait later.
//!
//! Besides plain `put`/`get`/`delete`/`scan`, the trait offers the two atomic steps the
//! seat rules need and that Redis offers natively: [`Meta::insert_new`] (reserve a key
//! only if nobody holds it) and [`Meta::take`] (read and delete at once, so a single-use
//! pairing code cannot be redeemed twice).
//!
//! What it deliberately does not do: transactions across keys, expiry (callers store
//! deadlines in values and check them), or large values.

use async_trait::async_trait;
use bytes::Bytes;

use crate::inbox::StoreError;

/// The hub's durable key-value store. Every mutating call is durable when it returns.
#[async_trait]
pub trait Meta: Send + Sync {
    /// Stores `value` under `key`, replacing any previous value.
    async fn put(&self, key: &str, value: Bytes) -> Result<(), StoreError>;

    /// Stores `value` under `key` only if the key is absent; true when it was stored.
    async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, StoreError>;

    /// The value under `key`, if any.
    async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError>;

    /// Removes `key`; true when it was present.
    async fn delete(&self, key: &str) -> Result<bool, StoreError>;

    /// Removes `key` and returns the value it had, atomically.
    async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError>;

    /// Every key starting with `prefix`, with its value, in key order.
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Bytes)>, StoreError>;

    /// False when the store cannot take writes.
    fn ready(&self) -> bool;
}

pub use embedded::EmbeddedMeta;

mod embedded {
    //! The embedded meta store: the whole map in memory, every change appended to a
    //! checksummed log and fsynced before the call returns (see [`crate::inbox::log`]).
    //!
    //! Changes are serialized by one mutex held across the write and its fsync. Meta
    //! writes are rare (a game created, a seat paired, a code renewed), so one fsync each
    //! costs little, and holding the lock makes `insert_new` and `take` atomic without a
    //! second mechanism. The log is compacted at open when it has grown well past the live
    //! data: the live entries are written to a fresh segment, synced, and the old segments
    //! removed oldest first, so a crash at any point replays to the same map.

    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::atomic::{AtomicBool, Ordering};

    use async_trait::async_trait;
    use bytes::Bytes;
    use parking_lot::{Mutex, RwLock};

    use super::Meta;
    use crate::inbox::log::{self, SegmentLog};
    use crate::inbox::StoreError;

    const PUT: u8 = 1;
    const DELETE: u8 = 2;
    /// Compact at open when the log is this much larger than the live data (and not tiny).
    const COMPACT_RATIO: u64 = 4;
    const COMPACT_MIN_BYTES: u64 = 1 << 20;

    /// The embedded meta store. See the module documentation.
    pub struct EmbeddedMeta {
        log: Mutex<SegmentLog>,
        map: RwLock<BTreeMap<String, Bytes>>,
        failed: AtomicBool,
    }

    fn encode(kind: u8, key: &str, value: &[u8]) -> Vec<u8> {
        let mut buf = Vec::with_capacity(16 + key.len() + value.len());
        log::frame(&mut buf, |out| {
            out.push(kind);
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(value);
        });
        buf
    }

    fn apply(map: &mut BTreeMap<String, Bytes>, payload: &[u8]) -> Result<(), StoreError> {
        let damaged = || StoreError::Corrupt("a meta entry cannot be read".into());
        let (&kind, rest) = payload.split_first().ok_or_else(damaged)?;
        let len_bytes = rest.get(..4).ok_or_else(damaged)?;
        let mut word = [0u8; 4];
        word.copy_from_slice(len_bytes);
        let len = u32::from_le_bytes(word) as usize;
        let key = rest.get(4..4 + len).ok_or_else(damaged)?;
        let key = std::str::from_utf8(key).map_err(|_| damaged())?.to_string();
        let value = Bytes::copy_from_slice(&rest[4 + len..]);
        match kind {
            PUT => {
                map.insert(key, value);
            }
            DELETE => {
                map.remove(&key);
            }
            _ => return Err(damaged()),
        }
        Ok(())
    }

    impl EmbeddedMeta {
        /// Opens (or creates) the meta store in `dir`; its files are `meta-*.log`, so it
        /// may share a directory with the inbox.
        pub fn open(dir: &Path) -> Result<EmbeddedMeta, StoreError> {
            let mut map = BTreeMap::new();
            let (mut log, replayed) =
                SegmentLog::open(dir, "meta", u64::MAX, |_, payload| apply(&mut map, payload))?;
            let live: u64 = map
                .iter()
                .map(|(k, v)| (log::HEADER + 5 + k.len() + v.len()) as u64)
                .sum();
            if replayed.bytes > COMPACT_MIN_BYTES && replayed.bytes > COMPACT_RATIO * live {
                let mut buf = Vec::new();
                for (key, value) in &map {
                    buf.extend_from_slice(&encode(PUT, key, value));
                }
                log.roll()?;
                log.write_batch(&buf, true)?;
                log.drop_older_segments()?;
                tracing::info!(from = replayed.bytes, to = buf.len(), "meta log compacted");
            }
            Ok(EmbeddedMeta {
                log: Mutex::new(log),
                map: RwLock::new(map),
                failed: AtomicBool::new(false),
            })
        }

        /// Writes one change durably, then applies it to the map. Called with the log lock
        /// held, so the check the caller made before still holds.
        fn commit(
            &self,
            log: &mut SegmentLog,
            kind: u8,
            key: &str,
            value: &[u8],
        ) -> Result<(), StoreError> {
            if self.failed.load(Ordering::Acquire) {
                return Err(unavailable());
            }
            let frame = encode(kind, key, value);
            if let Err(e) = log.write_batch(&frame, true) {
                // After a failed fsync nothing written since the last good one can be
                // trusted, so the store stops taking writes rather than retry.
                tracing::error!(error = %e, "meta write failed; the store stops taking writes");
                self.failed.store(true, Ordering::Release);
                return Err(StoreError::Unavailable(e.to_string()));
            }
            apply(&mut self.map.write(), &frame[log::HEADER..])
        }
    }

    fn unavailable() -> StoreError {
        StoreError::Unavailable("the meta store stopped taking writes after a failed write".into())
    }

    #[async_trait]
    impl Meta for EmbeddedMeta {
        async fn put(&self, key: &str, value: Bytes) -> Result<(), StoreError> {
            let mut log = self.log.lock();
            self.commit(&mut log, PUT, key, &value)
        }

        async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, StoreError> {
            let mut log = self.log.lock();
            if self.map.read().contains_key(key) {
                return Ok(false);
            }
            self.commit(&mut log, PUT, key, &value)?;
            Ok(true)
        }

        async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
            Ok(self.map.read().get(key).cloned())
        }

        async fn delete(&self, key: &str) -> Result<bool, StoreError> {
            Ok(self.take(key).await?.is_some())
        }

        async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
            let mut log = self.log.lock();
            let Some(value) = self.map.read().get(key).cloned() else {
                return Ok(None);
            };
            self.commit(&mut log, DELETE, key, &[])?;
            Ok(Some(value))
        }

        async fn scan(&self, prefix: &str) -> Result<Vec<(String, Bytes)>, StoreError> {
            let map = self.map.read();
            Ok(map
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect())
        }

        fn ready(&self) -> bool {
            !self.failed.load(Ordering::Acquire)
        }
    }

    #[cfg(test)]
    mod tests {
        use std::sync::Arc;

        use super::*;

        fn b(s: &str) -> Bytes {
            Bytes::copy_from_slice(s.as_bytes())
        }

        #[tokio::test]
        async fn changes_survive_reopen() {
            let dir = tempfile::tempdir().expect("tempdir");
            {
                let meta = EmbeddedMeta::open(dir.path()).expect("open");
                meta.put("seat/a", b("1")).await.expect("put");
                meta.put("seat/b", b("2")).await.expect("put");
                meta.put("seat/a", b("3")).await.expect("put");
                meta.put("code/x", b("4")).await.expect("put");
                assert!(meta.delete("seat/b").await.expect("delete"));
                assert!(!meta.delete("seat/b").await.expect("delete"));
            }
            let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
            assert_eq!(meta.get("seat/a").await.expect("get"), Some(b("3")));
            assert_eq!(meta.get("seat/b").await.expect("get"), None);
            let scanned = meta.scan("seat/").await.expect("scan");
            assert_eq!(scanned, vec![("seat/a".to_string(), b("3"))]);
            assert_eq!(meta.scan("").await.expect("scan").len(), 2);
            assert!(meta.scan("zzz").await.expect("scan").is_empty());
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn insert_new_and_take_are_atomic() {
            let dir = tempfile::tempdir().expect("tempdir");
            let meta = Arc::new(EmbeddedMeta::open(dir.path()).expect("open"));
            meta.put("code/c", b("once")).await.expect("put");
            let mut tasks = Vec::new();
            for i in 0..16 {
                let meta = meta.clone();
                tasks.push(tokio::spawn(async move {
                    let reserved = meta
                        .insert_new("game/g", b(&i.to_string()))
                        .await
                        .expect("insert");
                    let taken = meta.take("code/c").await.expect("take").is_some();
                    (reserved, taken)
                }));
            }
            let (mut reserved, mut taken) = (0, 0);
            for task in tasks {
                let (r, t) = task.await.expect("task");
                reserved += usize::from(r);
                taken += usize::from(t);
            }
            assert_eq!((reserved, taken), (1, 1));
            assert_eq!(meta.get("code/c").await.expect("get"), None);
            assert!(!meta.insert_new("game/g", b("again")).await.expect("insert"));
        }

        #[tokio::test]
        async fn a_torn_tail_is_cut_and_a_large_log_is_compacted() {
            let dir = tempfile::tempdir().expect("tempdir");
            {
                let meta = EmbeddedMeta::open(dir.path()).expect("open");
                let big = Bytes::from(vec![7u8; 4096]);
                for _ in 0..400 {
                    meta.put("k", big.clone()).await.expect("put");
                }
                meta.put("last", b("kept")).await.expect("put");
            }
            let segment = dir.path().join("meta-00000000.log");
            let mut data = std::fs::read(&segment).expect("read");
            data.extend_from_slice(&[99, 0, 0, 0, 1]);
            std::fs::write(&segment, &data).expect("tear");
            let meta = EmbeddedMeta::open(dir.path()).expect("reopen");
            assert_eq!(meta.get("last").await.expect("get"), Some(b("kept")));
            assert!(
                !segment.exists(),
                "the compacted log replaces the old segment"
            );
            drop(meta);
            let meta = EmbeddedMeta::open(dir.path()).expect("reopen compacted");
            assert_eq!(
                meta.get("k").await.expect("get").map(|v| v.len()),
                Some(4096)
            );
            assert_eq!(meta.scan("").await.expect("scan").len(), 2);
        }
    }
}
