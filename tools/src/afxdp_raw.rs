//! The `afxdp-raw` baseline: bare AF_XDP frames, no BCL protocol — the
//! floor BCL over AF_XDP is measured against.
//!
//! It runs on an Ethernet interface (`--ifname`, else the only
//! non-loopback interface that is up) and puts the same Ethernet II frames
//! on the wire as BCL's Ethernet methods, of `--ethertype` (default
//! 0x88B5), which the XDP program redirects to the AF_XDP socket while
//! every other frame goes on to the kernel.
//!
//! Before anything is opened the interface is probed ([`bcl_afxdp`]'s
//! `probe`); when AF_XDP cannot run there the error says why (missing
//! capability, kernel without XDP sockets, interface down, another XDP
//! program attached, …). What was obtained (native or generic XDP,
//! zero-copy or copy per queue, and why) is printed on standard error as
//! `# afxdp-raw: …` lines.
//!
//! # `afxdp-raw` frames
//!
//! Destination MAC, source MAC, EtherType, a 2-byte little-endian message
//! length, then the message: one message per frame, no acknowledgement, no
//! retransmission. The length keeps short messages exact where a NIC pads
//! frames to 60 bytes. A server learns its peer's MAC from the first frame.
//! Descriptor: `afxdp-raw:MAC/IFINDEX`.

use crate::end::EndSpec;
use crate::transport::{BoxTransport, Transport, TransportCounters, TransportError};
use bcl::core::Availability;
use bcl::ether::{write_header, Frame, Mac, HEADER_LEN};
use bcl_afxdp::{probe, AfXdpConfig, ModeReport, RawXsk};
use std::time::Instant;

/// Descriptor prefix of `afxdp-raw` servers.
pub const RAW_NAME: &str = "afxdp-raw";
/// Bytes of the `afxdp-raw` header after the Ethernet header (the length).
pub(crate) const RAW_HEADER: usize = 2;
/// Idle polling rounds between two looks at the clock.
const CLOCK_EVERY: u32 = 64;

/// The interface an end uses: `--ifname`, else the only non-loopback
/// interface that is up.
pub fn interface(spec: &EndSpec) -> Result<String, String> {
    if let Some(i) = &spec.ifname {
        return Ok(i.clone());
    }
    bcl::ether::choose_interface(None)
        .map(|i| i.name)
        .map_err(|e| format!("choose the interface with --ifname: {e}"))
}

/// Checks that AF_XDP can run on `ifname`; the error says why not, and
/// what to use instead.
pub fn check_usable(ifname: &str) -> Result<(), String> {
    match probe(ifname) {
        Availability::Usable => Ok(()),
        Availability::NotUsable(reason) => Err(not_usable(ifname, &reason)),
    }
}

/// The message of an AF_XDP end that cannot run.
pub fn not_usable(ifname: &str, reason: &str) -> String {
    format!(
        "afxdp is not usable on {ifname}: {reason}. (--method packet sends the same frames through AF_PACKET, without XDP)"
    )
}

/// The driver settings of an end.
fn config(spec: &EndSpec, ifname: &str) -> AfXdpConfig {
    let mut c = AfXdpConfig::new(ifname);
    c.ethertype = spec.ethertype;
    c.busy_poll = spec.busy_poll;
    c
}

/// Prints what was obtained, one `# afxdp: ` line per report line, on
/// standard error (standard output carries the `listening:` line).
fn print_report(report: &ModeReport) {
    for line in report.to_string().lines() {
        eprintln!("# afxdp-raw: {}", line.trim_end());
    }
}

/// Opens the serving end of `--method afxdp-raw`: its descriptor
/// (`afxdp-raw:MAC/IFINDEX`) and transport.
pub fn open_server(spec: &EndSpec) -> Result<(String, BoxTransport), String> {
    let t = RawTransport::open(spec, None)?;
    let d = format!("{RAW_NAME}:{}/{}", t.mac, t.xsk.ifindex());
    Ok((d, Box::new(t)))
}

/// Opens the connecting end of `--method afxdp-raw` towards `descriptor`.
pub fn open_client(spec: &EndSpec, descriptor: &str) -> Result<BoxTransport, String> {
    let peer = parse_raw_descriptor(RAW_NAME, descriptor)?;
    Ok(Box::new(RawTransport::open(spec, Some(peer))?))
}

/// The peer MAC of a `NAME:MAC[/IFINDEX]` descriptor of a bare-frame
/// baseline named `name` (`afxdp-raw`, `packet-raw`).
pub(crate) fn parse_raw_descriptor(name: &str, text: &str) -> Result<Mac, String> {
    let bad = || {
        format!(
            "--connect {text:?}: expected {name}:MAC/IFINDEX as printed by the server's `listening:` line"
        )
    };
    let rest = text.strip_prefix(name).and_then(|r| r.strip_prefix(':'));
    let mac = rest.ok_or_else(bad)?.split('/').next().unwrap_or_default();
    match mac.parse::<Mac>() {
        Ok(m) if m.is_unicast() => Ok(m),
        _ => Err(bad()),
    }
}

