//! The library's state between `MPI_Init` and `MPI_Finalize`, and the
//! wrapper every C entry point goes through.
//!
//! The state lives in a thread-local: MPI is initialized with
//! `MPI_THREAD_FUNNELED` at most, so only the thread that called
//! `MPI_Init` makes MPI calls. A call from another thread, before
//! `MPI_Init` or after `MPI_Finalize` gets a clear error (fatal, as MPI
//! has no communicator to return it on).

use crate::abi::*;
use crate::datatype::Types;
use crate::error::{ErrorLog, MpiError, MpiResult};
use crate::request::Requests;
use bcl::coll::{Coll, Comm};
use std::cell::RefCell;
use std::ffi::c_int;

/// A communicator as the C program sees it.
#[derive(Debug)]
pub struct CommEntry {
    /// The communicator.
    pub comm: Comm,
    /// What an error on it does.
    pub errhandler: MPI_Errhandler,
}

/// A reduction made with `MPI_Op_create`.
#[derive(Clone, Copy, Debug)]
pub struct UserOpEntry {
    /// The C function.
    pub f: MPI_User_function,
    /// Whether operands may be swapped.
    pub commutative: bool,
}

/// The buffer attached for `MPI_Bsend`.
#[derive(Debug)]
pub struct BsendBuffer {
    /// Its address (given back by `MPI_Buffer_detach`).
    pub addr: *mut std::ffi::c_void,
    /// Its size in bytes.
    pub size: usize,
}

/// Everything MPI holds between init and finalize.
pub struct Mpi {
    /// Communicators and collectives over this process's endpoint.
    pub coll: Coll,
    /// Communicators by index: 0 the world, 1 this process alone, the rest
    /// made by the program.
    pub comms: Vec<Option<CommEntry>>,
    /// Datatypes.
    pub types: Types,
    /// Reductions made by the program, by index.
    pub ops: Vec<Option<UserOpEntry>>,
    /// Operations in progress.
    pub requests: Requests,
    /// Recent error messages.
    pub errors: ErrorLog,
    /// The attached buffer of buffered sends, if any.
    pub bsend: Option<BsendBuffer>,
    /// The thread level granted.
    pub thread_level: c_int,
    /// Messages of at least this many bytes to a process of this node are
    /// offered for the receiver to read from the sender's memory (one
    /// copy); `usize::MAX`: never.
    pub region_min: usize,
    /// The launcher's connection (bcl-run's rendezvous, or PMI-2), closed
    /// at `MPI_Finalize`.
    pub session: Option<bcl::cluster::bootstrap::Session>,
}

/// Where the library is in its life.
pub enum Phase {
    /// Before `MPI_Init`.
    Before,
    /// Between `MPI_Init` and `MPI_Finalize`.
    Running(Box<Mpi>),
    /// After `MPI_Finalize`.
    After,
}

thread_local! {
    static STATE: RefCell<Phase> = const { RefCell::new(Phase::Before) };
}

