//! Completing requests: wait and test for one, any, some or all of them,
//! freeing and cancelling.

use crate::abi::*;
use crate::args;
use crate::cmem;
use crate::error::{MpiError, MpiResult};
use crate::p2p::finish;
use crate::request::{Completion, Pending};
use crate::state::{call, Mpi};
use std::ffi::c_int;

/// The status of a null request: empty.
fn null_status() -> Completion {
    Completion::empty()
}

impl Mpi {
    /// The slots of a request array (`None` for `MPI_REQUEST_NULL`).
    fn slots(&self, reqs: &[MPI_Request]) -> MpiResult<Vec<Option<usize>>> {
        reqs.iter()
            .map(|&h| {
                if h == MPI_REQUEST_NULL {
                    Ok(None)
                } else {
                    self.requests.index(h).map(Some)
                }
            })
            .collect()
    }

    /// Waits until at least one of `slots` completes (all are `None`: at
    /// once).
    fn wait_any_slot(&mut self, slots: &[Option<usize>]) -> MpiResult {
        if slots.iter().all(Option::is_none) {
            return Ok(());
        }
        let Mpi { coll, requests, .. } = self;
        // Every slot is looked at (completing what it can), not just up to
        // the first complete one.
        coll.wait_for(|c| {
            let mut any = false;
            for &i in slots.iter().flatten() {
                any |= requests.try_complete(i, c);
            }
            any
        })?;
        Ok(())
    }
}

/// The request array of an array call (`count` requests at `requests`) and
/// the slot of each (`None`: `MPI_REQUEST_NULL`).
///
/// # Safety
/// `requests` is valid for `count` requests for the lifetime `'a`.
unsafe fn request_array<'a>(
    m: &Mpi,
    count: c_int,
    requests: *mut MPI_Request,
) -> MpiResult<(&'a mut [MPI_Request], Vec<Option<usize>>)> {
    let n = args::count(count, "count")?;
    // SAFETY: valid for `n` requests (this function's contract).
    let reqs = unsafe { cmem::array_mut(requests, n) };
    let slots = m.slots(reqs)?;
    Ok((reqs, slots))
}

/// Takes the completions of every request of an array whose requests are
/// all complete, sets them to `MPI_REQUEST_NULL`, and writes the statuses.
///
/// # Safety
/// As [`finish_all`].
unsafe fn take_all(
    m: &mut Mpi,
    reqs: &mut [MPI_Request],
    slots: &[Option<usize>],
    statuses: *mut MPI_Status,
) -> MpiResult {
    let done = slots.iter().enumerate().map(|(k, s)| {
        let c = match s {
            Some(i) => m.requests.take(*i).unwrap_or_else(null_status),
            None => null_status(),
        };
        reqs[k] = MPI_REQUEST_NULL;
        (k, c)
    });
    // SAFETY: this function's contract.
    unsafe { finish_all(done, statuses) }
}

/// Writes the statuses of an array call and gives its result: the error
/// itself when statuses are ignored, else `MPI_ERR_IN_STATUS` with each
/// status's `MPI_ERROR` set.
///
/// # Safety
/// `statuses` is `MPI_STATUSES_IGNORE` (or null) or valid for writes of
/// `done.len()` statuses.
unsafe fn finish_all(
    done: impl IntoIterator<Item = (usize, Completion)>,
    statuses: *mut MPI_Status,
) -> MpiResult {
    // Streamed, not collected: a Waitall of a window of requests then
    // allocates nothing.
    let ignored = args::ignored(statuses);
    let mut first_error = None;
    for (k, c) in done {
        if !ignored {
            // SAFETY: valid for writes of the array's length (MPI contract).
            unsafe { cmem::put(statuses.add(k), c.status()) };
        }
        if first_error.is_none() {
            first_error = c.error;
        }
    }
    match first_error {
        Some(e) if !ignored => Err(MpiError {
            class: MPI_ERR_IN_STATUS,
            ..e
        }),
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `MPI_Wait`.
///
/// # Safety
/// `request` valid for a read and write; `status` ignored or valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    call("MPI_Wait", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(request) }
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, "request is NULL"))?;
        if h == MPI_REQUEST_NULL {
            // SAFETY: the C caller's MPI contract.
            return unsafe { finish(null_status(), status) };
        }
        let i = m.requests.index(h)?;
        let c = m.wait_slot(i)?;
        // SAFETY: the C caller's MPI contract.
        unsafe {
            cmem::put(request, MPI_REQUEST_NULL);
            finish(c, status)
        }
    })
}

