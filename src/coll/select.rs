//! Which algorithm runs a collective: the one the LogGP cost model
//! predicts fastest for (P, size, placement) ([`cost::select`]), unless
//! `BCL_COLL_ALG` says otherwise. Choices are remembered per shape, so
//! a repeated call costs one hash lookup.
//!
//! The model's parameters are the measured defaults of [`CostModel`], or
//! the `[coll.loggp]` tables of the TOML file `BCL_COLL_MODEL` names (the
//! format of [`CostModel::from_toml`]; `bcl-loggp` measures the numbers).

use super::alg::{Algorithm, Collective, Shape};
use super::cost::{self, CostModel, Overrides};
use super::error::CollError;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
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

/// What a choice depends on: everything in a shape but the rank.
// The manual `PartialEq` is the derived one without `memcmp` on empty
// slices (see `same`), so it agrees with the derived `Hash`.
#[allow(clippy::derived_hash_with_manual_eq)]
#[derive(Clone, Eq, Hash)]
struct Key {
    collective: Collective,
    size: usize,
    root: usize,
    len: usize,
    elem: usize,
    counts: Vec<usize>,
    nodes: Vec<u32>,
    deterministic: bool,
}

impl PartialEq for Key {
    fn eq(&self, o: &Self) -> bool {
        use super::schedule::same;
        self.collective == o.collective
            && self.size == o.size
            && self.root == o.root
            && self.len == o.len
            && self.elem == o.elem
            && self.deterministic == o.deterministic
            && same(&self.counts, &o.counts)
            && same(&self.nodes, &o.nodes)
    }
}

/// Chooses algorithms (see the module documentation).
#[derive(Debug, Default)]
pub struct Selector {
    model: CostModel,
    overrides: Overrides,
    cache: RefCell<HashMap<KeyHash, Algorithm>>,
    warned: RefCell<HashSet<String>>,
}

/// A cache key, kept whole (no collisions).
#[derive(Clone, PartialEq, Eq, Hash)]
struct KeyHash(Key);

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.0.collective.name(), self.0.size)
    }
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
        let key = KeyHash(Key {
            collective: c,
            size: shape.size,
            root: shape.root,
            len: shape.len,
            elem: shape.elem,
            counts: match c {
                Collective::Alltoall => shape.send_counts.to_vec(),
                _ => shape.counts.to_vec(),
            },
            nodes: shape.nodes.to_vec(),
            deterministic,
        });
        if let Some(&a) = self.cache.borrow().get(&key) {
            return Ok(a);
        }
        let s = cost::select(c, shape, &self.model, deterministic, &self.overrides)
            .ok_or_else(|| CollError::Invalid(format!("no algorithm can run this {}", c.name())))?;
        if let Some(w) = s.warning {
            if self.warned.borrow_mut().insert(w.clone()) {
                eprintln!("bcl: {w}");
            }
        }
        self.cache.borrow_mut().insert(key, s.algorithm);
        Ok(s.algorithm)
    }
}
