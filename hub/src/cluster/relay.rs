//! The relay across nodes: a WebSocket client on any node hears every game, whichever node
//! adjudicates it (DESIGN.md section 6: "across hub nodes, rooms are fed through Redis
//! pub/sub").
//!
//! The adjudicating node's actor publishes each accepted event (and each phase change, such
//! as O pairing) once, to its own rooms and, through [`Publisher`], on the Redis pub/sub
//! channel of the game's shard, `ph:p:{shard}`: the three finished `game.state` frames (X's
//! view, O's view, the spectator's), exactly the bytes its own sockets get, behind a header
//! line naming the node, the game and the cause. Every node subscribes to `ph:p:*`
//! ([`subscribe`]) and hands each message from another node to its own rooms, if anyone
//! there watches the game; each socket then picks its own viewer's frame, as for a local
//! publication, so a seat's view never reaches another seat's socket on any node.
//!
//! Pub/sub keeps nothing: a node whose subscription drops (Redis restarted, a network cut)
//! misses what was published meanwhile. On reconnecting it sends every room it has the
//! game's current state again (read from the store, see [`crate::game::Hub::state`]), so a
//! client may miss intermediate states but never stays behind; a client can always ask
//! again (`game.board`). Publishing never waits: when Redis is slow and the queue of
//! [`QUEUE`] publications is full, publications are dropped (counted in the log), and the
//! clients of other nodes catch up on the next one.
//!
//! What it deliberately does not do: carry verdicts or anything a poster waits for (the
//! verdict streams do, see [`super::verdicts`]), or publish only games someone watches:
//! which node watches what is not shared, so every accepted event goes out once — except
//! while the last lease round counted this node alone (a second node's sockets may miss
//! what is published in its first lease round, before the first node counts it).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ::relay::{Cause, Delivery, Rooms, StateFrame, Views};
use futures_util::StreamExt;
use games::{Seat, Viewer};
use redis::aio::ConnectionManager;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::game::Hub;
use crate::inbox::shard_for;
use crate::relay::OtherNodes;

/// Publications waiting to go out before new ones are dropped.
pub const QUEUE: usize = 4096;
/// Publications sent to Redis in one pipeline at most.
const BATCH: usize = 256;
/// The pattern of every shard's channel.
const PATTERN: &str = "ph:p:*";

fn channel(shard: u32) -> String {
    format!("ph:p:{shard}")
}

/// Hands this node's publications to the other nodes. See the module documentation.
pub struct Publisher {
    node: String,
    shards: u32,
    /// Live nodes in the cluster: alone, a node publishes nothing.
    live: Arc<AtomicU32>,
    tx: mpsc::Sender<(u32, String)>,
    dropped: AtomicU64,
}

impl Publisher {
    /// A publisher for node `node`; starts the task that sends on `con`.
    pub fn start(
        node: &str,
        shards: u32,
        live: Arc<AtomicU32>,
        con: ConnectionManager,
    ) -> Arc<Publisher> {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(send_all(con, rx));
        Arc::new(Publisher {
            node: node.to_string(),
            shards,
            live,
            tx,
            dropped: AtomicU64::new(0),
        })
    }
}

impl OtherNodes for Publisher {
    fn wanted(&self) -> bool {
        self.live.load(Ordering::Relaxed) >= 2
    }

    fn send(&self, inbox: &str, game: &str, delivery: &Delivery) {
        let message = encode(&self.node, inbox, game, delivery);
        let shard = shard_for(inbox, game, self.shards);
        if self.tx.try_send((shard, message)).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n,
                    "relay publications dropped: Redis does not keep up"
                );
            }
        }
    }
}

async fn send_all(mut con: ConnectionManager, mut rx: mpsc::Receiver<(u32, String)>) {
    while let Some(first) = rx.recv().await {
        let mut pipe = redis::pipe();
        pipe.cmd("PUBLISH")
            .arg(channel(first.0))
            .arg(first.1)
            .ignore();
        for _ in 1..BATCH {
            match rx.try_recv() {
                Ok((shard, message)) => {
                    pipe.cmd("PUBLISH")
                        .arg(channel(shard))
                        .arg(message)
                        .ignore();
                }
                Err(_) => break,
            }
        }
        if let Err(e) = pipe.query_async::<()>(&mut con).await {
            tracing::debug!(error = %e, "relay publications not sent");
        }
    }
}

fn seat_code(seat: Option<Seat>) -> Value {
    seat.map_or(Value::Null, |s| Value::from(s.as_str()))
}

