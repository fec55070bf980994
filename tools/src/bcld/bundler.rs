//! Bundling small frames of several clients into containers for a remote
//! daemon (see `bcl::core::wire::container`).
//!
//! The daemon offers every frame it takes from a client's ring. A small
//! frame for a link that leads to a daemon joins the link's open
//! container; anything else goes out as it is. Frames on one link leave in
//! the order they were offered: a frame that cannot join closes the link's
//! open container first, and the container goes out before it. At the end
//! of a round every open container is closed; one holding a single frame
//! goes out as that frame. Nothing waits for a later round, so bundling
//! adds no delay: it only uses what one round brought.

use bcl::core::method::{LinkId, TxFrame};
use bcl::core::wire::container::{self, EMPTY_LEN, RECORD_OVERHEAD};
use std::collections::VecDeque;

/// Frames up to this size may join a container (acknowledgements, small
/// messages); larger ones gain little from sharing a frame.
pub const SMALL_FRAME: usize = 512;

/// A container being filled for one link.
struct Open {
    link: u32,
    /// Records: each a length and a frame.
    records: Vec<u8>,
    count: u16,
}

/// A frame ready for the NIC, in order.
struct Ready {
    link: u32,
    /// The whole frame (a container with its header, or one plain frame).
    bytes: Vec<u8>,
}

/// What became of an offered frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Nothing is open for its link and it does not join one: the caller
    /// sends it as it is, now.
    SendNow,
    /// The bundler has copied it (into a container, or behind a container
    /// that goes first).
    Taken,
}

/// The open containers and the frames ready to go, of one daemon.
pub struct Bundler {
    node: u32,
    mtu: usize,
    open: Vec<Open>,
    ready: VecDeque<Ready>,
    spare: Vec<Vec<u8>>,
    /// Containers sent (with two or more frames).
    pub containers: u64,
    /// Frames that went in containers.
    pub frames_bundled: u64,
    /// Probes queued.
    pub probes: u64,
}

