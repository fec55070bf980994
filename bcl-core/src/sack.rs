//! The receiver's record of frames received past the next one it wants.

use crate::wire::SACK_BITS;

/// Frames a receiver accepts ahead of the next one it wants.
pub const RX_WINDOW: u32 = SACK_BITS as u32;

const WORDS: usize = SACK_BITS / 64;

/// A fixed window of received-flags: bit `i` is set when the frame
/// `i` steps after the next wanted one has arrived. Bit 0 is never set after
/// [`SackBitmap::advance`] (that frame is by definition missing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SackBitmap {
    words: [u64; WORDS],
}

impl SackBitmap {
    /// An empty bitmap.
    pub const fn new() -> Self {
        SackBitmap { words: [0; WORDS] }
    }

    /// Whether bit `i` is set; false outside the window.
    pub fn get(&self, i: u32) -> bool {
        let i = i as usize;
        i < SACK_BITS && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i`; ignored outside the window.
    pub fn set(&mut self, i: u32) {
        let i = i as usize;
        if i < SACK_BITS {
            self.words[i / 64] |= 1 << (i % 64);
        }
    }

    /// Clears bit `i`; ignored outside the window.
    pub fn clear(&mut self, i: u32) {
        let i = i as usize;
        if i < SACK_BITS {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// Number of consecutive set bits starting at bit 0.
    pub fn leading_run(&self) -> u32 {
        let mut n = 0;
        for w in self.words {
            let ones = w.trailing_ones();
            n += ones;
            if ones < 64 {
                break;
            }
        }
        n
    }

    /// Drops the first `n` bits, moving the rest down (the window advances by
    /// `n` frames).
    pub fn advance(&mut self, n: u32) {
        let n = n as usize;
        if n >= SACK_BITS {
            *self = SackBitmap::new();
            return;
        }
        let (word_shift, bit_shift) = (n / 64, n % 64);
        let mut out = [0u64; WORDS];
        for (i, slot) in out.iter_mut().enumerate() {
            let src = i + word_shift;
            if src >= WORDS {
                break;
            }
            let lo = self.words[src] >> bit_shift;
            let hi = if bit_shift != 0 && src + 1 < WORDS {
                self.words[src + 1] << (64 - bit_shift)
            } else {
                0
            };
            *slot = lo | hi;
        }
        self.words = out;
    }

    /// Index of the highest set bit, if any.
    pub fn highest(&self) -> Option<u32> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| (i * 64 + 63 - w.leading_zeros() as usize) as u32)
    }

    /// Writes the selective acknowledgement for the wire: wire bit `i` is
    /// bitmap bit `i + 1` (the frame after the cumulative acknowledgement).
    /// Returns the number of meaningful wire bits.
    pub fn to_wire(&self, out: &mut [u8; SACK_BITS / 8]) -> u16 {
        let mut shifted = *self;
        shifted.advance(1);
        for (i, w) in shifted.words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        shifted.highest().map_or(0, |h| h as u16 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_bits_across_word_boundaries() {
        let mut b = SackBitmap::new();
        for i in [0, 1, 63, 64, 65, 130, 255] {
            b.set(i);
        }
        b.advance(2);
        for i in [61, 62, 63, 128, 253] {
            assert!(b.get(i), "bit {i}");
        }
        assert!(!b.get(0) && !b.get(64) && !b.get(254));
        b.advance(61);
        assert!(b.get(0) && b.get(1) && b.get(2) && b.get(67) && b.get(192));
        assert_eq!(b.leading_run(), 3);
        b.advance(300);
        assert!(b.is_empty());
    }

    #[test]
    fn leading_run_spans_full_words() {
        let mut b = SackBitmap::new();
        for i in 0..130 {
            b.set(i);
        }
        assert_eq!(b.leading_run(), 130);
        let mut full = SackBitmap::new();
        for i in 0..SACK_BITS as u32 {
            full.set(i);
        }
        assert_eq!(full.leading_run(), SACK_BITS as u32);
    }

    #[test]
    fn bits_outside_the_window_are_ignored() {
        let mut b = SackBitmap::new();
        b.set(SACK_BITS as u32);
        b.set(u32::MAX);
        assert!(b.is_empty());
        assert!(!b.get(SACK_BITS as u32));
    }

    #[test]
    fn wire_form_is_shifted_by_one_and_counts_bits() {
        let mut b = SackBitmap::new();
        b.set(2);
        b.set(9);
        b.set(255);
        let mut out = [0u8; SACK_BITS / 8];
        let n = b.to_wire(&mut out);
        // Bitmap bit 2 -> wire bit 1; bit 9 -> wire bit 8; bit 255 -> wire bit 254.
        assert_eq!(out[0], 0b0000_0010);
        assert_eq!(out[1], 0b0000_0001);
        assert_eq!(out[31], 0b0100_0000);
        assert_eq!(n, 255);
        assert_eq!(SackBitmap::new().to_wire(&mut out), 0);
    }
}
