//! Boards: one shared-memory file per communicator and node, on which the
//! node's members run collectives without messages.
//!
//! A board holds, for each of its `ranks` members, a line with its `done`
//! counter and identity, a *lane* of [`LANE`] 64-byte lines for small
//! payloads, and `buffers` slots for large ones. A lane line or a slot
//! carries a stamp word beside its data:
//!
//! ```text
//! page 0            header: magic, version, ranks, buffers, slot_len, ready
//! lines 1..         per rank: identity (pid, start) and done[r]; 128-byte
//!                   lines, 2 per rank
//! then              lane[rank][LANE]: 64-byte lines, data ≤ 56 B at 0,
//!                   stamp at 56
//! page-aligned      slot[buffer][rank], each 64 + slot_len bytes: stamp
//!                   at 56, data from 64
//! ```
//!
//! The collectives built on it (`bcl::coll`'s board tier) number their
//! steps with *phases* 1, 2, 3, … that every member runs in the same
//! order. Phase p with at most 56 bytes per member uses lane line
//! `p % LANE`, a larger one slot `p % buffers`. A member publishes its data
//! for phase p by writing it, then storing the stamp = p (release); another
//! member reads it only after loading the stamp ≥ p (acquire), and stores
//! `done[r] = p` (release) once it has finished reading everything of
//! phase p. Before writing for phase p a member waits until every
//! `done ≥ p − buffers` (acquire); as `buffers ≤ LANE`, that covers the
//! lane line too. So no place is written while anyone may read it, and
//! none is read before it is written. Stamps and counters only grow.
//!
//! A small payload and its stamp share one cache line, so handing 8 bytes
//! to another core moves one line, as the inbox's slots do; and
//! consecutive small phases use consecutive lines, so a reader behind a
//! writer streams through them as through a ring.
//!
//! The file is `DIR/bcl-board-JOB-NODE-KEY` (`KEY` names the communicator),
//! mode 0600, created and initialised under the directory lock of
//! [`crate::segment`] by whichever member comes first; the others map it and
//! check the header. The members unlink it once all of them have mapped it
//! (the mappings stay valid), so it leaves nothing behind unless a member
//! dies between creating and that agreement.
//!
//! Each member records its pid and start time on its line
//! ([`Board::join`]), so a member waiting for a peer can tell a slow peer
//! from a dead one ([`Board::first_dead`]) and fail instead of waiting
//! forever. On the same line it keeps one word for each of its last
//! [`CALL_HISTORY`] calls ([`Board::announce_call`]): members that started
//! the same call with different arguments wait at different places and
//! would wait forever; a waiting member that reads another's word for that
//! call can tell, even when the other has gone on to later calls.
//!
//! Like the rest of this crate, a board trusts its peers' protocol, not
//! their data: lengths and indices come from our own side, so a buggy peer
//! can make a collective's result wrong or make it wait, never make us
//! read or write outside the mapping.

use crate::segment::{create_or_open, file_len, DirLock, Mapping};
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::ShmError;
use bcl_core::JobKey;
use std::io;
use std::path::{Path, PathBuf};

/// "BCLBOARD" in ASCII.
const MAGIC: u64 = 0x4452_414f_424c_4342;
const VERSION: u32 = 5;
/// Calls whose words a member's identity line keeps (see
/// [`Board::announce_call`]): the rest of its 128-byte line.
pub const CALL_HISTORY: usize = 13;
/// Payloads up to this long go in a lane line, beside its stamp.
pub const INLINE: usize = 56;
/// Lines in each member's lane (at least `buffers`).
pub const LANE: usize = 64;
/// Bytes of a slot before its data when the data is not inline.
const SLOT_HEAD: usize = 64;
const PAGE: usize = 4096;
/// Counters sit on 128-byte lines: the adjacent-line prefetcher of x86
/// CPUs pulls 64-byte lines in pairs.
const LINE: usize = 128;

/// The header at offset 0.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    ranks: AtomicU32,
    buffers: AtomicU32,
    slot_len: AtomicU64,
    /// 1 once the creator has written the fields above.
    ready: AtomicU32,
}

/// A mapped board (see the module documentation).
#[derive(Debug)]
pub struct Board {
    map: Mapping,
    path: PathBuf,
    ranks: usize,
    buffers: usize,
    slot_len: usize,
    lane_off: usize,
    slots_off: usize,
}

/// The file name of the board `key` of job `job` on node `node`.
pub fn board_name(job: JobKey, node: u32, key: u64) -> String {
    format!("bcl-board-{:08x}-{node}-{key:016x}", job.0)
}

