//! An endpoint's methods, with shared memory held by its concrete type.
//!
//! The engine's shortcuts for shared memory (direct messages sent and taken
//! in place, bulk transfers) need `ShmMethod` itself. Held as `Box<dyn
//! Method>` it would take a dynamic downcast (two indirect calls) on every
//! send and every poll, which is a measurable part of an 8-byte message's
//! path; held here, reaching it is one match. Everything else sees every
//! method as `dyn Method` through `Deref`.

use bcl_core::method::Method;
use bcl_shm::ShmMethod;
use std::ops::{Deref, DerefMut};

/// One of an endpoint's methods.
pub(crate) enum MethodSlot {
    /// The shared-memory method.
    Shm(Box<ShmMethod>),
    /// Any other method.
    Other(Box<dyn Method>),
}

impl MethodSlot {
    /// Holds `m`, by its concrete type if it is the shared-memory method.
    pub(crate) fn new(m: Box<dyn Method>) -> MethodSlot {
        let is_shm = (&*m as &dyn std::any::Any).is::<ShmMethod>();
        if is_shm {
            let any: Box<dyn std::any::Any> = m;
            if let Ok(shm) = any.downcast::<ShmMethod>() {
                return MethodSlot::Shm(shm);
            }
            unreachable!("checked to be ShmMethod just above");
        }
        MethodSlot::Other(m)
    }

    /// The shared-memory method, if this is it.
    #[inline]
    pub(crate) fn shm(&mut self) -> Option<&mut ShmMethod> {
        match self {
            MethodSlot::Shm(m) => Some(m),
            MethodSlot::Other(_) => None,
        }
    }
}

impl Deref for MethodSlot {
    type Target = dyn Method;

    fn deref(&self) -> &(dyn Method + 'static) {
        match self {
            MethodSlot::Shm(m) => &**m,
            MethodSlot::Other(m) => &**m,
        }
    }
}

impl DerefMut for MethodSlot {
    fn deref_mut(&mut self) -> &mut (dyn Method + 'static) {
        match self {
            MethodSlot::Shm(m) => &mut **m,
            MethodSlot::Other(m) => &mut **m,
        }
    }
}
