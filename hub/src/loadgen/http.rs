//! The HTTP calls of a load run: create a seated game, pair it, read the hub's memory.
//!
//! Each call is bounded in time, and the number in flight at once is capped, so that
//! seating 10,000 games opens a few dozen keep-alive connections rather than 10,000 (file
//! descriptors are the scarce thing on both sides of a run this size). Refusals that come
//! from the hub's own limits are told apart from other failures, because the cure is a
//! flag of `pipehub serve`, not a bug report.

use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::Semaphore;

use crate::client::{causes, retry_after, seg, HubUrl};

/// Requests in flight at once.
pub(super) const MAX_IN_FLIGHT: usize = 64;
/// One request's time limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// 429 `rate_limited`: the hub's per-person rate limit.
    #[error("rate_limited (retry after {retry_after_s} s)")]
    RateLimited { retry_after_s: u64 },
    /// 429 `rate_limited` to a pair: the hub's limit on failed pairing attempts per client
    /// address (a successful pair does not count against the other limit).
    #[error("rate_limited pairing (retry after {retry_after_s} s)")]
    PairingLimited { retry_after_s: u64 },
    /// `too_many_games`: the hub's cap on open games per person, and the cap when its
    /// answer names it.
    #[error("too_many_games: {detail}")]
    OpenGamesCap { detail: String, cap: Option<u64> },
    /// Any other answer that is not a success.
    #[error("{status} {body}")]
    Refused { status: u16, body: String },
    /// The hub could not be reached, or its answer could not be read.
    #[error("{0}")]
    Transport(String),
}

/// One seated game, both seats' tokens in hand.
#[derive(Debug, Clone)]
pub struct Seated {
    pub game: String,
    pub token_x: String,
    pub token_o: String,
}

/// An HTTP client for one hub.
#[derive(Debug)]
pub struct HubClient {
    base: HubUrl,
    client: reqwest::Client,
    in_flight: Semaphore,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreatedMsg {
    game: String,
    token: String,
    pairing_code: String,
}

#[derive(Deserialize)]
struct PairedMsg {
    token: String,
}

#[derive(Deserialize)]
struct ErrorMsg {
    error: String,
    detail: Option<Value>,
}

impl HubClient {
    /// `base` is the hub's URL, e.g. `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> Result<HubClient, CallError> {
        let base = HubUrl::parse(base).map_err(CallError::Transport)?;
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .pool_max_idle_per_host(MAX_IN_FLIGHT)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| CallError::Transport(causes(&e)))?;
        Ok(HubClient {
            base,
            client,
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        })
    }

    /// The relay's address: the hub's URL with a WebSocket scheme and `/v1/ws`.
    pub fn ws_url(&self) -> String {
        self.base.ws()
    }

    /// Creates a seated game in `inbox` and pairs it: both tokens, the start written.
    pub async fn seat_game(
        &self,
        inbox: &str,
        protocol: &str,
        signed: bool,
    ) -> Result<Seated, CallError> {
        let created: CreatedMsg = self
            .post(
                &format!("/v1/inboxes/{}/games", seg(inbox)),
                json!({"protocol": protocol, "signed": signed}),
            )
            .await?;
        let paired: PairedMsg = match self
            .post("/v1/pair", json!({"code": created.pairing_code}))
            .await
        {
            Ok(paired) => paired,
            Err(e) => {
                // The game is made and nobody sits at O: left, it would wait for ever and
                // hold a place under this address's open-games cap.
                if let Err(c) = self.cancel(inbox, &created.game, &created.token).await {
                    tracing::warn!(game = %created.game, error = %c, "an unpaired game was not cancelled");
                }
                return Err(match e {
                    CallError::RateLimited { retry_after_s } => {
                        CallError::PairingLimited { retry_after_s }
                    }
                    e => e,
                });
            }
        };
        Ok(Seated {
            game: created.game,
            token_x: created.token,
            token_o: paired.token,
        })
    }

    /// Cancels a game nobody has joined, with X's token.
    pub async fn cancel(&self, inbox: &str, game: &str, token: &str) -> Result<(), CallError> {
        let url = format!(
            "{}/v1/inboxes/{}/games/{}",
            self.base,
            seg(inbox),
            seg(game)
        );
        self.seat_call(self.client.delete(url), token, |_| false)
            .await
    }

    /// Resigns a game with X's token. A refereed refusal (422) counts as done: the only one
    /// a resign meets is a game that had ended already, which is what was wanted.
    pub async fn resign(&self, inbox: &str, game: &str, token: &str) -> Result<(), CallError> {
        let url = format!(
            "{}/v1/inboxes/{}/games/{}/resign",
            self.base,
            seg(inbox),
            seg(game)
        );
        self.seat_call(self.client.post(url), token, |status| status == 422)
            .await
    }

    /// Sends a seat's request with its token; done on a success, or on a status `also_done`
    /// takes as one.
    async fn seat_call(
        &self,
        request: reqwest::RequestBuilder,
        token: &str,
        also_done: impl Fn(u16) -> bool,
    ) -> Result<(), CallError> {
        let _permit = self.in_flight.acquire().await;
        let response = request
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| CallError::Transport(causes(&e)))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) || also_done(status) {
            return Ok(());
        }
        let body = response.text().await.unwrap_or_default();
        Err(CallError::Refused {
            status,
            body: body.chars().take(200).collect(),
        })
    }

    /// The hub's `process_resident_memory_bytes` from `/metrics`.
    pub async fn resident_memory(&self) -> Result<u64, CallError> {
        Ok(self.process().await?.rss_bytes)
    }

    /// The hub's process figures from one read of `/metrics`: its resident memory (which
    /// must be there) and the CPU it has used (where the platform reports it).
    pub async fn process(&self) -> Result<HubProcess, CallError> {
        let _permit = self.in_flight.acquire().await;
        let text = self
            .client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| CallError::Transport(causes(&e)))?
            .text()
            .await
            .map_err(|e| CallError::Transport(causes(&e)))?;
        let rss_bytes = parse_rss(&text).ok_or_else(|| {
            CallError::Transport("/metrics has no process_resident_memory_bytes".into())
        })?;
        Ok(HubProcess {
            rss_bytes,
            cpu_s: parse_metric(&text, "process_cpu_seconds_total"),
        })
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: Value,
    ) -> Result<T, CallError> {
        let _permit = self.in_flight.acquire().await;
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .map_err(|e| CallError::Transport(causes(&e)))?;
        let status = response.status().as_u16();
        let retry_after_s = retry_after(response.headers()).map_or(1, |d| d.as_secs());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CallError::Transport(causes(&e)))?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes)
                .map_err(|e| CallError::Transport(format!("{path}: unreadable answer: {e}")));
        }
        let error: Option<ErrorMsg> = serde_json::from_slice(&bytes).ok();
        Err(match error {
            Some(e) if status == 429 || e.error == "rate_limited" => {
                CallError::RateLimited { retry_after_s }
            }
            Some(e) if e.error == "too_many_games" => {
                let detail = match e.detail {
                    Some(Value::String(d)) => d,
                    Some(d) => d.to_string(),
                    None => String::new(),
                };
                CallError::OpenGamesCap {
                    cap: open_games_cap(&detail),
                    detail,
                }
            }
            _ => CallError::Refused {
                status,
                body: String::from_utf8_lossy(&bytes).chars().take(200).collect(),
            },
        })
    }
}

