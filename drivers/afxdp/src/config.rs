//! Settings of an AF_XDP endpoint, the modes it can run in, the report of
//! what it obtained, and its errors.

use std::fmt;

use crate::bpf::LoadError;
use bcl_ether::Mac;

/// Default EtherType of BCL frames (IEEE 802 local experimental 1).
pub const DEFAULT_ETHERTYPE: u16 = bcl_core::wire::DEFAULT_ETHERTYPE;
/// Headroom the kernel leaves before a received frame in its chunk
/// (`XDP_PACKET_HEADROOM`), in copy and zero-copy mode alike.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Which RX queues get a socket.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Queues {
    /// Every RX queue of the interface (frames can land on any of them
    /// unless the NIC is told to steer BCL frames to one).
    #[default]
    All,
    /// Only these queues (when steering puts BCL frames there).
    List(Vec<u32>),
}

/// How the XDP program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Native XDP, run by the driver (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// Generic XDP, run on socket buffers (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachMode::Native => "native (driver)",
            AttachMode::Generic => "generic (skb)",
        })
    }
}

/// How a socket is bound to its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BindMode {
    /// The NIC DMAs straight into the UMEM (`XDP_ZEROCOPY`).
    ZeroCopy,
    /// The kernel copies frames between its buffers and the UMEM
    /// (`XDP_COPY`).
    Copy,
}

impl fmt::Display for BindMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BindMode::ZeroCopy => "zero-copy",
            BindMode::Copy => "copy",
        })
    }
}

/// Settings of an AF_XDP endpoint ([`crate::RawXsk`], [`crate::AfXdpMethod`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// The interface, in the calling thread's network namespace.
    pub ifname: String,
    /// EtherType of BCL frames; the XDP program redirects these only.
    pub ethertype: u16,
    /// RX queues to bind (default: all).
    pub queues: Queues,
    /// Chunk size of the UMEM: a power of two from 2048 to the page size
    /// (4096), or larger when the UMEM gets huge pages (kernel ≥ 6.6).
    /// A received frame can use `frame_size - 256` bytes.
    pub frame_size: u32,
    /// Entries of each RX ring, and RX frames per queue (the fill ring gets
    /// twice as many entries, so it is never more than half full). Power of
    /// two.
    pub rx_ring_size: u32,
    /// Entries of the TX and completion rings, and TX frames. Power of two.
    pub tx_ring_size: u32,
    /// Give every bound queue a TX ring (default: the first queue only).
    pub tx_on_all_queues: bool,
    /// Ask the kernel for busy polling on the sockets (`SO_PREFER_BUSY_POLL`,
    /// `SO_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`), and poll with `recvfrom`
    /// when the RX ring is empty.
    pub busy_poll: bool,
    /// `SO_BUSY_POLL` time in µs (with `busy_poll`).
    pub busy_poll_usecs: u32,
    /// `SO_BUSY_POLL_BUDGET` in frames (with `busy_poll`).
    pub busy_poll_budget: u32,
    /// Bind with `XDP_USE_NEED_WAKEUP` (syscalls only when the kernel asks).
    pub need_wakeup: bool,
    /// Try huge pages for the UMEM first.
    pub huge_pages: bool,
    /// Let one frame span several UMEM chunks (XDP multi-buffer: the
    /// program is loaded as handling fragments and the sockets bind with
    /// `XDP_USE_SG`) when the interface MTU is more than one chunk holds,
    /// so the MTU is not capped by the chunk size. Such frames are
    /// assembled in a per-socket buffer (one copy) on receive and cut into
    /// chunks on send. If the kernel refuses, frames stay within one chunk
    /// and the mode report says why. Default: on.
    pub multi_buffer: bool,
    /// Attach in this mode only (tests); default: native, else generic.
    pub force_attach: Option<AttachMode>,
    /// Bind in this mode only (tests); default: zero-copy, else copy.
    pub force_bind: Option<BindMode>,
}

impl AfXdpConfig {
    /// Defaults for interface `ifname`: EtherType 0x88B5, all queues,
    /// 4 KiB frames, 2048-entry rings, no busy polling, need_wakeup on,
    /// huge pages if available, best modes with fallback.
    pub fn new(ifname: impl Into<String>) -> Self {
        AfXdpConfig {
            ifname: ifname.into(),
            ethertype: DEFAULT_ETHERTYPE,
            queues: Queues::All,
            frame_size: 4096,
            rx_ring_size: 2048,
            tx_ring_size: 2048,
            tx_on_all_queues: false,
            busy_poll: false,
            busy_poll_usecs: 20,
            busy_poll_budget: 64,
            need_wakeup: true,
            huge_pages: true,
            multi_buffer: true,
            force_attach: None,
            force_bind: None,
        }
    }

