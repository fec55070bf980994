//! Collectives: each MPI collective as a [`Call`] of [`bcl::coll`] plus
//! where its output goes, run blocking or as a request.
//!
//! Data travels in the wire form of its datatype (see
//! [`crate::datatype`]). Blocking barrier, bcast, reduce and allreduce of
//! contiguous types run in place on the program's buffer
//! ([`Coll::in_place`](bcl::coll::Coll::in_place)), so they take the
//! shared-memory board and the node hierarchy with no copy for bcast and
//! one for the reductions (send buffer to receive buffer). The vector
//! collectives whose counts only the root knows (`MPI_Gatherv`,
//! `MPI_Scatterv`) first share the counts, because every rank of a tree
//! needs the block sizes of its subtree.

use crate::abi::*;
use crate::args;
use crate::cmem::{self, CBuf};
use crate::datatype::{Type, TypeInfo};
use crate::error::{MpiError, MpiResult};
use crate::p2p::wire_of;
use crate::request::{Completion, Pending, Unpack};
use crate::state::{call, Mpi};
use bcl::coll::alg::Collective;
use bcl::coll::{BuiltinOp, Call, Comm, Datatype as Elem, Op, UserOp};
use std::ffi::{c_int, c_void};

/// A collective ready to start: the call, and where its output goes.
struct Built {
    call: Call,
    out: Unpack,
}

/// A buffer argument: its address and what it holds.
#[derive(Clone, Copy)]
struct Buf {
    ptr: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
}

impl Buf {
    fn new(ptr: *const c_void, count: c_int, datatype: MPI_Datatype) -> Buf {
        Buf {
            ptr,
            count,
            datatype,
        }
    }

    fn in_place(&self) -> bool {
        args::in_place(self.ptr)
    }
}

/// The builtin reduction of handle `h`.
fn builtin(h: MPI_Op) -> Option<BuiltinOp> {
    Some(match h {
        MPI_MAX => BuiltinOp::Max,
        MPI_MIN => BuiltinOp::Min,
        MPI_SUM => BuiltinOp::Sum,
        MPI_PROD => BuiltinOp::Prod,
        MPI_LAND => BuiltinOp::LogicalAnd,
        MPI_BAND => BuiltinOp::BitAnd,
        MPI_LOR => BuiltinOp::LogicalOr,
        MPI_BOR => BuiltinOp::BitOr,
        MPI_LXOR => BuiltinOp::LogicalXor,
        MPI_BXOR => BuiltinOp::BitXor,
        MPI_MINLOC => BuiltinOp::MinLoc,
        MPI_MAXLOC => BuiltinOp::MaxLoc,
        _ => return None,
    })
}

impl Mpi {
    /// The reduction `op` on elements of `t` (handle `datatype`).
    fn reduction(&self, op: MPI_Op, datatype: MPI_Datatype, t: &TypeInfo) -> MpiResult<(Op, Elem)> {
        if let Some(b) = builtin(op) {
            let Some((_, Some(elem))) = t.basic else {
                return Err(MpiError::new(
                    MPI_ERR_OP,
                    format!(
                        "predefined reductions on {} are not supported by this library",
                        crate::datatype::name(datatype)
                    ),
                ));
            };
            let op = Op::Builtin(b);
            op.check(elem)
                .map_err(|e| MpiError::new(MPI_ERR_OP, e.to_string()))?;
            return Ok((op, elem));
        }
        let entry = match decode(op) {
            (0b10, KIND_OP, i) => self.ops.get(i).copied().flatten(),
            _ => None,
        }
        .ok_or_else(|| {
            MpiError::new(
                MPI_ERR_OP,
                match op {
                    MPI_OP_NULL => "MPI_OP_NULL is not a reduction".to_string(),
                    MPI_REPLACE | MPI_NO_OP => {
                        "MPI_REPLACE and MPI_NO_OP are for one-sided accumulates only".to_string()
                    }
                    _ => format!("{:#x} is not a reduction", op as u32),
                },
            )
        })?;
        if !t.contiguous() {
            return Err(MpiError::new(
                MPI_ERR_OP,
                "user reductions on non-contiguous datatypes are not supported by this library",
            ));
        }
        let elem = t.basic.and_then(|b| b.1).unwrap_or(Elem::U8);
        let wire = t.wire().max(1);
        let f = entry.f;
        let user = UserOp::new(
            entry.commutative,
            move |_, left: &[u8], right: &mut [u8]| {
                let mut len = (right.len() / wire) as c_int;
                let mut dt = datatype;
                // SAFETY: the program's function computes `inout = in op inout`
                // over `len` elements of `datatype` (MPI_Op_create's
                // contract); both buffers hold `len` such elements in their
                // memory form (the type is contiguous). It does not write its
                // first argument.
                unsafe {
                    f(
                        left.as_ptr() as *mut c_void,
                        right.as_mut_ptr().cast(),
                        &mut len,
                        &mut dt,
                    )
                }
            },
        );
        let user = if wire == elem.size() {
            user
        } else {
            user.with_element(wire)
        };
        Ok((Op::User(user), elem))
    }

