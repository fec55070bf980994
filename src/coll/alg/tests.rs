//! Every algorithm, run by the in-memory interpreter on every rank, against
//! a sequential reference: all sizes 1..=33, every root up to 12 ranks,
//! empty, one-element, uneven and KiB-sized data; reductions bitwise
//! against the canonical tree.

use super::*;
use crate::coll::op::{reduce_canonical, BuiltinOp, Datatype, Op, UserOp};
use crate::coll::schedule::{Schedule, Step};
use crate::coll::sim;
use proptest::prelude::*;
use std::collections::VecDeque;
use Algorithm as A;
use Collective as C;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The data and reduction of a test run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Values {
    /// Random f64 of many magnitudes, summed: the association shows in the
    /// bits.
    F64Sum,
    /// Small i64, summed: exact in any order.
    I64Sum,
    /// 2×2 matrices of wrapping u32 (16-byte elements), multiplied: not
    /// commutative.
    MatMul,
}

impl Values {
    const ALL: [Values; 3] = [Values::F64Sum, Values::I64Sum, Values::MatMul];

    fn elem(self) -> usize {
        match self {
            Values::F64Sum | Values::I64Sum => 8,
            Values::MatMul => 16,
        }
    }

    fn datatype(self) -> Datatype {
        match self {
            Values::F64Sum => Datatype::F64,
            Values::I64Sum => Datatype::I64,
            Values::MatMul => Datatype::U32,
        }
    }

    fn op(self) -> Op {
        match self {
            Values::F64Sum | Values::I64Sum => Op::Builtin(BuiltinOp::Sum),
            Values::MatMul => Op::User(UserOp::new(false, |_, left, right| {
                for (a, b) in left.chunks_exact(16).zip(right.chunks_exact_mut(16)) {
                    let product = matmul(words(a), words(b));
                    for (out, w) in b.chunks_exact_mut(4).zip(product) {
                        out.copy_from_slice(&w.to_ne_bytes());
                    }
                }
            })),
        }
    }

    /// `elements` random elements.
    fn random(self, rng: &mut Rng, elements: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(elements * self.elem());
        for _ in 0..elements {
            match self {
                Values::F64Sum => {
                    let mantissa = (rng.next() >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                    let exponent = rng.below(40) as i32 - 20;
                    out.extend_from_slice(&(mantissa * 2f64.powi(exponent)).to_ne_bytes());
                }
                Values::I64Sum => {
                    out.extend_from_slice(&(rng.below(2001) as i64 - 1000).to_ne_bytes());
                }
                Values::MatMul => out.extend_from_slice(&rng.bytes(16)),
            }
        }
        out
    }

    /// The reduction of `contributions` in rank order: the canonical tree,
    /// or for matrices their left-to-right product.
    fn reference(self, contributions: &[&[u8]]) -> Vec<u8> {
        if self == Values::MatMul {
            return self
                .prefixes(contributions)
                .pop()
                .expect("at least one contribution");
        }
        canonical(self, contributions)
    }

    /// The reductions of every prefix of `contributions` (`[0, r]` for each
    /// r), as [`Values::reference`]; products are built incrementally.
    fn prefixes(self, contributions: &[&[u8]]) -> Vec<Vec<u8>> {
        if self == Values::MatMul {
            let mut product = contributions[0].to_vec();
            let mut out = vec![product.clone()];
            for c in &contributions[1..] {
                for (acc, b) in product.chunks_exact_mut(16).zip(c.chunks_exact(16)) {
                    let m = matmul(words(acc), words(b));
                    for (out, w) in acc.chunks_exact_mut(4).zip(m) {
                        out.copy_from_slice(&w.to_ne_bytes());
                    }
                }
                out.push(product.clone());
            }
            return out;
        }
        (1..=contributions.len())
            .map(|n| canonical(self, &contributions[..n]))
            .collect()
    }

    /// Whether `got` is close to `want` (a sum in another order) relative
    /// to the magnitude of `inputs`.
    fn close(self, got: &[u8], want: &[u8], inputs: &[Vec<u8>]) -> bool {
        if self != Values::F64Sum {
            return got == want;
        }
        let floats = |b: &[u8]| -> Vec<f64> {
            b.chunks_exact(8)
                .map(|x| f64::from_ne_bytes(x.try_into().expect("8 bytes")))
                .collect()
        };
        let scale: f64 = inputs
            .iter()
            .map(|x| floats(x).into_iter().fold(0.0, |m: f64, v| m.max(v.abs())))
            .sum();
        got.len() == want.len()
            && floats(got)
                .iter()
                .zip(floats(want))
                .all(|(g, w)| (g - w).abs() <= 1e-12 * scale)
    }
}

/// [`reduce_canonical`] of `contributions`.
fn canonical(values: Values, contributions: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0; contributions[0].len()];
    reduce_canonical(
        &values.op(),
        values.datatype(),
        contributions,
        &mut out,
        &mut Vec::new(),
    )
    .expect("reference reduction");
    out
}

