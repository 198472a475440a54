//! Seated play: pairing, seat rules, hub-held and agent-held seats.

use super::*;

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
    // The finished game no longer counts as open for its host, from its last verdict on:
    // a host who creates a game the moment it sees this one end is not refused for it.
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
        .head
        .clone();
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

    // Finished, the game leaves the open ones; its host's token still names it, and a new
    // code or a cancel is refused as for any paired game, not as an unknown one.
    assert!(!f.hub.engine_holds_open(INBOX, &x.game));
    assert!(matches!(
        f.hub.new_code(&x).await,
        Err(HubError::AlreadyPaired)
    ));
    assert!(matches!(
        f.hub.cancel(&x).await,
        Err(HubError::AlreadyPaired)
    ));
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
    let x = seat_of(&f.hub, &created.token).await;
    f.hub
        .pair(&created.pairing_code, None, None)
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
    // Only this X, which holds its key, is told to write the start.
    assert_eq!(
        paired.board,
        "paired: write the start event naming both keys"
    );
    let o_view = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::O))
        .await
        .expect("state");
    assert_eq!(o_view.board, "paired: waiting for X to start the game");
    let keys = paired.keys.clone().expect("keys");
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
        .pair("ZZZZZZZZ", None, None)
        .await
        .is_err_and(|e| e.status() == 404));

    // A fresh code kills the old one.
    let xa = seat_of(&f.hub, &a.token).await;
    let fresh = f.hub.new_code(&xa).await.expect("new code");
    assert_eq!(pair_error(&f.hub, &a.pairing_code).await, Some("code_used"));
    f.hub
        .pair(&fresh.pairing_code.to_lowercase(), None, None)
        .await
        .expect("paired");
    assert_eq!(
        pair_error(&f.hub, &fresh.pairing_code).await,
        Some("code_used")
    );
    assert!(matches!(
        f.hub.cancel(&xa).await,
        Err(HubError::AlreadyPaired)
    ));

    // Cancelling frees the host's slot and kills the token and the code.
    let xb = seat_of(&f.hub, &b.token).await;
    f.hub.cancel(&xb).await.expect("cancelled");
    assert!(f
        .hub
        .seat_for_token(&b.token)
        .await
        .expect("looked up")
        .is_none());
    assert!(f.hub.pair(&b.pairing_code, None, None).await.is_err());
    let live = f
        .hub
        .create_game(INBOX, req(), "p")
        .await
        .expect("a slot is free again");

    let mut c = config();
    c.code_ttl = Duration::ZERO;
    let g = open(c).await;
    let e = g.hub.create_game(INBOX, req(), "p").await.expect("created");
    // A code expires once the clock is past its expiry, by a millisecond at least: a wait
    // the test needs, and one a slow machine only lengthens.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        pair_error(&g.hub, &e.pairing_code).await,
        Some("code_expired")
    );
    assert_eq!(
        pair_error(&g.hub, &e.pairing_code).await,
        Some("code_expired"),
        "an expired code stays expired"
    );

    // Dead codes are remembered for a while, then purged: a try then finds no code.
    let now = crate::clock::now_ms();
    let keep = 60_000;
    assert_eq!(
        f.hub.sweep_codes(now, keep).await,
        (0, 0),
        "all died just now"
    );
    assert_eq!(g.hub.sweep_codes(now, keep).await, (0, 0));
    // a's first code (replaced), a's fresh code (used), b's code (cancelled): no game
    // waits behind them.
    assert_eq!(f.hub.sweep_codes(now + keep + 1_000, keep).await, (3, 0));
    // e's code expired and was never replaced: nobody can join e, which is cancelled
    // rather than left holding its host's place under the cap for good.
    assert!(g.hub.engine_holds_open(INBOX, &e.game));
    assert_eq!(g.hub.sweep_codes(now + keep + 1_000, keep).await, (1, 1));
    assert!(!g.hub.engine_holds_open(INBOX, &e.game));
    assert_eq!(g.hub.engine_open_games("p"), 0);
    assert_eq!(
        pair_error(&f.hub, &fresh.pairing_code).await,
        Some("not_found")
    );
    assert_eq!(pair_error(&g.hub, &e.pairing_code).await, Some("not_found"));
    // A live code is never purged.
    f.hub
        .pair(&live.pairing_code, None, None)
        .await
        .expect("the live code still pairs");
}

