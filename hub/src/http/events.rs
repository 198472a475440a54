//! `…/events`: append one event, read one capture, list an inbox's captures.
//!
//! A post is acknowledged only after the engine appended it durably and waited for its
//! verdict: 201 accepted, 422 rejected (the capture is kept and the true state returned),
//! 202 pending (no verdict within the wait), skipped (a protocol this hub does not know)
//! or held (a rock-paper-scissors choice kept for its seat's turn). [`posted_response`]
//! shapes all of them; `…/moves` and `…/resign` answer the same way.

use std::sync::Arc;

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use games::Event;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ErrorBody};
use super::extract::{self, EVENT_BODY_LIMIT};
use super::AppState;
use crate::game::{Posted, SharedState, Verdict};
use crate::inbox::Capture;

/// The answer to a post: `{"capture", "hash", "verdict", "state"}`, and for a rejection
/// also `{"error": REASON, "detail"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct PostedBody {
    /// The refereed reason of a rejection (422), e.g. `stale_seq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The refusal's detail. Present (null when there is none) whenever `error` is, so a
    /// 422 always has the `{"error", "detail"}` shape of every other error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub detail: Option<Option<String>>,
    /// The capture (`shard:pos`, opaque); null for a held choice.
    pub capture: Option<String>,
    /// The event's hash; null for a held choice.
    pub hash: Option<String>,
    /// `accepted`, `rejected`, `pending`, `skipped` or `held`.
    pub verdict: &'static str,
    /// Why a game was skipped (`unknown_protocol`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The game afterwards, as the poster may see it (a `game.state`). Present (null
    /// before the game has a start) whenever the referee has answered (201, 422).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub state: Option<Option<Arc<SharedState>>>,
}

/// The HTTP answer to any post that reached the inbox (or was held).
pub fn posted_response(posted: Posted) -> HttpResponse {
    let status = StatusCode::from_u16(posted.verdict.status()).unwrap_or(StatusCode::ACCEPTED);
    let (error, detail, reason) = match (&posted.refusal, posted.verdict) {
        (Some(r), Verdict::Rejected) => (
            Some(r.reason.code().to_string()),
            Some(r.detail.clone()),
            None,
        ),
        (Some(r), _) => (
            None,
            r.detail.clone().map(Some),
            Some(r.reason.code().to_string()),
        ),
        (None, _) => (None, None, None),
    };
    HttpResponse::build(status).json(PostedBody {
        error,
        detail,
        capture: posted.capture.map(|c| c.to_string()),
        hash: posted.hash,
        verdict: posted.verdict.as_str(),
        reason,
        state: match posted.verdict {
            Verdict::Accepted | Verdict::Rejected => Some(posted.state),
            _ => posted.state.map(Some),
        },
    })
}

/// Append one event.
#[utoipa::path(
    post,
    path = "/v1/inboxes/{inbox}/events",
    tag = "events",
    params(("inbox" = String, Path, description = "inbox name")),
    request_body(content = super::openapi::EventSchema, description = "one event (DESIGN.md section 1), at most 4096 bytes", content_type = "application/json"),
    responses(
        (status = 201, description = "accepted", body = PostedBody),
        (status = 202, description = "pending, skipped or held", body = PostedBody),
        (status = 400, description = "not an event: the section-1 reason", body = ErrorBody),
        (status = 401, description = "unknown seat token", body = ErrorBody),
        (status = 403, description = "a reserved game without its seat's token, or a start the hub writes itself", body = ErrorBody),
        (status = 409, description = "too many captures", body = ErrorBody),
        (status = 413, description = "body over 4096 bytes", body = ErrorBody),
        (status = 415, description = "not application/json", body = ErrorBody),
        (status = 422, description = "rejected by the referee; the capture is kept", body = PostedBody),
        (status = 429, description = "rate limited; see Retry-After", body = ErrorBody),
        (status = 503, description = "the store cannot take writes", body = ErrorBody),
    ),
    security((), ("seat_token" = []))
)]
pub async fn post_event(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let inbox = path.into_inner();
    extract::check_inbox(&inbox)?;
    let caller = extract::caller(&state, &req).await?;
    if caller.auth.as_ref().is_some_and(|a| *a.inbox != *inbox) {
        return Err(ApiError::forbidden("this token belongs to another inbox"));
    }
    extract::charge(&state, &caller).await?;
    let body = extract::read_body(&req, payload, EVENT_BODY_LIMIT).await?;
    let event = Event::parse(&body).map_err(|refusal| {
        state
            .metrics
            .input_refused
            .with_label_values(&[refusal.reason.code()])
            .inc();
        ApiError::input(refusal)
    })?;
    let posted = state
        .hub
        .post_event(&inbox, event, body, caller.auth)
        .await?;
    Ok(posted_response(posted))
}

/// One capture with its verdict.
#[utoipa::path(
    get,
    path = "/v1/inboxes/{inbox}/events/{capture}",
    tag = "events",
    params(
        ("inbox" = String, Path, description = "inbox name"),
        ("capture" = String, Path, description = "a capture as returned by a post"),
    ),
    responses(
        (status = 200, description = "`{capture, game, event, verdict, hash, reason, detail, seat, atMs}`; `hash` is the event's hash whatever the verdict, the one its post answered with (null only for stored bytes that are not an event)", body = Object),
        (status = 404, description = "no such capture in this inbox", body = ErrorBody),
    )
)]
pub async fn get_capture(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, capture) = path.into_inner();
    extract::check_inbox(&inbox)?;
    let capture: Capture = capture
        .parse()
        .map_err(|_| ApiError::not_found("no such capture"))?;
    let item = state.hub.capture(&inbox, capture).await?;
    Ok(HttpResponse::Ok().json(item))
}

/// Query of a capture listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct CaptureQuery {
    /// Only this game's captures.
    pub game: Option<String>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// At most this many (default 100). Taken as 1 to 1000: 0 as 1, more than 1000 as 1000.
    pub limit: Option<usize>,
}

/// Default and largest page of a listing.
pub const PAGE_DEFAULT: usize = 100;
pub const PAGE_MAX: usize = 1000;

/// Captures of an inbox in inbox order.
#[utoipa::path(
    get,
    path = "/v1/inboxes/{inbox}/events",
    tag = "events",
    params(("inbox" = String, Path, description = "inbox name"), CaptureQuery),
    responses(
        (status = 200, description = "`{items: [{capture, event, verdict, reason, seat, …}], next}`, each item as `GET …/events/{capture}` shows it", body = Object),
        (status = 400, description = "a bad cursor or query", body = ErrorBody),
    )
)]
pub async fn list_captures(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<CaptureQuery>,
) -> Result<HttpResponse, ApiError> {
    let inbox = path.into_inner();
    extract::check_inbox(&inbox)?;
    let q = query.into_inner();
    let limit = q.limit.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX);
    let listing = state
        .hub
        .captures(&inbox, q.game.as_deref(), q.after.as_deref(), limit)
        .await?;
    Ok(HttpResponse::Ok().json(listing))
}
