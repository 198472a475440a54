//! Open files: the process's limit, and how many of them a hub lets its sockets take.
//!
//! Every socket is a file descriptor, and so is every file the store opens while it runs
//! (the inbox's next log segment, the meta cache's runs). A hub whose sockets took every
//! descriptor could not open the next segment, and its store would stop taking writes.
//! So a hub serves at most [`connection_cap`] connections: the limit less the files it
//! holds once open, less its HTTP workers' own, less [`RESERVED`] for what its store
//! opens later. Past that, new connections wait in the listen backlog until others
//! close; none is refused with an error.
//!
//! At start a hub (and the load generator) raises its soft limit to the hard one, as
//! servers do: distributions often leave the soft limit at 1,024, about 500 games.
//!
//! Written with `libc` (two system calls) rather than another crate: `libc` is already a
//! dependency, and the rest is arithmetic.

/// Descriptors a hub keeps free for the files its store opens after start: the inbox's
/// next segment, older segments opened again to be read (at most
/// [`crate::inbox::log::OPEN_OLDER`] at once), the meta cache's runs.
pub const RESERVED: u64 = 64;

/// Descriptors each HTTP worker opens once the server runs (its event loop's own), which
/// the files counted before it starts do not include.
pub const PER_WORKER: u64 = 5;

/// The most connections a cap allows a worker, whatever the limit.
const MAX_PER_WORKER: u64 = 1 << 20;

/// The open-files limit after [`raise_limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    /// The soft limit before it was raised.
    pub was: u64,
    /// The soft limit now.
    pub now: u64,
}

/// Raises this process's soft open-files limit to its hard limit. `None` where the limit
/// cannot be read; the soft limit as it was where it cannot be raised.
pub fn raise_limit() -> Option<Limit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes one `rlimit` through a valid pointer to one.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let was = lim.rlim_cur;
    // An unlimited hard limit is not a value the kernel takes for open files: the most a
    // process may ask for is `fs.nr_open`.
    let ceiling = match lim.rlim_max {
        libc::RLIM_INFINITY => nr_open().unwrap_or(was),
        hard => hard,
    };
    if ceiling > was {
        let raised = libc::rlimit {
            rlim_cur: ceiling,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `setrlimit` reads one `rlimit` through a valid pointer to one.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Some(Limit { was, now: ceiling });
        }
    }
    Some(Limit { was, now: was })
}

/// The kernel's ceiling on any process's open-files limit.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// How many descriptors this process has open now; `None` where that cannot be read.
pub fn open_now() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// The connections each of `workers` HTTP workers may hold, so that together they leave
/// `open` descriptors (the hub's own files), the workers' own ([`PER_WORKER`] each) and
/// [`RESERVED`] more free under `limit`. At least one each, so that a hub with a tiny
/// limit still answers.
pub fn connection_cap(limit: u64, open: u64, workers: usize) -> usize {
    let workers = workers.max(1) as u64;
    let free = limit
        .saturating_sub(open)
        .saturating_sub(RESERVED)
        .saturating_sub(PER_WORKER * workers);
    (free / workers).clamp(1, MAX_PER_WORKER) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_leaves_the_hubs_files_and_the_reserve_free() {
        // 20,000 files, 24 of them the hub's own as it opens, two workers: 19,902
        // sockets, 9,951 games.
        assert_eq!(connection_cap(20_000, 24, 2), 9_951);
        assert_eq!(connection_cap(1_024, 40, 4), 225);
        // Every worker can always take one connection, and no worker a million more.
        assert_eq!(connection_cap(50, 40, 2), 1);
        assert_eq!(connection_cap(u64::MAX, 40, 1), 1 << 20);
        assert_eq!(connection_cap(1_000, 10, 0), 921);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_counted() {
        let limit = raise_limit().expect("Linux has an open-files limit");
        assert!(limit.now >= limit.was);
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise_limit`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, limit.now);
        let open = open_now().expect("/proc/self/fd is readable");
        assert!(open >= 3 && open < limit.now, "{open} files open");
    }
}
