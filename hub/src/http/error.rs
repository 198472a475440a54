//! The one shape of every HTTP error: `{"error": CODE, "detail": …}`.
//!
//! Every refusal the HTTP layer produces — its own checks (routes, tokens, limits, sizes,
//! content types), the engine's [`HubError`]s and actix's extractor failures — becomes an
//! [`ApiError`], so a client never sees a bare 500 or a plain-text error. Rate-limit
//! refusals carry `Retry-After` in whole seconds. This module does not decide which check
//! runs first; the handlers do, in the order of DESIGN.md section 5.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use games::reason::Refusal;
use serde::Serialize;
use utoipa::ToSchema;

use crate::game::HubError;
use crate::limits::RateLimited;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: a reason of DESIGN.md sections 1–2 (`bad_json`, `stale_seq`, …) or
    /// an HTTP-level one (`unauthorized`, `rate_limited`, `not_found`, …).
    pub error: String,
    /// A human sentence, or a reason's detail code (`occupied`); null when none.
    pub detail: Option<String>,
}

/// An error answer: status, code, detail, and for 429 the wait.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: String,
    pub detail: Option<String>,
    pub retry_after_secs: Option<u64>,
    /// Methods the route allows (405 only).
    pub allow: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            detail: Some(detail.into()),
            retry_after_secs: None,
            allow: None,
        }
    }

    pub fn unauthorized(detail: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", detail)
    }

    pub fn forbidden(detail: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", detail)
    }

    pub fn not_found(detail: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", detail)
    }

    pub fn method_not_allowed(allow: &'static str) -> Self {
        ApiError {
            allow: Some(allow),
            ..Self::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("this route answers {allow}"),
            )
        }
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is over {limit} bytes"),
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as Content-Type: application/json",
        )
    }

    /// 415 for a body in an encoding the hub does not read (it decompresses nothing).
    pub fn unsupported_encoding() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body uncompressed, without a Content-Encoding other than identity",
        )
    }

    /// A section-1 refusal of a body (400 with the reason as the code; `too_large` 413).
    pub fn input(refusal: Refusal) -> Self {
        let status = if refusal.reason == games::Reason::TooLarge {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError {
            status,
            code: refusal.reason.code().to_string(),
            detail: refusal.detail,
            retry_after_secs: None,
            allow: None,
        }
    }

    pub fn rate_limited(limited: RateLimited, what: &str) -> Self {
        ApiError {
            retry_after_secs: Some(limited.retry_after_secs),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "too many {what}; retry after {} s",
                    limited.retry_after_secs
                ),
            )
        }
    }

    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.code)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.status);
        if let Some(secs) = self.retry_after_secs {
            res.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        if let Some(allow) = self.allow {
            res.insert_header((header::ALLOW, HeaderValue::from_static(allow)));
        }
        res.json(ErrorBody {
            error: self.code.clone(),
            detail: self.detail.clone(),
        })
    }
}

impl From<HubError> for ApiError {
    fn from(err: HubError) -> Self {
        // A server error is logged where its route and path are known (`http::app`).
        let status =
            StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError {
            status,
            code: err.code().to_string(),
            detail: err.detail(),
            retry_after_secs: None,
            allow: None,
        }
    }
}

/// Turns actix's own extractor failures (a bad path segment, a bad query) into our shape.
pub fn from_actix(err: impl std::fmt::Display, code: &str) -> actix_web::Error {
    ApiError::new(StatusCode::BAD_REQUEST, code, err.to_string()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::to_bytes;

    #[actix_rt::test]
    async fn rate_limited_answers_carry_retry_after_and_json() {
        let res = ApiError::rate_limited(
            RateLimited {
                retry_after_secs: 3,
            },
            "events",
        )
        .error_response();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            res.headers().get(header::RETRY_AFTER).map(|v| v.as_bytes()),
            Some(&b"3"[..])
        );
        let body = to_bytes(res.into_body()).await.expect("a body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(v["error"], "rate_limited");
    }

    #[test]
    fn engine_errors_keep_their_status_and_code() {
        let e = ApiError::from(HubError::CodeExpired);
        assert_eq!(e.status, StatusCode::GONE);
        assert_eq!(e.code, "code_expired");
        let e = ApiError::input(Refusal::with(games::Reason::Schema, "seq"));
        assert_eq!(
            (e.status, e.code.as_str()),
            (StatusCode::BAD_REQUEST, "schema")
        );
    }
}
