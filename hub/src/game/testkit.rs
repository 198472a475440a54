//! Test-only stores: an in-memory [`Inbox`] and [`Meta`] with the semantics the engine
//! relies on (durable on return, records in shard order, a high-water watch per shard), so
//! the engine's tests run without a disk and without waiting for fsync. Also the probes
//! through which the engine's tests look inside a [`Hub`] (its seat cache, the code sweep
//! run at a chosen time), kept here so that the facade carries no test-only methods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use games::Seat;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::inbox::{Capture, GameEntry, Inbox, Listed, Page, Record, StoreError, StoredVerdict};
use crate::meta::Meta;

use super::Hub;

pub struct MemInbox {
    /// While true, shard readers see nothing new (a consumer that fell behind).
    paused: std::sync::atomic::AtomicBool,
    /// While true, appends fail and the store says it cannot take writes (a full disk).
    failing: std::sync::atomic::AtomicBool,
    /// How long each append takes, in ms (a slow disk): 0, at once.
    slow_ms: std::sync::atomic::AtomicU64,
    shards: Vec<Mutex<Vec<Record>>>,
    /// Every capture, in the order the appends took place (the records' times are whole
    /// milliseconds, which a fast machine's appends share).
    appended: Mutex<Vec<Capture>>,
    marks: Vec<watch::Sender<u64>>,
    verdicts: Mutex<HashMap<Capture, StoredVerdict>>,
}

impl MemInbox {
    pub fn new(shards: u32) -> Arc<MemInbox> {
        Arc::new(MemInbox {
            paused: std::sync::atomic::AtomicBool::new(false),
            failing: std::sync::atomic::AtomicBool::new(false),
            slow_ms: std::sync::atomic::AtomicU64::new(0),
            shards: (0..shards).map(|_| Mutex::new(Vec::new())).collect(),
            appended: Mutex::new(Vec::new()),
            marks: (0..shards).map(|_| watch::channel(0).0).collect(),
            verdicts: Mutex::new(HashMap::new()),
        })
    }

    /// Stops (or resumes) handing records to shard readers.
    pub fn pause_consumers(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
        if !paused {
            for mark in &self.marks {
                mark.send_modify(|_| {});
            }
        }
    }

    /// Makes every append take `ms` milliseconds before it is stored, as on a slow disk.
    pub fn slow_appends(&self, ms: u64) {
        self.slow_ms.store(ms, std::sync::atomic::Ordering::SeqCst);
    }

    /// Makes appends fail (or work again), as a store that cannot take writes.
    pub fn fail_writes(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    fn failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every record, in the order it was appended.
    fn all(&self) -> Vec<Record> {
        let appended = self.appended.lock().clone();
        appended
            .into_iter()
            .filter_map(|c| {
                let records = self.shards[c.shard as usize].lock();
                records.get((c.pos - 1) as usize).cloned()
            })
            .collect()
    }
}

#[async_trait]
impl Inbox for MemInbox {
    fn shards(&self) -> u32 {
        self.shards.len() as u32
    }

    async fn append(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
        raw: Bytes,
    ) -> Result<Capture, StoreError> {
        if self.failing() {
            return Err(StoreError::Unavailable("writes fail".into()));
        }
        let slow = self.slow_ms.load(std::sync::atomic::Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(slow)).await;
        }
        let shard = self.shard_of(inbox, game);
        let capture = {
            let mut records = self.shards[shard as usize].lock();
            let capture = Capture {
                shard,
                pos: records.len() as u64 + 1,
            };
            records.push(Record {
                capture,
                inbox: inbox.to_string(),
                game: game.to_string(),
                seat,
                raw,
                at_ms: crate::clock::now_ms(),
                // In memory, as the embedded inbox hands on what it just wrote.
                written: Some(std::time::Instant::now()),
            });
            self.appended.lock().push(capture);
            capture
        };
        self.marks[shard as usize].send_replace(capture.pos);
        Ok(capture)
    }

