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

#[actix_rt::test]
async fn a_seated_game_survives_a_restart_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (inbox, meta) = stores(dir.path());
    let f = open_on(inbox, meta, config()).await;
    let (x, o) = seated(&f, "pipehub:tic-tac-toe", true).await;
    let mut last = None;
    for (auth, r, c) in [(&x, 0, 0), (&o, 1, 1)] {
        let p = f
            .hub
            .post_move(auth, json!({"move": {"row": r, "col": c}}))
            .await
            .expect("move");
        assert_eq!(p.verdict, Verdict::Accepted);
        last = p.capture;
    }
    let before = f
        .hub
        .state(INBOX, &x.game, Viewer::Spectator)
        .await
        .expect("state");
    f.hub.shutdown().await;
    drop(f);

    let (inbox, meta) = stores(dir.path());
    let g = open_on(inbox, meta, config()).await;
    // The tokens still open their seats; the chain and the verdicts are as they were.
    let x2 = g.hub.seat_for_token_count();
    assert_eq!(x2, 2);
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
