//! DMA memory: regions that a device reads and writes behind the program's
//! back.
//!
//! Once memory is mapped for DMA, the device may access it at any time, so
//! (as the rust-vmm `VfioOps::vfio_dma_map` contract says) no Rust
//! reference to it may ever exist: the compiler would be entitled to assume
//! that the bytes do not change under a `&[u8]`. [`DmaRegion`] therefore
//! never hands out references. Every access is a volatile load or store on
//! a raw pointer, or an atomic operation for the ring indices that order a
//! producer/consumer protocol with the device; bulk copies go word by word
//! with volatile accesses.
//!
//! A region knows its device address ([`DmaRegion::iova`]), which is what
//! goes into descriptors. With the real VFIO host the IOVA equals the
//! virtual address (as in ixy); with the in-memory host it is deliberately
//! different, so a driver that puts a pointer where an IOVA belongs fails
//! its tests.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

/// What releases a [`DmaRegion`]'s memory: removes the IOMMU mapping, then
/// frees the pages. Implemented by each PCI host.
pub trait DmaBacking: Send {
    /// Unmaps `[iova, iova + len)` from the device's IOMMU domain and frees
    /// the memory at `ptr`. Called exactly once, from `DmaRegion::drop`.
    /// Errors cannot be returned from a drop; implementations log them.
    fn release(&mut self, ptr: NonNull<u8>, len: usize, iova: u64);
}

/// A block of memory that a device can access by DMA at
/// [`iova`](Self::iova).
///
/// All accessors take byte offsets from the start of the region and panic
/// if the access is outside it or (for 16/32/64-bit accesses) misaligned:
/// those are driver bugs. Offsets or lengths that come from the device
/// must be checked first, e.g. with [`view`](Self::view), which returns
/// `None` instead of panicking.
pub struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    iova: u64,
    page_size: usize,
    backing: Box<dyn DmaBacking>,
}

// SAFETY: the region owns its memory (no other Rust object refers to it)
// and every access goes through raw-pointer volatile or atomic operations,
// so moving the owner to another thread is sound. It is deliberately not
// `Sync`: `&self` accessors perform plain (non-atomic) volatile stores,
// which must not race with each other across threads.
unsafe impl Send for DmaRegion {}

impl std::fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("page_size", &self.page_size)
            .finish()
    }
}

