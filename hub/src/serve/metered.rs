//! An [`Inbox`] that times every append for `pipehub_inbox_append_seconds`.
//!
//! The store backends know nothing of Prometheus (a Redis backend will not either), so the
//! hub measures them from outside: this wrapper delegates every call unchanged and only
//! observes how long an append took to become durable. It deliberately adds no behaviour
//! of its own — no retries, no caching — so the backend's guarantees pass through intact.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use games::Seat;
use tokio::sync::watch;

use crate::inbox::{Capture, GameEntry, Inbox, Listed, Page, Record, StoreError, StoredVerdict};
use crate::metrics::Metrics;

/// A backend with its appends timed.
pub struct MeteredInbox {
    inner: Arc<dyn Inbox>,
    metrics: Arc<Metrics>,
}

impl MeteredInbox {
    pub fn new(inner: Arc<dyn Inbox>, metrics: Arc<Metrics>) -> Self {
        MeteredInbox { inner, metrics }
    }
}

#[async_trait]
impl Inbox for MeteredInbox {
    fn shards(&self) -> u32 {
        self.inner.shards()
    }

    fn shard_of(&self, inbox: &str, game: &str) -> u32 {
        self.inner.shard_of(inbox, game)
    }

    async fn append(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
        raw: Bytes,
    ) -> Result<Capture, StoreError> {
        let started = Instant::now();
        let capture = self.inner.append(inbox, game, seat, raw).await?;
        self.metrics.observe_append(started.elapsed());
        Ok(capture)
    }

    async fn read_shard(
        &self,
        shard: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<Record>, StoreError> {
        self.inner.read_shard(shard, from, max).await
    }

    fn watch_shard(&self, shard: u32) -> Result<watch::Receiver<u64>, StoreError> {
        self.inner.watch_shard(shard)
    }

    async fn game_records(&self, inbox: &str, game: &str) -> Result<Vec<Record>, StoreError> {
        self.inner.game_records(inbox, game).await
    }

    async fn game_records_from(
        &self,
        inbox: &str,
        game: &str,
        skip: usize,
    ) -> Result<Vec<Record>, StoreError> {
        self.inner.game_records_from(inbox, game, skip).await
    }

    async fn verdicts(
        &self,
        captures: &[Capture],
    ) -> Result<Vec<Option<StoredVerdict>>, StoreError> {
        self.inner.verdicts(captures).await
    }

    async fn list(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.inner.list(inbox, game, after, limit).await
    }

    async fn games(
        &self,
        inbox: &str,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<GameEntry>, StoreError> {
        self.inner.games(inbox, before, limit).await
    }

    async fn get(&self, inbox: &str, capture: Capture) -> Result<Option<Listed>, StoreError> {
        self.inner.get(inbox, capture).await
    }

    async fn put_verdict(
        &self,
        capture: Capture,
        verdict: StoredVerdict,
    ) -> Result<(), StoreError> {
        self.inner.put_verdict(capture, verdict).await
    }

    async fn verdict(&self, capture: Capture) -> Result<Option<StoredVerdict>, StoreError> {
        self.inner.verdict(capture).await
    }

    async fn count(&self, inbox: &str, game: &str) -> Result<u64, StoreError> {
        self.inner.count(inbox, game).await
    }

    async fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync().await
    }

    fn ready(&self) -> bool {
        self.inner.ready()
    }
}