    /// The wire form of `b` (a copy), with its type.
    ///
    /// # Safety
    /// `b` holds its count of elements (MPI contract).
    unsafe fn input(&self, b: Buf, what: &str) -> MpiResult<(Vec<u8>, Type, usize)> {
        let t = self.types.usable(b.datatype)?;
        let n = args::count(b.count, what)?;
        // SAFETY: this function's contract.
        let buf = unsafe { args::buffer(b.ptr, n, &t, what)? };
        let mut packed = Vec::new();
        let data = wire_of(&buf, &t, n, &mut packed).to_vec();
        Ok((data, t, n))
    }

    /// The receive buffer `b` (written when the call completes).
    ///
    /// # Safety
    /// `b` is writable for its count of elements until then (MPI
    /// contract).
    unsafe fn output(&self, b: Buf, what: &str) -> MpiResult<(CBuf, Type, usize)> {
        let t = self.types.usable(b.datatype)?;
        let n = args::count(b.count, what)?;
        // SAFETY: this function's contract.
        let buf = unsafe { args::buffer(b.ptr, n, &t, what)? };
        Ok((buf, t, n))
    }

    /// Starts `built` on `comm`, as a request or to completion.
    fn run(&mut self, comm: &Comm, built: Built, blocking: bool) -> MpiResult<Pending> {
        let req = self.coll.start(comm, built.call)?;
        let p = Pending::Coll {
            req,
            out: built.out,
        };
        if blocking {
            Ok(Pending::Done(self.complete(p)?))
        } else {
            Ok(p)
        }
    }

    /// The communicator of handle `h`, cloned.
    fn comm_of(&self, h: MPI_Comm) -> MpiResult<Comm> {
        Ok(self.comm(h)?.comm.clone())
    }
}

