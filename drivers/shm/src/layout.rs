//! The segment layout: where each part of a process's segment lives.
//!
//! ```text
//! offset 0          header page (4 KiB)
//!   0                 HeaderData: magic, version, owner pid + start time,
//!                     job, address, geometry, offsets (written once by the
//!                     owner, before `state` becomes READY)
//!   512               state   (AtomicU32: 0 being created, 1 ready, 2 closed)
//!   640               bell    (AtomicU32: 1 while the owner is about to sleep)
//! inbox_ctl_off      InboxCtl: tail (+ sleep bit), released, full_waiters
//!                    (each on its own 128-byte line; one page)
//! inbox_off          inbox_slots x block_size: SlotHdr (24 B) + payload
//! dir_off           dir_entries x entry_stride, one per sender:
//!   +0                EntryCtl: state (pid|gen|tag), start time, address,
//!                     waiting flag                      (written by the sender)
//!   +128              intent (pos + 1 while claiming an inbox slot)
//!   +256              ExCtl: head line (sender), tail line (owner)
//!   +512              chunks x ChunkDesc (32 B)
//!   +page-aligned     chunks x chunk_size bytes of exchange data
//! ```
//!
//! Everything a peer reads from another process's segment is validated
//! against this computation before use: the geometry in the header must
//! produce exactly the offsets and total length the header states, and the
//! file must be at least that long.

use crate::exchange::{ChunkDesc, ExCtl};
use crate::inbox::{InboxCtl, SLOT_HDR};
use crate::sync::{AtomicU32, AtomicU64, Line};
use std::mem::size_of;

/// First eight bytes of every segment.
pub const MAGIC: u64 = u64::from_le_bytes(*b"BCLSHM\0\x01");
/// Layout version; a peer with another version is refused.
pub const VERSION: u32 = 1;
/// Page size assumed for alignment (mappings work with larger pages too).
pub const PAGE: usize = 4096;
/// Offset of the state word in the header page.
pub(crate) const STATE_OFF: usize = 512;
/// Offset of the owner's bell flag in the header page.
pub(crate) const BELL_OFF: usize = 640;

/// Segment state: the owner is still initialising it.
pub(crate) const STATE_INIT: u32 = 0;
/// Segment state: ready for peers.
pub(crate) const STATE_READY: u32 = 1;
/// Segment state: the owner closed it.
pub(crate) const STATE_CLOSED: u32 = 2;

/// The sizes of a segment's parts, chosen by its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Slots of the inbox (a power of two, 2 to 2^20).
    pub inbox_slots: u32,
    /// Bytes per inbox slot including its 24-byte header (a multiple of 64,
    /// 64 to 65536).
    pub block_size: u32,
    /// Directory entries: how many local processes can send to this one
    /// (1 to 4096).
    pub dir_entries: u32,
    /// Bytes per exchange-queue chunk (a multiple of 64, 64 B to 16 MiB).
    pub chunk_size: u32,
    /// Chunks per exchange queue (2 to 1024).
    pub chunks: u32,
}

impl Default for Geometry {
    /// 1024 slots of 256 B, 64 senders, exchange queues of 16 x 64 KiB
    /// (1 MiB per sender, touched only when used; why this geometry: the
    /// README, "Exchange queue").
    fn default() -> Self {
        Geometry {
            inbox_slots: 1024,
            block_size: 256,
            dir_entries: 64,
            chunk_size: 64 * 1024,
            chunks: 16,
        }
    }
}

impl Geometry {
    /// Checks the bounds documented on each field.
    pub fn validate(&self) -> Result<(), String> {
        let g = self;
        if !g.inbox_slots.is_power_of_two() || !(2..=1 << 20).contains(&g.inbox_slots) {
            return Err(format!(
                "inbox_slots {} must be a power of two from 2 to 2^20",
                g.inbox_slots
            ));
        }
        if !g.block_size.is_multiple_of(64)
            || !(64..=65536).contains(&g.block_size)
            || (g.block_size as usize) < SLOT_HDR + 8
        {
            return Err(format!(
                "block_size {} must be a multiple of 64 from 64 to 65536",
                g.block_size
            ));
        }
        if !(1..=4096).contains(&g.dir_entries) {
            return Err(format!(
                "dir_entries {} must be from 1 to 4096",
                g.dir_entries
            ));
        }
        if !g.chunk_size.is_multiple_of(64) || !(64..=16 << 20).contains(&g.chunk_size) {
            return Err(format!(
                "chunk_size {} must be a multiple of 64 from 64 to 16 MiB",
                g.chunk_size
            ));
        }
        if !(2..=1024).contains(&g.chunks) {
            return Err(format!("chunks {} must be from 2 to 1024", g.chunks));
        }
        Ok(())
    }

    /// Payload bytes one inbox slot carries.
    pub fn max_inline(&self) -> usize {
        self.block_size as usize - SLOT_HDR
    }
}

