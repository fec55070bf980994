//! Requests: point-to-point messages and collectives in progress, and what
//! their completion leaves in the program's buffers and statuses.

use crate::abi::*;
use crate::cmem::CBuf;
use crate::datatype::{Type, TypeInfo};
use crate::error::{MpiError, MpiResult};
use bcl::coll::messenger::{Envelope, Incoming, Messenger, Received, RecvBuffer, RecvId, SendId};
use bcl::coll::{Coll, Comm, Request as CollRequest};
use bcl::core::lent::{LentBytes, LentBytesMut};
use bcl::ProcessAddr;
use std::ffi::c_int;
use std::sync::OnceLock;

/// What a completed operation reports (its status).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Sender's rank (receives).
    pub source: c_int,
    /// Message tag (receives).
    pub tag: c_int,
    /// Wire bytes received.
    pub bytes: usize,
    /// Why it failed, if it did.
    pub error: Option<MpiError>,
    /// Whether it was cancelled.
    pub cancelled: bool,
}

impl Completion {
    /// A successful operation with nothing to report (sends, collectives).
    pub fn empty() -> Completion {
        Completion {
            source: MPI_ANY_SOURCE,
            tag: MPI_ANY_TAG,
            bytes: 0,
            error: None,
            cancelled: false,
        }
    }

    /// A receive from `MPI_PROC_NULL`.
    pub fn proc_null() -> Completion {
        Completion {
            source: MPI_PROC_NULL,
            ..Completion::empty()
        }
    }

    /// A failed operation.
    pub fn failed(e: MpiError) -> Completion {
        Completion {
            error: Some(e),
            ..Completion::empty()
        }
    }

    /// The status a C program sees.
    pub fn status(&self) -> MPI_Status {
        MPI_Status {
            count_lo: self.bytes as u32 as c_int,
            count_hi_and_cancelled: (((self.bytes >> 32) as c_int) << 1)
                | c_int::from(self.cancelled),
            MPI_SOURCE: self.source,
            MPI_TAG: self.tag,
            MPI_ERROR: self.error.as_ref().map_or(MPI_SUCCESS, |e| e.class),
        }
    }
}

/// Bytes a status reports.
pub fn status_bytes(s: &MPI_Status) -> usize {
    (s.count_lo as u32 as usize) | (((s.count_hi_and_cancelled as u32 >> 1) as usize) << 32)
}

/// Where a collective's output goes: blocks of `t` elements at element
/// displacements in `buf`, filled from the output in order.
#[derive(Debug)]
pub struct Unpack {
    /// The receive buffer.
    pub buf: CBuf,
    /// Its datatype.
    pub t: Type,
    /// (displacement, count) in elements, in output order.
    pub blocks: Vec<(usize, usize)>,
}

impl Unpack {
    /// Nothing to write.
    pub fn none() -> Unpack {
        static EMPTY: OnceLock<TypeInfo> = OnceLock::new();
        let t = EMPTY.get_or_init(|| TypeInfo {
            size: 0,
            extent: 0,
            lb: 0,
            runs: Vec::new(),
            basic: None,
            committed: true,
        });
        Unpack {
            buf: CBuf::EMPTY,
            t: Type::Static(t),
            blocks: Vec::new(),
        }
    }

    /// `count` elements at the start of `buf`.
    pub fn whole(buf: CBuf, t: Type, count: usize) -> Unpack {
        Unpack {
            buf,
            t,
            blocks: vec![(0, count)],
        }
    }

