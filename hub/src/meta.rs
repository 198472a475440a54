//! Meta: a small durable key-value store for the hub's own records.
//!
//! Seats, reservations of game ids, pairing codes and the hub secret's companion data are
//! few and small, but each one must survive a crash once the hub has answered for it (a
//! seat token handed to a client must still open its seat after `kill -9`). So every write
//! here is fsynced before it returns (a `take` with the caller's next write). Keys are
//! strings; values are opaque bytes the caller serializes. A Redis backend implements the
//! same trait later.
//!
//! Besides plain `put`/`get`/`delete`/`scan`, the trait offers the two atomic steps the
//! seat rules need and that Redis offers natively: [`Meta::insert_new`] (reserve a key
//! only if nobody holds it) and [`Meta::take`] (read and delete at once, so a single-use
//! pairing code cannot be redeemed twice; durable with the caller's next change).
//!
//! What it deliberately does not do: transactions across keys, expiry (callers store
//! deadlines in values and check them), or large values.

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
    async fn scan(&self, prefix: &str) -> Result<Vec<(String, Bytes)>, StoreError>;

    /// False when the store cannot take writes.
    fn ready(&self) -> bool;
}

pub use embedded::{EmbeddedMeta, PACING};

mod embedded;