/// While the inbox cannot take writes, no game is created, no fresh code is handed out and
/// no code is spent: a game seated then could never start. Once it can again, the code
/// made before still pairs. A cancel still goes through: it starts nothing, and gives the
/// host's place back.
#[actix_rt::test]
async fn nobody_is_seated_while_the_inbox_cannot_take_writes() {
    let inbox = MemInbox::new(4);
    let f = open_on(inbox.clone(), Arc::new(MemMeta::default()), config()).await;
    let req = || CreateGame {
        protocol: None,
        rules: None,
        signed: true,
        key: None,
    };
    let a = f.hub.create_game(INBOX, req(), "p").await.expect("created");
    let b = f.hub.create_game(INBOX, req(), "p").await.expect("created");
    inbox.fail_writes(true);
    assert!(!f.hub.ready());
    // A scrape says so at once (it refreshes the gauge from what `/readyz` reads).
    f.hub.refresh_gauges();
    assert_eq!(f.metrics.store_up.get(), 0);
    let refused = f.hub.create_game(INBOX, req(), "p").await.err();
    assert_eq!(refused.as_ref().map(HubError::status), Some(503));
    assert_eq!(
        pair_error(&f.hub, &a.pairing_code).await,
        Some("unavailable")
    );
    let xa = seat_of(&f.hub, &a.token).await;
    let fresh = f.hub.new_code(&xa).await.err();
    assert_eq!(fresh.as_ref().map(HubError::code), Some("unavailable"));
    let xb = seat_of(&f.hub, &b.token).await;
    f.hub.cancel(&xb).await.expect("a cancel needs no inbox");
    inbox.fail_writes(false);
    f.hub.refresh_gauges();
    assert_eq!(f.metrics.store_up.get(), 1);
    f.hub
        .pair(&a.pairing_code, None, None)
        .await
        .expect("the code was not spent");
    let s = f
        .hub
        .state(INBOX, &a.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(s.phase, Phase::Started);
}

/// The seat that `token` opens, which must be one.
async fn seat_of(hub: &Hub, token: &str) -> SeatAuth {
    hub.seat_for_token(token)
        .await
        .expect("looked up")
        .expect("a token of a seat")
}

/// The reason a pairing attempt with `code` is refused, `None` when it pairs.
async fn pair_error(hub: &Hub, code: &str) -> Option<&'static str> {
    hub.pair(code, None, None).await.err().map(|e| e.code())
}

#[actix_rt::test]
async fn two_moves_drafted_on_one_head_race_and_the_referee_refuses_the_second() {
    // Both are drafted on the head the actor left on its desk; one is first in the inbox,
    // and the other names a head that has moved on.
    let f = open(config()).await;
    let (x, _o) = seated(&f, "pipehub:connect-four", true).await;
    let mv = json!({"col": 0});
    let (a, b) = tokio::join!(f.hub.play(&x, mv.clone()), f.hub.play(&x, mv));
    let mut verdicts = [a.expect("move"), b.expect("move")];
    verdicts.sort_by_key(|p| p.verdict != Verdict::Accepted);
    assert_eq!(verdicts[0].verdict, Verdict::Accepted);
    assert_eq!(verdicts[1].verdict, Verdict::Rejected);
    assert_eq!(
        verdicts[1].refusal.as_ref().map(|r| r.reason),
        Some(Reason::StaleSeq)
    );
    // The chain holds the one, signed and verifiable.
    let export = f.hub.export(INBOX, &x.game).await.expect("export");
    let report = verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin());
    assert_eq!(report[0].verdict, EntryVerdict::Ok);
    assert_eq!(export.lines().count(), 2);
}

