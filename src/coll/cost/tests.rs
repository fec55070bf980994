//! The formulas against the timing simulator on the real schedules, the
//! selector's regret, parameter loading and `BCL_COLL_ALG` parsing.

use super::*;
use crate::coll::alg::{self, Algorithm, Collective, Shape};
use crate::coll::schedule::{Combine, Schedule};
use crate::coll::sim::SimError;
use std::collections::BTreeMap;

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;

/// The communicator sizes of the comparison.
const SIZES_P: [usize; 11] = [2, 3, 4, 5, 7, 8, 16, 33, 64, 128, 1024];

/// Every rank's schedule of `alg` for collective `c` with `p` ranks,
/// `size` bytes (per block, as in [`choice::table_shape_lengths`]),
/// `per_node` consecutive ranks per node and root `root`; `None` when the
/// algorithm cannot run it.
fn schedules(
    c: Collective,
    alg: Algorithm,
    p: usize,
    size: usize,
    per_node: usize,
    root: usize,
) -> Option<(Vec<Schedule>, Vec<u32>)> {
    let nodes: Vec<u32> = (0..p).map(|r| (r / per_node.max(1)) as u32).collect();
    let (len, counts) = choice::table_shape_lengths(c, p, size);
    let (blocks, pair): (&[usize], &[usize]) = match c {
        Collective::Alltoall => (&[], &counts),
        _ => (&counts, &[]),
    };
    let mut out = Vec::with_capacity(p);
    for rank in 0..p {
        let shape = Shape {
            collective: c,
            rank,
            size: p,
            root,
            len,
            elem: if c.reduces() { 8 } else { 1 },
            counts: blocks,
            send_counts: pair,
            recv_counts: pair,
            nodes: &nodes,
        };
        out.push(alg::schedule(alg, &shape).ok()?);
    }
    Some((out, nodes))
}

/// The prediction for the same case as [`schedules`].
fn prediction(
    c: Collective,
    alg: Algorithm,
    p: usize,
    size: usize,
    per_node: usize,
    root: usize,
    model: &CostModel,
) -> f64 {
    choice::with_shape(c, p, size, per_node, |shape| {
        let shape = Shape {
            root,
            ..shape.clone()
        };
        predict(c, alg, &shape, model)
    })
}

/// The sizes compared at `p` ranks.
fn sizes_for(p: usize) -> Vec<usize> {
    if p >= 128 {
        vec![8, 64 * KIB]
    } else {
        vec![8, 64 * KIB, 4 * MIB]
    }
}

/// Whether to skip a case for time: at 1024 ranks only small messages,
/// and not the algorithms with P² messages or bytes.
fn too_big(c: Collective, alg: Algorithm, p: usize, size: usize) -> bool {
    if p < 1024 {
        return false;
    }
    let quadratic = matches!(
        (c, alg),
        (Collective::Alltoall, _)
            | (Collective::Allgather, _)
            | (Collective::ReduceScatter, _)
            | (Collective::Allreduce, Algorithm::Ring)
            | (Collective::Allreduce, Algorithm::ReduceScatterAllgather)
            | (Collective::Reduce, Algorithm::ReduceScatterGather)
            | (Collective::Bcast, Algorithm::ScatterAllgather)
    );
    quadratic || size > 8
}

/// Placements compared: every rank on its own node, all on one node, and
/// nodes of 4 consecutive ranks.
const PLACEMENTS: [usize; 3] = [1, usize::MAX, 4];

fn placement_name(per_node: usize) -> &'static str {
    match per_node {
        1 => "1/node",
        usize::MAX => "1 node",
        _ => "4/node",
    }
}

/// One compared case.
struct Case {
    c: Collective,
    alg: Algorithm,
    p: usize,
    size: usize,
    per_node: usize,
    predicted: f64,
    simulated: f64,
}

impl Case {
    fn error(&self) -> f64 {
        (self.predicted - self.simulated) / self.simulated
    }
}

/// Every case of the grid under the default model, computed once for the
/// tests that need them.
fn cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| all_cases(&CostModel::default()))
}

