//! Closed-form LogGP times of every (collective, algorithm) pair.
//!
//! # Notation
//!
//! For one link's parameters (see [`LogGp`]) and a message of m bytes:
//!
//! - `T(m) = o_s + L + (m − 1)·G + o_r`: one message, sender idle to
//!   receiver done;
//! - `X(m) = o_s + max(0, L + (m − 1)·G) + o_r`: one round in which every
//!   rank sends m bytes and receives m bytes (it sends first, then takes
//!   its partner's message, sent at the same time);
//! - `I(m) = max(o_s, g, m·G)`: between the starts of a rank's
//!   back-to-back sends (CPU or NIC, whichever is slower);
//! - `γ(m) = max(g, m·G)`: between two messages entering one port;
//! - `c`, `ρ`: per-byte time of a local copy and of a reduction
//!   ([`CostModel::copy_per_byte`], [`CostModel::reduce_per_byte`]).
//!
//! P ranks, `d = ⌈log2 P⌉`, `h(n)` the largest power of two below n.
//! A sequence of exchange rounds costs
//!
//! ```text
//! E[(a_k, m_k, e_k)] = Σ_{k<last} max(a_k + X(m_k) + e_k, γ(m_k)) + a_last + X(m_last) + e_last
//! ```
//!
//! where round k runs `a_k` of local steps before its send and `e_k` of
//! combining after its receive, and a rank's next send waits for the NIC.
//!
//! # Links
//!
//! A message between ranks of one node uses [`CostModel::intra`], else
//! [`CostModel::inter`]. Steps of tree and doubling algorithms pair ranks
//! inside aligned blocks of 2^(k+1) ranks (relative to the root for the
//! binomial trees): such a step uses the intra-node parameters when every
//! such block lies on one node. Ring and pairwise rounds take each rank's
//! own links (see `Shift`: a round lasts as long as the slowest rank's
//! overheads, the slowest NIC, or the mean message over the links); linear
//! gather and scatter count the messages on each port; Bruck's steps use
//! the inter-node parameters as soon as the ranks span two nodes. An empty
//! placement counts as one node per rank.
//!
//! # The formulas
//!
//! With one link, P a power of two and root 0 (each function's
//! documentation has the general form: other P, holes when the message
//! is shorter than P elements, several links):
//!
//! | collective | algorithm | time |
//! |---|---|---|
//! | barrier | dissemination | `E[(0, 1, 0) × d]` |
//! | barrier | two_level | `F_intra(q − 1, 1) + E_inter[(0, 1, 0) × ⌈log2 N⌉] + (q − 2)·I_intra(1) + T_intra(1)` |
//! | bcast | binomial | `c·m + (d − 1)·max(T(m), I(m)) + T(m)` |
//! | bcast | scatter_allgather | `c·m + max(D_scatter + W, D_scatter,I + (P − 2)·w + w')`, `W = (P − 2)·w + w'`, `w = max(X(m/P), γ(m/P))` |
//! | bcast | two_level | `c·m + D_inter(N) + D_intra(q)` |
//! | reduce | binomial | `c·m + d·(T(m) + ρ·m)` |
//! | reduce | reduce_scatter_gather | `2·c·b + E[(0, b, 0) × (P − 1)] + (P − 1)·ρ·b + Σ_k T(2^k·b)`, `b = m/P` |
//! | reduce | two_level | `c·m + ⌈log2 q⌉·(T_intra(m) + ρ·m) + ⌈log2 N⌉·(T_inter(m) + ρ·m)` |
//! | allreduce | recursive_doubling | `c·m + E[(0, m, ρ·m) × d]` |
//! | allreduce | reduce_bcast | `c·m + d·(T(m) + ρ·m) + (d − 1)·max(T(m), I(m)) + T(m)` |
//! | allreduce | rabenseifner | `c·m + E[(0, m/2^(k+1), ρ·m/2^(k+1)) for k < d, then (0, m/2^(k+1), 0) for k = d−1 … 0]` |
//! | allreduce | reduce_scatter_allgather | `2·c·b + 2·E[(0, b, 0) × (P − 1)] + (P − 1)·ρ·b`, `b = m/P` |
//! | allreduce | ring | `c·m + E[(0, b, ρ·b) × (P − 1), (0, b, 0) × (P − 1)]`, `b = m/P` |
//! | allreduce | two_level | `c·m + ⌈log2 q⌉·(T_intra(m) + ρ·m) + E_inter[(0, m, ρ·m) × ⌈log2 N⌉] + D_intra(q)` |
//! | gather | binomial | `c·b + Σ_{k<d} T(2^k·b)` (b: a rank's block) |
//! | gather | linear | `max(max(c·b, F) + (P − 1)·o_r, F + (P − 2)·γ(b) + o_r)`, `F = o_s + L + (b − 1)·G` |
//! | scatter | binomial | `c·b + D(P)`, `D(n) = max(T(n·b/2) + c·b + D(n/2), I(n·b/2) + D(n/2))` |
//! | scatter | linear | `c·b + (P − 2)·I(b) + T(b)` |
//! | allgather | ring | `c·b + E[(0, b, 0) × (P − 1)]` |
//! | allgather | recursive_doubling | `c·b + E[(0, 2^k·b, 0) for k < d]` |
//! | allgather | bruck | `c·b + E[(0, min(2^k, P − 2^k)·b, 0) for k < d] + c·P·b` |
//! | alltoall | pairwise | `c·b + E[(0, b, 0) × (P − 1)]` |
//! | alltoall | bruck | `2·c·P·b + E[(c·n_{k−1}·b + c·n_k·b, n_k·b, 0) for k < d] + c·n_{d−1}·b`, `n_k = P/2` |
//! | reduce_scatter | pairwise | `2·c·b + E[(0, b, 0) × (P − 1)] + (P − 1)·ρ·b` |
//! | reduce_scatter | recursive_halving | `c·P·b + E[(0, 2^(d−k−1)·b, ρ·2^(d−k−1)·b) for k < d] + c·b` |
//! | reduce_scatter | ring | `c·P·b + E[(0, b, ρ·b) × (P − 1)] + c·b` |
//! | scan | recursive_doubling | `2·c·m + E[(0, m, 2ρ·m) × (d − 1)] + T(m) + ρ·m` |
//! | exscan | recursive_doubling | `c·m + E[(0, m, 2ρ·m) × (d − 1)] + T(m) + ρ·m` |
//!
//! (`D`: the bcast tree of `tree_down`, `F`: `fan_in`, N nodes of q ranks;
//! with one link and `L + (m − 1)·G ≥ 0`, `X = T` and `E[(0, m, e) × n] =
//! (n − 1)·max(T(m) + e, γ(m)) + T(m) + e`.)

use super::model::{CostModel, Link, LogGp};
use crate::coll::alg::{Algorithm, Collective, Shape};

/// Where the ranks are, as far as the formulas need it.
struct Ctx<'a> {
    model: &'a CostModel,
    p: usize,
    nodes: Option<&'a [u32]>,
    /// The ranks span more than one node.
    multi: bool,
    /// Every message uses the same link (one node, or one rank per node).
    uniform: bool,
}

