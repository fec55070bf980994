//! The BCL wire format.
//!
//! Every frame starts with a fixed 64-byte [`Header`] (one cache line) in
//! network byte order, followed by `payload_len` bytes of payload. On
//! Ethernet methods the header follows an Ethernet II header with the BCL
//! EtherType; on the `udp` method it is the UDP payload. Trailing bytes after
//! the payload (Ethernet padding) are ignored.
//!
//! ```text
//!  0       1       2               4                               8
//!  +-------+-------+---------------+-------------------------------+
//!  |version| type  |  gen  | flags |            job key            |
//!  +-------+-------+---------------+---------------+---------------+
//!  |          source node          |  source port  |   dest port   |
//!  +-------------------------------+---------------+---------------+
//!  |           dest node           |     source incarnation        |
//!  +-------------------------------+-------------------------------+
//!  |        sequence number        |  cumulative ack (next wanted) |
//!  +-------------------------------+---------------+---------------+
//!  |  window base (oldest unacked) |    channel    |  payload len  |
//!  +-------------------------------+---------------+---------------+
//!  |          message id           | sequence number of the first  |
//!  |                               |  frame of this message        |
//!  +-------------------------------+-------------------------------+
//!  |                 fragment offset (64 bits)                     |
//!  +-------------------------------+-------------------------------+
//!  |        message length         |     CRC32C (header+payload)   |
//!  +-------------------------------+-------------------------------+
//! ```
//!
//! The source incarnation tells process starts at one address apart: it
//! grows with each start (the endpoint takes it from the wall clock), so a
//! receiver drops frames of an older incarnation still in flight. `gen` is
//! the sender's stream generation towards this receiver: it counts up each
//! time the sender gives up on the receiver and starts a fresh sequence
//! space. Both are compared in serial-number order (wrapping).
//!
//! The frames of one ordered message have consecutive sequence numbers
//! starting at `msg_seq`, so a receiver knows exactly which frames belong to
//! a message it has to drop. (Transfer frames, which never need dropping,
//! carry the id of the sender's next ordered message there instead.)
//!
//! A DATA frame with [`flags::BUNDLE`] carries several whole small
//! system-channel messages with consecutive message ids instead of one
//! message's fragment: see [`bundle`] for its payload layout (a record count,
//! then a length and the bytes of each message).
//!
//! Frame type 11 is a [`container`] of whole frames between two node
//! daemons; ports never accept it.
//!
//! [`parse`] checks version, type, lengths, job key, destination, (when
//! present or required) the CRC32C and every record of a bundle before it
//! returns a [`Frame`]; anything wrong is a typed [`FrameError`], never a
//! panic. [`encode`] writes a header
//! and payload into a buffer the caller lends.

mod ack;
pub mod bundle;
pub mod container;
pub mod control;

pub use ack::{AckBody, NakReason, SACK_BITS};

use crate::addr::{JobKey, NodeId, PortId, ProcessAddr};
use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// The wire-format version this build speaks.
pub const VERSION: u8 = 1;

/// The default EtherType of BCL frames (IEEE 802 local experimental 1).
pub const DEFAULT_ETHERTYPE: u16 = 0x88B5;

/// Size of the BCL header in bytes.
pub const HEADER_LEN: usize = core::mem::size_of::<Header>();

/// Offset of the CRC field: the CRC covers the header bytes before it and the
/// payload.
const CRC_OFFSET: usize = HEADER_LEN - 4;

