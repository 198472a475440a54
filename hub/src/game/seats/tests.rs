//! Tests of seats and pairing codes: codes and tokens, registrations shared and stored in
//! full, reserved ids, and the purge of dead codes.

use serde_json::Value;

use super::*;

#[test]
fn codes_are_eight_crockford_characters() {
    for _ in 0..100 {
        let code = codes::random_base32(8);
        assert_eq!(code.len(), 8);
        assert_eq!(normalize_code(&code).as_deref(), Some(code.as_str()));
    }
}

#[test]
fn codes_normalize_as_crockford_reads_them() {
    assert_eq!(normalize_code("abcd-efgh").as_deref(), Some("ABCDEFGH"));
    assert_eq!(normalize_code(" abcd efgh\t").as_deref(), Some("ABCDEFGH"));
    assert_eq!(normalize_code("o1l0i000").as_deref(), Some("01101000"));
    assert_eq!(normalize_code("ABCDEFG"), None);
    assert_eq!(normalize_code("ABCDEFGHJ"), None);
    assert_eq!(normalize_code("ABCDEFGU"), None);
    assert_eq!(normalize_code("ABCDEFGé"), None);
}

#[test]
fn tokens_carry_256_bits() {
    let a = new_token();
    assert_eq!(a.len(), 64);
    assert_ne!(a, new_token());
}

fn registration(game: &str, rules: Value) -> Registration {
    Registration {
        inbox: "lobby".into(),
        game: game.into(),
        protocol: "pipehub:connect-four".into(),
        protocol_id: "0".repeat(64).into(),
        rules: Arc::new(rules.as_object().cloned().expect("an object")),
        signed: false,
        key_x: None,
        key_o: None,
        agent_x: false,
        agent_o: false,
        paired: false,
        host: "host".into(),
        created_ms: 0,
        code_hash: None,
        create_key: None,
    }
}

#[actix_rt::test]
async fn a_refreshed_inbox_caches_its_open_games_only() {
    // Two nodes on one store: games created and closed on one are listed by the other
    // while open, and leave its cache once closed; another inbox's stay out.
    let meta: Arc<dyn Meta> = Arc::new(crate::game::testkit::MemMeta::default());
    let creator = Seats::load(meta.clone(), true).await.expect("load");
    let lister = Seats::load(meta.clone(), true).await.expect("load");
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    for game in ["g1", "g2", "g3"] {
        creator
            .create(registration(game, rules.clone()), 60_000)
            .await
            .expect("create");
    }
    let mut elsewhere = registration("g4", rules.clone());
    elsewhere.inbox = "other".into();
    creator.create(elsewhere, 60_000).await.expect("create");
    let listed = |seats: &Seats| {
        let mut games: Vec<String> = seats
            .registrations("lobby")
            .iter()
            .map(|r| r.game.clone())
            .collect();
        games.sort();
        games
    };
    lister.refresh_inbox("lobby").await.expect("refresh");
    assert_eq!(listed(&lister), ["g1", "g2", "g3"]);
    assert!(lister.registration("other", "g4").is_none());
    let finished = creator.registration("lobby", "g2").expect("g2");
    creator.close(&finished).await.expect("close");
    lister.refresh_inbox("lobby").await.expect("refresh");
    assert_eq!(
        listed(&lister),
        ["g1", "g3"],
        "a closed game leaves the cache"
    );
}