impl<'a> Ctx<'a> {
    fn new(model: &'a CostModel, shape: &'a Shape) -> Ctx<'a> {
        let p = shape.size;
        let nodes = (shape.nodes.len() == p).then_some(shape.nodes);
        let (multi, uniform) = match nodes {
            None => (p > 1, true),
            Some(n) => {
                let multi = n.iter().any(|&x| x != n[0]);
                let mut seen = std::collections::HashSet::new();
                (multi, !multi || n.iter().all(|x| seen.insert(*x)))
            }
        };
        Ctx {
            model,
            p,
            nodes,
            multi,
            uniform,
        }
    }

    /// The link of steps that pair ranks across node boundaries.
    fn any(&self) -> Link {
        if self.multi {
            Link::Inter
        } else {
            Link::Intra
        }
    }

    /// `links[j]`: the link of a step pairing ranks inside aligned blocks
    /// of 2^j ranks counted from `offset` (relative rank v is rank
    /// (v + offset) mod P): intra-node when every such block lies on one
    /// node.
    fn aligned(&self, offset: usize) -> Vec<Link> {
        let p = self.p;
        let d = ceil_log2(p);
        (0..=d + 1)
            .map(|j| {
                let Some(nodes) = self.nodes else {
                    return if j == 0 || p == 1 {
                        Link::Intra
                    } else {
                        Link::Inter
                    };
                };
                let size = 1usize << j;
                let node = |v: usize| nodes[(v + offset) % p];
                let uniform = (0..p).all(|v| node(v) == node(v - v % size));
                if uniform {
                    Link::Intra
                } else {
                    Link::Inter
                }
            })
            .collect()
    }

    /// The link between ranks `a` and `b`.
    fn link(&self, a: usize, b: usize) -> Link {
        match self.nodes {
            Some(n) if n[a] == n[b] => Link::Intra,
            None if a == b => Link::Intra,
            _ => Link::Inter,
        }
    }

    fn lp(&self, link: Link) -> LogGp {
        *self.model.link(link)
    }
}

/// ⌈log2 n⌉ (0 for n ≤ 1).
fn ceil_log2(n: usize) -> usize {
    n.max(1).next_power_of_two().trailing_zeros() as usize
}

/// The largest power of two below `n` (n ≥ 2).
fn half(n: usize) -> usize {
    n.next_power_of_two() / 2
}

/// `X(m)`: an exchange round (see the module documentation).
fn x(lp: &LogGp, m: f64) -> f64 {
    lp.o_s + (lp.l + lp.wire(m)).max(0.0) + lp.o_r
}

/// What a round of [`exchanges`] is, for the rank on the critical path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// It sends and receives a message of the same size (its partner the
    /// same): `X(m)`, and its next send waits for the NIC (`γ(m)`).
    Exchange,
    /// A message from a rank like it, which sent the previous round's:
    /// `T(m)` from when that rank's NIC is free.
    OneWay,
}

/// One round of [`exchanges`]: local time before the send, the message,
/// combining time after the receive, the link and the kind.
#[derive(Clone, Copy)]
struct Xr {
    local: f64,
    m: f64,
    after: f64,
    link: Link,
    kind: Kind,
}

impl Xr {
    /// An exchange round of `m` bytes over `link` with no local work.
    fn swap(m: f64, link: Link) -> Xr {
        Xr {
            local: 0.0,
            m,
            after: 0.0,
            link,
            kind: Kind::Exchange,
        }
    }
}

/// `E_pair(m, e)`: the P − 1 rounds of a pairwise exchange, rank r
/// sending to r + k and receiving from r − k in round k, `m` bytes each,
/// combining in `e`: `Σ_{k<P−1} w_k + w'_{P−1}` with [`Shift`]'s costs for
/// each k; with one link `E[(0, m, e) × (P − 1)]`.
fn pairwise(ctx: &Ctx, m: f64, e: f64) -> f64 {
    let p = ctx.p;
    if p < 2 || m <= 0.0 {
        return 0.0;
    }
    if ctx.uniform {
        let s = Shift::of(ctx, 1, m, e);
        return (p - 2) as f64 * s.w + s.last;
    }
    (1..p)
        .map(|k| {
            let s = Shift::of(ctx, k, m, e);
            if k + 1 == p {
                s.last
            } else {
                s.w
            }
        })
        .sum()
}

/// A rank's clock in [`exchanges`]: its CPU, and when its transmit port
/// (intra, inter) is free.
#[derive(Clone, Copy, Debug)]
struct Clock {
    cpu: f64,
    tx_free: [f64; 2],
}

impl Clock {
    /// A rank at time `t` that has sent nothing.
    fn at(t: f64) -> Clock {
        Clock {
            cpu: t,
            tx_free: [f64::NEG_INFINITY; 2],
        }
    }

    /// When it can start a send on `link`.
    fn send_start(&self, link: Link) -> f64 {
        self.cpu.max(self.tx_free[(link == Link::Inter) as usize])
    }
}

/// `E[…]`: rounds in sequence from `clock` (see the module
/// documentation); an exchange round starts when the CPU has done its
/// local steps and the NIC is free (`γ` after the previous send). Rounds
/// with an empty message cost their local and combining time.
fn rounds_from(ctx: &Ctx, mut clock: Clock, rounds: impl IntoIterator<Item = Xr>) -> Clock {
    for r in rounds {
        let lp = ctx.lp(r.link);
        let k = (r.link == Link::Inter) as usize;
        if r.m <= 0.0 {
            clock.cpu += r.local + r.after;
            continue;
        }
        let start = (clock.cpu + r.local).max(clock.tx_free[k]);
        match r.kind {
            Kind::Exchange => {
                clock.tx_free[k] = start + lp.gap(r.m);
                clock.cpu = start + x(&lp, r.m) + r.after;
            }
            Kind::OneWay => clock.cpu = start + lp.p2p(r.m) + r.after,
        }
    }
    clock
}

/// [`rounds_from`] a rank idle at 0; the CPU's end.
fn exchanges(ctx: &Ctx, rounds: impl IntoIterator<Item = Xr>) -> f64 {
    rounds_from(ctx, Clock::at(0.0), rounds).cpu
}

/// Costs of one round of a neighbour pattern in which rank r sends over
/// link `r → r + k` and receives over `r − k → r` (k = 1: a ring round),
/// `m` bytes, combining in `e`:
///
/// `w = max(max_r (o_s(r→r+k) + o_r(r−k→r) + e), max_r γ_{r→r+k}(m), mean_r T_{r→r+k}(m) + e)`
///
/// — a rank's own overheads, its NIC, or the data going round (the
/// longest path through the rounds either stays on a rank or follows the
/// data, which crosses every link once per lap). The last round has no
/// NIC term but may end with a message over the slowest NIC's link:
/// `w' = max(own, follow, T` of a link whose `γ` is the largest`)`. With
/// one link `w = max(X(m) + e, γ(m))` and `w' = X(m) + e`.
#[derive(Clone, Copy)]
struct Shift {
    /// A round, `w`.
    w: f64,
    /// The last round, `w'`.
    last: f64,
}

impl Shift {
    fn of(ctx: &Ctx, k: usize, m: f64, e: f64) -> Shift {
        let p = ctx.p;
        let mut own: f64 = 0.0;
        let mut nic: f64 = 0.0;
        let mut nic_hop: f64 = 0.0;
        let mut hops = 0.0;
        for r in 0..p {
            let out = ctx.link(r, (r + k) % p);
            let inn = ctx.link((r + p - k) % p, r);
            let (o, i) = (ctx.lp(out), ctx.lp(inn));
            own = own.max(o.o_s + i.o_r + e);
            let gap = o.gap(m);
            let hop = o.p2p(m) + e;
            if gap > nic {
                nic = gap;
                nic_hop = hop;
            } else if gap == nic {
                nic_hop = nic_hop.max(hop);
            }
            hops += hop;
            // With one link every rank is alike.
            if ctx.uniform {
                hops = hop * p as f64;
                break;
            }
        }
        let follow = hops / p as f64;
        Shift {
            w: own.max(nic).max(follow),
            last: own.max(follow).max(nic_hop.min(nic.max(follow).max(own))),
        }
    }
}

