//! Point-to-point: sends in MPI's four modes, receives with wildcards,
//! probes, and the requests that wait for them.
//!
//! Messages go through the communicator's point-to-point context of the
//! [messenger](bcl::coll::messenger): small ones inline on the system
//! channel, large ones by rendezvous on a normal channel. Matching,
//! wildcards and MPI's non-overtaking order are the messenger's. A
//! standard send returns once its data is out of the buffer (at once for an
//! inline message, after the transfer for a rendezvous); a synchronous one
//! once a receive matched it; a buffered one at once, holding room in the
//! attached buffer until the message is out; a ready send is a standard
//! send.

use crate::abi::*;
use crate::args;
use crate::cmem::{self, CBuf};
use crate::datatype::{count_of, TypeInfo};
use crate::error::{MpiError, MpiResult};
use crate::request::{
    copied, land, rank_in, status_bytes, Completion, Pending, Source, UserBuffer,
};
use crate::state::{call, comm_in, Mpi};
use bcl::coll::messenger::{Envelope, Pattern, RecvBuffer, RecvId, RecvNow};
use bcl::shm::cma::Region;
use std::ffi::{c_int, c_void};

/// The modes of sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `MPI_Send`, `MPI_Rsend`.
    Standard,
    /// `MPI_Ssend`: complete once matched.
    Sync,
    /// `MPI_Bsend`: through the attached buffer.
    Buffered,
}

