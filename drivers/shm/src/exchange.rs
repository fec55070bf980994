//! The exchange queue: one per ordered process pair, single producer,
//! single consumer, for messages larger than an inbox slot.
//!
//! A circular queue of `chunks` chunks of `chunk_size` bytes, each with a
//! descriptor (message number, offset, length, message total). The
//! producer owns `head` (chunks published), the consumer owns `tail`
//! (chunks consumed); both live on their own cache lines and each side
//! keeps a private cached copy of the other's index, so it touches the
//! other's line only when its cache says the queue is full (producer) or
//! empty (consumer).
//!
//! A message is cut into chunks that are **published one at a time**: the
//! producer copies chunk k+1 in while the consumer copies chunk k out, so
//! for long messages one of the two copies is hidden behind the other.
//! Both sides are non-blocking and resumable: `ExSender::push` and
//! `ExReceiver::pull_into` (used by `Mailbox::push_message` and
//! `Mailbox::pull_into`) move as many chunks as they can and return how
//! far the message got.
//!
//! Memory ordering (Lamport's SPSC queue): the producer writes chunk data
//! and descriptor, then stores `head + 1` with release; the consumer loads
//! `head` with acquire before reading them. The consumer reads the chunk,
//! then stores `tail + 1` with release; the producer loads `tail` with
//! acquire before overwriting that chunk. Everything the consumer reads
//! from the descriptor is validated (a peer may be buggy): a bad value is
//! an error, never a panic or an out-of-bounds copy.

use crate::sync::{AtomicU64, DataCell, Line, Ordering};

/// The queue's shared indices, each on its own line.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct ExCtl {
    /// Chunks published (written by the producer only).
    pub(crate) head: Line<AtomicU64>,
    /// Chunks consumed (written by the consumer only).
    pub(crate) tail: Line<AtomicU64>,
}

/// Describes the chunk in one queue position.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct ChunkDesc {
    /// Message number (1, 2, ... per producer incarnation).
    pub(crate) msg: AtomicU64,
    /// Offset of this chunk in the message.
    pub(crate) off: AtomicU64,
    /// The message's total length.
    pub(crate) total: AtomicU64,
    /// Bytes in this chunk.
    pub(crate) len: AtomicU64,
}

/// A view of one exchange queue in memory. Copyable; owns nothing.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExView {
    ctl: *const ExCtl,
    descs: *const ChunkDesc,
    data: *mut u8,
    chunk_size: usize,
    chunks: u64,
    #[cfg(loom)]
    cells: *const crate::sync::DataCells,
}

// SAFETY: pointers into shared memory accessed only through atomics and
// protocol-exclusive raw copies; the creator keeps the memory alive (see
// `ExView::new`).
unsafe impl Send for ExView {}

impl ExView {
    /// A view of the queue with control block `ctl`, `chunks` descriptors at
    /// `descs` and `chunks * chunk_size` data bytes at `data`.
    ///
    /// # Safety
    ///
    /// The three areas must be valid (descriptors initialised, properly
    /// aligned) for as long as the view or a copy of it is used, and be
    /// accessed by others only through this module's protocol. `chunks`
    /// must be at least 1 and `chunk_size` at least 1.
    pub(crate) unsafe fn new(
        ctl: *const ExCtl,
        descs: *const ChunkDesc,
        data: *mut u8,
        chunk_size: usize,
        chunks: u64,
        #[cfg(loom)] cells: *const crate::sync::DataCells,
    ) -> Self {
        debug_assert!(chunks >= 1 && chunk_size >= 1);
        ExView {
            ctl,
            descs,
            data,
            chunk_size,
            chunks,
            #[cfg(loom)]
            cells,
        }
    }

    fn ctl(&self) -> &ExCtl {
        // SAFETY: `new`'s contract.
        unsafe { &*self.ctl }
    }

    fn desc(&self, pos: u64) -> &ChunkDesc {
        // SAFETY: the index is < chunks; `new`'s contract says the
        // descriptors are valid; they hold only atomics.
        unsafe { &*self.descs.add((pos % self.chunks) as usize) }
    }

    fn chunk(&self, pos: u64) -> *mut u8 {
        // SAFETY: the index is < chunks, so the chunk lies inside the data
        // area of `chunks * chunk_size` bytes.
        unsafe {
            self.data
                .add((pos % self.chunks) as usize * self.chunk_size)
        }
    }

    fn cell(&self, pos: u64) -> &DataCell {
        #[cfg(loom)]
        // SAFETY: the loom harness keeps the cell table alive with the queue.
        return unsafe { (*self.cells).get((pos % self.chunks) as usize) };
        #[cfg(not(loom))]
        {
            let _ = pos;
            &DataCell {}
        }
    }

    /// Whether chunks are published and not consumed (either side may ask;
    /// a hint).
    #[cfg(loom)]
    pub(crate) fn has_data(&self) -> bool {
        let c = self.ctl();
        c.head.load(Ordering::Acquire) != c.tail.load(Ordering::Acquire)
    }

