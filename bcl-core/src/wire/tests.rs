use super::*;
use proptest::prelude::*;

fn expect() -> Expect {
    Expect {
        job: JobKey(0xabc),
        local: ProcessAddr::new(2, 1),
        require_crc: true,
    }
}

fn data_fields() -> HeaderFields {
    HeaderFields {
        kind: Some(FrameType::Data),
        flags: flags::ACK,
        generation: 0xa5,
        job: JobKey(0xabc),
        src: ProcessAddr::new(1, 7),
        dst: ProcessAddr::new(2, 1),
        epoch: 99,
        seq: 0xffff_fff0,
        ack: 17,
        base: 0xffff_ffe0,
        channel: 0,
        msg_id: 5,
        msg_seq: 0xffff_ffee,
        frag_offset: 100,
        msg_len: 110,
    }
}

fn encoded(payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; HEADER_LEN + payload.len()];
    let n = encode(&mut buf, &data_fields(), payload, true).unwrap();
    assert_eq!(n, buf.len());
    buf
}

#[test]
fn header_is_one_cache_line_in_network_order() {
    assert_eq!(HEADER_LEN, 64);
    let buf = encoded(b"0123456789");
    assert_eq!(buf[0], VERSION);
    assert_eq!(buf[1], FrameType::Data as u8);
    assert_eq!(&buf[4..8], &0xabcu32.to_be_bytes());
    assert_eq!(&buf[24..28], &0xffff_fff0u32.to_be_bytes(), "seq");
    assert_eq!(&buf[38..40], &10u16.to_be_bytes(), "payload length");
}

#[test]
fn encode_then_parse_round_trips_every_field() {
    let buf = encoded(b"0123456789");
    let f = parse(&buf, &expect()).unwrap();
    let h = f.header();
    assert_eq!(f.kind(), FrameType::Data);
    assert_eq!(f.src(), ProcessAddr::new(1, 7));
    assert_eq!(f.epoch(), 99);
    assert_eq!(f.generation(), 0xa5);
    assert_eq!(f.ack(), Some(17));
    assert_eq!(h.seq.get(), 0xffff_fff0);
    assert_eq!(h.base.get(), 0xffff_ffe0);
    assert_eq!(h.msg_id.get(), 5);
    assert_eq!(h.frag_offset.get(), 100);
    assert_eq!(h.msg_seq.get(), 0xffff_ffee);
    assert_eq!(h.msg_len.get(), 110);
    assert_eq!(f.payload(), b"0123456789");
    assert_ne!(f.flags() & flags::CRC, 0);
}

#[test]
fn trailing_padding_is_ignored() {
    let mut buf = encoded(b"abc");
    buf.extend_from_slice(&[0u8; 20]);
    assert_eq!(parse(&buf, &expect()).unwrap().payload(), b"abc");
}

#[test]
fn every_single_bit_flip_is_caught() {
    let buf = encoded(b"payload bytes that must arrive intact");
    for bit in 0..buf.len() * 8 {
        let mut bad = buf.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        assert!(
            parse(&bad, &expect()).is_err(),
            "flip of bit {bit} went unnoticed"
        );
    }
}

#[test]
fn each_validation_has_its_own_error() {
    let good = encoded(b"0123456789");
    let e = expect();
    assert_eq!(
        parse(&good[..10], &e).unwrap_err(),
        FrameError::Truncated(10)
    );

    let mut v = good.clone();
    v[0] = 9;
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::BadVersion(9));

    let mut v = good.clone();
    v[1] = 200;
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::BadType(200));

    // Every flag bit has a meaning; a congestion report on a frame of a
    // method that never loses has none.
    let mut v = good.clone();
    v[3] = flags::UNSEQUENCED | flags::CONGESTED;
    assert_eq!(
        parse(&v, &e).unwrap_err(),
        FrameError::BadFlags(flags::CONGESTED)
    );

    // Payload length beyond the frame.
    assert_eq!(
        parse(&good[..good.len() - 1], &e).unwrap_err(),
        FrameError::BadLength
    );

    // Fragment past the message end (fields re-encoded with a valid CRC).
    let mut f = data_fields();
    f.msg_len = 105;
    let mut v = vec![0u8; HEADER_LEN + 10];
    encode(&mut v, &f, b"0123456789", true).unwrap();
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::BadLength);

    let mut f = data_fields();
    f.job = JobKey(1);
    let mut v = vec![0u8; HEADER_LEN + 10];
    encode(&mut v, &f, b"0123456789", true).unwrap();
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::WrongJob(1));

    let mut f = data_fields();
    f.dst = ProcessAddr::new(2, 2);
    let mut v = vec![0u8; HEADER_LEN + 10];
    encode(&mut v, &f, b"0123456789", true).unwrap();
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::WrongDestination);

    let mut v = vec![0u8; HEADER_LEN + 10];
    encode(&mut v, &data_fields(), b"0123456789", false).unwrap();
    assert_eq!(parse(&v, &e).unwrap_err(), FrameError::MissingChecksum);
    let lax = Expect {
        require_crc: false,
        ..e
    };
    assert!(
        parse(&v, &lax).is_ok(),
        "a link that guarantees integrity may skip the CRC"
    );
}

