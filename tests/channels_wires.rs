//! Normal and open channels over real methods: the udp method on loopback
//! (unprivileged), shared memory (busy-poll), and the packet and udp methods
//! between two `bcl-lab` namespaces joined through an impairment bridge
//! (configs/lab/lossy-pair.toml: 10 % loss, 25 % reordering, 5 %
//! duplication, 1 % corruption; needs root, fails loudly without it unless
//! BCL_SKIP_PRIVILEGED=1).
//!
//! Each test drives all its endpoints from one thread (busy-poll progress on
//! each in turn; an endpoint opened inside a lab namespace keeps its sockets
//! there), except the blocking-API test, which gives each end a thread.
//! Every received byte is compared with what was sent, every buffer comes
//! back, and every wait has a bound, so a hang is a failure with the ports'
//! state in its message.

mod common;

use bcl::udp::{UdpConfig, UdpMethod};
use bcl::{
    ChannelError, ChannelEvent, ChannelId, Endpoint, PortConfig, ProcessAddr, ProgressMode,
    SendHandle, TransferError,
};
use bcl_lab::{require_privileges, Lab};
use common::{lab, Wire, JOB};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Longest wait for anything: far above what any step needs, only there so
/// that a hang fails with a message.
const LIMIT: Duration = Duration::from_secs(120);

/// The address of endpoint `i` of a [`Net`].
fn addr(i: usize) -> ProcessAddr {
    ProcessAddr::new(i as u32 + 1, 0)
}

/// `len` bytes, different for each `seed`: a 65 521-byte pseudo-random block
/// repeated (its length is prime, so it lines up with no frame size), with
/// every 4 KiB chunk stamped with the seed and its index (so a chunk written
/// at the wrong offset shows).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    const BLOCK: usize = 65_521;
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let block: Vec<u8> = (0..BLOCK.min(len))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(block.len());
        v.extend_from_slice(&block[..n]);
    }
    for (k, chunk) in v.chunks_mut(4096).enumerate() {
        let stamp = ((seed << 40) ^ k as u64).to_le_bytes();
        let n = chunk.len().min(8);
        chunk[..n].copy_from_slice(&stamp[..n]);
    }
    v
}

/// Fails unless `got` and `want` are byte-identical, naming the first
/// difference (never printing megabytes).
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes received, {} expected, first difference at byte {at:?}",
            got.len(),
            want.len()
        );
    }
}

/// An event without its buffer, for messages.
fn summary(ev: &ChannelEvent) -> String {
    match ev {
        ChannelEvent::SendDone { handle, buffer } => {
            format!("SendDone({handle:?}, {} bytes)", buffer.len())
        }
        ChannelEvent::SendFailed { handle, error, .. } => {
            format!("SendFailed({handle:?}, {error})")
        }
        ChannelEvent::Received {
            channel, from, len, ..
        } => format!("Received({channel:?} from {from}, {len} bytes)"),
        ChannelEvent::ReceiveFailed {
            channel,
            from,
            error,
            buffer,
        } => format!(
            "ReceiveFailed({channel:?} from {from}: {error}, buffer back: {})",
            buffer.is_some()
        ),
        ChannelEvent::PutDone { handle, .. } => format!("PutDone({handle:?})"),
        ChannelEvent::GetDone { handle, .. } => format!("GetDone({handle:?})"),
        ChannelEvent::RmaFailed { handle, error, .. } => format!("RmaFailed({handle:?}, {error})"),
    }
}

/// Endpoints driven in turn from one thread, with their channel events
/// collected.
struct Net {
    eps: Vec<Option<Endpoint>>,
    events: Vec<Vec<ChannelEvent>>,
}

impl Net {
    /// Endpoints made by `open(i)`, every one a peer of every other.
    fn new(n: usize, mut open: impl FnMut(usize) -> Endpoint) -> Net {
        let mut eps: Vec<Endpoint> = (0..n).map(&mut open).collect();
        let descs: Vec<_> = eps.iter().map(|e| e.descriptors()[0].clone()).collect();
        for (i, ep) in eps.iter_mut().enumerate() {
            for (j, d) in descs.iter().enumerate() {
                if i != j {
                    ep.add_peer(addr(j), d.clone());
                }
            }
        }
        Net {
            eps: eps.into_iter().map(Some).collect(),
            events: (0..n).map(|_| Vec::new()).collect(),
        }
    }

    /// `n` udp endpoints on 127.0.0.1 with frames of up to `mtu` bytes.
    fn udp(n: usize, mtu: Option<usize>, configure: impl Fn(&mut PortConfig)) -> Net {
        Net::new(n, |i| {
            let mut c = UdpConfig::new("127.0.0.1:0".parse().unwrap());
            c.mtu = mtu;
            Endpoint::builder(addr(i), JOB)
                .method(Box::new(UdpMethod::open(c).unwrap()))
                .mode(ProgressMode::BusyPoll)
                .configure(&configure)
                .build()
                .unwrap()
        })
    }

    /// `n` shared-memory endpoints on this node (a job of this test's own).
    fn shm(n: usize, tag: u32) -> Net {
        let job = bcl::JobKey(std::process::id() << 8 ^ tag);
        Net::new(n, |i| {
            let m = bcl::shm::ShmMethod::open(job, addr(i)).unwrap();
            Endpoint::builder(addr(i), job)
                .method(Box::new(m))
                .mode(ProgressMode::BusyPoll)
                .build()
                .unwrap()
        })
    }

    /// Endpoints of `wire`, endpoint `i` opened inside lab node `nodes[i]`
    /// (the calling thread ends up in the last one's namespace).
    fn lab(lab: &Lab, wire: Wire, nodes: &[&str]) -> Net {
        Net::new(nodes.len(), |i| {
            lab.enter(nodes[i]).unwrap();
            common::endpoint(wire, addr(i), ProgressMode::BusyPoll).0
        })
    }

