//! Verifying a whole log of interleaved games, and the report `pipehub verify` prints
//! (DESIGN.md section 5 and the "precise points" of section 2).
//!
//! [`LogVerifier`] takes raw lines one at a time, so a log is streamed, never held whole.
//! Each game id gets a [`GameChain`]; the report has one [`Entry`] per game in order of
//! the game's first appearance, and one per line that is not an event, at that line's own
//! position. A line that is not an event is never attached to a game, even when it names
//! one: a forged line must not be able to poison someone else's game.
//!
//! In **strict** mode (an exported log) a game's first rejection ends its verification:
//! the game is `invalid` at that line, and its later lines are not looked at. In **inbox**
//! mode (a raw capture dump) rejections are listed and the game goes on from its last
//! accepted event; it is `invalid` only if it never got a genesis.
//!
//! The two renderings are exact because other programs parse them: JSON objects always
//! carry the same eight keys in the same order, `null` where one does not apply.

use crate::event::{Action, Event};
use crate::json;
use crate::protocol::{GameResult, Registry};
use crate::reason::{Reason, Refusal};
use crate::verify::{GameChain, Verdict};
use serde::Serialize;
use std::collections::HashMap;

/// How to read a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// An exported log: every event must be accepted.
    Strict,
    /// A raw capture dump: rejected events are listed and the game goes on.
    Inbox,
}

/// A game's or a line's verdict in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryVerdict {
    Ok,
    Invalid,
    Skipped,
}

/// One rejected event (1-based line of the input, the event's seq).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub line: u64,
    pub seq: u64,
    pub refusal: Refusal,
}

/// One object (or plain line) of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// `None` for a line that is not an event.
    pub game: Option<String>,
    pub verdict: EntryVerdict,
    /// The game's state at its last accepted event; `None` when it has none.
    pub result: Option<GameResult>,
    pub line: Option<u64>,
    pub seq: Option<u64>,
    pub reason: Option<Reason>,
    pub detail: Option<String>,
    /// Inbox mode: every rejected event of the game. Always empty in strict mode.
    pub rejected: Vec<Rejection>,
}

#[derive(Serialize)]
struct EntryJson<'a> {
    game: Option<&'a str>,
    verdict: EntryVerdict,
    result: Option<ResultJson>,
    line: Option<u64>,
    seq: Option<u64>,
    reason: Option<&'static str>,
    detail: Option<&'a str>,
    rejected: Vec<RejectionJson<'a>>,
}

#[derive(Serialize)]
struct ResultJson {
    status: &'static str,
    winner: Option<&'static str>,
    by: Option<crate::protocol::WinBy>,
}

#[derive(Serialize)]
struct RejectionJson<'a> {
    line: u64,
    seq: u64,
    reason: &'static str,
    detail: Option<&'a str>,
}

/// A result as `{"status", "winner", "by"}`, the shape every state on the wire uses.
pub fn result_json(r: &GameResult) -> serde_json::Value {
    serde_json::to_value(result_repr(r)).unwrap_or_default()
}

fn result_repr(r: &GameResult) -> ResultJson {
    ResultJson {
        status: r.status.as_str(),
        winner: r.winner.map(|s| s.as_str()),
        by: r.by,
    }
}

/// A result as plain text: `in_progress`, `draw`, `win X line`.
pub fn result_plain(r: &GameResult) -> String {
    match (r.winner, r.by) {
        (Some(w), Some(by)) => {
            let by = match by {
                crate::protocol::WinBy::Line => "line",
                crate::protocol::WinBy::Resign => "resign",
                crate::protocol::WinBy::Score => "score",
            };
            format!("{} {w} {by}", r.status.as_str())
        }
        _ => r.status.as_str().to_string(),
    }
}

impl Entry {
    /// The entry as one JSON object (no newline).
    pub fn to_json(&self) -> String {
        let repr = EntryJson {
            game: self.game.as_deref(),
            verdict: self.verdict,
            result: self.result.as_ref().map(result_repr),
            line: self.line,
            seq: self.seq,
            reason: self.reason.map(Reason::code),
            detail: self.detail.as_deref(),
            rejected: self
                .rejected
                .iter()
                .map(|r| RejectionJson {
                    line: r.line,
                    seq: r.seq,
                    reason: r.refusal.reason.code(),
                    detail: r.refusal.detail.as_deref(),
                })
                .collect(),
        };
        // Plain structs of strings and integers always serialize.
        serde_json::to_string(&repr).unwrap_or_default()
    }

