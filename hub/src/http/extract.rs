//! The checks every request into a game goes through, as small functions the handlers
//! call in the order of DESIGN.md section 5: token, rate limit, size, content type, JSON.
//!
//! actix's own extractors (`web::Json`, `web::Bytes`) would run all of these before the
//! handler, in their order, not ours: a body over the limit would be refused before an
//! unknown token, and a flood of oversized bodies would never meet the rate limit. So a
//! handler takes the raw [`web::Payload`] and calls [`read_body`] only after the token and
//! the limiter have passed.
//!
//! What this module does not do: decide what a token may do (the engine checks seats) or
//! what counts against a budget (the handlers say when to charge).

use std::net::IpAddr;

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use games::reason::Refusal;
use games::Reason;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::AppState;
use crate::game::SeatAuth;
use crate::limits::{client_address, Person};

/// Largest body of a posted event (DESIGN.md section 1; its newline not counted).
pub const EVENT_BODY_LIMIT: usize = games::json::MAX_BYTES;
/// Largest body of the other JSON requests (create, pair, moves): small objects.
pub const REQUEST_BODY_LIMIT: usize = 4096;

/// The bearer token of a request, if it has an `Authorization` header. A header that is
/// not `Bearer TOKEN` is a 401, not an anonymous request: the client meant to authenticate.
pub fn bearer(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| ApiError::unauthorized("the Authorization header is not text"))?;
    let token = text
        .strip_prefix("Bearer ")
        .or_else(|| text.strip_prefix("bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ApiError::unauthorized("use Authorization: Bearer SEAT_TOKEN"))?;
    Ok(Some(token))
}

/// The request's `Idempotency-Key`, if it has one: 16 to 128 visible ASCII characters,
/// which a client draws at random for one request and sends again with each retry of it.
/// A header of another form is a 400, not a request without one: the client meant it.
pub fn idempotency_key(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    let Some(value) = req.headers().get("idempotency-key") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .filter(|k| (16..=128).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()))
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                "an Idempotency-Key is 16 to 128 visible ASCII characters, drawn at random for one request",
            )
        })
}

/// Who is calling: the seat a token opens (if a token was sent) and the person the rate
/// limit counts against.
pub struct Caller {
    pub auth: Option<SeatAuth>,
    pub person: Person,
}

impl Caller {
    /// The engine's key of this person (for the open-games cap).
    pub fn person_key(&self) -> String {
        match &self.person {
            Person::Seat(hash) => format!("seat:{}", hex::encode(hash)),
            Person::Address(ip) => format!("addr:{ip}"),
        }
    }
}

/// The client address, through trusted proxies only.
pub fn address(state: &AppState, req: &HttpRequest) -> IpAddr {
    let peer = req
        .peer_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let forwarded = forwarded_for(req);
    client_address(peer, forwarded.as_deref(), &state.trusted_proxies)
}

/// Every `X-Forwarded-For` line of a request as one list, in order, as HTTP reads repeated
/// lines of a list header: a proxy may append a line of its own rather than extend the
/// client's (HAProxy's `option forwardfor` does), and reading the first line alone let a
/// client behind such a proxy name any address it liked. A line that is not text counts
/// as a malformed entry, which ends what can be believed.
fn forwarded_for(req: &HttpRequest) -> Option<String> {
    let mut lines = req.headers().get_all("x-forwarded-for").peekable();
    lines.peek()?;
    Some(
        lines
            .map(|line| line.to_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Step "token": an unknown token is 401; no token is an anonymous caller.
pub async fn caller(state: &AppState, req: &HttpRequest) -> Result<Caller, ApiError> {
    let address = address(state, req);
    match bearer(req)? {
        None => Ok(Caller {
            auth: None,
            person: Person::address(address),
        }),
        Some(token) => {
            let auth = state
                .hub
                .seat_for_token(token)
                .await
                .map_err(ApiError::from)?
                .ok_or_else(|| ApiError::unauthorized("unknown seat token"))?;
            Ok(Caller {
                auth: Some(auth),
                person: Person::seat(token),
            })
        }
    }
}

/// Step "token" for routes that need a seat of one game: 401 without one, 403 for a seat
/// of another game.
pub async fn seat_of(
    state: &AppState,
    req: &HttpRequest,
    inbox: &str,
    game: &str,
) -> Result<(Caller, SeatAuth), ApiError> {
    let caller = caller(state, req).await?;
    let auth = caller
        .auth
        .clone()
        .ok_or_else(|| ApiError::unauthorized("this route needs a seat token"))?;
    if *auth.inbox != *inbox || *auth.game != *game {
        return Err(ApiError::forbidden("this token belongs to another game"));
    }
    Ok((caller, auth))
}

/// Step "rate limit": spends one token of the caller's budget.
pub async fn charge(state: &AppState, caller: &Caller) -> Result<(), ApiError> {
    state
        .events
        .charge_any(&caller.person)
        .await
        .map_err(|limited| {
            state
                .metrics
                .rate_limited
                .with_label_values(&["events"])
                .inc();
            ApiError::rate_limited(limited, "events")
        })
}

/// Steps "size" and "content type": the whole body, at most `limit` bytes once one
/// trailing newline is dropped, sent as JSON.
pub async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Bytes, ApiError> {
    // Room for a trailing "\r\n", which does not count.
    let hard = limit + 2;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > hard) {
        return Err(ApiError::too_large(limit));
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
        if body.len() + chunk.len() > hard {
            return Err(ApiError::too_large(limit));
        }
        body.extend_from_slice(&chunk);
    }
    let mut body = body.freeze();
    if body.ends_with(b"\n") {
        body.truncate(body.len() - 1);
        if body.ends_with(b"\r") {
            body.truncate(body.len() - 1);
        }
    }
    if body.len() > limit {
        return Err(ApiError::too_large(limit));
    }
    if !is_json(req) {
        return Err(ApiError::unsupported_media_type());
    }
    // A compressed body would be read as JSON, and refused as malformed JSON it never was.
    if !is_identity(req) {
        return Err(ApiError::unsupported_encoding());
    }
    Ok(body)
}

/// No `Content-Encoding`, or only `identity`.
fn is_identity(req: &HttpRequest) -> bool {
    req.headers().get_all(header::CONTENT_ENCODING).all(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',').all(|coding| {
                coding.trim().eq_ignore_ascii_case("identity") || coding.trim().is_empty()
            })
        })
    })
}

