//! The UMEM: the packet memory shared by an AF_XDP socket and the kernel,
//! cut into equal power-of-two chunks ("frames").
//!
//! Ownership of each chunk moves between this process and the kernel by
//! the ring protocol: a chunk put into the fill or TX ring belongs to the
//! kernel until it comes back through the RX or completion ring. The
//! [`Umem`] keeps one ownership byte per chunk and checks every address the
//! kernel hands back against it, so a descriptor outside the UMEM, spanning
//! two chunks, or naming a chunk the kernel does not own is refused
//! (counted, never followed). Rust slices into the UMEM are only formed for
//! chunks this process owns, and only for as long as it owns them: the
//! kernel never writes a chunk it does not own, so such a slice is not
//! written concurrently.

use std::io;
use std::os::fd::RawFd;

use crate::sys::{setsockopt, Mmap};

/// Size of a huge page (x86-64 default), for rounding huge-page mappings.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Who owns a chunk right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Owner {
    /// This process (free, or being read/written by it).
    User,
    /// The kernel (in the fill, RX, TX or completion ring).
    Kernel,
}

/// Where the UMEM's memory came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UmemPages {
    /// Backed by huge pages (`MAP_HUGETLB`).
    pub huge: bool,
    /// Why not, when not (for the mode report).
    pub note: String,
}

/// One UMEM (see the module documentation).
pub(crate) struct Umem {
    map: Mmap,
    frame_size: u32,
    shift: u32,
    frames: u32,
    owner: Vec<Owner>,
}

