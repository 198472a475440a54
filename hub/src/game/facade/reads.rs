//! The facade's reads: game states, captures, the game listing and export. None of them
//! appends anything; a read of a game whose actor is not resident rebuilds it, but a read
//! of an id that does not exist starts no actor.

use games::reason::Reason;
use games::Viewer;
use serde_json::Value;

use super::Hub;
use crate::game::actor::{self, Export, Snapshot};
use crate::game::state::{GameState, Phase};
use crate::game::types::{CaptureItem, GameSummary, Listing, Verdict};
use crate::game::HubError;
use crate::inbox::{Capture, Record, StoredVerdict};

/// How long a capture lookup waits for a verdict it had to wake an actor for.
const LOOKUP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Hub {
    /// A game's state for one viewer (`Viewer::Spectator` for `GET …/games/{game}`).
    pub async fn state(
        &self,
        inbox: &str,
        game: &str,
        viewer: Viewer,
    ) -> Result<GameState, HubError> {
        if self.clustered() {
            // Another node may have created or paired it: the actor's state reads the
            // registration from this node's cache.
            self.registration(inbox, game).await?;
        }
        if !self.engine.exists(inbox, game).await? {
            return Err(HubError::NotFound("no such game".into()));
        }
        self.engine.ask(inbox, game, Snapshot(viewer)).await?
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
            let wait = self
                .engine
                .waiters
                .wait(capture, self.engine.config.verdict_wait.min(LOOKUP_WAIT));
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
    /// first capture, newest first.
    pub async fn games(
        &self,
        inbox: &str,
        phase: Option<Phase>,
        limit: usize,
    ) -> Result<Listing<GameSummary>, HubError> {
        let mut items = Vec::new();
        if self.clustered() {
            // Other nodes create games too: list what the shared store holds.
            self.engine.seats.refresh_inbox(inbox).await?;
        }
        let mut regs = self.engine.seats.registrations(inbox);
        regs.sort_by_key(|r| std::cmp::Reverse(r.created_ms));
        for reg in regs {
            if self.engine.inbox.count(inbox, &reg.game).await? > 0 {
                continue; // listed below, from its chain
            }
            items.push(GameSummary {
                game: reg.game.clone(),
                protocol: Some(reg.protocol.clone()),
                phase: if reg.paired {
                    Phase::Paired
                } else {
                    Phase::Waiting
                },
                result: None,
            });
        }
        items.retain(|g| phase.is_none_or(|p| g.phase == p));
        items.truncate(limit);
        if items.len() < limit && phase.is_none_or(|p| p == Phase::Started) {
            for entry in self.engine.inbox.games(inbox, limit * 2 + 16).await? {
                if items.len() >= limit {
                    break;
                }
                let key = (inbox.to_string(), entry.game.clone());
                let summary = match self.engine.summaries.get(&key) {
                    Some(s) => Some(s.clone()),
                    None => self
                        .engine
                        .ask(inbox, &entry.game, Snapshot(Viewer::Spectator))
                        .await?
                        .ok()
                        .map(|s| actor::summary(&s)),
                };
                if let Some(s) = summary.filter(|s| s.phase == Phase::Started) {
                    items.push(s);
                }
            }
        }
        Ok(Listing { items, next: None })
    }

    /// The accepted chain of a game as JSON Lines (each event in its canonical form with its
    /// signature, one a line), which `pipehub verify` accepts.
    pub async fn export(&self, inbox: &str, game: &str) -> Result<String, HubError> {
        if !self.engine.exists(inbox, game).await? {
            return Err(HubError::NotFound("no such game".into()));
        }
        let lines = self.engine.ask(inbox, game, Export).await?;
        let mut out = String::new();
        for line in lines {
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
    }
}

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
