//! The vocabulary of a task's outbound-HTTP capability (`sandbox.network`), shared by the
//! configuration (which validates the YAML with file locations) and the handler runtime (which
//! enforces it): an allow-list entry ([`OriginPattern`]: scheme, host or one-label wildcard,
//! port), its parser with the exact messages `onestep check` prints, the check of a request's
//! host ([`RequestHost`]: an IP literal or a canonical DNS name, never an IP with a trailing dot),
//! the match of a request's origin against an entry, and the defaults of the limits. See
//! [`docs/configuration.md`](../../../docs/configuration.md#sandbox-network) and
//! [`docs/security.md`](../../../docs/security.md#network).
//!
//! Plain data and pure functions: no I/O, no DNS.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest response body a request may receive (`max_response_bytes`): 10 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 10 << 20;
/// Largest request body a guest may send (`max_request_bytes`): 10 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 10 << 20;
/// Longest wait for the TCP (and TLS) connection (`connect_timeout_s`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a request may take, headers and whole body (`request_timeout_s`); always capped by
/// what is left of the attempt's deadline.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests one attempt may have in flight at once (`max_concurrent_requests`).
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 16;
/// Outbound connections one attempt may hold open at once, in use or idle (`max_connections`).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 16;
/// Largest `max_connections` a task may set.
pub const MAX_CONNECTIONS_LIMIT: u32 = 4096;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpScheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl HttpScheme {
    /// The scheme's default port.
    pub fn default_port(self) -> u16 {
        match self {
            HttpScheme::Http => 80,
            HttpScheme::Https => 443,
        }
    }

    /// `"http"` or `"https"`.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpScheme::Http => "http",
            HttpScheme::Https => "https",
        }
    }
}

/// How an allow-list entry should look (the start of every [`OriginError`]).
pub const ORIGIN_SHAPE: &str =
    "an origin like https://api.example.com, https://*.example.org:8443 or http://127.0.0.1:18080";

/// Why an allow-list entry is refused ([`OriginPattern::parse`]): shown as `"<entry>" is not an
/// origin like …: <problem>`, the text `onestep check` prints (the configuration adds the file
/// location).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not {shape}: {problem}", shape = ORIGIN_SHAPE)]
pub struct OriginError {
    /// The entry as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: OriginProblem,
}

impl From<OriginError> for String {
    fn from(e: OriginError) -> String {
        e.to_string()
    }
}

/// What is wrong with an allow-list entry (part of [`OriginError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginProblem {
    /// No `scheme://`.
    #[error("it has no scheme (http:// or https://)")]
    NoScheme,
    /// A scheme other than http or https.
    #[error("the scheme must be http or https")]
    BadScheme,
    /// Something after the authority.
    #[error("it has a path, query or fragment (an entry is scheme://host[:port] only)")]
    PathQueryOrFragment,
    /// `user@`.
    #[error("it has user information (user@)")]
    UserInfo,
    /// An empty host.
    #[error("it has no host")]
    NoHost,
    /// `[v6` without `]`.
    #[error("an IPv6 address must be closed with ]")]
    UnclosedIpv6,
    /// Something other than `:port` after `[v6]`.
    #[error("only :port may follow the IPv6 address")]
    AfterIpv6,
    /// A port that is not 1..=65535.
    #[error("the port must be a number from 1 to 65535")]
    BadPort,
    /// `[…]` that is not an IPv6 address.
    #[error("{0} is not an IPv6 address")]
    NotIpv6(String),
    /// A host whose last label is a number but that is not an IP literal.
    #[error(
        "{0} is neither an IP literal (dotted IPv4 or [IPv6], no trailing dot) nor a DNS name \
         (its last label is a number)"
    )]
    NumericName(String),
    /// A `*` anywhere but as the whole first label.
    #[error("a wildcard must be the whole first label (*.example.org)")]
    WildcardPlacement,
    /// A label that is not a DNS label.
    #[error("{0:?} is not a DNS label (letters, digits and inner hyphens, 1 to 63 characters)")]
    BadLabel(String),
    /// `*.org`.
    #[error("a wildcard needs at least two labels after it (*.example.org)")]
    ShortWildcard,
}

/// Why the host of a request is refused ([`RequestHost::parse`]); the text goes to the
/// attempt's log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// `[…]` that is not an IPv6 address.
    #[error("{0:?} is not an IPv6 address")]
    NotIpv6(String),
    /// An empty label (`a..b`, or nothing at all).
    #[error("{0:?} is not a DNS name (an empty label)")]
    EmptyLabel(String),
    /// A character a DNS name does not have.
    #[error("{0:?} is not a DNS name (letters, digits, hyphens and underscores only)")]
    BadCharacter(String),
    /// Not an IP literal, and the last label is a number the resolver would read as an address.
    #[error(
        "{0:?} is neither an IP literal (dotted IPv4 or [IPv6], no trailing dot) nor a DNS name \
         (its last label is a number)"
    )]
    NumericName(String),
}

