//! The XDP redirect program, written as eBPF instructions, and the `bpf(2)`
//! calls that create its XSKMAP, load it, attach it with a BPF link and run
//! it on test frames.
//!
//! No C toolchain, libbpf or ELF object is involved: the program is fifteen
//! instructions built by [`redirect_program`], each with a comment, and the
//! `bpf_attr` layouts used are declared here (checked against the kernel's
//! `linux/bpf.h`).
//!
//! # The program
//!
//! ```text
//!  0: r2 = *(u32 *)(r1 + 0)     ; xdp_md.data: first byte of the frame
//!  1: r3 = *(u32 *)(r1 + 4)     ; xdp_md.data_end: one past its last byte
//!  2: r4 = r2                   ; r4 = data
//!  3: r4 += 14                  ; r4 = data + Ethernet header length
//!  4: if r4 > r3 goto +8        ; shorter than an Ethernet header: to 13, pass
//!  5: r4 = *(u16 *)(r2 + 12)    ; the EtherType, as stored (network order)
//!  6: if r4 != ETHERTYPE goto +6; not a BCL frame: to 13, pass
//!  7: r2 = *(u32 *)(r1 + 16)    ; key = xdp_md.rx_queue_index
//!  8: r1 = XSKMAP ll            ; the XSKMAP (a two-slot 64-bit load of a map fd)
//! 10: r3 = FALLBACK             ; flags: action if no socket sits at that key
//! 11: call bpf_redirect_map     ; r0 = XDP_REDIRECT, or FALLBACK
//! 12: exit                      ; return r0
//! 13: r0 = XDP_PASS             ; everything else goes to the kernel stack
//! 14: exit                      ; return r0
//! ```
//!
//! `FALLBACK` is `XDP_PASS` in production (a BCL frame on a queue without a
//! socket still reaches the kernel, where an AF_PACKET reader could see
//! it); the tests build the program with `XDP_DROP` there, so that
//! [`test_run`] can tell "was redirected" (lookup fails → `XDP_DROP`) from
//! "was passed" (`XDP_PASS`) without a bound socket.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::sys::owned_fd;

// ---- eBPF instruction encoding (linux/bpf_common.h, linux/bpf.h) ----

/// Instruction class: load from immediate (`BPF_LD`).
pub const BPF_LD: u8 = 0x00;
/// Instruction class: load into register from memory (`BPF_LDX`).
pub const BPF_LDX: u8 = 0x01;
/// Instruction class: 64-bit jumps (`BPF_JMP`).
pub const BPF_JMP: u8 = 0x05;
/// Instruction class: 64-bit arithmetic (`BPF_ALU64`).
pub const BPF_ALU64: u8 = 0x07;
/// Size: 32-bit word (`BPF_W`).
pub const BPF_W: u8 = 0x00;
/// Size: 16-bit half word (`BPF_H`).
pub const BPF_H: u8 = 0x08;
/// Size: 64-bit double word (`BPF_DW`).
pub const BPF_DW: u8 = 0x18;
/// Mode: immediate (`BPF_IMM`).
pub const BPF_IMM: u8 = 0x00;
/// Mode: memory at register + offset (`BPF_MEM`).
pub const BPF_MEM: u8 = 0x60;
/// Source: the immediate (`BPF_K`).
pub const BPF_K: u8 = 0x00;
/// Source: the source register (`BPF_X`).
pub const BPF_X: u8 = 0x08;
/// ALU operation: add (`BPF_ADD`).
pub const BPF_ADD: u8 = 0x00;
/// ALU operation: move (`BPF_MOV`).
pub const BPF_MOV: u8 = 0xb0;
/// Jump operation: jump if greater, unsigned (`BPF_JGT`).
pub const BPF_JGT: u8 = 0x20;
/// Jump operation: jump if not equal (`BPF_JNE`).
pub const BPF_JNE: u8 = 0x50;
/// Jump operation: call a helper (`BPF_CALL`).
pub const BPF_CALL: u8 = 0x80;
/// Jump operation: return r0 (`BPF_EXIT`).
pub const BPF_EXIT: u8 = 0x90;
/// `src_reg` of a 64-bit immediate load meaning "imm is a map fd".
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

