//! The core's own cost per message, with no I/O: encode + CRC + parse +
//! reassembly + delivery + acknowledgement + completion, for 8 B and 1 KiB
//! messages; and, from the same run, the bare memcpy of the payload that any
//! stack must do, as the baseline.

use bcl_bench::PortPair;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;

const BATCH: usize = 64;

fn core_cost(c: &mut Criterion) {
    for (name, size) in [("8B", 8usize), ("1KiB", 1024)] {
        let payload = vec![0xa5u8; size];
        let mut g = c.benchmark_group(format!("per_message/{name}"));
        g.throughput(Throughput::Elements(BATCH as u64));
        let mut pair = PortPair::new();
        g.bench_function("bcl_core_exchange", |b| {
            b.iter(|| black_box(pair.exchange(black_box(&payload), BATCH)))
        });
        // The same messages queued as a burst: small ones travel bundled.
        let mut pair = PortPair::new();
        g.bench_function("bcl_core_exchange_queued", |b| {
            b.iter(|| black_box(pair.exchange_queued(black_box(&payload), BATCH)))
        });
        // Baseline: the copies any message path makes at least once each way.
        let mut dst = vec![0u8; size];
        g.bench_function("memcpy_baseline", |b| {
            b.iter_batched_ref(
                || (),
                |_| {
                    for _ in 0..BATCH {
                        dst.copy_from_slice(black_box(&payload));
                        black_box(&mut dst);
                    }
                },
                BatchSize::SmallInput,
            )
        });
        g.finish();
    }

    let mut g = c.benchmark_group("wire");
    let payload = vec![0u8; 1024];
    let fields = bcl_core::wire::HeaderFields {
        kind: Some(bcl_core::wire::FrameType::Data),
        msg_len: 1024,
        ..Default::default()
    };
    let mut buf = vec![0u8; 1500];
    g.bench_function("encode_1KiB_crc", |b| {
        b.iter(|| bcl_core::wire::encode(&mut buf, black_box(&fields), &payload, true).unwrap())
    });
    let n = bcl_core::wire::encode(&mut buf, &fields, &payload, true).unwrap();
    let expect = bcl_core::wire::Expect {
        job: bcl_core::JobKey(0),
        local: bcl_core::ProcessAddr::default(),
        require_crc: true,
    };
    g.bench_function("parse_1KiB_crc", |b| {
        b.iter(|| bcl_core::wire::parse(black_box(&buf[..n]), &expect).map(|f| f.payload().len()))
    });
    g.finish();
}

criterion_group!(benches, core_cost);
criterion_main!(benches);