/// `W(P', m, e)`: P − 1 ring rounds passing blocks of `m` bytes of which
/// only `P'` are not empty (combining each in `e`), with [`Shift`]'s `w`
/// for k = 1. With every block there: `(P − 2)·w + w'`. Otherwise the
/// blocks start on ranks `o … o + P' − 1` (o: `origin`) and travel as a
/// convoy: the convoy's front takes the `P − P'` hops from rank
/// `o + P' − 1` on, and a rank waits for its left neighbour's message
/// while the convoy passes it:
/// `(P' − 1)·w + Σ_{i < P − P'} (T_{f+i → f+i+1}(m) + e)` with
/// `f = o + P' − 1`.
fn ring(ctx: &Ctx, blocks: usize, m: f64, e: f64, origin: usize) -> f64 {
    let p = ctx.p;
    if p < 2 || m <= 0.0 {
        return 0.0;
    }
    let s = Shift::of(ctx, 1, m, e);
    if blocks >= p {
        return (p - 2) as f64 * s.w + s.last;
    }
    let blocks = blocks.max(1);
    let front = origin + blocks - 1;
    let hops: f64 = (0..p - blocks)
        .map(|i| {
            let from = (front + i) % p;
            ctx.lp(ctx.link(from, (from + 1) % p)).p2p(m) + e
        })
        .sum();
    (blocks - 1) as f64 * s.w + hops
}

/// How [`tree_down`] sends: the bytes of the message to the subtree of
/// relative ranks `[start, start + len)` (0: no message), the local time a
/// child with children spends before sending on, the time a rank still
/// works after its last send (by relative rank), and whether it then
/// sends again on the same link (so must wait for its NIC).
struct DownCost<'a> {
    msg: &'a dyn Fn(usize, usize) -> f64,
    local: f64,
    tail: &'a dyn Fn(usize) -> f64,
    sends_after: bool,
}

/// Time of a tree that sends down from its root (binomial bcast and
/// scatter): the latest time a rank of the tree over relative ranks
/// `[v, v + n)` is done, from the root's start. The root sends to its
/// child `v + h`, `h = h(n)`, a message of `m = msg(v + h, n − h)` bytes
/// (the child's subtree) and goes on with the tree of its first h ranks:
///
/// `D(v, 1) = tail(v)`,
/// `D(v, n) = max(T(m) + a + D(v + h, n − h), I(m) + D(v, h))`
///
/// with `a` the child's local time before it sends on (when it has
/// children), `I(m) + D(v, 1)` read as `o_s + tail(v)` (the root's last
/// send; `I(m)` when it sends again after the tree), and both read as
/// `D(v, h)` when `m = 0` (nothing to send). Each level uses the link
/// `links[log2 h + 1]`. With `tail = 0`, a constant `m` and P a power of
/// two, `D(0, P) = (d − 1)·max(T(m), I(m)) + T(m)`.
fn tree_down(v: usize, n: usize, links: &[Link], ctx: &Ctx, f: &DownCost) -> f64 {
    if n <= 1 {
        return (f.tail)(v);
    }
    let h = half(n);
    let link = links[h.trailing_zeros() as usize + 1];
    let lp = ctx.lp(link);
    let m = (f.msg)(v + h, n - h);
    if m <= 0.0 {
        return tree_down(v, h, links, ctx, f);
    }
    let child_local = if n - h >= 2 { f.local } else { 0.0 };
    let child = lp.p2p(m) + child_local + tree_down(v + h, n - h, links, ctx, f);
    let rest = if h == 1 {
        let last = if f.sends_after {
            lp.send_interval(m)
        } else {
            lp.o_s
        };
        last + (f.tail)(v)
    } else {
        let next = links[(h / 2).trailing_zeros() as usize + 1];
        let interval = if next == link {
            lp.send_interval(m)
        } else {
            lp.o_s
        };
        interval + tree_down(v, h, links, ctx, f)
    };
    child.max(rest)
}

/// [`tree_down`] of the whole communicator with a constant message of `m`
/// bytes and nothing after.
fn bcast_tree(p: usize, m: f64, links: &[Link], ctx: &Ctx) -> f64 {
    tree_down(
        0,
        p,
        links,
        ctx,
        &DownCost {
            msg: &|_, _| m,
            local: 0.0,
            tail: &|_| 0.0,
            sends_after: false,
        },
    )
}

/// Time of a tree that sends up to its root (canonical reduce, binomial
/// gather): when the leader of the block of relative ranks `[v, v + n)`
/// (the block's index `root`; v when 0) has taken in every partial. At
/// step k it receives from the leader of the sibling of its aligned 2^k
/// block, `[w, w + s_k)`, a message of `m_k = msg(w, s_k)` bytes (none
/// when 0), which it combines in `combine(s_k)`. The message's first byte
/// reaches the leader's port at `f_k = U(w, s_k) + o_s + L`; the port
/// takes messages in the order of their `f_k`, `γ(m)` apart
/// (`r_k = max(f_k, r_prev + γ(m_prev))`), and the CPU takes them in step
/// order:
///
/// `U(v, 1) = base(1)`, `U(v, n) = u_{d−1}` with `u_{−1} = base(n)` and
/// `u_k = max(u_{k−1}, r_k + (m_k − 1)·G) + o_r + combine(s_k)`.
///
/// Sibling blocks are led by their lowest rank; step k uses
/// `links[k + 1]`. For a constant message, P a power of two and root 0:
/// `base + d·(T(m) + combine)`.
fn tree_up(v: usize, n: usize, root: usize, links: &[Link], ctx: &Ctx, f: &UpCost) -> f64 {
    // (first byte at the port, bytes, link, sibling size), in step order.
    let mut msgs: Vec<(f64, f64, Link, usize)> = Vec::new();
    for k in 0..ceil_log2(n) {
        let size = 1 << k;
        let own = root >> k << k;
        let sib = own ^ size;
        if sib >= n {
            continue;
        }
        let s = (sib + size).min(n) - sib;
        let m = (f.msg)(v + sib, s);
        if m <= 0.0 {
            continue;
        }
        let link = links[k + 1];
        let lp = ctx.lp(link);
        let ready = tree_up(v + sib, s, 0, links, ctx, f);
        msgs.push((ready + lp.o_s + lp.l, m, link, s));
    }
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by(|&a, &b| msgs[a].0.total_cmp(&msgs[b].0).then(a.cmp(&b)));
    let mut arrival = vec![0.0; msgs.len()];
    let mut rx_free = [f64::NEG_INFINITY; 2];
    for i in order {
        let (first, m, link, _) = msgs[i];
        let lp = ctx.lp(link);
        let port = &mut rx_free[(link == Link::Inter) as usize];
        let start = first.max(*port);
        *port = start + lp.gap(m);
        arrival[i] = start + lp.wire(m);
    }
    let mut cpu = (f.base)(n);
    for (i, &(_, _, link, s)) in msgs.iter().enumerate() {
        cpu = cpu.max(arrival[i]) + ctx.lp(link).o_r + (f.combine)(s);
    }
    cpu
}