/// `application/json`, with or without parameters such as `charset=utf-8`.
fn is_json(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Step "JSON" for request objects that are not events: the same strict checks as an
/// event (duplicate keys, numbers, depth), then the request's own shape (`schema`, with
/// the offending field named in the detail: "`signed`: invalid type: …", as the relay
/// names a message's field, unless the message names it already, as a missing or unknown
/// field's does).
pub fn parse_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let map: Map<String, Value> =
        games::json::parse_object(body, REQUEST_BODY_LIMIT).map_err(ApiError::input)?;
    serde_path_to_error::deserialize(Value::Object(map)).map_err(|e| {
        let (path, message) = (e.path().to_string(), e.inner().to_string());
        let detail = if path == "." || message.contains(&format!("`{path}`")) {
            message
        } else {
            format!("`{path}`: {message}")
        };
        ApiError::input(Refusal::with(Reason::Schema, detail))
    })
}

/// Inbox names: 1–128 characters of `A-Z a-z 0-9 . _ : -`, starting alphanumeric (the
/// alphabet of game ids, so both can share URLs and keys safely).
pub fn check_inbox(inbox: &str) -> Result<(), ApiError> {
    if games::event::is_game_id(inbox) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "an inbox name is 1-128 characters of A-Z a-z 0-9 . _ : - starting with a letter or digit",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn every_forwarded_for_line_is_read_in_order() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().expect("a network")];
        let from_proxy = |lines: &[&str]| {
            let mut req = TestRequest::default();
            for line in lines {
                req = req.append_header(("x-forwarded-for", *line));
            }
            let req = req.to_http_request();
            let peer: IpAddr = "10.0.0.1".parse().expect("an address");
            client_address(peer, forwarded_for(&req).as_deref(), &trusted)
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        // The client's own line, then the line its proxy appended: the proxy's is believed.
        assert_eq!(from_proxy(&["6.6.6.6", "203.0.113.9"]), ip("203.0.113.9"));
        assert_eq!(
            from_proxy(&["6.6.6.6, 7.7.7.7", "203.0.113.9, 10.0.0.2"]),
            ip("203.0.113.9")
        );
        // One line, as before.
        assert_eq!(from_proxy(&["6.6.6.6, 203.0.113.9"]), ip("203.0.113.9"));
        // None: the proxy itself.
        assert_eq!(from_proxy(&[]), ip("10.0.0.1"));
    }

    #[test]
    fn a_compressed_body_is_an_unsupported_media_type() {
        let with = |codings: &[&str]| {
            let mut req = TestRequest::default();
            for coding in codings {
                req = req.append_header(("content-encoding", *coding));
            }
            is_identity(&req.to_http_request())
        };
        assert!(with(&[]));
        assert!(with(&["identity"]));
        assert!(with(&["Identity, identity"]));
        assert!(!with(&["gzip"]));
        assert!(!with(&["identity", "br"]));
        assert!(!with(&["identity, deflate"]));
    }

    #[test]
    fn a_request_of_the_wrong_shape_is_told_which_field() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            #[allow(dead_code)]
            code: String,
            #[allow(dead_code)]
            signed: Option<bool>,
        }
        let detail = |body: &str| {
            let e = parse_request::<Body>(body.as_bytes()).expect_err("refused");
            assert_eq!(e.code, "schema");
            e.detail.unwrap_or_default()
        };
        assert_eq!(
            detail(r#"{"code":"ABCD2345","signed":"yes"}"#),
            "`signed`: invalid type: string \"yes\", expected a boolean"
        );
        assert_eq!(
            detail(r#"{"code":5}"#),
            "`code`: invalid type: integer `5`, expected a string"
        );
        // Missing and unknown fields are named by their own messages.
        assert_eq!(detail("{}"), "missing field `code`");
        assert!(detail(r#"{"code":"x","colour":1}"#).starts_with("unknown field `colour`"));
    }
}
