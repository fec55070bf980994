//! Bundles: several small system-channel messages in one DATA frame.
//!
//! A DATA frame with [`flags::BUNDLE`](super::flags::BUNDLE) set carries
//! whole system-channel messages instead of one message's fragment. Its
//! payload is a record count followed by that many records, each a length
//! and the message bytes, all in network byte order:
//!
//! ```text
//!  +---------------+---------------+-----------------+---------------+----
//!  | count (u16)   | len 0 (u16)   | len 0 bytes ... | len 1 (u16)   | ...
//!  +---------------+---------------+-----------------+---------------+----
//! ```
//!
//! The records are messages with consecutive ids: record `i` is message
//! `msg_id + i` of the header. Every message in a bundle has this frame as
//! its only frame, so the header's `msg_seq` equals `seq`, `frag_offset` is
//! 0 and `msg_len` equals `payload_len`. The records must fill the payload
//! exactly; [`super::parse`] checks all of this (and that there is at least
//! one record) before the frame is handed on, so a receiver that got a
//! [`super::Frame`] with the flag can walk [`records`] without further
//! bounds checks failing.

/// Bytes of the record count at the start of a bundle's payload.
pub const COUNT_LEN: usize = 2;

/// Bytes of a record's length field.
pub const RECORD_HEADER_LEN: usize = 2;

/// Checks that `payload` is a well-formed bundle and returns its record
/// count: at least one record, each within the payload, ending exactly at
/// the payload's end.
pub fn validate(payload: &[u8]) -> Option<u16> {
    let count = u16::from_be_bytes(payload.get(..COUNT_LEN)?.try_into().ok()?);
    if count == 0 {
        return None;
    }
    let mut at = COUNT_LEN;
    for _ in 0..count {
        let len_bytes = payload.get(at..at + RECORD_HEADER_LEN)?;
        let len = usize::from(u16::from_be_bytes([len_bytes[0], len_bytes[1]]));
        at = at.checked_add(RECORD_HEADER_LEN + len)?;
        if at > payload.len() {
            return None;
        }
    }
    (at == payload.len()).then_some(count)
}

/// The records (message bytes) of a bundle payload, in order. Stops at the
/// first record that does not fit; use on payloads [`validate`] accepted.
pub fn records(payload: &[u8]) -> Records<'_> {
    let (count, rest) = match payload.split_first_chunk::<COUNT_LEN>() {
        Some((c, rest)) => (u16::from_be_bytes(*c), rest),
        None => (0, &[][..]),
    };
    Records { rest, left: count }
}

/// Iterator over the records of a bundle (see [`records`]).
#[derive(Clone, Debug)]
pub struct Records<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let (len, rest) = self.rest.split_first_chunk::<RECORD_HEADER_LEN>()?;
        let len = usize::from(u16::from_be_bytes(*len));
        let record = rest.get(..len)?;
        self.rest = &rest[len..];
        self.left -= 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(usize::from(self.left)))
    }
}

/// Writes a bundle payload into a buffer, record by record.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
    count: u16,
}

impl<'a> Writer<'a> {
    /// A writer of a bundle payload into `buf` (the space after the header,
    /// as long as the frame may carry); `None` if not even the count fits.
    pub fn new(buf: &'a mut [u8]) -> Option<Writer<'a>> {
        (buf.len() >= COUNT_LEN).then_some(Writer {
            buf,
            len: COUNT_LEN,
            count: 0,
        })
    }

    /// Whether a record of `len` message bytes still fits.
    pub fn fits(&self, len: usize) -> bool {
        self.count < u16::MAX
            && len <= usize::from(u16::MAX)
            && self.len + RECORD_HEADER_LEN + len <= self.buf.len()
    }

    /// Appends one record; false (and nothing written) if it does not fit.
    pub fn push(&mut self, msg: &[u8]) -> bool {
        if !self.fits(msg.len()) {
            return false;
        }
        let at = self.len;
        self.buf[at..at + RECORD_HEADER_LEN].copy_from_slice(&(msg.len() as u16).to_be_bytes());
        self.buf[at + RECORD_HEADER_LEN..at + RECORD_HEADER_LEN + msg.len()].copy_from_slice(msg);
        self.len = at + RECORD_HEADER_LEN + msg.len();
        self.count += 1;
        true
    }

    /// Records written so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Writes the count and returns the payload length.
    pub fn finish(self) -> usize {
        self.buf[..COUNT_LEN].copy_from_slice(&self.count.to_be_bytes());
        self.len
    }
}

/// Payload bytes a bundle of messages of these lengths takes.
pub fn payload_len(lens: impl IntoIterator<Item = usize>) -> usize {
    COUNT_LEN
        + lens
            .into_iter()
            .map(|l| RECORD_HEADER_LEN + l)
            .sum::<usize>()
}