/// The host part of an allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// One DNS name (lower case, no trailing dot).
    Name(String),
    /// `*.suffix`: any name of exactly one more label than `suffix` (lower case).
    Wildcard(String),
    /// A literal IP address.
    Ip(IpAddr),
}

/// One entry of `sandbox.network.allow`: `scheme://host[:port]`, where host is a DNS name, a
/// one-label wildcard `*.example.org` or a literal IP (`[v6]` in brackets). The port defaults to
/// the scheme's. Written back by `Display` in canonical form (lower case, the port always
/// shown).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OriginPattern {
    /// Scheme the request must use.
    pub scheme: HttpScheme,
    /// Host the request must name.
    pub host: HostPattern,
    /// Port the request must use.
    pub port: u16,
}

impl OriginPattern {
    /// Parses an allow-list entry. The error says what is wrong and what is allowed (the
    /// configuration adds the file location).
    pub fn parse(text: &str) -> Result<Self, OriginError> {
        let bad = |problem: OriginProblem| OriginError {
            text: text.to_owned(),
            problem,
        };
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad(OriginProblem::NoScheme));
        };
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => HttpScheme::Http,
            "https" => HttpScheme::Https,
            _ => return Err(bad(OriginProblem::BadScheme)),
        };
        // A bare trailing slash is the empty path: accepted.
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(bad(OriginProblem::PathQueryOrFragment));
        }
        if authority.contains('@') {
            return Err(bad(OriginProblem::UserInfo));
        }
        if authority.is_empty() {
            return Err(bad(OriginProblem::NoHost));
        }
        let (host, port) = split_host_port(authority).map_err(bad)?;
        let port = match port {
            None => scheme.default_port(),
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(bad(OriginProblem::BadPort)),
            },
        };
        let host = parse_host(host).map_err(bad)?;
        Ok(OriginPattern { scheme, host, port })
    }

    /// Whether a request to `scheme://host:port` matches this entry. An IP host matches only an
    /// IP entry of the same address; a name matches only a name or wildcard entry (names are
    /// compared in the canonical form of [`RequestHost::parse`]).
    pub fn matches(&self, scheme: HttpScheme, host: &RequestHost, port: u16) -> bool {
        if scheme != self.scheme || port != self.port {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(name), RequestHost::Name(host)) => name == host,
            (HostPattern::Wildcard(suffix), RequestHost::Name(host)) => host
                .strip_suffix(suffix.as_str())
                .and_then(|label| label.strip_suffix('.'))
                .is_some_and(|label| !label.is_empty() && !label.contains('.')),
            (HostPattern::Ip(ip), RequestHost::Ip(host)) => ip == host,
            _ => false,
        }
    }

    /// Whether this entry names `host` exactly (a name or IP literal, not a wildcard): only such
    /// an entry lets a request reach a loopback, private or otherwise special address.
    pub fn names_exactly(&self, host: &RequestHost) -> bool {
        match (&self.host, host) {
            (HostPattern::Name(name), RequestHost::Name(host)) => name == host,
            (HostPattern::Ip(ip), RequestHost::Ip(host)) => ip == host,
            _ => false,
        }
    }
}

/// The host of an outgoing request, checked and in canonical form: what the allow-list is
/// matched against, what the connection pool is keyed by and what is connected to. See
/// [`docs/security.md`](../../../docs/security.md#network).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestHost {
    /// An IP literal: dotted IPv4 (four decimal numbers, as written by the allow entries) or
    /// `[IPv6]`.
    Ip(IpAddr),
    /// A DNS name: lower case, without the trailing dot of a fully qualified name.
    Name(String),
}

impl RequestHost {
    /// Checks the host of a request URL. `example.org.` is the name `example.org`; a host that
    /// is not an IP literal and whose last label is a number (`127.0.0.1.`, `127.1`,
    /// `2130706433`, `0x7f.1`) is refused: it is not a DNS name, and the system resolver would
    /// read it as an address. The error says why (for the attempt's log).
    pub fn parse(host: &str) -> Result<Self, HostError> {
        if host.starts_with('[') {
            return parse_ip(host)
                .map(RequestHost::Ip)
                .ok_or_else(|| HostError::NotIpv6(host.to_owned()));
        }
        if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
            return Ok(RequestHost::Ip(IpAddr::V4(ip)));
        }
        let name = normalise_name(host);
        if name.is_empty() || name.split('.').any(str::is_empty) {
            return Err(HostError::EmptyLabel(host.to_owned()));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(HostError::BadCharacter(host.to_owned()));
        }
        if numeric_last_label(&name) {
            return Err(HostError::NumericName(host.to_owned()));
        }
        Ok(RequestHost::Name(name))
    }
}

