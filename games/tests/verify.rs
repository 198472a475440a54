//! Table tests of the chain verifier: every reason of DESIGN.md section 2, each in every
//! built-in protocol the support module lists, plus the log report in both modes.

mod verify_support;

use games::report::{verify_log, EntryVerdict, Mode};
use games::verify::{GameChain, Prepared, Verdict};
use games::{Action, Event, GameResult, Reason, Registry, Seat, Status, Viewer, WinBy};
use serde_json::{json, Value};
use verify_support::{games, lines, Game, Writer};

/// Offers `events` to one chain; every event but the last must be accepted, and the last
/// must get `want` (a reason and detail, or `None` for accepted).
fn check(events: &[Event], want: Option<(Reason, Option<&str>)>) -> GameChain {
    let registry = Registry::builtin();
    let mut chain = GameChain::new(&registry);
    let (last, prefix) = events.split_last().expect("at least one event");
    for (i, e) in prefix.iter().enumerate() {
        let v = chain.offer(e);
        assert!(
            matches!(v, Verdict::Accepted { .. }),
            "event {i}: {v:?} for {e:?}"
        );
    }
    match (chain.offer(last), want) {
        (Verdict::Accepted { .. }, None) => {}
        (Verdict::Rejected(r), Some((reason, detail))) => {
            assert_eq!(
                (r.reason, r.detail.as_deref()),
                (reason, detail),
                "{last:?}"
            );
        }
        (v, want) => panic!("got {v:?}, want {want:?} for {last:?}"),
    }
    chain
}

fn reject(events: &[Event], reason: Reason) {
    let registry = Registry::builtin();
    let mut chain = GameChain::new(&registry);
    let (last, prefix) = events.split_last().expect("at least one event");
    for e in prefix {
        assert!(matches!(chain.offer(e), Verdict::Accepted { .. }), "{e:?}");
    }
    match chain.offer(last) {
        Verdict::Rejected(r) => assert_eq!(r.reason, reason, "{last:?}"),
        v => panic!("got {v:?}, want {reason} for {last:?}"),
    }
}

fn started(g: &Game, w: &mut Writer) -> Vec<Event> {
    vec![w.start(Some(g.reference), g.rules.clone())]
}

#[test]
fn a_whole_game_wins_by_line_then_after_end() {
    for g in games() {
        for mut w in [Writer::unsigned("g1"), Writer::signed("g1", "seed")] {
            let mut log = started(&g, &mut w);
            let (last, moves) = g.win.split_last().unwrap();
            log.extend(moves.iter().map(|m| w.play(m.clone())));
            log.push(w.play_claiming(last.clone(), Status::Win));
            let chain = check(&log, None);
            assert_eq!(chain.result(), Some(GameResult::win(Seat::X, g.win_by)));
            assert_eq!(chain.accepted(), log.len() as u64);
            assert_eq!(chain.signed(), w.keys_value().is_some());
            log.push(w.play(g.win[1].clone()));
            check(&log, Some((Reason::AfterEnd, None)));
        }
    }
}

#[test]
fn before_genesis() {
    for g in games() {
        let mut w = Writer::unsigned("g");
        let start = w.start(Some(g.reference), g.rules.clone());
        let first = w.play(g.win[0].clone());
        check(&[first], Some((Reason::NoStart, None)));
        for (_field, edit) in [
            ("seq", (|e: &mut Event| e.seq = 1) as fn(&mut Event)),
            ("prevHash", |e| e.prev_hash = "a".repeat(64)),
            ("player", |e| e.player = Seat::O),
            ("status", |e| e.status = Some(Status::Win)),
        ] {
            let mut bad = start.clone();
            edit(&mut bad);
            bad.mv = Some(json!({})); // bad_start is checked before start_has_move
            check(&[bad], Some((Reason::BadStart, None)));
        }
        let mut claims = start.clone();
        claims.status = Some(Status::InProgress);
        check(&[claims], None);
        for mv in [json!({}), json!(1), json!(null)] {
            let mut bad = start.clone();
            bad.mv = Some(mv);
            check(&[bad], Some((Reason::StartHasMove, None)));
        }
        let mut bad = start.clone();
        bad.rules = g.bad_rules.as_object().cloned();
        reject(&[bad], Reason::BadRules);
        let mut unknown_field = start.clone();
        unknown_field.rules = json!({"speed": 1}).as_object().cloned();
        reject(&[unknown_field], Reason::BadRules);
    }
}

