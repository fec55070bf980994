//! Bulk copies into and out of shared memory.
//!
//! Copies are done in pieces of [`PIECE`] bytes. The reason is measured,
//! not theoretical: glibc's `memcpy` switches to `rep movsb` above a few
//! KiB, and on this AMD EPYC (Zen 3, FSRM) `rep movsb` drops from ~30 GB/s
//! to ~3 GB/s when the destination is a little ahead of the source modulo
//! 4 KiB (4K aliasing: a chunk at a page boundary copied to a `Vec` whose
//! data starts 16 bytes into a page is exactly that case). Pieces below the
//! `rep movsb` threshold use glibc's vector loop, which runs at full speed
//! for every relative alignment (35-37 GB/s here), so splitting costs
//! nothing and removes the cliff. See the README for the table.

/// Bytes per piece: below glibc's `rep movsb` threshold on every x86 build.
pub(crate) const PIECE: usize = 1024;

/// Copies `n` bytes from `src` to `dst` in pieces of [`PIECE`] bytes.
///
/// # Safety
///
/// As for [`std::ptr::copy_nonoverlapping`]: `src` valid for `n` reads,
/// `dst` valid for `n` writes, the two ranges do not overlap.
#[inline]
pub(crate) unsafe fn copy_bytes(dst: *mut u8, src: *const u8, n: usize) {
    if n <= 32 {
        // SAFETY: the caller's contract.
        unsafe { copy_small(dst, src, n) };
        return;
    }
    if n <= PIECE {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    let mut off = 0;
    while off < n {
        // A size computed at run time, so the compiler cannot fuse the
        // pieces back into one large memcpy.
        let p = PIECE.min(n - off);
        // SAFETY: off + p <= n, inside both ranges (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), p) };
        off += p;
    }
}

/// Copies `n <= 32` bytes without calling `memcpy`: two possibly
/// overlapping loads and stores of the largest width that fits (the
/// classic small-copy trick). Small messages are the latency-critical
/// case, where a library call is a noticeable part of the cost.
///
/// # Safety
///
/// As for [`copy_bytes`], and `n <= 32`.
#[inline(always)]
pub(crate) unsafe fn copy_small(dst: *mut u8, src: *const u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    debug_assert!(n <= 32);
    // SAFETY: (all arms) every access lies in [0, n) of both ranges, which
    // the caller guarantees are valid and disjoint; reads happen before the
    // writes, so even overlapping pairs within one range are fine.
    unsafe {
        if n >= 16 {
            let a = rd(src as *const u128);
            let b = rd(src.add(n - 16) as *const u128);
            wr(dst as *mut u128, a);
            wr(dst.add(n - 16) as *mut u128, b);
        } else if n >= 8 {
            let a = rd(src as *const u64);
            let b = rd(src.add(n - 8) as *const u64);
            wr(dst as *mut u64, a);
            wr(dst.add(n - 8) as *mut u64, b);
        } else if n >= 4 {
            let a = rd(src as *const u32);
            let b = rd(src.add(n - 4) as *const u32);
            wr(dst as *mut u32, a);
            wr(dst.add(n - 4) as *mut u32, b);
        } else if n > 0 {
            let a = *src;
            let b = *src.add(n / 2);
            let c = *src.add(n - 1);
            *dst = a;
            *dst.add(n / 2) = b;
            *dst.add(n - 1) = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_exactly() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in (0..=70).chain([1023, 1024, 1025, 2048, 4999]) {
            let mut dst = vec![0xeeu8; n + 2];
            // SAFETY: both buffers hold at least n bytes (dst at offset 1).
            unsafe { copy_bytes(dst.as_mut_ptr().add(1), src.as_ptr(), n) };
            assert_eq!(dst[0], 0xee);
            assert_eq!(&dst[1..=n], &src[..n], "length {n}");
            assert_eq!(dst[n + 1], 0xee);
        }
    }
}