impl fmt::Display for RequestHost {
    /// The host as written in a URL authority: `[v6]` in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestHost::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            RequestHost::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            RequestHost::Name(n) => f.write_str(n),
        }
    }
}

/// Whether the last label of `name` is a number the system resolver would read as (part of) an
/// IPv4 address: decimal digits, or `0x` and hex digits.
fn numeric_last_label(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    let digits = last.strip_prefix("0x").map_or((last, 10), |hex| (hex, 16));
    !last.is_empty() && digits.0.chars().all(|c| c.is_digit(digits.1))
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme.as_str())?;
        match &self.host {
            HostPattern::Name(n) => write!(f, "{n}")?,
            HostPattern::Wildcard(s) => write!(f, "*.{s}")?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        write!(f, ":{}", self.port)
    }
}

impl Serialize for OriginPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OriginPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        OriginPattern::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Lower case, without one trailing dot; IPv6 brackets kept.
fn normalise_name(host: &str) -> String {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// An IP literal (`[v6]` in brackets, or dotted v4).
fn parse_ip(host: &str) -> Option<IpAddr> {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse().ok().map(IpAddr::V6);
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), OriginProblem> {
    if authority.starts_with('[') {
        let Some(end) = authority.find(']') else {
            return Err(OriginProblem::UnclosedIpv6);
        };
        let (host, rest) = authority.split_at(end + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(p) => Ok((host, Some(p))),
                None => Err(OriginProblem::AfterIpv6),
            },
        };
    }
    Ok(match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    })
}

fn parse_host(host: &str) -> Result<HostPattern, OriginProblem> {
    if host.starts_with('[') {
        return parse_ip(host)
            .map(HostPattern::Ip)
            .ok_or_else(|| OriginProblem::NotIpv6(host.to_owned()));
    }
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return Ok(HostPattern::Ip(IpAddr::V4(ip)));
    }
    let name = normalise_name(host);
    if numeric_last_label(&name) {
        return Err(OriginProblem::NumericName(host.to_owned()));
    }
    let (wildcard, rest) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name.as_str()),
    };
    if rest.contains('*') || (!wildcard && name.contains('*')) {
        return Err(OriginProblem::WildcardPlacement);
    }
    if rest.is_empty() {
        return Err(OriginProblem::NoHost);
    }
    for label in rest.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(OriginProblem::BadLabel(label.to_owned()));
        }
    }
    if wildcard {
        if !rest.contains('.') {
            return Err(OriginProblem::ShortWildcard);
        }
        Ok(HostPattern::Wildcard(rest.to_string()))
    } else {
        Ok(HostPattern::Name(rest.to_string()))
    }
}

/// Whether `ip` lies in a range a request may reach only when its allow
/// entry names that exact host or IP literal (docs/security.md#network): loopback,
/// private, link-local and cloud metadata, CGNAT, multicast, documentation,
/// reserved; IPv4 and IPv6, including IPv4 embedded in IPv6.
pub fn is_special_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_special_v4(v4),
        IpAddr::V6(v6) => is_special_v6(v6),
    }
}

fn is_special_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0                                   // "this network" 0.0.0.0/8
        || a == 10                           // private 10/8
        || a == 127                          // loopback 127/8
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254)            // link-local, incl. metadata 169.254.169.254
        || (a == 172 && (16..32).contains(&b)) // private 172.16/12
        || (a == 192 && b == 0 && c == 0)    // IETF assignments 192.0.0/24 (some metadata services)
        || (a == 192 && b == 0 && c == 2)    // documentation 192.0.2/24
        || (a == 192 && b == 88 && c == 99)  // 6to4 relay anycast
        || (a == 192 && b == 168)            // private 192.168/16
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113)  // documentation
        || a >= 224 // multicast 224/4, reserved 240/4, broadcast
}

fn is_special_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_v4(ip) {
        return is_special_v4(v4);
    }
    let s = ip.segments();
    ip.is_unspecified()
        || ip.is_loopback()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7 (incl. fd00:ec2::254 metadata)
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
        || (s[0] & 0xff00) == 0xff00 // multicast ff00::/8
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation 2001:db8::/32
        || (s[0] == 0x0100 && s[1] == 0 && s[2] == 0 && s[3] == 0) // discard 100::/64
        || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments 2001::/23 (Teredo, ...)
        || s[0] < 0x2000 // everything outside global unicast 2000::/3
        || s[0] >= 0x4000
}