/// Helper `bpf_redirect_map(map, key, flags)` (helper id 51).
pub const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// XDP verdict: abort (an exception, counted by the kernel).
pub const XDP_ABORTED: u32 = 0;
/// XDP verdict: drop the frame.
pub const XDP_DROP: u32 = 1;
/// XDP verdict: hand the frame to the kernel stack.
pub const XDP_PASS: u32 = 2;
/// XDP verdict: transmit back out of the same interface.
pub const XDP_TX: u32 = 3;
/// XDP verdict: redirected (to an AF_XDP socket, here).
pub const XDP_REDIRECT: u32 = 4;

/// Offset of `data` in `struct xdp_md`.
pub const XDP_MD_DATA: i16 = 0;
/// Offset of `data_end` in `struct xdp_md`.
pub const XDP_MD_DATA_END: i16 = 4;
/// Offset of `rx_queue_index` in `struct xdp_md`.
pub const XDP_MD_RX_QUEUE_INDEX: i16 = 16;
/// Length of an Ethernet II header, as the program's immediate
/// ([`bcl_ether::HEADER_LEN`]).
pub const ETH_HLEN: i32 = bcl_ether::HEADER_LEN as i32;
/// Offset of the EtherType in an Ethernet II header, as the program's load
/// offset ([`bcl_ether::ETHERTYPE_OFFSET`]).
pub const ETH_TYPE_OFFSET: i16 = bcl_ether::ETHERTYPE_OFFSET as i16;

/// Register numbers.
pub mod reg {
    /// Return value / helper result.
    pub const R0: u8 = 0;
    /// First argument; holds the context (`struct xdp_md *`) on entry.
    pub const R1: u8 = 1;
    /// Second argument.
    pub const R2: u8 = 2;
    /// Third argument.
    pub const R3: u8 = 3;
    /// Fourth argument / scratch.
    pub const R4: u8 = 4;
}

/// One eBPF instruction exactly as the kernel reads it (`struct bpf_insn`):
/// opcode, destination and source registers in one byte (destination in the
/// low nibble), a signed 16-bit offset and a signed 32-bit immediate.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode: class | size/op | mode/source.
    pub code: u8,
    /// `dst_reg` (bits 0–3) and `src_reg` (bits 4–7).
    pub regs: u8,
    /// Memory or jump offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// An instruction from its fields.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }
    /// `dst = *(u32 *)(src + off)`.
    pub const fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_W | BPF_MEM, dst, src, off, 0)
    }
    /// `dst = *(u16 *)(src + off)`.
    pub const fn ldx_h(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(BPF_LDX | BPF_H | BPF_MEM, dst, src, off, 0)
    }
    /// `dst = src` (64-bit).
    pub const fn mov64_reg(dst: u8, src: u8) -> Insn {
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0)
    }
    /// `dst = imm` (64-bit, sign-extended).
    pub const fn mov64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)
    }
    /// `dst += imm` (64-bit).
    pub const fn add64_imm(dst: u8, imm: i32) -> Insn {
        Insn::new(BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm)
    }
    /// `if dst > src goto +off` (unsigned).
    pub const fn jgt_reg(dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JGT | BPF_X, dst, src, off, 0)
    }
    /// `if dst != imm goto +off`.
    pub const fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(BPF_JMP | BPF_JNE | BPF_K, dst, 0, off, imm)
    }
    /// `dst = map` for a map file descriptor: two instruction slots.
    pub const fn ld_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
        [
            Insn::new(BPF_LD | BPF_DW | BPF_IMM, dst, BPF_PSEUDO_MAP_FD, 0, fd),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }
    /// `call helper`.
    pub const fn call(helper: i32) -> Insn {
        Insn::new(BPF_JMP | BPF_CALL, 0, 0, 0, helper)
    }
    /// `exit` (return r0).
    pub const fn exit() -> Insn {
        Insn::new(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
    }
}

