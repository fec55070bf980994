//! Helpers of the shared-memory whole-stack tests: job keys, endpoints,
//! descriptors, self-checking payloads, and the check that a peer's death
//! fails a send.

#![allow(dead_code)]

use bcl::core::ChannelId;
use bcl::shm::ShmMethod;
use bcl::{ChannelEvent, Endpoint, JobKey, ProcessAddr, ProgressMode, SendHandle};
use std::time::Duration;

/// How long any one wait of these tests may take.
pub const T: Duration = Duration::from_secs(20);
/// The test process in multi-process tests.
pub const PARENT: ProcessAddr = ProcessAddr::new(1, 1);
/// The peer process in multi-process tests.
pub const CHILD: ProcessAddr = ProcessAddr::new(1, 2);

/// A job key unique to this test run, so concurrent runs never meet.
pub fn job(tag: u32) -> JobKey {
    JobKey(std::process::id() << 8 ^ tag)
}

/// An endpoint whose only method is shared memory.
pub fn endpoint(job: JobKey, addr: ProcessAddr, mode: ProgressMode) -> Endpoint {
    Endpoint::builder(addr, job)
        .method(Box::new(ShmMethod::open(job, addr).unwrap()))
        .mode(mode)
        .build()
        .unwrap()
}

/// The descriptor of `addr` on this node (what its endpoint would publish).
pub fn shm_descriptor(addr: ProcessAddr) -> bcl::Descriptor {
    bcl::Descriptor::new("shm", format!("{addr}@{}", bcl::shm::node_identity()))
}

/// `len` bytes that differ with `seed`.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect()
}

/// Waits for send `h` to fail because `peer` is unreachable (it was
/// killed); returns the buffer the failure gave back.
pub fn expect_send_failed_peer_gone(
    ep: &mut Endpoint,
    h: SendHandle,
    peer: ProcessAddr,
) -> Vec<u8> {
    let ev = ep
        .wait_channel_event(
            |e| matches!(e, ChannelEvent::SendFailed { handle, .. } if *handle == h),
            T,
        )
        .expect("an error event, not a hang");
    let ChannelEvent::SendFailed { error, buffer, .. } = ev else {
        unreachable!()
    };
    assert!(
        matches!(error, bcl::TransferError::PeerUnreachable(a) if a == peer),
        "{error:?}"
    );
    buffer
}

/// Puts 3 MiB at offset 1 MiB of the region `to` exposes on `rma` (key 77)
/// and reads it back; checks the two agree and returns what was put.
pub fn put_then_get(ep: &mut Endpoint, to: ProcessAddr, rma: ChannelId) -> Vec<u8> {
    let put = pattern(3 << 20, 5);
    ep.put_blocking(to, rma, 77, 1 << 20, put.clone(), T)
        .unwrap();
    let got = ep
        .get_blocking(to, rma, 77, 1 << 20, vec![0; 3 << 20], T)
        .unwrap();
    assert!(got == put, "get reads what put wrote");
    put
}
