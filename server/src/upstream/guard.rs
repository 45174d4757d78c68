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
/// for a public address. IPv6 forms that embed an IPv4 address (mapped `::ffff:a.b.c.d`,
/// NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by that address.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        // 169.254.169.254 is the metadata endpoint of most clouds.
        Some("link-local")
    } else if a == 0 {
        // 0.0.0.0/8 ("this network"); 0.0.0.0 itself reaches the local host on Linux.
        Some("unspecified")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else if a == 100 && (64..128).contains(&b) {
        // 100.64.0.0/10, shared address space: provider-internal (some clouds' metadata).
        Some("shared (carrier-grade NAT)")
    } else if ip.is_multicast() {
        Some("multicast")
    } else {
        None
    }
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if let Some(v4) = ip.to_ipv4_mapped() {
        v4_class(v4)
    } else if s[0] & 0xfe00 == 0xfc00 {
        Some("private (unique local)")
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if s[0] & 0xffc0 == 0xfec0 {
        Some("site-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        v4_class(embedded_v4(s[6], s[7]))
    } else if s[0] == 0x2002 {
        v4_class(embedded_v4(s[1], s[2]))
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
pub(super) async fn resolve(
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
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
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
            ("2002:c0a8:101::1", "private"),
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
            "2002:808:808::1",
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