/// `MPI_Test`.
///
/// # Safety
/// As [`MPI_Wait`], and `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test(
    request: *mut MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Test", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(request) }
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, "request is NULL"))?;
        if h == MPI_REQUEST_NULL {
            // SAFETY: the C caller's MPI contract.
            unsafe { cmem::put(flag, 1) };
            // SAFETY: the C caller's MPI contract.
            return unsafe { finish(null_status(), status) };
        }
        let i = m.requests.index(h)?;
        if !m.requests.try_complete(i, &mut m.coll) {
            m.progress()?;
            m.requests.try_complete(i, &mut m.coll);
        }
        match m.requests.take(i) {
            Some(c) => {
                // SAFETY: the C caller's MPI contract.
                unsafe {
                    cmem::put(flag, 1);
                    cmem::put(request, MPI_REQUEST_NULL);
                    finish(c, status)
                }
            }
            None => {
                // SAFETY: the C caller's MPI contract.
                unsafe { cmem::put(flag, 0) };
                Ok(())
            }
        }
    })
}

/// `MPI_Waitall`.
///
/// # Safety
/// `requests` valid for `count` requests; `statuses` ignored or valid for
/// `count` statuses.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    requests: *mut MPI_Request,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Waitall", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, count, requests)? };
        for &i in slots.iter().flatten() {
            m.wait_done(i)?;
        }
        // SAFETY: the C caller's MPI contract.
        unsafe { take_all(m, reqs, &slots, statuses) }
    })
}

/// `MPI_Testall`: completes all or none.
///
/// # Safety
/// As [`MPI_Waitall`], and `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    requests: *mut MPI_Request,
    flag: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Testall", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, count, requests)? };
        m.progress()?;
        let mut all = true;
        for &i in slots.iter().flatten() {
            all &= m.requests.try_complete(i, &mut m.coll);
        }
        // SAFETY: the C caller's MPI contract.
        unsafe { cmem::put(flag, c_int::from(all)) };
        if !all {
            return Ok(());
        }
        // SAFETY: the C caller's MPI contract.
        unsafe { take_all(m, reqs, &slots, statuses) }
    })
}

/// `MPI_Waitany`.
///
/// # Safety
/// `requests` valid for `count` requests; `index` for a write; `status`
/// ignored or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    requests: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Waitany", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, count, requests)? };
        m.wait_any_slot(&slots)?;
        take_first(m, reqs, &slots, index, status)
    })
}

/// `MPI_Testany`.
///
/// # Safety
/// As [`MPI_Waitany`], and `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    requests: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Testany", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, count, requests)? };
        m.progress()?;
        let mut any = slots.iter().all(Option::is_none);
        for &i in slots.iter().flatten() {
            any |= m.requests.try_complete(i, &mut m.coll);
        }
        // SAFETY: the C caller's MPI contract.
        unsafe { cmem::put(flag, c_int::from(any)) };
        if !any {
            // SAFETY: the C caller's MPI contract.
            unsafe { cmem::put(index, MPI_UNDEFINED) };
            return Ok(());
        }
        take_first(m, reqs, &slots, index, status)
    })
}

/// Takes the first completed request of `slots` (or reports none, if all
/// are null) for the *any calls.
fn take_first(
    m: &mut Mpi,
    reqs: &mut [MPI_Request],
    slots: &[Option<usize>],
    index: *mut c_int,
    status: *mut MPI_Status,
) -> MpiResult {
    for (k, s) in slots.iter().enumerate() {
        if let Some(c) = s.and_then(|i| m.requests.take(i)) {
            reqs[k] = MPI_REQUEST_NULL;
            // SAFETY: the C caller's MPI contract (index and status valid
            // for writes, checked by the callers' contracts).
            return unsafe {
                cmem::put(index, k as c_int);
                finish(c, status)
            };
        }
    }
    // SAFETY: as above.
    unsafe {
        cmem::put(index, MPI_UNDEFINED);
        finish(null_status(), status)
    }
}

