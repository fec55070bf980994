//! Shared heap: large allocations that peers on the node can read, so a
//! large transfer over shared memory takes one copy instead of two.
//!
//! The exchange queue moves a large message with two copies (sender into the
//! queue, queue into the posted buffer), pipelined; every byte crosses from
//! the sender's core to the receiver's. If the *sender's* buffer is itself in
//! shared memory, the receiver can copy it straight into its posted buffer:
//! one copy, and no transfer of cache lines at all when the sender's buffer
//! has not changed since the receiver last read it (docs/PERFORMANCE.md has
//! the figures).
//!
//! Channel buffers are plain `Vec<u8>`s, so the way to put them in shared
//! memory is the allocator. [`SharedHeap`] is a [`GlobalAlloc`] an
//! application installs:
//!
//! ```
//! #[global_allocator]
//! static HEAP: bcl_shm::heap::SharedHeap = bcl_shm::heap::SharedHeap::new();
//!
//! fn main() {
//!     let buffer = vec![7u8; 1 << 20];
//!     assert!(bcl_shm::heap::locate(&buffer).is_some());
//! }
//! ```
//!
//! Allocations of at least [`DEFAULT_MIN_SHARED`] bytes (page-aligned at
//! most) then each get their own sealed memfd (`memfd_create`, size sealed
//! with `F_SEAL_SHRINK | F_SEAL_GROW`), mapped `MAP_SHARED`; smaller ones,
//! and any the kernel refuses, go to the system allocator. The memfd stays
//! open while the allocation lives, so a peer of the same user opens it as
//! `/proc/PID/fd/FD` ([`SharedRef`], [`PeerMappings`]); the seals mean the
//! owner cannot shrink it under a reader (which would be `SIGBUS`). Nothing
//! is left in the file system when a process dies.
//!
//! Limits: after `fork` without `exec`, parent and child share these
//! allocations (they are `MAP_SHARED`); do not install the heap in programs
//! that fork and keep using their buffers in both processes. At most
//! [`MAX_SHARED_ALLOCATIONS`] live at once; beyond that, allocations are
//! private (and transfers from them take the two-copy path).

use crate::segment::Mapping;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Allocations at least this large go to shared memory by default.
pub const DEFAULT_MIN_SHARED: usize = 256 << 10;

/// Most shared allocations alive at once.
pub const MAX_SHARED_ALLOCATIONS: usize = 256;

const PAGE: usize = 4096;

/// One live shared allocation. `addr` is 0 when free, [`CLAIMING`] while
/// being filled in; readers trust `len`, `fd` and `seq` only after an
/// acquire load of a real address.
struct Entry {
    addr: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicUsize,
    seq: AtomicU64,
}

const CLAIMING: usize = 1;

#[allow(clippy::declare_interior_mutable_const)]
const FREE_ENTRY: Entry = Entry {
    addr: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicUsize::new(0),
    seq: AtomicU64::new(0),
};

static TABLE: [Entry; MAX_SHARED_ALLOCATIONS] = [FREE_ENTRY; MAX_SHARED_ALLOCATIONS];
/// Entries in use (an upper bound while one is being added or removed).
static LIVE: AtomicUsize = AtomicUsize::new(0);
static NEXT_SEQ: AtomicU64 = AtomicU64::new(1);
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns shared allocation on or off for allocations made from now on
/// (on by default). Off, the heap is the system allocator; allocations
/// already shared stay so until freed. For comparing the one-copy and the
/// two-copy paths in one program.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether shared allocation is on (see [`set_enabled`]).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A global allocator that puts large allocations in shared memory (see
/// the module documentation).
pub struct SharedHeap {
    min: usize,
}

impl SharedHeap {
    /// Large means at least [`DEFAULT_MIN_SHARED`] bytes.
    pub const fn new() -> SharedHeap {
        SharedHeap {
            min: DEFAULT_MIN_SHARED,
        }
    }

    /// Large means at least `min` bytes (at least one page).
    pub const fn with_min_size(min: usize) -> SharedHeap {
        SharedHeap {
            min: if min < PAGE { PAGE } else { min },
        }
    }

    fn wants(&self, layout: Layout) -> bool {
        layout.size() >= self.min && layout.align() <= PAGE && ENABLED.load(Ordering::Relaxed)
    }

