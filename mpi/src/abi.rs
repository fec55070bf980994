//! The MPICH ABI: handle values, constants and the status layout, as
//! MPICH's `mpi.h` fixes them (and as `include/mpi.h` repeats them), so a
//! program compiled against MPICH runs on this library unmodified.
//!
//! MPICH handles are `int`s with the kind of handle in bits 30–31 (01
//! built in, 10 direct, 11 indirect, 00 invalid/null), the kind of object
//! in bits 26–29, and an index below. Built-in datatypes carry their size
//! in bytes in bits 8–15 (`MPI_INT` is `0x4c000405`: 4 bytes, number 5).

#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use std::ffi::c_int;

pub type MPI_Comm = c_int;
pub type MPI_Datatype = c_int;
pub type MPI_Op = c_int;
pub type MPI_Request = c_int;
pub type MPI_Errhandler = c_int;
pub type MPI_Aint = std::ffi::c_long;
pub type MPI_Count = std::ffi::c_long;

/// `MPI_Status` exactly as MPICH lays it out: the byte count split in two
/// (the high part shares its word with the cancelled flag in bit 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

/// `MPI_User_function`: `inout[i] = in[i] op inout[i]` for `*len` elements.
pub type MPI_User_function = unsafe extern "C" fn(
    invec: *mut std::ffi::c_void,
    inoutvec: *mut std::ffi::c_void,
    len: *mut c_int,
    datatype: *mut MPI_Datatype,
);

// Object kinds, bits 26–29 of a handle.
pub const KIND_COMM: u32 = 0x1;
pub const KIND_DATATYPE: u32 = 0x3;
pub const KIND_OP: u32 = 0x6;
pub const KIND_REQUEST: u32 = 0xb;

/// The handle of direct object `index` of `kind` (bits 30–31 = 10).
pub fn direct(kind: u32, index: usize) -> c_int {
    (0x8000_0000 | (kind << 26) | (index as u32 & 0x03ff_ffff)) as c_int
}

/// The handle of indirect object `index` of `kind` (bits 30–31 = 11).
pub fn indirect(kind: u32, index: usize) -> c_int {
    (0xc000_0000 | (kind << 26) | (index as u32 & 0x03ff_ffff)) as c_int
}

/// `(kind of handle, kind of object, index)` of a handle.
pub fn decode(h: c_int) -> (u32, u32, usize) {
    let h = h as u32;
    (h >> 30, (h >> 26) & 0xf, (h & 0x03ff_ffff) as usize)
}

pub const MPI_COMM_WORLD: MPI_Comm = 0x4400_0000;
pub const MPI_COMM_SELF: MPI_Comm = 0x4400_0001;
pub const MPI_COMM_NULL: MPI_Comm = 0x0400_0000;
pub const MPI_REQUEST_NULL: MPI_Request = 0x2c00_0000;
pub const MPI_OP_NULL: MPI_Op = 0x1800_0000;
pub const MPI_DATATYPE_NULL: MPI_Datatype = 0x0c00_0000;
pub const MPI_ERRHANDLER_NULL: MPI_Errhandler = 0x1400_0000;
pub const MPI_ERRORS_ARE_FATAL: MPI_Errhandler = 0x5400_0000;
pub const MPI_ERRORS_RETURN: MPI_Errhandler = 0x5400_0001;