impl Mpi {
    /// Starts a send; gives what is pending.
    ///
    /// # Safety
    /// `buf` must hold `count` elements of `datatype` as MPI requires.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn start_send(
        &mut self,
        mode: Mode,
        buf: *const c_void,
        count: c_int,
        datatype: MPI_Datatype,
        dest: c_int,
        tag: c_int,
        comm: MPI_Comm,
    ) -> MpiResult<Pending> {
        let c = &self.comm(comm)?.comm;
        let n = args::count(count, "count")?;
        let t = self.types.usable(datatype)?;
        let tag = args::send_tag(tag)?;
        let Some(dest) = args::rank(c, dest, "destination", true)? else {
            return Ok(Pending::Done(Completion::empty()));
        };
        // SAFETY: `buf` holds `count` elements by this function's contract.
        let buf = unsafe { args::buffer(buf, n, &t, "buffer")? };
        let (addr, context) = (c.addr(dest)?, c.p2p_context());
        let me = c.rank();
        let same_node = dest != me && c.nodes()[dest] == c.nodes()[me];
        let mut packed = Vec::new();
        let data = wire_of(&buf, &t, n, &mut packed);
        if mode != Mode::Buffered && same_node && t.contiguous() && data.len() >= self.region_min {
            // Large, on this node, in the program's memory until the send
            // completes (MPI's rule): the receiver reads it from there.
            if let Ok(region) = Region::local(data.as_ptr() as usize, data.len()) {
                let id = self
                    .coll
                    .messenger()
                    .isend_region(addr, context, tag, region)
                    .map_err(|e| e.naming_rank(|_| Some(dest)))?;
                return Ok(Pending::Send {
                    id,
                    bsend: 0,
                    region: buf,
                    to: dest,
                });
            }
        }
        let bsend = match mode {
            Mode::Buffered => {
                let need = data.len() + MPI_BSEND_OVERHEAD;
                let size = self.bsend.as_ref().map_or(0, |b| b.size);
                let free = size.saturating_sub(self.requests.bsend_in_use);
                if need > free {
                    return Err(MpiError::new(
                        MPI_ERR_BUFFER,
                        format!(
                            "a buffered send of {} bytes needs {need} bytes of the attached buffer, which has {free} free of {size} (MPI_Buffer_attach)",
                            data.len()
                        ),
                    ));
                }
                need
            }
            _ => 0,
        };
        let m = self.coll.messenger();
        // Large, to another node: sent from the program's memory, which
        // MPI keeps unchanged until the send completes (a rendezvous,
        // complete once delivered, synchronous or not).
        let lend = mode != Mode::Buffered
            && t.contiguous()
            && dest != me
            && buf.len() == data.len()
            && m.goes_by_rendezvous(data.len());
        let id = match mode {
            _ if lend => m.isend_lent(addr, context, tag, Box::new(buf)),
            Mode::Sync => m.isend_sync(addr, context, tag, data),
            _ => m.isend(addr, context, tag, data),
        }
        .map_err(|e| e.naming_rank(|_| Some(dest)))?;
        self.requests.bsend_in_use += bsend;
        Ok(Pending::Send {
            id,
            bsend,
            region: CBuf::EMPTY,
            to: dest,
        })
    }

    /// Posts a receive; gives what is pending.
    ///
    /// # Safety
    /// `buf` must be writable for `count` elements of `datatype` until the
    /// receive completes.
    pub unsafe fn start_recv(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        source: c_int,
        tag: c_int,
        comm: MPI_Comm,
    ) -> MpiResult<Pending> {
        let c = &self.comm(comm)?.comm;
        let n = args::count(count, "count")?;
        let t = self.types.usable(datatype)?;
        let tag = args::recv_tag(tag)?;
        let Some(from) = args::source(c, source)? else {
            return Ok(Pending::Done(Completion::proc_null()));
        };
        // SAFETY: `buf` is writable for `count` elements by this
        // function's contract.
        let buf = unsafe { args::buffer(buf, n, &t, "buffer")? };
        let pattern = Pattern {
            context: c.p2p_context(),
            from: from.map(|r| c.members()[r]),
            tag,
        };
        let source = match from {
            Some(r) => Source::Rank(r as c_int),
            None => Source::Any(c.clone()),
        };
        let m = self.coll.messenger();
        let id = if t.contiguous() {
            let len = n * t.wire();
            let into = UserBuffer { buf, len };
            let boxed = match m.spare_buffer::<UserBuffer>() {
                Some(mut b) => {
                    *b = into;
                    b
                }
                None => Box::new(into),
            };
            m.irecv_into(pattern, boxed)
        } else {
            m.irecv_matching(pattern)
        };
        Ok(Pending::Recv {
            id,
            buf,
            t,
            count: n,
            source,
        })
    }

    /// A blocking receive. Contiguous datatypes take the messenger's
    /// fast path: a small message is copied from the receive ring straight
    /// into the buffer, with no receive posted ([`Messenger::recv_now`]).
    ///
    /// # Safety
    /// `buf` must be writable for `count` elements of `datatype`.
    ///
    /// [`Messenger::recv_now`]: bcl::coll::messenger::Messenger::recv_now
    pub unsafe fn recv(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        source: c_int,
        tag: c_int,
        comm: MPI_Comm,
    ) -> MpiResult<Completion> {
        let t = self.types.usable(datatype)?;
        if !t.contiguous() {
            // SAFETY: this function's contract.
            let p = unsafe { self.start_recv(buf, count, datatype, source, tag, comm)? };
            return self.complete(p);
        }
        // Borrow the communicator from its own field: the wait below needs
        // `self.coll` (no clone of the communicator on this path).
        let Mpi { comms, coll, .. } = self;
        let c = &comm_in(comms, comm)?.comm;
        let n = args::count(count, "count")?;
        let tag = args::recv_tag(tag)?;
        let Some(from) = args::source(c, source)? else {
            return Ok(Completion::proc_null());
        };
        // SAFETY: this function's contract.
        let mut buf = unsafe { args::buffer(buf, n, &t, "buffer")? };
        let pattern = Pattern {
            context: c.p2p_context(),
            from: from.map(|r| c.members()[r]),
            tag,
        };
        let cap = n * t.wire();
        let mut posted: Option<RecvId> = None;
        let mut got = None;
        coll.wait_polling(|coll| {
            let m = coll.messenger();
            if let Some(id) = posted.as_mut() {
                got = land(m, id, &mut buf, &t, n, |a| rank_in(c, a));
                return Ok(got.is_some());
            }
            // A large message is written straight into `buf` (lent).
            let lent = buf;
            let lend = move || {
                Some(Box::new(UserBuffer {
                    buf: lent,
                    len: cap,
                }) as Box<dyn RecvBuffer>)
            };
            match m.recv_now_or_lend(&pattern, &mut buf.bytes_mut()[..cap], lend)? {
                RecvNow::Got(e) => {
                    let source = rank_in(c, e.from);
                    got = Some(copied(e, cap, n, source));
                }
                RecvNow::Posted(id) => posted = Some(id),
                RecvNow::Nothing => {}
            }
            Ok(got.is_some())
        })
        .map_err(|e| e.in_comm(c))?;
        Ok(got.expect("waited for"))
    }

    /// Waits until request slot `i` is complete (it stays registered).
    pub fn wait_done(&mut self, i: usize) -> MpiResult {
        let Mpi { coll, requests, .. } = self;
        coll.wait_for(|c| requests.try_complete(i, c))?;
        self.requests.sweep(&mut self.coll);
        Ok(())
    }

    /// Waits for request slot `i` and takes its completion.
    pub fn wait_slot(&mut self, i: usize) -> MpiResult<Completion> {
        self.wait_done(i)?;
        self.requests
            .take(i)
            .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a completed request vanished"))
    }

    /// Runs `pending` to completion (the blocking calls: no request is
    /// registered).
    pub fn complete(&mut self, mut pending: Pending) -> MpiResult<Completion> {
        if let Pending::Done(c) = pending {
            return Ok(c);
        }
        let Mpi { coll, requests, .. } = self;
        let mut out = None;
        coll.wait_for(|c| {
            out = pending.poll(c, &mut requests.bsend_in_use);
            out.is_some()
        })?;
        out.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a completed operation vanished"))
    }

    /// One round of progress for the test calls.
    pub fn progress(&mut self) -> MpiResult {
        self.coll.progress()?;
        self.requests.sweep(&mut self.coll);
        Ok(())
    }

    /// The probe pattern of (`source`, `tag`) on `comm`, or `None` for
    /// `MPI_PROC_NULL`.
    fn probe_pattern(
        &self,
        source: c_int,
        tag: c_int,
        comm: MPI_Comm,
    ) -> MpiResult<Option<(Pattern, bcl::coll::Comm)>> {
        let c = self.comm(comm)?.comm.clone();
        let tag = args::recv_tag(tag)?;
        let Some(from) = args::source(&c, source)? else {
            return Ok(None);
        };
        Ok(Some((
            Pattern {
                context: c.p2p_context(),
                from: from.map(|r| c.members()[r]),
                tag,
            },
            c,
        )))
    }
}

