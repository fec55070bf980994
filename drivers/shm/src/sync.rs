//! The atomics facade: `std` atomics normally, `loom` atomics under
//! `--cfg loom`, so the lock-free algorithms can be model-checked in process.
//!
//! The algorithms ([`crate::inbox`], [`crate::exchange`], [`crate::bell`])
//! only ever touch shared state through these types and through raw
//! pointer copies bracketed by a [`DataCell`], which is a no-op normally
//! and a loom race detector under `--cfg loom`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Pads and aligns `T` to 128 bytes: two 64-byte lines, because the
/// adjacent-line prefetcher of x86 CPUs pulls lines in pairs.
#[repr(C, align(128))]
#[derive(Debug, Default)]
pub(crate) struct Line<T>(pub T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Guards non-atomic bytes in shared memory (an inbox slot's payload, an
/// exchange chunk). Outside loom it is a zero-sized no-op. Under loom it
/// is a `loom::cell::UnsafeCell<()>` whose accesses loom checks for data
/// races: every write of the guarded bytes happens inside
/// [`DataCell::write`], every read inside [`DataCell::read`], so a missing
/// happens-before edge between a writer and a reader fails the model.
#[derive(Debug, Default)]
pub(crate) struct DataCell {
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<()>,
}

impl DataCell {
    /// Runs `f`, which writes the guarded bytes.
    #[inline]
    pub(crate) fn write<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(loom)]
        return self.cell.with_mut(|_| f());
        #[cfg(not(loom))]
        f()
    }

    /// Runs `f`, which reads the guarded bytes.
    #[inline]
    pub(crate) fn read<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(loom)]
        return self.cell.with(|_| f());
        #[cfg(not(loom))]
        f()
    }
}

/// A table of [`DataCell`]s, one per slot or chunk, for loom models.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct DataCells {
    cells: Vec<DataCell>,
}

#[cfg(loom)]
impl DataCells {
    /// A table of `n` cells.
    pub(crate) fn new(n: usize) -> Self {
        DataCells {
            cells: (0..n).map(|_| DataCell::default()).collect(),
        }
    }

    /// The cell of slot `i` (reduced modulo the table size).
    pub(crate) fn get(&self, i: usize) -> &DataCell {
        &self.cells[i % self.cells.len()]
    }
}