/// A header line, then the X, O and spectator frames, one a line (a frame is compact
/// JSON, so it holds no newline; a view not built is an empty line).
fn encode(node: &str, inbox: &str, game: &str, delivery: &Delivery) -> String {
    let (cause, seat) = match delivery.cause {
        Cause::Accepted { seat } => ("a", seat_code(seat)),
        Cause::Phase => ("p", Value::Null),
        Cause::Held { seat } => ("h", seat_code(Some(seat))),
        Cause::Cancelled => ("x", Value::Null),
    };
    let v = &delivery.views;
    let views = [&v.x, &v.o, &v.spectator];
    let seqs: Vec<Option<u64>> = views
        .iter()
        .map(|f| f.as_ref().and_then(StateFrame::seq))
        .collect();
    let header = json!({"n": node, "i": inbox, "g": game, "c": cause, "s": seat, "q": seqs});
    let mut out = header.to_string();
    for frame in views {
        out.push('\n');
        if let Some(frame) = frame {
            out.push_str(&frame.frame());
        }
    }
    out
}

/// A message from the channel: its node, game and delivery; `None` when unreadable.
fn decode(message: &str) -> Option<(String, String, String, Delivery)> {
    let mut parts = message.splitn(4, '\n');
    let header: Value = serde_json::from_str(parts.next()?).ok()?;
    let seqs = header["q"].as_array()?;
    let seq = |i: usize| seqs.get(i).and_then(Value::as_u64);
    // An empty line is a view the publisher did not build; anything else must be a frame.
    let mut view = |i: usize| -> Option<Option<StateFrame>> {
        match parts.next()? {
            "" => Some(None),
            text => StateFrame::from_text(seq(i), text).map(Some),
        }
    };
    let (x, o, spectator) = (view(0)?, view(1)?, view(2)?);
    let cause = match header["c"].as_str()? {
        "a" => Cause::Accepted {
            seat: header["s"].as_str().and_then(Seat::parse),
        },
        "x" => Cause::Cancelled,
        "h" => match header["s"].as_str().and_then(Seat::parse) {
            Some(seat) => Cause::Held { seat },
            None => Cause::Phase,
        },
        _ => Cause::Phase,
    };
    Some((
        header["n"].as_str()?.to_string(),
        header["i"].as_str()?.to_string(),
        header["g"].as_str()?.to_string(),
        Delivery {
            cause,
            views: Views { x, o, spectator },
        },
    ))
}

/// Hands the other nodes' publications to this node's rooms until `stop` turns true,
/// reconnecting by itself. See the module documentation.
pub async fn subscribe(
    url: String,
    node: String,
    rooms: Rooms,
    hub: Hub,
    mut stop: watch::Receiver<bool>,
) {
    let mut connected_before = false;
    while !*stop.borrow() {
        let pubsub = match redis::Client::open(url.as_str()) {
            Ok(client) => client.get_async_pubsub().await,
            Err(e) => Err(e),
        };
        let mut pubsub = match pubsub {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "relay subscription: no connection yet");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        if let Err(e) = pubsub.psubscribe(PATTERN).await {
            tracing::debug!(error = %e, "relay subscription refused");
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        if connected_before {
            tracing::info!("relay subscription back: sending every room its current state");
            resend_current(&hub, &rooms).await;
        }
        connected_before = true;
        let mut messages = pubsub.on_message();
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    Some(msg) => {
                        let Ok(text) = std::str::from_utf8(msg.get_payload_bytes()) else {
                            continue;
                        };
                        deliver(&node, &rooms, text);
                    }
                    None => break,
                },
                _ = stop.changed() => return,
            }
        }
        tracing::warn!("relay subscription lost; reconnecting");
    }
}

fn deliver(node: &str, rooms: &Rooms, text: &str) {
    // The header alone says whose and which game it is: frames of unwatched games are
    // not even looked at.
    let Some(head) = text.split('\n').next() else {
        return;
    };
    let Ok(header) = serde_json::from_str::<Value>(head) else {
        return;
    };
    let (Some(from), Some(inbox), Some(game)) = (
        header["n"].as_str(),
        header["i"].as_str(),
        header["g"].as_str(),
    ) else {
        return;
    };
    if from == node || !rooms.is_watched(inbox, game) {
        return;
    }
    match decode(text) {
        Some((_, inbox, game, delivery)) => {
            rooms.publish(&inbox, &game, delivery);
        }
        None => tracing::warn!("an unreadable relay publication"),
    }
}

