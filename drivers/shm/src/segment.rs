//! Segments: one shared-memory file per process, and their cleanup.
//!
//! A process's segment is `DIR/bcl-JOB-NODE-PORT` (`DIR` is `/dev/shm`
//! by default; `JOB` is the job key in 8 hex digits), mode 0600, created
//! with `O_EXCL` by its owner and unlinked when the owner closes. Peers map
//! it read-write on first contact, after checking magic, version, the
//! owner's identity and that the geometry in the header matches the
//! offsets and the file size.
//!
//! Stale segments: a segment whose owner died without closing stays in
//! `/dev/shm`. [`cleanup_stale`] (run by every mailbox when it opens) removes
//! every `bcl-*` segment whose owner is dead: its pid is gone, a zombie, or
//! now belongs to a process with another start time (pid reuse). A live
//! owner's segment is kept; so is anything that is not ours to judge
//! (other users' files, which the sticky `/dev/shm` would not let us
//! remove anyway).
//!
//! Creation, the staleness check and the removal all happen under an
//! exclusive `flock` on `DIR/bcl-lock-UID`, so a cleaner can never remove a
//! segment that a new owner just created under the same name (the lock
//! dies with its holder, so a crash cannot leave it held).

use crate::layout::{
    HeaderData, Layout, BELL_OFF, PAGE, STATE_CLOSED, STATE_INIT, STATE_OFF, STATE_READY,
};
use crate::sync::{AtomicU32, Ordering};
use crate::ShmError;
use bcl_core::{JobKey, ProcessAddr};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The file name of the segment of `addr` in job `job`.
pub fn segment_name(job: JobKey, addr: ProcessAddr) -> String {
    format!("bcl-{:08x}-{}-{}", job.0, addr.node.0, addr.port.0)
}

