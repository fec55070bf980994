//! Containers: whole BCL frames of several senders in one frame, between
//! two node daemons (`bcld`).
//!
//! A daemon that has several small frames for the same remote daemon in
//! one round (its clients' messages and acknowledgements) sends them as one
//! frame: a [`Header`](super::Header) with frame type [`CONTAINER_TYPE`],
//! the sending daemon's node as source and nothing else filled in, and a
//! payload laid out like a bundle's (see [`super::bundle`]): a record count,
//! then each record's length and bytes, each record one whole BCL frame
//! from its BCL header on.
//!
//! ```text
//!  +-----------------+---------------+-------------------+---------------+----
//!  | BCL header (64) | count (u16)   | len 0 (u16)       | frame 0 ...   | ...
//!  +-----------------+---------------+-------------------+---------------+----
//! ```
//!
//! A container with no records is a probe: it tells the receiver that a
//! daemon sends from that address, and with [`flags::PING`] asks it to
//! answer with a probe of its own. A daemon sends containers only to an
//! address it has heard a container from, so ports (which do not know the
//! type and drop it as [`super::FrameError::BadType`]) never get one. The
//! receiving daemon checks every inner frame as if it had come alone.

use super::{bundle, flags, Header, HEADER_LEN, VERSION};
use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

/// The frame-type code of a container (not a [`super::FrameType`]: ports
/// never accept it).
pub const CONTAINER_TYPE: u8 = 11;

/// Bytes a record adds to a container besides its frame.
pub const RECORD_OVERHEAD: usize = bundle::RECORD_HEADER_LEN;

/// Bytes of an empty container: the header and the record count.
pub const EMPTY_LEN: usize = HEADER_LEN + bundle::COUNT_LEN;

/// Writes a container's header and record count at the start of `buf`
/// (at least [`EMPTY_LEN`] bytes) for `count` records taking `records_len`
/// bytes after the count; returns the container's length. `ping` asks the
/// receiver to answer (probes only).
pub fn write_header(
    buf: &mut [u8],
    src_node: u32,
    count: u16,
    records_len: usize,
    ping: bool,
) -> usize {
    let payload = bundle::COUNT_LEN + records_len;
    let mut h = Header::new_zeroed();
    h.version = VERSION;
    h.frame_type = CONTAINER_TYPE;
    h.flags = if ping { flags::PING } else { 0 };
    h.src_node = U32::new(src_node);
    h.payload_len = U16::new(payload.min(usize::from(u16::MAX)) as u16);
    buf[..HEADER_LEN].copy_from_slice(h.as_bytes());
    buf[HEADER_LEN..EMPTY_LEN].copy_from_slice(&count.to_be_bytes());
    HEADER_LEN + payload
}

/// Appends one record (a whole frame) to a container's records.
pub fn push_record(records: &mut Vec<u8>, frame: &[u8]) {
    records.extend_from_slice(&(frame.len() as u16).to_be_bytes());
    records.extend_from_slice(frame);
}

/// A received container, checked: every record lies within the payload
/// and they fill it exactly.
#[derive(Clone, Debug)]
pub struct Container<'a> {
    /// The sending daemon's node.
    pub src_node: u32,
    /// Whether the sender asks for a probe in answer.
    pub ping: bool,
    payload: &'a [u8],
}

impl<'a> Container<'a> {
    /// The frames inside, in order.
    pub fn frames(&self) -> bundle::Records<'a> {
        bundle::records(self.payload)
    }

    /// Whether it is a probe (no frames).
    pub fn is_probe(&self) -> bool {
        self.payload.get(..bundle::COUNT_LEN) == Some(&[0, 0])
    }
}

/// Whether `frame` has the container type (nothing else is checked).
pub fn is_container(frame: &[u8]) -> bool {
    frame.get(1) == Some(&CONTAINER_TYPE)
}

/// Checks a received container: this version, the container type, a
/// payload inside the frame whose records fill it exactly. Anything else
/// is `None`, never a panic.
pub fn parse(frame: &[u8]) -> Option<Container<'_>> {
    let (h, rest) = Header::ref_from_prefix(frame).ok()?;
    if h.version != VERSION || h.frame_type != CONTAINER_TYPE || h.flags & !flags::PING != 0 {
        return None;
    }
    let payload = rest.get(..usize::from(h.payload_len.get()))?;
    let count = u16::from_be_bytes(payload.get(..bundle::COUNT_LEN)?.try_into().ok()?);
    if count == 0 {
        return (payload.len() == bundle::COUNT_LEN).then_some(Container {
            src_node: h.src_node.get(),
            ping: h.flags & flags::PING != 0,
            payload,
        });
    }
    bundle::validate(payload)?;
    Some(Container {
        src_node: h.src_node.get(),
        ping: h.flags & flags::PING != 0,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn container(node: u32, frames: &[&[u8]], ping: bool) -> Vec<u8> {
        let mut records = Vec::new();
        for f in frames {
            push_record(&mut records, f);
        }
        let mut buf = vec![0u8; EMPTY_LEN + records.len()];
        let len = write_header(&mut buf, node, frames.len() as u16, records.len(), ping);
        buf[EMPTY_LEN..].copy_from_slice(&records);
        assert_eq!(len, buf.len());
        buf
    }

    #[test]
    fn frames_come_out_as_they_went_in() {
        let a = [1u8; 70];
        let b = [2u8; 64];
        let c = container(7, &[&a, &b], false);
        let got = parse(&c).unwrap();
        assert_eq!(got.src_node, 7);
        assert!(!got.ping && !got.is_probe());
        let frames: Vec<&[u8]> = got.frames().collect();
        assert_eq!(frames, vec![&a[..], &b[..]]);
        // Ports do not know the type.
        let port = super::super::Expect {
            job: crate::addr::JobKey(0),
            local: crate::addr::ProcessAddr::new(0, 0),
            require_crc: false,
        };
        assert_eq!(
            super::super::parse(&c, &port).unwrap_err(),
            super::super::FrameError::BadType(CONTAINER_TYPE)
        );
    }

    #[test]
    fn a_probe_has_no_frames() {
        let p = container(3, &[], true);
        assert_eq!(p.len(), EMPTY_LEN);
        let got = parse(&p).unwrap();
        assert!(got.ping && got.is_probe());
        assert_eq!(got.frames().count(), 0);
    }

    #[test]
    fn damaged_containers_are_refused() {
        let good = container(1, &[&[9u8; 80], &[8u8; 66]], false);
        // A record running past the payload, a payload past the frame, a
        // count larger than the records, another type, unknown flags.
        let mut long_record = good.clone();
        long_record[EMPTY_LEN] = 0xff;
        let mut count = good.clone();
        count[HEADER_LEN + 1] = 3;
        let mut kind = good.clone();
        kind[1] = 1;
        let mut flag = good.clone();
        flag[3] = flags::ACK;
        for bad in [
            &long_record,
            &count,
            &kind,
            &flag,
            &good[..good.len() - 1].to_vec(),
        ] {
            assert!(parse(bad).is_none());
        }
        assert!(parse(&good).is_some());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Some(c) = parse(&bytes) {
                for f in c.frames() {
                    prop_assert!(f.len() <= bytes.len());
                }
            }
        }
    }
}
