//! Agree-and-shrink: the surviving members of a communicator agree on who
//! failed and form a communicator of themselves (in the spirit of MPI's
//! fault-tolerance proposal, `MPI_Comm_shrink`).
//!
//! The agreement is flooding consensus with a failure detector (Guerraoui
//! and Rodrigues, *Reliable Distributed Programming*, algorithm "flooding
//! consensus"): the detector is the messenger's knowledge of failed peers —
//! a send that gave up, a peer its method saw die, or one liveness declared
//! dead; every member is watched as critical while the agreement runs, so a
//! silent one is noticed within the liveness bound.
//!
//! Each member proposes the members it knows failed and the communicator id
//! it would use next. In round r it sends its merged proposal to every
//! member it does not know failed, and waits for round r's proposal from
//! each of them (or its failure). If it heard from the same members in
//! round r as in round r − 1, nobody failed in between, so every member
//! still running has merged the same proposals: it decides the merged set,
//! tells the others (`DECIDED`) and returns; otherwise it goes to round r + 1.
//! A member that gets `DECIDED` from a member not known failed adopts it and
//! passes it on. Everyone who returns returns the same set, so the new
//! communicators agree. A member that fails after the decision is in the new
//! communicator; its later operations report it as any failure.
//!
//! Messages travel on the communicator's collective context with tags whose
//! top bit is set (collectives use their sequence number), the shrink's
//! number on this communicator and the round, so two shrinks never mix.

use super::comm::Comm;
use super::error::CollError;
use super::messenger::{RecvId, SendId, SHRINK_TAG};
use super::runtime::Coll;
use std::sync::Arc;

/// What a member proposes or decides: failed members and the next id.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Proposal {
    next_id: u32,
    failed: Vec<bool>,
}

impl Proposal {
    fn encode(&self) -> Vec<u8> {
        let mut v = self.next_id.to_le_bytes().to_vec();
        v.extend(self.failed.iter().map(|&f| u8::from(f)));
        v
    }

    /// A proposal of a communicator of `n`, or `None` if the bytes are not
    /// one (a member that disagrees about the communicator).
    fn decode(bytes: &[u8], n: usize) -> Option<Proposal> {
        if bytes.len() != 4 + n {
            return None;
        }
        let next_id = u32::from_le_bytes(bytes[..4].try_into().ok()?);
        Some(Proposal {
            next_id,
            failed: bytes[4..].iter().map(|&b| b != 0).collect(),
        })
    }

    fn merge(&mut self, other: &Proposal) {
        self.next_id = self.next_id.max(other.next_id);
        for (a, b) in self.failed.iter_mut().zip(&other.failed) {
            *a |= *b;
        }
    }
}

/// The members other than `me` not known failed.
fn live(known: &Proposal, me: usize) -> Vec<usize> {
    (0..known.failed.len())
        .filter(|&r| r != me && !known.failed[r])
        .collect()
}

impl Coll {
    /// The surviving members of `comm` agree on which members failed and
    /// form a new communicator of the others, ranked in their order in
    /// `comm` (collective over the survivors; see the module documentation
    /// for how the agreement survives failures during it). Fails if this
    /// process was judged failed by the others, or with
    /// [`CollError::Timeout`] after [`Coll::set_timeout`]'s timeout.
    pub fn shrink(&mut self, comm: &Comm) -> Result<Comm, CollError> {
        let me = comm.rank();
        let instance = self.next_shrink(comm.id());
        let members: Vec<_> = comm.members().to_vec();
        let mut known = Proposal {
            next_id: self.next_id(),
            failed: members
                .iter()
                .enumerate()
                .map(|(r, &a)| r != me && self.messenger().peer_failure(a).is_some())
                .collect(),
        };
        for (r, &a) in members.iter().enumerate() {
            if r != me {
                let _ = self.messenger().endpoint_mut().watch_peer(a, true);
            }
        }
        let mut sends = Vec::new();
        let agreed = self.agree(comm, instance, &mut known, &mut sends);
        // The decision (and the last proposals) on their way before return.
        let _ = self.wait_for(|c| {
            sends.retain(|&s| c.messenger().take_send(s).is_none());
            sends.is_empty()
        });
        // Proposals of later rounds from members slower to decide are not
        // kept waiting for a receive that will never come.
        self.messenger().shrink_done(comm.coll_context(), instance);
        // Unmarked again, unless a posted receive still waits for it.
        for (r, &a) in members.iter().enumerate() {
            if r != me && !self.messenger().awaits(a) {
                let _ = self.messenger().endpoint_mut().watch_peer(a, false);
            }
        }
        let decided = agreed?;
        if decided.failed[me] {
            return Err(CollError::Invalid(
                "the other members agreed this process failed: it is not in the shrunk communicator"
                    .into(),
            ));
        }
        let survivors: Vec<_> = members
            .iter()
            .zip(&decided.failed)
            .filter(|(_, &f)| !f)
            .map(|(&a, _)| a)
            .collect();
        let rank = survivors
            .iter()
            .position(|&a| a == members[me])
            .expect("not failed, so a survivor");
        self.set_next_id(decided.next_id.wrapping_add(1));
        Ok(Comm::new(decided.next_id, rank, Arc::from(survivors)))
    }