/// The wire form of `n` elements of `t` in `buf`: the buffer itself when
/// the type is contiguous, else packed into `scratch`.
pub fn wire_of<'a>(buf: &'a CBuf, t: &TypeInfo, n: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if t.contiguous() {
        &buf.bytes()[..n * t.wire()]
    } else {
        t.pack(buf.bytes(), n, scratch);
        scratch
    }
}

/// The status of a probed message.
fn probed(e: Envelope, c: &bcl::coll::Comm) -> Completion {
    Completion {
        source: c.rank_of(e.from).map_or(MPI_ANY_SOURCE, |r| r as c_int),
        tag: c_int::try_from(e.tag).unwrap_or(MPI_ANY_TAG),
        bytes: e.len,
        error: None,
        cancelled: false,
    }
}

/// Writes `c` into `status` (unless ignored) and gives its error.
///
/// # Safety
/// `status` must be ignored (null or `MPI_STATUS_IGNORE`) or valid for a
/// write.
pub unsafe fn finish(c: Completion, status: *mut MPI_Status) -> MpiResult {
    if !args::ignored(status) {
        // SAFETY: not ignored, so valid for a write by this function's
        // contract.
        unsafe { cmem::put(status, c.status()) };
    }
    match c.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A blocking send in `mode`.
///
/// # Safety
/// As [`Mpi::start_send`].
#[allow(clippy::too_many_arguments)]
unsafe fn send(
    name: &str,
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    call(name, Some(comm), |m| {
        // SAFETY: the C caller's MPI contract.
        let p = unsafe { m.start_send(mode, buf, count, datatype, dest, tag, comm)? };
        if mode == Mode::Buffered {
            let h = m.requests.add(p, comm);
            let i = m.requests.index(h)?;
            m.requests.release(i);
            m.requests.sweep(&mut m.coll);
            return Ok(());
        }
        if let Pending::Send { id, .. } = &p {
            if id.completed_at_once() {
                // An inline message: out of the buffer already.
                return Ok(());
            }
        }
        match m.complete(p)?.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// A non-blocking send in `mode`.
///
/// # Safety
/// As [`Mpi::start_send`], and `request` valid for a write.
#[allow(clippy::too_many_arguments)]
unsafe fn isend(
    name: &str,
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    call(name, Some(comm), |m| {
        // SAFETY: the C caller's MPI contract.
        let p = unsafe { m.start_send(mode, buf, count, datatype, dest, tag, comm)? };
        let h = m.requests.add(p, comm);
        // SAFETY: `request` is valid for a write (MPI contract).
        unsafe { cmem::put(request, h) };
        Ok(())
    })
}

macro_rules! blocking_send {
    ($name:ident, $mode:expr, $doc:literal) => {
        #[doc = concat!("`", stringify!($name), "`", $doc)]
        ///
        /// # Safety
        /// The C caller's MPI contract: `buf` holds `count` elements of
        /// `datatype`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
        ) -> c_int {
            // SAFETY: forwarded contract.
            unsafe {
                send(
                    stringify!($name),
                    $mode,
                    buf,
                    count,
                    datatype,
                    dest,
                    tag,
                    comm,
                )
            }
        }
    };
}

blocking_send!(MPI_Send, Mode::Standard, ".");
blocking_send!(
    MPI_Ssend,
    Mode::Sync,
    ": complete once a receive matched it."
);
blocking_send!(
    MPI_Rsend,
    Mode::Standard,
    ": a standard send (the program promises the receive is posted; nothing is gained by relying on it here)."
);
blocking_send!(
    MPI_Bsend,
    Mode::Buffered,
    ": returns at once, holding room in the attached buffer until the message is out."
);

macro_rules! nonblocking_send {
    ($name:ident, $mode:expr) => {
        #[doc = concat!("`", stringify!($name), "`.")]
        ///
        /// # Safety
        /// `buf` holds `count` elements of `datatype` and stays valid and
        /// unchanged until the request completes; `request` is valid for a
        /// write.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            buf: *const c_void,
            count: c_int,
            datatype: MPI_Datatype,
            dest: c_int,
            tag: c_int,
            comm: MPI_Comm,
            request: *mut MPI_Request,
        ) -> c_int {
            // SAFETY: forwarded contract.
            unsafe {
                isend(
                    stringify!($name),
                    $mode,
                    buf,
                    count,
                    datatype,
                    dest,
                    tag,
                    comm,
                    request,
                )
            }
        }
    };
}

nonblocking_send!(MPI_Isend, Mode::Standard);
nonblocking_send!(MPI_Issend, Mode::Sync);
nonblocking_send!(MPI_Irsend, Mode::Standard);
nonblocking_send!(MPI_Ibsend, Mode::Buffered);

/// `MPI_Buffer_attach`.
///
/// # Safety
/// `buffer` is valid for `size` bytes until it is detached.
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", None, |m| {
        let size = args::count(size, "size")?;
        if m.bsend.is_some() {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "a buffer is already attached (MPI_Buffer_detach it first)",
            ));
        }
        // Messages are copied by the messenger: the buffer only bounds how
        // much buffered sends may hold, as MPI defines.
        m.bsend = Some(crate::state::BsendBuffer { addr: buffer, size });
        Ok(())
    })
}

