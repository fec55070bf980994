//! The messages of the group layer and their encoding.
//!
//! Every message starts with a [`GroupHeader`]: version, kind, flags and the
//! **group number**, so that the groups two processes share travel over one
//! link between them and are told apart here (the Hybrid-Tree design's shared,
//! reference-counted unicast connection). The body depends on the kind and
//! is read with bounds-checked accessors: a message that is short, long,
//! of another version or of an unknown kind is a [`WireError`], which the
//! caller drops and counts. Nothing here panics on input bytes.
//!
//! | kind | from → to | body |
//! |---|---|---|
//! | `DATA` | member → tree link, or root → all (flag `MCAST`) | source, incarnation, sequence, view stamp, payload |
//! | `ACK` | member → tree link | (source, acknowledged-through) pairs |
//! | `HELLO` | member → new tree link | view version, reduce epoch sent up, (source, next expected) pairs |
//! | `ARRIVE`, `CONFIRM` | child → parent | barrier epoch reached by the subtree |
//! | `RELEASE` | root → all | barrier epoch released |
//! | `PART`, `RESULT` | child → parent, root → all | reduce epoch, operation, values |
//! | `JOIN_REQ`, `JOIN_REP` | process ↔ registry | group name (and number, agent) |
//! | `REGISTER`, `WELCOME`, `VIEW` | process ↔ agent | the view and the newcomer's starting point |
//! | `LEAVE_REQ`, `LEFT`, `LEAVE_NOTE` | process ↔ agent, process → registry | leaving |
//! | `HEARTBEAT`, `PROBE` | member ↔ agent | failure detection |
//! | `FAILED`, `AGENT_HB`, `AGENT_PROBE`, `GONE` | agent ↔ registry, registry → members | failure detection of members and agents |

use super::view::{SourceId, View, ViewEntry};
use super::GroupId;
use bcl_core::ProcessAddr;
use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Version of the group header; others are dropped and counted.
pub const VERSION: u8 = 1;

/// Flag: this copy came on the root's multicast, not on a tree link.
pub const MCAST: u8 = 1;

/// The fixed header of every group message.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct GroupHeader {
    /// [`VERSION`].
    pub version: u8,
    /// What follows (see the module documentation).
    pub kind: u8,
    /// [`MCAST`] or zero.
    pub flags: u8,
    /// Zero.
    pub reserved: u8,
    /// The group number; zero for messages to and from the registry that
    /// name no group yet.
    pub group: U32,
}

/// Bytes of [`GroupHeader`].
pub const HEADER_LEN: usize = std::mem::size_of::<GroupHeader>();

/// Longest group name.
pub const MAX_NAME: usize = 255;

mod kind {
    pub const DATA: u8 = 1;
    pub const ACK: u8 = 2;
    pub const HELLO: u8 = 3;
    pub const ARRIVE: u8 = 4;
    pub const RELEASE: u8 = 5;
    pub const CONFIRM: u8 = 6;
    pub const PART: u8 = 7;
    pub const RESULT: u8 = 8;
    pub const JOIN_REQ: u8 = 16;
    pub const JOIN_REP: u8 = 17;
    pub const REGISTER: u8 = 18;
    pub const WELCOME: u8 = 19;
    pub const VIEW: u8 = 20;
    pub const LEAVE_REQ: u8 = 21;
    pub const LEFT: u8 = 22;
    pub const LEAVE_NOTE: u8 = 23;
    pub const HEARTBEAT: u8 = 24;
    pub const PROBE: u8 = 25;
    pub const FAILED: u8 = 26;
    pub const AGENT_HB: u8 = 27;
    pub const AGENT_PROBE: u8 = 28;
    pub const GONE: u8 = 29;
}

/// The operation of a reduce, element-wise over vectors of `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Wrapping sum.
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl ReduceOp {
    fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
        }
    }

    fn from_code(c: u8) -> Option<ReduceOp> {
        match c {
            1 => Some(ReduceOp::Sum),
            2 => Some(ReduceOp::Min),
            3 => Some(ReduceOp::Max),
            _ => None,
        }
    }

    /// Folds `other` into `acc` element by element; a longer operand's
    /// tail is kept as it is (missing elements act as the identity).
    pub fn combine(self, acc: &mut Vec<u64>, other: &[u64]) {
        for (i, &x) in other.iter().enumerate() {
            match acc.get_mut(i) {
                Some(a) => {
                    *a = match self {
                        ReduceOp::Sum => a.wrapping_add(x),
                        ReduceOp::Min => (*a).min(x),
                        ReduceOp::Max => (*a).max(x),
                    }
                }
                None => acc.push(x),
            }
        }
    }
}

