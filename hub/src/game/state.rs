//! `game.state`: the one shape in which any viewer ever sees a game.
//!
//! HTTP responses, `GET …/view`, the WebSocket relay and the agent's tool results all carry
//! a [`GameState`] with exactly the fields of DESIGN.md section 5: `inbox`, `game`, `seat`,
//! `phase`, `protocol`, `protocolId`, `rules`, `signed`, `keys`, `seq`, `head`, `result`,
//! `view` and `board` (plus `notice` when there is something to tell the seat).
//!
//! [`assemble`] is the only constructor used by the engine. It takes the viewer and reads
//! the board through the protocol's redactor (`Board::view` / `Board::render`), so a state
//! built for one seat can never carry the other seat's secrets. It deliberately does not
//! decide *who* may see which viewer's state: that is the caller's seat check.

use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use games::protocol::GameResult;
use games::{Seat, Viewer};
use relay::StateFrame;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::types::ser_opt_seat;

/// The life of a game. Seated games are `waiting` (X seated) and `paired` (both seated, no
/// start yet) before their start; every game with an accepted start is `started`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Waiting,
    Paired,
    Started,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Paired => "paired",
            Phase::Started => "started",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        match s {
            "waiting" => Some(Phase::Waiting),
            "paired" => Some(Phase::Paired),
            "started" => Some(Phase::Started),
            _ => None,
        }
    }
}

/// `{"status", "winner", "by"}`, as in `verify --json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResultView {
    pub status: &'static str,
    #[serde(serialize_with = "ser_opt_seat")]
    pub winner: Option<Seat>,
    pub by: Option<games::WinBy>,
}

impl From<GameResult> for ResultView {
    fn from(r: GameResult) -> Self {
        ResultView {
            status: r.status.as_str(),
            winner: r.winner,
            by: r.by,
        }
    }
}

/// Both seats' public keys, each `null` until known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct KeysView {
    #[serde(rename = "X")]
    pub x: Option<String>,
    #[serde(rename = "O")]
    pub o: Option<String>,
}

/// Something the seat must know that is not part of the game: a held
/// rock-paper-scissors choice was lost to a restart and must be sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Notice {
    HeldChoiceLost,
}

/// One viewer's state of one game. See the module documentation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GameState {
    pub inbox: Arc<str>,
    pub game: Arc<str>,
    /// The viewer's seat; null for a spectator.
    #[serde(serialize_with = "ser_opt_seat")]
    pub seat: Option<Seat>,
    pub phase: Phase,
    /// The protocol's canonical ref.
    pub protocol: Option<Arc<str>>,
    pub protocol_id: Option<Arc<str>>,
    /// The protocol's rules with defaults filled in (without `keys` and `inboxes`).
    pub rules: Option<Arc<Map<String, Value>>>,
    pub signed: bool,
    /// Both public keys once known; null for an unsigned game.
    pub keys: Option<KeysView>,
    /// The seq of the last accepted event; null until the start.
    pub seq: Option<u64>,
    /// The hash of the last accepted event; null until the start.
    pub head: Option<String>,
    pub result: Option<ResultView>,
    /// The protocol redactor's view for this viewer; null until the start.
    pub view: Option<ViewJson>,
    /// The text board, or what the game waits for before its start.
    pub board: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<Notice>,
}

/// A view as JSON text, written once by the protocol ([`games::Board::write_view`]) and
/// embedded as it is wherever the state is serialized: a view is built for each watching
/// seat after every move, and as a value tree it cost dozens of small allocations.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct ViewJson(Box<RawValue>);

impl ViewJson {
    /// `viewer`'s view of `board`.
    pub fn of(board: &dyn games::Board, viewer: Viewer) -> ViewJson {
        let mut text = Vec::with_capacity(256);
        board.write_view(viewer, &mut text);
        String::from_utf8(text)
            .ok()
            .and_then(|text| RawValue::from_string(text).ok())
            .map_or_else(|| ViewJson::from_value(&board.view(viewer).0), ViewJson)
    }

    /// A view held as a value (one the custodian added a pending choice to).
    pub fn from_value(view: &Value) -> ViewJson {
        // A `Value` always serializes; `null` is only a fallback that cannot happen.
        ViewJson(
            serde_json::value::to_raw_value(view).unwrap_or_else(|_| {
                RawValue::from_string("null".to_string()).expect("null is JSON")
            }),
        )
    }

    /// The view as a value, to take apart.
    pub fn value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// A seat's own view with the choice its custodian holds for it
    /// ([`games::protocol::View::with_pending_choice`]).
    pub fn with_pending_choice(&self, choice: &str) -> ViewJson {
        ViewJson::from_value(
            &games::protocol::View(self.value())
                .with_pending_choice(choice)
                .0,
        )
    }
}

impl PartialEq for ViewJson {
    fn eq(&self, other: &ViewJson) -> bool {
        self.0.get() == other.0.get()
    }
}

/// One viewer's state after one event, built once and serialized at most once: the
/// poster's answer and every socket of that viewer share it, and its `game.state` frame.
#[derive(Debug)]
pub struct SharedState {
    state: GameState,
    frame: OnceLock<StateFrame>,
}

impl SharedState {
    pub fn new(state: GameState) -> Arc<SharedState> {
        Arc::new(SharedState {
            state,
            frame: OnceLock::new(),
        })
    }