/// Offsets of the lanes and the slots, and the total length.
fn geometry(ranks: usize, buffers: usize, slot_len: usize) -> Option<(usize, usize, usize)> {
    let lane_off = LINE.checked_mul(ranks.checked_mul(2)?.checked_add(1)?)?;
    let lanes_end = ranks.checked_mul(LANE * 64)?.checked_add(lane_off)?;
    let slots_off = lanes_end.div_ceil(PAGE).checked_mul(PAGE)?;
    let total = slot_len
        .checked_add(SLOT_HEAD)?
        .checked_mul(buffers)?
        .checked_mul(ranks)?
        .checked_add(slots_off)?;
    Some((lane_off, slots_off, total))
}

impl Board {
    /// Creates the board `dir/name` for `ranks` members with `buffers`
    /// slots of `slot_len` bytes each, or maps it if another member created
    /// it first (then its header must say the same geometry). Only the
    /// pages written are ever allocated.
    pub fn open(
        dir: &Path,
        name: &str,
        ranks: usize,
        buffers: usize,
        slot_len: usize,
    ) -> Result<Board, ShmError> {
        let path = dir.join(name);
        let bad = |reason: String| ShmError::BadSegment {
            path: path.clone(),
            reason,
        };
        if ranks == 0
            || ranks > u32::MAX as usize
            || !(1..=LANE).contains(&buffers)
            || !slot_len.is_multiple_of(64)
            || slot_len == 0
        {
            return Err(ShmError::BadConfig(format!(
                "a board needs at least one rank, 1 to {LANE} buffers and a slot length that \
                 is a positive multiple of 64 (got {ranks} ranks, {buffers} buffers, \
                 {slot_len} bytes)"
            )));
        }
        let (lane_off, slots_off, total) = geometry(ranks, buffers, slot_len).ok_or_else(|| {
            ShmError::BadConfig(format!(
                "a board of {buffers} × {ranks} × {slot_len} bytes is too large"
            ))
        })?;
        let io = |context: String| move |source: io::Error| ShmError::Io { context, source };
        let _lock = DirLock::acquire(dir).map_err(io(format!("locking {}", dir.display())))?;
        let (fd, created) = create_or_open(&path, total)?;
        if !created {
            let len = file_len(&fd).map_err(io(format!("reading {}", path.display())))?;
            if len != total as u64 {
                return Err(bad(format!(
                    "{len} bytes, expected {total} for {buffers} × {ranks} × {slot_len}-byte slots"
                )));
            }
        }
        let map = Mapping::map(&fd, total).map_err(|e| {
            if created {
                let _ = std::fs::remove_file(&path);
            }
            io(format!("mapping {}", path.display()))(e)
        })?;
        let board = Board {
            map,
            path: path.clone(),
            ranks,
            buffers,
            slot_len,
            lane_off,
            slots_off,
        };
        let h = board.header();
        if created {
            h.magic.store(MAGIC, Ordering::Relaxed);
            h.version.store(VERSION, Ordering::Relaxed);
            h.ranks.store(ranks as u32, Ordering::Relaxed);
            h.buffers.store(buffers as u32, Ordering::Relaxed);
            h.slot_len.store(slot_len as u64, Ordering::Relaxed);
            h.ready.store(1, Ordering::Release);
        } else {
            // Creation and initialisation happen under the lock we hold, so
            // a board that exists is complete or was never ours.
            let (magic, version) = (
                h.magic.load(Ordering::Acquire),
                h.version.load(Ordering::Acquire),
            );
            let (r, s) = (
                h.ranks.load(Ordering::Acquire),
                h.slot_len.load(Ordering::Acquire),
            );
            let b = h.buffers.load(Ordering::Acquire);
            if h.ready.load(Ordering::Acquire) != 1 || magic != MAGIC || version != VERSION {
                return Err(bad("not an initialised board of this version".into()));
            }
            if r as usize != ranks || b as usize != buffers || s != slot_len as u64 {
                return Err(bad(format!(
                    "made for {b} × {r} × {s}-byte slots, expected {buffers} × {ranks} × {slot_len}"
                )));
            }
        }
        Ok(board)
    }

    /// Removes the file (the mappings stay valid). Members call it once
    /// every member has mapped the board.
    pub fn unlink(&self) -> io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of members.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// Slots per member.
    pub fn buffers(&self) -> usize {
        self.buffers
    }