#[actix_rt::test]
async fn a_hub_held_move_after_the_actor_stopped_is_drafted_by_the_rebuilt_actor() {
    // No actor, no desk to draft on: the move asks for the actor, which rebuilds the
    // game from the store and drafts it on the stored head, signed with the seat's key.
    let mut c = config();
    c.actor_idle = Duration::from_millis(100);
    let f = open(c).await;
    let (x, o) = seated(&f, "pipehub:connect-four", true).await;
    let p = f.hub.play(&x, json!({"col": 0})).await.expect("move");
    assert_eq!(p.verdict, Verdict::Accepted);
    for _ in 0..100 {
        if f.hub.resident_actors() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.hub.resident_actors(), 0, "the idle actor stopped");
    let p = f.hub.play(&o, json!({"col": 1})).await.expect("move");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    assert_eq!(p.state.and_then(|s| s.seq), Some(2));
    // And the next move, with the actor resident again, is drafted on its desk.
    let p = f.hub.play(&x, json!({"col": 0})).await.expect("move");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    let export = f.hub.export(INBOX, &x.game).await.expect("export");
    let report = verify_log(export.as_bytes(), Mode::Strict, &Registry::builtin());
    assert_eq!(report[0].verdict, EntryVerdict::Ok);
    assert_eq!(export.lines().count(), 4);
}

#[actix_rt::test]
async fn seated_games_of_one_protocol_share_its_names_in_every_state() {
    let f = open(config()).await;
    let mut names = Vec::new();
    for signed in [false, true] {
        let (x, o) = seated(&f, "pipehub:tic-tac-toe", signed).await;
        f.hub
            .post_move(&x, json!({"move": {"row": 0, "col": 0}}))
            .await
            .expect("move");
        for seat in [&x, &o] {
            let s = f
                .hub
                .state(INBOX, &seat.game, Viewer::Seat(seat.seat))
                .await
                .expect("state");
            assert_eq!(s.phase, Phase::Started);
            names.push((
                s.protocol.clone().expect("protocol"),
                s.protocol_id.clone().expect("protocol id"),
                s.rules.clone().expect("rules"),
            ));
        }
    }
    // Not a copy per game or per state: an open game keeps its names for its whole life.
    let (protocol, id, rules) = &names[0];
    for (p, i, r) in &names[1..] {
        assert!(Arc::ptr_eq(p, protocol) && Arc::ptr_eq(i, id) && Arc::ptr_eq(r, rules));
    }
}

#[actix_rt::test]
async fn a_finished_game_gives_back_its_place_under_the_cap_before_its_last_state_is_told() {
    let mut c = config();
    c.max_open_games = Some(1);
    let f = open(c).await;
    let (x, o) = seated(&f, "pipehub:tic-tac-toe", false).await;
    // Whoever watches the game (a chat box, say) reads the host's count the moment the
    // last state reaches it, as a host creating its next game at once would.
    let mut room = f.rooms.subscribe(INBOX, &x.game);
    let hub = f.hub.clone();
    let watcher = actix_rt::spawn(async move {
        loop {
            let told = room.recv().await.expect("a publication");
            let over = told
                .views
                .spectator
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .is_some_and(|r| r.status != "in_progress");
            if over {
                return hub.engine_open_games("host-1");
            }
        }
    });
    let resigned = f.hub.resign(&o).await.expect("resign");
    assert_eq!(resigned.verdict, Verdict::Accepted);
    let open_when_told = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("the last state was published")
        .expect("the watcher ran");
    assert_eq!(open_when_told, 0);
    let next = CreateGame {
        protocol: None,
        rules: None,
        signed: false,
        key: None,
    };
    f.hub
        .create_game(INBOX, next, "host-1")
        .await
        .expect("the next game fits under the cap");
}

