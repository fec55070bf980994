//! Checks of the arguments C programs pass: counts, ranks, tags, buffers,
//! each failing with MPI's error class and a message naming the argument.

use crate::abi::*;
use crate::cmem::CBuf;
use crate::datatype::TypeInfo;
use crate::error::{MpiError, MpiResult};
use bcl::coll::Comm;
use std::ffi::{c_int, c_void};

/// A count: not negative.
pub fn count(n: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("{what} {n} is negative")))
}

/// A message's destination or a root: a rank of `comm`, or `MPI_PROC_NULL`
/// (`None`) where `proc_null` allows it.
pub fn rank(comm: &Comm, r: c_int, what: &str, proc_null: bool) -> MpiResult<Option<usize>> {
    if proc_null && r == MPI_PROC_NULL {
        return Ok(None);
    }
    match usize::try_from(r) {
        Ok(r) if r < comm.size() => Ok(Some(r)),
        _ => Err(MpiError::new(
            if what == "root" {
                MPI_ERR_ROOT
            } else {
                MPI_ERR_RANK
            },
            format!(
                "{what} {r} is not a rank of a communicator of {}",
                comm.size()
            ),
        )),
    }
}

/// A receive's source: a rank, `MPI_ANY_SOURCE` (`Some(None)`) or
/// `MPI_PROC_NULL` (`None`).
pub fn source(comm: &Comm, r: c_int) -> MpiResult<Option<Option<usize>>> {
    if r == MPI_ANY_SOURCE {
        return Ok(Some(None));
    }
    Ok(rank(comm, r, "source", true)?.map(Some))
}

/// A send's tag: 0 to the largest tag.
pub fn send_tag(tag: c_int) -> MpiResult<u64> {
    u64::try_from(tag).map_err(|_| {
        MpiError::new(
            MPI_ERR_TAG,
            format!("tag {tag} is negative (tags of sends run from 0 to {TAG_UB})"),
        )
    })
}

/// A receive's tag: 0 to the largest tag, or `MPI_ANY_TAG` (`None`).
pub fn recv_tag(tag: c_int) -> MpiResult<Option<u64>> {
    if tag == MPI_ANY_TAG {
        return Ok(None);
    }
    u64::try_from(tag).map(Some).map_err(|_| {
        MpiError::new(
            MPI_ERR_TAG,
            format!("tag {tag} is neither MPI_ANY_TAG nor from 0 to {TAG_UB}"),
        )
    })
}

/// The buffer of `count` elements of `t` at `ptr` (from the first byte
/// they touch, [`TypeInfo::first`], to the last).
///
/// # Safety
/// `ptr` must be valid, as MPI requires, for `count` elements of `t` (for
/// reads, and for writes if the buffer is written), for as long as the
/// buffer is used.
pub unsafe fn buffer(
    ptr: *const c_void,
    count: usize,
    t: &TypeInfo,
    what: &str,
) -> MpiResult<CBuf> {
    let span = t.span(count);
    if ptr.is_null() && span > 0 {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{what} is NULL with a count of {count}"),
        ));
    }
    if ptr as usize == MPI_IN_PLACE {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            format!("{what} cannot be MPI_IN_PLACE here"),
        ));
    }
    // The memory starts at the lowest byte an element touches (below `ptr`
    // for a type that reaches below its address).
    let start = ptr.cast::<u8>().wrapping_offset(t.first());
    // SAFETY: valid for the `span` bytes from there by this function's
    // contract.
    Ok(unsafe { CBuf::new(start.cast(), span) })
}

/// Whether `ptr` is `MPI_IN_PLACE`.
pub fn in_place(ptr: *const c_void) -> bool {
    ptr as usize == MPI_IN_PLACE
}

/// Whether a status pointer asks for no status.
pub fn ignored(status: *const MPI_Status) -> bool {
    status.is_null() || status as usize == MPI_STATUS_IGNORE
}
