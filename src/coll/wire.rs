//! The header of the messages communicators exchange.
//!
//! Every message of [`super::Messenger`] travels on the system channel and
//! starts with a [`MsgHeader`]: what it is (data inline, a request to send a
//! large message, the answer to one), the context id that keeps
//! communicators apart, and the tag that matches it to a receive. A large
//! message's data then travels on a normal channel straight into the
//! buffer the receiver posted for it.
//!
//! | kind | after the header |
//! |---|---|
//! | `EAGER` | the message |
//! | `RTS` (ready to send) | [`Rts`]: length and the sender's token |
//! | `CTS` (clear to send) | [`Cts`]: the token and the receiver's channel |
//! | `FRAGMENT` | [`Frag`]: the message's length and this piece's offset, then the piece |
//! | `RTS_REMOTE` | [`RtsRemote`]: a large message the receiver reads from the sender's memory (same node): length, token, and the sender's pid, start time and address; the receiver answers with a `CTS` on [`NO_CHANNEL`] once read, or on a channel if it cannot read |
//! | `HELLO` | nothing: opens the sender's link to the receiver, so each notices if the other's process dies (sent once per peer a receive waits for; dropped on arrival) |
//! | `SYNC` | [`Sync`]: the sender's token, then the message; the receiver answers with a `CTS` on [`NO_CHANNEL`] once a receive matched it |
//!
//! A medium message (above the eager limit, up to
//! [`super::messenger::FRAGMENT_LIMIT`]) goes as consecutive `FRAGMENT`s:
//! a sender emits all pieces of one message in one call, and the system
//! channel keeps a sender's messages in order, so the pieces of one message
//! arrive contiguous and in order. No handshake: what a rendezvous costs in
//! round trips (and, with more ranks than cores, in waiting for the
//! receiver to be scheduled) a medium message does not pay.

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Version of this header; others are dropped and counted.
pub const VERSION: u8 = 1;

/// A message with its data inline.
pub const EAGER: u8 = 1;
/// A large message waits for the receiver.
pub const RTS: u8 = 2;
/// The receiver posted a buffer for a large message.
pub const CTS: u8 = 3;
/// A piece of a medium message.
pub const FRAGMENT: u8 = 4;
/// A small message whose sender waits until a receive matched it (a
/// synchronous send, `MPI_Ssend`).
pub const SYNC: u8 = 5;
/// A large message for the receiver to read from the sender's memory.
pub const RTS_REMOTE: u8 = 6;
/// Nothing but the link it opens (see the table above).
pub const HELLO: u8 = 7;

/// The channel of a `CTS` that answers a `SYNC`: the message matched, and
/// there is nothing to transfer.
pub const NO_CHANNEL: u16 = u16::MAX;

/// The header of every communicator message.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct MsgHeader {
    /// [`VERSION`].
    pub version: u8,
    /// [`EAGER`], [`RTS`] or [`CTS`].
    pub kind: u8,
    /// Zero.
    pub reserved: U16,
    /// The communicator's context id.
    pub context: U32,
    /// Matches the message to a receive.
    pub tag: U64,
}

/// Bytes of [`MsgHeader`].
pub const HEADER_LEN: usize = std::mem::size_of::<MsgHeader>();

/// Body of an `RTS`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Rts {
    /// Message length.
    pub len: U64,
    /// The sender's token for this message.
    pub token: U32,
    /// Zero.
    pub reserved: U32,
}

/// Body of a `CTS`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Cts {
    /// The token of the `RTS` answered.
    pub token: U32,
    /// The receiver's normal channel holding the posted buffer.
    pub channel: U16,
    /// Zero.
    pub reserved: U16,
}

/// Body of a `FRAGMENT`, before the piece.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Frag {
    /// Length of the whole message.
    pub total: U64,
    /// Offset of this piece in it.
    pub offset: U64,
}

/// Body of a `SYNC`, before the message.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Sync {
    /// The sender's token, returned in the `CTS`.
    pub token: U32,
    /// Zero.
    pub reserved: U32,
}