/// A group data message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Data {
    /// Who sent it (a member incarnation).
    pub source: SourceId,
    /// Its sequence number among the source's messages to the group.
    pub seq: u64,
    /// The view version the source was in when it sent it: members that
    /// joined at a later version do not deliver it.
    pub stamp: u32,
    /// The application's bytes.
    pub payload: Vec<u8>,
}

/// What a newcomer needs to start: the view and where each source stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The view that admits the newcomer.
    pub view: View,
    /// Per source, the first sequence number the newcomer is to receive:
    /// the root's next expected at admission.
    pub starts: Vec<(SourceId, u64)>,
    /// Barrier epochs already released by the root.
    pub barrier: u64,
    /// Reduce epochs already finished at the root.
    pub reduce: u64,
}

/// Sent on a tree link when it appears, by both ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sender's view version.
    pub version: u32,
    /// The last reduce epoch the sender passed up (what a new child need
    /// not resend).
    pub reduce_sent: u64,
    /// Per source, the sender's next expected sequence number: the other
    /// end resends what it retains from there.
    pub next: Vec<(SourceId, u64)>,
}

/// A group message, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Application data.
    Data(Data),
    /// Cumulative acknowledgements: for each source, every message below
    /// the number has reached every member on the sender's side of the
    /// link.
    Ack(Vec<(SourceId, u64)>),
    /// A new tree link's greeting.
    Hello(Hello),
    /// Barrier arrival: the sender's subtree reached this epoch.
    Arrive(u64),
    /// Barrier release (multicast by the root).
    Release(u64),
    /// Barrier confirmation: the sender's subtree left this epoch.
    Confirm(u64),
    /// A reduce's partial result of the sender's subtree.
    Part {
        /// The reduce epoch.
        epoch: u64,
        /// The operation.
        op: ReduceOp,
        /// The values.
        values: Vec<u64>,
    },
    /// A reduce's result (multicast by the root).
    Result {
        /// The reduce epoch.
        epoch: u64,
        /// The operation.
        op: ReduceOp,
        /// The values.
        values: Vec<u64>,
    },
    /// Process → registry: join the group of this name.
    JoinReq {
        /// The group's name.
        name: String,
    },
    /// Registry → process: the group's number (in the header) and agent.
    JoinRep {
        /// The group's name.
        name: String,
        /// The group agent's process.
        agent: ProcessAddr,
    },
    /// Process → agent: admit me.
    Register,
    /// Agent → newcomer.
    Welcome(Welcome),
    /// Agent → members: a new membership view.
    View(View),
    /// Member → agent: remove me.
    LeaveReq,
    /// Agent → member: you are out (`expelled` when declared failed).
    Left {
        /// Removed as failed rather than at its request.
        expelled: bool,
    },
    /// Member → registry: I left.
    LeaveNote,
    /// Member → agent: alive (also the answer to a probe).
    Heartbeat,
    /// Agent → member: are you alive?
    Probe,
    /// Agent → registry: this member was declared failed.
    Failed(ProcessAddr),
    /// Agent → registry: alive.
    AgentHeartbeat,
    /// Registry → agent: are you alive?
    AgentProbe,
    /// Registry → members: the group is gone (its agent failed or left).
    Gone,
}

/// A message with its header fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// The group number.
    pub group: GroupId,
    /// Came on the root's multicast.
    pub mcast: bool,
    /// The message.
    pub msg: Msg,
}

/// Why a message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its header or body says.
    #[error("group message truncated")]
    Short,
    /// Bytes after the body.
    #[error("{0} bytes after the body of a group message")]
    Trailing(usize),
    /// Another header version.
    #[error("group header version {0}, expected {VERSION}")]
    Version(u8),
    /// Unknown kind.
    #[error("unknown group message kind {0}")]
    Kind(u8),
    /// A field has a value that cannot be (unknown operation, name not
    /// UTF-8, flag other than 0 or 1).
    #[error("bad field in a group message: {0}")]
    Field(&'static str),
}

