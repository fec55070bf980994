//! Normal channels (rendezvous into posted buffers) and open channels
//! (remote memory access to registered regions).
//!
//! **Normal channels** (BCL-3, with RCP's symmetric rendezvous). A receiver
//! posts a buffer on a channel before each transfer; a sender's message is
//! written only into a posted buffer. Either side may come first:
//! - sender first: `RNDV_REQUEST` waits at the receiver until a buffer is
//!   posted, then `RNDV_READY` lets the data flow;
//! - receiver first: posting for a known sender announces the buffer at once
//!   (`RNDV_READY` for transfer 0); the sender's next message on that channel
//!   streams without asking.
//!
//! A port's sends to one channel of one peer take turns: each starts its
//! rendezvous when the one before it has completed or failed, so buffers go
//! to messages in the order they were sent and an announced buffer to the
//! message that streams into it (see `start_channel_send`).
//!
//! A message larger than the posted buffer fails on both sides with both
//! sizes; nothing is written. Data frames carry their offset and are copied
//! straight into the posted buffer — no staging copy — and lost ones are
//! repaired by the same selective retransmission as everything else.
//!
//! **Open channels.** A region registered once is exposed on an open channel
//! with a key. `RMA_PUT` and `RMA_GET` name channel, key, offset and length;
//! the target checks all four before a byte moves, and a failure is reported
//! to the initiator only (the target sees nothing: RMA is one-sided).
//!
//! Buffers move by ownership: `post`, `send_on_channel`, `put` and `get` take
//! a `Vec<u8>` and the completion event gives it back, so the type system
//! keeps the application away from a buffer the port is reading or writing.

use super::peer::PeerIdx;
use super::{OnDone, OutBody, OutMessage, Port, SendError};
use crate::addr::ProcessAddr;
use crate::event::{ChannelEvent, ChannelId, RegionId, SendFailure, SendHandle, TransferError};
use crate::lent::{LentBytes, LentBytesMut, PostedBuffer, SendBuffer};
use crate::seq::Seq;
use crate::time::Time;
use crate::wire::control::{
    read_body, ControlBody, ControlCode, RmaRequest, RndvReady, RndvRequest, Status,
};
use crate::wire::{Frame, FrameType};
use std::collections::VecDeque;
use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::IntoBytes;

/// A channel of the port.
pub(super) enum Channel {
    /// A normal channel.
    Normal(NormalChannel),
    /// An open channel exposing a region.
    Open { region: RegionId, key: u64 },
}

/// A normal channel's receive side.
#[derive(Default)]
pub(super) struct NormalChannel {
    posted: Option<Posting>,
    /// Requests that arrived before a buffer was posted, in order.
    waiting: VecDeque<(PeerIdx, u32, u64)>,
}

/// The buffer posted on a normal channel.
struct Posting {
    buffer: PostedBuffer,
    /// Only this peer's messages are accepted (and it was told at once).
    from: Option<PeerIdx>,
    /// The transfer writing into it: (peer, transfer id, length).
    active: Option<(PeerIdx, u32, u64)>,
}

/// A transfer arriving at this port.
pub(super) enum RxTransfer {
    /// Into the buffer posted on a normal channel.
    Normal {
        channel: u16,
        received: u64,
        /// The end of the furthest byte written so far: a frame placed by
        /// the method ([`Port::placement`]) may only land at or beyond it,
        /// where nothing good can be overwritten.
        frontier: u64,
        last_activity: Time,
    },
    /// An RMA put into a region.
    Put {
        region: RegionId,
        offset: u64,
        len: u64,
        received: u64,
        last_activity: Time,
    },
}

/// A remote read this port waits for.
pub(super) struct GetWait {
    handle: SendHandle,
    buffer: Vec<u8>,
    /// Offset asked for, for error reports.
    offset: u64,
    received: u64,
    last_activity: Time,
}

impl GetWait {
    /// Bytes asked for.
    pub(super) fn len(&self) -> usize {
        self.buffer.len()
    }

    /// The buffer the data goes into.
    pub(super) fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buffer
    }

    /// The handle and the buffer, for the completion event.
    pub(super) fn into_parts(self) -> (SendHandle, Vec<u8>) {
        (self.handle, self.buffer)
    }
}

/// A slot of the region table.
#[derive(Default)]
pub(super) struct RegionSlot {
    generation: u32,
    data: Option<Vec<u8>>,
    /// Remote reads being served from it.
    busy: u32,
}

/// Why a channel call was refused. Any buffer given comes back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// No such channel, or not of the kind the call needs.
    #[error("no channel {0:?} of that kind on this port")]
    NoSuchChannel(ChannelId),
    /// A buffer is already posted on the channel.
    #[error("a buffer is already posted on channel {0:?}")]
    AlreadyPosted(ChannelId),
    /// No such region (never registered, or unregistered).
    #[error("no region {0:?} on this port")]
    NoSuchRegion(RegionId),
    /// The region still serves remote reads; close its channels and retry.
    #[error("region {0:?} is serving {1} remote reads; close its open channels and retry")]
    RegionBusy(RegionId, u32),
    /// The port ran out of channel numbers.
    #[error("no channel numbers left")]
    NoChannelsLeft,
    /// The send could not be accepted.
    #[error(transparent)]
    Send(#[from] SendError),
}

/// A refused call, with the buffer it was given.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub error: ChannelError,
    /// The buffer, untouched.
    pub buffer: Vec<u8>,
}

impl Port {
    // ---------------------------------------------------------------- API

    /// Normal-channel and RMA transfers under way, sent and received
    /// (accepted, not yet complete or failed).
    pub fn transfers_in_progress(&self) -> usize {
        self.out_transfers.len() + self.rx_transfers.len()
    }

    /// Opens a normal channel.
    pub fn open_normal_channel(&mut self) -> Result<ChannelId, ChannelError> {
        self.add_channel(Channel::Normal(NormalChannel::default()))
    }

    /// Exposes `region` on a new open channel, for remote access by peers
    /// that present `key`.
    pub fn open_rma_channel(
        &mut self,
        region: RegionId,
        key: u64,
    ) -> Result<ChannelId, ChannelError> {
        if self.region_data(region).is_none() {
            return Err(ChannelError::NoSuchRegion(region));
        }
        self.add_channel(Channel::Open { region, key })
    }