/// One idle round of a bare-frame transport that waits for a frame until
/// `deadline`: a spin (busy-poll; the clock is read every [`CLOCK_EVERY`]
/// rounds) or a wait of at most 50 ms in `wait_readable`. False once the
/// deadline has passed.
pub(crate) fn idle_round(
    busy: bool,
    round: u32,
    deadline: Instant,
    wait_readable: impl FnOnce(i32) -> std::io::Result<bool>,
) -> std::io::Result<bool> {
    if busy {
        if round.is_multiple_of(CLOCK_EVERY) && Instant::now() >= deadline {
            return Ok(false);
        }
        std::hint::spin_loop();
        return Ok(true);
    }
    let now = Instant::now();
    if now >= deadline {
        return Ok(false);
    }
    wait_readable(deadline.duration_since(now).as_millis().clamp(1, 50) as i32)?;
    Ok(true)
}

/// Bare AF_XDP frames to one peer (see the module documentation).
pub struct RawTransport {
    xsk: RawXsk,
    mac: Mac,
    peer: Option<Mac>,
    ethertype: u16,
    busy: bool,
    max_message: usize,
    bad: u64,
}

impl RawTransport {
    /// Opens the interface of `spec`; `peer` is the server's MAC (a server
    /// learns its peer from the first frame).
    pub fn open(spec: &EndSpec, peer: Option<Mac>) -> Result<RawTransport, String> {
        let ifname = interface(spec)?;
        check_usable(&ifname)?;
        let xsk =
            RawXsk::open(&config(spec, &ifname)).map_err(|e| format!("afxdp on {ifname}: {e}"))?;
        print_report(xsk.mode_report());
        let frame = (xsk.if_mtu() as usize + HEADER_LEN)
            .min(xsk.max_rx_frame())
            .min(xsk.max_tx_frame());
        Ok(RawTransport {
            mac: xsk.mac(),
            max_message: frame.saturating_sub(HEADER_LEN + RAW_HEADER),
            ethertype: spec.ethertype,
            busy: spec.busy_poll,
            peer,
            xsk,
            bad: 0,
        })
    }

    /// The AF_XDP machinery underneath.
    pub fn xsk(&self) -> &RawXsk {
        &self.xsk
    }
}

/// Writes the `afxdp-raw` frame carrying `msg` from `src` to `dst` at the
/// start of `buf` and returns its length. `buf` must hold
/// `HEADER_LEN + RAW_HEADER + msg.len()` bytes, which the transport's
/// `max_message` ensures.
pub(crate) fn write_raw_frame(
    buf: &mut [u8],
    dst: Mac,
    src: Mac,
    ethertype: u16,
    msg: &[u8],
) -> usize {
    let len = HEADER_LEN + RAW_HEADER + msg.len();
    let (header, rest) = buf[..len]
        .split_first_chunk_mut::<HEADER_LEN>()
        .expect("a frame holds a header");
    write_header(header, dst, src, ethertype);
    let (msg_len, body) = rest
        .split_first_chunk_mut::<RAW_HEADER>()
        .expect("a frame holds the length");
    *msg_len = (msg.len() as u16).to_le_bytes();
    body.copy_from_slice(msg);
    len
}

/// What a received frame holds: its source and message, if it is one of
/// ours for `mac` of EtherType `ethertype`.
pub(crate) fn parse_raw_frame(frame: &[u8], mac: Mac, ethertype: u16) -> Option<(Mac, &[u8])> {
    let frame = Frame::new_checked(frame).ok()?;
    if frame.ethertype() != ethertype || frame.dst_addr() != mac {
        return None;
    }
    let src = frame.src_addr();
    if src.is_multicast() {
        return None;
    }
    let (len, rest) = frame.payload().split_first_chunk::<RAW_HEADER>()?;
    let msg = rest.get(..usize::from(u16::from_le_bytes(*len)))?;
    Some((src, msg))
}

