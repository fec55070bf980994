//! One AF_XDP socket bound to one RX queue, with its own UMEM and rings.
//!
//! Chunks `[0, rx_frames)` of the UMEM are RX buffers: they cycle fill ring
//! → (kernel writes a frame) → RX ring → shown to the caller → fill ring.
//! Chunks `[rx_frames, rx_frames + tx_frames)` are TX buffers: free list →
//! lent to the caller, who writes a frame → TX ring → (kernel sends it) →
//! completion ring → free list. The free lists are preallocated stacks of
//! chunk numbers, so nothing is allocated per frame.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use crate::config::{AfXdpError, BindMode, QueueReport};
use crate::ring::{ConsRing, ProdRing, XdpDesc};
use crate::sys::{self, errno_name, setsockopt, Mmap};
use crate::umem::Umem;

/// How long to retry a bind that fails with EBUSY (the previous owner of
/// the queue is released by deferred kernel work after it exits).
const BIND_RETRY: Duration = Duration::from_secs(3);
/// Most `sendto` kicks per flush (each sends up to the kernel's TX budget).
const MAX_KICKS: u32 = 16;

/// What one queue's socket is asked for.
#[derive(Clone, Debug)]
pub(crate) struct XskParams {
    pub ifindex: u32,
    pub queue: u32,
    pub frame_size: u32,
    /// RX frames; RX ring entries; half the fill ring.
    pub rx_frames: u32,
    /// TX frames and TX/completion ring entries; 0 = receive only.
    pub tx_frames: u32,
    pub zero_copy_possible: bool,
    pub zero_copy_why_not: &'static str,
    pub force_bind: Option<BindMode>,
    pub need_wakeup: bool,
    pub huge_pages: bool,
    pub busy_poll: Option<(u32, u32)>,
    /// Largest Ethernet frame when frames may span several chunks
    /// (multi-buffer, `XDP_USE_SG`); `None`: one chunk per frame.
    pub multi_buffer: Option<usize>,
}

/// Counters of one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Frames taken from the RX ring and shown.
    pub rx_frames: u64,
    /// RX descriptors refused (outside the UMEM, across chunks, or naming a
    /// chunk the kernel did not own).
    pub rx_bad_desc: u64,
    /// Multi-buffer frames assembled from several chunks.
    pub rx_multi_frames: u64,
    /// Multi-buffer frames dropped: longer than the largest frame.
    pub rx_oversized: u64,
    /// Frames put in the TX ring.
    pub tx_frames: u64,
    /// Completions refused (bad address).
    pub tx_bad_completion: u64,
    /// `sendto` kicks issued.
    pub tx_kicks: u64,
    /// Kicks that failed with something other than "try again".
    pub tx_kick_errors: u64,
    /// `recvfrom` calls issued to busy-poll or wake the RX path.
    pub rx_kicks: u64,
}

/// One bound socket (see the module documentation).
pub(crate) struct Xsk {
    // Rings are unmapped before the socket closes (field order).
    fill: ProdRing<u64>,
    comp: ConsRing<u64>,
    rx: ConsRing<XdpDesc>,
    tx: Option<ProdRing<XdpDesc>>,
    umem: Umem,
    fd: OwnedFd,
    queue: u32,
    rx_frames: u32,
    tx_frames: u32,
    rx_free: Vec<u32>,
    tx_free: Vec<u32>,
    bind: BindMode,
    need_wakeup: bool,
    busy_poll: bool,
    /// Multi-buffer frames: their assembly and staging buffers.
    multi: Option<MultiBuffer>,
    pub(crate) stats: QueueStats,
}

/// A socket's state for frames spanning several chunks.
struct MultiBuffer {
    /// Largest Ethernet frame.
    max_frame: usize,
    /// The received frame being assembled (its chunks so far).
    rx_frame: Vec<u8>,
    /// Whether a frame is being assembled (its last chunk is still to
    /// come), and whether it is already known to be dropped.
    rx_open: bool,
    rx_dropping: bool,
    /// TX chunks are lent in slots of this many contiguous chunks (the
    /// largest frame's worth): the caller writes a whole frame straight
    /// into a slot, which is then sent as one descriptor per chunk used.
    slot_chunks: u32,
    /// Free TX slots (numbered from 0 at chunk `rx_frames`).
    free_slots: Vec<u32>,
    /// Per TX slot: its chunks the kernel still holds.
    slot_out: Vec<u32>,
}

