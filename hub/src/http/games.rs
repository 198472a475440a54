//! `…/games…` and `/v1/pair`: seated play and game reads.
//!
//! Creating a game, posting a hub-held seat's move and resigning spend the caller's event
//! budget; reads, pairing, cancelling and fresh codes do not (DESIGN.md section 5's
//! counting rule). Pairing has its own budget of *failed* attempts per client address, so
//! codes cannot be guessed while an honest guest is never slowed down.

use actix_web::http::header::ContentType;
use actix_web::{web, HttpRequest, HttpResponse};
use games::Viewer;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ErrorBody};
use super::events::{posted_response, PostedBody, PAGE_DEFAULT, PAGE_MAX};
use super::extract::{self, REQUEST_BODY_LIMIT};
use super::AppState;
use crate::game::{CreateGame, HubError, Phase, SharedState};
use crate::limits::Person;

/// `POST /v1/inboxes/{inbox}/games`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGameBody {
    /// A protocol ref, e.g. `pipehub:connect-four`; the hub's default when absent.
    pub protocol: Option<String>,
    /// The protocol's rules (its defaults when absent).
    #[schema(value_type = Option<Object>)]
    pub rules: Option<Map<String, Value>>,
    /// Signed play (default true).
    pub signed: Option<bool>,
    /// X's Ed25519 public key (64 lowercase hex, a point of large order) when X's agent
    /// holds its own key.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub key: Option<String>,
}

/// `POST /v1/pair`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PairBody {
    /// The 8-character pairing code.
    pub code: String,
    /// O's Ed25519 public key (64 lowercase hex, a point of large order) when O's agent
    /// holds its own key.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub key: Option<String>,
}

/// Query of a game listing.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub struct GamesQuery {
    /// `waiting`, `paired` or `started`.
    #[param(schema_with = phase_schema)]
    pub phase: Option<String>,
    /// The `next` cursor of the previous page.
    pub after: Option<String>,
    /// At most this many (default 100). Taken as 1 to 1000: 0 as 1, more than 1000 as 1000.
    pub limit: Option<usize>,
}

fn phase_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["waiting", "paired", "started"]))
        .build()
}

/// Games of an inbox, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/inboxes/{inbox}/games", tag = "games",
    params(("inbox" = String, Path, description = "inbox name"), GamesQuery),
    responses((status = 200, description = "`{items: [{game, protocol, phase, result}], next}`", body = Object),
              (status = 400, description = "a bad phase, cursor or limit", body = ErrorBody)))]
pub async fn list_games(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<GamesQuery>,
) -> Result<HttpResponse, ApiError> {
    let inbox = path.into_inner();
    extract::check_inbox(&inbox)?;
    let q = query.into_inner();
    let phase = match q.phase.as_deref() {
        None => None,
        Some(p) => Some(
            Phase::parse(p)
                .ok_or_else(|| ApiError::bad_request("phase is one of waiting, paired, started"))?,
        ),
    };
    let limit = q.limit.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX);
    let listing = state
        .hub
        .games(&inbox, phase, q.after.as_deref(), limit)
        .await?;
    Ok(HttpResponse::Ok().json(listing))
}

/// Create a seated game: seat X, reserve the id, get a pairing code. Sent with an
/// `Idempotency-Key` (16 to 128 visible ASCII characters, random), the same create may be
/// sent again with the same key for ten minutes while the game waits for its guest, and is
/// answered with the same game, a fresh token for X and a fresh code (the one the lost
/// answer carried dies): a host whose answer was lost neither loses its game nor makes a
/// second one.
#[utoipa::path(post, path = "/v1/inboxes/{inbox}/games", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"),
           ("Idempotency-Key" = Option<String>, Header,
            description = "16 to 128 visible ASCII characters drawn at random for this create; sending the same create again with it answers it again")),
    request_body = CreateGameBody,
    responses((status = 201, description = "`{inbox, game, seat: X, token, pairingCode, expiresAt}`", body = Object),
              (status = 400, description = "malformed body, or a malformed Idempotency-Key", body = ErrorBody),
              (status = 409, description = "too many open games; or, for a create sent again, its game is paired", body = ErrorBody),
              (status = 422, description = "bad rules or unknown protocol; idempotency_key_reused: the key came with another create, or more than ten minutes after its game was made", body = ErrorBody),
              (status = 429, description = "rate limited", body = ErrorBody),
              (status = 503, description = "the store cannot take writes", body = ErrorBody)))]