/// The BCL frame header, exactly as on the wire (network byte order).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Header {
    /// Wire-format version, [`VERSION`].
    pub version: u8,
    /// [`FrameType`] code.
    pub frame_type: u8,
    /// The sender's stream generation towards this receiver: a new value
    /// starts a new sequence space within the same incarnation.
    pub generation: u8,
    /// [`flags`] bits.
    pub flags: u8,
    /// The job the frame belongs to.
    pub job: U32,
    /// Sender's node.
    pub src_node: U32,
    /// Sender's port.
    pub src_port: U16,
    /// Receiver's port.
    pub dst_port: U16,
    /// Receiver's node.
    pub dst_node: U32,
    /// Incarnation of the sending port: larger (in serial order) for each
    /// start of a process at the same address. A new value means the
    /// sender restarted; frames of an older one are stale.
    pub epoch: U32,
    /// Sequence number of a DATA frame (unused otherwise).
    pub seq: U32,
    /// Cumulative acknowledgement: every sequence number before it has been
    /// received. Valid when [`flags::ACK`] is set.
    pub ack: U32,
    /// Oldest sequence number the sender still holds unacknowledged; a
    /// receiver meeting this sender for the first time starts here.
    pub base: U32,
    /// Channel the payload is for (0 = system channel).
    pub channel: U16,
    /// Payload bytes following the header.
    pub payload_len: U16,
    /// Message id, per sender and receiver, counting up from 0 (for
    /// transfers on normal and open channels: the transfer id).
    pub msg_id: U32,
    /// For ordered messages (system channel, control): the sequence number
    /// of the message's first frame; its frames are numbered consecutively
    /// from here. For transfer frames: the id of the sender's next ordered
    /// message, so a receiver meeting the sender at this frame knows where
    /// the ordered stream stands.
    pub msg_seq: U32,
    /// Offset of this fragment's payload in the message.
    pub frag_offset: U64,
    /// Length of the whole message.
    pub msg_len: U32,
    /// CRC32C over the header bytes before this field and the payload; valid
    /// when [`flags::CRC`] is set.
    pub crc: U32,
}

/// Bytes of a node's live ports after an ACK frame's body ([`flags::NODE`]).
pub const NODE_VIEW_LEN: usize = 16;

/// Header flag bits.
pub mod flags {
    /// The `ack` field carries a cumulative acknowledgement.
    pub const ACK: u8 = 1 << 0;
    /// The `crc` field carries a CRC32C.
    pub const CRC: u8 = 1 << 1;
    /// The `ack` value is sent for the first time: it advances past every
    /// acknowledgement sent to this peer before. Only such an
    /// acknowledgement is a valid round-trip sample (a repeated one may
    /// answer a frame whose first acknowledgement was lost long ago).
    pub const ACK_FRESH: u8 = 1 << 2;
    /// The frame travels over a method that neither loses nor reorders
    /// (shared memory): it has no sequence number and is never acknowledged
    /// or resent. Accepted only from such a method.
    pub const UNSEQUENCED: u8 = 1 << 3;
    /// A DATA frame of the system channel whose payload is a bundle of
    /// whole messages with consecutive ids (see [`super::bundle`]), not one
    /// message's fragment. Only on sequenced frames.
    pub const BUNDLE: u8 = 1 << 4;
    /// On an ACK frame: the sender asks whether we are still there (it
    /// heard nothing from us for a while) and wants an ACK frame back at
    /// once. An ACK frame without [`ACK`] carries no acknowledgement, only
    /// liveness (a ping, or the answer of a port with nothing to
    /// acknowledge).
    pub const PING: u8 = 1 << 5;
    /// On an ACK frame: after the ack body come [`NODE_VIEW_LEN`] bytes,
    /// the sender node's live ports (bit p of port p, little-endian words;
    /// see `port::node`): the answer to a ping from a node that shares
    /// liveness per node.
    ///
    /// [`NODE_VIEW_LEN`]: super::NODE_VIEW_LEN
    pub const NODE: u8 = 1 << 6;
    /// On a sequenced frame: the sender saw frames missing in some peer's
    /// stream to it lately (a queue on its way overflowed, or frames were
    /// reordered). A port whose congestion control waits for congestion
    /// (mode auto) starts controlling its path to the sender: senders into
    /// one receiver that never lose a frame themselves would otherwise keep
    /// their fixed windows while the controlled ones yield to the queue
    /// those windows keep.
    pub const CONGESTED: u8 = 1 << 7;
}

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// A fragment of a message.
    Data = 1,
    /// Acknowledgement: cumulative plus a selective bitmap ([`AckBody`]).
    Ack = 2,
    /// Negative acknowledgement with a reason ([`AckBody`]).
    Nak = 3,
    /// Rendezvous request for a normal channel (reserved).
    RndvRequest = 4,
    /// Rendezvous ready: the receiver posted a buffer (reserved).
    RndvReady = 5,
    /// Remote memory write into an open channel (reserved).
    RmaPut = 6,
    /// Remote memory read from an open channel (reserved).
    RmaGet = 7,
    /// Reply data of a remote read (reserved).
    RmaGetReply = 8,
    /// Control message (reserved).
    Control = 9,
    /// A service message: ordered with the system channel's messages like
    /// DATA, but for the receiving engine's remote-service layer (requests
    /// to handlers and their answers), never for the application's receive
    /// queue. Never bundled.
    Service = 10,
}

