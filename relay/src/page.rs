//! The chat-box web page, served from the binary.
//!
//! The page is three small files under `relay/web/` (plain HTML, JavaScript and CSS, no
//! framework and no build step), compiled into the binary with `include_str!`, so a hub is
//! one file with nothing to deploy beside it. [`configure`] mounts them at `/` (also
//! `/index.html`), `/app.js` and `/style.css`; the hub adds it to its application with one
//! `.configure(relay::page::configure)` line.
//!
//! Every answer carries a restrictive Content-Security-Policy: scripts, styles and network
//! connections only from the hub's own origin, no inline script or style, no plugins, no
//! framing, no form posts elsewhere. The page writes other people's strings (game ids,
//! boards) as text only, and the policy is the second line of defence if it ever did not.
//! The page speaks to the hub only through the public HTTP API and the WebSocket relay,
//! exactly as any other client would.
//!
//! This module deliberately holds no game logic and no state: it is static files with the
//! right headers. Assets are revalidated on each load (`no-cache`) rather than cached for
//! long, because they change with the binary and carry no version in their names.

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};

/// The policy sent with every asset. `connect-src 'self'` also allows the WebSocket back to
/// the same host and port (`ws:`/`wss:`), as CSP Level 3 specifies.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file and where it is served.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

const INDEX_HTML: &str = include_str!("../web/index.html");
const APP_JS: &str = include_str!("../web/app.js");
const STYLE_CSS: &str = include_str!("../web/style.css");

/// Every file the page is made of, by path.
pub const ASSETS: [Asset; 4] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: INDEX_HTML,
    },
    Asset {
        path: "/index.html",
        content_type: "text/html; charset=utf-8",
        body: INDEX_HTML,
    },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: APP_JS,
    },
    Asset {
        path: "/style.css",
        content_type: "text/css; charset=utf-8",
        body: STYLE_CSS,
    },
];

/// Mounts the page's files. GET and HEAD answer the file; any other method 405 in the
/// hub's JSON error shape, with an `Allow` header.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for asset in ASSETS {
        cfg.service(
            web::resource(asset.path)
                .route(web::get().to(move || async move { serve(asset) }))
                .route(web::head().to(move || async move { serve(asset) }))
                .default_service(web::to(|| async { method_not_allowed() })),
        );
    }
}

fn serve(asset: Asset) -> HttpResponse {
    let mut res = HttpResponse::Ok();
    res.insert_header((header::CONTENT_TYPE, asset.content_type));
    res.insert_header((header::CACHE_CONTROL, "no-cache"));
    secure_headers(&mut res);
    res.body(asset.body)
}

fn method_not_allowed() -> HttpResponse {
    let mut res = HttpResponse::build(StatusCode::METHOD_NOT_ALLOWED);
    res.insert_header((header::ALLOW, HeaderValue::from_static("GET, HEAD")));
    secure_headers(&mut res);
    res.json(serde_json::json!({
        "error": "method_not_allowed",
        "detail": "the page answers GET and HEAD only",
    }))
}

fn secure_headers(res: &mut actix_web::HttpResponseBuilder) {
    res.insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY));
    res.insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
    res.insert_header((header::REFERRER_POLICY, "no-referrer"));
    res.insert_header((header::X_FRAME_OPTIONS, "DENY"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::{test as web_test, App};

    fn header_of(headers: &actix_web::http::header::HeaderMap, name: header::HeaderName) -> &str {
        headers
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    #[actix_rt::test]
    async fn every_asset_is_served_with_its_type_and_the_policy() {
        let app = web_test::init_service(App::new().configure(configure)).await;
        for asset in ASSETS {
            let req = web_test::TestRequest::get().uri(asset.path).to_request();
            let res = web_test::call_service(&app, req).await;
            assert_eq!(res.status(), StatusCode::OK, "{}", asset.path);
            let headers = res.headers().clone();
            assert_eq!(
                header_of(&headers, header::CONTENT_TYPE),
                asset.content_type,
                "{}",
                asset.path
            );
            assert_eq!(
                header_of(&headers, header::CONTENT_SECURITY_POLICY),
                CONTENT_SECURITY_POLICY
            );
            assert_eq!(
                header_of(&headers, header::X_CONTENT_TYPE_OPTIONS),
                "nosniff"
            );
            let body = web_test::read_body(res).await;
            assert_eq!(body, asset.body.as_bytes(), "{}", asset.path);
        }
    }

    #[actix_rt::test]
    async fn other_methods_are_refused_in_json() {
        let app = web_test::init_service(App::new().configure(configure)).await;
        let req = web_test::TestRequest::post().uri("/app.js").to_request();
        let res = web_test::call_service(&app, req).await;
        assert_eq!(res.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(header_of(res.headers(), header::ALLOW), "GET, HEAD");
        let body: serde_json::Value = web_test::read_body_json(res).await;
        assert_eq!(body["error"], "method_not_allowed");
    }

    /// The policy forbids inline code; a page that relied on it would silently break.
    #[test]
    fn the_page_needs_nothing_the_policy_forbids() {
        for needle in ["style=", " onclick", " onload", " onsubmit", "javascript:"] {
            assert!(
                !INDEX_HTML.contains(needle),
                "index.html contains {needle:?}"
            );
        }
        for tag in INDEX_HTML.split("<script").skip(1) {
            assert!(
                tag.trim_start().starts_with("src=\"/"),
                "an inline or foreign script: <script{tag}"
            );
        }
        for href in INDEX_HTML.split("href=\"").skip(1) {
            assert!(href.starts_with('/') || href.starts_with('#') || href.starts_with("data:,"));
        }
        assert!(
            INDEX_HTML.contains("src=\"/app.js\"") && INDEX_HTML.contains("href=\"/style.css\"")
        );
    }

    /// Opponents' strings reach the page; it must only ever write them as text.
    #[test]
    fn the_script_never_writes_html() {
        for needle in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ] {
            assert!(!APP_JS.contains(needle), "app.js uses {needle}");
        }
    }

    /// The script speaks exactly the relay's message types of DESIGN.md section 5.
    #[test]
    fn the_script_speaks_the_documented_messages() {
        for t in [
            "'hello'",
            "'hello.ok'",
            "'game.move'",
            "'game.resign'",
            "'game.subscribe'",
            "'game.state'",
            "'game.refused'",
            "'error'",
        ] {
            assert!(APP_JS.contains(t), "app.js never mentions {t}");
        }
    }
}
