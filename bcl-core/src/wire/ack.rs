//! Payload of ACK and NAK frames: selective acknowledgement and NAK reason.

use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Frames past the cumulative acknowledgement that one ACK can describe.
pub const SACK_BITS: usize = 256;

/// Why a receiver sends a NAK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakReason {
    /// Not a NAK: a plain acknowledgement.
    None = 0,
    /// Frames are missing before ones that arrived (the bitmap says which).
    Gap = 1,
    /// A frame was dropped because the receive ring was full; the sender
    /// should back off before resending it.
    RingFull = 2,
}

impl NakReason {
    /// The reason with wire code `code`, if any.
    pub fn from_code(code: u8) -> Option<NakReason> {
        match code {
            0 => Some(NakReason::None),
            1 => Some(NakReason::Gap),
            2 => Some(NakReason::RingFull),
            _ => None,
        }
    }
}

/// Payload of ACK and NAK frames. The header's `ack` field carries the
/// cumulative acknowledgement `A` (the next sequence number wanted); bit `i`
/// of `bitmap` (byte `i / 8`, least significant bit first) says that
/// sequence number `A + 1 + i` has been received.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct AckBody {
    /// [`NakReason`] code.
    pub reason: u8,
    /// DATA frames this receiver got again since its previous ACK or NAK
    /// to the same sender (saturating at 255): resends that were not
    /// needed, or copies the network made. A sender widens its reordering
    /// window on them. (Zero from receivers older than this field.)
    pub duplicates: u8,
    /// How many bits of `bitmap` are meaningful.
    pub sack_bits: U16,
    /// For [`NakReason::RingFull`]: the sequence number that was dropped.
    pub dropped_seq: U32,
    /// Selective acknowledgement bitmap.
    pub bitmap: [u8; SACK_BITS / 8],
}

impl AckBody {
    /// An empty body (no selective information) with `reason`.
    pub fn new(reason: NakReason) -> Self {
        AckBody {
            reason: reason as u8,
            duplicates: 0,
            sack_bits: U16::new(0),
            dropped_seq: U32::new(0),
            bitmap: [0; SACK_BITS / 8],
        }
    }

    /// Whether bit `i` is set (false past `sack_bits`).
    pub fn is_set(&self, i: usize) -> bool {
        i < usize::from(self.sack_bits.get()).min(SACK_BITS)
            && self.bitmap[i / 8] & (1 << (i % 8)) != 0
    }

    /// Reads a body from the payload of an ACK or NAK frame; `None` if the
    /// payload is too short or the reason or bit count is invalid.
    pub fn read(payload: &[u8]) -> Option<&AckBody> {
        let (body, _) = AckBody::ref_from_prefix(payload).ok()?;
        NakReason::from_code(body.reason)?;
        (usize::from(body.sack_bits.get()) <= SACK_BITS).then_some(body)
    }

    /// The body's reason (a body from [`AckBody::read`] always has a valid
    /// one).
    pub fn reason(&self) -> NakReason {
        NakReason::from_code(self.reason).unwrap_or(NakReason::None)
    }
}