impl Bundler {
    /// A bundler of the daemon of `node` whose NIC carries frames of up to
    /// `mtu` bytes.
    pub fn new(node: u32, mtu: usize) -> Bundler {
        Bundler {
            node,
            mtu,
            open: Vec::new(),
            ready: VecDeque::new(),
            spare: Vec::new(),
            containers: 0,
            frames_bundled: 0,
            probes: 0,
        }
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Offers `frame` for `link`; `to_daemon` says a daemon receives on
    /// that link (it has sent us a container).
    pub fn offer(&mut self, link: u32, frame: &[u8], to_daemon: bool) -> Offer {
        let small = to_daemon
            && frame.len() <= SMALL_FRAME
            && EMPTY_LEN + RECORD_OVERHEAD + frame.len() <= self.mtu;
        match self.open.iter().position(|o| o.link == link) {
            Some(i) => {
                let room = EMPTY_LEN + self.open[i].records.len() + RECORD_OVERHEAD + frame.len()
                    <= self.mtu
                    && self.open[i].count < u16::MAX;
                if small && room {
                    let o = &mut self.open[i];
                    container::push_record(&mut o.records, frame);
                    o.count += 1;
                    return Offer::Taken;
                }
                let o = self.open.swap_remove(i);
                self.close(o);
                if small {
                    self.start(link, frame);
                } else {
                    let mut bytes = self.buffer();
                    bytes.extend_from_slice(frame);
                    self.ready.push_back(Ready { link, bytes });
                }
                Offer::Taken
            }
            None if small => {
                self.start(link, frame);
                Offer::Taken
            }
            None => Offer::SendNow,
        }
    }

    fn start(&mut self, link: u32, frame: &[u8]) {
        let mut records = self.buffer();
        container::push_record(&mut records, frame);
        self.open.push(Open {
            link,
            records,
            count: 1,
        });
    }

    /// Puts a closed container on the ready queue: as its one frame when it
    /// holds one.
    fn close(&mut self, o: Open) {
        let mut bytes = self.buffer();
        if o.count == 1 {
            bytes.extend_from_slice(&o.records[RECORD_OVERHEAD..]);
        } else {
            bytes.resize(EMPTY_LEN, 0);
            container::write_header(&mut bytes, self.node, o.count, o.records.len(), false);
            bytes.extend_from_slice(&o.records);
            self.containers += 1;
            self.frames_bundled += u64::from(o.count);
        }
        self.spare.push(o.records);
        self.ready.push_back(Ready {
            link: o.link,
            bytes,
        });
    }

    /// Closes every open container (the end of a round's frames).
    pub fn close_all(&mut self) {
        while let Some(o) = self.open.pop() {
            self.close(o);
        }
    }

    /// Queues a probe for `link` (asking for an answer when `ping`).
    pub fn probe(&mut self, link: u32, ping: bool) {
        let mut bytes = self.buffer();
        bytes.resize(EMPTY_LEN, 0);
        container::write_header(&mut bytes, self.node, 0, 0, ping);
        self.ready.push_back(Ready { link, bytes });
        self.probes += 1;
    }

    /// Whether frames are ready.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Copies the next ready frame into `buf` (a NIC buffer).
    pub fn pop_ready(&mut self, buf: &mut [u8]) -> Option<TxFrame> {
        let r = self.ready.pop_front()?;
        let len = r.bytes.len().min(buf.len());
        buf[..len].copy_from_slice(&r.bytes[..len]);
        self.spare.push(r.bytes);
        Some(TxFrame {
            link: LinkId(r.link),
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(b: &mut Bundler) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 9000];
        while let Some(tx) = b.pop_ready(&mut buf) {
            out.push((tx.link.0, buf[..tx.len].to_vec()));
        }
        out
    }

    fn frame(tag: u8, len: usize) -> Vec<u8> {
        vec![tag; len]
    }

    #[test]
    fn small_frames_for_a_daemon_share_a_container_in_order() {
        let mut b = Bundler::new(5, 1500);
        for tag in 1..=3 {
            assert_eq!(b.offer(0, &frame(tag, 100), true), Offer::Taken);
        }
        b.close_all();
        let out = drain(&mut b);
        assert_eq!(out.len(), 1);
        let c = container::parse(&out[0].1).unwrap();
        assert_eq!(c.src_node, 5);
        let tags: Vec<u8> = c.frames().map(|f| f[0]).collect();
        assert_eq!(tags, vec![1, 2, 3]);
        assert_eq!((b.containers, b.frames_bundled), (1, 3));
    }

    #[test]
    fn a_lone_frame_goes_as_itself_and_others_are_not_bundled() {
        let mut b = Bundler::new(5, 1500);
        assert_eq!(b.offer(0, &frame(1, 100), true), Offer::Taken);
        // Not a daemon's link, or too large: as they are.
        assert_eq!(b.offer(1, &frame(2, 100), false), Offer::SendNow);
        assert_eq!(b.offer(2, &frame(3, 1000), true), Offer::SendNow);
        b.close_all();
        let out = drain(&mut b);
        assert_eq!(out, vec![(0, frame(1, 100))]);
        assert_eq!(b.containers, 0);
    }

    #[test]
    fn a_large_frame_waits_for_the_container_before_it() {
        let mut b = Bundler::new(5, 1500);
        b.offer(0, &frame(1, 100), true);
        b.offer(0, &frame(2, 100), true);
        assert_eq!(b.offer(0, &frame(3, 1400), true), Offer::Taken);
        b.offer(0, &frame(4, 100), true);
        b.close_all();
        let out = drain(&mut b);
        assert_eq!(out.len(), 3);
        let first: Vec<u8> = container::parse(&out[0].1)
            .unwrap()
            .frames()
            .map(|f| f[0])
            .collect();
        assert_eq!(first, vec![1, 2]);
        assert_eq!(out[1].1, frame(3, 1400));
        assert_eq!(out[2].1, frame(4, 100));
    }

    #[test]
    fn a_full_container_is_closed_and_a_new_one_started() {
        let mut b = Bundler::new(5, 1500);
        for tag in 0..40u8 {
            b.offer(0, &frame(tag, 200), true);
        }
        b.close_all();
        let out = drain(&mut b);
        let mut tags = Vec::new();
        for (_, bytes) in &out {
            assert!(bytes.len() <= 1500);
            match container::parse(bytes) {
                Some(c) => tags.extend(c.frames().map(|f| f[0])),
                None => tags.push(bytes[0]),
            }
        }
        assert_eq!(tags, (0..40).collect::<Vec<u8>>());
        assert!(out.len() >= 40 * 202 / 1500);
    }

    #[test]
    fn probes_are_empty_containers() {
        let mut b = Bundler::new(9, 1500);
        b.probe(3, true);
        let out = drain(&mut b);
        let c = container::parse(&out[0].1).unwrap();
        assert!(c.is_probe() && c.ping && c.src_node == 9);
        assert_eq!(out[0].0, 3);
    }
}
