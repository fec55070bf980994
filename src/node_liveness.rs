//! Liveness shared by the job's processes of one node, over the node's
//! liveness board in shared memory (`bcl_shm::NodeBoard`): the endpoint's
//! side of `bcl_core::port::node` (one heartbeat per node pair).
//!
//! The board keeps times in nanoseconds of `CLOCK_MONOTONIC`, the same
//! for every process of the host; the port's times count from its
//! endpoint's start, so this module converts with the offset it measured
//! when it was made. This node's live ports are read from `/proc` at most
//! every [`LOCAL_VIEW_REUSE`], however many pings ask.

use bcl_core::port::node::{LivePorts, NodeLiveness};
use bcl_core::{JobKey, NodeId, ProcessAddr, Time};
use bcl_shm::NodeBoard;
use std::path::Path;
use std::time::Duration;

/// How long a reading of this node's live ports is reused.
const LOCAL_VIEW_REUSE: Duration = Duration::from_millis(10);

/// Nanoseconds of `CLOCK_MONOTONIC` now.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// This process's registration on its node's board.
pub(crate) struct BoardLiveness {
    board: NodeBoard,
    me: ProcessAddr,
    pid: u32,
    /// `CLOCK_MONOTONIC` ns at port time zero.
    origin_ns: i128,
    local: Option<(Time, LivePorts)>,
}

impl BoardLiveness {
    /// Registers process `me` of job `job` on its node's board in `dir`
    /// (made if it is not there); `now` is the port's time now.
    pub(crate) fn open(
        dir: &Path,
        job: JobKey,
        me: ProcessAddr,
        now: Time,
    ) -> Result<BoardLiveness, bcl_shm::ShmError> {
        let board = NodeBoard::open(dir, &bcl_shm::node_board_name(job, me.node.0))?;
        let pid = std::process::id();
        let start = bcl_shm::proc::self_start_time().map_err(|e| bcl_shm::ShmError::Io {
            context: "reading this process's start time".into(),
            source: e,
        })?;
        board.register(me.port.0, pid, start);
        let origin_ns = i128::from(monotonic_ns()) - i128::from(now.as_nanos());
        Ok(BoardLiveness {
            board,
            me,
            pid,
            origin_ns,
            local: None,
        })
    }

    fn board_ns(&self, t: Time) -> u64 {
        (self.origin_ns + i128::from(t.as_nanos())).max(0) as u64
    }

    fn port_time(&self, ns: u64) -> Time {
        Time::from_nanos((i128::from(ns) - self.origin_ns).max(0) as u64)
    }
}

impl NodeLiveness for BoardLiveness {
    fn local_live(&mut self, now: Time) -> LivePorts {
        match self.local {
            Some((at, live)) if now.saturating_since(at) < LOCAL_VIEW_REUSE => live,
            _ => {
                let live = self.board.live_ports();
                self.local = Some((now, live));
                live
            }
        }
    }

    fn view(&self, node: NodeId, _now: Time) -> Option<(Time, LivePorts)> {
        self.board
            .view(node.0)
            .map(|v| (self.port_time(v.at_ns), v.live))
    }

    fn set_view(&mut self, node: NodeId, live: LivePorts, now: Time) {
        self.board.set_view(node.0, live, self.board_ns(now));
    }

    fn take_ping(&mut self, node: NodeId, now: Time, period: Duration, port: u16) -> bool {
        self.board
            .take_ping(node.0, self.board_ns(now), period.as_nanos() as u64, port)
    }

    fn unanswered(&self, node: NodeId) -> Option<u16> {
        self.board.unanswered(node.0)
    }
}

impl Drop for BoardLiveness {
    fn drop(&mut self) {
        self.board.unregister(self.me.port.0, self.pid);
        // The last process of the job on this node removes the file.
        if !self.board.anyone_left() {
            self.board.unlink();
        }
    }
}
