//! [`NetworkSettings`]: a task's outbound-HTTP capability as the runtime
//! enforces it (the typed result of `sandbox.network`, converted by the
//! CLI's wiring). Header values are secrets: [`Secret`] never shows them in
//! `Debug` or serialised output.

use std::fmt;
use std::time::Duration;

use onestep_core::network::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_REQUESTS, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_REQUEST_TIMEOUT, OriginPattern,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A header value the host injects: shown as `<redacted>` everywhere but on
/// the wire.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// One allowed origin and the headers the host sets on every request to it
/// (replacing a guest-set header of the same name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedOrigin {
    /// `scheme://host:port`, host possibly `*.suffix` (one label).
    pub origin: OriginPattern,
    /// Header name → value, injected by the host.
    #[serde(default)]
    pub headers: Vec<(String, Secret)>,
}

/// Outbound HTTP of one task (`sandbox.network`). The default allows
/// nothing: no request leaves the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSettings {
    /// Origins a request may go to; empty: no network at all.
    pub allow: Vec<AllowedOrigin>,
    /// Largest response body, in bytes; a larger one fails the request with
    /// `HTTP-response-body-size`.
    pub max_response_bytes: u64,
    /// Largest request body, in bytes; a larger one fails the request with
    /// `HTTP-request-body-size`.
    pub max_request_bytes: u64,
    /// Longest wait for the TCP connection and the TLS handshake.
    pub connect_timeout: Duration,
    /// Longest a request may take (response headers and whole body), always
    /// capped by what is left of the attempt's deadline.
    pub request_timeout: Duration,
    /// Requests one attempt may have in flight at once; one more fails with
    /// `connection-limit-reached`.
    pub max_concurrent_requests: u32,
    /// Connections one attempt may hold open at once, in use or idle (each is a file
    /// descriptor of the worker); a request that needs one more, while all are in use, waits
    /// up to the connect timeout, then fails with `connection-limit-reached`.
    pub max_connections: u32,
}

impl Default for NetworkSettings {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

impl NetworkSettings {
    /// Settings allowing `origins` (each parsed as an allow entry) with the
    /// default limits and no injected headers.
    pub fn allowing<'a>(origins: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let allow = origins
            .into_iter()
            .map(|o| {
                OriginPattern::parse(o).map(|origin| AllowedOrigin {
                    origin,
                    headers: Vec::new(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            allow,
            ..Self::default()
        })
    }

    /// Whether any request may leave the host.
    pub fn enabled(&self) -> bool {
        !self.allow.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_never_show() {
        let mut s = NetworkSettings::allowing(["https://api.example.com"]).expect("origin");
        s.allow[0]
            .headers
            .push(("Authorization".into(), Secret("Bearer sk-secret".into())));
        let debug = format!("{s:?}");
        assert!(
            !debug.contains("sk-secret") && debug.contains("<redacted>"),
            "{debug}"
        );
        let json = serde_json::to_string(&s).expect("json");
        assert!(!json.contains("sk-secret"), "{json}");
    }
}
