//! Memory of pending remote service requests: thousands in flight from one
//! endpoint, each costing at most 128 bytes of heap beyond its payload
//! (counted by a global allocator that keeps a tally), on the simulated
//! fabric. A test file of its own: the allocator counts the whole process.

use bcl::coll::messenger::Messenger;
use bcl::rsr::Rsr;
use bcl::sim::FaultProfile;
use bcl::SimCluster;
use std::alloc::System;

#[global_allocator]
static HEAP: cap::Cap<System> = cap::Cap::new(System, usize::MAX);

/// Requests in flight at once.
const IN_FLIGHT: usize = 4000;
/// Payload of each.
const PAYLOAD: usize = 16;

#[test]
fn thousands_of_pending_requests_cost_little_beyond_their_payloads() {
    let mut cluster = SimCluster::new(2, FaultProfile::perfect(), 1, 1500, |_, cfg| {
        // Room for every request in the port's send queue.
        cfg.max_outstanding_sends = 4 * IN_FLIGHT;
    })
    .unwrap();
    let eps = std::mem::take(&mut cluster.endpoints);
    let mut rsrs: Vec<Rsr> = eps
        .into_iter()
        .map(|ep| Rsr::new(Messenger::new(ep)))
        .collect();
    let b = SimCluster::addr(1);
    let d = rsrs[1].messenger().endpoint().descriptors()[0].clone();
    rsrs[0].messenger().endpoint_mut().add_peer(b, d);
    // Warm up: the first requests size the tables and pools once.
    for _ in 0..IN_FLIGHT {
        rsrs[0].rsr(b, 1, &[7; PAYLOAD]).unwrap();
    }
    // The peer never runs progress: every request stays pending. The
    // figure is the heap's growth for a second batch of as many (the
    // port's message slots are a fixed pool, sized by
    // max_outstanding_sends, and not part of it).
    let before = HEAP.allocated();
    for _ in 0..IN_FLIGHT {
        rsrs[0].rsr(b, 1, &[7; PAYLOAD]).unwrap();
    }
    let grown = HEAP.allocated().saturating_sub(before);
    let per_request = grown as f64 / IN_FLIGHT as f64 - PAYLOAD as f64;
    println!(
        "{IN_FLIGHT} more pending requests: {grown} B, {per_request:.1} B each beyond the payload"
    );
    assert_eq!(rsrs[0].pending(), 2 * IN_FLIGHT);
    assert!(
        per_request <= 128.0,
        "{per_request:.1} B per pending request beyond its payload"
    );
}
