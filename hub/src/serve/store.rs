//! Opening the store a hub runs on: the data directory made (or refused, when a part of
//! an embedded store is gone), the embedded inbox and meta store opened side by side or
//! the Redis backend with this node's place in the cluster, the shared hub secret checked,
//! and the inbox metered.
//!
//! What this module deliberately does not do: repair a store. A store with a part gone
//! stops the start, changing nothing (ARCHITECTURE.md: a store is opened whole or not at
//! all); the logs themselves cut only what a crash can leave, as they open.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{metered, ServeError};
use crate::config::Config;
use crate::inbox::embedded::EmbeddedInbox;
use crate::inbox::redis::RedisInbox;
use crate::inbox::{Inbox, StoreError};
use crate::meta::{EmbeddedMeta, Meta};
use crate::meta_redis::RedisMeta;
use crate::metrics::Metrics;

/// How often the embedded store's own totals are copied into the metrics. (Whether it
/// takes writes is read at each scrape: `Hub::refresh_gauges`.)
const STORE_TOTALS_EVERY: Duration = Duration::from_secs(1);

/// Makes the data directory (the lock, and with the embedded backend the store, live
/// there), and refuses an embedded store with one of its parts gone.
pub(super) fn make_data_dir(config: &Config) -> Result<(), ServeError> {
    let made = if config.data.exists() && !config.data.is_dir() {
        // create_dir_all would say only "File exists".
        Err(std::io::Error::other("it is not a directory"))
    } else {
        private_dir(&config.data)
    };
    made.map_err(|source| ServeError::DataDir {
        path: config.data.clone(),
        source,
    })?;
    if config.redis.is_none() {
        check_store_whole(config.data.as_path(), config.secret.is_some())?;
    }
    Ok(())
}

/// Makes `dir` (and any parent missing) readable by this user only, as the secret in it
/// is: the meta log keeps each live pairing code as its SHA-256, and a code's 40 bits are
/// few enough to find from its hash within its ten minutes. A directory that exists is left
/// as its operator made it.
fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Opens the store ([`open_store`]), checks that nodes sharing it use one hub secret, and
/// meters the inbox; the [`Store`] it returns holds the metered inbox.
pub(super) async fn open(
    config: &Config,
    metrics: &Arc<Metrics>,
    secret: &[u8],
) -> Result<Store, ServeError> {
    let opened = Instant::now();
    let Store {
        inbox,
        meta,
        cluster,
        went_back,
    } = open_store(config, metrics).await?;
    if cluster.is_some() {
        check_shared_secret(meta.as_ref(), secret).await?;
    }
    let inbox: Arc<dyn Inbox> = Arc::new(metered::MeteredInbox::new(inbox, metrics.clone()));
    tracing::info!(
        data = %config.data.display(),
        shards = inbox.shards(),
        elapsed_ms = opened.elapsed().as_millis() as u64,
        "store open"
    );
    Ok(Store {
        inbox,
        meta,
        cluster,
        went_back,
    })
}

/// A store and, with the Redis backend, this node's place in the cluster.
pub(super) struct Store {
    pub(super) inbox: Arc<dyn Inbox>,
    pub(super) meta: Arc<dyn Meta>,
    pub(super) cluster: Option<Arc<crate::cluster::RedisCluster>>,
    /// With Redis: says what happened once the store is seen to have gone back in time
    /// ([`RedisInbox::went_back`]).
    pub(super) went_back: Option<tokio::sync::watch::Receiver<Option<String>>>,
}

/// Refuses an embedded store with one of its parts gone, before anything is made afresh in
/// its place: a hub started on the inbox's log alone would let anyone move in seated games
/// (their seats are in the meta log), on the meta log alone would write the starts of
/// games whose moves are gone, without its `HEADER` would place events by another shard
/// count, and without its secret (`secret` and `secret.pub` both, and none given) would
/// make a new one and sign with keys no game registered. A store has data once either log
/// is not empty; a first start that stopped between making one part and the next has none.
fn check_store_whole(dir: &std::path::Path, secret_given: bool) -> Result<(), ServeError> {
    let in_data = |source| ServeError::DataDir {
        path: dir.to_path_buf(),
        source,
    };
    // (any segment of the log `stem`, whether any holds data)
    let mut logs = [("inbox-", false, false), ("meta-", false, false)];
    for entry in std::fs::read_dir(dir).map_err(in_data)? {
        let entry = entry.map_err(in_data)?;
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|n| n.ends_with(".log")) else {
            continue;
        };
        for (stem, found, data) in logs.iter_mut() {
            if name.starts_with(*stem) {
                *found = true;
                *data |= entry.metadata().map_err(in_data)?.len() > 0;
            }
        }
    }
    let [(_, inbox, inbox_data), (_, meta, meta_data)] = logs;
    let gone = |name: &str, what| {
        Err(ServeError::StoreIncomplete {
            path: dir.join(name),
            what,
        })
    };
    if meta_data && !inbox {
        return gone(
            "inbox-00000000.log",
            "the inbox's log, which holds every event",
        );
    }
    if inbox_data && !meta {
        return gone(
            "meta-00000000.log",
            "the meta store's log, which holds every seat, seated game and pairing code",
        );
    }
    if inbox_data && !dir.join("HEADER").exists() {
        return gone(
            "HEADER",
            "it holds the shard count that every stored event's place follows",
        );
    }
    let secret = [crate::config::SECRET_FILE, crate::config::SECRET_CHECK_FILE];
    // The secret's check alone says a secret was made here or given: made here and gone,
    // a new one would be made and then refused, and left behind.
    let made_here_and_gone = dir.join(crate::config::SECRET_CHECK_FILE).exists()
        && !dir.join(crate::config::SECRET_FILE).exists();
    if !secret_given && made_here_and_gone {
        return gone(
            crate::config::SECRET_FILE,
            "the hub secret, from which every hub-held seat's key derives (its check, \
             secret.pub, is still there); a secret the hub made is 32 raw bytes, so only \
             the file brings it back, while one chosen as text can be given with --secret",
        );
    }
    if (inbox_data || meta_data) && !secret_given && !secret.iter().any(|f| dir.join(f).exists()) {
        return gone(
            crate::config::SECRET_FILE,
            "the hub secret, from which every hub-held seat's key derives; a secret the \
             hub made is 32 raw bytes, so only the file brings it back, while one chosen as \
             text can be given with --secret",
        );
    }
    Ok(())
}