/// The owner-written header at offset 0. Plain data: written once before
/// the state becomes READY, read by peers with a volatile copy after they
/// saw READY (acquire), then validated.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HeaderData {
    pub(crate) magic: u64,
    pub(crate) version: u32,
    pub(crate) header_len: u32,
    pub(crate) owner_pid: u32,
    pub(crate) _pad0: u32,
    pub(crate) owner_start: u64,
    pub(crate) job: u32,
    pub(crate) node: u32,
    pub(crate) port: u32,
    pub(crate) inbox_slots: u32,
    pub(crate) block_size: u32,
    pub(crate) dir_entries: u32,
    pub(crate) chunk_size: u32,
    pub(crate) chunks: u32,
    pub(crate) total_len: u64,
    pub(crate) inbox_ctl_off: u64,
    pub(crate) inbox_off: u64,
    pub(crate) dir_off: u64,
    pub(crate) entry_stride: u64,
}

/// A directory entry's control words.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct EntryCtl {
    /// `pid << 32 | generation << 8 | tag` (see [`entry_state`]).
    pub(crate) state: AtomicU64,
    /// The sender's process start time (clock ticks since boot).
    pub(crate) start: AtomicU64,
    /// The sender's packed process address.
    pub(crate) addr: AtomicU64,
    /// Set by the sender before it sleeps waiting for space (inbox or
    /// exchange); taken by the owner, which then rings the sender's bell.
    pub(crate) waiting: AtomicU32,
}

/// The fixed head of a directory entry (512 bytes).
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct EntryHead {
    pub(crate) ctl: Line<EntryCtl>,
    /// The sender's inbox-claim intent (see [`crate::inbox`]).
    pub(crate) intent: Line<AtomicU64>,
    pub(crate) ex: ExCtl,
}

/// Directory entry states, packed with the claimer's pid and a generation.
pub(crate) mod entry_state {
    /// Nobody uses the entry.
    pub(crate) const FREE: u64 = 0;
    /// A sender won the entry and is writing its identity.
    pub(crate) const CLAIMING: u64 = 1;
    /// A sender uses the entry.
    pub(crate) const ACTIVE: u64 = 2;
    /// The sender closed its link; the owner frees the entry once it has
    /// consumed everything the sender sent.
    pub(crate) const LEFT: u64 = 3;

    /// Packs pid, generation (24 bits) and tag.
    pub(crate) fn pack(pid: u32, generation: u32, tag: u64) -> u64 {
        (u64::from(pid) << 32) | (u64::from(generation & 0xff_ffff) << 8) | (tag & 0xff)
    }
    /// The tag.
    pub(crate) fn tag(s: u64) -> u64 {
        s & 0xff
    }
    /// The generation.
    pub(crate) fn generation(s: u64) -> u32 {
        ((s >> 8) & 0xff_ffff) as u32
    }
    /// The claimer's pid.
    pub(crate) fn pid(s: u64) -> u32 {
        (s >> 32) as u32
    }
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// Where everything is, computed from a [`Geometry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) geometry: Geometry,
    pub(crate) inbox_ctl_off: u64,
    pub(crate) inbox_off: u64,
    pub(crate) dir_off: u64,
    pub(crate) entry_stride: u64,
    /// Offset of the descriptors inside an entry.
    pub(crate) descs_off: u64,
    /// Offset of the chunk data inside an entry.
    pub(crate) data_off: u64,
    pub(crate) total_len: u64,
}

impl Layout {
    /// The layout for `g` (validated).
    pub(crate) fn new(g: Geometry) -> Result<Layout, String> {
        g.validate()?;
        debug_assert_eq!(size_of::<EntryHead>(), 512);
        debug_assert!(size_of::<InboxCtl>() <= PAGE);
        let page = PAGE as u64;
        let inbox_ctl_off = page;
        let inbox_off = 2 * page;
        let inbox_bytes = round_up(u64::from(g.inbox_slots) * u64::from(g.block_size), page);
        let dir_off = inbox_off + inbox_bytes;
        let descs_off = size_of::<EntryHead>() as u64;
        let data_off = round_up(
            descs_off + u64::from(g.chunks) * size_of::<ChunkDesc>() as u64,
            page,
        );
        let entry_stride = data_off + round_up(u64::from(g.chunks) * u64::from(g.chunk_size), page);
        let total_len = dir_off + u64::from(g.dir_entries) * entry_stride;
        if total_len > 1 << 40 {
            return Err(format!("segment of {total_len} bytes is too large"));
        }
        Ok(Layout {
            geometry: g,
            inbox_ctl_off,
            inbox_off,
            dir_off,
            entry_stride,
            descs_off,
            data_off,
            total_len,
        })
    }