    fn ep(&mut self, i: usize) -> &mut Endpoint {
        self.eps[i].as_mut().expect("endpoint was dropped")
    }

    /// Every live endpoint's state, for failure messages.
    fn dump(&self) -> String {
        let mut out = String::new();
        for (i, ep) in self.eps.iter().enumerate() {
            let Some(ep) = ep else { continue };
            out += &format!("\n  endpoint {i}: {}", ep.port().debug_summary());
            for peer in ep.port().peers().collect::<Vec<_>>() {
                out += &format!("\n    {}", ep.port().peer_debug(peer).unwrap_or_default());
            }
            let evs: Vec<String> = self.events[i].iter().map(summary).collect();
            out += &format!("\n    pending events: {evs:?}");
        }
        out
    }

    /// One round of progress on every live endpoint.
    fn step(&mut self) {
        for (i, ep) in self.eps.iter_mut().enumerate() {
            if let Some(ep) = ep {
                ep.progress()
                    .unwrap_or_else(|e| panic!("endpoint {i} progress: {e}"));
                while let Some(ev) = ep.poll_channel_event() {
                    self.events[i].push(ev);
                }
            }
        }
    }

    /// Steps until endpoint `i` has an event `wanted` accepts, and takes it.
    fn wait_event(
        &mut self,
        i: usize,
        what: &str,
        mut wanted: impl FnMut(&ChannelEvent) -> bool,
    ) -> ChannelEvent {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(k) = self.events[i].iter().position(&mut wanted) {
                return self.events[i].remove(k);
            }
            assert!(
                Instant::now() < deadline,
                "{what}: nothing within {LIMIT:?}{}",
                self.dump()
            );
            self.step();
        }
    }

    /// The completion of send or RMA `h` at endpoint `i`.
    fn wait_handle(&mut self, i: usize, h: SendHandle, what: &str) -> ChannelEvent {
        self.wait_event(i, what, |e| match e {
            ChannelEvent::SendDone { handle, .. }
            | ChannelEvent::SendFailed { handle, .. }
            | ChannelEvent::PutDone { handle, .. }
            | ChannelEvent::GetDone { handle, .. }
            | ChannelEvent::RmaFailed { handle, .. } => *handle == h,
            _ => false,
        })
    }

    /// The next receive event of channel `ch` at endpoint `i`.
    fn wait_receive(&mut self, i: usize, ch: ChannelId, what: &str) -> ChannelEvent {
        self.wait_event(i, what, |e| match e {
            ChannelEvent::Received { channel, .. }
            | ChannelEvent::ReceiveFailed { channel, .. } => *channel == ch,
            _ => false,
        })
    }

    /// Steps until endpoint `i` has received more than `frames` frames in
    /// all.
    fn until_received(&mut self, i: usize, frames: u64, what: &str) {
        let deadline = Instant::now() + LIMIT;
        while self.ep(i).port().stats().frames_received <= frames {
            assert!(
                Instant::now() < deadline,
                "{what}: endpoint {i} received no more than {frames} frames within {LIMIT:?}{}",
                self.dump()
            );
            self.step();
        }
    }

    /// Steps `n` rounds.
    fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }
}

/// A send on a normal channel that must complete: its buffer comes back.
fn expect_send_done(ev: ChannelEvent, what: &str) -> Vec<u8> {
    match ev {
        ChannelEvent::SendDone { buffer, .. } => buffer,
        other => panic!("{what}: expected SendDone, got {}", summary(&other)),
    }
}

/// A receive that must succeed from `from`: the buffer and message length.
fn expect_received(ev: ChannelEvent, from: ProcessAddr, what: &str) -> (Vec<u8>, usize) {
    match ev {
        ChannelEvent::Received {
            from: f,
            buffer,
            len,
            ..
        } => {
            assert_eq!(f, from, "{what}: sender");
            (buffer, len)
        }
        other => panic!("{what}: expected Received, got {}", summary(&other)),
    }
}

/// An RMA that must complete: its buffer.
fn expect_rma_done(ev: ChannelEvent, what: &str) -> Vec<u8> {
    match ev {
        ChannelEvent::PutDone { buffer, .. } | ChannelEvent::GetDone { buffer, .. } => buffer,
        other => panic!(
            "{what}: expected PutDone or GetDone, got {}",
            summary(&other)
        ),
    }
}

/// An RMA that must fail: its error and buffer.
fn expect_rma_failed(ev: ChannelEvent, what: &str) -> (TransferError, Vec<u8>) {
    match ev {
        ChannelEvent::RmaFailed { error, buffer, .. } => (error, buffer),
        other => panic!("{what}: expected RmaFailed, got {}", summary(&other)),
    }
}

/// One normal-channel transfer of `len` bytes from endpoint 0 to endpoint
/// 1 on `ch` whose buffer (of `capacity` bytes) is already posted, checked
/// end to end.
fn transfer_posted(net: &mut Net, ch: ChannelId, len: usize, seed: u64, what: &str) {
    let data = pattern(seed, len);
    let h = net.ep(0).send_on_channel(addr(1), ch, data).unwrap();
    let (buf, got_len) = expect_received(net.wait_receive(1, ch, what), addr(0), what);
    let sent = expect_send_done(net.wait_handle(0, h, what), what);
    assert_eq!(got_len, len, "{what}: length");
    assert_same(&buf[..got_len], &sent, what);
}

// ------------------------------------------------------------ udp loopback

