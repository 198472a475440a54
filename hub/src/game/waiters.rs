//! Verdict waiting: a poster waits for the verdict on *its own* capture.
//!
//! The facade appends first and learns its capture only then; the actor may adjudicate
//! that capture before the poster gets round to waiting for it. So both sides meet in one
//! map keyed by capture, whoever comes first: the poster leaves a [`Slot::Waiting`] sender,
//! or the actor leaves a [`Slot::Done`] outcome that the poster picks up. Outcomes nobody
//! picks up (a poster that gave up after its 5 s, a record replayed at rebuild) are swept
//! after [`DONE_TTL`].
//!
//! What it deliberately does not do: store verdicts (the inbox records them beside the
//! capture, for readers that come later) or compute views (the actor hands them in).

use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use games::reason::Refusal;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::types::Verdict;
use crate::inbox::Capture;
use crate::rooms::Views;

/// How long an outcome waits for its poster before it is swept.
pub const DONE_TTL: Duration = Duration::from_secs(30);

/// What the actor decided about one capture, and everyone's view afterwards.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub verdict: Verdict,
    pub hash: Option<String>,
    pub refusal: Option<Refusal>,
    pub views: Option<Arc<Views>>,
}

enum Slot {
    Waiting(oneshot::Sender<Outcome>),
    Done(Outcome, Instant),
}

/// The meeting place of posters and actors.
#[derive(Default)]
pub struct Waiters {
    slots: DashMap<Capture, Slot>,
}

impl Waiters {
    /// Called by the actor with a fresh verdict: hands it to the waiting poster, or leaves
    /// it for the poster to pick up.
    /// An outcome left for a capture earlier is replaced: the same capture adjudicated
    /// again is another event at a reused place (a Redis that lost its data hands out
    /// places again), and its poster must not pick up the old one.
    pub fn resolve(&self, capture: Capture, outcome: Outcome) {
        match self.slots.entry(capture) {
            Entry::Occupied(mut e) => {
                if let Slot::Waiting(_) = e.get() {
                    if let Slot::Waiting(tx) = e.remove() {
                        // The poster may have given up meanwhile; nothing to do then.
                        let _ = tx.send(outcome);
                    }
                } else {
                    e.insert(Slot::Done(outcome, Instant::now()));
                }
            }
            Entry::Vacant(e) => {
                e.insert(Slot::Done(outcome, Instant::now()));
            }
        }
    }

    /// Like [`Waiters::resolve`], but leaves nothing behind when nobody waits yet: for an
    /// event the hub wrote on its own, which has no poster (should a client have posted
    /// the very same event and not be waiting yet, it answers `pending` and reads the
    /// verdict later, as after any lost wait), and for a verdict another node recorded
    /// (most have no poster here).
    pub fn resolve_if_waiting(&self, capture: Capture, outcome: Outcome) {
        if let Some((_, Slot::Waiting(tx))) = self
            .slots
            .remove_if(&capture, |_, s| matches!(s, Slot::Waiting(_)))
        {
            let _ = tx.send(outcome);
        }
    }

