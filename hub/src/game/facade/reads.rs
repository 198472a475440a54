//! The facade's reads: game states, captures, the game listing and export. None of them
//! appends anything; a read of a game whose actor is not resident rebuilds it, but a read
//! of an id that does not exist starts no actor.

use std::sync::Arc;

use games::reason::Reason;
use games::verify::Prepared;
use games::{Event, Viewer};
use serde_json::Value;

use super::Hub;
use crate::game::actor::{Export, ReadState, Snapshot, Summarize};
use crate::game::state::{Phase, SharedState};
use crate::game::types::{CaptureItem, GameSummary, Listing, Verdict};
use crate::game::HubError;
use crate::inbox::{Capture, Record, StoreError, StoredVerdict};

/// How long a capture lookup waits for a verdict it had to wake an actor for.
const LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Hub {
    /// A game's state for one viewer (`Viewer::Spectator` for `GET …/games/{game}`),
    /// shared with whoever else reads it unchanged.
    pub async fn state(
        &self,
        inbox: &str,
        game: &str,
        viewer: Viewer,
    ) -> Result<Arc<SharedState>, HubError> {
        if self.clustered() {
            // Another node may have created or paired it: the actor's state reads the
            // registration from this node's cache.
            self.registration(inbox, game).await?;
        }
        if !self.engine.exists(inbox, game).await? {
            return Err(HubError::NotFound("no such game".into()));
        }
        self.catch_up(inbox, game).await?;
        self.engine.ask(inbox, game, ReadState(viewer)).await?
    }

    /// One capture with its verdict.
    pub async fn capture(&self, inbox: &str, capture: Capture) -> Result<CaptureItem, HubError> {
        let (record, mut verdict) = self
            .engine
            .inbox
            .get(inbox, capture)
            .await?
            .ok_or_else(|| HubError::NotFound("no such capture in this inbox".into()))?;
        if verdict.is_none() {
            // Its actor may not have run since the hub restarted: wake it, and it
            // adjudicates whatever of its game still lacks a verdict as it rebuilds. The
            // wait is registered before the actor is asked, so the verdict cannot slip by.
            let wait = self.engine.waiters.wait(
                capture,
                self.engine.config.verdict_wait.min(LOOKUP_WAIT),
                |_| true,
            );
            let ask = self
                .engine
                .ask(&record.inbox, &record.game, Snapshot(Viewer::Spectator));
            let _ = futures_util::future::join(wait, ask).await;
            verdict = self.engine.inbox.verdict(capture).await?;
        }
        Ok(capture_item(record, verdict))
    }

    /// Captures of an inbox in inbox order, optionally of one game.
    pub async fn captures(
        &self,
        inbox: &str,
        game: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing<CaptureItem>, HubError> {
        let page = self.engine.inbox.list(inbox, game, after, limit).await?;
        Ok(Listing {
            items: page
                .items
                .into_iter()
                .map(|(r, v)| capture_item(r, v))
                .collect(),
            next: page.next,
        })
    }

    /// Games of an inbox, newest first, optionally only those in `phase`: seated games
    /// still waiting for their start first (newest created first), then games by their
    /// first capture, newest first. `after` is the `next` of the previous page; a page may
    /// hold fewer than `limit` games and still have a `next` (a phase filter that skipped
    /// many games), and `next` is null only after the last game. A `limit` of 0 is read as
    /// 1, as the HTTP route clamps it: a page of no games could not say where the next
    /// one starts.
    pub async fn games(
        &self,
        inbox: &str,
        phase: Option<Phase>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Listing<GameSummary>, HubError> {
        let limit = limit.max(1);
        let cursor = after.map(GamesCursor::parse).transpose()?;
        let mut items: Vec<GameSummary> = Vec::new();
        let pending_wanted = phase.is_none_or(|p| p != Phase::Started);
        if pending_wanted && !matches!(cursor, Some(GamesCursor::Started { .. })) {
            if self.clustered() {
                // Other nodes create games too: list what the shared store holds.
                self.engine.seats.refresh_inbox(inbox).await?;
            }
            let mut regs = self.engine.seats.registrations(inbox);
            regs.retain(|r| {
                let reg_phase = if r.paired {
                    Phase::Paired
                } else {
                    Phase::Waiting
                };
                phase.is_none_or(|p| p == reg_phase)
                    && match &cursor {
                        Some(GamesCursor::Pending { created_ms, game }) => {
                            (r.created_ms, &r.game) < (*created_ms, game)
                        }
                        _ => true,
                    }
            });
            regs.sort_by(|a, b| (b.created_ms, &b.game).cmp(&(a.created_ms, &a.game)));
            let mut last_created = 0;
            for reg in regs {
                if self.engine.inbox.count(inbox, &reg.game).await? > 0 {
                    continue; // listed below, from its chain
                }
                if let Some(last) = items.last().filter(|_| items.len() == limit) {
                    let next = GamesCursor::Pending {
                        created_ms: last_created,
                        game: last.game.clone(),
                    };
                    return Ok(Listing {
                        items,
                        next: Some(next.to_string()),
                    });
                }
                last_created = reg.created_ms;
                items.push(GameSummary {
                    game: reg.game.clone(),
                    protocol: Some(reg.protocol.to_string()),
                    phase: if reg.paired {
                        Phase::Paired
                    } else {
                        Phase::Waiting
                    },
                    result: None,
                });
            }
        }
        if phase.is_some_and(|p| p != Phase::Started) {
            return Ok(Listing { items, next: None });
        }
        if items.len() == limit {
            // The page is full of games still being seated; the started ones come next.
            let next = GamesCursor::Started { before: u64::MAX };
            return Ok(Listing {
                items,
                next: Some(next.to_string()),
            });
        }
        // Started games, by their place in the inbox; a page looks at a bounded number of
        // them, so a rare phase cannot make one request walk the whole inbox.
        let mut before = match cursor {
            Some(GamesCursor::Started { before }) => Some(before),
            _ => None,
        };
        let mut budget = limit * 4 + 64;
        while items.len() < limit && budget > 0 {
            let batch = self
                .engine
                .inbox
                .games(inbox, before, limit.saturating_sub(items.len()).min(budget))
                .await?;
            if batch.is_empty() {
                return Ok(Listing { items, next: None });
            }
            for entry in batch {
                budget -= 1;
                before = Some(entry.order);
                // A game another node adjudicates may have moved on there, unless it is
                // over. An actor woken only for this stops again at once (`Summarize`).
                let elsewhere = self.elsewhere(inbox, &entry.game);
                let summary = match self.engine.listed(inbox, &entry.game) {
                    Some(s) if !elsewhere || s.is_over() => Some(s.summary(&entry.game)),
                    _ => {
                        let ask = Summarize {
                            catch_up: elsewhere,
                        };
                        self.engine.ask(inbox, &entry.game, ask).await?.ok()
                    }
                };
                if let Some(s) = summary.filter(|s| s.phase == Phase::Started) {
                    items.push(s);
                }
            }
        }
        let next = before
            .filter(|b| *b > 0)
            .map(|before| GamesCursor::Started { before }.to_string());
        Ok(Listing { items, next })
    }

    /// The accepted chain of a game as JSON Lines (each event in its canonical form with its
    /// signature, one a line), which `pipehub verify` accepts.
    pub async fn export(&self, inbox: &str, game: &str) -> Result<String, HubError> {
        if self.clustered() {
            // As for `state`: a game still waiting for its start may be another node's.
            self.registration(inbox, game).await?;
        }
        if !self.engine.exists(inbox, game).await? {
            return Err(HubError::NotFound("no such game".into()));
        }
        self.catch_up(inbox, game).await?;
        let accepted = self.engine.ask(inbox, game, Export).await??;
        let records = self.engine.inbox.game_records(inbox, game).await?;
        export_lines(&accepted, &records).map_err(|e| HubError::from(StoreError::Corrupt(e)))
    }
}

/// The accepted events among a game's records (`accepted` lists their captures in chain
/// order, a subsequence of the records' order), each as its canonical line with its
/// signature. The actor keeps the captures only, so an export reads the events back and
/// writes them again exactly as the actor's `Event::to_json` would have.
fn export_lines(accepted: &[Capture], records: &[Record]) -> Result<String, String> {
    let mut out = String::with_capacity(accepted.len() * 384);
    let mut records = records.iter();
    for capture in accepted {
        let record = records
            .find(|r| r.capture == *capture)
            .ok_or_else(|| format!("accepted capture {capture} is not among the game's records"))?;
        let event = Event::parse(&record.raw)
            .map_err(|r| format!("accepted capture {capture} no longer parses: {r}"))?;
        out.push_str(&event.to_json());
        out.push('\n');
    }
    Ok(out)
}

/// A capture as a read shows it. Its `hash` is the one its post answered with, whatever the
/// verdict: the accepted hash the store kept, else the hash of the event as stored.
fn capture_item(record: Record, verdict: Option<StoredVerdict>) -> CaptureItem {
    let event = serde_json::from_slice::<Value>(&record.raw)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&record.raw).into_owned()));
    let (v, hash, reason, detail) = match verdict {
        None => (Verdict::Pending, None, None, None),
        Some(StoredVerdict::Accepted { hash }) => (Verdict::Accepted, Some(hash), None, None),
        Some(StoredVerdict::Rejected { reason, detail }) => (
            Verdict::Rejected,
            None,
            Some(reason.code().to_string()),
            detail,
        ),
        Some(StoredVerdict::Skipped) => (
            Verdict::Skipped,
            None,
            Some(Reason::UnknownProtocol.code().to_string()),
            None,
        ),
    };
    let hash = hash.or_else(|| event_hash(&record.raw));
    CaptureItem {
        capture: Some(record.capture),
        game: record.game,
        event,
        verdict: v,
        hash,
        reason,
        detail,
        seat: record.seat,
        at_ms: record.at_ms,
    }
}

