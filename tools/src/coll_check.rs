//! Every collective once, checked: what `bcl-coll --check` runs in a job to
//! show that the collectives are right over the methods the job's links
//! chose (shared memory inside a node, a network method between nodes).
//!
//! Each rank computes every rank's input itself (they are functions of the
//! rank), so it knows the exact expected output: byte patterns for the
//! data-moving collectives, and for reductions the canonical-order f64 sum
//! ([`reduce_canonical`]) compared bit for bit — the deterministic
//! reductions must give exactly those bits over any network.

use bcl::coll::alg::Collective;
use bcl::coll::op::{reduce_canonical, BuiltinOp, Datatype, Op};
use bcl::coll::{Call, Coll, Comm};

/// Lengths tried (bytes, or f64 elements for reductions): empty, one, an
/// odd middle size, and one above the eager limit (rendezvous).
const LENGTHS: [usize; 4] = [0, 1, 1000, 40_000];

fn bytes(rank: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + rank * 7 + 1) as u8).collect()
}

fn f64s(rank: usize, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = (((rank as u64 * 0x9e37_79b9) ^ (i as u64 * 0x85eb_ca6b)) % 1_000_003) as f64;
            (x * 10f64.powi(((rank + i) % 17) as i32 - 8)).to_ne_bytes()
        })
        .collect()
}

fn canonical(inputs: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    let refs: Vec<&[u8]> = inputs.iter().map(Vec::as_slice).collect();
    let mut out = vec![0; inputs.first().map_or(0, Vec::len)];
    let mut scratch = Vec::new();
    if refs.is_empty() {
        return Ok(out);
    }
    reduce_canonical(
        &Op::Builtin(BuiltinOp::Sum),
        Datatype::F64,
        &refs,
        &mut out,
        &mut scratch,
    )
    .map_err(|e| e.to_string())?;
    Ok(out)
}

/// One call of `c` on `comm` with `n` units and root `root`, and the
/// output this rank must get (`None`: not defined here).
fn call(
    c: Collective,
    comm: &Comm,
    root: usize,
    n: usize,
) -> Result<(Call, Option<Vec<u8>>), String> {
    let (p, r) = (comm.size(), comm.rank());
    // Uneven blocks: 0, n/3, 2n/3 and n in turn.
    let counts: Vec<usize> = (0..p).map(|q| n * ((q + 1) % 4) / 3).collect();
    let sum = Some((Op::Builtin(BuiltinOp::Sum), Datatype::F64));
    let mut call = Call::new(c, Vec::new());
    call.root = root;
    let expect = match c {
        Collective::Barrier => Some(Vec::new()),
        Collective::Bcast => {
            let data = bytes(root, n);
            if r == root {
                call.input = data.clone();
            }
            call.len = n;
            Some(data)
        }
        Collective::Reduce | Collective::Allreduce | Collective::Scan | Collective::Exscan => {
            let inputs: Vec<Vec<u8>> = (0..p).map(|q| f64s(q, n)).collect();
            call.input = inputs[r].clone();
            call.len = call.input.len();
            call.reduction = sum;
            match c {
                Collective::Reduce if r != root => None,
                Collective::Reduce | Collective::Allreduce => Some(canonical(&inputs)?),
                Collective::Scan => Some(canonical(&inputs[..=r])?),
                _ if r == 0 => Some(vec![0; n * 8]),
                _ => Some(canonical(&inputs[..r])?),
            }
        }
        Collective::Gather | Collective::Allgather | Collective::Scatter => {
            let all: Vec<u8> = (0..p).flat_map(|q| bytes(q, counts[q])).collect();
            call.counts = counts.clone();
            if c == Collective::Scatter {
                if r == root {
                    call.input = all;
                }
                Some(bytes(r, counts[r]))
            } else {
                call.input = bytes(r, counts[r]);
                Some(if c == Collective::Allgather || r == root {
                    all
                } else {
                    Vec::new()
                })
            }
        }
        Collective::Alltoall => {
            let len = |s: usize, d: usize| n * ((s + 2 * d + 1) % 4) / 3;
            let block = |s: usize, d: usize| bytes(s * p + d, len(s, d));
            call.input = (0..p).flat_map(|d| block(r, d)).collect();
            call.send_counts = (0..p).map(|d| len(r, d)).collect();
            call.recv_counts = (0..p).map(|s| len(s, r)).collect();
            Some((0..p).flat_map(|s| block(s, r)).collect())
        }
        Collective::ReduceScatter => {
            let counts: Vec<usize> = counts.iter().map(|k| k * 8).collect();
            let total: usize = counts.iter().sum();
            let inputs: Vec<Vec<u8>> = (0..p).map(|q| f64s(q, total / 8)).collect();
            let all = canonical(&inputs)?;
            let at: usize = counts[..r].iter().sum();
            call.input = inputs[r].clone();
            call.len = total;
            call.counts = counts.clone();
            call.reduction = sum;
            Some(all[at..at + counts[r]].to_vec())
        }
    };
    Ok((call, expect))
}

/// Runs every collective at every length of [`LENGTHS`] with the first and
/// the last rank as root, on `comm`; returns the number of calls checked.
pub fn check_all(coll: &mut Coll, comm: &Comm) -> Result<usize, String> {
    let mut n_calls = 0;
    for c in Collective::ALL {
        for n in LENGTHS {
            for root in [0, comm.size() - 1] {
                let (call, expect) = call(c, comm, root, n)?;
                let got = coll.run(comm, call).map_err(|e| {
                    format!("{} of {n} on communicator {}: {e}", c.name(), comm.id())
                })?;
                if let Some(expect) = expect {
                    if got != expect {
                        return Err(format!(
                            "{} of {n} with root {root} on communicator {} (size {}): rank {} got a wrong result",
                            c.name(),
                            comm.id(),
                            comm.size(),
                            comm.rank()
                        ));
                    }
                }
                n_calls += 1;
            }
        }
    }
    Ok(n_calls + check_overlapping(coll, comm)?)
}

/// Collectives started together (non-blocking) and waited on in reverse
/// order: bcast, allreduce, barrier and reduce (which run one after the
/// other on a node's board) interleaved with gathers (messages). Returns
/// the number of calls checked.
fn check_overlapping(coll: &mut Coll, comm: &Comm) -> Result<usize, String> {
    let order = [
        (Collective::Bcast, 40_000),
        (Collective::Gather, 1000),
        (Collective::Allreduce, 20_000),
        (Collective::Barrier, 0),
        (Collective::Gather, 40_000),
        (Collective::Reduce, 1000),
        (Collective::Allreduce, 1),
    ];
    let mut started = Vec::new();
    for (i, &(c, n)) in order.iter().enumerate() {
        let root = i % comm.size();
        let (call, expect) = call(c, comm, root, n)?;
        let req = coll
            .start(comm, call)
            .map_err(|e| format!("starting {} of {n}: {e}", c.name()))?;
        started.push((c, n, req, expect));
    }
    let n_calls = started.len();
    while let Some((c, n, req, expect)) = started.pop() {
        let got = coll
            .wait(req)
            .map_err(|e| format!("overlapping {} of {n}: {e}", c.name()))?;
        if expect.is_some_and(|e| e != got) {
            return Err(format!(
                "overlapping {} of {n} on communicator {} (size {}): rank {} got a wrong result",
                c.name(),
                comm.id(),
                comm.size(),
                comm.rank()
            ));
        }
    }
    Ok(n_calls)
}
