//! Operator commands a running endpoint takes from outside: detach a node
//! from the job, bring it back.
//!
//! The commands come from another thread (the job's control feed, see
//! [`crate::cluster::control`]) through an [`AdminSender`]; the endpoint
//! owns the [`AdminInbox`] and applies what waits there at the start of its
//! next progress round. The inbox costs a progress round one relaxed load
//! while nothing waits, and its wake descriptor is in the endpoint's wait
//! set, so a blocked endpoint wakes for a command at once.

use bcl_core::NodeId;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What an operator asks of the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// Cut node off (see [`bcl_core::Port::detach_node`]); the endpoint's
    /// own node isolates it from all others.
    Detach(NodeId),
    /// Bring the node back (see [`bcl_core::Port::rejoin_node`]).
    Rejoin(NodeId),
}

struct Shared {
    queue: Mutex<VecDeque<AdminCommand>>,
    pending: AtomicBool,
}

/// The sending half: any thread hands commands to the endpoint.
pub struct AdminSender {
    shared: Arc<Shared>,
    wake: UnixStream,
}

/// The endpoint's half (see [`crate::Endpoint::set_admin_inbox`]).
pub struct AdminInbox {
    shared: Arc<Shared>,
    wake: UnixStream,
}

/// A connected sender and inbox.
pub fn admin_channel() -> std::io::Result<(AdminSender, AdminInbox)> {
    let (tx, rx) = UnixStream::pair()?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(VecDeque::new()),
        pending: AtomicBool::new(false),
    });
    Ok((
        AdminSender {
            shared: shared.clone(),
            wake: tx,
        },
        AdminInbox { shared, wake: rx },
    ))
}

impl AdminSender {
    /// Queues `command` and wakes the endpoint.
    pub fn send(&self, command: AdminCommand) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(command);
        self.shared.pending.store(true, Ordering::Release);
        // A full wake buffer already wakes the endpoint: nothing is lost
        // if this byte is not written.
        let _ = (&self.wake).write(&[1]);
    }
}

impl AdminInbox {
    /// Whether commands wait (one relaxed load).
    #[inline]
    pub fn pending(&self) -> bool {
        self.shared.pending.load(Ordering::Relaxed)
    }

    /// Takes every waiting command, in order, and drains the wake bytes.
    pub fn take(&self) -> Vec<AdminCommand> {
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.shared.pending.store(false, Ordering::Relaxed);
        q.drain(..).collect()
    }

    /// The descriptor readable while commands wait (for the wait set).
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_arrive_in_order_and_the_wake_descriptor_follows_them() {
        let (tx, rx) = admin_channel().unwrap();
        assert!(!rx.pending());
        assert!(rx.take().is_empty());
        tx.send(AdminCommand::Detach(NodeId(2)));
        tx.send(AdminCommand::Rejoin(NodeId(2)));
        assert!(rx.pending());
        let readable = |rx: &AdminInbox| {
            use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
            let mut fds = [PollFd::new(rx.wake_fd(), PollFlags::POLLIN)];
            poll(&mut fds, PollTimeout::ZERO).unwrap() == 1
        };
        assert!(readable(&rx));
        assert_eq!(
            rx.take(),
            vec![
                AdminCommand::Detach(NodeId(2)),
                AdminCommand::Rejoin(NodeId(2))
            ]
        );
        assert!(!rx.pending());
        assert!(!readable(&rx));
    }
}
