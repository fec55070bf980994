//! Replays traces of the Spin model of the reliability protocol
//! (`models/reliability.pml`) on two real ports, so that the model and the
//! code cannot silently diverge.
//!
//! A trace (`models/traces/*.trace`, written by `models/traces.sh` from
//! Spin's random simulations and from the counterexamples of witness runs)
//! is the model's account of one execution: every frame a port sends, what
//! the wire does with each (delivers it, in any order; loses it;
//! duplicates it), every timeout, the end of every ring-full back-off, every
//! ring block the receiving application releases, and what each side
//! delivers and completes as a result. The test plays the wire and the
//! clocks: port A sends the model's messages to port B, every frame either
//! port sends is checked against the frame the model sends at that point
//! (type, sequence number, cumulative acknowledgement, selective bitmap,
//! NAK reason), and after every step B must have delivered, and A
//! completed, exactly the messages the model has, in the same order.
//!
//! Time is virtual and each port has its own clock, moved only where the
//! model has an event that needs it: A's to its retransmission deadline
//! for a timeout and past any back-off for the end of one (and, before a
//! frame is resent, past the reorder checks A waits for: traces are made
//! with `-DREPLAY`, in which the model judges a frame sent before a
//! delivered one lost at once, where the port may wait for the frame's
//! reordering window), B's to its delayed-acknowledgement deadline when the
//! model sends an acknowledgement that B holds back.
//!
//! The parameters at the top of every trace include the constants the
//! model was built from (`models/generated/core_constants.h`); they must
//! equal the code's.
//!
//! `BCL_TRACE_DIR` names another directory of traces (models/check.sh
//! replays a freshly generated set that way); by default the committed set
//! is replayed. An empty or missing directory is an error.

use bcl_core::port::FULL_RESEND_AFTER_TIMEOUTS;
use bcl_core::sack::RX_WINDOW;
use bcl_core::wire::{self, AckBody, Expect, FrameType, NakReason, SACK_BITS};
use bcl_core::{
    JobKey, LinkId, MethodCaps, Port, PortConfig, ProcessAddr, RingSlot, Route, SendEvent,
    SendHandle, Time,
};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

const JOB: JobKey = JobKey(0x5350_494e);
const MTU: usize = 1500;
/// Bytes of every message: its index, repeated.
const MSG_LEN: usize = 16;

fn addr_a() -> ProcessAddr {
    ProcessAddr::new(1, 0)
}

fn addr_b() -> ProcessAddr {
    ProcessAddr::new(2, 0)
}

/// A frame the model names: DATA by message index, ACK/NAK by its fields
/// (cumulative acknowledgement as a message index, the model's selective
/// bitmap, the NAK reason code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FrameRef {
    Data(u32),
    Ack(u32, u32, u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A sends the DATA frame of a message (a retransmission if `resent`).
    SendData { msg: u32, resent: bool },
    /// B sends an ACK or NAK.
    SendAck { ack: u32, bits: u32, reason: u8 },
    /// The wire hands a frame to its receiver (and keeps it if `dup`).
    Deliver { frame: FrameRef, dup: bool },
    /// The wire loses a frame.
    Drop(FrameRef),
    /// A's retransmission timer fires.
    Timeout,
    /// A's ring-full back-off ends.
    Backoff,
    /// B's application releases the oldest message it holds.
    Release,
    /// B delivers a message to its application.
    Delivers(u32),
    /// A reports a message complete.
    Completes(u32),
}

struct Trace {
    name: String,
    params: HashMap<String, u64>,
    events: Vec<(usize, Event)>,
}

impl Trace {
    fn param(&self, name: &str) -> u64 {
        *self
            .params
            .get(name)
            .unwrap_or_else(|| panic!("{}: no parameter {name}", self.name))
    }
}

