//! The caller's address: the connection's peer, or, when that peer is one of the operator's
//! `APERTURE_TRUSTED_PROXIES` (addresses and CIDR ranges), the address that proxy says it
//! forwarded for (`X-Forwarded-For`, read from the right: the last address no trusted proxy
//! added). A client that is not behind a trusted proxy cannot choose its own address by sending
//! the header.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;

pub use aperture_core::config::Cidr;
use aperture_core::config::canonical_ip as canonical;

pub use aperture_core::sign_in::{ClientAddr, address_key};

/// The client behind `peer`, given the `X-Forwarded-For` values of the request.
pub fn client_address<'a>(
    peer: IpAddr,
    forwarded_for: impl Iterator<Item = &'a str>,
    trusted: &[Cidr],
) -> IpAddr {
    let peer = canonical(peer);
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    // Every header line, every comma-separated hop, left to right; walk from the right.
    let hops: Vec<&str> = forwarded_for
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Ok(ip) = hop.parse::<IpAddr>() else {
            // Garbage from beyond the trusted proxies ends the walk at the last good address.
            break;
        };
        client = canonical(ip);
        if !is_trusted(client) {
            break;
        }
    }
    client
}

/// Middleware: puts [`ClientAddr`] in the request's extensions.
pub async fn remember_client(
    trusted: std::sync::Arc<[Cidr]>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(ConnectInfo(peer)) = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .copied()
    {
        let forwarded = request
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok());
        let client = client_address(peer.ip(), forwarded, &trusted);
        request.extensions_mut().insert(ClientAddr(client));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_parse_and_match() {
        let net = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(net.contains(ip("10.200.1.1")));
        assert!(net.contains(ip("::ffff:10.0.0.1")));
        assert!(!net.contains(ip("11.0.0.1")));
        let one = Cidr::parse("203.0.113.7").unwrap();
        assert!(one.contains(ip("203.0.113.7")));
        assert!(!one.contains(ip("203.0.113.8")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        for bad in ["", "10.0.0.0/33", "::/129", "example.com", "10.0.0.0/x"] {
            assert_eq!(Cidr::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn ipv6_addresses_count_per_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(address_key(ip("203.0.113.7")), "203.0.113.7");
        assert_ne!(
            address_key(ip("203.0.113.7")),
            address_key(ip("203.0.113.8"))
        );
        assert_eq!(address_key(ip("::ffff:203.0.113.7")), "203.0.113.7");
        assert_eq!(
            address_key(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            address_key(ip("2001:db8:1:2::1")),
            address_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"))
        );
        assert_ne!(
            address_key(ip("2001:db8:1:2::1")),
            address_key(ip("2001:db8:1:3::1"))
        );
    }

    #[test]
    fn forwarded_for_counts_only_behind_a_trusted_proxy() {
        let trusted = [
            Cidr::parse("127.0.0.1").unwrap(),
            Cidr::parse("10.0.0.0/8").unwrap(),
        ];
        // Not behind a trusted proxy: the header is the client's own claim, ignored.
        assert_eq!(
            client_address(ip("198.51.100.9"), ["1.2.3.4"].into_iter(), &trusted),
            ip("198.51.100.9")
        );
        // Behind one: the address it saw.
        assert_eq!(
            client_address(ip("127.0.0.1"), ["198.51.100.9"].into_iter(), &trusted),
            ip("198.51.100.9")
        );
        // A client that sends its own header before the proxy appends: the rightmost hop that
        // no trusted proxy added.
        assert_eq!(
            client_address(
                ip("127.0.0.1"),
                ["6.6.6.6, 198.51.100.9", "10.1.1.1"].into_iter(),
                &trusted
            ),
            ip("198.51.100.9")
        );
        assert_eq!(
            client_address(
                ip("127.0.0.1"),
                ["garbage, 198.51.100.9"].into_iter(),
                &trusted
            ),
            ip("198.51.100.9")
        );
        assert_eq!(
            client_address(ip("127.0.0.1"), std::iter::empty(), &trusted),
            ip("127.0.0.1")
        );
        assert_eq!(
            client_address(
                ip("::ffff:127.0.0.1"),
                ["198.51.100.9"].into_iter(),
                &trusted
            ),
            ip("198.51.100.9")
        );
    }
}
