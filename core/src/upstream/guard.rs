//! The SSRF guard (CONTRACT §11): an upstream registered over the API must not make the gateway
//! reach its own host or network (loopback, private and link-local addresses, cloud metadata
//! endpoints) unless the operator allowed it (`APERTURE_ALLOW_PRIVATE_UPSTREAMS=1`).
//!
//! [`check_url`] runs at registration and before every connection; the HTTP client of a guarded
//! [`Connector`](super::Connector) also resolves every connection it opens with [`resolve`], so
//! a name that resolved to a public address at registration and to a private one later (DNS
//! rebinding) is still refused.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use upstream_reqwest::Url;

use super::UpstreamError;

/// Checks a URL an upstream is registered with: only `http` and `https`; and, unless
/// `allow_private`, the host (an IP literal, or every address its name resolves to) must be
/// public. Names are resolved with the system resolver (`tokio::net::lookup_host`).
pub async fn check_url(url: &str, allow_private: bool) -> Result<(), UpstreamError> {
    let refused = |reason: String| UpstreamError::UrlRefused { reason };
    let parsed = Url::parse(url).map_err(|e| refused(format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(refused(format!(
            "the scheme is `{}`, not http or https",
            parsed.scheme()
        )));
    }
    // The URL parser has already turned `http://2130706433/` and `http://0x7f.1/` into
    // `127.0.0.1`, so literal addresses cannot hide behind another spelling.
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| refused("the URL has no host".into()))?;
    if allow_private {
        return Ok(());
    }
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let port = parsed.port_or_known_default().unwrap_or(443);
    match resolve(literal, port, true).await {
        Ok(addresses) if !addresses.is_empty() => {}
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(refused(e.to_string()));
        }
        _ => return Err(refused(format!("`{host}` does not resolve"))),
    }
    Ok(())
}

/// Why the gateway must not connect to `ip` on an API-registered upstream's behalf, or `None`
/// for a public address. Every range of the IANA IPv4 and IPv6 Special-Purpose Address
/// Registries is refused (also the few the registries call globally reachable, such as the
/// anycast and AS112 ranges: no MCP server lives there), and so are multicast, IPv4's reserved
/// `240.0.0.0/4` and every IPv6 address outside global unicast `2000::/3`. IPv6 forms that carry
/// an IPv4 address the network translates (mapped `::ffff:a.b.c.d`, NAT64's well-known
/// `64:ff9b::/96`, which DNS64 resolvers answer with on IPv6-only hosts) are judged by that
/// address; the deprecated IPv4-compatible (`::a.b.c.d`), 6to4 and Teredo forms are refused.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

