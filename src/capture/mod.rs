//! Packet capture: every frame an [`Endpoint`](crate::Endpoint) sends and
//! receives, on every method, written to a pcap-ng file that Wireshark and
//! `tshark` read with the dissector in `tools/wireshark/bcl.lua`; with
//! congestion control on, also every change of each peer's congestion
//! window (kind 4, below).
//!
//! # Turning it on
//!
//! `BCL_PCAP=FILE` in the environment of any BCL process, or
//! [`EndpointBuilder::pcap`](crate::EndpointBuilder::pcap) (which wins over
//! the variable; the tools' `--pcap FILE` uses it). The file is opened when
//! the endpoint is built; if it cannot be, the build fails with
//! [`Error::Capture`](crate::Error::Capture), which names the variable (or
//! the builder option) and the file. A capture that was asked for and
//! silently missing would cost a whole run, so it is an error rather than a
//! warning.
//!
//! # Several endpoints, several processes
//!
//! - Every endpoint of one process that names the same FILE writes into one
//!   file (one pcap-ng section), each of its methods as one interface
//!   (interface description block): its name is `NODE.PORT/METHOD`, its
//!   description names the job and the process id.
//! - `%p` in FILE becomes the process id (`%%` is a `%`), so
//!   `BCL_PCAP=run-%p.pcapng` gives every process of a job its own file.
//! - Without `%p`, a process takes FILE with an exclusive `flock`; a
//!   process that finds FILE locked by another live process writes
//!   `STEM.PID.EXT` instead (the pid inserted before the extension) and
//!   says so on standard error. Two processes therefore never write into
//!   one file, and a re-run overwrites the file of an earlier run (whose
//!   lock went with it).
//! - A process keeps its capture files open (and locked) until it exits,
//!   so endpoints built one after another append to the same file.
//! - The file is flushed after every burst that recorded something, so it
//!   is complete up to the last burst at any moment (a crash loses nothing;
//!   `tshark` can read it while the process runs).
//!
//! # Link type and pseudo-header
//!
//! Every record has link type [`LINKTYPE_BCL`] (`LINKTYPE_USER5`, 152;
//! `DLT_USER5` in Wireshark) and starts with a [`PSEUDO_HEADER_LEN`]-byte
//! pseudo-header in network byte order, then the item's bytes:
//!
//! ```text
//! offset size field
//!  0      1   version of this layout (1)
//!  1      1   kind: 1 BCL frame, 2 direct message, 3 bulk transfer,
//!             4 congestion state, 5 direct service message
//!  2      1   direction: 1 received, 2 sent (pcap-ng's epb_flags codes);
//!             0 for a state record, neither sent nor received
//!  3      1   pseudo-header length in bytes (48)
//!  4      8   method name, ASCII, NUL-padded (shm, udp, packet, ...)
//! 12      4   local node       \ the capturing endpoint
//! 16      2   local port       /
//! 18      2   peer port        \ the other process; all ones when the
//! 20      4   peer node        /   capture does not know it
//! 24      4   link id of the method (all ones when unknown)
//! 28      1   bulk kind: 1 normal channel, 2 RMA put, 3 RMA get reply
//!             (0 unless kind is 3)
//! 29      1   reserved (0)
//! 30      2   channel (bulk transfers; else 0)
//! 32      4   transfer id (bulk transfers; else 0)
//! 36      4   process id of the capturing process
//! 40      8   length of the whole item (frame, message or transfer)
//! 48      …   the item: a BCL frame (its header first, exactly as the
//!             core wrote or read it: no Ethernet or UDP framing), the
//!             bytes of a direct message, a transfer's data, or a
//!             congestion-state body
//! ```
//!
//! Direct messages (shared memory's whole messages without a BCL header;
//! kind 5 for service messages, see [`crate::service`]) and bulk transfers
//! (normal-channel data, RMA puts and get replies moved straight between
//! buffers) are recorded as kinds 2 (or 5) and 3, so the
//! dissector shows them beside the frames. A transfer is recorded once,
//! when the port hands it to the method (sent) or when its data is all in
//! the destination buffer (received), cut at [`SNAPLEN`] with its whole
//! length in the pseudo-header and the record's original length. The
//! direction is also in each record's `epb_flags` option, so Wireshark's
//! `frame.packet_flags_direction` works too.
//!
//! # Congestion state (kind 4)
//!
//! When the endpoint's port controls congestion
//! ([`CongestionConfig::enabled`](bcl_core::CongestionConfig::enabled)),
//! capture turns on the port's congestion log
//! ([`Port::set_congestion_log`](bcl_core::Port::set_congestion_log)) and
//! writes one record per change of a peer's window of whole frames, on one
//! more interface of the endpoint, `NODE.PORT/cc`. Its pseudo-header has
//! kind 4, direction 0 (also 0 in `epb_flags`: not available), method
//! name `cc`, the endpoint as local process, the peer whose window changed
//! as peer process, the link all ones, and the body's length (32) as the
//! whole length. The body, in network byte order:
//!
//! ```text
//! offset size field
//!  0      1   cause: 1 increase, 2 delay decrease, 3 loss, 4 timeout,
//!             5 undo (a loss decrease undone: the resends were duplicates)
//!  1      1   flags: bit 0 slow start (still on after the change)
//!  2      2   reserved (0)
//!  4      4   window, whole frames (after the change)
//!  8      4   base round trip, ns (all ones: not measured)
//! 12      4   queueing delay (smoothed round trip over the base), ns
//!             (all ones: unknown)
//! 16      4   smoothed round trip, ns (all ones: unknown)
//! 20      4   frames in flight
//! 24      8   pacing rate, bytes/s (0: not pacing, or unknown)
//! ```
//!
//! Nanosecond fields saturate at `2^32 - 2` (4.29 s). The changes are
//! written at the start of the progress round after the one that made
//! them (so that an endpoint without these records runs no extra code per
//! round, see *Cost*), and when the endpoint shuts down; the file stamps
//! every record with the time it is written, so a record's timestamp is up
//! to one progress round later than the change. Only peers over methods
//! that may lose frames are controlled, so shared memory shows none; with
//! congestion control off (the default) there are no such records and no
//! `cc` interface. If the port's log overflows between two rounds (1024
//! changes), the oldest changes are lost
//! ([`Port::congestion_changes_dropped`](bcl_core::Port::congestion_changes_dropped)).
//!
//! # Cost
//!
//! When capture is off nothing changes on any path: the builder wraps the
//! methods in a recording adapter only when capture is on, so an endpoint
//! without capture runs exactly the code it ran before (no branch, no
//! allocation). With capture on, every burst takes the file's lock and
//! makes one `write` system call. Congestion-state records add, with
//! capture and congestion control both on, one look at the port's log per
//! progress round (the round's existing check of when its periodic work is
//! due), and in the core one predictable branch where the controller is
//! fed.

