//! The Ethernet methods interoperate: for every ordered pair (sender,
//! receiver) of `packet`, `afxdp` and `vfio`, two BCL endpoints in two lab
//! namespaces joined by a veth pair exchange messages both ways — a stream
//! each way, then a ping-pong — and every message is checked to arrive
//! exactly once, in order and intact.
//!
//! Each side is given the other side's descriptor with only the method
//! name changed (`packet:MAC/IFINDEX` becomes `vfio:MAC/IFINDEX`, ...):
//! the three methods share one descriptor grammar and put the same frames
//! on the wire.
//!
//! `packet` and `afxdp` are opened through the method registry on the
//! namespace's veth. `vfio` is the real `vfio` method over the virtio-net
//! driver, whose device is a virtio-net model on the in-memory PCI host;
//! the model's wire port is bridged to an AF_PACKET socket on the veth by a
//! small pump that runs in the thread that drives the endpoint (the model's
//! DMA stays in that one thread), and the model has the veth's MAC.
//!
//! All methods speak EtherType 0x88B5 here (the registry's `packet` default
//! for jobs is 0x88B6, so the EtherType is given explicitly).

mod common;

use bcl::core::method::OpenSpec;
use bcl::core::SendError;
use bcl::ether::{Frame, Mac};
use bcl::vfio::testing::{InMemoryPci, Wire, WirePort};
use bcl::vfio::virtio::model::{VirtioNetModel, VirtioNetModelConfig};
use bcl::vfio::virtio::net::{VirtioNet, VirtioNetConfig};
use bcl::vfio::{NicMethod, VfioMethodConfig};
use bcl::{Descriptor, Endpoint, Method, ProcessAddr, ProgressMode, Registry};
use bcl_lab::{require_privileges, Lab};
use common::{lab, CLIENT, JOB, SERVER};
use nix::sys::socket::{self, AddressFamily, LinkAddr, MsgFlags, SockFlag, SockType};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const METHODS: [&str; 3] = ["packet", "afxdp", "vfio"];
const ETHERTYPE: u16 = 0x88B5;
/// Messages streamed each way.
const STREAM: u64 = 3000;
/// Round trips of the ping-pong.
const PINGS: u64 = 500;
/// A pair that has not finished by then has failed.
const PAIR_LIMIT: Duration = Duration::from_secs(60);

const KIND_STREAM: u8 = 1;
const KIND_PING: u8 = 2;
const KIND_PONG: u8 = 3;

/// Stream message sizes: one byte to several frames.
fn stream_size(i: u64) -> usize {
    const SIZES: [usize; 7] = [1, 9, 64, 300, 1200, 1600, 4000];
    SIZES[(i.wrapping_mul(2_654_435_761) >> 7) as usize % SIZES.len()]
}

/// Ping sizes: up to two frames.
fn ping_size(i: u64) -> usize {
    const SIZES: [usize; 4] = [8, 64, 1400, 2000];
    SIZES[i as usize % SIZES.len()]
}

/// Message `i` of `kind` from `from`: kind, sender, number, then a pattern
/// of all three, so loss, duplication, reordering, misdelivery and damage
/// all show.
fn message(kind: u8, from: ProcessAddr, i: u64, len: usize) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&from.node.0.to_le_bytes());
    m.extend_from_slice(&i.to_le_bytes());
    let seed = u64::from(kind) << 56 ^ u64::from(from.node.0) << 40 ^ i;
    while m.len() < len.max(13) {
        let k = m.len() as u64;
        m.push((k.wrapping_mul(131) ^ seed.wrapping_mul(0x9e37_79b9)) as u8);
    }
    m
}

/// The bridge between a wire port of the in-memory PCI host and a veth:
/// an AF_PACKET socket bound to the interface.
struct Pump {
    sock: OwnedFd,
    port: WirePort,
    buf: Vec<u8>,
    to_veth: u64,
    from_veth: u64,
    /// Frames the wire port refused (model inbox full) or the socket did
    /// not take (both are losses BCL recovers from).
    dropped: u64,
}