/// Runs the body of a collective: blocking, or registering its request.
///
/// # Safety
/// `request` is null (blocking) or valid for a write.
unsafe fn collective(
    name: &str,
    comm: MPI_Comm,
    request: *mut MPI_Request,
    f: impl FnOnce(&mut Mpi, &Comm, bool) -> MpiResult<Pending>,
) -> c_int {
    call(name, Some(comm), |m| {
        let c = m.comm_of(comm)?;
        let blocking = request.is_null();
        let p = f(m, &c, blocking)?;
        if blocking {
            return match m.complete(p)?.error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        let h = m.requests.add(p, comm);
        // SAFETY: valid for a write (this function's contract).
        unsafe { cmem::put(request, h) };
        Ok(())
    })
}

fn done() -> MpiResult<Pending> {
    Ok(Pending::Done(Completion::empty()))
}

fn barrier(m: &mut Mpi, c: &Comm, blocking: bool) -> MpiResult<Pending> {
    if blocking {
        m.coll.in_place(c, Collective::Barrier, 0, None, &mut [])?;
        return done();
    }
    let call = Call::new(Collective::Barrier, Vec::new());
    m.run(
        c,
        Built {
            call,
            out: Unpack::none(),
        },
        false,
    )
}

/// # Safety
/// MPI contract for `MPI_Bcast`'s buffer.
unsafe fn bcast(m: &mut Mpi, c: &Comm, b: Buf, root: c_int, blocking: bool) -> MpiResult<Pending> {
    let root = args::rank(c, root, "root", false)?.unwrap_or(0);
    // SAFETY: this function's contract.
    let (mut buf, t, n) = unsafe { m.output(b, "buffer")? };
    let bytes = n * t.wire();
    if blocking {
        if t.contiguous() {
            m.coll.in_place(
                c,
                Collective::Bcast,
                root,
                None,
                &mut buf.bytes_mut()[..bytes],
            )?;
        } else {
            let mut data = Vec::new();
            t.pack(buf.bytes(), n, &mut data);
            m.coll
                .in_place(c, Collective::Bcast, root, None, &mut data)?;
            t.unpack(&data, buf.bytes_mut());
        }
        return done();
    }
    let me = c.rank();
    let input = if me == root {
        let mut v = Vec::new();
        wire_of(&buf, &t, n, &mut v).to_vec()
    } else {
        Vec::new()
    };
    let mut call = Call::new(Collective::Bcast, input).root(root);
    call.len = bytes;
    let out = if me == root {
        Unpack::none()
    } else {
        Unpack::whole(buf, t, n)
    };
    m.run(c, Built { call, out }, false)
}

/// Reduce (`root` given) or allreduce (`root` none).
///
/// # Safety
/// MPI contract for the buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce(
    m: &mut Mpi,
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: Option<c_int>,
    blocking: bool,
) -> MpiResult<Pending> {
    let (collective, root) = match root {
        Some(r) => (
            Collective::Reduce,
            args::rank(c, r, "root", false)?.unwrap_or(0),
        ),
        None => (Collective::Allreduce, 0),
    };
    let receives = collective == Collective::Allreduce || c.rank() == root;
    let t = m.types.usable(datatype)?;
    let red = m.reduction(op, datatype, &t)?;
    let n = args::count(count, "count")?;
    let in_place = args::in_place(sendbuf) || std::ptr::eq(sendbuf, recvbuf);
    if in_place && !receives {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE is for the root's send buffer only",
        ));
    }
    let mut out = if receives {
        // SAFETY: this function's contract.
        unsafe { args::buffer(recvbuf, n, &t, "recvbuf")? }
    } else {
        CBuf::EMPTY
    };
    let send = if in_place {
        out
    } else {
        // SAFETY: this function's contract.
        unsafe { args::buffer(sendbuf, n, &t, "sendbuf")? }
    };
    let bytes = n * t.wire();
    if blocking && t.contiguous() {
        if receives {
            if !in_place {
                out.bytes_mut()[..bytes].copy_from_slice(&send.bytes()[..bytes]);
            }
            m.coll.in_place(
                c,
                collective,
                root,
                Some(&red),
                &mut out.bytes_mut()[..bytes],
            )?;
        } else {
            let mut data = send.bytes()[..bytes].to_vec();
            m.coll
                .in_place(c, collective, root, Some(&red), &mut data)?;
        }
        return done();
    }
    let mut v = Vec::new();
    let input = wire_of(&send, &t, n, &mut v).to_vec();
    let call = Call::new(collective, input)
        .root(root)
        .reducing(red.0, red.1);
    let out = if receives {
        Unpack::whole(out, t, n)
    } else {
        Unpack::none()
    };
    m.run(c, Built { call, out }, blocking)
}

/// The blocks of a collective's buffer, (displacement, count) in elements
/// per rank: from its count and displacement arrays (the v-collectives),
/// or `count` elements each, back to back.
///
/// # Safety
/// The arrays, if given, are valid for `p` ints each.
unsafe fn blocks(
    p: usize,
    count: c_int,
    arrays: Option<(*const c_int, *const c_int)>,
    what: &str,
) -> MpiResult<Vec<(usize, usize)>> {
    let Some((counts, displs)) = arrays else {
        let n = args::count(count, what)?;
        return Ok((0..p).map(|r| (r * n, n)).collect());
    };
    // SAFETY: valid for `p` ints each (this function's contract).
    let (cs, ds) = unsafe { (cmem::ints(counts, p), cmem::ints(displs, p)) };
    if cs.len() < p || ds.len() < p {
        return Err(MpiError::new(
            MPI_ERR_ARG,
            format!("the {what}s or their displacements are NULL"),
        ));
    }
    cs.iter()
        .zip(&ds)
        .map(|(&n, &d)| Ok((args::count(d, "displacement")?, args::count(n, what)?)))
        .collect()
}