/// The EtherType as the program's 16-bit load sees it: the two bytes in
/// network order, read in the CPU's byte order.
pub fn ethertype_as_loaded(ethertype: u16) -> i32 {
    i32::from(u16::from_ne_bytes(ethertype.to_be_bytes()))
}

/// The redirect program (see the module documentation for the listing):
/// frames of `ethertype` go to the XSKMAP `map_fd` entry of their RX queue
/// (`fallback` when that entry is empty); every other frame is passed.
pub fn redirect_program(ethertype: u16, map_fd: RawFd, fallback: u32) -> Vec<Insn> {
    use reg::*;
    // Index of the shared "pass" tail, the jump target of the two tests.
    const PASS: i16 = 13;
    let map = Insn::ld_map_fd(R1, map_fd);
    let prog = vec![
        // 0: r2 = ctx->data, the first byte of the frame.
        Insn::ldx_w(R2, R1, XDP_MD_DATA),
        // 1: r3 = ctx->data_end, one past the last byte.
        Insn::ldx_w(R3, R1, XDP_MD_DATA_END),
        // 2: r4 = data.
        Insn::mov64_reg(R4, R2),
        // 3: r4 = data + 14, the end of the Ethernet header.
        Insn::add64_imm(R4, ETH_HLEN),
        // 4: a frame shorter than an Ethernet header is passed (this check
        //    is also what lets the verifier accept the load below).
        Insn::jgt_reg(R4, R3, PASS - 4 - 1),
        // 5: r4 = the EtherType, two bytes at offset 12, as stored.
        Insn::ldx_h(R4, R2, ETH_TYPE_OFFSET),
        // 6: any other EtherType is passed.
        Insn::jne_imm(R4, ethertype_as_loaded(ethertype), PASS - 6 - 1),
        // 7: r2 = key = the RX queue the frame arrived on.
        Insn::ldx_w(R2, R1, XDP_MD_RX_QUEUE_INDEX),
        // 8, 9: r1 = the XSKMAP (64-bit immediate: map fd, resolved at load).
        map[0],
        map[1],
        // 10: r3 = flags; the low two bits are the verdict when the map has
        //     no socket at the key.
        Insn::mov64_imm(R3, fallback as i32),
        // 11: r0 = bpf_redirect_map(xskmap, rx_queue_index, fallback).
        Insn::call(BPF_FUNC_REDIRECT_MAP),
        // 12: return r0 (XDP_REDIRECT, or the fallback).
        Insn::exit(),
        // 13: r0 = XDP_PASS: the kernel stack gets every other frame.
        Insn::mov64_imm(R0, XDP_PASS as i32),
        // 14: return r0.
        Insn::exit(),
    ];
    debug_assert_eq!(prog.len(), 15);
    prog
}

/// A trivial program that passes every frame (used by tests to stand for
/// "someone else's XDP program").
pub fn pass_program() -> Vec<Insn> {
    vec![
        // 0: r0 = XDP_PASS.
        Insn::mov64_imm(reg::R0, XDP_PASS as i32),
        // 1: return r0.
        Insn::exit(),
    ]
}

// ---- bpf(2) ----

const BPF_MAP_CREATE: u32 = 0;
const BPF_MAP_UPDATE_ELEM: u32 = 2;
const BPF_MAP_DELETE_ELEM: u32 = 3;
const BPF_PROG_LOAD: u32 = 5;
const BPF_PROG_TEST_RUN: u32 = 10;
const BPF_PROG_GET_FD_BY_ID: u32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: u32 = 15;
const BPF_LINK_CREATE: u32 = 28;
const BPF_LINK_DETACH: u32 = 34;

/// `BPF_MAP_TYPE_XSKMAP`.
pub const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
pub const BPF_PROG_TYPE_XDP: u32 = 6;
/// Attach type `BPF_XDP`.
pub const BPF_XDP: u32 = 37;
/// `XDP_FLAGS_SKB_MODE`: generic XDP, run on socket buffers.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
/// `XDP_FLAGS_DRV_MODE`: native XDP, run by the driver.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `bpf_attr` for `BPF_MAP_CREATE` (the leading fields we set).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_attr` for `BPF_PROG_LOAD` up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `bpf_attr` for `BPF_LINK_CREATE` (XDP: target is an ifindex).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `bpf_attr` for `BPF_LINK_DETACH`.
#[repr(C)]
#[derive(Default)]
struct LinkDetachAttr {
    link_fd: u32,
}

