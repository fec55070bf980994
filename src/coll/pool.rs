//! Reuse of large buffers.
//!
//! A collective on megabytes allocates its buffers and receives large
//! messages into fresh vectors; the allocator hands memory that large back
//! to the kernel when it is freed, so every call would pay a page fault per
//! 4 KiB page touched again (measured: a tenth of a 4 MiB broadcast's
//! time). The pool keeps freed buffers of at least [`MIN_LEN`] bytes, up to
//! [`MAX_BYTES`] in all, and hands them out again.
//!
//! Small buffers (an eager message's copy) are kept too, up to
//! [`SMALL_KEPT`] of them of at most [`SMALL_MAX_CAP`] bytes: a stream of
//! small messages would otherwise pay an allocation and a free per message.

/// Buffers smaller than this are left to the allocator.
pub const MIN_LEN: usize = 64 * 1024;
/// Bytes the pool keeps at most.
pub const MAX_BYTES: usize = 256 << 20;

/// Small buffers kept at most.
pub const SMALL_KEPT: usize = 128;
/// Largest capacity of a small buffer kept.
pub const SMALL_MAX_CAP: usize = 16 * 1024;

/// Free buffers (see the module documentation).
#[derive(Debug, Default)]
pub struct Pool {
    free: Vec<Vec<u8>>,
    bytes: usize,
    small: Vec<Vec<u8>>,
}

impl Pool {
    /// A kept small buffer with room for `len` bytes, emptied.
    fn small_for(&mut self, len: usize) -> Option<Vec<u8>> {
        if self.small.last()?.capacity() < len {
            return None;
        }
        let mut v = self.small.pop()?;
        v.clear();
        Some(v)
    }

    /// A buffer of `len` bytes with unspecified contents.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len < MIN_LEN {
            return match self.small_for(len) {
                Some(mut v) => {
                    v.resize(len, 0);
                    v
                }
                None => vec![0; len],
            };
        }
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut v = self.free.swap_remove(i);
                self.bytes -= v.capacity();
                if v.len() >= len {
                    v.truncate(len);
                } else {
                    v.resize(len, 0);
                }
                v
            }
            None => vec![0; len],
        }
    }

    /// A buffer of `len` zero bytes.
    pub fn take_zeroed(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.take(len);
        v.fill(0);
        v
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        if data.len() < MIN_LEN {
            return match self.small_for(data.len()) {
                Some(mut v) => {
                    v.extend_from_slice(data);
                    v
                }
                None => data.to_vec(),
            };
        }
        let mut v = self.take(data.len());
        v.copy_from_slice(data);
        v
    }

    /// Takes back a buffer no longer needed.
    pub fn give(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if cap < MIN_LEN {
            if cap > 0 && cap <= SMALL_MAX_CAP && self.small.len() < SMALL_KEPT {
                self.small.push(v);
            }
            return;
        }
        if self.bytes + cap > MAX_BYTES {
            return;
        }
        self.bytes += cap;
        self.free.push(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_with_the_asked_length() {
        let mut p = Pool::default();
        let mut a = p.take(MIN_LEN * 2);
        a.fill(7);
        let ptr = a.as_ptr();
        p.give(a);
        let b = p.take(MIN_LEN + 5);
        assert_eq!(b.as_ptr(), ptr, "the freed buffer is reused");
        assert_eq!(b.len(), MIN_LEN + 5);
        p.give(b);
        let c = p.take_zeroed(MIN_LEN * 2);
        assert!(c.iter().all(|&x| x == 0));
        // Small ones are kept too, and come back with the asked contents.
        let small = vec![1; 10];
        let ptr = small.as_ptr();
        p.give(small);
        let d = p.copy_of(&[5, 6, 7]);
        assert_eq!((d.as_ptr(), d.as_slice()), (ptr, &[5, 6, 7][..]));
        p.give(d);
        assert_eq!(p.take_zeroed(8), vec![0; 8]);
        // One too small for the request stays kept.
        p.give(vec![1; 10]);
        assert_eq!(p.take(64).len(), 64);
        assert_eq!(p.small.len(), 1);
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_small_buffers() {
        let mut p = Pool::default();
        for _ in 0..SMALL_KEPT + 10 {
            p.give(vec![0; 100]);
        }
        p.give(Vec::with_capacity(SMALL_MAX_CAP + 1));
        assert_eq!(p.small.len(), SMALL_KEPT);
        assert!(p.small.iter().all(|v| v.capacity() <= SMALL_MAX_CAP));
    }

    #[test]
    fn the_pool_keeps_at_most_its_limit() {
        let mut p = Pool::default();
        for _ in 0..(MAX_BYTES / MIN_LEN + 10) {
            p.give(Vec::with_capacity(MIN_LEN));
        }
        assert!(p.bytes <= MAX_BYTES);
    }
}
