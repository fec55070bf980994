//! Choosing an algorithm by predicted time, `BCL_COLL_ALG` overrides, and
//! the table of choices `bcl-info --coll` prints.

use super::formula::predict;
use super::model::{CostError, CostModel};
use crate::coll::alg::{self, Algorithm, Collective, Shape};

/// Algorithms forced per collective, as in
/// `BCL_COLL_ALG=allreduce:ring,bcast:binomial`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// (collective, algorithm) pairs, at most one per collective.
    pub pairs: Vec<(Collective, Algorithm)>,
}

/// The environment variable [`Overrides::from_env`] reads.
pub const OVERRIDE_VAR: &str = "BCL_COLL_ALG";

fn names<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> String {
    all.iter().map(|&x| name(x)).collect::<Vec<_>>().join(", ")
}

impl Overrides {
    /// Parses `collective:algorithm` pairs separated by commas (spaces
    /// around names are ignored; an empty text is no override). An unknown
    /// collective or algorithm, an algorithm that does not implement the
    /// collective, or a collective named twice is an error that lists the
    /// valid names.
    pub fn parse(text: &str) -> Result<Overrides, CostError> {
        let err = |entry: &str, message: String| CostError::Override {
            entry: entry.to_string(),
            message,
        };
        let mut pairs: Vec<(Collective, Algorithm)> = Vec::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((c, a)) = entry.split_once(':') else {
                return Err(err(
                    entry,
                    "expected collective:algorithm (e.g. allreduce:ring)".into(),
                ));
            };
            let (c, a) = (c.trim(), a.trim());
            let coll = Collective::from_name(c).ok_or_else(|| {
                err(
                    entry,
                    format!(
                        "unknown collective {c:?}; collectives: {}",
                        names(&Collective::ALL, Collective::name)
                    ),
                )
            })?;
            let valid = names(coll.algorithms(), Algorithm::name);
            let algo = Algorithm::from_name(a).ok_or_else(|| {
                err(
                    entry,
                    format!("unknown algorithm {a:?}; algorithms of {c}: {valid}"),
                )
            })?;
            if !coll.algorithms().contains(&algo) {
                return Err(err(
                    entry,
                    format!("{a} does not implement {c}; algorithms of {c}: {valid}"),
                ));
            }
            if pairs.iter().any(|(pc, _)| *pc == coll) {
                return Err(err(entry, format!("{c} is given more than once")));
            }
            pairs.push((coll, algo));
        }
        Ok(Overrides { pairs })
    }

    /// The overrides in [`OVERRIDE_VAR`] (none when it is unset); errors
    /// as [`Overrides::parse`].
    pub fn from_env() -> Result<Overrides, CostError> {
        match std::env::var(OVERRIDE_VAR) {
            Ok(v) => Overrides::parse(&v).map_err(|e| match e {
                CostError::Override { entry, message } => CostError::Override {
                    entry: format!("{OVERRIDE_VAR}: {entry}"),
                    message,
                },
                other => other,
            }),
            Err(_) => Ok(Overrides::default()),
        }
    }

    /// The algorithm forced for `c`, if any.
    pub fn get(&self, c: Collective) -> Option<Algorithm> {
        self.pairs.iter().find(|(pc, _)| *pc == c).map(|&(_, a)| a)
    }
}

/// What [`select`] chose.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The algorithm to run.
    pub algorithm: Algorithm,
    /// Its predicted time, s.
    pub predicted: f64,
    /// Set when an override could not be honoured: why, for the caller to
    /// print.
    pub warning: Option<String>,
}

/// Why `a` cannot run `c` on `shape` (with determinism required or not);
/// `None` when it can. Judged on rank 0's shape: every input it depends
/// on except the alltoall counts is the same on every rank, so every rank
/// judges alike.
fn unusable(a: Algorithm, c: Collective, shape: &Shape, deterministic: bool) -> Option<String> {
    if deterministic && !a.deterministic(c) {
        return Some(format!(
            "{} is not deterministic for {} and determinism is required",
            a.name(),
            c.name()
        ));
    }
    let probe = Shape {
        collective: c,
        rank: 0,
        ..shape.clone()
    };
    alg::schedule(a, &probe).err().map(|e| e.to_string())
}

