//! The receive filter every Ethernet method runs on each received frame,
//! and the counters of what it dropped.
//!
//! A frame is shown to the core only if it is at least a header long, has
//! our EtherType, is addressed to our MAC or to a group address (broadcast
//! or multicast: the kernel or the NIC has already decided that we listen
//! to it), comes from a unicast source, and is not one of our own frames
//! coming back. Otherwise it is dropped and the reason counted: the
//! [`MethodCounters`] split is *foreign* (not
//! for us: another EtherType, another station, our own frame) and
//! *malformed* (a runt, a frame cut short, a multicast source).

use crate::frame::{Frame, HEADER_LEN};
use crate::mac::Mac;
use bcl_core::MethodCounters;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a received frame was not shown to the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Discard {
    /// Shorter than an Ethernet header (malformed).
    Runt,
    /// Another EtherType (foreign).
    OtherEtherType,
    /// Addressed to another station's unicast MAC (foreign).
    NotForUs,
    /// Sent by us: our own MAC as the source (foreign).
    OwnFrame,
    /// A multicast source MAC, which no station can have (malformed).
    MulticastSource,
}

impl Discard {
    /// Whether the frame was well formed but not for us (counted as
    /// `rx_foreign`; the others are `rx_malformed`).
    pub const fn is_foreign(self) -> bool {
        matches!(
            self,
            Discard::OtherEtherType | Discard::NotForUs | Discard::OwnFrame
        )
    }
}

/// A frame the filter let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted<'a> {
    /// Who sent it.
    pub src: Mac,
    /// The Ethernet payload: the BCL frame (with any padding the link
    /// added).
    pub payload: &'a [u8],
}

/// The receive filter of one endpoint: its own MAC and its EtherType.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxFilter {
    own: Mac,
    ethertype: u16,
}

impl RxFilter {
    /// The filter of an endpoint with MAC `own` that speaks `ethertype`.
    pub const fn new(own: Mac, ethertype: u16) -> Self {
        RxFilter { own, ethertype }
    }

    /// Our MAC.
    pub const fn mac(&self) -> Mac {
        self.own
    }

    /// Our EtherType.
    pub const fn ethertype(&self) -> u16 {
        self.ethertype
    }

    /// The payload and source of `frame` if it is for us, else why not.
    /// Any bytes may be given; nothing is read outside them.
    #[inline]
    pub fn check<'a>(&self, frame: &'a [u8]) -> Result<Accepted<'a>, Discard> {
        // The header as a fixed-size array: the view's accessors then need
        // no bounds checks, and the payload is the rest.
        let (hdr, payload) = frame
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(Discard::Runt)?;
        let f = Frame::from(hdr);
        if f.ethertype() != self.ethertype {
            return Err(Discard::OtherEtherType);
        }
        let dst = f.dst_addr();
        if dst != self.own && dst.is_unicast() {
            return Err(Discard::NotForUs);
        }
        let src = f.src_addr();
        if src.is_multicast() {
            return Err(Discard::MulticastSource);
        }
        if src == self.own {
            return Err(Discard::OwnFrame);
        }
        Ok(Accepted { src, payload })
    }
}

/// What an Ethernet method's receive path counted, in one shape for all
/// of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Frames shown to the core.
    pub accepted: u64,
    /// [`Discard::Runt`] frames.
    pub runt: u64,
    /// [`Discard::OtherEtherType`] frames.
    pub other_ethertype: u64,
    /// [`Discard::NotForUs`] frames.
    pub not_for_us: u64,
    /// [`Discard::OwnFrame`] frames.
    pub own_frame: u64,
    /// [`Discard::MulticastSource`] frames.
    pub multicast_source: u64,
    /// Frames the ring or the device reported cut short, or whose length
    /// did not fit the receive buffer (malformed; counted by the driver).
    pub truncated: u64,
    /// Frames from a new source while the peer table was full (see
    /// [`crate::MAX_PEERS`]).
    pub link_limit: u64,
}

impl RxStats {
    /// Counts one dropped frame.
    #[inline]
    pub fn count(&mut self, why: Discard) {
        let c = match why {
            Discard::Runt => &mut self.runt,
            Discard::OtherEtherType => &mut self.other_ethertype,
            Discard::NotForUs => &mut self.not_for_us,
            Discard::OwnFrame => &mut self.own_frame,
            Discard::MulticastSource => &mut self.multicast_source,
        };
        *c += 1;
    }

    /// Frames dropped as not for us (`MethodCounters::rx_foreign`).
    pub fn foreign(&self) -> u64 {
        self.other_ethertype + self.not_for_us + self.own_frame
    }

    /// Frames dropped as malformed (`MethodCounters::rx_malformed`).
    pub fn malformed(&self) -> u64 {
        self.runt + self.truncated + self.multicast_source
    }

    /// The method counters of an Ethernet method with these receive
    /// counts and `tx_frames` / `tx_errors` sent / lost; `detail` has one
    /// entry per drop reason and the link limit, after which a driver adds
    /// its own.
    pub fn method_counters(&self, tx_frames: u64, tx_errors: u64) -> MethodCounters {
        MethodCounters {
            rx_frames: self.accepted,
            tx_frames,
            rx_foreign: self.foreign(),
            rx_malformed: self.malformed(),
            tx_errors,
            detail: vec![
                ("rx_runt", self.runt),
                ("rx_truncated", self.truncated),
                ("rx_other_ethertype", self.other_ethertype),
                ("rx_not_for_us", self.not_for_us),
                ("rx_own_frame", self.own_frame),
                ("rx_multicast_source", self.multicast_source),
                ("rx_link_limit", self.link_limit),
            ],
        }
    }
}

