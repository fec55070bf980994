//! The recording adapter: a method wrapped so that everything the engine
//! and the method hand each other is also written to the capture file.
//!
//! It sits exactly where the engine meets the method: the `rx_burst` sink
//! (frames as the core is shown them), the `tx_burst` source (each frame
//! once the port has written it, before the method sends it), and the
//! direct path (`send_direct`, `take_direct`, and the receive and transfer
//! callbacks of `poll_rx` and `housekeeping`). Every other call is passed
//! straight through. The builder puts it in only when capture is on, so an
//! endpoint without capture never runs any of this.

use super::{CaptureFile, Direction, Kind, PseudoHeader};
use bcl_core::method::{
    Descriptor, DirectError, DirectHead, DirectMethod, LinkId, MessageClass, Method, MethodCaps,
    MethodCounters, MethodError, RxHandler, TransferHost, TxFrame,
};
use bcl_core::port::{BulkKind, BulkToken, OutboundBulk};
use bcl_core::ProcessAddr;
use std::any::Any;
use std::os::fd::RawFd;
use std::sync::Arc;

/// Inbound transfers started but not finished, at most (older ones are
/// forgotten: their data is then not recorded).
const MAX_INBOUND: usize = 1024;

/// What one endpoint's method records, and where.
pub(crate) struct Tap {
    file: Arc<CaptureFile>,
    iface: u32,
    local: ProcessAddr,
    method: &'static str,
    pid: u32,
    /// The process behind each link this adapter opened, where the method's
    /// kind can tell it from the descriptor (shared memory): direct
    /// messages carry no header that names their receiver.
    peers: Vec<(LinkId, ProcessAddr)>,
    /// Inbound transfers accepted and not yet done.
    inbound: Vec<(BulkToken, Bulk)>,
    /// Records written since the last flush.
    dirty: bool,
}

/// What the capture knows of a transfer.
#[derive(Clone, Copy)]
struct Bulk {
    peer: ProcessAddr,
    kind: BulkKind,
    channel: u16,
    transfer: u32,
    len: u64,
}

/// Big-endian u32 at `at` of `b`, if there.
fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Big-endian u16 at `at` of `b`, if there.
fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl Tap {
    pub(crate) fn new(
        file: Arc<CaptureFile>,
        iface: u32,
        local: ProcessAddr,
        method: &'static str,
    ) -> Tap {
        Tap {
            file,
            iface,
            local,
            method,
            pid: std::process::id(),
            peers: Vec::new(),
            inbound: Vec::new(),
            dirty: false,
        }
    }

    fn header(&self, kind: Kind, direction: Direction, total_len: u64) -> PseudoHeader {
        PseudoHeader {
            kind,
            direction,
            method: self.method,
            local: self.local,
            peer: None,
            link: None,
            bulk_kind: 0,
            channel: 0,
            transfer: 0,
            pid: self.pid,
            total_len,
        }
    }

    /// A BCL frame. The peer is read from the frame's header (source of a
    /// received frame, destination of a sent one) when it is long enough;
    /// the frame itself is recorded as it is, valid or not.
    fn frame(&mut self, direction: Direction, link: LinkId, bytes: &[u8]) {
        // Header offsets (bcl_core::wire::Header): source node 8, source
        // port 12, destination port 14, destination node 16.
        let (node_at, port_at) = match direction {
            Direction::Sent => (16, 14),
            Direction::Received | Direction::None => (8, 12),
        };
        let peer = be32(bytes, node_at)
            .zip(be16(bytes, port_at))
            .map(|(n, p)| ProcessAddr::new(n, p));
        let mut ph = self.header(Kind::Frame, direction, bytes.len() as u64);
        ph.peer = peer;
        ph.link = Some(link.0);
        self.write(&ph, bytes);
    }

    /// A direct message of `class` from or to `peer` over `link`.
    fn direct(
        &mut self,
        direction: Direction,
        class: MessageClass,
        peer: Option<ProcessAddr>,
        link: Option<LinkId>,
        bytes: &[u8],
    ) {
        let kind = match class {
            MessageClass::Application => Kind::Direct,
            MessageClass::Service => Kind::DirectService,
        };
        let mut ph = self.header(kind, direction, bytes.len() as u64);
        ph.peer = peer;
        ph.link = link.map(|l| l.0);
        self.write(&ph, bytes);
    }

    /// A transfer's data.
    fn bulk(&mut self, direction: Direction, b: &Bulk, data: &[u8]) {
        let mut ph = self.header(Kind::Bulk, direction, b.len);
        ph.peer = Some(b.peer);
        ph.bulk_kind = b.kind.code();
        ph.channel = b.channel;
        ph.transfer = b.transfer;
        self.write(&ph, data);
    }

    fn write(&mut self, ph: &PseudoHeader, data: &[u8]) {
        self.file.record(self.iface, ph, data);
        self.dirty = true;
    }

    /// Writes out this burst's records.
    fn flush(&mut self) {
        if self.dirty {
            self.file.flush();
            self.dirty = false;
        }
    }

    /// Remembers which process `link` leads to, if the method's kind can
    /// tell from the descriptor.
    fn learn(&mut self, link: LinkId, peer: &Descriptor) {
        let kind = crate::Registry::builtin().get(&peer.method);
        if let Some(addr) = kind.and_then(|k| k.process_of(&peer.address)) {
            self.peers.retain(|(l, _)| *l != link);
            self.peers.push((link, addr));
        }
    }

    fn peer_of(&self, link: LinkId) -> Option<ProcessAddr> {
        self.peers.iter().find(|(l, _)| *l == link).map(|(_, a)| *a)
    }
}