/// `ip` is in `net/len`.
fn in_v4(ip: Ipv4Addr, net: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

/// `ip` is in `net/len`.
fn in_v6(ip: Ipv6Addr, net: [u16; 8], len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(ip) & mask == u128::from(Ipv6Addr::from(net)) & mask
}

/// The IANA IPv4 Special-Purpose Address Registry (as of 2026), and multicast.
const V4_SPECIAL: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 8, "unspecified (this network)"),
    ([10, 0, 0, 0], 8, "private"),
    ([100, 64, 0, 0], 10, "shared (carrier-grade NAT)"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local"),
    ([172, 16, 0, 0], 12, "private"),
    ([192, 0, 0, 0], 24, "IETF protocol assignment"),
    ([192, 0, 2, 0], 24, "documentation"),
    ([192, 31, 196, 0], 24, "AS112"),
    ([192, 52, 193, 0], 24, "AMT"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast"),
    ([192, 168, 0, 0], 16, "private"),
    ([192, 175, 48, 0], 24, "AS112"),
    ([198, 18, 0, 0], 15, "benchmarking"),
    ([198, 51, 100, 0], 24, "documentation"),
    ([203, 0, 113, 0], 24, "documentation"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([255, 255, 255, 255], 32, "broadcast"),
    ([240, 0, 0, 0], 4, "reserved"),
];

/// The IANA IPv6 Special-Purpose Address Registry (as of 2026) inside and around `2000::/3`;
/// everything else outside `2000::/3` is refused as not global unicast.
const V6_SPECIAL: &[([u16; 8], u32, &str)] = &[
    ([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "Teredo"),
    (
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignment",
    ),
    ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    ([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4"),
    ([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "AS112"),
    ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
    ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "segment routing"),
    (
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "local-use IPv4/IPv6 translation",
    ),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
    ([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "dummy prefix"),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "private (unique local)"),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    ([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local"),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
];

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    V4_SPECIAL
        .iter()
        .find(|(net, len, _)| in_v4(ip, *net, *len))
        .map(|(_, _, class)| *class)
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if let Some(v4) = ip.to_ipv4_mapped() {
        v4_class(v4)
    } else if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        v4_class(embedded_v4(s[6], s[7]))
    } else if let Some((_, _, class)) = V6_SPECIAL
        .iter()
        .find(|(net, len, _)| in_v6(ip, *net, *len))
    {
        Some(class)
    } else if in_v6(ip, [0, 0, 0, 0, 0, 0, 0, 0], 96) {
        Some("IPv4-compatible (deprecated)")
    } else if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        Some("not global unicast")
    } else {
        None
    }
}

fn embedded_v4(high: u16, low: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(high) << 16) | u32::from(low))
}

/// The addresses to connect to for `host` (a name or an IP literal) and `port`, as the system
/// resolves them. When `public_only`, the host is refused if any of its addresses is not public
/// (a client could connect to any of them).
pub(crate) async fn resolve(
    host: &str,
    port: u16,
    public_only: bool,
) -> io::Result<Vec<SocketAddr>> {
    let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port)).await?.collect(),
    };
    if public_only && let Some(class) = addresses.iter().find_map(|a| address_class(a.ip())) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{host}` is a {class} address; upstreams must be public unless \
                 APERTURE_ALLOW_PRIVATE_UPSTREAMS=1"
            ),
        ));
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(ip: &str) -> Option<&'static str> {
        address_class(ip.parse().unwrap())
    }

    #[test]
    fn internal_addresses_are_classified() {
        for (ip, expected) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified (this network)"),
            ("0.1.2.3", "unspecified (this network)"),
            ("255.255.255.255", "broadcast"),
            ("100.100.100.200", "shared (carrier-grade NAT)"),
            ("224.0.0.1", "multicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "private (unique local)"),
            ("fd00:ec2::254", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::a00:1", "private"),
            ("2002:c0a8:101::1", "6to4"),
            ("2002:808:808::1", "6to4"),
            // Issue 24: what passed before.
            ("::127.0.0.1", "IPv4-compatible (deprecated)"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("192.0.0.9", "IETF protocol assignment"),
            ("192.0.2.1", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.7", "documentation"),
            ("192.31.196.1", "AS112"),
            ("192.52.193.1", "AMT"),
            ("192.88.99.1", "6to4 relay anycast"),
            ("192.175.48.1", "AS112"),
            ("240.0.0.1", "reserved"),
            ("239.255.255.250", "multicast"),
            ("::ffff:198.18.0.1", "benchmarking"),
            ("64:ff9b::c612:1", "benchmarking"),
            ("64:ff9b:1::808:808", "local-use IPv4/IPv6 translation"),
            ("100::1", "discard-only"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("2001:1::1", "IETF protocol assignment"),
            ("2001:2::1", "IETF protocol assignment"),
            ("2001:20::1", "IETF protocol assignment"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2620:4f:8000::1", "AS112"),
            ("5f00::1", "segment routing"),
            ("::ffff:0:7f00:1", "not global unicast"),
            ("4000::1", "not global unicast"),
            ("1::1", "not global unicast"),
        ] {
            assert_eq!(class(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2a00:1450:4001:80b::200e",
            "2001:4860:4860::8888",
            "2001:200::1",
            "192.0.1.1",
            "198.20.0.1",
            "223.255.255.1",
        ] {
            assert_eq!(class(ip), None, "{ip}");
        }
    }

    #[tokio::test]
    async fn urls_with_internal_literals_are_refused() {
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://[::1]/mcp",
            "https://169.254.169.254/latest/meta-data",
            "http://10.0.0.5/",
            "http://[fd12::1]:9000/",
            "http://[::ffff:192.168.0.1]/",
            "http://0.0.0.0/",
            // Other spellings of 127.0.0.1 the URL parser normalizes.
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
        ] {
            let err = check_url(url, false).await.unwrap_err();
            assert!(
                matches!(err, UpstreamError::UrlRefused { .. }),
                "{url}: {err}"
            );
            // The operator's switch lets them through.
            check_url(url, true).await.unwrap();
        }
    }

    #[tokio::test]
    async fn connections_refuse_names_and_literals_of_internal_addresses() {
        // `localhost` comes from the hosts file, so no network is needed.
        for host in ["localhost", "127.0.0.1", "::1"] {
            let err = resolve(host, 80, true).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{host}");
            assert!(err.to_string().contains("loopback"), "{host}: {err}");
            // The operator's switch lets them through.
            let addresses = resolve(host, 80, false).await.unwrap();
            assert!(
                addresses
                    .iter()
                    .all(|a| a.ip().is_loopback() && a.port() == 80)
            );
        }
        assert_eq!(
            resolve("8.8.8.8", 443, true).await.unwrap(),
            vec!["8.8.8.8:443".parse().unwrap()]
        );
    }

    #[tokio::test]
    async fn only_http_and_https_are_accepted() {
        check_url("https://8.8.8.8/mcp", false).await.unwrap();
        check_url("http://[2606:4700:4700::1111]:8080/", false)
            .await
            .unwrap();
        for url in [
            "file:///etc/passwd",
            "ftp://8.8.8.8/",
            "gopher://8.8.8.8/",
            "unix:/run/mcp.sock",
            "no url",
        ] {
            for allow_private in [false, true] {
                assert!(
                    matches!(
                        check_url(url, allow_private).await,
                        Err(UpstreamError::UrlRefused { .. })
                    ),
                    "{url}"
                );
            }
        }
    }
}