/// Runs `f` on the library's phase (init, finalize, the queries that work
/// before and after).
pub fn with_phase<R>(f: impl FnOnce(&mut Phase) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// Whether `MPI_Init` ran on any thread (`MPI_Initialized` is callable from
/// any thread and before init).
pub static INITIALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether `MPI_Finalize` ran.
pub static FINALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Mpi {
    /// The state around a joined `coll`.
    pub fn new(mut coll: Coll, thread_level: c_int) -> Mpi {
        let world = coll.world().clone();
        let solo = coll.solo();
        Mpi {
            coll,
            comms: vec![
                Some(CommEntry {
                    comm: world,
                    errhandler: MPI_ERRORS_ARE_FATAL,
                }),
                Some(CommEntry {
                    comm: solo,
                    errhandler: MPI_ERRORS_ARE_FATAL,
                }),
            ],
            types: Types::default(),
            ops: Vec::new(),
            requests: Requests::default(),
            errors: ErrorLog::default(),
            bsend: None,
            thread_level,
            region_min: usize::MAX,
            session: None,
        }
    }

    /// The index of communicator handle `h` in `comms`, if it names one.
    pub(crate) fn comm_index(h: MPI_Comm) -> Option<usize> {
        match h {
            MPI_COMM_WORLD => Some(0),
            MPI_COMM_SELF => Some(1),
            _ => match decode(h) {
                (0b10, KIND_COMM, i) if i >= 2 => Some(i),
                _ => None,
            },
        }
    }

    /// The communicator of handle `h`.
    pub fn comm(&self, h: MPI_Comm) -> MpiResult<&CommEntry> {
        comm_in(&self.comms, h)
    }

    /// The communicator of handle `h`, to change.
    pub fn comm_mut(&mut self, h: MPI_Comm) -> MpiResult<&mut CommEntry> {
        Self::comm_index(h)
            .and_then(|i| self.comms.get_mut(i)?.as_mut())
            .ok_or_else(|| MpiError::new(MPI_ERR_COMM, comm_name(h)))
    }

    /// Registers a communicator made by the program; gives its handle.
    pub fn add_comm(&mut self, comm: Comm, errhandler: MPI_Errhandler) -> MPI_Comm {
        let entry = Some(CommEntry { comm, errhandler });
        let i = match self.comms.iter().skip(2).position(Option::is_none) {
            Some(i) => {
                self.comms[i + 2] = entry;
                i + 2
            }
            None => {
                self.comms.push(entry);
                self.comms.len() - 1
            }
        };
        direct(KIND_COMM, i)
    }

    /// Forgets a communicator made by the program.
    pub fn free_comm(&mut self, h: MPI_Comm) -> MpiResult {
        match Self::comm_index(h) {
            Some(i) if i >= 2 && self.comms.get(i).is_some_and(Option::is_some) => {
                self.comms[i] = None;
                Ok(())
            }
            Some(0 | 1) => Err(MpiError::new(
                MPI_ERR_COMM,
                "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
            )),
            _ => Err(MpiError::new(MPI_ERR_COMM, comm_name(h))),
        }
    }
}

/// The communicator of handle `h` in a state's `comms` (for borrowing it
/// beside other fields of the state).
pub fn comm_in(comms: &[Option<CommEntry>], h: MPI_Comm) -> MpiResult<&CommEntry> {
    Mpi::comm_index(h)
        .and_then(|i| comms.get(i)?.as_ref())
        .ok_or_else(|| MpiError::new(MPI_ERR_COMM, comm_name(h)))
}

/// A communicator handle that names none, for messages.
fn comm_name(h: MPI_Comm) -> String {
    match h {
        MPI_COMM_NULL => "MPI_COMM_NULL is not a communicator".into(),
        _ => format!("{:#x} is not a communicator", h as u32),
    }
}

/// Runs the body of C entry point `name` on the running state and turns
/// its result into an MPI return code. An error goes through the error
/// handler of communicator `comm` (the world's if `comm` is none or not a
/// communicator): `MPI_ERRORS_ARE_FATAL` prints it and ends the process,
/// `MPI_ERRORS_RETURN` returns its code.
pub fn call(name: &str, comm: Option<MPI_Comm>, f: impl FnOnce(&mut Mpi) -> MpiResult) -> c_int {
    let r = STATE.with(|s| {
        let Ok(mut phase) = s.try_borrow_mut() else {
            return Err((
                MpiError::new(
                    MPI_ERR_OTHER,
                    format!("{name} called from inside a reduction's user function"),
                ),
                None,
            ));
        };
        match &mut *phase {
            Phase::Running(mpi) => match f(mpi) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let handler =
                        e.on.or(comm)
                            .and_then(|c| mpi.comm(c).ok())
                            .or_else(|| mpi.comm(MPI_COMM_WORLD).ok())
                            .map_or(MPI_ERRORS_ARE_FATAL, |c| c.errhandler);
                    let e = MpiError::new(e.class, format!("{name}: {}", e.message));
                    let code = mpi.errors.code(&e);
                    let rank = mpi.coll.world().rank();
                    Err((e, Some((handler, code, rank))))
                }
            },
            Phase::Before => Err((
                MpiError::new(MPI_ERR_OTHER, format!("{name} called before MPI_Init")),
                None,
            )),
            Phase::After => Err((
                MpiError::new(MPI_ERR_OTHER, format!("{name} called after MPI_Finalize")),
                None,
            )),
        }
    });
    match r {
        Ok(()) => MPI_SUCCESS,
        Err((e, Some((MPI_ERRORS_RETURN, code, _)))) => {
            let _ = e;
            code
        }
        Err((e, Some((_, _, rank)))) => fatal(Some(rank), &e),
        Err((e, None)) => {
            if INITIALIZED.load(std::sync::atomic::Ordering::Relaxed)
                && !FINALIZED.load(std::sync::atomic::Ordering::Relaxed)
            {
                // Initialized, but on another thread.
                fatal(
                    None,
                    &MpiError::new(
                        e.class,
                        format!(
                            "{name} called from a thread other than the one that called MPI_Init (this library provides MPI_THREAD_FUNNELED)"
                        ),
                    ),
                )
            } else {
                fatal(None, &e)
            }
        }
    }
}

/// Prints `e` and ends the process with status 1 (MPI_ERRORS_ARE_FATAL):
/// the launcher sees the failure and stops the job's other processes.
pub fn fatal(rank: Option<usize>, e: &MpiError) -> ! {
    let who = rank.map_or(String::new(), |r| format!(" (rank {r})"));
    eprintln!(
        "bclmpi{who}: {}: {}",
        crate::error::class_text(e.class),
        e.message
    );
    std::process::exit(1)
}