impl Pump {
    /// A pump between `port` and interface `ifname` of the calling
    /// thread's namespace.
    fn open(ifname: &str, port: WirePort) -> Pump {
        let sock = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            socket::SockProtocol::EthAll,
        )
        .expect("AF_PACKET socket for the pump");
        let link: LinkAddr = nix::ifaddrs::getifaddrs()
            .expect("getifaddrs")
            .filter(|i| i.interface_name == ifname)
            .find_map(|i| i.address.and_then(|a| a.as_link_addr().copied()))
            .unwrap_or_else(|| panic!("no link address for {ifname}"));
        // Protocol 0 in the address: the socket's (every EtherType).
        socket::bind(sock.as_raw_fd(), &link).expect("bind the pump to the veth");
        Pump {
            sock,
            port,
            buf: vec![0; 65_536],
            to_veth: 0,
            from_veth: 0,
            dropped: 0,
        }
    }

    /// Moves what is waiting each way; returns the frames moved.
    fn run(&mut self) -> usize {
        let mut moved = 0;
        while let Some(frame) = self.port.recv() {
            match socket::send(self.sock.as_raw_fd(), &frame, MsgFlags::empty()) {
                Ok(_) => self.to_veth += 1,
                Err(_) => self.dropped += 1,
            }
            moved += 1;
        }
        for _ in 0..64 {
            match socket::recvfrom::<LinkAddr>(self.sock.as_raw_fd(), &mut self.buf) {
                Ok((n, from)) => {
                    // Our own frames going out (PACKET_OUTGOING) are not
                    // arrivals.
                    if from.is_some_and(|a| a.pkttype() == 4) {
                        continue;
                    }
                    // Anything that is an Ethernet frame goes to the NIC;
                    // its driver and the method decide what to keep.
                    let frame = &self.buf[..n];
                    if Frame::new_checked(frame).is_err() {
                        continue;
                    }
                    if self.port.send(frame.to_vec()) {
                        self.from_veth += 1;
                    } else {
                        self.dropped += 1;
                    }
                    moved += 1;
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => panic!("pump receive: {e}"),
            }
        }
        moved
    }
}

/// One side: an endpoint, and for `vfio` the pump that feeds its NIC.
struct Side {
    method: &'static str,
    ep: Endpoint,
    pump: Option<Pump>,
}

impl Side {
    /// Opens `method` on `ifname` (the node's veth, MAC `mac`) for process
    /// `addr`, in the calling thread's namespace.
    fn open(method: &'static str, ifname: &str, mac: Mac, addr: ProcessAddr) -> Side {
        let (m, pump): (Box<dyn Method>, _) = match method {
            "vfio" => {
                let (dev, net) = Wire::new(1024);
                let host = InMemoryPci::new(
                    "0000:00:02.0".parse().unwrap(),
                    VirtioNetModel::new(
                        VirtioNetModelConfig {
                            mac: mac.octets(),
                            ..Default::default()
                        },
                        dev.clone(),
                    ),
                );
                host.attach_wire(&dev);
                let cfg = VfioMethodConfig {
                    ethertype: ETHERTYPE,
                    interrupts: false,
                    ..VfioMethodConfig::default()
                };
                let nic = VirtioNet::new(
                    host,
                    VirtioNetConfig {
                        queue_size: cfg.queue_size,
                        interrupts: false,
                    },
                )
                .expect("virtio-net on the model");
                (
                    Box::new(NicMethod::new(nic, cfg)),
                    Some(Pump::open(ifname, net)),
                )
            }
            name => {
                let spec = OpenSpec {
                    nic: Some(ifname.to_string()),
                    ethertype: Some(ETHERTYPE),
                    busy_poll: true,
                    ..OpenSpec::new(JOB, addr)
                };
                let registry = Registry::builtin();
                let m = registry
                    .lookup(name)
                    .unwrap()
                    .open(&spec)
                    .unwrap_or_else(|e| panic!("open {name} on {ifname}: {e}"));
                (m, None)
            }
        };
        assert_eq!(m.name(), method);
        let ep = Endpoint::builder(addr, JOB)
            .method(m)
            .mode(ProgressMode::BusyPoll)
            .build()
            .unwrap();
        Side { method, ep, pump }
    }

    fn descriptor(&self) -> Descriptor {
        self.ep.descriptors()[0].clone()
    }

    /// One round: the pump, then the endpoint. Yields the CPU when nothing
    /// moved (two busy threads share two cores with the rest of CI).
    fn step(&mut self) {
        let pumped = self.pump.as_mut().map_or(0, Pump::run);
        let moved = self.ep.progress().expect("progress");
        while self.ep.poll_send_event().is_some() {}
        if pumped + moved == 0 {
            std::thread::yield_now();
        }
    }