fn io_ctx(queue: u32, what: &str) -> impl FnOnce(io::Error) -> AfXdpError {
    AfXdpError::io(format!("queue {queue}: {what}"))
}

impl Xsk {
    /// Creates, maps and binds the socket; returns it with its report.
    pub(crate) fn open(p: &XskParams) -> Result<(Xsk, QueueReport), AfXdpError> {
        let q = p.queue;
        let fd = sys::xdp_socket().map_err(io_ctx(q, "socket(AF_XDP)"))?;
        let raw = fd.as_raw_fd();
        let frames = p.rx_frames + p.tx_frames;
        let (umem, pages) = Umem::new(frames, p.frame_size, p.huge_pages || p.frame_size > 4096)
            .map_err(io_ctx(q, "mapping the UMEM"))?;
        if p.frame_size > 4096 && !pages.huge {
            return Err(AfXdpError::Config(format!(
                "frame_size {} is above the page size and needs a huge-page UMEM, but {}",
                p.frame_size, pages.note
            )));
        }
        umem.register(raw).map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::EINVAL) if p.frame_size > 4096 => {
                    " (this kernel does not take chunks above the page size)"
                }
                Some(libc::ENOBUFS | libc::ENOMEM | libc::EPERM) => {
                    " (locked-memory limit: raise RLIMIT_MEMLOCK or run with CAP_IPC_LOCK)"
                }
                _ => "",
            };
            AfXdpError::Io {
                context: format!(
                    "queue {q}: XDP_UMEM_REG of {frames} frames of {} B{hint}",
                    p.frame_size
                ),
                source: e,
            }
        })?;
        let fill_size = 2 * p.rx_frames;
        let comp_size = p.tx_frames.max(64).next_power_of_two();
        let set =
            |name, v: u32, what| setsockopt(raw, libc::SOL_XDP, name, &v).map_err(io_ctx(q, what));
        set(libc::XDP_UMEM_FILL_RING, fill_size, "XDP_UMEM_FILL_RING")?;
        set(
            libc::XDP_UMEM_COMPLETION_RING,
            comp_size,
            "XDP_UMEM_COMPLETION_RING",
        )?;
        set(libc::XDP_RX_RING, p.rx_frames, "XDP_RX_RING")?;
        if p.tx_frames > 0 {
            set(libc::XDP_TX_RING, p.tx_frames, "XDP_TX_RING")?;
        }
        // SAFETY: xdp_mmap_offsets is a C structure of u64s, valid for any
        // bit pattern.
        let (off, len) = unsafe {
            sys::getsockopt::<libc::xdp_mmap_offsets>(raw, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS)
        }
        .map_err(io_ctx(q, "XDP_MMAP_OFFSETS"))?;
        if len != std::mem::size_of::<libc::xdp_mmap_offsets>() {
            return Err(AfXdpError::NotUsable(format!(
                "kernel returned {len}-byte XDP_MMAP_OFFSETS (pre-5.4 layout without ring flags); need a newer kernel"
            )));
        }
        let map = |pgoff: u64, o: &libc::xdp_ring_offset, n: u32, entry: usize, what: &str| {
            let len = o.desc as usize + n as usize * entry;
            Mmap::new(
                len,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                Some(raw),
                pgoff as libc::off_t,
            )
            .map_err(io_ctx(q, what))
        };
        let fill = ProdRing::new(
            map(
                libc::XDP_UMEM_PGOFF_FILL_RING,
                &off.fr,
                fill_size,
                8,
                "mmap fill ring",
            )?,
            &off.fr,
            fill_size,
        )
        .map_err(io_ctx(q, "fill ring"))?;
        let comp = ConsRing::new(
            map(
                libc::XDP_UMEM_PGOFF_COMPLETION_RING,
                &off.cr,
                comp_size,
                8,
                "mmap completion ring",
            )?,
            &off.cr,
            comp_size,
        )
        .map_err(io_ctx(q, "completion ring"))?;
        let rx = ConsRing::new(
            map(
                libc::XDP_PGOFF_RX_RING as u64,
                &off.rx,
                p.rx_frames,
                16,
                "mmap RX ring",
            )?,
            &off.rx,
            p.rx_frames,
        )
        .map_err(io_ctx(q, "RX ring"))?;
        let tx = if p.tx_frames > 0 {
            Some(
                ProdRing::new(
                    map(
                        libc::XDP_PGOFF_TX_RING as u64,
                        &off.tx,
                        p.tx_frames,
                        16,
                        "mmap TX ring",
                    )?,
                    &off.tx,
                    p.tx_frames,
                )
                .map_err(io_ctx(q, "TX ring"))?,
            )
        } else {
            None
        };
        debug_assert_eq!(fill.size(), fill_size);

        let mut xsk = Xsk {
            fill,
            comp,
            rx,
            tx,
            umem,
            fd,
            queue: q,
            rx_frames: p.rx_frames,
            tx_frames: p.tx_frames,
            rx_free: (0..p.rx_frames).rev().collect(),
            tx_free: (p.rx_frames..frames).rev().collect(),
            bind: BindMode::Copy,
            need_wakeup: p.need_wakeup,
            busy_poll: p.busy_poll.is_some(),
            multi: None,
            stats: QueueStats::default(),
        };
        // Give the kernel every RX buffer before binding (the fill ring is
        // twice their number, so they all fit).
        xsk.refill();

        let (bind, mut bind_note, multi) = xsk.bind(p)?;
        xsk.bind = bind;
        if let Some(max_frame) = multi {
            let slot_chunks = max_frame.div_ceil(p.frame_size as usize) as u32;
            let slots = p.tx_frames / slot_chunks;
            // TX chunks go out in slots from now on, not one by one.
            xsk.tx_free.clear();
            xsk.multi = Some(MultiBuffer {
                max_frame,
                rx_frame: Vec::with_capacity(max_frame),
                rx_open: false,
                rx_dropping: false,
                slot_chunks,
                free_slots: (0..slots).rev().collect(),
                slot_out: vec![0; slots as usize],
            });
        }
        if let (Some(_), None) = (p.multi_buffer, multi) {
            bind_note.push_str("; multi-buffer bind refused, frames stay within one chunk");
        }

        let busy_poll = p
            .busy_poll
            .map(|(usecs, budget)| xsk.set_busy_poll(usecs, budget));
        if xsk.tx.is_some() && bind == BindMode::Copy {
            // Let one copy-mode kick send a whole ring (kernel ≥ 6.17; older
            // kernels send 32 per kick and we kick again).
            let _ = setsockopt(raw, libc::SOL_XDP, sys::XDP_MAX_TX_SKB_BUDGET, &p.tx_frames);
        }
        let report = QueueReport {
            queue: q,
            bind,
            bind_note,
            need_wakeup: p.need_wakeup,
            tx: p.tx_frames > 0,
            busy_poll,
            pages: pages.note,
        };
        Ok((xsk, report))
    }

    /// Binds with multi-buffer frames if asked (and, if the kernel refuses
    /// them, without); returns the mode, why, and the largest multi-buffer
    /// frame if they were accepted.
    fn bind(&mut self, p: &XskParams) -> Result<(BindMode, String, Option<usize>), AfXdpError> {
        if let Some(max_frame) = p.multi_buffer {
            match self.bind_modes(p, sys::XDP_USE_SG) {
                Ok((mode, note)) => return Ok((mode, note, Some(max_frame))),
                Err(AfXdpError::Io { source, .. })
                    if matches!(source.raw_os_error(), Some(libc::EINVAL | libc::EOPNOTSUPP)) => {}
                Err(e) => return Err(e),
            }
        }
        let (mode, note) = self.bind_modes(p, 0)?;
        Ok((mode, note, None))
    }

    /// Binds (with `extra` flags), trying zero-copy first unless forced or
    /// impossible.
    fn bind_modes(&mut self, p: &XskParams, extra: u16) -> Result<(BindMode, String), AfXdpError> {
        let wake = extra
            | if p.need_wakeup {
                libc::XDP_USE_NEED_WAKEUP
            } else {
                0
            };
        let try_zc = match p.force_bind {
            Some(BindMode::ZeroCopy) => true,
            Some(BindMode::Copy) => false,
            None => p.zero_copy_possible,
        };
        let mut note = match p.force_bind {
            Some(BindMode::Copy) => "copy mode forced by configuration".to_string(),
            _ if !try_zc => format!("copy mode: {}", p.zero_copy_why_not),
            _ => String::new(),
        };
        if try_zc {
            match self.bind_once(p, libc::XDP_ZEROCOPY | wake) {
                Ok(()) => {
                    return Ok((
                        BindMode::ZeroCopy,
                        "zero-copy bind accepted by the driver".into(),
                    ))
                }
                Err(e) if p.force_bind == Some(BindMode::ZeroCopy) => {
                    return Err(AfXdpError::Io {
                        context: format!("queue {}: zero-copy bind (forced)", p.queue),
                        source: e,
                    })
                }
                Err(e) => {
                    note = format!(
                        "zero-copy bind refused: {}{}; fell back to copy mode",
                        errno_name(&e),
                        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                            " (the driver has no AF_XDP zero-copy support)"
                        } else {
                            ""
                        }
                    );
                }
            }
        }
        self.bind_once(p, libc::XDP_COPY | wake)
            .map_err(|e| AfXdpError::Io {
                context: format!("queue {}: bind (copy mode)", p.queue),
                source: e,
            })?;
        Ok((BindMode::Copy, note))
    }

    /// One `bind`, retried while the queue is still busy from a previous
    /// owner.
    fn bind_once(&self, p: &XskParams, flags: u16) -> io::Result<()> {
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: flags,
            sxdp_ifindex: p.ifindex,
            sxdp_queue_id: p.queue,
            sxdp_shared_umem_fd: 0,
        };
        let start = Instant::now();
        loop {
            // SAFETY: `addr` is a valid sockaddr_xdp of the given length for
            // the duration of the call.
            let r = unsafe {
                libc::bind(
                    self.fd.as_raw_fd(),
                    (&addr as *const libc::sockaddr_xdp).cast(),
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed() < BIND_RETRY {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            return Err(e);
        }
    }

    fn set_busy_poll(&self, usecs: u32, budget: u32) -> String {
        let fd = self.fd.as_raw_fd();
        let mut failed = Vec::new();
        for (name, opt, v) in [
            ("SO_PREFER_BUSY_POLL", sys::SO_PREFER_BUSY_POLL, 1),
            ("SO_BUSY_POLL", sys::SO_BUSY_POLL, usecs as libc::c_int),
            (
                "SO_BUSY_POLL_BUDGET",
                sys::SO_BUSY_POLL_BUDGET,
                budget as libc::c_int,
            ),
        ] {
            if let Err(e) = setsockopt(fd, libc::SOL_SOCKET, opt, &v) {
                failed.push(format!("{name}: {}", errno_name(&e)));
            }
        }
        if failed.is_empty() {
            format!("on ({usecs} µs, budget {budget}, preferred)")
        } else {
            format!("partly refused ({})", failed.join(", "))
        }
    }

    /// The socket's descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Whether frames may span several chunks on this socket.
    pub(crate) fn is_multi_buffer(&self) -> bool {
        self.multi.is_some()
    }

    /// The queue index.
    pub(crate) fn queue(&self) -> u32 {
        self.queue
    }

    /// Whether this socket transmits.
    pub(crate) fn has_tx(&self) -> bool {
        self.tx.is_some()
    }

    /// Puts free RX chunks into the fill ring.
    fn refill(&mut self) {
        let want = self.rx_free.len() as u32;
        if want == 0 {
            return;
        }
        let room = self.fill.free(want).min(want);
        let mut n = 0;
        while n < room {
            let Some(c) = self.rx_free.pop() else { break };
            self.umem.give(c);
            self.fill.write(n, self.umem.addr(c));
            n += 1;
        }
        self.fill.submit(n);
        if n > 0 && self.need_wakeup && self.bind == BindMode::ZeroCopy && self.fill.needs_wakeup()
        {
            self.kick_rx();
        }
    }

    fn kick_rx(&mut self) {
        self.stats.rx_kicks += 1;
        let _ = sys::kick_rx(self.fd.as_raw_fd());
    }

    /// Shows up to `budget` received frames to `f` in place, then recycles
    /// their chunks. Returns the number of frames shown.
    pub(crate) fn rx(&mut self, budget: u32, f: &mut dyn FnMut(&[u8])) -> u32 {
        let mut n = self.rx.available(budget);
        if n == 0 {
            let wake =
                self.bind == BindMode::ZeroCopy && self.need_wakeup && self.fill.needs_wakeup();
            if !self.busy_poll && !wake {
                return 0;
            }
            // Busy polling: let the kernel run the device's NAPI now; or a
            // zero-copy driver asks to be woken to fill its RX queue.
            self.kick_rx();
            n = self.rx.available(budget);
            if n == 0 {
                return 0;
            }
        }
        let mut shown = 0;
        for i in 0..n {
            let d = self.rx.read(i);
            let more = d.options & sys::XDP_PKT_CONTD != 0;
            let Some(c) = self.umem.take(d.addr, d.len, 0..self.rx_frames) else {
                self.stats.rx_bad_desc += 1;
                // A frame missing a chunk cannot be shown.
                if let Some(m) = self.multi.as_mut() {
                    m.rx_dropping |= m.rx_open || more;
                    m.rx_open = more;
                }
                continue;
            };
            let bytes = self.umem.bytes(d.addr, d.len);
            match self.multi.as_mut() {
                // One chunk, one frame: shown in place.
                Some(MultiBuffer { rx_open: false, .. }) | None if !more => {
                    if let Some(bytes) = bytes {
                        f(bytes);
                        shown += 1;
                    }
                }
                // A chunk of a multi-buffer frame: assembled, shown after
                // its last chunk.
                Some(m) => {
                    if !m.rx_open {
                        m.rx_frame.clear();
                        m.rx_open = true;
                        m.rx_dropping = false;
                    }
                    match bytes {
                        Some(b) if m.rx_frame.len() + b.len() <= m.max_frame => {
                            m.rx_frame.extend_from_slice(b)
                        }
                        _ => m.rx_dropping = true,
                    }
                    if !more {
                        m.rx_open = false;
                        if m.rx_dropping {
                            self.stats.rx_oversized += 1;
                        } else {
                            f(&m.rx_frame);
                            shown += 1;
                            self.stats.rx_multi_frames += 1;
                        }
                    }
                }
                // The kernel marks chunks as continued only on sockets
                // bound for multi-buffer frames.
                None => self.stats.rx_bad_desc += 1,
            }
            self.rx_free.push(c);
        }
        self.rx.release(n);
        self.stats.rx_frames += u64::from(shown);
        self.refill();
        shown
    }

    /// Takes completed TX chunks back.
    fn reap(&mut self) {
        let n = self.comp.available(self.tx_frames.max(1));
        for i in 0..n {
            let addr = self.comp.read(i);
            match self
                .umem
                .take(addr, 0, self.rx_frames..self.rx_frames + self.tx_frames)
            {
                Some(c) => match self.multi.as_mut() {
                    // A slot is free again once all its chunks are back.
                    Some(m) => {
                        let s = ((c - self.rx_frames) / m.slot_chunks) as usize;
                        if let Some(out) = m.slot_out.get_mut(s) {
                            *out = out.saturating_sub(1);
                            if *out == 0 {
                                m.free_slots.push(s as u32);
                            }
                        }
                    }
                    None => self.tx_free.push(c),
                },
                None => self.stats.tx_bad_completion += 1,
            }
        }
        if n > 0 {
            self.comp.release(n);
        }
    }

    /// TX buffers free now (after reaping completions): chunks, or with
    /// multi-buffer frames whole TX slots (each takes a largest frame).
    pub(crate) fn tx_space(&mut self) -> u32 {
        self.reap();
        if let (Some(m), Some(t)) = (self.multi.as_ref(), self.tx.as_mut()) {
            return (t.free(m.slot_chunks) / m.slot_chunks).min(m.free_slots.len() as u32);
        }
        let free = self.tx_free.len() as u32;
        match self.tx.as_mut() {
            Some(t) => t.free(free).min(free),
            None => 0,
        }
    }

    /// Lends whole TX chunks to `f` until it returns `None` or buffers run
    /// out; `f` writes a frame at the chunk's start and returns its length
    /// (1..=chunk size; 0 ends the batch like `None`). Submits the batch
    /// and kicks the kernel. Returns the number of frames queued.
    pub(crate) fn tx(&mut self, f: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> io::Result<u32> {
        if self.multi.is_some() {
            return self.tx_multi(f);
        }
        let room = self.tx_space();
        let fs = self.umem.frame_size() as usize;
        let Some(tx) = self.tx.as_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        while n < room {
            let Some(&c) = self.tx_free.last() else { break };
            let Some(buf) = self.umem.chunk_mut(c) else {
                // Cannot happen: free chunks are ours. Drop it from the list.
                self.tx_free.pop();
                continue;
            };
            let len = match f(buf) {
                None | Some(0) => break,
                Some(len) => len.min(fs) as u32,
            };
            self.tx_free.pop();
            self.umem.give(c);
            tx.write(
                n,
                XdpDesc {
                    addr: self.umem.addr(c),
                    len,
                    options: 0,
                },
            );
            n += 1;
        }
        if n > 0 {
            tx.submit(n);
            self.stats.tx_frames += u64::from(n);
        }
        self.flush()?;
        Ok(n)
    }

    /// [`Xsk::tx`] for multi-buffer sockets: lends a free TX slot (the
    /// largest frame's worth of contiguous chunks) while the TX ring has
    /// room for a whole largest frame; each frame written there goes out
    /// as one descriptor per chunk it uses, all but the last marked as
    /// continued (no copy). Returns the number of frames queued.
    fn tx_multi(&mut self, f: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> io::Result<u32> {
        self.reap();
        let fs = self.umem.frame_size() as usize;
        let (Some(tx), Some(m)) = (self.tx.as_mut(), self.multi.as_mut()) else {
            return Ok(0);
        };
        let k = m.slot_chunks;
        let (mut frames, mut descs) = (0u32, 0u32);
        while tx.free(descs + k) >= descs + k {
            let Some(&slot) = m.free_slots.last() else {
                break;
            };
            let first = self.rx_frames + slot * k;
            let Some(buf) = self.umem.chunks_mut(first, k) else {
                // Cannot happen: a free slot's chunks are ours. Drop it.
                m.free_slots.pop();
                continue;
            };
            let len = match f(&mut buf[..m.max_frame]) {
                None | Some(0) => break,
                Some(len) => len.min(m.max_frame),
            };
            m.free_slots.pop();
            let used = len.div_ceil(fs) as u32;
            for j in 0..used {
                let c = first + j;
                self.umem.give(c);
                let piece = fs.min(len - j as usize * fs);
                tx.write(
                    descs,
                    XdpDesc {
                        addr: self.umem.addr(c),
                        len: piece as u32,
                        options: if j + 1 < used { sys::XDP_PKT_CONTD } else { 0 },
                    },
                );
                descs += 1;
            }
            m.slot_out[slot as usize] = used;
            frames += 1;
        }
        if descs > 0 {
            tx.submit(descs);
            self.stats.tx_frames += u64::from(frames);
        }
        self.flush()?;
        Ok(frames)
    }

    /// Makes sure the kernel is sending what the TX ring holds: kicks it
    /// with `sendto` when it asks (copy mode always asks).
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        for _ in 0..MAX_KICKS {
            let Some(tx) = self.tx.as_mut() else {
                return Ok(());
            };
            if tx.outstanding() == 0 || (self.need_wakeup && !tx.needs_wakeup()) {
                return Ok(());
            }
            self.stats.tx_kicks += 1;
            match sys::kick_tx(self.fd.as_raw_fd()) {
                Ok(()) => {}
                Err(e) => match e.raw_os_error() {
                    // Try again / a frame was dropped by the device / no
                    // skb right now: the ring keeps the rest.
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS) => {}
                    // The interface went down: frames stay queued; the
                    // protocol retransmits what is lost.
                    Some(libc::ENETDOWN) => {
                        self.stats.tx_kick_errors += 1;
                        return Ok(());
                    }
                    _ => {
                        self.stats.tx_kick_errors += 1;
                        return Err(e);
                    }
                },
            }
            self.reap();
            if self.bind == BindMode::ZeroCopy {
                // The driver sends asynchronously; one kick is enough.
                return Ok(());
            }
        }
        Ok(())
    }

    /// The kernel's counters for this socket (`XDP_STATISTICS`).
    pub(crate) fn kernel_stats(&self) -> io::Result<libc::xdp_statistics> {
        // SAFETY: xdp_statistics is a C structure of u64s.
        unsafe {
            sys::getsockopt::<libc::xdp_statistics>(self.fd(), libc::SOL_XDP, libc::XDP_STATISTICS)
        }
        .map(|(s, _)| s)
    }
}