/// The hash of the event stored as `raw`: SHA-256 of its canonical bytes, worked out as the
/// referee works it out for its verdict and the poster for a `pending` answer
/// (`Prepared::of`). A verdict of `rejected`, `skipped` or none keeps no hash, so a read
/// works it out again rather than show null where the post showed a hash. `None` for bytes
/// that are not an event: they have no canonical form, and no post was ever answered with
/// them (the hub refuses such a body before the inbox).
fn event_hash(raw: &[u8]) -> Option<String> {
    Event::parse(raw)
        .ok()
        .map(|event| Prepared::of(&event).hash)
}

/// Where a game listing goes on: among the seated games that have not started, below
/// (created, id); or among started games, below a place in the inbox's list of games.
/// Written as `p{created_ms}.{game}` or `s{place}`; clients pass `next` back as `after`.
#[derive(Debug, PartialEq)]
enum GamesCursor {
    Pending { created_ms: u64, game: String },
    Started { before: u64 },
}

impl GamesCursor {
    fn parse(text: &str) -> Result<GamesCursor, HubError> {
        let bad = || HubError::BadRequest(format!("`after` {text:?} is not a listing's next"));
        if let Some(rest) = text.strip_prefix('s') {
            return rest
                .parse()
                .map(|before| GamesCursor::Started { before })
                .map_err(|_| bad());
        }
        let rest = text.strip_prefix('p').ok_or_else(bad)?;
        let (ms, game) = rest.split_once('.').ok_or_else(bad)?;
        Ok(GamesCursor::Pending {
            created_ms: ms.parse().map_err(|_| bad())?,
            game: game.to_string(),
        })
    }
}

impl std::fmt::Display for GamesCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GamesCursor::Pending { created_ms, game } => write!(f, "p{created_ms}.{game}"),
            GamesCursor::Started { before } => write!(f, "s{before}"),
        }
    }
}

#[cfg(test)]
mod cursor_tests {
    use super::GamesCursor;

    #[test]
    fn cursors_read_back_what_they_wrote() {
        for c in [
            GamesCursor::Started { before: 0 },
            GamesCursor::Started { before: 41 },
            GamesCursor::Pending {
                created_ms: 1_700_000_000_123,
                game: "g.with.dots-and-dashes".into(),
            },
        ] {
            assert_eq!(GamesCursor::parse(&c.to_string()).expect("parses"), c);
        }
    }

    #[test]
    fn anything_else_is_a_bad_request() {
        for text in ["", "s", "s-1", "sx", "p", "p12", "pab.g", "x12", "12"] {
            assert!(GamesCursor::parse(text).is_err(), "{text:?} was taken");
        }
    }
}
