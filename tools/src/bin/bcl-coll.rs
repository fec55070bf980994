//! `bcl-coll`: latency of BCL's collectives (`bcl::coll`), a job for
//! `bcl-run`; the same measurement as `bench/coll/ompi_coll.c` for Open MPI
//! (`bench/coll-compare.sh` runs both, alternating).
//!
//! For each operation of `--ops` and each size of `--sizes` (bytes; the
//! barrier ignores sizes), every rank runs `--warmup` untimed iterations,
//! then `--iters` timed ones back to back, timing each iteration itself.
//! After the timed loop the per-iteration times go to rank 0 with a
//! reduction (`Max`, so rank 0 holds, per iteration, the slowest rank's
//! time), and rank 0 prints one JSON line per (operation, size) with the
//! median and the 99th percentile (nearest rank) of those maxima:
//!
//! ```text
//! {"tool":"bcl-coll","op":"allreduce","size":65536,"ranks":4,"nodes":1,"iters":1000,
//!  "warmup":100,"p50_us":12.3,"p99_us":45.6,"algorithm":"recursive_doubling",
//!  "deterministic":true,"mode":"busy-poll","sync":false,"methods":["shm"]}
//! ```
//!
//! - `allreduce`: `f64` sum in place (`Coll::allreduce`) of `size / 8`
//!   elements; the buffer is refilled with the rank's input before each
//!   iteration, outside the timed window;
//! - `bcast`: `size` bytes (`u8`) from rank 0 (`Coll::bcast`);
//! - `barrier`: `Coll::barrier` (reported with size 0).
//!
//! Each (operation, size) is checked once before its warm-up: the
//! allreduce of rank-dependent integers (exact in `f64`) against their
//! closed-form sum, the broadcast against its byte pattern. Every rank
//! learns (through an allreduce) whether any rank saw a wrong result, and
//! then all exit non-zero with the mismatch on standard error.
//!
//! With `--sync`, an untimed barrier precedes every iteration (warm-up and
//! timed): back to back, a broadcast's root can run ahead of the others
//! and the loop measures a pipeline rather than one operation's latency.
//!
//! Iterations default to 1000 for sizes up to 64 KiB and 20 above; warm-up
//! to 100 and 3. Ranks busy-poll by default; `--blocking` sleeps in epoll
//! between events instead (use it when there are more ranks than cores).
//!
//! ```text
//! bcl-run -n 4 -- bcl-coll                                   # 4 ranks, shared memory
//! bcl-run -n 4 -- bcl-coll --blocking --ops allreduce --sizes 8,1M --iters 200
//! BCL_METHODS=shm,packet bcl-run --lab configs/lab/pair.toml --nodes a,b --per-node 2 -- bcl-coll
//! ```

use bcl::cluster::join::{join, JoinOptions};
use bcl::coll::alg::{Collective, Shape};
use bcl::coll::{BuiltinOp, Coll, Comm};
use bcl::ProgressMode;
use bcl_tools::args::SizeList;
use clap::Parser;
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Sizes up to this many bytes get the "small" iteration defaults.
const SMALL: usize = 64 << 10;

