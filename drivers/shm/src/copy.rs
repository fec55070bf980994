//! Bulk copies into and out of shared memory.
//!
//! The reason this is not a plain `memcpy` is measured, not theoretical.
//! Shared-memory chunks and inbox slots are page-aligned; a `Vec`'s data
//! starts 16 bytes into a page. Copying a page-aligned 64 KiB chunk to a
//! destination 16 bytes ahead of it modulo 4 KiB (4K aliasing: each load
//! appears to depend on a store just issued) with glibc's `memcpy`
//! (`rep movsb` on this AMD EPYC, Zen 3 with FSRM) ran at 1.9 GB/s
//! against 32.1 at offset 0, and 128-byte blocks at 32.0 GB/s at offset 16
//! (docs/PERFORMANCE.md, *shm copies*).
//!
//! So above [`BLOCK_COPY_MIN`] bytes, when the CPU has AVX2, copies go in
//! 128-byte blocks whose four loads all issue before its four stores: no
//! load waits on a store of the same block, whatever the alignment. Without
//! AVX2 they go in [`PIECE`]-byte `memcpy` pieces, which at least avoid the
//! `rep movsb` cliff.

/// Bytes per piece when copying without AVX2: below glibc's `rep movsb`
/// threshold on every x86 build.
pub(crate) const PIECE: usize = 1024;

/// Copies at least this long use 128-byte blocks (when the CPU has AVX2).
pub(crate) const BLOCK_COPY_MIN: usize = 256;

/// Copies `n` bytes from `src` to `dst`: small ones inline, large ones in
/// 128-byte AVX2 blocks or [`PIECE`]-byte pieces (see the module doc).
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
    #[cfg(target_arch = "x86_64")]
    if n >= BLOCK_COPY_MIN && std::is_x86_feature_detected!("avx2") {
        // SAFETY: the caller's contract, n >= 128, and the CPU has AVX2.
        unsafe { copy_blocks_avx2(dst, src, n) };
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

/// Copies `n >= 128` bytes in 128-byte blocks: four 32-byte loads, then
/// four stores. The last block is the one ending at `n`, so it may rewrite
/// bytes the previous block wrote (with the same values).
///
/// # Safety
///
/// As for [`copy_bytes`], `n >= 128`, and the CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_blocks_avx2(dst: *mut u8, src: *const u8, n: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256 as load, _mm256_storeu_si256 as store};
    debug_assert!(n >= 128);
    // Copies the 128 bytes at `$off` (a macro, not a closure, so the
    // intrinsics are compiled with this function's AVX2 enabled).
    macro_rules! block {
        ($off:expr) => {
            // SAFETY: the callers below keep [$off, $off + 128) within
            // [0, n) of both ranges (valid and disjoint by the contract);
            // unaligned loads and stores have no alignment requirement.
            unsafe {
                let s = src.add($off) as *const __m256i;
                let d = dst.add($off) as *mut __m256i;
                let (a, b, c, e) = (load(s), load(s.add(1)), load(s.add(2)), load(s.add(3)));
                store(d, a);
                store(d.add(1), b);
                store(d.add(2), c);
                store(d.add(3), e);
            }
        };
    }
    let mut off = 0;
    while off + 128 <= n {
        block!(off);
        off += 128;
    }
    if off < n {
        block!(n - 128);
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
        let lengths = (0..=70).chain([
            127, 128, 129, 255, 256, 257, 383, 1023, 1024, 1025, 2048, 4950,
        ]);
        for n in lengths {
            for (s_off, d_off) in [(0, 1), (16, 0), (0, 16), (5, 37)] {
                let mut dst = vec![0xeeu8; n + d_off + 1];
                // SAFETY: src holds s_off + n bytes (n < 5000 - 37), dst
                // d_off + n + 1; distinct allocations.
                unsafe { copy_bytes(dst.as_mut_ptr().add(d_off), src.as_ptr().add(s_off), n) };
                assert!(dst[..d_off].iter().all(|&b| b == 0xee));
                assert_eq!(&dst[d_off..d_off + n], &src[s_off..s_off + n], "length {n}");
                assert_eq!(dst[d_off + n], 0xee, "length {n}: wrote past the end");
            }
        }
    }
}
