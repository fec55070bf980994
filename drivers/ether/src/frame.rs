//! The Ethernet II frame as BCL puts it on the wire, and the constants
//! every Ethernet method sizes its buffers with.
//!
//! ```text
//! 0      6      12   14
//! | dst  | src  | ET | BCL frame (the Ethernet payload) ...
//! ```
//!
//! No VLAN tag is written and no padding is added; a link that pads short
//! frames to [`MIN_FRAME_LEN`] hands the receiver trailing zeros, which the
//! BCL header's own lengths make harmless. The frame view is smoltcp's
//! [`EthernetFrame`]: a typed wrapper over bytes whose checked constructor
//! makes every accessor safe to call.

use crate::mac::Mac;
pub use smoltcp::wire::{EthernetAddress, EthernetFrame};

/// Length of an Ethernet II header: destination, source, EtherType.
pub const HEADER_LEN: usize = smoltcp::wire::ETHERNET_HEADER_LEN;
/// Offset of the EtherType in the header (for code that cannot use the
/// frame view, such as the eBPF program of `afxdp`).
pub const ETHERTYPE_OFFSET: usize = 12;
/// Offset of the source MAC in the header.
pub const SOURCE_OFFSET: usize = 6;
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

/// Writes an Ethernet II header for a frame from `src` to `dst` with
/// `ethertype` into `hdr`. Cannot fail: `hdr` is exactly one header long.
#[inline]
pub fn write_header(hdr: &mut Header, dst: Mac, src: Mac, ethertype: u16) {
    let mut f = EthernetFrame::new_unchecked(&mut hdr[..]);
    f.set_dst_addr(dst.into());
    f.set_src_addr(src.into());
    f.set_ethertype(ethertype.into());
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

    #[test]
    fn header_layout_is_dst_src_ethertype_in_network_order() {
        let h = header(Mac([2, 0, 0, 0, 0, 0xb]), Mac([2, 0, 0, 0, 0, 0xa]), 0x88b5);
        assert_eq!(
            h,
            [2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, 0x88, 0xb5],
            "destination, source, EtherType big-endian"
        );
        assert_eq!(h[ETHERTYPE_OFFSET..HEADER_LEN], [0x88, 0xb5]);
        assert_eq!(h[SOURCE_OFFSET..ETHERTYPE_OFFSET], [2, 0, 0, 0, 0, 0xa]);
        let f = EthernetFrame::new_checked(&h[..]).unwrap();
        assert_eq!(u16::from(f.ethertype()), 0x88b5);
        assert_eq!(Mac::from(f.src_addr()), Mac([2, 0, 0, 0, 0, 0xa]));
        assert!(f.payload().is_empty());
        assert_eq!(HEADER_LEN, 14);
    }
}