    /// Bytes per slot.
    pub fn slot_len(&self) -> usize {
        self.slot_len
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping is page-aligned and at least a page long;
        // Header is 32 bytes of atomics, valid for any bit pattern.
        unsafe { &*(self.map.ptr() as *const Header) }
    }

    fn done_counter(&self, rank: usize) -> &AtomicU64 {
        assert!(
            rank < self.ranks,
            "rank {rank} on a board of {}",
            self.ranks
        );
        let off = LINE * (2 + 2 * rank);
        // SAFETY: off + 8 <= slots_off <= the mapping's length (geometry),
        // off is 128-aligned in a page-aligned mapping, and an AtomicU64 is
        // valid for any bit pattern.
        unsafe { &*(self.map.ptr().add(off) as *const AtomicU64) }
    }

    /// The pid and start-time words of `rank` (on a line of their own:
    /// written once, read only by liveness checks).
    fn identity(&self, rank: usize) -> (&AtomicU64, &AtomicU64) {
        assert!(
            rank < self.ranks,
            "rank {rank} on a board of {}",
            self.ranks
        );
        let off = LINE * (1 + 2 * rank);
        // SAFETY: off + 24 <= off + LINE <= slots_off (geometry); both
        // words are 8-aligned, and AtomicU64 is valid for any bit pattern.
        unsafe {
            (
                &*(self.map.ptr().add(off + 8) as *const AtomicU64),
                &*(self.map.ptr().add(off + 16) as *const AtomicU64),
            )
        }
    }

    /// The word of call `call` of `rank` (on its identity line, after pid
    /// and start time).
    fn call_word(&self, rank: usize, call: u64) -> &AtomicU64 {
        assert!(
            rank < self.ranks,
            "rank {rank} on a board of {}",
            self.ranks
        );
        let slot = (call % CALL_HISTORY as u64) as usize;
        let off = LINE * (1 + 2 * rank) + 24 + 8 * slot;
        // SAFETY: off + 8 <= LINE * (1 + 2 * rank) + 24 + 8 * CALL_HISTORY
        // = LINE * (2 + 2 * rank) <= slots_off (geometry); 8-aligned, and
        // AtomicU64 is valid for any bit pattern.
        unsafe { &*(self.map.ptr().add(off) as *const AtomicU64) }
    }

    /// Records `word` for member `rank`'s call number `call` (what the
    /// word means is the caller's; 0 is "nothing recorded"). It stays
    /// readable for the next [`CALL_HISTORY`] − 1 calls.
    pub fn announce_call(&self, rank: usize, call: u64, word: u64) {
        self.call_word(rank, call).store(word, Ordering::Release);
    }

    /// The word member `rank` recorded in the place of call number `call`
    /// (a word of call `call` or of another call `CALL_HISTORY` apart).
    pub fn announced_call(&self, rank: usize, call: u64) -> u64 {
        self.call_word(rank, call).load(Ordering::Acquire)
    }

    /// Records the calling process as member `rank`.
    pub fn join(&self, rank: usize) -> io::Result<()> {
        let start = crate::proc::self_start_time()?;
        self.join_as(rank, std::process::id(), start);
        Ok(())
    }

    /// Records process (`pid`, `start`) as member `rank`.
    pub fn join_as(&self, rank: usize, pid: u32, start: u64) {
        let (p, t) = self.identity(rank);
        t.store(start, Ordering::Relaxed);
        p.store(u64::from(pid), Ordering::Release);
    }

    /// The first member that joined and is no longer alive (its pid gone,
    /// a zombie, or reused), with its pid. Reads `/proc`: call it now and
    /// then while waiting, not on every look.
    pub fn first_dead(&self) -> Option<(usize, u32)> {
        (0..self.ranks).find_map(|r| {
            let (p, t) = self.identity(r);
            let pid = p.load(Ordering::Acquire);
            let pid = u32::try_from(pid).ok().filter(|&p| p != 0)?;
            (!crate::proc::is_alive(pid, t.load(Ordering::Relaxed))).then_some((r, pid))
        })
    }

    /// The stamp of the place `rank` publishes `len` bytes at for `phase`:
    /// the last phase published there (acquire).
    pub fn stamp(&self, phase: u64, rank: usize, len: usize) -> u64 {
        self.place(phase, rank, len).1.load(Ordering::Acquire)
    }

    /// Publishes `rank`'s `len` bytes for `phase` (release: after writing
    /// them).
    pub fn publish(&self, phase: u64, rank: usize, len: usize) {
        self.place(phase, rank, len)
            .1
            .store(phase, Ordering::Release);
    }