fn parse_trace(path: &Path) -> Trace {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut params = HashMap::new();
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |k: usize| -> u32 {
            w.get(k)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{name}:{line_no}: bad line {line:?}"))
        };
        let frame = |k: usize| match w.get(k) {
            Some(&"D") => FrameRef::Data(num(k + 1)),
            Some(&"A") => FrameRef::Ack(num(k + 1), num(k + 2), num(k + 3) as u8),
            _ => panic!("{name}:{line_no}: bad frame in {line:?}"),
        };
        let event = match (w[0], w.get(1).copied()) {
            ("param", Some(p)) => {
                params.insert(p.to_string(), u64::from(num(2)));
                continue;
            }
            ("send", Some("D")) => Event::SendData {
                msg: num(2),
                resent: num(3) != 0,
            },
            ("send", Some("A")) => Event::SendAck {
                ack: num(2),
                bits: num(3),
                reason: num(4) as u8,
            },
            ("deliver", _) => Event::Deliver {
                frame: frame(1),
                dup: false,
            },
            ("dup", _) => Event::Deliver {
                frame: frame(1),
                dup: true,
            },
            ("drop", _) => Event::Drop(frame(1)),
            ("timeout", None) => Event::Timeout,
            ("backoff", None) => Event::Backoff,
            ("release", None) => Event::Release,
            ("B", Some("delivers")) => Event::Delivers(num(2)),
            ("A", Some("completes")) => Event::Completes(num(2)),
            _ => panic!("{name}:{line_no}: unknown event {line:?}"),
        };
        events.push((line_no, event));
    }
    Trace {
        name,
        params,
        events,
    }
}

/// The two ports, the wire between them and the two clocks.
struct Replay<'t> {
    trace: &'t Trace,
    a: Port,
    b: Port,
    now_a: Time,
    now_b: Time,
    /// Sequence number of message 0's frame.
    base_seq: u32,
    /// Bits of the model's selective bitmap (its receive window).
    rx_window: u32,
    /// Frames on their way, oldest first.
    to_b: Vec<(u32, Vec<u8>)>,
    to_a: Vec<((u32, u32, u8), Vec<u8>)>,
    handles: HashMap<SendHandle, u32>,
    held: VecDeque<RingSlot>,
    model_delivered: Vec<u32>,
    model_completed: Vec<u32>,
    delivered: Vec<u32>,
    completed: Vec<u32>,
    line: usize,
}

fn message(i: u32) -> Vec<u8> {
    vec![i as u8; MSG_LEN]
}

fn caps() -> MethodCaps {
    MethodCaps {
        mtu: MTU,
        integrity: false,
        reliable: false,
    }
}

impl<'t> Replay<'t> {
    fn new(trace: &'t Trace) -> Self {
        let (w, ring, nmsg) = (
            trace.param("W") as u32,
            trace.param("RING") as u32,
            trace.param("NMSG") as u32,
        );
        let (seqm, iseq) = (trace.param("SEQM") as u32, trace.param("ISEQ") as u32);
        // The model's sequence numbers start `seqm - iseq` before the wrap;
        // so do the port's.
        let base_seq = 0u32.wrapping_sub(seqm - iseq);

        let mut ca = PortConfig::new(addr_a(), JOB);
        ca.tx_window = w;
        ca.bundle = false;
        ca.initial_seq = base_seq;
        ca.epoch = 11;
        // The model is the reliability protocol with a fixed send window;
        // congestion control (which shrinks it) is not modelled.
        ca.congestion.mode = bcl_core::CongestionMode::Off;
        let mut cb = PortConfig::new(addr_b(), JOB);
        // One ring block per message, and a ring of `ring` of them; the
        // headroom a message ahead of a gap must leave is one eager
        // message, one block.
        cb.eager_limit = MSG_LEN;
        cb.ring_block_size = MSG_LEN;
        cb.ring_blocks = ring;
        cb.epoch = 22;
        cb.congestion.mode = bcl_core::CongestionMode::Off;
        assert!(
            cb.ack_every > nmsg,
            "the model acknowledges on a timer or a duplicate only"
        );
        let mut a = Port::new(ca).expect("config of A");
        let mut b = Port::new(cb).expect("config of B");
        for (p, peer, link) in [(&mut a, addr_b(), 1), (&mut b, addr_a(), 0)] {
            let m = p.add_method(caps()).expect("method");
            p.set_route(
                Time::ZERO,
                peer,
                Route {
                    method: m,
                    link: LinkId(link),
                },
            )
            .expect("route");
        }
        let mut handles = HashMap::new();
        for i in 0..nmsg {
            let h = a.send(Time::ZERO, addr_b(), &message(i)).expect("send");
            handles.insert(h, i);
        }
        Replay {
            trace,
            a,
            b,
            now_a: Time::ZERO,
            now_b: Time::ZERO,
            base_seq,
            rx_window: trace.param("RXW") as u32,
            to_b: Vec::new(),
            to_a: Vec::new(),
            handles,
            held: VecDeque::new(),
            model_delivered: Vec::new(),
            model_completed: Vec::new(),
            delivered: Vec::new(),
            completed: Vec::new(),
            line: 0,
        }
    }

