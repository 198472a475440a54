//! Operators' and discovery routes: `/metrics`, `/healthz`, `/readyz`, `/v1/protocols`
//! and `/v1/openapi.json`.
//!
//! `/healthz` says the process answers; `/readyz` says it can take writes (the store is
//! ready) and is not stopping, which is what a load balancer should route on. Neither
//! touches a game.

use actix_web::{web, HttpResponse};
use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

use super::error::ErrorBody;
use super::AppState;

/// Prometheus text format: every `pipehub_*` series and `process_*`.
#[utoipa::path(get, path = "/metrics", tag = "operators",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    state.hub.refresh_gauges();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(state.metrics.render())
}

/// `{"status": "ok"}` or `{"status": "unavailable"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "operators",
    responses((status = 200, description = "alive", body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health { status: "ok" })
}

/// The hub can take writes.
#[utoipa::path(get, path = "/readyz", tag = "operators",
    responses((status = 200, description = "ready", body = Health),
              (status = 503, description = "the store cannot take writes", body = ErrorBody)))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let unready = |detail: &str| {
        HttpResponse::ServiceUnavailable().json(ErrorBody {
            error: "unavailable".into(),
            detail: Some(detail.into()),
        })
    };
    if state.stopping.load(std::sync::atomic::Ordering::Relaxed) {
        unready("the hub is stopping")
    } else if state.hub.ready() {
        HttpResponse::Ok().json(Health { status: "ok" })
    } else {
        unready("the store cannot take writes")
    }
}

/// One protocol this hub referees.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtocolInfo {
    /// The canonical ref, e.g. `pipehub:tic-tac-toe`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Other refs it answers to.
    pub aliases: Vec<String>,
    /// The protocol id (SHA-256 of the spec's contract subset).
    pub protocol_id: String,
    /// True for the protocol of starts that name none.
    pub default: bool,
    /// The spec document.
    #[schema(value_type = Object)]
    pub spec: Value,
}

/// `{"items": [ProtocolInfo…], "next": null}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProtocolList {
    pub items: Vec<ProtocolInfo>,
    pub next: Option<String>,
}

/// Every protocol with its spec and protocol id.
#[utoipa::path(get, path = "/v1/protocols", tag = "games",
    responses((status = 200, description = "the built-in protocols", body = ProtocolList)))]
pub async fn protocols(state: web::Data<AppState>) -> HttpResponse {
    let default = state.registry.default_ref();
    let items = state
        .registry
        .iter()
        .map(|p| {
            let refs = p.refs();
            ProtocolInfo {
                reference: refs.first().copied().unwrap_or_default().to_string(),
                aliases: refs.iter().skip(1).map(|r| r.to_string()).collect(),
                protocol_id: p.id().to_string(),
                default: refs.contains(&default),
                spec: p.spec().clone(),
            }
        })
        .collect();
    HttpResponse::Ok().json(ProtocolList { items, next: None })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "operators",
    responses((status = 200, description = "the OpenAPI 3 document of every route", body = Object)))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(super::ApiDoc::openapi())
}