/// The algorithm to run collective `c` for `shape`: the override of `c` in
/// `overrides` when it can run (applicable, and deterministic when
/// `deterministic`), else the usable algorithm of
/// [`Collective::algorithms`] with the least [`predict`]ed time (the first
/// listed on a tie), with a warning when an override was set aside.
///
/// The answer depends only on the size, root, lengths and placement in
/// `shape` — never on `shape.rank` — so every rank of a communicator gets
/// the same one. Alltoall is the exception the caller must rule out: its
/// counts are per rank, so ranks must pass the same `send_counts` and
/// `recv_counts` (uniform blocks) or the same override.
///
/// Returns `None` only if no algorithm of `c` can run `shape`.
pub fn select(
    c: Collective,
    shape: &Shape,
    model: &CostModel,
    deterministic: bool,
    overrides: &Overrides,
) -> Option<Selection> {
    let mut warning = None;
    if let Some(a) = overrides.get(c) {
        match unusable(a, c, shape, deterministic) {
            None => {
                return Some(Selection {
                    algorithm: a,
                    predicted: predict(c, a, shape, model),
                    warning: None,
                })
            }
            Some(why) => {
                warning = Some(format!(
                    "{OVERRIDE_VAR}: {}:{} set aside ({why}); choosing by cost",
                    c.name(),
                    a.name()
                ))
            }
        }
    }
    let mut best: Option<(Algorithm, f64)> = None;
    for &a in c.algorithms() {
        if unusable(a, c, shape, deterministic).is_some() {
            continue;
        }
        let t = predict(c, a, shape, model);
        if best.is_none_or(|(_, bt)| t < bt) {
            best = Some((a, t));
        }
    }
    best.map(|(algorithm, predicted)| Selection {
        algorithm,
        predicted,
        warning,
    })
}

/// Element size the table assumes for reductions (`f64`).
const TABLE_ELEM: usize = 8;

/// Block lengths and message length of `c` for `p` ranks and `size`
/// bytes: per-rank blocks of `size` bytes (gather, scatter, allgather,
/// alltoall, reduce-scatter), else one message of `size` bytes (rounded
/// up to whole `f64` elements for reductions).
pub fn table_shape_lengths(c: Collective, p: usize, size: usize) -> (usize, Vec<usize>) {
    let size = if c.reduces() {
        size.div_ceil(TABLE_ELEM).max(1) * TABLE_ELEM
    } else {
        size
    };
    match c {
        Collective::Barrier => (0, Vec::new()),
        Collective::Gather | Collective::Scatter | Collective::Allgather | Collective::Alltoall => {
            (0, vec![size; p])
        }
        Collective::ReduceScatter => (size * p, vec![size; p]),
        _ => (size, Vec::new()),
    }
}

/// Runs `f` on rank 0's shape of `c` with `p` ranks, `size` bytes (as in
/// [`table_shape_lengths`]) and `per_node` consecutive ranks per node,
/// root 0.
pub fn with_shape<R>(
    c: Collective,
    p: usize,
    size: usize,
    per_node: usize,
    f: impl FnOnce(&Shape) -> R,
) -> R {
    let (len, counts) = table_shape_lengths(c, p, size);
    let per_node = per_node.max(1);
    let nodes: Vec<u32> = (0..p).map(|r| (r / per_node) as u32).collect();
    let (blocks, pair): (&[usize], &[usize]) = match c {
        Collective::Alltoall => (&[], &counts),
        _ => (&counts, &[]),
    };
    let shape = Shape {
        collective: c,
        rank: 0,
        size: p,
        root: 0,
        len,
        elem: if c.reduces() { TABLE_ELEM } else { 1 },
        counts: blocks,
        send_counts: pair,
        recv_counts: pair,
        nodes: &nodes,
    };
    f(&shape)
}

fn human_size(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

/// The algorithm [`select`] chooses (no overrides) and its predicted time
/// in µs, for every collective and size (rows) and communicator size
/// (columns), `per_node` consecutive ranks per node (1: every rank on its
/// own node). Sizes are per rank's block for gather, scatter, allgather,
/// alltoall and reduce-scatter, else the message; barrier has one row.
pub fn choice_table(
    model: &CostModel,
    deterministic: bool,
    p_values: &[usize],
    sizes: &[usize],
    per_node: usize,
) -> String {
    let w = 30;
    let mut out = format!(
        "{:<24}",
        format!(
            "{} rank(s)/node{}",
            per_node.max(1),
            if deterministic { ", determ." } else { "" }
        )
    );
    for p in p_values {
        out.push_str(&format!(" {:>w$}", format!("P = {p}")));
    }
    out.push('\n');
    for c in Collective::ALL {
        let row_sizes: &[usize] = if c == Collective::Barrier {
            &[0]
        } else {
            sizes
        };
        for &size in row_sizes {
            let label = if c == Collective::Barrier {
                c.name().to_string()
            } else {
                format!("{} {}", c.name(), human_size(size))
            };
            out.push_str(&format!("{label:<24}"));
            for &p in p_values {
                let cell = with_shape(c, p, size, per_node, |shape| {
                    match select(c, shape, model, deterministic, &Overrides::default()) {
                        Some(s) => format!("{} {:.1}", s.algorithm.name(), s.predicted * 1e6),
                        None => "-".to_string(),
                    }
                });
                out.push_str(&format!(" {cell:>w$}"));
            }
            out.push('\n');
        }
    }
    out
}