    /// Offers `msg` to the port; false if it is full for now.
    fn try_send(&mut self, to: ProcessAddr, msg: &[u8]) -> bool {
        match self.ep.send(to, msg) {
            Ok(_) => true,
            Err(bcl::Error::Send(SendError::WouldBlock(_))) => false,
            Err(e) => panic!("{} send: {e}", self.method),
        }
    }

    fn counters(&self) -> bcl::core::MethodCounters {
        self.ep.methods().next().unwrap().counters()
    }
}

/// What one side checked.
#[derive(Debug, Default)]
struct Checked {
    stream_in: u64,
    pings_in: u64,
    pongs_in: u64,
}

/// Runs one side's part: stream `STREAM` messages to `peer` while checking
/// the peer's stream, then the ping-pong (`client` pings, the other
/// answers), then keeps making progress until both sides are done.
fn run_side(
    side: &mut Side,
    me: ProcessAddr,
    peer: ProcessAddr,
    client: bool,
    done: &AtomicUsize,
) -> Checked {
    let deadline = Instant::now() + PAIR_LIMIT;
    let mut c = Checked::default();
    let mut stream_out = 0;
    let mut pings_out = 0;
    let mut pongs_due: Vec<u64> = Vec::new();
    let mut finished = false;
    loop {
        assert!(
            Instant::now() < deadline,
            "{} side {me}: not done after {PAIR_LIMIT:?}: {c:?}, sent {stream_out} stream, {pings_out} pings; {:?}; method {:?}",
            side.method,
            side.ep.port().stats(),
            side.counters()
        );
        while stream_out < STREAM
            && side.try_send(
                peer,
                &message(KIND_STREAM, me, stream_out, stream_size(stream_out)),
            )
        {
            stream_out += 1;
        }
        // The client pings once its stream is out, one ping at a time.
        if client
            && stream_out == STREAM
            && pings_out < PINGS
            && pings_out == c.pongs_in
            && side.try_send(
                peer,
                &message(KIND_PING, me, pings_out, ping_size(pings_out)),
            )
        {
            pings_out += 1;
        }
        while let Some(&i) = pongs_due.first() {
            if !side.try_send(peer, &message(KIND_PONG, me, i, ping_size(i))) {
                break;
            }
            pongs_due.remove(0);
        }
        side.step();
        while let Some(d) = side.ep.poll_delivery() {
            assert_eq!(d.from, peer, "{}: a message from a stranger", side.method);
            let got = side.ep.message(&d).unwrap().to_vec();
            side.ep.release(d).unwrap();
            let (kind, want_i, size) = match got.first() {
                Some(&KIND_STREAM) => (KIND_STREAM, c.stream_in, stream_size(c.stream_in)),
                Some(&KIND_PING) if !client => (KIND_PING, c.pings_in, ping_size(c.pings_in)),
                Some(&KIND_PONG) if client => (KIND_PONG, c.pongs_in, ping_size(c.pongs_in)),
                other => panic!(
                    "{} side {me}: unexpected message kind {other:?}",
                    side.method
                ),
            };
            let want = message(kind, peer, want_i, size);
            assert!(
                got == want,
                "{} side {me}: message kind {kind} number {want_i} lost, duplicated, reordered or damaged ({} bytes, first {:?}; expected {} bytes, first {:?})",
                side.method,
                got.len(),
                &got[..got.len().min(13)],
                want.len(),
                &want[..13]
            );
            match kind {
                KIND_STREAM => c.stream_in += 1,
                KIND_PING => {
                    pongs_due.push(c.pings_in);
                    c.pings_in += 1;
                }
                _ => c.pongs_in += 1,
            }
            assert!(c.stream_in <= STREAM && c.pings_in <= PINGS && c.pongs_in <= PINGS);
        }
        let mine_done = stream_out == STREAM
            && c.stream_in == STREAM
            && if client {
                c.pongs_in == PINGS
            } else {
                c.pings_in == PINGS && pongs_due.is_empty()
            }
            && side.ep.port().outstanding_sends() == 0;
        if mine_done && !finished {
            finished = true;
            done.fetch_add(1, Ordering::AcqRel);
        }
        // Both done: the last acknowledgements have been seen by both.
        if done.load(Ordering::Acquire) == 2 {
            break;
        }
    }
    // A few more rounds: nothing may arrive any more.
    for _ in 0..200 {
        side.step();
    }
    assert!(
        side.ep.poll_delivery().is_none(),
        "{} side {me}: a message arrived twice",
        side.method
    );
    c
}