/// The largest message: 1 GiB in one rendezvous transfer, written
/// straight into the posted buffer, byte-identical. Frames of 32 KiB
/// (loopback's MTU is 64 KiB) keep it to a few seconds.
#[test]
fn a_1_gib_message_over_udp_loopback_arrives_byte_identical() {
    const LEN: usize = 1 << 30;
    let mut net = Net::udp(2, Some(32 * 1024), |_| {});
    let ch = net.ep(1).open_normal_channel().unwrap();
    net.ep(1).post(ch, Some(addr(0)), vec![0; LEN]).unwrap();
    let t0 = Instant::now();
    transfer_posted(&mut net, ch, LEN, 1, "1 GiB");
    println!("1 GiB over udp loopback in {:?}", t0.elapsed());
    let rx = *net.ep(1).port().stats();
    assert_eq!(rx.transfers_received, 1, "{rx:?}");
    // The payloads of (nearly) all 32 KiB frames were received straight
    // into the posted buffer: the first of them opens the placing mode.
    let counters = net.ep(1).methods().next().unwrap().counters();
    let detail = |name| counters.detail.iter().find(|(n, _)| *n == name).unwrap().1;
    let frames = (LEN / (32 * 1024)) as u64;
    assert!(
        detail("rx_placed") >= frames - 2,
        "{frames} frames of data: {counters:?}"
    );
}

/// A stream of messages, each a few frames of 40 KiB with a short last
/// one, on one normal channel over udp loopback: the method sends the
/// large frames with their payload gathered from the application's buffer
/// and receives them straight into the posted buffer, switching between
/// that and its batched paths as frame sizes change, and every message
/// arrives intact, in both rendezvous orders.
#[test]
fn large_frames_over_udp_loopback_are_placed_and_arrive_intact() {
    let mut net = Net::udp(2, Some(40 * 1024), |_| {});
    let ch = net.ep(1).open_normal_channel().unwrap();
    let lens = [200_000, 81_000, 40_960, 1_000_000 + 3, 17, 150_001];
    for (k, len) in lens.iter().enumerate() {
        // Announced to the sender (its data starts the transfer) or to
        // anybody (the sender's request comes first).
        let from = (k % 2 == 0).then(|| addr(0));
        net.ep(1).post(ch, from, vec![0; *len]).unwrap();
        transfer_posted(&mut net, ch, *len, 100 + k as u64, &format!("message {k}"));
        // A system-channel message between transfers.
        net.ep(0).send(addr(1), b"between").unwrap();
    }
    let counters = net.ep(1).methods().next().unwrap().counters();
    let detail = |name| counters.detail.iter().find(|(n, _)| *n == name).unwrap().1;
    assert!(detail("rx_placed") >= 30, "{counters:?}");
    assert_eq!(net.ep(1).port().stats().bad_frames.total(), 0);
    // The sender sent those frames with their payload gathered from the
    // application's buffer.
    let counters = net.ep(0).methods().next().unwrap().counters();
    let detail = |name| counters.detail.iter().find(|(n, _)| *n == name).unwrap().1;
    assert!(detail("tx_gathered") >= 30, "{counters:?}");
}

/// Both rendezvous orders, on four channels at once: the receiver posts
/// first (for the sender by name, so it is told READY at once, or for
/// anybody) or the sender's request comes first and waits for the post (for
/// the sender by name, or for anybody). Message sizes are not multiples of
/// any frame size.
#[test]
fn both_rendezvous_orders_over_udp_loopback() {
    let mut net = Net::udp(2, None, |_| {});
    let chans: Vec<ChannelId> = (0..4)
        .map(|_| net.ep(1).open_normal_channel().unwrap())
        .collect();
    let lens = [3 << 20 | 17, (2 << 20) + 5, (4 << 20) + 3, 777_777];
    let data: Vec<Vec<u8>> = (0..4).map(|k| pattern(10 + k as u64, lens[k])).collect();
    // Sender first on channels 2 and 3: the requests reach the receiver
    // before anything is posted there.
    let before = net.ep(1).port().stats().frames_received;
    let mut handles = HashMap::new();
    for k in [2, 3] {
        let h = net
            .ep(0)
            .send_on_channel(addr(1), chans[k], data[k].clone())
            .unwrap();
        handles.insert(k, h);
    }
    net.until_received(1, before, "the rendezvous requests");
    net.steps(50);
    assert!(
        net.events[0].is_empty() && net.events[1].is_empty(),
        "nothing completes before a buffer is posted{}",
        net.dump()
    );
    // Receiver first on channels 0 (for the sender) and 1 (for anybody).
    net.ep(1)
        .post(chans[0], Some(addr(0)), vec![0; lens[0]])
        .unwrap();
    net.ep(1)
        .post(chans[1], None, vec![0; lens[1] + 1000])
        .unwrap();
    net.steps(20);
    for k in [0, 1] {
        let h = net
            .ep(0)
            .send_on_channel(addr(1), chans[k], data[k].clone())
            .unwrap();
        handles.insert(k, h);
    }
    // Now the posts the waiting requests were waiting for.
    net.ep(1).post(chans[2], None, vec![0; lens[2]]).unwrap();
    net.ep(1)
        .post(chans[3], Some(addr(0)), vec![0; lens[3] + 1])
        .unwrap();
    for k in 0..4 {
        let what = format!("channel {k}");
        let (buf, len) = expect_received(net.wait_receive(1, chans[k], &what), addr(0), &what);
        assert_eq!(len, lens[k], "{what}");
        assert_same(&buf[..len], &data[k], &what);
        assert!(
            buf[len..].iter().all(|b| *b == 0),
            "{what}: written past the message"
        );
        let sent = expect_send_done(net.wait_handle(0, handles[&k], &what), &what);
        assert_same(
            &sent,
            &data[k],
            &format!("{what}: the sender's buffer back"),
        );
    }
}