#[test]
fn keys_and_inboxes_are_checked_at_the_start() {
    let good_keys = Writer::signed("g", "s").keys_value().unwrap();
    let weak = format!("01{}", "00".repeat(31));
    for g in games() {
        let w = Writer::unsigned("g");
        let cases = [
            (json!({"keys": {"X": good_keys["X"]}}), "keys"),
            (json!({"keys": {"X": good_keys["X"], "O": weak}}), "keys"),
            (
                json!({"keys": {"X": good_keys["X"], "O": good_keys["O"], "Z": good_keys["O"]}}),
                "keys",
            ),
            (
                json!({"keys": {"X": good_keys["X"], "O": good_keys["O"].as_str().unwrap().to_uppercase()}}),
                "keys",
            ),
            (json!({"keys": "x"}), "keys"),
            (json!({"inboxes": []}), "inboxes"),
            (
                json!({"inboxes": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}),
                "inboxes",
            ),
            (json!({"inboxes": ["é".repeat(257)]}), "inboxes"),
            (json!({"inboxes": [1]}), "inboxes"),
        ];
        for (rules, detail) in cases {
            let mut e = w.start_draft(Some(g.reference), g.rules.clone());
            let mut all = e.rules.take().unwrap_or_default();
            all.extend(rules.as_object().unwrap().clone());
            e.rules = Some(all);
            check(&[e], Some((Reason::BadRules, Some(detail))));
        }
        let mut ok = w.start_draft(Some(g.reference), g.rules.clone());
        let mut rules = ok.rules.take().unwrap_or_default();
        rules.insert("inboxes".into(), json!(["é".repeat(256), "default"]));
        ok.rules = Some(rules);
        let chain = check(&[ok], None);
        assert_eq!(chain.inboxes().map(<[String]>::len), Some(2));
        assert!(!chain.rules().unwrap().contains_key("inboxes"));
    }
}

#[test]
fn signatures_at_the_start_and_after() {
    for g in games() {
        let mut w = Writer::signed("s", "seed");
        let draft = w.start_draft(Some(g.reference), g.rules.clone());
        check(
            std::slice::from_ref(&draft),
            Some((Reason::MissingSignature, None)),
        );
        let mut wrong = w.sign(draft.clone());
        wrong.player = Seat::O; // O's key would not do either: bad_start comes first
        check(&[wrong], Some((Reason::BadStart, None)));
        let mut forged = w.sign(draft);
        forged.sig = Some("ab".repeat(64));
        check(&[forged], Some((Reason::BadSignature, None)));

        let log = started(&g, &mut w);
        let unsigned_move = w.draft(Action::Move, Some(g.win[0].clone()));
        check(
            &[log.clone(), vec![unsigned_move.clone()]].concat(),
            Some((Reason::MissingSignature, None)),
        );
        // Signed by the other seat's key: O signs, then the event claims X.
        let mut by_o = unsigned_move.clone();
        by_o.player = Seat::O;
        let mut by_o = w.sign(by_o);
        by_o.player = Seat::X;
        check(
            &[log.clone(), vec![by_o]].concat(),
            Some((Reason::BadSignature, None)),
        );
        // A signature over other bytes.
        let mut edited = w.sign(unsigned_move);
        edited.status = Some(Status::InProgress);
        check(
            &[log, vec![edited]].concat(),
            Some((Reason::BadSignature, None)),
        );
    }
}