#[derive(Parser, Debug)]
#[command(
    name = "bcl-coll",
    about = "Latency of BCL's collectives (barrier, allreduce, bcast) in a job started by bcl-run (or mpiexec, srun --mpi=pmi2): \
             median and p99 over iterations of the slowest rank's time, one JSON line per operation and size",
    after_help = "Example: bcl-run -n 4 -- bcl-coll --ops barrier,allreduce --sizes 8,64K"
)]
struct Args {
    /// Operations, comma-separated: barrier, allreduce, bcast.
    #[arg(long, value_delimiter = ',', default_value = "barrier,allreduce,bcast")]
    ops: Vec<Op>,
    /// Message sizes in bytes, comma-separated; K/M suffixes allowed
    /// (allreduce: multiples of 8, the f64 element).
    #[arg(long, default_value = "8,65536,4194304")]
    sizes: SizeList,
    /// Timed iterations per operation and size (default: 1000 up to 64 KiB,
    /// 20 above).
    #[arg(long)]
    iters: Option<usize>,
    /// Untimed iterations before the timed ones (default: 100 up to 64 KiB,
    /// 3 above).
    #[arg(long)]
    warmup: Option<usize>,
    /// Busy-poll (the default; kept for the tools' common flags).
    #[arg(long, conflicts_with = "blocking")]
    busy_poll: bool,
    /// Sleep in epoll between events instead of busy-polling (for more
    /// ranks than cores).
    #[arg(long)]
    blocking: bool,
    /// Busy-poll, but give the CPU away (sched_yield) after every round
    /// that found nothing: for more ranks than cores, like Open MPI's
    /// mpi_yield_when_idle.
    #[arg(long = "yield", conflicts_with_all = ["blocking", "busy_poll"])]
    yield_when_idle: bool,
    /// An untimed barrier before every iteration (so a rooted operation
    /// such as bcast is timed from a common start, not pipelined).
    #[arg(long)]
    sync: bool,
    /// Instead of timing: run every collective (sizes 0 B to 320 KB, first
    /// and last rank as root) on the world, a duplicate of it and its split
    /// into even and odd ranks, check every rank's result (reductions bit
    /// for bit), and print `check {"rank":R,"calls":N,"methods":[..],"boards":B,"hierarchies":H}` per
    /// rank (the methods of its links; `boards`: how many of the three
    /// communicators ran on a shared-memory board; `hierarchies`: how many
    /// went through their node hierarchy).
    #[arg(long)]
    check: bool,
    /// Seconds the ranks may take to join, and any one collective call.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// The measured operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Op {
    Barrier,
    Allreduce,
    Bcast,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Barrier => "barrier",
            Op::Allreduce => "allreduce",
            Op::Bcast => "bcast",
        }
    }

    fn collective(self) -> Collective {
        match self {
            Op::Barrier => Collective::Barrier,
            Op::Allreduce => Collective::Allreduce,
            Op::Bcast => Collective::Bcast,
        }
    }
}

/// One JSON line of the report (fields in this order).
#[derive(serde::Serialize)]
struct Line {
    tool: &'static str,
    op: &'static str,
    size: usize,
    ranks: usize,
    nodes: usize,
    iters: usize,
    warmup: usize,
    p50_us: f64,
    p99_us: f64,
    algorithm: &'static str,
    deterministic: bool,
    mode: &'static str,
    sync: bool,
    methods: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-coll: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Iterations and warm-up for `size` bytes.
fn counts(args: &Args, size: usize) -> (usize, usize) {
    let small = size <= SMALL;
    let iters = args.iters.unwrap_or(if small { 1000 } else { 20 });
    let warmup = args.warmup.unwrap_or(if small { 100 } else { 3 });
    (iters, warmup)
}

/// Element `i` of rank `rank`'s allreduce input: small integers, so every
/// sum is exact in `f64` whatever the order.
fn input_value(rank: usize, i: usize) -> f64 {
    ((rank + 1) * (i % 1021 + 1)) as f64
}

/// Element `i` of the allreduce result over `p` ranks.
fn expected_sum(p: usize, i: usize) -> f64 {
    (p * (p + 1) / 2 * (i % 1021 + 1)) as f64
}

/// Byte `i` of the broadcast message of `size` bytes.
fn pattern(size: usize, i: usize) -> u8 {
    ((i * 7 + size) % 251) as u8
}

/// The `pct`-th percentile of sorted `v`, by nearest rank: the
/// ⌈pct·n/100⌉-th smallest (integer arithmetic, as `ompi_coll.c`).
fn percentile(v: &[u64], pct: usize) -> u64 {
    let idx = (pct * v.len()).div_ceil(100).clamp(1, v.len());
    v[idx - 1]
}

/// The operations' buffers and checks, on one communicator.
struct Bench {
    coll: Coll,
    world: Comm,
}

impl Bench {
    fn rank(&self) -> usize {
        self.world.rank()
    }

