//! One endpoint of an Ethernet method as a station on its segment: its MAC
//! and EtherType (the [`RxFilter`]), the peers it knows by MAC (the
//! [`Peers`] table, which numbers the method's links) and its receive
//! counters ([`RxStats`]). A driver's receive path is
//! [`Station::receive`] per frame, its transmit path
//! [`Station::write_header`] per frame, and its `open_link`
//! [`Station::open_link`].

use crate::descriptor::{peer_mac, DescriptorAddress};
use crate::filter::{Accepted, RxFilter, RxStats};
use crate::frame::{write_header, Header};
use crate::mac::Mac;
use bcl_core::method::{Descriptor, LinkId, MethodCounters, MethodError};
use rustc_hash::FxHashMap;

/// Most peers (links) one endpoint keeps; frames from further new sources
/// are dropped and counted ([`RxStats::link_limit`]), so a flood of
/// forged source MACs cannot grow memory without bound.
pub const MAX_PEERS: usize = 65_536;

/// Peer MACs and their link numbers: link `i` is the `i`-th MAC added.
#[derive(Debug, Default)]
pub struct Peers {
    list: Vec<Mac>,
    by_mac: FxHashMap<Mac, LinkId>,
    /// The last source looked up, to skip the hash lookup in a stream.
    last: Option<(Mac, LinkId)>,
    learned: u64,
}

impl Peers {
    /// The MAC of `link`, if it exists.
    #[inline]
    pub fn mac(&self, link: LinkId) -> Option<Mac> {
        self.list.get(link.0 as usize).copied()
    }

    /// The link of `mac`, added if new; `None` when [`MAX_PEERS`] exist.
    /// `learned` says whether a new one is counted as learned from traffic
    /// (see [`learned`](Self::learned)).
    #[inline]
    pub fn get_or_add(&mut self, mac: Mac, learned: bool) -> Option<LinkId> {
        if let Some((m, l)) = self.last {
            if m == mac {
                return Some(l);
            }
        }
        let l = match self.by_mac.get(&mac) {
            Some(&l) => l,
            None => {
                if self.list.len() >= MAX_PEERS {
                    return None;
                }
                let l = LinkId(self.list.len() as u32);
                self.list.push(mac);
                self.by_mac.insert(mac, l);
                self.learned += u64::from(learned);
                l
            }
        };
        self.last = Some((mac, l));
        Some(l)
    }

    /// How many peers there are.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Peers added because a frame came from them (not by `open_link`).
    pub fn learned(&self) -> u64 {
        self.learned
    }
}

/// An endpoint's MAC, EtherType, peers and receive counters (see the
/// module documentation).
#[derive(Debug)]
pub struct Station {
    filter: RxFilter,
    peers: Peers,
    stats: RxStats,
}

impl Station {
    /// The station with MAC `own` speaking `ethertype`, knowing no peer.
    pub fn new(own: Mac, ethertype: u16) -> Self {
        Station {
            filter: RxFilter::new(own, ethertype),
            peers: Peers::default(),
            stats: RxStats::default(),
        }
    }

    /// Our MAC.
    pub fn mac(&self) -> Mac {
        self.filter.mac()
    }

    /// Our EtherType.
    pub fn ethertype(&self) -> u16 {
        self.filter.ethertype()
    }

    /// The receive filter.
    pub fn filter(&self) -> &RxFilter {
        &self.filter
    }

    /// The peer table.
    pub fn peers(&self) -> &Peers {
        &self.peers
    }

    /// The MAC of `link`, if it exists.
    pub fn link_mac(&self, link: LinkId) -> Option<Mac> {
        self.peers.mac(link)
    }

    /// The receive counters.
    pub fn stats(&self) -> &RxStats {
        &self.stats
    }

    /// The receive counters, for a driver to count what only it sees
    /// ([`RxStats::truncated`]).
    pub fn stats_mut(&mut self) -> &mut RxStats {
        &mut self.stats
    }

    /// Our address in the Ethernet descriptor grammar, with what the
    /// method knows: an interface index, a PCI address.
    pub fn address(&self) -> DescriptorAddress {
        DescriptorAddress::new(self.mac())
    }

    /// The link to the station named by `peer` (a descriptor of any
    /// Ethernet method), opened by method `method`.
    pub fn open_link(
        &mut self,
        method: &'static str,
        peer: &Descriptor,
    ) -> Result<LinkId, MethodError> {
        let mac = peer_mac(method, self.mac(), peer)?;
        self.peers
            .get_or_add(mac, false)
            .ok_or_else(|| MethodError::Other {
                method,
                reason: format!("{MAX_PEERS} peers already; no link for {mac}"),
            })
    }