impl FrameType {
    /// The frame type with wire code `code`, if any.
    pub fn from_code(code: u8) -> Option<FrameType> {
        Some(match code {
            1 => FrameType::Data,
            2 => FrameType::Ack,
            3 => FrameType::Nak,
            4 => FrameType::RndvRequest,
            5 => FrameType::RndvReady,
            6 => FrameType::RmaPut,
            7 => FrameType::RmaGet,
            8 => FrameType::RmaGetReply,
            9 => FrameType::Control,
            10 => FrameType::Service,
            _ => return None,
        })
    }
}

/// Why a received frame was dropped before anything was read from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than a header.
    #[error("frame of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated(usize),
    /// Unknown wire-format version.
    #[error("unsupported wire-format version {0}")]
    BadVersion(u8),
    /// Unknown frame type.
    #[error("unknown frame type {0}")]
    BadType(u8),
    /// Flag bits that make no sense together (these bits, with the others
    /// the frame carries).
    #[error("flag bits {0:#06x} not allowed with the others")]
    BadFlags(u8),
    /// `payload_len` runs past the end of the frame, or the message fields
    /// are inconsistent (fragment past the message end).
    #[error("inconsistent lengths")]
    BadLength,
    /// The CRC32C does not match.
    #[error("CRC32C mismatch")]
    BadChecksum,
    /// The link requires a CRC32C and the frame carries none.
    #[error("frame carries no CRC32C but the link requires one")]
    MissingChecksum,
    /// Another job's frame.
    #[error("frame of job {0:#x}")]
    WrongJob(u32),
    /// Addressed to another process.
    #[error("frame addressed to another process")]
    WrongDestination,
    /// A bundle frame whose header fields or records are inconsistent
    /// (see [`bundle`]).
    #[error("malformed bundle")]
    BadBundle,
}

/// A validated frame, read in place.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    header: &'a Header,
    kind: FrameType,
    payload: &'a [u8],
    /// The payload was written by the method straight to where it belongs
    /// ([`parse_placed`]); `payload` is then empty.
    placed: bool,
}

