//! The doorbell: how a sleeping process is woken by another process.
//!
//! Every mailbox binds a Unix datagram socket next to its segment
//! (`/dev/shm/bcl-JOB-NODE-PORT.bell`, mode 0600). A peer that must wake it
//! (see [`crate::bell`] for *when*) sends it one byte with `MSG_DONTWAIT`;
//! the sleeper waits in `epoll` on the socket and drains it when it wakes.
//!
//! Why a socket and not a futex or an eventfd: the progress engine's
//! blocking mode sleeps in `epoll` on the file descriptors of all its
//! methods at once (network sockets, AF_XDP rings, MSI-X eventfds), so the
//! shared-memory method must also be an fd; a futex cannot be waited on
//! together with fds. An eventfd would be an fd, but another process can
//! only obtain it with `pidfd_getfd` (needs ptrace permission over the
//! target, which Yama or a container often denies) or by `SCM_RIGHTS` over
//! a rendezvous socket (a handshake needing the sleeper's cooperation). A
//! bound datagram socket needs neither: any process of the same user can
//! send to it by path, the path's mode keeps other users out, a full
//! socket buffer (`EAGAIN`) just means a wake-up is already pending, and
//! `ECONNREFUSED` tells the sender that the owner is gone. The cost, one
//! `sendto` system call, is paid only when the receiver is actually asleep.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= sa.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} is too long", path.display()),
        ));
    }
    for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((sa, len as libc::socklen_t))
}

fn dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; returns a new fd or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The receiving end: a bound, non-blocking datagram socket.
#[derive(Debug)]
pub(crate) struct Doorbell {
    fd: OwnedFd,
    path: PathBuf,
}

impl Doorbell {
    /// Binds the doorbell at `path` (replacing a stale socket file there;
    /// the caller owns the name) and restricts it to the owner.
    pub(crate) fn bind(path: &Path) -> io::Result<Doorbell> {
        let fd = dgram_socket()?;
        let (sa, len) = sockaddr(path)?;
        let _ = std::fs::remove_file(path);
        // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(Doorbell {
            fd,
            path: path.to_owned(),
        })
    }

    /// The fd to wait on (readable when rung).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Reads and discards every pending ring.
    pub(crate) fn drain(&self) {
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reads at most buf.len() bytes into buf.
            let r = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r < 0 {
                break;
            }
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What happened when ringing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rang {
    /// The byte was queued, or a wake-up was already pending.
    Ok,
    /// Nobody is bound there any more: the owner closed or died.
    Gone,
}

/// The sending end, connected to one peer's doorbell.
#[derive(Debug)]
pub(crate) struct Ringer {
    fd: OwnedFd,
}

impl Ringer {
    /// Connects to the doorbell at `path`.
    pub(crate) fn connect(path: &Path) -> io::Result<Ringer> {
        let fd = dgram_socket()?;
        let (sa, len) = sockaddr(path)?;
        // SAFETY: `sa` is a valid sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                &sa as *const _ as *const libc::sockaddr,
                len,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Ringer { fd })
    }

    /// Sends one byte, without blocking and without SIGPIPE.
    pub(crate) fn ring(&self) -> Rang {
        let b = [1u8];
        // SAFETY: sends one byte from a valid buffer.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                b.as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            return Rang::Ok;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR) => Rang::Ok,
            _ => Rang::Gone,
        }
    }
}

/// The doorbell path that belongs to segment path `seg`.
pub(crate) fn path_for(seg: &Path) -> PathBuf {
    let mut s = seg.as_os_str().to_owned();
    s.push(OsStr::new(".bell"));
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_wakes_and_gone_is_reported() {
        let path = std::env::temp_dir().join(format!("bcl-shm-bell-test-{}", std::process::id()));
        let bell = Doorbell::bind(&path).unwrap();
        let r = Ringer::connect(&path).unwrap();
        for _ in 0..1000 {
            assert_eq!(r.ring(), Rang::Ok); // EAGAIN when full is still Ok
        }
        let mut p = libc::pollfd {
            fd: bell.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 1);
        bell.drain();
        // SAFETY: as above.
        assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
        drop(bell);
        assert!(!path.exists());
        // The kernel may take a moment to free the dead socket's queue (a
        // send can see EAGAIN, which counts as "pending", until then).
        let mut gone = false;
        for _ in 0..1000 {
            if r.ring() == Rang::Gone {
                gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(gone);
    }
}