    /// Chunks published so far (the producer's index).
    pub(crate) fn head(&self) -> u64 {
        self.ctl().head.load(Ordering::Acquire)
    }

    /// Whether the queue has room for a chunk (a hint for the producer).
    pub(crate) fn has_space(&self) -> bool {
        let c = self.ctl();
        c.head
            .load(Ordering::Relaxed)
            .wrapping_sub(c.tail.load(Ordering::Acquire))
            < self.chunks
    }

    /// Drops everything published and not consumed: the consumer's reset
    /// after the producer died. Only the consumer calls this, and only
    /// while no producer uses the queue.
    pub(crate) fn discard_all(&self) {
        let c = self.ctl();
        c.tail
            .store(c.head.load(Ordering::Acquire), Ordering::Release);
    }
}

/// What went wrong in an exchange queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExError {
    /// `push` was called with a message of another length than the one in
    /// progress.
    #[error("a message of {in_progress} bytes is in progress; push the same bytes until it completes (got {got} bytes)")]
    Changed {
        /// Length of the message in progress.
        in_progress: usize,
        /// Length passed now.
        got: usize,
    },
    /// The receive buffer is smaller than the incoming message; nothing was
    /// consumed.
    #[error("incoming message of {needed} bytes does not fit the {have}-byte buffer")]
    TooSmall {
        /// The message length.
        needed: usize,
        /// The buffer length.
        have: usize,
    },
    /// The queue's shared state violates the protocol (a buggy peer).
    #[error("exchange queue corrupt: {0}")]
    Corrupt(&'static str),
}

/// How far a push (`Mailbox::push_message`) got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushProgress {
    /// Bytes of the message published so far (over all calls).
    pub sent: usize,
    /// Whether the whole message is published; the next push starts a new
    /// message.
    pub done: bool,
    /// Chunks published by this call.
    pub chunks: u32,
}

/// How far a pull (`Mailbox::pull_into`) got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullProgress {
    /// No chunk was available and no message is in progress.
    Empty,
    /// Part of a message is in the buffer.
    Partial {
        /// Bytes received so far (over all calls), a prefix of the message.
        received: usize,
        /// The message's length.
        total: usize,
    },
    /// A whole message of `len` bytes is in `dst[..len]`.
    Done {
        /// The message's length.
        len: usize,
    },
}

#[derive(Clone, Copy, Debug)]
struct Cur {
    msg: u64,
    off: u64,
    total: u64,
    /// At least one chunk is published (an empty message has one).
    started: bool,
}

/// The producer side of an exchange queue (private state).
#[derive(Debug)]
pub(crate) struct ExSender {
    view: ExView,
    head: u64,
    tail_cache: u64,
    next_msg: u64,
    cur: Option<Cur>,
}

impl ExSender {
    /// The producer of `view`, continuing at the queue's current head with
    /// message number 1. The queue must be empty (a fresh queue, or one the
    /// consumer reset with [`ExView::discard_all`]).
    pub(crate) fn new(view: ExView) -> Self {
        let c = view.ctl();
        let head = c.head.load(Ordering::Acquire);
        ExSender {
            view,
            head,
            tail_cache: c.tail.load(Ordering::Acquire),
            next_msg: 1,
            cur: None,
        }
    }

    /// The queue this sender writes.
    pub(crate) fn view(&self) -> &ExView {
        &self.view
    }

    /// Publishes as many chunks of `bytes` as fit. Call again with the same
    /// bytes until `done`; each call continues where the last stopped.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<PushProgress, ExError> {
        let total = bytes.len() as u64;
        let mut cur = match self.cur {
            Some(c) if c.total != total => {
                return Err(ExError::Changed {
                    in_progress: c.total as usize,
                    got: bytes.len(),
                })
            }
            Some(c) => c,
            None => {
                let c = Cur {
                    msg: self.next_msg,
                    off: 0,
                    total,
                    started: false,
                };
                self.next_msg += 1;
                c
            }
        };
        let chunks = self.view.chunks;
        let cs = self.view.chunk_size as u64;
        let mut published = 0u32;
        while cur.off < total || !cur.started {
            if self.head.wrapping_sub(self.tail_cache) >= chunks {
                self.tail_cache = self.view.ctl().tail.load(Ordering::Acquire);
                if self.head.wrapping_sub(self.tail_cache) >= chunks {
                    break;
                }
            }
            let n = (total - cur.off).min(cs);
            let pos = self.head;
            self.view.cell(pos).write(|| {
                // SAFETY: n <= chunk_size, so the destination is inside this
                // chunk; the chunk is free (head - tail < chunks, tail read
                // with acquire), so the consumer no longer reads it and will
                // not until we publish; the source is the caller's buffer at
                // off..off+n, in bounds since off + n <= total = bytes.len().
                unsafe {
                    crate::copy::copy_bytes(
                        self.view.chunk(pos),
                        bytes.as_ptr().add(cur.off as usize),
                        n as usize,
                    )
                }
            });
            let d = self.view.desc(pos);
            d.msg.store(cur.msg, Ordering::Relaxed);
            d.off.store(cur.off, Ordering::Relaxed);
            d.total.store(total, Ordering::Relaxed);
            d.len.store(n, Ordering::Relaxed);
            self.head = pos.wrapping_add(1);
            self.view.ctl().head.store(self.head, Ordering::Release);
            cur.off += n;
            cur.started = true;
            published += 1;
        }
        let done = cur.off == total && cur.started;
        self.cur = if done { None } else { Some(cur) };
        Ok(PushProgress {
            sent: cur.off as usize,
            done,
            chunks: published,
        })
    }
}

