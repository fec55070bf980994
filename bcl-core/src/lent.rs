//! Memory lent to a port for one normal-channel transfer, instead of a
//! vector moved in.
//!
//! A send on a normal channel, or a buffer posted on one, usually moves a
//! `Vec<u8>` into the port, and the transfer's event gives it back: the
//! type system keeps the application away from bytes the port reads or
//! writes. An application whose data lives in memory it cannot hand over as
//! a vector (a C program's buffer, under MPI) would have to copy it into
//! one and out again — two passes over every large message. It lends the
//! memory instead: a [`LentBytes`] for a send (read only) or a
//! [`LentBytesMut`] for a posted buffer (written), in a box.
//!
//! The port reads or writes the memory only while it holds the box, and
//! drops the box when the transfer ends (complete, failed or cancelled, or
//! the call refused). The event of a lent transfer carries an empty vector
//! in place of the buffer: the bytes never moved. So the lender's contract
//! is the one MPI puts on its programs: the memory stays valid, and is not
//! touched by anyone else, until the transfer's event (or until the port
//! is dropped).

use std::ops::{Deref, DerefMut};

/// Memory a send reads from (see the module documentation).
pub trait LentBytes: Send {
    /// The bytes to send. The same slice for as long as the port holds
    /// this value.
    fn bytes(&self) -> &[u8];
}

/// Memory a posted buffer is written into (see the module documentation).
pub trait LentBytesMut: LentBytes {
    /// The buffer. The same memory as [`LentBytes::bytes`].
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// A transfer's buffer: a vector moved in, or memory lent (`L` is
/// `dyn LentBytes` for sends, `dyn LentBytesMut` for posted buffers).
pub(crate) enum TransferBuffer<L: ?Sized> {
    Vec(Vec<u8>),
    Lent(Box<L>),
}

/// The buffer of a normal-channel send.
pub(crate) type SendBuffer = TransferBuffer<dyn LentBytes>;

/// A buffer posted on a normal channel.
pub(crate) type PostedBuffer = TransferBuffer<dyn LentBytesMut>;

impl<L: ?Sized> TransferBuffer<L> {
    /// What the transfer's event gives back: the vector, or an empty one
    /// for lent memory (the box is dropped: the port is done with it).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            TransferBuffer::Vec(v) => v,
            TransferBuffer::Lent(_) => Vec::new(),
        }
    }
}

impl<L: ?Sized + LentBytes> Deref for TransferBuffer<L> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            TransferBuffer::Vec(v) => v,
            TransferBuffer::Lent(l) => l.bytes(),
        }
    }
}

impl<L: ?Sized + LentBytesMut> DerefMut for TransferBuffer<L> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            TransferBuffer::Vec(v) => v,
            TransferBuffer::Lent(l) => l.bytes_mut(),
        }
    }
}
