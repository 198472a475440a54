//! The engine over the embedded stores in a temp dir: a seated game survives closing and
//! reopening the hub, with its seats, its chain and its verdicts.

use super::*;
use crate::inbox::embedded::EmbeddedInbox;
use crate::meta::EmbeddedMeta;

fn stores(dir: &std::path::Path) -> (Arc<dyn Inbox>, Arc<dyn Meta>) {
    // The store locks its directory while it is open. After `Hub::shutdown` the last
    // actor threads may still hold the old store for a moment, so a reopen in the same
    // process waits (boundedly) for them to let go, as a restarted process would not need to.
    let mut tries = 0;
    let inbox = loop {
        match EmbeddedInbox::open(dir, 4) {
            Ok(inbox) => break inbox,
            Err(e) if tries < 100 && e.to_string().contains("in use") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("inbox opens: {e}"),
        }
    };
    let meta = EmbeddedMeta::open(dir).expect("meta opens");
    (Arc::new(inbox), Arc::new(meta))
}

/// Plays hub-held tic-tac-toe moves, each accepted; returns the last one's capture.
async fn play(hub: &Hub, moves: &[(&SeatAuth, i64, i64)]) -> Option<crate::inbox::Capture> {
    let mut last = None;
    for &(auth, r, c) in moves {
        let p = hub
            .post_move(auth, json!({"move": {"row": r, "col": c}}))
            .await
            .expect("move");
        assert_eq!(p.verdict, Verdict::Accepted);
        last = p.capture;
    }
    last
}

fn tic_tac_toe() -> CreateGame {
    CreateGame {
        protocol: Some("pipehub:tic-tac-toe".into()),
        rules: None,
        signed: false,
        key: None,
    }
}

/// Creates and pairs a tic-tac-toe game hosted by `host`, and plays it to X's win; returns
/// X's and O's tokens and seats.
async fn won_game(hub: &Hub, host: &str) -> (String, String, SeatAuth, SeatAuth) {
    let created = hub
        .create_game(INBOX, tic_tac_toe(), host)
        .await
        .expect("create");
    let paired = hub
        .pair(&created.pairing_code, None, None)
        .await
        .expect("pair");
    let x = hub
        .seat_for_token(&created.token)
        .await
        .expect("looked up")
        .expect("X");
    let o = hub
        .seat_for_token(&paired.token)
        .await
        .expect("looked up")
        .expect("O");
    play(
        hub,
        &[(&x, 0, 0), (&o, 1, 0), (&x, 0, 1), (&o, 1, 1), (&x, 0, 2)],
    )
    .await;
    (created.token, paired.token, x, o)
}