impl Transport for RawTransport {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let peer = self
            .peer
            .ok_or_else(|| TransportError("no peer yet: nothing received".into()))?;
        if msg.len() > self.max_message {
            return Err(TransportError(format!(
                "{RAW_NAME} carries one message per frame: at most {} bytes, not {}",
                self.max_message,
                msg.len()
            )));
        }
        let (mac, ethertype) = (self.mac, self.ethertype);
        let mut spins = 0u32;
        loop {
            let mut once = Some(msg);
            let n = self
                .xsk
                .send_with(&mut |buf| {
                    let m = once.take()?;
                    Some(write_raw_frame(buf, peer, mac, ethertype, m))
                })
                .map_err(|e| TransportError::new("afxdp-raw send", e))?;
            if n == 1 {
                return Ok(());
            }
            // No TX buffer free: the kernel has not completed earlier frames.
            self.xsk
                .flush()
                .map_err(|e| TransportError::new("afxdp-raw send", e))?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(CLOCK_EVERY) && Instant::now() >= deadline {
                return Err(TransportError::new("afxdp-raw send", "timed out"));
            }
        }
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        let mut idle = 0u32;
        loop {
            let RawTransport {
                xsk,
                mac,
                peer,
                ethertype,
                bad,
                ..
            } = self;
            let mut got = false;
            xsk.recv(
                1,
                &mut |_queue, frame| match parse_raw_frame(frame, *mac, *ethertype) {
                    Some((src, msg)) if peer.is_none_or(|p| p == src) => {
                        *peer = Some(src);
                        got = true;
                        f(msg);
                    }
                    _ => *bad += 1,
                },
            )
            .map_err(|e| TransportError::new("afxdp-raw receive", e))?;
            if got {
                return Ok(true);
            }
            idle = idle.wrapping_add(1);
            let fd = self.xsk.readiness_fd();
            let waiting = idle_round(self.busy, idle, deadline, |ms| {
                bcl_afxdp::wait_readable(fd, ms)
            })
            .map_err(|e| TransportError::new("afxdp-raw poll", e))?;
            if !waiting {
                return Ok(false);
            }
        }
    }

    fn flush(&mut self, _deadline: Instant) -> Result<(), TransportError> {
        self.xsk
            .flush()
            .map_err(|e| TransportError::new("afxdp-raw flush", e))
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
            "afxdp-raw on {}: {:?}; per queue {:?}; kernel XDP_STATISTICS {:?}",
            self.xsk.mode_report().ifname,
            self.counters(),
            self.xsk.queue_stats(),
            self.xsk.kernel_stats()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_descriptors_parse() {
        assert_eq!(
            parse_raw_descriptor(RAW_NAME, "afxdp-raw:02:00:00:00:02:01/3").unwrap(),
            Mac([2, 0, 0, 0, 2, 1])
        );
        assert_eq!(
            parse_raw_descriptor(RAW_NAME, "afxdp-raw:02:00:00:00:02:01").unwrap(),
            Mac([2, 0, 0, 0, 2, 1])
        );
        for bad in [
            "afxdp:02:00:00:00:02:01/3",
            "afxdp-raw:",
            "afxdp-raw:01:00:5e:00:00:01/3",
            "afxdp-raw:zz:00:00:00:02:01",
            "02:00:00:00:02:01",
        ] {
            assert!(
                parse_raw_descriptor(RAW_NAME, bad)
                    .unwrap_err()
                    .contains("listening:"),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn raw_frames_are_checked() {
        let me = Mac([2, 0, 0, 0, 0, 1]);
        let peer = Mac([2, 0, 0, 0, 0, 2]);
        let et = 0x88b5;
        let mut f = vec![0u8; 60];
        let n = write_raw_frame(&mut f, me, peer, et, b"abc");
        // Destination, source, EtherType (big-endian), the message's length
        // (little-endian), the message.
        assert_eq!(
            f[..n],
            [2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x88, 0xb5, 3, 0, b'a', b'b', b'c']
        );
        // Padded to 60 bytes: the length keeps the message exact.
        let (src, msg) = parse_raw_frame(&f, me, et).unwrap();
        assert_eq!((src, msg), (peer, &b"abc"[..]));
        // An empty message (the end of a pingpong run).
        let mut e = vec![0u8; 60];
        let n = write_raw_frame(&mut e, me, peer, et, b"");
        assert_eq!(n, 16);
        assert_eq!(parse_raw_frame(&e[..n], me, et).unwrap().1, b"");
        // A length beyond the frame, another destination, a multicast
        // source, another EtherType, a runt: all refused.
        let mut long = vec![0u8; 200];
        write_raw_frame(&mut long, me, peer, et, &[7; 100]);
        assert!(parse_raw_frame(&long[..60], me, et).is_none());
        assert!(parse_raw_frame(&f, Mac([2, 0, 0, 0, 0, 9]), et).is_none());
        let mut g = vec![0u8; 60];
        write_raw_frame(&mut g, me, Mac([1, 0, 0, 0, 0, 2]), et, b"abc");
        assert!(parse_raw_frame(&g, me, et).is_none());
        assert!(parse_raw_frame(&f, me, 0x0800).is_none());
        assert!(parse_raw_frame(&f[..15], me, et).is_none());
    }

    #[test]
    fn the_unusable_message_names_the_alternative() {
        let m = not_usable("eth9", "interface eth9 is down");
        assert!(
            m.contains("eth9 is down") && m.contains("--method packet"),
            "{m}"
        );
    }
}
