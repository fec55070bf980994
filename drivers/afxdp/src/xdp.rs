//! Attaching the redirect program to an interface: mode selection with
//! fallback, refusal to touch someone else's program, and a clean detach.
//!
//! The program is attached with a BPF link (`BPF_LINK_CREATE`), not with the
//! older netlink call: a link is owned by its file descriptor, so the
//! program disappears when the process exits or is killed, and the kernel
//! refuses to create a link over any program already attached (it never
//! replaces one silently). Before attaching, rtnetlink is asked whether a
//! program is present, so the refusal names it.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use crate::bpf;
use crate::config::{AfXdpError, AttachMode};
use crate::netlink::{self, LinkInfo};
use crate::sys::{errno_name, netns_id};

/// Name of our XDP program as the kernel shows it.
pub const PROG_NAME: &str = "bcl_xsk";
/// Name of our XSKMAP.
pub const MAP_NAME: &str = "bcl_xsks";

/// Interfaces this process has attached to, as (network namespace,
/// ifindex): a second endpoint on the same interface is refused with a
/// clear message instead of a bare EBUSY.
static OWNED: Mutex<Vec<(u64, u32)>> = Mutex::new(Vec::new());

/// Our program attached to one interface. Detached on drop.
pub(crate) struct Attachment {
    link: OwnedFd,
    map: OwnedFd,
    _prog: OwnedFd,
    key: (u64, u32),
    pub(crate) mode: AttachMode,
    pub(crate) note: String,
    pub(crate) prog_id: u32,
}

/// Removes a registry entry unless disarmed.
struct Claim((u64, u32));

impl Drop for Claim {
    fn drop(&mut self) {
        release(self.0);
    }
}

fn release(key: (u64, u32)) {
    let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
    owned.retain(|k| *k != key);
}

/// The refusal for a program found on `info`'s interface.
fn foreign(info: &LinkInfo, p: netlink::XdpProgOnLink) -> AfXdpError {
    let name = bpf::prog_info_by_id(p.prog_id)
        .map(|i| i.name)
        .unwrap_or_default();
    AfXdpError::ForeignProgram {
        ifname: info.name.clone(),
        prog_id: p.prog_id,
        name,
        mode: p.mode,
    }
}

/// Explains a refused attach for the mode report.
fn explain(mode: AttachMode, e: &std::io::Error) -> String {
    let why = match (mode, e.raw_os_error()) {
        (AttachMode::Native, Some(libc::EOPNOTSUPP)) => " (the driver has no native XDP support)",
        (AttachMode::Native, Some(libc::ERANGE)) => {
            " (the MTU is too large for native XDP on this driver; veth allows about 3500 bytes with 4 KiB pages)"
        }
        (_, Some(libc::EPERM)) => " (needs CAP_BPF and CAP_NET_ADMIN)",
        _ => "",
    };
    format!("{mode} attach refused: {}{why}", errno_name(e))
}

impl Attachment {
    /// Loads the program for `ethertype` with an XSKMAP of `entries` slots
    /// and attaches it to `info`'s interface: native, else generic (or only
    /// `force`). With `frags` the program is loaded as handling
    /// multi-buffer frames ([`bpf::BPF_F_XDP_HAS_FRAGS`]).
    pub(crate) fn attach(
        info: &LinkInfo,
        ethertype: u16,
        entries: u32,
        force: Option<AttachMode>,
        frags: bool,
    ) -> Result<Attachment, AfXdpError> {
        let key = (netns_id(), info.ifindex);
        {
            let mut owned = OWNED.lock().unwrap_or_else(|p| p.into_inner());
            if owned.contains(&key) {
                return Err(AfXdpError::NotUsable(format!(
                    "this process already runs an afxdp endpoint on {} (one per interface)",
                    info.name
                )));
            }
            if let Some(p) = info.xdp {
                return Err(foreign(info, p));
            }
            owned.push(key);
        }
        let claim = Claim(key);

        let map = bpf::create_xskmap(entries, MAP_NAME)
            .map_err(AfXdpError::io("creating the XSKMAP (BPF_MAP_CREATE)"))?;
        let insns = bpf::redirect_program(ethertype, map.as_raw_fd(), bpf::XDP_PASS);
        let flags = if frags { bpf::BPF_F_XDP_HAS_FRAGS } else { 0 };
        let prog = bpf::load_xdp_program_with(&insns, PROG_NAME, flags)?;
        let prog_id = bpf::prog_info(prog.as_raw_fd()).map(|i| i.id).unwrap_or(0);

        let modes: &[AttachMode] = match force {
            Some(AttachMode::Native) => &[AttachMode::Native],
            Some(AttachMode::Generic) => &[AttachMode::Generic],
            None => &[AttachMode::Native, AttachMode::Generic],
        };
        let mut tried = Vec::new();
        for &mode in modes {
            let flags = match mode {
                AttachMode::Native => bpf::XDP_FLAGS_DRV_MODE,
                AttachMode::Generic => bpf::XDP_FLAGS_SKB_MODE,
            };
            match bpf::link_create_xdp(prog.as_raw_fd(), info.ifindex, flags) {
                Ok(link) => {
                    let note = if tried.is_empty() {
                        match force {
                            Some(_) => format!("{mode} forced by configuration"),
                            None => format!("{mode} attach accepted"),
                        }
                    } else {
                        format!("{}; {mode} attach accepted", tried.join("; "))
                    };
                    std::mem::forget(claim);
                    return Ok(Attachment {
                        link,
                        map,
                        _prog: prog,
                        key,
                        mode,
                        note,
                        prog_id,
                    });
                }
                Err(e) => {
                    if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) {
                        // Someone attached a program since we looked.
                        if let Ok(now) = netlink::link_info(&info.name) {
                            if let Some(p) = now.xdp {
                                return Err(foreign(info, p));
                            }
                        }
                    }
                    tried.push(explain(mode, &e));
                }
            }
        }
        Err(AfXdpError::Attach {
            ifname: info.name.clone(),
            tried: tried.join("; "),
        })
    }

    /// Points queue `queue`'s XSKMAP entry at socket `xsk`.
    pub(crate) fn insert(&self, queue: u32, xsk: RawFd) -> Result<(), AfXdpError> {
        bpf::xskmap_set(self.map.as_raw_fd(), queue, xsk)
            .map_err(AfXdpError::io(format!("XSKMAP[{queue}] = socket")))
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // Detach now, even if a forked child still holds a copy of the
        // link's descriptor; closing the descriptors follows.
        let _ = bpf::link_detach(self.link.as_raw_fd());
        release(self.key);
    }
}
