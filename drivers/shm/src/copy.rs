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