#[actix_rt::test]
async fn registrations_share_what_they_have_in_common_and_store_it_in_full() {
    let meta: Arc<dyn Meta> = Arc::new(crate::game::testkit::MemMeta::default());
    let seats = Seats::load(meta.clone(), false).await.expect("load");
    let defaults = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    for (game, rules) in [
        ("g1", defaults.clone()),
        ("g2", defaults.clone()),
        (
            "g3",
            serde_json::json!({"rows": 5, "cols": 7, "winLength": 4}),
        ),
    ] {
        seats
            .create(registration(game, rules), 60_000)
            .await
            .expect("create");
    }
    let shared = |seats: &Seats| {
        let [a, b, c] = ["g1", "g2", "g3"].map(|g| seats.registration("lobby", g).expect(g));
        assert!(Arc::ptr_eq(&a.rules, &b.rules), "equal rules are one copy");
        assert!(!Arc::ptr_eq(&a.rules, &c.rules));
        assert_eq!(
            *c.rules,
            *registration(
                "g3",
                serde_json::json!({"rows": 5, "cols": 7, "winLength": 4})
            )
            .rules
        );
        assert!(Arc::ptr_eq(&a.protocol_id, &c.protocol_id));
        assert!(Arc::ptr_eq(&a.protocol, &b.protocol));
    };
    shared(&seats);
    // The store holds each registration whole, and a restart shares again.
    let stored = meta
        .get("game/lobby/g2")
        .await
        .expect("get")
        .expect("stored");
    let stored: Registration = serde_json::from_slice(&stored).expect("a registration");
    assert_eq!(*stored.rules, *registration("g2", defaults).rules);
    assert_eq!(&*stored.protocol, "pipehub:connect-four");
    shared(&Seats::load(meta, false).await.expect("reload"));
}

#[actix_rt::test]
async fn a_reserved_id_is_refused_and_leaves_no_seat_or_code_behind() {
    let meta: Arc<dyn Meta> = Arc::new(crate::game::testkit::MemMeta::default());
    let seats = Seats::load(meta.clone(), false).await.expect("load");
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    let (token, code, _) = seats
        .create(registration("g1", rules.clone()), 60_000)
        .await
        .expect("create");
    let again = seats.create(registration("g1", rules), 60_000).await;
    assert!(
        matches!(again, Err(HubError::Unavailable(Unavailable::IdReserved))),
        "{again:?}"
    );
    let count = |prefix: &'static str| {
        let meta = meta.clone();
        async move { meta.scan(prefix).await.expect("scan").len() }
    };
    assert_eq!((count("seat/").await, count("code/").await), (1, 1));
    assert_eq!(seats.token_count(), 1);
    assert_eq!(seats.open_games("host"), 1);
    // The first game is untouched: its token and code still work.
    assert!(seats.seat_for_token(&token).is_some());
    let hash = crypto::sha256_hex(code.as_bytes());
    let reg = seats.registration("lobby", "g1").expect("registered");
    assert_eq!(reg.code_hash.as_deref(), Some(hash.as_str()));
    let (_, paired) = seats
        .pair(&code, None, |_| Ok((None, false)))
        .await
        .expect("pair");
    assert!(paired.paired);
    assert_eq!(count("seat/").await, 2);
}

/// Seats on a real embedded store, whose writes wait for its writer thread, so that two
/// changes of one game started together interleave at every await.
async fn seats_on_disk() -> (tempfile::TempDir, Arc<dyn Meta>, Seats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let meta: Arc<dyn Meta> = Arc::new(crate::meta::EmbeddedMeta::open(dir.path()).expect("open"));
    let seats = Seats::load(meta.clone(), false).await.expect("load");
    (dir, meta, seats)
}

/// A new game `g{trial}` of `seats`: X's token, X's seat and the pairing code.
async fn new_game(seats: &Seats, trial: usize) -> (String, SeatAuth, String) {
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    let (x_token, code, _) = seats
        .create(registration(&format!("g{trial}"), rules), 60_000)
        .await
        .expect("create");
    let x = seats.seat_for_token(&x_token).expect("X's seat");
    (x_token, x, code)
}

/// Runs `a` and `b` together, `a` polled first in even trials and `b` in odd ones, so that
/// each goes first in turn; answers in the order given.
async fn together<A: std::future::Future, B: std::future::Future>(
    trial: usize,
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    if trial.is_multiple_of(2) {
        tokio::join!(a, b)
    } else {
        let (b, a) = tokio::join!(b, a);
        (a, b)
    }
}