/// Gather (`allgather` false) or allgather, plain (`counts` none) or v.
///
/// # Safety
/// MPI contract for the buffers and arrays.
#[allow(clippy::too_many_arguments)]
unsafe fn gather(
    m: &mut Mpi,
    c: &Comm,
    send: Buf,
    recv: Buf,
    counts_displs: Option<(*const c_int, *const c_int)>,
    root: Option<c_int>,
    blocking: bool,
) -> MpiResult<Pending> {
    let p = c.size();
    let me = c.rank();
    let root = match root {
        Some(r) => Some(args::rank(c, r, "root", false)?.unwrap_or(0)),
        None => None,
    };
    let receives = root.is_none_or(|r| r == me);
    // The receive side (root or everyone): blocks (displacement, count).
    let (recv_buf, rt, blocks) = if receives {
        let rt = m.types.usable(recv.datatype)?;
        // SAFETY: arrays of the communicator's size (MPI contract).
        let blocks = unsafe { blocks(p, recv.count, counts_displs, "recvcount")? };
        let span = blocks.iter().map(|&(d, n)| d + n).max().unwrap_or(0);
        // SAFETY: the receive buffer spans every block (MPI contract).
        let buf = unsafe { args::buffer(recv.ptr, span, &rt, "recvbuf")? };
        (buf, Some(rt), blocks)
    } else {
        (CBuf::EMPTY, None, Vec::new())
    };
    // The input: the send buffer, or in place this rank's block.
    let input = if send.in_place() {
        let (Some(rt), true) = (&rt, receives) else {
            return Err(MpiError::new(
                MPI_ERR_BUFFER,
                "MPI_IN_PLACE is for the receiving rank's send buffer only",
            ));
        };
        let (d, n) = blocks[me];
        let mut v = Vec::new();
        rt.pack(&recv_buf.bytes()[d * rt.extent..], n, &mut v);
        v
    } else {
        // SAFETY: this function's contract.
        unsafe { m.input(send, "sendcount")?.0 }
    };
    // Every rank's block length in bytes.
    let counts: Vec<usize> = match (&rt, counts_displs.is_some() && root.is_some()) {
        // Gatherv: only the root knows the lengths; everyone learns them.
        (_, true) => m
            .coll
            .allgather(c, &[input.len() as u64])?
            .iter()
            .map(|&n| n as usize)
            .collect(),
        (Some(rt), false) => blocks.iter().map(|b| b.1 * rt.wire()).collect(),
        // Gather at a non-root: every block is as long as this one.
        (None, false) => vec![input.len(); p],
    };
    let collective = if root.is_some() {
        Collective::Gather
    } else {
        Collective::Allgather
    };
    let call = Call::new(collective, input)
        .root(root.unwrap_or(0))
        .counts(counts);
    let out = match rt {
        Some(t) => Unpack {
            buf: recv_buf,
            t,
            blocks,
        },
        None => Unpack::none(),
    };
    m.run(c, Built { call, out }, blocking)
}

/// Scatter, plain (`counts` none) or v.
///
/// # Safety
/// MPI contract for the buffers and arrays.
unsafe fn scatter(
    m: &mut Mpi,
    c: &Comm,
    send: Buf,
    counts_displs: Option<(*const c_int, *const c_int)>,
    recv: Buf,
    root: c_int,
    blocking: bool,
) -> MpiResult<Pending> {
    let p = c.size();
    let me = c.rank();
    let root = args::rank(c, root, "root", false)?.unwrap_or(0);
    let recv_in_place = recv.in_place();
    if recv_in_place && me != root {
        return Err(MpiError::new(
            MPI_ERR_BUFFER,
            "MPI_IN_PLACE is for the root's receive buffer only",
        ));
    }
    // The root packs every rank's block in rank order.
    let (input, mut counts) = if me == root {
        let st = m.types.usable(send.datatype)?;
        // SAFETY: arrays of the communicator's size (MPI contract).
        let blocks = unsafe { blocks(p, send.count, counts_displs, "sendcount")? };
        let span = blocks.iter().map(|&(d, n)| d + n).max().unwrap_or(0);
        // SAFETY: the send buffer spans every block (MPI contract).
        let buf = unsafe { args::buffer(send.ptr, span, &st, "sendbuf")? };
        let mut input = Vec::new();
        let mut part = Vec::new();
        let mut counts = Vec::with_capacity(p);
        for &(d, n) in &blocks {
            st.pack(&buf.bytes()[d * st.extent..], n, &mut part);
            input.extend_from_slice(&part);
            counts.push(n * st.wire());
        }
        (input, counts)
    } else {
        (Vec::new(), Vec::new())
    };
    let out = if recv_in_place {
        Unpack::none()
    } else {
        // SAFETY: this function's contract.
        let (buf, t, n) = unsafe { m.output(recv, "recvcount")? };
        if counts_displs.is_none() && me != root {
            counts = vec![n * t.wire(); p];
        }
        Unpack::whole(buf, t, n)
    };
    if counts_displs.is_some() || counts.is_empty() {
        // Scatterv (or the root receiving in place): the root tells
        // everyone every block's length.
        let mut all: Vec<u64> = if me == root {
            counts.iter().map(|&n| n as u64).collect()
        } else {
            vec![0; p]
        };
        m.coll.bcast(c, root, &mut all)?;
        counts = all.iter().map(|&n| n as usize).collect();
    }
    let call = Call::new(Collective::Scatter, input)
        .root(root)
        .counts(counts);
    m.run(c, Built { call, out }, blocking)
}

