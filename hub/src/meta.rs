//! Meta: a small durable key-value store for the hub's own records.
//!
//! Seats, reservations of game ids, pairing codes and the hub secret's companion data are
//! few and small, but each one must survive a crash once the hub has answered for it (a
//! seat token handed to a client must still open its seat after `kill -9`). So every write
//! here is fsynced before it returns (a `take` with the caller's next write). Keys are
//! strings; values are opaque bytes the caller serializes. A Redis backend implements the
//! same trait later.
//!
//! Besides plain `put`/`get`/`delete`/`scan`, the trait offers the three atomic steps the
//! seat rules need and that Redis offers natively: [`Meta::insert_new`] (reserve a key
//! only if nobody holds it), [`Meta::take`] (read and delete at once, so a single-use
//! pairing code cannot be redeemed twice; durable with the caller's next change) and
//! [`Meta::replace`] (write over a value only if it is still the one read).
//!
//! What it deliberately does not do: transactions across keys, expiry (callers store
//! deadlines in values and check them), or large values.

use std::ops::Bound;

use async_trait::async_trait;
use bytes::Bytes;

use crate::inbox::StoreError;

/// The hub's durable key-value store. Every mutating call but `take` is durable when it
/// returns.
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

    /// Removes `key` without looking whether it was there, for a caller that has just
    /// read it: durable when it returns, like `delete`, and cheaper where looking costs
    /// (an embedded store's cold key is looked up in its cache file, and every change of
    /// the store waits meanwhile).
    async fn discard(&self, key: &str) -> Result<(), StoreError> {
        self.delete(key).await.map(|_| ())
    }

    /// Stores `value` under `key` (removes the key, for `None`) only if the key holds
    /// exactly `expected` now; true when it did. Durable when it returns. Nodes sharing a
    /// store change a record that several of them may be changing at once this way (a
    /// seated game's registration, by its pair, a fresh code or a cancel): each writes only
    /// over the value it read and acted on.
    async fn replace(
        &self,
        key: &str,
        expected: &[u8],
        value: Option<Bytes>,
    ) -> Result<bool, StoreError>;

    /// Removes `key` and returns the value it had, atomically: of callers racing for the
    /// key, one gets its value. The one mutating call that may return before it is
    /// durable: the removal is durable no later than the next change this caller makes
    /// durable, and a crash before that undoes it, as if nobody had taken the key (until
    /// then `get` of an embedded store, which shows durable contents only, may still
    /// return the value; another `take` or `insert_new` sees it gone). So a caller acts
    /// on what it took only through later writes (pairing: O's seat and the code's
    /// tombstone), and saves an fsync round of its own.
    async fn take(&self, key: &str) -> Result<Option<Bytes>, StoreError>;

    /// Every key starting with `prefix`, with its value, in key order.
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Bytes)>, StoreError> {
        self.scan_page(prefix, None, usize::MAX).await
    }

    /// The first `limit` keys starting with `prefix` that come after `after` (from the
    /// first such key when `None`), with their values, in key order: a walk over more keys
    /// than should be held at once, a page at a time.
    async fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Bytes)>, StoreError>;

    /// False when the store cannot take writes.
    fn ready(&self) -> bool;
}

pub use embedded::{EmbeddedMeta, COLD_KEYS, PACING};

/// Where a page of [`Meta::scan_page`] starts: just after `after`, or at `prefix` when
/// there is no `after` or it comes before the prefix.
pub(crate) fn page_start<'a>(prefix: &'a str, after: Option<&'a str>) -> Bound<&'a str> {
    match after.filter(|after| *after >= prefix) {
        Some(after) => Bound::Excluded(after),
        None => Bound::Included(prefix),
    }
}

