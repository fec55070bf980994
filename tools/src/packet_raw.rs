//! The `packet-raw` baseline: bare frames on the packet method's AF_PACKET
//! socket and rings, no BCL protocol — the floor BCL over `packet` is
//! measured against, as `afxdp-raw` is for `afxdp`.
//!
//! It runs on an Ethernet interface (`--ifname`, else the only non-loopback
//! interface that is up), opened exactly as the packet method opens it
//! (`bcl_packet::RawPacket`), and sends the same frames as `afxdp-raw`:
//! destination MAC, source MAC, `--ethertype` (default 0x88B5), a 2-byte
//! little-endian message length, then the message. One message per frame,
//! no acknowledgement, no retransmission. A server learns its peer's MAC
//! from the first frame. Descriptor: `packet-raw:MAC/IFINDEX`.

use crate::afxdp_raw::RAW_HEADER;
use crate::afxdp_raw::{
    idle_round, interface, parse_raw_descriptor, parse_raw_frame, write_raw_frame,
};
use crate::end::EndSpec;
use crate::transport::{BoxTransport, Transport, TransportCounters, TransportError};
use bcl::ether::Mac;
use bcl::packet::{PacketConfig, RawPacket};
use std::time::Instant;

/// Descriptor prefix of `packet-raw` servers.
pub const PACKET_RAW_NAME: &str = "packet-raw";
/// Idle polling rounds between two looks at the clock.
const CLOCK_EVERY: u32 = 64;

/// Opens the serving end of `--method packet-raw`: its descriptor
/// (`packet-raw:MAC/IFINDEX`) and transport.
pub fn open_server(spec: &EndSpec) -> Result<(String, BoxTransport), String> {
    let t = PacketRawTransport::open(spec, None)?;
    let iface = t.sock.interface();
    let d = format!("{PACKET_RAW_NAME}:{}/{}", iface.mac, iface.index);
    Ok((d, Box::new(t)))
}

/// Opens the connecting end of `--method packet-raw` towards `descriptor`.
pub fn open_client(spec: &EndSpec, descriptor: &str) -> Result<BoxTransport, String> {
    let peer = parse_raw_descriptor(PACKET_RAW_NAME, descriptor)?;
    Ok(Box::new(PacketRawTransport::open(spec, Some(peer))?))
}

/// Bare AF_PACKET frames to one peer (see the module documentation).
pub struct PacketRawTransport {
    sock: RawPacket,
    mac: Mac,
    peer: Option<Mac>,
    ethertype: u16,
    busy: bool,
    max_message: usize,
    bad: u64,
}

impl PacketRawTransport {
    /// Opens the interface of `spec`; `peer` is the server's MAC (a server
    /// learns its peer from the first frame).
    pub fn open(spec: &EndSpec, peer: Option<Mac>) -> Result<PacketRawTransport, String> {
        let ifname = interface(spec)?;
        let cfg = PacketConfig {
            ifname: Some(ifname.clone()),
            ethertype: spec.ethertype,
            ..PacketConfig::default()
        };
        let sock =
            RawPacket::open(&cfg).map_err(|e| format!("{PACKET_RAW_NAME} on {ifname}: {e}"))?;
        Ok(PacketRawTransport {
            mac: sock.interface().mac,
            max_message: sock.mtu().saturating_sub(RAW_HEADER),
            ethertype: spec.ethertype,
            busy: spec.busy_poll,
            peer,
            sock,
            bad: 0,
        })
    }
}

impl Transport for PacketRawTransport {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let peer = self
            .peer
            .ok_or_else(|| TransportError("no peer yet: nothing received".into()))?;
        if msg.len() > self.max_message {
            return Err(TransportError(format!(
                "{PACKET_RAW_NAME} carries one message per frame: at most {} bytes, not {}",
                self.max_message,
                msg.len()
            )));
        }
        let (mac, ethertype) = (self.mac, self.ethertype);
        let mut spins = 0u32;
        loop {
            let queued = self
                .sock
                .queue(|buf| write_raw_frame(buf, peer, mac, ethertype, msg))
                .map_err(|e| TransportError::new("packet-raw send", e))?;
            if queued {
                return self
                    .sock
                    .kick()
                    .map_err(|e| TransportError::new("packet-raw send", e));
            }
            // The transmit slot is still the kernel's: kick and wait.
            self.sock
                .kick()
                .map_err(|e| TransportError::new("packet-raw send", e))?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(CLOCK_EVERY) && Instant::now() >= deadline {
                return Err(TransportError::new("packet-raw send", "timed out"));
            }
            std::hint::spin_loop();
        }
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        let mut idle = 0u32;
        loop {
            let PacketRawTransport {
                sock,
                mac,
                peer,
                ethertype,
                bad,
                ..
            } = self;
            let mut got = false;
            sock.recv(1, |frame| match parse_raw_frame(frame, *mac, *ethertype) {
                Some((src, msg)) if peer.is_none_or(|p| p == src) => {
                    *peer = Some(src);
                    got = true;
                    f(msg);
                }
                _ => *bad += 1,
            });
            if got {
                return Ok(true);
            }
            idle = idle.wrapping_add(1);
            let sock = &self.sock;
            let waiting = idle_round(self.busy, idle, deadline, |ms| sock.wait_readable(ms))
                .map_err(|e| TransportError::new("packet-raw poll", e))?;
            if !waiting {
                return Ok(false);
            }
        }
    }

    fn flush(&mut self, _deadline: Instant) -> Result<(), TransportError> {
        self.sock
            .kick()
            .map_err(|e| TransportError::new("packet-raw flush", e))
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            retransmits: 0,
            bad_frames: self.bad,
            data_frames: 0,
            ..Default::default()
        }
    }

    fn max_message(&self) -> usize {
        self.max_message
    }

    fn details(&self) -> String {
        format!(
            "{PACKET_RAW_NAME} on {}: {:?}",
            self.sock.interface().name,
            self.counters()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcl::ether::HEADER_LEN;

    #[test]
    fn packet_raw_descriptors_parse_and_bad_ones_explain_themselves() {
        let mac: Mac = "02:00:00:00:02:01".parse().unwrap();
        assert_eq!(
            parse_raw_descriptor(PACKET_RAW_NAME, "packet-raw:02:00:00:00:02:01/3").unwrap(),
            mac
        );
        let e = parse_raw_descriptor(PACKET_RAW_NAME, "afxdp-raw:02:00:00:00:02:01/3").unwrap_err();
        assert!(e.contains("expected packet-raw:MAC/IFINDEX"), "{e}");
    }

    #[test]
    fn a_frame_fills_exactly_the_header_the_length_and_the_message() {
        let (dst, src): (Mac, Mac) = (
            "02:00:00:00:00:02".parse().unwrap(),
            "02:00:00:00:00:01".parse().unwrap(),
        );
        let mut buf = [0u8; 64];
        let len = write_raw_frame(&mut buf, dst, src, 0x88b5, b"hello");
        assert_eq!(len, HEADER_LEN + RAW_HEADER + 5);
        let (from, msg) = parse_raw_frame(&buf[..len], dst, 0x88b5).unwrap();
        assert_eq!((from, msg), (src, &b"hello"[..]));
    }
}