/// The cap a `too_many_games` detail names ("at most 20 open games per person").
fn open_games_cap(detail: &str) -> Option<u64> {
    detail
        .strip_prefix("at most ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the hub's `/metrics` says of its process at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HubProcess {
    pub rss_bytes: u64,
    /// `process_cpu_seconds_total`: user and system CPU since the hub started.
    pub cpu_s: Option<f64>,
}

/// Reads `process_resident_memory_bytes VALUE` from Prometheus text.
pub fn parse_rss(text: &str) -> Option<u64> {
    parse_metric(text, "process_resident_memory_bytes").map(|v| v as u64)
}

/// Reads the value of an unlabelled metric `name` from Prometheus text.
fn parse_metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()? == name)
            .then(|| parts.next()?.parse::<f64>().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_is_read_from_prometheus_text() {
        let text = "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
                    # TYPE process_resident_memory_bytes gauge\n\
                    process_resident_memory_bytes_total 1\n\
                    process_resident_memory_bytes 1.2345e7\n";
        assert_eq!(parse_rss(text), Some(12_345_000));
        assert_eq!(parse_rss("pipehub_x 1\n"), None);
    }

    /// The cap is read from the hub's own words for it, so a change to them shows here.
    #[test]
    fn the_open_games_cap_is_read_from_the_hubs_refusal() {
        let detail = crate::game::HubError::TooManyGames(20)
            .detail()
            .expect("a detail");
        assert_eq!(open_games_cap(&detail), Some(20));
        assert_eq!(open_games_cap("too many"), None);
    }

    #[test]
    fn cpu_seconds_are_read_by_their_exact_name() {
        let text = "# TYPE process_cpu_seconds_total counter\n\
                    process_cpu_seconds_total_x 9\n\
                    process_cpu_seconds_total 12.75\n";
        assert_eq!(parse_metric(text, "process_cpu_seconds_total"), Some(12.75));
        assert_eq!(parse_metric("", "process_cpu_seconds_total"), None);
    }

    #[test]
    fn relay_url_follows_the_hub_url() {
        let c = |b: &str| HubClient::new(b).map(|c| c.ws_url()).ok();
        assert_eq!(
            c("http://127.0.0.1:8080/").as_deref(),
            Some("ws://127.0.0.1:8080/v1/ws")
        );
        assert_eq!(
            c("https://h.example").as_deref(),
            Some("wss://h.example/v1/ws")
        );
        // Not a hub's URL: said so, rather than reqwest's "builder error" at the first call.
        for bad in [
            "notaurl",
            "127.0.0.1:8080",
            "ftp://h.example",
            "http://",
            "",
        ] {
            match HubClient::new(bad) {
                Err(CallError::Transport(e)) => assert!(e.contains("http://"), "{bad}: {e}"),
                Err(e) => panic!("{bad}: {e:?}"),
                Ok(_) => panic!("{bad} was taken for a hub's URL"),
            }
        }
        // A hub's URL with more than its origin: said so up front, rather than a /metrics
        // without the hub's figures at the first call.
        for bad in [
            "http://127.0.0.1:8080?x=1",
            "http://127.0.0.1:8080/?x=1",
            "http://127.0.0.1:8080#top",
            "http://127.0.0.1:8080/v1",
            "https://h.example/hub/",
        ] {
            match HubClient::new(bad) {
                Err(CallError::Transport(e)) => {
                    assert!(
                        e.contains("without a path, query or fragment"),
                        "{bad}: {e}"
                    )
                }
                Err(e) => panic!("{bad}: {e:?}"),
                Ok(_) => panic!("{bad} was taken for a hub's base URL"),
            }
        }
    }

    #[tokio::test]
    async fn a_hub_that_cannot_be_reached_is_said_why() {
        // A port nobody listens on: the refusal itself is named, not only the request.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let hub = HubClient::new(&format!("http://127.0.0.1:{port}")).expect("a URL");
        match hub.resident_memory().await {
            Err(CallError::Transport(e)) => {
                assert!(e.to_lowercase().contains("refused"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }
}