/// Waits up to 5 s for `host`'s open games to come to `n` (a game closes asynchronously,
/// after its last verdict); returns the count then.
async fn open_games_reach(hub: &Hub, host: &str, n: u64) -> u64 {
    for _ in 0..500 {
        if hub.engine_open_games(host) == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hub.engine_open_games(host)
}

/// Waits up to 5 s for `key` to be gone from `meta` (a close gives back its place under the
/// cap at once, and deletes its open-game mark after); whether it is.
async fn gone_from(meta: &Arc<dyn Meta>, key: &str) -> bool {
    for _ in 0..500 {
        if meta.get(key).await.expect("get").is_none() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[actix_rt::test]
async fn a_seated_game_survives_a_restart_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (inbox, meta) = stores(dir.path());
    let f = open_on(inbox, meta, config()).await;
    let (x, o) = seated(&f, "pipehub:tic-tac-toe", true).await;
    let last = play(&f.hub, &[(&x, 0, 0), (&o, 1, 1)]).await;
    let before = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    f.hub.shutdown().await;
    drop(f);

    let (inbox, meta) = stores(dir.path());
    let g = open_on(inbox, meta, config()).await;
    // The chain and the verdicts are as they were. (The tokens are read from the store
    // when first used: a_seat_is_read_from_the_store_at_its_first_use_after_a_restart.)
    let item = g
        .hub
        .capture(INBOX, last.expect("capture"))
        .await
        .expect("capture");
    assert_eq!(item.verdict, Verdict::Accepted);
    assert_eq!(item.seat, Some(Seat::O));
    let after = g
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!((after.seq, &after.head), (before.seq, &before.head));
    // The game goes on from where it was.
    let p = g
        .hub
        .post_move(&x, json!({"move": {"row": 0, "col": 1}}))
        .await
        .expect("move");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    assert_eq!(p.state.and_then(|s| s.seq), Some(3));
    let export = g.hub.export(INBOX, &x.game).await.expect("export");
    let report = verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin());
    assert_eq!(report[0].verdict, EntryVerdict::Ok);
    g.hub.shutdown().await;
}

#[actix_rt::test]
async fn a_finished_game_leaves_the_seat_cache_and_its_seats_still_answer_from_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (inbox, meta) = stores(dir.path());
    let f = open_on(inbox, meta, config()).await;
    // One game played to the end, one left open.
    let (x_token, o_token, x, o) = won_game(&f.hub, "host-1").await;
    let open = f
        .hub
        .create_game(INBOX, tic_tac_toe(), "host-1")
        .await
        .expect("create");
    // The finished game closes (asynchronously, after its last verdict).
    assert_eq!(open_games_reach(&f.hub, "host-1", 1).await, 1);
    assert!(!f.hub.registration_cached(INBOX, &x.game));
    assert!(f.hub.registration_cached(INBOX, &open.game));
    // The finished game's two seats leave the cache at the next sweep, within a second.
    for _ in 0..300 {
        if f.hub.seat_for_token_count() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(f.hub.seat_for_token_count(), 1, "the open game's X");
    assert_eq!(f.hub.forget_closed_seats(), 0, "nothing left to forget");

    let check = |hub: Hub| {
        let (x_token, o_token, x, o) = (x_token.clone(), o_token.clone(), x.clone(), o.clone());
        async move {
            // Its tokens still open their seats, read from the store.
            assert_eq!(
                hub.seat_for_token(&x_token).await.expect("looked up"),
                Some(x.clone())
            );
            assert_eq!(
                hub.seat_for_token(&o_token).await.expect("looked up"),
                Some(o.clone())
            );
            assert_eq!(
                hub.seat_for_token(&"0".repeat(64))
                    .await
                    .expect("looked up"),
                None
            );
            // Seat rules still hold: a move is judged (the game is over), and another
            // seat's token cannot write for X.
            match hub
                .post_move(&x, json!({"move": {"row": 2, "col": 2}}))
                .await
            {
                Ok(p) => assert_ne!(p.verdict, Verdict::Accepted),
                Err(e) => assert!(matches!(e, HubError::Refused(_)), "{e:?}"),
            }
            let state = hub
                .state(INBOX, &x.game, Viewer::Seat(Seat::O))
                .await
                .expect("state");
            let mv = event(
                &x.game,
                6,
                &state.head.clone().unwrap_or_default(),
                Seat::X,
                rc(2, 2),
            );
            let raw = Bytes::from(mv.to_json());
            let foreign = hub.post_event(INBOX, mv, raw, Some(o.clone())).await;
            assert!(
                matches!(foreign, Err(HubError::Forbidden(_))),
                "{foreign:?}"
            );
            let state = hub
                .state(INBOX, &x.game, Viewer::Seat(Seat::X))
                .await
                .expect("state");
            assert_eq!(state.result.map(|r| r.winner), Some(Some(Seat::X)));
            hub
        }
    };
    check(f.hub.clone()).await.shutdown().await;
    drop(f);

    // After a restart only the open game's registration is loaded into the cache, and
    // no seat until it is used; then only the open game's.
    let (inbox, meta) = stores(dir.path());
    let g = open_on(inbox, meta, config()).await;
    assert_eq!(g.hub.seat_for_token_count(), 0);
    assert!(g.hub.registration_cached(INBOX, &open.game));
    assert!(!g.hub.registration_cached(INBOX, &x.game));
    assert_eq!(g.hub.engine_open_games("host-1"), 1);
    let g_hub = check(g.hub.clone()).await;
    assert_eq!(
        g_hub.seat_for_token_count(),
        0,
        "a finished game's seats stay out"
    );
    assert!(g_hub
        .seat_for_token(&open.token)
        .await
        .expect("looked up")
        .is_some());
    assert_eq!(g_hub.seat_for_token_count(), 1, "the open game's X");
    g_hub.shutdown().await;
}

#[actix_rt::test]
async fn a_seat_is_read_from_the_store_at_its_first_use_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (inbox, meta) = stores(dir.path());
    let f = open_on(inbox, meta, config()).await;
    // One game paired and under way, one waiting for O.
    let playing = f
        .hub
        .create_game(INBOX, tic_tac_toe(), "host-1")
        .await
        .expect("create");
    let paired = f
        .hub
        .pair(&playing.pairing_code, None, None)
        .await
        .expect("pair");
    let x = f
        .hub
        .seat_for_token(&playing.token)
        .await
        .expect("looked up")
        .expect("X");
    play(&f.hub, &[(&x, 0, 0)]).await;
    let waiting = f
        .hub
        .create_game(INBOX, tic_tac_toe(), "host-1")
        .await
        .expect("create");
    f.hub.shutdown().await;
    drop(f);

    let (inbox, meta) = stores(dir.path());
    let g = open_on(inbox, meta, config()).await;
    assert_eq!(g.hub.seat_for_token_count(), 0, "no seat is read at open");
    // Each token opens its seat, read from the store once and cached from then on.
    let o = g
        .hub
        .seat_for_token(&paired.token)
        .await
        .expect("looked up")
        .expect("O");
    assert_eq!((o.seat, &*o.game), (Seat::O, playing.game.as_str()));
    assert_eq!(g.hub.seat_for_token_count(), 1);
    assert_eq!(
        g.hub
            .seat_for_token(&paired.token)
            .await
            .expect("looked up"),
        Some(o.clone())
    );
    assert_eq!(g.hub.seat_for_token_count(), 1);
    play(&g.hub, &[(&o, 1, 1)]).await;
    assert_eq!(
        g.hub
            .seat_for_token(&"0".repeat(64))
            .await
            .expect("looked up"),
        None
    );
    // Cancelling the waiting game with its X's token read after the restart still leaves
    // that token opening nothing.
    let host = g
        .hub
        .seat_for_token(&waiting.token)
        .await
        .expect("looked up")
        .expect("X");
    assert_eq!(g.hub.seat_for_token_count(), 2);
    g.hub.cancel(&host).await.expect("cancel");
    assert_eq!(
        g.hub
            .seat_for_token(&waiting.token)
            .await
            .expect("looked up"),
        None
    );
    assert_eq!(g.hub.seat_for_token_count(), 1);
    g.hub.shutdown().await;
}

#[actix_rt::test]
async fn a_game_that_finished_as_the_hub_stopped_stops_counting_as_open_when_it_reopens() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (inbox, meta) = stores(dir.path());
    let f = open_on(inbox, meta.clone(), config()).await;
    let (_, _, x, _) = won_game(&f.hub, "host-1").await;
    assert_eq!(
        open_games_reach(&f.hub, "host-1", 0).await,
        0,
        "closed after its win"
    );
    // As if the hub had stopped before that close reached the store: the mark is back.
    let mark = super::super::seats::open_key("host-1", INBOX, &x.game);
    assert!(gone_from(&meta, &mark).await, "the close deleted the mark");
    meta.put(&mark, Bytes::new()).await.expect("put");
    f.hub.shutdown().await;
    drop((f, meta));

    let (inbox, meta) = stores(dir.path());
    let g = open_on(inbox, meta.clone(), config()).await;
    // Nobody comes back to the finished game; the hub settles it on its own.
    let open = open_games_reach(&g.hub, "host-1", 0).await;
    assert_eq!(open, 0, "no longer counted open");
    assert!(!g.hub.registration_cached(INBOX, &x.game));
    assert!(gone_from(&meta, &mark).await, "the mark is gone");
    g.hub.shutdown().await;
}