    /// Whether `layout` may be one of ours (whatever [`set_enabled`] says
    /// now).
    fn may_own(&self, layout: Layout) -> bool {
        layout.size() >= self.min && layout.align() <= PAGE
    }
}

impl Default for SharedHeap {
    fn default() -> Self {
        SharedHeap::new()
    }
}

// SAFETY: every pointer returned is either the system allocator's (and goes
// back to it) or a fresh page-aligned MAP_SHARED mapping of at least
// `layout.size()` bytes that no one else was given, recorded in TABLE until
// `dealloc` unmaps it; `dealloc` tells the two apart by TABLE, which holds
// only mappings.
unsafe impl GlobalAlloc for SharedHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.wants(layout) {
            if let Some(p) = map_shared(layout.size()) {
                return p;
            }
        }
        // SAFETY: the caller's contract for `alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if self.wants(layout) {
            // A new memfd reads as zeros.
            if let Some(p) = map_shared(layout.size()) {
                return p;
            }
        }
        // SAFETY: the caller's contract for `alloc_zeroed`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if self.may_own(layout) && unmap_shared(ptr) {
            return;
        }
        // SAFETY: not one of ours, so the system allocator gave it out
        // with this layout (the caller's contract).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `layout` describes `ptr`, and a
        // layout of `new_size` with the same alignment is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !self.may_own(layout) && !self.wants(new_layout) {
            // SAFETY: as above; both sizes stay with the system allocator.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: as in GlobalAlloc's default realloc.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