    /// Checks one result of `op` with `size` bytes; `Err` describes this
    /// rank's first wrong element.
    fn check_once(&mut self, op: Op, size: usize) -> Result<Result<(), String>, String> {
        let (rank, p) = (self.rank(), self.world.size());
        match op {
            Op::Barrier => {
                self.coll
                    .barrier(&self.world)
                    .map_err(|e| format!("barrier: {e}"))?;
                Ok(Ok(()))
            }
            Op::Allreduce => {
                let mut v: Vec<f64> = (0..size / 8).map(|i| input_value(rank, i)).collect();
                self.coll
                    .allreduce(&self.world, &mut v, BuiltinOp::Sum)
                    .map_err(|e| format!("allreduce of {size} bytes: {e}"))?;
                Ok(
                    match v
                        .iter()
                        .enumerate()
                        .find(|(i, x)| **x != expected_sum(p, *i))
                    {
                        None => Ok(()),
                        Some((i, x)) => Err(format!(
                        "allreduce of {size} bytes on {p} ranks: element {i} is {x}, expected {}",
                        expected_sum(p, i)
                    )),
                    },
                )
            }
            Op::Bcast => {
                let mut v: Vec<u8> = if rank == 0 {
                    (0..size).map(|i| pattern(size, i)).collect()
                } else {
                    vec![0; size]
                };
                self.coll
                    .bcast(&self.world, 0, &mut v)
                    .map_err(|e| format!("bcast of {size} bytes: {e}"))?;
                Ok(
                    match v.iter().enumerate().find(|(i, b)| **b != pattern(size, *i)) {
                        None => Ok(()),
                        Some((i, b)) => Err(format!(
                            "bcast of {size} bytes from rank 0: byte {i} is {b}, expected {}",
                            pattern(size, i)
                        )),
                    },
                )
            }
        }
    }

    /// Verifies `op` once; every rank fails when any rank saw a wrong
    /// result.
    fn verify(&mut self, op: Op, size: usize) -> Result<(), String> {
        let mine = self.check_once(op, size)?;
        if let Err(msg) = &mine {
            eprintln!("bcl-coll: rank {}: wrong result: {msg}", self.rank());
        }
        let mut bad = [u64::from(mine.is_err())];
        self.coll
            .allreduce(&self.world, &mut bad, BuiltinOp::Sum)
            .map_err(|e| format!("sharing the check of {} ({size} bytes): {e}", op.name()))?;
        match (mine, bad[0]) {
            (_, 0) => Ok(()),
            (Err(msg), n) => Err(format!("wrong result on {n} rank(s); here: {msg}")),
            (Ok(()), n) => Err(format!(
                "{} of {size} bytes gave a wrong result on {n} other rank(s) (see their messages)",
                op.name()
            )),
        }
    }

    /// Runs `warmup` then `iters` timed iterations of `op`; this rank's
    /// time of each timed iteration in nanoseconds.
    fn time(
        &mut self,
        op: Op,
        size: usize,
        warmup: usize,
        iters: usize,
        sync: bool,
    ) -> Result<Vec<u64>, String> {
        let rank = self.rank();
        let what = |e: bcl::coll::CollError| format!("{} of {size} bytes: {e}", op.name());
        let mut times = Vec::with_capacity(iters);
        match op {
            Op::Barrier => {
                for i in 0..warmup + iters {
                    self.sync(sync).map_err(what)?;
                    let t = Instant::now();
                    self.coll.barrier(&self.world).map_err(what)?;
                    if i >= warmup {
                        times.push(t.elapsed().as_nanos() as u64);
                    }
                }
            }
            Op::Allreduce => {
                let input: Vec<f64> = (0..size / 8).map(|i| input_value(rank, i)).collect();
                let mut v = input.clone();
                for i in 0..warmup + iters {
                    v.copy_from_slice(&input);
                    self.sync(sync).map_err(what)?;
                    let t = Instant::now();
                    self.coll
                        .allreduce(&self.world, &mut v, BuiltinOp::Sum)
                        .map_err(what)?;
                    if i >= warmup {
                        times.push(t.elapsed().as_nanos() as u64);
                    }
                }
            }
            Op::Bcast => {
                let mut v: Vec<u8> = (0..size).map(|i| pattern(size, i)).collect();
                for i in 0..warmup + iters {
                    self.sync(sync).map_err(what)?;
                    let t = Instant::now();
                    self.coll.bcast(&self.world, 0, &mut v).map_err(what)?;
                    if i >= warmup {
                        times.push(t.elapsed().as_nanos() as u64);
                    }
                }
            }
        }
        Ok(times)
    }

