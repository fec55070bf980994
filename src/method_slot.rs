//! An endpoint's methods, each held by what it can do.
//!
//! A method that implements the direct path ([`DirectMethod`]) is kept as
//! one, so that the engine calls its extension through one vtable call
//! (no lookup or downcast on every send and poll, which would be a
//! measurable part of an 8-byte shared-memory message's path); every other
//! method is a plain [`Method`]. Everything that needs only frames sees
//! every method as `dyn Method` through `Deref`.

use bcl_core::method::{DirectMethod, Method};
use std::ops::{Deref, DerefMut};

/// One of an endpoint's methods.
pub(crate) enum MethodSlot {
    /// A method that moves frames only.
    Frames(Box<dyn Method>),
    /// A method with the direct path.
    Direct(Box<dyn DirectMethod>),
}

impl MethodSlot {
    /// Holds `m` by what it can do (asks it once: [`Method::into_direct`]).
    pub(crate) fn new(m: Box<dyn Method>) -> MethodSlot {
        match m.into_direct() {
            Ok(d) => MethodSlot::Direct(d),
            Err(m) => MethodSlot::Frames(m),
        }
    }

    /// The method's direct path, if it has one.
    #[inline]
    pub(crate) fn direct(&mut self) -> Option<&mut dyn DirectMethod> {
        match self {
            MethodSlot::Direct(m) => Some(&mut **m),
            MethodSlot::Frames(_) => None,
        }
    }

    /// The method as type `M`, if it is one; looks through the capture's
    /// recording adapter ([`crate::capture`]).
    pub(crate) fn downcast_mut<M: Method>(&mut self) -> Option<&mut M> {
        let any: &mut dyn std::any::Any = &mut **self;
        if any.is::<M>() {
            return any.downcast_mut::<M>();
        }
        crate::capture::inner_any_mut(any)?.downcast_mut::<M>()
    }

    /// Whether the method has the direct path.
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self, MethodSlot::Direct(_))
    }
}

impl Deref for MethodSlot {
    type Target = dyn Method;

    fn deref(&self) -> &(dyn Method + 'static) {
        match self {
            MethodSlot::Frames(m) => &**m,
            MethodSlot::Direct(m) => &**m,
        }
    }
}

impl DerefMut for MethodSlot {
    fn deref_mut(&mut self) -> &mut (dyn Method + 'static) {
        match self {
            MethodSlot::Frames(m) => &mut **m,
            MethodSlot::Direct(m) => &mut **m,
        }
    }
}
