//! The Ethernet II frame as BCL puts it on the wire: a typed view over
//! bytes ([`Frame`]) and the constants every Ethernet method sizes its
//! buffers with.
//!
//! ```text
//! 0      6      12   14
//! | dst  | src  | ET | BCL frame (the Ethernet payload) ...
//! ```
//!
//! No VLAN tag is written and no padding is added; a link that pads short
//! frames to [`MIN_FRAME_LEN`] hands the receiver trailing zeros, which the
//! BCL header's own lengths make harmless.
//!
//! [`Frame`] has the shape of smoltcp's `wire::EthernetFrame` (a wrapper
//! over any `AsRef<[u8]>` buffer, a checked constructor, one accessor per
//! field) with two differences: it can only be made by a checked
//! constructor (or from a whole [`Header`]), so no accessor can panic; and
//! every accessor is inlined. smoltcp's address accessors call an
//! out-of-line `Address::from_bytes`, which made the receive filter
//! measurably slower per frame (see the crate README, "Cost").

use crate::mac::Mac;
use std::fmt;

/// Length of an Ethernet II header: destination, source, EtherType.
pub const HEADER_LEN: usize = 14;
/// Offset of the destination MAC in the header.
pub const DESTINATION_OFFSET: usize = 0;
/// Offset of the source MAC in the header.
pub const SOURCE_OFFSET: usize = 6;
/// Offset of the EtherType in the header (for code that cannot use the
/// frame view, such as the eBPF program of `afxdp`).
pub const ETHERTYPE_OFFSET: usize = 12;
/// Shortest Ethernet frame without FCS (802.3's 64 bytes less the 4-byte
/// FCS); NICs pad shorter frames to this length.
pub const MIN_FRAME_LEN: usize = 60;
/// Length of an 802.1Q VLAN tag, for buffers that must hold a tagged
/// frame (BCL writes none).
pub const VLAN_TAG_LEN: usize = 4;
/// Smallest value that is an EtherType; smaller values of that field are
/// 802.3 lengths.
pub const MIN_ETHERTYPE: u16 = 0x0600;

/// An Ethernet II header as bytes.
pub type Header = [u8; HEADER_LEN];

/// A buffer too short to hold an Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooShort {
    /// The buffer's length.
    pub len: usize,
}

impl fmt::Display for TooShort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes is shorter than an Ethernet header ({HEADER_LEN})",
            self.len
        )
    }
}

impl std::error::Error for TooShort {}

/// A view of an Ethernet II frame in `buffer` (see the module
/// documentation). Every `Frame` holds at least [`HEADER_LEN`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// The frame in `buffer`, or why it cannot be one.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>, TooShort> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(TooShort { len });
        }
        Ok(Frame { buffer })
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn header(&self) -> &Header {
        // At least HEADER_LEN bytes by construction.
        let (h, _) = self
            .buffer
            .as_ref()
            .split_first_chunk::<HEADER_LEN>()
            .expect("a Frame holds a header");
        h
    }

    /// The destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> Mac {
        let h = self.header();
        Mac([h[0], h[1], h[2], h[3], h[4], h[5]])
    }

    /// The source MAC.
    #[inline]
    pub fn src_addr(&self) -> Mac {
        let h = self.header();
        Mac([h[6], h[7], h[8], h[9], h[10], h[11]])
    }

    /// The EtherType (no 802.1Q tag is looked for).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        let h = self.header();
        u16::from_be_bytes([h[ETHERTYPE_OFFSET], h[ETHERTYPE_OFFSET + 1]])
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// The payload: everything after the header, with the buffer's
    /// lifetime.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b: &'a [u8] = self.buffer.as_ref();
        b.get(HEADER_LEN..).unwrap_or_default()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    #[inline]
    fn header_mut(&mut self) -> &mut Header {
        let (h, _) = self
            .buffer
            .as_mut()
            .split_first_chunk_mut::<HEADER_LEN>()
            .expect("a Frame holds a header");
        h
    }

    /// Sets the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, mac: Mac) {
        self.header_mut()[..SOURCE_OFFSET].copy_from_slice(&mac.0);
    }

    /// Sets the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, mac: Mac) {
        self.header_mut()[SOURCE_OFFSET..ETHERTYPE_OFFSET].copy_from_slice(&mac.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, ethertype: u16) {
        self.header_mut()[ETHERTYPE_OFFSET..].copy_from_slice(&ethertype.to_be_bytes());
    }

    /// The payload, to write into.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(HEADER_LEN..)
            .unwrap_or_default()
    }
}

