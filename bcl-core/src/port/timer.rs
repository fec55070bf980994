//! Timers: retransmission timeouts, reorder checks, delayed
//! acknowledgements and ring-full back-off, one lazily maintained heap entry
//! per peer; the transfer-stall watchdog and the liveness check are
//! port-wide.
//!
//! A peer's deadlines change often (every acknowledgement restarts the
//! retransmission timer), so the heap is not updated on every change. Each
//! peer remembers the earliest instant it has an entry for; a new entry is
//! pushed only when a deadline moves earlier. When an entry fires, the peer
//! handles whatever is due and re-arms for its next deadline; an entry that
//! no longer matches the peer's armed instant is stale and skipped.

use super::peer::PeerIdx;
use super::Port;
use crate::time::Time;
use std::cmp::Reverse;

impl Port {
    /// The earliest instant at which [`Port::handle_timeout`] has work, if
    /// any. May be early (a deadline moved later); never late.
    pub fn poll_timeout(&self) -> Option<Time> {
        let peer_timer = self.timers.peek().map(|Reverse((t, _))| *t);
        // The stall check is a watchdog over arriving transfers and remote
        // reads: with none left it has nothing to do, and counting it
        // would keep a port that is done (a flush before exit) waiting for
        // half the transfer timeout.
        let watching = !self.rx_transfers.is_empty() || !self.get_waits.is_empty();
        let stall = (watching && self.stall_check_at != Time::NEVER).then_some(self.stall_check_at);
        [peer_timer, stall, self.liveness_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Drops the entries at the front of the timer heap that no longer
    /// stand for a deadline (an acknowledgement carried by a reply, a
    /// retransmission timer restarted by an ACK) and re-arms those peers
    /// for their real next deadline, so that [`Port::poll_timeout`] is not
    /// early because of them.
    ///
    /// For whoever sleeps until that instant: a stale entry costs a
    /// wake-up for nothing, and a kernel timer armed a few microseconds
    /// ahead is itself costly (29 µs for a timerfd 20 µs ahead in this
    /// project's VM, against 0.5 µs for one milliseconds ahead). The
    /// entries are left in place while the port is busy (handle_timeout
    /// meets them when their time comes), so this costs nothing per frame.
    pub fn drop_stale_timers(&mut self) {
        while let Some(&Reverse((t, idx))) = self.timers.peek() {
            let p = &self.peers[idx as usize];
            if p.timer_armed != t {
                self.timers.pop();
                continue;
            }
            if p.next_deadline().min(self.rails_deadline(idx)) <= t {
                break;
            }
            // Nothing of this peer is due at `t`: what handle_timeout would
            // do then, without the wait.
            self.timers.pop();
            self.peers[idx as usize].timer_armed = Time::NEVER;
            self.arm_timer(idx);
            self.recycle_windows(idx);
        }
    }

    /// Runs everything due at `now`: retransmission timeouts, delayed
    /// acknowledgements, the end of ring-full back-offs.
    pub fn handle_timeout(&mut self, now: Time) {
        self.check_stalled_transfers(now);
        if self.liveness_at.min(self.liveness_verdict_at) <= now {
            self.check_liveness(now);
        }
        while let Some(&Reverse((t, idx))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let p = &mut self.peers[idx as usize];
            if p.timer_armed != t {
                continue;
            }
            p.timer_armed = Time::NEVER;
            if p.ack_deadline <= now {
                p.ack_deadline = Time::NEVER;
                if p.rx_known {
                    p.ack_now = true;
                }
            }
            if p.reorder.deadline <= now {
                self.detect_losses(idx, now);
            }
            let p = &mut self.peers[idx as usize];
            if p.rto_deadline <= now {
                if p.una != p.next_seq && !p.reliable {
                    self.on_retransmission_timeout(idx, now);
                } else {
                    self.peers[idx as usize].rto_deadline = Time::NEVER;
                }
            }
            let p = &mut self.peers[idx as usize];
            if p.busy_until != Time::ZERO && p.busy_until <= now {
                p.busy_until = Time::ZERO;
            }
            self.schedule(idx, now);
            self.arm_timer(idx);
            self.recycle_windows(idx);
        }
        self.start_channel_sends(now);
    }

    /// Makes sure a heap entry exists for peer `idx`'s next deadline.
    pub(super) fn arm_timer(&mut self, idx: PeerIdx) {
        let next = self.peers[idx as usize]
            .next_deadline()
            .min(self.rails_deadline(idx));
        let p = &mut self.peers[idx as usize];
        if next < p.timer_armed {
            p.timer_armed = next;
            self.timers.push(Reverse((next, idx)));
        }
    }
}