#[actix_rt::test]
async fn a_pair_and_a_fresh_code_of_one_game_take_turns() {
    // Before turns, a fresh code asked for while the guest's pair was being written was
    // issued for a game that was being paired, and stayed live: a second person redeemed
    // it and got O's seat too.
    let (_dir, _meta, seats) = seats_on_disk().await;
    let (mut paired_first, mut fresh_first) = (0, 0);
    for trial in 0..24 {
        let game = format!("g{trial}");
        let (_, x, code) = new_game(&seats, trial).await;
        let pair = seats.pair(&code, None, |_| Ok((None, false)));
        let (paired, fresh) = together(trial, pair, seats.new_code(&x, 60_000)).await;
        match (paired, fresh) {
            (Ok(_), Err(HubError::AlreadyPaired)) => paired_first += 1,
            (Err(HubError::CodeUsed), Ok((fresh_code, _))) => {
                fresh_first += 1;
                // The fresh code seats O once; the game then takes no other code.
                let (_, reg) = seats
                    .pair(&fresh_code, None, |_| Ok((None, false)))
                    .await
                    .expect("the fresh code pairs");
                assert!(reg.paired);
                let again = seats.pair(&fresh_code, None, |_| Ok((None, false))).await;
                assert!(matches!(again, Err(HubError::CodeUsed)), "{again:?}");
            }
            other => panic!("trial {trial}: both or neither went through: {other:?}"),
        }
        let reg = seats.registration("lobby", &game).expect("still open");
        assert!(
            reg.paired && reg.code_hash.is_none(),
            "trial {trial}: {reg:?}"
        );
        let late = seats.new_code(&x, 60_000).await;
        assert!(matches!(late, Err(HubError::AlreadyPaired)), "{late:?}");
    }
    // Whichever was polled first went first: both orders were tried.
    assert!(
        paired_first > 0 && fresh_first > 0,
        "{paired_first} {fresh_first}"
    );
}

/// A store whose reads take a few milliseconds, as a Redis server's round trips do.
struct SlowReads(Arc<dyn Meta>);

#[async_trait::async_trait]
impl Meta for SlowReads {
    async fn put(&self, key: &str, value: Bytes) -> Result<(), crate::inbox::StoreError> {
        self.0.put(key, value).await
    }
    async fn insert_new(&self, key: &str, value: Bytes) -> Result<bool, crate::inbox::StoreError> {
        self.0.insert_new(key, value).await
    }
    async fn get(&self, key: &str) -> Result<Option<Bytes>, crate::inbox::StoreError> {
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        self.0.get(key).await
    }
    async fn delete(&self, key: &str) -> Result<bool, crate::inbox::StoreError> {
        self.0.delete(key).await
    }
    async fn replace(
        &self,
        key: &str,
        expected: &[u8],
        value: Option<Bytes>,
    ) -> Result<bool, crate::inbox::StoreError> {
        self.0.replace(key, expected, value).await
    }
    async fn take(&self, key: &str) -> Result<Option<Bytes>, crate::inbox::StoreError> {
        self.0.take(key).await
    }
    async fn scan_page(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Bytes)>, crate::inbox::StoreError> {
        self.0.scan_page(prefix, after, limit).await
    }
    fn ready(&self) -> bool {
        self.0.ready()
    }
}

#[actix_rt::test]
async fn of_two_guests_racing_for_one_code_the_loser_hears_it_was_used() {
    // The loser used to hear `not_found`: the winner had taken the code's record, and its
    // tombstone was not back yet. Two nodes on one store whose reads take a round trip, the
    // winner reading the game's registration meanwhile, as on Redis.
    let (_dir, meta, _) = seats_on_disk().await;
    let meta: Arc<dyn Meta> = Arc::new(SlowReads(meta));
    let a = Seats::load(meta.clone(), true).await.expect("load");
    let b = Seats::load(meta.clone(), true).await.expect("load");
    for trial in 0..8 {
        let (_, _, code) = new_game(&a, trial).await;
        let (won, lost) = together(
            trial,
            a.pair(&code, None, |_| Ok((None, false))),
            b.pair(&code, None, |_| Ok((None, false))),
        )
        .await;
        match (won, lost) {
            (Ok(_), Err(HubError::CodeUsed)) | (Err(HubError::CodeUsed), Ok(_)) => {}
            other => panic!("trial {trial}: {other:?}"),
        }
    }
    let unknown = b.pair("ZZZZZZZZ", None, |_| Ok((None, false))).await;
    assert!(matches!(unknown, Err(HubError::NotFound(_))), "{unknown:?}");
}

