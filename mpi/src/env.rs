//! The environment: init and finalize, time, names, versions, error
//! handlers and strings, communicators, datatypes and reductions.

use crate::abi::*;
use crate::args;
use crate::cmem;
use crate::error::{class_of, class_text, MpiError};
use crate::state::{call, fatal, with_phase, Mpi, Phase, UserOpEntry, FINALIZED, INITIALIZED};
use bcl::cluster::join::{join, JoinOptions};
use bcl::coll::Coll;
use bcl::ProgressMode;
use std::ffi::{c_char, c_double, c_int};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How a process waits for messages, from `BCL_MPI_PROGRESS`: `busy`
/// (spin: lowest latency while every rank has a core of its own),
/// `yield` (spin, giving the core away between rounds) or `blocking`
/// (sleep in the kernel until something arrives). By default: `busy`, or
/// `yield` when this node runs more ranks of the job than it has cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    Busy,
    Yield,
    Blocking,
}

fn progress_from_env() -> Result<Option<Progress>, String> {
    match std::env::var("BCL_MPI_PROGRESS").as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("busy") => Ok(Some(Progress::Busy)),
        Ok("yield") => Ok(Some(Progress::Yield)),
        Ok("blocking") => Ok(Some(Progress::Blocking)),
        Ok(other) => Err(format!(
            "BCL_MPI_PROGRESS={other:?}: expected busy, yield or blocking"
        )),
    }
}

/// Joins the job and sets up the state.
fn init(level: c_int) -> Result<Mpi, MpiError> {
    let other_err = |m: String| MpiError::new(MPI_ERR_OTHER, m);
    let other = other_err;
    let chosen = progress_from_env().map_err(other)?;
    let mode = match chosen {
        Some(Progress::Blocking) => ProgressMode::Blocking,
        _ => ProgressMode::BusyPoll,
    };
    let mut joined = join(JoinOptions {
        mode,
        timeout: Duration::from_secs(60),
        // A rank computing without calling MPI answers no liveness ping, and
        // MPI programs compute for minutes while others wait on them: peers
        // are watched only when `BCL_LIVENESS` asks for it.
        configure: Box::new(|c, _| {
            if std::env::var_os("BCL_LIVENESS").is_none() {
                c.liveness.enabled = false;
            }
        }),
        ..JoinOptions::default()
    })
    .map_err(|e| other(format!("joining the job: {e}")))?;
    // The launcher's connection stays open until MPI_Finalize: under a
    // PMI-2 launcher, closing it is how a process says it finalized.
    let session = joined.session.take();
    let mut coll = Coll::from_joined(joined).map_err(|e| other(e.to_string()))?;
    let world = coll.world();
    let here = world.nodes()[world.rank()];
    let local = world.nodes().iter().filter(|&&n| n == here).count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let progress = chosen.unwrap_or(if local > cores {
        Progress::Yield
    } else {
        Progress::Busy
    });
    coll.set_yield_when_idle(progress == Progress::Yield);
    // Above the eager limit (where a rendezvous starts anyway), messages to
    // ranks of this node go as regions the receiver reads in one copy.
    let region_min = match std::env::var("BCL_MPI_SINGLE_COPY").as_deref() {
        Err(_) | Ok("") | Ok("on") => coll.messenger().eager_max() + 1,
        Ok("off") => usize::MAX,
        Ok(other) => other.parse().map_err(|_| {
            other_err(format!(
                "BCL_MPI_SINGLE_COPY={other:?}: expected on, off or a size in bytes"
            ))
        })?,
    };
    let mut m = Mpi::new(coll, level.min(MPI_THREAD_FUNNELED));
    m.region_min = region_min;
    m.session = session;
    Ok(m)
}

/// Init with thread level `level`.
fn init_at(name: &str, level: c_int) -> c_int {
    epoch();
    with_phase(|phase| match phase {
        Phase::Before => match init(level) {
            Ok(m) => {
                *phase = Phase::Running(Box::new(m));
                INITIALIZED.store(true, Ordering::Relaxed);
                MPI_SUCCESS
            }
            Err(e) => fatal(
                None,
                &MpiError::new(e.class, format!("{name}: {}", e.message)),
            ),
        },
        Phase::Running(_) => fatal(
            None,
            &MpiError::new(MPI_ERR_OTHER, format!("{name}: MPI is already initialized")),
        ),
        Phase::After => fatal(
            None,
            &MpiError::new(
                MPI_ERR_OTHER,
                format!("{name}: MPI was finalized and cannot be initialized again"),
            ),
        ),
    })
}