fn words(b: &[u8]) -> [u32; 4] {
    std::array::from_fn(|i| u32::from_ne_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes")))
}

fn matmul(a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
    let dot = |x: u32, y: u32, z: u32, w: u32| x.wrapping_mul(y).wrapping_add(z.wrapping_mul(w));
    [
        dot(a[0], b[0], a[1], b[2]),
        dot(a[0], b[1], a[1], b[3]),
        dot(a[2], b[0], a[3], b[2]),
        dot(a[2], b[1], a[3], b[3]),
    ]
}

/// One operation on every rank.
#[derive(Clone, Debug)]
struct Case {
    collective: Collective,
    size: usize,
    root: usize,
    len: usize,
    elem: usize,
    counts: Vec<usize>,
    /// Alltoall: `sends[s][d]` bytes from s to d.
    sends: Vec<Vec<usize>>,
    /// Alltoall: `receives[d][s] = sends[s][d]`.
    receives: Vec<Vec<usize>>,
    nodes: Vec<u32>,
}

impl Case {
    fn new(collective: Collective, size: usize) -> Case {
        Case {
            collective,
            size,
            root: 0,
            len: 0,
            elem: 1,
            counts: Vec::new(),
            sends: vec![Vec::new(); size],
            receives: vec![Vec::new(); size],
            nodes: Vec::new(),
        }
    }

    fn root(mut self, root: usize) -> Case {
        self.root = root;
        self
    }

    /// `elements` elements of `values` (reductions) or bytes.
    fn len(mut self, elements: usize, values: Values) -> Case {
        self.elem = if self.collective.reduces() {
            values.elem()
        } else {
            1
        };
        self.len = elements * self.elem;
        self
    }

    /// Block lengths in elements.
    fn counts(mut self, counts: Vec<usize>, values: Values) -> Case {
        self.elem = if self.collective.reduces() {
            values.elem()
        } else {
            1
        };
        self.counts = counts.iter().map(|n| n * self.elem).collect();
        self.len = self.counts.iter().sum();
        self
    }

    fn matrix(mut self, sends: Vec<Vec<usize>>) -> Case {
        let p = self.size;
        self.receives = (0..p)
            .map(|d| (0..p).map(|s| sends[s][d]).collect())
            .collect();
        self.sends = sends;
        self
    }

    fn nodes(mut self, nodes: Vec<u32>) -> Case {
        self.nodes = nodes;
        self
    }

    fn shape(&self, rank: usize) -> Shape<'_> {
        Shape {
            collective: self.collective,
            rank,
            size: self.size,
            root: self.root,
            len: self.len,
            elem: self.elem,
            counts: &self.counts,
            send_counts: &self.sends[rank],
            recv_counts: &self.receives[rank],
            nodes: &self.nodes,
        }
    }

    fn schedules(&self, alg: Algorithm) -> Result<Vec<Schedule>, NotApplicable> {
        (0..self.size)
            .map(|r| schedule(alg, &self.shape(r)))
            .collect()
    }

    /// Byte range of block `i` of `counts`.
    fn block(counts: &[usize], i: usize) -> std::ops::Range<usize> {
        let start: usize = counts[..i].iter().sum();
        start..start + counts[i]
    }

    /// Every rank's input and output length.
    fn buffers(&self, values: Values, rng: &mut Rng) -> (Vec<Vec<u8>>, Vec<usize>) {
        let p = self.size;
        let total: usize = self.counts.iter().sum();
        let data = |rng: &mut Rng, bytes: usize| {
            if self.collective.reduces() {
                values.random(rng, bytes / self.elem)
            } else {
                rng.bytes(bytes)
            }
        };
        (0..p)
            .map(|r| {
                let is_root = r == self.root;
                let (input, output) = match self.collective {
                    C::Barrier => (0, 0),
                    C::Bcast => (if is_root { self.len } else { 0 }, self.len),
                    C::Reduce | C::Allreduce | C::Scan | C::Exscan => (self.len, self.len),
                    C::Gather => (self.counts[r], if is_root { total } else { 0 }),
                    C::Scatter => (if is_root { total } else { 0 }, self.counts[r]),
                    C::Allgather => (self.counts[r], total),
                    C::Alltoall => (self.sends[r].iter().sum(), self.receives[r].iter().sum()),
                    C::ReduceScatter => (self.len, self.counts[r]),
                };
                (data(rng, input), output)
            })
            .unzip()
    }

    /// What each rank's output must be (`None`: not defined).
    fn expected(&self, inputs: &[Vec<u8>], values: Values) -> Vec<Option<Vec<u8>>> {
        let p = self.size;
        let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        let everyone = || values.reference(&all);
        match self.collective {
            C::Barrier => vec![Some(Vec::new()); p],
            C::Bcast => vec![Some(inputs[self.root].clone()); p],
            C::Reduce => (0..p).map(|r| (r == self.root).then(everyone)).collect(),
            C::Allreduce => vec![Some(everyone()); p],
            C::Gather => (0..p)
                .map(|r| {
                    Some(if r == self.root {
                        inputs.concat()
                    } else {
                        Vec::new()
                    })
                })
                .collect(),
            C::Scatter => (0..p)
                .map(|r| Some(inputs[self.root][Case::block(&self.counts, r)].to_vec()))
                .collect(),
            C::Allgather => vec![Some(inputs.concat()); p],
            C::Alltoall => (0..p)
                .map(|r| {
                    Some(
                        (0..p)
                            .flat_map(|s| inputs[s][Case::block(&self.sends[s], r)].to_vec())
                            .collect(),
                    )
                })
                .collect(),
            C::ReduceScatter => (0..p)
                .map(|r| {
                    let parts: Vec<&[u8]> = all
                        .iter()
                        .map(|x| &x[Case::block(&self.counts, r)])
                        .collect();
                    Some(values.reference(&parts))
                })
                .collect(),
            C::Scan => values.prefixes(&all).into_iter().map(Some).collect(),
            C::Exscan => std::iter::once(vec![0; self.len])
                .chain(values.prefixes(&all))
                .take(p)
                .map(Some)
                .collect(),
        }
    }
}