pub async fn create_game(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let inbox = path.into_inner();
    extract::check_inbox(&inbox)?;
    // A token sent along must still open a seat (401 otherwise, as anywhere), but the game
    // is its client address's, charged to and capped for that address: every seat token
    // is minted by a create or a pair, so with the token as the person each new game's
    // token was a fresh budget and a fresh cap (docs/decisions.md).
    extract::caller(&state, &req).await?;
    let host = extract::Caller {
        auth: None,
        person: Person::address(extract::address(&state, &req)),
    };
    extract::charge(&state, &host).await?;
    let body = extract::read_body(&req, payload, REQUEST_BODY_LIMIT).await?;
    let body: CreateGameBody = extract::parse_request(&body)?;
    let repeat_key = extract::idempotency_key(&req)?;
    let create = CreateGame {
        protocol: body.protocol,
        rules: body.rules,
        signed: body.signed.unwrap_or(true),
        key: body.key,
    };
    let created = state
        .hub
        .create_game_again(&inbox, create, &host.person_key(), repeat_key)
        .await?;
    Ok(HttpResponse::Created().json(created))
}

/// Redeem a pairing code: seat O. Sent with an `Idempotency-Key` (16 to 128 visible ASCII
/// characters, random), the same pair may be sent again with the same code and key for ten
/// minutes, and is answered again with a fresh token for the same seat: a guest whose
/// answer was lost is not shut out of its game. Without one, a second try is 410.
#[utoipa::path(post, path = "/v1/pair", tag = "seats", request_body = PairBody,
    params(("Idempotency-Key" = Option<String>, Header,
            description = "16 to 128 visible ASCII characters drawn at random for this pair; sending the same pair again with it answers it again")),
    responses((status = 200, description = "`{inbox, game, seat: O, token}`", body = Object),
              (status = 404, description = "unknown code", body = ErrorBody),
              (status = 400, description = "bad JSON, or a malformed Idempotency-Key", body = ErrorBody),
              (status = 410, description = "code_used (but for a pair sent again with its Idempotency-Key) or code_expired", body = ErrorBody),
              (status = 429, description = "too many failed attempts from this address", body = ErrorBody),
              (status = 503, description = "the store cannot take writes", body = ErrorBody)))]
pub async fn pair(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // Failed pairings count per client: an IPv4 address or an IPv6 /64. Each attempt takes
    // its token as it begins and gives it back unless its code failed (limits.rs).
    let address = crate::limits::client_of(extract::address(&state, &req));
    let attempt = state
        .pairing
        .begin(address, crate::limits::PAIRING_WAIT)
        .await
        .map_err(|limited| {
            state
                .metrics
                .rate_limited
                .with_label_values(&["pairing"])
                .inc();
            ApiError::rate_limited(limited, "failed pairing attempts")
        })?;
    let outcome: Result<_, (Option<&str>, ApiError)> = async {
        let body = extract::read_body(&req, payload, REQUEST_BODY_LIMIT)
            .await
            .map_err(|e| (None, e))?;
        let body: PairBody = extract::parse_request(&body).map_err(|e| (None, e))?;
        let repeat_key = extract::idempotency_key(&req).map_err(|e| (None, e))?;
        state
            .hub
            .pair(&body.code, body.key, repeat_key)
            .await
            .map_err(|err| (failed_code(&err), err.into()))
    }
    .await;
    match outcome {
        Ok(paired) => {
            attempt.settle(false).await;
            Ok(HttpResponse::Ok().json(paired))
        }
        Err((Some(why), err)) => {
            attempt.settle(true).await;
            state
                .metrics
                .pairing_failures
                .with_label_values(&[why])
                .inc();
            Err(err)
        }
        Err((None, err)) => {
            attempt.settle(false).await;
            Err(err)
        }
    }
}

/// Why a pairing attempt counts as a failure (a code unknown, used or expired), as the
/// `pipehub_pairing_failures_total` label names it; `None` for any other error.
fn failed_code(err: &HubError) -> Option<&'static str> {
    match err {
        HubError::NotFound(_) => Some("unknown"),
        HubError::CodeUsed => Some("used"),
        HubError::CodeExpired => Some("expired"),
        _ => None,
    }
}

/// The verified state of a game, as a spectator sees it.
#[utoipa::path(get, path = "/v1/inboxes/{inbox}/games/{game}", tag = "games",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 200, description = "a `game.state` with the spectator view", body = Object),
              (status = 404, description = "no such game", body = ErrorBody)))]
pub async fn game_state(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    extract::check_inbox(&inbox)?;
    let view = state.hub.state(&inbox, &game, Viewer::Spectator).await?;
    state_body(&view)
}

/// A seat's own state and board.
#[utoipa::path(get, path = "/v1/inboxes/{inbox}/games/{game}/view", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 200, description = "a `game.state` for the token's seat", body = Object),
              (status = 401, description = "no or unknown token", body = ErrorBody),
              (status = 403, description = "a token of another game", body = ErrorBody)),
    security(("seat_token" = [])))]
