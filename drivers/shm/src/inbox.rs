//! The inbox: the ring of fixed-size slots in a process's segment that
//! its peers write small messages into; many producers, one consumer.
//!
//! (Not bcl-core's system-channel receive ring, `bcl_core::ring`: that is
//! the ring of blocks in which a BCL port reassembles small messages. Small
//! messages between processes of one node travel through the receiver's
//! inbox.)
//!
//! A bounded queue of `cap` slots. Every slot has a sequence word `seq`;
//! the shared `tail` counts claimed positions; the consumer's read index
//! `head` is private (it lives in the consumer's own memory, not in the
//! segment); the consumer *announces* in the shared word `released` how far
//! it has consumed, lazily, in batches.
//!
//! * Position `pos` lives in slot `pos mod cap`. It is **published** when
//!   the slot's `seq == pos + 1` (positions are 64-bit and never wrap, so
//!   no other lap can produce that value). A fresh segment is zero-filled:
//!   no slot is published.
//! * A producer reads `tail = pos` and checks that the slot's previous
//!   occupant (position `pos - cap`) has been consumed: `pos < released +
//!   cap`, using its private cached copy of `released` and reloading it
//!   (acquire) only when the cache says no. It records its *intent*
//!   (`pos + 1`) in its own registration word and claims the slot with
//!   **one** compare-and-swap `tail: pos -> pos + 1` (acquire-release). A
//!   failed CAS means another producer claimed `pos` (the system made
//!   progress: lock-free); it retries at the new tail. If the slot's previous
//!   occupant is still unconsumed and the tail has not moved, the inbox is
//!   **full**: nothing was claimed and the caller retries later
//!   (back-pressure, never loss).
//! * The claimer writes sender, length and payload into the slot and
//!   publishes with `seq = pos + 1` (release), then clears its intent
//!   (release).
//! * The consumer checks `seq == head + 1` (acquire), reads the slot in
//!   place, and advances its private `head`. Every 64 messages (or a
//!   quarter of the inbox, if smaller), and before it sleeps, it stores
//!   `released = head` (release).
//!
//! Memory ordering: the producer's payload writes happen before its
//! release store of `seq`; the consumer's acquire load of `seq` makes them
//! visible. The consumer's reads of slot `p` happen before its release
//! store of `released > p`; a producer's acquire load of `released` orders
//! its writes to that slot (position `p + cap`) after them. So payload bytes
//! are never accessed concurrently by two parties that follow the
//! protocol. `tail` is only ever written by read-modify-write operations,
//! so an acquire load of any later tail value synchronises with every
//! earlier claim (C++20 release sequences); this is what makes the intent
//! words trustworthy for dead-producer recovery (see
//! `InboxConsumer::head_claimed`).
//!
//! Why not Vyukov's per-slot "free" sequence: there the producer must read
//! the slot's `seq` before claiming it, and in a ping-pong that line is the
//! one the consumer is spinning on, so every message would pay one extra
//! cache-line transfer. Checking
//! fullness against a batched `released` counter instead lets the producer
//! write the slot line without reading it first: one transfer per message,
//! like the floor. The consumer writes nothing into slot lines at all.
//!
//! Preparing a reply: a process that has just received a message from a
//! peer will probably send to that peer next. `InboxProducer::prepare_send`
//! fetches the line of the slot it would claim next *for writing*
//! (PREFETCHW) while the receiver is still busy with the message, so the
//! publishing stores later find the line owned and the consumer's next read
//! is a single transfer. With the vCPUs on different core complexes it
//! takes the bare inbox from 1.71 to 1.46 × the floor, and changes nothing
//! on one (docs/PERFORMANCE.md, *Where the shm latency goes*). It is only a
//! hint: no architectural effect, and skipped when the inbox looks full.
//!
//! Sleeping: the consumer that finds the inbox empty sets the `SLEEP` bit
//! in `tail` with a CAS `head -> head | SLEEP`, which only succeeds if no
//! slot is claimed. A producer's claim CAS clears the bit; the producer
//! that cleared it must ring the consumer's doorbell after publishing. Both
//! are read-modify-writes of one word, so they are totally ordered: either
//! the consumer's CAS comes first (the producer sees the bit and wakes it)
//! or the producer's (the consumer's CAS fails and it does not sleep). No
//! fence is needed on the producer's fast path.