/// `MPI_Buffer_detach`: waits until every buffered send is out, then gives
/// the buffer back.
///
/// # Safety
/// `buffer_addr` is valid for a write of a pointer, `size` of an int (MPI
/// declares the first `void *`; it is a `void **`).
#[no_mangle]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call("MPI_Buffer_detach", None, |m| {
        let Mpi { coll, requests, .. } = m;
        coll.wait_for(|c| {
            requests.sweep(c);
            requests.bsend_in_use == 0
        })?;
        let b = m.bsend.take();
        let (addr, n) = b.map_or((std::ptr::null_mut(), 0), |b| (b.addr, b.size));
        // SAFETY: valid for writes (MPI contract).
        unsafe {
            cmem::put(buffer_addr.cast::<*mut c_void>(), addr);
            cmem::put(size, n as c_int);
        }
        Ok(())
    })
}

/// `MPI_Recv`.
///
/// # Safety
/// `buf` is writable for `count` elements of `datatype`; `status` ignored or
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Recv", Some(comm), |m| {
        // SAFETY: the C caller's MPI contract.
        let c = unsafe { m.recv(buf, count, datatype, source, tag, comm)? };
        // SAFETY: the C caller's MPI contract.
        unsafe { finish(c, status) }
    })
}

/// `MPI_Irecv`.
///
/// # Safety
/// `buf` is writable for `count` elements of `datatype` until the request
/// completes; `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    call("MPI_Irecv", Some(comm), |m| {
        // SAFETY: the C caller's MPI contract.
        let p = unsafe { m.start_recv(buf, count, datatype, source, tag, comm)? };
        let h = m.requests.add(p, comm);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(request, h) };
        Ok(())
    })
}

/// `MPI_Sendrecv`.
///
/// # Safety
/// As [`MPI_Send`] for the send half and [`MPI_Recv`] for the receive half.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Sendrecv", Some(comm), |m| {
        // SAFETY: the C caller's MPI contract.
        let r = unsafe { m.start_recv(recvbuf, recvcount, recvtype, source, recvtag, comm)? };
        let rh = m.requests.add(r, comm);
        // SAFETY: the C caller's MPI contract.
        let s = unsafe {
            m.start_send(
                Mode::Standard,
                sendbuf,
                sendcount,
                sendtype,
                dest,
                sendtag,
                comm,
            )?
        };
        m.complete(s)?;
        let i = m.requests.index(rh)?;
        let c = m.wait_slot(i)?;
        // SAFETY: the C caller's MPI contract.
        unsafe { finish(c, status) }
    })
}