/// Body of an `RTS_REMOTE`.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct RtsRemote {
    /// Message length.
    pub len: U64,
    /// The sender's token for this message.
    pub token: U32,
    /// The sender's pid.
    pub pid: U32,
    /// The sender's start time (clock ticks since boot).
    pub start_time: U64,
    /// The message's address in the sender's memory.
    pub addr: U64,
}

/// Bytes of a `SYNC`'s body.
pub const SYNC_OVERHEAD: usize = std::mem::size_of::<Sync>();

/// Bytes of a `FRAGMENT`'s header and body, before the piece.
pub const FRAGMENT_OVERHEAD: usize = HEADER_LEN + std::mem::size_of::<Frag>();

/// A parsed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg<'a> {
    /// Data inline.
    Eager {
        /// Context id.
        context: u32,
        /// Tag.
        tag: u64,
        /// The message.
        data: &'a [u8],
    },
    /// A large message waits.
    Rts {
        /// Context id.
        context: u32,
        /// Tag.
        tag: u64,
        /// Its length.
        len: u64,
        /// The sender's token.
        token: u32,
    },
    /// A piece of a medium message.
    Fragment {
        /// Context id.
        context: u32,
        /// Tag.
        tag: u64,
        /// Length of the whole message.
        total: u64,
        /// Offset of this piece.
        offset: u64,
        /// The piece.
        data: &'a [u8],
    },
    /// Opens the link; carries nothing.
    Hello,
    /// A large message to read from the sender's memory.
    RtsRemote {
        /// Context id.
        context: u32,
        /// Tag.
        tag: u64,
        /// The sender's token.
        token: u32,
        /// Where the bytes are.
        region: bcl_shm::cma::Region,
    },
    /// A small message whose sender waits for the match.
    Sync {
        /// Context id.
        context: u32,
        /// Tag.
        tag: u64,
        /// The sender's token.
        token: u32,
        /// The message.
        data: &'a [u8],
    },
    /// Send the large message `token` on `channel` (or, on
    /// [`NO_CHANNEL`], the `SYNC` message `token` matched).
    Cts {
        /// The token.
        token: u32,
        /// The channel.
        channel: u16,
    },
}

/// Why a message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// Shorter than its header or body.
    #[error("message of {0} bytes is too short")]
    Short(usize),
    /// Another header version.
    #[error("header version {0}, expected {VERSION}")]
    Version(u8),
    /// Unknown kind.
    #[error("unknown message kind {0}")]
    Kind(u8),
}