/// Bounds-checked reading of a body.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Short);
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn addr(&mut self) -> Result<ProcessAddr, WireError> {
        let node = self.u32()?;
        let port = self.u16()?;
        Ok(ProcessAddr::new(node, port))
    }
    fn source(&mut self) -> Result<SourceId, WireError> {
        let addr = self.addr()?;
        let inc = self.u32()?;
        Ok(SourceId { addr, inc })
    }
    /// A count of entries each at least `min` bytes long, checked against
    /// what is left so a forged count cannot make us allocate.
    fn count(&mut self, min: usize) -> Result<usize, WireError> {
        let n = usize::from(self.u16()?);
        if n.saturating_mul(min) > self.b.len() {
            return Err(WireError::Short);
        }
        Ok(n)
    }
    fn pairs(&mut self) -> Result<Vec<(SourceId, u64)>, WireError> {
        let n = self.count(18)?;
        (0..n).map(|_| Ok((self.source()?, self.u64()?))).collect()
    }
    fn values(&mut self) -> Result<Vec<u64>, WireError> {
        let n = self.count(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn name(&mut self) -> Result<String, WireError> {
        let n = usize::from(self.u8()?);
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| WireError::Field("name is not UTF-8"))
    }
    fn op(&mut self) -> Result<ReduceOp, WireError> {
        ReduceOp::from_code(self.u8()?).ok_or(WireError::Field("unknown reduce operation"))
    }
    fn view(&mut self) -> Result<View, WireError> {
        let version = self.u32()?;
        let n = self.count(11)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let member = self.addr()?;
            let inc = self.u32()?;
            let parent = match self.u8()? {
                0 => None,
                1 => Some(self.addr()?),
                _ => return Err(WireError::Field("parent flag")),
            };
            entries.push(ViewEntry {
                member,
                inc,
                parent,
            });
        }
        Ok(View { version, entries })
    }
    fn end(&self) -> Result<(), WireError> {
        match self.b.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(n)),
        }
    }
}

/// Appending fields in network byte order.
struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_be_bytes());
    }
    fn addr(&mut self, a: ProcessAddr) {
        self.u32(a.node.0);
        self.u16(a.port.0);
    }
    fn source(&mut self, s: SourceId) {
        self.addr(s.addr);
        self.u32(s.inc);
    }
    /// Entry counts are u16 on the wire; longer lists are cut (the
    /// callers keep them far below that).
    fn count(&mut self, n: usize) -> usize {
        let n = n.min(usize::from(u16::MAX));
        self.u16(n as u16);
        n
    }
    fn pairs(&mut self, p: &[(SourceId, u64)]) {
        let n = self.count(p.len());
        for &(s, v) in &p[..n] {
            self.source(s);
            self.u64(v);
        }
    }
    fn values(&mut self, v: &[u64]) {
        let n = self.count(v.len());
        for &x in &v[..n] {
            self.u64(x);
        }
    }
    fn name(&mut self, s: &str) {
        let mut n = s.len().min(MAX_NAME);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.u8(n as u8);
        self.out.extend_from_slice(&s.as_bytes()[..n]);
    }
    fn view(&mut self, v: &View) {
        self.u32(v.version);
        let n = self.count(v.entries.len());
        for e in &v.entries[..n] {
            self.addr(e.member);
            self.u32(e.inc);
            match e.parent {
                None => self.u8(0),
                Some(p) => {
                    self.u8(1);
                    self.addr(p);
                }
            }
        }
    }
}

