//! Communicators and collective operations.
//!
//! [`Coll`] holds a process's communicators over one [`crate::Endpoint`]:
//! the job's world, and those made from it with [`Coll::dup`] and
//! [`Coll::split`]. Every collective comes blocking (`allreduce`) and
//! non-blocking (`iallreduce`, then [`Coll::test`] or [`Coll::wait`]).
//!
//! The parts, bottom up:
//! - [`wire`]: the header of communicator messages (context id, tag);
//! - [`messenger`]: tagged messages over an endpoint, eager on the system
//!   channel and rendezvous on normal channels for large ones;
//! - [`op`]: reductions and element types;
//! - [`schedule`]: a collective operation as data, per rank;
//! - [`alg`]: the algorithms, each a function to a schedule;
//! - [`cost`]: LogGP cost formulas and the timing model;
//! - [`select`]: which algorithm runs;
//! - [`sim`]: the in-memory interpreter of schedules, for tests;
//! - [`comm`], `request` and `runtime`: communicators and operations in
//!   progress;
//! - `notice`: a member's death fails the collective at every other
//!   member, also those waiting on live members (failure notices);
//! - `shrink`: the survivors of a communicator agree on who failed and
//!   form a communicator of themselves ([`Coll::shrink`]).

pub mod alg;
pub mod board;
pub mod comm;
pub mod cost;
pub mod error;
mod hierarchy;
pub mod messenger;
mod notice;
pub mod op;
mod pool;
mod request;
mod runtime;
pub mod schedule;
pub mod select;
mod shrink;
pub mod sim;
pub mod wire;

pub use comm::Comm;
pub use error::CollError;
pub use op::{BuiltinOp, Datatype, Element, Op, UserOp};
pub use runtime::{Call, Coll, Request};