    /// Fails the test naming the trace line and both ports' state.
    fn diverge(&self, what: String) -> ! {
        panic!(
            "{}:{}: the port diverges from the model: {what}\n  A: {}\n  B: {}",
            self.trace.name,
            self.line,
            self.a.peer_debug(addr_b()).unwrap_or_default(),
            self.b.peer_debug(addr_a()).unwrap_or_default(),
        )
    }

    fn parse<'f>(&self, bytes: &'f [u8], to: ProcessAddr) -> wire::Frame<'f> {
        let expect = Expect {
            job: JOB,
            local: to,
            require_crc: true,
        };
        wire::parse(bytes, &expect)
            .unwrap_or_else(|e| self.diverge(format!("a port sent a bad frame: {e:?}")))
    }

    /// The message index of sequence number `seq`.
    fn index(&self, seq: u32) -> u32 {
        seq.wrapping_sub(self.base_seq)
    }

    fn send_data(&mut self, msg: u32, resent: bool) {
        if resent {
            // The model (with -DREPLAY) judges a frame sent before a
            // delivered one lost at once; the port may wait for the
            // frame's reordering window: run its reorder timer to the end
            // (no retransmission timeout may fire on the way).
            self.run_loss_checks();
        }
        let retransmits = self.a.stats().retransmits;
        let mut buf = vec![0u8; MTU];
        let Some(tx) = self.a.poll_transmit(0, self.now_a, &mut buf) else {
            self.diverge(format!("the model sends DATA {msg}, A sends nothing"));
        };
        buf.truncate(tx.len);
        let f = self.parse(&buf, addr_b());
        let (kind, seq) = (f.kind(), f.header().seq.get());
        if kind != FrameType::Data || self.index(seq) != msg {
            self.diverge(format!(
                "the model sends DATA {msg}, A sends {kind:?} for message {}",
                self.index(seq)
            ));
        }
        assert_eq!(f.payload(), &message(msg)[..], "payload of DATA {msg}");
        let resent_here = self.a.stats().retransmits > retransmits;
        if resent_here != resent {
            self.diverge(format!(
                "DATA {msg}: model resent {resent}, port resent {resent_here}"
            ));
        }
        self.to_b.push((msg, buf));
    }

    fn send_ack(&mut self, ack: u32, bits: u32, reason: u8) {
        let mut buf = vec![0u8; MTU];
        let mut tx = self.b.poll_transmit(0, self.now_b, &mut buf);
        if tx.is_none() {
            // B holds the acknowledgement back: run its delayed-ACK timer.
            if let Some(t) = self.b.poll_timeout() {
                self.now_b = self.now_b.max(t);
                self.b.handle_timeout(self.now_b);
                tx = self.b.poll_transmit(0, self.now_b, &mut buf);
            }
        }
        let Some(tx) = tx else {
            self.diverge(format!(
                "the model sends ACK {ack} bits {bits:#b} reason {reason}, B sends nothing"
            ));
        };
        buf.truncate(tx.len);
        let f = self.parse(&buf, addr_a());
        let body = AckBody::read(f.payload());
        let got = match (f.kind(), f.ack(), body) {
            (FrameType::Ack | FrameType::Nak, Some(a), Some(body)) => {
                // The model's bit i is frame ack + i (bit 0, the frame at the
                // acknowledgement, is missing by definition); the wire's bit
                // i is frame ack + 1 + i.
                let mut model_bits = 0u32;
                for i in 0..SACK_BITS {
                    if body.is_set(i) {
                        if i + 1 >= self.rx_window as usize {
                            self.diverge(format!("B's bitmap holds frame ack + {}", i + 1));
                        }
                        model_bits |= 1 << (i + 1);
                    }
                }
                (self.index(a), model_bits, body.reason() as u8)
            }
            (kind, ..) => self.diverge(format!(
                "the model sends ACK {ack} bits {bits:#b} reason {reason}, B sends {kind:?}"
            )),
        };
        if got != (ack, bits, reason) {
            self.diverge(format!(
                "the model sends ACK {ack} bits {bits:#b} reason {reason}, B sends ACK {} bits {:#b} reason {}",
                got.0, got.1, got.2
            ));
        }
        self.to_a.push(((ack, bits, reason), buf));
    }

    /// The oldest frame on the wire that the model names `frame`.
    fn find(&self, frame: FrameRef) -> usize {
        let found = match frame {
            FrameRef::Data(m) => self.to_b.iter().position(|(x, _)| *x == m),
            FrameRef::Ack(a, b, r) => self.to_a.iter().position(|(x, _)| *x == (a, b, r)),
        };
        found.unwrap_or_else(|| self.diverge(format!("{frame:?} is not on the wire")))
    }

    fn deliver(&mut self, frame: FrameRef, dup: bool) {
        let k = self.find(frame);
        match frame {
            FrameRef::Data(_) => {
                let bytes = if dup {
                    self.to_b[k].1.clone()
                } else {
                    self.to_b.remove(k).1
                };
                let route = Route {
                    method: 0,
                    link: LinkId(0),
                };
                assert!(self.b.handle_frame(self.now_b, route, &bytes));
                while let Some(d) = self.b.poll_delivery() {
                    let bytes = self.b.message(&d).expect("delivered bytes").to_vec();
                    let i = u32::from(bytes[0]);
                    assert_eq!(bytes, message(i), "content of delivered message {i}");
                    self.delivered.push(i);
                    self.held.push_back(d.slot);
                }
            }
            FrameRef::Ack(..) => {
                let bytes = if dup {
                    self.to_a[k].1.clone()
                } else {
                    self.to_a.remove(k).1
                };
                let route = Route {
                    method: 0,
                    link: LinkId(1),
                };
                assert!(self.a.handle_frame(self.now_a, route, &bytes));
                while let Some(e) = self.a.poll_send_event() {
                    match e {
                        SendEvent::Complete(h) => self.completed.push(self.handles[&h]),
                        SendEvent::Failed(h, why) => self.diverge(format!(
                            "A's send of message {} failed: {why:?}",
                            self.handles[&h]
                        )),
                    }
                }
            }
        }
    }

    fn drop_frame(&mut self, frame: FrameRef) {
        let k = self.find(frame);
        match frame {
            FrameRef::Data(_) => {
                self.to_b.remove(k);
            }
            FrameRef::Ack(..) => {
                self.to_a.remove(k);
            }
        }
    }

    /// Runs A's timers until its retransmission timeout has fired once.
    fn timeout(&mut self) {
        let before = self.a.stats().timeouts;
        for _ in 0..4 {
            let Some(t) = self.a.poll_timeout() else {
                self.diverge("the model times out, A has no timer".into());
            };
            self.now_a = self.now_a.max(t);
            self.a.handle_timeout(self.now_a);
            if self.a.stats().timeouts > before {
                break;
            }
        }
        if self.a.stats().timeouts != before + 1 {
            self.diverge(format!(
                "the model times out once, A {} times",
                self.a.stats().timeouts - before
            ));
        }
    }

    /// A's clock moves past every reorder check it waits for, and the
    /// checks run (no retransmission timeout may fire).
    fn run_loss_checks(&mut self) {
        for _ in 0..4 {
            let at = self.a.peer_info(addr_b()).and_then(|p| p.loss_check_at);
            let Some(at) = at else { return };
            self.now_a = self.now_a.max(at);
            let before = self.a.stats().timeouts;
            self.a.handle_timeout(self.now_a);
            if self.a.stats().timeouts != before {
                self.diverge("A timed out while waiting for a reorder check".into());
            }
        }
    }

    /// A's clock moves to the end of its ring-full back-off, and the timer
    /// that wakes it there runs (no retransmission timeout may fire).
    fn backoff(&mut self) {
        let until = self.a.peer_info(addr_b()).and_then(|p| p.backoff_until);
        let Some(until) = until else {
            self.diverge("the model ends a back-off, A never backed off".into());
        };
        self.now_a = self.now_a.max(until);
        if self.a.poll_timeout().is_some_and(|t| t <= self.now_a) {
            let before = self.a.stats().timeouts;
            self.a.handle_timeout(self.now_a);
            if self.a.stats().timeouts != before {
                self.diverge("A timed out at the end of its back-off".into());
            }
        }
    }

    fn step(&mut self, line: usize, event: Event) {
        self.line = line;
        match event {
            Event::SendData { msg, resent } => self.send_data(msg, resent),
            Event::SendAck { ack, bits, reason } => self.send_ack(ack, bits, reason),
            Event::Deliver { frame, dup } => self.deliver(frame, dup),
            Event::Drop(frame) => self.drop_frame(frame),
            Event::Timeout => self.timeout(),
            Event::Backoff => self.backoff(),
            Event::Release => {
                let Some(slot) = self.held.pop_front() else {
                    self.diverge("the model releases a message B never delivered".into());
                };
                self.b.release(slot).expect("release");
            }
            Event::Delivers(i) => self.model_delivered.push(i),
            Event::Completes(i) => self.model_completed.push(i),
        }
    }

    /// After the model's account of an event (its deliveries and
    /// completions included), the ports must agree with it.
    fn check(&self) {
        if self.delivered != self.model_delivered {
            self.diverge(format!(
                "B delivered {:?}, the model {:?}",
                self.delivered, self.model_delivered
            ));
        }
        if self.completed != self.model_completed {
            self.diverge(format!(
                "A completed {:?}, the model {:?}",
                self.completed, self.model_completed
            ));
        }
    }
}

