//! The glue between the hub and its WebSocket relay (the `relay` crate).
//!
//! The relay states what it needs of games as a trait, [`::relay::Games`]; [`HubGames`]
//! implements it on the [`Hub`] facade, so a move that arrives over a WebSocket goes
//! through exactly the calls an HTTP `POST …/moves` makes — the same seat checks, the same
//! per-person rate limit (the very [`EventLimiter`] the HTTP layer charges), the same
//! append, and the same game actor as referee. [`HubRooms`] goes the other way: it is the
//! hub's [`Rooms`] interface, handed to the engine at open, and forwards each actor's
//! publication into the relay's rooms. Each viewer's `GameState` is serialized once per
//! event (and not at all when nobody watches it), and those bytes are shared with the
//! mover's own answer. Every socket of a viewer then gets the same frame.
//!
//! [`relay()`] builds the relay for the HTTP app; `serve` mounts it with one `configure`
//! call. What this module deliberately does not do: speak the wire protocol (the relay
//! crate does) or judge anything (the engine does).

use std::num::NonZeroU32;
use std::sync::Arc;

use ::relay::{Ended, Failure, Games, Outcome, SeatRef, SocketCap, StateFrame};
use actix_web::HttpRequest;
use async_trait::async_trait;
use games::{Seat, Viewer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::game::{Hub, HubError, Posted, SeatAuth, SharedState, Verdict};
use crate::http::AppState;
use crate::limits::{EventLimiter, Person};
use crate::metrics::Metrics;
use crate::rooms::{Cause, Publication, Rooms, Watchers};

/// The relay of a running hub, ready to mount with `::relay::configure`; its sessions
/// close as going away once `shutdown` turns true. A client (by its address, through the
/// hub's trusted proxies) may hold at most `sockets_per_client` sockets open, if given.
pub fn relay(
    state: &AppState,
    rooms: ::relay::Rooms,
    shutdown: tokio::sync::watch::Receiver<bool>,
    sockets_per_client: Option<NonZeroU32>,
) -> ::relay::Relay {
    let games = HubGames {
        hub: state.hub.clone(),
        limiter: state.events.clone(),
        metrics: state.metrics.clone(),
    };
    let relay = ::relay::Relay::new(Arc::new(games), rooms).with_shutdown(shutdown);
    match sockets_per_client {
        None => relay,
        Some(n) => {
            let state = state.clone();
            let address = move |req: &HttpRequest| crate::http::address(&state, req);
            relay.with_socket_cap(SocketCap::new(n), Arc::new(address))
        }
    }
}

/// The engine's rooms, feeding the relay's, and in a cluster the other nodes' rooms.
pub struct HubRooms {
    rooms: ::relay::Rooms,
    others: Option<Arc<dyn OtherNodes>>,
}

/// Where a cluster node hands each publication for the rooms of the other nodes.
pub trait OtherNodes: Send + Sync {
    /// Must not block: the actor is adjudicating meanwhile.
    fn send(&self, inbox: &str, game: &str, delivery: &::relay::Delivery);

    /// False while there is no other node to send to.
    fn wanted(&self) -> bool;
}

impl HubRooms {
    pub fn new(rooms: ::relay::Rooms) -> HubRooms {
        HubRooms {
            rooms,
            others: None,
        }
    }

    /// Also hands every publication to the other nodes of a cluster.
    pub fn with_others(mut self, others: Arc<dyn OtherNodes>) -> HubRooms {
        self.others = Some(others);
        self
    }
}

fn frame(state: &SharedState) -> Result<StateFrame, serde_json::Error> {
    state.frame().cloned()
}

impl Rooms for HubRooms {
    fn publish(&self, publication: Publication) {
        let others = self.others.as_ref().filter(|o| o.wanted());
        let views = &publication.views;
        let encode = |view: &Option<std::sync::Arc<SharedState>>| match view {
            Some(state) => frame(state).map(Some),
            None => Ok(None),
        };
        let (x, o, spectator) = match (encode(&views.x), encode(&views.o), encode(&views.spectator))
        {
            (Ok(x), Ok(o), Ok(spectator)) => (x, o, spectator),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                tracing::error!(error = %e, "a game state did not serialize; not relayed");
                return;
            }
        };
        let cause = match publication.cause {
            Cause::Accepted { seat, .. } => ::relay::Cause::Accepted { seat },
            Cause::Phase => ::relay::Cause::Phase,
            Cause::Held { seat } => ::relay::Cause::Held { seat },
            // Told with no views: there is nothing left to show.
            Cause::Cancelled => ::relay::Cause::Cancelled,
        };
        if cause != ::relay::Cause::Cancelled && x.is_none() && o.is_none() && spectator.is_none() {
            return;
        }
        let delivery = ::relay::Delivery {
            cause,
            views: ::relay::Views { x, o, spectator },
        };
        if let Some(others) = others {
            others.send(&publication.inbox, &publication.game, &delivery);
        }
        self.rooms
            .publish(&publication.inbox, &publication.game, delivery);
    }

    fn watchers(&self, inbox: &str, game: &str) -> Watchers {
        // Which viewers other nodes' sockets are is not known here: every view is built
        // while there are other nodes to send it to.
        if self.others.as_ref().is_some_and(|o| o.wanted()) {
            return Watchers::ALL;
        }
        self.rooms.watchers(inbox, game)
    }
}