/// Checks the rules a schedule must keep beyond what the interpreter
/// checks: the input is never written, and no overwriting receive shares
/// bytes with a send or another receive of its round.
fn check_rounds(schedule: &Schedule, what: &dyn Fn() -> String) {
    use crate::coll::schedule::{Combine, INPUT};
    let overlap =
        |a: &std::ops::Range<usize>, b: &std::ops::Range<usize>| a.start < b.end && b.start < a.end;
    for (i, round) in schedule.rounds.iter().enumerate() {
        for (j, step) in round.steps.iter().enumerate() {
            let written = match step {
                Step::Recv { buf, .. } => *buf,
                Step::Copy { to, .. } | Step::Reduce { to, .. } => *to,
                Step::Send { .. } => continue,
            };
            assert_ne!(written, INPUT, "round {i} writes the input: {}", what());
            let Step::Recv {
                buf,
                range,
                combine: Combine::Replace,
                ..
            } = step
            else {
                continue;
            };
            for (k, other) in round.steps.iter().enumerate() {
                let clash = match other {
                    Step::Send {
                        buf: b, range: r, ..
                    } => b == buf && overlap(r, range),
                    Step::Recv {
                        buf: b, range: r, ..
                    } => k != j && b == buf && overlap(r, range),
                    _ => false,
                };
                assert!(!clash, "round {i}: {step:?} overlaps {other:?}: {}", what());
            }
        }
    }
}