    fn add_channel(&mut self, ch: Channel) -> Result<ChannelId, ChannelError> {
        if let Some(i) = self.channels.iter().skip(1).position(Option::is_none) {
            self.channels[i + 1] = Some(ch);
            return Ok(ChannelId(i as u16 + 1));
        }
        if self.channels.len() > usize::from(u16::MAX) {
            return Err(ChannelError::NoChannelsLeft);
        }
        self.channels.push(Some(ch));
        Ok(ChannelId(self.channels.len() as u16 - 1))
    }

    /// Closes a channel. A buffer still posted on it comes back (and its
    /// transfer, if one was writing, is cancelled at the sender).
    pub fn close_channel(
        &mut self,
        now: Time,
        ch: ChannelId,
    ) -> Result<Option<Vec<u8>>, ChannelError> {
        let buffer = match self.channel(ch) {
            Some(Channel::Normal(_)) => self.cancel_post(now, ch)?,
            Some(Channel::Open { .. }) => None,
            None => return Err(ChannelError::NoSuchChannel(ch)),
        };
        // Requests waiting on it are refused.
        if let Some(Some(Channel::Normal(n))) = self.channels.get_mut(usize::from(ch.0)) {
            let waiting: Vec<_> = n.waiting.drain(..).collect();
            for (peer, transfer, _) in waiting {
                self.send_ready(peer, ch.0, transfer, Status::NoChannel, 0, now);
            }
        }
        self.channels[usize::from(ch.0)] = None;
        Ok(buffer)
    }

    /// Posts `buffer` on normal channel `ch` for the next message (from
    /// `from` only, if given: then `from` is told at once, saving it a round
    /// trip). The buffer comes back in [`ChannelEvent::Received`], or from
    /// [`Port::cancel_post`].
    pub fn post(
        &mut self,
        now: Time,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Vec<u8>,
    ) -> Result<(), Refused> {
        self.post_buffer(now, ch, from, PostedBuffer::Vec(buffer))
    }

    /// Posts memory lent to the port ([`crate::lent`]) on normal channel
    /// `ch`, as [`Port::post`] does a vector. Its events carry an empty
    /// vector; the message is in the lent memory.
    pub fn post_lent(
        &mut self,
        now: Time,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: Box<dyn LentBytesMut>,
    ) -> Result<(), Refused> {
        self.post_buffer(now, ch, from, PostedBuffer::Lent(buffer))
    }

    fn post_buffer(
        &mut self,
        now: Time,
        ch: ChannelId,
        from: Option<ProcessAddr>,
        buffer: PostedBuffer,
    ) -> Result<(), Refused> {
        let refuse = |error, buffer: PostedBuffer| {
            Err(Refused {
                error,
                buffer: buffer.into_vec(),
            })
        };
        match self.channel(ch) {
            Some(Channel::Normal(n)) if n.posted.is_some() => {
                return refuse(ChannelError::AlreadyPosted(ch), buffer)
            }
            Some(Channel::Normal(_)) => {}
            _ => return refuse(ChannelError::NoSuchChannel(ch), buffer),
        }
        let from = match from {
            Some(addr) => match self.peer_idx_or_create(addr) {
                Ok(idx) => Some(idx),
                Err(e) => return refuse(ChannelError::Send(e), buffer),
            },
            None => None,
        };
        let capacity = buffer.len() as u64;
        if let Some(n) = self.normal_mut(ch) {
            n.posted = Some(Posting {
                buffer,
                from,
                active: None,
            });
        }
        // A request already waiting gets the buffer.
        if self.take_waiting_request(ch, now) {
            return Ok(());
        }
        if let Some(peer) = from {
            self.send_ready(peer, ch.0, 0, Status::Ok, capacity, now);
        }
        Ok(())
    }

    /// Takes back the buffer posted on `ch`, if any. If a message was being
    /// written into it, the sender is told its transfer was cancelled.
    pub fn cancel_post(
        &mut self,
        now: Time,
        ch: ChannelId,
    ) -> Result<Option<Vec<u8>>, ChannelError> {
        let Some(n) = self.normal_mut(ch) else {
            return Err(ChannelError::NoSuchChannel(ch));
        };
        let Some(posting) = n.posted.take() else {
            return Ok(None);
        };
        if let Some((peer, transfer, _)) = posting.active {
            self.rx_transfers.remove(&(peer, transfer));
            self.send_control(
                peer,
                ControlCode::Cancel,
                Status::Cancelled,
                ch.0,
                transfer,
                0,
                now,
            );
        }
        Ok(Some(posting.buffer.into_vec()))
    }

    /// Sends `buffer` to normal channel `ch` of `dst`. It is written straight
    /// into the buffer `dst` posts there; [`ChannelEvent::SendDone`] gives it
    /// back once `dst` has acknowledged every byte.
    pub fn send_on_channel(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        self.send_buffer_on_channel(now, dst, ch, SendBuffer::Vec(buffer))
    }

    /// Sends memory lent to the port ([`crate::lent`]) to normal channel
    /// `ch` of `dst`, as [`Port::send_on_channel`] does a vector. Its
    /// events carry an empty vector.
    pub fn send_lent_on_channel(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: Box<dyn LentBytes>,
    ) -> Result<SendHandle, Refused> {
        self.send_buffer_on_channel(now, dst, ch, SendBuffer::Lent(buffer))
    }

    fn send_buffer_on_channel(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        ch: ChannelId,
        buffer: SendBuffer,
    ) -> Result<SendHandle, Refused> {
        let len = buffer.len() as u64;
        let (idx, m, transfer, handle) = match self.begin_transfer(dst, len) {
            Ok(t) => t,
            Err(error) => {
                return Err(Refused {
                    error,
                    buffer: buffer.into_vec(),
                })
            }
        };
        self.install_transfer(
            m,
            idx,
            handle,
            FrameType::Data,
            ch.0,
            transfer,
            OutBody::Owned(buffer),
            OnDone::ChannelSend,
        );
        self.start_channel_sends(now);
        let queue = self.channel_sends.entry((idx, ch.0)).or_default();
        queue.push_back((m, false));
        if queue.len() == 1 {
            self.start_channel_send(idx, ch.0, now);
        }
        Ok(handle)
    }

    /// Registers `buffer` for remote access and returns its id. Registration
    /// moves the buffer in (no copy); [`Port::unregister`] gives it back.
    pub fn register(&mut self, buffer: Vec<u8>) -> RegionId {
        let index = match self.regions.iter().position(|r| r.data.is_none()) {
            Some(i) => i,
            None => {
                self.regions.push(RegionSlot::default());
                self.regions.len() - 1
            }
        };
        let slot = &mut self.regions[index];
        slot.generation = slot.generation.wrapping_add(1);
        slot.data = Some(buffer);
        slot.busy = 0;
        RegionId {
            index: index as u32,
            generation: slot.generation,
        }
    }