/// The method inside, seen as a plain method.
pub(crate) trait Inner: Send + 'static {
    fn method(&self) -> &dyn Method;
    fn method_mut(&mut self) -> &mut dyn Method;
    fn any_mut(&mut self) -> &mut dyn Any;
}

impl Inner for Box<dyn Method> {
    fn method(&self) -> &dyn Method {
        &**self
    }
    fn method_mut(&mut self) -> &mut dyn Method {
        &mut **self
    }
    fn any_mut(&mut self) -> &mut dyn Any {
        &mut **self
    }
}

impl Inner for Box<dyn DirectMethod> {
    fn method(&self) -> &dyn Method {
        &**self
    }
    fn method_mut(&mut self) -> &mut dyn Method {
        &mut **self
    }
    fn any_mut(&mut self) -> &mut dyn Any {
        &mut **self
    }
}

/// A method (`T`: a boxed [`Method`] or [`DirectMethod`]) with its traffic
/// recorded.
pub(crate) struct Tapped<T> {
    inner: T,
    tap: Tap,
}

impl<T: Inner> Tapped<T> {
    pub(crate) fn new(inner: T, tap: Tap) -> Tapped<T> {
        Tapped { inner, tap }
    }
}

/// See [`super::inner_any_mut`].
pub(crate) fn inner_any_mut(any: &mut dyn Any) -> Option<&mut dyn Any> {
    if any.is::<Tapped<Box<dyn Method>>>() {
        return any
            .downcast_mut::<Tapped<Box<dyn Method>>>()
            .map(|t| t.inner.any_mut());
    }
    if any.is::<Tapped<Box<dyn DirectMethod>>>() {
        return any
            .downcast_mut::<Tapped<Box<dyn DirectMethod>>>()
            .map(|t| t.inner.any_mut());
    }
    None
}

impl<T: Inner> Method for Tapped<T> {
    fn name(&self) -> &'static str {
        self.inner.method().name()
    }

    fn caps(&self) -> MethodCaps {
        self.inner.method().caps()
    }

    fn descriptor(&self) -> Descriptor {
        self.inner.method().descriptor()
    }

    fn open_link(&mut self, peer: &Descriptor) -> Result<LinkId, MethodError> {
        let link = self.inner.method_mut().open_link(peer)?;
        self.tap.learn(link, peer);
        Ok(link)
    }

    fn rx_burst(
        &mut self,
        budget: usize,
        sink: &mut dyn FnMut(LinkId, &[u8]),
    ) -> Result<usize, MethodError> {
        let tap = &mut self.tap;
        let r = self
            .inner
            .method_mut()
            .rx_burst(budget, &mut |link, bytes| {
                tap.frame(Direction::Received, link, bytes);
                sink(link, bytes);
            });
        tap.flush();
        r
    }

    fn tx_burst(
        &mut self,
        source: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, MethodError> {
        let tap = &mut self.tap;
        let r = self.inner.method_mut().tx_burst(&mut |buf| {
            let f = source(buf)?;
            tap.frame(Direction::Sent, f.link, buf.get(..f.len).unwrap_or(buf));
            Some(f)
        });
        tap.flush();
        r
    }

    fn readiness_fd(&self) -> Option<RawFd> {
        self.inner.method().readiness_fd()
    }

    fn rx_poll_is_syscall(&self) -> bool {
        self.inner.method().rx_poll_is_syscall()
    }

    fn prepare_wait(&mut self) -> bool {
        self.inner.method_mut().prepare_wait()
    }

    fn finish_wait(&mut self) {
        self.inner.method_mut().finish_wait()
    }

    fn counters(&self) -> MethodCounters {
        self.inner.method().counters()
    }

    fn notes(&self) -> Vec<String> {
        let mut notes = self.inner.method().notes();
        notes.push(format!("captured to {}", self.tap.file.path().display()));
        notes
    }

    fn shutdown(&mut self) {
        self.tap.flush();
        self.inner.method_mut().shutdown()
    }
}

/// The engine's receive callbacks, recording what the port takes.
struct TapRx<'a> {
    inner: &'a mut dyn RxHandler,
    tap: &'a mut Tap,
}