    /// Writes `out` into the blocks.
    pub fn write(&mut self, out: &[u8]) -> MpiResult {
        let wire = self.t.wire();
        let need: usize = self.blocks.iter().map(|b| b.1 * wire).sum();
        if out.len() < need {
            return Err(MpiError::new(
                MPI_ERR_INTERN,
                format!(
                    "a result of {} bytes for {need} bytes of receive blocks",
                    out.len()
                ),
            ));
        }
        let mut at = 0;
        for &(displ, n) in &self.blocks {
            let bytes = n * wire;
            let start = displ * self.t.extent;
            let mem = &mut self.buf.bytes_mut()[start..];
            if self.t.contiguous() {
                mem[..bytes].copy_from_slice(&out[at..at + bytes]);
            } else {
                self.t.unpack(&out[at..at + bytes], mem);
            }
            at += bytes;
        }
        Ok(())
    }
}

/// An operation in progress or done.
#[derive(Debug)]
pub enum Pending {
    /// A message on its way; `bsend` bytes of the attached buffer held.
    Send {
        /// The messenger's send.
        id: SendId,
        /// Bytes of the attached buffer it holds (buffered sends).
        bsend: usize,
        /// The program's bytes of a message offered for the receiver to
        /// read in place, in case it cannot and they must be sent
        /// ([`Messenger::supply`](bcl::coll::messenger::Messenger::supply)).
        region: CBuf,
        /// The destination's rank (its failure is named by it).
        to: usize,
    },
    /// A receive posted.
    Recv {
        /// The messenger's receive.
        id: RecvId,
        /// Where the message goes.
        buf: CBuf,
        /// Its datatype.
        t: Type,
        /// How many elements fit.
        count: usize,
        /// How the status names the sender.
        source: Source,
    },
    /// A collective.
    Coll {
        /// The collective's request.
        req: CollRequest,
        /// Where its output goes.
        out: Unpack,
    },
    /// Complete; waiting to be waited on or tested.
    Done(Completion),
}

impl Pending {
    /// The completion of the operation if it is done (its results are then
    /// in the program's buffers). Makes no progress itself, except a
    /// collective's test; `bsend_in_use` gives back a buffered send's room.
    pub fn poll(&mut self, coll: &mut Coll, bsend_in_use: &mut usize) -> Option<Completion> {
        Some(match self {
            Pending::Done(c) => c.clone(),
            Pending::Send {
                id,
                bsend,
                region,
                to,
            } => {
                let m = coll.messenger();
                if !region.is_empty() && m.needs_data(*id) {
                    if let Err(e) = m.supply(*id, region.bytes()) {
                        return Some(Completion::failed(e.naming_rank(|_| Some(*to)).into()));
                    }
                }
                let r = m.take_send(*id)?;
                *bsend_in_use -= std::mem::take(bsend);
                match r {
                    Ok(()) => Completion::empty(),
                    Err(e) => Completion::failed(e.naming_rank(|_| Some(*to)).into()),
                }
            }
            Pending::Recv {
                id,
                buf,
                t,
                count,
                source,
            } => land(coll.messenger(), id, buf, t, *count, |a| source.rank(a))?,
            Pending::Coll { req, out } => match coll.test(req) {
                Ok(None) => return None,
                Ok(Some(bytes)) => match out.write(&bytes) {
                    Ok(()) => Completion::empty(),
                    Err(e) => Completion::failed(e),
                },
                Err(e) => Completion::failed(e.into()),
            },
        })
    }
}

#[derive(Debug)]
struct Entry {
    pending: Pending,
    /// Its communicator (errors go to its handler); `MPI_COMM_NULL`: the
    /// handler of the call that completes it.
    comm: MPI_Comm,
    /// Freed by `MPI_Request_free`: dropped once complete.
    freed: bool,
}

/// The requests of a process.
#[derive(Debug, Default)]
pub struct Requests {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    /// Bytes of the attached buffer held by buffered sends in progress.
    pub bsend_in_use: usize,
    /// Requests freed while in progress (what `sweep` looks for).
    freed: usize,
}

