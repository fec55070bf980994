//! The system channel's receive ring: a fixed pool of equal blocks.
//!
//! As in BCL-3, every port owns one ring of fixed-size blocks, allocated
//! once when the port is created. An arriving eager message takes the first
//! run of free blocks large enough for it (searching from where the last
//! allocation ended, so allocation walks the ring in order), is reassembled
//! there in place, and stays until the application releases it. When no run
//! is free the message is dropped and the sender is told to back off and
//! resend: the ring never grows.

/// A message's place in the ring: first block, block count, and a
/// generation that makes stale handles detectable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RingSlot {
    first: u32,
    blocks: u32,
    generation: u32,
}

impl RingSlot {
    /// Index of the first block.
    pub fn first_block(&self) -> u32 {
        self.first
    }
    /// Number of blocks.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }
}

/// The ring of blocks and its allocation bitmap.
pub struct SystemRing {
    data: Vec<u8>,
    block_size: usize,
    nblocks: u32,
    /// One bit per block, set while the block is allocated.
    used: Vec<u64>,
    /// Generation of the allocation that starts at each block.
    generation: Vec<u32>,
    cursor: u32,
    free_blocks: u32,
}

impl SystemRing {
    /// A ring of `nblocks` blocks of `block_size` bytes each.
    pub fn new(nblocks: u32, block_size: usize) -> Self {
        assert!(
            nblocks > 0 && block_size > 0,
            "ring dimensions must be positive"
        );
        SystemRing {
            data: vec![0; nblocks as usize * block_size],
            block_size,
            nblocks,
            used: vec![0; (nblocks as usize).div_ceil(64)],
            generation: vec![0; nblocks as usize],
            cursor: 0,
            free_blocks: nblocks,
        }
    }

    /// Bytes per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the ring.
    pub fn capacity_blocks(&self) -> u32 {
        self.nblocks
    }

    /// Blocks not currently allocated.
    pub fn free_blocks(&self) -> u32 {
        self.free_blocks
    }

    fn is_used(&self, b: u32) -> bool {
        self.used[b as usize / 64] & (1 << (b % 64)) != 0
    }

    fn mark(&mut self, first: u32, blocks: u32, used: bool) {
        for b in first..first + blocks {
            let (w, bit) = (b as usize / 64, 1u64 << (b % 64));
            if used {
                self.used[w] |= bit;
            } else {
                self.used[w] &= !bit;
            }
        }
    }

    /// Blocks needed for a message of `len` bytes (at least one, so even an
    /// empty message occupies a place in the ring).
    pub fn blocks_for(&self, len: usize) -> u32 {
        // Most messages fit one block: no division for them.
        if len <= self.block_size {
            1
        } else {
            len.div_ceil(self.block_size) as u32
        }
    }

    /// Takes the first free run of blocks for `len` bytes, or `None` if no
    /// run is free (the caller drops the message).
    pub fn alloc(&mut self, len: usize) -> Option<RingSlot> {
        let need = self.blocks_for(len);
        if need > self.free_blocks {
            return None;
        }
        // The common case: a one-block message and the block at the cursor
        // is free (allocation walks the ring in order).
        if need == 1 && !self.is_used(self.cursor) {
            return Some(self.take(self.cursor, 1));
        }
        // Scan at most once around the ring, from the cursor.
        let mut start = self.cursor;
        let mut scanned = 0;
        while scanned < self.nblocks {
            if start + need > self.nblocks {
                // A run cannot wrap: continue from block 0.
                scanned += self.nblocks - start;
                start = 0;
                continue;
            }
            match (start..start + need).find(|&b| self.is_used(b)) {
                None => return Some(self.take(start, need)),
                Some(busy) => {
                    scanned += busy + 1 - start;
                    start = busy + 1;
                    if start >= self.nblocks {
                        start = 0;
                    }
                }
            }
        }
        None
    }

    /// Allocates the free run of `need` blocks at `start`.
    fn take(&mut self, start: u32, need: u32) -> RingSlot {
        self.mark(start, need, true);
        self.free_blocks -= need;
        self.cursor = start + need;
        if self.cursor == self.nblocks {
            self.cursor = 0;
        }
        let generation = self.generation[start as usize].wrapping_add(1);
        self.generation[start as usize] = generation;
        RingSlot {
            first: start,
            blocks: need,
            generation,
        }
    }

    /// Allocates a slot for `bytes` and copies them in (the start of its
    /// block run), or `None` as [`SystemRing::alloc`].
    pub fn alloc_with(&mut self, bytes: &[u8]) -> Option<RingSlot> {
        let slot = self.alloc(bytes.len())?;
        let start = slot.first as usize * self.block_size;
        self.data[start..start + bytes.len()].copy_from_slice(bytes);
        Some(slot)
    }