    async fn read_shard(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, StoreError> {
        if self.paused.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let records = self
            .shards
            .get(shard as usize)
            .ok_or(StoreError::NoShard(shard))?;
        let records = records.lock();
        let start = (from.max(1) - 1) as usize;
        Ok(records.iter().skip(start).take(max).cloned().collect())
    }

    fn watch_shard(&self, shard: u32) -> Result<watch::Receiver<u64>, StoreError> {
        self.marks
            .get(shard as usize)
            .map(|s| s.subscribe())
            .ok_or(StoreError::NoShard(shard))
    }

    async fn game_records(&self, inbox: &str, game: &str) -> Result<Vec<Record>, StoreError> {
        let shard = self.shard_of(inbox, game) as usize;
        Ok(self.shards[shard]
            .lock()
            .iter()
            .filter(|r| r.inbox == inbox && r.game == game)
            .cloned()
            .collect())
    }

    async fn list(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let skip = match after {
            None => 0,
            Some(a) => a.parse::<usize>().map_err(|_| StoreError::BadCursor)?,
        };
        let verdicts = self.verdicts.lock();
        let matching: Vec<Listed> = self
            .all()
            .into_iter()
            .filter(|r| r.inbox == inbox && game.is_none_or(|g| r.game == g))
            .map(|r| {
                let v = verdicts.get(&r.capture).cloned();
                (r, v)
            })
            .collect();
        let items: Vec<Listed> = matching.iter().skip(skip).take(limit).cloned().collect();
        let next = (skip + items.len() < matching.len()).then(|| (skip + items.len()).to_string());
        Ok(Page { items, next })
    }

    async fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<GameEntry>, StoreError> {
        let mut games: Vec<GameEntry> = Vec::new();
        for r in self.all().into_iter().filter(|r| r.inbox == inbox) {
            match games.iter_mut().find(|g| g.game == r.game) {
                Some(g) => g.captures += 1,
                None => games.push(GameEntry {
                    game: r.game.clone(),
                    order: games.len() as u64,
                    first: r.capture,
                    captures: 1,
                }),
            }
        }
        games.retain(|g| before.is_none_or(|b| g.order < b));
        games.reverse();
        games.truncate(limit);
        Ok(games)
    }

    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError> {
        let Some(records) = self.shards.get(capture.shard as usize) else {
            return Ok(None);
        };
        let record = records
            .lock()
            .get((capture.pos.max(1) - 1) as usize)
            .filter(|r| r.inbox == inbox && r.capture == capture)
            .cloned();
        Ok(record.map(|r| {
            let v = self.verdicts.lock().get(&capture).cloned();
            (r, v)
        }))
    }

    async fn put_verdict(
        &self,
        capture: Capture,
        verdict: StoredVerdict,
    ) -> Result<(), StoreError> {
        self.verdicts.lock().insert(capture, verdict);
        Ok(())
    }

    async fn verdict(&self, capture: Capture) -> Result<Option<StoredVerdict>, StoreError> {
        Ok(self.verdicts.lock().get(&capture).cloned())
    }

    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError> {
        Ok(self.game_records(inbox, game).await?.len() as u64)
    }

    async fn sync(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn ready(&self) -> bool {
        !self.failing()
    }
}

#[derive(Default)]
pub struct MemMeta {
    map: Mutex<BTreeMap<String, Bytes>>,
}

#[async_trait]
impl Meta for MemMeta {
    async fn put(&self, key: &str, value: Bytes) -> Result<(), StoreError> {
        self.map.lock().insert(key.to_string(), value);
        Ok(())
    }

    async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, StoreError> {
        let mut map = self.map.lock();
        if map.contains_key(key) {
            return Ok(false);
        }
        map.insert(key.to_string(), value);
        Ok(true)
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        Ok(self.map.lock().get(key).cloned())
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.map.lock().remove(key).is_some())
    }

    async fn replace(
        &self,
        key: &str,
        expected: &[u8],
        value: Option<Bytes>,
    ) -> Result<bool, StoreError> {
        let mut map = self.map.lock();
        if map.get(key).map(|v| v.as_ref()) != Some(expected) {
            return Ok(false);
        }
        match value {
            Some(value) => map.insert(key.to_string(), value),
            None => map.remove(key),
        };
        Ok(true)
    }

    async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        Ok(self.map.lock().remove(key))
    }

    async fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Bytes)>, StoreError> {
        let from = crate::meta::page_start(prefix, after).map(str::to_string);
        Ok(self
            .map
            .lock()
            .range((from, std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn ready(&self) -> bool {
        true
    }
}

/// Probes into the engine behind a [`Hub`], for the engine's tests.
impl Hub {
    pub(crate) fn engine_open_games(&self, person: &str) -> u64 {
        self.engine.seats.open_games(person)
    }

    /// Whether the game is among the open ones this hub caches.
    pub(crate) fn engine_holds_open(&self, inbox: &str, game: &str) -> bool {
        self.engine.seats.registration(inbox, game).is_some()
    }

    /// The hourly sweep of pairing codes, now; returns how many codes it forgot and how
    /// many games it cancelled.
    pub(crate) async fn sweep_codes(&self, now_ms: u64, keep_ms: u64) -> (usize, usize) {
        super::facade::sweep_codes(&self.engine, now_ms, keep_ms).await
    }

    pub(crate) fn count_games_now(&self) {
        self.engine.count_games();
    }

    pub(crate) fn seat_for_token_count(&self) -> usize {
        self.engine.seats.token_count()
    }

    pub(crate) fn registration_cached(&self, inbox: &str, game: &str) -> bool {
        self.engine.seats.registration(inbox, game).is_some()
    }

    pub(crate) fn forget_closed_seats(&self) -> usize {
        self.engine.seats.forget_closed_seats()
    }
}

mod tests {
    #[tokio::test]
    async fn the_memory_meta_store_walks_a_scan_by_pages() {
        crate::meta::check_scan_pages(&super::MemMeta::default()).await;
    }

    #[tokio::test]
    async fn the_memory_meta_store_replaces_only_what_it_was_told() {
        crate::meta::check_replace(&super::MemMeta::default()).await;
    }
}