impl DmaRegion {
    /// Wraps memory that a host has allocated and mapped for DMA.
    ///
    /// # Safety
    ///
    /// * `ptr` must be valid for reads and writes of `len` bytes, aligned
    ///   to at least 8 bytes (hosts give page-aligned memory), and stay
    ///   valid until `backing.release` is called by the region's drop.
    /// * No Rust reference to the memory may exist now or later; from now
    ///   on only the region (and the device) access it.
    /// * `iova` must be where the device sees `ptr`.
    pub unsafe fn from_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        iova: u64,
        page_size: usize,
        backing: Box<dyn DmaBacking>,
    ) -> Self {
        Self {
            ptr,
            len,
            iova,
            page_size,
            backing,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device-side (IO virtual) address of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// The device-side address of byte `offset` (which must be inside the
    /// region or one past its end).
    #[track_caller]
    pub fn iova_at(&self, offset: usize) -> u64 {
        assert!(offset <= self.len, "offset {offset:#x} outside DMA region");
        self.iova + offset as u64
    }

    /// The page size backing the region: 2 MiB for huge pages, 4 KiB
    /// otherwise (slower: more IOTLB misses).
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The virtual address of byte 0, for diagnostics and for comparing
    /// with [`iova`](Self::iova). Never dereference it into a reference.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    #[inline]
    #[track_caller]
    fn at(&self, offset: usize, width: usize) -> *mut u8 {
        assert!(
            offset.checked_add(width).is_some_and(|end| end <= self.len),
            "DMA access at {offset:#x}+{width} outside region of {:#x} bytes",
            self.len
        );
        assert!(
            offset.is_multiple_of(width.min(8)),
            "misaligned DMA access at {offset:#x} (width {width})"
        );
        // SAFETY: offset + width <= len, so the result stays inside the
        // allocation that `ptr` points to.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// Reads one byte.
    pub fn read_u8(&self, offset: usize) -> u8 {
        let p = self.at(offset, 1);
        // SAFETY: `at` checked the range; the memory is valid (constructor
        // contract) and read only through raw-pointer volatile accesses.
        unsafe { p.read_volatile() }
    }

    /// Reads 16 bits (native byte order).
    pub fn read_u16(&self, offset: usize) -> u16 {
        let p = self.at(offset, 2).cast::<u16>();
        // SAFETY: in range and 2-byte aligned (checked by `at`; the base is
        // at least 8-byte aligned); volatile raw access only.
        unsafe { p.read_volatile() }
    }

    /// Reads 32 bits (native byte order).
    pub fn read_u32(&self, offset: usize) -> u32 {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: in range and aligned (checked by `at`); volatile raw access.
        unsafe { p.read_volatile() }
    }

    /// Reads 64 bits (native byte order).
    pub fn read_u64(&self, offset: usize) -> u64 {
        let p = self.at(offset, 8).cast::<u64>();
        // SAFETY: in range and aligned (checked by `at`); volatile raw access.
        unsafe { p.read_volatile() }
    }

    /// Writes one byte.
    pub fn write_u8(&self, offset: usize, value: u8) {
        let p = self.at(offset, 1);
        // SAFETY: in range (checked by `at`); volatile raw access only.
        unsafe { p.write_volatile(value) }
    }

    /// Writes 16 bits (native byte order).
    pub fn write_u16(&self, offset: usize, value: u16) {
        let p = self.at(offset, 2).cast::<u16>();
        // SAFETY: in range and aligned (checked by `at`); volatile raw access.
        unsafe { p.write_volatile(value) }
    }

    /// Writes 32 bits (native byte order).
    pub fn write_u32(&self, offset: usize, value: u32) {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: in range and aligned (checked by `at`); volatile raw access.
        unsafe { p.write_volatile(value) }
    }

    /// Writes 64 bits (native byte order).
    pub fn write_u64(&self, offset: usize, value: u64) {
        let p = self.at(offset, 8).cast::<u64>();
        // SAFETY: in range and aligned (checked by `at`); volatile raw access.
        unsafe { p.write_volatile(value) }
    }

    /// Atomically loads 16 bits with `order` (for ring indices the device
    /// writes: use `Acquire` before reading what they publish).
    pub fn load_u16(&self, offset: usize, order: Ordering) -> u16 {
        let p = self.at(offset, 2).cast::<u16>();
        // SAFETY: in range and 2-byte aligned; the memory is only accessed
        // through raw pointers, so viewing these two bytes as an atomic for
        // the duration of the call creates no conflicting reference.
        unsafe { AtomicU16::from_ptr(p) }.load(order)
    }

    /// Atomically stores 16 bits with `order` (for ring indices the driver
    /// publishes: use `Release` after writing what they cover).
    pub fn store_u16(&self, offset: usize, value: u16, order: Ordering) {
        let p = self.at(offset, 2).cast::<u16>();
        // SAFETY: as in `load_u16`.
        unsafe { AtomicU16::from_ptr(p) }.store(value, order)
    }

    /// Atomically loads 32 bits with `order`.
    pub fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: as in `load_u16`, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(p) }.load(order)
    }

    /// Atomically stores 32 bits with `order`.
    pub fn store_u32(&self, offset: usize, value: u32, order: Ordering) {
        let p = self.at(offset, 4).cast::<u32>();
        // SAFETY: as in `load_u16`, 4-byte aligned.
        unsafe { AtomicU32::from_ptr(p) }.store(value, order)
    }

    /// Copies `src` into the region at `offset`.
    #[track_caller]
    pub fn write_bytes(&self, offset: usize, src: &[u8]) {
        let p = self.at_bytes(offset, src.len());
        // SAFETY: `at_bytes` checked that [offset, offset + len) is inside
        // the region; `src` is ordinary memory that cannot overlap DMA
        // memory (no references to DMA memory exist).
        unsafe { volatile_copy_in(p, src) }
    }

    /// Copies `dst.len()` bytes from the region at `offset` into `dst`.
    #[track_caller]
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        let p = self.at_bytes(offset, dst.len());
        // SAFETY: as in `write_bytes`.
        unsafe { volatile_copy_out(p, dst) }
    }

    /// Sets `len` bytes at `offset` to `byte`.
    #[track_caller]
    pub fn fill(&self, offset: usize, len: usize, byte: u8) {
        let p = self.at_bytes(offset, len);
        for i in 0..len {
            // SAFETY: i < len and [offset, offset + len) is in range.
            unsafe { p.add(i).write_volatile(byte) }
        }
    }

    #[inline]
    #[track_caller]
    fn at_bytes(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "DMA copy at {offset:#x}+{len} outside region of {:#x} bytes",
            self.len
        );
        // SAFETY: offset <= len, so the pointer stays inside (or one past)
        // the allocation.
        unsafe { self.ptr.as_ptr().add(offset) }
    }

    /// A read-only view of `[offset, offset + len)`, or `None` if that is
    /// not inside the region. Use this for ranges that the device reports.
    pub fn view(&self, offset: usize, len: usize) -> Option<DmaView<'_>> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then_some(DmaView {
            region: self,
            offset,
            len,
        })
    }
}