    /// Unregisters `region` and gives its buffer back. Open channels exposing
    /// it are closed; later accesses from peers fail at the initiator. Refused
    /// while the region serves remote reads.
    pub fn unregister(&mut self, now: Time, region: RegionId) -> Result<Vec<u8>, ChannelError> {
        let slot = self
            .regions
            .get_mut(region.index as usize)
            .filter(|s| s.generation == region.generation && s.data.is_some())
            .ok_or(ChannelError::NoSuchRegion(region))?;
        if slot.busy > 0 {
            return Err(ChannelError::RegionBusy(region, slot.busy));
        }
        let data = slot.data.take().ok_or(ChannelError::NoSuchRegion(region))?;
        slot.generation = slot.generation.wrapping_add(1);
        // Close the channels exposing it.
        for c in self.channels.iter_mut() {
            if matches!(c, Some(Channel::Open { region: r, .. }) if *r == region) {
                *c = None;
            }
        }
        // Puts streaming into it stop, and their initiators are told.
        let stopped: Vec<_> = self
            .rx_transfers
            .iter()
            .filter(|(_, t)| matches!(t, RxTransfer::Put { region: r, .. } if *r == region))
            .map(|(k, _)| *k)
            .collect();
        for (peer, transfer) in stopped {
            self.rx_transfers.remove(&(peer, transfer));
            self.send_control(
                peer,
                ControlCode::PutResult,
                Status::Unregistered,
                0,
                transfer,
                0,
                now,
            );
        }
        Ok(data)
    }

    /// The bytes of a registered region.
    pub fn region(&self, region: RegionId) -> Option<&[u8]> {
        self.region_data(region)
    }

    /// The bytes of a registered region, writable.
    pub fn region_mut(&mut self, region: RegionId) -> Option<&mut [u8]> {
        self.regions
            .get_mut(region.index as usize)
            .filter(|s| s.generation == region.generation)
            .and_then(|s| s.data.as_deref_mut())
    }

    /// Writes `data` at `offset` of the region exposed on open channel `ch` of
    /// `dst`, proving `key`. [`ChannelEvent::PutDone`] gives the buffer back
    /// when the data is in; [`ChannelEvent::RmaFailed`] says why not.
    pub fn put(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        let len = data.len() as u64;
        let (idx, m, transfer, handle) = match self.begin_transfer(dst, len) {
            Ok(t) => t,
            Err(error) => {
                return Err(Refused {
                    error,
                    buffer: data,
                })
            }
        };
        let inline = data.len() <= self.inline_put_limit(idx);
        let req = RmaRequest {
            channel: U16::new(ch.0),
            inline: u8::from(inline),
            reserved: 0,
            transfer: U32::new(transfer),
            key: U64::new(key),
            offset: U64::new(offset),
            len: U64::new(len),
        };
        let mut body = req.as_bytes().to_vec();
        if inline {
            body.extend_from_slice(&data);
        }
        self.install_transfer(
            m,
            idx,
            handle,
            FrameType::Data,
            ch.0,
            transfer,
            OutBody::Owned(SendBuffer::Vec(data)),
            OnDone::Put,
        );
        if let Some(msg) = self.messages[m as usize].as_mut() {
            msg.rma_offset = offset;
        }
        self.queue_control(idx, FrameType::RmaPut, &body, now);
        Ok(handle)
    }

    /// Reads `buffer.len()` bytes at `offset` of the region exposed on open
    /// channel `ch` of `dst`, proving `key`, into `buffer`.
    /// [`ChannelEvent::GetDone`] gives it back filled.
    pub fn get(
        &mut self,
        now: Time,
        dst: ProcessAddr,
        ch: ChannelId,
        key: u64,
        offset: u64,
        buffer: Vec<u8>,
    ) -> Result<SendHandle, Refused> {
        let len = buffer.len() as u64;
        if len > u64::from(u32::MAX) {
            return Err(Refused {
                error: ChannelError::Send(SendError::TooLarge {
                    len: buffer.len(),
                    limit: u32::MAX as usize,
                }),
                buffer,
            });
        }
        if let Err(e) = self.check_room() {
            return Err(Refused { error: e, buffer });
        }
        let idx = match self.peer_idx_or_create(dst) {
            Ok(i) => i,
            Err(e) => {
                return Err(Refused {
                    error: e.into(),
                    buffer,
                })
            }
        };
        let transfer = self.new_transfer_id();
        let handle = self.new_handle();
        self.get_waits.insert(
            (idx, transfer),
            GetWait {
                handle,
                buffer,
                offset,
                received: 0,
                last_activity: now,
            },
        );
        self.watch_stalls(now);
        let req = RmaRequest {
            channel: U16::new(ch.0),
            inline: 0,
            reserved: 0,
            transfer: U32::new(transfer),
            key: U64::new(key),
            offset: U64::new(offset),
            len: U64::new(len),
        };
        self.queue_control(idx, FrameType::RmaGet, req.as_bytes(), now);
        Ok(handle)
    }

    /// Next completion of a transfer on a normal or open channel.
    pub fn poll_channel_event(&mut self) -> Option<ChannelEvent> {
        self.channel_events.pop_front()
    }

    pub(super) fn push_channel_event(&mut self, e: ChannelEvent) {
        self.stats.channel_events += 1;
        self.channel_events.push_back(e);
    }

    // ------------------------------------------------------------ helpers

    fn channel(&self, ch: ChannelId) -> Option<&Channel> {
        self.channels
            .get(usize::from(ch.0))
            .and_then(Option::as_ref)
    }

    /// Whether a buffer posted on a normal channel waits for peer `idx`
    /// (posted for it alone, or being written by it).
    pub(super) fn posted_for(&self, idx: PeerIdx) -> bool {
        self.channels.iter().flatten().any(|c| match c {
            Channel::Normal(NormalChannel {
                posted: Some(p), ..
            }) => p.from == Some(idx) || p.active.is_some_and(|(i, _, _)| i == idx),
            _ => false,
        })
    }

    fn normal_mut(&mut self, ch: ChannelId) -> Option<&mut NormalChannel> {
        match self.channels.get_mut(usize::from(ch.0)) {
            Some(Some(Channel::Normal(n))) => Some(n),
            _ => None,
        }
    }