// Built-in datatypes.
pub const MPI_CHAR: MPI_Datatype = 0x4c00_0101;
pub const MPI_SIGNED_CHAR: MPI_Datatype = 0x4c00_0118;
pub const MPI_UNSIGNED_CHAR: MPI_Datatype = 0x4c00_0102;
pub const MPI_BYTE: MPI_Datatype = 0x4c00_010d;
pub const MPI_WCHAR: MPI_Datatype = 0x4c00_040e;
pub const MPI_SHORT: MPI_Datatype = 0x4c00_0203;
pub const MPI_UNSIGNED_SHORT: MPI_Datatype = 0x4c00_0204;
pub const MPI_INT: MPI_Datatype = 0x4c00_0405;
pub const MPI_UNSIGNED: MPI_Datatype = 0x4c00_0406;
pub const MPI_LONG: MPI_Datatype = 0x4c00_0807;
pub const MPI_UNSIGNED_LONG: MPI_Datatype = 0x4c00_0808;
pub const MPI_FLOAT: MPI_Datatype = 0x4c00_040a;
pub const MPI_DOUBLE: MPI_Datatype = 0x4c00_080b;
pub const MPI_LONG_DOUBLE: MPI_Datatype = 0x4c00_100c;
pub const MPI_LONG_LONG_INT: MPI_Datatype = 0x4c00_0809;
pub const MPI_UNSIGNED_LONG_LONG: MPI_Datatype = 0x4c00_0819;
pub const MPI_PACKED: MPI_Datatype = 0x4c00_010f;
pub const MPI_INT8_T: MPI_Datatype = 0x4c00_0137;
pub const MPI_INT16_T: MPI_Datatype = 0x4c00_0238;
pub const MPI_INT32_T: MPI_Datatype = 0x4c00_0439;
pub const MPI_INT64_T: MPI_Datatype = 0x4c00_083a;
pub const MPI_UINT8_T: MPI_Datatype = 0x4c00_013b;
pub const MPI_UINT16_T: MPI_Datatype = 0x4c00_023c;
pub const MPI_UINT32_T: MPI_Datatype = 0x4c00_043d;
pub const MPI_UINT64_T: MPI_Datatype = 0x4c00_083e;
pub const MPI_C_BOOL: MPI_Datatype = 0x4c00_013f;
pub const MPI_C_FLOAT_COMPLEX: MPI_Datatype = 0x4c00_0840;
pub const MPI_C_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_1041;
pub const MPI_C_LONG_DOUBLE_COMPLEX: MPI_Datatype = 0x4c00_2042;
pub const MPI_AINT: MPI_Datatype = 0x4c00_0843;
pub const MPI_OFFSET: MPI_Datatype = 0x4c00_0844;
pub const MPI_COUNT: MPI_Datatype = 0x4c00_0845;
pub const MPI_CXX_BOOL: MPI_Datatype = 0x4c00_0133;
// The pair types of MINLOC and MAXLOC; all but MPI_2INT are direct
// handles 0–4 in MPICH, so this library's own datatypes are indirect.
pub const MPI_FLOAT_INT: MPI_Datatype = 0x8c00_0000_u32 as c_int;
pub const MPI_DOUBLE_INT: MPI_Datatype = 0x8c00_0001_u32 as c_int;
pub const MPI_LONG_INT: MPI_Datatype = 0x8c00_0002_u32 as c_int;
pub const MPI_SHORT_INT: MPI_Datatype = 0x8c00_0003_u32 as c_int;
pub const MPI_2INT: MPI_Datatype = 0x4c00_0816;
pub const MPI_LONG_DOUBLE_INT: MPI_Datatype = 0x8c00_0004_u32 as c_int;

// Built-in operations.
pub const MPI_MAX: MPI_Op = 0x5800_0001;
pub const MPI_MIN: MPI_Op = 0x5800_0002;
pub const MPI_SUM: MPI_Op = 0x5800_0003;
pub const MPI_PROD: MPI_Op = 0x5800_0004;
pub const MPI_LAND: MPI_Op = 0x5800_0005;
pub const MPI_BAND: MPI_Op = 0x5800_0006;
pub const MPI_LOR: MPI_Op = 0x5800_0007;
pub const MPI_BOR: MPI_Op = 0x5800_0008;
pub const MPI_LXOR: MPI_Op = 0x5800_0009;
pub const MPI_BXOR: MPI_Op = 0x5800_000a;
pub const MPI_MINLOC: MPI_Op = 0x5800_000b;
pub const MPI_MAXLOC: MPI_Op = 0x5800_000c;
pub const MPI_REPLACE: MPI_Op = 0x5800_000d;
pub const MPI_NO_OP: MPI_Op = 0x5800_000e;

// Special ranks, tags and counts.
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ROOT: c_int = -3;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_UNDEFINED: c_int = -32766;
/// The largest tag: the value of the `MPI_TAG_UB` attribute (the standard
/// asks for at least 32767; tags travel as 64-bit numbers here).
pub const TAG_UB: c_int = c_int::MAX;

// Special buffer and status pointers (as addresses).
pub const MPI_IN_PLACE: usize = usize::MAX;
pub const MPI_STATUS_IGNORE: usize = 1;

pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;

pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const MPI_BSEND_OVERHEAD: usize = 96;

// Error classes.
pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_PENDING: c_int = 18;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPIX_ERR_PROC_FAILED: c_int = 101;