/// What [`tree_up`] moves: bytes of a sibling block's message by its
/// first relative rank and size, the combining time by size, and a
/// leader's local time before its first receive by its block's size.
struct UpCost<'a> {
    msg: &'a dyn Fn(usize, usize) -> f64,
    combine: &'a dyn Fn(usize) -> f64,
    base: &'a dyn Fn(usize) -> f64,
}

/// [`tree_up`] over `n` ranks to `root`.
fn up(n: usize, root: usize, links: &[Link], ctx: &Ctx, f: &UpCost) -> f64 {
    tree_up(0, n, root, links, ctx, f)
}

/// Generalized recursive doubling (canonical allreduce partials): `n`
/// ranks each holding `m` bytes, from `clock`. For n a power of two, `E`
/// over the steps. Otherwise, with `h = h(n)` and `u = n − h`, the first h
/// ranks run the steps of h and the last u those of u (as their own
/// groups), ending at `R(h)` and `R(u)`; at the last step lower rank j
/// sends to upper rank j (j < u) and takes the partial of upper rank
/// j mod u, which sends to ⌈h/u⌉ lower ranks back to back from
/// `s_u = max(R(u), NIC free)`; with `s_h` the lower ranks' start:
///
/// `R(n) = max(s_h + o_s + max(0, s_u − s_h + L + (m − 1)·G),
///             R(h) ∨ s_u + (⌈h/u⌉ − 1)·I(m) + o_s + L + (m − 1)·G,
///             s_u + (⌈h/u⌉ − 1)·I(m) + o_s ∨ s_h + o_s + L + (m − 1)·G) + o_r + e`
///
/// (`∨`: the later), `e` the last step's combining time `after(k)`; step k
/// uses `links[k + 1]`.
fn doubling(
    n: usize,
    m: f64,
    clock: Clock,
    links: &[Link],
    ctx: &Ctx,
    after: &dyn Fn(usize) -> f64,
) -> Clock {
    if n <= 1 {
        return clock;
    }
    if n.is_power_of_two() {
        return rounds_from(
            ctx,
            clock,
            (0..ceil_log2(n)).map(|k| Xr {
                after: after(k),
                ..Xr::swap(m, links[k + 1])
            }),
        );
    }
    let h = half(n);
    let u = n - h;
    let k = ceil_log2(n) - 1;
    let link = links[k + 1];
    let lp = ctx.lp(link);
    let lower = doubling(h, m, clock, links, ctx, after);
    let upper = doubling(u, m, clock, links, ctx, after);
    let fan = h.div_ceil(u);
    let s_h = lower.send_start(link);
    let s_u = upper.send_start(link);
    let last_up = s_u + (fan - 1) as f64 * lp.send_interval(m);
    let flight = lp.o_s + lp.l + lp.wire(m);
    let e = after(k) + lp.o_r;
    let first_lower = (s_h + lp.o_s).max(s_u + flight) + e;
    let last_lower = lower.cpu.max(last_up + flight) + e;
    let upper_done = (last_up + lp.o_s).max(s_h + flight) + e;
    let i = (link == Link::Inter) as usize;
    let mut tx_free = lower.tx_free;
    tx_free[0] = tx_free[0].max(upper.tx_free[0]);
    tx_free[1] = tx_free[1].max(upper.tx_free[1]);
    tx_free[i] = (s_h + lp.gap(m)).max(last_up + lp.gap(m));
    Clock {
        cpu: first_lower.max(last_lower).max(upper_done),
        tx_free,
    }
}

/// The largest of P element-aligned blocks of `len` bytes
/// (`⌈len/elem/P⌉·elem` bytes, as the algorithms cut them) and how many of
/// the blocks are not empty.
fn even_blocks(len: usize, elem: usize, p: usize) -> (f64, usize) {
    let elem = elem.max(1);
    let elements = len / elem;
    let per = elements.div_ceil(p.max(1));
    if per == 0 {
        return (0.0, 0);
    }
    ((per * elem) as f64, elements.div_ceil(per))
}

/// Fan-in of `k` messages of `m` bytes sent at once to one rank whose CPU
/// is free from `start`: `max(start, F) + k·o_r` or the last message's
/// arrival `F + (k − 1)·γ(m) + o_r`, whichever is later, with
/// `F = o_s + L + (m − 1)·G` the first arrival.
fn fan_in(lp: &LogGp, k: usize, m: f64, start: f64) -> f64 {
    if k == 0 {
        return start;
    }
    let first = lp.o_s + lp.l + lp.wire(m);
    let k = k as f64;
    (start.max(first) + k * lp.o_r).max(first + (k - 1.0) * lp.gap(m) + lp.o_r)
}

/// Fan-out of `k` messages of `m` bytes from one rank: the last arrives
/// done at `(k − 1)·I(m) + T(m)`.
fn fan_out(lp: &LogGp, k: usize, m: f64) -> f64 {
    if k == 0 {
        return 0.0;
    }
    (k - 1) as f64 * lp.send_interval(m) + lp.p2p(m)
}

/// The number of ranks on each node, nodes in the order of their lowest
/// rank (one rank per node when the placement is missing).
fn node_sizes(shape: &Shape) -> Vec<usize> {
    if shape.nodes.len() != shape.size {
        return vec![1; shape.size];
    }
    let mut order: Vec<u32> = Vec::new();
    let mut count: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
    for &n in shape.nodes {
        let c = count.entry(n).or_default();
        if *c == 0 {
            order.push(n);
        }
        *c += 1;
    }
    order.iter().map(|n| count[n]).collect()
}

/// The index (as in [`node_sizes`]) of rank `r`'s node.
fn node_of(shape: &Shape, r: usize) -> usize {
    if shape.nodes.len() != shape.size {
        return r;
    }
    let mut seen: Vec<u32> = Vec::new();
    for &n in &shape.nodes[..=r] {
        if !seen.contains(&n) {
            seen.push(n);
        }
    }
    seen.iter().position(|&n| n == shape.nodes[r]).unwrap_or(0)
}

/// The nodes of the placement: (number of nodes, largest node).
fn node_counts(shape: &Shape) -> (usize, usize) {
    let sizes = node_sizes(shape);
    (sizes.len(), sizes.iter().copied().max().unwrap_or(1))
}

/// The mean block of `counts` (bytes).
fn mean(counts: &[usize]) -> f64 {
    if counts.is_empty() {
        0.0
    } else {
        counts.iter().sum::<usize>() as f64 / counts.len() as f64
    }
}

/// The largest block of `counts` (bytes).
fn largest(counts: &[usize]) -> f64 {
    counts.iter().copied().max().unwrap_or(0) as f64
}

