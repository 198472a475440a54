//! The load generator's side of the WebSocket relay (DESIGN.md section 5): the three
//! messages it sends and the few fields it reads from what the hub sends.
//!
//! It reads only what playing needs (type, ref, game, seq, result status, and the view's
//! turn and which cells are empty) and lets serde skip the rest, and it does not parse the
//! mover's own copy of a move's state at all ([`is_echo`]), so that reading states costs
//! the load generator little of the CPU it shares with the hub. It does not validate
//! states: checking the hub is the tests' job, not the benchmark's.

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};

/// `{"t": "hello", "token"}`: act for one seat (a later hello switches seat).
pub fn hello(token: &str) -> String {
    json!({"t": "hello", "token": token}).to_string()
}

/// `{"t": "game.move", "move", "ref"}`.
pub fn game_move(mv: &Value, r: u64) -> String {
    format!(r#"{{"t":"game.move","move":{mv},"ref":"{r}"}}"#)
}

/// Whether a frame is a `game.state` sent to the socket whose move caused it: the relay
/// writes the mover's `ref` straight after the type tag (relay's `StateFrame::with_ref`),
/// and no other state carries one.
pub fn is_echo(text: &str) -> bool {
    text.starts_with(r#"{"t":"game.state","ref":"#)
}

/// `{"t": "game.board"}`: ask for the current state again (used to resynchronise).
pub fn game_board() -> String {
    json!({"t": "game.board"}).to_string()
}

/// One message from the hub, reduced to what playing needs.
#[derive(Debug, Default, Deserialize)]
pub struct Incoming {
    pub t: String,
    pub game: Option<String>,
    pub seq: Option<u64>,
    pub result: Option<ResultMsg>,
    pub view: Option<ViewMsg>,
    pub error: Option<String>,
    pub detail: Option<Value>,
    pub close: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ResultMsg {
    pub status: String,
}

/// The fields of the protocols' views that choosing a move looks at.
#[derive(Debug, Default, Deserialize)]
pub struct ViewMsg {
    #[serde(rename = "toMove")]
    pub to_move: Option<String>,
    /// Grid games: rows of cells, `null` when empty; what fills a cell is not read.
    pub cells: Option<Vec<Vec<Option<IgnoredAny>>>>,
    /// Rock-paper-scissors: `commit`, `reveal` or `over`.
    pub phase: Option<String>,
    /// Rock-paper-scissors: whether each seat has committed this round.
    pub committed: Option<Committed>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Committed {
    #[serde(rename = "X")]
    pub x: bool,
    #[serde(rename = "O")]
    pub o: bool,
}

impl Incoming {
    pub fn parse(text: &str) -> Result<Incoming, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// A state whose game has a result other than `in_progress`.
    pub fn is_over(&self) -> bool {
        self.result
            .as_ref()
            .is_some_and(|r| r.status != "in_progress")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_state_and_skips_the_rest() {
        let text = r#"{"t":"game.state","ref":"7","inbox":"i","game":"g","seat":"O",
            "phase":"started","protocol":"pipehub:tic-tac-toe","keys":null,"seq":3,
            "head":"ab","result":{"status":"in_progress","winner":null,"by":null},
            "view":{"seat":"O","cells":[["X",null,"O"]],"toMove":"O","moves":3},
            "board":"X . O"}"#;
        let m = Incoming::parse(text).expect("valid state");
        assert_eq!(m.t, "game.state");
        assert_eq!(m.game.as_deref(), Some("g"));
        assert_eq!(m.seq, Some(3));
        assert!(!m.is_over());
        let view = m.view.expect("view");
        assert_eq!(view.to_move.as_deref(), Some("O"));
        let filled: Option<Vec<Vec<bool>>> = view.cells.map(|rows| {
            rows.iter()
                .map(|r| r.iter().map(Option::is_some).collect())
                .collect()
        });
        assert_eq!(filled, Some(vec![vec![true, false, true]]));
    }

    #[test]
    fn reads_a_refusal_and_an_ended_game() {
        let m = Incoming::parse(
            r#"{"t":"game.refused","ref":"1","error":"rate_limited","detail":null}"#,
        )
        .expect("valid refusal");
        assert_eq!(m.error.as_deref(), Some("rate_limited"));
        let m = Incoming::parse(
            r#"{"t":"game.state","result":{"status":"win","winner":"X","by":"line"},"view":null}"#,
        )
        .expect("valid state");
        assert!(m.is_over());
        assert!(m.view.is_none());
    }

    #[test]
    fn messages_out_are_the_relay_table() {
        let v: Value = serde_json::from_str(&game_move(&json!({"col": 2}), 9)).expect("json");
        assert_eq!(v, json!({"t": "game.move", "move": {"col": 2}, "ref": "9"}));
        let v: Value = serde_json::from_str(&hello("tok")).expect("json");
        assert_eq!(v, json!({"t": "hello", "token": "tok"}));
        let v: Value =
            serde_json::from_str(&game_move(&json!({"row": 1, "col": 0}), 12)).expect("json");
        assert_eq!(
            v,
            json!({"t": "game.move", "move": {"row": 1, "col": 0}, "ref": "12"})
        );
    }

    #[test]
    fn only_the_movers_copy_is_an_echo() {
        assert!(is_echo(r#"{"t":"game.state","ref":"3","inbox":"i"}"#));
        assert!(!is_echo(r#"{"t":"game.state","inbox":"i","ref":"3"}"#));
        assert!(!is_echo(r#"{"t":"game.refused","ref":"3","error":"x"}"#));
    }
}