#[actix_rt::test]
async fn a_create_sent_again_with_its_idempotency_key_answers_with_the_same_game() {
    // A host whose answer was lost sends the same create again: it gets the same game, a
    // fresh token for X and a fresh code, and no second game is made or counted.
    let mut c = config();
    c.max_open_games = Some(1);
    let f = open(c).await;
    let req = |protocol: &str| CreateGame {
        protocol: Some(protocol.into()),
        rules: None,
        signed: true,
        key: None,
    };
    let key = Some("a-random-key-0123456789");
    let first = f
        .hub
        .create_game_again(INBOX, req("pipehub:tic-tac-toe"), "p", key)
        .await
        .expect("created");
    // At the cap of one, the create sent again is still answered: it makes nothing.
    let again = f
        .hub
        .create_game_again(INBOX, req("pipehub:tic-tac-toe"), "p", key)
        .await
        .expect("the same create, answered again");
    assert_eq!(again.game, first.game);
    assert_ne!(again.token, first.token);
    assert_eq!(f.hub.engine_open_games("p"), 1);
    for token in [&first.token, &again.token] {
        let x = seat_of(&f.hub, token).await;
        assert_eq!((&*x.game, x.seat), (first.game.as_str(), Seat::X));
    }
    // The code the lost answer carried died; nobody had seen it.
    assert_eq!(
        pair_error(&f.hub, &first.pairing_code).await,
        Some("code_used")
    );
    // The key sent with another create is refused, and changes nothing; without a key,
    // the host makes a new game, and is at its cap.
    let other = f
        .hub
        .create_game_again(INBOX, req("pipehub:connect-four"), "p", key)
        .await
        .expect_err("another create");
    assert_eq!(
        (other.status(), other.code()),
        (422, "idempotency_key_reused")
    );
    let capped = f
        .hub
        .create_game(INBOX, req("pipehub:tic-tac-toe"), "p")
        .await;
    assert!(
        matches!(capped, Err(HubError::TooManyGames(1))),
        "{capped:?}"
    );
    // The game starts with the code of the last answer; a try after that is refused.
    f.hub
        .pair(&again.pairing_code, None, None)
        .await
        .expect("paired");
    let s = f
        .hub
        .state(INBOX, &first.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(s.phase, Phase::Started);
    let late = f
        .hub
        .create_game_again(INBOX, req("pipehub:tic-tac-toe"), "p", key)
        .await;
    assert!(matches!(late, Err(HubError::AlreadyPaired)), "{late:?}");

    // A create cancelled by its host and sent again with its key is made again, under the
    // same id, and plays as any game.
    let key = Some("another-random-key-0123");
    let made = f
        .hub
        .create_game_again(INBOX, req("pipehub:tic-tac-toe"), "q", key)
        .await
        .expect("created");
    f.hub
        .cancel(&seat_of(&f.hub, &made.token).await)
        .await
        .expect("cancelled");
    let remade = f
        .hub
        .create_game_again(INBOX, req("pipehub:tic-tac-toe"), "q", key)
        .await
        .expect("made again");
    assert_eq!(remade.game, made.game);
    assert!(f
        .hub
        .seat_for_token(&made.token)
        .await
        .expect("looked up")
        .is_none());
    f.hub
        .pair(&remade.pairing_code, None, None)
        .await
        .expect("paired");
    let x = seat_of(&f.hub, &remade.token).await;
    let moved = f
        .hub
        .play(&x, serde_json::json!({"row": 0, "col": 0}))
        .await
        .expect("X moves");
    assert_eq!(moved.verdict, Verdict::Accepted);
}

#[actix_rt::test]
async fn tries_of_one_create_racing_each_other_make_one_game() {
    // Under a cap of one, every try is answered with the one game: those that lost the
    // race to reserve its id, or to take the cap's last place, answer as repeats.
    let mut c = config();
    c.max_open_games = Some(1);
    let f = open(c).await;
    let tries = (0..8).map(|_| {
        let req = CreateGame {
            protocol: None,
            rules: None,
            signed: false,
            key: None,
        };
        f.hub
            .create_game_again(INBOX, req, "p", Some("a-random-key-0123456789"))
    });
    let answers = futures_util::future::join_all(tries).await;
    let games: std::collections::BTreeSet<_> = answers
        .iter()
        .map(|a| a.as_ref().map(|c| c.game.clone()).map_err(|e| e.code()))
        .collect();
    assert_eq!(games.len(), 1, "{games:?}");
    assert!(games.iter().all(Result::is_ok), "{games:?}");
    assert_eq!(f.hub.engine_open_games("p"), 1);
}
