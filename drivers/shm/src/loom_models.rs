//! Loom models of the lock-free algorithms (compiled only with
//! `--cfg loom`; run them with `drivers/shm/loom.sh`).
//!
//! The algorithms run unchanged on heap memory laid out like a segment
//! (loom atomics written into the slots), with loom threads standing in
//! for processes. Payload and chunk bytes are guarded by loom cells, so a
//! missing happens-before edge between a writer and a reader of the same
//! bytes fails the model; a lost wake-up shows up as a loom deadlock; an
//! infinite wait as loom's branch limit.

#![cfg(test)]

use crate::bell;
use crate::exchange::{ChunkDesc, ExCtl, ExReceiver, ExSender, ExView, PullProgress};
use crate::inbox::{
    Head, InboxConsumer, InboxCtl, InboxProducer, InboxSendError, InboxView, SlotHdr, SLOT_HDR,
};
use crate::sync::{AtomicU32, AtomicU64, DataCells, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// An inbox in heap memory.
struct TestInbox {
    ctl: Box<InboxCtl>,
    slots: *mut u8,
    layout: Layout,
    stride: usize,
    cap: u64,
    cells: Box<DataCells>,
    intents: Vec<AtomicU64>,
    /// "Is producer i alive?" (the model's stand-in for pidfds).
    alive: Vec<AtomicU32>,
}

// SAFETY: the raw slot memory is only accessed through the inbox protocol
// (atomics, and loom-checked raw copies).
unsafe impl Send for TestInbox {}
// SAFETY: as above.
unsafe impl Sync for TestInbox {}

impl TestInbox {
    fn new(cap: u64, payload: usize, producers: usize) -> Self {
        let align = std::mem::align_of::<SlotHdr>().max(8);
        let stride = (SLOT_HDR + payload).div_ceil(align) * align;
        let layout = Layout::from_size_align(stride * cap as usize, align).unwrap();
        // SAFETY: non-zero size (cap >= 1, stride >= SLOT_HDR > 0).
        let slots = unsafe { alloc_zeroed(layout) };
        assert!(!slots.is_null());
        for i in 0..cap as usize {
            // SAFETY: slot i's header position is inside the allocation and
            // aligned for SlotHdr.
            unsafe { std::ptr::write(slots.add(i * stride) as *mut SlotHdr, SlotHdr::default()) };
        }
        let r = TestInbox {
            ctl: Box::default(),
            slots,
            layout,
            stride,
            cap,
            cells: Box::new(DataCells::new(cap as usize)),
            intents: (0..producers).map(|_| AtomicU64::new(0)).collect(),
            alive: (0..producers).map(|_| AtomicU32::new(1)).collect(),
        };
        r.view().init();
        r
    }

    fn view(&self) -> InboxView {
        // SAFETY: the control block, slots and cells live as long as self,
        // which every user holds through an Arc.
        unsafe { InboxView::new(&*self.ctl, self.slots, self.stride, self.cap, &*self.cells) }
    }

    fn producer(&self, i: usize) -> InboxProducer {
        // SAFETY: intent i lives as long as self and is used by this
        // producer only.
        unsafe { InboxProducer::new(self.view(), &self.intents[i], i as u16, 100 + i as u64) }
    }

    /// The consumer's dead-producer recovery (what `Mailbox::check_head`
    /// does with pidfds): skip the head if every producer whose intent
    /// names it is dead.
    fn recover(&self, c: &mut InboxConsumer) -> bool {
        if !c.head_claimed() {
            return false;
        }
        let target = c.head() + 1;
        let mut found = false;
        let mut live = false;
        for (i, intent) in self.intents.iter().enumerate() {
            if intent.load(Ordering::Acquire) == target {
                found = true;
                live |= self.alive[i].load(Ordering::SeqCst) != 0;
            }
        }
        if found && !live && c.head_claimed() {
            c.skip_dead();
            return true;
        }
        false
    }
}

impl Drop for TestInbox {
    fn drop(&mut self) {
        for i in 0..self.cap as usize {
            // SAFETY: each header was written by `new` and is dropped once.
            unsafe { std::ptr::drop_in_place(self.slots.add(i * self.stride) as *mut SlotHdr) };
        }
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.slots, self.layout) };
    }
}