/// Predicted time of `alg` running collective `c` on `shape` under
/// `model`, in seconds; `c` decides the collective (`shape.collective` is
/// not consulted) and `shape.rank` is not used, so every rank predicts
/// alike (alltoall reads the calling rank's counts). Infinite when `alg`
/// is not an algorithm of `c`, or needs P a power of two (or equal
/// blocks, Bruck's alltoall) and the shape has not; whether an algorithm
/// applies otherwise (aligned nodes for the two-level reductions) is
/// [`crate::coll::alg::schedule`]'s business. Nothing to move costs 0.
/// The formulas are in the module documentation.
pub fn predict(c: Collective, alg: Algorithm, shape: &Shape, model: &CostModel) -> f64 {
    use Algorithm as A;
    use Collective as C;
    let ctx = Ctx::new(model, shape);
    let p = shape.size;
    if p <= 1 {
        return local_only(c, shape, model);
    }
    let empty = match c {
        C::Barrier => false,
        C::Gather | C::Scatter | C::Allgather => shape.counts.iter().all(|&n| n == 0),
        C::Alltoall => shape.send_counts.iter().all(|&n| n == 0),
        _ => shape.len == 0,
    };
    if empty && c.algorithms().contains(&alg) {
        return 0.0;
    }
    match (c, alg) {
        (C::Barrier, A::Dissemination) => barrier_dissemination(&ctx),
        (C::Barrier, A::TwoLevel) => barrier_two_level(&ctx, shape),
        (C::Bcast, A::BinomialTree) => bcast_binomial(&ctx, shape),
        (C::Bcast, A::ScatterAllgather) => bcast_scatter_allgather(&ctx, shape),
        (C::Bcast, A::TwoLevel) => bcast_two_level(&ctx, shape),
        (C::Reduce, A::BinomialTree) => reduce_binomial(&ctx, shape),
        (C::Reduce, A::ReduceScatterGather) => reduce_scatter_gather(&ctx, shape),
        (C::Reduce, A::TwoLevel) => reduce_two_level(&ctx, shape),
        (C::Allreduce, A::RecursiveDoubling) => allreduce_doubling(&ctx, shape),
        (C::Allreduce, A::ReduceBcast) => allreduce_reduce_bcast(&ctx, shape),
        (C::Allreduce, A::Rabenseifner) => allreduce_rabenseifner(&ctx, shape),
        (C::Allreduce, A::ReduceScatterAllgather) => allreduce_rs_allgather(&ctx, shape),
        (C::Allreduce, A::Ring) => allreduce_ring(&ctx, shape),
        (C::Allreduce, A::TwoLevel) => allreduce_two_level(&ctx, shape),
        (C::Gather, A::BinomialTree) => gather_binomial(&ctx, shape),
        (C::Gather, A::Linear) => gather_linear(&ctx, shape),
        (C::Scatter, A::BinomialTree) => scatter_binomial(&ctx, shape),
        (C::Scatter, A::Linear) => scatter_linear(&ctx, shape),
        (C::Allgather, A::Ring) => allgather_ring(&ctx, shape),
        (C::Allgather, A::RecursiveDoubling) => allgather_doubling(&ctx, shape),
        (C::Allgather, A::Bruck) => allgather_bruck(&ctx, shape),
        (C::Alltoall, A::Pairwise) => alltoall_pairwise(&ctx, shape),
        (C::Alltoall, A::Bruck) => alltoall_bruck(&ctx, shape),
        (C::ReduceScatter, A::Pairwise) => reduce_scatter_pairwise(&ctx, shape),
        (C::ReduceScatter, A::RecursiveHalving) => reduce_scatter_halving(&ctx, shape),
        (C::ReduceScatter, A::Ring) => reduce_scatter_ring(&ctx, shape),
        (C::Scan, A::RecursiveDoubling) => scan_doubling(&ctx, shape, true),
        (C::Exscan, A::RecursiveDoubling) => scan_doubling(&ctx, shape, false),
        _ => f64::INFINITY,
    }
}

/// One rank: the local copy of the data, `c·m` (nothing for a barrier).
fn local_only(c: Collective, shape: &Shape, model: &CostModel) -> f64 {
    let bytes = match c {
        Collective::Barrier => 0,
        Collective::Gather | Collective::Scatter | Collective::Allgather => {
            shape.counts.iter().sum()
        }
        Collective::Alltoall => shape.send_counts.iter().sum(),
        _ => shape.len,
    };
    bytes as f64 * model.copy_per_byte
}

/// Barrier, dissemination: `d` rounds of one 1-byte exchange,
/// `E[(0, 1, 0) × d]` ≈ `(d − 1)·max(X(1), γ(1)) + X(1)`.
fn barrier_dissemination(ctx: &Ctx) -> f64 {
    let link = ctx.any();
    exchanges(ctx, (0..ceil_log2(ctx.p)).map(|_| Xr::swap(1.0, link)))
}

/// Barrier, two-level, N nodes of at most q ranks: the members signal
/// their leader (a fan-in over shared memory, [`fan_in`]), the leaders run
/// the dissemination barrier over the network, the leaders release their
/// members (a fan-out, [`fan_out`]):
/// `F_intra(q − 1, 1) + E_inter[(0, 1, 0) × ⌈log2 N⌉] + (q − 2)·I_intra(1) + T_intra(1)`.
fn barrier_two_level(ctx: &Ctx, shape: &Shape) -> f64 {
    let (n, q) = node_counts(shape);
    let intra = ctx.lp(Link::Intra);
    let gather = fan_in(&intra, q - 1, 1.0, 0.0);
    let leaders = exchanges(ctx, (0..ceil_log2(n)).map(|_| Xr::swap(1.0, Link::Inter)));
    gather + leaders + fan_out(&intra, q - 1, 1.0)
}

/// Bcast, binomial tree: the root's copy, then [`tree_down`] with
/// `msg = m`: `c·m + D(P)`, `D(n) = max(T(m) + D(n − h), I(m) + D(h))`; for
/// P a power of two `c·m + (d − 1)·max(T(m), I(m)) + T(m)`.
fn bcast_binomial(ctx: &Ctx, shape: &Shape) -> f64 {
    let m = shape.len as f64;
    let links = ctx.aligned(shape.root);
    m * ctx.model.copy_per_byte + bcast_tree(ctx.p, m, &links, ctx)
}

/// Bcast, scatter + allgather (pieces of `b = ⌈m/P⌉` bytes; only the
/// `P' = ⌈m/b⌉` first are not empty): the root's copy, a binomial scatter
/// ([`tree_down`] with `msg(v, n) = b·|[v, v + n) ∩ [0, P')|`, no message
/// to a subtree without pieces), then a ring allgather ([`ring`]) of the P'
/// pieces. The ring overlaps the scatter's end: it ends after the last
/// rank's scatter and the whole ring, or after the root's (which waits
/// for its NIC, `D_I`) and its own P' − 1 ring rounds:
/// `c·m + max(D(0, P) + W(P', b, 0), D_I(0, P) + (P' − 2)·w + w')`.
fn bcast_scatter_allgather(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    let m = shape.len;
    let b = m.div_ceil(p);
    if b == 0 {
        return 0.0;
    }
    let pieces = m.div_ceil(b);
    let links = ctx.aligned(shape.root);
    let scatter = |sends_after: bool| {
        tree_down(
            0,
            p,
            &links,
            ctx,
            &DownCost {
                msg: &|v, n| ((v + n).min(pieces).saturating_sub(v) * b) as f64,
                local: 0.0,
                tail: &|_| 0.0,
                sends_after,
            },
        )
    };
    let b = b as f64;
    let whole = scatter(false) + ring(ctx, pieces, b, 0.0, shape.root);
    let s = Shift::of(ctx, 1, b, 0.0);
    let own = if pieces >= 2 {
        (pieces - 2) as f64 * s.w + s.last
    } else {
        0.0
    };
    m as f64 * ctx.model.copy_per_byte + whole.max(scatter(true) + own)
}

