//! Which addresses a request may connect to: the special ranges (loopback,
//! private, link-local and cloud metadata, CGNAT, multicast, documentation,
//! reserved; IPv4 and IPv6, including IPv4 embedded in IPv6) that are refused
//! unless the allow entry names the host exactly. See
//! `docs/security.md#network`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` lies in a range a request may reach only when its allow entry
/// names that exact host or IP literal.
pub(crate) fn is_special(ip: IpAddr) -> bool {
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
