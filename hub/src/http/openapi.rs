//! The OpenAPI 3 document served at `/v1/openapi.json`.
//!
//! It is generated from the handlers' own annotations and the request and response types
//! they use, so it cannot drift from the code: a route missing here fails the test below,
//! which compares the document's paths with the route table. Game states are described as
//! objects whose fields DESIGN.md section 5 lists (`game.state`); they are the engine's
//! types and are not re-declared here.
//!
//! What holds for every route is added once, by [`Conventions`]: the shape of inbox names
//! and game ids in paths, and the errors every seat route and every JSON body can get.
//! An event's schema ([`event_schema`]) says what section 1 says of its shape; what only
//! the referee can judge (a move's legality, rules in range) is a 422, never a schema.

use serde_json::json;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};
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
    components(schemas(ErrorBody, EventSchema, MoveBodySchema, MoveRefusedSchema, PostedBody, CreateGameBody, PairBody, Health, ProtocolInfo, ProtocolList)),
    modifiers(&SeatToken, &Conventions)
)]
pub struct ApiDoc;

/// Inbox names and game ids: 1–128 characters of `A-Z a-z 0-9 . _ : -`, the first a
/// letter or digit (DESIGN.md section 1).
const NAME_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$";

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

/// What every route shares, written once rather than on each handler: the pattern of the
/// `inbox` and `game` path parameters (and the 400 a malformed inbox name gets where no
/// seat token is checked first), the 401 of a route that takes a seat token, the 400,
/// 413 and 415 of a JSON body, the 503 of every route that reads or writes the store,
/// and the 431 of any request. A status a handler documents itself keeps its own
/// description. It also names the protocols a new game may ask for.
struct Conventions;

/// What a move's payload is, in both schemas that carry one.
const MOVE_PAYLOAD: &str = "the protocol's move payload (see /v1/protocols)";

const BAD_INBOX: &str = "`bad_request`: an inbox name not of the pattern above";
const NO_TOKEN: &str =
    "`unauthorized`: no seat token where one is needed, or one this hub does not know";
const BAD_BODY: &str = "the body is refused before any game logic: `bad_json`, \
                        `duplicate_key`, `bad_number` or `schema`";
const TOO_LARGE: &str = "`too_large`: a body over its limit";
const NOT_JSON: &str = "`unsupported_media_type`: send the body as Content-Type: \
                        application/json";
const NO_STORE: &str = "`unavailable`: the store cannot answer or take writes now (a full \
                        disk, a failed fsync, Redis gone, damage); try again later";
const HEADERS_TOO_LARGE: &str = "`headers_too_large`: the request's headers are over their limit";

impl Modify for Conventions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let seat_token = SecurityRequirement::new("seat_token", Vec::<String>::new());
        for (path, item) in openapi.paths.paths.iter_mut() {
            // Games and seats are read from the store, and a store can stop answering.
            let stored = path.starts_with("/v1/inboxes/") || path == "/v1/pair";
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ];
            for op in operations.into_iter().flatten() {
                let mut has_inbox = false;
                for p in op.parameters.iter_mut().flatten() {
                    let named = matches!(&*p.name, "inbox" | "game");
                    if p.parameter_in == ParameterIn::Path && named {
                        p.schema = Some(RefOr::T(name_schema()));
                        has_inbox |= p.name == "inbox";
                    }
                }
                let requirements = op.security.as_deref().unwrap_or_default();
                // A route for seats alone checks the token, which names its inbox, first.
                let seats_only =
                    !requirements.is_empty() && requirements.iter().all(|s| *s == seat_token);
                let takes_token = requirements.contains(&seat_token);
                if has_inbox && !seats_only {
                    error(op, "400", BAD_INBOX);
                }
                if takes_token {
                    error(op, "401", NO_TOKEN);
                }
                if op.request_body.is_some() {
                    error(op, "400", BAD_BODY);
                    error(op, "413", TOO_LARGE);
                    error(op, "415", NOT_JSON);
                }
                if stored {
                    error(op, "503", NO_STORE);
                }
                error(op, "431", HEADERS_TOO_LARGE);
            }
        }
        let components = openapi.components.get_or_insert_with(Default::default);
        if let Some(RefOr::T(Schema::Object(body))) = components.schemas.get_mut("CreateGameBody") {
            // Null, like absence, means the hub's default.
            let mut refs: Vec<serde_json::Value> = ::games::Registry::builtin()
                .iter()
                .flat_map(|p| p.refs().to_vec())
                .map(serde_json::Value::from)
                .collect();
            refs.push(serde_json::Value::Null);
            let protocol = ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                .enum_values(Some(refs))
                .description(Some(
                    "A protocol ref (see /v1/protocols); the hub's default when absent or null.",
                ))
                .build();
            body.properties
                .insert("protocol".into(), RefOr::T(Schema::Object(protocol)));
        }
    }
}

/// Adds an error response unless the handler documented that status itself.
fn error(op: &mut Operation, status: &str, description: &str) {
    op.responses
        .responses
        .entry(status.to_string())
        .or_insert_with(|| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorBody",
                            ))))
                            .build(),
                    )
                    .build(),
            )
        });
}

fn name_schema() -> Schema {
    Schema::Object(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(NAME_PATTERN))
            .min_length(Some(1))
            .max_length(Some(128))
            .build(),
    )
}

