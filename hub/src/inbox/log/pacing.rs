//! When a log's single writer begins its next fsync: at once, unless the batches are
//! busy.
//!
//! Shared by the inbox's writer and the meta store's, which call [`Pacer::wait`] before
//! gathering a batch and [`Pacer::syncing`] before its fsync.
//!
//! What it deliberately does not do: gather requests, fsync, or know what a batch holds.
//! It only ever sleeps the calling thread, and only after an fsync that several requests
//! shared.

use std::time::{Duration, Instant};

/// Group-commit pacing for a log's single writer: while several callers share the
/// batches (the last fsync had more than `siblings` requests waiting for it), a batch does
/// not begin its fsync sooner than `interval` after the previous one began, and the
/// requests that arrive meanwhile join it. A request after a quiet spell never waits.
///
/// An fsync costs CPU as well as time (on a virtual machine each one traps to the
/// hypervisor), and under load a batch taken the moment the previous fsync ends holds only
/// what arrived during it. Pacing trades at most `interval` of latency for fewer, larger
/// batches: PostgreSQL's `commit_delay` with `commit_siblings`, in effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacing {
    pub interval: Duration,
    pub siblings: usize,
}

impl Pacing {
    /// Every batch fsyncs as soon as it is taken.
    pub const OFF: Pacing = Pacing {
        interval: Duration::ZERO,
        siblings: usize::MAX,
    };
}

/// A writer's [`Pacing`] and when its last fsync began.
#[derive(Debug)]
pub struct Pacer {
    pacing: Pacing,
    last: Option<Instant>,
    busy: bool,
}

impl Pacer {
    pub fn new(pacing: Pacing) -> Pacer {
        Pacer {
            pacing,
            last: None,
            busy: false,
        }
    }

    /// Call once a batch's first request is in hand, before taking the rest.
    pub fn wait(&self) {
        if !self.busy {
            return;
        }
        if let Some(rest) = self
            .last
            .and_then(|last| self.pacing.interval.checked_sub(last.elapsed()))
        {
            std::thread::sleep(rest);
        }
    }

    /// Call just before a batch's fsync, with how many requests wait for it.
    pub fn syncing(&mut self, waiting: usize) {
        self.last = Some(Instant::now());
        self.busy = waiting > self.pacing.siblings;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pacer_waits_out_its_interval_only_after_a_shared_fsync() {
        // Where no wait is due, an interval this long would show: the bounds are loose
        // enough for a busy machine.
        let long = Pacing {
            interval: Duration::from_secs(20),
            siblings: 2,
        };
        let mut pacer = Pacer::new(long);
        let started = Instant::now();
        pacer.wait(); // nothing synced yet
        pacer.syncing(2); // not more than `siblings` waited: no pacing
        pacer.wait();
        let mut off = Pacer::new(Pacing::OFF);
        off.syncing(1_000);
        off.wait();
        assert!(started.elapsed() < Duration::from_secs(10));
        // Three requests shared the last fsync: the next one begins an interval later.
        let mut pacer = Pacer::new(Pacing {
            interval: Duration::from_millis(30),
            siblings: 2,
        });
        pacer.syncing(3);
        let synced = Instant::now();
        pacer.wait();
        assert!(synced.elapsed() >= Duration::from_millis(29));
    }
}