/// `bpf_attr` for `BPF_PROG_TEST_RUN`.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `bpf_attr` for `BPF_PROG_GET_FD_BY_ID`.
#[repr(C)]
#[derive(Default)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// Size of `struct bpf_prog_info` we ask for, and offsets in it.
const PROG_INFO_LEN: usize = 232;
const PROG_INFO_ID: usize = 4;
const PROG_INFO_NAME: usize = 64;

/// `bpf(cmd, attr, sizeof attr)`.
///
/// # Safety
/// `A` must be the `bpf_attr` layout `cmd` expects, and every pointer it
/// holds must be valid for what the kernel does with it during the call.
unsafe fn bpf<A>(cmd: u32, attr: &mut A) -> io::Result<libc::c_long> {
    // SAFETY: the caller guarantees the attribute layout and its pointers;
    // the kernel reads/writes at most `size_of::<A>()` bytes of `attr`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            (attr as *mut A).cast::<libc::c_void>(),
            size_of::<A>() as libc::c_long,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn name16(name: &str) -> [u8; 16] {
    let mut n = [0u8; 16];
    for (d, s) in n.iter_mut().zip(name.bytes().take(15)) {
        *d = s;
    }
    n
}

/// Creates an XSKMAP with `entries` slots (one per RX queue).
pub fn create_xskmap(entries: u32, name: &str) -> io::Result<OwnedFd> {
    let mut a = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries.max(1),
        map_name: name16(name),
        ..Default::default()
    };
    // SAFETY: MapCreateAttr is the BPF_MAP_CREATE layout; it holds no pointer.
    let fd = unsafe { bpf(BPF_MAP_CREATE, &mut a) }?;
    owned_fd(fd as libc::c_int)
}

/// Puts the AF_XDP socket `xsk` at `key` of the XSKMAP `map`.
pub fn xskmap_set(map: RawFd, key: u32, xsk: RawFd) -> io::Result<()> {
    let value: u32 = xsk as u32;
    let mut a = MapElemAttr {
        map_fd: map as u32,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0, // BPF_ANY
        ..Default::default()
    };
    // SAFETY: the layout is BPF_MAP_UPDATE_ELEM's; `key` and `value` point
    // to 4-byte locals that outlive the call and are only read.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut a) }.map(drop)
}

/// Removes `key` from the XSKMAP `map`.
pub fn xskmap_delete(map: RawFd, key: u32) -> io::Result<()> {
    let mut a = MapElemAttr {
        map_fd: map as u32,
        key: &key as *const u32 as u64,
        ..Default::default()
    };
    // SAFETY: BPF_MAP_DELETE_ELEM layout; `key` outlives the call.
    unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut a) }.map(drop)
}

/// A program the verifier refused, with its log.
#[derive(Debug, thiserror::Error)]
#[error("BPF_PROG_LOAD failed: {source}{}", if log.is_empty() { String::new() } else { format!("; verifier log:\n{log}") })]
pub struct LoadError {
    /// The error of the `bpf` call.
    #[source]
    pub source: io::Error,
    /// What the verifier said (empty when it said nothing).
    pub log: String,
}

/// `prog_flags` bit: the program handles multi-buffer (fragmented)
/// frames, so drivers may give it frames larger than one page (veth then
/// accepts MTUs above ~3500 bytes in native mode).
pub const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;

/// Loads an XDP program named `name`. On failure the load is repeated with
/// the verifier log on, and the log is returned in the error.
pub fn load_xdp_program(insns: &[Insn], name: &str) -> Result<OwnedFd, LoadError> {
    load_xdp_program_with(insns, name, 0)
}

