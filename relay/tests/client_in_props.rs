//! The client's messages are untrusted input: whatever a socket sends, the reader answers
//! with a message or a refusal, never a panic, and what it lets through keeps the table's
//! promises (a ref of at most 128 bytes, names of the id alphabet).

use games::event::is_game_id;
use proptest::prelude::*;
use relay::wire::client_in::{ClientIn, MAX_REF_BYTES};

/// Messages of every type of the table, to mutate.
fn sample() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        r#"{"t":"hello","token":"abc"}"#.to_string(),
        r#"{"t":"hello"}"#.to_string(),
        r#"{"t":"game.move","move":{"row":1,"col":2},"ref":"m1"}"#.to_string(),
        r#"{"t":"game.move","move":{"choice":"rock"},"ref":17}"#.to_string(),
        r#"{"t":"game.resign","ref":"r"}"#.to_string(),
        r#"{"t":"game.board"}"#.to_string(),
        r#"{"t":"game.subscribe","inbox":"lobby","game":"g-1"}"#.to_string(),
    ])
}

/// What the reader promises of a message it lets through.
fn keeps_its_promises(msg: &ClientIn) -> Result<(), TestCaseError> {
    match msg {
        ClientIn::Move {
            reference: Some(r), ..
        }
        | ClientIn::Resign { reference: Some(r) } => {
            prop_assert!(r.json().len() <= MAX_REF_BYTES, "{}", r.json());
        }
        ClientIn::Subscribe { inbox, game } => {
            prop_assert!(is_game_id(inbox), "{inbox:?}");
            prop_assert!(is_game_id(game), "{game:?}");
        }
        _ => {}
    }
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        if let Ok(msg) = ClientIn::parse(&text) {
            keeps_its_promises(&msg)?;
        }
    }

    #[test]
    fn json_like_text_never_panics(text in r#"[\[\]{}",:0-9.eE+\- a-z\\u]{0,120}"#) {
        if let Ok(msg) = ClientIn::parse(&text) {
            keeps_its_promises(&msg)?;
        }
    }

    #[test]
    fn mutated_messages_never_panic(
        text in sample(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>(), 0u8..3), 1..6),
    ) {
        let mut chars: Vec<char> = text.chars().collect();
        for (at, c, kind) in edits {
            let i = at.index(chars.len() + 1);
            match kind {
                0 if i < chars.len() => chars[i] = c,
                1 => chars.insert(i, c),
                _ if i < chars.len() => { chars.remove(i); }
                _ => chars.push(c),
            }
        }
        let text: String = chars.into_iter().collect();
        if let Ok(msg) = ClientIn::parse(&text) {
            keeps_its_promises(&msg)?;
        }
    }
}