/// One flow of [`several_channels_to_several_peers_at_once_over_udp_loopback`].
struct Flow {
    src: usize,
    dst: usize,
    ch: ChannelId,
    lens: Vec<usize>,
    /// Messages sent (their send issued) and received.
    sent: usize,
    received: usize,
    inflight: Option<SendHandle>,
}

/// Concurrent transfers: endpoint 0 streams to endpoints 1 and 2 on three
/// channels each while endpoint 3 streams to endpoint 1 on two more, every
/// channel carrying several messages (the receiver re-posts after each,
/// the sender sends the next after its completion), all in flight at once.
#[test]
fn several_channels_to_several_peers_at_once_over_udp_loopback() {
    let mut net = Net::udp(4, None, |_| {});
    let mut flows = Vec::new();
    for (src, dst, n) in [(0, 1, 3), (0, 2, 3), (3, 1, 2)] {
        for k in 0..n {
            let ch = net.ep(dst).open_normal_channel().unwrap();
            let lens = (0..3)
                .map(|m| 50_000 + (src * 7 + dst * 3 + k * 5 + m) * 97_001)
                .collect();
            flows.push(Flow {
                src,
                dst,
                ch,
                lens,
                sent: 0,
                received: 0,
                inflight: None,
            });
        }
    }
    let seed = |f: usize, m: usize| (f * 100 + m) as u64;
    // Half the receivers post first, for the sender by name; the others
    // post for anybody after the sends.
    for (i, f) in flows.iter().enumerate() {
        if i % 2 == 0 {
            let cap = f.lens[0];
            net.ep(f.dst)
                .post(f.ch, Some(addr(f.src)), vec![0; cap])
                .unwrap();
        }
    }
    let mut done = 0;
    let total: usize = flows.iter().map(|f| f.lens.len()).sum();
    let deadline = Instant::now() + LIMIT;
    let mut first = true;
    while done < total {
        assert!(Instant::now() < deadline, "flows stuck{}", net.dump());
        for (i, f) in flows.iter_mut().enumerate() {
            if f.inflight.is_none() && f.sent < f.lens.len() {
                let data = pattern(seed(i, f.sent), f.lens[f.sent]);
                f.inflight = Some(
                    net.ep(f.src)
                        .send_on_channel(addr(f.dst), f.ch, data)
                        .unwrap(),
                );
                f.sent += 1;
            }
        }
        if first {
            for (i, f) in flows.iter().enumerate() {
                if i % 2 == 1 {
                    net.ep(f.dst).post(f.ch, None, vec![0; f.lens[0]]).unwrap();
                }
            }
            first = false;
        }
        net.step();
        for (i, f) in flows.iter_mut().enumerate() {
            let what = format!("flow {i} ({} -> {} on {:?})", f.src, f.dst, f.ch);
            if let Some(k) = net.events[f.dst].iter().position(
                |e| matches!(e, ChannelEvent::Received { channel, .. } | ChannelEvent::ReceiveFailed { channel, .. } if *channel == f.ch),
            ) {
                let ev = net.events[f.dst].remove(k);
                let (buf, len) = expect_received(ev, addr(f.src), &what);
                let m = f.received;
                assert_eq!(len, f.lens[m], "{what}: message {m}");
                assert_same(&buf[..len], &pattern(seed(i, m), len), &format!("{what}: message {m}"));
                f.received += 1;
                done += 1;
                if let Some(&next) = f.lens.get(m + 1) {
                    let mut buf = buf;
                    buf.clear();
                    buf.resize(next, 0);
                    let from = (i % 2 == 0).then_some(addr(f.src));
                    net.ep(f.dst).post(f.ch, from, buf).unwrap();
                }
            }
            if let Some(h) = f.inflight {
                if let Some(k) = net.events[f.src].iter().position(|e| {
                    matches!(e, ChannelEvent::SendDone { handle, .. } | ChannelEvent::SendFailed { handle, .. } if *handle == h)
                }) {
                    expect_send_done(net.events[f.src].remove(k), &what);
                    f.inflight = None;
                }
            }
        }
    }
    // The last send completions.
    for (i, f) in flows.iter().enumerate() {
        if let Some(h) = f.inflight {
            expect_send_done(net.wait_handle(f.src, h, &format!("flow {i}")), "last send");
        }
    }
    assert_eq!(net.ep(1).port().stats().transfers_received, 15);
    assert_eq!(net.ep(2).port().stats().transfers_received, 9);
}

const KEY: u64 = 0x0123_4567_89ab_cdef;

