//! A small WebSocket client for the relay's end-to-end tests: connect to a running hub's
//! `/v1/ws`, send JSON messages, and receive JSON messages with a timeout on every wait,
//! so a test that does not get what it expects fails instead of hanging.

#![allow(dead_code)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use pipehub_tests::{Client, Hub, Seated};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long any single wait for a message may take.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct Ws {
    pub socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// Every text frame received, in order, as sent (for leak checks).
    pub frames: Vec<String>,
}

/// A seated game created and paired over HTTP, with its tokens.
pub struct Game {
    pub inbox: String,
    pub game: String,
    pub x: String,
    pub o: String,
}

impl Game {
    /// Creates a game with the given create body in `inbox` and pairs it.
    pub fn new(hub: &Hub, client: &Client, inbox: &str, body: Value) -> Game {
        let s = Seated::create_and_pair(client, hub, hub, inbox, &body);
        Game {
            inbox: s.inbox,
            game: s.game,
            x: s.x,
            o: s.o,
        }
    }

    pub fn path(&self, rest: &str) -> String {
        format!("/v1/inboxes/{}/games/{}{rest}", self.inbox, self.game)
    }
}

impl Ws {
    fn new(socket: WebSocketStream<MaybeTlsStream<TcpStream>>) -> Ws {
        Ws {
            socket,
            frames: Vec::new(),
        }
    }

    /// The hub's relay address.
    fn url(hub: &Hub) -> String {
        format!("{}/v1/ws", hub.base.replacen("http://", "ws://", 1))
    }

    pub async fn connect(hub: &Hub) -> Ws {
        let (socket, _) =
            tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(Ws::url(hub)))
                .await
                .expect("the handshake finishes in time")
                .expect("the relay accepts the WebSocket");
        Ws::new(socket)
    }

    /// A socket as if from `client`, through a proxy the hub trusts (the hub must be
    /// started with `--trusted-proxy 127.0.0.1`): `Err` holds a refused upgrade's status,
    /// Retry-After and body.
    pub async fn connect_as(hub: &Hub, client: &str) -> Result<Ws, (u16, Option<String>, Value)> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        use tokio_tungstenite::tungstenite::Error;
        let mut request = Ws::url(hub).into_client_request().expect("a request");
        request
            .headers_mut()
            .insert("x-forwarded-for", client.parse().expect("a header value"));
        let attempt = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("the handshake finishes in time");
        match attempt {
            Ok((socket, _)) => Ok(Ws::new(socket)),
            Err(Error::Http(response)) => {
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = response
                    .body()
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null);
                Err((response.status().as_u16(), retry_after, body))
            }
            Err(e) => panic!("the upgrade failed below HTTP: {e}"),
        }
    }

    /// A client whose socket has a tiny receive buffer, so that not reading soon shows at
    /// the hub as a client that does not keep up.
    pub async fn connect_small(hub: &Hub) -> Ws {
        let addr: std::net::SocketAddr = hub
            .base
            .trim_start_matches("http://")
            .parse()
            .expect("the hub's address");
        let tcp = tokio::net::TcpSocket::new_v4().expect("a socket");
        tcp.set_recv_buffer_size(4096).expect("a small buffer");
        let stream = tcp.connect(addr).await.expect("the hub accepts");
        let url = format!("ws://{addr}/v1/ws");
        let (socket, _) = tokio::time::timeout(
            WAIT,
            tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(stream)),
        )
        .await
        .expect("the handshake finishes in time")
        .expect("the relay accepts the WebSocket");
        Ws::new(socket)
    }

    /// Reads until the hub closes the socket or `deadline` passes; returns how many text
    /// frames arrived and whether the socket closed.
    pub async fn drain(&mut self, deadline: tokio::time::Instant) -> (usize, bool) {
        let mut texts = 0;
        loop {
            match tokio::time::timeout_at(deadline, self.socket.next()).await {
                Err(_) => return (texts, false),
                Ok(Some(Ok(Message::Text(_)))) => texts += 1,
                Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) => {
                    return (texts, true)
                }
                Ok(Some(Ok(_))) => {}
            }
        }
    }

    pub async fn send(&mut self, message: Value) {
        self.send_text(message.to_string()).await;
    }

    pub async fn send_text(&mut self, text: String) {
        self.socket
            .send(Message::text(text))
            .await
            .expect("the frame is sent");
    }

    /// The next JSON message, or `None` when the hub closed the socket.
    pub async fn next(&mut self) -> Option<Value> {
        // One deadline for the call: pings and pongs do not extend it.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .expect("a message within the wait");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    self.frames.push(text.to_string());
                    return Some(serde_json::from_str(&text).expect("the hub sends JSON"));
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// The next JSON message; the socket must stay open.
    pub async fn recv(&mut self) -> Value {
        self.next().await.expect("the socket stays open")
    }

    /// Skips messages until one with type `t` (and, if given, `seq`) arrives.
    /// Other messages do not extend the wait.
    pub async fn until(&mut self, t: &str, seq: Option<u64>) -> Value {
        let wanted = async {
            loop {
                let m = self.recv().await;
                if m["t"] == t && seq.is_none_or(|s| m["seq"] == s) {
                    return m;
                }
            }
        };
        tokio::time::timeout(WAIT, wanted)
            .await
            .unwrap_or_else(|_| panic!("no {t} (seq {seq:?}) within the wait"))
    }

    /// `hello` with a token (or none); returns `hello.ok` and the state that follows it.
    pub async fn hello(&mut self, token: Option<&str>) -> (Value, Option<Value>) {
        let hello = match token {
            Some(token) => json!({"t": "hello", "token": token}),
            None => json!({"t": "hello"}),
        };
        self.send(hello).await;
        // A board published to the socket's previous seat may still be on its way; it
        // comes before the answer, never after it.
        let ok = loop {
            let m = self.recv().await;
            if m["t"] != "game.state" {
                break m;
            }
        };
        assert_eq!(ok["t"], "hello.ok", "{ok}");
        if token.is_none() {
            return (ok, None);
        }
        let state = self.recv().await;
        assert_eq!(state["t"], "game.state", "{state}");
        (ok, Some(state))
    }

    /// Reads until the hub closes the socket; the close frame's code (`None`: the socket
    /// ended without one).
    pub async fn close_code(&mut self) -> Option<u16> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.socket.next())
                .await
                .expect("the hub closes the socket within the wait");
            match frame {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}
