//! Sleeping and waking: the "armed" flag protocol.
//!
//! A process that finds nothing to do *arms* a flag in shared memory,
//! re-checks every condition it waits for, and only then sleeps on its
//! doorbell (in the OS layer: a Unix datagram socket its peers send one
//! byte to; in loom models: a mutex and condition variable). A process that
//! makes one of those conditions true afterwards checks the flag and rings
//! the doorbell only if it is armed, so the fast path of a busy receiver
//! costs the sender nothing but a load.
//!
//! The classic check-then-sleep race (the waker checks the flag before the
//! sleeper set it, the sleeper re-checks the condition before the waker
//! made it true) is the store-buffering litmus test, closed with a
//! sequentially consistent fence on both sides:
//!
//! ```text
//! sleeper:  flag = 1;  fence(SeqCst);  if condition { don't sleep }
//! waker:    condition = true;  fence(SeqCst);  if flag == 1 { ring }
//! ```
//!
//! The two fences are ordered one way or the other in the single total
//! order of SeqCst fences; whichever comes second sees the other side's
//! store. So either the sleeper sees the condition or the waker sees the
//! flag (or both, giving a harmless spurious wake-up). The waker claims the
//! ring with a swap so that several wakers send one byte, not many.
//!
//! The inbox does not use this flag on its fast path: its sleep bit
//! lives in the inbox's `tail` word itself (see [`crate::inbox`]), where the
//! producers' claim CAS orders it without a fence.

use crate::sync::{fence, AtomicU32, Ordering};

/// Arms `flag`: the caller re-checks its conditions after this and sleeps
/// only if none holds.
#[inline]
pub(crate) fn arm(flag: &AtomicU32) {
    flag.store(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
}

/// Disarms `flag` (after waking, or when the re-check found work).
#[inline]
pub(crate) fn disarm(flag: &AtomicU32) {
    flag.store(0, Ordering::Relaxed);
}

/// After making a condition true: whether the sleeper armed `flag`, in
/// which case this caller (and no other) must ring its doorbell.
#[inline]
pub(crate) fn should_wake(flag: &AtomicU32) -> bool {
    fence(Ordering::SeqCst);
    flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::Relaxed) != 0
}