#[actix_rt::test]
async fn a_pair_and_a_cancel_of_one_game_take_turns() {
    // Before turns, both could succeed: the game was deleted, yet the pair wrote it back
    // paired, and O's token opened a game nobody could play.
    let (_dir, meta, seats) = seats_on_disk().await;
    let (mut paired_first, mut cancelled_first) = (0, 0);
    for trial in 0..24 {
        let game = format!("g{trial}");
        let (x_token, x, code) = new_game(&seats, trial).await;
        let pair = seats.pair(&code, None, |_| Ok((None, false)));
        let (paired, cancelled) = together(trial, pair, seats.cancel(&x)).await;
        let stored = meta
            .get(&game_key("lobby", &game))
            .await
            .expect("read")
            .map(|v| serde_json::from_slice::<Registration>(&v).expect("a registration"));
        match (paired, cancelled) {
            (Ok((o_token, _)), Err(HubError::AlreadyPaired)) => {
                paired_first += 1;
                assert!(stored.is_some_and(|r| r.paired), "trial {trial}");
                assert!(seats.seat_for_token(&x_token).is_some());
                assert!(seats.seat_for_token(&o_token).is_some());
            }
            // The code died with the game: retired before the pair took it, or taken and
            // found to name a game no longer there. Either way it is a used code (410),
            // not an unknown one (404).
            (Err(HubError::CodeUsed), Ok(())) => {
                cancelled_first += 1;
                assert!(stored.is_none(), "trial {trial}: {stored:?}");
                assert!(seats.registration("lobby", &game).is_none());
                assert!(seats.seat_for_token(&x_token).is_none());
            }
            other => panic!("trial {trial}: both or neither went through: {other:?}"),
        }
    }
    assert!(
        paired_first > 0 && cancelled_first > 0,
        "{paired_first} {cancelled_first}"
    );
    assert_eq!(seats.open_games("host"), paired_first);
}

#[actix_rt::test]
async fn nodes_sharing_a_store_pair_renew_and_cancel_one_game_one_at_a_time() {
    // Two hub nodes on one store take no turns with each other: each writes the game's
    // registration only over what it read (`Meta::replace`), and the one that finds the
    // other's change answers by it.
    let dir = tempfile::tempdir().expect("tempdir");
    let meta: Arc<dyn Meta> = Arc::new(crate::meta::EmbeddedMeta::open(dir.path()).expect("open"));
    let a = Seats::load(meta.clone(), true).await.expect("load");
    let b = Seats::load(meta.clone(), true).await.expect("load");
    let stored = |game: String| {
        let meta = meta.clone();
        async move {
            meta.get(&game_key("lobby", &game))
                .await
                .expect("read")
                .map(|v| serde_json::from_slice::<Registration>(&v).expect("a registration"))
        }
    };
    let mut outcomes = std::collections::BTreeSet::new();
    for trial in 0..32 {
        let game = format!("g{trial}");
        let (_, x, code) = new_game(&a, trial).await;
        let pair = a.pair(&code, None, |_| Ok((None, false)));
        if trial % 2 == 0 {
            let (paired, fresh) = together(trial / 2, pair, b.new_code(&x, 60_000)).await;
            let reg = stored(game.clone()).await.expect("still there");
            match (paired, fresh) {
                (Ok(_), Err(HubError::AlreadyPaired)) => {
                    assert!(reg.paired && reg.code_hash.is_none(), "{reg:?}");
                    outcomes.insert("paired, then no code");
                }
                (Err(HubError::CodeUsed), Ok((fresh, _))) => {
                    assert!(!reg.paired, "{reg:?}");
                    let hash = crypto::sha256_hex(fresh.as_bytes());
                    assert_eq!(reg.code_hash.as_deref(), Some(hash.as_str()));
                    outcomes.insert("renewed, then the old code is dead");
                }
                other => panic!("trial {trial}: {other:?}"),
            }
        } else {
            let (paired, cancelled) = together(trial / 2, pair, b.cancel(&x)).await;
            let reg = stored(game.clone()).await;
            match (paired, cancelled) {
                (Ok(_), Err(HubError::AlreadyPaired)) => {
                    assert!(reg.is_some_and(|r| r.paired), "trial {trial}");
                    outcomes.insert("paired, then not cancelled");
                }
                (Err(HubError::CodeUsed), Ok(())) => {
                    assert!(reg.is_none(), "trial {trial}: {reg:?}");
                    outcomes.insert("cancelled, then not paired");
                }
                other => panic!("trial {trial}: {other:?}"),
            }
        }
        // Never a second O: whatever code the game ends with seats nobody more.
        let o_seats = meta
            .scan("seat/")
            .await
            .expect("scan")
            .into_iter()
            .filter(|(_, v)| {
                let r: serde_json::Value = serde_json::from_slice(v).expect("json");
                r["game"] == game.as_str() && r["seat"] == "O"
            })
            .count();
        assert!(o_seats <= 1, "trial {trial}: {o_seats} seats of O");
    }
    assert!(outcomes.len() >= 2, "{outcomes:?}");
}