/// RMA: puts and gets land where they should; a wrong key, a range past
/// the end (also one whose end overflows 64 bits) or a put larger than the
/// region are error events at the initiator and leave the target's memory
/// untouched, checked byte for byte after each; a get that fails leaves the
/// initiator's buffer untouched; after unregistering, accesses fail and the
/// memory is back with its owner; registering again works.
fn rma_checks(net: &mut Net) {
    let region_len = (1 << 20) + 3;
    let mut model = pattern(77, region_len);
    let region = net.ep(1).register(model.clone());
    let ch = net.ep(1).open_rma_channel(region, KEY).unwrap();
    let untouched = |net: &mut Net, model: &[u8], what: &str| {
        let now = net
            .ep(1)
            .region(region)
            .expect("region registered")
            .to_vec();
        assert_same(&now, model, &format!("{what}: target memory"));
    };

    // Good puts (inline and streamed) and gets.
    for (off, len, seed) in [
        (12_345usize, 200_000usize, 1u64),
        (0, 100, 2),
        (region_len - 9, 9, 3),
    ] {
        let data = pattern(seed, len);
        let h = net
            .ep(0)
            .put(addr(1), ch, KEY, off as u64, data.clone())
            .unwrap();
        let back = expect_rma_done(net.wait_handle(0, h, "put"), "put");
        assert_same(&back, &data, "the put's buffer back");
        model[off..off + len].copy_from_slice(&data);
        untouched(net, &model, "after a good put");
    }
    for (off, len) in [
        (1000usize, 300_000usize),
        (0, region_len),
        (region_len - 1, 1),
    ] {
        let h = net
            .ep(0)
            .get(addr(1), ch, KEY, off as u64, vec![0xEE; len])
            .unwrap();
        let got = expect_rma_done(net.wait_handle(0, h, "get"), "get");
        assert_same(&got, &model[off..off + len], "get");
    }

    // Violations: each fails at the initiator with the reason, the target
    // unchanged.
    let big = pattern(9, 2 << 20);
    let cases: Vec<(&str, u64, u64, Vec<u8>)> = vec![
        ("wrong key, small put", KEY ^ 1, 0, vec![0xAB; 1000]),
        ("wrong key, large put", 0, 4096, pattern(8, 500_000)),
        (
            "range past the end",
            KEY,
            region_len as u64 - 10,
            vec![0xAB; 100],
        ),
        (
            "offset past the end",
            KEY,
            region_len as u64 + 1,
            vec![0xAB; 1],
        ),
        ("end overflows", KEY, u64::MAX - 5, vec![0xAB; 100]),
        ("put larger than the region", KEY, 0, big),
    ];
    for (what, key, off, data) in cases {
        let len = data.len() as u64;
        let h = net.ep(0).put(addr(1), ch, key, off, data.clone()).unwrap();
        let (error, back) = expect_rma_failed(net.wait_handle(0, h, what), what);
        assert_same(&back, &data, &format!("{what}: the buffer back"));
        if key != KEY {
            assert_eq!(error, TransferError::BadKey, "{what}");
        } else {
            assert_eq!(
                error,
                TransferError::OutOfBounds {
                    offset: off,
                    len,
                    region_len: region_len as u64
                },
                "{what}"
            );
        }
        untouched(net, &model, what);
    }
    for (what, key, off, len) in [
        ("get with a wrong key", KEY.rotate_left(1), 0u64, 4096usize),
        ("get past the end", KEY, region_len as u64 - 100, 101),
        ("get larger than the region", KEY, 0, region_len + 1),
    ] {
        let h = net
            .ep(0)
            .get(addr(1), ch, key, off, vec![0x5A; len])
            .unwrap();
        let (error, back) = expect_rma_failed(net.wait_handle(0, h, what), what);
        assert_eq!(back.len(), len, "{what}");
        assert!(back.iter().all(|b| *b == 0x5A), "{what}: buffer written");
        assert!(
            matches!(
                error,
                TransferError::BadKey | TransferError::OutOfBounds { .. }
            ),
            "{what}: {error}"
        );
        untouched(net, &model, what);
    }

    // Unregistered: the memory comes back as it is; accesses fail (the
    // channel exposing it is closed with it); the old id is dead.
    let mem = net.ep(1).unregister(region).unwrap();
    assert_same(&mem, &model, "the unregistered memory");
    assert!(net.ep(1).region(region).is_none());
    let h = net.ep(0).put(addr(1), ch, KEY, 0, vec![1; 64]).unwrap();
    let (error, _) = expect_rma_failed(
        net.wait_handle(0, h, "put after unregister"),
        "put after unregister",
    );
    assert!(
        matches!(error, TransferError::NoSuchChannel(c) if c == ch)
            || error == TransferError::Unregistered,
        "put after unregister: {error}"
    );
    let h = net.ep(0).get(addr(1), ch, KEY, 0, vec![0; 64]).unwrap();
    let (error, _) = expect_rma_failed(
        net.wait_handle(0, h, "get after unregister"),
        "get after unregister",
    );
    assert!(
        matches!(
            error,
            TransferError::NoSuchChannel(_) | TransferError::Unregistered
        ),
        "get after unregister: {error}"
    );
    assert_eq!(
        net.ep(1).unregister(region),
        Err(ChannelError::NoSuchRegion(region)),
        "unregistering twice"
    );

    // The same memory registered again: a new id, a new channel and key.
    let region2 = net.ep(1).register(mem);
    assert_ne!(region2, region);
    let ch2 = net.ep(1).open_rma_channel(region2, !KEY).unwrap();
    let h = net.ep(0).put(addr(1), ch2, !KEY, 5, vec![9; 10]).unwrap();
    expect_rma_done(
        net.wait_handle(0, h, "put after re-registering"),
        "put after re-registering",
    );
    model[5..15].fill(9);
    let now = net.ep(1).region(region2).unwrap().to_vec();
    assert_same(&now, &model, "after re-registering");
}

#[test]
fn rma_bounds_and_key_violations_leave_target_memory_untouched_over_udp_loopback() {
    let mut net = Net::udp(2, None, |_| {});
    rma_checks(&mut net);
}

/// Unregistering a region while a put streams into it: the initiator gets
/// an error event with its buffer back, the target its memory (the rest of
/// the put's frames are dropped), and the next registration works.
#[test]
fn unregistering_during_a_put_fails_it_over_udp_loopback() {
    let mut net = Net::udp(2, None, |_| {});
    let len = 32 << 20;
    let region = net.ep(1).register(vec![0; len]);
    let ch = net.ep(1).open_rma_channel(region, KEY).unwrap();
    let before = net.ep(1).port().stats().frames_received;
    let h = net.ep(0).put(addr(1), ch, KEY, 0, pattern(5, len)).unwrap();
    net.until_received(1, before + 500, "the put's first frames");
    let mem = net.ep(1).unregister(region).unwrap();
    assert_eq!(mem.len(), len);
    let (error, back) = expect_rma_failed(net.wait_handle(0, h, "the put"), "the put");
    assert_eq!(back.len(), len);
    assert!(
        matches!(
            error,
            TransferError::Unregistered | TransferError::NoSuchChannel(_)
        ),
        "{error}"
    );
    let region2 = net.ep(1).register(mem);
    let ch2 = net.ep(1).open_rma_channel(region2, KEY).unwrap();
    let data = pattern(6, len);
    let h = net.ep(0).put(addr(1), ch2, KEY, 0, data.clone()).unwrap();
    expect_rma_done(net.wait_handle(0, h, "the next put"), "the next put");
    let now = net.ep(1).region(region2).unwrap().to_vec();
    assert_same(&now, &data, "the next put");
}