use crate::sync::{fence, AtomicU32, AtomicU64, DataCell, Line, Ordering};
use std::mem::size_of;

/// Consumed slots are announced to producers in batches of this many (or
/// a quarter of the inbox if smaller).
pub const ANNOUNCE_BATCH: u64 = 64;

/// Bit of `tail` set while the consumer is (about to be) asleep.
pub(crate) const SLEEP: u64 = 1 << 63;

/// Slot flag: the slot carries no message (written when a claimed slot is
/// abandoned before commit); the consumer skips it.
pub(crate) const FLAG_VOID: u16 = 1;

/// The inbox's shared control words.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct InboxCtl {
    /// Claimed positions, plus the [`SLEEP`] bit. Written only by
    /// read-modify-write operations.
    pub(crate) tail: Line<AtomicU64>,
    /// Positions the consumer has consumed (announced lazily; only the
    /// consumer writes it).
    pub(crate) released: Line<AtomicU64>,
    /// Set by a producer that found the inbox full and wants a wake-up when
    /// space is freed.
    pub(crate) full_waiters: Line<AtomicU32>,
}

/// The header at the start of every slot.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct SlotHdr {
    /// `pos + 1` once position `pos` is published in this slot.
    pub(crate) seq: AtomicU64,
    /// The sender's process address, packed by [`pack_addr`].
    pub(crate) src: AtomicU64,
    /// Length (bits 0..32), sender's directory entry (32..48), flags (48..64).
    pub(crate) meta: AtomicU64,
}

/// Bytes of [`SlotHdr`] (24 outside loom).
pub(crate) const SLOT_HDR: usize = size_of::<SlotHdr>();

/// Packs a process address into 48 bits.
pub(crate) fn pack_addr(addr: bcl_core::ProcessAddr) -> u64 {
    (u64::from(addr.node.0) << 16) | u64::from(addr.port.0)
}

/// Inverse of [`pack_addr`].
pub(crate) fn unpack_addr(v: u64) -> bcl_core::ProcessAddr {
    bcl_core::ProcessAddr::new((v >> 16) as u32, v as u16)
}

fn pack_meta(len: u32, entry: u16, flags: u16) -> u64 {
    u64::from(len) | (u64::from(entry) << 32) | (u64::from(flags) << 48)
}

/// What a published slot says about its message. Nothing here is trusted:
/// the consumer validates it against the inbox's geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotInfo {
    /// Packed sender address.
    pub(crate) src: u64,
    /// Sender's directory entry.
    pub(crate) entry: u16,
    /// Flags ([`FLAG_VOID`]).
    pub(crate) flags: u16,
    /// Payload length, checked to be at most the slot's payload capacity.
    pub(crate) len: usize,
}

/// The state of the consumer's next position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// A published message.
    Ready(SlotInfo),
    /// A published slot whose header is invalid (length beyond the slot);
    /// the consumer should release it and count it.
    Corrupt(u64),
    /// Nothing published at the head (empty, or claimed and being written).
    NotReady,
}

/// A view of one inbox in memory: its control words and slots. Copyable;
/// owns nothing. Whoever creates it keeps the memory alive.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InboxView {
    ctl: *const InboxCtl,
    slots: *mut u8,
    /// One past the last slot.
    end: *mut u8,
    stride: usize,
    cap: u64,
    payload_max: usize,
    #[cfg(loom)]
    cells: *const crate::sync::DataCells,
}

// SAFETY: a view is a set of pointers into shared memory that is only ever
// accessed through atomics and through raw copies whose exclusivity the
// inbox protocol guarantees; the creator of the view promises the memory
// outlives it (see `InboxView::new`). Moving it to another thread changes
// nothing about that.
unsafe impl Send for InboxView {}

impl InboxView {
    /// A view of the inbox whose control block is at `ctl` and whose `cap`
    /// slots of `stride` bytes start at `slots`.
    ///
    /// # Safety
    ///
    /// `ctl` must point to a valid [`InboxCtl`] and `slots` to `cap * stride`
    /// bytes in which each slot starts with a valid [`SlotHdr`], for as long
    /// as the view or any copy of it is used. `cap` must be a power of two,
    /// `stride` a multiple of 8 and at least [`SLOT_HDR`]. The memory must be
    /// accessed by others only through this module's protocol.
    pub(crate) unsafe fn new(
        ctl: *const InboxCtl,
        slots: *mut u8,
        stride: usize,
        cap: u64,
        #[cfg(loom)] cells: *const crate::sync::DataCells,
    ) -> Self {
        debug_assert!(cap.is_power_of_two());
        debug_assert!(stride >= SLOT_HDR && stride.is_multiple_of(8));
        InboxView {
            ctl,
            slots,
            // SAFETY: one past the end of the `cap * stride` bytes the
            // contract promises.
            end: unsafe { slots.add(cap as usize * stride) },
            stride,
            cap,
            payload_max: stride - SLOT_HDR,
            #[cfg(loom)]
            cells,
        }
    }