    /// The rounds of the agreement; returns the decision.
    fn agree(
        &mut self,
        comm: &Comm,
        instance: u32,
        known: &mut Proposal,
        sends: &mut Vec<SendId>,
    ) -> Result<Proposal, CollError> {
        let n = comm.size();
        let me = comm.rank();
        let members = comm.members().to_vec();
        let ctx = comm.coll_context();
        let tag = |round: u32| SHRINK_TAG | (u64::from(instance) << 32) | u64::from(round);
        const DECIDED: u32 = 0;
        // DECIDED from each member, posted once.
        let mut decided_rx: Vec<Option<RecvId>> = vec![None; n];
        for r in live(known, me) {
            match self.messenger().irecv(members[r], ctx, tag(DECIDED)) {
                Ok(id) => decided_rx[r] = Some(id),
                Err(_) => known.failed[r] = true,
            }
        }
        let mut heard_before = vec![true; n];
        let mut round = 1u32;
        let mut rx: Vec<Option<RecvId>> = vec![None; n];
        let outcome = loop {
            let bytes = known.encode();
            for r in live(known, me) {
                match self.messenger().isend(members[r], ctx, tag(round), &bytes) {
                    Ok(s) => sends.push(s),
                    Err(_) => known.failed[r] = true,
                }
            }
            for r in live(known, me) {
                match self.messenger().irecv(members[r], ctx, tag(round)) {
                    Ok(id) => rx[r] = Some(id),
                    Err(_) => known.failed[r] = true,
                }
            }
            let mut heard = vec![false; n];
            heard[me] = true;
            let mut decision = None;
            let mut bad = None;
            let waited = self.wait_for(|c| {
                for r in 0..n {
                    if let Some(id) = decided_rx[r] {
                        match c.messenger().take_recv(id) {
                            None => {}
                            Some(Ok(b)) => {
                                decided_rx[r] = None;
                                if known.failed[r] {
                                    continue;
                                }
                                match Proposal::decode(&b, n) {
                                    Some(p) => decision = Some(p),
                                    None => bad = Some(r),
                                }
                            }
                            Some(Err(_)) => {
                                decided_rx[r] = None;
                                known.failed[r] = true;
                            }
                        }
                    }
                    if let Some(id) = rx[r] {
                        match c.messenger().take_recv(id) {
                            None => {}
                            Some(Ok(b)) => {
                                rx[r] = None;
                                match Proposal::decode(&b, n) {
                                    Some(p) => {
                                        heard[r] = true;
                                        known.merge(&p);
                                    }
                                    None => bad = Some(r),
                                }
                            }
                            Some(Err(_)) => {
                                rx[r] = None;
                                known.failed[r] = true;
                            }
                        }
                    }
                }
                decision.is_some() || bad.is_some() || rx.iter().all(Option::is_none)
            });
            if let Err(e) = waited {
                break Err(e);
            }
            if let Some(r) = bad {
                break Err(CollError::Invalid(format!(
                    "rank {r} sent a shrink message for a communicator of another size"
                )));
            }
            if let Some(d) = decision {
                break Ok(d);
            }
            // A member we heard from may still have failed since; the
            // proposals merged say so.
            if heard == heard_before {
                break Ok(known.clone());
            }
            heard_before = heard;
            round += 1;
        };
        for id in rx.into_iter().chain(decided_rx).flatten() {
            self.messenger().cancel_recv(id);
        }
        let decided = outcome?;
        let bytes = decided.encode();
        for r in (0..n).filter(|&r| r != me && !decided.failed[r] && !known.failed[r]) {
            if let Ok(s) = self
                .messenger()
                .isend(members[r], ctx, tag(DECIDED), &bytes)
            {
                sends.push(s);
            }
        }
        Ok(decided)
    }
}
