//! The engine end to end, over in-memory stores: posting, verdicts, seats and pairing,
//! hub-written events, custody, rebuild after a restart, caps, listings and rooms.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use games::reason::Reason;
use games::report::{verify_log, EntryVerdict, Mode};
use games::{crypto, Action, Event, Registry, Seat, Status, Viewer};
use serde_json::{json, Value};

use super::testkit::{MemInbox, MemMeta};
use super::*;
use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::rooms::{Cause, LocalRooms};

const INBOX: &str = "lobby";

struct Fixture {
    hub: Hub,
    inbox: Arc<MemInbox>,
    meta: Arc<MemMeta>,
    rooms: Arc<LocalRooms>,
}

fn config() -> HubConfig {
    let mut c = HubConfig::new(
        Registry::builtin(),
        b"a test hub secret, long enough".to_vec(),
    );
    c.verdict_wait = Duration::from_secs(3);
    c
}

async fn open_on(inbox: Arc<MemInbox>, meta: Arc<MemMeta>, config: HubConfig) -> Fixture {
    let rooms = Arc::new(LocalRooms::new());
    let metrics = Arc::new(Metrics::new().expect("metrics registry"));
    let hub = Hub::open(config, inbox.clone(), meta.clone(), metrics, rooms.clone())
        .await
        .expect("hub opens");
    Fixture {
        hub,
        inbox,
        meta,
        rooms,
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

fn rc(r: i64, c: i64) -> Option<Value> {
    Some(json!({"row": r, "col": c}))
}

#[actix_rt::test]
async fn an_anonymous_game_plays_to_a_win_and_exports_a_verifiable_chain() {
    let f = open(config()).await;
    let start = post(&f, event("t1", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    assert_eq!(start.verdict, Verdict::Accepted);
    let mut head = start.hash.expect("hash");
    let moves = [
        (Seat::X, 0, 0),
        (Seat::O, 1, 0),
        (Seat::X, 0, 1),
        (Seat::O, 1, 1),
    ];
    for (i, (seat, r, c)) in moves.into_iter().enumerate() {
        let p = post(&f, event("t1", i as u64 + 1, &head, seat, rc(r, c)), None)
            .await
            .expect("posted");
        assert_eq!(p.verdict, Verdict::Accepted, "move {i}");
        head = p.hash.expect("hash");
    }
    // O moving out of turn is refereed: the capture is kept, the true state returned.
    let wrong = post(&f, event("t1", 5, &head, Seat::O, rc(2, 2)), None)
        .await
        .expect("posted");
    assert_eq!(wrong.verdict, Verdict::Rejected);
    assert_eq!(wrong.refusal.map(|r| r.reason), Some(Reason::WrongPlayer));
    let state = wrong.state.expect("state with a rejection");
    assert_eq!(state.seq, Some(4));
    assert_eq!(
        state.seat, None,
        "an anonymous poster gets the spectator view"
    );
    let win = post(&f, event("t1", 5, &head, Seat::X, rc(0, 2)), None)
        .await
        .expect("posted");
    assert_eq!(win.verdict, Verdict::Accepted);
    let state = f
        .hub
        .state(INBOX, "t1", Viewer::Spectator)
        .await
        .expect("state");
    let result = state.result.expect("result");
    assert_eq!((result.status, result.winner), ("win", Some(Seat::X)));
    assert_eq!(state.phase, Phase::Started);
    assert_eq!(state.protocol.as_deref(), Some("pipehub:tic-tac-toe"));

    let export = f.hub.export(INBOX, "t1").await.expect("export");
    assert_eq!(export.lines().count(), 6);
    let report = verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin());
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].verdict, EntryVerdict::Ok);

    // Captures remember who posted them and their verdicts.
    let listing = f
        .hub
        .captures(INBOX, Some("t1"), None, 100)
        .await
        .expect("list");
    assert_eq!(listing.items.len(), 7);
    assert_eq!(listing.items[5].verdict, Verdict::Rejected);
    assert_eq!(listing.items[5].reason.as_deref(), Some("wrong_player"));
    assert!(listing.items.iter().all(|i| i.seat.is_none()));
    let one = f
        .hub
        .capture(INBOX, win.capture.expect("capture"))
        .await
        .expect("capture lookup");
    assert_eq!(one.verdict, Verdict::Accepted);
}

#[actix_rt::test]
async fn a_start_naming_other_inboxes_is_refused_with_detail_inbox() {
    let f = open(config()).await;
    let mut start = event("t2", 0, "", Seat::X, None);
    start.rules = Some(
        json!({"inboxes": ["elsewhere"]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let p = post(&f, start.clone(), None).await.expect("posted");
    assert_eq!(p.verdict, Verdict::Rejected);
    let r = p.refusal.expect("refusal");
    assert_eq!(
        (r.reason, r.detail.as_deref()),
        (Reason::BadRules, Some("inbox"))
    );
    // The same start naming this inbox is the genesis.
    start.rules = Some(
        json!({"inboxes": [INBOX]})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let p = post(&f, start, None).await.expect("posted");
    assert_eq!(p.verdict, Verdict::Accepted);
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
        .pair(&created.pairing_code, None)
        .await
        .expect("paired");
    let o = f
        .hub
        .seat_for_token(&paired.token)
        .await
        .expect("O's token opens O");
    assert_eq!((x.seat, o.seat), (Seat::X, Seat::O));
    (x, o)
}

#[actix_rt::test]
async fn a_seated_hub_held_game_is_started_by_pair_and_played_through_moves() {
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:connect-four", true).await;
    // `pair` answers once the hub's start is accepted.
    let s = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::O))
        .await
        .expect("state");
    assert_eq!(s.phase, Phase::Started);
    assert_eq!(s.seq, Some(0));
    let keys = s.keys.clone().expect("signed game shows both keys");
    assert!(keys.x.is_some() && keys.o.is_some());

    for (i, (auth, col)) in [(&x, 0), (&o, 1), (&x, 0), (&o, 1), (&x, 0), (&o, 1)]
        .iter()
        .enumerate()
    {
        let p = f
            .hub
            .post_move(auth, json!({"move": {"col": col}}))
            .await
            .expect("move");
        assert_eq!(p.verdict, Verdict::Accepted, "move {i}");
        assert_eq!(p.state.as_ref().and_then(|s| s.seat), Some(auth.seat));
    }
    // Out of turn: refereed, not an error.
    let p = f
        .hub
        .post_move(&o, json!({"move": {"col": 1}}))
        .await
        .expect("move");
    assert_eq!(p.refusal.map(|r| r.reason), Some(Reason::WrongPlayer));
    let p = f
        .hub
        .post_move(&x, json!({"move": {"col": 0}}))
        .await
        .expect("move");
    let result = p.state.and_then(|s| s.result).expect("result");
    assert_eq!((result.status, result.winner), ("win", Some(Seat::X)));

    // The chain verifies strictly, signatures included, and names this inbox.
    let export = f.hub.export(INBOX, &x.game).await.expect("export");
    let report = verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin());
    assert_eq!(report[0].verdict, EntryVerdict::Ok);
    assert!(export
        .lines()
        .next()
        .is_some_and(|l| l.contains("\"inboxes\":[\"lobby\"]")));
    // Captures say which seat wrote each event.
    let listing = f
        .hub
        .captures(INBOX, Some(&x.game), None, 100)
        .await
        .expect("list");
    assert_eq!(listing.items[0].seat, Some(Seat::X));
    assert_eq!(listing.items[2].seat, Some(Seat::O));
    // The finished game no longer counts as open for its host.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(f.hub.engine_open_games("host-1"), 0);
}

#[actix_rt::test]
async fn seat_rules_are_checked_before_the_inbox() {
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:tic-tac-toe", true).await;
    let before = f.inbox.count(INBOX, &x.game).await.expect("count");
    let head = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state")
        .head;
    let mv = event(&x.game, 1, &head.unwrap_or_default(), Seat::X, rc(0, 0));
    let no_token = post(&f, mv.clone(), None).await;
    assert!(
        matches!(no_token, Err(HubError::Unauthorized(_))),
        "{no_token:?}"
    );
    let other_seat = post(&f, mv.clone(), Some(o.clone())).await;
    assert!(
        matches!(other_seat, Err(HubError::Forbidden(_))),
        "{other_seat:?}"
    );
    let mut other_game = x.clone();
    other_game.game = "elsewhere".into();
    let foreign = post(&f, mv, Some(other_game)).await;
    assert!(
        matches!(foreign, Err(HubError::Forbidden(_))),
        "{foreign:?}"
    );
    let resign_by_o = f.hub.resign(&o).await.expect("resign");
    assert_eq!(resign_by_o.verdict, Verdict::Accepted);
    let state = resign_by_o.state.expect("state");
    let result = state.result.expect("result");
    assert_eq!(
        (result.winner, result.by),
        (Some(Seat::X), Some(games::WinBy::Resign))
    );
    assert_eq!(
        f.inbox.count(INBOX, &x.game).await.expect("count"),
        before + 1
    );
}

#[actix_rt::test]
async fn an_agent_held_host_writes_its_own_start_and_the_hub_checks_it() {
    let f = open(config()).await;
    let agent_key = crypto::seat_key(b"the agent's own secret", "any", "any", Seat::X);
    let public = crypto::public_key_hex(&agent_key.verifying_key());
    let created = f
        .hub
        .create_game(
            INBOX,
            CreateGame {
                protocol: Some("pipehub:tic-tac-toe".into()),
                rules: Some(
                    json!({"rows": 4, "cols": 4})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ),
                signed: true,
                key: Some(public.clone()),
            },
            "host-2",
        )
        .await
        .expect("created");
    let x = f.hub.seat_for_token(&created.token).await.expect("X");
    f.hub
        .pair(&created.pairing_code, None)
        .await
        .expect("paired");
    let paired = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(
        paired.phase,
        Phase::Paired,
        "the hub does not write an agent's start"
    );
    let keys = paired.keys.expect("keys");
    assert_eq!(keys.x.as_deref(), Some(public.as_str()));
    assert_eq!(
        f.hub
            .post_move(&x, json!({"move": {"row": 0, "col": 0}}))
            .await
            .err()
            .map(|e| e.code()),
        Some("agent_held")
    );

    let start_with = |rules: Value| {
        let mut ev = event(&x.game, 0, "", Seat::X, None);
        ev.protocol = Some("pipehub:tic-tac-toe".into());
        ev.rules = rules.as_object().cloned();
        let prepared = games::verify::Prepared::of(&ev);
        ev.sig = Some(crypto::sign(&agent_key, &prepared.canonical));
        ev
    };
    let ks = json!({"X": keys.x, "O": keys.o});
    let wrong_rules = start_with(json!({"rows": 3, "cols": 4, "keys": ks, "inboxes": [INBOX]}));
    let refused = post(&f, wrong_rules, Some(x.clone())).await;
    assert!(
        matches!(refused, Err(HubError::Forbidden(_))),
        "{refused:?}"
    );
    let wrong_keys = start_with(json!({"rows": 4, "cols": 4, "keys": {"X": keys.o, "O": keys.x}}));
    assert!(matches!(
        post(&f, wrong_keys, Some(x.clone())).await,
        Err(HubError::Forbidden(_))
    ));
    let good = start_with(json!({"rows": 4, "cols": 4, "keys": ks, "inboxes": [INBOX]}));
    let p = post(&f, good, Some(x.clone())).await.expect("posted");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    assert_eq!(p.state.map(|s| s.phase), Some(Phase::Started));
}

#[actix_rt::test]
async fn pairing_codes_work_once_expire_and_can_be_renewed_or_cancelled() {
    let mut c = config();
    c.max_open_games = Some(2);
    let f = open(c).await;
    let req = || CreateGame {
        protocol: None,
        rules: None,
        signed: false,
        key: None,
    };
    let a = f.hub.create_game(INBOX, req(), "p").await.expect("created");
    let b = f.hub.create_game(INBOX, req(), "p").await.expect("created");
    assert!(matches!(
        f.hub.create_game(INBOX, req(), "p").await,
        Err(HubError::TooManyGames(2))
    ));
    assert!(f
        .hub
        .pair("ZZZZZZZZ", None)
        .await
        .is_err_and(|e| e.status() == 404));

    // A fresh code kills the old one.
    let xa = f.hub.seat_for_token(&a.token).await.expect("X");
    let fresh = f.hub.new_code(&xa).await.expect("new code");
    assert_eq!(
        f.hub
            .pair(&a.pairing_code, None)
            .await
            .err()
            .map(|e| e.code()),
        Some("code_used")
    );
    f.hub
        .pair(&fresh.pairing_code.to_lowercase(), None)
        .await
        .expect("paired");
    assert_eq!(
        f.hub
            .pair(&fresh.pairing_code, None)
            .await
            .err()
            .map(|e| e.code()),
        Some("code_used")
    );
    assert!(matches!(
        f.hub.cancel(&xa).await,
        Err(HubError::AlreadyPaired)
    ));

    // Cancelling frees the host's slot and kills the token and the code.
    let xb = f.hub.seat_for_token(&b.token).await.expect("X");
    f.hub.cancel(&xb).await.expect("cancelled");
    assert!(f.hub.seat_for_token(&b.token).await.is_none());
    assert!(f.hub.pair(&b.pairing_code, None).await.is_err());
    f.hub
        .create_game(INBOX, req(), "p")
        .await
        .expect("a slot is free again");

    let mut c = config();
    c.code_ttl = Duration::ZERO;
    let g = open(c).await;
    let e = g.hub.create_game(INBOX, req(), "p").await.expect("created");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        g.hub
            .pair(&e.pairing_code, None)
            .await
            .err()
            .map(|e| e.code()),
        Some("code_expired")
    );
}

#[actix_rt::test]
async fn the_captures_cap_refuses_before_the_inbox() {
    let mut c = config();
    c.max_captures_per_game = Some(2);
    let f = open(c).await;
    let s = post(&f, event("cap", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    let head = s.hash.expect("hash");
    post(&f, event("cap", 1, &head, Seat::X, rc(0, 0)), None)
        .await
        .expect("posted");
    let third = post(&f, event("cap", 2, &head, Seat::O, rc(1, 1)), None).await;
    assert!(matches!(third, Err(HubError::TooManyCaptures(2))));
    assert_eq!(f.inbox.count(INBOX, "cap").await.expect("count"), 2);
}

#[actix_rt::test]
async fn rock_paper_scissors_choices_are_held_committed_and_revealed_by_the_hub() {
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let mut room = f.rooms.subscribe(INBOX, &x.game);
    // O chooses before X has committed: held, nothing appended.
    let before = f.inbox.count(INBOX, &x.game).await.expect("count");
    let held = f
        .hub
        .post_move(&o, json!({"choice": "rock"}))
        .await
        .expect("held");
    assert_eq!(held.verdict, Verdict::Held);
    assert!(held.capture.is_none());
    let mine = held.state.expect("O's state");
    assert_eq!(
        mine.view.as_ref().and_then(|v| v.get("pendingChoice")),
        Some(&json!("rock"))
    );
    assert_eq!(f.inbox.count(INBOX, &x.game).await.expect("count"), before);
    // A second choice replaces the held one.
    f.hub
        .post_move(&o, json!({"choice": "paper"}))
        .await
        .expect("held");
    // X chooses on its turn: its commit is written; O's held commit follows, then both
    // reveals, X's first.
    let p = f
        .hub
        .post_move(&x, json!({"move": {"choice": "scissors"}}))
        .await
        .expect("commit");
    assert_eq!(p.verdict, Verdict::Accepted);
    let mut seq = 0;
    for _ in 0..100 {
        seq = f
            .hub
            .state(INBOX, &x.game, Viewer::Spectator)
            .await
            .expect("state")
            .seq
            .unwrap_or(0);
        if seq >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seq, 4, "commit, commit, reveal, reveal");
    let export = f.hub.export(INBOX, &x.game).await.expect("export");
    let lines: Vec<Value> = export
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines[3]["player"], "X");
    assert_eq!(lines[3]["move"]["choice"], "scissors");
    assert_eq!(lines[4]["player"], "O");
    assert_eq!(lines[4]["move"]["choice"], "paper");
    assert_eq!(
        verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin())[0].verdict,
        EntryVerdict::Ok
    );
    // Each accepted event reached the room once, with every seat's own view; a spectator
    // never saw a pending choice.
    let mut published = 0;
    while let Ok(publication) = room.try_recv() {
        // (The start may or may not be seen: `pair` answers as it is accepted.)
        if let Cause::Accepted { .. } = publication.cause {
            if publication.views.spectator.seq >= Some(1) {
                published += 1;
            }
        }
        let spectator = serde_json::to_string(&publication.views.spectator).expect("json");
        assert!(!spectator.contains("pendingChoice"));
        let x_pending = publication
            .views
            .x
            .view
            .as_ref()
            .and_then(|v| v.get("pendingChoice"));
        assert!(x_pending.is_none() || x_pending == Some(&json!("scissors")));
    }
    assert_eq!(published, 4);
    // A choice that is no choice is refused without touching the inbox.
    assert_eq!(
        f.hub
            .post_move(&x, json!({"choice": "lizard"}))
            .await
            .err()
            .map(|e| e.status()),
        Some(422)
    );
}

#[actix_rt::test]
async fn a_restarted_hub_rebuilds_games_and_reports_a_lost_held_choice() {
    let inbox = MemInbox::new(2);
    let meta = Arc::new(MemMeta::default());
    let f = open_on(inbox.clone(), meta.clone(), config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", false).await;
    let held = f
        .hub
        .post_move(&o, json!({"choice": "rock"}))
        .await
        .expect("held");
    assert_eq!(held.verdict, Verdict::Held);
    let before = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    f.hub.shutdown().await;

    let g = open_on(inbox, meta, config()).await;
    assert_eq!(g.hub.seat_for_token_count(), 2);
    let after = g
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!((after.seq, after.head.clone()), (before.seq, before.head));
    let o_state = g
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::O))
        .await
        .expect("state");
    assert_eq!(o_state.notice, Some(Notice::HeldChoiceLost));
    let x_state = g
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(x_state.notice, None);
    // Choosing again clears the notice.
    let again = g
        .hub
        .post_move(&o, json!({"choice": "rock"}))
        .await
        .expect("held");
    assert_eq!(again.state.and_then(|s| s.notice), None);
    let _ = Status::Win;
}

