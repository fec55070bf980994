//! Sleeping until there is work: the blocking mode of the progress engine.
//!
//! A [`Waiter`] holds an epoll set with every method's readiness file
//! descriptor and a timerfd for the port's next deadline. Waiting arms the
//! timer (nanosecond resolution, unlike epoll_wait's milliseconds, which
//! matters for 20 µs delayed ACKs and sub-millisecond retransmission
//! timeouts) and sleeps in `epoll_wait` until a frame arrives or the timer
//! fires, so an idle endpoint burns no CPU.

use bcl_core::Time;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::Duration;

/// The descriptor of endpoints that have no epoll set of their own
/// (busy-polling on a caller's clock): an empty epoll set, never readable.
/// One per process, created by the first such endpoint's build.
static NEVER_READY: OnceLock<OwnedFd> = OnceLock::new();

/// [`NEVER_READY`], created if it is not yet.
pub(crate) fn never_ready() -> io::Result<BorrowedFd<'static>> {
    if let Some(fd) = NEVER_READY.get() {
        return Ok(fd.as_fd());
    }
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(to_io)?;
    // Two threads may race here: one set wins, the other's is closed.
    Ok(NEVER_READY.get_or_init(|| epoll.0).as_fd())
}

/// The epoll token of the timer; methods use their index.
const TIMER_TOKEN: u64 = u64::MAX;

/// The epoll token of sources added by [`Waiter::add_source`].
const EXTRA_TOKEN: u64 = u64::MAX - 1;

/// What ended a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A method's descriptor became readable.
    Ready,
    /// The timer fired (a protocol deadline or the caller's limit).
    Timer,
    /// Interrupted by a signal, or nothing in particular.
    Spurious,
}

/// An epoll set over the methods' descriptors plus a timer.
pub(crate) struct Waiter {
    epoll: Epoll,
    timer: TimerFd,
    /// Whether the timer is armed (a disarmed timer is not disarmed again).
    armed: bool,
    /// The instant [`Waiter::arm_at`] last armed the timer for, while that
    /// arming stands (any other arming or a drained expiration forgets it).
    armed_at: Option<Time>,
    events: Vec<EpollEvent>,
}

fn to_io(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl Waiter {
    /// A waiter over `fds` (the readiness descriptors of the endpoint's
    /// methods, which must stay open as long as the waiter is used).
    pub fn new(fds: &[RawFd]) -> io::Result<Waiter> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(to_io)?;
        for (i, &fd) in fds.iter().enumerate() {
            // SAFETY: `fd` is the open readiness descriptor of a method owned
            // by the same endpoint as this waiter; the borrow lasts only for
            // the epoll_ctl call, which does not keep a reference (epoll
            // forgets a descriptor by itself when it is closed).
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            epoll
                .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, i as u64))
                .map_err(to_io)?;
        }
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(to_io)?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER_TOKEN))
            .map_err(to_io)?;
        Ok(Waiter {
            epoll,
            timer,
            armed: false,
            armed_at: None,
            events: vec![EpollEvent::empty(); fds.len() + 1],
        })
    }

    /// Adds `fd` to the set: its readability wakes a wait too.
    pub fn add_source(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, EXTRA_TOKEN))
            .map_err(to_io)
    }

    /// The epoll set's descriptor: readable when a method's descriptor is
    /// or the timer has fired.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Arms the timer to fire after `timeout` (at least 1 ns), or disarms
    /// it (`None`). Either clears an expiration nobody read, so the set is
    /// readable again only for what comes next.
    pub fn arm(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.armed_at = None;
        match timeout {
            // A zero TimeSpec would disarm the timer: wait at least 1 ns.
            Some(t) => {
                self.timer
                    .set(
                        Expiration::OneShot(TimeSpec::from_duration(
                            t.max(Duration::from_nanos(1)),
                        )),
                        TimerSetTimeFlags::empty(),
                    )
                    .map_err(to_io)?;
                self.armed = true;
            }
            None if self.armed => {
                self.timer.unset().map_err(to_io)?;
                self.armed = false;
            }
            None => {}
        }
        Ok(())
    }

    /// Arms the timer to fire at `deadline` (`now` is the present on the
    /// same clock), unless it stands armed for that very instant already:
    /// an event loop's services see the same port deadline round after
    /// round, and re-arming it would cost a system call each time. A timer
    /// armed for `deadline` has not fired yet as long as `deadline` is
    /// still ahead, which is the only case a caller arms for.
    pub fn arm_at(&mut self, deadline: Time, now: Time) -> io::Result<()> {
        if self.armed && self.armed_at == Some(deadline) {
            return Ok(());
        }
        self.arm(Some(deadline.saturating_since(now)))?;
        self.armed_at = Some(deadline);
        Ok(())
    }

    /// Sleeps until a descriptor is readable or `timeout` has passed (no
    /// timeout: until a descriptor is readable).
    pub fn wait(&mut self, timeout: Option<Duration>) -> io::Result<Woken> {
        self.arm(timeout)?;
        let n = match self.epoll.wait(&mut self.events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(nix::Error::EINTR) => return Ok(Woken::Spurious),
            Err(e) => return Err(to_io(e)),
        };
        let mut woken = Woken::Spurious;
        for ev in &self.events[..n] {
            if ev.data() == TIMER_TOKEN {
                // Drain the expiration; the timer is now disarmed (one-shot).
                let _ = self.timer.wait();
                self.armed = false;
                self.armed_at = None;
                if woken == Woken::Spurious {
                    woken = Woken::Timer;
                }
            } else {
                woken = Woken::Ready;
            }
        }
        Ok(woken)
    }
}