/// A schema written as JSON rather than derived from a type: `$name` in the document,
/// built by `$build`.
macro_rules! written_schema {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $build:ident) => {
        $(#[$doc])*
        pub struct $ty;

        impl utoipa::PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                RefOr::T($build())
            }
        }

        impl utoipa::ToSchema for $ty {
            fn name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }
        }
    };
}

written_schema!(
    /// The body of `POST …/events` (see [`event_schema`]).
    EventSchema,
    "Event",
    event_schema
);

written_schema!(
    /// The body of `POST …/moves` (see [`move_body_schema`]).
    MoveBodySchema,
    "MoveBody",
    move_body_schema
);

written_schema!(
    /// A refused move's 422 (see [`move_refused_schema`]).
    MoveRefusedSchema,
    "MoveRefused",
    move_refused_schema
);

/// A move's 422 takes one of two shapes: a refereed rejection, whose capture is kept
/// (`PostedBody`, with the true state), or a rock-paper-scissors choice refused before it
/// reaches the inbox (`ErrorBody`: the hub holds choices, and a bad one is never written).
fn move_refused_schema() -> Schema {
    let doc = json!({
        "anyOf": [
            {"$ref": "#/components/schemas/PostedBody"},
            {"$ref": "#/components/schemas/ErrorBody"},
        ],
    });
    serde_json::from_value(doc).expect("the refused move's schema is a schema")
}

/// A hub-held seat's move: `{"move": …}`, the protocol's payload, or in
/// rock-paper-scissors `{"choice": …}`, which the hub commits and reveals for the seat.
fn move_body_schema() -> Schema {
    let doc = json!({
        "oneOf": [
            {
                "type": "object",
                "title": "move",
                "properties": {"move": {"type": "object", "description": MOVE_PAYLOAD}},
                "required": ["move"],
                "additionalProperties": false,
            },
            {
                "type": "object",
                "title": "choice",
                "properties": {"choice": {"type": "string", "enum": ["rock", "paper", "scissors"]}},
                "required": ["choice"],
                "additionalProperties": false,
            },
        ],
    });
    serde_json::from_value(doc).expect("the move body's schema is a schema")
}

/// An event as section 1 of DESIGN.md shapes it, one schema per action: a start carries no
/// `move` and may carry `protocol` and `rules`; a move carries `move`; a resign carries
/// neither. Numbers anywhere are integers within ±(2^53−1), and the whole body is at most
/// 4096 bytes, which no schema here can say.
fn event_schema() -> Schema {
    let common = json!({
        "game": {"type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": 128},
        "seq": {"type": "integer", "minimum": 0, "maximum": 9_007_199_254_740_991_u64},
        "prevHash": {"type": "string", "pattern": "^([0-9a-f]{64})?$",
                     "description": "`\"\"` on a start, else the lowercase hex SHA-256 of the previous event's canonical bytes"},
        "player": {"type": "string", "enum": ["X", "O"]},
        "status": {"type": "string", "enum": ["in_progress", "win", "draw"],
                   "description": "an optional claim of the state after this event"},
        "sig": {"type": "string", "pattern": "^[0-9a-f]{128}$",
                "description": "lowercase hex Ed25519 signature over the canonical bytes (the event without `sig`, by RFC 8785)"},
    });
    let variant = |action: &str, extra: serde_json::Value, required: &[&str]| {
        let mut properties = common.clone();
        let props = properties.as_object_mut().expect("an object");
        props.insert("action".into(), json!({"type": "string", "enum": [action]}));
        if let serde_json::Value::Object(extra) = extra {
            props.extend(extra);
        }
        let mut all = vec!["game", "seq", "prevHash", "player", "action"];
        all.extend_from_slice(required);
        json!({
            "type": "object",
            "title": action,
            "properties": properties,
            "required": all,
            "additionalProperties": false,
        })
    };
    let doc = json!({
        "description": "One event (DESIGN.md section 1), at most 4096 bytes.",
        "oneOf": [
            variant("start", json!({
                "protocol": {"type": "string", "description": "a protocol ref; the hub's default when absent"},
                "rules": {"type": "object", "description": "the protocol's parameters, plus optional `keys` and `inboxes`"},
            }), &[]),
            variant("move", json!({
                "move": {"type": "object", "description": MOVE_PAYLOAD},
            }), &["move"]),
            variant("resign", json!({}), &[]),
        ],
    });
    serde_json::from_value(doc).expect("the event schema is a schema")
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

    /// Every route that reads or writes the store may answer 503, and any request 431;
    /// the other statuses a route's handler documents itself.
    #[test]
    fn a_store_that_cannot_answer_is_documented_on_every_route_that_uses_it() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        let paths = doc["paths"].as_object().expect("paths");
        for (path, item) in paths {
            for (method, op) in item.as_object().expect("an item") {
                let statuses = op["responses"].as_object().expect("responses");
                let stored = path.starts_with("/v1/inboxes/") || path == "/v1/pair";
                assert_eq!(
                    statuses.contains_key("503"),
                    stored || path == "/readyz",
                    "{method} {path}"
                );
                assert!(statuses.contains_key("431"), "{method} {path}");
            }
        }
        let cancel = &paths["/v1/inboxes/{inbox}/games/{game}"]["delete"]["responses"];
        assert!(cancel["503"]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("`unavailable`")));
    }
}