    fn ctl(&self) -> &InboxCtl {
        // SAFETY: `new`'s contract: `ctl` is valid while the view is used.
        unsafe { &*self.ctl }
    }

    fn slot(&self, pos: u64) -> *mut u8 {
        let i = (pos & (self.cap - 1)) as usize;
        // SAFETY: i < cap, so the offset stays inside the `cap * stride`
        // bytes `new`'s contract promises.
        unsafe { self.slots.add(i * self.stride) }
    }

    fn hdr(&self, pos: u64) -> &SlotHdr {
        self.hdr_at(self.slot(pos))
    }

    /// The header of the slot starting at `slot`, which must be a slot
    /// pointer of this view (from [`slot`](Self::slot) or
    /// [`next_slot`](Self::next_slot)).
    #[inline]
    fn hdr_at(&self, slot: *mut u8) -> &SlotHdr {
        // SAFETY: `slot` is the start of one of our slots, which starts with
        // a valid, 8-aligned SlotHdr (`new`'s contract); SlotHdr holds only
        // atomics, so a shared reference to it is sound even though other
        // processes write it concurrently.
        unsafe { &*(slot as *const SlotHdr) }
    }

    /// The slot after `slot` (wrapping at the end of the ring).
    #[inline]
    fn next_slot(&self, slot: *mut u8) -> *mut u8 {
        // SAFETY: `slot` is one of our slots, so `slot + stride` is at most
        // one past the end, which we compare against.
        let n = unsafe { slot.add(self.stride) };
        if n == self.end {
            self.slots
        } else {
            n
        }
    }

    /// Prefetches the header line of `slot` for reading (a hint).
    #[inline]
    fn prefetch(&self, slot: *mut u8) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch never faults and has no architectural
            // effect; the address is inside the inbox anyway. SSE is part of
            // the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(slot as *const i8) };
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = slot;
    }

    /// Prefetches the header line of `slot` for writing (PREFETCHW), if
    /// the CPU has the instruction; a hint.
    #[inline]
    fn prefetch_for_write(&self, slot: *mut u8) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if has_prefetchw() {
            // SAFETY: PREFETCHW never faults and has no architectural
            // effect (the CPU supports it: checked above); it reads no
            // memory the program can observe and writes none.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{0}]",
                    in(reg) slot,
                    options(nostack, preserves_flags, readonly)
                )
            };
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = slot;
    }

    fn cell(&self, pos: u64) -> &DataCell {
        #[cfg(loom)]
        // SAFETY: the loom harness keeps the cell table alive with the inbox.
        return unsafe { (*self.cells).get((pos & (self.cap - 1)) as usize) };
        #[cfg(not(loom))]
        {
            let _ = pos;
            &DataCell {}
        }
    }

    /// Puts a freshly allocated inbox in its initial state: no slot
    /// published, tail and released zero (what a zero-filled segment
    /// already holds). Only the inbox's owner calls this, before anyone else
    /// can see the memory.
    pub(crate) fn init(&self) {
        for i in 0..self.cap {
            let h = self.hdr(i);
            h.seq.store(0, Ordering::Relaxed);
            h.src.store(0, Ordering::Relaxed);
            h.meta.store(0, Ordering::Relaxed);
        }
        let c = self.ctl();
        c.tail.store(0, Ordering::Relaxed);
        c.released.store(0, Ordering::Relaxed);
        c.full_waiters.store(0, Ordering::Relaxed);
    }
}

/// Whether this CPU has PREFETCHW (CPUID 8000_0001h, ECX bit 8: every
/// 64-bit AMD CPU, Intel from Broadwell on), asked once.
#[cfg(all(target_arch = "x86_64", not(loom)))]
fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        use std::arch::x86_64::__cpuid;
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    })
}