/// Runs `alg` on `case` and checks every output: bitwise for deterministic
/// algorithms, approximately for the others. Returns the messages sent in
/// total, or `None` when the algorithm refuses the case.
fn check(case: &Case, alg: Algorithm, values: Values, seed: u64) -> Option<usize> {
    let schedules = case.schedules(alg).ok()?;
    for (r, schedule) in schedules.iter().enumerate() {
        check_rounds(schedule, &|| format!("{alg:?} rank {r} of {case:?}"));
    }
    let mut rng = Rng(seed);
    let (inputs, output_lens) = case.buffers(values, &mut rng);
    let op = values.op();
    let reduction = case
        .collective
        .reduces()
        .then_some((&op, values.datatype()));
    let outputs = sim::run(&schedules, inputs.clone(), &output_lens, reduction)
        .unwrap_or_else(|e| panic!("{alg:?} {values:?} {case:?}: {e}"));
    let exact = alg.deterministic(case.collective);
    for (r, (got, want)) in outputs
        .iter()
        .zip(case.expected(&inputs, values))
        .enumerate()
    {
        let Some(want) = want else { continue };
        let ok = if exact {
            *got == want
        } else {
            values.close(got, &want, &inputs)
        };
        assert!(ok, "{alg:?} {values:?}: rank {r} output differs\n{case:?}");
    }
    Some(schedules.iter().map(Schedule::sends).sum())
}

fn roots(p: usize) -> Vec<usize> {
    if p <= 12 {
        (0..p).collect()
    } else {
        vec![0, 1, p / 2, p - 1]
    }
}

/// A few KiB of elements.
const LARGE: usize = 517;

/// Lengths in elements: empty, one, uneven, a few KiB.
fn lengths(p: usize) -> Vec<usize> {
    let mut v = vec![0, 1, 3, p + 1, 2 * p - 1, LARGE];
    v.sort_unstable();
    v.dedup();
    v
}

/// The (root, length) pairs of a rooted collective: every root with every
/// length but the largest, which goes with three roots (the data's size
/// and the root's place are independent).
fn rooted(p: usize) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for root in roots(p) {
        v.extend(
            lengths(p)
                .into_iter()
                .filter(|&n| n != LARGE)
                .map(|n| (root, n)),
        );
    }
    let mut some = vec![0, p / 2, p - 1];
    some.dedup();
    v.extend(some.into_iter().map(|root| (root, LARGE)));
    v
}

/// Block lengths (in elements) to try: uneven with zeros, equal, all
/// zero, large.
fn count_sets(p: usize, rng: &mut Rng) -> Vec<Vec<usize>> {
    vec![
        (0..p).map(|_| rng.below(4)).collect(),
        vec![2; p],
        vec![0; p],
        (0..p).map(|_| 40 + rng.below(100)).collect(),
    ]
}

/// Whether `alg` must accept a case without placement, by the documented
/// rules.
fn applicable(case: &Case, alg: Algorithm) -> bool {
    let pow2 = case.size.is_power_of_two();
    match alg {
        Algorithm::TwoLevel => !case.nodes.is_empty(),
        Algorithm::Rabenseifner | Algorithm::RecursiveHalving => pow2,
        Algorithm::RecursiveDoubling if case.collective == C::Allgather => pow2,
        Algorithm::Bruck if case.collective == C::Alltoall => case
            .sends
            .iter()
            .flatten()
            .chain(case.receives.iter().flatten())
            .all(|&n| n == case.sends[0][0]),
        _ => true,
    }
}