/// `MPI_Init`: joins the job started by `bcl-run`, `mpiexec` or `srun`.
///
/// # Safety
/// The arguments are not used (they may be null).
#[no_mangle]
pub unsafe extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    init_at("MPI_Init", MPI_THREAD_SINGLE)
}

/// `MPI_Init_thread`: as `MPI_Init`; grants at most
/// `MPI_THREAD_FUNNELED`.
///
/// # Safety
/// `provided` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    let r = init_at("MPI_Init_thread", required);
    // SAFETY: valid for a write (MPI contract).
    unsafe { cmem::put(provided, required.clamp(0, MPI_THREAD_FUNNELED)) };
    r
}

/// `MPI_Finalize`: a barrier over the world, so no process leaves while
/// another still needs its acknowledgements, then the endpoint is flushed
/// and closed.
#[no_mangle]
pub extern "C" fn MPI_Finalize() -> c_int {
    let r = call("MPI_Finalize", None, |m| {
        let world = m.coll.world().clone();
        match m.coll.barrier(&world) {
            Ok(()) => {}
            // A failed process cannot take part: the survivors finish
            // without it (as the fault-tolerance proposal's MPI_Finalize
            // does), their last messages still delivered by the flush.
            Err(bcl::coll::CollError::PeerFailed { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        m.coll.flush(Duration::from_secs(5))?;
        drop(m.session.take());
        Ok(())
    });
    if r == MPI_SUCCESS {
        with_phase(|p| *p = Phase::After);
        FINALIZED.store(true, Ordering::Relaxed);
    }
    r
}

/// `MPI_Initialized`.
///
/// # Safety
/// `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    // SAFETY: valid for a write (MPI contract).
    unsafe { cmem::put(flag, c_int::from(INITIALIZED.load(Ordering::Relaxed))) };
    MPI_SUCCESS
}

/// `MPI_Finalized`.
///
/// # Safety
/// `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    // SAFETY: valid for a write (MPI contract).
    unsafe { cmem::put(flag, c_int::from(FINALIZED.load(Ordering::Relaxed))) };
    MPI_SUCCESS
}

/// `MPI_Abort`: ends this process with `errorcode`; the launcher (bcl-run,
/// mpiexec, srun) then stops the job's other processes.
#[no_mangle]
pub extern "C" fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) -> c_int {
    let rank = with_phase(|p| match p {
        Phase::Running(m) => m.comm(comm).map(|c| c.comm.rank()).ok(),
        _ => None,
    });
    let who = rank.map_or(String::new(), |r| format!(" (rank {r})"));
    eprintln!("bclmpi{who}: MPI_Abort with error code {errorcode}");
    std::process::exit(if errorcode == 0 { 1 } else { errorcode & 0xff })
}

/// The start of `MPI_Wtime`.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `MPI_Wtime`: seconds since `MPI_Init` (or the first call), from the
/// monotonic clock; not synchronized across processes.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Wtick`: the resolution of `MPI_Wtime` (the monotonic clock's
/// nanosecond).
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    1e-9
}

/// `MPI_Get_processor_name`: the host name.
///
/// # Safety
/// `name` valid for `MPI_MAX_PROCESSOR_NAME` bytes, `resultlen` for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    // SAFETY: the C caller's MPI contract.
    unsafe { cmem::put_string(host.trim(), name, MPI_MAX_PROCESSOR_NAME, resultlen) };
    MPI_SUCCESS
}

/// `MPI_Get_version`: 3.1.
///
/// # Safety
/// Both valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    // SAFETY: valid for writes (MPI contract).
    unsafe {
        cmem::put(version, 3);
        cmem::put(subversion, 1);
    }
    MPI_SUCCESS
}

/// `MPI_Get_library_version`.
///
/// # Safety
/// `version` valid for `MPI_MAX_LIBRARY_VERSION_STRING` bytes, `resultlen`
/// for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Get_library_version(
    version: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let v = format!(
        "BCL MPI {} (libbclmpi: MPI 3.1 subset over BCL, MPICH ABI)",
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: the C caller's MPI contract.
    unsafe { cmem::put_string(&v, version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen) };
    MPI_SUCCESS
}

/// `MPI_Error_string`: the class's description and, for a recent error,
/// its message (which names the call and the argument).
///
/// # Safety
/// `string` valid for `MPI_MAX_ERROR_STRING` bytes, `resultlen` for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Error_string(
    errorcode: c_int,
    string: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    let s = with_phase(|p| match p {
        Phase::Running(m) => m.errors.string(errorcode),
        _ => class_text(class_of(errorcode)).to_string(),
    });
    // SAFETY: the C caller's MPI contract.
    unsafe { cmem::put_string(&s, string, MPI_MAX_ERROR_STRING, resultlen) };
    MPI_SUCCESS
}