#[actix_rt::test]
async fn creates_racing_each_other_stay_under_the_open_games_cap() {
    // The cap used to be checked before the create and counted after it, and a dozen
    // creates at once passed it.
    let (_dir, meta, seats) = seats_on_disk().await;
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    let creates = (0..12).map(|n| {
        seats.create_capped(
            registration(&format!("g{n}"), rules.clone()),
            60_000,
            Some(2),
        )
    });
    let made = futures_util::future::join_all(creates).await;
    let refused = made
        .iter()
        .filter(|m| matches!(m, Err(HubError::TooManyGames(2))))
        .count();
    assert_eq!((made.len() - refused, refused), (2, 10), "{made:?}");
    assert_eq!(seats.open_games("host"), 2);
    assert_eq!(meta.scan("open/").await.expect("scan").len(), 2);
    // A create that fails (here: an id already reserved) gives its place back.
    let first = made
        .iter()
        .position(Result::is_ok)
        .expect("a game was made");
    let taken = seats
        .create_capped(registration(&format!("g{first}"), rules), 60_000, Some(3))
        .await;
    assert!(
        matches!(taken, Err(HubError::Unavailable(Unavailable::IdReserved))),
        "{taken:?}"
    );
    assert_eq!(seats.open_games("host"), 2);
}

#[actix_rt::test]
async fn a_purge_deletes_exactly_the_codes_dead_long_enough_across_many_pages() {
    // The embedded store, whose writer commits a page's deletes together.
    let dir = tempfile::tempdir().expect("temp dir");
    let meta: Arc<dyn Meta> = Arc::new(crate::meta::EmbeddedMeta::open(dir.path()).expect("open"));
    let (now, keep) = (1_000_000, 1_000);
    let mut kept = Vec::new();
    for i in 0..41u64 {
        // Every third code died long enough ago; the others too recently, or live.
        let dead_since = if i % 3 == 0 {
            now - keep - 1
        } else {
            now - keep + i
        };
        let key = code_key(&format!("{i:064x}"));
        let rec = CodeRecord {
            inbox: "lobby".into(),
            game: format!("g{i}"),
            expires_ms: dead_since,
            used: i % 2 == 0,
            repeat_key: None,
        };
        meta.put(&key, json_bytes(&rec).expect("json"))
            .await
            .expect("put");
        if i % 3 != 0 {
            kept.push(key);
        }
    }
    meta.put("code/not-json", Bytes::from_static(b"{"))
        .await
        .expect("put");
    let seats = Seats::load(meta.clone(), false).await.expect("load");
    assert_eq!(seats.purge_codes(now, keep).await.expect("purge"), 14 + 1);
    let left: Vec<String> = meta
        .scan("code/")
        .await
        .expect("scan")
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(left, kept);
    assert_eq!(seats.purge_codes(now, keep).await.expect("purge"), 0);
}