    /// Whether `slot` is a live allocation of this ring.
    pub fn is_live(&self, slot: RingSlot) -> bool {
        slot.first < self.nblocks
            && slot.blocks > 0
            && slot.first + slot.blocks <= self.nblocks
            && self.generation[slot.first as usize] == slot.generation
            && self.is_used(slot.first)
    }

    /// Returns `slot`'s blocks to the pool. Returns false (and changes
    /// nothing) if the slot is not live, e.g. released twice.
    pub fn free(&mut self, slot: RingSlot) -> bool {
        if !self.is_live(slot) {
            return false;
        }
        self.mark(slot.first, slot.blocks, false);
        // Bump the generation so the handle is dead from now on.
        self.generation[slot.first as usize] = slot.generation.wrapping_add(1);
        self.free_blocks += slot.blocks;
        true
    }

    /// The bytes of a live slot (its whole block run).
    pub fn bytes(&self, slot: RingSlot) -> Option<&[u8]> {
        self.is_live(slot).then(|| {
            let start = slot.first as usize * self.block_size;
            &self.data[start..start + slot.blocks as usize * self.block_size]
        })
    }

    /// The bytes of a live slot, writable.
    pub fn bytes_mut(&mut self, slot: RingSlot) -> Option<&mut [u8]> {
        if !self.is_live(slot) {
            return None;
        }
        let start = slot.first as usize * self.block_size;
        Some(&mut self.data[start..start + slot.blocks as usize * self.block_size])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_walks_the_ring_in_order_and_reuses_freed_blocks() {
        let mut r = SystemRing::new(8, 16);
        let a = r.alloc(10).unwrap(); // 1 block at 0
        let b = r.alloc(40).unwrap(); // 3 blocks at 1..4
        assert_eq!((a.first_block(), a.blocks()), (0, 1));
        assert_eq!((b.first_block(), b.blocks()), (1, 3));
        assert_eq!(r.free_blocks(), 4);
        let c = r.alloc(64).unwrap(); // 4 blocks at 4..8
        assert_eq!(c.first_block(), 4);
        assert!(r.alloc(0).is_none(), "ring is full");
        assert!(r.free(a));
        let d = r.alloc(0).unwrap();
        assert_eq!(d.first_block(), 0);
        assert!(!r.is_live(a), "a's handle died when it was freed");
    }

    #[test]
    fn a_run_never_wraps_and_fragmentation_is_handled() {
        let mut r = SystemRing::new(6, 1);
        let s: Vec<_> = (0..6).map(|_| r.alloc(1).unwrap()).collect();
        assert!(r.free(s[1]));
        assert!(r.free(s[4]));
        assert!(r.free(s[5]));
        // Three free blocks, but the largest run is 2 (4..6).
        assert!(r.alloc(3).is_none());
        let two = r.alloc(2).unwrap();
        assert_eq!(two.first_block(), 4);
        let one = r.alloc(1).unwrap();
        assert_eq!(one.first_block(), 1);
    }

    #[test]
    fn double_free_and_stale_handles_are_refused() {
        let mut r = SystemRing::new(1, 8);
        let a = r.alloc(8).unwrap();
        assert!(r.free(a));
        assert!(!r.free(a));
        assert_eq!(r.free_blocks(), 1);
        let b = r.alloc(8).unwrap();
        assert_eq!(a.first_block(), b.first_block());
        assert!(r.bytes(a).is_none());
        assert!(r.bytes(b).is_some());
    }

    #[test]
    fn alloc_with_copies_the_bytes_and_refuses_when_full() {
        let mut r = SystemRing::new(3, 4);
        let a = r.alloc_with(b"abc").unwrap();
        let b = r.alloc_with(b"defgh").unwrap(); // two blocks
        assert_eq!(&r.bytes(a).unwrap()[..3], b"abc");
        assert_eq!(&r.bytes(b).unwrap()[..5], b"defgh");
        assert_eq!((b.first_block(), b.blocks()), (1, 2));
        assert!(r.alloc_with(b"x").is_none(), "ring is full");
        assert!(r.free(a));
        // The cursor wrapped to block 0, which is free again.
        let c = r.alloc_with(b"z").unwrap();
        assert_eq!(c.first_block(), 0);
        assert_eq!(&r.bytes(c).unwrap()[..1], b"z");
    }

    #[test]
    fn oversized_requests_fail_cleanly() {
        let mut r = SystemRing::new(4, 8);
        assert!(r.alloc(33).is_none());
        assert_eq!(r.free_blocks(), 4);
    }
}
