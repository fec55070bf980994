//! One rtnetlink question: "tell me about interface NAME" (`RTM_GETLINK`),
//! answered in the calling thread's network namespace. It gives the
//! interface index, MAC, MTU, up/down state, queue counts and which XDP
//! program (if any) is attached, without reading sysfs (whose view belongs
//! to the namespace that mounted it, not to the calling thread).
//!
//! Every length in the kernel's answer is checked before it is used.

use std::io;
use std::os::fd::AsRawFd;

use crate::sys::{cvt, owned_fd};

const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
/// Nested-attribute flag bit, masked off attribute types.
const NLA_TYPE_MASK: u16 = 0x3fff;

/// How an XDP program is attached to an interface (`XDP_ATTACHED_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpAttached {
    /// Native: run by the driver.
    Driver,
    /// Generic: run on socket buffers.
    Generic,
    /// Offloaded to the NIC.
    Hardware,
    /// Several modes at once.
    Multiple,
}

impl std::fmt::Display for XdpAttached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            XdpAttached::Driver => "native (driver)",
            XdpAttached::Generic => "generic (skb)",
            XdpAttached::Hardware => "offloaded (hardware)",
            XdpAttached::Multiple => "several modes",
        })
    }
}

/// An XDP program found on an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XdpProgOnLink {
    /// Attach mode.
    pub mode: XdpAttached,
    /// Program id (0 if the kernel did not say).
    pub prog_id: u32,
}

/// What rtnetlink says about one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// Interface name.
    pub name: String,
    /// Interface index.
    pub ifindex: u32,
    /// `IFF_*` flags.
    pub flags: u32,
    /// Hardware address (6 bytes for Ethernet; `None` otherwise).
    pub mac: Option<bcl_ether::Mac>,
    /// MTU (Ethernet payload bytes).
    pub mtu: u32,
    /// Number of RX queues.
    pub rx_queues: u32,
    /// Number of TX queues.
    pub tx_queues: u32,
    /// The XDP program attached, if any.
    pub xdp: Option<XdpProgOnLink>,
}

impl LinkInfo {
    /// Whether the interface is administratively up.
    pub fn is_up(&self) -> bool {
        self.flags & libc::IFF_UP as u32 != 0
    }
}

/// Asks rtnetlink about interface `name` in the calling thread's network
/// namespace. `ErrorKind::NotFound` (ENODEV) when it does not exist.
pub fn link_info(name: &str) -> io::Result<LinkInfo> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: plain system call.
    let sock = owned_fd(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    })?;
    // Request: nlmsghdr + ifinfomsg + IFLA_IFNAME attribute.
    let name_attr_len = 4 + name.len() + 1;
    let total = NLMSG_HDRLEN + IFINFOMSG_LEN + align4(name_attr_len);
    let mut req = vec![0u8; total];
    req[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // Sequence number 1.
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // ifinfomsg stays zero: family AF_UNSPEC, index 0 (look up by name).
    let a = NLMSG_HDRLEN + IFINFOMSG_LEN;
    req[a..a + 2].copy_from_slice(&(name_attr_len as u16).to_ne_bytes());
    req[a + 2..a + 4].copy_from_slice(&IFLA_IFNAME.to_ne_bytes());
    req[a + 4..a + 4 + name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `req` is valid for `req.len()` bytes during the call.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let n = cvt(n as libc::c_int)? as usize;
        if let Some(r) = parse_reply(&buf[..n.min(buf.len())])? {
            return Ok(r);
        }
    }
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed rtnetlink reply: {what}"),
    )
}

/// Walks `attrs` (a sequence of `struct rtattr`), calling `f(type, payload)`.
fn for_each_attr(mut attrs: &[u8], mut f: impl FnMut(u16, &[u8])) -> io::Result<()> {
    while attrs.len() >= 4 {
        let len = u16_at(attrs, 0).ok_or_else(|| bad("attribute header"))? as usize;
        let ty = u16_at(attrs, 2).ok_or_else(|| bad("attribute header"))? & NLA_TYPE_MASK;
        if len < 4 || len > attrs.len() {
            return Err(bad("attribute length"));
        }
        f(ty, &attrs[4..len]);
        attrs = attrs.get(align4(len)..).unwrap_or(&[]);
    }
    Ok(())
}

/// Parses one datagram of replies; `Ok(None)` if it held no answer.
fn parse_reply(mut b: &[u8]) -> io::Result<Option<LinkInfo>> {
    while b.len() >= NLMSG_HDRLEN {
        let len = u32_at(b, 0).ok_or_else(|| bad("header"))? as usize;
        let ty = u16_at(b, 4).ok_or_else(|| bad("header"))?;
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(bad("message length"));
        }
        let msg = &b[NLMSG_HDRLEN..len];
        match ty {
            NLMSG_ERROR => {
                let err = u32_at(msg, 0).ok_or_else(|| bad("error message"))? as i32;
                if err != 0 {
                    return Err(io::Error::from_raw_os_error(-err));
                }
            }
            RTM_NEWLINK => return parse_link(msg).map(Some),
            _ => {}
        }
        b = b.get(align4(len)..).unwrap_or(&[]);
    }
    Ok(None)
}

