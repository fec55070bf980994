//! The four AF_XDP rings (fill, completion, RX, TX) and their single-producer
//! / single-consumer protocol.
//!
//! Each ring is memory shared with the kernel: a producer index, a consumer
//! index, a flags word and an array of `size` entries (a power of two).
//! Indices run freely and wrap at 2³²; entry `i` lives at `i & (size - 1)`.
//!
//! * The **producer** writes entries at `[prod, prod + n)`, then publishes
//!   them with a *release* store of `prod + n`. It may only write an entry
//!   once the consumer's index, read with an *acquire* load, shows that the
//!   consumer is done with that slot.
//! * The **consumer** reads the producer index with an *acquire* load, reads
//!   the entries up to it, then hands the slots back with a *release* store
//!   of its own index.
//!
//! The kernel side does the same (`smp_load_acquire` / `smp_store_release`
//! in `net/xdp/xsk_queue.h`). This pairing is all that orders the entry
//! contents; no Rust reference to an entry is ever formed (entries are
//! copied in and out through raw pointers), and the three shared words are
//! only touched through `AtomicU32`.
//!
//! Both sides cache the other side's index and refresh it only when the
//! cached value says there is no room / nothing to read; the kernel even
//! publishes its fill-ring consumer index lazily. So "free space" seen here
//! is a lower bound, never an overestimate, and the driver never assumes it
//! can put every frame it owns into a ring at once.

use std::io;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::sys::Mmap;

/// An RX or TX ring entry (`struct xdp_desc`): where a frame sits in the
/// UMEM and how long it is.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// Offset of the frame's first byte in the UMEM.
    pub addr: u64,
    /// Frame length in bytes.
    pub len: u32,
    /// Option bits (`XDP_PKT_CONTD` for multi-buffer; always 0 here).
    pub options: u32,
}

/// Pointers into one mapped ring.
struct RingPtrs<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
}

impl<T: Copy> RingPtrs<T> {
    /// Checks the kernel's offsets against the mapping and builds the
    /// pointers.
    ///
    /// # Safety
    /// `base` must point to `len` bytes that stay mapped for as long as the
    /// returned pointers are used.
    unsafe fn new(
        base: *mut u8,
        len: usize,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> io::Result<Self> {
        let bad = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ring offsets from the kernel do not fit the mapping: {what}"),
            )
        };
        if size == 0 || !size.is_power_of_two() {
            return Err(bad("size is not a power of two"));
        }
        let word = |o: u64, what: &str| -> io::Result<usize> {
            let o = usize::try_from(o).map_err(|_| bad(what))?;
            if o.checked_add(4).is_none_or(|e| e > len) || o % align_of::<AtomicU32>() != 0 {
                return Err(bad(what));
            }
            Ok(o)
        };
        let p = word(off.producer, "producer")?;
        let c = word(off.consumer, "consumer")?;
        let f = word(off.flags, "flags")?;
        let d = usize::try_from(off.desc).map_err(|_| bad("desc"))?;
        let end = (size as usize)
            .checked_mul(size_of::<T>())
            .and_then(|b| b.checked_add(d));
        if end.is_none_or(|e| e > len) || d % align_of::<T>() != 0 {
            return Err(bad("descriptors"));
        }
        // SAFETY: every offset was checked above to lie, with its object,
        // inside the `len`-byte mapping at `base`, suitably aligned.
        unsafe {
            Ok(RingPtrs {
                producer: base.add(p).cast(),
                consumer: base.add(c).cast(),
                flags: base.add(f).cast(),
                descs: base.add(d).cast(),
                mask: size - 1,
            })
        }
    }

    fn load(p: *const AtomicU32, order: Ordering) -> u32 {
        // SAFETY: `p` points into the live mapping (checked in `new`, kept
        // alive by the owning ring), 4-byte aligned; the kernel writes the
        // word concurrently, which is what atomics are for.
        unsafe { (*p).load(order) }
    }

    fn store(p: *const AtomicU32, v: u32, order: Ordering) {
        // SAFETY: as in `load`; only our side ever writes this word.
        unsafe { (*p).store(v, order) }
    }
}