/// Too small: a message larger than the posted buffer is an error event on
/// both sides naming both sizes, in both orders, one byte too large and
/// much too large; the buffer is never written (it stays posted and takes
/// the next message that fits).
fn too_small_checks(net: &mut Net) {
    let ch = net.ep(1).open_normal_channel().unwrap();
    for (cap, len, receiver_first) in [
        (100_000usize, 100_001usize, true),
        (1 << 20, 3 << 20, true),
        (100_000, 100_001, false),
        (1 << 20, 3 << 20, false),
    ] {
        let what = format!(
            "{len} bytes into {cap}, {} first",
            if receiver_first { "receiver" } else { "sender" }
        );
        let mut posted = Some(vec![0xEE; cap]);
        if receiver_first {
            net.ep(1)
                .post(ch, Some(addr(0)), posted.take().unwrap())
                .unwrap();
            net.steps(20);
        }
        let before = net.ep(1).port().stats().frames_received;
        let data = pattern(len as u64, len);
        let h = net
            .ep(0)
            .send_on_channel(addr(1), ch, data.clone())
            .unwrap();
        if !receiver_first {
            net.until_received(1, before, &what);
            net.steps(20);
            net.ep(1).post(ch, None, posted.take().unwrap()).unwrap();
        }
        let want = TransferError::TooLarge {
            len: len as u64,
            capacity: cap as u64,
        };
        match net.wait_handle(0, h, &what) {
            ChannelEvent::SendFailed { error, buffer, .. } => {
                assert_eq!(error, want, "{what}: sender");
                assert_same(&buffer, &data, &format!("{what}: the sender's buffer back"));
            }
            other => panic!(
                "{what}: sender expected SendFailed, got {}",
                summary(&other)
            ),
        }
        match net.wait_receive(1, ch, &what) {
            ChannelEvent::ReceiveFailed {
                error,
                buffer,
                from,
                ..
            } => {
                assert_eq!(error, want, "{what}: receiver");
                assert_eq!(from, addr(0));
                if let Some(b) = buffer {
                    panic!(
                        "{what}: the refused buffer came down ({} bytes) instead of staying posted",
                        b.len()
                    );
                }
            }
            other => panic!(
                "{what}: receiver expected ReceiveFailed, got {}",
                summary(&other)
            ),
        }
        // Still posted, untouched: the next message that fits lands in it.
        let fits = cap - 1;
        transfer_posted(net, ch, fits, 3, &format!("{what}: then {fits} bytes"));
        assert!(
            net.events[1].is_empty() && net.events[0].is_empty(),
            "{}",
            net.dump()
        );
    }
    // Cancel: the buffer comes back unwritten.
    net.ep(1).post(ch, None, vec![0xEE; 4096]).unwrap();
    let back = net.ep(1).cancel_post(ch).unwrap().expect("posted buffer");
    assert!(back.len() == 4096 && back.iter().all(|b| *b == 0xEE));
}

#[test]
fn buffer_too_small_fails_on_both_sides_with_both_sizes_over_udp_loopback() {
    let mut net = Net::udp(2, None, |_| {});
    too_small_checks(&mut net);
}

/// A plain (system-channel) send above the eager limit is refused with an
/// error that points to normal channels; one at the limit goes.
#[test]
fn a_plain_send_above_the_eager_limit_points_to_normal_channels() {
    let mut net = Net::udp(2, None, |_| {});
    let limit = net.ep(0).port().config().eager_limit;
    let err = net.ep(0).send(addr(1), &vec![1; limit + 1]).unwrap_err();
    assert!(err.to_string().contains("normal channel"), "{err}");
    net.ep(0).send(addr(1), &vec![1; limit]).unwrap();
    let deadline = Instant::now() + LIMIT;
    let d = loop {
        if let Some(d) = net.ep(1).poll_delivery() {
            break d;
        }
        assert!(Instant::now() < deadline, "no delivery{}", net.dump());
        net.step();
    };
    assert_eq!(net.ep(1).message(&d).map(<[u8]>::len), Some(limit));
    net.ep(1).release(d).unwrap();
}

/// Short timeouts, so that a vanished peer is noticed in about a second.
fn quick_failure(c: &mut PortConfig) {
    c.transfer_timeout = Duration::from_millis(500);
    c.max_timeouts = 8;
    c.rto.max = Duration::from_millis(50);
}

/// The sender vanishes (its endpoint and socket closed) in the middle of a
/// 64 MiB transfer: the receiver gets an error event with its buffer back,
/// and nothing hangs.
#[test]
fn sender_disappearing_mid_transfer_fails_the_receive_over_udp_loopback() {
    let mut net = Net::udp(2, None, quick_failure);
    let len = 64 << 20;
    let ch = net.ep(1).open_normal_channel().unwrap();
    net.ep(1).post(ch, Some(addr(0)), vec![0; len]).unwrap();
    let _h = net
        .ep(0)
        .send_on_channel(addr(1), ch, pattern(4, len))
        .unwrap();
    net.until_received(1, 2000, "the first data frames");
    net.eps[0] = None;
    match net.wait_receive(1, ch, "the receive after the sender vanished") {
        ChannelEvent::ReceiveFailed {
            error,
            buffer,
            from,
            ..
        } => {
            assert_eq!(from, addr(0));
            assert!(
                matches!(error, TransferError::Stalled(p) | TransferError::PeerUnreachable(p) if p == addr(0)),
                "{error}"
            );
            assert_eq!(buffer.map(|b| b.len()), Some(len), "the buffer back");
        }
        other => panic!("expected ReceiveFailed, got {}", summary(&other)),
    }
}