/// Runs every algorithm of `case.collective` on it (with every kind of
/// values for reductions; for the non-deterministic ones not on the
/// non-commutative matrices) and checks which accept it.
fn check_all(case: &Case, seed: u64, runs: &mut usize) {
    let kinds: &[Values] = if case.collective.reduces() {
        &Values::ALL
    } else {
        &[Values::I64Sum]
    };
    for &alg in case.collective.algorithms() {
        for &values in kinds {
            if values == Values::MatMul && !alg.deterministic(case.collective) {
                continue;
            }
            let mut case = case.clone();
            if case.collective.reduces() {
                // Same element counts, this kind's element size.
                let elem = values.elem();
                case.counts = case.counts.iter().map(|n| n / case.elem * elem).collect();
                case.len = case.len / case.elem * elem;
                case.elem = elem;
            }
            let ran = check(&case, alg, values, seed).is_some();
            assert_eq!(
                ran,
                applicable(&case, alg),
                "{alg:?} applicability on {case:?}"
            );
            *runs += usize::from(ran);
        }
    }
}

#[test]
fn matrix_reference_is_canonical() {
    let mut rng = Rng(11);
    for p in 1..=33 {
        let inputs: Vec<Vec<u8>> = (0..p).map(|_| Values::MatMul.random(&mut rng, 5)).collect();
        let all: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
        assert_eq!(
            Values::MatMul.reference(&all),
            canonical(Values::MatMul, &all)
        );
    }
}

#[test]
fn barrier() {
    let mut runs = 0;
    for p in 1..=33 {
        check_all(&Case::new(C::Barrier, p), 1, &mut runs);
    }
    assert_eq!(runs, 33);
}

#[test]
fn bcast() {
    let mut runs = 0;
    for p in 1..=33 {
        for (root, n) in rooted(p) {
            let case = Case::new(C::Bcast, p).root(root).len(n, Values::I64Sum);
            check_all(&case, (p * 1000 + root) as u64, &mut runs);
        }
    }
    assert!(runs > 1000, "{runs}");
}

#[test]
fn reduce() {
    let mut runs = 0;
    for p in 1..=33 {
        for (root, n) in rooted(p) {
            let case = Case::new(C::Reduce, p).root(root).len(n, Values::F64Sum);
            check_all(&case, (p * 1000 + root + n) as u64, &mut runs);
        }
    }
    assert!(runs > 1000, "{runs}");
}

#[test]
fn allreduce() {
    let mut runs = 0;
    for p in 1..=33 {
        for n in lengths(p) {
            let case = Case::new(C::Allreduce, p).len(n, Values::F64Sum);
            check_all(&case, (p * 1000 + n) as u64, &mut runs);
        }
    }
    assert!(runs > 1000, "{runs}");
}

#[test]
fn gather_and_scatter() {
    let mut runs = 0;
    let mut rng = Rng(7);
    for p in 1..=33 {
        for root in roots(p) {
            for counts in count_sets(p, &mut rng) {
                for c in [C::Gather, C::Scatter] {
                    let case = Case::new(c, p)
                        .root(root)
                        .counts(counts.clone(), Values::I64Sum);
                    check_all(&case, rng.next(), &mut runs);
                }
            }
        }
    }
    assert!(runs > 1000, "{runs}");
}

#[test]
fn allgather() {
    let mut runs = 0;
    let mut rng = Rng(8);
    for p in 1..=33 {
        for counts in count_sets(p, &mut rng) {
            let case = Case::new(C::Allgather, p).counts(counts, Values::I64Sum);
            check_all(&case, rng.next(), &mut runs);
        }
    }
    assert!(runs > 200, "{runs}");
}

#[test]
fn alltoall() {
    let mut runs = 0;
    let mut rng = Rng(9);
    for p in 1..=33 {
        let uneven: Vec<Vec<usize>> = (0..p)
            .map(|_| (0..p).map(|_| rng.below(4)).collect())
            .collect();
        for sends in [
            uneven,
            vec![vec![3; p]; p],
            vec![vec![0; p]; p],
            vec![vec![100; p]; p],
        ] {
            let case = Case::new(C::Alltoall, p).matrix(sends);
            check_all(&case, rng.next(), &mut runs);
        }
    }
    assert!(runs > 200, "{runs}");
}