impl Requests {
    /// Registers an operation on communicator `comm`; gives its handle.
    pub fn add(&mut self, pending: Pending, comm: MPI_Comm) -> MPI_Request {
        let e = Some(Entry {
            pending,
            comm,
            freed: false,
        });
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = e;
                i
            }
            None => {
                self.slots.push(e);
                self.slots.len() - 1
            }
        };
        direct(KIND_REQUEST, i)
    }

    /// The slot of handle `h`.
    pub fn index(&self, h: MPI_Request) -> MpiResult<usize> {
        match decode(h) {
            (0b10, KIND_REQUEST, i) if self.slots.get(i).is_some_and(Option::is_some) => Ok(i),
            _ => Err(MpiError::new(
                MPI_ERR_REQUEST,
                format!("{:#x} is not an active request", h as u32),
            )),
        }
    }

    /// Moves operation `i` to `Done` if it has completed; returns whether it
    /// is done. Makes no progress itself, except a collective's test.
    pub fn try_complete(&mut self, i: usize, coll: &mut Coll) -> bool {
        let Some(Some(entry)) = self.slots.get_mut(i) else {
            return true;
        };
        if matches!(entry.pending, Pending::Done(_)) {
            return true;
        }
        let Some(mut done) = entry.pending.poll(coll, &mut self.bsend_in_use) else {
            return false;
        };
        if entry.comm != MPI_COMM_NULL {
            done.error = done.error.map(|e| e.on(entry.comm));
        }
        if entry.freed {
            self.slots[i] = None;
            self.free.push(i);
            self.freed -= 1;
        } else {
            entry.pending = Pending::Done(done);
        }
        true
    }

    /// Takes the completion of operation `i` if it is done (the request is
    /// then gone).
    pub fn take(&mut self, i: usize) -> Option<Completion> {
        match self.slots.get(i) {
            Some(Some(Entry {
                pending: Pending::Done(_),
                ..
            })) => {}
            _ => return None,
        }
        let entry = self.slots[i].take()?;
        self.free.push(i);
        match entry.pending {
            Pending::Done(c) => Some(c),
            _ => None,
        }
    }

    /// The pending state of operation `i`.
    pub fn pending_mut(&mut self, i: usize) -> Option<&mut Pending> {
        self.slots.get_mut(i)?.as_mut().map(|e| &mut e.pending)
    }

    /// `MPI_Request_free`: the program no longer waits for `i`; it is
    /// dropped once complete.
    pub fn release(&mut self, i: usize) {
        if let Some(Some(e)) = self.slots.get_mut(i) {
            if matches!(e.pending, Pending::Done(_)) {
                self.slots[i] = None;
                self.free.push(i);
            } else {
                e.freed = true;
                self.freed += 1;
            }
        }
    }

    /// Completes what can be completed among requests nobody waits for
    /// (freed ones), so their resources go.
    pub fn sweep(&mut self, coll: &mut Coll) {
        if self.freed == 0 {
            return;
        }
        for i in 0..self.slots.len() {
            if self.slots[i].as_ref().is_some_and(|e| e.freed) {
                self.try_complete(i, coll);
            }
        }
    }
}

/// Puts what receive `id` got into the receive buffer (`count` elements
/// of `t`), or `None` while it is not complete. A receive posted with the
/// buffer ([`UserBuffer`]) finds its message there already.
pub fn land(
    m: &mut Messenger,
    id: &mut RecvId,
    buf: &mut CBuf,
    t: &TypeInfo,
    count: usize,
    rank_of: impl Fn(ProcessAddr) -> c_int,
) -> Option<Completion> {
    Some(match m.take_incoming(*id)? {
        Ok(Incoming::Data(r)) => {
            let source = rank_of(r.from);
            let done = deliver(&r, buf, t, count, source);
            // Large messages' buffers are the messenger's to reuse: a
            // fresh one would fault in every page again.
            m.give_back(r.data);
            done
        }
        Ok(Incoming::Landed(e)) => {
            let source = rank_of(e.from);
            copied(e, count * t.wire(), count, source)
        }
        Err(e) => Completion::failed(
            e.naming_rank(|peer| usize::try_from(rank_of(peer)).ok())
                .into(),
        ),
    })
}