/// A ring this process produces into (fill, TX).
pub(crate) struct ProdRing<T> {
    p: RingPtrs<T>,
    size: u32,
    /// Next index to write.
    cached_prod: u32,
    /// Kernel's consumer index + size, as last read.
    cached_cons: u32,
    _map: Option<Mmap>,
    _t: PhantomData<T>,
}

/// A ring this process consumes from (completion, RX).
pub(crate) struct ConsRing<T> {
    p: RingPtrs<T>,
    /// Kernel's producer index as last read.
    cached_prod: u32,
    /// Next index to read.
    cached_cons: u32,
    _map: Option<Mmap>,
    _t: PhantomData<T>,
}

// SAFETY: the rings point only into their own mapping, which they own (or,
// for tests, which the caller keeps alive); nothing is tied to a thread.
unsafe impl<T: Send> Send for ProdRing<T> {}
// SAFETY: as for ProdRing.
unsafe impl<T: Send> Send for ConsRing<T> {}

impl<T: Copy> ProdRing<T> {
    /// A producer ring over a mapping of the kernel's ring.
    pub(crate) fn new(map: Mmap, off: &libc::xdp_ring_offset, size: u32) -> io::Result<Self> {
        // SAFETY: the mapping is owned by the ring and outlives the pointers.
        let p = unsafe { RingPtrs::new(map.ptr(), map.len(), off, size)? };
        Ok(Self::with(p, size, Some(map)))
    }

