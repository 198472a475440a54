//! Starting and stopping a hub: [`run`] wires the store, the engine, the limits and the
//! HTTP server together and runs them until `shutdown` resolves.
//!
//! The order of shutdown is what keeps acknowledged events: first the HTTP server stops
//! accepting and finishes the requests in flight (an append that was acknowledged has
//! been fsynced before its answer left), then the engine drains its consumers, then the
//! store syncs whatever it recorded lazily (verdicts). Nothing acknowledged is in memory
//! only at any point, so a `kill -9` loses nothing acknowledged either; the graceful path
//! only spares the next start the work of recomputing verdicts.
//!
//! This module owns no logic of its own: it builds things and hands them to one another.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use actix_web::HttpServer;

mod connections;
mod metered;

use crate::config::{Config, ConfigError};
use crate::game::{Hub, HubConfig, HubError};
use crate::http;
use crate::inbox::embedded::EmbeddedInbox;
use crate::inbox::redis::RedisInbox;
use crate::inbox::{Inbox, StoreError};
use crate::limits::{EventLimiter, PairingLimiter};
use crate::meta::{EmbeddedMeta, Meta};
use crate::meta_redis::RedisMeta;
use crate::metrics::Metrics;
use crate::relay::HubRooms;

/// How long in-flight requests get to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Connections a worker may hold where the open-files limit cannot be read: actix-web's
/// own default.
const UNCAPPED_PER_WORKER: usize = 25_600;
/// Connections the admin address serves at once: probes and scrapes, a few at a time.
const ADMIN_CONNECTIONS: usize = 16;
/// How often the embedded store's own totals, and whether it takes writes, are copied into
/// the metrics.
const STORE_TOTALS_EVERY: Duration = Duration::from_secs(1);
/// How often idle rate-limit buckets are forgotten. Every seat is a person with a bucket of
/// its own, so a hub finishing thousands of games a second gathers thousands of idle
/// buckets a second: a sweep every few seconds keeps them from being a minute's worth
/// (a walk of the live buckets, about a millisecond at 20,000 sockets).
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(5);

/// Why a hub could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("engine: {0}")]
    Engine(#[from] HubError),
    #[error("data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the data directory {dir} holds a store, but {path} is gone ({what}); starting on \
         what is left would lose or misread what it held. Restore the file, or use another \
         data directory",
        dir = .path.parent().unwrap_or(std::path::Path::new(".")).display(),
        path = .path.display()
    )]
    StoreIncomplete {
        path: std::path::PathBuf,
        what: &'static str,
    },
    #[error(
        "the hub nodes already on this Redis use another hub secret: a node with this one \
         would sign the moves of the games it owns with keys nobody registered. Start every \
         node with the same --secret / PIPEHUB_SECRET"
    )]
    SharedSecretDiffers,
    #[error(
        "{0}. This node remembers more than the store now holds, so it stopped: start it \
         again (its supervisor does) and it rebuilds every game from what the store holds; \
         so must every other node on this Redis"
    )]
    StoreWentBack(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("HTTP server: {0}")]
    Server(std::io::Error),
}

