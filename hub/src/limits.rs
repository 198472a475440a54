//! Rate limits: who a request belongs to, and whether that person may go on.
//!
//! DESIGN.md section 5 limits every path into a game per **person**: the seat token when
//! the request carries one, else the client's address. Behind a reverse proxy every
//! request arrives from the proxy, so `--trusted-proxy CIDR` names the proxies whose
//! `X-Forwarded-For` header is believed; from anyone else the header is ignored (a client
//! could otherwise pick a fresh address per request and never be limited).
//!
//! The event budget is a GCRA token bucket (governor), default 60 per 10 s with a burst of
//! the whole budget. The counting rule is the limiter's own semantics: whatever it lets
//! through has spent a token, accepted or refused later by the referee; what it refuses
//! spends nothing, so a client that backs off recovers. Callers charge it for every event a
//! person posts or asks the hub to write and for every game created — never for reads,
//! successful pairs or events a custodian writes on its own.
//!
//! Failed pairing attempts have their own budget per client address (10 a minute), so that
//! eight-character codes cannot be guessed. Only failures count, which governor cannot
//! express (it has no refund), so that budget is a small GCRA of its own here: every
//! attempt takes a token as it begins ([`PairingLimiter::take`]), and one that did not fail
//! gives it back ([`PairingLimiter::refund`]). Charging only once an attempt had failed
//! counted none of the attempts still in flight: 200 sent at once from one address were
//! all let in before the first failure was counted, and 59 of them tried a code.
//!
//! This module does not read HTTP requests itself (the HTTP layer hands it a peer address
//! and a header value) and does not decide what counts; it only keeps the buckets.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use ipnet::IpNet;
use sha2::{Digest, Sha256};

/// The longest period a budget may have: a day. Far longer ones overflowed the limiter's
/// nanosecond clock (a period of 584 years panicked at start, one just under it limited
/// nothing), and no budget of a game server needs more.
pub const MAX_PERIOD_SECS: u64 = 86_400;

/// A budget of `count` actions per `per`, e.g. `60/10` (60 per 10 seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSpec {
    pub count: NonZeroU32,
    pub per: Duration,
}

impl RateSpec {
    /// The default event budget: 60 per 10 seconds.
    pub const DEFAULT_EVENTS: RateSpec = RateSpec {
        count: NonZeroU32::new(60).expect("60 is not zero"),
        per: Duration::from_secs(10),
    };
    /// The default budget of failed pairing attempts: 10 a minute.
    pub const DEFAULT_PAIRING: RateSpec = RateSpec {
        count: NonZeroU32::new(10).expect("10 is not zero"),
        per: Duration::from_secs(60),
    };

    /// The GCRA quota: a burst of the whole budget, refilled one token every `per/count`.
    fn quota(self) -> Quota {
        let interval = self.per / self.count.get();
        Quota::with_period(interval.max(Duration::from_nanos(1)))
            .unwrap_or_else(|| Quota::per_second(self.count))
            .allow_burst(self.count)
    }
}

impl FromStr for RateSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (n, secs) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}` is not N/SECONDS (e.g. 60/10)"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{n}` is not a whole number of actions"))?;
        let count = NonZeroU32::new(count).ok_or("the number of actions must be at least 1")?;
        let secs: u64 = secs
            .trim()
            .parse()
            .map_err(|_| format!("`{secs}` is not a whole number of seconds"))?;
        if !(1..=MAX_PERIOD_SECS).contains(&secs) {
            return Err(format!(
                "the period must be from 1 to {MAX_PERIOD_SECS} seconds (a day)"
            ));
        }
        Ok(RateSpec {
            count,
            per: Duration::from_secs(secs),
        })
    }
}

impl std::fmt::Display for RateSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.count, self.per.as_secs())
    }
}

/// Who a request belongs to, for rate limiting.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Person {
    /// A seat, known by the SHA-256 of its token (the token itself is never kept here).
    Seat([u8; 32]),
    /// Anyone without a token, known by their client address.
    Address(IpAddr),
}

impl Person {
    /// The person holding `token`.
    pub fn seat(token: &str) -> Person {
        Person::Seat(Sha256::digest(token.as_bytes()).into())
    }

    /// The person at client address `ip`: its [`client_of`].
    pub fn address(ip: IpAddr) -> Person {
        Person::Address(client_of(ip))
    }
}