    /// The entry as one plain line (no newline). A detail can quote the log's own text
    /// (an unknown rule's name), so its control characters are escaped: a log must not be
    /// able to write lines of its own into the report, or steer a terminal.
    pub fn to_plain(&self) -> String {
        let detail = self
            .detail
            .as_ref()
            .map(|d| format!(" {}", plain_text(d)))
            .unwrap_or_default();
        let reason = self.reason.map_or("", Reason::code);
        let line = self.line.unwrap_or(0);
        match (&self.game, self.verdict) {
            (None, _) => format!("- invalid line={line} reason={reason}{detail}"),
            (Some(g), EntryVerdict::Ok) => {
                let result = self.result.as_ref().map(result_plain).unwrap_or_default();
                format!("{g} ok {result}")
            }
            (Some(g), EntryVerdict::Skipped) => format!("{g} skipped {reason}"),
            (Some(g), EntryVerdict::Invalid) => {
                let seq = self.seq.map_or("null".to_string(), |s| s.to_string());
                format!("{g} invalid line={line} seq={seq} reason={reason}{detail}")
            }
        }
    }

    fn invalid_line(line: u64, refusal: Refusal) -> Entry {
        Entry {
            game: None,
            verdict: EntryVerdict::Invalid,
            result: None,
            line: Some(line),
            seq: None,
            reason: Some(refusal.reason),
            detail: refusal.detail,
            rejected: Vec::new(),
        }
    }
}

/// `text` with backslashes, control characters and the characters that break or reorder
/// a line (U+2028, U+2029, bidirectional controls) escaped as Rust writes them (`\n`,
/// `\u{1b}`); anything else as it is.
fn plain_text(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        c == '\\'
            || c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if !text.contains(unsafe_char) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// One game being read.
struct Track {
    game: String,
    chain: Chain,
    last_accepted: Option<(u64, u64)>,
    rejected: Vec<Rejection>,
}

/// A game's chain while it can still change, and what the report needs of it after.
///
/// A game that is over judges every later event the same way (a start is `two_genesis`,
/// anything else `after_end`), and in strict mode a game's first rejection ends its
/// reading: from then on its board, rules, keys and head are dead weight, and most games
/// of a long log are finished. Keeping only the result is what lets a log of a million
/// finished games be read in a fraction of the memory.
enum Chain {
    Live(GameChain),
    Done {
        result: Option<GameResult>,
        started: bool,
    },
}

impl Chain {
    fn result(&self) -> Option<GameResult> {
        match self {
            Chain::Live(chain) => chain.result(),
            Chain::Done { result, .. } => *result,
        }
    }

    fn is_started(&self) -> bool {
        match self {
            Chain::Live(chain) => chain.is_started(),
            Chain::Done { started, .. } => *started,
        }
    }

    fn is_skipped(&self) -> bool {
        matches!(self, Chain::Live(chain) if chain.is_skipped())
    }
}

/// A place in the report: a line that is no event (its line and refusal only, about 40
/// bytes, since a log may hold millions of them), or a game.
enum Slot {
    Line(u64, Refusal),
    Game(Box<Track>),
}

/// Reads a log line by line and builds the report.
pub struct LogVerifier<'r> {
    registry: &'r Registry,
    mode: Mode,
    limit: usize,
    line: u64,
    slots: Vec<Slot>,
    games: HashMap<String, usize>,
}

impl<'r> LogVerifier<'r> {
    pub fn new(registry: &'r Registry, mode: Mode) -> Self {
        LogVerifier {
            registry,
            mode,
            limit: json::MAX_BYTES,
            line: 0,
            slots: Vec::new(),
            games: HashMap::new(),
        }
    }