/// Runs a hub until `shutdown` resolves, then stops it gracefully. Must run inside an actix
/// system (`actix_rt::System::new().block_on(run(..))`): game actors live on it.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
    config.validate()?;
    let files = crate::files::raise_limit();
    let made = if config.data.exists() && !config.data.is_dir() {
        // create_dir_all would say only "File exists".
        Err(std::io::Error::other("it is not a directory"))
    } else {
        std::fs::create_dir_all(&config.data)
    };
    made.map_err(|source| ServeError::DataDir {
        path: config.data.clone(),
        source,
    })?;
    if config.redis.is_none() {
        check_store_whole(config.data.as_path(), config.secret.is_some())?;
    }
    let secret = config.secret_bytes()?;
    config.check_secret(&secret)?;
    let metrics = Arc::new(Metrics::new()?);

    let opened = Instant::now();
    let Store {
        inbox,
        meta,
        cluster,
        went_back,
    } = open_store(&config, &metrics).await?;
    if cluster.is_some() {
        check_shared_secret(meta.as_ref(), &secret).await?;
    }
    let inbox: Arc<dyn Inbox> = Arc::new(metered::MeteredInbox::new(inbox, metrics.clone()));
    tracing::info!(
        data = %config.data.display(),
        shards = inbox.shards(),
        elapsed_ms = opened.elapsed().as_millis() as u64,
        "store open"
    );

    let registry = games::Registry::builtin()
        .with_default(&config.default_protocol)
        .ok_or_else(|| ConfigError::UnknownProtocol(config.default_protocol.clone()))?;
    let mut hub_config = HubConfig::new(registry.clone(), secret);
    // 0 is no cap, as for the per-address caps (a cap of 0 would refuse every game).
    hub_config.max_open_games = Some(config.max_open_games).filter(|n| *n > 0);
    hub_config.max_captures_per_game = Some(config.max_captures_per_game).filter(|n| *n > 0);
    hub_config.cluster = cluster
        .clone()
        .map(|c| c as crate::cluster::SharedOwnership);
    let ws_rooms = ::relay::Rooms::new();
    let mut rooms = HubRooms::new(ws_rooms.clone());
    if let Some(c) = &cluster {
        // Each publication also goes to the other nodes' rooms (Redis pub/sub).
        let others = crate::cluster::relay::Publisher::start(
            c.node(),
            c.shards(),
            c.live_nodes(),
            c.connection(),
        );
        rooms = rooms.with_others(others);
    }
    let rooms = Arc::new(rooms);
    let hub = Hub::open(hub_config, inbox.clone(), meta, metrics.clone(), rooms).await?;
    let mut events = EventLimiter::new(config.rate_limit);
    let mut pairing = PairingLimiter::new(config.pairing_limit);
    if let Some(c) = &cluster {
        pairing = pairing.with_shared(Arc::new(crate::cluster::limits::RedisBudget::new(
            c.connection(),
            config.pairing_limit,
        )));
        // Every node charges the same buckets in Redis.
        events = events.with_shared(Arc::new(crate::cluster::limits::RedisBudget::new(
            c.connection(),
            config.rate_limit,
        )));
    }
    let (leases_stop, leases_stop_rx) = tokio::sync::watch::channel(false);
    let leases = cluster.map(|c| {
        tracing::info!(node = c.node(), "cluster node: taking shard leases");
        tokio::spawn(crate::cluster::relay::subscribe(
            c.url().to_string(),
            c.node().to_string(),
            ws_rooms.clone(),
            hub.clone(),
            leases_stop_rx.clone(),
        ));
        tokio::spawn(c.run(hub.clone(), leases_stop_rx))
    });

    let state = http::AppState {
        hub: hub.clone(),
        events: Arc::new(events),
        pairing: Arc::new(pairing),
        metrics: metrics.clone(),
        trusted_proxies: Arc::new(config.trusted_proxies.clone()),
        registry: Arc::new(registry),
        stopping: Arc::default(),
    };
    let housekeeping = actix_rt::spawn(housekeep(state.clone()));

    let app_state = state.clone();
    let (going_away, ws_shutdown) = tokio::sync::watch::channel(false);
    let ws = crate::relay::relay(
        &state,
        ws_rooms,
        ws_shutdown,
        NonZeroU32::new(config.max_sockets_per_address),
    );
    // Bound first, so that its listener is among the files the main server's cap counts.
    let admin = match &config.admin_listen {
        Some(addr) => Some(admin_server(addr, state.clone())?),
        None => None,
    };
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let admin_files = match admin {
        Some(_) => ADMIN_CONNECTIONS as u64 + crate::files::PER_WORKER,
        None => 0,
    };
    let per_worker = connections_per_worker(files, workers, admin_files);
    let connection_cap = NonZeroU32::new(config.max_connections_per_address).map(|n| {
        Arc::new(connections::ConnectionCap::new(
            n,
            Arc::new(config.trusted_proxies.clone()),
            metrics.rate_limited.with_label_values(&["connections"]),
        ))
    });
    let server = HttpServer::new(move || {
        http::app(app_state.clone())
            .configure(::relay::configure(ws.clone()))
            .configure(::relay::page::configure)
    });
    // Without a cap or a send timeout, no `on_connect` at all: it gives every connection a
    // data map.
    let send_timeout = config.send_timeout;
    let server = match (connection_cap, send_timeout) {
        (None, None) => server,
        (cap, _) => server.on_connect(move |io, data| {
            if let Some(timeout) = send_timeout {
                connections::set_send_timeout(io, timeout);
            }
            if let Some(cap) = &cap {
                cap.on_connect(io, data);
            }
        }),
    };
    let server = server
        .disable_signals()
        .workers(workers)
        .max_connections(per_worker)
        .shutdown_timeout(SHUTDOWN_GRACE.as_secs())
        .max_connection_rate(1024)
        // Frames are small and latency-bound (a move, then the opponent's board): without
        // TCP_NODELAY a frame sent while the previous one awaits the client's delayed ACK
        // waits up to 40 ms for it.
        .tcp_nodelay(true)
        .client_request_timeout(Duration::from_secs(10))
        .bind(&config.listen)
        .map_err(|source| ServeError::Listen {
            addr: config.listen.clone(),
            source,
        })?;
    for addr in server.addrs() {
        // Standard output holds this line (and the admin address's, below) alone: tests
        // and scripts read the chosen ports there.
        println!("listening on {addr}");
        tracing::info!(%addr, "listening");
    }
    let admin = admin.map(|(admin, addrs)| {
        for addr in addrs {
            println!("admin listening on {addr}");
            tracing::info!(%addr, "admin listening");
        }
        let handle = admin.handle();
        actix_rt::spawn(admin);
        handle
    });
    let server = server.run();
    let handle = server.handle();
    let mut server = actix_rt::spawn(server);

    // A store that went back in time holds less than this node remembers: the node stops,
    // and a fresh start (its supervisor's) rebuilds what it holds from the store.
    let store_went_back = async move {
        let Some(mut rx) = went_back else {
            return std::future::pending().await;
        };
        let what = match rx.wait_for(Option::is_some).await {
            Ok(what) => what.clone().unwrap_or_default(),
            Err(_) => return std::future::pending().await,
        };
        what
    };
    let mut went_back = None;
    let served = tokio::select! {
        result = &mut server => Some(result),
        () = shutdown => None,
        what = store_went_back => {
            went_back = Some(what);
            None
        }
    };
    let result = match served {
        Some(joined) => joined.map_err(|e| ServeError::Server(std::io::Error::other(e))),
        None => {
            tracing::info!("stopping: finishing requests in flight");
            // Not ready from now on (the admin address answers a while longer): a load
            // balancer that polls `/readyz` stops sending new clients while these drain.
            state.stopping.store(true, Ordering::Relaxed);
            // WebSocket sessions answer what they are running and close as going away;
            // left open, they would hold the server for its whole grace period.
            let _ = going_away.send(true);
            handle.stop(true).await;
            server
                .await
                .map_err(|e| ServeError::Server(std::io::Error::other(e)))
        }
    };
    if let Some(admin) = admin {
        admin.stop(true).await;
    }
    housekeeping.abort();
    if let Some(leases) = leases {
        // Released leases pass to the other nodes at once instead of after their TTL.
        let _ = leases_stop.send(true);
        let _ = leases.await;
    }
    hub.shutdown().await;
    if let Some(what) = went_back {
        return Err(ServeError::StoreWentBack(what));
    }
    inbox.sync().await?;
    tracing::info!("stopped; every acknowledged event is durable");
    result?.map_err(ServeError::Server)
}

