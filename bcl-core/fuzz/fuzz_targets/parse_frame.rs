//! Arbitrary bytes into the frame parser and the ACK-body reader: they must
//! never panic, and an accepted frame's payload lies inside the input.
#![no_main]

use bcl_core::wire::{self, AckBody, Expect};
use bcl_core::{JobKey, ProcessAddr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for require_crc in [false, true] {
        let expect = Expect {
            job: JobKey(0),
            local: ProcessAddr::new(0, 0),
            require_crc,
        };
        if let Ok(frame) = wire::parse(data, &expect) {
            assert!(wire::HEADER_LEN + frame.payload().len() <= data.len());
            let _ = AckBody::read(frame.payload());
        }
    }
});
