//! Helpers shared by the privileged lab tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use bcl_ether::Mac;
use bcl_lab::{Lab, LabGuard};

/// A shipped lab topology file.
pub fn topology(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/lab")
        .join(name)
}

/// Brings up `file` under a prefix unique to this test and process, or
/// returns `None` when privileged tests are skipped (`BCL_SKIP_PRIVILEGED=1`);
/// panics with a clear message when they cannot run otherwise.
pub fn lab(file: &str, test: &str) -> Option<LabGuard> {
    if !bcl_lab::require_privileges(test) {
        return None;
    }
    static N: AtomicU32 = AtomicU32::new(0);
    let prefix = format!(
        "ax{}-{}",
        std::process::id() % 100_000,
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut lab = Lab::load(&topology(file))
        .expect("load topology")
        .with_prefix(&prefix)
        .expect("prefix");
    if !lab.impaired_links().is_empty() {
        lab = lab.with_bridge_binary(&bcl_lab::test_binary());
    }
    Some(LabGuard::new(lab).expect("lab up"))
}

/// Whether privileged tests run here (for tests that need no lab).
pub fn privileged(test: &str) -> bool {
    bcl_lab::require_privileges(test)
}

/// The single interface of `node` (name, MAC, IPv4 address).
pub fn iface(lab: &Lab, node: &str) -> (String, Mac, Option<std::net::Ipv4Addr>) {
    let i = lab.interfaces(node).expect("interfaces").remove(0);
    let mac: Mac = i.mac.parse().expect("mac");
    (i.ifname, mac, i.ipv4.map(|c| c.addr))
}

/// Deterministic test bytes for frame `seq` of length `len`.
pub fn pattern(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(seq.wrapping_mul(2) | 1)
                .wrapping_add(seq) as u8
        })
        .collect();
    let n = len.min(4);
    v[..n].copy_from_slice(&seq.to_be_bytes()[..n]);
    v
}

/// An Ethernet II frame.
pub fn eth(dst: Mac, src: Mac, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = bcl_ether::header(dst, src, ethertype).to_vec();
    f.extend_from_slice(payload);
    f
}

/// `ip -j link show` of `ifname` in `node`, as text.
pub fn ip_link_json(lab: &Lab, node: &str, ifname: &str) -> String {
    let out = lab
        .command(node, "ip")
        .expect("command")
        .args(["-j", "-d", "link", "show", "dev", ifname])
        .output()
        .expect("ip link");
    assert!(
        out.status.success(),
        "ip link: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A raw AF_PACKET socket for one EtherType on one interface: a stand-in
/// for the `packet` method in interoperability tests.
pub struct PacketSock {
    fd: std::os::fd::OwnedFd,
}

impl PacketSock {
    /// Opens and binds the socket in the calling thread's namespace.
    pub fn open(ifname: &str, ethertype: u16) -> PacketSock {
        use std::os::fd::FromRawFd;
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert!(ifindex > 0, "no interface {ifname}");
        let proto = ethertype.to_be();
        // SAFETY: plain system call.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(proto),
            )
        };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fresh descriptor.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: valid sockaddr_ll of the given size.
        let r = unsafe {
            libc::bind(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        // PACKET_IGNORE_OUTGOING: do not read back our own transmissions.
        let one: libc::c_int = 1;
        // SAFETY: a valid int option value.
        let r = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                libc::SOL_PACKET,
                23,
                (&one as *const libc::c_int).cast(),
                4,
            )
        };
        assert_eq!(r, 0, "PACKET_IGNORE_OUTGOING");
        PacketSock { fd }
    }

    /// Sends one whole Ethernet frame.
    pub fn send(&self, frame: &[u8]) {
        // SAFETY: `frame` is valid for its length.
        let n = unsafe {
            libc::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                frame.as_ptr().cast(),
                frame.len(),
                0,
            )
        };
        assert_eq!(
            n,
            frame.len() as isize,
            "send: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Receives one frame, waiting at most `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
        if !bcl_afxdp::wait_readable(fd, timeout.as_millis() as i32).unwrap() {
            return None;
        }
        let mut buf = vec![0u8; 65536];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            return None;
        }
        buf.truncate(n as usize);
        Some(buf)
    }
}

use std::time::Duration;