    /// The last phase `rank` finished reading (acquire).
    pub fn done(&self, rank: usize) -> u64 {
        self.done_counter(rank).load(Ordering::Acquire)
    }

    /// Says `rank` has finished reading everything of `phase` (release).
    pub fn set_done(&self, rank: usize, phase: u64) {
        self.done_counter(rank).store(phase, Ordering::Release);
    }

    /// Whether every member has finished reading `phase` or later.
    pub fn all_done(&self, phase: u64) -> bool {
        (0..self.ranks).all(|r| self.done(r) >= phase)
    }

    /// Where `rank` puts `len` bytes for `phase`: the data and the stamp
    /// (see the module documentation).
    fn place(&self, phase: u64, rank: usize, len: usize) -> (*mut u8, &AtomicU64) {
        assert!(
            rank < self.ranks && len <= self.slot_len,
            "{len} bytes of rank {rank} on a board of {} × {}",
            self.ranks,
            self.slot_len
        );
        let (data, stamp) = if len <= INLINE {
            let line = rank * LANE + (phase % LANE as u64) as usize;
            let at = self.lane_off + line * 64;
            (at, at + INLINE)
        } else {
            let buffer = (phase % self.buffers as u64) as usize;
            let at = self.slots_off + (buffer * self.ranks + rank) * (SLOT_HEAD + self.slot_len);
            (at + SLOT_HEAD, at + INLINE)
        };
        // SAFETY: both offsets lie inside the mapping (geometry: a lane
        // line is 64 bytes, a slot SLOT_HEAD + slot_len); lane_off and
        // slots_off are multiples of 64 and so is every stride, so the
        // stamp is 8-aligned; AtomicU64 is valid for any bit pattern.
        unsafe {
            (
                self.map.ptr().add(data),
                &*(self.map.ptr().add(stamp) as *const AtomicU64),
            )
        }
    }

    /// Copies `data` to where `rank` puts it for `phase` (publish it
    /// after).
    ///
    /// # Panics
    ///
    /// If `rank` is not a member or `data` is longer than a slot (our own
    /// arguments, never a peer's).
    pub fn write(&self, phase: u64, rank: usize, data: &[u8]) {
        let dst = self.place(phase, rank, data.len()).0;
        // SAFETY: dst is valid for data.len() bytes of the mapping
        // (place checked the length); the mapping never overlaps a
        // Rust allocation. By the protocol nobody reads this slot now.
        unsafe { crate::copy::copy_bytes(dst, data.as_ptr(), data.len()) };
    }

    /// Copies the `out.len()` bytes `rank` wrote for `phase` (the length
    /// it wrote).
    ///
    /// # Panics
    ///
    /// As for [`Board::write`].
    pub fn read(&self, phase: u64, rank: usize, out: &mut [u8]) {
        let src = self.place(phase, rank, out.len()).0;
        // SAFETY: as in `write`, reading; by the protocol nobody writes
        // this slot now.
        unsafe { crate::copy::copy_bytes(out.as_mut_ptr(), src, out.len()) };
    }

