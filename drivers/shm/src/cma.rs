//! Single-copy transfers between processes of one node: the receiver
//! reads the sender's memory with `process_vm_readv` (Linux's
//! cross-memory attach), straight into its own buffer.
//!
//! A large message through shared-memory rings is copied twice (into the
//! ring, out of it); through a [`Region`] once, by the kernel, with no
//! ring space used and no work for the sender, which only waits for the
//! receiver's word that it has read. The sender names the bytes by pid,
//! address and length, and by its start time: the reader checks that the
//! process with that pid is still the one that sent (a pid can be reused
//! after its process exits, and another PID namespace may give the number
//! to someone else), so it never reads a stranger's memory.
//!
//! Reading needs the permission to trace the sender (same user, and
//! `kernel.yama.ptrace_scope` at most 0 or 1 with a relationship, or
//! `CAP_SYS_PTRACE`); [`read`] reports `EPERM` otherwise, and callers fall
//! back to another way of moving the bytes.

use crate::proc::Watch;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{self, IoSliceMut};
use std::sync::{Mutex, OnceLock};

/// Bytes of a process's memory, named so another process can read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The owner's pid.
    pub pid: u32,
    /// The owner's start time (see [`crate::proc`]).
    pub start_time: u64,
    /// Address of the first byte in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Region {
    /// The `len` bytes at `addr` of this process. Naming them reads
    /// nothing; the owner promises they stay as they are until the reader
    /// says it is done.
    pub fn local(addr: usize, len: usize) -> io::Result<Region> {
        static START: OnceLock<u64> = OnceLock::new();
        let start_time = match START.get() {
            Some(t) => *t,
            None => {
                let t = crate::proc::self_start_time()?;
                *START.get_or_init(|| t)
            }
        };
        Ok(Region {
            pid: std::process::id(),
            start_time,
            addr: addr as u64,
            len: len as u64,
        })
    }
}

/// Reads the first `into.len()` bytes of `region` (at most its length)
/// into `into`; returns how many. Fails if the owner is gone (or another
/// process has its pid), with the kernel's error if the read is refused
/// (`EPERM`: no permission to read the owner; `EFAULT`: the owner no
/// longer maps those bytes).
pub fn read(region: &Region, into: &mut [u8]) -> io::Result<usize> {
    let want = into
        .len()
        .min(usize::try_from(region.len).unwrap_or(usize::MAX));
    if !still_there(region.pid, region.start_time) {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "process {} (started at tick {}) is gone",
                region.pid, region.start_time
            ),
        ));
    }
    let pid = Pid::from_raw(
        i32::try_from(region.pid)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?,
    );
    let base = usize::try_from(region.addr)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "address out of range"))?;
    let mut done = 0;
    // The kernel may stop short (a fault part-way, a signal): go on from
    // where it stopped until all is read or it reads nothing.
    while done < want {
        let mut local = [IoSliceMut::new(&mut into[done..want])];
        let remote = [RemoteIoVec {
            base: base + done,
            len: want - done,
        }];
        let n = process_vm_readv(pid, &mut local, &remote).map_err(io::Error::from)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("read {done} of {want} bytes from process {}", region.pid),
            ));
        }
        done += n;
    }
    Ok(done)
}

/// Whether the process (`pid`, `start_time`) is alive, so that `pid`
/// still names it. The first question about a process reads `/proc` and
/// opens a pidfd; later ones cost one `poll` on it (a live process keeps
/// its pid).
fn still_there(pid: u32, start_time: u64) -> bool {
    /// Watched owners; a process that exits is dropped at its next check.
    static WATCHED: Mutex<Vec<Watch>> = Mutex::new(Vec::new());
    /// Owners watched at most (a job's peers on one node).
    const MAX_WATCHED: usize = 4096;
    let mut w = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    let i = match w.iter().position(|x| x.is(pid, start_time)) {
        Some(i) => i,
        None => {
            if w.len() >= MAX_WATCHED {
                w.clear();
            }
            w.push(Watch::new(pid, start_time));
            w.len() - 1
        }
    };
    if w[i].is_dead() {
        w.swap_remove(i);
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_of_this_process_reads_back_and_a_stranger_is_refused() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let r = Region::local(src.as_ptr() as usize, src.len()).unwrap();
        let mut dst = vec![0u8; src.len()];
        assert_eq!(read(&r, &mut dst).unwrap(), src.len());
        assert_eq!(dst, src);
        // A shorter buffer reads a prefix.
        let mut part = [0u8; 10];
        assert_eq!(read(&r, &mut part).unwrap(), 10);
        assert_eq!(part, src[..10]);
        // Another start time: not the process that named the bytes.
        let stranger = Region {
            start_time: r.start_time + 1,
            ..r
        };
        assert_eq!(
            read(&stranger, &mut part).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