/// Whether `name` looks like a segment name (`bcl-XXXXXXXX-N-P`).
fn is_segment_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("bcl-") else {
        return false;
    };
    let mut parts = rest.split('-');
    let (Some(job), Some(node), Some(port), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    job.len() == 8
        && u32::from_str_radix(job, 16).is_ok()
        && node.parse::<u32>().is_ok()
        && port.parse::<u16>().is_ok()
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

pub(crate) fn open_raw(p: &Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let c = cpath(p)?;
    // SAFETY: `c` is a NUL-terminated path; open returns a new fd or -1.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the shared file `path` read-write, or creates it (mode 0600)
/// with `len` zero bytes if it is not there; the caller holds the
/// directory's [`DirLock`], so a file that exists was made whole by
/// another process. Returns the descriptor and whether it was created; the
/// caller checks an existing file's length.
pub(crate) fn create_or_open(path: &Path, len: usize) -> Result<(OwnedFd, bool), ShmError> {
    let io = |context: String| move |source: io::Error| ShmError::Io { context, source };
    let (fd, created) = match open_raw(path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600) {
        Ok(fd) => (fd, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
            open_raw(path, libc::O_RDWR, 0).map_err(io(format!("opening {}", path.display())))?,
            false,
        ),
        Err(e) => return Err(io(format!("creating {}", path.display()))(e)),
    };
    if created {
        // SAFETY: ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            let e = io::Error::last_os_error();
            let _ = std::fs::remove_file(path);
            return Err(io(format!("sizing {} to {len} bytes", path.display()))(e));
        }
    }
    Ok((fd, created))
}

pub(crate) fn file_len(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: fstat writes into a valid, zero-initialised stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd and buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

/// The per-user lock that serialises creation and cleanup in one directory
/// (segments, and the statistics pages of [`crate::stats_page`]).
pub(crate) struct DirLock {
    _fd: OwnedFd,
}

impl DirLock {
    pub(crate) fn acquire(dir: &Path) -> io::Result<DirLock> {
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        let fd = open_raw(
            &dir.join(format!("bcl-lock-{uid}")),
            libc::O_RDWR | libc::O_CREAT,
            0o600,
        )?;
        loop {
            // SAFETY: flock on a valid fd.
            if unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(DirLock { _fd: fd });
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// A shared mapping, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is shared memory accessed through atomics and raw
// copies only; the pointer itself may move between threads.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd` (opened read-write) shared and
    /// writable.
    pub(crate) fn map(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        Self::map_shared(fd, len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// Maps the first `len` bytes of `fd` (opened read-only) read-only and
    /// shared: a reader's view of memory another process writes.
    pub(crate) fn map_read_only(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        Self::map_shared(fd, len, libc::PROT_READ)
    }

    fn map_shared(fd: &OwnedFd, len: usize, prot: libc::c_int) -> io::Result<Mapping> {
        // SAFETY: mapping `len` bytes of a file we opened, MAP_SHARED, with
        // the protection the file was opened for, at an address the kernel
        // chooses; the result is checked. A read-only mapping is never
        // written through.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: p.cast(), len })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The mapping's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; nothing uses the
        // memory afterwards (views into it die with their owners first).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A mapped segment, our own or a peer's.
#[derive(Debug)]
pub(crate) struct Segment {
    map: Mapping,
    layout: Layout,
    header: HeaderData,
    path: PathBuf,
    owner: bool,
}

impl Segment {
    /// Creates and initialises our own segment at `dir/name` (under the
    /// directory lock, removing a stale segment of that name first).
    /// `init` runs on the zero-filled mapping before the segment is marked
    /// ready.
    pub(crate) fn create(
        dir: &Path,
        job: JobKey,
        addr: ProcessAddr,
        layout: Layout,
        init: impl FnOnce(&Segment),
    ) -> Result<Segment, ShmError> {
        let path = dir.join(segment_name(job, addr));
        let io = |context: String| move |source: io::Error| ShmError::Io { context, source };
        let _lock = DirLock::acquire(dir).map_err(io(format!("locking {}", dir.display())))?;
        if let Some(h) = read_header(&path).map_err(io(format!("reading {}", path.display())))? {
            match judge(&h) {
                Verdict::Alive => {
                    return Err(ShmError::AddressInUse {
                        path,
                        pid: h.owner_pid,
                    })
                }
                Verdict::Stale => remove_files(&path),
            }
        }
        let start = crate::proc::self_start_time().map_err(io("reading /proc/self/stat".into()))?;
        let fd = open_raw(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600)
            .map_err(io(format!("creating {}", path.display())))?;
        let fail = |e: ShmError| {
            let _ = std::fs::remove_file(&path);
            e
        };
        // SAFETY: ftruncate on our fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), layout.total_len as libc::off_t) } != 0 {
            return Err(fail(ShmError::Io {
                context: format!("sizing {} to {} bytes", path.display(), layout.total_len),
                source: io::Error::last_os_error(),
            }));
        }
        let map = Mapping::map(&fd, layout.total_len as usize).map_err(|e| {
            fail(ShmError::Io {
                context: format!("mapping {}", path.display()),
                source: e,
            })
        })?;
        let header = layout.header(std::process::id(), start, job.0, addr.node.0, addr.port.0);
        // SAFETY: the mapping is at least one page long and page-aligned, so
        // HeaderData (104 bytes, 8-aligned) fits at offset 0; nobody else
        // can see the segment yet (state is still INIT).
        unsafe { std::ptr::write_volatile(map.ptr() as *mut HeaderData, header) };
        let seg = Segment {
            map,
            layout,
            header,
            path,
            owner: true,
        };
        init(&seg);
        seg.state().store(STATE_READY, Ordering::Release);
        Ok(seg)
    }

    /// Maps the peer segment at `dir/name` and validates it. `expect` is the
    /// job and address the peer must have.
    pub(crate) fn open(dir: &Path, job: JobKey, addr: ProcessAddr) -> Result<Segment, ShmError> {
        let path = dir.join(segment_name(job, addr));
        let bad = |reason: String| ShmError::BadSegment {
            path: path.clone(),
            reason,
        };
        let fd = match open_raw(&path, libc::O_RDWR, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ShmError::NoSuchPeer { addr, path })
            }
            Err(e) => {
                return Err(ShmError::Io {
                    context: format!("opening {}", path.display()),
                    source: e,
                })
            }
        };
        let len = file_len(&fd).map_err(|e| ShmError::Io {
            context: format!("sizing {}", path.display()),
            source: e,
        })?;
        if len < PAGE as u64 {
            return Err(ShmError::NotReady { addr });
        }
        let header_map = Mapping::map(&fd, PAGE).map_err(|e| ShmError::Io {
            context: format!("mapping {}", path.display()),
            source: e,
        })?;
        // SAFETY: the state word is a 4-aligned u32 inside the mapped page,
        // accessed atomically by everyone.
        let state = unsafe { &*(header_map.ptr().add(STATE_OFF) as *const AtomicU32) };
        match state.load(Ordering::Acquire) {
            STATE_READY => {}
            STATE_INIT => return Err(ShmError::NotReady { addr }),
            STATE_CLOSED => return Err(ShmError::NoSuchPeer { addr, path }),
            s => return Err(bad(format!("unknown state {s}"))),
        }
        // SAFETY: a volatile copy of the header from the mapped page (written
        // once by the owner before READY, which we loaded with acquire).
        let header = unsafe { std::ptr::read_volatile(header_map.ptr() as *const HeaderData) };
        drop(header_map);
        let layout = Layout::from_header(&header, len).map_err(&bad)?;
        if header.job != job.0
            || header.node != addr.node.0
            || header.port != u32::from(addr.port.0)
        {
            return Err(bad(format!(
                "segment belongs to job {:08x} process {}.{}",
                header.job, header.node, header.port
            )));
        }
        if !crate::proc::is_alive(header.owner_pid, header.owner_start) {
            return Err(ShmError::NoSuchPeer { addr, path });
        }
        let map = Mapping::map(&fd, layout.total_len as usize).map_err(|e| ShmError::Io {
            context: format!("mapping {}", path.display()),
            source: e,
        })?;
        Ok(Segment {
            map,
            layout,
            header,
            path,
            owner: false,
        })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.map.ptr()
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    pub(crate) fn header(&self) -> &HeaderData {
        &self.header
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The segment's state word.
    pub(crate) fn state(&self) -> &AtomicU32 {
        // SAFETY: a 4-aligned u32 in the mapped header page, only ever
        // accessed atomically.
        unsafe { &*(self.base().add(STATE_OFF) as *const AtomicU32) }
    }

    /// The owner's bell flag.
    pub(crate) fn bell_flag(&self) -> &AtomicU32 {
        // SAFETY: as for `state`.
        unsafe { &*(self.base().add(BELL_OFF) as *const AtomicU32) }
    }

    /// Pointer to byte `off` of the segment.
    pub(crate) fn at(&self, off: u64) -> *mut u8 {
        debug_assert!(off < self.layout.total_len);
        // SAFETY: every caller passes an offset from the validated layout,
        // which lies inside the mapping.
        unsafe { self.base().add(off as usize) }
    }

    /// Releases the pages of directory entry `i`'s chunk data back to the
    /// system (the entry's sender is gone; the next one starts afresh).
    pub(crate) fn punch_entry_data(&self, i: u32) {
        let l = &self.layout;
        let off = l.entry_off(i) + l.data_off;
        let len = l.entry_stride - l.data_off;
        // SAFETY: the range is page-aligned and inside our mapping; the
        // bytes are not in use (the entry's sender is dead and the owner is
        // the only other user). MADV_REMOVE frees the tmpfs pages; later
        // reads see zeros.
        unsafe { libc::madvise(self.at(off).cast(), len as usize, libc::MADV_REMOVE) };
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owner {
            self.state().store(STATE_CLOSED, Ordering::Release);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Reads and returns the header of the segment file at `path`, or `None`
/// if there is no such file. A short or uninitialised file yields a zeroed
/// header (which [`judge`] calls stale).
fn read_header(path: &Path) -> io::Result<Option<HeaderData>> {
    let fd = match open_raw(path, libc::O_RDONLY, 0) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut buf = [0u8; std::mem::size_of::<HeaderData>()];
    // SAFETY: pread into a buffer of exactly buf.len() bytes.
    let n = unsafe { libc::pread(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if (n as usize) < buf.len() {
        return Ok(Some(HeaderData::default()));
    }
    // SAFETY: HeaderData is plain integers (any bit pattern is valid) and
    // buf holds exactly size_of::<HeaderData>() bytes.
    Ok(Some(unsafe {
        std::ptr::read_unaligned(buf.as_ptr() as *const HeaderData)
    }))
}

enum Verdict {
    Alive,
    Stale,
}

/// Whether a segment's owner is alive. Called under this user's directory
/// lock on this user's segments, so a header that is not valid is a
/// creator that crashed before finishing, not one still writing (another
/// user's creators take their own lock: see [`cleanup_stale`]).
fn judge(h: &HeaderData) -> Verdict {
    if h.magic != crate::layout::MAGIC {
        return Verdict::Stale;
    }
    if crate::proc::is_alive(h.owner_pid, h.owner_start) {
        Verdict::Alive
    } else {
        Verdict::Stale
    }
}

fn remove_files(seg: &Path) {
    let _ = std::fs::remove_file(seg);
    let _ = std::fs::remove_file(crate::doorbell::path_for(seg));
}

/// What [`cleanup_stale`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// Segments removed (their owners were dead), with the dead pid.
    pub removed: Vec<(PathBuf, u32)>,
    /// Segments kept because their owners are alive.
    pub kept: usize,
    /// Segments that could not be judged (unreadable, or another user's
    /// not yet initialised: perhaps being created).
    pub skipped: usize,
}

/// Removes every segment in `dir` whose owner is dead (see the module
/// documentation), with its doorbell socket. Safe to run concurrently with
/// other mailboxes opening and closing.
pub fn cleanup_stale(dir: &Path) -> Result<CleanupReport, ShmError> {
    let io = |context: String| move |source: io::Error| ShmError::Io { context, source };
    let _lock = DirLock::acquire(dir).map_err(io(format!("locking {}", dir.display())))?;
    let mut report = CleanupReport::default();
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    let entries = std::fs::read_dir(dir).map_err(io(format!("listing {}", dir.display())))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = e.path();
        if let Some(seg) = name.strip_suffix(".bell") {
            // A doorbell whose segment is gone is garbage.
            if is_segment_name(seg) && !dir.join(seg).exists() {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        if !is_segment_name(name) {
            continue;
        }
        // Another user's creators hold that user's lock, not ours: a
        // segment of theirs whose header is not written yet may be one
        // being created right now. Only a valid header with a dead owner
        // makes it garbage; a crashed creator's leftover goes at that
        // user's next cleanup.
        let foreign = e.metadata().is_ok_and(|m| m.uid() != me);
        match read_header(&path) {
            Ok(None) => {}
            Ok(Some(h)) if foreign && h.magic != crate::layout::MAGIC => report.skipped += 1,
            Ok(Some(h)) => match judge(&h) {
                Verdict::Alive => report.kept += 1,
                Verdict::Stale => {
                    remove_files(&path);
                    report.removed.push((path, h.owner_pid));
                }
            },
            Err(_) => report.skipped += 1,
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = segment_name(JobKey(0xbeef), ProcessAddr::new(3, 7));
        assert_eq!(n, "bcl-0000beef-3-7");
        assert!(is_segment_name(&n));
        assert!(!is_segment_name("bcl-lock-0"));
        assert!(!is_segment_name("bcl-0000beef-3-7.bell"));
        assert!(!is_segment_name("bcl-0000beef-3"));
        assert!(!is_segment_name("bcl-beef-3-7"));
        assert!(!is_segment_name("bcl-0000beef-3-70000"));
    }
}
