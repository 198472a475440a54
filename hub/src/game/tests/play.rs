//! Anonymous play, refereed rejections, caps, listings, idle actors.

use super::*;

#[actix_rt::test]
async fn an_export_reads_the_events_back_in_canonical_form() {
    // Posted as pretty-printed JSON with a refusal between them: the export holds the
    // accepted events only, each in the one line a writer would have appended.
    let mut c = config();
    c.actor_idle = Duration::from_millis(100);
    let f = open(c).await;
    let mut head = String::new();
    let mut lines = Vec::new();
    for (seq, seat, mv) in [
        (0, Seat::X, None),
        (1, Seat::X, rc(1, 1)),
        (2, Seat::O, rc(0, 0)),
    ] {
        let ev = event("pretty", seq, &head, seat, mv);
        let raw = serde_json::to_string_pretty(&ev.to_value()).expect("json");
        if seq == 2 {
            let early = event("pretty", 2, &head, Seat::X, rc(2, 2));
            let raw = Bytes::from(serde_json::to_string_pretty(&early.to_value()).expect("json"));
            let refused = f
                .hub
                .post_event(INBOX, early, raw, None)
                .await
                .expect("posted");
            assert_eq!(refused.verdict, Verdict::Rejected);
        }
        let posted = f
            .hub
            .post_event(INBOX, ev.clone(), Bytes::from(raw), None)
            .await
            .expect("posted");
        assert_eq!(posted.verdict, Verdict::Accepted, "seq {seq}");
        head = posted.hash.expect("hash");
        lines.push(ev.to_json());
    }
    let export = f.hub.export(INBOX, "pretty").await.expect("export");
    assert_eq!(export, lines.join("\n") + "\n");
    // The same after the actor left memory and rebuilt itself from the inbox.
    for _ in 0..100 {
        if f.hub.resident_actors() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.hub.resident_actors(), 0, "the idle actor stopped");
    assert_eq!(f.hub.export(INBOX, "pretty").await.expect("export"), export);
}

#[actix_rt::test]
async fn a_game_with_no_accepted_start_has_no_export_as_it_has_no_state() {
    let f = open(config()).await;
    // Captures, but no start: a move first, then a start of a protocol the hub does not
    // know (stored, not refereed).
    let early = post(
        &f,
        event("early", 1, &"0".repeat(64), Seat::X, rc(0, 0)),
        None,
    )
    .await
    .expect("posted");
    assert_eq!(early.verdict, Verdict::Rejected);
    let mut unknown = event("unknown", 0, "", Seat::X, None);
    unknown.protocol = Some("elsewhere:chess".into());
    let skipped = post(&f, unknown, None).await.expect("posted");
    assert_eq!(skipped.verdict, Verdict::Skipped);
    for game in ["early", "unknown", "never"] {
        let state = f.hub.state(INBOX, game, Viewer::Spectator).await;
        assert!(
            matches!(state, Err(HubError::NotFound(_))),
            "{game}: {state:?}"
        );
        let export = f.hub.export(INBOX, game).await;
        assert!(
            matches!(&export, Err(HubError::NotFound(_))),
            "{game}: {export:?}"
        );
    }
    let Err(HubError::NotFound(why)) = f.hub.export(INBOX, "unknown").await else {
        unreachable!("checked above");
    };
    assert!(why.contains("events?game="), "{why}");
    // A seated game still waiting for its start exports its chain: none yet.
    let (x, _) = seated(&f, "pipehub:tic-tac-toe", false).await;
    let created = f
        .hub
        .create_game(
            INBOX,
            CreateGame {
                protocol: None,
                rules: None,
                signed: false,
                key: None,
            },
            "host-2",
        )
        .await
        .expect("created");
    assert_eq!(
        f.hub.export(INBOX, &created.game).await.expect("export"),
        ""
    );
    assert!(!f
        .hub
        .export(INBOX, &x.game)
        .await
        .expect("export")
        .is_empty());
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
    assert_eq!(f.metrics.games_ended.get(), 1, "the end is counted once");
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

    // The games gauge counts the game once, as finished: it left "started" with the win.
    f.hub.count_games_now();
    let gauge = |phase: &str| f.metrics.games.with_label_values(&[phase]).get();
    assert_eq!((gauge("started"), gauge("finished")), (0, 1));
}

