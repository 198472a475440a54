//! At most `--max-connections-per-address` TCP connections from one client address.
//!
//! The relay caps the WebSockets a client holds (`--max-sockets-per-address`), by the
//! address a request names through trusted proxies. That leaves the connections that
//! never become a WebSocket: one address could open thousands, each living until the
//! request timeout (10 s) or the keep-alive ends, and opening them again as fast as they
//! close, until the hub's connection cap (what its open-files limit leaves) was all theirs
//! and nobody else could connect. [`ConnectionCap`] counts every accepted connection by
//! its peer address, as actix-web hands it over (`HttpServer::on_connect`), and shuts one
//! past the cap at once, before a byte of it is read: its descriptor is free again at
//! once, and the client sees the connection closed. The slot is an [`Admitted`] kept in
//! the connection's own data, so it comes back when the connection ends, however it ends.
//!
//! Not counted: loopback peers (the host's own, as for the WebSocket cap) and trusted
//! proxies, behind which many clients share one peer address; their clients are capped by
//! the WebSocket cap, by forwarded address, and otherwise by the proxy itself.

use std::any::Any;
use std::net::{IpAddr, Shutdown};
use std::num::NonZeroU32;
use std::sync::Arc;

use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use ipnet::IpNet;
use prometheus::IntCounter;
use relay::{Admitted, SocketCap};

/// Counts the TCP connections of each client address; see the module's documentation.
pub struct ConnectionCap {
    cap: SocketCap,
    trusted_proxies: Arc<Vec<IpNet>>,
    refused: IntCounter,
    /// The peer of a connection (tests name one that is not loopback).
    peer_of: fn(&TcpStream) -> Option<IpAddr>,
}

impl ConnectionCap {
    /// At most `per_address` connections a client address; `refused` counts the others.
    pub fn new(
        per_address: NonZeroU32,
        trusted_proxies: Arc<Vec<IpNet>>,
        refused: IntCounter,
    ) -> ConnectionCap {
        ConnectionCap {
            cap: SocketCap::new(per_address),
            trusted_proxies,
            refused,
            peer_of: |tcp| tcp.peer_addr().ok().map(|a| a.ip()),
        }
    }

    /// For `HttpServer::on_connect`: admits the connection `io` (its slot kept in `data`)
    /// or shuts it down.
    pub fn on_connect(&self, io: &dyn Any, data: &mut Extensions) {
        // Plain TCP is all the hub listens on; anything else is not counted.
        let Some(tcp) = io.downcast_ref::<TcpStream>() else {
            return;
        };
        let Some(peer) = (self.peer_of)(tcp) else {
            return;
        };
        if crate::limits::is_trusted_proxy(peer, &self.trusted_proxies) {
            return;
        }
        match self.cap.admit(peer) {
            Some(slot) => {
                data.insert::<Admitted>(slot);
            }
            None => {
                self.refused.inc();
                // Both ways: the dispatcher reads the end of the stream at once and drops
                // the connection; nothing it sent is read.
                let _ = socket2::SockRef::from(tcp).shutdown(Shutdown::Both);
            }
        }
    }

    /// How many client addresses hold at least one counted connection.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.cap.clients()
    }
}

/// For `HttpServer::on_connect`: a connection whose client takes none of the data waiting
/// for it (its receive window shut) for `timeout` is closed by the kernel
/// (`TCP_USER_TIMEOUT`, which also bounds zero-window probing). A WebSocket session drops a
/// client that does not read, but the frames already handed to the connection kept it
/// open, and its memory held (about 1 MiB a socket of big boards), for as long as the
/// client kept it; a connection of a client that reads is not touched.
pub fn set_send_timeout(io: &dyn Any, timeout: std::time::Duration) {
    if let Some(tcp) = io.downcast_ref::<TcpStream>() {
        if let Err(e) = socket2::SockRef::from(tcp).set_tcp_user_timeout(Some(timeout)) {
            tracing::debug!(error = %e, "TCP_USER_TIMEOUT not set");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::time::Duration;

    use actix_web::{web, App, HttpResponse, HttpServer};

    /// A hub-like server on 127.0.0.1 whose cap takes every peer for 203.0.113.7, a client
    /// that is not loopback.
    fn serve(cap: Arc<ConnectionCap>) -> (actix_web::dev::ServerHandle, std::net::SocketAddr) {
        let counted = cap.clone();
        let server = HttpServer::new(|| {
            App::new().route(
                "/",
                web::get().to(|| async { HttpResponse::Ok().body("hi") }),
            )
        })
        .workers(1)
        .on_connect(move |io, data| counted.on_connect(io, data))
        .bind("127.0.0.1:0")
        .expect("bound");
        let addr = server.addrs()[0];
        let server = server.run();
        let handle = server.handle();
        actix_rt::spawn(server);
        (handle, addr)
    }

    fn cap(per_address: u32, trusted: &[&str]) -> Arc<ConnectionCap> {
        let mut cap = ConnectionCap::new(
            NonZeroU32::new(per_address).expect("a cap"),
            Arc::new(trusted.iter().map(|n| n.parse().expect("a net")).collect()),
            IntCounter::new("refused", "refused").expect("a counter"),
        );
        cap.peer_of = |_| Some(IpAddr::from([203, 0, 113, 7]));
        Arc::new(cap)
    }

    /// One request on a fresh connection, on a thread of its own; what came back, kept
    /// open (`None` when the server closed it without an answer).
    async fn ask(addr: std::net::SocketAddr) -> Option<(std::net::TcpStream, String)> {
        actix_web::rt::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).expect("connected");
            s.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(n) if n > 0 => Some((s, String::from_utf8_lossy(&buf[..n]).into_owned())),
                _ => None,
            }
        })
        .await
        .expect("the client thread")
    }

    #[actix_rt::test]
    async fn an_address_holds_its_cap_of_connections_and_the_next_is_closed_unanswered() {
        let cap = cap(2, &[]);
        let (server, addr) = serve(cap.clone());
        let (a, answer) = ask(addr).await.expect("the first is served");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let (_b, _) = ask(addr).await.expect("the second is served");
        assert!(ask(addr).await.is_none(), "the third is closed unanswered");
        assert_eq!(cap.refused.get(), 1);

        // Closing one gives its slot back once the server has seen it close.
        drop(a);
        let mut served = None;
        for _ in 0..50 {
            served = ask(addr).await;
            if served.is_some() {
                break;
            }
            actix_rt::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served.is_some(), "a slot came back");
        server.stop(false).await;
    }

    #[actix_rt::test]
    async fn a_trusted_proxy_is_not_counted() {
        let cap = cap(1, &["203.0.113.0/24"]);
        let (server, addr) = serve(cap.clone());
        let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| ask(addr))).await;
        assert!(
            held.iter().all(Option::is_some),
            "every connection is served"
        );
        assert_eq!(cap.clients(), 0);
        assert_eq!(cap.refused.get(), 0);
        server.stop(false).await;
    }
}