#[actix_rt::test]
async fn the_game_listing_shows_waiting_and_started_games() {
    let f = open(config()).await;
    post(&f, event("anon", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    let created = f
        .hub
        .create_game(
            INBOX,
            CreateGame {
                signed: true,
                ..CreateGame::default()
            },
            "p",
        )
        .await
        .expect("created");
    let all = f.hub.games(INBOX, None, 10).await.expect("list");
    let phases: Vec<(String, Phase)> = all
        .items
        .iter()
        .map(|g| (g.game.clone(), g.phase))
        .collect();
    assert_eq!(
        phases,
        vec![
            (created.game.clone(), Phase::Waiting),
            ("anon".to_string(), Phase::Started)
        ]
    );
    let waiting = f
        .hub
        .games(INBOX, Some(Phase::Started), 10)
        .await
        .expect("list");
    assert_eq!(waiting.items.len(), 1);
    assert!(f
        .hub
        .state(INBOX, "nope", Viewer::Spectator)
        .await
        .is_err_and(|e| e.status() == 404));
    assert_eq!(
        f.hub.resident_actors(),
        1,
        "probing an unknown id starts no actor"
    );
    let _ = &f.meta;
}

#[actix_rt::test]
async fn an_idle_actor_stops_and_the_next_event_rebuilds_it() {
    let mut c = config();
    c.actor_idle = Duration::from_millis(100);
    let f = open(c).await;
    let s = post(&f, event("idle", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    assert_eq!(f.hub.resident_actors(), 1);
    for _ in 0..100 {
        if f.hub.resident_actors() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.hub.resident_actors(), 0, "the idle actor stopped");
    let head = s.hash.expect("hash");
    let p = post(&f, event("idle", 1, &head, Seat::X, rc(1, 1)), None)
        .await
        .expect("posted");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    assert_eq!(p.state.and_then(|s| s.seq), Some(1));
}
