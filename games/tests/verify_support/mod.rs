//! Test-only writers of valid game logs: they fill in seq, prevHash and (for a signed game)
//! sig, so tests can state the game they mean and then break exactly one thing.
//!
//! Keys are derived from a fixed seed, so the logs (and `examples/*.jsonl`) are the same
//! on every run: Ed25519 signatures are deterministic.

#![allow(dead_code)]

use games::canonical::hash_hex;
use games::crypto::{self, SecretKey};
use games::{Action, Event, Seat, Status, WinBy};
use serde_json::{json, Map, Value};

/// Writes one game's events in order.
pub struct Writer {
    pub game: String,
    next_seq: u64,
    head: String,
    keys: Option<[SecretKey; 2]>,
}

impl Writer {
    pub fn unsigned(game: &str) -> Writer {
        Writer {
            game: game.to_string(),
            next_seq: 0,
            head: String::new(),
            keys: None,
        }
    }

    /// A signed game whose seats' keys derive from `seed`.
    pub fn signed(game: &str, seed: &str) -> Writer {
        let key = |seat| crypto::seat_key(seed.as_bytes(), "tests", game, seat);
        Writer {
            keys: Some([key(Seat::X), key(Seat::O)]),
            ..Writer::unsigned(game)
        }
    }

    /// `{"X": hex, "O": hex}` for a signed game.
    pub fn keys_value(&self) -> Option<Value> {
        let [x, o] = self.keys.as_ref()?;
        Some(json!({
            "X": crypto::public_key_hex(&x.verifying_key()),
            "O": crypto::public_key_hex(&o.verifying_key()),
        }))
    }

    /// The next event of this game, not yet signed or committed: seq, prevHash and the
    /// player whose turn it is are filled in.
    pub fn draft(&self, action: Action, mv: Option<Value>) -> Event {
        Event {
            game: self.game.clone(),
            seq: self.next_seq,
            prev_hash: self.head.clone(),
            player: Seat::to_move_at(self.next_seq),
            action,
            mv,
            protocol: None,
            rules: None,
            status: None,
            sig: None,
        }
    }

    /// A start draft naming `protocol` with `rules` (plus `keys` when signed).
    pub fn start_draft(&self, protocol: Option<&str>, rules: Value) -> Event {
        let mut e = self.draft(Action::Start, None);
        e.protocol = protocol.map(str::to_string);
        let mut rules: Map<String, Value> = rules.as_object().cloned().unwrap_or_default();
        if let Some(keys) = self.keys_value() {
            rules.insert("keys".into(), keys);
        }
        e.rules = (!rules.is_empty()).then_some(rules);
        e
    }

    /// Signs `e` with its player's key when the game is signed (replacing any sig).
    pub fn sign(&self, mut e: Event) -> Event {
        if let Some(keys) = &self.keys {
            let key = &keys[usize::from(e.player == Seat::O)];
            e.sig = Some(crypto::sign(key, &games::canonical::canonical_bytes(&e)));
        }
        e
    }

    /// Signs `e` and makes it this game's head.
    pub fn commit(&mut self, e: Event) -> Event {
        let e = self.sign(e);
        self.head = hash_hex(&e);
        self.next_seq = e.seq + 1;
        e
    }

    pub fn start(&mut self, protocol: Option<&str>, rules: Value) -> Event {
        let e = self.start_draft(protocol, rules);
        self.commit(e)
    }

    pub fn play(&mut self, mv: Value) -> Event {
        let e = self.draft(Action::Move, Some(mv));
        self.commit(e)
    }

    pub fn play_claiming(&mut self, mv: Value, status: Status) -> Event {
        let mut e = self.draft(Action::Move, Some(mv));
        e.status = Some(status);
        self.commit(e)
    }

    pub fn resign(&mut self, seat: Seat) -> Event {
        let mut e = self.draft(Action::Resign, None);
        e.player = seat;
        self.commit(e)
    }
}

/// The log of `events` as JSON Lines.
pub fn lines(events: &[Event]) -> String {
    events.iter().map(|e| e.to_json() + "\n").collect()
}

/// One protocol's worth of test material.
pub struct Game {
    pub reference: &'static str,
    pub rules: Value,
    /// Legal moves from the start that end in a win for X, and how X wins.
    pub win: Vec<Value>,
    pub win_by: WinBy,
    /// Moves refused at seq 3 after `win[0]` and `win[1]`, each with its detail.
    pub illegal: Vec<(Value, &'static str)>,
    /// A payload of the wrong shape.
    pub bad_shape: Value,
    /// Rules out of range.
    pub bad_rules: Value,
}

pub fn tic_tac_toe() -> Game {
    let cell = |r: u64, c: u64| json!({"row": r, "col": c});
    Game {
        reference: "pipehub:tic-tac-toe",
        rules: json!({}),
        win: vec![cell(0, 0), cell(1, 0), cell(0, 1), cell(1, 1), cell(0, 2)],
        win_by: WinBy::Line,
        illegal: vec![(cell(0, 0), "occupied"), (cell(3, 0), "out_of_bounds")],
        bad_shape: json!({"row": 0}),
        bad_rules: json!({"rows": 0}),
    }
}

pub fn connect_four() -> Game {
    let col = |c: u64| json!({"col": c});
    Game {
        reference: "pipehub:connect-four",
        rules: json!({"rows": 4, "cols": 4}),
        win: vec![col(0), col(1), col(0), col(1), col(0), col(1), col(0)],
        win_by: WinBy::Line,
        illegal: vec![(col(9), "out_of_bounds")],
        bad_shape: json!({"col": "a"}),
        bad_rules: json!({"cols": 65}),
    }
}

/// Nonces of the two seats in test games (any 16–64 lowercase hex will do).
pub const NONCES: [&str; 2] = ["0123456789abcdef", "fedcba98765432100123456789abcdef"];

pub fn commit(choice: &str, seat: Seat) -> Value {
    json!({"commit": crypto::rps_commit(choice, NONCES[usize::from(seat == Seat::O)])})
}

pub fn reveal(choice: &str, seat: Seat) -> Value {
    json!({"choice": choice, "nonce": NONCES[usize::from(seat == Seat::O)]})
}

pub fn rock_paper_scissors() -> Game {
    Game {
        reference: "pipehub:rock-paper-scissors",
        rules: json!({"bestOf": 1}),
        win: vec![
            commit("rock", Seat::X),
            commit("scissors", Seat::O),
            reveal("rock", Seat::X),
            reveal("scissors", Seat::O),
        ],
        win_by: WinBy::Score,
        illegal: vec![
            (reveal("paper", Seat::X), "commit_mismatch"),
            (commit("paper", Seat::X), "phase"),
        ],
        bad_shape: json!({"choice": "lizard", "nonce": NONCES[0]}),
        bad_rules: json!({"bestOf": 2}),
    }
}

/// Every protocol the table tests run in.
pub fn games() -> Vec<Game> {
    vec![tic_tac_toe(), connect_four(), rock_paper_scissors()]
}