/// Why a producer could not send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InboxSendError {
    /// Every slot is taken; retry later.
    Full,
    /// The message does not fit in one slot.
    TooLarge,
}

/// One producer's handle on a (remote) inbox.
#[derive(Debug)]
pub(crate) struct InboxProducer {
    view: InboxView,
    /// This producer's intent word (in its directory entry of the inbox
    /// owner's segment): `pos + 1` while claiming or writing `pos`, else 0.
    intent: *const AtomicU64,
    entry: u16,
    src: u64,
    /// Cached copy of the consumer's `released`.
    released: std::cell::Cell<u64>,
    /// The position whose slot [`prepare_send`](Self::prepare_send) last
    /// fetched (`u64::MAX`: none).
    prepared: std::cell::Cell<u64>,
}

// SAFETY: see `InboxView`; the intent word is likewise an atomic in shared
// memory kept alive by the producer's creator.
unsafe impl Send for InboxProducer {}

/// A slot claimed by [`InboxProducer::claim`], to be written in place.
/// Dropping it publishes it as a void slot (which the consumer skips),
/// because a claim cannot be undone. ([`InboxProducer::try_send`] is the
/// copy-in send; this is the in-place one, used by the fault-injection
/// hook and available to a method that builds frames in the slot.)
#[derive(Debug)]
pub(crate) struct SlotWriter<'a> {
    producer: &'a InboxProducer,
    pos: u64,
    slot: *mut u8,
    done: bool,
}

impl InboxProducer {
    /// A producer on `view` with intent word `intent`, directory entry
    /// `entry` and packed address `src`.
    ///
    /// # Safety
    ///
    /// `intent` must point to an `AtomicU64` that stays valid as long as the
    /// producer, and that no other producer uses.
    pub(crate) unsafe fn new(
        view: InboxView,
        intent: *const AtomicU64,
        entry: u16,
        src: u64,
    ) -> Self {
        InboxProducer {
            view,
            intent,
            entry,
            src,
            released: std::cell::Cell::new(0),
            prepared: std::cell::Cell::new(u64::MAX),
        }
    }

    fn intent(&self) -> &AtomicU64 {
        // SAFETY: `new`'s contract.
        unsafe { &*self.intent }
    }

    /// Largest message a slot holds.
    pub(crate) fn payload_max(&self) -> usize {
        self.view.payload_max
    }

    /// A hint that this producer will probably send soon (its consumer just
    /// sent us a message): fetches the line of the slot at the current tail
    /// for writing (see the module documentation). Does nothing when that
    /// slot was fetched already (a peer that sends many messages without
    /// our answering costs one prefetch, not one per message) or when the
    /// inbox looks full (that slot's line is the consumer's).
    #[inline]
    pub(crate) fn prepare_send(&self) {
        let pos = self.view.ctl().tail.load(Ordering::Relaxed) & !SLEEP;
        if pos == self.prepared.get() || pos >= self.released.get().wrapping_add(self.view.cap) {
            return;
        }
        self.prepared.set(pos);
        self.view.prefetch_for_write(self.view.slot(pos));
    }

    /// The position [`prepare_send`](Self::prepare_send) last fetched, if
    /// any.
    #[cfg(test)]
    pub(crate) fn prepared(&self) -> Option<u64> {
        Some(self.prepared.get()).filter(|&p| p != u64::MAX)
    }

