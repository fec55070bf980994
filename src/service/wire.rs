//! The service messages' own header, in front of every service message's
//! payload (little-endian, 12 bytes):
//!
//! ```text
//!  0      1           4                 8                 12
//!  +------+-----------+-----------------+-----------------+
//!  | kind | 0 (3 B)   |   handler id    |   request id    |  then the body
//!  +------+-----------+-----------------+-----------------+
//! ```
//!
//! | kind | body |
//! |---|---|
//! | `REQUEST` | the payload |
//! | `REPLY` | the handler's answer |
//! | `ERROR` | a code byte ([`super::ERROR_UNKNOWN_HANDLER`], [`super::ERROR_PANICKED`], [`super::ERROR_REFUSED`]), then a UTF-8 message |
//! | `LARGE_REQUEST`, `LARGE_REPLY` | the payload's length (u64): it follows on a normal channel once cleared |
//! | `CLEAR_REQUEST`, `CLEAR_REPLY` | the receiver's normal channel (u16) posted for it, or `NO_CHANNEL` |
//!
//! A `LARGE_*` message announces a payload above what one service message
//! carries; its receiver posts a buffer on a normal channel and names the
//! channel in a `CLEAR_*` answer, and the payload goes there.

/// The header's length.
pub(crate) const HEADER_LEN: usize = 12;

/// The channel of a `CLEAR_*` that refuses the payload (no channel could
/// be opened).
pub(crate) const NO_CHANNEL: u16 = u16::MAX;

/// What a service message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Request = 1,
    Reply = 2,
    Error = 3,
    LargeRequest = 4,
    LargeReply = 5,
    ClearRequest = 6,
    ClearReply = 7,
}

impl Kind {
    fn from_code(c: u8) -> Option<Kind> {
        Some(match c {
            1 => Kind::Request,
            2 => Kind::Reply,
            3 => Kind::Error,
            4 => Kind::LargeRequest,
            5 => Kind::LargeReply,
            6 => Kind::ClearRequest,
            7 => Kind::ClearReply,
            _ => return None,
        })
    }
}

/// A parsed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ServiceHeader {
    pub kind: Kind,
    pub handler: u32,
    pub request: u32,
}

impl ServiceHeader {
    pub fn new(kind: Kind, handler: u32, request: u32) -> ServiceHeader {
        ServiceHeader {
            kind,
            handler,
            request,
        }
    }

    /// Appends the header to `out`.
    #[inline]
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut h = [0u8; HEADER_LEN];
        self.write_into(&mut h);
        out.extend_from_slice(&h);
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `out`.
    #[inline]
    pub fn write_into(&self, out: &mut [u8]) {
        out[0] = self.kind as u8;
        out[1..4].fill(0);
        out[4..8].copy_from_slice(&self.handler.to_le_bytes());
        out[8..12].copy_from_slice(&self.request.to_le_bytes());
    }

    /// The header and the body of `message`; `None` if it is malformed.
    #[inline]
    pub fn parse(message: &[u8]) -> Option<(ServiceHeader, &[u8])> {
        let (h, body) = message.split_first_chunk::<HEADER_LEN>()?;
        if h[1..4] != [0, 0, 0] {
            return None;
        }
        let kind = Kind::from_code(h[0])?;
        let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        Some((ServiceHeader::new(kind, word(4), word(8)), body))
    }
}

/// Writes an error reply into `out` (cleared first).
pub(crate) fn error_reply(out: &mut Vec<u8>, handler: u32, request: u32, code: u8, message: &str) {
    out.clear();
    ServiceHeader::new(Kind::Error, handler, request).write(out);
    out.push(code);
    out.extend_from_slice(message.as_bytes());
}

/// The body of a `LARGE_*` message: the payload's length.
pub(crate) fn read_len(body: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(*body.first_chunk::<8>()?))
}

/// The body of a `CLEAR_*` message: the channel.
pub(crate) fn read_channel(body: &[u8]) -> Option<u16> {
    Some(u16::from_le_bytes(*body.first_chunk::<2>()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_garbage_is_refused() {
        let mut m = Vec::new();
        ServiceHeader::new(Kind::LargeReply, 7, u32::MAX).write(&mut m);
        m.extend_from_slice(&99u64.to_le_bytes());
        let (h, body) = ServiceHeader::parse(&m).unwrap();
        assert_eq!(h, ServiceHeader::new(Kind::LargeReply, 7, u32::MAX));
        assert_eq!(read_len(body), Some(99));
        assert!(ServiceHeader::parse(&m[..11]).is_none(), "short");
        let mut bad = m.clone();
        bad[0] = 0;
        assert!(ServiceHeader::parse(&bad).is_none(), "kind 0");
        let mut bad = m.clone();
        bad[2] = 1;
        assert!(ServiceHeader::parse(&bad).is_none(), "reserved bytes");
        assert_eq!(read_len(&[1, 2]), None);
        assert_eq!(read_channel(&[5]), None);
    }
}