/// [`RxStats`] readable from another thread (a method's counters after it
/// was moved into an endpoint). The receive path keeps a plain [`RxStats`]
/// and [`publish`](Self::publish)es it after a burst that took frames.
#[derive(Debug, Default)]
pub struct SharedRxStats {
    v: [AtomicU64; 8],
}

impl SharedRxStats {
    /// Makes `s` the current values.
    pub fn publish(&self, s: &RxStats) {
        let vals = [
            s.accepted,
            s.runt,
            s.other_ethertype,
            s.not_for_us,
            s.own_frame,
            s.multicast_source,
            s.truncated,
            s.link_limit,
        ];
        for (a, v) in self.v.iter().zip(vals) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// The values last published.
    pub fn snapshot(&self) -> RxStats {
        let r = |i: usize| self.v[i].load(Ordering::Relaxed);
        RxStats {
            accepted: r(0),
            runt: r(1),
            other_ethertype: r(2),
            not_for_us: r(3),
            own_frame: r(4),
            multicast_source: r(5),
            truncated: r(6),
            link_limit: r(7),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::header;
    use proptest::prelude::*;

    const US: Mac = Mac([2, 0, 0, 0, 0, 0xb]);
    const THEM: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
    const ET: u16 = 0x88b5;

    fn frame(dst: Mac, src: Mac, et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = header(dst, src, et).to_vec();
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn frames_for_us_pass_with_their_source_and_payload() {
        let f = RxFilter::new(US, ET);
        let b = frame(US, THEM, ET, b"bcl");
        assert_eq!(
            f.check(&b),
            Ok(Accepted {
                src: THEM,
                payload: b"bcl"
            })
        );
        // Broadcast and multicast destinations pass (the kernel or NIC
        // already decided we listen); an empty payload is still a frame.
        let b = frame(Mac::BROADCAST, THEM, ET, b"");
        assert_eq!(f.check(&b).unwrap().payload, b"");
        let b = frame(Mac([1, 0, 0x5e, 0, 0, 1]), THEM, ET, b"m");
        assert_eq!(f.check(&b).unwrap().payload, b"m");
    }

    #[test]
    fn each_drop_reason_is_found_and_classified() {
        let f = RxFilter::new(US, ET);
        let cases = [
            (vec![0u8; 13], Discard::Runt),
            (vec![], Discard::Runt),
            (frame(US, THEM, 0x0800, b"ip"), Discard::OtherEtherType),
            (
                frame(Mac([2, 0, 0, 0, 0, 9]), THEM, ET, b""),
                Discard::NotForUs,
            ),
            (
                frame(US, Mac([3, 0, 0, 0, 0, 1]), ET, b""),
                Discard::MulticastSource,
            ),
            (frame(THEM, US, ET, b"ours"), Discard::NotForUs),
            (frame(Mac::BROADCAST, US, ET, b"ours"), Discard::OwnFrame),
        ];
        let mut s = RxStats::default();
        for (bytes, why) in &cases {
            assert_eq!(f.check(bytes), Err(*why), "{bytes:?}");
            s.count(*why);
        }
        s.truncated += 1;
        assert_eq!((s.runt, s.other_ethertype, s.not_for_us), (2, 1, 2));
        assert_eq!((s.own_frame, s.multicast_source), (1, 1));
        assert_eq!(s.foreign(), 4, "EtherType, two not for us, own");
        assert_eq!(s.malformed(), 4, "two runts, multicast source, truncated");
        let c = s.method_counters(7, 1);
        assert_eq!((c.rx_foreign, c.rx_malformed), (4, 4));
        assert_eq!((c.tx_frames, c.tx_errors), (7, 1));
        assert!(c.detail.contains(&("rx_own_frame", 1)));
        let shared = SharedRxStats::default();
        shared.publish(&s);
        assert_eq!(shared.snapshot(), s);
    }

    #[test]
    fn the_configured_ethertype_is_the_one_accepted() {
        let f = RxFilter::new(US, 0x0800);
        assert!(f.check(&frame(US, THEM, 0x0800, b"x")).is_ok());
        assert_eq!(
            f.check(&frame(US, THEM, ET, b"x")),
            Err(Discard::OtherEtherType)
        );
    }

    proptest! {
        /// Any bytes: no panic, and what passes is what the header says.
        #[test]
        fn arbitrary_bytes_are_filtered_without_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            own in any::<[u8; 6]>(),
            et in any::<u16>(),
        ) {
            let f = RxFilter::new(Mac(own), et);
            match f.check(&bytes) {
                Ok(a) => {
                    prop_assert!(bytes.len() >= 14);
                    prop_assert_eq!(&bytes[12..14], &et.to_be_bytes()[..]);
                    prop_assert!(bytes[0..6] == own[..] || bytes[0] & 1 == 1);
                    prop_assert_eq!(&a.src.0[..], &bytes[6..12]);
                    prop_assert!(a.src.is_unicast() && a.src != Mac(own));
                    prop_assert_eq!(a.payload, &bytes[14..]);
                }
                Err(Discard::Runt) => prop_assert!(bytes.len() < 14),
                Err(why) => {
                    prop_assert!(bytes.len() >= 14);
                    let et_ok = bytes[12..14] == et.to_be_bytes();
                    prop_assert_eq!(why == Discard::OtherEtherType, !et_ok);
                }
            }
        }

        /// Frames built for us with any payload pass intact.
        #[test]
        fn frames_for_us_pass_intact(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            src in any::<[u8; 6]>(),
        ) {
            let src = Mac([src[0] & 0xfe, src[1], src[2], src[3], src[4], src[5]]);
            prop_assume!(src != US);
            let b = frame(US, src, ET, &payload);
            let a = RxFilter::new(US, ET).check(&b).unwrap();
            prop_assert_eq!(a.src, src);
            prop_assert_eq!(a.payload, &payload[..]);
        }
    }
}
