//! Addresses: descriptor parsing and choosing an interface address to
//! publish instead of a wildcard.

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why no interface address could be found.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LocalIpError(pub String);

/// Parses the address part of a `udp:` descriptor: `IP:PORT` or
/// `[IPv6]:PORT`. Wildcard addresses and port 0 are refused, since nobody
/// can send to them.
pub fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text.parse().map_err(|_| {
        format!("{text:?} is not IP:PORT or [IPv6]:PORT (e.g. 10.0.0.2:7000, [fd00::2]:7000)")
    })?;
    if addr.ip().is_unspecified() {
        return Err(format!(
            "{text:?} is a wildcard address; a peer must be given an interface address"
        ));
    }
    if addr.port() == 0 {
        return Err(format!("{text:?} has port 0"));
    }
    Ok(addr)
}

/// An address of this host that peers can reach, of the same family as
/// `like`: the first address of an interface that is up and not a loopback
/// (global IPv6 addresses before link-local ones), else the loopback address.
///
/// Interfaces are read from the calling thread's network namespace.
pub fn local_ip(like: IpAddr) -> Result<IpAddr, LocalIpError> {
    let addrs = getifaddrs()
        .map_err(|e| LocalIpError(format!("cannot list the interfaces (getifaddrs): {e}")))?;
    let mut link_local = None;
    for ifa in addrs {
        let flags = ifa.flags;
        if !flags.contains(InterfaceFlags::IFF_UP) || flags.contains(InterfaceFlags::IFF_LOOPBACK) {
            continue;
        }
        let Some(sa) = ifa.address else { continue };
        match like {
            IpAddr::V4(_) => {
                if let Some(v4) = sa.as_sockaddr_in() {
                    return Ok(IpAddr::V4(v4.ip()));
                }
            }
            IpAddr::V6(_) => {
                if let Some(v6) = sa.as_sockaddr_in6() {
                    let ip = v6.ip();
                    if (ip.segments()[0] & 0xffc0) == 0xfe80 {
                        link_local.get_or_insert(ip);
                    } else {
                        return Ok(IpAddr::V6(ip));
                    }
                }
            }
        }
    }
    if let Some(ip) = link_local {
        return Ok(IpAddr::V6(ip));
    }
    Ok(match like {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_addresses_parse_and_wildcards_are_refused() {
        assert_eq!(
            parse_address("10.0.0.2:7000").unwrap(),
            "10.0.0.2:7000".parse().unwrap()
        );
        assert_eq!(
            parse_address("[fd00::2]:7000").unwrap(),
            "[fd00::2]:7000".parse().unwrap()
        );
        assert!(parse_address("0.0.0.0:7000")
            .unwrap_err()
            .contains("wildcard"));
        assert!(parse_address("[::]:7000").unwrap_err().contains("wildcard"));
        assert!(parse_address("10.0.0.2:0").unwrap_err().contains("port 0"));
        assert!(parse_address("10.0.0.2").unwrap_err().contains("IP:PORT"));
        assert!(parse_address("fd00::2:7000").is_err());
    }

    #[test]
    fn local_ip_is_never_a_wildcard() {
        let v4 = local_ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).unwrap();
        assert!(v4.is_ipv4() && !v4.is_unspecified());
        let v6 = local_ip(IpAddr::V6(Ipv6Addr::UNSPECIFIED)).unwrap();
        assert!(v6.is_ipv6() && !v6.is_unspecified());
    }
}
