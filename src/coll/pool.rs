//! Reuse of large buffers.
//!
//! A collective on megabytes allocates its buffers and receives large
//! messages into fresh vectors; the allocator hands memory that large back
//! to the kernel when it is freed, so every call would pay a page fault per
//! 4 KiB page touched again (measured: a tenth of a 4 MiB broadcast's
//! time). The pool keeps freed buffers of at least [`MIN_LEN`] bytes, up to
//! [`MAX_BYTES`] in all, and hands them out again.

/// Buffers smaller than this are left to the allocator.
pub const MIN_LEN: usize = 64 * 1024;
/// Bytes the pool keeps at most.
pub const MAX_BYTES: usize = 256 << 20;

/// Free buffers (see the module documentation).
#[derive(Debug, Default)]
pub struct Pool {
    free: Vec<Vec<u8>>,
    bytes: usize,
}

impl Pool {
    /// A buffer of `len` bytes with unspecified contents.
    pub fn take(&mut self, len: usize) -> Vec<u8> {
        if len < MIN_LEN {
            return vec![0; len];
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
        if len >= MIN_LEN {
            v.fill(0);
        }
        v
    }

    /// A buffer holding a copy of `data`.
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        if data.len() < MIN_LEN {
            return data.to_vec();
        }
        let mut v = self.take(data.len());
        v.copy_from_slice(data);
        v
    }

    /// Takes back a buffer no longer needed.
    pub fn give(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if cap < MIN_LEN || self.bytes + cap > MAX_BYTES {
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
        // Small ones are not kept.
        p.give(vec![1; 10]);
        assert_eq!(p.take(10), vec![0; 10]);
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