#[test]
fn encode_reports_small_buffers_and_missing_type() {
    let mut small = [0u8; 60];
    assert_eq!(
        encode(&mut small, &data_fields(), &[0; 10], true).unwrap_err(),
        EncodeError::BufferTooSmall { need: 74, have: 60 }
    );
    let mut buf = [0u8; 100];
    let f = HeaderFields::default();
    assert_eq!(
        encode(&mut buf, &f, &[], true).unwrap_err(),
        EncodeError::NoType
    );
    let mut big = vec![0u8; HEADER_LEN + 70_000];
    assert_eq!(
        encode(&mut big, &data_fields(), &vec![0; 70_000], true).unwrap_err(),
        EncodeError::PayloadTooLong(70_000)
    );
}

#[test]
fn ack_body_round_trips_and_rejects_bad_bodies() {
    let mut body = AckBody::new(NakReason::RingFull);
    body.sack_bits = U16::new(10);
    body.bitmap[0] = 0b101;
    body.dropped_seq = U32::new(42);
    let bytes = body.as_bytes().to_vec();
    let read = AckBody::read(&bytes).unwrap();
    assert_eq!(read.reason(), NakReason::RingFull);
    assert!(read.is_set(0) && !read.is_set(1) && read.is_set(2));
    assert!(!read.is_set(300));
    assert_eq!(read.dropped_seq.get(), 42);

    assert!(AckBody::read(&bytes[..5]).is_none(), "short body");
    let mut bad = bytes.clone();
    bad[0] = 7;
    assert!(AckBody::read(&bad).is_none(), "unknown reason");
    let mut bad = bytes;
    bad[2..4].copy_from_slice(&999u16.to_be_bytes());
    assert!(
        AckBody::read(&bad).is_none(),
        "more SACK bits than the bitmap holds"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn parse_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse(&bytes, &expect());
        let _ = AckBody::read(&bytes);
    }

    /// Arbitrary bytes behind a well-formed prefix (version and type right)
    /// reach the deeper checks and still never panic, and nothing accepted
    /// has a payload outside the input.
    #[test]
    fn parse_of_plausible_frames_stays_in_bounds(
        kind in 1u8..=9,
        rest in proptest::collection::vec(any::<u8>(), 0..200),
        require_crc in any::<bool>(),
    ) {
        let mut bytes = vec![VERSION, kind];
        bytes.extend_from_slice(&rest);
        let e = Expect { require_crc, ..expect() };
        if let Ok(f) = parse(&bytes, &e) {
            prop_assert!(HEADER_LEN + f.payload().len() <= bytes.len());
        }
    }

    /// Every frame we encode parses back to the same payload.
    #[test]
    fn encoded_frames_parse(payload in proptest::collection::vec(any::<u8>(), 0..1500), seq in any::<u32>()) {
        let mut f = data_fields();
        f.seq = seq;
        f.frag_offset = 0;
        f.msg_len = payload.len() as u32;
        let mut buf = vec![0u8; HEADER_LEN + payload.len()];
        encode(&mut buf, &f, &payload, true).unwrap();
        let parsed = parse(&buf, &expect()).unwrap();
        prop_assert_eq!(parsed.payload(), &payload[..]);
        prop_assert_eq!(parsed.header().seq.get(), seq);
    }
}

/// A bundle frame's header fields around `payload` (a bundle payload).
fn bundle_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = data_fields();
    f.flags |= flags::BUNDLE;
    f.msg_seq = f.seq;
    f.frag_offset = 0;
    f.msg_len = payload.len() as u32;
    let mut buf = vec![0u8; HEADER_LEN + payload.len()];
    encode(&mut buf, &f, payload, true).unwrap();
    buf
}

