//! # bcl-core: the BCL protocol, without I/O
//!
//! This crate is the protocol of BCL as a state machine in the style of
//! quinn-proto and smoltcp: it is handed frames and the current time, and
//! hands back frames to send and the next deadline. It owns no sockets,
//! threads or clocks and makes no system call, which makes it deterministic,
//! testable over a simulated lossy wire in virtual time, and identical over
//! every transport method.
//!
//! - [`addr`]: nodes, ports, process addresses, job keys.
//! - [`wire`]: the frame header, parsing and encoding.
//! - [`port`]: the per-endpoint state machine: system channel, reliability,
//!   flow control, completion queues.
//! - [`method`]: the interface transport backends implement.
//! - [`lent`]: memory lent to a port for a transfer instead of moved in.
//! - [`seq`], [`sack`], [`rtt`], [`ring`]: the mechanisms the port is built
//!   from.

pub mod addr;
pub mod config;
pub mod event;
pub mod lent;
pub mod method;
pub mod port;
pub mod ring;
pub mod rtt;
pub mod sack;
pub mod seq;
pub mod stats;
pub mod time;
pub mod wire;

pub use addr::{JobKey, NodeId, PortId, ProcessAddr};
pub use config::{ConfigError, PortConfig};
pub use event::{
    ChannelEvent, ChannelId, Delivery, PeerEvent, RegionId, SendEvent, SendFailure, SendHandle,
    TransferError,
};
pub use method::{
    Attachment, Availability, Descriptor, DirectMethod, GatherSend, GatherSource, LinkId, Method,
    MethodCaps, MethodCounters, MethodError, MethodKind, NoGather, OpenSpec, ProbeResult, Route,
    RxSink, Scope, TxFrame,
};
pub use port::{
    ChannelError, CongestionCause, CongestionChange, CongestionConfig, CongestionInfo,
    CongestionMode, LivenessConfig, Port, RailInfo, RailState, Refused, ReleaseError, RouteError,
    SendError, MAX_RAILS,
};
pub use ring::RingSlot;
pub use stats::{BadFrames, PeerStats, PortStats};
pub use time::Time;
