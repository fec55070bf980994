//! `libbclmpi`: MPI for C programs on BCL.
//!
//! The C bindings of an MPI-3.1 subset (`include/mpi.h`; the functions are
//! listed in `functions.txt`) over [`bcl::coll`]: communicators and
//! collectives, and point-to-point messages on each communicator's own
//! context of the tagged [messenger](bcl::coll::messenger), whose matching
//! follows MPI's rules (wildcards, non-overtaking order). Handles,
//! constants and `MPI_Status` follow the MPICH ABI ([`abi`]), and the
//! shared library's soname is `libmpi.so.12`, so a program compiled and
//! linked with MPICH's `mpicc` runs on this library unmodified (see the
//! README for how). Processes join their job in `MPI_Init` the way every
//! BCL program does: started by `bcl-run`, by `mpiexec` (hydra) or by
//! Slurm's `srun --mpi=pmi2`.
//!
//! # Safety
//!
//! Every C entry point is an `unsafe extern "C" fn` whose contract is the
//! MPI standard's for that call: each pointer is valid for what the call
//! says it holds (a buffer for `count` elements of its datatype, arrays of
//! the communicator's size, out-parameters to write), and the buffers of a
//! non-blocking call stay valid and untouched until it completes. The raw
//! pointers become slices in [`cmem`] and [`args::buffer`] only.
//!
//! The layers, bottom up: [`abi`] (the numbers), [`error`], [`cmem`] and
//! [`args`] (the C caller's memory and arguments), [`datatype`],
//! [`request`], [`state`] (the per-process state and the entry wrapper),
//! then the entry points: [`env`], [`p2p`], [`wait`], [`collective`].

pub mod abi;
pub mod args;
pub mod cmem;
pub mod collective;
pub mod datatype;
pub mod env;
pub mod error;
pub mod p2p;
pub mod request;
pub mod state;
pub mod wait;