/// The hub signs what it writes for hub-held seats and then adjudicates it: a signature
/// made through `Prepared::sign` is not verified again, but only for the key the chain
/// wants and for exactly that signature.
#[test]
fn own_signatures_are_trusted_only_for_their_key_and_bytes() {
    let g = &games()[0];
    let key = |seat| games::crypto::seat_key(b"seed", "tests", "s", seat);
    let offer = |signer: Seat, forge: bool| {
        let mut w = Writer::signed("s", "seed");
        let log = started(g, &mut w);
        let mut chain = GameChain::new(&Registry::builtin());
        for e in &log {
            assert!(matches!(chain.offer(e), Verdict::Accepted { .. }));
        }
        let mut e = w.draft(Action::Move, Some(g.win[0].clone()));
        let mut prepared = Prepared::of(&e);
        e.sig = Some(prepared.sign(&key(signer)));
        if forge {
            e.sig = Some("ab".repeat(64));
        }
        chain.offer_prepared(&e, &prepared)
    };
    assert!(matches!(offer(Seat::X, false), Verdict::Accepted { .. }));
    let bad = Verdict::Rejected(Reason::BadSignature.into());
    assert_eq!(
        offer(Seat::O, false),
        bad,
        "signed with the other seat's key"
    );
    assert_eq!(offer(Seat::X, true), bad, "not the signature that was made");
}

#[test]
fn a_sig_in_an_unsigned_game_is_ignored() {
    for g in games() {
        let mut w = Writer::unsigned("u");
        let mut start = w.start_draft(Some(g.reference), g.rules.clone());
        start.sig = Some("cd".repeat(64));
        let start = w.commit(start);
        let mut mv = w.draft(Action::Move, Some(g.win[0].clone()));
        mv.sig = Some("ef".repeat(64));
        check(&[start, mv], None);
    }
}

#[test]
fn after_genesis() {
    for g in games() {
        let mut w = Writer::unsigned("g");
        let mut log = started(&g, &mut w);
        log.push(w.play(g.win[0].clone()));
        log.push(w.play(g.win[1].clone()));
        let with = |e: Event| [log.clone(), vec![e]].concat();

        let mut again = log[0].clone();
        again.seq = 7; // whatever else is wrong with it
        check(&with(again), Some((Reason::TwoGenesis, None)));
        check(&with(log[1].clone()), Some((Reason::StaleSeq, None)));
        let mut skip = w.draft(Action::Move, Some(g.win[2].clone()));
        skip.seq += 1;
        check(&with(skip), Some((Reason::BadSeq, None)));
        let mut prev = w.draft(Action::Move, Some(g.win[2].clone()));
        prev.prev_hash = "0".repeat(64);
        check(&with(prev), Some((Reason::BadPrevHash, None)));
        let mut wrong = w.draft(Action::Move, Some(g.win[2].clone()));
        wrong.player = Seat::O;
        check(&with(wrong), Some((Reason::WrongPlayer, None)));
        for (illegal, detail) in g.illegal.clone() {
            check(
                &with(w.draft(Action::Move, Some(illegal))),
                Some((Reason::IllegalMove, Some(detail))),
            );
        }
        let shape = w.draft(Action::Move, Some(g.bad_shape.clone()));
        check(&with(shape), Some((Reason::IllegalMove, Some("bad_move"))));
        let mut claim = w.draft(Action::Move, Some(g.win[2].clone()));
        claim.status = Some(Status::Draw);
        let chain = check(&with(claim), Some((Reason::StatusMismatch, None)));
        // The refused claim left the board as it was: the same move now goes through.
        assert_eq!(chain.seq(), Some(2));
        let mut honest = w.draft(Action::Move, Some(g.win[2].clone()));
        honest.status = Some(Status::InProgress);
        check(&with(honest), None);
    }
}