/// Every key starting with `prefix`, walked by pages of `limit` until one is short.
#[cfg(test)]
pub(crate) async fn walk_pages(
    meta: &dyn Meta,
    prefix: &str,
    limit: usize,
) -> Vec<(String, Bytes)> {
    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = meta
            .scan_page(prefix, after.as_deref(), limit)
            .await
            .expect("page");
        assert!(page.len() <= limit);
        let more = page.len() == limit;
        after = page.last().map(|(k, _)| k.clone());
        walked.extend(page);
        if !more {
            return walked;
        }
    }
}

/// What every backend's [`Meta::replace`] must do: write (or remove) only over the value
/// expected, and of callers racing with the same expected value, let one through.
#[cfg(test)]
pub(crate) async fn check_replace(meta: &dyn Meta) {
    let v = |s: &'static str| Bytes::from_static(s.as_bytes());
    assert!(!meta
        .replace("r/a", b"x", Some(v("y")))
        .await
        .expect("replace"));
    assert_eq!(meta.get("r/a").await.expect("get"), None);
    meta.put("r/a", v("x")).await.expect("put");
    assert!(!meta
        .replace("r/a", b"z", Some(v("y")))
        .await
        .expect("replace"));
    assert!(!meta
        .replace("r/a", b"", Some(v("y")))
        .await
        .expect("replace"));
    assert_eq!(meta.get("r/a").await.expect("get"), Some(v("x")));
    assert!(meta
        .replace("r/a", b"x", Some(v("y")))
        .await
        .expect("replace"));
    assert_eq!(meta.get("r/a").await.expect("get"), Some(v("y")));
    assert_eq!(meta.scan("r/").await.expect("scan").len(), 1);
    let racing = futures_util::future::join_all(
        (0..8).map(|n| meta.replace("r/a", b"y", Some(Bytes::from(format!("n{n}"))))),
    )
    .await;
    let won = racing.iter().filter(|r| matches!(r, Ok(true))).count();
    assert_eq!(won, 1, "{racing:?}");
    let now = meta.get("r/a").await.expect("get").expect("a value");
    assert!(meta.replace("r/a", &now, None).await.expect("remove"));
    assert_eq!(meta.get("r/a").await.expect("get"), None);
    assert!(meta.scan("r/").await.expect("scan").is_empty());
    assert!(meta.insert_new("r/a", v("again")).await.expect("insert"));
}

/// What every backend's [`Meta::scan_page`] must do, checked against its own `scan`: pages
/// of any size walk a prefix's keys once each, in order, and nothing outside it.
#[cfg(test)]
pub(crate) async fn check_scan_pages(meta: &dyn Meta) {
    let hashed = |n: u8, prefix: &str| format!("{prefix}{}", hex::encode([n; 32]));
    let mut keys = vec![
        "cod".to_string(),
        "code".to_string(),
        "code/".to_string(),
        "code/short".to_string(),
        "code0".to_string(),
        "seat/short".to_string(),
    ];
    for n in [0x00, 0x10, 0x7f, 0xab, 0xff] {
        keys.push(hashed(n, "code/"));
        keys.push(hashed(n, "seat/"));
    }
    for (i, key) in keys.iter().enumerate() {
        meta.put(key, Bytes::from(i.to_string()))
            .await
            .expect("put");
    }
    for prefix in ["code/", "seat/", "", "zzz"] {
        let whole = meta.scan(prefix).await.expect("scan");
        let expected: usize = keys.iter().filter(|k| k.starts_with(prefix)).count();
        assert_eq!(whole.len(), expected, "{prefix:?}");
        for limit in [1, 2, 3, 7, 1000] {
            let walked = walk_pages(meta, prefix, limit).await;
            assert_eq!(walked, whole, "{prefix:?} by pages of {limit}");
        }
    }
    // An `after` before the prefix starts from its first key; one past it finds nothing.
    let first = meta.scan_page("code/", Some("a"), 1).await.expect("page");
    assert_eq!(first[0].0, "code/");
    let none = meta
        .scan_page("code/", Some("code0"), 10)
        .await
        .expect("page");
    assert!(none.is_empty());
}

mod embedded;