/// [`load_xdp_program`] with `prog_flags` (e.g. [`BPF_F_XDP_HAS_FRAGS`]).
pub fn load_xdp_program_with(
    insns: &[Insn],
    name: &str,
    prog_flags: u32,
) -> Result<OwnedFd, LoadError> {
    let license = c"Dual MIT/GPL";
    let attempt = |log: Option<&mut [u8]>| -> io::Result<OwnedFd> {
        let (level, size, buf) = match log {
            Some(b) => (1, b.len() as u32, b.as_mut_ptr() as u64),
            None => (0, 0, 0),
        };
        let mut a = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: level,
            log_size: size,
            log_buf: buf,
            prog_name: name16(name),
            expected_attach_type: BPF_XDP,
            prog_flags,
            ..Default::default()
        };
        // SAFETY: BPF_PROG_LOAD layout; `insns` (insn_cnt × 8 bytes),
        // `license` (NUL-terminated) and the log buffer (log_size bytes,
        // written by the kernel) all outlive the call.
        let fd = unsafe { bpf(BPF_PROG_LOAD, &mut a) }?;
        owned_fd(fd as libc::c_int)
    };
    match attempt(None) {
        Ok(fd) => Ok(fd),
        Err(source) => {
            let mut log = vec![0u8; 64 * 1024];
            let _ = attempt(Some(&mut log));
            let text = CStr::from_bytes_until_nul(&log)
                .map(|c| c.to_string_lossy().trim_end().to_string())
                .unwrap_or_default();
            Err(LoadError { source, log: text })
        }
    }
}

/// Attaches `prog` to interface `ifindex` with a BPF link (`flags`:
/// [`XDP_FLAGS_DRV_MODE`] or [`XDP_FLAGS_SKB_MODE`]). The program stays
/// attached while the link's file descriptor is open (in this process or a
/// copy of it) and goes away when the last one closes, including when the
/// process dies.
pub fn link_create_xdp(prog: RawFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = LinkCreateAttr {
        prog_fd: prog as u32,
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags,
    };
    // SAFETY: BPF_LINK_CREATE layout; no pointers.
    let fd = unsafe { bpf(BPF_LINK_CREATE, &mut a) }?;
    owned_fd(fd as libc::c_int)
}

/// Detaches a BPF link now, even if copies of its descriptor exist.
pub fn link_detach(link: RawFd) -> io::Result<()> {
    let mut a = LinkDetachAttr {
        link_fd: link as u32,
    };
    // SAFETY: BPF_LINK_DETACH layout; no pointers.
    unsafe { bpf(BPF_LINK_DETACH, &mut a) }.map(drop)
}

/// Runs `prog` once on `frame` (`BPF_PROG_TEST_RUN`) and returns its verdict.
pub fn test_run(prog: RawFd, frame: &[u8]) -> io::Result<u32> {
    let mut out = vec![0u8; frame.len() + 512];
    let mut a = TestRunAttr {
        prog_fd: prog as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: BPF_PROG_TEST_RUN layout; `frame` is read (data_size_in
    // bytes) and `out` written (at most data_size_out bytes), both outlive
    // the call.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut a) }?;
    Ok(a.retval)
}

/// What the kernel says about a loaded program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgInfo {
    /// The program's id (as `ip link` and `bpftool` show it).
    pub id: u32,
    /// Its name (at most 15 characters).
    pub name: String,
}

/// Information about the program behind `fd`.
pub fn prog_info(fd: RawFd) -> io::Result<ProgInfo> {
    let mut buf = [0u8; PROG_INFO_LEN];
    let mut a = InfoAttr {
        bpf_fd: fd as u32,
        info_len: PROG_INFO_LEN as u32,
        info: buf.as_mut_ptr() as u64,
    };
    // SAFETY: BPF_OBJ_GET_INFO_BY_FD layout; the kernel writes at most
    // info_len bytes into `buf`, which outlives the call. All pointer
    // fields inside the zeroed info are NULL with zero lengths.
    unsafe { bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a) }?;
    let id = u32::from_ne_bytes(
        buf[PROG_INFO_ID..PROG_INFO_ID + 4]
            .try_into()
            .unwrap_or_default(),
    );
    let name = &buf[PROG_INFO_NAME..PROG_INFO_NAME + 16];
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(ProgInfo {
        id,
        name: String::from_utf8_lossy(&name[..end]).into_owned(),
    })
}

