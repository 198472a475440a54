//! How many sockets one client may hold open at once.
//!
//! A socket of the relay lives as long as its client keeps it, so without a cap one
//! client could take every connection the hub may hold (about 20,000 here) and leave none
//! for anybody else. [`SocketCap`] counts the open sockets of each client and refuses one
//! past the most a client may hold; [`Admitted`], held for the socket's life, gives the
//! slot back when the socket closes, however it closes. The relay caps its WebSockets
//! with one (a refused upgrade gets 429 `rate_limited`); the hub caps its TCP connections
//! with another, counted by peer address as each connection is accepted, so that
//! connections that never become a WebSocket are capped too.
//!
//! A client is an IPv4 address or an IPv6 /64, since one IPv6 host commonly holds a whole
//! /64. Clients on a loopback address are not counted: they are the host's own (a load
//! generator, a local agent, or a reverse proxy the hub was not told to trust, through
//! which every client would look like one).

use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::Arc;

use dashmap::DashMap;

/// Whom a socket belongs to, for counting: an IPv4 address or an IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client(IpAddr);

impl Client {
    /// The client at `ip`, or `None` for a loopback address, which is not counted.
    pub fn of(ip: IpAddr) -> Option<Client> {
        let ip = ip.to_canonical();
        if ip.is_loopback() {
            return None;
        }
        Some(Client(match ip {
            IpAddr::V4(v4) => IpAddr::V4(v4),
            IpAddr::V6(v6) => {
                let prefix = u128::from(v6) & !u128::from(u64::MAX);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        }))
    }
}

/// The per-client cap on open sockets. Cheap to clone; clones share the counts.
#[derive(Clone)]
pub struct SocketCap {
    per_client: NonZeroU32,
    open: Arc<DashMap<Client, u32>>,
}

impl SocketCap {
    /// At most `per_client` open sockets a client.
    pub fn new(per_client: NonZeroU32) -> SocketCap {
        SocketCap {
            per_client,
            open: Arc::new(DashMap::new()),
        }
    }

    /// The most sockets one client may hold.
    pub fn per_client(&self) -> u32 {
        self.per_client.get()
    }

    /// Takes a slot for a socket of the client at `ip`, or `None` when that client holds
    /// the most it may. A loopback client always gets one, uncounted.
    pub fn admit(&self, ip: IpAddr) -> Option<Admitted> {
        let Some(client) = Client::of(ip) else {
            return Some(Admitted(None));
        };
        let mut open = self.open.entry(client).or_insert(0);
        if *open >= self.per_client.get() {
            return None;
        }
        *open += 1;
        Some(Admitted(Some((self.open.clone(), client))))
    }

    /// How many clients hold at least one counted socket.
    pub fn clients(&self) -> usize {
        self.open.len()
    }
}

/// A socket's slot under its client's cap, given back when dropped.
pub struct Admitted(Option<(Arc<DashMap<Client, u32>>, Client)>);

impl Drop for Admitted {
    fn drop(&mut self) {
        let Some((open, client)) = self.0.take() else {
            return;
        };
        if let Some(mut n) = open.get_mut(&client) {
            *n = n.saturating_sub(1);
        }
        // A client with no socket left is forgotten, so the map holds only clients with
        // sockets open; `remove_if` checks again under the shard's lock, in case a socket
        // of the same client was admitted meanwhile.
        open.remove_if(&client, |_, n| *n == 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    fn cap(per_client: u32) -> SocketCap {
        SocketCap::new(NonZeroU32::new(per_client).expect("a cap"))
    }

    #[test]
    fn a_client_gets_its_cap_and_a_slot_back_as_each_socket_closes() {
        let cap = cap(2);
        let a = cap.admit(ip("203.0.113.7")).expect("first");
        let b = cap.admit(ip("203.0.113.7")).expect("second");
        assert!(cap.admit(ip("203.0.113.7")).is_none(), "a third is refused");
        // Another client is counted apart.
        let other = cap.admit(ip("203.0.113.8")).expect("another client");
        drop(a);
        let c = cap.admit(ip("203.0.113.7")).expect("a slot came back");
        assert!(cap.admit(ip("203.0.113.7")).is_none());
        drop((b, c, other));
        assert_eq!(cap.clients(), 0, "clients without sockets are forgotten");
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_is_the_ipv4() {
        let cap = cap(1);
        let _a = cap.admit(ip("2001:db8:1:2::1")).expect("first");
        assert!(
            cap.admit(ip("2001:db8:1:2:ffff::9")).is_none(),
            "the same /64"
        );
        let _b = cap.admit(ip("2001:db8:1:3::1")).expect("another /64");
        let _c = cap.admit(ip("198.51.100.1")).expect("first");
        assert!(cap.admit(ip("::ffff:198.51.100.1")).is_none());
    }

    #[test]
    fn loopback_clients_are_not_counted() {
        let cap = cap(1);
        let held: Vec<Admitted> = (0..5)
            .map(|_| cap.admit(ip("127.0.0.1")).expect("loopback"))
            .chain((0..5).map(|_| cap.admit(ip("::1")).expect("loopback")))
            .collect();
        assert_eq!(held.len(), 10);
        assert_eq!(cap.clients(), 0);
    }
}
