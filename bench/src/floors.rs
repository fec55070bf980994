//! Floors of intra-node messaging: what two processes exchanging cache
//! lines in shared memory cost with no protocol at all. BCL's shm method
//! (`bcl_shm`) is measured against them; they are not part of it.
//!
//! A [`SpinLink`] is a 4 KiB file under `/dev/shm` holding two 64-byte
//! lines, one per side. A side writes a message (at most
//! [`SPIN_MAX_MESSAGE`] bytes) into its own line and publishes it by
//! storing the line's sequence number (release); the other side spins on
//! that number (acquire), reads the message and acknowledges it in *its
//! own* line. So a round trip of small messages moves exactly two cache
//! lines, the least any shared-memory protocol can do: this is the
//! baseline `bcl-pingpong --method spin` and `bcl-shm-lat` measure BCL's
//! shm method against. Every word is an atomic, so no data race is
//! possible whatever the peer does.
//!
//! It is not a transport: one message in flight per direction, no sleeping,
//! no peer-death detection beyond what the caller's deadline gives.
//!
//! A [`LineRing`] is the control that separates what a *ring* costs from
//! what the shm inbox's protocol costs: the same lines, but each message
//! takes the next line of a ring of [`LINE_RING_SLOTS`] lines per direction
//! (256 bytes apart, like the inbox's default slots), with no claim, no
//! header and no sender check; the reader announces what it consumed every
//! quarter ring. Any ring in which a message takes a fresh cache line pays
//! at least what this one pays, unless it fetches that line for writing
//! ahead of time, as the inbox does when it prepares a reply (see
//! `bcl_shm::inbox`).
//!
//! This is a memory module: it maps shared files itself (with `mmap`, not
//! through bcl-shm, so the floor shares no code with what it measures) and
//! touches them only through atomics; each `unsafe` block says why it is
//! sound.

use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// Largest message of a [`SpinLink`].
pub const SPIN_MAX_MESSAGE: usize = 40;
const DATA_WORDS: usize = SPIN_MAX_MESSAGE / 8;
const FILE_LEN: usize = 4096;

/// One side's cache line.
#[repr(C, align(64))]
struct Line {
    /// Messages this side has published.
    seq: AtomicU64,
    /// Messages of the other side this side has consumed.
    ack: AtomicU64,
    /// Length of the current message.
    len: AtomicU64,
    /// Its bytes, little endian per word.
    data: [AtomicU64; DATA_WORDS],
}

const _: () = assert!(std::mem::size_of::<Line>() == 64);

impl Line {
    /// Writes `msg` (at most [`SPIN_MAX_MESSAGE`] bytes, checked by the
    /// caller) and its length, then publishes it as message number `seq`
    /// (release).
    fn publish(&self, msg: &[u8], seq: u64) {
        for (i, chunk) in msg.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.data[i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        self.len.store(msg.len() as u64, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Release);
    }

    /// Copies the published message into `buf` (after an acquire load of
    /// `seq` saw it); returns its length.
    fn read(&self, buf: &mut [u8; SPIN_MAX_MESSAGE]) -> usize {
        let len = (self.len.load(Ordering::Relaxed) as usize).min(SPIN_MAX_MESSAGE);
        for (i, chunk) in buf[..len].chunks_mut(8).enumerate() {
            let w = self.data[i].load(Ordering::Relaxed).to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
        len
    }
}

/// Why a [`SpinLink`] could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SpinError {
    /// Creating, opening or mapping the file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The message is larger than [`SPIN_MAX_MESSAGE`].
    #[error("a spin link carries at most {SPIN_MAX_MESSAGE} bytes, not {0}")]
    TooLarge(usize),
}

/// A shared read-write mapping of the first `len` bytes of a file,
/// unmapped on drop.
struct Mapping {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is shared memory that this module accesses only
// through atomics; the pointer itself may move to another thread.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(file: &File, len: usize) -> nix::Result<Mapping> {
        let len = NonZeroUsize::new(len).ok_or(nix::errno::Errno::EINVAL)?;
        // SAFETY: a new MAP_SHARED mapping of a file opened read-write, at
        // an address the kernel chooses, so no existing memory is replaced.
        // The caller checked that the file is at least `len` bytes long.
        let ptr = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                file,
                0,
            )?
        };
        Ok(Mapping {
            ptr,
            len: len.get(),
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; every reference into
        // the mapping borrows the link or ring that owns it, so none
        // outlives it.
        let _ = unsafe { munmap(self.ptr, self.len) };
    }
}

