//! The engine end to end: posting, verdicts, seats and pairing, hub-written events,
//! custody, rebuild after a restart, caps, listings and rooms. Most tests run over the
//! in-memory stores of `testkit`; `store` runs over the embedded ones in a temp dir.

mod custody;
mod play;
mod seats;
mod store;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use games::reason::Reason;
use games::report::{verify_log, EntryVerdict, Mode};
use games::{crypto, Action, Event, Registry, Seat, Viewer};
use serde_json::{json, Value};

use super::testkit::{MemInbox, MemMeta};
use super::*;
use crate::inbox::Inbox;
use crate::meta::Meta;
use crate::metrics::Metrics;
use crate::rooms::{Cause, LocalRooms};

const INBOX: &str = "lobby";

struct Fixture {
    hub: Hub,
    inbox: Arc<dyn Inbox>,
    rooms: Arc<LocalRooms>,
    metrics: Arc<Metrics>,
}

fn config() -> HubConfig {
    let mut c = HubConfig::new(
        Registry::builtin(),
        b"a test hub secret, long enough".to_vec(),
    );
    c.verdict_wait = Duration::from_secs(3);
    c
}

async fn open_on(inbox: Arc<dyn Inbox>, meta: Arc<dyn Meta>, config: HubConfig) -> Fixture {
    let rooms = Arc::new(LocalRooms::new());
    let metrics = Arc::new(Metrics::new().expect("metrics registry"));
    let hub = Hub::open(config, inbox.clone(), meta, metrics.clone(), rooms.clone())
        .await
        .expect("hub opens");
    Fixture {
        hub,
        inbox,
        rooms,
        metrics,
    }
}

async fn open(config: HubConfig) -> Fixture {
    open_on(MemInbox::new(4), Arc::new(MemMeta::default()), config).await
}

fn event(game: &str, seq: u64, prev: &str, player: Seat, mv: Option<Value>) -> Event {
    Event {
        game: game.into(),
        seq,
        prev_hash: prev.into(),
        player,
        action: if seq == 0 {
            Action::Start
        } else if mv.is_some() {
            Action::Move
        } else {
            Action::Resign
        },
        mv,
        protocol: None,
        rules: None,
        status: None,
        sig: None,
    }
}

async fn post(f: &Fixture, ev: Event, auth: Option<SeatAuth>) -> Result<Posted, HubError> {
    let raw = Bytes::from(ev.to_json());
    f.hub.post_event(INBOX, ev, raw, auth).await
}

/// Waits (at most a second) until the game's spectator view reaches `want`; its last seq.
async fn wait_for_seq(f: &Fixture, game: &str, want: u64) -> u64 {
    let mut seq = 0;
    for _ in 0..100 {
        seq = f
            .hub
            .state(INBOX, game, Viewer::Spectator)
            .await
            .expect("state")
            .seq
            .unwrap_or(0);
        if seq >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seq
}

fn rc(r: i64, c: i64) -> Option<Value> {
    Some(json!({"row": r, "col": c}))
}

async fn seated(f: &Fixture, protocol: &str, signed: bool) -> (SeatAuth, SeatAuth) {
    let created = f
        .hub
        .create_game(
            INBOX,
            CreateGame {
                protocol: Some(protocol.into()),
                rules: None,
                signed,
                key: None,
            },
            "host-1",
        )
        .await
        .expect("created");
    assert_eq!(created.pairing_code.len(), 8);
    let x = f
        .hub
        .seat_for_token(&created.token)
        .await
        .expect("looked up")
        .expect("X's token opens X");
    let waiting = f
        .hub
        .state(INBOX, &created.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(waiting.phase, Phase::Waiting);
    assert_eq!(waiting.seq, None);
    let paired = f
        .hub
        .pair(&created.pairing_code, None, None)
        .await
        .expect("paired");
    let o = f
        .hub
        .seat_for_token(&paired.token)
        .await
        .expect("looked up")
        .expect("O's token opens O");
    assert_eq!((x.seat, o.seat), (Seat::X, Seat::O));
    (x, o)
}