/// The consumer side of an exchange queue (private state).
#[derive(Debug)]
pub(crate) struct ExReceiver {
    view: ExView,
    tail: u64,
    head_cache: u64,
    expect: u64,
    off: u64,
    total: u64,
}

impl ExReceiver {
    /// The consumer of `view`, continuing at its current tail and expecting
    /// message number 1.
    pub(crate) fn new(view: ExView) -> Self {
        let tail = view.ctl().tail.load(Ordering::Acquire);
        ExReceiver {
            view,
            tail,
            head_cache: tail,
            expect: 1,
            off: 0,
            total: 0,
        }
    }

    /// The queue this receiver reads.
    pub(crate) fn view(&self) -> &ExView {
        &self.view
    }

    /// Chunks consumed so far (the consumer's index).
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// Refreshes the cached head if the cache says empty; returns the
    /// number of chunks available, validated.
    fn available(&mut self) -> Result<u64, ExError> {
        if self.tail == self.head_cache {
            self.head_cache = self.view.ctl().head.load(Ordering::Acquire);
        }
        let avail = self.head_cache.wrapping_sub(self.tail);
        if avail > self.view.chunks {
            return Err(ExError::Corrupt("head is more than a queue ahead of tail"));
        }
        Ok(avail)
    }

    /// The length of the next message, if its first chunk has arrived and
    /// no message is in progress (so a caller can size its buffer).
    pub(crate) fn next_len(&mut self) -> Result<Option<usize>, ExError> {
        if self.off > 0 {
            return Ok(Some(self.total as usize));
        }
        if self.available()? == 0 {
            return Ok(None);
        }
        let total = self.view.desc(self.tail).total.load(Ordering::Relaxed);
        usize::try_from(total)
            .map(Some)
            .map_err(|_| ExError::Corrupt("message length beyond the address space"))
    }

    /// Copies as many chunks as are available into `dst`, stopping at the
    /// end of the current message. Call again (with a buffer at least as
    /// large as the message) until `Done`.
    pub(crate) fn pull_into(&mut self, dst: &mut [u8]) -> Result<PullProgress, ExError> {
        loop {
            if self.available()? == 0 {
                return Ok(if self.off > 0 {
                    PullProgress::Partial {
                        received: self.off as usize,
                        total: self.total as usize,
                    }
                } else {
                    PullProgress::Empty
                });
            }
            let pos = self.tail;
            let d = self.view.desc(pos);
            let msg = d.msg.load(Ordering::Relaxed);
            let off = d.off.load(Ordering::Relaxed);
            let total = d.total.load(Ordering::Relaxed);
            let len = d.len.load(Ordering::Relaxed);
            if msg != self.expect {
                return Err(ExError::Corrupt("chunk of an unexpected message"));
            }
            if off != self.off {
                return Err(ExError::Corrupt("chunk at an unexpected offset"));
            }
            if self.off > 0 && total != self.total {
                return Err(ExError::Corrupt("message length changed mid-message"));
            }
            if len > self.view.chunk_size as u64
                || off.checked_add(len).is_none_or(|end| end > total)
                || (len == 0 && total != 0)
            {
                return Err(ExError::Corrupt("chunk length out of bounds"));
            }
            if total > dst.len() as u64 {
                return Err(ExError::TooSmall {
                    needed: usize::try_from(total).unwrap_or(usize::MAX),
                    have: dst.len(),
                });
            }
            self.view.cell(pos).read(|| {
                // SAFETY: len <= chunk_size, so the source is inside this
                // chunk, published (head read with acquire) and not yet
                // released, so the producer does not write it; the
                // destination off..off+len is inside `dst` because
                // off + len <= total <= dst.len(); private memory, no overlap.
                unsafe {
                    crate::copy::copy_bytes(
                        dst.as_mut_ptr().add(off as usize),
                        self.view.chunk(pos),
                        len as usize,
                    )
                }
            });
            self.tail = pos.wrapping_add(1);
            self.view.ctl().tail.store(self.tail, Ordering::Release);
            self.off = off + len;
            self.total = total;
            if self.off == total {
                self.off = 0;
                self.total = 0;
                self.expect += 1;
                return Ok(PullProgress::Done {
                    len: total as usize,
                });
            }
        }
    }
}