fn parse_link(msg: &[u8]) -> io::Result<LinkInfo> {
    if msg.len() < IFINFOMSG_LEN {
        return Err(bad("ifinfomsg"));
    }
    let ifindex = u32_at(msg, 4).ok_or_else(|| bad("ifinfomsg"))?;
    let flags = u32_at(msg, 8).ok_or_else(|| bad("ifinfomsg"))?;
    let mut info = LinkInfo {
        name: String::new(),
        ifindex,
        flags,
        mac: None,
        mtu: 0,
        rx_queues: 1,
        tx_queues: 1,
        xdp: None,
    };
    let mut nested = Ok(());
    for_each_attr(&msg[IFINFOMSG_LEN..], |ty, p| match ty {
        IFLA_IFNAME => {
            let end = p.iter().position(|&c| c == 0).unwrap_or(p.len());
            info.name = String::from_utf8_lossy(&p[..end]).into_owned();
        }
        IFLA_ADDRESS => info.mac = bcl_ether::Mac::from_bytes(p),
        IFLA_MTU => info.mtu = u32_at(p, 0).unwrap_or(0),
        IFLA_NUM_RX_QUEUES => info.rx_queues = u32_at(p, 0).unwrap_or(1).max(1),
        IFLA_NUM_TX_QUEUES => info.tx_queues = u32_at(p, 0).unwrap_or(1).max(1),
        IFLA_XDP => nested = parse_xdp(p).map(|x| info.xdp = x),
        _ => {}
    })?;
    nested?;
    Ok(info)
}

fn parse_xdp(p: &[u8]) -> io::Result<Option<XdpProgOnLink>> {
    let mut attached = 0u8;
    let mut prog_id = 0u32;
    let mut mode_id = 0u32;
    for_each_attr(p, |ty, v| match ty {
        IFLA_XDP_ATTACHED => attached = v.first().copied().unwrap_or(0),
        IFLA_XDP_PROG_ID => prog_id = u32_at(v, 0).unwrap_or(0),
        IFLA_XDP_DRV_PROG_ID | IFLA_XDP_SKB_PROG_ID | IFLA_XDP_HW_PROG_ID => {
            mode_id = u32_at(v, 0).unwrap_or(0)
        }
        _ => {}
    })?;
    let mode = match attached {
        0 => return Ok(None),
        1 => XdpAttached::Driver,
        2 => XdpAttached::Generic,
        3 => XdpAttached::Hardware,
        _ => XdpAttached::Multiple,
    };
    Ok(Some(XdpProgOnLink {
        mode,
        prog_id: if prog_id != 0 { prog_id } else { mode_id },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = ((4 + payload.len()) as u16).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while !v.len().is_multiple_of(4) {
            v.push(0);
        }
        v
    }

    fn reply(body: &[u8], ty: u16) -> Vec<u8> {
        let mut v = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&[0; 10]);
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn parses_a_link_with_an_xdp_program() {
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body[4..8].copy_from_slice(&7u32.to_ne_bytes());
        body[8..12].copy_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        body.extend(attr(IFLA_IFNAME, b"to-b\0"));
        body.extend(attr(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 1]));
        body.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
        body.extend(attr(IFLA_NUM_RX_QUEUES, &2u32.to_ne_bytes()));
        let mut x = attr(IFLA_XDP_ATTACHED, &[2]);
        x.extend(attr(IFLA_XDP_PROG_ID, &42u32.to_ne_bytes()));
        body.extend(attr(IFLA_XDP | 0x8000, &x));
        let info = parse_reply(&reply(&body, RTM_NEWLINK)).unwrap().unwrap();
        assert_eq!(info.name, "to-b");
        assert_eq!(info.ifindex, 7);
        assert!(info.is_up());
        assert_eq!(info.mac, Some(bcl_ether::Mac([2, 0, 0, 0, 0, 1])));
        assert_eq!((info.mtu, info.rx_queues, info.tx_queues), (1500, 2, 1));
        assert_eq!(
            info.xdp,
            Some(XdpProgOnLink {
                mode: XdpAttached::Generic,
                prog_id: 42
            })
        );
    }

    #[test]
    fn errors_and_garbage_are_errors_not_panics() {
        let mut e = (-libc::ENODEV).to_ne_bytes().to_vec();
        e.extend_from_slice(&[0; 16]);
        let err = parse_reply(&reply(&e, NLMSG_ERROR)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENODEV));
        for junk in [
            &[][..],
            &[0xff; 3][..],
            &[0xff; 40][..],
            &[20, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9][..],
        ] {
            let _ = parse_reply(junk);
        }
        // An attribute claiming more bytes than there are.
        let mut body = vec![0u8; IFINFOMSG_LEN];
        body.extend_from_slice(&[200, 0, 3, 0, b'x', 0, 0, 0]);
        assert!(parse_reply(&reply(&body, RTM_NEWLINK)).is_err());
    }
}
