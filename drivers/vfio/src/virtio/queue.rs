//! The driver side of a split virtqueue (virtio 1.x §2.7), in DMA memory.
//!
//! Layout for a queue of `size` entries (a power of two), each part
//! starting on a 4 KiB boundary of its [`DmaRegion`]:
//!
//! ```text
//! descriptor table  16 * size   { addr: le64, len: le32, flags: le16, next: le16 }
//! available ring    6 + 2*size  { flags: le16, idx: le16, ring: [le16; size], used_event }
//! used ring         6 + 8*size  { flags: le16, idx: le16, ring: [{id: le32, len: le32}; size], avail_event }
//! ```
//!
//! Descriptor `i` always describes the driver's buffer `i` (one
//! descriptor per buffer, no chains): the driver keeps a fixed buffer per
//! descriptor, so completion needs no lookup. Everything the device writes
//! (the used index, the ids and lengths in used elements) is validated:
//! an id that is out of range or not currently owned by the device is
//! reported and skipped, and a used index that runs more than `size`
//! entries ahead marks the queue broken.

use std::sync::atomic::{fence, Ordering};

use crate::dma::DmaRegion;

/// Descriptor flag: the buffer continues in `next`.
pub const DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the device writes the buffer (receive).
pub const DESC_F_WRITE: u16 = 2;
/// Available-ring flag: the driver does not want interrupts.
pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// Used-ring flag: the device does not want notifications.
pub const USED_F_NO_NOTIFY: u16 = 1;

const PAGE: usize = 4096;

/// One completed buffer, as the device reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// Descriptor (= buffer) id.
    pub id: u16,
    /// Bytes the device wrote into the buffer.
    pub len: u32,
}

/// A used element that violates the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadUsed {
    /// The id is not a descriptor of this queue.
    IdOutOfRange(u32),
    /// The descriptor was not owned by the device.
    NotInFlight(u16),
}

/// A split virtqueue's driver state (see the module documentation).
#[derive(Debug)]
pub struct SplitQueue {
    size: u16,
    desc: usize,
    avail: usize,
    used: usize,
    avail_idx: u16,
    published_idx: u16,
    last_used: u16,
    in_flight: Vec<bool>,
    broken: Option<String>,
}

impl SplitQueue {
    /// Bytes of DMA memory a queue of `size` entries takes (page aligned).
    pub fn bytes(size: u16) -> usize {
        let n = usize::from(size);
        (16 * n).next_multiple_of(PAGE)
            + (6 + 2 * n).next_multiple_of(PAGE)
            + (6 + 8 * n).next_multiple_of(PAGE)
    }

    /// A queue of `size` entries (a power of two, at most 32768) whose
    /// rings start at `offset` (page aligned) in `mem`; zeroes them and
    /// sets the available ring's flags (`no_interrupt`: the driver polls).
    pub fn new(mem: &DmaRegion, offset: usize, size: u16, no_interrupt: bool) -> Self {
        assert!(
            size.is_power_of_two() && size <= 32768,
            "bad queue size {size}"
        );
        assert!(offset.is_multiple_of(PAGE) && offset + Self::bytes(size) <= mem.len());
        let n = usize::from(size);
        let desc = offset;
        let avail = desc + (16 * n).next_multiple_of(PAGE);
        let used = avail + (6 + 2 * n).next_multiple_of(PAGE);
        mem.fill(offset, Self::bytes(size), 0);
        let flags = if no_interrupt {
            AVAIL_F_NO_INTERRUPT
        } else {
            0
        };
        mem.write_u16(avail, flags.to_le());
        Self {
            size,
            desc,
            avail,
            used,
            avail_idx: 0,
            published_idx: 0,
            last_used: 0,
            in_flight: vec![false; n],
            broken: None,
        }
    }

    /// Number of entries.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// IOVAs of the descriptor table, available ring and used ring.
    pub fn iovas(&self, mem: &DmaRegion) -> (u64, u64, u64) {
        (
            mem.iova_at(self.desc),
            mem.iova_at(self.avail),
            mem.iova_at(self.used),
        )
    }

    /// True if descriptor `id` is owned by the device.
    pub fn is_in_flight(&self, id: u16) -> bool {
        self.in_flight
            .get(usize::from(id))
            .copied()
            .unwrap_or(false)
    }

