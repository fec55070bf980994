//! Arbitrary bytes into the frame parser and the ACK-body reader: they must
//! never panic, an accepted frame's payload lies inside the input, and an
//! accepted bundle's records are all there and fill its payload.
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
            if frame.is_bundle() {
                let count = wire::bundle::validate(frame.payload()).expect("parse validated it");
                let records = wire::bundle::records(frame.payload());
                let total: usize = records.clone().map(|r| r.len()).sum();
                assert_eq!(records.count(), usize::from(count));
                assert_eq!(
                    wire::bundle::payload_len(
                        wire::bundle::records(frame.payload()).map(<[u8]>::len)
                    ),
                    frame.payload().len()
                );
                assert!(total <= frame.payload().len());
            }
        }
    }
});