/// `MPI_Error_class`.
///
/// # Safety
/// `errorclass` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    // SAFETY: valid for a write (MPI contract).
    unsafe { cmem::put(errorclass, class_of(errorcode)) };
    MPI_SUCCESS
}

/// `MPI_Query_thread`.
///
/// # Safety
/// `provided` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    call("MPI_Query_thread", None, |m| {
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(provided, m.thread_level) };
        Ok(())
    })
}

/// `MPI_Is_thread_main`: whether this is the thread that called
/// `MPI_Init` (the only one whose calls work here).
///
/// # Safety
/// `flag` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    let main = with_phase(|p| !matches!(p, Phase::Before));
    // SAFETY: valid for a write (MPI contract).
    unsafe { cmem::put(flag, c_int::from(main)) };
    MPI_SUCCESS
}

/// `MPI_Comm_set_errhandler`: `MPI_ERRORS_ARE_FATAL` or
/// `MPI_ERRORS_RETURN`.
#[no_mangle]
pub extern "C" fn MPI_Comm_set_errhandler(comm: MPI_Comm, errhandler: MPI_Errhandler) -> c_int {
    call("MPI_Comm_set_errhandler", Some(comm), |m| {
        if errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!(
                    "error handler {:#x} is neither MPI_ERRORS_ARE_FATAL nor MPI_ERRORS_RETURN",
                    errhandler as u32
                ),
            ));
        }
        m.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

/// `MPI_Comm_get_errhandler`.
///
/// # Safety
/// `errhandler` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_get_errhandler(
    comm: MPI_Comm,
    errhandler: *mut MPI_Errhandler,
) -> c_int {
    call("MPI_Comm_get_errhandler", Some(comm), |m| {
        let h = m.comm(comm)?.errhandler;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(errhandler, h) };
        Ok(())
    })
}

/// `MPI_Comm_size`.
///
/// # Safety
/// `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", Some(comm), |m| {
        let n = m.comm(comm)?.comm.size();
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(size, n as c_int) };
        Ok(())
    })
}

/// `MPI_Comm_rank`.
///
/// # Safety
/// `rank` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", Some(comm), |m| {
        let r = m.comm(comm)?.comm.rank();
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(rank, r as c_int) };
        Ok(())
    })
}

/// `MPI_Comm_dup`: same members, own message space, the parent's error
/// handler.
///
/// # Safety
/// `newcomm` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    call("MPI_Comm_dup", Some(comm), |m| {
        let parent = m.comm(comm)?;
        let (c, eh) = (parent.comm.clone(), parent.errhandler);
        let new = m.coll.dup(&c)?;
        let h = m.add_comm(new, eh);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(newcomm, h) };
        Ok(())
    })
}