impl<'a> Frame<'a> {
    /// The raw header.
    pub fn header(&self) -> &'a Header {
        self.header
    }
    /// The frame type.
    pub fn kind(&self) -> FrameType {
        self.kind
    }
    /// The payload bytes (empty for a [placed](Frame::is_placed) frame).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
    /// The payload's length, from the validated header (also for a placed
    /// frame, whose bytes are not here).
    pub fn payload_len(&self) -> usize {
        usize::from(self.header.payload_len.get())
    }
    /// Whether the payload is already at its destination ([`parse_placed`]).
    pub fn is_placed(&self) -> bool {
        self.placed
    }
    /// The sender.
    pub fn src(&self) -> ProcessAddr {
        ProcessAddr {
            node: NodeId(self.header.src_node.get()),
            port: PortId(self.header.src_port.get()),
        }
    }
    /// The header flags.
    pub fn flags(&self) -> u8 {
        self.header.flags
    }
    /// The sender's stream generation towards us.
    pub fn generation(&self) -> u8 {
        self.header.generation
    }
    /// Whether the payload is a bundle of whole messages ([`flags::BUNDLE`];
    /// already validated by [`parse`]).
    pub fn is_bundle(&self) -> bool {
        self.flags() & flags::BUNDLE != 0
    }
    /// The sender's incarnation.
    pub fn epoch(&self) -> u32 {
        self.header.epoch.get()
    }
    /// The cumulative acknowledgement, when the frame carries one.
    pub fn ack(&self) -> Option<u32> {
        (self.flags() & flags::ACK != 0).then(|| self.header.ack.get())
    }
    /// Whether the acknowledgement is sent for the first time
    /// ([`flags::ACK_FRESH`]).
    pub fn ack_is_fresh(&self) -> bool {
        self.flags() & flags::ACK_FRESH != 0
    }
}

/// What the receiving side checks besides the frame's own consistency.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Only frames of this job are accepted.
    pub job: JobKey,
    /// Only frames addressed to this process are accepted.
    pub local: ProcessAddr,
    /// Frames without a CRC32C are rejected.
    pub require_crc: bool,
}

/// Validates `bytes` as a BCL frame for the receiver described by `expect`.
///
/// Checks, in this order: length, version, type, flags, payload length and
/// message fields, bundle records, CRC32C, job key, destination. Nothing is trusted before it
/// is checked, and nothing panics on any input.
pub fn parse<'a>(bytes: &'a [u8], expect: &Expect) -> Result<Frame<'a>, FrameError> {
    let (header, rest) =
        Header::ref_from_prefix(bytes).map_err(|_| FrameError::Truncated(bytes.len()))?;
    let kind = check_head(header)?;
    let payload_len = usize::from(header.payload_len.get());
    let payload = rest.get(..payload_len).ok_or(FrameError::BadLength)?;
    check_body(header, kind, &bytes[..CRC_OFFSET], payload, expect)?;
    Ok(Frame {
        header,
        kind,
        payload,
        placed: false,
    })
}

/// Validates a frame whose header is `header_bytes` and whose payload the
/// method has already written to its destination, `payload` (a receive
/// straight into a posted buffer). The same checks as [`parse`], over the
/// same bytes; the frame returned borrows only the header and is
/// [placed](Frame::is_placed).
pub fn parse_placed<'a>(
    header_bytes: &'a [u8],
    payload: &[u8],
    expect: &Expect,
) -> Result<Frame<'a>, FrameError> {
    let (header, rest) = Header::ref_from_prefix(header_bytes)
        .map_err(|_| FrameError::Truncated(header_bytes.len()))?;
    let kind = check_head(header)?;
    if !rest.is_empty() || usize::from(header.payload_len.get()) != payload.len() {
        return Err(FrameError::BadLength);
    }
    check_body(header, kind, &header_bytes[..CRC_OFFSET], payload, expect)?;
    Ok(Frame {
        header,
        kind,
        payload: &[],
        placed: true,
    })
}

/// The checks of [`parse`] on the header alone: version, type, flags.
fn check_head(header: &Header) -> Result<FrameType, FrameError> {
    if header.version != VERSION {
        return Err(FrameError::BadVersion(header.version));
    }
    let kind =
        FrameType::from_code(header.frame_type).ok_or(FrameError::BadType(header.frame_type))?;
    let flag_bits = header.flags;
    // Every bit of the flags byte has a meaning. Frames of a method that
    // never loses have no congestion to report.
    if flag_bits & flags::UNSEQUENCED != 0 && flag_bits & flags::CONGESTED != 0 {
        return Err(FrameError::BadFlags(flags::CONGESTED));
    }
    Ok(kind)
}

