//! `GET /v1/ws`: the upgrade from HTTP to a relay session.
//!
//! [`Relay`] is what every worker shares: the [`Games`] service and the [`Rooms`].
//! [`configure`] mounts the route in any actix-web app, so the hub's HTTP app gains the
//! relay with one call. A request that is not a WebSocket upgrade, or another method,
//! is answered in the same JSON error shape as the rest of the API.
//!
//! The endpoint does nothing but the handshake, and the per-client cap on open sockets
//! ([`SocketCap`]); everything after it is the session's.

use std::sync::Arc;
use std::time::Duration;

use actix_web::{http::header, web, HttpRequest, HttpResponse};
use serde_json::json;
use tokio::sync::watch;

use crate::cap::SocketCap;
use crate::rooms::Rooms;
use crate::service::Games;
use crate::session;

/// The client address of a request, as the hub reckons it (through its trusted proxies).
pub type AddressOf = dyn Fn(&HttpRequest) -> std::net::IpAddr + Send + Sync;

/// The relay as the HTTP app holds it. Cheap to clone.
#[derive(Clone)]
pub struct Relay {
    pub(crate) games: Arc<dyn Games>,
    pub(crate) rooms: Rooms,
    pub(crate) heartbeat: Heartbeat,
    /// Turns true as the server shuts down: every session then closes as "going away".
    pub(crate) shutdown: Option<watch::Receiver<bool>>,
    /// The most sockets one client may hold open, if any.
    pub(crate) cap: Option<(SocketCap, Arc<AddressOf>)>,
}

/// How often a session pings its client, and how long a silent client is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Default for Heartbeat {
    fn default() -> Heartbeat {
        Heartbeat {
            interval: session::HEARTBEAT_INTERVAL,
            timeout: session::CLIENT_TIMEOUT,
        }
    }
}

impl Relay {
    pub fn new(games: Arc<dyn Games>, rooms: Rooms) -> Relay {
        Relay {
            games,
            rooms,
            heartbeat: Heartbeat::default(),
            shutdown: None,
            cap: None,
        }
    }

    /// The same relay with a shutdown signal: once it turns true, each session answers the
    /// command it is running, takes no more, and closes its socket with 1001 (going away),
    /// so that clients reconnect (to another node, in a cluster) at once rather than when
    /// the server's grace period runs out.
    pub fn with_shutdown(mut self, shutdown: watch::Receiver<bool>) -> Relay {
        self.shutdown = Some(shutdown);
        self
    }

    /// The same relay with another heartbeat (tests use short ones).
    pub fn with_heartbeat(mut self, heartbeat: Heartbeat) -> Relay {
        self.heartbeat = heartbeat;
        self
    }

    /// The same relay with a cap on the sockets one client may hold open at once; `address`
    /// says whose a request is.
    pub fn with_socket_cap(mut self, cap: SocketCap, address: Arc<AddressOf>) -> Relay {
        self.cap = Some((cap, address));
        self
    }

    pub fn rooms(&self) -> &Rooms {
        &self.rooms
    }
}

/// The route of the relay, for `App::configure`.
pub fn configure(relay: Relay) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(relay)).service(
            web::resource("/v1/ws")
                .route(web::get().to(ws))
                .default_service(web::to(|| async {
                    HttpResponse::MethodNotAllowed()
                        .insert_header((header::ALLOW, "GET"))
                        .json(json!({"error": "method_not_allowed", "detail": "allowed: GET"}))
                })),
        );
    }
}

/// The handler of `GET /v1/ws`: completes the handshake and starts the session.
#[utoipa::path(get, path = "/v1/ws", tag = "relay",
    description = "The WebSocket relay: JSON text frames tagged by `t` (hello, game.move, \
                   game.resign, game.board, game.subscribe from the client; hello.ok, \
                   game.state, game.refused, error from the hub), as in DESIGN.md section 5.",
    responses((status = 101, description = "switched to the WebSocket relay"),
              (status = 400, description = "not a WebSocket upgrade"),
              (status = 429, description = "this client holds the most open sockets it may")))]
pub async fn ws(req: HttpRequest, body: web::Payload, relay: web::Data<Relay>) -> HttpResponse {
    match actix_ws::handle(&req, body) {
        Ok((response, socket, stream)) => {
            // Refused after the handshake was checked, so a request that is no upgrade is
            // told so whatever its client holds; nothing was sent yet, and the socket and
            // its stream are dropped unused.
            let admitted = match &relay.cap {
                None => None,
                Some((cap, address)) => match cap.admit(address(&req)) {
                    Some(admitted) => Some(admitted),
                    None => return too_many_sockets(&relay, cap),
                },
            };
            actix_web::rt::spawn(session::run(
                relay.get_ref().clone(),
                socket,
                stream,
                admitted,
            ));
            response
        }
        Err(e) => HttpResponse::BadRequest().json(json!({
            "error": "bad_request",
            "detail": format!("this route speaks WebSocket only: {e}"),
        })),
    }
}

/// 429 `rate_limited`: the client holds the most sockets it may. Retry-After is a guess,
/// since no budget refills: a slot comes back only when one of its sockets closes.
fn too_many_sockets(relay: &Relay, cap: &SocketCap) -> HttpResponse {
    relay.games.socket_refused();
    HttpResponse::TooManyRequests()
        .insert_header((header::RETRY_AFTER, RETRY_SOCKET_SECS.to_string()))
        .json(json!({
            "error": "rate_limited",
            "detail": format!(
                "sockets: this client holds as many open sockets as it may ({}); close one first",
                cap.per_client()
            ),
        }))
}

/// The Retry-After of a socket refused for its client's cap.
const RETRY_SOCKET_SECS: u64 = 5;