/// Information about the loaded program with id `id`.
pub fn prog_info_by_id(id: u32) -> io::Result<ProgInfo> {
    let mut a = GetFdByIdAttr {
        id,
        ..Default::default()
    };
    // SAFETY: BPF_PROG_GET_FD_BY_ID layout; no pointers.
    let fd = unsafe { bpf(BPF_PROG_GET_FD_BY_ID, &mut a) }?;
    let fd = owned_fd(fd as libc::c_int)?;
    prog_info(fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_like_the_kernel_expects() {
        // r2 = *(u32 *)(r1 + 16): 0x61, dst 2, src 1.
        let i = Insn::ldx_w(reg::R2, reg::R1, 16);
        assert_eq!((i.code, i.regs, i.off, i.imm), (0x61, 0x12, 16, 0));
        // r4 = *(u16 *)(r2 + 12): 0x69.
        assert_eq!(Insn::ldx_h(reg::R4, reg::R2, 12).code, 0x69);
        // if r4 > r3 goto +8: 0x2d.
        let j = Insn::jgt_reg(reg::R4, reg::R3, 8);
        assert_eq!((j.code, j.regs, j.off), (0x2d, 0x34, 8));
        // if r4 != imm: 0x55.
        assert_eq!(Insn::jne_imm(reg::R4, 7, 1).code, 0x55);
        // r4 += 14: 0x07; r0 = 2: 0xb7; r4 = r2: 0xbf.
        assert_eq!(Insn::add64_imm(reg::R4, 14).code, 0x07);
        assert_eq!(Insn::mov64_imm(reg::R0, 2).code, 0xb7);
        assert_eq!(Insn::mov64_reg(reg::R4, reg::R2).code, 0xbf);
        // ld_imm64 with a map fd: 0x18, src = BPF_PSEUDO_MAP_FD.
        let m = Insn::ld_map_fd(reg::R1, 9);
        assert_eq!((m[0].code, m[0].regs, m[0].imm), (0x18, 0x11, 9));
        assert_eq!(m[1], Insn::new(0, 0, 0, 0, 0));
        assert_eq!(Insn::call(51).code, 0x85);
        assert_eq!(Insn::exit().code, 0x95);
        assert_eq!(size_of::<Insn>(), 8);
    }

    #[test]
    fn program_has_fifteen_instructions_and_jumps_land_on_the_pass_tail() {
        let p = redirect_program(0x88b5, 3, XDP_PASS);
        assert_eq!(p.len(), 15);
        // Both conditional jumps go to instruction 13: r0 = XDP_PASS.
        for (at, insn) in p.iter().enumerate() {
            if insn.code == BPF_JMP | BPF_JGT | BPF_X || insn.code == BPF_JMP | BPF_JNE | BPF_K {
                let target = at as i64 + 1 + i64::from(insn.off);
                assert_eq!(target, 13, "jump at {at}");
            }
        }
        assert_eq!(p[13], Insn::mov64_imm(reg::R0, XDP_PASS as i32));
        assert_eq!(p[10], Insn::mov64_imm(reg::R3, XDP_PASS as i32));
        // The EtherType constant is the wire bytes 88 b5 as the CPU reads them.
        assert_eq!(
            p[6].imm,
            i32::from(u16::from_ne_bytes([0x88, 0xb5])),
            "compare against the bytes as stored"
        );
    }

    #[test]
    fn attribute_layouts_match_linux_bpf_h() {
        // Offsets checked against the kernel headers (offsetof in C).
        assert_eq!(size_of::<MapCreateAttr>(), 44);
        assert_eq!(size_of::<MapElemAttr>(), 32);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, prog_name), 48);
        assert_eq!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type), 68);
        assert_eq!(std::mem::offset_of!(LinkCreateAttr, flags), 12);
        assert_eq!(std::mem::offset_of!(TestRunAttr, ctx_in), 48);
        assert_eq!(size_of::<TestRunAttr>(), 64);
    }
}