/// Replays one trace; returns the number of its events (frames sent, lost,
/// delivered, duplicated; timers; releases), reports of deliveries and
/// completions not counted.
fn replay(trace: &Trace) -> usize {
    // The model is built from the code's constants.
    let defaults = PortConfig::new(addr_a(), JOB);
    for (name, code) in [
        ("TX_WINDOW", u64::from(defaults.tx_window)),
        ("RX_WINDOW", u64::from(RX_WINDOW)),
        ("SACK_BITS", SACK_BITS as u64),
        (
            "FULL_RESEND_AFTER_TIMEOUTS",
            u64::from(FULL_RESEND_AFTER_TIMEOUTS),
        ),
        ("NAK_GAP", NakReason::Gap as u64),
        ("NAK_RING_FULL", NakReason::RingFull as u64),
    ] {
        assert_eq!(
            trace.param(name),
            code,
            "{}: the model's {name} is not the code's: regenerate models/generated and the traces",
            trace.name
        );
    }
    assert_eq!(
        trace.param("W"),
        trace.param("TX_WINDOW") / trace.param("SCALE"),
        "{}: the model's window is the code's scaled down",
        trace.name
    );
    let mut r = Replay::new(trace);
    let mut events = 0;
    for &(line, event) in &trace.events {
        let report = matches!(event, Event::Delivers(_) | Event::Completes(_));
        if !report {
            // The model's reports of the previous event are all in.
            r.check();
            events += 1;
        }
        r.step(line, event);
    }
    r.check();
    let nmsg = trace.param("NMSG") as u32;
    let all: Vec<u32> = (0..nmsg).collect();
    assert_eq!(
        r.model_delivered, all,
        "{}: an incomplete trace (the model delivers every message)",
        trace.name
    );
    assert_eq!(
        r.model_completed, all,
        "{}: an incomplete trace",
        trace.name
    );
    events
}