mod congestion;
mod file;
mod tap;

pub(crate) use congestion::CongestionTap;
pub use congestion::{cause_code, congestion_body, CONGESTION_BODY_LEN, CONGESTION_METHOD};
pub use file::CaptureFile;

use crate::method_slot::MethodSlot;
use bcl_core::{JobKey, ProcessAddr};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The environment variable that turns capture on: `BCL_PCAP=FILE`.
pub const ENV: &str = "BCL_PCAP";

/// The pcap-ng link type of every record: `LINKTYPE_USER5`.
pub const LINKTYPE_BCL: u32 = 152;

/// Bytes of the pseudo-header in front of every record.
pub const PSEUDO_HEADER_LEN: usize = 48;

/// Version of the pseudo-header layout.
pub const PSEUDO_HEADER_VERSION: u8 = 1;

/// Largest record written (pseudo-header included); longer items (bulk
/// transfers) are cut, with their whole length kept. 256 KiB is the largest
/// record Wireshark reads for most link types; a BCL frame (at most 64 KiB)
/// always fits whole.
pub const SNAPLEN: u32 = 262_144;

/// What a record holds (pseudo-header byte 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A BCL frame, header first.
    Frame = 1,
    /// A whole system-channel message sent without a BCL header.
    Direct = 2,
    /// The data of a bulk transfer.
    Bulk = 3,
    /// A change of congestion control's state for one peer (see *Congestion
    /// state* in the module documentation).
    Congestion = 4,
    /// A whole service message (a remote service request or its answer,
    /// see [`crate::service`]) sent without a BCL header.
    DirectService = 5,
}

/// Whether the capturing endpoint sent or received the item (pseudo-header
/// byte 2; the same codes as pcap-ng's `epb_flags` direction bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Direction {
    /// A state record, neither sent nor received.
    None = 0,
    /// Received.
    Received = 1,
    /// Sent.
    Sent = 2,
}

/// The fields of one pseudo-header (see the module documentation for the
/// layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PseudoHeader {
    /// What follows.
    pub kind: Kind,
    /// Sent or received.
    pub direction: Direction,
    /// The method's name (the first 8 bytes are kept).
    pub method: &'static str,
    /// The capturing endpoint.
    pub local: ProcessAddr,
    /// The other process, when known.
    pub peer: Option<ProcessAddr>,
    /// The method's link, when known.
    pub link: Option<u32>,
    /// Bulk kind code (1 normal, 2 put, 3 get reply; 0 for other kinds).
    pub bulk_kind: u8,
    /// Channel of a bulk transfer.
    pub channel: u16,
    /// Transfer id of a bulk transfer.
    pub transfer: u32,
    /// Process id of the capturing process.
    pub pid: u32,
    /// Length of the whole item.
    pub total_len: u64,
}