    /// Another size limit for one line (default 4096 bytes).
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Reads the next line of the input, with or without its `\n`.
    pub fn push_line(&mut self, raw: &[u8]) {
        self.line += 1;
        let raw = raw.strip_suffix(b"\n").unwrap_or(raw);
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            return;
        }
        match Event::parse_with_limit(raw, self.limit) {
            Err(refusal) => self.slots.push(Slot::Line(self.line, refusal)),
            Ok(event) => self.push_event(&event),
        }
    }

    fn push_event(&mut self, event: &Event) {
        let index = match self.games.get(&event.game) {
            Some(&i) => i,
            None => {
                self.games.insert(event.game.clone(), self.slots.len());
                self.slots.push(Slot::Game(Box::new(Track {
                    game: event.game.clone(),
                    chain: Chain::Live(GameChain::new(self.registry)),
                    last_accepted: None,
                    rejected: Vec::new(),
                })));
                self.slots.len() - 1
            }
        };
        let Some(Slot::Game(track)) = self.slots.get_mut(index) else {
            return;
        };
        if self.mode == Mode::Strict && !track.rejected.is_empty() {
            return;
        }
        let verdict = match &mut track.chain {
            Chain::Live(chain) => chain.offer(event),
            // As an established chain judges it once the game is over.
            Chain::Done { .. } if event.action == Action::Start => {
                Verdict::Rejected(Reason::TwoGenesis.into())
            }
            Chain::Done { .. } => Verdict::Rejected(Reason::AfterEnd.into()),
        };
        match verdict {
            Verdict::Accepted { .. } => track.last_accepted = Some((self.line, event.seq)),
            Verdict::Rejected(refusal) => track.rejected.push(Rejection {
                line: self.line,
                seq: event.seq,
                refusal,
            }),
            Verdict::Skipped => {}
        }
        if let Chain::Live(chain) = &track.chain {
            let over = chain.result().is_some_and(|r| r.is_over());
            if over || (self.mode == Mode::Strict && !track.rejected.is_empty()) {
                track.chain = Chain::Done {
                    result: chain.result(),
                    started: chain.is_started(),
                };
            }
        }
    }

    /// True when no line held an event or a refusal (a blank or empty input).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The report, in order of first appearance, one entry at a time: a report can be as
    /// long as its log, so each entry is made only as it is written out.
    pub fn entries(self) -> impl Iterator<Item = Entry> {
        let mode = self.mode;
        self.slots.into_iter().map(move |slot| match slot {
            Slot::Line(line, refusal) => Entry::invalid_line(line, refusal),
            Slot::Game(track) => game_entry(*track, mode),
        })
    }

    /// The whole report, in order of first appearance.
    pub fn finish(self) -> Vec<Entry> {
        self.entries().collect()
    }
}

fn game_entry(track: Track, mode: Mode) -> Entry {
    let (line, seq) = track.last_accepted.unzip();
    let mut entry = Entry {
        game: Some(track.game),
        verdict: EntryVerdict::Ok,
        result: track.chain.result(),
        line,
        seq,
        reason: None,
        detail: None,
        rejected: Vec::new(),
    };
    let invalid = match mode {
        Mode::Strict => !track.rejected.is_empty(),
        Mode::Inbox => !track.chain.is_started() && !track.chain.is_skipped(),
    };
    if track.chain.is_skipped() && !invalid {
        entry.verdict = EntryVerdict::Skipped;
        entry.reason = Some(Reason::UnknownProtocol);
    } else if let (true, Some(first)) = (invalid, track.rejected.first()) {
        entry.verdict = EntryVerdict::Invalid;
        entry.line = Some(first.line);
        entry.seq = Some(first.seq);
        entry.reason = Some(first.refusal.reason);
        entry.detail.clone_from(&first.refusal.detail);
    }
    if mode == Mode::Inbox {
        entry.rejected = track.rejected;
    }
    entry
}

/// Verifies a whole log held in memory (JSON Lines).
pub fn verify_log(input: &[u8], mode: Mode, registry: &Registry) -> Vec<Entry> {
    let mut v = LogVerifier::new(registry, mode);
    for line in input.split_inclusive(|&b| b == b'\n') {
        v.push_line(line);
    }
    v.finish()
}

/// True when the report makes `pipehub verify` exit 1.
pub fn any_invalid(entries: &[Entry]) -> bool {
    entries.iter().any(|e| e.verdict == EntryVerdict::Invalid)
}