/// A capture this hub appended and judged is timed from its write on the monotonic clock,
/// not from its stored milliseconds: some verdict among a few comes in under a
/// millisecond, and is counted as what it took (in a bucket under 1 ms), not as 0 or 1 ms.
#[actix_rt::test]
async fn capture_to_verdict_is_measured_below_a_millisecond() {
    let f = open(config()).await;
    let histogram = &f.metrics.capture_to_verdict;
    // Observations of 800 µs or less: the largest bucket under a millisecond.
    let under_a_ms = || {
        let text = f.metrics.render();
        text.lines()
            .find_map(|l| {
                l.strip_prefix("pipehub_capture_to_verdict_seconds_bucket{le=\"0.0008\"} ")
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("the 800 µs bucket")
    };
    // One post at a time, each its own observation: a busy machine may hold one past a
    // millisecond, not all twenty.
    let mut took = Vec::new();
    for i in 0..20 {
        let (sum, under) = (histogram.get_sample_sum(), under_a_ms());
        let posted = post(&f, event(&format!("fast{i}"), 0, "", Seat::X, None), None)
            .await
            .expect("posted");
        assert_eq!(posted.verdict, Verdict::Accepted);
        let this = histogram.get_sample_sum() - sum;
        if this > 0.0 && under_a_ms() == under + 1 {
            return;
        }
        took.push(this);
    }
    panic!("no verdict measured between 0 and 800 µs: {took:?}");
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
async fn a_game_at_its_captures_cap_can_still_be_resigned_once() {
    // A seat that filled the cap with refused moves left the other unable to move or
    // resign: the game could never end.
    let mut c = config();
    c.max_captures_per_game = Some(4);
    let f = open(c).await;
    let (x, o) = seated(&f, "pipehub:tic-tac-toe", true).await;
    // The start is one capture; O's moves out of turn, refused, fill the rest.
    for _ in 0..8 {
        let refused = f
            .hub
            .post_move(&o, json!({"move": {"row": 0, "col": 0}}))
            .await;
        if matches!(refused, Err(HubError::TooManyCaptures(4))) {
            break;
        }
    }
    assert_eq!(f.inbox.count(INBOX, &x.game).await.expect("count"), 4);
    let moved = f
        .hub
        .post_move(&x, json!({"move": {"row": 0, "col": 0}}))
        .await;
    assert!(
        matches!(moved, Err(HubError::TooManyCaptures(4))),
        "{moved:?}"
    );
    // X resigns: the game ends.
    let resigned = f.hub.resign(&x).await.expect("resigned");
    assert_eq!(resigned.verdict, Verdict::Accepted);
    let state = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    let result = state.result.expect("a result");
    assert_eq!((result.status, result.winner), ("win", Some(Seat::O)));
    // Over, the game takes nothing more, a resign included.
    let again = f.hub.resign(&o).await;
    assert!(
        matches!(again, Err(HubError::TooManyCaptures(4))),
        "{again:?}"
    );
    assert_eq!(f.inbox.count(INBOX, &x.game).await.expect("count"), 5);
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
    let all = f.hub.games(INBOX, None, None, 10).await.expect("list");
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
        .games(INBOX, Some(Phase::Started), None, 10)
        .await
        .expect("list");
    assert_eq!(waiting.items.len(), 1);
    assert!(f
        .hub
        .state(INBOX, "nope", Viewer::Spectator)
        .await
        .is_err_and(|e| e.status() == 404));
    f.hub.count_games_now();
    let gauge = |phase: &str| f.metrics.games.with_label_values(&[phase]).get();
    assert_eq!(
        (gauge("waiting"), gauge("paired"), gauge("started")),
        (1, 0, 1)
    );
    assert_eq!(
        f.hub.resident_actors(),
        1,
        "probing an unknown id starts no actor"
    );
}

/// Waits up to 5 s for the hub's resident actors to come to `n`; returns the count then.
async fn resident_reach(f: &Fixture, n: usize) -> usize {
    resident_within(f, n, Duration::from_secs(5)).await
}

/// Waits up to `within` for the hub's resident actors to come to `n`; returns the count
/// then.
async fn resident_within(f: &Fixture, n: usize, within: Duration) -> usize {
    let until = std::time::Instant::now() + within;
    while f.hub.resident_actors() != n && std::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f.hub.resident_actors()
}

#[actix_rt::test]
async fn a_finished_game_rebuilt_for_a_read_leaves_memory_at_once() {
    // A finished game's actor stops half a second after its last message; one rebuilt
    // after a restart, for a read, did so only at the idle check every 5 s.
    let inbox = MemInbox::new(2);
    let meta = Arc::new(MemMeta::default());
    let f = open_on(inbox.clone(), meta.clone(), config()).await;
    let start = post(&f, event("over", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    let mut resign = event("over", 1, &start.hash.expect("hash"), Seat::X, None);
    resign.action = Action::Resign;
    let resigned = post(&f, resign, None).await.expect("posted");
    assert_eq!(resigned.verdict, Verdict::Accepted);
    f.hub.shutdown().await;

    let mut c = config();
    c.actor_idle = Duration::from_secs(60);
    let g = open_on(inbox, meta, c).await;
    let state = g
        .hub
        .state(INBOX, "over", Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!(state.result.map(|r| r.status), Some("win"));
    assert_eq!(g.hub.resident_actors(), 1);
    // Eight times the linger, for a busy machine, and still short of the first idle check.
    assert_eq!(
        resident_within(&g, 0, Duration::from_millis(4000)).await,
        0,
        "the rebuilt finished game left memory"
    );
}

#[actix_rt::test]
async fn a_listing_after_a_restart_does_not_keep_the_games_it_lists_in_memory() {
    // After a restart the hub has no listing entry for a game until an actor has seen it,
    // so a listing rebuilds each unfinished game it pages through. Those actors stop again
    // at once, not after the idle time: a reader paging a big inbox cannot hold all its
    // open games in memory.
    let inbox = MemInbox::new(2);
    let meta = Arc::new(MemMeta::default());
    let f = open_on(inbox.clone(), meta.clone(), config()).await;
    for i in 0..20 {
        post(&f, event(&format!("open{i}"), 0, "", Seat::X, None), None)
            .await
            .expect("posted");
    }
    f.hub.shutdown().await;

    let mut c = config();
    c.actor_idle = Duration::from_secs(60);
    let g = open_on(inbox, meta, c).await;
    assert_eq!(g.hub.resident_actors(), 0);
    let page = g.hub.games(INBOX, None, None, 50).await.expect("page");
    assert_eq!(page.items.len(), 20);
    assert!(page.items.iter().all(|s| s.phase == Phase::Started));
    // One of them is read for itself at once: it stays for the idle time.
    g.hub
        .state(INBOX, "open5", Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!(
        resident_reach(&g, 1).await,
        1,
        "the listed games left memory"
    );
    // A game only listed stops once it has lingered 500 ms untouched, the one read too if
    // it were taken for one: its timer and the others' fire on their own, with nothing to
    // wait on, so the test waits three times the linger (and 40 times less than the idle
    // time, which a slow machine does not reach).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        g.hub.resident_actors(),
        1,
        "the game read for itself stayed"
    );
    // The entries stay, so the next listing rebuilds nothing.
    let again = g.hub.games(INBOX, None, None, 50).await.expect("page");
    assert_eq!(again.items, page.items);
    assert_eq!(g.hub.resident_actors(), 1);
}

#[actix_rt::test]
async fn the_game_listing_pages_through_every_game_once_newest_first() {
    let f = open(config()).await;
    for g in ["s1", "s2", "s3"] {
        post(&f, event(g, 0, "", Seat::X, None), None)
            .await
            .expect("posted");
    }
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let created = f
            .hub
            .create_game(INBOX, CreateGame::default(), "p")
            .await
            .expect("created");
        waiting.push(created.game);
        // Distinct creation times, so "newest created first" is one order.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    waiting.reverse();
    let mut want = waiting.clone();
    want.extend(["s3", "s2", "s1"].map(String::from));

    for limit in 1..=7 {
        let (mut seen, mut after, mut pages) = (Vec::new(), None::<String>, 0);
        loop {
            let page = f
                .hub
                .games(INBOX, None, after.as_deref(), limit)
                .await
                .expect("page");
            assert!(page.items.len() <= limit);
            seen.extend(page.items.into_iter().map(|g| g.game));
            pages += 1;
            assert!(pages <= 10, "paging does not end (limit {limit})");
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, want, "limit {limit}");
    }
    // A phase filter pages too.
    let started = f
        .hub
        .games(INBOX, Some(Phase::Started), None, 2)
        .await
        .expect("page");
    let names: Vec<&str> = started.items.iter().map(|g| g.game.as_str()).collect();
    assert_eq!(names, ["s3", "s2"]);
    let rest = f
        .hub
        .games(INBOX, Some(Phase::Started), started.next.as_deref(), 2)
        .await
        .expect("page");
    let names: Vec<&str> = rest.items.iter().map(|g| g.game.as_str()).collect();
    assert_eq!(names, ["s1"]);
    assert_eq!(rest.next, None);
    let waiting_only = f
        .hub
        .games(INBOX, Some(Phase::Waiting), None, 10)
        .await
        .expect("page");
    assert_eq!(waiting_only.items.len(), 3);
    assert_eq!(waiting_only.next, None);
    assert!(f
        .hub
        .games(INBOX, None, Some("bogus"), 2)
        .await
        .is_err_and(|e| e.status() == 400));
}

#[actix_rt::test]
async fn a_game_listing_asked_for_no_games_pages_as_one_asked_for_one() {
    // Callers clamp the limit today; the facade must not count on it (it indexed the last
    // of no games).
    let f = open(config()).await;
    post(&f, event("s1", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    f.hub
        .create_game(INBOX, CreateGame::default(), "p")
        .await
        .expect("created");
    let mut after = None::<String>;
    for _ in 0..3 {
        let none = f.hub.games(INBOX, None, after.as_deref(), 0).await;
        let one = f.hub.games(INBOX, None, after.as_deref(), 1).await;
        let (none, one) = (none.expect("page"), one.expect("page"));
        let names = |l: &Listing<GameSummary>| -> Vec<String> {
            l.items.iter().map(|g| g.game.clone()).collect()
        };
        assert_eq!((names(&none), &none.next), (names(&one), &one.next));
        after = one.next;
    }
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

#[actix_rt::test]
async fn a_finished_games_actor_stops_soon_and_a_read_rebuilds_it() {
    // Long idle time for games in progress; a finished game goes after a short linger.
    let f = open(config()).await;
    let mut head = post(&f, event("done", 0, "", Seat::X, None), None)
        .await
        .expect("posted")
        .hash
        .expect("hash");
    for (i, (seat, r, c)) in [
        (Seat::X, 0, 0),
        (Seat::O, 1, 0),
        (Seat::X, 0, 1),
        (Seat::O, 1, 1),
        (Seat::X, 0, 2),
    ]
    .into_iter()
    .enumerate()
    {
        let p = post(&f, event("done", i as u64 + 1, &head, seat, rc(r, c)), None)
            .await
            .expect("posted");
        assert_eq!(p.verdict, Verdict::Accepted, "move {i}");
        head = p.hash.expect("hash");
    }
    post(&f, event("open", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    assert_eq!(f.hub.resident_actors(), 2);
    for _ in 0..200 {
        if f.hub.resident_actors() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        f.hub.resident_actors(),
        1,
        "the finished game's actor stopped, the open one stays"
    );
    // The listing shows the finished game's result from its packed entry, and the open
    // game's from its whole one, without rebuilding the finished game's actor.
    let listing = f
        .hub
        .games(INBOX, Some(Phase::Started), None, 10)
        .await
        .expect("list");
    let results: Vec<_> = listing
        .items
        .iter()
        .map(|g| {
            let r = g.result.expect("a started game's result");
            (
                g.game.as_str(),
                g.protocol.as_deref(),
                r.status,
                r.winner,
                r.by,
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (
                "open",
                Some("pipehub:tic-tac-toe"),
                "in_progress",
                None,
                None
            ),
            (
                "done",
                Some("pipehub:tic-tac-toe"),
                "win",
                Some(Seat::X),
                Some(games::WinBy::Line)
            ),
        ]
    );
    assert_eq!(f.hub.resident_actors(), 1, "the listing rebuilt no actor");
    let st = f
        .hub
        .state(INBOX, "done", Viewer::Spectator)
        .await
        .expect("a read rebuilds it");
    assert_eq!(st.seq, Some(5));
    assert_eq!(st.result.map(|r| r.status), Some("win"));
}

#[actix_rt::test]
async fn a_verdict_that_comes_late_is_pending_and_a_lookup_settles_it() {
    let mut c = config();
    c.verdict_wait = Duration::from_millis(100);
    let inbox = MemInbox::new(2);
    let f = open_on(inbox.clone(), Arc::new(MemMeta::default()), c).await;
    inbox.pause_consumers(true);
    let ev = event("slow", 0, "", Seat::X, None);
    let expected = games::verify::Prepared::of(&ev).hash;
    let p = post(&f, ev, None).await.expect("posted");
    assert_eq!(p.verdict, Verdict::Pending);
    assert_eq!(p.hash.as_deref(), Some(expected.as_str()));
    assert!(p.state.is_none());
    // Looking the capture up wakes its game's actor, which adjudicates what it finds.
    let capture = p.capture.expect("capture");
    let item = f.hub.capture(INBOX, capture).await.expect("capture");
    assert_eq!(item.verdict, Verdict::Accepted);
    // When the consumer catches up, the record is not adjudicated twice.
    inbox.pause_consumers(false);
    let next = event("slow", 1, &expected, Seat::X, rc(0, 0));
    let p = post(&f, next, None).await.expect("posted");
    assert_eq!(p.verdict, Verdict::Accepted, "{:?}", p.refusal);
    let list = f
        .hub
        .captures(INBOX, Some("slow"), None, 10)
        .await
        .expect("list");
    assert_eq!(list.items.len(), 2);
}

#[actix_rt::test]
async fn every_read_of_a_capture_shows_the_hash_its_post_answered() {
    // A rejected, a skipped and a pending capture kept no hash with their verdict, and
    // their reads showed null where the post had answered the event's hash. (The whole
    // verdict wait is spent on the pending post: a shorter one could leave the others
    // pending on a busy machine.)
    let inbox = MemInbox::new(2);
    let f = open_on(inbox.clone(), Arc::new(MemMeta::default()), config()).await;
    let start = post(&f, event("same", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    let head = start.hash.clone().expect("a hash");
    let out_of_turn = post(&f, event("same", 1, &head, Seat::O, rc(0, 0)), None)
        .await
        .expect("posted");
    assert_eq!(out_of_turn.verdict, Verdict::Rejected);
    let mut unknown = event("elsewhere", 0, "", Seat::X, None);
    unknown.protocol = Some("somebody:else".into());
    let skipped = post(&f, unknown, None).await.expect("posted");
    assert_eq!(skipped.verdict, Verdict::Skipped);
    // The game's actor is resident and its consumer hands it nothing more: the move stays
    // without a verdict, and a lookup cannot settle it either.
    inbox.pause_consumers(true);
    let pending = post(&f, event("same", 1, &head, Seat::X, rc(0, 0)), None)
        .await
        .expect("posted");
    assert_eq!(pending.verdict, Verdict::Pending);

    let posts = [&start, &out_of_turn, &skipped, &pending];
    for p in posts {
        let capture = p.capture.expect("a capture");
        let item = f.hub.capture(INBOX, capture).await.expect("a capture");
        assert_eq!(item.verdict, p.verdict, "{capture}");
        assert!(p.hash.is_some(), "{p:?}");
        assert_eq!(item.hash, p.hash, "{capture} read as {:?}", item.verdict);
    }
    let listed = f.hub.captures(INBOX, None, None, 10).await.expect("listed");
    let listed: Vec<_> = listed.items.iter().map(|i| (i.capture, &i.hash)).collect();
    let posted: Vec<_> = posts.iter().map(|p| (p.capture, &p.hash)).collect();
    assert_eq!(listed, posted);
}

#[actix_rt::test]
async fn a_capture_that_is_no_event_reads_with_no_hash() {
    // The hub refuses such a body before the inbox; another writer of the store need not.
    let inbox = MemInbox::new(1);
    let raw = Bytes::from_static(b"{\"game\": \"junk\", ");
    let capture = inbox
        .append(INBOX, "junk", None, raw)
        .await
        .expect("appended");
    let f = open_on(inbox, Arc::new(MemMeta::default()), config()).await;
    let item = f.hub.capture(INBOX, capture).await.expect("a capture");
    assert_eq!(item.verdict, Verdict::Rejected);
    assert_eq!(item.reason.as_deref(), Some("bad_json"));
    assert_eq!(item.hash, None);
}

#[actix_rt::test]
async fn a_rebuild_settles_a_record_without_verdict_in_its_place_in_the_order() {
    // A, B, C of one game are stored; the hub stopped after recording A's and C's
    // verdicts but not B's. The rebuilt chain must take them in order: A, B, C.
    let inbox = MemInbox::new(1);
    let a = event("gap", 0, "", Seat::X, None);
    let ha = games::verify::Prepared::of(&a).hash;
    let b = event("gap", 1, &ha, Seat::X, rc(0, 0));
    let hb = games::verify::Prepared::of(&b).hash;
    let c = event("gap", 2, &hb, Seat::O, rc(1, 1));
    let hc = games::verify::Prepared::of(&c).hash;
    let mut captures = Vec::new();
    for ev in [&a, &b, &c] {
        let raw = Bytes::from(ev.to_json());
        captures.push(inbox.append(INBOX, "gap", None, raw).await.expect("append"));
    }
    for (capture, hash) in [(captures[0], &ha), (captures[2], &hc)] {
        let v = crate::inbox::StoredVerdict::Accepted { hash: hash.clone() };
        inbox.put_verdict(capture, v).await.expect("verdict");
    }
    let f = open_on(inbox, Arc::new(MemMeta::default()), config()).await;
    let state = f
        .hub
        .state(INBOX, "gap", Viewer::Spectator)
        .await
        .expect("state");
    assert_eq!((state.seq, state.head.clone()), (Some(2), Some(hc)));
    let item = f.hub.capture(INBOX, captures[1]).await.expect("capture");
    assert_eq!(item.verdict, Verdict::Accepted);
}

#[actix_rt::test]
async fn a_rebuilt_actor_tells_its_room_where_the_game_stands() {
    // A node that takes a shard over rebuilds its games; the owner that died may have
    // recorded a verdict without publishing it, and a socket on another node then missed
    // that state for good.
    let mut c = config();
    c.actor_idle = Duration::from_millis(100);
    let f = open(c).await;
    let start = post(&f, event("told", 0, "", Seat::X, None), None)
        .await
        .expect("posted");
    let head = start.hash.expect("hash");
    let moved = post(&f, event("told", 1, &head, Seat::X, rc(1, 1)), None)
        .await
        .expect("posted");
    assert_eq!(moved.verdict, Verdict::Accepted);
    let mut room = f.rooms.subscribe(INBOX, "told");
    for _ in 0..100 {
        if f.hub.resident_actors() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(f.hub.resident_actors(), 0, "the idle actor stopped");
    while room.try_recv().is_ok() {}
    // A read rebuilds the actor, which publishes the state it rebuilt.
    f.hub
        .state(INBOX, "told", Viewer::Spectator)
        .await
        .expect("state");
    let mut told = None;
    for _ in 0..100 {
        if let Ok(p) = room.try_recv() {
            told = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let told = told.expect("the rebuilt actor published");
    assert_eq!(told.cause, Cause::Phase);
    let spectator = told.views.spectator.as_ref().expect("the spectator's view");
    assert_eq!(spectator.seq, Some(1));
}

#[actix_rt::test]
async fn a_resign_racing_its_own_seats_move_is_not_lost() {
    // Both drafted on the same head: when the move took the seq first, the resign was
    // refused `stale_seq` and the game went on, though the seat had resigned.
    let f = open(config()).await;
    for round in 0..8 {
        let (x, _) = seated(&f, "pipehub:tic-tac-toe", true).await;
        let (moved, resigned) = futures_util::future::join(
            f.hub.post_move(&x, json!({"move": {"row": 0, "col": 0}})),
            f.hub.resign(&x),
        )
        .await;
        let resigned = resigned.expect("resigned");
        assert_eq!(resigned.verdict, Verdict::Accepted, "round {round}");
        let moved = moved.expect("answered");
        let state = f
            .hub
            .state(INBOX, &x.game, Viewer::Spectator)
            .await
            .expect("state");
        let result = state.result.expect("a result");
        assert_eq!(result.by, Some(games::WinBy::Resign), "round {round}");
        // The move came first and stands, or came second and was refused as after the end.
        let seq = state.seq.expect("a seq");
        match moved.verdict {
            Verdict::Accepted => assert_eq!(seq, 2, "round {round}"),
            _ => assert_eq!(seq, 1, "round {round}: {:?}", moved.refusal),
        }
    }
}

/// A hub-held seat's move that fits its own message but would make an event every reader
/// refuses before any game logic (over 4096 bytes with the hub's envelope, or nested a
/// level too deep) is refused as that event would be, and nothing reaches the inbox.
#[actix_rt::test]
async fn a_move_whose_event_every_reader_would_refuse_is_not_written() {
    let f = open(config()).await;
    let (x, _o) = seated(&f, "pipehub:tic-tac-toe", true).await;
    let before = f.inbox.count(INBOX, &x.game).await.expect("count");
    let long = f
        .hub
        .post_move(&x, json!({"move": {"a": "x".repeat(4070)}}))
        .await
        .expect_err("too large with its envelope");
    assert_eq!((long.status(), long.code()), (413, "too_large"));
    let mut deep = json!(1);
    // As a socket's `game.move` may carry it: 32 levels, 33 inside its event.
    for _ in 0..32 {
        deep = json!({ "a": deep });
    }
    let deep = f
        .hub
        .post_move(&x, json!({ "move": deep }))
        .await
        .expect_err("too deep inside its event");
    assert_eq!((deep.status(), deep.code()), (400, "bad_json"));
    assert_eq!(f.inbox.count(INBOX, &x.game).await.expect("count"), before);
    // A move of the right shape still plays.
    let played = f
        .hub
        .post_move(&x, json!({"move": {"row": 1, "col": 1}}))
        .await
        .expect("played");
    assert_eq!(played.verdict, Verdict::Accepted);
}