    /// The header the owner writes for this layout.
    pub(crate) fn header(
        &self,
        owner_pid: u32,
        owner_start: u64,
        job: u32,
        node: u32,
        port: u16,
    ) -> HeaderData {
        let g = self.geometry;
        HeaderData {
            magic: MAGIC,
            version: VERSION,
            header_len: size_of::<HeaderData>() as u32,
            owner_pid,
            _pad0: 0,
            owner_start,
            job,
            node,
            port: u32::from(port),
            inbox_slots: g.inbox_slots,
            block_size: g.block_size,
            dir_entries: g.dir_entries,
            chunk_size: g.chunk_size,
            chunks: g.chunks,
            total_len: self.total_len,
            inbox_ctl_off: self.inbox_ctl_off,
            inbox_off: self.inbox_off,
            dir_off: self.dir_off,
            entry_stride: self.entry_stride,
        }
    }

    /// Validates a header read from a peer's segment of `file_len` bytes and
    /// returns its layout.
    pub(crate) fn from_header(h: &HeaderData, file_len: u64) -> Result<Layout, String> {
        if h.magic != MAGIC {
            return Err(format!("bad magic {:#018x} (not a BCL segment)", h.magic));
        }
        if h.version != VERSION {
            return Err(format!(
                "layout version {} (this build speaks version {VERSION})",
                h.version
            ));
        }
        if h.header_len as usize != size_of::<HeaderData>() {
            return Err(format!("header length {}", h.header_len));
        }
        let l = Layout::new(Geometry {
            inbox_slots: h.inbox_slots,
            block_size: h.block_size,
            dir_entries: h.dir_entries,
            chunk_size: h.chunk_size,
            chunks: h.chunks,
        })
        .map_err(|e| format!("bad geometry: {e}"))?;
        if (
            l.total_len,
            l.inbox_ctl_off,
            l.inbox_off,
            l.dir_off,
            l.entry_stride,
        ) != (
            h.total_len,
            h.inbox_ctl_off,
            h.inbox_off,
            h.dir_off,
            h.entry_stride,
        ) {
            return Err("offsets do not match the geometry".into());
        }
        if file_len < l.total_len {
            return Err(format!(
                "file is {file_len} bytes, the header says {}",
                l.total_len
            ));
        }
        if h.port > u32::from(u16::MAX) {
            return Err(format!("port {}", h.port));
        }
        Ok(l)
    }

    /// Offset of directory entry `i`.
    pub(crate) fn entry_off(&self, i: u32) -> u64 {
        self.dir_off + u64::from(i) * self.entry_stride
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_consistent() {
        let l = Layout::new(Geometry::default()).unwrap();
        assert_eq!(size_of::<HeaderData>() % 8, 0);
        assert!(size_of::<HeaderData>() <= STATE_OFF);
        assert_eq!(size_of::<EntryHead>(), 512);
        assert_eq!(SLOT_HDR, 24);
        assert_eq!(l.inbox_off % PAGE as u64, 0);
        assert_eq!(l.dir_off % PAGE as u64, 0);
        assert_eq!(l.entry_stride % PAGE as u64, 0);
        assert_eq!(l.data_off % PAGE as u64, 0);
        let h = l.header(1, 2, 3, 4, 5);
        assert_eq!(Layout::from_header(&h, l.total_len).unwrap(), l);
    }

    #[test]
    fn bad_headers_are_refused() {
        let l = Layout::new(Geometry::default()).unwrap();
        let good = l.header(1, 2, 3, 4, 5);
        let mut h = good;
        h.magic = 0;
        assert!(Layout::from_header(&h, l.total_len)
            .unwrap_err()
            .contains("magic"));
        h = good;
        h.version = 99;
        assert!(Layout::from_header(&h, l.total_len)
            .unwrap_err()
            .contains("version"));
        h = good;
        h.inbox_slots = 1000;
        assert!(Layout::from_header(&h, l.total_len).is_err());
        h = good;
        h.dir_off += 4096;
        assert!(Layout::from_header(&h, l.total_len).is_err());
        assert!(Layout::from_header(&good, l.total_len - 1)
            .unwrap_err()
            .contains("file is"));
    }

    #[test]
    fn geometry_bounds() {
        let g = Geometry::default();
        assert!(Geometry {
            block_size: 32,
            ..g
        }
        .validate()
        .is_err());
        assert!(Geometry {
            block_size: 100,
            ..g
        }
        .validate()
        .is_err());
        assert!(Geometry { chunks: 1, ..g }.validate().is_err());
        assert!(Geometry {
            dir_entries: 0,
            ..g
        }
        .validate()
        .is_err());
        assert!(Geometry {
            chunk_size: 4000,
            ..g
        }
        .validate()
        .is_err());
        assert!(Geometry {
            inbox_slots: 3,
            ..g
        }
        .validate()
        .is_err());
        assert_eq!(g.max_inline(), 232);
    }
}