impl Packet {
    /// Parses `bytes`, checking version, kind, every length and field.
    pub fn parse(bytes: &[u8]) -> Result<Packet, WireError> {
        let (h, rest) = GroupHeader::ref_from_prefix(bytes).map_err(|_| WireError::Short)?;
        if h.version != VERSION {
            return Err(WireError::Version(h.version));
        }
        if h.flags & !MCAST != 0 {
            return Err(WireError::Field("flags"));
        }
        let mut r = Reader { b: rest };
        let msg = match h.kind {
            kind::DATA => {
                let source = r.source()?;
                let seq = r.u64()?;
                let stamp = r.u32()?;
                let payload = std::mem::take(&mut r.b).to_vec();
                Msg::Data(Data {
                    source,
                    seq,
                    stamp,
                    payload,
                })
            }
            kind::ACK => Msg::Ack(r.pairs()?),
            kind::HELLO => Msg::Hello(Hello {
                version: r.u32()?,
                reduce_sent: r.u64()?,
                next: r.pairs()?,
            }),
            kind::ARRIVE => Msg::Arrive(r.u64()?),
            kind::RELEASE => Msg::Release(r.u64()?),
            kind::CONFIRM => Msg::Confirm(r.u64()?),
            kind::PART | kind::RESULT => {
                let epoch = r.u64()?;
                let op = r.op()?;
                let values = r.values()?;
                if h.kind == kind::PART {
                    Msg::Part { epoch, op, values }
                } else {
                    Msg::Result { epoch, op, values }
                }
            }
            kind::JOIN_REQ => Msg::JoinReq { name: r.name()? },
            kind::JOIN_REP => {
                let agent = r.addr()?;
                Msg::JoinRep {
                    name: r.name()?,
                    agent,
                }
            }
            kind::REGISTER => Msg::Register,
            kind::WELCOME => {
                let view = r.view()?;
                let barrier = r.u64()?;
                let reduce = r.u64()?;
                let starts = r.pairs()?;
                Msg::Welcome(Welcome {
                    view,
                    starts,
                    barrier,
                    reduce,
                })
            }
            kind::VIEW => Msg::View(r.view()?),
            kind::LEAVE_REQ => Msg::LeaveReq,
            kind::LEFT => Msg::Left {
                expelled: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Field("expelled flag")),
                },
            },
            kind::LEAVE_NOTE => Msg::LeaveNote,
            kind::HEARTBEAT => Msg::Heartbeat,
            kind::PROBE => Msg::Probe,
            kind::FAILED => Msg::Failed(r.addr()?),
            kind::AGENT_HB => Msg::AgentHeartbeat,
            kind::AGENT_PROBE => Msg::AgentProbe,
            kind::GONE => Msg::Gone,
            k => return Err(WireError::Kind(k)),
        };
        r.end()?;
        Ok(Packet {
            group: GroupId(h.group.get()),
            mcast: h.flags & MCAST != 0,
            msg,
        })
    }

    /// Writes the encoded packet into `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        let k = match &self.msg {
            Msg::Data(_) => kind::DATA,
            Msg::Ack(_) => kind::ACK,
            Msg::Hello(_) => kind::HELLO,
            Msg::Arrive(_) => kind::ARRIVE,
            Msg::Release(_) => kind::RELEASE,
            Msg::Confirm(_) => kind::CONFIRM,
            Msg::Part { .. } => kind::PART,
            Msg::Result { .. } => kind::RESULT,
            Msg::JoinReq { .. } => kind::JOIN_REQ,
            Msg::JoinRep { .. } => kind::JOIN_REP,
            Msg::Register => kind::REGISTER,
            Msg::Welcome(_) => kind::WELCOME,
            Msg::View(_) => kind::VIEW,
            Msg::LeaveReq => kind::LEAVE_REQ,
            Msg::Left { .. } => kind::LEFT,
            Msg::LeaveNote => kind::LEAVE_NOTE,
            Msg::Heartbeat => kind::HEARTBEAT,
            Msg::Probe => kind::PROBE,
            Msg::Failed(_) => kind::FAILED,
            Msg::AgentHeartbeat => kind::AGENT_HB,
            Msg::AgentProbe => kind::AGENT_PROBE,
            Msg::Gone => kind::GONE,
        };
        let h = GroupHeader {
            version: VERSION,
            kind: k,
            flags: if self.mcast { MCAST } else { 0 },
            reserved: 0,
            group: U32::new(self.group.0),
        };
        out.extend_from_slice(h.as_bytes());
        let mut w = Writer { out };
        match &self.msg {
            Msg::Data(d) => {
                w.source(d.source);
                w.u64(d.seq);
                w.u32(d.stamp);
                w.out.extend_from_slice(&d.payload);
            }
            Msg::Ack(p) => w.pairs(p),
            Msg::Hello(h) => {
                w.u32(h.version);
                w.u64(h.reduce_sent);
                w.pairs(&h.next);
            }
            Msg::Arrive(e) | Msg::Release(e) | Msg::Confirm(e) => w.u64(*e),
            Msg::Part { epoch, op, values } | Msg::Result { epoch, op, values } => {
                w.u64(*epoch);
                w.u8(op.code());
                w.values(values);
            }
            Msg::JoinReq { name } => w.name(name),
            Msg::JoinRep { name, agent } => {
                w.addr(*agent);
                w.name(name);
            }
            Msg::Welcome(wl) => {
                w.view(&wl.view);
                w.u64(wl.barrier);
                w.u64(wl.reduce);
                w.pairs(&wl.starts);
            }
            Msg::View(v) => w.view(v),
            Msg::Left { expelled } => w.u8(u8::from(*expelled)),
            Msg::Failed(a) => w.addr(*a),
            Msg::Register
            | Msg::LeaveReq
            | Msg::LeaveNote
            | Msg::Heartbeat
            | Msg::Probe
            | Msg::AgentHeartbeat
            | Msg::AgentProbe
            | Msg::Gone => {}
        }
    }

    /// The encoded packet in a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(n: u32) -> SourceId {
        SourceId {
            addr: ProcessAddr::new(n, 1),
            inc: n + 10,
        }
    }

    fn all() -> Vec<Msg> {
        let view = View {
            version: 9,
            entries: vec![
                ViewEntry {
                    member: ProcessAddr::new(1, 0),
                    inc: 1,
                    parent: None,
                },
                ViewEntry {
                    member: ProcessAddr::new(2, 0),
                    inc: 4,
                    parent: Some(ProcessAddr::new(1, 0)),
                },
            ],
        };
        vec![
            Msg::Data(Data {
                source: s(3),
                seq: u64::MAX - 1,
                stamp: 7,
                payload: b"payload".to_vec(),
            }),
            Msg::Ack(vec![(s(1), 5), (s(2), 0)]),
            Msg::Hello(Hello {
                version: 3,
                reduce_sent: 2,
                next: vec![(s(4), 8)],
            }),
            Msg::Arrive(3),
            Msg::Release(4),
            Msg::Confirm(5),
            Msg::Part {
                epoch: 1,
                op: ReduceOp::Sum,
                values: vec![1, 2, 3],
            },
            Msg::Result {
                epoch: 1,
                op: ReduceOp::Max,
                values: vec![],
            },
            Msg::JoinReq {
                name: "grüppe".into(),
            },
            Msg::JoinRep {
                name: "g".into(),
                agent: ProcessAddr::new(5, 6),
            },
            Msg::Register,
            Msg::Welcome(Welcome {
                view: view.clone(),
                starts: vec![(s(1), 3)],
                barrier: 2,
                reduce: 1,
            }),
            Msg::View(view),
            Msg::LeaveReq,
            Msg::Left { expelled: true },
            Msg::LeaveNote,
            Msg::Heartbeat,
            Msg::Probe,
            Msg::Failed(ProcessAddr::new(8, 0)),
            Msg::AgentHeartbeat,
            Msg::AgentProbe,
            Msg::Gone,
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for (i, msg) in all().into_iter().enumerate() {
            let p = Packet {
                group: GroupId(i as u32 + 1),
                mcast: i % 2 == 0,
                msg,
            };
            assert_eq!(Packet::parse(&p.to_bytes()), Ok(p));
        }
    }

    #[test]
    fn truncated_and_padded_messages_are_errors() {
        for msg in all() {
            let b = Packet {
                group: GroupId(1),
                mcast: false,
                msg: msg.clone(),
            }
            .to_bytes();
            for cut in 0..b.len() {
                // DATA's payload is the rest: any cut after its fixed part
                // is a shorter payload, not an error.
                if matches!(msg, Msg::Data(_)) && cut >= HEADER_LEN + 22 {
                    continue;
                }
                assert!(Packet::parse(&b[..cut]).is_err(), "{msg:?} cut at {cut}");
            }
            if !matches!(msg, Msg::Data(_)) {
                let mut long = b.clone();
                long.push(0);
                assert_eq!(Packet::parse(&long), Err(WireError::Trailing(1)));
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Packet::parse(&bytes);
        }

        #[test]
        fn arbitrary_bodies_never_panic(k in 0u8..40, body in proptest::collection::vec(any::<u8>(), 0..120)) {
            let mut b = vec![VERSION, k, 0, 0, 0, 0, 0, 1];
            b.extend(body);
            let _ = Packet::parse(&b);
        }
    }
}