/// Bcast, two-level over N nodes: a binomial bcast among the leaders over
/// the network, then one inside each node over shared memory, which the
/// leader starts when done with the leaders' tree: [`tree_down`] over the
/// leaders with `tail(v) = D_intra(0, q_v)`, q_v the ranks on leader v's
/// node: `c·m + D_inter(0, N)`.
fn bcast_two_level(ctx: &Ctx, shape: &Shape) -> f64 {
    let m = shape.len as f64;
    let sizes = node_sizes(shape);
    let n = sizes.len();
    let root_node = node_of(shape, shape.root);
    let mut inner: std::collections::HashMap<usize, f64> = std::collections::HashMap::new();
    for &q in &sizes {
        inner
            .entry(q)
            .or_insert_with(|| bcast_tree(q, m, &vec![Link::Intra; ceil_log2(q) + 2], ctx));
    }
    let inter = vec![Link::Inter; ceil_log2(n) + 2];
    m * ctx.model.copy_per_byte
        + tree_down(
            0,
            n,
            &inter,
            ctx,
            &DownCost {
                msg: &|_, _| m,
                local: 0.0,
                tail: &|v| inner[&sizes[(v + root_node) % n]],
                sends_after: false,
            },
        )
}

/// The [`UpCost`] of a reduce of `m` bytes: every message `m` bytes,
/// combined in `ρ·m`, every rank starting with a copy `c·m`.
fn reduce_up(
    m: f64,
    model: &CostModel,
) -> (impl Fn(usize, usize) -> f64, impl Fn(usize) -> f64, f64) {
    let rho = model.reduce_per_byte;
    (move |_, _| m, move |_| rho * m, m * model.copy_per_byte)
}

/// Reduce, binomial (canonical) tree to the root: [`tree_up`] with
/// `msg = m`, `combine = ρ·m`, `base = c·m`; for P a power of two and root
/// 0, `c·m + d·(T(m) + ρ·m)`.
fn reduce_binomial(ctx: &Ctx, shape: &Shape) -> f64 {
    let m = shape.len as f64;
    let links = ctx.aligned(0);
    let (msg, combine, base) = reduce_up(m, ctx.model);
    up(
        ctx.p,
        shape.root,
        &links,
        ctx,
        &UpCost {
            msg: &msg,
            combine: &combine,
            base: &|_| base,
        },
    )
}

/// Pairwise reduce-scatter of blocks of b bytes among all ranks, of which
/// `blocks` are not empty: copy, P − 1 exchanges, then the local canonical
/// reduction of the P slots and the result's copy:
/// `2·c·b + E_pair(b, 0) + (P − 1)·ρ·b` when every block is there
/// ([`pairwise`]). Otherwise the ranks with empty blocks only send, all at
/// once, and rank 0 takes P − 1 messages through its ports (`n_l` on link
/// l), the first it needs (from the rank just above it) last:
/// `2·c·b + max_l (o_s + L + (b − 1)·G + (n_l − 1)·γ(b))_l +
/// Σ_r o_r(r→0) + (P' − 1)·o_s + (P − 1)·ρ·b`.
fn pairwise_rs(ctx: &Ctx, b: f64, blocks: usize) -> f64 {
    let p = ctx.p;
    let model = ctx.model;
    let local = 2.0 * model.copy_per_byte * b + (p - 1) as f64 * model.reduce_per_byte * b;
    if blocks >= p {
        return local + pairwise(ctx, b, 0.0);
    }
    let mut count = [0usize; 2];
    let mut o_r = 0.0;
    for r in 1..p {
        let link = ctx.link(r, 0);
        count[(link == Link::Inter) as usize] += 1;
        o_r += ctx.lp(link).o_r;
    }
    let mut last: f64 = 0.0;
    for (i, link) in [Link::Intra, Link::Inter].into_iter().enumerate() {
        if count[i] > 0 {
            let lp = ctx.lp(link);
            last = last.max(lp.o_s + lp.l + lp.wire(b) + (count[i] - 1) as f64 * lp.gap(b));
        }
    }
    local + last + o_r + blocks.saturating_sub(1) as f64 * ctx.lp(ctx.any()).o_s
}

/// Reduce, reduce-scatter + gather (blocks of `b = ⌈m/elem/P⌉·elem` bytes,
/// P' of them not empty): the pairwise reduce-scatter ([`pairwise_rs`]),
/// then a binomial gather to the root ([`tree_up`] with
/// `msg(v, n) = b·|[v, v + n) ∩ [0, P')|`, no message without blocks).
fn reduce_scatter_gather(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    let (b, blocks) = even_blocks(shape.len, shape.elem, p);
    let rs = pairwise_rs(ctx, b, blocks);
    let links = ctx.aligned(shape.root);
    let root = shape.root;
    // Relative rank v holds block (v + root) mod P.
    let bytes = move |v: usize, n: usize| -> f64 {
        (v..v + n).filter(|&u| (u + root) % p < blocks).count() as f64 * b
    };
    rs + up(
        p,
        0,
        &links,
        ctx,
        &UpCost {
            msg: &bytes,
            combine: &|_| 0.0,
            base: &|_| 0.0,
        },
    )
}

/// Reduce, two-level (aligned nodes of q ranks, N nodes): the canonical
/// reduce inside each node to its leader, then among the leaders to the
/// root: `U_intra(q) + U_inter(N) − c·m` ([`tree_up`] as for the binomial
/// reduce; the copy counted once).
fn reduce_two_level(ctx: &Ctx, shape: &Shape) -> f64 {
    let (n, q) = node_counts(shape);
    let m = shape.len as f64;
    let (msg, combine, base) = reduce_up(m, ctx.model);
    let cost = UpCost {
        msg: &msg,
        combine: &combine,
        base: &|_| base,
    };
    let cost0 = UpCost {
        msg: &msg,
        combine: &combine,
        base: &|_| 0.0,
    };
    let intra = vec![Link::Intra; ceil_log2(q) + 2];
    let inter = vec![Link::Inter; ceil_log2(n) + 2];
    let root_in_node = if shape.nodes.len() == ctx.p {
        shape.nodes[..shape.root]
            .iter()
            .filter(|&&x| x == shape.nodes[shape.root])
            .count()
    } else {
        0
    };
    let root_node = shape.root / q.max(1);
    let nodes = up(q, root_in_node, &intra, ctx, &cost).max(up(q, 0, &intra, ctx, &cost));
    nodes + up(n, root_node.min(n - 1), &inter, ctx, &cost0)
}

/// Allreduce, recursive doubling on the canonical tree:
/// `c·m + R(P)` with [`doubling`]'s `R` and `e = ρ·m` at every step; for P
/// a power of two `c·m + E[(0, m, ρ·m) × d]`.
fn allreduce_doubling(ctx: &Ctx, shape: &Shape) -> f64 {
    let m = shape.len as f64;
    let rho = ctx.model.reduce_per_byte * m;
    let links = ctx.aligned(0);
    let start = Clock::at(m * ctx.model.copy_per_byte);
    doubling(ctx.p, m, start, &links, ctx, &|_| rho).cpu
}

/// Allreduce, canonical reduce to rank 0 then binomial bcast from it:
/// `U(P) + D(P)` (the binomial reduce and bcast without the bcast's copy).
fn allreduce_reduce_bcast(ctx: &Ctx, shape: &Shape) -> f64 {
    let m = shape.len as f64;
    let reduce = Shape {
        root: 0,
        ..shape.clone()
    };
    let links = ctx.aligned(0);
    reduce_binomial(ctx, &reduce) + bcast_tree(ctx.p, m, &links, ctx)
}