    /// Claims the next slot with one successful compare-and-swap, or
    /// returns `None` if the inbox is full.
    #[inline]
    pub(crate) fn claim(&self) -> Option<SlotWriter<'_>> {
        let (pos, slot, _wake) = self.claim_raw()?;
        Some(SlotWriter {
            producer: self,
            pos,
            slot,
            done: false,
        })
    }

    /// The claim itself: returns the position, its slot, and whether the
    /// claim cleared the consumer's sleep bit.
    #[inline]
    fn claim_raw(&self) -> Option<(u64, *mut u8, bool)> {
        let ctl = self.view.ctl();
        let cap = self.view.cap;
        let mut t = ctl.tail.load(Ordering::Relaxed);
        loop {
            let pos = t & !SLEEP;
            if pos >= self.released.get().wrapping_add(cap) {
                let r = ctl.released.load(Ordering::Acquire);
                self.released.set(r);
                if pos >= r.wrapping_add(cap) {
                    // The slot's previous occupant is unconsumed: full,
                    // unless our tail was stale.
                    let cur = ctl.tail.load(Ordering::Relaxed);
                    if cur == t {
                        self.intent().store(0, Ordering::Relaxed);
                        return None;
                    }
                    t = cur;
                    continue;
                }
            }
            // Record the intent before the claim can become visible: the
            // CAS below is a release operation, so a consumer that sees the
            // new tail (acquire) also sees this store.
            self.intent().store(pos + 1, Ordering::Relaxed);
            match ctl
                .tail
                .compare_exchange_weak(t, pos + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Some((pos, self.view.slot(pos), t & SLEEP != 0)),
                Err(cur) => t = cur,
            }
        }
    }

    /// Copies `bytes` into the next slot and publishes it. On success,
    /// returns whether the consumer must be woken (its sleep bit was set).
    #[inline]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> Result<bool, InboxSendError> {
        if bytes.len() > self.view.payload_max {
            return Err(InboxSendError::TooLarge);
        }
        let (pos, slot, wake) = self.claim_raw().ok_or(InboxSendError::Full)?;
        self.view.cell(pos).write(|| {
            // SAFETY: len <= payload_max, so the destination lies in the
            // claimed slot's payload area, which by the inbox protocol nobody
            // else touches until we publish; the source is the caller's
            // separate buffer.
            unsafe { crate::copy::copy_bytes(slot.add(SLOT_HDR), bytes.as_ptr(), bytes.len()) }
        });
        self.publish(pos, slot, bytes.len() as u32, 0);
        Ok(wake)
    }

    /// As [`try_send`](Self::try_send) with the payload `tag` followed by
    /// `bytes`, written straight into the slot (no staging copy): the
    /// shape of a method message (tag byte, then the data).
    #[inline]
    pub(crate) fn try_send_tagged(&self, tag: u8, bytes: &[u8]) -> Result<bool, InboxSendError> {
        let len = 1 + bytes.len();
        if len > self.view.payload_max {
            return Err(InboxSendError::TooLarge);
        }
        let (pos, slot, wake) = self.claim_raw().ok_or(InboxSendError::Full)?;
        self.view.cell(pos).write(|| {
            // SAFETY: 1 + bytes.len() <= payload_max, so both writes lie in
            // the claimed slot's payload area, which by the inbox protocol
            // nobody else touches until we publish; the source is the
            // caller's separate buffer.
            unsafe {
                slot.add(SLOT_HDR).write(tag);
                crate::copy::copy_bytes(slot.add(SLOT_HDR + 1), bytes.as_ptr(), bytes.len())
            }
        });
        self.publish(pos, slot, len as u32, 0);
        Ok(wake)
    }

    /// As [`try_send`](Self::try_send) with the payload `prefix` followed
    /// by `bytes`, both written straight into the slot.
    #[inline]
    pub(crate) fn try_send_prefixed(
        &self,
        prefix: &[u8],
        bytes: &[u8],
    ) -> Result<bool, InboxSendError> {
        let len = prefix.len() + bytes.len();
        if len > self.view.payload_max {
            return Err(InboxSendError::TooLarge);
        }
        let (pos, slot, wake) = self.claim_raw().ok_or(InboxSendError::Full)?;
        self.view.cell(pos).write(|| {
            // SAFETY: prefix.len() + bytes.len() <= payload_max, so both
            // copies lie in the claimed slot's payload area, which by the
            // inbox protocol nobody else touches until we publish; the
            // sources are the caller's separate buffers.
            unsafe {
                crate::copy::copy_bytes(slot.add(SLOT_HDR), prefix.as_ptr(), prefix.len());
                crate::copy::copy_bytes(
                    slot.add(SLOT_HDR + prefix.len()),
                    bytes.as_ptr(),
                    bytes.len(),
                )
            }
        });
        self.publish(pos, slot, len as u32, 0);
        Ok(wake)
    }

    /// Publishes the claimed position `pos` in `slot` with a payload of
    /// `len` bytes (at most the slot's capacity) and `flags`.
    #[inline]
    fn publish(&self, pos: u64, slot: *mut u8, len: u32, flags: u16) {
        // Read-prefetch the header line of the next slot: the consumer is
        // (or will be) spinning on it, and holding a shared copy lets our
        // next write to it be an upgrade instead of a full fetch.
        self.view.prefetch(self.view.next_slot(slot));
        let h = self.view.hdr_at(slot);
        h.src.store(self.src, Ordering::Relaxed);
        h.meta
            .store(pack_meta(len, self.entry, flags), Ordering::Relaxed);
        h.seq.store(pos + 1, Ordering::Release);
        // Release: a consumer that reads 0 here (acquire) also sees the
        // publication above (dead-producer recovery relies on it).
        self.intent().store(0, Ordering::Release);
    }

    /// Whether the slot at the current tail is free (a hint: another
    /// producer may take it first).
    pub(crate) fn has_space(&self) -> bool {
        let ctl = self.view.ctl();
        let t = ctl.tail.load(Ordering::Relaxed) & !SLEEP;
        let r = ctl.released.load(Ordering::Acquire);
        self.released.set(r);
        t < r.wrapping_add(self.view.cap)
    }

    /// Registers this producer as waiting for space: the consumer will
    /// report it from [`InboxConsumer::announce`]. The caller then
    /// re-checks [`has_space`](Self::has_space) before sleeping (the fence
    /// here pairs with the consumer's).
    pub(crate) fn want_space(&self) {
        // Release: a consumer that takes the flag (acquire) also sees the
        // caller's per-producer waiting flag, stored before this call.
        self.view.ctl().full_waiters.store(1, Ordering::Release);
        fence(Ordering::SeqCst);
    }
}