impl Umem {
    /// Maps `frames` chunks of `frame_size` bytes (a power of two),
    /// preferring huge pages when `try_huge`.
    pub(crate) fn new(
        frames: u32,
        frame_size: u32,
        try_huge: bool,
    ) -> io::Result<(Umem, UmemPages)> {
        if !frame_size.is_power_of_two() || frames == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame size must be a power of two and frames positive",
            ));
        }
        let len = (frames as usize)
            .checked_mul(frame_size as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "UMEM too large"))?;
        let base = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        let (map, pages) = if try_huge {
            let hlen = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
            match Mmap::new(hlen, base | libc::MAP_HUGETLB, None, 0) {
                Ok(m) => (
                    m,
                    UmemPages {
                        huge: true,
                        note: format!("{} huge pages of 2 MiB", hlen / HUGE_PAGE),
                    },
                ),
                Err(e) => (
                    Mmap::new(len, base, None, 0)?,
                    UmemPages {
                        huge: false,
                        note: format!(
                            "normal pages: no huge page available ({}; reserve some with `sysctl vm.nr_hugepages=N`)",
                            crate::sys::errno_name(&e)
                        ),
                    },
                ),
            }
        } else {
            (
                Mmap::new(len, base, None, 0)?,
                UmemPages {
                    huge: false,
                    note: "normal pages (huge pages not requested)".into(),
                },
            )
        };
        Ok((
            Umem {
                map,
                frame_size,
                shift: frame_size.trailing_zeros(),
                frames,
                owner: vec![Owner::User; frames as usize],
            },
            pages,
        ))
    }

    /// Registers the UMEM with socket `fd` (`XDP_UMEM_REG`).
    pub(crate) fn register(&self, fd: RawFd) -> io::Result<()> {
        let reg = libc::xdp_umem_reg {
            addr: self.map.ptr() as u64,
            len: u64::from(self.frames) * u64::from(self.frame_size),
            chunk_size: self.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)
    }

    /// Chunk size in bytes.
    pub(crate) fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// UMEM address of chunk `c`.
    pub(crate) fn addr(&self, c: u32) -> u64 {
        u64::from(c) << self.shift
    }

    /// Marks chunk `c` as handed to the kernel.
    pub(crate) fn give(&mut self, c: u32) {
        if let Some(o) = self.owner.get_mut(c as usize) {
            *o = Owner::Kernel;
        }
    }

    /// Takes back the chunk holding `[addr, addr + len)` from the kernel,
    /// if that range lies inside one chunk of `range` that the kernel owns.
    pub(crate) fn take(&mut self, addr: u64, len: u32, range: std::ops::Range<u32>) -> Option<u32> {
        let c = u32::try_from(addr >> self.shift).ok()?;
        let off = addr & u64::from(self.frame_size - 1);
        if !range.contains(&c) || off + u64::from(len) > u64::from(self.frame_size) {
            return None;
        }
        let o = self.owner.get_mut(c as usize)?;
        if *o != Owner::Kernel {
            return None;
        }
        *o = Owner::User;
        Some(c)
    }

    /// The bytes `[addr, addr + len)` of a chunk this process owns, or
    /// `None` if the range leaves the chunk or the chunk is the kernel's.
    pub(crate) fn bytes(&self, addr: u64, len: u32) -> Option<&[u8]> {
        let c = usize::try_from(addr >> self.shift).ok()?;
        let off = addr & u64::from(self.frame_size - 1);
        if off + u64::from(len) > u64::from(self.frame_size) || self.owner.get(c)? != &Owner::User {
            return None;
        }
        // SAFETY: `c < frames` (the owner table has `frames` entries), so
        // `[addr, addr + len)` lies inside chunk `c`, inside the mapping.
        // The chunk is owned by this process: the kernel does not write it
        // until it is given back (`give`), which needs `&mut self` and so
        // cannot happen while this shared borrow lives.
        Some(unsafe { std::slice::from_raw_parts(self.map.ptr().add(addr as usize), len as usize) })
    }

    /// Chunks `first..first + n`, writable as one slice (they are
    /// contiguous in the UMEM), if this process owns all of them.
    pub(crate) fn chunks_mut(&mut self, first: u32, n: u32) -> Option<&mut [u8]> {
        let end = first.checked_add(n)?;
        if n == 0 || end as usize > self.owner.len() {
            return None;
        }
        if self.owner[first as usize..end as usize]
            .iter()
            .any(|o| *o != Owner::User)
        {
            return None;
        }
        let at = self.addr(first) as usize;
        // SAFETY: `first + n <= frames`, so the n chunks lie inside the
        // mapping, one after the other. All are owned by this process (the
        // kernel neither reads nor writes them), and the `&mut self` borrow
        // makes this the only Rust reference into the UMEM while it lives.
        Some(unsafe {
            std::slice::from_raw_parts_mut(
                self.map.ptr().add(at),
                n as usize * self.frame_size as usize,
            )
        })
    }

    /// The whole of chunk `c`, writable, if this process owns it.
    pub(crate) fn chunk_mut(&mut self, c: u32) -> Option<&mut [u8]> {
        if self.owner.get(c as usize)? != &Owner::User {
            return None;
        }
        let at = self.addr(c) as usize;
        // SAFETY: `c < frames`, so the chunk lies inside the mapping. It is
        // owned by this process (the kernel neither reads nor writes it),
        // and the `&mut self` borrow makes this the only Rust reference
        // into the UMEM while it lives.
        Some(unsafe {
            std::slice::from_raw_parts_mut(self.map.ptr().add(at), self.frame_size as usize)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_from_the_kernel_are_checked_before_use() {
        let (mut u, pages) = Umem::new(8, 2048, false).unwrap();
        assert!(!pages.huge);
        // Chunks 0..4 are "RX", 4..8 "TX".
        for c in 0..8 {
            u.give(c);
        }
        // Inside chunk 1, at the copy-mode headroom.
        assert_eq!(u.take(2048 + 256, 100, 0..4), Some(1));
        // Taken twice: refused.
        assert_eq!(u.take(2048 + 256, 100, 0..4), None);
        // Spans two chunks.
        assert_eq!(u.take(2 * 2048 + 2000, 100, 0..4), None);
        // Outside the UMEM, or in the wrong range.
        assert_eq!(u.take(64 * 2048, 1, 0..4), None);
        assert_eq!(u.take(u64::MAX, 1, 0..4), None);
        assert_eq!(u.take(5 * 2048, 1, 0..4), None);
        assert_eq!(u.take(5 * 2048, 0, 4..8), Some(5));
        // Bytes are shown only for owned chunks.
        assert_eq!(u.bytes(2048 + 256, 100).map(<[u8]>::len), Some(100));
        assert!(u.bytes(0, 10).is_none(), "chunk 0 is the kernel's");
        assert!(u.bytes(2048 + 2000, 100).is_none(), "leaves the chunk");
        let c = u.chunk_mut(5).unwrap();
        c[0] = 7;
        assert_eq!(c.len(), 2048);
        assert!(u.chunk_mut(6).is_none());
        assert!(u.chunk_mut(99).is_none());
        assert_eq!(u.bytes(5 * 2048, 1), Some(&[7u8][..]));
    }

    #[test]
    fn runs_of_chunks_are_lent_only_when_all_are_ours() {
        let (mut u, _) = Umem::new(12, 2048, false).unwrap();
        u.give(6);
        let run = u.chunks_mut(8, 3).unwrap();
        assert_eq!(run.len(), 3 * 2048);
        run[3 * 2048 - 1] = 9;
        assert!(u.chunks_mut(5, 2).is_none(), "chunk 6 is the kernel's");
        assert!(u.chunks_mut(8, 0).is_none());
        assert!(u.chunks_mut(10, 3).is_none(), "past the UMEM");
        assert!(u.chunks_mut(u32::MAX, 2).is_none());
        assert_eq!(u.bytes(10 * 2048 + 2047, 1), Some(&[9u8][..]));
    }
}
