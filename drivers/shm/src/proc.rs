//! Process identity and liveness: pid plus start time, and pidfds.
//!
//! A pid alone does not name a process for long: after it exits the kernel
//! may give the number to a new process. The pair (pid, start time) does:
//! the start time (field 22 of `/proc/PID/stat`, clock ticks since boot)
//! of the new process differs. Segment headers and directory entries
//! record both, and a process counts as dead when `/proc/PID` is gone, is a
//! zombie, or has another start time.
//!
//! For a peer we keep talking to, `Watch` also holds a pidfd
//! (`pidfd_open`, Linux 5.3+): it becomes readable when the process exits,
//! so checking costs one `poll` and the fd can sit in an epoll set to wake
//! a sleeping process when the peer dies. The pidfd is opened *after*
//! reading the pid, then the start time is checked again, so a pid reused
//! in between is caught.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// State and start time of process `pid` from `/proc/PID/stat`, or `None`
/// if there is no such process.
pub fn stat(pid: u32) -> io::Result<Option<(char, u64)>> {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => parse_stat(&s).map(Some).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unparsable /proc/{pid}/stat"),
            )
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Parses state (field 3) and start time (field 22) of a `/proc/PID/stat`
/// line. The command name (field 2) may contain spaces and parentheses, so
/// parsing starts after the last `)`.
pub(crate) fn parse_stat(s: &str) -> Option<(char, u64)> {
    let rest = &s[s.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 are 18 fields; field 22 follows.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The start time of the calling process.
pub fn self_start_time() -> io::Result<u64> {
    let s = fs::read_to_string("/proc/self/stat")?;
    parse_stat(&s)
        .map(|(_, t)| t)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/self/stat"))
}

/// Whether the process (`pid`, `start`) is alive: it exists, is not a
/// zombie, and has that start time. Errors reading `/proc` other than
/// "no such process" count as alive (never remove what we cannot judge).
pub fn is_alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    match stat(pid) {
        Ok(None) => false,
        Ok(Some((state, t))) => t == start && state != 'Z' && state != 'X',
        Err(_) => true,
    }
}

/// A process we keep checking on (see the module documentation).
#[derive(Debug)]
pub(crate) struct Watch {
    pid: u32,
    start: u64,
    pidfd: Option<OwnedFd>,
    dead: bool,
}

impl Watch {
    /// Starts watching (`pid`, `start`). If the process is already gone the
    /// watch reports it dead at once.
    pub(crate) fn new(pid: u32, start: u64) -> Watch {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or
        // -1; no memory is passed.
        let fd =
            unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_long, 0 as libc::c_long) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: the syscall returned a fresh fd that nothing else owns.
            unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
        });
        // Checked after opening the pidfd: if the pid was reused before the
        // open, the start time differs now.
        let dead = !is_alive(pid, start);
        Watch {
            pid,
            start,
            pidfd,
            dead,
        }
    }

    /// Whether it watches (`pid`, `start`).
    pub(crate) fn is(&self, pid: u32, start: u64) -> bool {
        self.pid == pid && self.start == start
    }

    /// The watched pid.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The pidfd, if the kernel gave one (for an epoll set).
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.pidfd.as_ref().map(|f| f.as_raw_fd())
    }

    /// Whether the process has exited. One `poll` on the pidfd, or a read
    /// of `/proc` without one. Once dead, always dead.
    pub(crate) fn is_dead(&mut self) -> bool {
        if self.dead {
            return true;
        }
        self.dead = match &self.pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd, timeout 0.
                let r = unsafe { libc::poll(&mut p, 1, 0) };
                r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            }
            None => !is_alive(self.pid, self.start),
        };
        self.dead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_command_names() {
        let line = "1234 (a b) c)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) S 1 2"), None);
    }

    #[test]
    fn self_is_alive_and_wrong_start_is_not() {
        let me = std::process::id();
        let t = self_start_time().unwrap();
        assert!(is_alive(me, t));
        assert!(!is_alive(me, t + 1));
        assert!(!is_alive(0, t));
        let mut w = Watch::new(me, t);
        assert!(!w.is_dead());
        let mut w = Watch::new(me, t + 1);
        assert!(w.is_dead());
    }

    #[test]
    fn exited_child_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let (_, start) = stat(pid).unwrap().unwrap_or(('Z', 0));
        let mut w = Watch::new(pid, start);
        child.wait().unwrap();
        assert!(w.is_dead());
        assert!(!is_alive(pid, start));
    }
}