#[actix_rt::test]
async fn a_waiting_game_whose_code_died_long_ago_or_is_gone_is_stranded_and_abandoned_once() {
    // The hourly sweep reads the open games, not the codes: a game whose code was purged
    // before (by a hub without this sweep, or one that stopped between the two) is found
    // too. A game paired, or given a fresh code, is not.
    let meta: Arc<dyn Meta> = Arc::new(crate::game::testkit::MemMeta::default());
    let seats = Seats::load(meta.clone(), false).await.expect("load");
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    for game in ["expired", "purged", "renewed", "paired", "young"] {
        seats
            .create(registration(game, rules.clone()), 0)
            .await
            .expect("create");
    }
    let auth = |game: &str| SeatAuth {
        inbox: "lobby".into(),
        game: game.into(),
        seat: Seat::X,
    };
    let hash_of = |game: &str| {
        seats
            .registration("lobby", game)
            .and_then(|r| r.code_hash.clone())
            .expect("a code")
    };
    meta.delete(&code_key(&hash_of("purged")))
        .await
        .expect("purged");
    seats
        .new_code(&auth("renewed"), 3_600_000)
        .await
        .expect("renewed");
    let (code, _) = seats
        .new_code(&auth("paired"), 60_000)
        .await
        .expect("a code");
    seats
        .pair(&code, None, |_| Ok((None, false)))
        .await
        .expect("paired");
    let keep = 1_000;
    let now = now_ms() + keep + 10;
    // Every game but "young" counts as made at 0 (the epoch); "young" was made now.
    let mut young = (*seats.registration("lobby", "young").expect("young")).clone();
    young.created_ms = now;
    seats.cache(young);

    let mut stranded: Vec<String> = seats
        .stranded(now, keep)
        .await
        .expect("looked")
        .into_iter()
        .map(|(_, game, _)| game)
        .collect();
    stranded.sort();
    assert_eq!(stranded, ["expired", "purged"]);
    let hash = hash_of("expired");
    assert!(seats
        .abandon("lobby", "expired", &hash)
        .await
        .expect("abandon"));
    assert!(!seats
        .abandon("lobby", "expired", &hash)
        .await
        .expect("once"));
    // A code that is not the game's own any more abandons nothing.
    assert!(!seats
        .abandon("lobby", "renewed", &hash)
        .await
        .expect("not its code"));
    assert!(seats.registration("lobby", "renewed").is_some());
}

#[actix_rt::test]
async fn a_pair_sent_again_with_its_idempotency_key_seats_its_guest_again() {
    // A guest whose answer was lost sends the same pair again: with the key it was sent
    // with, it gets a token for the same seat; without it, or with another key, or with
    // another public key for O, it is a used code, as for anyone else.
    let (_dir, meta, seats) = seats_on_disk().await;
    let (_, _, code) = new_game(&seats, 1).await;
    let key = "a-random-key-0123456789";
    let o_key = |k: &str| {
        let k = k.to_string();
        move |_: &Registration| Ok((Some(k), true))
    };
    let (first, paired) = seats
        .pair(&code, Some(key), o_key("aa"))
        .await
        .expect("pair");
    assert!(paired.paired);
    let (again, reg) = seats
        .pair(&code, Some(key), o_key("aa"))
        .await
        .expect("the same pair, made again");
    assert_ne!(again, first, "a fresh token");
    assert_eq!(
        (reg.game.as_str(), reg.key_o.as_deref()),
        ("g1", Some("aa"))
    );
    for token in [&first, &again] {
        let seat = seats.seat_for_token(token).expect("a seat");
        assert_eq!((&*seat.game, seat.seat), ("g1", Seat::O));
    }
    for (repeat_key, public_key) in [
        (None, "aa"),
        (Some("another-key-0123456789"), "aa"),
        (Some(key), "bb"),
    ] {
        let refused = seats.pair(&code, repeat_key, o_key(public_key)).await;
        assert!(
            matches!(refused, Err(HubError::CodeUsed)),
            "{repeat_key:?} {public_key}: {refused:?}"
        );
    }
    // Ten minutes after the pair the code is as dead for its guest as for anyone.
    let code_key = code_key(&crypto::sha256_hex(code.as_bytes()));
    let mut tombstone: CodeRecord =
        serde_json::from_slice(&meta.get(&code_key).await.expect("get").expect("kept"))
            .expect("a code record");
    assert_ne!(
        tombstone.repeat_key.as_deref(),
        Some(key),
        "only its hash is kept"
    );
    tombstone.expires_ms -= codes::PAIR_REPEAT.as_millis() as u64 + 1_000;
    meta.put(&code_key, json_bytes(&tombstone).expect("json"))
        .await
        .expect("put");
    let late = seats.pair(&code, Some(key), o_key("aa")).await;
    assert!(matches!(late, Err(HubError::CodeUsed)), "{late:?}");
}