/// What a pair's run showed, for the table.
struct PairReport {
    sender: &'static str,
    receiver: &'static str,
    took: Duration,
    counters: [bcl::core::MethodCounters; 2],
}

/// Node `a` runs `sender`, node `b` runs `receiver`; each gets the other's
/// descriptor with only the method name changed.
fn run_pair(lab: &Lab, sender: &'static str, receiver: &'static str) -> PairReport {
    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let (to_b, from_a) = mpsc::channel::<Descriptor>();
    let (to_a, from_b) = mpsc::channel::<Descriptor>();
    let spawn = |node: &'static str,
                 method: &'static str,
                 me: ProcessAddr,
                 peer: ProcessAddr,
                 client: bool,
                 tell: mpsc::Sender<Descriptor>,
                 hear: mpsc::Receiver<Descriptor>| {
        let lab = lab.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            lab.enter(node).expect("enter the node's namespace");
            let i = lab.interfaces(node).expect("interfaces").remove(0);
            let mac: Mac = i.mac.parse().expect("veth MAC");
            let mut side = Side::open(method, &i.ifname, mac, me);
            let own = side.descriptor();
            if method == "vfio" {
                assert_eq!(own.to_string(), format!("vfio:{mac}@0000:00:02.0"));
            } else {
                assert!(own.address.starts_with(&format!("{mac}/")), "{own}");
            }
            tell.send(own).unwrap();
            let theirs = hear.recv().expect("the peer's descriptor");
            // One grammar: the other method's address, our method's name.
            let peer_d = Descriptor::new(method, theirs.address.clone());
            side.ep.add_peer(peer, peer_d);
            let checked = run_side(&mut side, me, peer, client, &done);
            assert_eq!(
                (checked.stream_in, checked.pings_in + checked.pongs_in),
                (STREAM, PINGS)
            );
            let c = side.counters();
            assert_eq!(c.rx_malformed, 0, "{method}: {c:?}");
            if let Some(p) = &side.pump {
                assert!(p.to_veth > 0 && p.from_veth > 0, "the pump moved nothing");
            }
            c
        })
    };
    let a = spawn("a", sender, CLIENT, SERVER, true, to_b, from_b);
    let b = spawn("b", receiver, SERVER, CLIENT, false, to_a, from_a);
    let ca = a.join();
    let cb = b.join();
    let (ca, cb) = match (ca, cb) {
        (Ok(x), Ok(y)) => (x, y),
        (a, b) => {
            let why = |r: &Result<_, Box<dyn std::any::Any + Send>>| match r {
                Ok(_) => "ok".to_string(),
                Err(e) => e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            };
            panic!(
                "{sender} -> {receiver}: a ({sender}): {}; b ({receiver}): {}",
                why(&a),
                why(&b)
            );
        }
    };
    PairReport {
        sender,
        receiver,
        took: started.elapsed(),
        counters: [ca, cb],
    }
}

#[test]
fn every_ethernet_method_pair_exchanges_messages_both_ways() {
    if !require_privileges("every_ethernet_method_pair_exchanges_messages_both_ways") {
        return;
    }
    for s in METHODS {
        for r in METHODS {
            assert!(Registry::builtin().reaches(s, r), "{s} does not reach {r}");
        }
    }
    let lab = lab("pair.toml", "ether-matrix");
    let mut failed = Vec::new();
    let mut table = Vec::new();
    for sender in METHODS {
        for receiver in METHODS {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_pair(&lab, sender, receiver)
            })) {
                Ok(r) => table.push(r),
                Err(e) => failed.push(format!(
                    "{sender} -> {receiver}: {}",
                    e.downcast_ref::<String>().cloned().unwrap_or_default()
                )),
            }
        }
    }
    println!("sender -> receiver: time; rx frames / foreign (a, b)");
    for r in &table {
        println!(
            "{:>6} -> {:<6}: {:>6.2?}; a {} / {}, b {} / {}",
            r.sender,
            r.receiver,
            r.took,
            r.counters[0].rx_frames,
            r.counters[0].rx_foreign,
            r.counters[1].rx_frames,
            r.counters[1].rx_foreign
        );
    }
    assert!(failed.is_empty(), "failed pairs:\n{}", failed.join("\n"));
    assert_eq!(table.len(), 9);
}