impl PseudoHeader {
    /// The pseudo-header's bytes.
    pub fn to_bytes(&self) -> [u8; PSEUDO_HEADER_LEN] {
        let mut b = [0u8; PSEUDO_HEADER_LEN];
        b[0] = PSEUDO_HEADER_VERSION;
        b[1] = self.kind as u8;
        b[2] = self.direction as u8;
        b[3] = PSEUDO_HEADER_LEN as u8;
        let name = self.method.as_bytes();
        let n = name.len().min(8);
        b[4..4 + n].copy_from_slice(&name[..n]);
        b[12..16].copy_from_slice(&self.local.node.0.to_be_bytes());
        b[16..18].copy_from_slice(&self.local.port.0.to_be_bytes());
        let (peer_node, peer_port) = self
            .peer
            .map_or((u32::MAX, u16::MAX), |p| (p.node.0, p.port.0));
        b[18..20].copy_from_slice(&peer_port.to_be_bytes());
        b[20..24].copy_from_slice(&peer_node.to_be_bytes());
        b[24..28].copy_from_slice(&self.link.unwrap_or(u32::MAX).to_be_bytes());
        b[28] = self.bulk_kind;
        b[30..32].copy_from_slice(&self.channel.to_be_bytes());
        b[32..36].copy_from_slice(&self.transfer.to_be_bytes());
        b[36..40].copy_from_slice(&self.pid.to_be_bytes());
        b[40..48].copy_from_slice(&self.total_len.to_be_bytes());
        b
    }
}

/// Where an endpoint's capture was asked for: the builder option or the
/// environment variable (named in errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// [`EndpointBuilder::pcap`](crate::EndpointBuilder::pcap).
    Builder,
    /// `BCL_PCAP` ([`ENV`]).
    Env,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Builder => f.write_str("the endpoint builder's pcap option"),
            Source::Env => f.write_str(ENV),
        }
    }
}

/// The capture path an endpoint should use: the builder's if given, else
/// `BCL_PCAP` if set and not empty.
pub(crate) fn requested(builder: Option<PathBuf>) -> Option<(PathBuf, Source)> {
    if let Some(p) = builder {
        return Some((p, Source::Builder));
    }
    std::env::var_os(ENV)
        .filter(|v| !v.is_empty())
        .map(|v| (PathBuf::from(v), Source::Env))
}

/// One endpoint's capture: the shared file and who is capturing.
pub(crate) struct Capture {
    file: Arc<CaptureFile>,
    local: ProcessAddr,
    job: JobKey,
}

impl Capture {
    /// Opens (or joins, within this process) the capture file `path` for
    /// the endpoint of `local` in `job`.
    pub(crate) fn open(path: &Path, local: ProcessAddr, job: JobKey) -> std::io::Result<Capture> {
        Ok(Capture {
            file: CaptureFile::open(path)?,
            local,
            job,
        })
    }

    /// `slot` wrapped so that everything it moves is recorded, as a new
    /// interface of the file.
    pub(crate) fn wrap(&self, slot: MethodSlot) -> MethodSlot {
        match slot {
            MethodSlot::Frames(m) => {
                let t = self.tap(m.name());
                MethodSlot::Frames(Box::new(tap::Tapped::new(m, t)))
            }
            MethodSlot::Direct(m) => {
                let t = self.tap(m.name());
                MethodSlot::Direct(Box::new(tap::Tapped::new(m, t)))
            }
        }
    }

    /// Where the endpoint's congestion-state records go: a new interface,
    /// `NODE.PORT/cc`.
    pub(crate) fn congestion_tap(&self) -> CongestionTap {
        let iface = self.file.add_interface(
            &format!("{}/{CONGESTION_METHOD}", self.local),
            &format!(
                "BCL endpoint {} of job {:#x}, congestion state, process {}",
                self.local,
                self.job.0,
                std::process::id()
            ),
        );
        CongestionTap::new(self.file.clone(), iface, self.local)
    }

    fn tap(&self, method: &'static str) -> tap::Tap {
        let iface = self.file.add_interface(
            &format!("{}/{method}", self.local),
            &format!(
                "BCL endpoint {} of job {:#x}, method {method}, process {}",
                self.local,
                self.job.0,
                std::process::id()
            ),
        );
        tap::Tap::new(self.file.clone(), iface, self.local, method)
    }
}

/// The method inside a recording adapter, as `Any` (for
/// [`Endpoint::method_mut`](crate::Endpoint::method_mut)); `None` if `any`
/// is not one.
pub(crate) fn inner_any_mut(any: &mut dyn Any) -> Option<&mut dyn Any> {
    tap::inner_any_mut(any)
}