/// The receiver vanishes in the middle of a 64 MiB transfer: the send fails
/// with the peer unreachable and the buffer back. The same for a 64 MiB get
/// whose target vanishes.
#[test]
fn receiver_disappearing_mid_transfer_fails_the_send_and_the_get_over_udp_loopback() {
    let mut net = Net::udp(2, None, quick_failure);
    let len = 64 << 20;
    let ch = net.ep(1).open_normal_channel().unwrap();
    net.ep(1).post(ch, Some(addr(0)), vec![0; len]).unwrap();
    let h = net
        .ep(0)
        .send_on_channel(addr(1), ch, pattern(6, len))
        .unwrap();
    net.until_received(1, 2000, "the first data frames");
    net.eps[1] = None;
    match net.wait_handle(0, h, "the send after the receiver vanished") {
        ChannelEvent::SendFailed { error, buffer, .. } => {
            assert_eq!(error, TransferError::PeerUnreachable(addr(1)));
            assert_eq!(buffer.len(), len);
        }
        other => panic!("expected SendFailed, got {}", summary(&other)),
    }
    drop(net);

    let mut net = Net::udp(2, None, quick_failure);
    let region = net.ep(1).register(pattern(7, len));
    let ch = net.ep(1).open_rma_channel(region, KEY).unwrap();
    let before = net.ep(0).port().stats().frames_received;
    let h = net.ep(0).get(addr(1), ch, KEY, 0, vec![0; len]).unwrap();
    net.until_received(0, before + 2000, "the get's first data frames");
    net.eps[1] = None;
    let (error, buffer) = expect_rma_failed(net.wait_handle(0, h, "the get"), "the get");
    assert!(
        matches!(error, TransferError::Stalled(p) | TransferError::PeerUnreachable(p) if p == addr(1)),
        "{error}"
    );
    assert_eq!(buffer.len(), len);
}

/// The blocking calls, each end in its own thread: `recv_on_channel`
/// against `send_on_channel_blocking` for several messages, then
/// `put_blocking` and `get_blocking` while the target serves.
#[test]
fn blocking_calls_over_udp_loopback() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let open = |i: usize| {
        Endpoint::builder(addr(i), JOB)
            .method(Box::new(
                UdpMethod::open(UdpConfig::new("127.0.0.1:0".parse().unwrap())).unwrap(),
            ))
            .mode(ProgressMode::Blocking)
            .build()
            .unwrap()
    };
    let (mut a, mut b) = (open(0), open(1));
    a.add_peer(addr(1), b.descriptors()[0].clone());
    b.add_peer(addr(0), a.descriptors()[0].clone());
    let ch = b.open_normal_channel().unwrap();
    let region = b.register(vec![0; 1 << 20]);
    let rma = b.open_rma_channel(region, KEY).unwrap();
    let lens = [5 << 20, 1, 300_001, 16_385];
    let done = Arc::new(AtomicBool::new(false));
    let done_b = done.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0; 8 << 20];
        for (k, want) in lens.iter().enumerate() {
            let (from, back, len) = b
                .recv_on_channel(ch, Some(addr(0)), buf, LIMIT)
                .unwrap_or_else(|e| panic!("receive {k}: {e}"));
            assert_eq!((from, len), (addr(0), *want));
            assert_same(
                &back[..len],
                &pattern(k as u64, len),
                &format!("message {k}"),
            );
            buf = back;
        }
        while !done_b.load(Ordering::Acquire) {
            let soon = b.now() + Duration::from_millis(5);
            b.progress_or_wait(Some(soon)).unwrap();
        }
        b.region(region).unwrap().to_vec()
    });
    for (k, len) in lens.iter().enumerate() {
        let data = pattern(k as u64, *len);
        let back = a
            .send_on_channel_blocking(addr(1), ch, data.clone(), LIMIT)
            .unwrap_or_else(|e| panic!("send {k}: {e}"));
        assert_same(&back, &data, "the sent buffer back");
    }
    let data = pattern(40, 700_000);
    a.put_blocking(addr(1), rma, KEY, 1000, data.clone(), LIMIT)
        .unwrap();
    let got = a
        .get_blocking(addr(1), rma, KEY, 1000, vec![0; 700_000], LIMIT)
        .unwrap();
    assert_same(&got, &data, "get after put");
    let err = a
        .put_blocking(addr(1), rma, KEY + 1, 0, vec![1; 10], LIMIT)
        .unwrap_err();
    assert!(
        matches!(
            err.error,
            bcl::TransferFailure::Transfer(TransferError::BadKey)
        ),
        "{err}"
    );
    done.store(true, Ordering::Release);
    let mem = receiver.join().expect("receiver panicked");
    assert!(mem[..1000].iter().all(|b| *b == 0));
    assert_same(&mem[1000..701_000], &data, "the target's memory");
    assert!(mem[701_000..].iter().all(|b| *b == 0));
}

// ------------------------------------------------ lab, through impairment