/// Runs every case of the grid through the simulator and the formulas.
fn all_cases(model: &CostModel) -> Vec<Case> {
    let mut cases = Vec::new();
    for c in Collective::ALL {
        for &alg in c.algorithms() {
            for p in SIZES_P {
                for size in sizes_for(p) {
                    if too_big(c, alg, p, size) {
                        continue;
                    }
                    for per_node in PLACEMENTS {
                        let Some((s, nodes)) = schedules(c, alg, p, size, per_node, 0) else {
                            continue;
                        };
                        let simulated = simulate(&s, model, &nodes)
                            .unwrap_or_else(|e| {
                                panic!("{} {} P={p} {size} B: {e}", c.name(), alg.name())
                            })
                            .max;
                        let predicted = prediction(c, alg, p, size, per_node, 0, model);
                        cases.push(Case {
                            c,
                            alg,
                            p,
                            size,
                            per_node,
                            predicted,
                            simulated,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// Cases the formulas are known to miss by more than 10 %: pairwise
/// exchanges with 5 ranks on nodes of 4 and 1. The lone rank's port takes
/// whole messages in arrival order, and a later round's message that
/// arrives first holds up the current one (head-of-line blocking), which
/// the per-round formula does not see (predictions 11–21 % low).
fn known_miss(case: &Case) -> bool {
    let pairwise = matches!(
        (case.c, case.alg),
        (Collective::Alltoall, Algorithm::Pairwise)
            | (Collective::ReduceScatter, Algorithm::Pairwise)
            | (Collective::Reduce, Algorithm::ReduceScatterGather)
            | (Collective::Allreduce, Algorithm::ReduceScatterAllgather)
    );
    pairwise && case.p == 5 && case.per_node == 4 && case.size > 8
}

#[test]
fn predictions_match_the_timing_simulator() {
    let cases = cases();
    let mut worst: BTreeMap<(Collective, Algorithm), (f64, String)> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut known = Vec::new();
    for case in cases {
        let e = case.error();
        let what = format!(
            "P={} {} B {}: predicted {:.2} µs, simulated {:.2} µs",
            case.p,
            case.size,
            placement_name(case.per_node),
            case.predicted * 1e6,
            case.simulated * 1e6
        );
        if !known_miss(case) {
            let w = worst
                .entry((case.c, case.alg))
                .or_insert((0.0, String::new()));
            if e.abs() > w.0.abs() || w.1.is_empty() {
                *w = (e, what.clone());
            }
        }
        if e.abs() > 0.10 && known_miss(case) {
            known.push(format!(
                "{} {} {what} ({:+.1} %)",
                case.c.name(),
                case.alg.name(),
                e * 100.0
            ));
        } else if e.abs() > 0.10 {
            bad.push(format!(
                "{} {} {what} ({:+.1} %)",
                case.c.name(),
                case.alg.name(),
                e * 100.0
            ));
        }
    }
    println!(
        "{} cases; worst error per algorithm (known misses apart):",
        cases.len()
    );
    for ((c, a), (e, what)) in &worst {
        println!(
            "  {:<15} {:<25} {:+6.1} %  ({what})",
            c.name(),
            a.name(),
            e * 100.0
        );
    }
    println!("known misses (see known_miss):\n  {}", known.join("\n  "));
    assert!(
        bad.is_empty(),
        "{} cases off by more than 10 %:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The selector's regret at every (collective, P, size, placement) of the
/// grid but [`known_miss`]'s: the simulated time of its choice over the
/// best simulated time among the algorithms it could choose, with and
/// without determinism.
#[test]
fn the_selector_is_within_10_percent_of_the_best() {
    let model = CostModel::default();
    let cases = cases();
    let mut groups: BTreeMap<(Collective, usize, usize, usize), Vec<&Case>> = BTreeMap::new();
    for case in cases {
        groups
            .entry((case.c, case.p, case.size, case.per_node))
            .or_default()
            .push(case);
    }
    let mut worst: BTreeMap<(Collective, bool), (f64, String)> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut unchecked = 0;
    for ((c, p, size, per_node), group) in &groups {
        if group.iter().any(|k| known_miss(k)) {
            continue;
        }
        for deterministic in [false, true] {
            let usable: Vec<&&Case> = group
                .iter()
                .filter(|k| !deterministic || k.alg.deterministic(*c))
                .collect();
            let chosen = choice::with_shape(*c, *p, *size, *per_node, |shape| {
                select(*c, shape, &model, deterministic, &Overrides::default())
            })
            .expect("some algorithm applies")
            .algorithm;
            let Some(mine) = usable.iter().find(|k| k.alg == chosen) else {
                // Not simulated (too big at this P).
                unchecked += 1;
                continue;
            };
            let best = usable
                .iter()
                .min_by(|a, b| a.simulated.total_cmp(&b.simulated))
                .expect("the chosen one is there");
            let regret = mine.simulated / best.simulated - 1.0;
            let what = format!(
                "P={p} {size} B {}: chose {} ({:.2} µs), best {} ({:.2} µs)",
                placement_name(*per_node),
                chosen.name(),
                mine.simulated * 1e6,
                best.alg.name(),
                best.simulated * 1e6
            );
            let w = worst
                .entry((*c, deterministic))
                .or_insert((0.0, String::new()));
            if regret > w.0 || (regret == w.0 && *p > 8) || w.1.is_empty() {
                *w = (regret, what.clone());
            }
            if regret > 0.10 {
                bad.push(format!("{}: {what} (+{:.1} %)", c.name(), regret * 100.0));
            }
        }
    }
    println!("worst regret per collective ({unchecked} choices not simulated):");
    for ((c, det), (r, what)) in &worst {
        println!(
            "  {:<15} {:<14} {:+6.1} %  ({what})",
            c.name(),
            if *det { "deterministic" } else { "any" },
            r * 100.0
        );
    }
    assert!(bad.is_empty(), "regret over 10 %:\n{}", bad.join("\n"));
}

#[test]
fn every_algorithm_is_predicted() {
    let model = CostModel::default();
    for c in Collective::ALL {
        for &alg in c.algorithms() {
            let t = prediction(c, alg, 8, 64, 1, 0, &model);
            assert!(t.is_finite() && t > 0.0, "{} {}: {t}", c.name(), alg.name());
        }
    }
}

#[test]
fn a_message_costs_its_loggp_time() {
    let model = CostModel::default();
    let mut s0 = Schedule::new();
    let b = s0.scratch(100);
    s0.round().send(1, b, 0..100);
    let mut s1 = Schedule::new();
    let b = s1.scratch(100);
    s1.round().recv(0, b, 0..100, Combine::Replace);
    let t = simulate(&[s0, s1], &model, &[0, 1]).unwrap();
    let lp = model.inter;
    let expect = lp.o_s + lp.l + 99.0 * lp.big_g + lp.o_r;
    assert!((t.max - expect).abs() < 1e-15, "{} vs {expect}", t.max);
    assert_eq!(t.per_rank[0], lp.o_s);
    assert_eq!((t.messages, t.bytes), (1, 100));
}

#[test]
fn the_simulator_reports_bad_schedules() {
    let model = CostModel::default();
    let mut s0 = Schedule::new();
    let b = s0.scratch(4);
    s0.round().recv(1, b, 0..4, Combine::Replace);
    let mut s1 = Schedule::new();
    let b = s1.scratch(4);
    s1.round().recv(0, b, 0..4, Combine::Replace);
    let e = simulate(&[s0.clone(), s1], &model, &[0, 0]).unwrap_err();
    assert!(matches!(e, SimError::Deadlock(_)), "{e}");
    let mut s2 = Schedule::new();
    let b = s2.scratch(4);
    s2.round().send(0, b, 0..3);
    let e = simulate(&[s0.clone(), s2], &model, &[0, 0]).unwrap_err();
    assert_eq!(
        e,
        SimError::Length {
            to: 0,
            from: 1,
            expected: 4,
            got: 3
        }
    );
    let e = simulate(&[s0], &model, &[0, 0]).unwrap_err();
    assert!(e.to_string().contains("2 nodes for 1 ranks"), "{e}");
}

/// Bcast and reduce bandwidth, `m·(P − 1)/T` as BCL-3 defines it (thesis
/// §5.3), of the chosen algorithm and of the binomial tree in the timing
/// simulator, beside BCL-3's tree bound `(P − 1)·B/⌈log2 P⌉` with `B` the
/// network's 1/G. Printed (`--nocapture`), not asserted.
#[test]
fn bcast_and_reduce_bandwidth_against_bcl3s_bound() {
    let model = CostModel::default();
    let b_node = 1.0 / model.inter.big_g / 1e6;
    let m = 4 * MIB;
    println!(
        "message {} MiB, B = 1/G_inter = {b_node:.0} MB/s; MB/s = m·(P − 1)/T",
        m / MIB
    );
    for per_node in [1, 4] {
        println!("{} rank(s) per node:", per_node);
        println!(
            "  {:<7} {:>4} {:<22} {:>10} {:>10} {:>12}",
            "coll", "P", "chosen", "chosen", "binomial", "(P−1)B/⌈lg P⌉"
        );
        for c in [Collective::Bcast, Collective::Reduce] {
            for p in [2, 4, 8, 16, 32, 64] {
                let chosen = choice::with_shape(c, p, m, per_node, |shape| {
                    select(c, shape, &model, true, &Overrides::default())
                })
                .expect("bcast and reduce always have an algorithm")
                .algorithm;
                let bw = |alg: Algorithm| {
                    let (s, nodes) = schedules(c, alg, p, m, per_node, 0).expect("applicable");
                    let t = simulate(&s, &model, &nodes).expect("runs").max;
                    (m * (p - 1)) as f64 / t / 1e6
                };
                let bound = (p - 1) as f64 * b_node / (p as f64).log2().ceil();
                println!(
                    "  {:<7} {p:>4} {:<22} {:>10.0} {:>10.0} {:>12.0}",
                    c.name(),
                    chosen.name(),
                    bw(chosen),
                    bw(Algorithm::BinomialTree),
                    bound
                );
            }
        }
    }
}

/// The table `bcl-info --coll` prints, for a look (`--nocapture`).
#[test]
fn choice_table_names_every_collective() {
    let model = CostModel::default();
    let table = choice_table(&model, true, &[2, 8, 64], &[8, 64 * KIB, 4 * MIB], 4);
    println!("{table}");
    for c in Collective::ALL {
        assert!(table.contains(c.name()), "{} missing:\n{table}", c.name());
    }
    assert!(!table.contains(" - "), "a cell without algorithm:\n{table}");
}

#[test]
fn selection_does_not_depend_on_the_rank() {
    let model = CostModel::default();
    for c in Collective::ALL {
        for (p, size) in [(6, 8), (8, 64 * KIB), (12, 4 * MIB)] {
            let (len, counts) = choice::table_shape_lengths(c, p, size);
            let nodes: Vec<u32> = (0..p).map(|r| (r / 4) as u32).collect();
            let (blocks, pair): (&[usize], &[usize]) = match c {
                Collective::Alltoall => (&[], &counts),
                _ => (&counts, &[]),
            };
            let choices: Vec<Algorithm> = (0..p)
                .map(|rank| {
                    let shape = Shape {
                        collective: c,
                        rank,
                        size: p,
                        root: 1,
                        len,
                        elem: if c.reduces() { 8 } else { 1 },
                        counts: blocks,
                        send_counts: pair,
                        recv_counts: pair,
                        nodes: &nodes,
                    };
                    select(c, &shape, &model, true, &Overrides::default())
                        .expect("an algorithm")
                        .algorithm
                })
                .collect();
            assert!(
                choices.iter().all(|&a| a == choices[0]),
                "{} P={p}: {choices:?}",
                c.name()
            );
        }
    }
}

#[test]
fn an_applicable_override_wins_and_others_are_set_aside() {
    let model = CostModel::default();
    let ring = Overrides::parse("allreduce:ring, bcast:binomial").unwrap();
    let pick = |c: Collective, p: usize, size: usize, det: bool, o: &Overrides| {
        choice::with_shape(c, p, size, 1, |shape| select(c, shape, &model, det, o)).unwrap()
    };
    let s = pick(Collective::Allreduce, 8, 8, false, &ring);
    assert_eq!((s.algorithm, s.warning.clone()), (Algorithm::Ring, None));
    // Ring is not deterministic: set aside, with a warning naming why.
    let s = pick(Collective::Allreduce, 8, 8, true, &ring);
    assert_ne!(s.algorithm, Algorithm::Ring);
    let w = s.warning.expect("a warning");
    assert!(
        w.contains("allreduce:ring") && w.contains("not deterministic"),
        "{w}"
    );
    // Rabenseifner needs a power of two.
    let raben = Overrides::parse("allreduce:rabenseifner").unwrap();
    let s = pick(Collective::Allreduce, 6, 64 * KIB, true, &raben);
    assert_ne!(s.algorithm, Algorithm::Rabenseifner);
    assert!(s.warning.unwrap().contains("power of two"));
    let s = pick(Collective::Allreduce, 8, 64 * KIB, true, &raben);
    assert_eq!(s.algorithm, Algorithm::Rabenseifner);
    // Other collectives are chosen by cost.
    let s = pick(Collective::Barrier, 8, 8, true, &ring);
    assert_eq!((s.algorithm, s.warning), (Algorithm::Dissemination, None));
}

#[test]
fn overrides_parse() {
    assert_eq!(Overrides::parse("").unwrap(), Overrides::default());
    assert_eq!(Overrides::parse(" , ").unwrap(), Overrides::default());
    let o =
        Overrides::parse("allreduce:ring,bcast:binomial,reduce_scatter:recursive_halving").unwrap();
    assert_eq!(o.get(Collective::Allreduce), Some(Algorithm::Ring));
    assert_eq!(o.get(Collective::Bcast), Some(Algorithm::BinomialTree));
    assert_eq!(
        o.get(Collective::ReduceScatter),
        Some(Algorithm::RecursiveHalving)
    );
    assert_eq!(o.get(Collective::Gather), None);
}

#[test]
fn override_errors_list_the_valid_names() {
    let err = |text: &str| Overrides::parse(text).unwrap_err().to_string();
    let e = err("allreduce:rnig");
    assert!(e.contains("\"allreduce:rnig\""), "{e}");
    assert!(e.contains("unknown algorithm \"rnig\""), "{e}");
    assert!(
        e.contains("recursive_doubling, reduce_bcast, rabenseifner, reduce_scatter_allgather, ring, two_level"),
        "{e}"
    );
    let e = err("allreduse:ring");
    assert!(e.contains("unknown collective \"allreduse\""), "{e}");
    assert!(e.contains("barrier, bcast, reduce, allreduce"), "{e}");
    let e = err("bcast:ring");
    assert!(e.contains("ring does not implement bcast"), "{e}");
    assert!(e.contains("binomial, scatter_allgather, two_level"), "{e}");
    let e = err("bcast");
    assert!(e.contains("expected collective:algorithm"), "{e}");
    let e = err("bcast:binomial,bcast:two_level");
    assert!(e.contains("more than once"), "{e}");
}

#[test]
fn parameters_from_toml() {
    let text = r#"
        name = "cluster"
        [coll.loggp]
        copy_ns_per_byte = 0.2
        [coll.loggp.intra]
        l_us = -0.1
        o_s_us = 0.2
        o_r_us = 0.3
        g_us = 0.4
        big_g_ns_per_byte = 1
        [coll.loggp.inter]
        l_us = 10.27
        o_s_us = 7.05
        o_r_us = 1.0172
        g_us = 11.0911
        big_g_ns_per_byte = 6.83
    "#;
    let m = CostModel::from_toml("c.toml", text).unwrap();
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    assert!(near(m.intra.o_r, 0.3e-6), "{}", m.intra.o_r);
    assert!(near(m.intra.big_g, 1e-9), "{}", m.intra.big_g);
    assert!(near(m.inter.l, 10.27e-6), "{}", m.inter.l);
    assert!(near(m.copy_per_byte, 0.2e-9), "{}", m.copy_per_byte);
    assert_eq!(m.reduce_per_byte, CostModel::default().reduce_per_byte);
    // No [coll] at all: the defaults.
    assert_eq!(
        CostModel::from_toml("c.toml", "x = 1").unwrap(),
        CostModel::default()
    );
}

#[test]
fn toml_errors_name_file_and_field() {
    let err = |text: &str| {
        CostModel::from_toml("lab.toml", text)
            .unwrap_err()
            .to_string()
    };
    let full = "l_us = 1\no_s_us = 1\no_r_us = 1\ng_us = 1\n";
    let e = err(&format!("[coll.loggp.intra]\n{full}"));
    assert_eq!(e, "lab.toml: coll.loggp.intra.big_g_ns_per_byte: missing");
    let e = err(&format!(
        "[coll.loggp.inter]\n{full}big_g_ns_per_byte = \"fast\"\n"
    ));
    assert!(
        e.starts_with("lab.toml: coll.loggp.inter.big_g_ns_per_byte: expected a number"),
        "{e}"
    );
    let e = err(&format!(
        "[coll.loggp.inter]\n{full}big_g_ns_per_byte = 1\ngap = 2\n"
    ));
    assert!(
        e.starts_with("lab.toml: coll.loggp.inter.gap: unknown key"),
        "{e}"
    );
    let e = err(
        "[coll.loggp.intra]\nl_us = 1\no_s_us = -1\no_r_us = 1\ng_us = 1\nbig_g_ns_per_byte = 1\n",
    );
    assert!(e.starts_with("lab.toml: coll.loggp.intra.o_s_us: "), "{e}");
    assert!(e.contains("must not be negative"), "{e}");
    let e = err("[coll.loggp]\nspeed = 1\n");
    assert!(
        e.starts_with("lab.toml: coll.loggp.speed: unknown key"),
        "{e}"
    );
    let e = err("[coll.loggp\n");
    assert!(e.starts_with("lab.toml: -: "), "{e}");
}

/// A `bcl-loggp --json` report as shared/contracts/tools.md shows it.
fn report(sizes: &[(usize, f64)]) -> String {
    let results: Vec<String> = sizes
        .iter()
        .map(|&(size, g)| {
            format!(
                r#"{{"size": {size}, "L_ns": 100.0, "o_s_ns": 2000.0, "o_r_ns": 900.0, "g_ns": {g}, "G_ns_per_byte": {}}}"#,
                g / size as f64
            )
        })
        .collect();
    format!(
        r#"{{"tool": "bcl-loggp", "method": "udp", "results": [{}]}}"#,
        results.join(", ")
    )
}

#[test]
fn parameters_from_loggp_reports() {
    // Without a model: L, o_s, o_r, g of the smallest size, G of the
    // largest, whatever the order.
    let inter = report(&[(65536, 230_000.0), (8, 1264.0), (1024, 5000.0)]);
    let intra = r#"{"tool": "bcl-loggp", "method": "shm", "results": [],
        "model": {"L_ns": -90.0, "o_s_ns": 126.0, "o_r_ns": 215.0, "g_ns": 431.0,
                  "G_ns_per_byte": 1.2, "small_size": 8, "large_size": 65536,
                  "formula": "…"}}"#;
    let m = CostModel::from_loggp_json(intra, &inter).unwrap();
    assert!((m.inter.g - 1.264e-6).abs() < 1e-15);
    assert!((m.inter.big_g - 230_000.0 / 65536.0 * 1e-9).abs() < 1e-18);
    assert!((m.inter.o_s - 2e-6).abs() < 1e-15);
    assert!((m.intra.l + 0.09e-6).abs() < 1e-15);
    assert!((m.intra.big_g - 1.2e-9).abs() < 1e-18);
}

#[test]
fn loggp_report_errors_name_the_field() {
    let ok = report(&[(8, 1000.0)]);
    let err = |intra: &str| {
        CostModel::from_loggp_json(intra, &ok)
            .unwrap_err()
            .to_string()
    };
    assert!(err("{").starts_with("intra-node report: -: "));
    assert_eq!(
        err(r#"{"results": []}"#),
        "intra-node report: results: empty"
    );
    assert_eq!(
        err(r#"{"tool": "bcl-loggp"}"#),
        "intra-node report: results: missing (and no model either)"
    );
    let e = err(
        r#"{"results": [{"size": 8, "L_ns": 1, "o_s_ns": 1, "o_r_ns": 1, "G_ns_per_byte": 1}]}"#,
    );
    assert_eq!(e, "intra-node report: results[0].g_ns: missing");
    let e = err(
        r#"{"results": [{"size": 8, "L_ns": 1, "o_s_ns": "x", "o_r_ns": 1, "g_ns": 1, "G_ns_per_byte": 1}]}"#,
    );
    assert!(
        e.starts_with("intra-node report: results[0].o_s_ns: expected a number"),
        "{e}"
    );
    let e = err(
        r#"{"results": [{"size": 8, "L_ns": -5000, "o_s_ns": 1, "o_r_ns": 1, "g_ns": 1, "G_ns_per_byte": 1}]}"#,
    );
    assert!(e.contains("o_s + L is below zero"), "{e}");
}
