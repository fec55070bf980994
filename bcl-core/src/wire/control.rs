//! Payloads of the control messages of normal and open channels.
//!
//! Control messages travel in the same reliable, ordered stream as
//! system-channel messages (same sequence numbers, same message ids, same
//! in-order delivery), so a request and its answers can never overtake each
//! other. Bulk data then travels as `DATA` frames on the channel (normal
//! channels, RMA puts) or as `RMA_GET_REPLY` frames (RMA gets), written
//! straight into the destination buffer at their offset.
//!
//! | frame type | body | meaning |
//! |---|---|---|
//! | `RNDV_REQUEST` | [`RndvRequest`] | sender → receiver: transfer `transfer` of `len` bytes wants channel `channel` |
//! | `RNDV_READY` | [`RndvReady`] | receiver → sender: a buffer of `capacity` bytes is posted (for `transfer`, or for the next transfer when `transfer` is 0), or why not |
//! | `RMA_PUT` | [`RmaRequest`] + inline data | initiator → target: write `len` bytes at `offset` of the region behind `channel`, proving `key` |
//! | `RMA_GET` | [`RmaRequest`] | initiator → target: read `len` bytes at `offset` |
//! | `CONTROL` | [`ControlBody`] | results of RMA requests, cancellation of a transfer |

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Body of `RNDV_REQUEST`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RndvRequest {
    /// The receiver's normal channel.
    pub channel: U16,
    /// Zero.
    pub reserved: U16,
    /// The sender's transfer id (never 0).
    pub transfer: U32,
    /// Bytes to send.
    pub len: U64,
}

/// Why a rendezvous or RMA request is refused, or how it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Accepted; data may flow (or, for a result, done).
    Ok = 0,
    /// The posted buffer is smaller than the message.
    TooSmall = 1,
    /// No such channel (or not the right kind).
    NoChannel = 2,
    /// The receiver cancelled its posted buffer.
    Cancelled = 3,
    /// The RMA key does not match.
    BadKey = 4,
    /// The RMA range lies outside the region.
    OutOfBounds = 5,
    /// The region was unregistered.
    Unregistered = 6,
}

impl Status {
    /// The status with wire code `code`.
    pub fn from_code(code: u8) -> Option<Status> {
        Some(match code {
            0 => Status::Ok,
            1 => Status::TooSmall,
            2 => Status::NoChannel,
            3 => Status::Cancelled,
            4 => Status::BadKey,
            5 => Status::OutOfBounds,
            6 => Status::Unregistered,
            _ => return None,
        })
    }
}

/// Body of `RNDV_READY`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RndvReady {
    /// The receiver's normal channel.
    pub channel: U16,
    /// [`Status`] code.
    pub status: u8,
    /// Zero.
    pub reserved: u8,
    /// The transfer this answers; 0 when the receiver announces a buffer
    /// before any request (receiver first).
    pub transfer: U32,
    /// Size of the posted buffer.
    pub capacity: U64,
}

/// Body of `RMA_PUT` and `RMA_GET`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RmaRequest {
    /// The target's open channel.
    pub channel: U16,
    /// Non-zero when the put's data follows this body in the same message.
    pub inline: u8,
    /// Zero.
    pub reserved: u8,
    /// The initiator's transfer id (never 0).
    pub transfer: U32,
    /// The key the region was exposed with.
    pub key: U64,
    /// Offset in the region.
    pub offset: U64,
    /// Bytes to write or read.
    pub len: U64,
}

/// What a [`ControlBody`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ControlCode {
    /// The result of an `RMA_PUT`: `Ok` with `detail` 1 means "send the
    /// data now", `Ok` with `detail` 0 means "done".
    PutResult = 1,
    /// The result of an `RMA_GET` that failed (a successful get answers with
    /// its data).
    GetResult = 2,
    /// The receiver of a normal-channel transfer cancelled it.
    Cancel = 3,
}

impl ControlCode {
    /// The code with wire value `code`.
    pub fn from_code(code: u8) -> Option<ControlCode> {
        Some(match code {
            1 => ControlCode::PutResult,
            2 => ControlCode::GetResult,
            3 => ControlCode::Cancel,
            _ => return None,
        })
    }
}

/// Body of `CONTROL`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct ControlBody {
    /// [`ControlCode`].
    pub code: u8,
    /// [`Status`] code.
    pub status: u8,
    /// The channel concerned.
    pub channel: U16,
    /// The transfer concerned.
    pub transfer: U32,
    /// Depends on the code (for `OutOfBounds`: the region's length).
    pub detail: U64,
}

/// Reads a body of type `T` from the start of `payload`, with the bytes
/// after it; `None` if the payload is too short.
pub fn read_body<T: FromBytes + KnownLayout + Immutable>(payload: &[u8]) -> Option<(&T, &[u8])> {
    T::ref_from_prefix(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_fixed_sizes_and_round_trip() {
        assert_eq!(core::mem::size_of::<RndvRequest>(), 16);
        assert_eq!(core::mem::size_of::<RndvReady>(), 16);
        assert_eq!(core::mem::size_of::<RmaRequest>(), 32);
        assert_eq!(core::mem::size_of::<ControlBody>(), 16);
        let r = RmaRequest {
            channel: U16::new(3),
            inline: 1,
            reserved: 0,
            transfer: U32::new(9),
            key: U64::new(0xfeed),
            offset: U64::new(1 << 40),
            len: U64::new(5),
        };
        let mut bytes = r.as_bytes().to_vec();
        bytes.extend_from_slice(b"hello");
        let (back, rest) = read_body::<RmaRequest>(&bytes).unwrap();
        assert_eq!(back.offset.get(), 1 << 40);
        assert_eq!(rest, b"hello");
        assert!(read_body::<RmaRequest>(&bytes[..31]).is_none());
        for code in 0..=6 {
            assert_eq!(Status::from_code(code).map(|s| s as u8), Some(code));
        }
        assert!(Status::from_code(7).is_none());
        assert!(ControlCode::from_code(0).is_none());
    }
}
