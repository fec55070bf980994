//! Receiving transfer data straight into the posted buffer ("placement").
//!
//! A method that can read a frame's header before its payload (a kernel
//! socket read with `MSG_PEEK`, then a scattered read) asks
//! [`Port::placement`] where the payload belongs. For normal-channel data
//! of a transfer in progress the answer is the range of the posted buffer
//! the frame fills; the method reads the payload there and reports the
//! frame with [`Port::handle_placed_frame`], which validates it exactly as
//! [`Port::handle_frame`] would and skips the copy. That removes the copy
//! from the method's receive buffer into the posted buffer, one of the two
//! copies a kernel-socket method cannot avoid otherwise (the kernel's into
//! user memory is the other).
//!
//! **What makes it safe to write before validating.** Every check that
//! reads only the header (version, type, flags, job, destination, lengths,
//! sequence window) is made before the placement is offered; what is left
//! for after the write is the CRC32C over the payload. A placement is only
//! offered at or beyond the transfer's frontier (the end of the furthest
//! byte written so far), inside the message's length, for a sequence
//! number not yet received. If the frame then fails its CRC32C, the bytes
//! it left lie where nothing has been written yet: the frame that really
//! carries that range overwrites them later, and a transfer completes only
//! when every byte has been received from a valid frame. The first frame of
//! a transfer that starts with its data (the buffer was announced to the
//! sender) has no message to bound it yet, so it is placed only where no
//! CRC32C is checked. Frames of a
//! stream in order always land at the frontier; a frame that overtook
//! others lands beyond it; anything else takes the ordinary path.

use super::channels::RxTransfer;
use super::recv::SYSTEM_CHANNEL;
use super::{peer::PeerIdx, Port};
use crate::event::ChannelId;
use crate::method::Route;
use crate::sack::RX_WINDOW;
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::{self, flags, FrameType, Header, HEADER_LEN};
use zerocopy::FromBytes;

/// Where a placed payload goes: the posted buffer, and the byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    buffer: Buffer,
    start: usize,
    len: usize,
}

/// The posted buffer a placed payload goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buffer {
    /// The one of a transfer in progress.
    Transfer((PeerIdx, u32)),
    /// The one posted on this channel for the sender, free: the frame's
    /// transfer starts with it (see `Port::adopt_announced`), so nothing
    /// has been written there yet.
    Announced(ChannelId),
}

impl Port {
    /// Where the payload of the frame whose header is `header` (exactly
    /// [`HEADER_LEN`] bytes), arriving on `route`, belongs, if it is
    /// normal-channel data the port can take in place (see the module
    /// documentation); `None` sends the method down the ordinary path
    /// ([`Port::handle_frame`]). The slice is exactly the payload's length.
    ///
    /// A method that writes the payload there must then call
    /// [`Port::handle_placed_frame`] with the header it received, before
    /// anything else reaches the port.
    pub fn placement(&mut self, route: Route, header: &[u8]) -> Option<&mut [u8]> {
        let t = self.placement_target(route, header)?;
        self.placement_buffer(t.buffer)?
            .get_mut(t.start..t.start + t.len)
    }

    /// Takes a frame whose payload the method wrote where
    /// [`Port::placement`] said. It is validated as [`Port::handle_frame`]
    /// validates (the CRC32C over the placed bytes); an invalid frame is
    /// dropped and counted, and the bytes it left are overwritten by the
    /// valid frame for that range.
    pub fn handle_placed_frame(&mut self, now: Time, route: Route, header: &[u8]) {
        let Some(info) = self.methods.get(usize::from(route.method)).copied() else {
            self.stats.bad_frames.bad_type += 1;
            return;
        };
        // Nothing reaches the port between `placement` and this call, so
        // the target is the one the payload was written to.
        let Some(t) = self.placement_target(route, header) else {
            self.stats.bad_frames.bad_length += 1;
            return;
        };
        let expect = wire::Expect {
            require_crc: self.crc_for(route.method),
            ..self.expect
        };
        let parsed = match self.placement_buffer(t.buffer) {
            Some(dest) => match dest.get(t.start..t.start + t.len) {
                Some(payload) => wire::parse_placed(header, payload, &expect),
                None => Err(wire::FrameError::BadLength),
            },
            None => Err(wire::FrameError::BadLength),
        };
        match parsed {
            Ok(frame) => {
                self.handle_parsed(now, route, info, &frame, HEADER_LEN + t.len);
            }
            Err(e) => self.stats.bad_frames.count(e),
        }
    }