    /// Descriptors owned by the device.
    pub fn in_flight(&self) -> usize {
        self.in_flight.iter().filter(|&&b| b).count()
    }

    /// Why the queue is unusable, if the device broke the protocol.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Hands buffer `id` (at `addr`, `len` bytes) to the device; `write`
    /// means the device fills it (receive). Not visible to the device until
    /// [`publish`](Self::publish).
    ///
    /// # Panics
    ///
    /// If `id` is out of range or already owned by the device (driver bugs).
    pub fn push(&mut self, mem: &DmaRegion, id: u16, addr: u64, len: u32, write: bool) {
        let i = usize::from(id);
        assert!(i < self.in_flight.len(), "descriptor {id} out of range");
        assert!(!self.in_flight[i], "descriptor {id} pushed twice");
        let d = self.desc + 16 * i;
        mem.write_u64(d, addr.to_le());
        mem.write_u32(d + 8, len.to_le());
        let flags = if write { DESC_F_WRITE } else { 0 };
        mem.write_u16(d + 12, flags.to_le());
        mem.write_u16(d + 14, 0);
        let slot = usize::from(self.avail_idx & (self.size - 1));
        mem.write_u16(self.avail + 4 + 2 * slot, id.to_le());
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.in_flight[i] = true;
    }

    /// Buffers pushed but not yet published.
    pub fn unpublished(&self) -> u16 {
        self.avail_idx.wrapping_sub(self.published_idx)
    }

    /// Makes pushed buffers visible to the device (a release store of the
    /// available index, ordered after the descriptor writes).
    pub fn publish(&mut self, mem: &DmaRegion) {
        mem.store_u16(self.avail + 2, self.avail_idx.to_le(), Ordering::Release);
        self.published_idx = self.avail_idx;
    }

    /// After a [`publish`](Self::publish): true unless the device has said
    /// it needs no notification. A full fence orders the index store
    /// before the flag load, as the specification requires.
    pub fn device_wants_notify(&self, mem: &DmaRegion) -> bool {
        fence(Ordering::SeqCst);
        u16::from_le(mem.read_u16(self.used)) & USED_F_NO_NOTIFY == 0
    }

    /// Turns device interrupts for this queue on or off.
    pub fn set_interrupts(&self, mem: &DmaRegion, on: bool) {
        let flags = if on { 0 } else { AVAIL_F_NO_INTERRUPT };
        mem.write_u16(self.avail, flags.to_le());
    }

    /// Takes the next completed buffer, if the device has returned one.
    /// `Some(Err(_))` reports a bad element (already skipped). Returns
    /// `None` for good once the queue is [`broken`](Self::broken).
    pub fn pop_used(&mut self, mem: &DmaRegion) -> Option<Result<Used, BadUsed>> {
        if self.broken.is_some() {
            return None;
        }
        let used_idx = u16::from_le(mem.load_u16(self.used + 2, Ordering::Acquire));
        if used_idx == self.last_used {
            return None;
        }
        if used_idx.wrapping_sub(self.last_used) > self.size {
            self.broken = Some(format!(
                "used index {used_idx} is more than {} entries ahead of {}",
                self.size, self.last_used
            ));
            return None;
        }
        let slot = usize::from(self.last_used & (self.size - 1));
        let e = self.used + 4 + 8 * slot;
        let id = u32::from_le(mem.read_u32(e));
        let len = u32::from_le(mem.read_u32(e + 4));
        self.last_used = self.last_used.wrapping_add(1);
        let Ok(id16) = u16::try_from(id) else {
            return Some(Err(BadUsed::IdOutOfRange(id)));
        };
        match self.in_flight.get_mut(usize::from(id16)) {
            None => Some(Err(BadUsed::IdOutOfRange(id))),
            Some(false) => Some(Err(BadUsed::NotInFlight(id16))),
            Some(f) => {
                *f = false;
                Some(Ok(Used { id: id16, len }))
            }
        }
    }