#[test]
fn resignations() {
    for g in games() {
        for seat in [Seat::X, Seat::O] {
            let mut w = Writer::unsigned("r");
            let mut log = started(&g, &mut w);
            log.push(w.play(g.win[0].clone()));
            let mut bad = w.draft(Action::Resign, None);
            bad.player = seat;
            bad.status = Some(Status::Draw);
            check(
                &[log.clone(), vec![bad]].concat(),
                Some((Reason::StatusMismatch, None)),
            );
            let mut claim = w.draft(Action::Resign, None);
            claim.player = seat;
            claim.status = Some(Status::Win);
            log.push(w.commit(claim));
            let chain = check(&log, None);
            assert_eq!(
                chain.result(),
                Some(GameResult::win(seat.other(), WinBy::Resign))
            );
            // The board says the game is over too: nobody to move, and the text says who
            // won and how (it used to show the next seat to move).
            let board = chain.board().expect("a board");
            assert_eq!(
                board.outcome(),
                GameResult::win(seat.other(), WinBy::Resign)
            );
            for viewer in [
                Viewer::Seat(Seat::X),
                Viewer::Seat(Seat::O),
                Viewer::Spectator,
            ] {
                let view = board.view(viewer).0;
                assert_eq!(view["toMove"], Value::Null, "{}: {view}", g.reference);
                let mut written = Vec::new();
                board.write_view(viewer, &mut written);
                assert_eq!(
                    serde_json::from_slice::<Value>(&written).expect("JSON"),
                    view
                );
                let text = board.render(viewer);
                let said = format!("{} wins ({seat} resigned)", seat.other());
                assert!(text.ends_with(&said), "{}: {text:?}", g.reference);
            }
            log.push(w.resign(seat.other()));
            check(&log, Some((Reason::AfterEnd, None)));
        }
    }
}

#[test]
fn unknown_protocol_skips_the_game_for_good() {
    for g in games() {
        let registry = Registry::builtin();
        let mut chain = GameChain::new(&registry);
        let mut w = Writer::unsigned("k");
        let bad = w.start_draft(Some("pipehub:go"), json!({}));
        assert_eq!(chain.offer(&bad), Verdict::Skipped);
        let good = w.start(Some(g.reference), g.rules.clone());
        assert_eq!(chain.offer(&good), Verdict::Skipped);
        assert!(chain.is_skipped());
        // An established game is never skipped.
        let mut chain = GameChain::new(&registry);
        assert!(matches!(chain.offer(&good), Verdict::Accepted { .. }));
        let mut other = bad.clone();
        other.protocol = Some("PIPEHUB:TIC-TAC-TOE".into());
        assert_eq!(
            chain.offer(&other),
            Verdict::Rejected(Reason::TwoGenesis.into())
        );
    }
}