/// `MPIX_Comm_shrink` (declared in `mpi-ext.h`): the survivors of `comm`
/// agree on who failed and get a communicator of the others (see
/// `bcl::coll::Coll::shrink`), with `comm`'s error handler.
///
/// # Safety
/// `newcomm` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPIX_Comm_shrink(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    call("MPIX_Comm_shrink", Some(comm), |m| {
        let parent = m.comm(comm)?;
        let (c, eh) = (parent.comm.clone(), parent.errhandler);
        let new = m.coll.shrink(&c)?;
        let h = m.add_comm(new, eh);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_split`.
///
/// # Safety
/// `newcomm` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_split(
    comm: MPI_Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut MPI_Comm,
) -> c_int {
    call("MPI_Comm_split", Some(comm), |m| {
        let parent = m.comm(comm)?;
        let (c, eh) = (parent.comm.clone(), parent.errhandler);
        let color = match color {
            MPI_UNDEFINED => None,
            c if c >= 0 => Some(c as u32),
            c => {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!("color {c} is negative and not MPI_UNDEFINED"),
                ))
            }
        };
        let h = match m.coll.split(&c, color, key)? {
            Some(new) => m.add_comm(new, eh),
            None => MPI_COMM_NULL,
        };
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(newcomm, h) };
        Ok(())
    })
}

/// `MPI_Comm_free`.
///
/// # Safety
/// `comm` valid for a read and write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    // SAFETY: valid for a read (MPI contract).
    let h = unsafe { cmem::get(comm) }.unwrap_or(MPI_COMM_NULL);
    call("MPI_Comm_free", Some(h), |m| {
        m.free_comm(h)?;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(comm, MPI_COMM_NULL) };
        Ok(())
    })
}

/// `MPI_Comm_compare`.
///
/// # Safety
/// `result` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Comm_compare(
    comm1: MPI_Comm,
    comm2: MPI_Comm,
    result: *mut c_int,
) -> c_int {
    call("MPI_Comm_compare", Some(comm1), |m| {
        let a = m.comm(comm1)?.comm.members().to_vec();
        let b = m.comm(comm2)?.comm.members().to_vec();
        let r = if comm1 == comm2 {
            MPI_IDENT
        } else if a == b {
            MPI_CONGRUENT
        } else {
            let (mut sa, mut sb) = (a.clone(), b.clone());
            sa.sort();
            sb.sort();
            if sa == sb {
                MPI_SIMILAR
            } else {
                MPI_UNEQUAL
            }
        };
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(result, r) };
        Ok(())
    })
}

/// `MPI_Type_size`.
///
/// # Safety
/// `size` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> c_int {
    call("MPI_Type_size", None, |m| {
        let t = m.types.any(datatype)?;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(size, t.size as c_int) };
        Ok(())
    })
}

/// `MPI_Type_get_extent`.
///
/// # Safety
/// Both valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_get_extent(
    datatype: MPI_Datatype,
    lb: *mut MPI_Aint,
    extent: *mut MPI_Aint,
) -> c_int {
    call("MPI_Type_get_extent", None, |m| {
        let t = m.types.any(datatype)?;
        // SAFETY: valid for writes (MPI contract).
        unsafe {
            cmem::put(lb, t.lb as MPI_Aint);
            cmem::put(extent, t.extent as MPI_Aint);
        }
        Ok(())
    })
}

/// `MPI_Type_contiguous`.
///
/// # Safety
/// `newtype` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_contiguous(
    count: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    call("MPI_Type_contiguous", None, |m| {
        let n = args::count(count, "count")?;
        let t = m.types.any(oldtype)?.contiguous_of(n);
        let h = m.types.add(t);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(newtype, h) };
        Ok(())
    })
}

/// `MPI_Type_vector`.
///
/// # Safety
/// `newtype` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    call("MPI_Type_vector", None, |m| {
        let n = args::count(count, "count")?;
        let b = args::count(blocklength, "blocklength")?;
        let s = stride as isize;
        let t = m.types.any(oldtype)?.vector_of(n, b, s);
        let h = m.types.add(t);
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(newtype, h) };
        Ok(())
    })
}

/// `MPI_Type_commit`.
///
/// # Safety
/// `datatype` valid for a read.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    call("MPI_Type_commit", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(datatype) }.unwrap_or(MPI_DATATYPE_NULL);
        m.types.commit(h)
    })
}

/// `MPI_Type_free`.
///
/// # Safety
/// `datatype` valid for a read and write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    call("MPI_Type_free", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(datatype) }.unwrap_or(MPI_DATATYPE_NULL);
        m.types.free(h)?;
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(datatype, MPI_DATATYPE_NULL) };
        Ok(())
    })
}

/// `MPI_Op_create`.
///
/// # Safety
/// `user_fn` is a valid function for the reductions it is used in; `op`
/// valid for a write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_create(
    user_fn: Option<MPI_User_function>,
    commute: c_int,
    op: *mut MPI_Op,
) -> c_int {
    call("MPI_Op_create", None, |m| {
        let f = user_fn.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "the function is NULL"))?;
        let entry = Some(UserOpEntry {
            f,
            commutative: commute != 0,
        });
        let i = match m.ops.iter().position(Option::is_none) {
            Some(i) => {
                m.ops[i] = entry;
                i
            }
            None => {
                m.ops.push(entry);
                m.ops.len() - 1
            }
        };
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(op, direct(KIND_OP, i)) };
        Ok(())
    })
}

/// `MPI_Op_free`.
///
/// # Safety
/// `op` valid for a read and write.
#[no_mangle]
pub unsafe extern "C" fn MPI_Op_free(op: *mut MPI_Op) -> c_int {
    call("MPI_Op_free", None, |m| {
        // SAFETY: valid for a read (MPI contract).
        let h = unsafe { cmem::get(op) }.unwrap_or(MPI_OP_NULL);
        match decode(h) {
            (0b10, KIND_OP, i) if m.ops.get(i).is_some_and(Option::is_some) => m.ops[i] = None,
            _ => {
                return Err(MpiError::new(
                    MPI_ERR_OP,
                    format!("{:#x} is not an operation made by MPI_Op_create", h as u32),
                ))
            }
        }
        // SAFETY: valid for a write (MPI contract).
        unsafe { cmem::put(op, MPI_OP_NULL) };
        Ok(())
    })
}