/// The client an address belongs to, for every limit counted per address: an IPv4
/// address, or an IPv6 address's /64 (as the socket and connection caps count). One IPv6
/// host commonly holds a whole /64 and may send each request from another address of it:
/// counted per address, its rate limit, its open-games cap and its failed pairings came
/// each 2^64 times over. An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4
/// address.
pub fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(std::net::Ipv6Addr::from(
            u128::from(v6) & !u128::from(u64::MAX),
        )),
        v4 => v4,
    }
}

/// The client address of a request that arrived from `peer` with the given
/// `X-Forwarded-For` header. The header is believed only when `peer` is a trusted proxy;
/// then the address is the right-most entry that is not itself a trusted proxy (entries to
/// its left were written by the client and can be anything).
pub fn client_address(peer: IpAddr, forwarded_for: Option<&str>, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| is_trusted_proxy(*ip, trusted);
    if !is_trusted(&peer) {
        return peer;
    }
    let Some(header) = forwarded_for else {
        return peer;
    };
    let mut client = peer;
    for entry in header.rsplit(',') {
        match entry.trim().parse::<IpAddr>() {
            Ok(ip) => {
                client = ip;
                if !is_trusted(&ip) {
                    break;
                }
            }
            // A malformed entry ends what can be believed; use the last good hop.
            Err(_) => break,
        }
    }
    client
}

/// Whether `ip` is one of the `--trusted-proxy` networks.
pub fn is_trusted_proxy(ip: IpAddr, trusted: &[IpNet]) -> bool {
    trusted.iter().any(|net| net.contains(&ip))
}

/// A refusal by a limiter: try again after `retry_after_secs` whole seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimited {
    pub retry_after_secs: u64,
}

impl RateLimited {
    /// The refusal for a wait of `wait`.
    pub fn after(wait: Duration) -> RateLimited {
        // Whole seconds, rounded up, so a client that waits that long finds a token.
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        RateLimited {
            retry_after_secs: secs.max(1),
        }
    }
}

type Keyed<C> = RateLimiter<
    Person,
    DashMapStateStore<Person>,
    C,
    governor::middleware::NoOpMiddleware<<C as Clock>::Instant>,
>;

/// A per-person budget shared by several hub nodes (kept in Redis by
/// [`crate::cluster::limits`]). `Err` when the shared store cannot answer.
#[async_trait::async_trait]
pub trait SharedBudget: Send + Sync {
    async fn charge(
        &self,
        person: &Person,
    ) -> Result<Result<(), RateLimited>, crate::inbox::StoreError>;
}

/// The per-person event budget (GCRA, governor), or the cluster's shared one.
pub struct EventLimiter<C: Clock = DefaultClock> {
    limiter: Keyed<C>,
    clock: C,
    shared: Option<std::sync::Arc<dyn SharedBudget>>,
}

impl EventLimiter<DefaultClock> {
    pub fn new(spec: RateSpec) -> Self {
        Self::with_clock(spec, DefaultClock::default())
    }
}

impl<C: Clock + Clone> EventLimiter<C> {
    /// A limiter on a given clock (tests use a fake one).
    pub fn with_clock(spec: RateSpec, clock: C) -> Self {
        EventLimiter {
            limiter: RateLimiter::dashmap_with_clock(spec.quota(), clock.clone()),
            clock,
            shared: None,
        }
    }