    /// Runs `f` on the `len` bytes every member wrote for `phase` (index =
    /// rank), read in place. Call it only for a phase every member has
    /// published and before saying done, when by the protocol nobody
    /// writes them.
    ///
    /// # Panics
    ///
    /// As for [`Board::write`].
    pub fn with_slots<R>(&self, phase: u64, len: usize, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let view = |r: usize| -> &[u8] {
            let p = self.place(phase, r, len).0;
            // SAFETY: p is valid for len bytes of the mapping, which lives
            // as long as &self; by the protocol (module doc) no member
            // writes the slot while it is viewed. A member that breaks the
            // protocol can change the bytes we compute with, the same
            // trust an inbox slot's view takes.
            unsafe { std::slice::from_raw_parts(p, len) }
        };
        // No allocation for the usual node sizes.
        const ON_STACK: usize = 16;
        if self.ranks <= ON_STACK {
            let mut slots: [&[u8]; ON_STACK] = [&[]; ON_STACK];
            for (r, s) in slots.iter_mut().enumerate().take(self.ranks) {
                *s = view(r);
            }
            f(&slots[..self.ranks])
        } else {
            let slots: Vec<&[u8]> = (0..self.ranks).map(view).collect();
            f(&slots)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of the test's own (tests run in parallel).
    fn dir(test: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("bcl-board-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn second_opener_maps_the_same_memory() {
        let d = dir("second");
        let name = board_name(JobKey(7), 0, 42);
        let a = Board::open(&d, &name, 3, 2, 4096).unwrap();
        let b = Board::open(&d, &name, 3, 2, 4096).unwrap();
        a.write(5, 2, b"hello");
        a.publish(5, 2, 5);
        assert_eq!(b.stamp(5, 2, 5), 5);
        assert_eq!(b.stamp(6, 2, 5), 0, "another lane line");
        assert_eq!(b.stamp(5, 2, 100), 0, "the slot, not the lane");
        let mut out = [0u8; 5];
        b.read(5, 2, &mut out);
        assert_eq!(&out, b"hello");
        b.with_slots(5, 5, |s| {
            assert_eq!(s.len(), 3);
            assert_eq!(s[2], b"hello");
            assert_eq!(s[0], [0u8; 5]);
        });
        // Large payloads go to the slots; a full slot fits, and phases
        // `buffers` apart share a slot.
        let long: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        a.write(6, 1, &long);
        a.publish(6, 1, 4096);
        let mut back = vec![0u8; 4096];
        b.read(8, 1, &mut back);
        assert_eq!(back, long);
        assert_eq!(b.stamp(8, 1, 4096), 6);
        a.write(7, 0, &long[..57]);
        b.with_slots(7, 57, |s| assert_eq!(s[0], &long[..57]));
        // The lane wraps after LANE phases.
        a.write(3, 0, b"x");
        let mut one = [0u8; 1];
        b.read(3 + LANE as u64, 0, &mut one);
        assert_eq!(&one, b"x");
        assert!(!b.all_done(1));
        a.unlink().unwrap();
        assert!(!a.path().exists());
        // Still shared after the unlink.
        b.set_done(0, 9);
        assert_eq!(a.done(0), 9);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_dead_member_is_found() {
        let d = dir("dead");
        let b = Board::open(&d, &board_name(JobKey(7), 0, 44), 3, 2, 4096).unwrap();
        b.join(0).unwrap();
        assert_eq!(
            b.first_dead(),
            None,
            "members that never joined are not dead"
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = crate::proc::stat(pid).unwrap().unwrap().1;
        b.join_as(2, pid, start);
        assert_eq!(b.first_dead(), None);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(b.first_dead(), Some((2, pid)));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn call_words_are_per_member_and_leave_identity_and_done_alone() {
        let d = dir("calls");
        let name = board_name(JobKey(7), 0, 45);
        let a = Board::open(&d, &name, 3, 2, 4096).unwrap();
        let b = Board::open(&d, &name, 3, 2, 4096).unwrap();
        assert_eq!(b.announced_call(1, 5), 0, "nothing announced yet");
        a.join_as(1, 4242, 99);
        a.set_done(1, 17);
        for call in 0..CALL_HISTORY as u64 {
            a.announce_call(1, call, 0x100 + call);
        }
        a.announce_call(2, 3, 0xdef);
        for call in 0..CALL_HISTORY as u64 {
            assert_eq!(b.announced_call(1, call), 0x100 + call);
        }
        assert_eq!(b.announced_call(2, 3), 0xdef);
        assert_eq!(b.announced_call(0, 3), 0);
        // Call CALL_HISTORY takes the place of call 0.
        a.announce_call(1, CALL_HISTORY as u64, 0x999);
        assert_eq!(b.announced_call(1, 0), 0x999);
        assert_eq!(b.announced_call(1, 1), 0x101);
        assert_eq!(b.done(1), 17);
        let (pid, start) = b.identity(1);
        assert_eq!(
            (pid.load(Ordering::Relaxed), start.load(Ordering::Relaxed)),
            (4242, 99)
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_board_of_another_geometry_is_refused() {
        let d = dir("geometry");
        let name = board_name(JobKey(7), 0, 43);
        let _a = Board::open(&d, &name, 2, 2, 4096).unwrap();
        let err = Board::open(&d, &name, 3, 2, 4096).unwrap_err();
        assert!(matches!(err, ShmError::BadSegment { .. }), "{err}");
        let err = Board::open(&d, &name, 2, 4, 4096).unwrap_err();
        assert!(matches!(err, ShmError::BadSegment { .. }), "{err}");
        let err = Board::open(&d, "x", 2, 2, 100).unwrap_err();
        assert!(matches!(err, ShmError::BadConfig(_)), "{err}");
        let err = Board::open(&d, "y", 2, LANE + 1, 4096).unwrap_err();
        assert!(matches!(err, ShmError::BadConfig(_)), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
