//! A callback URL checked against `api.callbacks.allow` with the rules of `sandbox.network`
//! (docs/security.md#network): the origin must match an entry; every address its host resolves
//! to that is loopback, private, link-local, metadata or otherwise special is refused unless
//! the entry names that host exactly (no wildcard). Checked at submit and again before every
//! delivery, which connects only to the addresses that passed.

use std::net::{IpAddr, SocketAddr};

use axum::http::Uri;
use onestep_core::callback::MAX_CALLBACK_URL_CHARS;
use onestep_core::network::{HttpScheme, OriginPattern, RequestHost, is_special_address};

/// A callback URL whose origin is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackTarget {
    /// `http` or `https`.
    pub scheme: HttpScheme,
    /// The canonical host.
    pub host: RequestHost,
    /// The port (the scheme's by default).
    pub port: u16,
    /// The path and query sent (`/` when empty).
    pub path_and_query: String,
    /// Whether the matching entry names the host exactly (special addresses allowed).
    pub exact: bool,
}

impl CallbackTarget {
    /// The `Host` header value.
    pub fn authority(&self) -> String {
        if self.port == self.scheme.default_port() {
            self.host.to_string()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Parses `url` and matches its origin against `allow`. The error says what is wrong.
pub fn check_url(url: &str, allow: &[OriginPattern]) -> Result<CallbackTarget, String> {
    if url.chars().count() > MAX_CALLBACK_URL_CHARS {
        return Err(format!(
            "callback.url must be at most {MAX_CALLBACK_URL_CHARS} characters"
        ));
    }
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("callback.url is not a valid URL: {e}"))?;
    let scheme = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http") => HttpScheme::Http,
        Some("https") => HttpScheme::Https,
        _ => return Err("callback.url must be an absolute http:// or https:// URL".into()),
    };
    let Some(authority) = uri.authority() else {
        return Err("callback.url must name a host".into());
    };
    if authority.as_str().contains('@') {
        return Err("callback.url must not carry user information (user:password@)".into());
    }
    let host = RequestHost::parse(authority.host())
        .map_err(|e| format!("callback.url has a bad host: {e}"))?;
    let port = authority.port_u16().unwrap_or(scheme.default_port());
    let Some(entry) = allow.iter().find(|p| p.matches(scheme, &host, port)) else {
        return Err(format!(
            "callback.url origin {}://{}:{port} is not in api.callbacks.allow",
            scheme.as_str(),
            host
        ));
    };
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    Ok(CallbackTarget {
        exact: entry.names_exactly(&host),
        scheme,
        host,
        port,
        path_and_query: if path_and_query.is_empty() {
            "/".into()
        } else {
            path_and_query
        },
    })
}

/// The addresses of `resolved` a delivery may connect to: all when the entry names the host
/// exactly, else the public ones; an error when none is left.
pub fn vet(target: &CallbackTarget, resolved: Vec<IpAddr>) -> Result<Vec<SocketAddr>, String> {
    if resolved.is_empty() {
        return Err(format!("callback host {} did not resolve", target.host));
    }
    let kept: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|ip| target.exact || !is_special_address(*ip))
        .map(|ip| SocketAddr::new(ip, target.port))
        .collect();
    if kept.is_empty() {
        return Err(format!(
            "callback host {} resolves only to private or special addresses (loopback, \
             private, link-local, metadata …); an api.callbacks.allow entry naming the host \
             exactly (not a wildcard) is required for those",
            target.host
        ));
    }
    Ok(kept)
}

/// Resolves the target's host (an IP literal is itself) and [`vet`]s the addresses.
pub async fn resolve(target: &CallbackTarget) -> Result<Vec<SocketAddr>, String> {
    let ips = match &target.host {
        RequestHost::Ip(ip) => vec![*ip],
        RequestHost::Name(name) => tokio::net::lookup_host((name.as_str(), target.port))
            .await
            .map_err(|e| format!("callback host {name} did not resolve: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    vet(target, ips)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(entries: &[&str]) -> Vec<OriginPattern> {
        entries
            .iter()
            .map(|e| OriginPattern::parse(e).unwrap())
            .collect()
    }

    #[test]
    fn origins_outside_the_allow_list_are_refused() {
        let a = allow(&["https://hooks.example.com", "http://127.0.0.1:8080"]);
        let t = check_url("https://hooks.example.com/in?x=1", &a).unwrap();
        assert_eq!(t.path_and_query, "/in?x=1");
        assert_eq!(t.port, 443);
        assert!(t.exact);
        assert_eq!(t.authority(), "hooks.example.com");
        let e = check_url("https://evil.example.com/", &a).unwrap_err();
        assert!(e.contains("not in api.callbacks.allow"), "{e}");
        let e = check_url("http://hooks.example.com/", &a).unwrap_err();
        assert!(e.contains("http://hooks.example.com:80"), "{e}");
        assert!(check_url("http://127.0.0.1:8080", &a).is_ok());
        assert!(check_url("http://127.0.0.1:8081/", &a).is_err());
        assert!(check_url("ftp://hooks.example.com/", &a).is_err());
        assert!(check_url("/relative", &a).is_err());
        assert!(check_url("https://u:p@hooks.example.com/", &a).is_err());
        assert!(
            check_url(
                &format!("https://hooks.example.com/{}", "a".repeat(3000)),
                &a
            )
            .is_err()
        );
    }

    #[test]
    fn special_addresses_need_an_exact_entry() {
        let a = allow(&["https://*.example.com", "https://exact.example.org"]);
        let wild = check_url("https://x.example.com/", &a).unwrap();
        assert!(!wild.exact);
        let private: IpAddr = "10.0.0.7".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let e = vet(&wild, vec![private]).unwrap_err();
        assert!(
            e.contains("resolves only to private or special addresses"),
            "{e}"
        );
        let kept = vet(&wild, vec![private, public]).unwrap();
        assert_eq!(kept, vec![SocketAddr::new(public, 443)]);
        let exact = check_url("https://exact.example.org/", &a).unwrap();
        assert_eq!(vet(&exact, vec![private]).unwrap().len(), 1);
        assert!(vet(&exact, vec![]).is_err());
    }
}
