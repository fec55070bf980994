//! Arbitrary frames into a live port: whatever arrives from the network, the
//! port must not panic, and its counters must account for every frame (each
//! one taken, `frames_received`, or rejected for a reason, `bad_frames`; a
//! taken frame may also count a reason, such as a bad acknowledgement it
//! carried, so the sum may exceed the frames handed over, never fall short).
#![no_main]

use bcl_core::method::{LinkId, MethodCaps, Route};
use bcl_core::{JobKey, Port, PortConfig, ProcessAddr, Time};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // CRC off so the fuzzer can reach the protocol logic behind the parser.
    let mut cfg = PortConfig::new(ProcessAddr::new(0, 0), JobKey(0));
    cfg.crc = false;
    cfg.ring_blocks = 64;
    cfg.eager_limit = 4096;
    let mut port = Port::new(cfg).expect("config");
    port.add_method(MethodCaps {
        mtu: 1500,
        integrity: true,
        reliable: false,
    })
    .expect("method");
    let route = Route {
        method: 0,
        link: LinkId(0),
    };
    let mut buf = vec![0u8; 1500];
    // The input is a sequence of frames, each prefixed by a 2-byte length.
    let mut rest = data;
    let mut now = 0u64;
    let mut handled = 0u64;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let frame = &rest[2..2 + len];
        rest = &rest[2 + len..];
        now += 1000;
        port.handle_frame(Time::from_nanos(now), route, frame);
        handled += 1;
        let s = port.stats();
        assert!(
            s.frames_received <= handled,
            "{handled} frames handled: {s:?}"
        );
        assert!(
            s.frames_received + s.bad_frames.total() >= handled,
            "a frame counted nowhere: {handled} frames handled: {s:?}"
        );
        port.handle_timeout(Time::from_nanos(now));
        while port
            .poll_transmit(0, Time::from_nanos(now), &mut buf)
            .is_some()
        {}
        while let Some(d) = port.poll_delivery() {
            assert!(port.message(&d).is_some());
            port.release(d.slot).expect("fresh delivery releases");
        }
    }
});