    /// Runs the receive filter on `frame` and counts the outcome; for a
    /// frame for us, returns the link of its source (learned on first
    /// sight) and the BCL frame.
    #[inline]
    pub fn receive<'a>(&mut self, frame: &'a [u8]) -> Option<(LinkId, &'a [u8])> {
        match self.filter.check(frame) {
            Ok(Accepted { src, payload }) => match self.peers.get_or_add(src, true) {
                Some(link) => {
                    self.stats.accepted += 1;
                    Some((link, payload))
                }
                None => {
                    self.stats.link_limit += 1;
                    None
                }
            },
            Err(why) => {
                self.stats.count(why);
                None
            }
        }
    }

    /// Writes the Ethernet header of a frame to `link` into `hdr`; `false`
    /// if there is no such link.
    #[inline]
    pub fn write_header(&self, link: LinkId, hdr: &mut Header) -> bool {
        match self.peers.mac(link) {
            Some(dst) => {
                write_header(hdr, dst, self.mac(), self.ethertype());
                true
            }
            None => false,
        }
    }

    /// The method counters with these receive counts, `tx_frames` sent and
    /// `tx_errors` lost, plus `links_learned`.
    pub fn method_counters(&self, tx_frames: u64, tx_errors: u64) -> MethodCounters {
        let mut c = self.stats.method_counters(tx_frames, tx_errors);
        c.detail.push(("links_learned", self.peers.learned()));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::header;
    use proptest::prelude::*;

    const US: Mac = Mac([2, 0, 0, 0, 0, 0xb]);

    fn from(src: Mac, payload: &[u8]) -> Vec<u8> {
        let mut f = header(US, src, 0x88b5).to_vec();
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn links_are_learned_stable_and_shared_with_open_link() {
        let mut s = Station::new(US, 0x88b5);
        let a = Mac([2, 0, 0, 0, 0, 0xa]);
        let c = Mac([2, 0, 0, 0, 0, 0xc]);
        let fa = from(a, b"x");
        let (la, p) = s.receive(&fa).unwrap();
        assert_eq!(p, b"x");
        let fc = from(c, b"y");
        let (lc, _) = s.receive(&fc).unwrap();
        assert_ne!(la, lc);
        assert_eq!(s.receive(&fa).unwrap().0, la);
        assert_eq!(s.link_mac(lc), Some(c));
        assert_eq!(s.link_mac(LinkId(99)), None);
        let d = Descriptor::new("vfio", "02:00:00:00:00:0a@0000:00:03.0");
        assert_eq!(s.open_link("packet", &d).unwrap(), la);
        assert_eq!(s.peers().learned(), 2);
        let mut h = [0u8; 14];
        assert!(s.write_header(lc, &mut h));
        assert_eq!(h, header(c, US, 0x88b5));
        assert!(!s.write_header(LinkId(5), &mut h));
        assert!(s.receive(&from(Mac([1, 0, 0, 0, 0, 1]), b"")).is_none());
        let m = s.method_counters(3, 0);
        assert_eq!((m.rx_frames, m.rx_malformed, m.tx_frames), (3, 1, 3));
        assert!(m.detail.contains(&("links_learned", 2)));
    }

    #[test]
    fn the_peer_table_is_bounded() {
        let mut p = Peers::default();
        for i in 0..MAX_PEERS as u32 {
            let b = i.to_be_bytes();
            assert!(p
                .get_or_add(Mac([2, 0, b[0], b[1], b[2], b[3]]), true)
                .is_some());
        }
        assert_eq!(p.get_or_add(Mac([2, 1, 0, 0, 0, 0]), true), None);
        assert_eq!(p.get_or_add(Mac([2, 0, 0, 0, 0, 7]), true), Some(LinkId(7)));
        assert_eq!(p.len(), MAX_PEERS);
        let mut s = Station::new(US, 0x88b5);
        s.peers = p;
        assert!(s.receive(&from(Mac([2, 1, 0, 0, 0, 0]), b"")).is_none());
        assert_eq!(s.stats().link_limit, 1);
    }

    proptest! {
        /// Any bytes through the whole receive path: no panic, and the
        /// counts add up to the frames offered.
        #[test]
        fn arbitrary_frames_are_counted_once_each(
            frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..50),
        ) {
            let mut s = Station::new(US, 0x88b5);
            for f in &frames {
                let _ = s.receive(f);
            }
            let st = *s.stats();
            prop_assert_eq!(st.accepted + st.foreign() + st.malformed() + st.link_limit, frames.len() as u64);
        }
    }
}
