//! Rock-paper-scissors custody and what survives a restart.

use super::*;

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
    assert_eq!(pending_choice(&mine), Some(json!("rock")));
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
    let seq = wait_for_seq(&f, &x.game, 4).await;
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
    // never saw a pending choice. Each held choice reached it too, with its seat's view
    // alone.
    let (mut published, mut held) = (0, Vec::new());
    while let Ok(publication) = room.try_recv() {
        if publication.cause == (Cause::Held { seat: Seat::O }) {
            let views = &publication.views;
            assert!(views.x.is_none() && views.spectator.is_none(), "{views:?}");
            held.push(views.o.as_ref().and_then(|o| pending_choice(o)));
            continue;
        }
        // (The start may or may not be seen: `pair` answers as it is accepted, and its
        // views may have been built before this room was watched, so only the poster's.)
        // (A subscriber of these rooms takes every viewer's view.)
        let views = &publication.views;
        if views.x.as_ref().is_some_and(|x| x.seq == Some(0)) {
            continue;
        }
        let (Some(x), Some(spectator)) = (&views.x, &views.spectator) else {
            panic!("a watched game's publication lacks a view: {views:?}");
        };
        if let Cause::Accepted { .. } = publication.cause {
            if spectator.seq >= Some(1) {
                published += 1;
            }
        }
        let spectator = serde_json::to_string(&**spectator).expect("json");
        assert!(!spectator.contains("pendingChoice"));
        let x_pending = pending_choice(x);
        assert!(x_pending.is_none() || x_pending == Some(json!("scissors")));
    }
    assert_eq!(published, 4);
    assert_eq!(held, [Some(json!("rock")), Some(json!("paper"))]);
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

/// Reads a viewer's state through the facade, as a socket's `game.board` does.
async fn read(f: &Fixture, game: &str, viewer: Viewer) -> Arc<SharedState> {
    f.hub.state(INBOX, game, viewer).await.expect("state")
}

#[actix_rt::test]
async fn a_state_read_again_unchanged_is_kept_until_the_game_or_the_seat_changes() {
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", false).await;
    // The first read is built and not kept; the second is kept, and the third is it.
    for viewer in [Viewer::Seat(Seat::O), Viewer::Spectator] {
        let first = read(&f, &x.game, viewer).await;
        let second = read(&f, &x.game, viewer).await;
        let third = read(&f, &x.game, viewer).await;
        assert!(!Arc::ptr_eq(&first, &second), "{viewer:?}: kept at once");
        assert!(Arc::ptr_eq(&second, &third), "{viewer:?}: not kept");
        assert_eq!(*first, *third);
    }
    let kept = read(&f, &x.game, Viewer::Seat(Seat::O)).await;
    let watching = read(&f, &x.game, Viewer::Spectator).await;
    // O's held choice changes O's state, at the same seq: the kept one is not shown.
    f.hub
        .post_move(&o, json!({"choice": "rock"}))
        .await
        .expect("held");
    let held = read(&f, &x.game, Viewer::Seat(Seat::O)).await;
    assert_eq!(held.seq, kept.seq);
    assert_eq!(pending_choice(&held), Some(json!("rock")));
    assert_eq!(pending_choice(&kept), None);
    // X's choice ends the round: four events later, nobody is shown a kept state.
    f.hub
        .post_move(&x, json!({"choice": "paper"}))
        .await
        .expect("commit");
    wait_for_seq(&f, &x.game, 4).await;
    for (viewer, before) in [
        (Viewer::Seat(Seat::O), &held),
        (Viewer::Spectator, &watching),
    ] {
        let after = read(&f, &x.game, viewer).await;
        assert_eq!(after.seq, Some(4), "{viewer:?}");
        assert!(!Arc::ptr_eq(before, &after), "{viewer:?}");
    }
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
    assert!(
        g.hub.registration_cached(INBOX, &x.game),
        "the open game is loaded"
    );
    let after = g
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!(
        (after.seq, after.head.clone()),
        (before.seq, before.head.clone())
    );
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
}