    /// Charges the cluster's shared budget from now on (this node's own bucket decides
    /// only while the shared store cannot answer).
    pub fn with_shared(mut self, shared: std::sync::Arc<dyn SharedBudget>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Spends one token: of the shared budget in a cluster, else of this hub's.
    pub async fn charge_any(&self, person: &Person) -> Result<(), RateLimited> {
        if let Some(shared) = &self.shared {
            match shared.charge(person).await {
                Ok(decided) => return decided,
                Err(e) => tracing::debug!(error = %e, "shared rate limit unavailable"),
            }
        }
        self.charge(person)
    }

    /// Spends one token of `person`'s budget, or says how long until one is free.
    pub fn charge(&self, person: &Person) -> Result<(), RateLimited> {
        self.limiter
            .check_key(person)
            .map_err(|not_until| RateLimited::after(not_until.wait_time_from(self.clock.now())))
    }

    /// Forgets people whose buckets are full again, so idle clients cost no memory.
    pub fn housekeep(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

impl<C: Clock> std::fmt::Debug for EventLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLimiter")
            .field("people", &self.limiter.len())
            .finish()
    }
}

/// The budget of failed pairing attempts shared by several hub nodes (Redis, see
/// [`crate::cluster::limits`]): charged as an attempt begins, refunded when it did not fail.
#[async_trait::async_trait]
pub trait SharedFailures: Send + Sync {
    async fn take(&self, addr: IpAddr)
        -> Result<Result<(), RateLimited>, crate::inbox::StoreError>;
    async fn refund(&self, addr: IpAddr) -> Result<(), crate::inbox::StoreError>;
}

/// The budget of failed pairing attempts per client address: a GCRA charged as each
/// attempt begins and refunded for an attempt that did not fail, so attempts in flight at
/// once count as failures until they are known not to be. An attempt that finds the budget
/// spent while others of its address are in flight here waits for them to settle (up to
/// [`PAIRING_WAIT`]) before it is refused: a host pairing many games at once, whose codes
/// are good, gets its tokens back as each pair succeeds and is never refused for them.
pub struct PairingLimiter {
    /// Time between two tokens.
    interval: Duration,
    /// How far ahead of now the theoretical arrival time may run (burst − 1 intervals).
    tolerance: Duration,
    /// Theoretical arrival time per address.
    tat: DashMap<IpAddr, Instant>,
    /// Attempts of each address in flight on this node: each holds a token.
    in_flight: DashMap<IpAddr, usize>,
    /// Woken whenever an attempt in flight settles.
    settled: tokio::sync::Notify,
    shared: Option<std::sync::Arc<dyn SharedFailures>>,
}

/// How long a pairing attempt that found the budget spent waits for the attempts of its
/// address in flight to settle, and give their tokens back if their codes were good.
pub const PAIRING_WAIT: Duration = Duration::from_secs(10);

/// A pairing attempt in flight, holding a token of its address's budget. Settle it with
/// [`Attempt::settle`]; one dropped unsettled (its request went away) keeps its token, as a
/// failed attempt does.
#[must_use = "an attempt holds a token until it is settled"]
pub struct Attempt<'a> {
    limiter: &'a PairingLimiter,
    addr: IpAddr,
    shared: bool,
}

impl Attempt<'_> {
    /// Ends the attempt: one whose code `failed` (unknown, used or expired) keeps its
    /// token; any other gives it back.
    pub async fn settle(self, failed: bool) {
        if !failed {
            self.limiter
                .refund_any(self.addr, self.shared, Instant::now())
                .await;
        }
        // Dropped here: no longer in flight.
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(mut n) = self.limiter.in_flight.get_mut(&self.addr) {
            *n = n.saturating_sub(1);
        }
        self.limiter.in_flight.remove_if(&self.addr, |_, n| *n == 0);
        self.limiter.settled.notify_waiters();
    }
}

impl std::fmt::Debug for PairingLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PairingLimiter")
            .field("addresses", &self.tat.len())
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

impl PairingLimiter {
    pub fn new(spec: RateSpec) -> Self {
        let interval = spec.per / spec.count.get();
        PairingLimiter {
            interval,
            tolerance: interval * (spec.count.get() - 1),
            tat: DashMap::new(),
            in_flight: DashMap::new(),
            settled: tokio::sync::Notify::new(),
            shared: None,
        }
    }