    /// The checks that decide a placement. They read only fields the full
    /// validation checks again; a header that lies gets no placement or
    /// fails that validation.
    fn placement_target(&self, route: Route, header: &[u8]) -> Option<Target> {
        let info = self.methods.get(usize::from(route.method))?;
        if info.caps.reliable || info.bulk {
            return None;
        }
        let (h, rest) = Header::ref_from_prefix(header).ok()?;
        let flag_bits = h.flags;
        if !rest.is_empty()
            || h.version != wire::VERSION
            || h.frame_type != FrameType::Data as u8
            || flag_bits & (flags::BUNDLE | flags::UNSEQUENCED) != 0
            || h.channel.get() == SYSTEM_CHANNEL
            || h.job.get() != self.expect.job.0
            || h.dst_node.get() != self.expect.local.node.0
            || h.dst_port.get() != self.expect.local.port.0
        {
            return None;
        }
        let len = usize::from(h.payload_len.get());
        if len == 0 {
            return None;
        }
        let idx = self.peer_idx(crate::addr::ProcessAddr {
            node: crate::addr::NodeId(h.src_node.get()),
            port: crate::addr::PortId(h.src_port.get()),
        })?;
        let p = &self.peers[idx as usize];
        // The frame continues the sequence space it is checked against (a
        // new incarnation, stream generation or window base would reset it
        // first).
        if !p.rx_known
            || p.rx_unsequenced
            || p.incarnation != h.epoch.get()
            || p.rx_generation != h.generation
            || p.expected.before(Seq(h.base.get()))
        {
            return None;
        }
        let offset = Seq(h.seq.get()).since(p.expected)?;
        if offset >= RX_WINDOW || p.rx.as_ref().is_some_and(|w| w.bitmap.get(offset)) {
            return None;
        }
        let key = (idx, h.msg_id.get());
        let channel = h.channel.get();
        let start = h.frag_offset.get();
        let total = u64::from(h.msg_len.get());
        let end = start.checked_add(len as u64)?;
        if end > total {
            return None;
        }
        let buffer = match self.rx_transfers.get(&key) {
            Some(RxTransfer::Normal {
                channel: ch,
                frontier,
                ..
            }) => {
                if *ch != channel
                    || start < *frontier
                    || self.active_receive_len(channel, key)? != total
                {
                    return None;
                }
                Buffer::Transfer(key)
            }
            Some(RxTransfer::Put { .. }) => return None,
            None => {
                // Nothing bounds this range by a message yet: bytes left by
                // a frame that then fails its CRC32C could stay past the
                // end of the message that really comes. So only where no
                // CRC32C is checked (every other check is made above,
                // before anything is written).
                let ch = ChannelId(channel);
                if self.crc_for(route.method) || !self.adoptable(idx, ch, total) {
                    return None;
                }
                Buffer::Announced(ch)
            }
        };
        Some(Target {
            buffer,
            start: usize::try_from(start).ok()?,
            len,
        })
    }

    /// The whole of the posted buffer `buffer` (for a transfer, its active
    /// length).
    fn placement_buffer(&mut self, buffer: Buffer) -> Option<&mut [u8]> {
        match buffer {
            Buffer::Transfer(key) => self.transfer_dest(key),
            Buffer::Announced(ch) => self.posted_buffer_mut(ch),
        }
    }
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
