//! LogGP cost of the collective algorithms: closed-form predictions, a
//! timing simulator that runs the real schedules in virtual time, and the
//! choice of an algorithm by predicted time.
//!
//! - [`model`]: the LogGP parameters ([`LogGp`]) of the intra-node and
//!   inter-node paths ([`CostModel`]), from measurements on the
//!   development machine, a `bcl-loggp --json` report or a TOML section;
//! - [`formula`]: one closed-form time per (collective, algorithm)
//!   ([`predict`]);
//! - [`timing`]: the timing simulator ([`simulate`]), against which the
//!   formulas are tested;
//! - [`choice`]: [`select`], [`Overrides`] (`BCL_COLL_ALG`) and
//!   [`choice_table`].
//!
//! Times are `f64` seconds throughout.

pub mod choice;
pub mod formula;
pub mod model;
pub mod timing;

pub use choice::{choice_table, select, Overrides, Selection, OVERRIDE_VAR};
pub use formula::predict;
pub use model::{CostError, CostModel, Link, LogGp};
pub use timing::{simulate, SimTimes};

#[cfg(test)]
mod tests;