/// Takes every completed request of `slots` for the *some calls.
///
/// # Safety
/// `outcount` valid for a write; `indices` for `slots.len()` ints;
/// `statuses` ignored or valid for `slots.len()` statuses.
unsafe fn take_some(
    m: &mut Mpi,
    reqs: &mut [MPI_Request],
    slots: &[Option<usize>],
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> MpiResult {
    if slots.iter().all(Option::is_none) {
        // SAFETY: the C caller's MPI contract.
        unsafe { cmem::put(outcount, MPI_UNDEFINED) };
        return Ok(());
    }
    let mut done = Vec::new();
    for (k, s) in slots.iter().enumerate() {
        if let Some(c) = s.and_then(|i| m.requests.take(i)) {
            reqs[k] = MPI_REQUEST_NULL;
            // SAFETY: `indices` holds `slots.len()` ints (MPI contract).
            unsafe { cmem::put(indices.add(done.len()), k as c_int) };
            done.push((done.len(), c));
        }
    }
    // SAFETY: the C caller's MPI contract.
    unsafe {
        cmem::put(outcount, done.len() as c_int);
        finish_all(done, statuses)
    }
}

/// `MPI_Waitsome`.
///
/// # Safety
/// `requests` valid for `incount` requests, `indices` for `incount` ints,
/// `outcount` for a write, `statuses` ignored or valid for `incount`.
#[no_mangle]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Waitsome", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, incount, requests)? };
        m.wait_any_slot(&slots)?;
        // SAFETY: the C caller's MPI contract.
        unsafe { take_some(m, reqs, &slots, outcount, indices, statuses) }
    })
}

/// `MPI_Testsome`.
///
/// # Safety
/// As [`MPI_Waitsome`].
#[no_mangle]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: *mut MPI_Request,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> c_int {
    call("MPI_Testsome", None, |m| {
        // SAFETY: the C caller's MPI contract.
        let (reqs, slots) = unsafe { request_array(m, incount, requests)? };
        m.progress()?;
        for &i in slots.iter().flatten() {
            m.requests.try_complete(i, &mut m.coll);
        }
        // SAFETY: the C caller's MPI contract.
        unsafe { take_some(m, reqs, &slots, outcount, indices, statuses) }
    })
}

/// `MPI_Request_free`: the operation goes on; its request is dropped once
/// it completes.
///
/// # Safety
/// `request` valid for a read and write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Request_free(request: *mut MPI_Request) -> c_int {
    call("MPI_Request_free", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(request) }
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, "request is NULL"))?;
        let i = m.requests.index(h)?;
        m.requests.release(i);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(request, MPI_REQUEST_NULL) };
        Ok(())
    })
}

/// `MPI_Cancel`: a receive nothing matched yet is withdrawn (its status
/// says cancelled); sends and matched receives complete normally.
///
/// # Safety
/// `request` valid for a read.
#[no_mangle]
pub unsafe extern "C" fn MPI_Cancel(request: *mut MPI_Request) -> c_int {
    call("MPI_Cancel", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(request) }
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, "request is NULL"))?;
        let i = m.requests.index(h)?;
        let Mpi { coll, requests, .. } = m;
        if let Some(p) = requests.pending_mut(i) {
            if let Pending::Recv { id, .. } = p {
                if coll.messenger().cancel_recv(*id) {
                    *p = Pending::Done(Completion {
                        cancelled: true,
                        ..Completion::empty()
                    });
                }
            }
        }
        Ok(())
    })
}

/// `MPI_Test_cancelled`.
///
/// # Safety
/// `status` valid for a read, `flag` for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) -> c_int {
    call("MPI_Test_cancelled", None, |_| {
        // SAFETY: valid for a read (MPI contract).
        let s = unsafe { cmem::get(status) }
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "status is NULL"))?;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(flag, s.count_hi_and_cancelled & 1) };
        Ok(())
    })
}