/// How many connections each HTTP worker may hold: what the open-files limit leaves once
/// the hub's own files and a reserve for those it opens later are counted (see
/// [`crate::files`]), logged with the limit.
/// `elsewhere` descriptors are kept for the admin address's worker and connections.
fn connections_per_worker(
    files: Option<crate::files::Limit>,
    workers: usize,
    elsewhere: u64,
) -> usize {
    let (Some(limit), Some(open)) = (files, crate::files::open_now()) else {
        tracing::warn!("the open-files limit cannot be read: connections are not capped by it");
        return UNCAPPED_PER_WORKER;
    };
    let per_worker =
        crate::files::connection_cap(limit.now.saturating_sub(elsewhere), open, workers);
    tracing::info!(
        limit = limit.now,
        raised_from = limit.was,
        open,
        reserved = crate::files::RESERVED + crate::files::PER_WORKER * workers as u64,
        connections = per_worker * workers,
        "open files: sockets may take what the store's files leave"
    );
    per_worker
}

/// The server of `--admin-listen`, bound, and its addresses: the operators' routes alone,
/// on one worker with [`ADMIN_CONNECTIONS`] connections of its own.
fn admin_server(
    addr: &str,
    state: http::AppState,
) -> Result<(actix_web::dev::Server, Vec<std::net::SocketAddr>), ServeError> {
    let server =
        HttpServer::new(move || actix_web::App::new().configure(http::admin(state.clone())))
            .disable_signals()
            .workers(1)
            .max_connections(ADMIN_CONNECTIONS)
            .shutdown_timeout(1)
            .client_request_timeout(Duration::from_secs(5))
            .bind(addr)
            .map_err(|source| ServeError::Listen {
                addr: addr.to_string(),
                source,
            })?;
    let addrs = server.addrs();
    Ok((server.run(), addrs))
}

/// Forgets rate-limit buckets that are full again, so idle clients cost no memory.
async fn housekeep(state: http::AppState) {
    let mut tick = tokio::time::interval(HOUSEKEEPING_EVERY);
    loop {
        tick.tick().await;
        state.events.housekeep();
        state.pairing.housekeep(Instant::now());
    }
}

/// A store and, with the Redis backend, this node's place in the cluster.
struct Store {
    inbox: Arc<dyn Inbox>,
    meta: Arc<dyn Meta>,
    cluster: Option<Arc<crate::cluster::RedisCluster>>,
    /// With Redis: says what happened once the store is seen to have gone back in time
    /// ([`RedisInbox::went_back`]).
    went_back: Option<tokio::sync::watch::Receiver<Option<String>>>,
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
        // Once a write or fsync failed, a store takes no more writes until the hub restarts.
        metrics
            .store_up
            .set(i64::from(inbox.ready() && meta.ready()));
        let stats = inbox.stats();
        metrics.store_totals(
            stats.syncs.load(Ordering::Relaxed),
            stats.max_batch.load(Ordering::Relaxed),
            meta.syncs(),
            meta.cold_keys(),
        );
    }
}