/// Alltoall, plain (`v` none) or v.
///
/// # Safety
/// MPI contract for the buffers and arrays.
#[allow(clippy::type_complexity)]
unsafe fn alltoall(
    m: &mut Mpi,
    c: &Comm,
    send: Buf,
    recv: Buf,
    v: Option<((*const c_int, *const c_int), (*const c_int, *const c_int))>,
    blocking: bool,
) -> MpiResult<Pending> {
    let p = c.size();
    let rt = m.types.usable(recv.datatype)?;
    // SAFETY: arrays of the communicator's size (MPI contract).
    let rblocks = unsafe { blocks(p, recv.count, v.map(|x| x.1), "recvcount")? };
    let rspan = rblocks.iter().map(|&(d, n)| d + n).max().unwrap_or(0);
    // SAFETY: the receive buffer spans every block (MPI contract).
    let rbuf = unsafe { args::buffer(recv.ptr, rspan, &rt, "recvbuf")? };
    let (st, sblocks, sbuf) = if send.in_place() {
        (rt.clone(), rblocks.clone(), rbuf)
    } else {
        let st = m.types.usable(send.datatype)?;
        // SAFETY: arrays of the communicator's size (MPI contract).
        let sblocks = unsafe { blocks(p, send.count, v.map(|x| x.0), "sendcount")? };
        let sspan = sblocks.iter().map(|&(d, n)| d + n).max().unwrap_or(0);
        // SAFETY: the send buffer spans every block (MPI contract).
        let sbuf = unsafe { args::buffer(send.ptr, sspan, &st, "sendbuf")? };
        (st, sblocks, sbuf)
    };
    let mut input = Vec::new();
    let mut part = Vec::new();
    for &(d, n) in &sblocks {
        st.pack(&sbuf.bytes()[d * st.extent..], n, &mut part);
        input.extend_from_slice(&part);
    }
    let mut call = Call::new(Collective::Alltoall, input);
    call.send_counts = sblocks.iter().map(|b| b.1 * st.wire()).collect();
    call.recv_counts = rblocks.iter().map(|b| b.1 * rt.wire()).collect();
    call.uniform = v.is_none();
    let out = Unpack {
        buf: rbuf,
        t: rt,
        blocks: rblocks,
    };
    m.run(c, Built { call, out }, blocking)
}

/// Reduce-scatter: rank r gets `counts[r]` elements of the reduction.
///
/// # Safety
/// MPI contract for the buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter(
    m: &mut Mpi,
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<usize>,
    datatype: MPI_Datatype,
    op: MPI_Op,
    blocking: bool,
) -> MpiResult<Pending> {
    let me = c.rank();
    let t = m.types.usable(datatype)?;
    let red = m.reduction(op, datatype, &t)?;
    let total: usize = counts.iter().sum();
    let in_place = args::in_place(sendbuf);
    // In place, the whole input is in the receive buffer.
    let rn = if in_place { total } else { counts[me] };
    // SAFETY: this function's contract.
    let rbuf = unsafe { args::buffer(recvbuf, rn, &t, "recvbuf")? };
    let send = if in_place {
        rbuf
    } else {
        // SAFETY: this function's contract.
        unsafe { args::buffer(sendbuf, total, &t, "sendbuf")? }
    };
    let mut v = Vec::new();
    let input = wire_of(&send, &t, total, &mut v).to_vec();
    let call = Call::new(Collective::ReduceScatter, input)
        .counts(counts.iter().map(|n| n * t.wire()).collect())
        .reducing(red.0, red.1);
    let out = Unpack::whole(rbuf, t, counts[me]);
    m.run(c, Built { call, out }, blocking)
}