#[test]
fn report_strict_and_inbox() {
    let registry = Registry::builtin();
    let g = &games()[0];
    let mut a = Writer::unsigned("a");
    let mut b = Writer::unsigned("b");
    let a0 = a.start(None, json!({}));
    let b0 = b.start(Some(g.reference), json!({}));
    let a1 = a.play(g.win[0].clone());
    let stale = a1.clone();
    let a2 = a.play(g.win[1].clone());
    let mut log = lines(&[a0, b0, a1, stale, a2]);
    log.insert_str(0, "\n{\"game\":\"a\"}\r\n");
    log.push_str("{\"game\":\"z\",\"seq\":0,\"prevHash\":\"\",\"player\":\"X\",\"action\":\"start\",\"protocol\":\"x:y\"}\n");

    let strict = verify_log(log.as_bytes(), Mode::Strict, &registry);
    let json: Vec<String> = strict.iter().map(|e| e.to_json()).collect();
    assert_eq!(
        json,
        [
            r#"{"game":null,"verdict":"invalid","result":null,"line":2,"seq":null,"reason":"schema","detail":null,"rejected":[]}"#,
            r#"{"game":"a","verdict":"invalid","result":{"status":"in_progress","winner":null,"by":null},"line":6,"seq":1,"reason":"stale_seq","detail":null,"rejected":[]}"#,
            r#"{"game":"b","verdict":"ok","result":{"status":"in_progress","winner":null,"by":null},"line":4,"seq":0,"reason":null,"detail":null,"rejected":[]}"#,
            r#"{"game":"z","verdict":"skipped","result":null,"line":null,"seq":null,"reason":"unknown_protocol","detail":null,"rejected":[]}"#,
        ]
    );
    let plain: Vec<String> = strict.iter().map(|e| e.to_plain()).collect();
    assert_eq!(
        plain,
        [
            "- invalid line=2 reason=schema",
            "a invalid line=6 seq=1 reason=stale_seq",
            "b ok in_progress",
            "z skipped unknown_protocol",
        ]
    );

    let inbox = verify_log(log.as_bytes(), Mode::Inbox, &registry);
    assert_eq!(inbox[1].verdict, EntryVerdict::Ok);
    assert_eq!(
        inbox[1].to_json(),
        r#"{"game":"a","verdict":"ok","result":{"status":"in_progress","winner":null,"by":null},"line":7,"seq":2,"reason":null,"detail":null,"rejected":[{"line":6,"seq":1,"reason":"stale_seq","detail":null}]}"#
    );
    let never =
        "{\"game\":\"n\",\"seq\":1,\"prevHash\":\"\",\"player\":\"X\",\"action\":\"resign\"}\n";
    let entries = verify_log(never.as_bytes(), Mode::Inbox, &registry);
    assert_eq!(
        entries[0].to_plain(),
        "n invalid line=1 seq=1 reason=no_start"
    );
    assert_eq!(entries[0].rejected.len(), 1);
}

/// The README's example log: three interleaved tic-tac-toe games (one won, one signed and
/// drawn, one in progress with a writer that lost a race). It is generated here, never
/// written by hand; `PIPEHUB_BLESS=1 cargo test -p pipehub-games --test verify` rewrites it.
fn example_log() -> String {
    let cell = |r: u64, c: u64| json!({"row": r, "col": c});
    let mut won = Writer::unsigned("demo-won");
    let mut drawn = Writer::signed("demo-signed", "pipehub-example");
    let mut raced = Writer::unsigned("demo-race");
    let mut log = vec![
        won.start(Some("pipehub:tic-tac-toe"), json!({})),
        drawn.start(Some("pipehub:tic-tac-toe"), json!({"rows": 3, "cols": 3})),
        won.play(cell(1, 1)),
        raced.start(None, json!({})),
    ];
    let draw = [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 0),
        (1, 2),
        (2, 1),
        (2, 0),
    ];
    for (i, &(r, c)) in draw.iter().enumerate() {
        log.push(drawn.play(cell(r, c)));
        if i < 3 {
            let mv = [(0, 1), (0, 0), (0, 2)][i];
            log.push(won.play(cell(mv.0, mv.1)));
        }
    }
    log.push(won.play_claiming(cell(2, 2), Status::Win));
    log.push(drawn.play_claiming(cell(2, 2), Status::Draw));
    let first = raced.play(cell(0, 0));
    let mut late = first.clone();
    late.mv = Some(cell(2, 2)); // the same seq, written by a writer that lost the race
    log.extend([first, late, raced.play(cell(1, 1))]);
    lines(&log)
}

#[test]
fn example_log_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/tic-tac-toe.jsonl");
    let log = example_log();
    if std::env::var_os("PIPEHUB_BLESS").is_some() {
        std::fs::write(path, &log).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        on_disk, log,
        "examples/tic-tac-toe.jsonl is stale: rerun with PIPEHUB_BLESS=1"
    );
    let registry = Registry::builtin();
    let plain = |mode| -> Vec<String> {
        verify_log(log.as_bytes(), mode, &registry)
            .iter()
            .map(|e| e.to_plain())
            .collect()
    };
    assert_eq!(
        plain(Mode::Strict),
        [
            "demo-won ok win X line",
            "demo-signed ok draw",
            "demo-race invalid line=19 seq=1 reason=stale_seq"
        ]
    );
    assert_eq!(
        plain(Mode::Inbox),
        [
            "demo-won ok win X line",
            "demo-signed ok draw",
            "demo-race ok in_progress"
        ]
    );
}