/// Where nodes sharing a store keep the check of their hub secret: the public key it
/// derives for a seat of no game, as [`Config::check_secret`] keeps it in a data directory.
const SHARED_SECRET_CHECK: &str = "hub/secret.pub";

/// Refuses to join nodes that use another hub secret. The first node writes the check;
/// every later one compares. A node that joined with another secret went unnoticed: the
/// starts it wrote for the games of its shards failed `bad_signature`, silently.
async fn check_shared_secret(
    meta: &dyn crate::meta::Meta,
    secret: &[u8],
) -> Result<(), ServeError> {
    let check = crate::game::writer::hub_public_key(secret, "", "", games::Seat::X);
    if meta
        .insert_new(SHARED_SECRET_CHECK, bytes::Bytes::from(check.clone()))
        .await?
    {
        return Ok(());
    }
    match meta.get(SHARED_SECRET_CHECK).await? {
        Some(found) if found.as_ref() != check.as_bytes() => Err(ServeError::SharedSecretDiffers),
        _ => Ok(()),
    }
}

/// Opens the Redis backend when `--redis` is given, else the embedded inbox and meta
/// store, which share the data directory.
async fn open_store(config: &Config, metrics: &Arc<Metrics>) -> Result<Store, ServeError> {
    if let Some(url) = &config.redis {
        let inbox = RedisInbox::open(url, config.shards).await?;
        let meta = RedisMeta::new(inbox.connection(), inbox.health());
        let blocking = crate::inbox::redis::connect(url).await?;
        let cluster = crate::cluster::RedisCluster::new(
            inbox.connection(),
            blocking,
            url,
            inbox.shards(),
            metrics.clone(),
        );
        inbox.set_fence(cluster.clone());
        metrics.cluster_shards.set(i64::from(inbox.shards()));
        return Ok(Store {
            went_back: Some(inbox.went_back()),
            inbox,
            meta: Arc::new(meta),
            cluster: Some(cluster),
        });
    }
    // An I/O error opening the embedded store names the directory it met it in (a
    // permission refused, a read-only mount), not only the error.
    let in_data = |e: StoreError| match e {
        StoreError::Io(source) => ServeError::DataDir {
            path: config.data.clone(),
            source,
        },
        other => ServeError::Store(other),
    };
    // Once the directory's lock is taken, the two stores replay their logs side by side.
    let lock = crate::inbox::embedded::lock(&config.data).map_err(in_data)?;
    let (inbox, meta) = std::thread::scope(|s| {
        let meta = s.spawn(|| {
            EmbeddedMeta::open_with(&config.data, config.meta_pacing, config.meta_cold_keys)
        });
        let inbox =
            EmbeddedInbox::open_locked(&config.data, config.shards, config.inbox_pacing, lock);
        let meta = meta
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (inbox, meta)
    });
    let (inbox, meta) = (
        Arc::new(inbox.map_err(in_data)?),
        Arc::new(meta.map_err(in_data)?),
    );
    if inbox.shards() != config.shards {
        tracing::info!(
            requested = config.shards,
            kept = inbox.shards(),
            "the store keeps the shard count it was created with"
        );
    }
    inbox.observe_flushes(metrics.inbox_fsync.clone());
    meta.observe_flushes(metrics.meta_fsync.clone());
    actix_rt::spawn(export_store_totals(
        Arc::downgrade(&inbox),
        Arc::downgrade(&meta),
        metrics.clone(),
    ));
    Ok(Store {
        inbox,
        meta,
        cluster: None,
        went_back: None,
    })
}

/// Copies the embedded stores' own fsync totals into the metrics once a second, until the
/// stores are dropped.
async fn export_store_totals(
    inbox: Weak<EmbeddedInbox>,
    meta: Weak<EmbeddedMeta>,
    metrics: Arc<Metrics>,
) {
    let mut tick = tokio::time::interval(STORE_TOTALS_EVERY);
    loop {
        tick.tick().await;
        let (Some(inbox), Some(meta)) = (inbox.upgrade(), meta.upgrade()) else {
            return;
        };
        let stats = inbox.stats();
        metrics.store_totals(
            stats.syncs.load(Ordering::Relaxed),
            stats.max_batch.load(Ordering::Relaxed),
            meta.syncs(),
            meta.cold_keys(),
        );
    }
}
