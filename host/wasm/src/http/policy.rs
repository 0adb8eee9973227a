//! Which addresses a request may connect to: the special ranges (loopback,
//! private, link-local and cloud metadata, CGNAT, multicast, documentation,
//! reserved; IPv4 and IPv6, including IPv4 embedded in IPv6) that are refused
//! unless the allow entry names the host exactly. See
//! `docs/security.md#network`.

use std::net::IpAddr;

/// Whether `ip` lies in a range a request may reach only when its allow
/// entry names that exact host or IP literal (core's rule, shared with the
/// API's completion webhooks).
pub(crate) fn is_special(ip: IpAddr) -> bool {
    onestep_core::network::is_special_address(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn special(s: &str) -> bool {
        is_special(s.parse().expect(s))
    }

    #[test]
    fn special_ranges_are_refused() {
        for s in [
            "127.0.0.1",
            "127.9.9.9",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "192.0.0.192",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2001:db8::1",
        ] {
            assert!(special(s), "{s} must be special");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "172.15.0.1",
            "172.32.0.1",
            "100.63.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
        ] {
            assert!(!special(s), "{s} must be public");
        }
    }
}