impl SlotWriter<'_> {
    /// Copies `bytes` into the payload at `offset`. Bytes beyond the slot
    /// are cut off; returns how many were written.
    #[inline]
    pub(crate) fn write(&mut self, offset: usize, bytes: &[u8]) -> usize {
        let view = &self.producer.view;
        let n = bytes.len().min(view.payload_max.saturating_sub(offset));
        if n == 0 {
            return 0;
        }
        view.cell(self.pos).write(|| {
            // SAFETY: offset + n <= payload_max, so the destination lies in
            // this slot's payload area; we claimed the slot, so by the inbox
            // protocol nobody else reads or writes it until we publish; the
            // source is a separate private buffer, so they do not overlap.
            unsafe { crate::copy::copy_bytes(self.slot.add(SLOT_HDR + offset), bytes.as_ptr(), n) }
        });
        n
    }

    fn publish(&mut self, len: usize, flags: u16) {
        let p = self.producer;
        p.publish(
            self.pos,
            self.slot,
            len.min(p.view.payload_max) as u32,
            flags,
        );
        self.done = true;
    }
}

impl Drop for SlotWriter<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.publish(0, FLAG_VOID);
        }
    }
}

/// The single consumer of an inbox. Its read index lives here, in the
/// consumer's private memory.
#[derive(Debug)]
pub(crate) struct InboxConsumer {
    view: InboxView,
    head: u64,
    /// The slot of `head`.
    cur: *mut u8,
    /// Messages consumed since `released` was last announced.
    unannounced: u64,
}

// SAFETY: `cur` points into the inbox memory the view covers (see
// `InboxView`); the consumer is the only user of its private state.
unsafe impl Send for InboxConsumer {}

impl InboxConsumer {
    /// The consumer of `view`, starting at position 0 (a freshly
    /// initialised inbox).
    pub(crate) fn new(view: InboxView) -> Self {
        InboxConsumer {
            view,
            head: 0,
            cur: view.slot(0),
            unannounced: 0,
        }
    }

    /// The next position to consume.
    pub(crate) fn head(&self) -> u64 {
        self.head
    }

    /// Largest payload a slot holds.
    pub(crate) fn payload_max(&self) -> usize {
        self.view.payload_max
    }

    /// Positions claimed so far (the tail without its sleep bit).
    pub(crate) fn tail(&self) -> u64 {
        self.view.ctl().tail.load(Ordering::Acquire) & !SLEEP
    }

    /// What is at the head. One acquire load on the fast path.
    #[inline]
    pub(crate) fn poll(&self) -> Head {
        let h = self.view.hdr_at(self.cur);
        if h.seq.load(Ordering::Acquire) != self.head.wrapping_add(1) {
            return Head::NotReady;
        }
        let meta = h.meta.load(Ordering::Relaxed);
        let len = meta as u32 as usize;
        if len > self.view.payload_max {
            return Head::Corrupt(meta);
        }
        Head::Ready(SlotInfo {
            src: h.src.load(Ordering::Relaxed),
            entry: (meta >> 32) as u16,
            flags: (meta >> 48) as u16,
            len,
        })
    }