impl<'a> From<&'a Header> for Frame<&'a Header> {
    /// A whole header is a frame with an empty payload.
    #[inline]
    fn from(h: &'a Header) -> Self {
        Frame { buffer: h }
    }
}

impl<'a> From<&'a mut Header> for Frame<&'a mut Header> {
    /// A whole header, to write into.
    #[inline]
    fn from(h: &'a mut Header) -> Self {
        Frame { buffer: h }
    }
}

/// Writes an Ethernet II header for a frame from `src` to `dst` with
/// `ethertype` into `hdr`. Cannot fail: `hdr` is exactly one header long.
#[inline]
pub fn write_header(hdr: &mut Header, dst: Mac, src: Mac, ethertype: u16) {
    let mut f = Frame::from(hdr);
    f.set_dst_addr(dst);
    f.set_src_addr(src);
    f.set_ethertype(ethertype);
}

/// The header that [`write_header`] would write, as a value.
#[inline]
pub fn header(dst: Mac, src: Mac, ethertype: u16) -> Header {
    let mut h = [0u8; HEADER_LEN];
    write_header(&mut h, dst, src, ethertype);
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: Mac = Mac([2, 0, 0, 0, 0, 0xa]);
    const B: Mac = Mac([2, 0, 0, 0, 0, 0xb]);

    #[test]
    fn header_layout_is_dst_src_ethertype_in_network_order() {
        let h = header(B, A, 0x88b5);
        assert_eq!(
            h,
            [2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5],
            "destination, source, EtherType big-endian"
        );
        assert_eq!(h[ETHERTYPE_OFFSET..HEADER_LEN], [0x88, 0xb5]);
        assert_eq!(h[SOURCE_OFFSET..ETHERTYPE_OFFSET], A.0);
        assert_eq!(h[DESTINATION_OFFSET..SOURCE_OFFSET], B.0);
        let f = Frame::from(&h);
        assert_eq!((f.dst_addr(), f.src_addr(), f.ethertype()), (B, A, 0x88b5));
        assert!(f.payload().is_empty());
    }

    #[test]
    fn the_view_reads_and_writes_a_whole_frame() {
        let mut buf = [0u8; 20];
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        f.set_dst_addr(A);
        f.set_src_addr(B);
        f.set_ethertype(0x0800);
        f.payload_mut().copy_from_slice(b"abcdef");
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!((f.dst_addr(), f.src_addr(), f.ethertype()), (A, B, 0x0800));
        assert_eq!(f.payload(), b"abcdef");
        assert_eq!(f.into_inner().len(), 20);
        let e = Frame::new_checked(&buf[..13]).unwrap_err();
        assert_eq!(e, TooShort { len: 13 });
        assert!(e.to_string().contains("13 bytes"));
    }

    proptest! {
        /// Any bytes: a frame exactly when there is a header, whose fields
        /// are the bytes at their offsets.
        #[test]
        fn any_bytes_are_a_frame_or_too_short(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            match Frame::new_checked(&bytes[..]) {
                Ok(f) => {
                    prop_assert!(bytes.len() >= HEADER_LEN);
                    prop_assert_eq!(&f.dst_addr().0[..], &bytes[0..6]);
                    prop_assert_eq!(&f.src_addr().0[..], &bytes[6..12]);
                    prop_assert_eq!(f.ethertype(), u16::from_be_bytes([bytes[12], bytes[13]]));
                    prop_assert_eq!(f.payload(), &bytes[14..]);
                }
                Err(e) => prop_assert_eq!(e.len, bytes.len()),
            }
        }
    }
}