/// The IPv4 address carried by an IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) or 6to4
/// (`2002:ab:cd::/16`) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(tail(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return Some(tail(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(tail(s[1], s[2]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> OriginPattern {
        OriginPattern::parse(s).expect(s)
    }

    #[test]
    fn entries_parse_to_canonical_origins() {
        assert_eq!(
            p("https://API.example.com").to_string(),
            "https://api.example.com:443"
        );
        assert_eq!(
            p("https://*.example.org:8443").to_string(),
            "https://*.example.org:8443"
        );
        assert_eq!(
            p("http://127.0.0.1:18080/").to_string(),
            "http://127.0.0.1:18080"
        );
        assert_eq!(p("http://[::1]").to_string(), "http://[::1]:80");
    }

    #[test]
    fn bad_entries_say_why() {
        let why = |s: &str| OriginPattern::parse(s).expect_err(s).to_string();
        assert!(why("api.example.com").ends_with("it has no scheme (http:// or https://)"));
        assert!(why("ftp://x.org").ends_with("the scheme must be http or https"));
        assert!(why("https://x.org/v1").contains("path, query or fragment"));
        assert!(why("https://x.org?a=1").contains("path, query or fragment"));
        assert!(why("https://x.org#f").contains("path, query or fragment"));
        assert!(why("https://a.*.org").contains("whole first label"));
        assert!(why("https://*x.org").contains("whole first label"));
        assert!(why("https://*.org").contains("at least two labels"));
        assert!(why("https://x.org:0").contains("port must be a number"));
        assert!(why("https://x.org:99999").contains("port must be a number"));
        assert!(why("https://u@x.org").contains("user information"));
        assert!(why("https://").contains("no host"));
        assert!(why("https://bad_name.org").contains("not a DNS label"));
    }

    fn h(s: &str) -> RequestHost {
        RequestHost::parse(s).expect(s)
    }

    #[test]
    fn matching_is_by_scheme_host_and_port() {
        let e = p("https://api.example.com");
        assert!(e.matches(HttpScheme::Https, &h("API.example.com."), 443));
        assert!(!e.matches(HttpScheme::Http, &h("api.example.com"), 443));
        assert!(!e.matches(HttpScheme::Https, &h("api.example.com"), 8443));
        assert!(!e.matches(HttpScheme::Https, &h("x.api.example.com"), 443));
        let w = p("https://*.example.org:8443");
        assert!(w.matches(HttpScheme::Https, &h("a.example.org"), 8443));
        assert!(w.matches(HttpScheme::Https, &h("A.Example.org."), 8443));
        assert!(!w.matches(HttpScheme::Https, &h("a.b.example.org"), 8443));
        assert!(!w.matches(HttpScheme::Https, &h("example.org"), 8443));
        assert!(!w.matches(HttpScheme::Https, &h("aexample.org"), 8443));
        assert!(!w.names_exactly(&h("a.example.org")));
        let ip = p("http://[::1]:8080");
        assert!(ip.matches(HttpScheme::Http, &h("[::1]"), 8080));
        assert!(ip.names_exactly(&h("[0:0::1]")));
    }

    #[test]
    fn an_ip_with_a_trailing_dot_is_not_an_ip_literal_and_matches_nothing() {
        let ip = p("http://127.0.0.1:8080");
        assert!(ip.matches(HttpScheme::Http, &h("127.0.0.1"), 8080));
        for host in [
            "127.0.0.1.",
            "127.1",
            "2130706433",
            "0x7f.1",
            "0x7f000001",
            "1.2.3.4..",
            "127%2e0%2e0%2e1",
        ] {
            let why = RequestHost::parse(host).expect_err(host).to_string();
            assert!(why.contains(&format!("{host:?} is n")), "{host}: {why}");
        }
        assert!(
            RequestHost::parse("127.0.0.1.")
                .expect_err("trailing dot")
                .to_string()
                .ends_with("neither an IP literal (dotted IPv4 or [IPv6], no trailing dot) nor a DNS name (its last label is a number)")
        );
        // A name that looks like an IP never matches an IP entry, an IP never a name entry.
        let name = p("http://localhost:8080");
        assert!(!name.matches(HttpScheme::Http, &h("127.0.0.1"), 8080));
        assert!(!ip.matches(HttpScheme::Http, &h("localhost"), 8080));
        // Names keep working with their fully qualified spelling, in canonical form.
        assert_eq!(h("Example.ORG."), RequestHost::Name("example.org".into()));
        assert_eq!(h("[0:0::1]").to_string(), "[::1]");
        assert_eq!(h("1password.com").to_string(), "1password.com");
        // Entries follow the same rule.
        assert!(
            OriginPattern::parse("http://127.1")
                .expect_err("127.1")
                .to_string()
                .contains("last label is a number")
        );
        assert!(OriginPattern::parse("https://*.0.0.1").is_err());
    }
}