    /// Pointer to the head slot's payload. Reading `len` bytes from it is
    /// allowed while [`poll`](Self::poll) says `Ready` with that `len` and
    /// the slot has not been released.
    pub(crate) fn payload_ptr(&self) -> *const u8 {
        // SAFETY: the payload area follows the header inside the slot.
        unsafe { self.cur.add(SLOT_HDR) }
    }

    /// Runs `f` as a read of the head slot's payload (a loom race check).
    pub(crate) fn reading<R>(&self, f: impl FnOnce() -> R) -> R {
        self.view.cell(self.head).read(f)
    }

    /// Copies the head slot's payload (`len` from a `Ready` poll) into
    /// `dst`; returns the bytes copied.
    #[inline]
    pub(crate) fn copy_head(&self, len: usize, dst: &mut [u8]) -> usize {
        let n = len.min(dst.len()).min(self.view.payload_max);
        self.reading(|| {
            // SAFETY: n is within the slot's payload area; the slot is
            // published and not released, so by the protocol nobody writes
            // it; `dst` is private memory, so they do not overlap.
            unsafe { crate::copy::copy_bytes(dst.as_mut_ptr(), self.payload_ptr(), n) }
        });
        n
    }

    /// Consumes the head slot and advances. The slot goes back to the
    /// producers when the consumer next announces `released` (see
    /// [`announce`](Self::announce)).
    #[inline]
    pub(crate) fn release(&mut self) {
        self.head = self.head.wrapping_add(1);
        self.cur = self.view.next_slot(self.cur);
        self.unannounced += 1;
    }

    /// Whether the head position is claimed by a producer but not yet
    /// published.
    ///
    /// When this is true and stays true, the claimer is one of the
    /// producers whose intent word reads `head + 1`: the claimer stored its
    /// intent before its claim (release CAS) and clears it only after
    /// publishing (release store), and our acquire load of `tail` saw the
    /// claim. So if every producer whose intent is `head + 1` is dead, the
    /// claimer is dead and [`skip_dead`](Self::skip_dead) is safe. (Intent
    /// words must be read, with acquire, after this call returns true.)
    pub(crate) fn head_claimed(&self) -> bool {
        let t = self.view.ctl().tail.load(Ordering::Acquire) & !SLEEP;
        t > self.head && self.poll() == Head::NotReady
    }

    /// Skips the head slot, which a dead producer claimed and never
    /// published.
    pub(crate) fn skip_dead(&mut self) {
        self.release();
    }

    /// Tries to set the sleep bit; succeeds only if nothing is claimed at
    /// or after the head (so the inbox is empty and every later claim will
    /// see the bit).
    pub(crate) fn arm_sleep(&self) -> bool {
        let tail = &self.view.ctl().tail;
        let t = tail.load(Ordering::Acquire);
        if t == self.head | SLEEP {
            return true;
        }
        t == self.head
            && tail
                .compare_exchange(
                    self.head,
                    self.head | SLEEP,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// Clears the sleep bit if no producer cleared it already.
    pub(crate) fn disarm_sleep(&self) {
        let _ = self.view.ctl().tail.compare_exchange(
            self.head | SLEEP,
            self.head,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Announces consumed slots to the producers (`released = head`,
    /// release) once [`ANNOUNCE_BATCH`] (at most a quarter of the inbox)
    /// have accumulated, or whenever anything is unannounced if `force`.
    /// Then returns whether producers asked to be woken when space is freed
    /// (checked after a fence, which is thus paid once per batch).
    ///
    /// Batching cannot starve a producer: a producer sees the inbox full
    /// only if unconsumed plus unannounced slots make up the whole inbox, so
    /// at least `cap - batch + 1 >= batch` messages wait to be consumed, and
    /// consuming them triggers an announcement. A consumer about to sleep
    /// forces one (see `Mailbox::prepare_wait`).
    #[inline]
    pub(crate) fn announce(&mut self, force: bool) -> bool {
        let batch = ANNOUNCE_BATCH.min(self.view.cap / 4);
        if self.unannounced == 0 || (!force && self.unannounced < batch) {
            return false;
        }
        self.unannounced = 0;
        let c = self.view.ctl();
        c.released.store(self.head, Ordering::Release);
        fence(Ordering::SeqCst);
        c.full_waiters.load(Ordering::Relaxed) != 0 && c.full_waiters.swap(0, Ordering::AcqRel) != 0
    }
}