#[test]
fn reduce_scatter() {
    let mut runs = 0;
    let mut rng = Rng(10);
    for p in 1..=33 {
        for counts in count_sets(p, &mut rng) {
            let case = Case::new(C::ReduceScatter, p).counts(counts, Values::F64Sum);
            check_all(&case, rng.next(), &mut runs);
        }
    }
    assert!(runs > 300, "{runs}");
}

#[test]
fn scan_and_exscan() {
    let mut runs = 0;
    for p in 1..=33 {
        for n in lengths(p) {
            for c in [C::Scan, C::Exscan] {
                let case = Case::new(c, p).len(n, Values::F64Sum);
                check_all(&case, (p * 100 + n) as u64, &mut runs);
            }
        }
    }
    assert!(runs > 1000, "{runs}");
}

/// Node placements of `p` ranks, with whether reduce and allreduce accept
/// them (aligned power-of-two blocks of one size).
fn placements(p: usize) -> Vec<(Vec<u32>, bool)> {
    let contiguous = |per: usize| (0..p).map(|r| (r / per) as u32).collect::<Vec<u32>>();
    // Blocks of `per` are aligned when they fill every node, or when there
    // is only one node of 2^j ranks.
    let fits = |per: usize| p.is_multiple_of(per) || (p < per && p.is_power_of_two());
    vec![
        (contiguous(2), fits(2)),
        (contiguous(4), fits(4)),
        // Aligned blocks, node names descending.
        ((0..p).map(|r| ((p - 1 - r) / 2) as u32).collect(), fits(2)),
        // Round robin over three nodes.
        ((0..p).map(|r| (r % 3) as u32).collect(), p <= 3),
        // Pairs shifted by one: the first node has one rank.
        ((0..p).map(|r| r.div_ceil(2) as u32).collect(), p <= 2),
        // One node.
        (vec![5; p], p.is_power_of_two()),
    ]
}

#[test]
fn two_level() {
    let mut runs = 0;
    for p in 1..=33 {
        for (nodes, aligned) in placements(p) {
            let barrier = Case::new(C::Barrier, p).nodes(nodes.clone());
            assert!(check(&barrier, Algorithm::TwoLevel, Values::I64Sum, 1).is_some());
            let allreduce = Case::new(C::Allreduce, p).nodes(nodes.clone());
            for n in [0, 1, p + 1, 300] {
                for values in Values::ALL {
                    let case = allreduce.clone().len(n, values);
                    let ran = check(&case, Algorithm::TwoLevel, values, (p + n) as u64).is_some();
                    assert_eq!(ran, aligned, "{case:?}");
                    runs += usize::from(ran);
                }
            }
            for root in roots(p) {
                for n in [0, 1, p + 1, 300] {
                    let bcast = Case::new(C::Bcast, p).root(root).nodes(nodes.clone());
                    let case = bcast.len(n, Values::I64Sum);
                    assert!(check(&case, Algorithm::TwoLevel, Values::I64Sum, 3).is_some());
                    for values in Values::ALL {
                        let reduce = Case::new(C::Reduce, p).root(root).nodes(nodes.clone());
                        let case = reduce.len(n, values);
                        let ran = check(&case, Algorithm::TwoLevel, values, (p * root + n) as u64)
                            .is_some();
                        assert_eq!(ran, aligned, "{case:?}");
                        runs += usize::from(ran);
                    }
                }
            }
        }
    }
    assert!(runs > 1000, "{runs}");
}

/// Messages in total and the most rounds of any rank.
fn counts_of(case: &Case, alg: Algorithm) -> (usize, usize) {
    let schedules = case.schedules(alg).expect("applicable");
    (
        schedules.iter().map(Schedule::sends).sum(),
        schedules.iter().map(|s| s.rounds.len()).max().unwrap_or(0),
    )
}