/// Sends every room of this node the current state of its game, each viewer its own.
async fn resend_current(hub: &Hub, rooms: &Rooms) {
    for (inbox, game) in rooms.games() {
        let mut frames = Vec::with_capacity(3);
        for viewer in [
            Viewer::Seat(Seat::X),
            Viewer::Seat(Seat::O),
            Viewer::Spectator,
        ] {
            let Ok(state) = hub.state(&inbox, &game, viewer).await else {
                break;
            };
            let Ok(frame) = state.frame().cloned() else {
                break;
            };
            frames.push(Some(frame));
        }
        let mut frames = frames.into_iter();
        if let (Some(x), Some(o), Some(spectator)) = (frames.next(), frames.next(), frames.next()) {
            let delivery = Delivery {
                cause: Cause::Phase,
                views: Views { x, o, spectator },
            };
            rooms.publish(&inbox, &game, delivery);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64, who: &str) -> StateFrame {
        StateFrame::encode(
            Some(seq),
            &json!({"seq": seq, "seat": who, "board": "a\nb"}),
        )
        .expect("an object")
    }

    #[test]
    fn publications_cross_nodes_byte_for_byte() {
        let delivery = Delivery {
            cause: Cause::Accepted {
                seat: Some(Seat::O),
            },
            views: Views {
                x: Some(frame(4, "X")),
                o: None,
                spectator: Some(frame(4, "spectator")),
            },
        };
        let text = encode("n1", "box", "g1", &delivery);
        let (node, inbox, game, back) = decode(&text).expect("a readable message");
        assert_eq!(
            (node.as_str(), inbox.as_str(), game.as_str()),
            ("n1", "box", "g1")
        );
        assert_eq!(back.cause, delivery.cause);
        for seat in [Some(Seat::X), Some(Seat::O), None] {
            let (a, b) = (delivery.views.for_seat(seat), back.views.for_seat(seat));
            assert_eq!(a.map(StateFrame::frame), b.map(StateFrame::frame));
            assert_eq!(a.map(StateFrame::seq), b.map(StateFrame::seq));
        }
        assert!(back.views.o.is_none(), "a view not built stays unbuilt");
        assert!(decode("{}\nnot a frame\n\n").is_none());
        // A cancel crosses with no views at all.
        let cancelled = Delivery {
            cause: Cause::Cancelled,
            views: Views::default(),
        };
        let (_, _, _, back) = decode(&encode("n1", "box", "g1", &cancelled)).expect("readable");
        assert_eq!(back.cause, Cause::Cancelled);
        assert!(back.views.x.is_none() && back.views.o.is_none() && back.views.spectator.is_none());
        // A held choice crosses with its seat, and only that seat's view.
        let held = Delivery {
            cause: Cause::Held { seat: Seat::O },
            views: Views {
                o: Some(frame(2, "O")),
                ..Views::default()
            },
        };
        let (_, _, _, back) = decode(&encode("n1", "box", "g1", &held)).expect("readable");
        assert_eq!(back.cause, Cause::Held { seat: Seat::O });
        assert_eq!(
            back.views.o.as_ref().map(StateFrame::frame),
            held.views.o.as_ref().map(StateFrame::frame)
        );
        assert!(back.views.x.is_none() && back.views.spectator.is_none());
    }

    #[tokio::test]
    async fn a_node_ignores_its_own_publications_and_unwatched_games() {
        let rooms = Rooms::new();
        let mut sub = rooms.subscribe("box", "g1", Some(Seat::O));
        let delivery = Delivery {
            cause: Cause::Phase,
            views: Views {
                x: Some(frame(1, "X")),
                o: Some(frame(1, "O")),
                spectator: Some(frame(1, "spectator")),
            },
        };
        let own = Delivery {
            cause: Cause::Phase,
            views: Views {
                x: Some(frame(9, "X")),
                o: Some(frame(9, "O")),
                spectator: Some(frame(9, "spectator")),
            },
        };
        deliver("me", &rooms, &encode("me", "box", "g1", &own));
        deliver("me", &rooms, &encode("other", "box", "g2", &delivery));
        deliver("me", &rooms, &encode("other", "box", "g1", &delivery));
        let got = sub.recv().await.expect("the other node's publication");
        let o = |d: &Delivery| d.views.o.as_ref().map(StateFrame::frame);
        assert_eq!(o(&got), o(&delivery));
        assert_eq!(
            got.views.o.as_ref().and_then(StateFrame::seq),
            Some(1),
            "its own publication was skipped"
        );
        let more = tokio::time::timeout(Duration::from_millis(50), sub.recv()).await;
        assert!(more.is_err(), "nothing else arrived");
        assert_eq!(rooms.len(), 1, "no room was made for the unwatched game");
    }
}