/// Allreduce, Rabenseifner (P a power of two): recursive halving then
/// recursive doubling. The rank whose bits are all 1 holds `n_0 = m/elem`
/// elements, then `n_{k+1} = ⌈n_k/2⌉`; at halving step k it takes
/// `m_k = ⌈n_k/2⌉` elements and gives `⌊n_k/2⌋`, and doubling retraces the
/// steps. While both halves are non-empty a step is an exchange; the last
/// j steps, once a range is down to one element, are a binomial reduce
/// of that element over 2^j ranks and, in the doubling, a binomial bcast
/// of it ([`tree_up`], [`tree_down`]):
/// `c·m + E[(0, m_k, ρ·m_k) for k < d − j] + U_e(2^j) + D_e(2^j) +
/// E[(0, m_k, 0) for k = d − j − 1 … 0]`.
fn allreduce_rabenseifner(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    if !p.is_power_of_two() {
        return f64::INFINITY;
    }
    let elem = shape.elem.max(1);
    let links = ctx.aligned(0);
    let d = ceil_log2(p);
    let mut held = shape.len / elem;
    let mut sizes = Vec::with_capacity(d);
    while sizes.len() < d && held >= 2 {
        let taken = held.div_ceil(2);
        sizes.push((taken * elem) as f64);
        held = taken;
    }
    let swaps = sizes.len();
    let copy = shape.len as f64 * ctx.model.copy_per_byte;
    let rho = ctx.model.reduce_per_byte;
    let halving = (0..swaps).map(|k| Xr {
        after: rho * sizes[k],
        ..Xr::swap(sizes[k], links[k + 1])
    });
    let mut clock = rounds_from(ctx, Clock::at(copy), halving);
    if held == 1 {
        let group = 1 << (d - swaps);
        let e = elem as f64;
        let tree_links = &links[swaps..];
        clock.cpu += up(
            group,
            0,
            tree_links,
            ctx,
            &UpCost {
                msg: &|_, _| e,
                combine: &|_| rho * e,
                base: &|_| 0.0,
            },
        ) + bcast_tree(group, e, tree_links, ctx);
    }
    let doubling = (0..swaps).rev().map(|k| Xr::swap(sizes[k], links[k + 1]));
    rounds_from(ctx, clock, doubling).cpu
}

/// Allreduce, pairwise reduce-scatter + ring allgather (blocks
/// `b = ⌈m/elem/P⌉·elem`, P' not empty): [`pairwise_rs`] then [`ring`]:
/// `2·c·b + E_pair(b, 0) + (P − 1)·ρ·b + W(P', b, 0)`.
fn allreduce_rs_allgather(ctx: &Ctx, shape: &Shape) -> f64 {
    let (b, blocks) = even_blocks(shape.len, shape.elem, ctx.p);
    pairwise_rs(ctx, b, blocks) + ring(ctx, blocks, b, 0.0, 0)
}

/// Allreduce, ring (blocks `b = ⌈m/elem/P⌉·elem`, P' not empty): copy, a
/// combining ring pass, a plain one ([`ring`]):
/// `c·m + W(P', b, ρ·b) + W(P', b, 0)`.
fn allreduce_ring(ctx: &Ctx, shape: &Shape) -> f64 {
    let (b, blocks) = even_blocks(shape.len, shape.elem, ctx.p);
    let rho = ctx.model.reduce_per_byte * b;
    shape.len as f64 * ctx.model.copy_per_byte
        + ring(ctx, blocks, b, rho, 1)
        + ring(ctx, blocks, b, 0.0, 0)
}

/// Allreduce, two-level (aligned nodes of q ranks, N nodes): canonical
/// reduce in each node, recursive doubling among the leaders, binomial
/// bcast in each node: `U_intra(q) + R_inter(N) + D_intra(q)`.
fn allreduce_two_level(ctx: &Ctx, shape: &Shape) -> f64 {
    let (n, q) = node_counts(shape);
    let m = shape.len as f64;
    let (msg, combine, base) = reduce_up(m, ctx.model);
    let intra = vec![Link::Intra; ceil_log2(q) + 2];
    let inter = vec![Link::Inter; ceil_log2(n) + 2];
    let rho = ctx.model.reduce_per_byte * m;
    up(
        q,
        0,
        &intra,
        ctx,
        &UpCost {
            msg: &msg,
            combine: &combine,
            base: &|_| base,
        },
    ) + doubling(n, m, Clock::at(0.0), &inter, ctx, &|_| rho).cpu
        + bcast_tree(q, m, &intra, ctx)
}

/// Gather, binomial tree by relative rank (mean block b): copies, then
/// [`tree_up`] with `msg(s) = s·b` (a subtree's blocks in one message):
/// `c·b + U(P)`; for P a power of two the root takes `b, 2b, 4b, …`.
fn gather_binomial(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = mean(shape.counts);
    let links = ctx.aligned(shape.root);
    let copy = ctx.model.copy_per_byte * b;
    up(
        ctx.p,
        0,
        &links,
        ctx,
        &UpCost {
            msg: &|_, s| s as f64 * b,
            combine: &|_| 0.0,
            base: &|n| if n > 1 { copy } else { 0.0 },
        },
    )
}