#[test]
fn message_and_round_counts() {
    for p in 1usize..=33 {
        let log = p.next_power_of_two().trailing_zeros() as usize;
        // One round at least where data is copied locally.
        let data_log = log.max(1);
        let barrier = Case::new(C::Barrier, p);
        assert_eq!(
            counts_of(&barrier, A::Dissemination),
            (p * log, log),
            "P={p}"
        );
        for root in roots(p) {
            let bcast = Case::new(C::Bcast, p).root(root).len(10, Values::I64Sum);
            assert_eq!(
                counts_of(&bcast, A::BinomialTree),
                (p - 1, data_log),
                "P={p}"
            );
            let reduce = Case::new(C::Reduce, p).root(root).len(10, Values::F64Sum);
            assert_eq!(
                counts_of(&reduce, A::BinomialTree),
                (p - 1, data_log),
                "P={p} root={root}"
            );
            let gather = Case::new(C::Gather, p)
                .root(root)
                .counts(vec![1; p], Values::I64Sum);
            assert_eq!(counts_of(&gather, A::Linear), (p - 1, 1));
            assert_eq!(counts_of(&gather, A::BinomialTree).1, data_log);
        }
        let allreduce = Case::new(C::Allreduce, p).len(2 * p, Values::F64Sum);
        let (messages, rounds) = counts_of(&allreduce, A::RecursiveDoubling);
        assert_eq!(rounds, data_log);
        if p.is_power_of_two() {
            assert_eq!(messages, p * log);
        }
        assert_eq!(
            counts_of(&allreduce, A::ReduceBcast),
            (2 * (p - 1), (2 * log).max(1))
        );
        assert_eq!(counts_of(&allreduce, A::Ring).0, 2 * p * (p - 1));
        let allgather = Case::new(C::Allgather, p).counts(vec![1; p], Values::I64Sum);
        assert_eq!(counts_of(&allgather, A::Bruck), (p * log, log + 1));
        assert_eq!(
            counts_of(&allgather, A::Ring),
            (p * (p - 1), (p - 1).max(1))
        );
        let alltoall = Case::new(C::Alltoall, p).matrix(vec![vec![2; p]; p]);
        assert_eq!(
            counts_of(&alltoall, A::Pairwise),
            (p * (p - 1), (p - 1).max(1))
        );
        assert_eq!(counts_of(&alltoall, A::Bruck).0, p * log);
        let scan = Case::new(C::Scan, p).len(10, Values::F64Sum);
        assert!(counts_of(&scan, A::RecursiveDoubling).1 <= log + 1);
    }
}

/// For every rank, the set of ranks (as bits) whose start its end depends
/// on, following messages through the rounds.
fn reach(schedules: &[Schedule]) -> Vec<u64> {
    let p = schedules.len();
    let mut known: Vec<u64> = (0..p).map(|r| 1 << r).collect();
    let mut queues = vec![vec![VecDeque::new(); p]; p];
    let mut round = vec![0; p];
    let mut sent = vec![false; p];
    loop {
        let mut moved = false;
        for r in 0..p {
            let Some(rd) = schedules[r].rounds.get(round[r]) else {
                continue;
            };
            if !sent[r] {
                for step in &rd.steps {
                    if let Step::Send { to, .. } = step {
                        queues[r][*to].push_back(known[r]);
                    }
                }
                sent[r] = true;
                moved = true;
            }
            let from: Vec<usize> = rd
                .steps
                .iter()
                .filter_map(|s| match s {
                    Step::Recv { from, .. } => Some(*from),
                    _ => None,
                })
                .collect();
            if (0..p).any(|s| queues[s][r].len() < from.iter().filter(|&&f| f == s).count()) {
                continue;
            }
            for s in from {
                known[r] |= queues[s][r].pop_front().expect("counted");
            }
            round[r] += 1;
            sent[r] = false;
            moved = true;
        }
        if !moved {
            return known;
        }
    }
}