/// The games of a hub, as the relay sees them.
pub struct HubGames {
    hub: Hub,
    limiter: Arc<EventLimiter>,
    metrics: Arc<Metrics>,
}

fn failure(err: HubError) -> Failure {
    Failure {
        error: err.code().to_string(),
        detail: err.detail(),
        retry_after: None,
    }
}

fn encode(state: &SharedState) -> Result<StateFrame, Failure> {
    frame(state).map_err(|e| Failure::new("internal", e.to_string()))
}

fn auth(seat: &SeatRef) -> SeatAuth {
    SeatAuth {
        inbox: seat.inbox.clone(),
        game: seat.game.clone(),
        seat: seat.seat,
    }
}

impl HubGames {
    /// Spends one token of the seat holder's budget: the same bucket as their HTTP posts.
    async fn charge(&self, seat: &SeatRef) -> Result<(), Failure> {
        self.limiter
            .charge_any(&Person::Seat(seat.person))
            .await
            .map_err(|limited| {
                self.metrics
                    .rate_limited
                    .with_label_values(&["events"])
                    .inc();
                Failure::rate_limited(limited.retry_after_secs)
            })
    }

    /// What a post came to, with the mover's view.
    async fn outcome(&self, seat: &SeatRef, posted: Posted) -> Result<Outcome, Failure> {
        let state = match &posted.state {
            Some(state) => Some(encode(state)?),
            None => None,
        };
        Ok(match (posted.verdict, state) {
            (Verdict::Accepted, Some(state)) => Outcome::Accepted(state),
            (Verdict::Held, Some(state)) => Outcome::Held(state),
            (Verdict::Rejected, state) => {
                let state = match state {
                    Some(state) => state,
                    None => self.state(&seat.inbox, &seat.game, Some(seat.seat)).await?,
                };
                let (error, detail) = match posted.refusal {
                    Some(r) => (r.reason.code().to_string(), r.detail),
                    None => ("rejected".to_string(), None),
                };
                Outcome::Rejected {
                    error,
                    detail,
                    state,
                }
            }
            _ => Outcome::Pending,
        })
    }
}

#[async_trait]
impl Games for HubGames {
    async fn open_seat(&self, token: &str) -> Result<Option<SeatRef>, Failure> {
        let auth = self.hub.seat_for_token(token).await.map_err(failure)?;
        Ok(auth.map(|auth| SeatRef {
            inbox: auth.inbox,
            game: auth.game,
            seat: auth.seat,
            // The same digest `Person::seat` keys HTTP requests by, so the budget is shared.
            person: Sha256::digest(token.as_bytes()).into(),
        }))
    }

    async fn state(
        &self,
        inbox: &str,
        game: &str,
        seat: Option<Seat>,
    ) -> Result<StateFrame, Failure> {
        let viewer = seat.map_or(Viewer::Spectator, Viewer::Seat);
        let state = self.hub.state(inbox, game, viewer).await.map_err(failure)?;
        encode(&state)
    }

    async fn play(&self, seat: &SeatRef, mv: Value) -> Result<Outcome, Failure> {
        self.charge(seat).await?;
        let posted = self.hub.play(&auth(seat), mv).await.map_err(failure)?;
        self.outcome(seat, posted).await
    }

    async fn resign(&self, seat: &SeatRef) -> Result<Outcome, Failure> {
        self.charge(seat).await?;
        let posted = self.hub.resign(&auth(seat)).await.map_err(failure)?;
        self.outcome(seat, posted).await
    }

    fn connection(&self, opened: bool) {
        if opened {
            self.metrics.websocket_connections.inc();
        } else {
            self.metrics.websocket_connections.dec();
        }
    }

    fn closed(&self, why: Ended) {
        self.metrics
            .websocket_closed
            .with_label_values(&[why.label()])
            .inc();
    }

    fn socket_refused(&self) {
        self.metrics
            .rate_limited
            .with_label_values(&["sockets"])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Person;

    #[test]
    fn the_relay_keys_a_seat_like_the_http_layer() {
        let token = "a-seat-token";
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        assert_eq!(Person::seat(token), Person::Seat(digest));
    }
}
