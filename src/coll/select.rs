//! Which algorithm runs a collective: the one the LogGP cost model
//! predicts fastest for (P, size, placement) ([`cost::select`]), unless
//! `BCL_COLL_ALG` says otherwise. A choice costs a prediction per
//! candidate algorithm; [`Coll`](super::Coll) remembers it with the
//! schedule, per communicator and call shape.
//!
//! The model's parameters are the measured defaults of [`CostModel`], or
//! the `[coll.loggp]` tables of the TOML file `BCL_COLL_MODEL` names (the
//! format of [`CostModel::from_toml`]; `bcl-loggp` measures the numbers).

use super::alg::{Algorithm, Collective, Shape};
use super::cost::{self, CostModel, Overrides};
use super::error::CollError;
use rustc_hash::FxHashSet as HashSet;
use std::cell::RefCell;

/// The environment variable naming a cost model file.
pub const MODEL_VAR: &str = "BCL_COLL_MODEL";

/// Reads `BCL_COLL_DETERMINISTIC` (default on; `0`, `off` or `false`
/// turn it off).
pub fn deterministic_from_env() -> bool {
    !matches!(
        std::env::var("BCL_COLL_DETERMINISTIC").as_deref(),
        Ok("0") | Ok("off") | Ok("false")
    )
}

/// Chooses algorithms (see the module documentation).
#[derive(Debug, Default)]
pub struct Selector {
    model: CostModel,
    overrides: Overrides,
    warned: RefCell<HashSet<String>>,
}

impl Selector {
    /// A selector with `model` and `overrides`.
    pub fn new(model: CostModel, overrides: Overrides) -> Selector {
        Selector {
            model,
            overrides,
            ..Selector::default()
        }
    }

    /// The selector of the environment: `BCL_COLL_ALG`'s overrides and
    /// `BCL_COLL_MODEL`'s parameters (errors name the variable, the file
    /// and the field).
    pub fn from_env() -> Result<Selector, CollError> {
        let overrides = Overrides::from_env().map_err(|e| CollError::Invalid(e.to_string()))?;
        let model = match std::env::var_os(MODEL_VAR) {
            Some(path) => CostModel::from_toml_file(std::path::Path::new(&path))
                .map_err(|e| CollError::Invalid(format!("{MODEL_VAR}: {e}")))?,
            None => CostModel::default(),
        };
        Ok(Selector::new(model, overrides))
    }

    /// The cost model.
    pub fn model(&self) -> &CostModel {
        &self.model
    }

    /// The overrides.
    pub fn overrides(&self) -> &Overrides {
        &self.overrides
    }

    /// The algorithm for `shape`; the same on every rank of a communicator
    /// (it depends on everything in the shape but the rank). `uniform`
    /// says that every rank passes the same alltoall counts: without it,
    /// alltoall runs pairwise exchange, the algorithm that serves any
    /// counts, since ranks cannot know each other's counts to agree on
    /// another.
    pub fn choose(
        &self,
        shape: &Shape,
        deterministic: bool,
        uniform: bool,
    ) -> Result<Algorithm, CollError> {
        let c = shape.collective;
        if c == Collective::Alltoall && !uniform && self.overrides.get(c).is_none() {
            return Ok(Algorithm::Pairwise);
        }
        let s = cost::select(c, shape, &self.model, deterministic, &self.overrides)
            .ok_or_else(|| CollError::Invalid(format!("no algorithm can run this {}", c.name())))?;
        if let Some(w) = s.warning {
            if self.warned.borrow_mut().insert(w.clone()) {
                eprintln!("bcl: {w}");
            }
        }
        Ok(s.algorithm)
    }
}