    /// Checks the values; the message names the field.
    pub fn validate(&self) -> Result<(), AfXdpError> {
        let bad = |m: String| Err(AfXdpError::Config(m));
        if !self.frame_size.is_power_of_two() || !(2048..=65536).contains(&self.frame_size) {
            return bad(format!(
                "frame_size {} must be a power of two from 2048 to 65536",
                self.frame_size
            ));
        }
        for (name, v) in [
            ("rx_ring_size", self.rx_ring_size),
            ("tx_ring_size", self.tx_ring_size),
        ] {
            if !v.is_power_of_two() || !(64..=(1 << 16)).contains(&v) {
                return bad(format!(
                    "{name} {v} must be a power of two from 64 to 65536"
                ));
            }
        }
        if let Queues::List(l) = &self.queues {
            if l.is_empty() {
                return bad("queues: the list is empty".into());
            }
            let mut s = l.clone();
            s.sort_unstable();
            s.dedup();
            if s.len() != l.len() {
                return bad("queues: a queue is listed twice".into());
            }
        }
        if self.ethertype < bcl_ether::MIN_ETHERTYPE {
            return bad(format!(
                "ethertype {:#06x} is a length, not an EtherType (must be ≥ 0x0600)",
                self.ethertype
            ));
        }
        Ok(())
    }

    /// Largest Ethernet frame (header included) one RX chunk holds.
    pub fn max_rx_frame(&self) -> usize {
        (self.frame_size - XDP_PACKET_HEADROOM) as usize
    }
}

/// What one queue's socket obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueReport {
    /// RX queue index.
    pub queue: u32,
    /// Zero-copy or copy.
    pub bind: BindMode,
    /// Why this bind mode.
    pub bind_note: String,
    /// Whether the socket uses `XDP_USE_NEED_WAKEUP`.
    pub need_wakeup: bool,
    /// Whether this socket transmits (has a TX ring).
    pub tx: bool,
    /// Busy-poll state: `None` when not asked, else what the kernel said.
    pub busy_poll: Option<String>,
    /// Where the UMEM's memory came from.
    pub pages: String,
}

/// What an AF_XDP endpoint obtained, and why (printed by `bcl-info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeReport {
    /// Interface name.
    pub ifname: String,
    /// Interface index.
    pub ifindex: u32,
    /// Interface MAC.
    pub mac: Mac,
    /// Interface MTU.
    pub if_mtu: u32,
    /// RX queues the interface has allocated.
    pub if_rx_queues: u32,
    /// Of those, the ones in use (receive plus combined channels).
    pub active_rx_queues: u32,
    /// Which queues were bound, which were skipped, and why.
    pub queues_note: String,
    /// How the XDP program is attached.
    pub attach: AttachMode,
    /// Why this mode (what was tried and refused).
    pub attach_note: String,
    /// Id of our XDP program (as `ip link` shows it).
    pub prog_id: u32,
    /// UMEM chunk size.
    pub frame_size: u32,
    /// Largest Ethernet frame (header included) sent and received: one
    /// chunk's worth, or the interface MTU with multi-buffer frames.
    pub max_frame: u32,
    /// Whether frames span several chunks (multi-buffer), and why (not).
    pub multi_buffer_note: String,
    /// Per bound queue.
    pub queues: Vec<QueueReport>,
}

impl fmt::Display for ModeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "afxdp on {} (ifindex {}, {}, MTU {}, {} active RX queue{}):",
            self.ifname,
            self.ifindex,
            self.mac,
            self.if_mtu,
            self.active_rx_queues,
            if self.active_rx_queues == 1 { "" } else { "s" }
        )?;
        writeln!(f, "  {}", self.queues_note)?;
        writeln!(
            f,
            "  XDP program id {}: {} — {}",
            self.prog_id, self.attach, self.attach_note
        )?;
        writeln!(
            f,
            "  largest frame {} B — {}",
            self.max_frame, self.multi_buffer_note
        )?;
        for q in &self.queues {
            writeln!(
                f,
                "  queue {}: {}{}{} — {}; UMEM {} B frames, {}{}",
                q.queue,
                q.bind,
                if q.need_wakeup { ", need_wakeup" } else { "" },
                if q.tx { ", rx+tx" } else { ", rx" },
                q.bind_note,
                self.frame_size,
                q.pages,
                match &q.busy_poll {
                    None => String::new(),
                    Some(b) => format!("; busy poll: {b}"),
                }
            )?;
        }
        Ok(())
    }
}