    /// The state as a WebSocket `game.state` frame, serialized on first use.
    pub fn frame(&self) -> Result<&StateFrame, serde_json::Error> {
        if let Some(frame) = self.frame.get() {
            return Ok(frame);
        }
        let frame = StateFrame::encode(self.state.seq, &self.state)?;
        Ok(self.frame.get_or_init(|| frame))
    }
}

impl Deref for SharedState {
    type Target = GameState;

    fn deref(&self) -> &GameState {
        &self.state
    }
}

impl PartialEq for SharedState {
    fn eq(&self, other: &SharedState) -> bool {
        self.state == other.state
    }
}

impl Serialize for SharedState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.state.serialize(serializer)
    }
}

/// The protocol of a game, as its states name it. Like the game's ids, held once by its
/// actor and shared with every state it builds (one for each watching viewer after every
/// move), not copied into each; a seated game's are its registration's, one copy for
/// every game of the same protocol and rules.
#[derive(Clone, Debug, PartialEq)]
pub struct ProtocolNames {
    /// The protocol's canonical ref.
    pub protocol: Arc<str>,
    pub protocol_id: Arc<str>,
    /// The rules with defaults filled in (without `keys` and `inboxes`).
    pub rules: Arc<Map<String, Value>>,
}

/// What [`assemble`] needs to know of a game that has no accepted start: its seated
/// registration, if any.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub phase: Phase,
    pub protocol: ProtocolNames,
    pub signed: bool,
    pub keys: KeysView,
    /// X's agent writes the start (X holds its own key); otherwise the hub does, once O
    /// pairs.
    pub x_starts: bool,
}

/// What [`assemble`] needs to know of a game with an accepted start.
pub struct Started<'a> {
    pub protocol: &'a ProtocolNames,
    pub keys: Option<KeysView>,
    pub seq: u64,
    pub head: &'a str,
    pub result: GameResult,
    pub board: &'a dyn games::Board,
}

/// The source of a state: a game before or after its start.
pub enum Source<'a> {
    Pending(Pending),
    Started(Started<'a>),
}

/// Builds one viewer's state. `notice` is passed only to the seat it concerns.
pub fn assemble(
    inbox: &Arc<str>,
    game: &Arc<str>,
    viewer: Viewer,
    source: Source<'_>,
    notice: Option<Notice>,
) -> GameState {
    let seat = match viewer {
        Viewer::Seat(s) => Some(s),
        Viewer::Spectator => None,
    };
    let notice = if seat.is_some() { notice } else { None };
    match source {
        Source::Pending(p) => GameState {
            inbox: inbox.clone(),
            game: game.clone(),
            seat,
            phase: p.phase,
            protocol: Some(p.protocol.protocol),
            protocol_id: Some(p.protocol.protocol_id),
            rules: Some(p.protocol.rules),
            signed: p.signed,
            keys: p.signed.then_some(p.keys),
            seq: None,
            head: None,
            result: None,
            view: None,
            board: waiting_text(p.phase, seat, p.x_starts),
            notice,
        },
        Source::Started(s) => GameState {
            inbox: inbox.clone(),
            game: game.clone(),
            seat,
            phase: Phase::Started,
            protocol: Some(s.protocol.protocol.clone()),
            protocol_id: Some(s.protocol.protocol_id.clone()),
            rules: Some(s.protocol.rules.clone()),
            signed: s.keys.is_some(),
            keys: s.keys,
            seq: Some(s.seq),
            head: Some(s.head.to_string()),
            result: Some(s.result.into()),
            view: Some(ViewJson::of(s.board, viewer)),
            board: s.board.render(viewer),
            notice,
        },
    }
}

/// What a game before its start waits for, said to its viewer. Only an X that holds its
/// own key is told to write the start: the hub writes every other one.
fn waiting_text(phase: Phase, seat: Option<Seat>, x_starts: bool) -> String {
    match (phase, seat, x_starts) {
        (Phase::Waiting, Some(Seat::X), _) => {
            "waiting for an opponent: share the pairing code".to_string()
        }
        (Phase::Waiting, _, _) => "waiting for an opponent to pair".to_string(),
        (Phase::Paired, Some(Seat::X), true) => {
            "paired: write the start event naming both keys".to_string()
        }
        (Phase::Paired, _, true) => "paired: waiting for X to start the game".to_string(),
        (Phase::Paired, _, false) => "paired: the hub is starting the game".to_string(),
        (Phase::Started, _, _) => "started".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A paired game's state before its start, for `viewer`, with `x_starts` as given.
    fn paired(viewer: Viewer, x_starts: bool) -> GameState {
        let name: Arc<str> = Arc::from("g");
        let pending = Pending {
            phase: Phase::Paired,
            protocol: ProtocolNames {
                protocol: Arc::from("pipehub:tic-tac-toe"),
                protocol_id: Arc::from("tic-tac-toe"),
                rules: Arc::default(),
            },
            signed: true,
            keys: KeysView { x: None, o: None },
            x_starts,
        };
        assemble(&name, &name, viewer, Source::Pending(pending), None)
    }

    #[test]
    fn only_an_x_that_holds_its_key_is_told_to_write_the_start() {
        let x = Viewer::Seat(Seat::X);
        assert_eq!(
            paired(x, true).board,
            "paired: write the start event naming both keys"
        );
        // The hub writes a hub-held X's start: its seat, and everyone else, are told so.
        for viewer in [x, Viewer::Seat(Seat::O), Viewer::Spectator] {
            assert_eq!(
                paired(viewer, false).board,
                "paired: the hub is starting the game"
            );
        }
        assert_eq!(
            paired(Viewer::Spectator, true).board,
            "paired: waiting for X to start the game"
        );
    }
}