impl RxHandler for TapRx<'_> {
    fn frame(&mut self, link: LinkId, bytes: &[u8]) -> bool {
        // Recorded only once taken: a frame the port cannot take now is
        // shown again later.
        let taken = self.inner.frame(link, bytes);
        if taken {
            self.tap.frame(Direction::Received, link, bytes);
        }
        taken
    }

    fn direct(&mut self, from: ProcessAddr, class: MessageClass, bytes: &[u8]) -> bool {
        let taken = self.inner.direct(from, class, bytes);
        if taken {
            self.tap
                .direct(Direction::Received, class, Some(from), None, bytes);
        }
        taken
    }

    fn bulk_start(
        &mut self,
        from: ProcessAddr,
        kind: BulkKind,
        channel: u16,
        transfer: u32,
        len: u64,
    ) -> Option<BulkToken> {
        let token = self.inner.bulk_start(from, kind, channel, transfer, len)?;
        let inbound = &mut self.tap.inbound;
        if inbound.len() >= MAX_INBOUND {
            inbound.remove(0);
        }
        inbound.push((
            token,
            Bulk {
                peer: from,
                kind,
                channel,
                transfer,
                len,
            },
        ));
        Some(token)
    }

    fn bulk_dest(&mut self, token: BulkToken) -> Option<&mut [u8]> {
        self.inner.bulk_dest(token)
    }

    fn bulk_done(&mut self, token: BulkToken) {
        if let Some(i) = self.tap.inbound.iter().position(|(t, _)| *t == token) {
            let (_, b) = self.tap.inbound.swap_remove(i);
            if let Some(data) = self.inner.bulk_dest(token) {
                self.tap.bulk(Direction::Received, &b, data);
            }
        }
        self.inner.bulk_done(token)
    }
}

/// The engine's transfer callbacks, recording each transfer as the port
/// hands it over.
struct TapHost<'a> {
    inner: &'a mut dyn TransferHost,
    tap: &'a mut Tap,
}

impl TransferHost for TapHost<'_> {
    fn next_transfer(&mut self) -> Option<OutboundBulk> {
        let b = self.inner.next_transfer()?;
        if let Some(data) = self.inner.transfer_data(b.token) {
            let meta = Bulk {
                peer: b.peer,
                kind: b.kind,
                channel: b.channel,
                transfer: b.transfer,
                len: b.len,
            };
            self.tap.bulk(Direction::Sent, &meta, data);
        }
        Some(b)
    }

    fn transfer_data(&self, token: BulkToken) -> Option<&[u8]> {
        self.inner.transfer_data(token)
    }

    fn transfer_sent(&mut self, token: BulkToken) {
        self.inner.transfer_sent(token)
    }

    fn transfer_failed(&mut self, token: BulkToken, peer: ProcessAddr) {
        self.inner.transfer_failed(token, peer)
    }

    fn frames_written(&mut self, peer: ProcessAddr, total: u64) {
        self.inner.frames_written(peer, total)
    }

    fn peer_gone(&mut self, peer: ProcessAddr) {
        self.inner.peer_gone(peer)
    }
}

/// Records the direct message a `take_direct` call found, if any.
fn record_head<'a>(tap: &mut Tap, head: DirectHead<'a>) -> DirectHead<'a> {
    let (class, from, bytes) = match head {
        DirectHead::Message(from, bytes) => (MessageClass::Application, from, bytes),
        DirectHead::Service(from, bytes) => (MessageClass::Service, from, bytes),
        DirectHead::Empty | DirectHead::Other => return head,
    };
    tap.direct(Direction::Received, class, Some(from), None, bytes);
    tap.flush();
    head
}

impl DirectMethod for Tapped<Box<dyn DirectMethod>> {
    fn poll_rx(&mut self, budget: usize, rx: &mut dyn RxHandler) -> usize {
        let n = self.inner.poll_rx(
            budget,
            &mut TapRx {
                inner: rx,
                tap: &mut self.tap,
            },
        );
        self.tap.flush();
        n
    }

    fn take_direct(&mut self) -> DirectHead<'_> {
        let head = self.inner.take_direct();
        record_head(&mut self.tap, head)
    }

    fn take_direct_service(&mut self) -> DirectHead<'_> {
        let head = self.inner.take_direct_service();
        record_head(&mut self.tap, head)
    }

    fn send_direct(
        &mut self,
        link: LinkId,
        class: MessageClass,
        data: &[u8],
    ) -> Result<(), DirectError> {
        self.inner.send_direct(link, class, data)?;
        let peer = self.tap.peer_of(link);
        self.tap
            .direct(Direction::Sent, class, peer, Some(link), data);
        self.tap.flush();
        Ok(())
    }

    fn housekeeping(&mut self, host: &mut dyn TransferHost, check_peers: bool) -> usize {
        let n = self.inner.housekeeping(
            &mut TapHost {
                inner: host,
                tap: &mut self.tap,
            },
            check_peers,
        );
        self.tap.flush();
        n
    }

    fn has_pending_work(&self) -> bool {
        self.inner.has_pending_work()
    }

    fn has_queued_work(&self) -> bool {
        self.inner.has_queued_work()
    }
}
