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
//! That order is kept in one place, [`Lifecycle::stop`] (`lifecycle.rs`); the store is
//! opened in `store.rs`. [`run`] reads as the list of what a hub is made of: the store,
//! the engine and its rooms, the rate limits, in a cluster the leases, and the servers.
//!
//! This module owns no logic of its own: it builds things and hands them to one another.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::HttpServer;
use tokio::sync::watch;

mod connections;
mod lifecycle;
mod metered;
mod store;

use crate::cluster::RedisCluster;
use crate::config::{Config, ConfigError};
use crate::game::{Hub, HubConfig, HubError};
use crate::http;
use crate::inbox::{Inbox, StoreError};
use crate::limits::{EventLimiter, PairingLimiter};
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::relay::HubRooms;
use lifecycle::{ClusterTasks, Lifecycle};
use store::Store;

/// How long in-flight requests get to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Connections a worker may hold where the open-files limit cannot be read: actix-web's
/// own default.
const UNCAPPED_PER_WORKER: usize = 25_600;
/// Connections the admin address serves at once: probes and scrapes, a few at a time.
const ADMIN_CONNECTIONS: usize = 16;
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
    store::make_data_dir(&config)?;
    let secret = config.secret_bytes()?;
    config.check_secret(&secret)?;
    let metrics = Arc::new(Metrics::new()?);
    let Store {
        inbox,
        meta,
        cluster,
        went_back,
    } = store::open(&config, &metrics, &secret).await?;

    let registry = games::Registry::builtin()
        .with_default(&config.default_protocol)
        .ok_or_else(|| ConfigError::UnknownProtocol(config.default_protocol.clone()))?;
    let embedded_meta = cluster.is_none().then(|| meta.clone());
    let engine = (registry.clone(), secret, inbox.clone(), meta);
    let (hub, ws_rooms) = open_hub(&config, engine, &metrics, cluster.as_ref()).await?;
    let (events, pairing) = limiters(&config, cluster.as_ref());
    let cluster = cluster.map(|c| start_cluster(c, &ws_rooms, &hub));

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
    let listening = listen(&config, &state, ws_rooms, files)?;
    let handle = listening.server.handle();
    let lifecycle = Lifecycle {
        stopping: state.stopping.clone(),
        going_away: listening.going_away,
        handle,
        server: actix_rt::spawn(listening.server),
        admin: listening.admin,
        housekeeping,
        cluster,
        hub,
        inbox,
        embedded_meta,
    };
    lifecycle.serve(shutdown, went_back).await
}

/// What the engine is opened on: the protocols, the hub secret, the store.
type EngineParts = (games::Registry, Vec<u8>, Arc<dyn Inbox>, Arc<dyn Meta>);

/// Opens the engine on the store, with the WebSocket rooms its publications go to (and, in
/// a cluster, the other nodes' rooms too).
async fn open_hub(
    config: &Config,
    (registry, secret, inbox, meta): EngineParts,
    metrics: &Arc<Metrics>,
    cluster: Option<&Arc<RedisCluster>>,
) -> Result<(Hub, ::relay::Rooms), ServeError> {
    let mut hub_config = HubConfig::new(registry, secret);
    // 0 is no cap, as for the per-address caps (a cap of 0 would refuse every game).
    hub_config.max_open_games = Some(config.max_open_games).filter(|n| *n > 0);
    hub_config.max_captures_per_game = Some(config.max_captures_per_game).filter(|n| *n > 0);
    hub_config.cluster = cluster
        .cloned()
        .map(|c| c as crate::cluster::SharedOwnership);
    let ws_rooms = ::relay::Rooms::new();
    let mut rooms = HubRooms::new(ws_rooms.clone());
    if let Some(c) = cluster {
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
    let hub = Hub::open(hub_config, inbox, meta, metrics.clone(), rooms).await?;
    Ok((hub, ws_rooms))
}

/// The rate limits of events and of pairing attempts; in a cluster every node charges the
/// same buckets, kept in Redis.
fn limiters(
    config: &Config,
    cluster: Option<&Arc<RedisCluster>>,
) -> (EventLimiter, PairingLimiter) {
    let mut events = EventLimiter::new(config.rate_limit);
    let mut pairing = PairingLimiter::new(config.pairing_limit);
    if let Some(c) = cluster {
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
    (events, pairing)
}

/// A cluster node's own tasks: it feeds its rooms from the other nodes' publications, and
/// takes and renews shard leases, until told to stop.
fn start_cluster(c: Arc<RedisCluster>, ws_rooms: &::relay::Rooms, hub: &Hub) -> ClusterTasks {
    let (stop, stop_rx) = watch::channel(false);
    tracing::info!(node = c.node(), "cluster node: taking shard leases");
    tokio::spawn(crate::cluster::relay::subscribe(
        c.url().to_string(),
        c.node().to_string(),
        ws_rooms.clone(),
        hub.clone(),
        stop_rx.clone(),
    ));
    let leases = tokio::spawn(c.run(hub.clone(), stop_rx));
    ClusterTasks { stop, leases }
}

/// The HTTP servers, bound and announced: the main one (routes of `/v1`, the WebSocket
/// relay and the page), not yet started, and the admin one's handle, started.
struct Listening {
    server: actix_web::dev::Server,
    admin: Option<actix_web::dev::ServerHandle>,
    /// Tells the WebSocket sessions the hub is going away.
    going_away: watch::Sender<bool>,
}

/// Binds the servers and prints their addresses on standard output, the main address's
/// first, then the admin address's.
fn listen(
    config: &Config,
    state: &http::AppState,
    ws_rooms: ::relay::Rooms,
    files: Option<crate::files::Limit>,
) -> Result<Listening, ServeError> {
    let app_state = state.clone();
    let (going_away, ws_shutdown) = watch::channel(false);
    let ws = crate::relay::relay(
        state,
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
            state
                .metrics
                .rate_limited
                .with_label_values(&["connections"]),
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
    Ok(Listening {
        server: server.run(),
        admin,
        going_away,
    })
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