fn trace_dir() -> PathBuf {
    match std::env::var_os("BCL_TRACE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/traces"),
    }
}

#[test]
fn the_ports_do_what_the_model_does_on_every_trace() {
    let dir = trace_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    paths.sort();
    assert!(
        !paths.is_empty(),
        "no traces in {}: run models/traces.sh",
        dir.display()
    );
    let mut events = 0;
    for p in &paths {
        let trace = parse_trace(p);
        events += replay(&trace);
    }
    eprintln!(
        "replayed {} traces ({events} events) from {}",
        paths.len(),
        dir.display()
    );
}

#[test]
fn a_trace_the_code_does_not_follow_fails() {
    // The replay must be able to fail: a trace in which B acknowledges a
    // frame it never received is one no correct port follows.
    let text = "param NMSG 1\nparam SCALE 64\nparam W 2\nparam RXW 4\nparam RING 2\n\
                param SEQM 16\nparam ISEQ 14\nparam TX_WINDOW 128\nparam RX_WINDOW 256\n\
                param SACK_BITS 256\nparam FULL_RESEND_AFTER_TIMEOUTS 3\nparam NAK_GAP 1\n\
                param NAK_RING_FULL 2\nsend D 0 0\ndrop D 0\nsend A 1 0 0\n";
    let dir = std::env::temp_dir().join(format!("bcl-trace-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("wrong.trace");
    std::fs::write(&path, text).expect("write trace");
    let trace = parse_trace(&path);
    let outcome = std::panic::catch_unwind(|| replay(&trace));
    let _ = std::fs::remove_dir_all(&dir);
    let err = outcome.expect_err("a trace the code cannot follow fails the replay");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("diverges"), "{msg}");
}
