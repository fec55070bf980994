//! The C caller's memory: buffers, arrays and out-parameters behind raw
//! pointers, made into slices and references in one place.
//!
//! MPI's contract with a C program is that every pointer it passes is valid
//! for what the call describes (a buffer for `count` elements of its
//! datatype, an array of `size` counts, a status to write), and that the
//! buffer of a non-blocking call stays valid and untouched until the call
//! completes. Each constructor here takes that contract as its `# Safety`
//! condition; a [`CBuf`] kept in a request relies on the second half.

use std::ffi::{c_char, c_int};

/// A byte buffer of the C caller, valid as the MPI contract says.
#[derive(Clone, Copy, Debug)]
pub struct CBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a CBuf is only used on the thread that initialized MPI (the
// library's state is thread-local); the marker lets requests that hold one
// sit in the state like any other value.
unsafe impl Send for CBuf {}

/// A send buffer lent to BCL's port for a large message: the port reads it
/// until the send completes, which MPI's contract allows (the program does
/// not touch a send buffer before its request completes).
impl bcl::core::lent::LentBytes for CBuf {
    fn bytes(&self) -> &[u8] {
        CBuf::bytes(self)
    }
}

impl CBuf {
    /// An empty buffer (count 0, or a buffer that is not used).
    pub const EMPTY: CBuf = CBuf {
        ptr: std::ptr::NonNull::dangling().as_ptr(),
        len: 0,
    };

    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads (and writes, if [`CBuf::bytes_mut`] is
    /// called) of `len` bytes for as long as the buffer is used: during the
    /// call, or until the request holding it completes. A null `ptr` is
    /// allowed only with `len` 0.
    pub unsafe fn new(ptr: *const std::ffi::c_void, len: usize) -> CBuf {
        if len == 0 || ptr.is_null() {
            return CBuf::EMPTY;
        }
        CBuf {
            ptr: ptr as *mut u8,
            len,
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: valid for reads of `len` bytes by the contract of `new`
        // (or dangling and empty).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Its bytes, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: valid for writes of `len` bytes by the contract of `new`
        // (or dangling and empty); the caller does not touch a buffer that
        // MPI is writing.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Whether it starts where `other` does (`MPI_IN_PLACE` checks, aliasing
    /// of send and receive buffers).
    pub fn same_start(&self, other: &CBuf) -> bool {
        self.len > 0 && self.ptr == other.ptr
    }
}

/// The `n` ints at `ptr` (counts, displacements, ranks), copied.
///
/// # Safety
/// `ptr` must be valid for reads of `n` ints (or null with `n` 0).
pub unsafe fn ints(ptr: *const c_int, n: usize) -> Vec<c_int> {
    if n == 0 || ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: valid for `n` ints by this function's contract.
    unsafe { std::slice::from_raw_parts(ptr, n) }.to_vec()
}

/// Writes `v` through an out-parameter, if it is not null.
///
/// # Safety
/// `ptr` must be null or valid for a write of one `T`.
pub unsafe fn put<T>(ptr: *mut T, v: T) {
    if !ptr.is_null() {
        // SAFETY: non-null and valid for a write by this function's
        // contract.
        unsafe { ptr.write(v) }
    }
}

/// Reads an in-parameter passed by pointer, or `None` if it is null.
///
/// # Safety
/// `ptr` must be null or valid for a read of one `T`.
pub unsafe fn get<T: Copy>(ptr: *const T) -> Option<T> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: non-null and valid for a read by this function's contract.
        Some(unsafe { ptr.read() })
    }
}

/// Writes `s` as a C string of at most `cap` bytes (with its NUL) into
/// `out` and its length (without the NUL) into `len`.
///
/// # Safety
/// `out` must be valid for writes of `cap` bytes and `len` null or valid
/// for a write of one int.
pub unsafe fn put_string(s: &str, out: *mut c_char, cap: usize, len: *mut c_int) {
    if out.is_null() || cap == 0 {
        return;
    }
    let n = s.len().min(cap - 1);
    // SAFETY: `out` is valid for `cap` > n bytes by this function's
    // contract, and `s` for `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        out.add(n).write(0);
        put(len, n as c_int);
    }
}

/// The `n` elements at `ptr`, to read and write in place (request and
/// status arrays).
///
/// # Safety
/// `ptr` must be valid for reads and writes of `n` elements for the
/// lifetime of the returned slice (or null with `n` 0).
pub unsafe fn array_mut<'a, T>(ptr: *mut T, n: usize) -> &'a mut [T] {
    if n == 0 || ptr.is_null() {
        return &mut [];
    }
    // SAFETY: valid for `n` elements by this function's contract.
    unsafe { std::slice::from_raw_parts_mut(ptr, n) }
}
