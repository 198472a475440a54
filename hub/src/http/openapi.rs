//! The OpenAPI 3 document served at `/v1/openapi.json`.
//!
//! It is generated from the handlers' own annotations and the request and response types
//! they use, so it cannot drift from the code: a route missing here fails the test below,
//! which compares the document's paths with the route table. Game states are described as
//! objects whose fields DESIGN.md section 5 lists (`game.state`); they are the engine's
//! types and are not re-declared here.

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::error::ErrorBody;
use super::events::PostedBody;
use super::games::{CreateGameBody, PairBody};
use super::ops::{Health, ProtocolInfo, ProtocolList};
use super::{events, games, ops};

/// The API document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "pipehub",
        description = "A hub for verifiable two-player games: an inbox of hash-chained, \
                       optionally signed events, refereed per game. Errors are always \
                       `{\"error\": CODE, \"detail\": …}`."
    ),
    paths(
        events::post_event,
        events::list_captures,
        events::get_capture,
        games::list_games,
        games::create_game,
        games::game_state,
        games::cancel_game,
        games::export_game,
        games::new_code,
        games::post_move,
        games::resign,
        games::seat_view,
        games::pair,
        ops::protocols,
        ops::openapi,
        ops::metrics,
        ops::healthz,
        ops::readyz,
        ::relay::endpoint::ws,
    ),
    components(schemas(ErrorBody, PostedBody, CreateGameBody, PairBody, Health, ProtocolInfo, ProtocolList)),
    modifiers(&SeatToken)
)]
pub struct ApiDoc;

/// Declares the `seat_token` bearer scheme the seat routes use.
struct SeatToken;

impl Modify for SeatToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "seat_token",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        let paths = doc["paths"].as_object().expect("paths");
        let expected = [
            ("/v1/inboxes/{inbox}/events", vec!["get", "post"]),
            ("/v1/inboxes/{inbox}/events/{capture}", vec!["get"]),
            ("/v1/inboxes/{inbox}/games", vec!["get", "post"]),
            ("/v1/inboxes/{inbox}/games/{game}", vec!["get", "delete"]),
            ("/v1/inboxes/{inbox}/games/{game}/export", vec!["get"]),
            ("/v1/inboxes/{inbox}/games/{game}/code", vec!["post"]),
            ("/v1/inboxes/{inbox}/games/{game}/moves", vec!["post"]),
            ("/v1/inboxes/{inbox}/games/{game}/resign", vec!["post"]),
            ("/v1/inboxes/{inbox}/games/{game}/view", vec!["get"]),
            ("/v1/pair", vec!["post"]),
            ("/v1/protocols", vec!["get"]),
            ("/v1/openapi.json", vec!["get"]),
            ("/metrics", vec!["get"]),
            ("/healthz", vec!["get"]),
            ("/readyz", vec!["get"]),
            ("/v1/ws", vec!["get"]),
        ];
        assert_eq!(paths.len(), expected.len());
        for (path, methods) in expected {
            let item = paths
                .get(path)
                .unwrap_or_else(|| panic!("{path} is not documented"));
            for m in methods {
                assert!(item.get(m).is_some(), "{m} {path} is not documented");
            }
        }
        assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")));
    }
}