/// Everything that can go wrong opening or running an AF_XDP endpoint.
#[derive(Debug, thiserror::Error)]
pub enum AfXdpError {
    /// AF_XDP cannot be used here (the reason is for a person).
    #[error("{0}")]
    NotUsable(String),
    /// A configuration value cannot work.
    #[error("bad afxdp configuration: {0}")]
    Config(String),
    /// Another XDP program, not ours, is attached to the interface.
    #[error("interface {ifname} already has an XDP program that this endpoint does not own: id {prog_id}{}, attached {mode}; refusing to replace it (remove it with `ip link set dev {ifname} xdp off` if it is stale, or stop its owner)", if name.is_empty() { String::new() } else { format!(" \"{name}\"") })]
    ForeignProgram {
        /// The interface.
        ifname: String,
        /// The program's id.
        prog_id: u32,
        /// Its name, if known.
        name: String,
        /// How it is attached.
        mode: crate::netlink::XdpAttached,
    },
    /// The verifier refused our program (a bug, or a kernel too old).
    #[error("the XDP program was refused: {0}")]
    Load(#[from] LoadError),
    /// No attach mode worked.
    #[error("cannot attach the XDP program to {ifname}: {tried}")]
    Attach {
        /// The interface.
        ifname: String,
        /// What was tried and how each failed.
        tried: String,
    },
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl AfXdpError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> AfXdpError {
        let context = context.into();
        move |source| AfXdpError::Io { context, source }
    }
}

impl From<AfXdpError> for bcl_core::MethodError {
    fn from(e: AfXdpError) -> Self {
        let method = crate::METHOD_NAME;
        match e {
            AfXdpError::NotUsable(reason) => bcl_core::MethodError::NotUsable { method, reason },
            AfXdpError::Io { context, source } => bcl_core::MethodError::Io {
                method,
                context,
                source,
            },
            other => bcl_core::MethodError::Other {
                method,
                reason: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_the_field() {
        let ok = AfXdpConfig::new("eth0");
        ok.validate().unwrap();
        assert_eq!(ok.max_rx_frame(), 3840);
        let err = |f: &dyn Fn(&mut AfXdpConfig)| {
            let mut c = AfXdpConfig::new("eth0");
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(err(&|c| c.frame_size = 3000).contains("frame_size"));
        assert!(err(&|c| c.frame_size = 1024).contains("frame_size"));
        assert!(err(&|c| c.rx_ring_size = 100).contains("rx_ring_size"));
        assert!(err(&|c| c.tx_ring_size = 1 << 20).contains("tx_ring_size"));
        assert!(err(&|c| c.queues = Queues::List(vec![])).contains("empty"));
        assert!(err(&|c| c.queues = Queues::List(vec![1, 1])).contains("twice"));
        assert!(err(&|c| c.ethertype = 0x05dc).contains("ethertype"));
    }

    #[test]
    fn mode_report_says_what_each_queue_got_and_why() {
        let r = ModeReport {
            ifname: "to-b".into(),
            ifindex: 3,
            mac: Mac([2, 0, 0, 0, 2, 1]),
            if_mtu: 1500,
            if_rx_queues: 2,
            active_rx_queues: 1,
            queues_note: "RX queues: 1 active of 2 allocated (ETHTOOL_GCHANNELS: 1 active); not bound: 1 (allocated but not active)".into(),
            attach: AttachMode::Native,
            attach_note: "native attach accepted".into(),
            prog_id: 17,
            frame_size: 4096,
            max_frame: 1514,
            multi_buffer_note: "one chunk per frame (the MTU fits in one)".into(),
            queues: vec![QueueReport {
                queue: 0,
                bind: BindMode::Copy,
                bind_note: "zero-copy bind refused: EOPNOTSUPP".into(),
                need_wakeup: true,
                tx: true,
                busy_poll: None,
                pages: "normal pages".into(),
            }],
        };
        let s = r.to_string();
        assert!(
            s.contains("afxdp on to-b (ifindex 3, 02:00:00:00:02:01, MTU 1500, 1 active RX queue)"),
            "{s}"
        );
        assert!(s.contains("\n  RX queues: 1 active of 2 allocated"), "{s}");
        assert!(
            s.contains("XDP program id 17: native (driver) — native attach accepted"),
            "{s}"
        );
        assert!(
            s.contains("queue 0: copy, need_wakeup, rx+tx — zero-copy bind refused: EOPNOTSUPP"),
            "{s}"
        );
        assert!(
            s.contains("largest frame 1514 B — one chunk per frame (the MTU fits in one)"),
            "{s}"
        );
    }
}