#[actix_rt::test]
async fn a_hub_held_guest_may_choose_before_an_agent_host_starts_and_commits() {
    let f = open(config()).await;
    let agent = crypto::seat_key(b"agent secret for this test", "a", "b", Seat::X);
    let public = crypto::public_key_hex(&agent.verifying_key());
    let created = f
        .hub
        .create_game(
            INBOX,
            CreateGame {
                protocol: Some("pipehub:rock-paper-scissors".into()),
                rules: None,
                signed: true,
                key: Some(public),
            },
            "host",
        )
        .await
        .expect("created");
    let x = f
        .hub
        .seat_for_token(&created.token)
        .await
        .expect("looked up")
        .expect("X");
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
        .expect("O");
    // O (hub-held) chooses while the game waits for X's agent to start it: held.
    let held = f
        .hub
        .post_move(&o, json!({"choice": "paper"}))
        .await
        .expect("held");
    assert_eq!(held.verdict, Verdict::Held);
    assert_eq!(held.state.map(|s| s.phase), Some(Phase::Paired));

    // X's agent signs its own start and its own commit.
    let keys = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::X))
        .await
        .expect("state")
        .keys
        .clone()
        .expect("keys");
    let sign = |mut ev: Event| {
        let prepared = games::verify::Prepared::of(&ev);
        ev.sig = Some(crypto::sign(&agent, &prepared.canonical));
        ev
    };
    let mut start = event(&x.game, 0, "", Seat::X, None);
    start.protocol = Some("pipehub:rock-paper-scissors".into());
    start.rules = json!({"bestOf": 3, "keys": {"X": keys.x, "O": keys.o}, "inboxes": [INBOX]})
        .as_object()
        .cloned();
    let p = post(&f, sign(start), Some(x.clone())).await.expect("start");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    let nonce = "00112233445566778899aabbccddeeff";
    let commit = json!({"commit": crypto::rps_commit("rock", nonce)});
    let ev = sign(event(
        &x.game,
        1,
        &p.hash.expect("hash"),
        Seat::X,
        Some(commit),
    ));
    let p = post(&f, ev, Some(x.clone())).await.expect("commit");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    // The hub commits O's held choice on O's turn, signed with O's derived key.
    let mut seq = 0;
    for _ in 0..100 {
        let s = f
            .hub
            .state(INBOX, &x.game, Viewer::Seat(Seat::O))
            .await
            .expect("state");
        seq = s.seq.unwrap_or(0);
        if seq >= 2 {
            let pending = pending_choice(&s);
            assert_eq!(pending, Some(json!("paper")));
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(seq, 2);
    // It is X's agent's turn to reveal; the hub writes nothing for an agent-held seat.
    let s = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!(s.seq, Some(2));
    let spectator = serde_json::to_string(&s).expect("json");
    assert!(!spectator.contains("\"paper\"") && !spectator.contains("pendingChoice"));
    // Nor later: the agent's own reveal is the next event, where anything the hub had
    // written for X since would have made it stale.
    let reveal = json!({"choice": "rock", "nonce": nonce});
    let ev = sign(event(
        &x.game,
        3,
        &s.head.clone().expect("a head"),
        Seat::X,
        Some(reveal),
    ));
    let p = post(&f, ev, Some(x.clone())).await.expect("reveal");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
}

#[actix_rt::test]
async fn a_hub_held_seat_sends_its_choice_and_nothing_else() {
    // A commit of the seat's own was appended, and then the hub could not reveal it (it
    // holds no nonce for it): the game waited for that reveal for good.
    let f = open(config()).await;
    let (x, _o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let before = f.inbox.count(INBOX, &x.game).await.expect("count");
    let commit = games::crypto::rps_commit("rock", &"ab".repeat(32));
    for body in [
        json!({"move": {"commit": commit}}),
        json!({"move": {"choice": "rock", "nonce": "ab".repeat(32)}}),
        json!({"move": {}}),
    ] {
        let refused = f.hub.post_move(&x, body.clone()).await;
        match refused {
            Err(HubError::Refused(r)) => {
                assert_eq!(r.detail.as_deref(), Some("bad_move"), "{body}")
            }
            other => panic!("{body}: {other:?}"),
        }
        let over_ws = f.hub.play(&x, body["move"].clone()).await;
        assert!(
            matches!(over_ws, Err(HubError::Refused(_))),
            "{body}: {over_ws:?}"
        );
    }
    assert_eq!(f.inbox.count(INBOX, &x.game).await.expect("count"), before);
    // The choice itself is still taken.
    let p = f
        .hub
        .post_move(&x, json!({"move": {"choice": "rock"}}))
        .await
        .expect("commit");
    assert_eq!(p.verdict, Verdict::Accepted);
}

#[actix_rt::test]
async fn two_racing_choices_commit_one_and_the_seat_is_shown_the_one_committed() {
    // Two choices for one hub-held seat at once (a box and an HTTP client): both were
    // drafted on the same head, one lost its seq (`stale_seq`), and the seat was shown
    // whichever was drafted last, while the hub revealed the other.
    let f = open(config()).await;
    for round in 0..8 {
        let (x, o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
        let (a, b) = futures_util::future::join(
            f.hub.post_move(&x, json!({"choice": "rock"})),
            f.hub.post_move(&x, json!({"choice": "paper"})),
        )
        .await;
        let mut committed = None;
        for (choice, answer) in [("rock", a), ("paper", b)] {
            match answer {
                Ok(p) => {
                    assert_eq!(p.verdict, Verdict::Accepted, "round {round}");
                    assert!(committed.replace(choice).is_none(), "round {round}: both");
                    let shown = p.state.expect("state");
                    assert_eq!(
                        pending_choice(&shown),
                        Some(json!(choice)),
                        "round {round}: the answer shows the choice committed"
                    );
                }
                Err(HubError::Refused(r)) => assert_eq!(
                    (r.reason, r.detail.as_deref()),
                    (Reason::IllegalMove, Some("already_chosen")),
                    "round {round}"
                ),
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
        let committed = committed.expect("one choice committed");
        let shown = f
            .hub
            .state(INBOX, &x.game, Viewer::Seat(Seat::X))
            .await
            .expect("state");
        assert_eq!(
            pending_choice(&shown),
            Some(json!(committed)),
            "round {round}"
        );
        f.hub
            .post_move(&o, json!({"choice": "scissors"}))
            .await
            .expect("commit");
        assert_eq!(wait_for_seq(&f, &x.game, 4).await, 4, "round {round}");
        let export = f.hub.export(INBOX, &x.game).await.expect("export");
        let reveal: Value =
            serde_json::from_str(export.lines().nth(3).expect("X's reveal")).expect("json");
        assert_eq!(reveal["move"]["choice"], committed, "round {round}");
        let rejected = f
            .hub
            .captures(INBOX, Some(&x.game), None, 100)
            .await
            .expect("captures")
            .items
            .into_iter()
            .filter(|c| c.verdict == Verdict::Rejected)
            .count();
        assert_eq!(rejected, 0, "round {round}: no commit lost its seq");
    }
}

#[actix_rt::test]
async fn a_held_choice_being_committed_is_not_replaced_by_one_that_is_then_lost() {
    // O's choice is held; X commits, and the hub commits O's held choice at once. A new
    // choice from O while that commit was on its way to the store was answered `held`,
    // shown as O's, and thrown away: the round revealed the old one, and the next round
    // did not have the new one either. Appends take 100 ms here, so O's commit is still
    // on its way when X's answer comes back.
    let inbox = MemInbox::new(4);
    let f = open_on(inbox.clone(), Arc::new(MemMeta::default()), config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let held = f.hub.post_move(&o, json!({"choice": "paper"})).await;
    assert_eq!(held.expect("held").verdict, Verdict::Held);
    inbox.slow_appends(100);
    let committed = f.hub.post_move(&x, json!({"choice": "rock"})).await;
    assert_eq!(committed.expect("X commits").verdict, Verdict::Accepted);
    match f.hub.post_move(&o, json!({"choice": "scissors"})).await {
        Err(HubError::Refused(r)) => assert_eq!(
            (r.reason, r.detail.as_deref()),
            (Reason::IllegalMove, Some("already_chosen"))
        ),
        other => panic!("a choice while the held one is being committed: {other:?}"),
    }
    inbox.slow_appends(0);
    assert_eq!(wait_for_seq(&f, &x.game, 4).await, 4);
    let export = f.hub.export(INBOX, &x.game).await.expect("export");
    let reveal: Value =
        serde_json::from_str(export.lines().nth(4).expect("O's reveal")).expect("json");
    assert_eq!(reveal["move"]["choice"], "paper");
}

#[actix_rt::test]
async fn a_choice_whose_commit_the_store_refused_may_be_made_again() {
    let inbox = MemInbox::new(4);
    let f = open_on(inbox.clone(), Arc::new(MemMeta::default()), config()).await;
    let (x, _) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    inbox.fail_writes(true);
    let refused = f.hub.post_move(&x, json!({"choice": "rock"})).await;
    assert!(
        matches!(
            refused,
            Err(HubError::Store(crate::inbox::StoreError::Unavailable(_)))
        ),
        "{refused:?}"
    );
    inbox.fail_writes(false);
    let shown = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert!(
        pending_choice(&shown).is_none(),
        "nothing was chosen: {:?}",
        shown.view
    );
    let again = f
        .hub
        .post_move(&x, json!({"choice": "paper"}))
        .await
        .expect("commit");
    assert_eq!(again.verdict, Verdict::Accepted);
}

#[actix_rt::test]
async fn a_second_choice_in_a_round_is_refused_and_the_next_round_commits_at_once() {
    // A second choice after the seat's commit was answered "held" and shared the slot of
    // the committed one: the reveal emptied it, it was never committed, the seat's next
    // choice was held too, and the seat stayed counted as holding a choice for good.
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let first = f
        .hub
        .post_move(&x, json!({"choice": "rock"}))
        .await
        .expect("commit");
    assert_eq!(first.verdict, Verdict::Accepted);
    match f.hub.post_move(&x, json!({"choice": "paper"})).await {
        Err(HubError::Refused(r)) => assert_eq!(
            (r.reason, r.detail.as_deref()),
            (Reason::IllegalMove, Some("already_chosen"))
        ),
        other => panic!("a second choice in the round: {other:?}"),
    }
    assert_eq!(f.metrics.held_choices.get(), 0);
    let x_view = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::X))
        .await
        .expect("state");
    assert_eq!(
        pending_choice(&x_view),
        Some(json!("rock")),
        "X's view shows the choice it committed"
    );
    let answer = f
        .hub
        .post_move(&o, json!({"choice": "scissors"}))
        .await
        .expect("commit");
    assert_eq!(answer.verdict, Verdict::Accepted);
    assert_eq!(
        wait_for_seq(&f, &x.game, 4).await,
        4,
        "both commits, both reveals"
    );
    // The next round: X's choice is its commit, at once.
    let next = f
        .hub
        .post_move(&x, json!({"choice": "paper"}))
        .await
        .expect("commit");
    assert_eq!(next.verdict, Verdict::Accepted);
    assert_eq!(f.metrics.held_choices.get(), 0);
}

#[actix_rt::test]
async fn a_resign_drops_the_choice_held_for_the_round_it_ended() {
    // The page went on showing "your choice this round: rock" on the finished board, since
    // the seat's view still carried the choice the hub had held for a turn that never came.
    let f = open(config()).await;
    let (x, o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let held = f
        .hub
        .post_move(&o, json!({"choice": "rock"}))
        .await
        .expect("held");
    assert_eq!(held.verdict, Verdict::Held);
    assert_eq!(f.metrics.held_choices.get(), 1);
    let resigned = f.hub.resign(&x).await.expect("resign");
    assert_eq!(resigned.verdict, Verdict::Accepted);
    let o_state = f
        .hub
        .state(INBOX, &x.game, Viewer::Seat(Seat::O))
        .await
        .expect("state");
    assert_eq!(
        o_state.result.as_ref().and_then(|r| r.by),
        Some(games::WinBy::Resign)
    );
    let view = o_state.view.as_ref().expect("a view").value().clone();
    assert_eq!(view.get("pendingChoice"), None, "{view}");
    assert_eq!(f.metrics.held_choices.get(), 0);
}

#[actix_rt::test]
async fn a_committed_choice_shows_in_its_seat_view_after_a_restart() {
    // The choice behind a commit lived only in the actor that wrote it: a hub restarted
    // (or another node, reading the game) showed the seat no choice until the reveal.
    let inbox = MemInbox::new(2);
    let meta = Arc::new(MemMeta::default());
    let f = open_on(inbox.clone(), meta.clone(), config()).await;
    let (x, _o) = seated(&f, "pipehub:rock-paper-scissors", true).await;
    let p = f
        .hub
        .post_move(&x, json!({"move": {"choice": "scissors"}}))
        .await
        .expect("commit");
    assert_eq!(p.verdict, Verdict::Accepted);
    f.hub.shutdown().await;

    let g = open_on(inbox, meta, config()).await;
    let pending = |viewer| {
        let hub = g.hub.clone();
        let game = x.game.clone();
        async move {
            let st = hub.state(INBOX, &game, viewer).await.expect("state");
            pending_choice(&st)
        }
    };
    assert_eq!(
        pending(Viewer::Seat(Seat::X)).await,
        Some(json!("scissors"))
    );
    assert_eq!(pending(Viewer::Seat(Seat::O)).await, None);
    assert_eq!(pending(Viewer::Spectator).await, None);
}

/// The choice a state's view shows as its seat's own, if any.
fn pending_choice(state: &GameState) -> Option<Value> {
    state
        .view
        .as_ref()
        .and_then(|v| v.value().get("pendingChoice").cloned())
}
