//! The HTTP API of DESIGN.md section 5, on actix-web.
//!
//! [`app`] builds the whole application: the route table below, JSON errors for
//! everything actix would otherwise answer in plain text (unknown routes 404, wrong
//! methods 405, malformed paths and queries 400), a header-size limit, and per-route
//! request metrics. Handlers live one file per group of routes (`events`, `games`,
//! `ops`); each runs the checks of section 5 in order — route and method, token, rate
//! limit, size, content type, JSON, seat rules (the engine), append, verdict — through the
//! small functions of `extract`.
//!
//! This layer holds no game logic and touches neither the inbox nor any actor: every
//! request into a game goes through the engine's [`Hub`] facade. The WebSocket relay
//! (`GET /v1/ws`) and the page at `/` are the `relay` crate's, configured beside these
//! routes in `serve`.

mod error;
mod events;
mod extract;
mod games;
mod openapi;
mod ops;

use std::sync::Arc;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::http::{header, StatusCode};
use actix_web::{guard, web, App, HttpResponse};
use futures_util::future::{self, Either, FutureExt};
use ipnet::IpNet;

pub use error::{ApiError, ErrorBody};
pub use extract::address;
pub use openapi::ApiDoc;

use crate::game::Hub;
use crate::limits::{EventLimiter, PairingLimiter};
use crate::metrics::Metrics;

/// Largest total size of a request's headers; the Authorization header and a few proxies'
/// additions fit many times over.
pub const HEADER_BYTES_LIMIT: usize = 16 * 1024;

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub hub: Hub,
    pub events: Arc<EventLimiter>,
    pub pairing: Arc<PairingLimiter>,
    pub metrics: Arc<Metrics>,
    pub trusted_proxies: Arc<Vec<IpNet>>,
    pub registry: Arc<::games::Registry>,
    /// Set when the hub begins to stop: `/readyz` answers 503 from then on, while the main
    /// address still drains its requests, so a load balancer sends nothing new.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}

/// The application: routes, JSON error handlers and request metrics.
pub fn app(
    state: AppState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let metrics = state.metrics.clone();
    App::new()
        .app_data(web::Data::new(state))
        .app_data(
            web::PathConfig::default().error_handler(|e, _| error::from_actix(e, "bad_request")),
        )
        .app_data(
            web::QueryConfig::default().error_handler(|e, _| error::from_actix(e, "bad_request")),
        )
        .app_data(
            web::JsonConfig::default()
                .limit(extract::REQUEST_BODY_LIMIT)
                .error_handler(|e, _| error::from_actix(e, "bad_json")),
        )
        .configure(routes)
        .default_service(web::to(|| async {
            Err::<HttpResponse, _>(ApiError::not_found("no such route"))
        }))
        .wrap_fn(move |req, srv| {
            let started = Instant::now();
            // The standard methods by name, any other as `other`: a label a client chooses
            // freely (405 for any made-up method) would be a new series each time.
            let method = method_label(req.method());
            let metrics = metrics.clone();
            srv.call(req).map(move |res| {
                if let Ok(res) = &res {
                    let route = res
                        .request()
                        .match_pattern()
                        .unwrap_or_else(|| "unmatched".into());
                    metrics
                        .http_requests
                        .with_label_values(&[method, &route, res.status().as_str()])
                        .inc();
                    // A failure that is the hub's (a store down, say), with where it met
                    // it: the path names the inbox and game; tokens are never in a path.
                    if res.status().is_server_error() {
                        let error = res.response().error().map(ToString::to_string);
                        tracing::warn!(
                            method,
                            path = res.request().path(),
                            error = error.as_deref().unwrap_or(""),
                            "request failed"
                        );
                    }
                    metrics
                        .http_duration
                        .with_label_values(&[&route])
                        .observe(started.elapsed().as_secs_f64());
                }
                res
            })
        })
        .wrap_fn(|req, srv| {
            let private = private_answer(&req);
            srv.call(req).map(move |res| {
                res.map(|mut res| {
                    if private {
                        res.headers_mut().insert(
                            header::CACHE_CONTROL,
                            header::HeaderValue::from_static("no-store"),
                        );
                    }
                    res
                })
            })
        })
        .wrap_fn(|req, srv| {
            let size: usize = req
                .headers()
                .iter()
                .map(|(name, value)| name.as_str().len() + value.len())
                .sum();
            if size > HEADER_BYTES_LIMIT {
                let err = ApiError::new(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "headers_too_large",
                    format!("the request headers are over {HEADER_BYTES_LIMIT} bytes"),
                );
                let res = req.error_response(err);
                Either::Left(future::ready(Ok(res.map_into_right_body())))
            } else {
                Either::Right(srv.call(req).map(|r| r.map(|r| r.map_into_left_body())))
            }
        })
}