pub async fn seat_view(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    let (_, auth) = extract::seat_of(&state, &req, &inbox, &game).await?;
    let view = state
        .hub
        .state(&inbox, &game, Viewer::Seat(auth.seat))
        .await?;
    state_body(&view)
}

/// A state read as the body of a response: the text its WebSocket frame holds (a state
/// read again unchanged is kept with its frame), not serialized once more.
fn state_body(view: &SharedState) -> Result<HttpResponse, ApiError> {
    let frame = view
        .frame()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(frame.state_json()))
}

/// The accepted chain as JSON Lines, which `pipehub verify` accepts.
#[utoipa::path(get, path = "/v1/inboxes/{inbox}/games/{game}/export", tag = "games",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 200, description = "one event per line", body = String, content_type = "application/x-ndjson"),
              (status = 404, description = "no such game", body = ErrorBody)))]
pub async fn export_game(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    extract::check_inbox(&inbox)?;
    let lines = state.hub.export(&inbox, &game).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .body(lines))
}

/// Cancel an unpaired game (X's token).
#[utoipa::path(delete, path = "/v1/inboxes/{inbox}/games/{game}", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 204, description = "cancelled"),
              (status = 403, description = "not X of this game", body = ErrorBody),
              (status = 409, description = "already paired", body = ErrorBody)),
    security(("seat_token" = [])))]
pub async fn cancel_game(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    let (_, auth) = extract::seat_of(&state, &req, &inbox, &game).await?;
    state.hub.cancel(&auth).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A fresh pairing code for an unpaired game (X's token); the old one dies.
#[utoipa::path(post, path = "/v1/inboxes/{inbox}/games/{game}/code", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 200, description = "`{inbox, game, pairingCode, expiresAt}`", body = Object),
              (status = 403, description = "not X of this game", body = ErrorBody),
              (status = 409, description = "already paired", body = ErrorBody)),
    security(("seat_token" = [])))]
pub async fn new_code(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    let (_, auth) = extract::seat_of(&state, &req, &inbox, &game).await?;
    Ok(HttpResponse::Ok().json(state.hub.new_code(&auth).await?))
}

/// A hub-held seat's move: `{"move"}` (rock-paper-scissors: `{"choice"}`).
#[utoipa::path(post, path = "/v1/inboxes/{inbox}/games/{game}/moves", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    request_body(content = super::openapi::MoveBodySchema, description = "`{\"move\": …}` or `{\"choice\": …}`", content_type = "application/json"),
    responses((status = 201, description = "accepted", body = PostedBody),
              (status = 202, description = "pending or held", body = PostedBody),
              (status = 403, description = "a token of another game", body = ErrorBody),
              (status = 409, description = "agent_held, not_started or too_many_captures", body = ErrorBody),
              (status = 422, description = "rejected by the referee (the capture is kept), or a choice refused before the inbox", body = super::openapi::MoveRefusedSchema),
              (status = 429, description = "rate limited", body = ErrorBody),
              (status = 503, description = "the store cannot take writes", body = ErrorBody)),
    security(("seat_token" = [])))]
pub async fn post_move(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    let (caller, auth) = extract::seat_of(&state, &req, &inbox, &game).await?;
    extract::charge(&state, &caller).await?;
    let body = extract::read_body(&req, payload, REQUEST_BODY_LIMIT).await?;
    let body: Map<String, Value> = extract::parse_request(&body)?;
    let posted = state.hub.post_move(&auth, Value::Object(body)).await?;
    Ok(posted_response(posted))
}

/// Resign the token's seat.
#[utoipa::path(post, path = "/v1/inboxes/{inbox}/games/{game}/resign", tag = "seats",
    params(("inbox" = String, Path, description = "inbox name"), ("game" = String, Path, description = "game id")),
    responses((status = 201, description = "accepted", body = PostedBody),
              (status = 401, description = "no or unknown token", body = ErrorBody),
              (status = 403, description = "a token of another game", body = ErrorBody),
              (status = 409, description = "agent_held, not_started or too_many_captures", body = ErrorBody),
              (status = 422, description = "rejected (e.g. after_end)", body = PostedBody),
              (status = 429, description = "rate limited", body = ErrorBody),
              (status = 503, description = "the store cannot take writes", body = ErrorBody)),
    security(("seat_token" = [])))]
pub async fn resign(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse, ApiError> {
    let (inbox, game) = path.into_inner();
    let (caller, auth) = extract::seat_of(&state, &req, &inbox, &game).await?;
    extract::charge(&state, &caller).await?;
    Ok(posted_response(state.hub.resign(&auth).await?))
}