/// The checks of [`parse`] after the payload is cut to `payload_len`:
/// message fields, bundle records, CRC32C, job key, destination.
/// `header_prefix` is the header up to its CRC field.
fn check_body(
    header: &Header,
    kind: FrameType,
    header_prefix: &[u8],
    payload: &[u8],
    expect: &Expect,
) -> Result<(), FrameError> {
    let flag_bits = header.flags;
    let frag_end = header.frag_offset.get().checked_add(payload.len() as u64);
    if kind == FrameType::Data && frag_end.is_none_or(|end| end > u64::from(header.msg_len.get())) {
        return Err(FrameError::BadLength);
    }
    if flag_bits & flags::BUNDLE != 0 {
        check_bundle(header, kind, flag_bits, payload)?;
    }
    if flag_bits & flags::CRC != 0 {
        if checksum(header_prefix, payload) != header.crc.get() {
            return Err(FrameError::BadChecksum);
        }
    } else if expect.require_crc {
        return Err(FrameError::MissingChecksum);
    }
    if header.job.get() != expect.job.0 {
        return Err(FrameError::WrongJob(header.job.get()));
    }
    if header.dst_node.get() != expect.local.node.0 || header.dst_port.get() != expect.local.port.0
    {
        return Err(FrameError::WrongDestination);
    }
    Ok(())
}

/// A bundle is a sequenced system-channel DATA frame that is the only frame
/// of each of its messages, and its records fill the payload exactly.
fn check_bundle(
    header: &Header,
    kind: FrameType,
    flag_bits: u8,
    payload: &[u8],
) -> Result<(), FrameError> {
    let consistent = kind == FrameType::Data
        && flag_bits & flags::UNSEQUENCED == 0
        && header.channel.get() == 0
        && header.frag_offset.get() == 0
        && header.msg_seq.get() == header.seq.get()
        && header.msg_len.get() as usize == payload.len();
    if !consistent || bundle::validate(payload).is_none() {
        return Err(FrameError::BadBundle);
    }
    Ok(())
}

/// The fields of a header to write; the rest (version, payload length, CRC)
/// [`encode`] fills in.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeaderFields {
    /// Frame type code (see [`FrameType`]).
    pub kind: Option<FrameType>,
    /// Flags other than [`flags::CRC`], which [`encode`] sets itself.
    pub flags: u8,
    /// Sender's stream generation towards the receiver.
    pub generation: u8,
    /// Job key.
    pub job: JobKey,
    /// Sender.
    pub src: ProcessAddr,
    /// Receiver.
    pub dst: ProcessAddr,
    /// Sender's incarnation.
    pub epoch: u32,
    /// Sequence number.
    pub seq: u32,
    /// Cumulative acknowledgement (meaningful with [`flags::ACK`]).
    pub ack: u32,
    /// Sender's window base.
    pub base: u32,
    /// Channel.
    pub channel: u16,
    /// Message id.
    pub msg_id: u32,
    /// Sequence number of the message's first frame.
    pub msg_seq: u32,
    /// Fragment offset.
    pub frag_offset: u64,
    /// Message length.
    pub msg_len: u32,
}

/// Why [`encode`] could not write a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The buffer is smaller than header plus payload.
    #[error("buffer of {have} bytes cannot hold a {need}-byte frame")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The payload is longer than a frame can carry.
    #[error("payload of {0} bytes exceeds the 65535-byte frame limit")]
    PayloadTooLong(usize),
    /// No frame type was given.
    #[error("no frame type given")]
    NoType,
}