/// A wake-up primitive with the semantics of the doorbell socket: a ring
/// is remembered until the sleeper takes it.
struct Notifier {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Notifier {
    fn new() -> Self {
        Notifier {
            rung: Mutex::new(false),
            cv: Condvar::new(),
        }
    }
    fn ring(&self) {
        *self.rung.lock().unwrap() = true;
        self.cv.notify_one();
    }
    fn sleep(&self) {
        let mut g = self.rung.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
        *g = false;
    }
}

/// An inbox with the wake-up machinery of a real mailbox: the consumer
/// sleeps when the inbox is empty (the sleep bit in `tail`), a producer
/// sleeps when it is full (its waiting flag plus `full_waiters`). Model
/// threads block instead of spinning, which also keeps loom's exploration
/// finite (two threads spinning at once make loom's scheduler loop).
struct World {
    inbox: TestInbox,
    consumer_bell: Notifier,
    producer_bells: Vec<Notifier>,
    waiting: Vec<AtomicU32>,
}

impl World {
    fn new(cap: u64, producers: usize) -> Arc<World> {
        Arc::new(World {
            inbox: TestInbox::new(cap, 8, producers),
            consumer_bell: Notifier::new(),
            producer_bells: (0..producers).map(|_| Notifier::new()).collect(),
            waiting: (0..producers).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Sends, sleeping while the inbox is full.
    fn send(&self, p: usize, prod: &InboxProducer, m: &[u8]) {
        loop {
            match prod.try_send(m) {
                Ok(wake) => {
                    if wake {
                        self.consumer_bell.ring();
                    }
                    return;
                }
                Err(InboxSendError::Full) => {
                    self.waiting[p].store(1, Ordering::Relaxed);
                    prod.want_space();
                    if !prod.has_space() {
                        self.producer_bells[p].sleep();
                    }
                    self.waiting[p].store(0, Ordering::Relaxed);
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }

    /// Receives one message, sleeping while the inbox is empty and spinning
    /// only while the head slot is claimed and being written.
    fn recv(&self, c: &mut InboxConsumer) -> (u16, Vec<u8>) {
        loop {
            match c.poll() {
                Head::Ready(info) => {
                    let mut b = vec![0u8; info.len];
                    c.copy_head(info.len, &mut b);
                    assert_eq!(info.src, 100 + u64::from(info.entry));
                    c.release();
                    if c.announce(true) {
                        for (p, w) in self.waiting.iter().enumerate() {
                            if w.swap(0, Ordering::AcqRel) != 0 {
                                self.producer_bells[p].ring();
                            }
                        }
                    }
                    return (info.entry, b);
                }
                Head::Corrupt(m) => panic!("corrupt slot {m:#x}"),
                Head::NotReady => {
                    if c.arm_sleep() {
                        if c.poll() == Head::NotReady {
                            self.consumer_bell.sleep();
                        }
                        c.disarm_sleep();
                    } else {
                        thread::yield_now();
                    }
                }
            }
        }
    }
}

/// Receives one message, spinning (for models where only the consumer
/// can be waiting).
fn recv_spinning(c: &mut InboxConsumer) -> (u16, Vec<u8>) {
    loop {
        if let Head::Ready(info) = c.poll() {
            let mut b = vec![0u8; info.len];
            c.copy_head(info.len, &mut b);
            c.release();
            c.announce(true);
            return (info.entry, b);
        }
        thread::yield_now();
    }
}

fn send_retry(p: &InboxProducer, msg: &[u8]) {
    loop {
        match p.try_send(msg) {
            Ok(_) => return,
            Err(InboxSendError::Full) => thread::yield_now(),
            Err(e) => panic!("{e:?}"),
        }
    }
}

fn msg(producer: usize, k: usize) -> [u8; 4] {
    [
        producer as u8,
        k as u8,
        0xa5 ^ producer as u8,
        0x5a ^ k as u8,
    ]
}

/// Runs `per[p]` sends for each producer p and one consumer; checks every
/// message intact, exactly once, and in order per producer.
fn mpsc_model(cap: u64, per: &'static [usize]) {
    let w = World::new(cap, per.len());
    let hs: Vec<_> = per
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            let w = w.clone();
            thread::spawn(move || {
                let prod = w.inbox.producer(p);
                for k in 0..n {
                    w.send(p, &prod, &msg(p, k));
                }
            })
        })
        .collect();
    let mut c = InboxConsumer::new(w.inbox.view());
    let mut next = vec![0usize; per.len()];
    for _ in 0..per.iter().sum::<usize>() {
        let (e, b) = w.recv(&mut c);
        let p = e as usize;
        assert_eq!(b, msg(p, next[p]), "intact and in per-producer order");
        next[p] += 1;
    }
    assert_eq!(next, per);
    assert_eq!(c.poll(), Head::NotReady);
    hs.into_iter().for_each(|h| h.join().unwrap());
}

#[test]
fn inbox_two_producers_exactly_once() {
    loom::model(|| mpsc_model(4, &[2, 2]));
}

#[test]
fn inbox_three_producers_exactly_once() {
    loom::model(|| mpsc_model(4, &[1, 1, 1]));
}

#[test]
fn inbox_full_back_pressure() {
    // Two slots, three messages from two producers: in some interleavings a
    // producer finds the inbox full, sleeps, and is woken when space is
    // freed; nothing is lost or duplicated.
    loom::model(|| mpsc_model(2, &[2, 1]));
}

#[test]
fn inbox_tagged_and_plain_sends_arrive_intact() {
    // A direct message is written as tag + data straight into its slot
    // (try_send_tagged); racing a plain producer, both arrive whole.
    loom::model(|| {
        let r = Arc::new(TestInbox::new(2, 8, 2));
        let p0 = r.producer(0);
        assert_eq!(
            p0.try_send_tagged(1, &[0; 8]),
            Err(InboxSendError::TooLarge),
            "tag + 8 bytes do not fit an 8-byte payload"
        );
        let r2 = r.clone();
        let h = thread::spawn(move || {
            let p = r2.producer(1);
            loop {
                match p.try_send_tagged(0xd1, &[1, 2, 3]) {
                    Ok(_) => return,
                    Err(InboxSendError::Full) => thread::yield_now(),
                    Err(e) => panic!("{e:?}"),
                }
            }
        });
        send_retry(&p0, &msg(0, 0));
        let mut c = InboxConsumer::new(r.view());
        let mut got = vec![recv_spinning(&mut c), recv_spinning(&mut c)];
        got.sort();
        assert_eq!(got, vec![(0, msg(0, 0).to_vec()), (1, vec![0xd1, 1, 2, 3])]);
        h.join().unwrap();
    });
}

#[test]
fn inbox_full_is_reported_without_claiming() {
    loom::model(|| {
        let r = Arc::new(TestInbox::new(2, 8, 1));
        let p = r.producer(0);
        let mut c = InboxConsumer::new(r.view());
        p.try_send(&msg(0, 0)).unwrap();
        p.try_send(&msg(0, 1)).unwrap();
        assert_eq!(p.try_send(&msg(0, 2)), Err(InboxSendError::Full));
        assert_eq!(r.intents[0].load(Ordering::Relaxed), 0);
        let r2 = r.clone();
        let h = thread::spawn(move || {
            let p = r2.producer(0);
            send_retry(&p, &msg(0, 2));
        });
        for k in 0..3 {
            let (e, b) = recv_spinning(&mut c);
            assert_eq!((e, b), (0, msg(0, k).to_vec()));
        }
        h.join().unwrap();
    });
}

#[test]
fn inbox_dead_producer_is_skipped_and_others_survive() {
    loom::model(|| {
        let r = Arc::new(TestInbox::new(2, 8, 2));
        // Producer 0 claims a slot and dies before publishing.
        let r0 = r.clone();
        let dead = thread::spawn(move || {
            let p = r0.producer(0);
            if let Some(w) = p.claim() {
                std::mem::forget(w); // killed: no publish, no void slot
            }
            r0.alive[0].store(0, Ordering::SeqCst);
        });
        // Producer 1 sends one message.
        let r1 = r.clone();
        let live = thread::spawn(move || {
            let p = r1.producer(1);
            send_retry(&p, &msg(1, 0));
        });
        let mut c = InboxConsumer::new(r.view());
        let mut skipped = 0;
        loop {
            match c.poll() {
                Head::Ready(info) => {
                    assert_eq!(info.entry, 1, "only the live producer published");
                    let mut b = vec![0u8; info.len];
                    c.copy_head(info.len, &mut b);
                    assert_eq!(b, msg(1, 0));
                    c.release();
                    break;
                }
                Head::Corrupt(_) => panic!("corrupt"),
                Head::NotReady => {
                    if r.recover(&mut c) {
                        skipped += 1;
                    } else {
                        thread::yield_now();
                    }
                }
            }
        }
        assert!(skipped <= 1);
        dead.join().unwrap();
        live.join().unwrap();
    });
}

#[test]
fn inbox_sleep_bit_no_lost_wakeup() {
    loom::model(|| {
        let r = Arc::new(TestInbox::new(2, 8, 1));
        let n = Arc::new(Notifier::new());
        let (r2, n2) = (r.clone(), n.clone());
        let h = thread::spawn(move || {
            let p = r2.producer(0);
            let wake = p.try_send(&msg(0, 0)).unwrap();
            if wake {
                n2.ring();
            }
        });
        let mut c = InboxConsumer::new(r.view());
        loop {
            if let Head::Ready(_) = c.poll() {
                c.release();
                break;
            }
            if c.arm_sleep() {
                // Nothing was claimed when we armed: any later claim sees the
                // bit and rings. Re-check, then sleep.
                if c.poll() == Head::NotReady {
                    n.sleep();
                }
                c.disarm_sleep();
            } else {
                thread::yield_now();
            }
        }
        h.join().unwrap();
    });
}

#[test]
fn inbox_space_waiter_no_lost_wakeup() {
    // One slot... two: the producer fills the inbox, then sleeps until the
    // consumer frees space.
    loom::model(|| {
        let r = Arc::new(TestInbox::new(2, 8, 1));
        let n = Arc::new(Notifier::new());
        let waiting = Arc::new(AtomicU32::new(0));
        let (r2, n2, w2) = (r.clone(), n.clone(), waiting.clone());
        let h = thread::spawn(move || {
            let p = r2.producer(0);
            for k in 0..3 {
                loop {
                    match p.try_send(&msg(0, k)) {
                        Ok(_) => break,
                        Err(InboxSendError::Full) => {
                            w2.store(1, Ordering::Relaxed);
                            p.want_space();
                            if !p.has_space() {
                                n2.sleep();
                            }
                            w2.store(0, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
            }
        });
        let mut c = InboxConsumer::new(r.view());
        let mut got = 0;
        while got < 3 {
            match c.poll() {
                Head::Ready(_) => {
                    c.release();
                    got += 1;
                }
                _ => thread::yield_now(),
            }
            if c.announce(true) && waiting.swap(0, Ordering::AcqRel) != 0 {
                n.ring();
            }
        }
        h.join().unwrap();
    });
}

/// An exchange queue in heap memory.
struct TestQueue {
    ctl: Box<ExCtl>,
    descs: Vec<ChunkDesc>,
    data: *mut u8,
    layout: Layout,
    chunk: usize,
    chunks: u64,
    cells: Box<DataCells>,
}

// SAFETY: the data bytes are only accessed through the queue protocol.
unsafe impl Send for TestQueue {}
// SAFETY: as above.
unsafe impl Sync for TestQueue {}

impl TestQueue {
    fn new(chunk: usize, chunks: u64) -> Self {
        let layout = Layout::from_size_align(chunk * chunks as usize, 8).unwrap();
        // SAFETY: non-zero size.
        let data = unsafe { alloc_zeroed(layout) };
        TestQueue {
            ctl: Box::default(),
            descs: (0..chunks).map(|_| ChunkDesc::default()).collect(),
            data,
            layout,
            chunk,
            chunks,
            cells: Box::new(DataCells::new(chunks as usize)),
        }
    }

    fn view(&self) -> ExView {
        // SAFETY: all areas live as long as self, held through an Arc.
        unsafe {
            ExView::new(
                &*self.ctl,
                self.descs.as_ptr(),
                self.data,
                self.chunk,
                self.chunks,
                &*self.cells,
            )
        }
    }
}

impl Drop for TestQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.data, self.layout) };
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

#[test]
fn exchange_spsc_pipelined_chunks_in_order() {
    // 4-byte chunks, 2 deep: a 10-byte message needs 3 chunks, so the
    // producer must wait for the consumer mid-message; then a 3-byte one.
    loom::model(|| {
        let q = Arc::new(TestQueue::new(4, 2));
        let q2 = q.clone();
        let h = thread::spawn(move || {
            let mut s = ExSender::new(q2.view());
            for (len, seed) in [(10usize, 1u8), (3, 2)] {
                let m = pattern(len, seed);
                while !s.push(&m).unwrap().done {
                    thread::yield_now();
                }
            }
        });
        let mut rx = ExReceiver::new(q.view());
        for (len, seed) in [(10usize, 1u8), (3, 2)] {
            let mut dst = vec![0u8; 16];
            loop {
                match rx.pull_into(&mut dst).unwrap() {
                    PullProgress::Done { len: l } => {
                        assert_eq!(l, len);
                        assert_eq!(dst[..l], pattern(len, seed)[..]);
                        break;
                    }
                    PullProgress::Partial { received, total } => {
                        assert_eq!(total, len);
                        assert_eq!(dst[..received], pattern(len, seed)[..received]);
                        thread::yield_now();
                    }
                    PullProgress::Empty => thread::yield_now(),
                }
            }
        }
        h.join().unwrap();
    });
}

#[test]
fn exchange_bell_no_lost_wakeup() {
    // The consumer sleeps on its bell flag until a chunk arrives; the
    // producer rings only if the flag is armed.
    loom::model(|| {
        let q = Arc::new(TestQueue::new(8, 2));
        let n = Arc::new(Notifier::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (q2, n2, f2) = (q.clone(), n.clone(), flag.clone());
        let h = thread::spawn(move || {
            let mut s = ExSender::new(q2.view());
            assert!(s.push(&pattern(5, 9)).unwrap().done);
            if bell::should_wake(&f2) {
                n2.ring();
            }
        });
        let mut rx = ExReceiver::new(q.view());
        let mut dst = [0u8; 8];
        loop {
            if let PullProgress::Done { len } = rx.pull_into(&mut dst).unwrap() {
                assert_eq!(dst[..len], pattern(5, 9)[..]);
                break;
            }
            bell::arm(&flag);
            if !rx.view().has_data() {
                n.sleep();
            }
            bell::disarm(&flag);
        }
        h.join().unwrap();
    });
}