/// How a receive's status names the sender's rank.
#[derive(Debug)]
pub enum Source {
    /// Posted for one rank: the status names it, no lookup (and no shared
    /// communicator held, whose reference counts are locked instructions).
    Rank(c_int),
    /// Posted for any source: the sender's address looked up in the
    /// communicator.
    Any(Comm),
}

impl Source {
    /// The rank of the sender at `from`.
    pub fn rank(&self, from: ProcessAddr) -> c_int {
        match self {
            Source::Rank(r) => *r,
            Source::Any(c) => rank_in(c, from),
        }
    }
}

/// The rank of `from` in `c` (`MPI_ANY_SOURCE` if it is no member).
pub fn rank_in(c: &Comm, from: ProcessAddr) -> c_int {
    c.rank_of(from).map_or(MPI_ANY_SOURCE, |r| r as c_int)
}

/// The first `len` bytes of a contiguous receive buffer, for the messenger
/// to write a message into as soon as it matches.
pub struct UserBuffer {
    /// The buffer.
    pub buf: CBuf,
    /// Bytes of it to fill (the receive's count of elements).
    pub len: usize,
}

impl RecvBuffer for UserBuffer {
    fn bytes(&mut self) -> &mut [u8] {
        &mut self.buf.bytes_mut()[..self.len]
    }

    /// Kept for the next receive: it only points into the program's
    /// memory, and every receive sets it anew.
    fn reusable(&self) -> bool {
        true
    }

    /// Lent: the port writes a large message straight into the program's
    /// buffer, which MPI's contract keeps valid and untouched until the
    /// receive completes (when the port has given it back).
    fn lend(&mut self) -> Option<Box<dyn LentBytesMut>> {
        Some(Box::new(UserBuffer {
            buf: self.buf,
            len: self.len,
        }))
    }
}

impl LentBytes for UserBuffer {
    fn bytes(&self) -> &[u8] {
        &self.buf.bytes()[..self.len]
    }
}

impl LentBytesMut for UserBuffer {
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf.bytes_mut()[..self.len]
    }
}

/// The status of a message copied into a receive of `count` elements
/// (`cap` bytes): its envelope, and a truncation error if it was longer.
pub fn copied(e: Envelope, cap: usize, count: usize, source: c_int) -> Completion {
    let tag = c_int::try_from(e.tag).unwrap_or(MPI_ANY_TAG);
    let error = (e.len > cap).then(|| {
        MpiError::new(
            MPI_ERR_TRUNCATE,
            format!(
                "a message of {} bytes from rank {source} (tag {tag}) does not fit a receive of {count} elements ({cap} bytes)",
                e.len
            ),
        )
    });
    Completion {
        source,
        tag,
        bytes: e.len.min(cap),
        error,
        cancelled: false,
    }
}

/// Puts received message `r` into the receive buffer: as much as fits, and
/// a truncation error if it did not all fit.
pub fn deliver(
    r: &Received,
    buf: &mut CBuf,
    t: &TypeInfo,
    count: usize,
    source: c_int,
) -> Completion {
    let tag = c_int::try_from(r.tag).unwrap_or(MPI_ANY_TAG);
    let cap = count * t.wire();
    let n = r.data.len().min(cap);
    if t.contiguous() {
        buf.bytes_mut()[..n].copy_from_slice(&r.data[..n]);
    } else {
        t.unpack(&r.data[..n], buf.bytes_mut());
    }
    let error = (r.data.len() > cap).then(|| {
        MpiError::new(
            MPI_ERR_TRUNCATE,
            format!(
                "a message of {} bytes from rank {source} (tag {tag}) does not fit a receive of {count} elements ({cap} bytes)",
                r.data.len()
            ),
        )
    });
    Completion {
        source,
        tag,
        bytes: n,
        error,
        cancelled: false,
    }
}