    /// Offset of the used ring's index (for tests that play the device).
    pub fn used_offset(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the device side by hand on heap memory.
    fn complete(mem: &DmaRegion, q: &SplitQueue, used_idx: &mut u16, id: u32, len: u32) {
        let slot = usize::from(*used_idx & (q.size() - 1));
        let e = q.used_offset() + 4 + 8 * slot;
        mem.write_u32(e, id.to_le());
        mem.write_u32(e + 4, len.to_le());
        *used_idx = used_idx.wrapping_add(1);
        mem.store_u16(q.used_offset() + 2, used_idx.to_le(), Ordering::Release);
    }

    #[test]
    fn push_publish_and_complete_in_order_with_wrap() {
        let mem = DmaRegion::heap(SplitQueue::bytes(4), 0x9000_0000);
        let mut q = SplitQueue::new(&mem, 0, 4, true);
        let (desc, avail, used) = q.iovas(&mem);
        assert_eq!(desc, 0x9000_0000);
        assert!(avail > desc && used > avail);
        assert_eq!(mem.read_u16(q.avail), AVAIL_F_NO_INTERRUPT);
        let mut dev_used = 0u16;
        for round in 0..10u32 {
            for id in 0..4u16 {
                q.push(&mem, id, 0x1000 * u64::from(id), 100 + u32::from(id), true);
            }
            assert_eq!(q.unpublished(), 4);
            q.publish(&mem);
            assert_eq!(
                u16::from_le(mem.read_u16(q.avail + 2)),
                (4 * (round + 1)) as u16
            );
            // descriptor 2 says what we pushed
            assert_eq!(u64::from_le(mem.read_u64(q.desc + 32)), 0x2000);
            assert_eq!(u16::from_le(mem.read_u16(q.desc + 32 + 12)), DESC_F_WRITE);
            assert_eq!(q.in_flight(), 4);
            for id in [3u32, 1, 0, 2] {
                complete(&mem, &q, &mut dev_used, id, 7 * id);
            }
            let got: Vec<_> = std::iter::from_fn(|| q.pop_used(&mem)).collect();
            assert_eq!(
                got,
                vec![
                    Ok(Used { id: 3, len: 21 }),
                    Ok(Used { id: 1, len: 7 }),
                    Ok(Used { id: 0, len: 0 }),
                    Ok(Used { id: 2, len: 14 }),
                ]
            );
            assert_eq!(q.in_flight(), 0);
        }
    }

    #[test]
    fn bad_used_elements_are_reported_not_trusted() {
        let mem = DmaRegion::heap(SplitQueue::bytes(8), 0);
        let mut q = SplitQueue::new(&mem, 0, 8, false);
        q.push(&mem, 5, 0x5000, 10, false);
        q.publish(&mem);
        let mut dev = 0u16;
        complete(&mem, &q, &mut dev, 9, 1);
        complete(&mem, &q, &mut dev, 70000, 1);
        complete(&mem, &q, &mut dev, 4, 1);
        complete(&mem, &q, &mut dev, 5, 3);
        complete(&mem, &q, &mut dev, 5, 3);
        assert_eq!(q.pop_used(&mem), Some(Err(BadUsed::IdOutOfRange(9))));
        assert_eq!(q.pop_used(&mem), Some(Err(BadUsed::IdOutOfRange(70000))));
        assert_eq!(q.pop_used(&mem), Some(Err(BadUsed::NotInFlight(4))));
        assert_eq!(q.pop_used(&mem), Some(Ok(Used { id: 5, len: 3 })));
        assert_eq!(q.pop_used(&mem), Some(Err(BadUsed::NotInFlight(5))));
        assert_eq!(q.pop_used(&mem), None);
        // A used index far ahead breaks the queue for good.
        mem.store_u16(q.used_offset() + 2, dev.wrapping_add(9), Ordering::Release);
        assert_eq!(q.pop_used(&mem), None);
        assert!(q.broken().unwrap().contains("ahead"));
    }

    #[test]
    fn notification_suppression_is_read_from_the_used_flags() {
        let mem = DmaRegion::heap(SplitQueue::bytes(2), 0);
        let q = SplitQueue::new(&mem, 0, 2, false);
        assert!(q.device_wants_notify(&mem));
        mem.write_u16(q.used_offset(), USED_F_NO_NOTIFY.to_le());
        assert!(!q.device_wants_notify(&mem));
        q.set_interrupts(&mem, false);
        assert_eq!(mem.read_u16(q.avail), AVAIL_F_NO_INTERRUPT);
    }
}