    /// A producer ring over caller-provided memory (tests).
    ///
    /// # Safety
    /// `base..base+len` must stay valid and unaliased by Rust references
    /// while the ring is used.
    #[cfg(test)]
    pub(crate) unsafe fn from_raw(
        base: *mut u8,
        len: usize,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> io::Result<Self> {
        // SAFETY: forwarded caller contract.
        let p = unsafe { RingPtrs::new(base, len, off, size)? };
        Ok(Self::with(p, size, None))
    }

    fn with(p: RingPtrs<T>, size: u32, map: Option<Mmap>) -> Self {
        let prod = RingPtrs::<T>::load(p.producer, Ordering::Relaxed);
        let cons = RingPtrs::<T>::load(p.consumer, Ordering::Acquire);
        ProdRing {
            p,
            size,
            cached_prod: prod,
            cached_cons: cons.wrapping_add(size),
            _map: map,
            _t: PhantomData,
        }
    }

    /// Number of entries.
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// Slots free for writing, at least `want` if possible: refreshes the
    /// consumer index only when the cached one shows fewer than `want`.
    pub(crate) fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free.min(self.size);
        }
        // Acquire: the kernel has finished reading the slots it released.
        let cons = RingPtrs::<T>::load(self.p.consumer, Ordering::Acquire);
        self.cached_cons = cons.wrapping_add(self.size);
        // A kernel index outside [prod - size, prod] would be a kernel bug;
        // clamp so that it can never make us overwrite unconsumed slots.
        self.cached_cons
            .wrapping_sub(self.cached_prod)
            .min(self.size)
    }

    /// Writes entry `i` of the batch being prepared (slot `prod + i`).
    /// The caller has seen `i < free(..)`.
    pub(crate) fn write(&mut self, i: u32, v: T) {
        let idx = self.cached_prod.wrapping_add(i) & self.p.mask;
        // SAFETY: `idx <= mask`, so the slot is inside the descriptor array
        // (checked against the mapping in `RingPtrs::new`). The slot is ours:
        // the consumer index read with acquire in `free` shows the kernel
        // is done with it, and the kernel will not read it before we publish
        // it in `submit`. No reference to the slot exists.
        unsafe { self.p.descs.add(idx as usize).write(v) }
    }

    /// Publishes `n` written entries.
    pub(crate) fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        // Release: the entries written before are visible to the kernel
        // once it sees the new producer index.
        RingPtrs::<T>::store(self.p.producer, self.cached_prod, Ordering::Release);
    }

    /// Entries published but not yet consumed by the kernel (refreshes
    /// the consumer index).
    pub(crate) fn outstanding(&mut self) -> u32 {
        let cons = RingPtrs::<T>::load(self.p.consumer, Ordering::Acquire);
        self.cached_cons = cons.wrapping_add(self.size);
        self.cached_prod.wrapping_sub(cons).min(self.size)
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    pub(crate) fn needs_wakeup(&self) -> bool {
        RingPtrs::<T>::load(self.p.flags, Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

impl<T: Copy> ConsRing<T> {
    /// A consumer ring over a mapping of the kernel's ring.
    pub(crate) fn new(map: Mmap, off: &libc::xdp_ring_offset, size: u32) -> io::Result<Self> {
        // SAFETY: the mapping is owned by the ring and outlives the pointers.
        let p = unsafe { RingPtrs::new(map.ptr(), map.len(), off, size)? };
        Ok(Self::with(p, Some(map)))
    }

    /// A consumer ring over caller-provided memory (tests).
    ///
    /// # Safety
    /// As for [`ProdRing::from_raw`].
    #[cfg(test)]
    pub(crate) unsafe fn from_raw(
        base: *mut u8,
        len: usize,
        off: &libc::xdp_ring_offset,
        size: u32,
    ) -> io::Result<Self> {
        // SAFETY: forwarded caller contract.
        let p = unsafe { RingPtrs::new(base, len, off, size)? };
        Ok(Self::with(p, None))
    }

    fn with(p: RingPtrs<T>, map: Option<Mmap>) -> Self {
        let cons = RingPtrs::<T>::load(p.consumer, Ordering::Relaxed);
        ConsRing {
            p,
            cached_prod: cons,
            cached_cons: cons,
            _map: map,
            _t: PhantomData,
        }
    }

    /// Entries ready to read, at most `max`: refreshes the producer index
    /// only when the cached one shows none.
    pub(crate) fn available(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            // Acquire: entries the kernel wrote before publishing this index
            // are visible to the reads that follow.
            self.cached_prod = RingPtrs::<T>::load(self.p.producer, Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
            // A producer index more than `size` ahead would be a kernel
            // bug; never read more than one ring's worth.
            if n > self.p.mask + 1 {
                self.cached_prod = self.cached_cons.wrapping_add(self.p.mask + 1);
                n = self.p.mask + 1;
            }
        }
        n.min(max)
    }

    /// Reads entry `i` of the available batch (slot `cons + i`); the caller
    /// has seen `i < available(..)`.
    pub(crate) fn read(&self, i: u32) -> T {
        let idx = self.cached_cons.wrapping_add(i) & self.p.mask;
        // SAFETY: `idx <= mask`, inside the descriptor array. The kernel
        // published this slot (acquire load of the producer index in
        // `available`) and will not rewrite it until we release it; we copy
        // it out without forming a reference.
        unsafe { self.p.descs.add(idx as usize).read() }
    }

    /// Hands `n` read entries back to the kernel.
    pub(crate) fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        // Release: our reads of those slots happen before the kernel may
        // reuse them.
        RingPtrs::<T>::store(self.p.consumer, self.cached_cons, Ordering::Release);
    }

    /// Whether the kernel asks to be woken up (`XDP_RING_NEED_WAKEUP`).
    #[allow(dead_code)]
    pub(crate) fn needs_wakeup(&self) -> bool {
        RingPtrs::<T>::load(self.p.flags, Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake kernel-side ring in ordinary memory: producer at 0, consumer
    /// at 64, flags at 128, entries from 192.
    struct Fake {
        mem: Vec<u64>,
        size: u32,
    }

    impl Fake {
        fn new(size: u32) -> Fake {
            Fake {
                mem: vec![0; (192 + size as usize * 16) / 8],
                size,
            }
        }
        fn off() -> libc::xdp_ring_offset {
            libc::xdp_ring_offset {
                producer: 0,
                consumer: 64,
                flags: 128,
                desc: 192,
            }
        }
        fn base(&mut self) -> *mut u8 {
            self.mem.as_mut_ptr().cast()
        }
        fn len(&self) -> usize {
            self.mem.len() * 8
        }
        fn word(&mut self, at: usize) -> &AtomicU32 {
            // SAFETY: test memory, aligned, inside the buffer.
            unsafe { AtomicU32::from_ptr(self.base().add(at).cast()) }
        }
        fn entry(&mut self, i: u32) -> u64 {
            let at = 192 + (i & (self.size - 1)) as usize * 8;
            // SAFETY: inside the buffer, aligned.
            unsafe { self.base().add(at).cast::<u64>().read() }
        }
        fn put(&mut self, i: u32, v: u64) {
            let at = 192 + (i & (self.size - 1)) as usize * 8;
            // SAFETY: inside the buffer, aligned.
            unsafe { self.base().add(at).cast::<u64>().write(v) }
        }
    }

    #[test]
    fn producer_ring_never_overwrites_unconsumed_entries_across_wrap() {
        let mut k = Fake::new(8);
        let (b, l) = (k.base(), k.len());
        // SAFETY: `k` outlives the ring; no references into its memory.
        let mut r = unsafe { ProdRing::<u64>::from_raw(b, l, &Fake::off(), 8) }.unwrap();
        let mut kcons = 0u32;
        let mut next = 0u64;
        for round in 0..100u32 {
            let want = round % 11;
            let free = r.free(want);
            assert!(free <= 8);
            let n = free.min(want);
            for i in 0..n {
                r.write(i, next + u64::from(i));
            }
            r.submit(n);
            next += u64::from(n);
            // The "kernel" consumes some (lazily publishing its index).
            let prod = k.word(0).load(Ordering::Acquire);
            let take = (prod - kcons).min(round % 5);
            for i in 0..take {
                assert_eq!(k.entry(kcons + i), u64::from(kcons + i));
            }
            kcons += take;
            if round % 3 == 0 {
                k.word(64).store(kcons, Ordering::Release);
            }
        }
        assert!(next > 50);
    }

    #[test]
    fn consumer_ring_reads_what_was_published_and_clamps_a_runaway_producer() {
        let mut k = Fake::new(4);
        let (b, l) = (k.base(), k.len());
        // SAFETY: as above.
        let mut r = unsafe { ConsRing::<u64>::from_raw(b, l, &Fake::off(), 4) }.unwrap();
        assert_eq!(r.available(16), 0);
        for i in 0..3 {
            k.put(i, 100 + u64::from(i));
        }
        k.word(0).store(3, Ordering::Release);
        assert_eq!(r.available(2), 2);
        assert_eq!((r.read(0), r.read(1)), (100, 101));
        r.release(2);
        assert_eq!(k.word(64).load(Ordering::Acquire), 2);
        assert_eq!(r.available(16), 1);
        assert_eq!(r.read(0), 102);
        r.release(1);
        // A producer index far ahead (kernel bug) reads at most one ring.
        k.word(0).store(1000, Ordering::Release);
        assert_eq!(r.available(100), 4);
    }

    #[test]
    fn offsets_outside_the_mapping_are_refused() {
        let mut k = Fake::new(4);
        let (b, l) = (k.base(), k.len());
        let mut off = Fake::off();
        off.desc = l as u64;
        // SAFETY: nothing is accessed when construction fails.
        assert!(unsafe { ConsRing::<u64>::from_raw(b, l, &off, 4) }.is_err());
        let mut off = Fake::off();
        off.flags = 2; // misaligned
                       // SAFETY: as above.
        assert!(unsafe { ProdRing::<u64>::from_raw(b, l, &off, 4) }.is_err());
        // SAFETY: as above.
        assert!(unsafe { ProdRing::<u64>::from_raw(b, l, &Fake::off(), 3) }.is_err());
    }
}