fn bundle_of(msgs: &[&[u8]]) -> Vec<u8> {
    let mut buf = vec![0u8; 2000];
    let mut w = bundle::Writer::new(&mut buf).unwrap();
    for m in msgs {
        assert!(w.push(m));
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

#[test]
fn a_bundle_round_trips_its_records_in_order() {
    let msgs: [&[u8]; 3] = [b"first", b"", b"third message"];
    let payload = bundle_of(&msgs);
    assert_eq!(
        payload.len(),
        bundle::payload_len(msgs.iter().map(|m| m.len()))
    );
    assert_eq!(&payload[..2], &3u16.to_be_bytes(), "record count first");
    assert_eq!(&payload[2..4], &5u16.to_be_bytes(), "then each length");
    let buf = bundle_frame(&payload);
    let f = parse(&buf, &expect()).unwrap();
    assert!(f.is_bundle());
    let got: Vec<&[u8]> = bundle::records(f.payload()).collect();
    assert_eq!(got, msgs);
}

#[test]
fn the_bundle_writer_stops_at_the_buffer_end() {
    let mut buf = [0u8; 2 + 2 + 4 + 2 + 3];
    let mut w = bundle::Writer::new(&mut buf).unwrap();
    assert!(w.push(b"abcd"));
    assert!(!w.fits(4));
    assert!(!w.push(b"abcd"), "does not fit");
    assert!(w.push(b"xyz"));
    assert!(!w.push(b""), "not even an empty record");
    assert_eq!(w.count(), 2);
    assert_eq!(w.finish(), buf.len());
    assert_eq!(bundle::validate(&buf), Some(2));
    assert!(bundle::Writer::new(&mut [0u8; 1]).is_none());
}

#[test]
fn malformed_bundles_are_refused() {
    let good = bundle_of(&[b"ab", b"cde"]);
    assert_eq!(bundle::validate(&good), Some(2));
    assert_eq!(bundle::validate(&[]), None, "no count");
    assert_eq!(bundle::validate(&[0, 0]), None, "no records");
    assert_eq!(
        bundle::validate(&good[..good.len() - 1]),
        None,
        "last record cut short"
    );
    let mut longer = good.clone();
    longer.push(0);
    assert_eq!(bundle::validate(&longer), None, "trailing bytes");
    let mut count = good.clone();
    count[1] = 3;
    assert_eq!(
        bundle::validate(&count),
        None,
        "more records counted than present"
    );
    let mut len = good.clone();
    len[2..4].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(bundle::validate(&len), None, "record past the end");

    // The parser refuses them, and bundles whose header is inconsistent.
    let err = |bytes: &[u8]| parse(bytes, &expect()).err();
    assert_eq!(err(&bundle_frame(&longer)), Some(FrameError::BadBundle));
    assert_eq!(err(&bundle_frame(&[0, 0])), Some(FrameError::BadBundle));
    let fields = |edit: &dyn Fn(&mut HeaderFields)| {
        let mut f = data_fields();
        f.flags |= flags::BUNDLE;
        f.msg_seq = f.seq;
        f.frag_offset = 0;
        f.msg_len = good.len() as u32;
        edit(&mut f);
        let mut buf = vec![0u8; HEADER_LEN + good.len()];
        encode(&mut buf, &f, &good, true).unwrap();
        err(&buf)
    };
    assert_eq!(fields(&|_| {}), None, "the well-formed one parses");
    assert_eq!(fields(&|f| f.channel = 3), Some(FrameError::BadBundle));
    assert_eq!(
        fields(&|f| f.msg_seq = f.seq - 1),
        Some(FrameError::BadBundle)
    );
    assert_eq!(fields(&|f| f.msg_len += 1), Some(FrameError::BadBundle));
    assert_eq!(
        fields(&|f| f.kind = Some(FrameType::Control)),
        Some(FrameError::BadBundle)
    );
    assert_eq!(
        fields(&|f| f.flags |= flags::UNSEQUENCED),
        Some(FrameError::BadBundle)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Any list of messages written as a bundle reads back the same.
    #[test]
    fn bundles_round_trip(msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..40)) {
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let payload = bundle_of(&refs);
        prop_assert_eq!(bundle::validate(&payload), Some(msgs.len() as u16));
        let buf = bundle_frame(&payload);
        let f = parse(&buf, &expect()).unwrap();
        let got: Vec<&[u8]> = bundle::records(f.payload()).collect();
        prop_assert_eq!(got, refs);
    }

    /// Arbitrary bytes as the payload of a bundle frame whose header is
    /// right: the parser never panics, and what it accepts has exactly the
    /// counted records, filling the payload.
    #[test]
    fn bundle_parse_never_panics_and_accepted_records_fill_the_payload(
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        small_count in any::<bool>(),
    ) {
        let mut payload = payload;
        if small_count && payload.len() >= 2 {
            // Plausible counts reach the record walk more often.
            payload[0] = 0;
            payload[1] %= 8;
        }
        let buf = bundle_frame(&payload);
        if let Ok(f) = parse(&buf, &expect()) {
            let count = bundle::validate(f.payload());
            prop_assert!(count.is_some());
            let n = bundle::records(f.payload()).count();
            prop_assert_eq!(Some(n as u16), count);
            prop_assert_eq!(
                bundle::payload_len(bundle::records(f.payload()).map(<[u8]>::len)),
                f.payload().len()
            );
        }
        // The record reader never panics on any bytes either.
        let _ = bundle::records(&payload).count();
    }
}
