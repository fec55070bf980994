//! Failures inside a collective: every member of a busy communicator is
//! watched, and a member's death fails the communicator's collectives at
//! every other member.
//!
//! A step of a collective waits on one member at a time, and that member
//! may be alive and itself waiting on the dead one: in a barrier of four,
//! rank 2 waits on rank 3 while rank 0 waits on rank 2. When rank 3 dies,
//! rank 2's wait fails and it leaves the barrier; rank 0 would wait on
//! rank 2 for ever. So, while a communicator has a collective in progress,
//! this process marks every member critical in the port (liveness pings a
//! silent one and declares it dead after the bound), and an operation
//! fails, naming the dead member, as soon as any member of its
//! communicator (or of the communicator a hierarchical call runs for) is
//! found failed. Every survivor thus gets the error itself, within the
//! liveness bound, with no message about the failure exchanged; a new
//! collective on a communicator with a failed member fails at once (shrink
//! it to the survivors first: [`super::Coll::shrink`]).
//!
//! Watching costs a pass over the members when a communicator becomes
//! busy. So that back-to-back collectives do not pay it every call, a
//! communicator that goes idle stays watched for [`UNWATCH_AFTER`]; after
//! that its members are watched only while something is outstanding with
//! them, and a member busy elsewhere for long is not taken for dead.

use super::messenger::Messenger;
use super::Comm;
use crate::ProcessAddr;
use bcl_core::Time;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How long an idle communicator's members stay watched.
pub const UNWATCH_AFTER: Duration = Duration::from_millis(20);

/// Busy-polling rounds between two looks at the clock for idle
/// communicators to unwatch (a blocking round looks every time).
const TRIM_ROUNDS: u32 = 256;

struct Watched {
    members: Arc<[ProcessAddr]>,
    /// Operations (and blocking calls) in progress on the communicator.
    users: u32,
    /// Since when it has none.
    idle_since: Option<Time>,
}

/// The communicators whose members this process watches.
#[derive(Default)]
pub(super) struct MemberWatch {
    comms: HashMap<u32, Watched>,
    /// Communicators with no user, waiting for [`UNWATCH_AFTER`].
    idle: usize,
    rounds: u32,
    /// Failures seen by the last [`MemberWatch::failures_changed`].
    failures_seen: u64,
}

impl MemberWatch {
    /// An operation on `comm` starts: its members are watched.
    pub fn enter(&mut self, comm: &Comm, msg: &mut Messenger) {
        if comm.size() <= 1 {
            return;
        }
        let w = self.comms.entry(comm.id()).or_insert_with(|| {
            msg.watch_members(comm.members());
            Watched {
                members: comm.members_arc(),
                users: 0,
                idle_since: None,
            }
        });
        if w.idle_since.take().is_some() {
            self.idle -= 1;
        }
        w.users += 1;
    }

    /// An operation on communicator `id` ended.
    pub fn leave(&mut self, id: u32, msg: &Messenger) {
        let Some(w) = self.comms.get_mut(&id) else {
            return;
        };
        w.users = w.users.saturating_sub(1);
        if w.users == 0 && w.idle_since.is_none() {
            w.idle_since = Some(msg.endpoint().now());
            self.idle += 1;
        }
    }

    /// Unwatches communicators idle for [`UNWATCH_AFTER`] (a look at the
    /// clock every [`TRIM_ROUNDS`] calls while busy-polling).
    pub fn trim(&mut self, msg: &mut Messenger, blocking: bool) {
        if self.idle == 0 {
            return;
        }
        self.rounds = self.rounds.wrapping_add(1);
        if !blocking && !self.rounds.is_multiple_of(TRIM_ROUNDS) {
            return;
        }
        let now = msg.endpoint().now();
        let mut done = Vec::new();
        for (&id, w) in &self.comms {
            if w.idle_since.is_some_and(|t| now - t >= UNWATCH_AFTER) {
                done.push(id);
            }
        }
        for id in done {
            if let Some(w) = self.comms.remove(&id) {
                msg.unwatch_members(&w.members);
                self.idle -= 1;
            }
        }
    }

    /// Whether a peer failed since the last call (one comparison).
    pub fn failures_changed(&mut self, msg: &Messenger) -> bool {
        let now = msg.failure_count();
        let changed = now != self.failures_seen;
        self.failures_seen = now;
        changed
    }
}