    pub(super) fn region_data(&self, region: RegionId) -> Option<&[u8]> {
        self.regions
            .get(region.index as usize)
            .filter(|s| s.generation == region.generation)
            .and_then(|s| s.data.as_deref())
    }

    /// A remote read served from `region` ended.
    pub(super) fn region_release(&mut self, region: RegionId) {
        if let Some(s) = self.regions.get_mut(region.index as usize) {
            if s.generation == region.generation {
                s.busy = s.busy.saturating_sub(1);
            }
        }
    }

    fn new_transfer_id(&mut self) -> u32 {
        let t = self.next_transfer;
        self.next_transfer = self.next_transfer.wrapping_add(1).max(1);
        t
    }

    fn check_room(&self) -> Result<(), ChannelError> {
        let pending = self.outstanding + self.send_events.len() + self.channel_events.len();
        if pending >= self.cfg.max_outstanding_sends {
            return Err(SendError::WouldBlock(pending).into());
        }
        Ok(())
    }

    /// Admission of an application transfer of `len` bytes to `dst`: peer,
    /// message slot, transfer id, handle.
    fn begin_transfer(
        &mut self,
        dst: ProcessAddr,
        len: u64,
    ) -> Result<(PeerIdx, u32, u32, SendHandle), ChannelError> {
        if len > u64::from(u32::MAX) {
            return Err(SendError::TooLarge {
                len: len as usize,
                limit: u32::MAX as usize,
            }
            .into());
        }
        if dst == self.cfg.local {
            return Err(SendError::SelfSend(dst).into());
        }
        self.check_room()?;
        let idx = self.peer_idx_or_create(dst)?;
        let m = self
            .alloc_message(false)
            .ok_or(ChannelError::Send(SendError::WouldBlock(self.outstanding)))?;
        self.outstanding += 1;
        let transfer = self.new_transfer_id();
        let handle = self.new_handle();
        Ok((idx, m, transfer, handle))
    }

    /// Fills slot `m` with a transfer that waits (for a rendezvous answer or
    /// an RMA result) until queued.
    #[allow(clippy::too_many_arguments)]
    fn install_transfer(
        &mut self,
        m: u32,
        idx: PeerIdx,
        handle: SendHandle,
        kind: FrameType,
        channel: u16,
        transfer: u32,
        body: OutBody,
        on_done: OnDone,
    ) {
        self.messages[m as usize] = Some(OutMessage {
            handle,
            peer: idx,
            kind,
            channel,
            body,
            on_done,
            msg_id: transfer,
            first_seq: Seq(0),
            next_offset: 0,
            in_flight: 0,
            rma_offset: 0,
            next: super::peer::NO_MSG,
        });
        self.out_transfers.insert((idx, transfer), m);
    }

    /// Largest put sent inline with its request (one frame to `idx`).
    fn inline_put_limit(&self, idx: PeerIdx) -> usize {
        let frag = usize::from(self.peers[idx as usize].frag_payload);
        let frag = if frag == 0 { 1024 } else { frag };
        frag.saturating_sub(core::mem::size_of::<RmaRequest>()).min(
            self.cfg
                .eager_limit
                .saturating_sub(core::mem::size_of::<RmaRequest>()),
        )
    }