    /// Waits up to `wait` for the outcome of `capture`; `None` when none came in time.
    /// `ours` tells the poster's outcome from one left for an earlier event at the same
    /// place (a Redis that lost its data hands places out again), which is dropped: it
    /// named another event's hash and carried another game's views.
    pub async fn wait(
        &self,
        capture: Capture,
        wait: Duration,
        ours: impl Fn(&Outcome) -> bool,
    ) -> Option<Outcome> {
        let rx = match self.slots.entry(capture) {
            Entry::Occupied(e) => match e.remove() {
                Slot::Done(outcome, _) if ours(&outcome) => return Some(outcome),
                // Another event's outcome, or a waiter (two posters cannot share a
                // capture; keep the newer).
                _ => {
                    let (tx, rx) = oneshot::channel();
                    self.slots.insert(capture, Slot::Waiting(tx));
                    rx
                }
            },
            Entry::Vacant(e) => {
                let (tx, rx) = oneshot::channel();
                e.insert(Slot::Waiting(tx));
                rx
            }
        };
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(outcome)) if ours(&outcome) => Some(outcome),
            Ok(Ok(_)) => None,
            _ => {
                self.slots
                    .remove_if(&capture, |_, s| matches!(s, Slot::Waiting(_)));
                None
            }
        }
    }

    /// Drops outcomes nobody picked up within `ttl` ([`DONE_TTL`] in the hub).
    pub fn sweep(&self, ttl: Duration) {
        self.slots.retain(|_, s| match s {
            Slot::Done(_, at) => at.elapsed() < ttl,
            Slot::Waiting(tx) => !tx.is_closed(),
        });
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(v: Verdict) -> Outcome {
        Outcome {
            verdict: v,
            hash: None,
            refusal: None,
            views: None,
        }
    }

    const C: Capture = Capture { shard: 1, pos: 9 };

    #[tokio::test]
    async fn a_verdict_before_the_wait_is_picked_up() {
        let w = Waiters::default();
        w.resolve(C, outcome(Verdict::Accepted));
        let got = w.wait(C, Duration::from_millis(10), |_| true).await;
        assert_eq!(got.map(|o| o.verdict), Some(Verdict::Accepted));
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn a_verdict_during_the_wait_wakes_the_poster() {
        let w = Arc::new(Waiters::default());
        let w2 = w.clone();
        let poster =
            tokio::spawn(async move { w2.wait(C, Duration::from_secs(5), |_| true).await });
        while w.is_empty() {
            tokio::task::yield_now().await;
        }
        w.resolve(C, outcome(Verdict::Rejected));
        let got = poster.await.expect("poster task");
        assert_eq!(got.map(|o| o.verdict), Some(Verdict::Rejected));
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn no_verdict_in_time_is_none_and_leaves_nothing() {
        let w = Waiters::default();
        assert!(w
            .wait(C, Duration::from_millis(20), |_| true)
            .await
            .is_none());
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn an_outcome_without_a_poster_is_not_kept_when_asked_not_to() {
        let w = Arc::new(Waiters::default());
        w.resolve_if_waiting(C, outcome(Verdict::Accepted));
        assert!(w.is_empty(), "nobody waits: nothing is left behind");
        let w2 = w.clone();
        let poster =
            tokio::spawn(async move { w2.wait(C, Duration::from_secs(5), |_| true).await });
        while w.is_empty() {
            tokio::task::yield_now().await;
        }
        w.resolve_if_waiting(C, outcome(Verdict::Accepted));
        let got = poster.await.expect("poster task");
        assert_eq!(got.map(|o| o.verdict), Some(Verdict::Accepted));
        assert!(w.is_empty());
    }

    #[tokio::test]
    async fn a_capture_adjudicated_again_leaves_its_newer_outcome() {
        let w = Waiters::default();
        w.resolve(C, outcome(Verdict::Accepted));
        w.resolve(C, outcome(Verdict::Rejected));
        let got = w.wait(C, Duration::from_millis(10), |_| true).await;
        assert_eq!(got.map(|o| o.verdict), Some(Verdict::Rejected));
    }

    #[tokio::test]
    async fn an_outcome_left_for_another_event_is_not_taken() {
        let w = Waiters::default();
        let mut old = outcome(Verdict::Accepted);
        old.hash = Some("old".into());
        w.resolve(C, old);
        let ours = |o: &Outcome| o.hash.as_deref() == Some("new");
        assert!(w.wait(C, Duration::from_millis(10), ours).await.is_none());
        let mut new = outcome(Verdict::Accepted);
        new.hash = Some("new".into());
        w.resolve(C, new);
        let got = w.wait(C, Duration::from_millis(10), ours).await;
        assert_eq!(got.and_then(|o| o.hash), Some("new".into()));
    }

    #[tokio::test]
    async fn unclaimed_outcomes_are_swept() {
        let w = Waiters::default();
        w.resolve(C, outcome(Verdict::Accepted));
        w.sweep(DONE_TTL);
        assert_eq!(w.len(), 1, "a fresh outcome survives a sweep");
        tokio::time::sleep(Duration::from_millis(5)).await;
        w.sweep(Duration::from_millis(1));
        assert!(w.is_empty());
        assert!(w
            .wait(C, Duration::from_millis(1), |_| true)
            .await
            .is_none());
    }
}