/// Through the impaired link, in one run: two normal-channel transfers at
/// once (16 MiB receiver first, 6 MiB sender first) from `a` to an
/// endpoint in `b`, a third to a second endpoint in `b` (several peers);
/// buffers too small; RMA with violations. Loss, duplication, reordering
/// and corruption happened on the way (the bridge's counters), losses were
/// repaired (our retransmissions) and corrupted frames caught (over packet
/// by our CRC32C, over udp by the kernels' checksums).
fn impaired(wire: Wire, tag: &str) {
    if !require_privileges(tag) {
        return;
    }
    let lab = lab("lossy-pair.toml", tag);
    let mut net = Net::lab(&lab, wire, &["a", "b", "b"]);
    let c0 = net.ep(1).open_normal_channel().unwrap();
    let c1 = net.ep(1).open_normal_channel().unwrap();
    let c2 = net.ep(2).open_normal_channel().unwrap();
    let lens = [(16 << 20) + 1, (6 << 20) + 7, (3 << 20) + 11];
    let data: Vec<Vec<u8>> = (0..3).map(|k| pattern(50 + k as u64, lens[k])).collect();
    net.ep(1).post(c0, Some(addr(0)), vec![0; lens[0]]).unwrap();
    net.ep(2).post(c2, None, vec![0; lens[2]]).unwrap();
    net.steps(200);
    let before = net.ep(1).port().stats().frames_received;
    let h1 = net
        .ep(0)
        .send_on_channel(addr(1), c1, data[1].clone())
        .unwrap();
    net.until_received(1, before, "the request on c1");
    let h0 = net
        .ep(0)
        .send_on_channel(addr(1), c0, data[0].clone())
        .unwrap();
    let h2 = net
        .ep(0)
        .send_on_channel(addr(2), c2, data[2].clone())
        .unwrap();
    net.ep(1).post(c1, None, vec![0; lens[1]]).unwrap();
    for (k, (dst, ch, h)) in [(1, c0, h0), (1, c1, h1), (2, c2, h2)]
        .into_iter()
        .enumerate()
    {
        let what = format!("transfer {k} ({} bytes)", lens[k]);
        let (buf, len) = expect_received(net.wait_receive(dst, ch, &what), addr(0), &what);
        assert_eq!(len, lens[k]);
        assert_same(&buf[..len], &data[k], &what);
        expect_send_done(net.wait_handle(0, h, &what), &what);
    }

    // The third endpoint has done its part; the rest is between a and b.
    let third = *net.ep(2).port().stats();
    net.eps[2] = None;
    too_small_checks(&mut net);
    rma_checks(&mut net);

    let ports = [*net.ep(0).port().stats(), *net.ep(1).port().stats(), third];
    let imp = common::assert_corruption_injected_and_caught(&lab, wire, &ports);
    let sum = |f: fn(&bcl_lab::ImpairCounters) -> u64| common::total(&imp, f);
    assert!(
        sum(|c| c.dropped) > 0 && sum(|c| c.reordered) > 0 && sum(|c| c.duplicated) > 0,
        "the link was not impaired: {imp:?}"
    );
    let s = ports[0];
    assert!(s.retransmits > 0, "no loss repaired: {s:?}");
}

#[test]
fn channels_through_an_impaired_link_over_packet() {
    impaired(Wire::Packet, "chan-packet");
}

#[test]
fn channels_through_an_impaired_link_over_udp() {
    impaired(Wire::Udp, "chan-udp");
}

// ------------------------------------------------------- shared memory

/// Over shared memory (busy-poll, one thread): a 64 MiB message
/// byte-identical, both rendezvous orders, several channels and peers at
/// once, buffers too small, RMA violations.
#[test]
fn channels_over_shm() {
    let mut net = Net::shm(2, 0x51);
    let ch = net.ep(1).open_normal_channel().unwrap();
    net.ep(1)
        .post(ch, Some(addr(0)), vec![0; 64 << 20])
        .unwrap();
    transfer_posted(&mut net, ch, 64 << 20, 70, "64 MiB over shm");
    // Sender first, then receiver first, on the same channel.
    let data = pattern(71, (3 << 20) + 9);
    let h = net
        .ep(0)
        .send_on_channel(addr(1), ch, data.clone())
        .unwrap();
    net.steps(100);
    assert!(
        net.events[0].is_empty() && net.events[1].is_empty(),
        "{}",
        net.dump()
    );
    net.ep(1).post(ch, None, vec![0; 4 << 20]).unwrap();
    let (buf, len) = expect_received(
        net.wait_receive(1, ch, "sender first"),
        addr(0),
        "sender first",
    );
    assert_same(&buf[..len], &data, "sender first over shm");
    expect_send_done(net.wait_handle(0, h, "sender first"), "sender first");
    too_small_checks(&mut net);
    rma_checks(&mut net);
}

/// Over shared memory, several peers: endpoints 0 and 2 send to endpoint 1
/// on two channels each at once.
#[test]
fn several_peers_over_shm() {
    let mut net = Net::shm(3, 0x52);
    let chans: Vec<ChannelId> = (0..4)
        .map(|_| net.ep(1).open_normal_channel().unwrap())
        .collect();
    let mut sends = Vec::new();
    for (k, ch) in chans.iter().enumerate() {
        let src = if k < 2 { 0 } else { 2 };
        let len = (1 << 20) + k * 4099;
        net.ep(1).post(*ch, Some(addr(src)), vec![0; len]).unwrap();
        let data = pattern(80 + k as u64, len);
        let h = net
            .ep(src)
            .send_on_channel(addr(1), *ch, data.clone())
            .unwrap();
        sends.push((src, *ch, h, data));
    }
    for (k, (src, ch, h, data)) in sends.into_iter().enumerate() {
        let what = format!("transfer {k} from {src}");
        let (buf, len) = expect_received(net.wait_receive(1, ch, &what), addr(src), &what);
        assert_same(&buf[..len], &data, &what);
        expect_send_done(net.wait_handle(src, h, &what), &what);
    }
}