/// Writes a frame (header, then `payload`) at the start of `buf` and returns
/// its length. With `crc` the CRC32C is computed and [`flags::CRC`] set.
pub fn encode(
    buf: &mut [u8],
    fields: &HeaderFields,
    payload: &[u8],
    crc: bool,
) -> Result<usize, EncodeError> {
    let need = HEADER_LEN + payload.len();
    if buf.len() < need {
        return Err(EncodeError::BufferTooSmall {
            need,
            have: buf.len(),
        });
    }
    buf[HEADER_LEN..need].copy_from_slice(payload);
    encode_header_for_payload_in_place(buf, fields, payload.len(), crc)?;
    Ok(need)
}

/// Writes the header into `buf[..HEADER_LEN]` for a payload of `payload_len`
/// bytes that the caller has already placed at `buf[HEADER_LEN..]`, and
/// returns the frame length. Used to write payload straight from its source
/// into a lent buffer without a staging copy.
pub fn encode_header_for_payload_in_place(
    buf: &mut [u8],
    fields: &HeaderFields,
    payload_len: usize,
    crc: bool,
) -> Result<usize, EncodeError> {
    let need = HEADER_LEN + payload_len;
    if buf.len() < need {
        return Err(EncodeError::BufferTooSmall {
            need,
            have: buf.len(),
        });
    }
    let (head, rest) = buf.split_at_mut(HEADER_LEN);
    write_header(head, fields, &rest[..payload_len], crc)?;
    Ok(need)
}

/// Writes into `buf[..HEADER_LEN]` the header of a frame whose payload,
/// `payload`, is sent from where it lies (a scattered send); returns the
/// frame's length, header and payload. `buf` may be just the header long.
pub fn encode_header_for_payload_elsewhere(
    buf: &mut [u8],
    fields: &HeaderFields,
    payload: &[u8],
    crc: bool,
) -> Result<usize, EncodeError> {
    let have = buf.len();
    let head = buf
        .get_mut(..HEADER_LEN)
        .ok_or(EncodeError::BufferTooSmall {
            need: HEADER_LEN,
            have,
        })?;
    write_header(head, fields, payload, crc)?;
    Ok(HEADER_LEN + payload.len())
}

/// Writes the header (exactly [`HEADER_LEN`] bytes) of a frame with
/// `payload`; with `crc`, its CRC32C over the header and `payload`.
fn write_header(
    head: &mut [u8],
    fields: &HeaderFields,
    payload: &[u8],
    crc: bool,
) -> Result<(), EncodeError> {
    let kind = fields.kind.ok_or(EncodeError::NoType)?;
    let wire_len =
        u16::try_from(payload.len()).map_err(|_| EncodeError::PayloadTooLong(payload.len()))?;
    let mut flag_bits = fields.flags & !flags::CRC;
    if crc {
        flag_bits |= flags::CRC;
    }
    let header = Header {
        version: VERSION,
        frame_type: kind as u8,
        generation: fields.generation,
        flags: flag_bits,
        job: U32::new(fields.job.0),
        src_node: U32::new(fields.src.node.0),
        src_port: U16::new(fields.src.port.0),
        dst_port: U16::new(fields.dst.port.0),
        dst_node: U32::new(fields.dst.node.0),
        epoch: U32::new(fields.epoch),
        seq: U32::new(fields.seq),
        ack: U32::new(fields.ack),
        base: U32::new(fields.base),
        channel: U16::new(fields.channel),
        payload_len: U16::new(wire_len),
        msg_id: U32::new(fields.msg_id),
        msg_seq: U32::new(fields.msg_seq),
        frag_offset: U64::new(fields.frag_offset),
        msg_len: U32::new(fields.msg_len),
        crc: U32::new(0),
    };
    head.copy_from_slice(header.as_bytes());
    if crc {
        let sum = checksum(&head[..CRC_OFFSET], payload);
        head[CRC_OFFSET..].copy_from_slice(&sum.to_be_bytes());
    }
    Ok(())
}

/// CRC32C over the header bytes before the CRC field and the payload.
fn checksum(header_prefix: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header_prefix), payload)
}

#[cfg(test)]
mod tests;