#[test]
fn barriers_wait_for_everyone() {
    for p in 1..=33 {
        let everyone = (1u64 << p) - 1;
        let mut cases = vec![(Case::new(C::Barrier, p), Algorithm::Dissemination)];
        for (nodes, _) in placements(p) {
            cases.push((Case::new(C::Barrier, p).nodes(nodes), Algorithm::TwoLevel));
        }
        for (case, alg) in cases {
            let known = reach(&case.schedules(alg).expect("applicable"));
            assert!(
                known.iter().all(|&k| k == everyone),
                "{alg:?} {case:?}: {known:x?}"
            );
        }
    }
}

#[test]
fn refusals() {
    let refused = |case: &Case, alg: Algorithm, why: &str| {
        let err = schedule(alg, &case.shape(0)).expect_err("refused");
        assert!(err.reason.contains(why), "{alg:?}: {}", err.reason);
    };
    let allreduce = Case::new(C::Allreduce, 6).len(12, Values::F64Sum);
    refused(&allreduce, A::Rabenseifner, "power of two");
    refused(&allreduce, A::TwoLevel, "placement");
    refused(&allreduce, A::Bruck, "not an algorithm");
    refused(
        &allreduce.clone().nodes(vec![0, 0, 0, 1, 1, 1]),
        A::TwoLevel,
        "aligned",
    );
    refused(
        &allreduce.clone().nodes(vec![0, 0, 1, 1, 0, 0]),
        A::TwoLevel,
        "aligned",
    );
    let allgather = Case::new(C::Allgather, 6).counts(vec![1; 6], Values::I64Sum);
    refused(&allgather, A::RecursiveDoubling, "power of two");
    let reduce_scatter = Case::new(C::ReduceScatter, 6).counts(vec![1; 6], Values::F64Sum);
    refused(&reduce_scatter, A::RecursiveHalving, "power of two");
    let alltoall = Case::new(C::Alltoall, 3).matrix(vec![vec![1, 2, 1], vec![1; 3], vec![1; 3]]);
    refused(&alltoall, A::Bruck, "same length");
    // Malformed shapes are refused, not run.
    let mut bad = Case::new(C::Gather, 4).counts(vec![1; 3], Values::I64Sum);
    refused(&bad, A::Linear, "counts for 4 ranks");
    bad = Case::new(C::Bcast, 4).root(4);
    refused(&bad, A::BinomialTree, "below the size");
    bad = Case::new(C::Allreduce, 4).len(3, Values::F64Sum);
    bad.len += 1;
    refused(&bad, A::RecursiveDoubling, "whole number");
}

/// The collectives that reduce, each deterministic algorithm, a random
/// case: identical bits to the canonical reduction.
fn deterministic_matches_canonical(
    seed: u64,
    p: usize,
    elements: usize,
    root: usize,
    per_node_log: u32,
) {
    let mut rng = Rng(seed);
    let per_node = 1 << per_node_log;
    let nodes: Vec<u32> = if p.is_multiple_of(per_node) {
        (0..p).map(|r| (r / per_node) as u32).collect()
    } else {
        (0..p).map(|r| r as u32).collect()
    };
    let counts: Vec<usize> = (0..p).map(|_| rng.below(2 * elements / p + 2)).collect();
    for c in [
        C::Reduce,
        C::Allreduce,
        C::ReduceScatter,
        C::Scan,
        C::Exscan,
    ] {
        let mut case = Case::new(c, p).root(root % p).nodes(nodes.clone());
        case = if c == C::ReduceScatter {
            case.counts(counts.clone(), Values::F64Sum)
        } else {
            case.len(elements, Values::F64Sum)
        };
        for &alg in c.algorithms().iter().filter(|a| a.deterministic(c)) {
            let ran = check(&case, alg, Values::F64Sum, rng.next()).is_some();
            let needs_power_of_two = matches!(alg, A::Rabenseifner | A::RecursiveHalving);
            assert_eq!(
                ran,
                p.is_power_of_two() || !needs_power_of_two,
                "{alg:?} {case:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn deterministic_algorithms_give_canonical_bits(
        seed: u64,
        p in 1usize..=40,
        elements in 0usize..300,
        root: usize,
        per_node_log in 0u32..3,
    ) {
        deterministic_matches_canonical(seed, p, elements, root, per_node_log);
    }
}