/// The file behind a [`SpinLink`] or [`LineRing`], mapped shared: created
/// (mode 0600) by side 0, which removes it when dropped; opened by side 1.
struct SharedFile {
    map: Mapping,
    /// 0 for the creator, 1 for the other side.
    side: usize,
    path: PathBuf,
}

impl SharedFile {
    /// Creates (`create`, sized `len`) or opens (checked to be at least
    /// `len` bytes) the file at `path` and maps `len` bytes of it.
    fn new(path: &Path, create: bool, len: usize, what: &str) -> Result<SharedFile, SpinError> {
        let io = |context: &str, source| SpinError::Io {
            context: format!("{context} {}", path.display()),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(path)
            .map_err(|e| io(if create { "creating" } else { "opening" }, e))?;
        if create {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| io("setting the mode of", e))?;
            file.set_len(len as u64).map_err(|e| io("sizing", e))?;
        } else {
            let have = file.metadata().map_err(|e| io("inspecting", e))?.len();
            if have < len as u64 {
                return Err(io(
                    "mapping",
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("not a {what} file ({have} bytes, expected {len})"),
                    ),
                ));
            }
        }
        let map = Mapping::new(&file, len).map_err(|e| io("mapping", e.into()))?;
        Ok(SharedFile {
            map,
            side: usize::from(!create),
            path: path.to_path_buf(),
        })
    }

    /// The mapping's first byte (page-aligned).
    fn base(&self) -> *mut u8 {
        self.map.ptr.as_ptr().cast()
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        if self.side == 0 {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One side of a two-line shared-memory link (see the module documentation).
pub struct SpinLink {
    file: SharedFile,
    sent: u64,
    consumed: u64,
}

impl SpinLink {
    /// Creates the link's file at `path` (side 0); removed when dropped.
    pub fn create(path: &Path) -> Result<SpinLink, SpinError> {
        Self::map(path, true)
    }

    /// Opens the link another process created (side 1).
    pub fn open(path: &Path) -> Result<SpinLink, SpinError> {
        Self::map(path, false)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    fn map(path: &Path, create: bool) -> Result<SpinLink, SpinError> {
        Ok(SpinLink {
            file: SharedFile::new(path, create, FILE_LEN, "spin link")?,
            sent: 0,
            consumed: 0,
        })
    }

    fn line(&self, side: usize) -> &Line {
        // SAFETY: the mapping is FILE_LEN (4096) bytes, page-aligned, and
        // lives as long as self; lines 0 and 1 are within it and aligned;
        // every field is an atomic, valid for any bit pattern (the file
        // starts zeroed), so a shared reference is sound whatever the peer
        // writes.
        unsafe { &*self.file.base().cast::<Line>().add(side) }
    }

    /// Publishes `msg` if the peer has consumed the previous one; false if
    /// not yet (spin and retry).
    pub fn try_send(&mut self, msg: &[u8]) -> Result<bool, SpinError> {
        if msg.len() > SPIN_MAX_MESSAGE {
            return Err(SpinError::TooLarge(msg.len()));
        }
        let peer_ack = self.line(1 - self.file.side).ack.load(Ordering::Acquire);
        if peer_ack != self.sent {
            return Ok(false);
        }
        self.sent += 1;
        self.line(self.file.side).publish(msg, self.sent);
        Ok(true)
    }

    /// Takes the peer's next message into `buf` (at least
    /// [`SPIN_MAX_MESSAGE`] bytes are written at most); its length, or
    /// `None` if there is none.
    pub fn try_recv(&mut self, buf: &mut [u8; SPIN_MAX_MESSAGE]) -> Option<usize> {
        let theirs = self.line(1 - self.file.side);
        if theirs.seq.load(Ordering::Acquire) == self.consumed {
            return None;
        }
        let len = theirs.read(buf);
        let consumed = self.consumed + 1;
        self.line(self.file.side)
            .ack
            .store(consumed, Ordering::Release);
        self.consumed = consumed;
        Some(len)
    }
}

/// Lines per direction of a [`LineRing`] (the inbox's default slot
/// count).
pub const LINE_RING_SLOTS: usize = 1024;
/// Bytes between a [`LineRing`]'s lines (the inbox's default slot
/// size); only the first 64 of each are used.
const LINE_RING_STRIDE: usize = 256;
/// One direction: a 128-byte control pair (the reader's consumed count),
/// then the lines.
const LINE_RING_REGION: usize = 128 + LINE_RING_SLOTS * LINE_RING_STRIDE;
const LINE_RING_FILE_LEN: usize = 2 * LINE_RING_REGION;

/// One side of a ring of cache lines per direction (see the module
/// documentation): a control for latency measurements, not a transport.
pub struct LineRing {
    file: SharedFile,
    /// Messages this side has published.
    sent: u64,
    /// The peer's consumed count of our messages, as last read.
    peer_consumed: u64,
    /// Messages of the peer this side has consumed.
    got: u64,
}

impl LineRing {
    /// Creates the ring's file at `path` (side 0); removed when dropped.
    pub fn create(path: &Path) -> Result<LineRing, SpinError> {
        Self::map(path, true)
    }

    /// Opens the ring another process created (side 1).
    pub fn open(path: &Path) -> Result<LineRing, SpinError> {
        Self::map(path, false)
    }

    fn map(path: &Path, create: bool) -> Result<LineRing, SpinError> {
        Ok(LineRing {
            file: SharedFile::new(path, create, LINE_RING_FILE_LEN, "line ring")?,
            sent: 0,
            peer_consumed: 0,
            got: 0,
        })
    }

    /// The count of direction `region`'s messages its reader has consumed.
    fn consumed(&self, region: usize) -> &AtomicU64 {
        // SAFETY: region < 2, so the offset is inside the
        // LINE_RING_FILE_LEN-byte, page-aligned mapping, which lives as long
        // as self; it is 8-aligned (LINE_RING_REGION is a multiple of 128),
        // and an atomic is valid for any bit pattern.
        unsafe { &*(self.file.base().add(region * LINE_RING_REGION) as *const AtomicU64) }
    }

    /// Line `k mod LINE_RING_SLOTS` of direction `region`.
    fn line(&self, region: usize, k: u64) -> &Line {
        let i = (k % LINE_RING_SLOTS as u64) as usize;
        // SAFETY: region < 2 and i < LINE_RING_SLOTS, so the 64-byte line
        // lies inside the mapping (see `consumed`), 64-aligned; every field
        // of Line is an atomic, valid for any bit pattern.
        unsafe {
            &*(self
                .file
                .base()
                .add(region * LINE_RING_REGION + 128 + i * LINE_RING_STRIDE)
                as *const Line)
        }
    }

    /// Publishes `msg` in the next line if the peer has consumed the
    /// message that used it a lap ago; false if not yet (retry).
    pub fn try_send(&mut self, msg: &[u8]) -> Result<bool, SpinError> {
        if msg.len() > SPIN_MAX_MESSAGE {
            return Err(SpinError::TooLarge(msg.len()));
        }
        let side = self.file.side;
        if self.sent - self.peer_consumed >= LINE_RING_SLOTS as u64 {
            self.peer_consumed = self.consumed(side).load(Ordering::Acquire);
            if self.sent - self.peer_consumed >= LINE_RING_SLOTS as u64 {
                return Ok(false);
            }
        }
        self.line(side, self.sent).publish(msg, self.sent + 1);
        self.sent += 1;
        Ok(true)
    }

    /// Takes the peer's next message into `buf`; its length, or `None` if
    /// there is none.
    pub fn try_recv(&mut self, buf: &mut [u8; SPIN_MAX_MESSAGE]) -> Option<usize> {
        let peer = 1 - self.file.side;
        let line = self.line(peer, self.got);
        if line.seq.load(Ordering::Acquire) != self.got + 1 {
            return None;
        }
        let len = line.read(buf);
        self.got += 1;
        if self.got.is_multiple_of(LINE_RING_SLOTS as u64 / 4) {
            // Release: our reads of the lines happen before the peer, having
            // read this (acquire), writes them again.
            self.consumed(peer).store(self.got, Ordering::Release);
        }
        Some(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_go_both_ways_one_at_a_time() {
        let path = std::env::temp_dir().join(format!("bcl-spin-test-{}", std::process::id()));
        let mut a = SpinLink::create(&path).unwrap();
        let mut b = SpinLink::open(&path).unwrap();
        let mut buf = [0u8; SPIN_MAX_MESSAGE];
        assert_eq!(b.try_recv(&mut buf), None);
        assert!(a.try_send(b"hello, floor").unwrap());
        assert!(!a.try_send(b"x").unwrap(), "one in flight per direction");
        assert_eq!(b.try_recv(&mut buf), Some(12));
        assert_eq!(&buf[..12], b"hello, floor");
        assert!(b.try_send(&[7; SPIN_MAX_MESSAGE]).unwrap());
        assert_eq!(a.try_recv(&mut buf), Some(SPIN_MAX_MESSAGE));
        assert_eq!(buf, [7; SPIN_MAX_MESSAGE]);
        assert!(a.try_send(b"").unwrap());
        assert_eq!(b.try_recv(&mut buf), Some(0));
        assert!(matches!(
            a.try_send(&[0; SPIN_MAX_MESSAGE + 1]),
            Err(SpinError::TooLarge(41))
        ));
        drop(b);
        drop(a);
        assert!(!path.exists(), "the creator removes the file");
        assert!(SpinLink::open(&path).is_err());
    }

    #[test]
    fn threads_ping_pong_a_counter() {
        let path = std::env::temp_dir().join(format!("bcl-spin-test2-{}", std::process::id()));
        let mut a = SpinLink::create(&path).unwrap();
        let mut b = SpinLink::open(&path).unwrap();
        let echo = std::thread::spawn(move || {
            let mut buf = [0u8; SPIN_MAX_MESSAGE];
            for _ in 0..2_000 {
                let n = loop {
                    if let Some(n) = b.try_recv(&mut buf) {
                        break n;
                    }
                    // Yield: the test may share one core with others.
                    std::thread::yield_now();
                };
                while !b.try_send(&buf[..n]).unwrap() {}
            }
        });
        let mut buf = [0u8; SPIN_MAX_MESSAGE];
        for i in 0u64..2_000 {
            while !a.try_send(&i.to_le_bytes()).unwrap() {}
            let n = loop {
                if let Some(n) = a.try_recv(&mut buf) {
                    break n;
                }
                std::thread::yield_now();
            };
            assert_eq!(&buf[..n], &i.to_le_bytes());
        }
        echo.join().unwrap();
    }

    #[test]
    fn line_ring_laps_with_back_pressure() {
        let path = std::env::temp_dir().join(format!("bcl-line-ring-{}", std::process::id()));
        let mut a = LineRing::create(&path).unwrap();
        let mut b = LineRing::open(&path).unwrap();
        let mut buf = [0u8; SPIN_MAX_MESSAGE];
        assert_eq!(b.try_recv(&mut buf), None);
        // A whole ring goes out unread; the next message waits for space.
        for i in 0..LINE_RING_SLOTS as u64 {
            assert!(a.try_send(&i.to_le_bytes()).unwrap(), "message {i}");
        }
        assert!(!a.try_send(b"full").unwrap(), "a full ring refuses");
        // Consuming a quarter announces it; then a quarter fits again.
        for i in 0..LINE_RING_SLOTS as u64 / 4 {
            assert_eq!(b.try_recv(&mut buf), Some(8));
            assert_eq!(buf[..8], i.to_le_bytes());
        }
        for i in 0..LINE_RING_SLOTS as u64 / 4 {
            assert!(a.try_send(&(1000 + i).to_le_bytes()).unwrap());
        }
        assert!(!a.try_send(b"full").unwrap());
        // Everything arrives once, in order, across the wrap.
        for i in LINE_RING_SLOTS as u64 / 4..LINE_RING_SLOTS as u64 {
            assert_eq!(b.try_recv(&mut buf), Some(8));
            assert_eq!(buf[..8], i.to_le_bytes());
        }
        for i in 0..LINE_RING_SLOTS as u64 / 4 {
            assert_eq!(b.try_recv(&mut buf), Some(8));
            assert_eq!(buf[..8], (1000 + i).to_le_bytes());
        }
        assert_eq!(b.try_recv(&mut buf), None);
        // The other direction works too.
        assert!(b.try_send(b"back").unwrap());
        assert_eq!(a.try_recv(&mut buf), Some(4));
        assert_eq!(&buf[..4], b"back");
        assert!(matches!(
            a.try_send(&[0; SPIN_MAX_MESSAGE + 1]),
            Err(SpinError::TooLarge(41))
        ));
        drop(b);
        drop(a);
        assert!(!path.exists(), "the creator removes the file");
        let short =
            std::env::temp_dir().join(format!("bcl-line-ring-short-{}", std::process::id()));
        let link = SpinLink::create(&short).unwrap();
        let err = LineRing::open(&short)
            .err()
            .expect("a spin link file is too small");
        assert!(err.to_string().contains("not a line ring file"), "{err}");
        drop(link);
    }
}
