//! A running hub's lifecycle: what [`super::run`] started, held together until the hub
//! stops, and stopped in the one order that keeps acknowledged events (see [`super`]):
//! the HTTP servers first, so that no request is cut off after its event was appended,
//! then the housekeeping and a cluster node's leases, then the engine, and the store's
//! sync last.
//!
//! What this module deliberately does not do: decide when to stop. That is the caller's
//! `shutdown` future, the main server ending by itself, or the store seen gone back in
//! time; this type only waits for the first of them and then stops everything.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};

use super::ServeError;
use crate::game::Hub;
use crate::inbox::{Inbox, StoreError};
use crate::meta::Meta;

/// A cluster node's tasks that stop with it: the shard leases (and what follows them).
pub(super) struct ClusterTasks {
    /// Tells the leases, and the subscription to other nodes' publications, to stop.
    pub(super) stop: watch::Sender<bool>,
    pub(super) leases: JoinHandle<()>,
}

/// Everything a running hub stops, in [`Lifecycle::stop`]'s order.
pub(super) struct Lifecycle {
    /// `/readyz` answers 503 once this is set.
    pub(super) stopping: Arc<AtomicBool>,
    /// Tells the WebSocket sessions the hub is going away.
    pub(super) going_away: watch::Sender<bool>,
    pub(super) handle: ServerHandle,
    pub(super) server: JoinHandle<std::io::Result<()>>,
    pub(super) admin: Option<ServerHandle>,
    pub(super) housekeeping: JoinHandle<()>,
    pub(super) cluster: Option<ClusterTasks>,
    pub(super) hub: Hub,
    pub(super) inbox: Arc<dyn Inbox>,
    /// The embedded meta store, whose failure (unlike Redis being away) is for good.
    pub(super) embedded_meta: Option<Arc<dyn Meta>>,
}

/// Why a hub stops.
pub(super) enum Ended {
    /// The main server stopped by itself (or its task failed).
    Server(Result<std::io::Result<()>, JoinError>),
    /// The caller's `shutdown` resolved.
    Shutdown,
    /// The store was seen to have gone back in time: what was seen.
    StoreWentBack(String),
}

impl Lifecycle {
    /// Serves until `shutdown` resolves, the main server ends, or (with Redis) `went_back`
    /// says the store went back in time; then stops.
    pub(super) async fn serve(
        mut self,
        shutdown: impl Future<Output = ()>,
        went_back: Option<watch::Receiver<Option<String>>>,
    ) -> Result<(), ServeError> {
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
        let ended = tokio::select! {
            result = &mut self.server => Ended::Server(result),
            () = shutdown => Ended::Shutdown,
            what = store_went_back => Ended::StoreWentBack(what),
        };
        self.stop(ended).await
    }

    /// Stops the hub: the main server (unless it `ended` by itself) after finishing the
    /// requests in flight, the admin server, the housekeeping, a cluster node's leases and
    /// the engine; then, unless the store went back in time, syncs the store.
    pub(super) async fn stop(self, ended: Ended) -> Result<(), ServeError> {
        let Lifecycle {
            stopping,
            going_away,
            handle,
            server,
            admin,
            housekeeping,
            cluster,
            hub,
            inbox,
            embedded_meta,
        } = self;
        let (served, went_back) = match ended {
            Ended::Server(joined) => (Some(joined), None),
            Ended::Shutdown => (None, None),
            Ended::StoreWentBack(what) => (None, Some(what)),
        };
        let result = match served {
            Some(joined) => joined.map_err(|e| ServeError::Server(std::io::Error::other(e))),
            None => {
                tracing::info!("stopping: finishing requests in flight");
                // Not ready from now on (the admin address answers a while longer): a load
                // balancer that polls `/readyz` stops sending new clients while these drain.
                stopping.store(true, Ordering::Relaxed);
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
        if let Some(ClusterTasks { stop, leases }) = cluster {
            // Released leases pass to the other nodes at once instead of after their TTL.
            let _ = stop.send(true);
            let _ = leases.await;
        }
        hub.shutdown().await;
        if let Some(what) = went_back {
            return Err(ServeError::StoreWentBack(what));
        }
        inbox.sync().await?;
        // An embedded store that stopped taking writes ends the process in error,
        // whichever part failed: the inbox does above, in its sync; the seats' and codes'
        // store here.
        if embedded_meta.is_some_and(|meta| !meta.ready()) {
            return Err(ServeError::Store(StoreError::Unavailable(
                "the meta store (seats and pairing codes) stopped taking writes after a \
                 failed write; every change it acknowledged is durable"
                    .into(),
            )));
        }
        tracing::info!("stopped; every acknowledged event is durable");
        result?.map_err(ServeError::Server)
    }
}