    /// The untimed barrier of `--sync`.
    fn sync(&mut self, on: bool) -> Result<(), bcl::coll::CollError> {
        if on {
            self.coll.barrier(&self.world)?;
        }
        Ok(())
    }

    /// The algorithm `op` with `size` bytes runs: the board's on one node
    /// (once it is set up; see `bcl::coll::board`), else the selector's.
    fn algorithm(&self, op: Op, size: usize) -> Result<&'static str, String> {
        let nodes = self.world.nodes();
        let (len, elem) = match op {
            Op::Barrier => (0, 1),
            Op::Allreduce => (size, 8),
            Op::Bcast => (size, 1),
        };
        let shape = Shape {
            collective: op.collective(),
            rank: self.rank(),
            size: self.world.size(),
            root: 0,
            len,
            elem,
            counts: &[],
            send_counts: &[],
            recv_counts: &[],
            nodes,
        };
        self.coll
            .algorithm_name(&self.world, &shape, false)
            .map_err(|e| format!("choosing the {} algorithm: {e}", op.name()))
    }

    /// The methods of rank 0's links to the other ranks (open once the
    /// collectives have run).
    fn methods(&mut self) -> Vec<String> {
        let ep = self.coll.messenger().endpoint();
        let me = ep.local();
        let set: BTreeSet<String> = self
            .world
            .members()
            .iter()
            .filter(|a| **a != me)
            .map(|a| {
                ep.link(*a)
                    .and_then(|r| r.method)
                    .unwrap_or_else(|| "none".into())
            })
            .collect();
        set.into_iter().collect()
    }
}