    fn send_ready(
        &mut self,
        idx: PeerIdx,
        channel: u16,
        transfer: u32,
        status: Status,
        capacity: u64,
        now: Time,
    ) {
        let body = RndvReady {
            channel: U16::new(channel),
            status: status as u8,
            reserved: 0,
            transfer: U32::new(transfer),
            capacity: U64::new(capacity),
        };
        self.queue_control(idx, FrameType::RndvReady, body.as_bytes(), now);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_control(
        &mut self,
        idx: PeerIdx,
        code: ControlCode,
        status: Status,
        channel: u16,
        transfer: u32,
        detail: u64,
        now: Time,
    ) {
        let body = ControlBody {
            code: code as u8,
            status: status as u8,
            channel: U16::new(channel),
            transfer: U32::new(transfer),
            detail: U64::new(detail),
        };
        self.queue_control(idx, FrameType::Control, body.as_bytes(), now);
    }

    /// Starts the rendezvous of the first send on normal channel `channel`
    /// of peer `idx`, unless it has started: it streams at once into a
    /// buffer the receiver announced, if that is large enough, else it asks.
    ///
    /// One send per (peer, channel) at a time. The receiver gives its
    /// posted buffer to requests in arrival order, and to a transfer
    /// streamed on an announcement only when that transfer's data arrives,
    /// which may be after a later request (transfer data is not in the
    /// ordered message stream, and requests go out before it). With sends
    /// overlapping, a later request could take the announced buffer, or an
    /// earlier request still on its way could take the buffer whose
    /// announcement a later send streams on: the streamed data is dropped,
    /// yet every frame of it is acknowledged, so the send would complete
    /// without the receiver ever getting it. `models/rendezvous.pml` checks
    /// that one send at a time delivers each exactly once and in order.
    fn start_channel_send(&mut self, idx: PeerIdx, channel: u16, now: Time) {
        let Some(first) = self
            .channel_sends
            .get_mut(&(idx, channel))
            .and_then(VecDeque::front_mut)
        else {
            return;
        };
        if first.1 {
            return;
        }
        first.1 = true;
        let m = first.0;
        let Some(msg) = self.messages[m as usize].as_ref() else {
            return;
        };
        let (transfer, len) = (msg.msg_id, u64::from(self.body_len(&msg.body)));
        match self.credits.get(&(idx, channel)) {
            Some(&capacity) if capacity >= len => {
                // The receiver announced a buffer: stream at once.
                self.credits.remove(&(idx, channel));
                self.queue_transfer(m, now);
            }
            _ => {
                let req = RndvRequest {
                    channel: U16::new(channel),
                    reserved: U16::new(0),
                    transfer: U32::new(transfer),
                    len: U64::new(len),
                };
                self.queue_control(idx, FrameType::RndvRequest, req.as_bytes(), now);
            }
        }
    }

    /// Send `m` on normal channel `channel` of peer `idx` ended (completed
    /// or failed): the next send there may start.
    pub(super) fn channel_send_ended(&mut self, idx: PeerIdx, channel: u16, m: u32) {
        let key = (idx, channel);
        let Some(queue) = self.channel_sends.get_mut(&key) else {
            return;
        };
        let first = queue.front().is_some_and(|&(f, _)| f == m);
        queue.retain(|&(x, _)| x != m);
        if queue.is_empty() {
            self.channel_sends.remove(&key);
        } else if first {
            self.channel_sends_ended.push(key);
        }
    }

    /// Starts the sends whose predecessor on their channel has ended.
    pub(super) fn start_channel_sends(&mut self, now: Time) {
        while let Some((idx, channel)) = self.channel_sends_ended.pop() {
            self.start_channel_send(idx, channel, now);
        }
    }

    /// Gives the buffer posted on `ch` to the first waiting request it can
    /// take; requests too large for it are refused on the way (both sides
    /// learn both sizes). True if a transfer started.
    fn take_waiting_request(&mut self, ch: ChannelId, now: Time) -> bool {
        loop {
            let Some(n) = self.normal_mut(ch) else {
                return false;
            };
            let Some(posting) = n.posted.as_ref() else {
                return false;
            };
            let from = posting.from;
            let capacity = posting.buffer.len() as u64;
            let Some(pos) = n
                .waiting
                .iter()
                .position(|(p, _, _)| from.is_none_or(|f| f == *p))
            else {
                return false;
            };
            let Some((peer, transfer, len)) = n.waiting.remove(pos) else {
                return false;
            };
            if !self.accept_request(ch, peer, transfer, len, capacity, now) {
                continue;
            }
            return true;
        }
    }

    /// Answers a request for the posted buffer: accepted (the data may flow)
    /// or refused as too large.
    fn accept_request(
        &mut self,
        ch: ChannelId,
        peer: PeerIdx,
        transfer: u32,
        len: u64,
        capacity: u64,
        now: Time,
    ) -> bool {
        if len > capacity {
            let from = self.peers[peer as usize].addr;
            self.push_channel_event(ChannelEvent::ReceiveFailed {
                channel: ch,
                from,
                error: TransferError::TooLarge { len, capacity },
                buffer: None,
            });
            self.send_ready(peer, ch.0, transfer, Status::TooSmall, capacity, now);
            return false;
        }
        if let Some(posting) = self.normal_mut(ch).and_then(|n| n.posted.as_mut()) {
            posting.active = Some((peer, transfer, len));
        }
        self.rx_transfers.insert(
            (peer, transfer),
            RxTransfer::Normal {
                channel: ch.0,
                received: 0,
                frontier: 0,
                last_activity: now,
            },
        );
        self.watch_stalls(now);
        self.send_ready(peer, ch.0, transfer, Status::Ok, capacity, now);
        true
    }

    /// The message on `ch` is complete: hand the buffer to the application.
    fn finish_normal_receive(&mut self, ch: ChannelId, peer: PeerIdx, transfer: u32) {
        self.rx_transfers.remove(&(peer, transfer));
        let Some(posting) = self.normal_mut(ch).and_then(|n| n.posted.take()) else {
            return;
        };
        let len = posting.active.map_or(0, |(_, _, l)| l as usize);
        let from = self.peers[peer as usize].addr;
        self.push_channel_event(ChannelEvent::Received {
            channel: ch,
            from,
            buffer: posting.buffer.into_vec(),
            len,
        });
        self.stats.transfers_received += 1;
    }

    // ------------------------------------------------- control messages

    /// Handles a control message of peer `idx`, in its order among the
    /// peer's messages.
    pub(super) fn on_control(&mut self, idx: PeerIdx, kind: FrameType, body: &[u8], now: Time) {
        let ok = match kind {
            FrameType::RndvRequest => read_body::<RndvRequest>(body).map(|(r, _)| {
                let (ch, t, len) = (ChannelId(r.channel.get()), r.transfer.get(), r.len.get());
                self.on_request(idx, ch, t, len, now);
            }),
            FrameType::RndvReady => read_body::<RndvReady>(body).map(|(r, _)| {
                let status = Status::from_code(r.status).unwrap_or(Status::NoChannel);
                self.on_ready(
                    idx,
                    r.channel.get(),
                    r.transfer.get(),
                    status,
                    r.capacity.get(),
                    now,
                );
            }),
            FrameType::RmaPut => read_body::<RmaRequest>(body).map(|(r, rest)| {
                let r = *r;
                let inline = rest
                    .get(..usize::try_from(r.len.get()).unwrap_or(usize::MAX))
                    .map(<[u8]>::to_vec);
                self.on_put_request(idx, &r, inline, now);
            }),
            FrameType::RmaGet => read_body::<RmaRequest>(body).map(|(r, _)| {
                let r = *r;
                self.on_get_request(idx, &r, now);
            }),
            FrameType::Control => read_body::<ControlBody>(body).and_then(|(c, _)| {
                let c = *c;
                self.on_control_body(idx, &c, now)
            }),
            _ => None,
        };
        if ok.is_none() {
            self.stats.bad_frames.bad_length += 1;
        }
    }

    fn on_request(&mut self, idx: PeerIdx, ch: ChannelId, transfer: u32, len: u64, now: Time) {
        let Some(n) = self.normal_mut(ch) else {
            self.send_ready(idx, ch.0, transfer, Status::NoChannel, 0, now);
            return;
        };
        match n.posted.as_ref() {
            Some(p) if p.active.is_none() && p.from.is_none_or(|f| f == idx) => {
                let capacity = p.buffer.len() as u64;
                self.accept_request(ch, idx, transfer, len, capacity, now);
            }
            _ => n.waiting.push_back((idx, transfer, len)),
        }
    }

    fn on_ready(
        &mut self,
        idx: PeerIdx,
        channel: u16,
        transfer: u32,
        status: Status,
        capacity: u64,
        now: Time,
    ) {
        if transfer == 0 {
            if status == Status::Ok {
                self.credits.insert((idx, channel), capacity);
            }
            return;
        }
        // A buffer announced earlier went to this request.
        self.credits.remove(&(idx, channel));
        let Some(&m) = self.out_transfers.get(&(idx, transfer)) else {
            return;
        };
        let len = self.messages[m as usize]
            .as_ref()
            .map_or(0, |x| self.body_len(&x.body));
        match status {
            Status::Ok => self.queue_transfer(m, now),
            Status::TooSmall => self.fail_transfer(
                m,
                TransferError::TooLarge {
                    len: u64::from(len),
                    capacity,
                },
            ),
            Status::Cancelled => self.fail_transfer(m, TransferError::Cancelled),
            _ => self.fail_transfer(m, TransferError::NoSuchChannel(ChannelId(channel))),
        }
    }

    /// Checks an RMA request against the open channel: the region it exposes
    /// if key and range are right, else the status to answer.
    /// The region an RMA request may access, or `None` after answering the
    /// initiator with `answer` and the reason (nothing touched).
    fn accept_rma(
        &mut self,
        idx: PeerIdx,
        req: &RmaRequest,
        answer: ControlCode,
        now: Time,
    ) -> Option<RegionId> {
        match self.check_rma(req) {
            Ok(region) => Some(region),
            Err((status, detail)) => {
                let (ch, transfer) = (req.channel.get(), req.transfer.get());
                self.send_control(idx, answer, status, ch, transfer, detail, now);
                None
            }
        }
    }

    fn check_rma(&self, req: &RmaRequest) -> Result<RegionId, (Status, u64)> {
        let ch = ChannelId(req.channel.get());
        let Some(Channel::Open { region, key }) = self.channel(ch) else {
            return Err((Status::NoChannel, 0));
        };
        if *key != req.key.get() {
            return Err((Status::BadKey, 0));
        }
        let Some(data) = self.region_data(*region) else {
            return Err((Status::Unregistered, 0));
        };
        let size = data.len() as u64;
        match req.offset.get().checked_add(req.len.get()) {
            Some(end) if end <= size => Ok(*region),
            _ => Err((Status::OutOfBounds, size)),
        }
    }

    fn on_put_request(
        &mut self,
        idx: PeerIdx,
        req: &RmaRequest,
        inline: Option<Vec<u8>>,
        now: Time,
    ) {
        let (ch, transfer) = (req.channel.get(), req.transfer.get());
        let Some(region) = self.accept_rma(idx, req, ControlCode::PutResult, now) else {
            return;
        };
        let (offset, len) = (req.offset.get(), req.len.get());
        if req.inline != 0 {
            let (Some(data), Some(dst)) = (
                inline,
                self.region_mut(region)
                    .and_then(|r| r.get_mut(offset as usize..(offset + len) as usize)),
            ) else {
                self.stats.bad_frames.bad_length += 1;
                return;
            };
            dst.copy_from_slice(&data);
            self.send_control(
                idx,
                ControlCode::PutResult,
                Status::Ok,
                ch,
                transfer,
                0,
                now,
            );
            return;
        }
        self.rx_transfers.insert(
            (idx, transfer),
            RxTransfer::Put {
                region,
                offset,
                len,
                received: 0,
                last_activity: now,
            },
        );
        self.watch_stalls(now);
        // Detail 1: send the data now.
        self.send_control(
            idx,
            ControlCode::PutResult,
            Status::Ok,
            ch,
            transfer,
            1,
            now,
        );
    }

    fn on_get_request(&mut self, idx: PeerIdx, req: &RmaRequest, now: Time) {
        let (ch, transfer) = (req.channel.get(), req.transfer.get());
        let Some(region) = self.accept_rma(idx, req, ControlCode::GetResult, now) else {
            return;
        };
        // The reply streams from the region; it is this port's own work, not
        // the application's, so it may exceed the send limit.
        let Some(m) = self.alloc_message(true) else {
            return;
        };
        if let Some(slot) = self.regions.get_mut(region.index as usize) {
            slot.busy += 1;
        }
        self.messages[m as usize] = Some(OutMessage {
            handle: SendHandle(u64::MAX),
            peer: idx,
            kind: FrameType::RmaGetReply,
            channel: ch,
            body: OutBody::Region {
                region,
                offset: req.offset.get(),
                len: req.len.get() as u32,
            },
            on_done: OnDone::GetReply,
            msg_id: transfer,
            first_seq: Seq(0),
            next_offset: 0,
            in_flight: 0,
            rma_offset: 0,
            next: super::peer::NO_MSG,
        });
        self.queue_transfer(m, now);
    }

    fn on_control_body(&mut self, idx: PeerIdx, c: &ControlBody, now: Time) -> Option<()> {
        let code = ControlCode::from_code(c.code)?;
        let status = Status::from_code(c.status)?;
        let transfer = c.transfer.get();
        let ch = ChannelId(c.channel.get());
        let error = |offset: u64, len: u64| match status {
            Status::BadKey => TransferError::BadKey,
            Status::OutOfBounds => TransferError::OutOfBounds {
                offset,
                len,
                region_len: c.detail.get(),
            },
            Status::Unregistered => TransferError::Unregistered,
            Status::Cancelled => TransferError::Cancelled,
            _ => TransferError::NoSuchChannel(ch),
        };
        match code {
            ControlCode::PutResult => {
                let &m = self.out_transfers.get(&(idx, transfer))?;
                let msg = self.messages[m as usize].as_ref()?;
                let (offset, len) = (msg.rma_offset, u64::from(self.body_len(&msg.body)));
                match (status, c.detail.get()) {
                    // Accepted: stream the data now.
                    (Status::Ok, 1) => self.queue_transfer(m, now),
                    // Done (the data came with the request).
                    (Status::Ok, _) => self.complete_message(m, None),
                    _ => self.fail_transfer(m, error(offset, len)),
                }
            }
            ControlCode::GetResult => {
                let wait = self.get_waits.remove(&(idx, transfer))?;
                let e = error(wait.offset, wait.buffer.len() as u64);
                self.push_channel_event(ChannelEvent::RmaFailed {
                    handle: wait.handle,
                    buffer: wait.buffer,
                    error: e,
                });
            }
            ControlCode::Cancel => {
                self.credits.remove(&(idx, ch.0));
                let &m = self.out_transfers.get(&(idx, transfer))?;
                self.fail_transfer(m, error(0, 0));
            }
        }
        Some(())
    }

    // ------------------------------------------------------ transfer data

    /// Takes the payload of a transfer frame (normal-channel or put data,
    /// or a get reply) from peer `idx`. Data nobody waits for is dropped,
    /// and the sender told to stop (its frames are still acknowledged).
    pub(super) fn on_transfer_data(&mut self, idx: PeerIdx, frame: &Frame<'_>, now: Time) {
        let h = frame.header();
        let transfer = h.msg_id.get();
        let offset = h.frag_offset.get();
        let total = u64::from(h.msg_len.get());
        let payload = frame.payload();
        let payload_len = frame.payload_len();
        if frame.is_placed() && frame.kind() != FrameType::Data {
            // Only normal-channel data is ever placed (`placement`).
            self.stats.bad_frames.bad_length += 1;
            return;
        }
        if frame.kind() == FrameType::RmaGetReply {
            let Some(wait) = self.get_waits.get_mut(&(idx, transfer)) else {
                self.stats.transfer_frames_dropped += 1;
                return;
            };
            if let Some(dst) = usize::try_from(offset)
                .ok()
                .and_then(|o| wait.buffer.get_mut(o..o.checked_add(payload.len())?))
            {
                dst.copy_from_slice(payload);
                wait.received += payload.len() as u64;
                wait.last_activity = now;
            } else {
                self.stats.bad_frames.bad_length += 1;
            }
            if wait.received >= wait.buffer.len() as u64 {
                if let Some(w) = self.get_waits.remove(&(idx, transfer)) {
                    self.push_channel_event(ChannelEvent::GetDone {
                        handle: w.handle,
                        buffer: w.buffer,
                    });
                }
            }
            return;
        }
        let ch = ChannelId(h.channel.get());
        if !self.rx_transfers.contains_key(&(idx, transfer))
            && !self.adopt_announced(idx, ch, transfer, total, now)
        {
            // Nobody wants it (cancelled, or never asked for): drop, and tell
            // the sender once per transfer.
            self.stats.transfer_frames_dropped += 1;
            if offset == 0 {
                self.send_control(
                    idx,
                    ControlCode::Cancel,
                    Status::Cancelled,
                    ch.0,
                    transfer,
                    0,
                    now,
                );
            }
            return;
        }
        let now_done = match self.rx_transfers.get(&(idx, transfer)) {
            Some(RxTransfer::Normal { channel, .. }) => {
                let channel = ChannelId(*channel);
                let written = match self.channels.get_mut(usize::from(channel.0)) {
                    Some(Some(Channel::Normal(NormalChannel {
                        posted: Some(posting),
                        ..
                    }))) => {
                        let expected_len = posting.active.map_or(0, |(_, _, l)| l);
                        usize::try_from(offset)
                            .ok()
                            .filter(|_| total == expected_len)
                            .and_then(|o| posting.buffer.get_mut(o..o.checked_add(payload_len)?))
                            // A placed payload is there already.
                            .map(|dst| {
                                if !frame.is_placed() {
                                    dst.copy_from_slice(payload)
                                }
                            })
                            .is_some()
                    }
                    _ => false,
                };
                written.then_some(Some(channel))
            }
            Some(RxTransfer::Put {
                region,
                offset: base,
                len,
                ..
            }) => {
                let (region, base, len) = (*region, *base, *len);
                let in_range = !frame.is_placed()
                    && total == len
                    && offset
                        .checked_add(payload.len() as u64)
                        .is_some_and(|end| end <= len);
                let written = in_range
                    && self
                        .region_mut(region)
                        .and_then(|r| {
                            let start = usize::try_from(base.checked_add(offset)?).ok()?;
                            r.get_mut(start..start.checked_add(payload.len())?)
                        })
                        .map(|dst| dst.copy_from_slice(payload))
                        .is_some();
                written.then_some(None)
            }
            None => return,
        };
        let Some(finished_channel) = now_done else {
            self.stats.bad_frames.bad_length += 1;
            return;
        };
        let done = match self.rx_transfers.get_mut(&(idx, transfer)) {
            Some(RxTransfer::Normal {
                received,
                frontier,
                last_activity,
                ..
            }) => {
                *received += payload_len as u64;
                *frontier = (*frontier).max(offset + payload_len as u64);
                *last_activity = now;
                *received >= total
            }
            Some(RxTransfer::Put {
                received,
                last_activity,
                ..
            }) => {
                *received += payload_len as u64;
                *last_activity = now;
                *received >= total
            }
            None => false,
        };
        if done {
            match finished_channel {
                Some(ch) => self.finish_normal_receive(ch, idx, transfer),
                None => {
                    self.rx_transfers.remove(&(idx, transfer));
                }
            }
        }
    }

    /// Whether the buffer posted on `ch` was announced to peer `idx`, is
    /// free, and holds `len` bytes: data of a transfer that never asked may
    /// then start it ([`Port::adopt_announced`]).
    pub(super) fn adoptable(&self, idx: PeerIdx, ch: ChannelId, len: u64) -> bool {
        match self.channel(ch) {
            Some(Channel::Normal(NormalChannel {
                posted: Some(posting),
                ..
            })) => {
                posting.from == Some(idx)
                    && posting.active.is_none()
                    && posting.buffer.len() as u64 >= len
            }
            _ => false,
        }
    }

    /// The buffer posted on normal channel `ch`, whole.
    pub(super) fn posted_buffer_mut(&mut self, ch: ChannelId) -> Option<&mut [u8]> {
        self.normal_mut(ch)?
            .posted
            .as_mut()
            .map(|p| &mut p.buffer[..])
    }

    /// Data for a transfer that never asked: acceptable if the receiver
    /// announced its buffer on `ch` to this peer and it is free and large
    /// enough. Starts the transfer then.
    pub(super) fn adopt_announced(
        &mut self,
        idx: PeerIdx,
        ch: ChannelId,
        transfer: u32,
        len: u64,
        now: Time,
    ) -> bool {
        if !self.adoptable(idx, ch, len) {
            return false;
        }
        let Some(posting) = self.normal_mut(ch).and_then(|n| n.posted.as_mut()) else {
            return false;
        };
        posting.active = Some((idx, transfer, len));
        self.rx_transfers.insert(
            (idx, transfer),
            RxTransfer::Normal {
                channel: ch.0,
                received: 0,
                frontier: 0,
                last_activity: now,
            },
        );
        self.watch_stalls(now);
        true
    }

    // ------------------------------------------------- bulk destinations

    /// The length of the message being received into the buffer posted on
    /// `channel`, if that receive is transfer `key`.
    pub(super) fn active_receive_len(&self, channel: u16, key: (PeerIdx, u32)) -> Option<u64> {
        match self.channels.get(usize::from(channel))? {
            Some(Channel::Normal(NormalChannel {
                posted: Some(posting),
                ..
            })) => match posting.active {
                Some((peer, transfer, len)) if (peer, transfer) == key => Some(len),
                _ => None,
            },
            _ => None,
        }
    }

    /// Where the data of arriving transfer `key` goes, whole: the posted
    /// buffer's first `len` bytes, or the region's range.
    pub(super) fn transfer_dest(&mut self, key: (PeerIdx, u32)) -> Option<&mut [u8]> {
        match self.rx_transfers.get(&key)? {
            RxTransfer::Normal { channel, .. } => {
                let ch = usize::from(*channel);
                match self.channels.get_mut(ch) {
                    Some(Some(Channel::Normal(NormalChannel {
                        posted: Some(posting),
                        ..
                    }))) => {
                        let len = usize::try_from(posting.active.map_or(0, |(_, _, l)| l)).ok()?;
                        posting.buffer.get_mut(..len)
                    }
                    _ => None,
                }
            }
            RxTransfer::Put {
                region,
                offset,
                len,
                ..
            } => {
                let (region, offset, len) = (*region, *offset, *len);
                let start = usize::try_from(offset).ok()?;
                let end = start.checked_add(usize::try_from(len).ok()?)?;
                self.region_mut(region)?.get_mut(start..end)
            }
        }
    }

    /// Arriving transfer `key` is complete (written whole by the engine).
    pub(super) fn finish_inbound(&mut self, key: (PeerIdx, u32), _now: Time) {
        match self.rx_transfers.get(&key) {
            Some(RxTransfer::Normal { channel, .. }) => {
                let ch = ChannelId(*channel);
                self.finish_normal_receive(ch, key.0, key.1);
            }
            Some(RxTransfer::Put { .. }) => {
                self.rx_transfers.remove(&key);
            }
            None => {}
        }
    }

    /// Tells the sender of a normal-channel transfer nobody waits for that it
    /// was cancelled.
    pub(super) fn cancel_inbound(&mut self, idx: PeerIdx, channel: u16, transfer: u32, now: Time) {
        self.send_control(
            idx,
            ControlCode::Cancel,
            Status::Cancelled,
            channel,
            transfer,
            0,
            now,
        );
    }

    /// Fails every transfer arriving from peer `idx`, and the buffers
    /// posted for it alone.
    pub(super) fn fail_inbound_from(&mut self, idx: PeerIdx, error: TransferError) {
        self.fail_transfers_from(idx, error);
        // Buffers posted for it alone come back.
        let from = self.peers[idx as usize].addr;
        let mut orphaned = Vec::new();
        for (ch, c) in self.channels.iter_mut().enumerate() {
            if let Some(Channel::Normal(n)) = c {
                if n.posted.as_ref().is_some_and(|p| p.from == Some(idx)) {
                    let buffer = n.posted.take().map(|p| p.buffer.into_vec());
                    orphaned.push((ChannelId(ch as u16), buffer));
                }
            }
        }
        for (channel, buffer) in orphaned {
            self.push_channel_event(ChannelEvent::ReceiveFailed {
                channel,
                from,
                error,
                buffer,
            });
        }
    }

    /// Fails every transfer arriving from peer `idx` (its data will never
    /// come: the sending process or its stream is gone) and forgets its
    /// requests waiting for a buffer. Buffers posted for it stay: a later
    /// incarnation or stream may fill them.
    pub(super) fn fail_transfers_from(&mut self, idx: PeerIdx, error: TransferError) {
        let keys: Vec<_> = self
            .rx_transfers
            .keys()
            .filter(|(p, _)| *p == idx)
            .copied()
            .collect();
        let from = self.peers[idx as usize].addr;
        for key in keys {
            if let Some(RxTransfer::Normal { channel, .. }) = self.rx_transfers.remove(&key) {
                let ch = ChannelId(channel);
                let buffer = self
                    .normal_mut(ch)
                    .and_then(|n| n.posted.take())
                    .map(|p| p.buffer.into_vec());
                self.push_channel_event(ChannelEvent::ReceiveFailed {
                    channel: ch,
                    from,
                    error,
                    buffer,
                });
            }
        }
        // Requests from it waiting for a buffer are dropped.
        for c in self.channels.iter_mut() {
            if let Some(Channel::Normal(n)) = c {
                n.waiting.retain(|(p, _, _)| *p != idx);
            }
        }
    }

    // ------------------------------------------------------------ failures

    /// Fails the remote reads waiting for peer `idx`.
    pub(super) fn fail_get_waits(&mut self, idx: PeerIdx, failure: SendFailure) {
        let error = TransferError::from(failure);
        let keys: Vec<_> = self
            .get_waits
            .keys()
            .filter(|(p, _)| *p == idx)
            .copied()
            .collect();
        for k in keys {
            if let Some(w) = self.get_waits.remove(&k) {
                self.push_channel_event(ChannelEvent::RmaFailed {
                    handle: w.handle,
                    buffer: w.buffer,
                    error,
                });
            }
        }
    }

    /// Makes sure transfers that stop making progress are noticed.
    fn watch_stalls(&mut self, now: Time) {
        if self.stall_check_at == Time::NEVER {
            self.stall_check_at = now + self.cfg.transfer_timeout / 2;
        }
    }

    /// Fails arriving transfers and remote reads that saw nothing for the
    /// configured transfer timeout (their sender disappeared mid-transfer).
    pub(super) fn check_stalled_transfers(&mut self, now: Time) {
        if now < self.stall_check_at {
            return;
        }
        let timeout = self.cfg.transfer_timeout;
        let stalled = |last: Time| now.saturating_since(last) >= timeout;
        let dead_rx: Vec<_> = self
            .rx_transfers
            .iter()
            .filter(|(_, t)| match t {
                RxTransfer::Normal { last_activity, .. }
                | RxTransfer::Put { last_activity, .. } => stalled(*last_activity),
            })
            .map(|(k, _)| *k)
            .collect();
        for key in dead_rx {
            if let Some(RxTransfer::Normal { channel, .. }) = self.rx_transfers.remove(&key) {
                let ch = ChannelId(channel);
                let buffer = self
                    .normal_mut(ch)
                    .and_then(|n| n.posted.take())
                    .map(|p| p.buffer.into_vec());
                let from = self.peers[key.0 as usize].addr;
                self.push_channel_event(ChannelEvent::ReceiveFailed {
                    channel: ch,
                    from,
                    error: TransferError::Stalled(from),
                    buffer,
                });
            }
        }
        let dead_gets: Vec<_> = self
            .get_waits
            .iter()
            .filter(|(_, w)| stalled(w.last_activity))
            .map(|(k, _)| *k)
            .collect();
        for key in dead_gets {
            if let Some(w) = self.get_waits.remove(&key) {
                let from = self.peers[key.0 as usize].addr;
                self.push_channel_event(ChannelEvent::RmaFailed {
                    handle: w.handle,
                    buffer: w.buffer,
                    error: TransferError::Stalled(from),
                });
            }
        }
        self.stall_check_at = if self.rx_transfers.is_empty() && self.get_waits.is_empty() {
            Time::NEVER
        } else {
            now + timeout / 2
        };
    }
}
