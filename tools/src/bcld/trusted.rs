//! The trusted path's checks: what the daemon lets out of a client's ring
//! onto the NIC, and to which client a frame from the NIC goes.
//!
//! Both read only the fixed BCL header, in place, and trust nothing in it
//! before checking it; any bytes may be given and nothing panics. The
//! receiving core validates the whole frame (CRC, bundle records) again:
//! the daemon checks exactly what identity depends on.

use bcl::core::wire::{Header, HEADER_LEN, VERSION};
use bcl::core::{JobKey, ProcessAddr};
use zerocopy::FromBytes;

/// Why a frame from a client's ring was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Not a BCL frame: too short for a link and a header, another
    /// version, a payload longer than the frame, longer than the MTU.
    Malformed,
    /// The header's source is not the client's own process address.
    ForgedSource,
    /// The header's job key is not the client's job.
    ForeignJob,
    /// The link is not one the daemon has.
    UnknownLink,
}

impl Refusal {
    /// The counter's name.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Malformed => "refused_malformed",
            Refusal::ForgedSource => "refused_forged_source",
            Refusal::ForeignJob => "refused_foreign_job",
            Refusal::UnknownLink => "refused_unknown_link",
        }
    }
}

/// A frame a client may send: the link it asked for and the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing<'a> {
    /// The link number before the frame.
    pub link: u32,
    /// The frame, from its BCL header.
    pub frame: &'a [u8],
    /// The destination in the header.
    pub dst: ProcessAddr,
}

/// The header at the start of `frame` if it is a whole BCL frame of this
/// version: at least a header long, its payload inside `frame`.
fn header(frame: &[u8]) -> Option<&Header> {
    let (h, rest) = Header::ref_from_prefix(frame).ok()?;
    (h.version == VERSION && usize::from(h.payload_len.get()) <= rest.len()).then_some(h)
}

/// Checks a message from the ring of the client `client` of job `job`:
/// a 4-byte link (little-endian) and a frame of at most `mtu` bytes whose
/// header names the client as its source and the client's job.
pub fn check_outgoing(
    msg: &[u8],
    job: JobKey,
    client: ProcessAddr,
    mtu: usize,
) -> Result<Outgoing<'_>, Refusal> {
    let (link, frame) = msg.split_first_chunk::<4>().ok_or(Refusal::Malformed)?;
    if frame.len() > mtu || frame.len() < HEADER_LEN {
        return Err(Refusal::Malformed);
    }
    let h = header(frame).ok_or(Refusal::Malformed)?;
    if h.job.get() != job.0 {
        return Err(Refusal::ForeignJob);
    }
    if h.src_node.get() != client.node.0 || h.src_port.get() != client.port.0 {
        return Err(Refusal::ForgedSource);
    }
    Ok(Outgoing {
        link: u32::from_le_bytes(*link),
        frame,
        dst: ProcessAddr::new(h.dst_node.get(), h.dst_port.get()),
    })
}

/// Why a frame from the NIC went to no client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Undeliverable {
    /// Not a BCL frame of this version, or cut short.
    Malformed,
    /// Addressed to another node.
    OtherNode,
    /// No client of that job at that port (another job's port, a client
    /// that left).
    NoClient,
    /// The client's ring was full (the sender's protocol resends).
    RingFull,
}

impl Undeliverable {
    /// The counter's name.
    pub fn name(self) -> &'static str {
        match self {
            Undeliverable::Malformed => "rx_malformed",
            Undeliverable::OtherNode => "rx_other_node",
            Undeliverable::NoClient => "rx_no_client",
            Undeliverable::RingFull => "rx_ring_full",
        }
    }
}

/// The job and port a received frame is for, if it is a BCL frame for
/// node `node`.
pub fn destination(frame: &[u8], node: u32) -> Result<(JobKey, u16), Undeliverable> {
    let h = header(frame).ok_or(Undeliverable::Malformed)?;
    if h.dst_node.get() != node {
        return Err(Undeliverable::OtherNode);
    }
    Ok((JobKey(h.job.get()), h.dst_port.get()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcl::core::wire::{encode, FrameType, HeaderFields};

    const JOB: JobKey = JobKey(7);
    const ME: ProcessAddr = ProcessAddr::new(1, 5);
    const PEER: ProcessAddr = ProcessAddr::new(2, 9);

    fn frame(job: JobKey, src: ProcessAddr, dst: ProcessAddr, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_LEN + payload.len()];
        let f = HeaderFields {
            kind: Some(FrameType::Data),
            job,
            src,
            dst,
            msg_len: payload.len() as u32,
            ..HeaderFields::default()
        };
        let n = encode(&mut buf, &f, payload, false).expect("fits");
        buf.truncate(n);
        buf
    }

    fn msg(link: u32, frame: &[u8]) -> Vec<u8> {
        let mut m = link.to_le_bytes().to_vec();
        m.extend_from_slice(frame);
        m
    }

    #[test]
    fn a_frame_in_the_clients_own_name_passes_with_its_link_and_destination() {
        let f = frame(JOB, ME, PEER, b"hello");
        let m = msg(3, &f);
        let out = check_outgoing(&m, JOB, ME, 1500).unwrap();
        assert_eq!(out.link, 3);
        assert_eq!(out.frame, &f[..]);
        assert_eq!(out.dst, PEER);
    }

    #[test]
    fn forged_sources_foreign_jobs_and_garbage_are_refused_by_name() {
        let other_port = ProcessAddr::new(1, 6);
        let other_node = ProcessAddr::new(3, 5);
        for src in [other_port, other_node] {
            let m = msg(0, &frame(JOB, src, PEER, b"x"));
            assert_eq!(
                check_outgoing(&m, JOB, ME, 1500),
                Err(Refusal::ForgedSource)
            );
        }
        let m = msg(0, &frame(JobKey(8), ME, PEER, b"x"));
        assert_eq!(check_outgoing(&m, JOB, ME, 1500), Err(Refusal::ForeignJob));
        let good = frame(JOB, ME, PEER, &[0; 100]);
        for bad in [
            vec![],
            vec![1, 2, 3],
            msg(0, &good[..HEADER_LEN - 1]),
            // The payload length says more than the frame holds.
            msg(0, &good[..good.len() - 1]),
            // Longer than the MTU.
            msg(0, &good),
        ] {
            let mtu = if bad.len() == good.len() + 4 {
                64
            } else {
                1500
            };
            assert_eq!(check_outgoing(&bad, JOB, ME, mtu), Err(Refusal::Malformed));
        }
        let mut wrong_version = good.clone();
        wrong_version[0] = VERSION + 1;
        assert_eq!(
            check_outgoing(&msg(0, &wrong_version), JOB, ME, 1500),
            Err(Refusal::Malformed)
        );
    }

    #[test]
    fn received_frames_go_to_the_job_and_port_in_their_header() {
        let f = frame(JOB, PEER, ME, b"data");
        assert_eq!(destination(&f, 1), Ok((JOB, 5)));
        assert_eq!(destination(&f, 2), Err(Undeliverable::OtherNode));
        assert_eq!(destination(&f[..10], 1), Err(Undeliverable::Malformed));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(0u8..=255, 0..200)) {
            let _ = check_outgoing(&bytes, JOB, ME, 150);
            let _ = destination(&bytes, 1);
        }
    }
}