fn run(args: &Args) -> Result<(), String> {
    if std::env::var_os("BCL_RANK").is_none() && !bcl::cluster::pmi2::requested() {
        return Err(
            "not started by bcl-run (BCL_RANK is not set) or a PMI-2 launcher (PMI_FD is not set); run e.g. `bcl-run -n 4 -- bcl-coll` or `mpiexec -n 4 bcl-coll`"
                .into(),
        );
    }
    let sizes = &args.sizes.0;
    if args.ops.contains(&Op::Allreduce) {
        if let Some(s) = sizes.iter().find(|s| **s % 8 != 0) {
            return Err(format!(
                "allreduce sums f64 elements: size {s} is not a multiple of 8 bytes"
            ));
        }
    }
    if args.iters == Some(0) {
        return Err("--iters must be at least 1".into());
    }
    let mode = if args.blocking {
        ProgressMode::Blocking
    } else {
        ProgressMode::BusyPoll
    };
    let mut joined = join(JoinOptions {
        timeout: Duration::from_secs(args.timeout),
        mode,
        ..JoinOptions::default()
    })
    .map_err(|e| format!("joining the job: {e}"))?;
    for n in &joined.notes {
        eprintln!("note: {n}");
    }
    let mut session = joined.session.take();
    let coll = Coll::from_joined(joined).map_err(|e| e.to_string())?;
    let world = coll.world().clone();
    let mut b = Bench { coll, world };
    b.coll.set_timeout(Some(Duration::from_secs(args.timeout)));
    let rank = b.rank();
    let p = b.world.size();
    let nodes = b.world.nodes().iter().collect::<BTreeSet<_>>().len();
    if args.check {
        let dup = b.coll.dup(&b.world).map_err(|e| format!("dup: {e}"))?;
        let half = b
            .coll
            .split(&b.world, Some((rank % 2) as u32), 0)
            .map_err(|e| format!("split: {e}"))?
            .ok_or("split gave no communicator")?;
        let (mut calls, mut boards, mut hierarchies) = (0, 0, 0);
        for comm in [&b.world.clone(), &dup, &half] {
            calls += bcl_tools::coll_check::check_all(&mut b.coll, comm)?;
            boards += usize::from(b.coll.on_board(comm));
            hierarchies += usize::from(b.coll.hierarchical(comm));
        }
        let methods = serde_json::to_string(&b.methods()).map_err(|e| e.to_string())?;
        println!(
            "check {{\"rank\":{rank},\"calls\":{calls},\"methods\":{methods},\"boards\":{boards},\"hierarchies\":{hierarchies}}}"
        );
        return finish(&mut b, session.as_mut(), args.timeout);
    }
    let deterministic = b.coll.deterministic();
    b.coll.set_yield_when_idle(args.yield_when_idle);
    let mode_name = if args.blocking {
        "blocking"
    } else if args.yield_when_idle {
        "yield"
    } else {
        "busy-poll"
    };

    for &op in &args.ops {
        let op_sizes: Vec<usize> = if op == Op::Barrier {
            vec![0]
        } else {
            sizes.clone()
        };
        for size in op_sizes {
            let (iters, warmup) = counts(args, size);
            b.verify(op, size)?;
            let mut times = b.time(op, size, warmup, iters, args.sync)?;
            // The slowest rank's time per iteration, at rank 0.
            b.coll
                .reduce(&b.world, 0, &mut times, BuiltinOp::Max)
                .map_err(|e| format!("gathering the times of {}: {e}", op.name()))?;
            let algorithm = b.algorithm(op, size)?;
            if rank == 0 {
                let methods = b.methods();
                times.sort_unstable();
                let us = |ns: u64| (ns as f64 / 10.0).round() / 100.0;
                let line = Line {
                    tool: "bcl-coll",
                    op: op.name(),
                    size,
                    ranks: p,
                    nodes,
                    iters,
                    warmup,
                    p50_us: us(percentile(&times, 50)),
                    p99_us: us(percentile(&times, 99)),
                    algorithm,
                    deterministic,
                    mode: mode_name,
                    sync: args.sync,
                    methods,
                };
                let line = serde_json::to_string(&line).map_err(|e| e.to_string())?;
                println!("{line}");
            }
        }
    }
    finish(&mut b, session.as_mut(), args.timeout)
}

/// Leaves together: a final collective barrier, then the rendezvous
/// barrier while still answering peers (a rank leaving early would leave
/// their last acknowledgements unanswered); without a rendezvous (static
/// job file), keeps answering for a second.
fn finish(
    b: &mut Bench,
    session: Option<&mut bcl::cluster::bootstrap::Session>,
    timeout: u64,
) -> Result<(), String> {
    b.coll
        .barrier(&b.world.clone())
        .map_err(|e| format!("final barrier: {e}"))?;
    let Some(s) = session else {
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            b.coll.progress().map_err(|e| e.to_string())?;
        }
        return Ok(());
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let coll = &mut b.coll;
    let waited = std::thread::scope(|scope| {
        let h = scope.spawn(|| {
            let r = s.barrier(Duration::from_secs(timeout.max(5)));
            stop.store(true, std::sync::atomic::Ordering::Release);
            r
        });
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            let _ = coll.progress();
            std::thread::yield_now();
        }
        h.join()
    });
    match waited {
        Ok(r) => r.map_err(|e| format!("leaving barrier: {e}")),
        Err(_) => Err("the leaving barrier's thread panicked".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&v, 50), 500);
        assert_eq!(percentile(&v, 99), 990);
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 50), 10);
        assert_eq!(percentile(&v, 99), 20);
        assert_eq!(percentile(&[7], 99), 7);
    }

    #[test]
    fn the_closed_form_sum_matches_the_inputs() {
        for p in 1..9 {
            for i in [0, 1, 1020, 1021, 5000] {
                let s: f64 = (0..p).map(|r| input_value(r, i)).sum();
                assert_eq!(s, expected_sum(p, i));
            }
        }
    }
}