/// Creates, seals and maps a memfd of `size` bytes and records it. `None`
/// when anything fails (the caller falls back to the system allocator).
/// Allocation-free: it runs inside the allocator.
fn map_shared(size: usize) -> Option<*mut u8> {
    let len = size.checked_add(PAGE - 1)? & !(PAGE - 1);
    if LIVE.fetch_add(1, Ordering::AcqRel) >= MAX_SHARED_ALLOCATIONS {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    let slot = TABLE.iter().find(|e| {
        e.addr
            .compare_exchange(0, CLAIMING, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    let Some(slot) = slot else {
        LIVE.fetch_sub(1, Ordering::AcqRel);
        return None;
    };
    let seq = NEXT_SEQ.fetch_add(1, Ordering::Relaxed);
    let mut name = [0u8; 40];
    memfd_name(seq, &mut name);
    let release = |slot: &Entry| {
        slot.addr.store(0, Ordering::Release);
        LIVE.fetch_sub(1, Ordering::AcqRel);
    };
    // SAFETY: plain system calls on a NUL-terminated name and our own fd;
    // the mapping is new, so it aliases nothing.
    unsafe {
        let fd = libc::memfd_create(
            name.as_ptr().cast(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        );
        if fd < 0 {
            release(slot);
            return None;
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        if libc::ftruncate(fd, len as libc::off_t) != 0
            || libc::fcntl(fd, libc::F_ADD_SEALS, seals) != 0
        {
            libc::close(fd);
            release(slot);
            return None;
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        if p == libc::MAP_FAILED {
            libc::close(fd);
            release(slot);
            return None;
        }
        slot.len.store(len, Ordering::Relaxed);
        slot.fd.store(fd as usize, Ordering::Relaxed);
        slot.seq.store(seq, Ordering::Relaxed);
        slot.addr.store(p as usize, Ordering::Release);
        Some(p.cast())
    }
}

/// Unmaps and forgets `ptr` if it is one of ours.
fn unmap_shared(ptr: *mut u8) -> bool {
    if LIVE.load(Ordering::Acquire) == 0 {
        return false;
    }
    let Some(e) = TABLE
        .iter()
        .find(|e| e.addr.load(Ordering::Acquire) == ptr as usize)
    else {
        return false;
    };
    let len = e.len.load(Ordering::Relaxed);
    let fd = e.fd.load(Ordering::Relaxed) as libc::c_int;
    // SAFETY: the mapping and fd were made by map_shared for this
    // allocation, which its owner is giving back; nobody else uses them.
    unsafe {
        libc::munmap(ptr.cast(), len);
        libc::close(fd);
    }
    e.addr.store(0, Ordering::Release);
    LIVE.fetch_sub(1, Ordering::AcqRel);
    true
}

/// Writes `bcl-heap-SEQ\0` into `out` without allocating.
fn memfd_name(seq: u64, out: &mut [u8; 40]) {
    const PREFIX: &[u8] = b"bcl-heap-";
    out[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 20];
    let mut n = seq;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let d = &digits[i..];
    out[PREFIX.len()..PREFIX.len() + d.len()].copy_from_slice(d);
    out[PREFIX.len() + d.len()] = 0;
}

/// Where bytes of a shared allocation are, as a peer names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedRef {
    /// The owning process.
    pub pid: u32,
    /// Its memfd.
    pub fd: u32,
    /// The allocation's number in that process (the memfd's name).
    pub seq: u64,
    /// Offset of the bytes in the allocation.
    pub offset: u64,
}

/// Where `bytes` lie, if all of them are in one live shared allocation of
/// this process (that is, if [`SharedHeap`] is the global allocator and
/// gave out the memory they are in).
pub fn locate(bytes: &[u8]) -> Option<SharedRef> {
    if LIVE.load(Ordering::Acquire) == 0 || bytes.is_empty() {
        return None;
    }
    let start = bytes.as_ptr() as usize;
    let end = start + bytes.len();
    TABLE.iter().find_map(|e| {
        let addr = e.addr.load(Ordering::Acquire);
        if addr <= CLAIMING {
            return None;
        }
        let len = e.len.load(Ordering::Relaxed);
        (start >= addr && end <= addr + len).then(|| SharedRef {
            // SAFETY: getpid has no preconditions.
            pid: unsafe { libc::getpid() } as u32,
            fd: e.fd.load(Ordering::Relaxed) as u32,
            seq: e.seq.load(Ordering::Relaxed),
            offset: (start - addr) as u64,
        })
    })
}

/// A peer's shared allocation, mapped read-only (unmapped when the last
/// [`SharedBytes`] of it is gone).
struct PeerMapping {
    pid: u32,
    seq: u64,
    map: Mapping,
}

// SAFETY: the mapping is read-only and owned by this value; shared access
// only reads it.
unsafe impl Sync for PeerMapping {}

/// Bytes of a peer's shared allocation, kept mapped while this lives.
#[derive(Clone)]
pub struct SharedBytes {
    map: Arc<PeerMapping>,
    offset: usize,
    len: usize,
}

impl SharedBytes {
    /// The bytes. They belong to the peer and are meant to be copied out;
    /// a peer that breaks the protocol may change them meanwhile, but not
    /// their length or location (the size of the memfd is sealed).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [offset, offset + len) was checked to lie in the mapping,
        // which stays mapped while `self.map` is alive.
        unsafe { std::slice::from_raw_parts(self.map.map.ptr().add(self.offset), self.len) }
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBytes")
            .field("pid", &self.map.pid)
            .field("seq", &self.map.seq)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

/// Peers' shared allocations this process has mapped, the most recently
/// used last; at most [`PeerMappings::CAPACITY`] are kept (a
/// [`SharedBytes`] in use keeps its own mapping alive).
#[derive(Default)]
pub struct PeerMappings {
    maps: VecDeque<Arc<PeerMapping>>,
}

impl PeerMappings {
    /// Mappings kept at most (the least recently used goes first).
    pub const CAPACITY: usize = 16;

    /// Maps (or finds mapped) the allocation `r` names and returns its
    /// `len` bytes at `r.offset`. The memfd is opened through
    /// `/proc/PID/fd/FD` and checked: its name must be that allocation's,
    /// its size sealed, and the range inside it.
    pub fn bytes(&mut self, r: &SharedRef, len: u64) -> io::Result<SharedBytes> {
        let found = self
            .maps
            .iter()
            .position(|m| m.pid == r.pid && m.seq == r.seq);
        let m = match found.and_then(|i| self.maps.remove(i)) {
            Some(m) => m,
            None => {
                if self.maps.len() >= Self::CAPACITY {
                    self.maps.pop_front();
                }
                Arc::new(Self::map(r)?)
            }
        };
        self.maps.push_back(m.clone());
        if r.offset
            .checked_add(len)
            .is_none_or(|end| end > m.map.len() as u64)
        {
            return Err(bad(format!(
                "bytes {}..+{len} outside the allocation ({} bytes)",
                r.offset,
                m.map.len()
            )));
        }
        Ok(SharedBytes {
            map: m,
            offset: r.offset as usize,
            len: len as usize,
        })
    }

    /// Forgets every mapping of process `pid`.
    pub fn forget(&mut self, pid: u32) {
        self.maps.retain(|m| m.pid != pid);
    }

    fn map(r: &SharedRef) -> io::Result<PeerMapping> {
        use std::os::fd::AsRawFd;
        let path = format!("/proc/{}/fd/{}", r.pid, r.fd);
        let file = std::fs::File::open(&path)?;
        // The fd number may have been reused since the notice was written:
        // what we opened must be that allocation's memfd.
        let name = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
        let want = format!("/memfd:bcl-heap-{}", r.seq);
        let name = name.to_string_lossy();
        if name != want && name != format!("{want} (deleted)") {
            return Err(bad(format!("{path} is {name}, not {want}")));
        }
        // SAFETY: fcntl on our own open fd.
        let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(bad(format!("{path} is not sealed against shrinking")));
        }
        let len = file.metadata()?.len();
        let len = usize::try_from(len).map_err(|_| bad(format!("{path}: size {len}")))?;
        if len == 0 {
            return Err(bad(format!("{path} is empty")));
        }
        Ok(PeerMapping {
            pid: r.pid,
            seq: r.seq,
            map: Mapping::map_read_only(&file.into(), len)?,
        })
    }
}

fn bad(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_written_without_allocating() {
        let mut out = [0xffu8; 40];
        memfd_name(0, &mut out);
        assert_eq!(&out[..11], b"bcl-heap-0\0");
        memfd_name(u64::MAX, &mut out);
        assert_eq!(&out[..30], b"bcl-heap-18446744073709551615\0");
    }

    #[test]
    fn shared_allocations_are_found_mapped_and_given_back() {
        let heap = SharedHeap::with_min_size(64 << 10);
        let layout = Layout::from_size_align(100_000, 8).unwrap();
        // SAFETY: a non-zero layout; the memory is written within it and
        // given back with the same layout.
        unsafe {
            let p = heap.alloc_zeroed(layout);
            assert!(!p.is_null());
            let bytes = std::slice::from_raw_parts_mut(p, layout.size());
            assert!(bytes.iter().all(|&b| b == 0));
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = (i * 7) as u8;
            }
            let r = locate(&bytes[1000..5000]).expect("in the shared heap");
            assert_eq!(r.offset, 1000);
            assert_eq!(r.pid, std::process::id());
            // A peer (here: ourselves) maps it and reads the same bytes.
            let mut peers = PeerMappings::default();
            assert_eq!(
                peers.bytes(&r, 4000).unwrap().as_slice(),
                &bytes[1000..5000]
            );
            // Out of the allocation: refused.
            assert!(peers.bytes(&r, 1 << 20).is_err());
            // A wrong sequence number for that fd: refused.
            let wrong = SharedRef {
                seq: r.seq + 1000,
                ..r
            };
            assert!(peers.bytes(&wrong, 10).is_err());
            heap.dealloc(p, layout);
            // Gone from the table (the peer's old mapping stays readable).
            let small = Layout::from_size_align(100, 8).unwrap();
            let q = heap.alloc(small);
            assert!(locate(std::slice::from_raw_parts(q, 100)).is_none());
            heap.dealloc(q, small);
        }
    }

    #[test]
    fn realloc_moves_between_system_and_shared_memory() {
        let heap = SharedHeap::with_min_size(64 << 10);
        let small = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: layouts and sizes as the GlobalAlloc contract asks.
        unsafe {
            let p = heap.alloc(small);
            std::ptr::write_bytes(p, 9, 1000);
            let q = heap.realloc(p, small, 200_000);
            assert!(locate(std::slice::from_raw_parts(q, 1000)).is_some());
            assert!(std::slice::from_raw_parts(q, 1000).iter().all(|&b| b == 9));
            let big = Layout::from_size_align(200_000, 8).unwrap();
            let r = heap.realloc(q, big, 500);
            assert!(std::slice::from_raw_parts(r, 500).iter().all(|&b| b == 9));
            heap.dealloc(r, Layout::from_size_align(500, 8).unwrap());
        }
    }
}
