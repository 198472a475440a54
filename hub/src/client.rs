//! A hub's address as its own clients hold it: the agent (`pipehub mcp`) and the load
//! generator (`pipehub loadgen`) both reach a hub over HTTP and its relay over a
//! WebSocket, and must agree on what a hub URL is and how a path is built from it.
//!
//! A hub's base URL is a scheme (`http` or `https`), a host and a port: every route is a
//! path under it, so a path, query or fragment in the base would land in the middle of
//! each request (`…?x=1/v1/pair`) and fail far from where it was given. Segments that come
//! from users (inbox names, game ids, cursors) are percent-encoded, since inbox names in
//! particular are not checked before the hub sees them.
//!
//! What it deliberately does not do: make requests. Each client keeps its own HTTP client
//! and its own error type; only the address and the small readings of an answer that both
//! make (`Retry-After`, an error's causes, which the commands print the same way) live
//! here.

use std::fmt::Write as _;
use std::time::Duration;

/// A hub's base URL, checked: `http://` or `https://`, a host, no path, query or fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubUrl {
    /// Without a trailing `/`.
    base: String,
}

impl HubUrl {
    /// Checks `base`, e.g. `http://127.0.0.1:8080`; the error says what a base is.
    pub fn parse(base: &str) -> Result<HubUrl, String> {
        let url = reqwest::Url::parse(base)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        let Some(url) = url else {
            return Err(format!(
                "`{base}` is not an http:// or https:// URL (e.g. http://127.0.0.1:8080)"
            ));
        };
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "`{base}` is not a hub's base URL: give its scheme, host and port only, \
                 without a path, query or fragment (e.g. http://127.0.0.1:8080)"
            ));
        }
        Ok(HubUrl {
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// The base itself, without a trailing `/`.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    /// The WebSocket relay's URL: `ws://…/v1/ws`, or `wss://…` for an `https` hub.
    pub fn ws(&self) -> String {
        let rest = match self.base.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            // `parse` let nothing else through.
            None => format!("ws://{}", self.base.trim_start_matches("http://")),
        };
        format!("{rest}/v1/ws")
    }
}

/// The base, so that `format!("{base}/v1/pair")` builds a URL.
impl std::fmt::Display for HubUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

/// Percent-encodes one path or query segment (ids are URL-safe, inbox names may not be).
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `Retry-After` in whole seconds, as the hub sends it with a 429 or a 503.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let secs = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    secs.trim().parse().ok().map(Duration::from_secs)
}

/// An error with each of its causes, once: a transport error's own text names only the
/// request ("error sending request for url …"), its causes what went wrong (connection
/// refused, a timeout). A cause that the text so far already ends with is not spelled
/// again: many errors put their source in their own message too.
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_is_a_scheme_a_host_and_a_port() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/",
            "https://hub.example",
        ] {
            assert!(HubUrl::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1:8080",
            "ftp://h",
            "http://h/prefix",
            "http://h/?x=1",
            "http://h/#f",
            "http://",
            "",
        ] {
            assert!(HubUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths_and_the_relay_are_built_from_the_base() {
        let h = HubUrl::parse("http://127.0.0.1:8080/").expect("a base");
        assert_eq!(h.as_str(), "http://127.0.0.1:8080");
        assert_eq!(format!("{h}/v1/pair"), "http://127.0.0.1:8080/v1/pair");
        assert_eq!(h.ws(), "ws://127.0.0.1:8080/v1/ws");
        let s = HubUrl::parse("https://hub.example").expect("a base");
        assert_eq!(s.ws(), "wss://hub.example/v1/ws");
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(seg("a-b.c_d~e"), "a-b.c_d~e");
        assert_eq!(seg("a/b?c d"), "a%2Fb%3Fc%20d");
        assert_eq!(seg("é"), "%C3%A9");
    }

    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let said = Wrapped("sending: refused".into(), std::io::Error::other("refused"));
        assert_eq!(causes(&said), "sending: refused");
        let unsaid = Wrapped("sending".into(), std::io::Error::other("refused"));
        assert_eq!(causes(&unsaid), "sending: refused");
    }

    #[derive(Debug)]
    struct Wrapped(String, std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }
}