/// Scan (`exclusive` false) or exscan.
///
/// # Safety
/// MPI contract for the buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn scan(
    m: &mut Mpi,
    c: &Comm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    exclusive: bool,
    blocking: bool,
) -> MpiResult<Pending> {
    let t = m.types.usable(datatype)?;
    let red = m.reduction(op, datatype, &t)?;
    let n = args::count(count, "count")?;
    // SAFETY: this function's contract.
    let rbuf = unsafe { args::buffer(recvbuf, n, &t, "recvbuf")? };
    let send = if args::in_place(sendbuf) {
        rbuf
    } else {
        // SAFETY: this function's contract.
        unsafe { args::buffer(sendbuf, n, &t, "sendbuf")? }
    };
    let mut v = Vec::new();
    let input = wire_of(&send, &t, n, &mut v).to_vec();
    let collective = if exclusive {
        Collective::Exscan
    } else {
        Collective::Scan
    };
    let call = Call::new(collective, input).reducing(red.0, red.1);
    // Exscan leaves rank 0's receive buffer alone (MPI: undefined there).
    let out = if exclusive && c.rank() == 0 {
        Unpack::none()
    } else {
        Unpack::whole(rbuf, t, n)
    };
    m.run(c, Built { call, out }, blocking)
}

// ---- The C entry points ----------------------------------------------

/// `MPI_Barrier`.
#[no_mangle]
pub extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
    // SAFETY: no request (blocking).
    unsafe { collective("MPI_Barrier", comm, std::ptr::null_mut(), barrier) }
}

/// `MPI_Ibarrier`.
///
/// # Safety
/// `request` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Ibarrier(comm: MPI_Comm, request: *mut MPI_Request) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { collective("MPI_Ibarrier", comm, request, barrier) }
}

macro_rules! blocking_and_not {
    ($blocking:ident, $nonblocking:ident, ($($arg:ident: $ty:ty),*), $comm:ident, |$m:ident, $c:ident, $b:ident| $body:expr) => {
        #[doc = concat!("`", stringify!($blocking), "`.")]
        ///
        /// # Safety
        /// The C caller's MPI contract for the buffers and arrays.
        #[no_mangle]
        pub unsafe extern "C" fn $blocking($($arg: $ty),*) -> c_int {
            let body = |$m: &mut Mpi, $c: &Comm, $b: bool| -> MpiResult<Pending> {
                // SAFETY: the buffers and arrays are as MPI requires (this
                // function's contract).
                unsafe { $body }
            };
            // SAFETY: no request (blocking).
            unsafe { collective(stringify!($blocking), $comm, std::ptr::null_mut(), body) }
        }

        #[doc = concat!("`", stringify!($nonblocking), "`.")]
        ///
        /// # Safety
        /// The C caller's MPI contract for the buffers and arrays, which
        /// stay valid until the request completes; `request` valid for a
        /// write.
        #[no_mangle]
        pub unsafe extern "C" fn $nonblocking($($arg: $ty,)* request: *mut MPI_Request) -> c_int {
            if request.is_null() {
                return call(stringify!($nonblocking), Some($comm), |_| {
                    Err(MpiError::new(MPI_ERR_ARG, "request is NULL"))
                });
            }
            let body = |$m: &mut Mpi, $c: &Comm, $b: bool| -> MpiResult<Pending> {
                // SAFETY: the buffers and arrays are as MPI requires until
                // the request completes (this function's contract).
                unsafe { $body }
            };
            // SAFETY: `request` is valid for a write (this function's
            // contract).
            unsafe { collective(stringify!($nonblocking), $comm, request, body) }
        }
    };
}

blocking_and_not!(
    MPI_Bcast,
    MPI_Ibcast,
    (buffer: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, comm: MPI_Comm),
    comm,
    |m, c, blocking| bcast(m, c, Buf::new(buffer, count, datatype), root, blocking)
);