    /// Keeps the budget in the cluster's shared store from now on (this node's own budget
    /// decides only while the shared store cannot answer).
    pub fn with_shared(mut self, shared: std::sync::Arc<dyn SharedFailures>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Begins a pairing attempt by `addr`: takes a token of its budget, waiting up to
    /// `wait` for its attempts in flight here to settle while the budget is spent. Refused
    /// once the budget is spent and none of them is left in flight (or `wait` is over).
    pub async fn begin(&self, addr: IpAddr, wait: Duration) -> Result<Attempt<'_>, RateLimited> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the budget is looked at, so that no settling is missed.
            let settled = self.settled.notified();
            match self.take_any(addr, Instant::now()).await {
                Ok(shared) => {
                    *self.in_flight.entry(addr).or_insert(0) += 1;
                    return Ok(Attempt {
                        limiter: self,
                        addr,
                        shared,
                    });
                }
                Err(limited) => {
                    let busy = self.in_flight.get(&addr).is_some_and(|n| *n > 0);
                    if !busy || tokio::time::Instant::now() >= deadline {
                        return Err(limited);
                    }
                    let _ = tokio::time::timeout_at(deadline, settled).await;
                }
            }
        }
    }

    /// [`PairingLimiter::take`], against the shared budget in a cluster. `Ok(true)` when
    /// the shared budget took it (its refund goes there too).
    async fn take_any(&self, addr: IpAddr, now: Instant) -> Result<bool, RateLimited> {
        if let Some(shared) = &self.shared {
            match shared.take(addr).await {
                Ok(decided) => return decided.map(|()| true),
                Err(e) => tracing::debug!(error = %e, "shared pairing limit unavailable"),
            }
        }
        self.take(addr, now).map(|()| false)
    }

    /// [`PairingLimiter::refund`] of a token [`PairingLimiter::take_any`] took: from the
    /// shared budget when `shared` (what `take_any` answered), else from this node's.
    async fn refund_any(&self, addr: IpAddr, shared: bool, now: Instant) {
        if let Some(budget) = self.shared.as_ref().filter(|_| shared) {
            if let Err(e) = budget.refund(addr).await {
                tracing::debug!(error = %e, "shared pairing limit unavailable");
            }
            return;
        }
        self.refund(addr, now)
    }

    /// An attempt by `addr` at `now`: refused when the budget is spent, else it takes a
    /// token at once, before its outcome is known, so that attempts in flight together
    /// cannot pass the budget between its check and its charge.
    pub fn take(&self, addr: IpAddr, now: Instant) -> Result<(), RateLimited> {
        let mut tat = self.tat.entry(addr).or_insert(now);
        let from = (*tat).max(now);
        let allowed_at = from.checked_sub(self.tolerance).unwrap_or(now);
        if allowed_at > now {
            return Err(RateLimited::after(allowed_at - now));
        }
        *tat = from + self.interval;
        Ok(())
    }

    /// Gives back the token of an attempt by `addr` that did not fail.
    pub fn refund(&self, addr: IpAddr, now: Instant) {
        if let Some(mut tat) = self.tat.get_mut(&addr) {
            *tat = tat.checked_sub(self.interval).unwrap_or(now).max(now);
        }
    }

    /// Forgets addresses whose budget is full again.
    pub fn housekeep(&self, now: Instant) {
        self.tat.retain(|_, tat| *tat > now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_address_its_ipv4_one() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        assert_eq!(client_of(ip("2001:db8:1:2::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            client_of(ip("2001:db8:1:2:ffff:1:2:3")),
            ip("2001:db8:1:2::")
        );
        assert_ne!(client_of(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(client_of(ip("203.0.113.9")), ip("203.0.113.9"));
        assert_eq!(client_of(ip("::ffff:203.0.113.9")), ip("203.0.113.9"));
        assert_eq!(
            Person::address(ip("2001:db8::5")),
            Person::address(ip("2001:db8::6"))
        );
    }
    use governor::clock::FakeRelativeClock;

    fn spec(s: &str) -> RateSpec {
        s.parse().expect("a valid spec")
    }

    #[test]
    fn rate_specs_parse_and_refuse_nonsense() {
        assert_eq!(spec("60/10"), RateSpec::DEFAULT_EVENTS);
        assert_eq!(spec("60/10").to_string(), "60/10");
        assert_eq!(spec("1/86400").per, Duration::from_secs(86_400));
        // The longest period still limits: one action, then none for a day.
        let limiter = EventLimiter::new(spec("1/86400"));
        let someone = Person::seat("someone");
        assert_eq!(limiter.charge(&someone), Ok(()));
        assert!(limiter.charge(&someone).is_err());
        assert_eq!(spec("4294967295/86400").count.get(), u32::MAX);
        for bad in [
            "60",
            "0/10",
            "60/0",
            "x/10",
            "60/y",
            "-1/10",
            "",
            "1/86401",
            "1/99999999999",
            "1/18446744073",
            "4294967296/1",
        ] {
            assert!(bad.parse::<RateSpec>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_person_spends_the_burst_then_waits_and_recovers() {
        let clock = FakeRelativeClock::default();
        let limiter = EventLimiter::with_clock(spec("3/3"), clock.clone());
        let alice = Person::seat("alice-token");
        let bob = Person::Address("127.0.0.2".parse().expect("an address"));
        for _ in 0..3 {
            assert_eq!(limiter.charge(&alice), Ok(()));
        }
        assert_eq!(
            limiter.charge(&alice),
            Err(RateLimited {
                retry_after_secs: 1
            })
        );
        // Another person has a budget of their own.
        assert_eq!(limiter.charge(&bob), Ok(()));
        // A refusal does not spend: after one interval exactly one token is back.
        clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.charge(&alice), Ok(()));
        assert!(limiter.charge(&alice).is_err());
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let clock = FakeRelativeClock::default();
        let limiter = EventLimiter::with_clock(spec("1/10"), clock.clone());
        let p = Person::seat("t");
        assert!(limiter.charge(&p).is_ok());
        clock.advance(Duration::from_millis(2500));
        assert_eq!(
            limiter.charge(&p),
            Err(RateLimited {
                retry_after_secs: 8
            })
        );
    }

    #[tokio::test]
    async fn an_attempt_that_finds_the_budget_spent_waits_for_those_in_flight() {
        let limiter = PairingLimiter::new(spec("2/60"));
        let addr: IpAddr = "127.0.0.7".parse().expect("an address");
        let wait = Duration::from_secs(10);
        let a = limiter.begin(addr, wait).await.expect("a token");
        let b = limiter.begin(addr, wait).await.expect("a token");
        // Both tokens are in flight: a third waits for one of them to settle.
        let third = limiter.begin(addr, wait);
        tokio::pin!(third);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut third)
                .await
                .is_err(),
            "the third did not wait"
        );
        // A good code gives its token back, and the one waiting takes it.
        a.settle(false).await;
        let c = tokio::time::timeout(wait, third)
            .await
            .expect("woken as the first settled")
            .expect("its token");
        // Failed codes keep their tokens; with none in flight, the next is refused at once.
        b.settle(true).await;
        drop(c);
        let refused = tokio::time::timeout(Duration::from_secs(5), limiter.begin(addr, wait))
            .await
            .expect("refused without waiting");
        assert!(refused.is_err());
        assert!(limiter.in_flight.is_empty());
    }

    #[test]
    fn only_failed_pairing_attempts_count() {
        let limiter = PairingLimiter::new(spec("10/60"));
        let addr: IpAddr = "127.0.0.9".parse().expect("an address");
        let t0 = Instant::now();
        // Successes give their token back: any number in a row.
        for _ in 0..25 {
            assert_eq!(limiter.take(addr, t0), Ok(()));
            limiter.refund(addr, t0);
        }
        // Ten attempts in flight at once take the whole budget before any has failed.
        for _ in 0..10 {
            assert_eq!(limiter.take(addr, t0), Ok(()));
        }
        assert_eq!(
            limiter.take(addr, t0),
            Err(RateLimited {
                retry_after_secs: 6
            })
        );
        // A refused attempt spends nothing, so waiting one interval is enough.
        assert_eq!(limiter.take(addr, t0 + Duration::from_secs(6)), Ok(()));
        assert!(limiter.take(addr, t0 + Duration::from_secs(6)).is_err());
        // One of those that did not fail after all gives its token back.
        limiter.refund(addr, t0 + Duration::from_secs(6));
        assert_eq!(limiter.take(addr, t0 + Duration::from_secs(6)), Ok(()));
        limiter.housekeep(t0 + Duration::from_secs(67));
        assert!(limiter.tat.is_empty());
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().expect("a net")];
        let ip = |s: &str| s.parse::<IpAddr>().expect("an address");
        let header = Some("6.6.6.6, 1.2.3.4, 10.0.0.7");
        // From an untrusted peer the header is ignored.
        assert_eq!(
            client_address(ip("8.8.8.8"), header, &trusted),
            ip("8.8.8.8")
        );
        // From a trusted proxy: the right-most untrusted hop, not the client's own claim.
        assert_eq!(
            client_address(ip("10.0.0.1"), header, &trusted),
            ip("1.2.3.4")
        );
        assert_eq!(
            client_address(ip("10.0.0.1"), None, &trusted),
            ip("10.0.0.1")
        );
        assert_eq!(
            client_address(ip("10.0.0.1"), Some("junk, 10.0.0.5"), &trusted),
            ip("10.0.0.5")
        );
        assert_eq!(client_address(ip("10.0.0.1"), header, &[]), ip("10.0.0.1"));
    }
}