#[actix_rt::test]
async fn a_create_is_made_again_only_by_its_own_key_soon_after_and_while_unpaired() {
    // What a try of a create finds under the id its key derives: nothing (the try makes
    // the game), the game an earlier try made (X's seat again, with a fresh code), or a
    // game it must not hand out.
    let (_dir, meta, seats) = seats_on_disk().await;
    let key = crypto::sha256_hex(b"a-random-key-0123456789");
    let rules = serde_json::json!({"rows": 6, "cols": 7, "winLength": 4});
    let ids = ("lobby", "g1");
    let none = seats.repeat_create(ids, &key, 60_000, |_| true).await;
    assert!(matches!(none, Ok(None)), "{none:?}");
    let mut reg = registration("g1", rules);
    reg.create_key = Some(key.clone());
    reg.created_ms = now_ms();
    let (first, code, _) = seats.create(reg, 60_000).await.expect("create");

    let (again, fresh, _) = seats
        .repeat_create(ids, &key, 60_000, |_| true)
        .await
        .expect("made again")
        .expect("the game is there");
    assert_ne!(again, first, "a fresh token");
    assert_ne!(fresh, code, "a fresh code");
    for token in [&first, &again] {
        let seat = seats.seat_for_token(token).expect("a seat");
        assert_eq!((&*seat.game, seat.seat), ("g1", Seat::X));
    }
    let o_key = |_: &Registration| Ok((None, false));
    assert!(matches!(
        seats.pair(&code, None, o_key).await,
        Err(HubError::CodeUsed)
    ));

    // Another request sent with the key, or the key held by another game, changes nothing.
    let other = seats.repeat_create(ids, &key, 60_000, |_| false).await;
    assert!(matches!(other, Err(HubError::KeyReused(_))), "{other:?}");
    let other_key = crypto::sha256_hex(b"another-key-0123456789");
    let taken = seats.repeat_create(ids, &other_key, 60_000, |_| true).await;
    assert!(
        matches!(taken, Err(HubError::Unavailable(Unavailable::IdReserved))),
        "{taken:?}"
    );

    // Ten minutes after the create, the key answers no more.
    let stored = meta.get(&game_key("lobby", "g1")).await.expect("get");
    let mut old: Registration =
        serde_json::from_slice(&stored.expect("registered")).expect("a registration");
    old.created_ms -= codes::CREATE_REPEAT.as_millis() as u64 + 1_000;
    seats.put_registration(&old).await.expect("put");
    let late = seats.repeat_create(ids, &key, 60_000, |_| true).await;
    assert!(matches!(late, Err(HubError::KeyReused(_))), "{late:?}");

    // Within them, a paired game is not seated again.
    old.created_ms = now_ms();
    seats.put_registration(&old).await.expect("put");
    seats.pair(&fresh, None, o_key).await.expect("paired");
    let paired = seats.repeat_create(ids, &key, 60_000, |_| true).await;
    assert!(matches!(paired, Err(HubError::AlreadyPaired)), "{paired:?}");
}