impl<'a> Msg<'a> {
    /// Parses `bytes`, checking lengths, version and kind.
    pub fn parse(bytes: &'a [u8]) -> Result<Msg<'a>, MsgError> {
        let short = MsgError::Short(bytes.len());
        let (h, rest) = MsgHeader::ref_from_prefix(bytes).map_err(|_| short)?;
        if h.version != VERSION {
            return Err(MsgError::Version(h.version));
        }
        let (context, tag) = (h.context.get(), h.tag.get());
        match h.kind {
            EAGER => Ok(Msg::Eager {
                context,
                tag,
                data: rest,
            }),
            RTS => {
                let (b, _) = Rts::ref_from_prefix(rest).map_err(|_| short)?;
                Ok(Msg::Rts {
                    context,
                    tag,
                    len: b.len.get(),
                    token: b.token.get(),
                })
            }
            FRAGMENT => {
                let (b, data) = Frag::ref_from_prefix(rest).map_err(|_| short)?;
                Ok(Msg::Fragment {
                    context,
                    tag,
                    total: b.total.get(),
                    offset: b.offset.get(),
                    data,
                })
            }
            HELLO => Ok(Msg::Hello),
            RTS_REMOTE => {
                let (b, _) = RtsRemote::ref_from_prefix(rest).map_err(|_| short)?;
                Ok(Msg::RtsRemote {
                    context,
                    tag,
                    token: b.token.get(),
                    region: bcl_shm::cma::Region {
                        pid: b.pid.get(),
                        start_time: b.start_time.get(),
                        addr: b.addr.get(),
                        len: b.len.get(),
                    },
                })
            }
            SYNC => {
                let (b, data) = Sync::ref_from_prefix(rest).map_err(|_| short)?;
                Ok(Msg::Sync {
                    context,
                    tag,
                    token: b.token.get(),
                    data,
                })
            }
            CTS => {
                let (b, _) = Cts::ref_from_prefix(rest).map_err(|_| short)?;
                Ok(Msg::Cts {
                    token: b.token.get(),
                    channel: b.channel.get(),
                })
            }
            k => Err(MsgError::Kind(k)),
        }
    }

    /// Appends the encoded message to `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let (kind, context, tag) = match *self {
            Msg::Eager { context, tag, .. } => (EAGER, context, tag),
            Msg::Rts { context, tag, .. } => (RTS, context, tag),
            Msg::Fragment { context, tag, .. } => (FRAGMENT, context, tag),
            Msg::Sync { context, tag, .. } => (SYNC, context, tag),
            Msg::RtsRemote { context, tag, .. } => (RTS_REMOTE, context, tag),
            Msg::Cts { .. } => (CTS, 0, 0),
            Msg::Hello => (HELLO, 0, 0),
        };
        let h = MsgHeader {
            version: VERSION,
            kind,
            reserved: U16::ZERO,
            context: U32::new(context),
            tag: U64::new(tag),
        };
        out.extend_from_slice(h.as_bytes());
        match *self {
            Msg::Eager { data, .. } => out.extend_from_slice(data),
            Msg::Rts { len, token, .. } => out.extend_from_slice(
                Rts {
                    len: U64::new(len),
                    token: U32::new(token),
                    reserved: U32::ZERO,
                }
                .as_bytes(),
            ),
            Msg::Fragment {
                total,
                offset,
                data,
                ..
            } => {
                out.extend_from_slice(
                    Frag {
                        total: U64::new(total),
                        offset: U64::new(offset),
                    }
                    .as_bytes(),
                );
                out.extend_from_slice(data);
            }
            Msg::RtsRemote { token, region, .. } => out.extend_from_slice(
                RtsRemote {
                    len: U64::new(region.len),
                    token: U32::new(token),
                    pid: U32::new(region.pid),
                    start_time: U64::new(region.start_time),
                    addr: U64::new(region.addr),
                }
                .as_bytes(),
            ),
            Msg::Sync { token, data, .. } => {
                out.extend_from_slice(
                    Sync {
                        token: U32::new(token),
                        reserved: U32::ZERO,
                    }
                    .as_bytes(),
                );
                out.extend_from_slice(data);
            }
            Msg::Hello => {}
            Msg::Cts { token, channel } => out.extend_from_slice(
                Cts {
                    token: U32::new(token),
                    channel: U16::new(channel),
                    reserved: U16::ZERO,
                }
                .as_bytes(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_kind_round_trips() {
        let msgs = [
            Msg::Eager {
                context: 7,
                tag: u64::MAX - 3,
                data: b"hello",
            },
            Msg::Rts {
                context: 1,
                tag: 2,
                len: 1 << 40,
                token: 9,
            },
            Msg::Cts {
                token: 9,
                channel: 300,
            },
            Msg::Fragment {
                context: 3,
                tag: 4,
                total: 70_000,
                offset: 16_000,
                data: b"piece",
            },
            Msg::Sync {
                context: 5,
                tag: 6,
                token: 11,
                data: b"",
            },
            Msg::Hello,
            Msg::RtsRemote {
                context: 8,
                tag: 9,
                token: 12,
                region: bcl_shm::cma::Region {
                    pid: 4242,
                    start_time: 1 << 40,
                    addr: 0x7fff_0000_1000,
                    len: 4 << 20,
                },
            },
        ];
        let mut buf = Vec::new();
        for m in msgs {
            m.encode(&mut buf);
            assert_eq!(Msg::parse(&buf), Ok(m));
        }
    }

    #[test]
    fn bad_messages_are_named() {
        let mut buf = Vec::new();
        Msg::Cts {
            token: 1,
            channel: 2,
        }
        .encode(&mut buf);
        assert_eq!(Msg::parse(&buf[..20]), Err(MsgError::Short(20)));
        buf[0] = 9;
        assert_eq!(Msg::parse(&buf), Err(MsgError::Version(9)));
        buf[0] = VERSION;
        buf[1] = 77;
        assert_eq!(Msg::parse(&buf), Err(MsgError::Kind(77)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Msg::parse(&bytes);
        }
    }
}