/// Gather, linear (largest block b): P − 1 messages into the root at once.
/// Each port (shared memory, network) takes its `n_l` messages `γ_l(b)`
/// apart from `F_l = o_s + L + (b − 1)·G`; the root's CPU, free after its
/// copy `c·b`, takes them in arrival order, `o_r` each. With one link:
/// `max(max(c·b, F) + (P − 1)·o_r, F + (P − 2)·γ(b) + o_r)`.
fn gather_linear(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = largest(shape.counts);
    let mut arrivals: Vec<(f64, f64)> = Vec::with_capacity(ctx.p);
    let mut count = [0usize; 2];
    for r in (0..ctx.p).filter(|&r| r != shape.root) {
        let link = ctx.link(r, shape.root);
        let lp = ctx.lp(link);
        let k = &mut count[(link == Link::Inter) as usize];
        arrivals.push((lp.o_s + lp.l + lp.wire(b) + *k as f64 * lp.gap(b), lp.o_r));
        *k += 1;
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    arrivals
        .iter()
        .fold(ctx.model.copy_per_byte * b, |cpu, &(at, o_r)| {
            cpu.max(at) + o_r
        })
}

/// Scatter, binomial tree by relative rank (mean block b): [`tree_down`]
/// with `msg(v, n) = n·b` and each inner rank copying its block out
/// (`c·b`) before sending on: `c·b + D(0, P)`.
fn scatter_binomial(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = mean(shape.counts);
    let links = ctx.aligned(shape.root);
    let copy = ctx.model.copy_per_byte * b;
    copy + tree_down(
        0,
        ctx.p,
        &links,
        ctx,
        &DownCost {
            msg: &|_, n| n as f64 * b,
            local: copy,
            tail: &|_| 0.0,
            sends_after: false,
        },
    )
}

/// Scatter, linear (largest block b): the root's copy and P − 1 sends in
/// rank order, the j-th starting at `s_j = max(s_{j−1} + o_s, s_{j'} + γ(b))`
/// (j' the previous send on the same link), rank j done at `s_j + T(b)`.
/// With one link: `c·b + (P − 2)·I(b) + T(b)`.
fn scatter_linear(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = largest(shape.counts);
    let mut cpu = ctx.model.copy_per_byte * b;
    let mut tx_free = [f64::NEG_INFINITY; 2];
    let mut done: f64 = cpu;
    for r in (0..ctx.p).filter(|&r| r != shape.root) {
        let link = ctx.link(shape.root, r);
        let lp = ctx.lp(link);
        let k = (link == Link::Inter) as usize;
        let start = cpu.max(tx_free[k]);
        cpu = start + lp.o_s;
        tx_free[k] = start + lp.gap(b);
        done = done.max(start + lp.p2p(b));
    }
    done
}

/// Allgather, ring (largest block b): `c·b + E[(0, b, 0) × (P − 1)]`.
fn allgather_ring(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = largest(shape.counts);
    let blocks = shape.counts.iter().filter(|&&n| n > 0).count();
    ctx.model.copy_per_byte * b + ring(ctx, blocks, b, 0.0, 0)
}

/// Allgather, recursive doubling (P a power of two, mean block b): step k
/// swaps 2^k blocks: `c·b + E[(0, 2^k·b, 0) for k < d]`.
fn allgather_doubling(ctx: &Ctx, shape: &Shape) -> f64 {
    if !ctx.p.is_power_of_two() {
        return f64::INFINITY;
    }
    let b = mean(shape.counts);
    let links = ctx.aligned(0);
    ctx.model.copy_per_byte * b
        + exchanges(
            ctx,
            (0..ceil_log2(ctx.p)).map(|k| Xr::swap((1 << k) as f64 * b, links[k + 1])),
        )
}

/// Allgather, Bruck (mean block b): step k sends `n_k = min(2^k, P − 2^k)`
/// blocks; then the rotation copies everything:
/// `c·b + E[(0, n_k·b, 0) for k < d] + c·P·b`.
fn allgather_bruck(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    let b = mean(shape.counts);
    let link = ctx.any();
    let c = ctx.model.copy_per_byte;
    c * b
        + exchanges(
            ctx,
            (0..ceil_log2(p)).map(|k| Xr::swap((1usize << k).min(p - (1 << k)) as f64 * b, link)),
        )
        + c * p as f64 * b
}

/// Alltoall, pairwise (largest block b): `c·b + E_pair(b, 0)`
/// ([`pairwise`]).
fn alltoall_pairwise(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = largest(shape.send_counts).max(largest(shape.recv_counts));
    ctx.model.copy_per_byte * b + pairwise(ctx, b, 0.0)
}

/// Alltoall, Bruck (blocks of b bytes): the rotation, then per step k the
/// packing of the `n_k` blocks at positions with bit k set, their exchange
/// and their unpacking (before the next step's packing), then the final
/// placement: `2·c·P·b + E[(c·n_{k−1}·b + c·n_k·b, n_k·b, 0) for k < d] +
/// c·n_{d−1}·b`.
fn alltoall_bruck(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    let b = largest(shape.send_counts);
    if shape.send_counts.iter().any(|&n| n as f64 != b) {
        return f64::INFINITY;
    }
    let c = ctx.model.copy_per_byte;
    let link = ctx.any();
    let moved = |k: usize| -> f64 {
        let bit = 1usize << k;
        (0..p)
            .step_by(2 * bit)
            .map(|start| (start + 2 * bit).min(p) - (start + bit).min(p))
            .sum::<usize>() as f64
            * b
    };
    let d = ceil_log2(p);
    let rounds = (0..d).map(|k| Xr {
        local: c * moved(k) + if k > 0 { c * moved(k - 1) } else { 0.0 },
        ..Xr::swap(moved(k), link)
    });
    2.0 * c * (p as f64) * b + exchanges(ctx, rounds) + c * moved(d - 1)
}

/// Reduce-scatter, pairwise (largest block b): [`pairwise_rs`].
fn reduce_scatter_pairwise(ctx: &Ctx, shape: &Shape) -> f64 {
    let blocks = shape.counts.iter().filter(|&&n| n > 0).count();
    pairwise_rs(ctx, largest(shape.counts), blocks)
}

/// Reduce-scatter, recursive halving (P a power of two, mean block b):
/// the bit-reversal copy, d combining exchanges of `P/2^(k+1)` blocks, the
/// result's copy: `c·P·b + E[(0, 2^(d−k−1)·b, ρ·2^(d−k−1)·b) for k < d] + c·b`.
fn reduce_scatter_halving(ctx: &Ctx, shape: &Shape) -> f64 {
    let p = ctx.p;
    if !p.is_power_of_two() {
        return f64::INFINITY;
    }
    let b = mean(shape.counts);
    let links = ctx.aligned(0);
    let c = ctx.model.copy_per_byte;
    let rho = ctx.model.reduce_per_byte;
    let rounds = (0..ceil_log2(p)).map(|k| {
        let m = (p >> (k + 1)) as f64 * b;
        Xr {
            after: rho * m,
            ..Xr::swap(m, links[k + 1])
        }
    });
    c * p as f64 * b + exchanges(ctx, rounds) + c * b
}

/// Reduce-scatter, ring (largest block b): the copy of the input, a
/// combining ring pass ([`ring`]), the result's copy:
/// `c·P·b + W(P', b, ρ·b) + c·b`.
fn reduce_scatter_ring(ctx: &Ctx, shape: &Shape) -> f64 {
    let b = largest(shape.counts);
    let blocks = shape.counts.iter().filter(|&&n| n > 0).count();
    let c = ctx.model.copy_per_byte;
    c * shape.len as f64 + ring(ctx, blocks, b, ctx.model.reduce_per_byte * b, 1) + c * b
}

/// Scan and exscan, recursive doubling on the canonical tree. The prefix
/// of the last rank is the critical path: each step brings it, or a rank
/// that passes it on, its lower sibling's partial. The pruned exchange
/// sends each partial to one rank only (no fan-out); the last step is a
/// one-way message. For P a power of two the steps before the last are
/// exchanges that combine twice (block partial and prefix, `2ρ·m`); for
/// other P the last rank's chain runs through the lower power of two's
/// exchanges, combining once:
///
/// - P = 2: `c·m·[scan] + T(m) + ρ·m·[scan]`;
/// - P = 2^d: `c·m·(1 + [scan]) + E[(0, m, 2ρ·m) × (d − 1)] + T(m) + ρ·m`;
/// - otherwise: `2·c·m·[scan] + E[(0, m, ρ·m) × (d − 1)] + T(m)`
///
/// (`[scan]` is 1 for scan, 0 for exscan; `T` waits for the NIC after the
/// last exchange).
fn scan_doubling(ctx: &Ctx, shape: &Shape, inclusive: bool) -> f64 {
    let m = shape.len as f64;
    let rho = ctx.model.reduce_per_byte * m;
    let copy = ctx.model.copy_per_byte * m;
    let links = ctx.aligned(0);
    let p = ctx.p;
    let d = ceil_log2(p);
    let scan = if inclusive { 1.0 } else { 0.0 };
    let (local, per_step, last) = if p == 2 {
        (scan * copy, 0.0, scan * rho)
    } else if p.is_power_of_two() {
        ((1.0 + scan) * copy, 2.0 * rho, rho)
    } else {
        (2.0 * scan * copy, rho, 0.0)
    };
    let steps = (0..d).map(|k| Xr {
        after: if k + 1 == d { last } else { per_step },
        kind: if k + 1 == d {
            Kind::OneWay
        } else {
            Kind::Exchange
        },
        ..Xr::swap(m, links[k + 1])
    });
    rounds_from(ctx, Clock::at(local), steps).cpu
}