/// The operators' application of `--admin-listen`: `/healthz`, `/readyz` and `/metrics`
/// alone, the same handlers as the main application's (`App::new().configure(admin(..))`).
pub fn admin(state: AppState) -> impl FnOnce(&mut web::ServiceConfig) {
    move |cfg| {
        cfg.app_data(web::Data::new(state));
        ops_routes(cfg);
        cfg.default_service(web::to(|| async {
            Err::<HttpResponse, _>(ApiError::not_found(
                "the admin address serves /healthz, /readyz and /metrics only",
            ))
        }));
    }
}

/// Whether the answer to `req` is one seat's, to be kept by no cache: a request with a
/// seat token (a seat's view holds its own pending choice) or a POST (a create or a pair
/// answers with a seat token, a fresh code with a pairing code, a move with the mover's
/// view). Without `no-store` a browser's cache may keep a seat's view on disk, where the
/// next user of the machine reads it. The spectator's reads stay as they are: public.
fn private_answer(req: &ServiceRequest) -> bool {
    req.method() == actix_web::http::Method::POST
        || req.headers().contains_key(header::AUTHORIZATION)
}

/// The `method` label of `pipehub_http_requests_total`: one of a closed set.
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// A resource whose unmatched methods answer 405 in JSON with an `Allow` header.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move || async move {
        Err::<HttpResponse, _>(ApiError::method_not_allowed(allow))
    }))
}

/// A GET route that answers HEAD too, as HTTP asks of every GET (a load balancer's or an
/// uptime monitor's probe is often a HEAD): the same handler, and the server sends the
/// headers alone.
fn get() -> actix_web::Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// The route table of DESIGN.md section 5 (all but `GET /v1/ws`).
fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        resource("/v1/inboxes/{inbox}/events", "GET, HEAD, POST")
            .route(web::post().to(events::post_event))
            .route(get().to(events::list_captures)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/events/{capture}", "GET, HEAD")
            .route(get().to(events::get_capture)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games", "GET, HEAD, POST")
            .route(get().to(games::list_games))
            .route(web::post().to(games::create_game)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}", "GET, HEAD, DELETE")
            .route(get().to(games::game_state))
            .route(web::delete().to(games::cancel_game)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}/export", "GET, HEAD")
            .route(get().to(games::export_game)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}/code", "POST")
            .route(web::post().to(games::new_code)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}/moves", "POST")
            .route(web::post().to(games::post_move)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}/resign", "POST")
            .route(web::post().to(games::resign)),
    )
    .service(
        resource("/v1/inboxes/{inbox}/games/{game}/view", "GET, HEAD")
            .route(get().to(games::seat_view)),
    )
    .service(resource("/v1/pair", "POST").route(web::post().to(games::pair)))
    .service(resource("/v1/protocols", "GET, HEAD").route(get().to(ops::protocols)))
    .service(resource("/v1/openapi.json", "GET, HEAD").route(get().to(ops::openapi)))
    .configure(ops_routes);
}

/// `/metrics`, `/healthz` and `/readyz`: on the main address, and alone on the admin one.
fn ops_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/metrics", "GET, HEAD").route(get().to(ops::metrics)))
        .service(resource("/healthz", "GET, HEAD").route(get().to(ops::healthz)))
        .service(resource("/readyz", "GET, HEAD").route(get().to(ops::readyz)));
}