impl Drop for DmaRegion {
    fn drop(&mut self) {
        self.backing.release(self.ptr, self.len, self.iova);
    }
}

/// A checked byte range of a [`DmaRegion`] (for example one received
/// frame), read by copying.
#[derive(Clone, Copy, Debug)]
pub struct DmaView<'a> {
    region: &'a DmaRegion,
    offset: usize,
    len: usize,
}

impl DmaView<'_> {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies bytes `[start, start + dst.len())` of the view into `dst`.
    /// Returns `false` (copying nothing) if that range is not inside the
    /// view.
    pub fn copy_to(&self, start: usize, dst: &mut [u8]) -> bool {
        match start.checked_add(dst.len()) {
            Some(end) if end <= self.len => {
                self.region.read_bytes(self.offset + start, dst);
                true
            }
            _ => false,
        }
    }

    /// Copies the whole view into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        self.region.read_bytes(self.offset, &mut v);
        v
    }
}

/// Copies `src` to DMA memory at `dst` with volatile stores, 8 bytes at a
/// time where `dst` is aligned.
///
/// # Safety
///
/// `dst` must be valid for writes of `src.len()` bytes and be DMA (or
/// device-shared) memory that no reference covers.
pub(crate) unsafe fn volatile_copy_in(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let mut i = 0;
    while i < n && !(dst as usize + i).is_multiple_of(8) {
        // SAFETY: i < n, inside the caller's range.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
    while i + 8 <= n {
        let mut w = [0u8; 8];
        w.copy_from_slice(&src[i..i + 8]);
        // SAFETY: dst + i is 8-byte aligned (loop above) and i + 8 <= n.
        unsafe {
            dst.add(i)
                .cast::<u64>()
                .write_volatile(u64::from_ne_bytes(w))
        };
        i += 8;
    }
    while i < n {
        // SAFETY: i < n.
        unsafe { dst.add(i).write_volatile(src[i]) };
        i += 1;
    }
}

/// Copies DMA memory at `src` into `dst` with volatile loads, 8 bytes at a
/// time where `src` is aligned.
///
/// # Safety
///
/// `src` must be valid for reads of `dst.len()` bytes and be DMA (or
/// device-shared) memory that no reference covers.
pub(crate) unsafe fn volatile_copy_out(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let mut i = 0;
    while i < n && !(src as usize + i).is_multiple_of(8) {
        // SAFETY: i < n, inside the caller's range.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
    while i + 8 <= n {
        // SAFETY: src + i is 8-byte aligned and i + 8 <= n.
        let w = unsafe { src.add(i).cast::<u64>().read_volatile() };
        dst[i..i + 8].copy_from_slice(&w.to_ne_bytes());
        i += 8;
    }
    while i < n {
        // SAFETY: i < n.
        dst[i] = unsafe { src.add(i).read_volatile() };
        i += 1;
    }
}

/// A [`DmaBacking`] for plain heap memory with no IOMMU behind it, used by
/// [`DmaRegion::heap`] for tests of code that only needs DMA-shaped
/// memory.
struct HeapBacking {
    layout: std::alloc::Layout,
}

impl DmaBacking for HeapBacking {
    fn release(&mut self, ptr: NonNull<u8>, _len: usize, _iova: u64) {
        // SAFETY: ptr was returned by `alloc_zeroed(self.layout)` in
        // `DmaRegion::heap` and is released exactly once.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), self.layout) }
    }
}

impl DmaRegion {
    /// A page-aligned, zeroed heap region that is *not* mapped for any
    /// device, reporting `iova` as its device address. For tests of code
    /// that only formats DMA memory (rings, descriptors).
    pub fn heap(len: usize, iova: u64) -> Self {
        let layout =
            std::alloc::Layout::from_size_align(len.max(1), 4096).expect("DMA heap layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        // SAFETY: `ptr` is a fresh, exclusively owned, page-aligned
        // allocation of at least `len` bytes, freed only by the backing.
        unsafe { DmaRegion::from_raw_parts(ptr, len, iova, 4096, Box::new(HeapBacking { layout })) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_accessors_round_trip_and_atomic_view_agrees() {
        let r = DmaRegion::heap(4096, 0x1000_0000);
        r.write_u8(1, 0xab);
        r.write_u16(2, 0x1234);
        r.write_u32(4, 0xdead_beef);
        r.write_u64(8, 0x0102_0304_0506_0708);
        assert_eq!(r.read_u8(1), 0xab);
        assert_eq!(r.read_u16(2), 0x1234);
        assert_eq!(r.read_u32(4), 0xdead_beef);
        assert_eq!(r.read_u64(8), 0x0102_0304_0506_0708);
        assert_eq!(r.load_u16(2, Ordering::Acquire), 0x1234);
        r.store_u32(16, 7, Ordering::Release);
        assert_eq!(r.read_u32(16), 7);
        assert_eq!(r.iova_at(16), 0x1000_0010);
        assert_eq!(r.page_size(), 4096);
    }

    #[test]
    fn byte_copies_handle_every_alignment_and_length() {
        let r = DmaRegion::heap(256, 0);
        for start in 0..17 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 63, 100] {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + start) as u8 ^ 0x5a).collect();
                r.fill(0, 256, 0xee);
                r.write_bytes(start, &src);
                let mut back = vec![0u8; len];
                r.read_bytes(start, &mut back);
                assert_eq!(back, src, "start {start} len {len}");
                if start > 0 {
                    assert_eq!(r.read_u8(start - 1), 0xee, "byte before overwritten");
                }
                assert_eq!(r.read_u8(start + len), 0xee, "byte after overwritten");
            }
        }
    }

    #[test]
    fn views_reject_ranges_outside_the_region() {
        let r = DmaRegion::heap(100, 0);
        r.write_bytes(90, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert!(r.view(91, 10).is_none());
        assert!(r.view(usize::MAX, 2).is_none());
        let v = r.view(90, 10).unwrap();
        assert_eq!(v.to_vec(), vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let mut two = [0u8; 2];
        assert!(v.copy_to(8, &mut two));
        assert_eq!(two, [9, 10]);
        assert!(!v.copy_to(9, &mut two));
    }

    #[test]
    #[should_panic(expected = "outside region")]
    fn out_of_range_scalar_access_panics() {
        let r = DmaRegion::heap(16, 0);
        r.read_u64(16);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn misaligned_scalar_access_panics() {
        let r = DmaRegion::heap(16, 0);
        r.read_u32(2);
    }
}