blocking_and_not!(
    MPI_Reduce,
    MPI_Ireduce,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        root: c_int,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| reduce(m, c, sendbuf, recvbuf, count, datatype, op, Some(root), blocking)
);

blocking_and_not!(
    MPI_Allreduce,
    MPI_Iallreduce,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| reduce(m, c, sendbuf, recvbuf, count, datatype, op, None, blocking)
);

blocking_and_not!(
    MPI_Gather,
    MPI_Igather,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: MPI_Datatype,
        root: c_int,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| gather(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        Buf::new(recvbuf, recvcount, recvtype),
        None,
        Some(root),
        blocking
    )
);

blocking_and_not!(
    MPI_Gatherv,
    MPI_Igatherv,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: MPI_Datatype,
        root: c_int,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| gather(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        Buf::new(recvbuf, 0, recvtype),
        Some((recvcounts, displs)),
        Some(root),
        blocking
    )
);

blocking_and_not!(
    MPI_Allgather,
    MPI_Iallgather,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: MPI_Datatype,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| gather(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        Buf::new(recvbuf, recvcount, recvtype),
        None,
        None,
        blocking
    )
);

blocking_and_not!(
    MPI_Allgatherv,
    MPI_Iallgatherv,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        displs: *const c_int,
        recvtype: MPI_Datatype,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| gather(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        Buf::new(recvbuf, 0, recvtype),
        Some((recvcounts, displs)),
        None,
        blocking
    )
);

blocking_and_not!(
    MPI_Scatter,
    MPI_Iscatter,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: MPI_Datatype,
        root: c_int,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| scatter(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        None,
        Buf::new(recvbuf, recvcount, recvtype),
        root,
        blocking
    )
);

blocking_and_not!(
    MPI_Scatterv,
    MPI_Iscatterv,
    (
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        displs: *const c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: MPI_Datatype,
        root: c_int,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| scatter(
        m,
        c,
        Buf::new(sendbuf, 0, sendtype),
        Some((sendcounts, displs)),
        Buf::new(recvbuf, recvcount, recvtype),
        root,
        blocking
    )
);

blocking_and_not!(
    MPI_Alltoall,
    MPI_Ialltoall,
    (
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: MPI_Datatype,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| alltoall(
        m,
        c,
        Buf::new(sendbuf, sendcount, sendtype),
        Buf::new(recvbuf, recvcount, recvtype),
        None,
        blocking
    )
);

blocking_and_not!(
    MPI_Alltoallv,
    MPI_Ialltoallv,
    (
        sendbuf: *const c_void,
        sendcounts: *const c_int,
        sdispls: *const c_int,
        sendtype: MPI_Datatype,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        rdispls: *const c_int,
        recvtype: MPI_Datatype,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| alltoall(
        m,
        c,
        Buf::new(sendbuf, 0, sendtype),
        Buf::new(recvbuf, 0, recvtype),
        Some(((sendcounts, sdispls), (recvcounts, rdispls))),
        blocking
    )
);

blocking_and_not!(
    MPI_Reduce_scatter,
    MPI_Ireduce_scatter,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| {
        let p = c.size();
        // An array of the communicator's size (MPI contract).
        let counts = cmem::ints(recvcounts, p);
        if counts.len() < p {
            return Err(MpiError::new(MPI_ERR_ARG, "recvcounts is NULL"));
        }
        let counts = counts
            .iter()
            .map(|&n| args::count(n, "recvcount"))
            .collect::<MpiResult<Vec<_>>>()?;
        reduce_scatter(m, c, sendbuf, recvbuf, counts, datatype, op, blocking)
    }
);

blocking_and_not!(
    MPI_Reduce_scatter_block,
    MPI_Ireduce_scatter_block,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| {
        let n = args::count(recvcount, "recvcount")?;
        let counts = vec![n; c.size()];
        reduce_scatter(m, c, sendbuf, recvbuf, counts, datatype, op, blocking)
    }
);

blocking_and_not!(
    MPI_Scan,
    MPI_Iscan,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| scan(m, c, sendbuf, recvbuf, count, datatype, op, false, blocking)
);

blocking_and_not!(
    MPI_Exscan,
    MPI_Iexscan,
    (
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
        comm: MPI_Comm
    ),
    comm,
    |m, c, blocking| scan(m, c, sendbuf, recvbuf, count, datatype, op, true, blocking)
);