/// `MPI_Sendrecv_replace`.
///
/// # Safety
/// `buf` is readable and writable for `count` elements of `datatype`;
/// `status` ignored or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Sendrecv_replace", Some(comm), |m| {
        // The message goes from a copy: the receive may write the buffer
        // while the send is still being read from it.
        let t = m.types.usable(datatype)?;
        let n = args::count(count, "count")?;
        // SAFETY: the C caller's MPI contract.
        let b = unsafe { args::buffer(buf, n, &t, "buffer")? };
        let mut packed = Vec::new();
        let copy = wire_of(&b, &t, n, &mut packed).to_vec();
        let bytes = c_int::try_from(copy.len())
            .map_err(|_| MpiError::new(MPI_ERR_COUNT, "the message is larger than 2 GiB"))?;
        // SAFETY: `copy` holds `bytes` bytes and outlives the send, which
        // completes below.
        let s = unsafe {
            m.start_send(
                Mode::Standard,
                copy.as_ptr().cast(),
                bytes,
                MPI_BYTE,
                dest,
                sendtag,
                comm,
            )?
        };
        // SAFETY: the C caller's MPI contract.
        let r = unsafe { m.start_recv(buf, count, datatype, source, recvtag, comm)? };
        let rh = m.requests.add(r, comm);
        m.complete(s)?;
        drop(copy);
        let i = m.requests.index(rh)?;
        let c = m.wait_slot(i)?;
        // SAFETY: the C caller's MPI contract.
        unsafe { finish(c, status) }
    })
}

/// `MPI_Probe`.
///
/// # Safety
/// `status` ignored or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Probe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Probe", Some(comm), |m| {
        let c = match m.probe_pattern(source, tag, comm)? {
            None => Completion::proc_null(),
            Some((pattern, c)) => {
                let mut found = None;
                m.coll.wait_for(|coll| {
                    found = coll.messenger().probe(&pattern);
                    found.is_some()
                })?;
                probed(found.expect("waited for"), &c)
            }
        };
        // SAFETY: the C caller's MPI contract.
        unsafe { finish(c, status) }
    })
}

/// `MPI_Iprobe`.
///
/// # Safety
/// `flag` valid for a write; `status` ignored or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    call("MPI_Iprobe", Some(comm), |m| {
        let found = match m.probe_pattern(source, tag, comm)? {
            None => Some(Completion::proc_null()),
            Some((pattern, c)) => {
                m.progress()?;
                m.coll.messenger().probe(&pattern).map(|e| probed(e, &c))
            }
        };
        // SAFETY: the C caller's MPI contract.
        unsafe {
            cmem::put(flag, c_int::from(found.is_some()));
            match found {
                Some(c) => finish(c, status),
                None => Ok(()),
            }
        }
    })
}

/// `MPI_Get_count`.
///
/// # Safety
/// `status` valid for a read, `count` for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_count(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    call("MPI_Get_count", None, |m| {
        let t = m.types.any(datatype)?;
        // SAFETY: valid for a read (MPI contract).
        let s = unsafe { cmem::get(status) }
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "status is NULL"))?;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(count, count_of(&t, status_bytes(&s))) };
        Ok(())
    })
}

/// `MPI_Get_elements`: the number of elements of the datatype's basic
/// type (a derived type of `n` ints counts `n` per element; the pair types
/// count one per pair).
///
/// # Safety
/// As [`MPI_Get_count`].
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_elements(
    status: *const MPI_Status,
    datatype: MPI_Datatype,
    count: *mut c_int,
) -> c_int {
    call("MPI_Get_elements", None, |m| {
        let t = m.types.any(datatype)?;
        let (basic, parts) = match t.basic {
            Some((b, _)) => (m.types.any(b)?, pair_parts(b)),
            None => (t, 1),
        };
        // SAFETY: valid for a read (MPI contract).
        let s = unsafe { cmem::get(status) }
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, "status is NULL"))?;
        let n = match count_of(&basic, status_bytes(&s)) {
            MPI_UNDEFINED => MPI_UNDEFINED,
            n => n.saturating_mul(parts),
        };
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(count, n) };
        Ok(())
    })
}

/// Basic elements in one element of predefined type `h`: two for the pair
/// types of `MPI_MINLOC`/`MPI_MAXLOC` (a value and an index, as MPICH
/// counts them in `MPI_Get_elements`), else one.
fn pair_parts(h: MPI_Datatype) -> c_int {
    match h {
        MPI_FLOAT_INT | MPI_DOUBLE_INT | MPI_LONG_INT | MPI_SHORT_INT | MPI_2INT
        | MPI_LONG_DOUBLE_INT => 2,
        _ => 1,
    }
}