#[test]
fn a_plain_report_escapes_what_a_log_quotes_so_it_cannot_forge_lines() {
    // An unknown rule's name comes back in the `bad_rules` detail: a log's author must not
    // be able to write a line of its own into the plain report, or steer a terminal.
    let log = concat!(
        r#"{"action":"start","game":"evil","player":"X","prevHash":"","seq":0,"#,
        r#""rules":{"x\nvictim ok win X line\n\u001b[2K\u202e\\":1}}"#,
        "\n"
    );
    let entries = verify_log(log.as_bytes(), Mode::Strict, &Registry::builtin());
    let plain = entries[0].to_plain();
    assert_eq!(
        plain,
        r"evil invalid line=1 seq=0 reason=bad_rules x\nvictim ok win X line\n\u{1b}[2K\u{202e}\\:unknown"
    );
    // JSON output already escapes it, and keeps the text itself.
    let json: serde_json::Value = serde_json::from_str(&entries[0].to_json()).expect("json");
    assert_eq!(
        json["detail"],
        "x\nvictim ok win X line\n\u{1b}[2K\u{202e}\\:unknown"
    );
}

#[test]
fn events_after_a_games_end_are_judged_as_its_chain_judges_them_in_both_modes() {
    // A finished game keeps only its result in the report; what comes after its end must
    // still get the reasons a whole chain gives: a start is `two_genesis`, anything else
    // `after_end`, and a game interleaved with it goes on untouched.
    let mut done = Writer::unsigned("done");
    let mut other = Writer::unsigned("other");
    let start = done.start(None, json!({}));
    let resigned = done.resign(Seat::X);
    let late_move = done.draft(Action::Move, Some(json!({"row": 0, "col": 0})));
    let mut late_start = start.clone();
    late_start.rules = Some(serde_json::Map::new());
    let mut chain = GameChain::new(&Registry::builtin());
    for e in [&start, &resigned] {
        assert!(matches!(chain.offer(e), Verdict::Accepted { .. }));
    }
    let whole = |e: &Event| match chain.clone().offer(e) {
        Verdict::Rejected(r) => r.reason,
        v => panic!("{v:?}"),
    };
    assert_eq!(
        (whole(&late_move), whole(&late_start)),
        (Reason::AfterEnd, Reason::TwoGenesis)
    );
    let log = lines(&[
        start,
        other.start(None, json!({})),
        resigned,
        late_move,
        other.play(json!({"row": 1, "col": 1})),
        late_start,
    ]);
    let registry = Registry::builtin();
    let inbox = verify_log(log.as_bytes(), Mode::Inbox, &registry);
    let reasons: Vec<_> = inbox[0]
        .rejected
        .iter()
        .map(|r| (r.line, r.refusal.reason))
        .collect();
    assert_eq!(reasons, [(4, Reason::AfterEnd), (6, Reason::TwoGenesis)]);
    assert_eq!(inbox[0].verdict, EntryVerdict::Ok);
    assert_eq!(
        inbox[0].result,
        Some(GameResult::win(Seat::O, WinBy::Resign))
    );
    assert_eq!(
        (inbox[1].verdict, inbox[1].seq),
        (EntryVerdict::Ok, Some(1))
    );
    let strict = verify_log(log.as_bytes(), Mode::Strict, &registry);
    assert_eq!(
        strict[0].to_plain(),
        "done invalid line=4 seq=2 reason=after_end"
    );
    assert_eq!(strict[1].to_plain(), "other ok in_progress");
}
