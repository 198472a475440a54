//! Section-1 refusals through `Event::parse`: every reason, their precedence, the schema
//! rules, and that no input whatsoever makes the parser panic.

use games::{Event, Reason};
use proptest::prelude::*;

const START: &str = r#"{"game":"g1","seq":0,"prevHash":"","player":"X","action":"start"}"#;
const MOVE: &str = r#"{"game":"g1","seq":1,"prevHash":"0000000000000000000000000000000000000000000000000000000000000000","player":"X","action":"move","move":{"row":0,"col":0}}"#;

fn parse(s: &str) -> Result<Event, (Reason, Option<String>)> {
    Event::parse(s.as_bytes()).map_err(|r| (r.reason, r.detail))
}

fn reason(s: &str) -> Option<Reason> {
    parse(s).err().map(|(r, _)| r)
}

/// `START` with `extra` spliced in before the closing brace.
fn start_with(extra: &str) -> String {
    format!("{},{extra}}}", &START[..START.len() - 1])
}

#[test]
fn valid_events_parse() {
    let e = parse(START).unwrap();
    assert_eq!((e.seq, e.prev_hash.as_str(), e.mv.is_none()), (0, "", true));
    let e = parse(MOVE).unwrap();
    assert_eq!(e.mv.unwrap()["col"], 0);
    let full = start_with(&format!(
        r#""protocol":"pipehub:tic-tac-toe","rules":{{"rows":3}},"status":"in_progress","sig":"{}""#,
        "a".repeat(128)
    ));
    assert!(parse(&full).is_ok());
    // A start with any move passes parsing: the verifier calls it start_has_move.
    assert!(parse(&start_with(r#""move":7"#)).is_ok());
}

#[test]
fn each_reason_and_the_precedence() {
    let big = start_with(&format!(r#""rules":{{"x":"{}"}}"#, "y".repeat(4096)));
    let cases: Vec<(String, Reason)> = vec![
        (big.clone(), Reason::TooLarge),
        ("[1,2]".into(), Reason::BadJson),
        ("\u{feff}".to_string() + START, Reason::BadJson),
        (start_with(r#""rules":{"a":"\ud800"}"#), Reason::BadJson),
        (
            start_with(&format!(
                r#""rules":{}1{}"#,
                r#"{"a":"#.repeat(32),
                "}".repeat(32)
            )),
            Reason::BadJson,
        ),
        (start_with(r#""game":"g2""#), Reason::DuplicateKey),
        (
            start_with(r#""rules":{"a":{"b":1,"b":1}}"#),
            Reason::DuplicateKey,
        ),
        (
            start_with(r#""rules":{"a":1.5,"a":1}"#),
            Reason::DuplicateKey,
        ),
        (
            start_with(r#""rules":{"a":1.5,"a":1},"x":"#),
            Reason::BadJson,
        ),
        (start_with(r#""rules":{"a":1e3}"#), Reason::BadNumber),
        (start_with(r#""rules":{"a":-0}"#), Reason::BadNumber),
        (
            start_with(r#""rules":{"a":[9007199254740992]}"#),
            Reason::BadNumber,
        ),
        (
            start_with(r#""rules":{"a":-0},"extra":1"#),
            Reason::BadNumber,
        ),
        (start_with(r#""extra":1"#), Reason::Schema),
    ];
    for (input, want) in cases {
        assert_eq!(reason(&input), Some(want), "{input:.200}");
    }
    assert!(Event::parse_with_limit(big.as_bytes(), 8192).is_ok());
    let deepest = format!(r#""rules":{}1{}"#, r#"{"a":"#.repeat(31), "}".repeat(31));
    assert!(
        parse(&start_with(&deepest)).is_ok(),
        "32 levels are allowed"
    );
    assert!(parse(&start_with(
        r#""rules":{"a":9007199254740991,"b":-9007199254740991}"#
    ))
    .is_ok());
}

#[test]
fn schema_rules() {
    let swap = |from: &str, to: &str| START.replace(from, to);
    let move_with = |from: &str, to: &str| MOVE.replace(from, to);
    let cases: Vec<(String, &str)> = vec![
        (swap(r#""game":"g1","#, ""), "game"),
        (swap(r#""g1""#, r#""""#), "game"),
        (swap(r#""g1""#, r#""-g""#), "game"),
        (swap(r#""g1""#, r#""g/1""#), "game"),
        (
            swap(r#""g1""#, &format!(r#""{}""#, "g".repeat(129))),
            "game",
        ),
        (swap(r#""g1""#, "1"), "game"),
        (swap(r#""seq":0"#, r#""seq":-1"#), "seq"),
        (swap(r#""seq":0"#, r#""seq":"0""#), "seq"),
        (swap(r#","prevHash":"""#, ""), "prevHash"),
        (swap(r#""prevHash":"""#, r#""prevHash":"ab""#), "prevHash"),
        (
            swap(
                r#""prevHash":"""#,
                &format!(r#""prevHash":"{}""#, "A".repeat(64)),
            ),
            "prevHash",
        ),
        (swap(r#""X""#, r#""x""#), "player"),
        (swap(r#""start""#, r#""Start""#), "action"),
        (start_with(r#""status":"won""#), "status"),
        (start_with(r#""status":null"#), "status"),
        (
            start_with(&format!(r#""sig":"{}""#, "A".repeat(128))),
            "sig",
        ),
        (
            start_with(&format!(r#""sig":"{}""#, "a".repeat(126))),
            "sig",
        ),
        (start_with(r#""protocol":1"#), "protocol"),
        (start_with(r#""rules":[]"#), "rules"),
        (move_with(r#","move":{"row":0,"col":0}"#, ""), "move"),
        (move_with(r#"{"row":0,"col":0}"#, "[0,0]"), "move"),
        (
            move_with(r#""action":"move""#, r#""action":"resign""#),
            "move",
        ),
        (
            move_with(r#""move":{"#, r#""protocol":"p","move":{"#),
            "protocol",
        ),
        (move_with(r#""move":{"#, r#""rules":{},"move":{"#), "rules"),
    ];
    for (input, field) in cases {
        assert_eq!(
            parse(&input).err(),
            Some((Reason::Schema, None)),
            "{field}: {input}"
        );
    }
    let resign = move_with(r#","move":{"row":0,"col":0}"#, "").replace("\"move\"", "\"resign\"");
    assert!(parse(&resign).is_ok());
}

/// A valid event's text, for mutation.
fn sample() -> impl Strategy<Value = String> {
    prop_oneof![Just(START.to_string()), Just(MOVE.to_string())]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Event::parse(&bytes);
    }

    #[test]
    fn mutated_events_never_panic(
        text in sample(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut bytes = text.into_bytes();
        for (at, byte, kind) in edits {
            let i = at.index(bytes.len() + 1);
            match kind {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ if i < bytes.len() => { bytes.remove(i); }
                _ => bytes.push(byte),
            }
        }
        if let Ok(e) = Event::parse(&bytes) {
            // Whatever parses writes back out as JSON that parses to the same event.
            prop_assert_eq!(Event::parse(e.to_json().as_bytes()), Ok(e));
        }
    }

    #[test]
    fn json_like_text_never_panics(text in r#"[\[\]{}",:0-9.eE+\- a-z\\u]{0,80}"#) {
        let _ = Event::parse(text.as_bytes());
    }
}
