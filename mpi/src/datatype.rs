//! Datatypes: what one element of an MPI datatype is in memory, and how
//! elements are packed into the bytes a message carries.
//!
//! A type is a list of runs (offset, length) of one element's bytes, in
//! the type's order, with a lower bound and an extent (the stride between
//! consecutive elements). Offsets may be negative (a vector with a negative
//! stride reaches below its start). A message carries the runs of each
//! element back to back (the *wire* form). A contiguous type's wire form is
//! its memory, so it is sent and received in place; only other types are
//! packed.
//!
//! The memory of `count` elements at address `p` runs from `p + first` to
//! `p + (count − 1)·extent + end`, where `first` and `end` are the lowest
//! and highest byte any run touches ([`TypeInfo::first`],
//! [`TypeInfo::span`]); buffers are taken from there, and [`pack`] and
//! [`unpack`] index from there.
//!
//! [`pack`]: TypeInfo::pack
//! [`unpack`]: TypeInfo::unpack
//!
//! The pair types of MINLOC/MAXLOC keep their padding on the wire (16 bytes
//! for `MPI_DOUBLE_INT`), because the reductions of [`bcl::coll`] work on
//! that layout; their `MPI_Type_size` is still MPICH's (12), and a status
//! counts received elements in those units.

use crate::abi::*;
use crate::error::{MpiError, MpiResult};
use bcl::coll::Datatype as Elem;
use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

/// A datatype as calls and requests hold it. A predefined type is a
/// reference into a table made once, so taking one costs nothing; a made
/// type is shared, so a request keeps it alive after `MPI_Type_free`.
///
/// The predefined case matters on the latency path: an `Arc`'s reference
/// count is a locked instruction, which waits until the stores before it
/// (a message just written into a shared-memory ring) have reached the
/// other core, a few tens of nanoseconds per call.
#[derive(Clone, Debug)]
pub enum Type {
    /// Predefined (or otherwise made once for the process's life).
    Static(&'static TypeInfo),
    /// Made by the program.
    Shared(Arc<TypeInfo>),
}

impl std::ops::Deref for Type {
    type Target = TypeInfo;
    fn deref(&self) -> &TypeInfo {
        match self {
            Type::Static(t) => t,
            Type::Shared(t) => t,
        }
    }
}

/// One datatype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeInfo {
    /// Bytes of data in one element (`MPI_Type_size`).
    pub size: usize,
    /// Distance from one element to the next (`MPI_Type_get_extent`).
    pub extent: usize,
    /// The lower bound (`MPI_Type_get_extent`).
    pub lb: isize,
    /// The bytes of one element, as (offset, length) runs in order.
    pub runs: Vec<(isize, usize)>,
    /// The predefined type all of it is made of, with the collectives'
    /// element type for it if they have one (reductions need it).
    pub basic: Option<(MPI_Datatype, Option<Elem>)>,
    /// Whether it may be used in communication (predefined types are).
    pub committed: bool,
}

impl TypeInfo {
    /// Bytes of one element on the wire.
    pub fn wire(&self) -> usize {
        self.runs.iter().map(|r| r.1).sum()
    }

    /// Whether the wire form of `n` elements is their memory.
    pub fn contiguous(&self) -> bool {
        match self.runs.as_slice() {
            [] => true,
            [(0, len)] => *len == self.extent && self.lb == 0,
            _ => false,
        }
    }

    /// The offset of the lowest byte of an element (0 unless a run reaches
    /// below the element's address).
    pub fn first(&self) -> isize {
        self.runs.iter().map(|r| r.0).min().unwrap_or(0).min(0)
    }

    /// Bytes of memory `count` elements span, from [`first`](Self::first)
    /// of the first element to the last byte of the last.
    pub fn span(&self, count: usize) -> usize {
        let end = self
            .runs
            .iter()
            .map(|r| r.0 + r.1 as isize)
            .max()
            .unwrap_or(0);
        if count == 0 || self.runs.is_empty() {
            return 0;
        }
        ((count - 1) * self.extent) + (end - self.first()) as usize
    }

    /// A type of `count` elements of `self` back to back.
    pub fn contiguous_of(&self, count: usize) -> TypeInfo {
        self.vector_of(count, 1, 1)
    }

    /// A type of `count` blocks of `blocklen` elements, the blocks `stride`
    /// elements apart (`MPI_Type_vector`; `stride` may be negative).
    pub fn vector_of(&self, count: usize, blocklen: usize, stride: isize) -> TypeInfo {
        let ext = self.extent as isize;
        let mut runs: Vec<(isize, usize)> = Vec::new();
        let (mut lo, mut hi) = (isize::MAX, isize::MIN);
        for b in 0..count as isize {
            for e in 0..blocklen as isize {
                let base = (b * stride + e) * ext;
                lo = lo.min(base);
                hi = hi.max(base);
                for &(off, len) in &self.runs {
                    match runs.last_mut() {
                        Some(last) if last.0 + last.1 as isize == base + off => last.1 += len,
                        _ => runs.push((base + off, len)),
                    }
                }
            }
        }
        let (lb, extent) = if count == 0 || blocklen == 0 {
            (0, 0)
        } else {
            (lo + self.lb, (hi - lo) as usize + self.extent)
        };
        TypeInfo {
            size: count * blocklen * self.size,
            extent,
            lb,
            runs,
            basic: self.basic,
            committed: false,
        }
    }

    /// Copies `count` elements at `mem` (which starts at the first
    /// element's [`first`](Self::first) byte) into their wire form.
    pub fn pack(&self, mem: &[u8], count: usize, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(count * self.wire());
        let first = self.first();
        for i in 0..count {
            let base = i * self.extent;
            for &(off, len) in &self.runs {
                let at = base + (off - first) as usize;
                out.extend_from_slice(&mem[at..at + len]);
            }
        }
    }

    /// Copies wire bytes into the elements at `mem`: as many whole elements
    /// as `wire` holds, and the bytes of a last partial one.
    pub fn unpack(&self, wire: &[u8], mem: &mut [u8]) {
        let mut at = 0;
        let mut i = 0;
        let first = self.first();
        while at < wire.len() {
            let base = i * self.extent;
            for &(off, len) in &self.runs {
                let n = len.min(wire.len() - at);
                let to = base + (off - first) as usize;
                mem[to..to + n].copy_from_slice(&wire[at..at + n]);
                at += n;
                if at == wire.len() {
                    return;
                }
            }
            i += 1;
        }
    }
}

/// The predefined datatype of handle `h`, if it is one (made once).
fn predefined(h: MPI_Datatype) -> Option<Type> {
    // Built-in handles are 0x4c00SSNN (NN below 0x80), the pair types
    // 0x8c00000N: one table of 256 entries covers both.
    static TABLE: OnceLock<Vec<Option<TypeInfo>>> = OnceLock::new();
    let slot = match decode(h) {
        (0b01, KIND_DATATYPE, i) if (h as u32 & 0x00ff_0000) == 0 => i & 0x7f,
        (0b10, KIND_DATATYPE, i) if i < 0x80 => 0x80 | i,
        _ => return None,
    };
    let table = TABLE.get_or_init(|| {
        let mut t = vec![None; 256];
        for h in ALL_PREDEFINED {
            if let Some(info) = make_predefined(h) {
                let slot = match decode(h) {
                    (0b01, _, i) => i & 0x7f,
                    (_, _, i) => 0x80 | i,
                };
                t[slot] = Some(info);
            }
        }
        t
    });
    let t = table[slot].as_ref()?;
    // Another handle with the same slot is not this type.
    (t.basic.map(|b| b.0) == Some(h)).then_some(Type::Static(t))
}

/// Every predefined datatype handle.
const ALL_PREDEFINED: [MPI_Datatype; 39] = [
    MPI_CHAR,
    MPI_SIGNED_CHAR,
    MPI_UNSIGNED_CHAR,
    MPI_BYTE,
    MPI_WCHAR,
    MPI_SHORT,
    MPI_UNSIGNED_SHORT,
    MPI_INT,
    MPI_UNSIGNED,
    MPI_LONG,
    MPI_UNSIGNED_LONG,
    MPI_FLOAT,
    MPI_DOUBLE,
    MPI_LONG_DOUBLE,
    MPI_LONG_LONG_INT,
    MPI_UNSIGNED_LONG_LONG,
    MPI_PACKED,
    MPI_INT8_T,
    MPI_INT16_T,
    MPI_INT32_T,
    MPI_INT64_T,
    MPI_UINT8_T,
    MPI_UINT16_T,
    MPI_UINT32_T,
    MPI_UINT64_T,
    MPI_C_BOOL,
    MPI_C_FLOAT_COMPLEX,
    MPI_C_DOUBLE_COMPLEX,
    MPI_C_LONG_DOUBLE_COMPLEX,
    MPI_AINT,
    MPI_OFFSET,
    MPI_COUNT,
    MPI_CXX_BOOL,
    MPI_FLOAT_INT,
    MPI_DOUBLE_INT,
    MPI_LONG_INT,
    MPI_SHORT_INT,
    MPI_2INT,
    MPI_LONG_DOUBLE_INT,
];

/// A predefined datatype: its (size, extent, runs, basic) or `None` if
/// `h` is not one.
fn make_predefined(h: MPI_Datatype) -> Option<TypeInfo> {
    let pair = |size: usize, extent: usize, e: Elem| TypeInfo {
        size,
        extent,
        lb: 0,
        runs: vec![(0, extent)],
        basic: Some((h, Some(e))),
        committed: true,
    };
    let elem = match h {
        MPI_FLOAT_INT => return Some(pair(8, 8, Elem::FloatInt)),
        MPI_DOUBLE_INT => return Some(pair(12, 16, Elem::DoubleInt)),
        MPI_LONG_INT => return Some(pair(12, 16, Elem::LongInt)),
        MPI_SHORT_INT => return Some(pair(6, 8, Elem::ShortInt)),
        MPI_2INT => return Some(pair(8, 8, Elem::TwoInt)),
        MPI_LONG_DOUBLE_INT => {
            return Some(TypeInfo {
                size: 20,
                extent: 32,
                lb: 0,
                runs: vec![(0, 32)],
                basic: Some((h, None)),
                committed: true,
            })
        }
        MPI_CHAR | MPI_SIGNED_CHAR | MPI_INT8_T => Some(Elem::I8),
        MPI_UNSIGNED_CHAR | MPI_BYTE | MPI_UINT8_T | MPI_C_BOOL | MPI_CXX_BOOL | MPI_PACKED => {
            Some(Elem::U8)
        }
        MPI_SHORT | MPI_INT16_T => Some(Elem::I16),
        MPI_UNSIGNED_SHORT | MPI_UINT16_T => Some(Elem::U16),
        MPI_INT | MPI_INT32_T | MPI_WCHAR => Some(Elem::I32),
        MPI_UNSIGNED | MPI_UINT32_T => Some(Elem::U32),
        MPI_LONG | MPI_LONG_LONG_INT | MPI_INT64_T | MPI_AINT | MPI_OFFSET | MPI_COUNT => {
            Some(Elem::I64)
        }
        MPI_UNSIGNED_LONG | MPI_UNSIGNED_LONG_LONG | MPI_UINT64_T => Some(Elem::U64),
        MPI_FLOAT => Some(Elem::F32),
        MPI_DOUBLE => Some(Elem::F64),
        MPI_LONG_DOUBLE
        | MPI_C_FLOAT_COMPLEX
        | MPI_C_DOUBLE_COMPLEX
        | MPI_C_LONG_DOUBLE_COMPLEX => None,
        _ => return None,
    };
    // Built-in handles carry their size in bits 8–15.
    let size = ((h >> 8) & 0xff) as usize;
    Some(TypeInfo {
        size,
        extent: size,
        lb: 0,
        runs: vec![(0, size)],
        basic: Some((h, elem)),
        committed: true,
    })
}

/// The datatypes of a process: the predefined ones and those it made.
#[derive(Debug, Default)]
pub struct Types {
    made: Vec<Option<Type>>,
}

impl Types {
    /// The type of handle `h`.
    pub fn get(&self, h: MPI_Datatype) -> MpiResult<&Type> {
        self.lookup(h)
            .ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("{} is not a datatype", name(h))))
    }

    fn lookup(&self, h: MPI_Datatype) -> Option<&Type> {
        let (handle_kind, kind, index) = decode(h);
        if kind != KIND_DATATYPE {
            return None;
        }
        if handle_kind == 0b11 {
            return self.made.get(index)?.as_ref();
        }
        None
    }

    /// The type of `h`, which must be committed (usable in communication).
    pub fn usable(&self, h: MPI_Datatype) -> MpiResult<Type> {
        if let Some(t) = predefined(h) {
            return Ok(t);
        }
        let t = self.get(h)?;
        if !t.committed {
            return Err(MpiError::new(
                MPI_ERR_TYPE,
                format!("{} is not committed (MPI_Type_commit)", name(h)),
            ));
        }
        Ok(t.clone())
    }

    /// The type of `h`, committed or not (for size and extent queries and
    /// for making new types).
    pub fn any(&self, h: MPI_Datatype) -> MpiResult<Type> {
        match predefined(h) {
            Some(t) => Ok(t),
            None => self.get(h).cloned(),
        }
    }

    /// Registers a new (uncommitted) type and gives its handle.
    pub fn add(&mut self, t: TypeInfo) -> MPI_Datatype {
        let t = Type::Shared(Arc::new(t));
        let i = match self.made.iter().position(Option::is_none) {
            Some(i) => {
                self.made[i] = Some(t);
                i
            }
            None => {
                self.made.push(Some(t));
                self.made.len() - 1
            }
        };
        indirect(KIND_DATATYPE, i)
    }

    /// Marks a made type usable.
    pub fn commit(&mut self, h: MPI_Datatype) -> MpiResult {
        if predefined(h).is_some() {
            return Ok(());
        }
        let (_, _, index) = decode(h);
        self.get(h)?;
        if let Some(Some(Type::Shared(t))) = self.made.get_mut(index) {
            Arc::make_mut(t).committed = true;
        }
        Ok(())
    }

    /// Frees a made type (predefined ones cannot be freed).
    pub fn free(&mut self, h: MPI_Datatype) -> MpiResult {
        if predefined(h).is_some() {
            return Err(MpiError::new(
                MPI_ERR_TYPE,
                format!("{} is predefined and cannot be freed", name(h)),
            ));
        }
        self.get(h)?;
        let (_, _, index) = decode(h);
        self.made[index] = None;
        Ok(())
    }
}

/// A datatype handle for messages.
pub fn name(h: MPI_Datatype) -> String {
    match h {
        MPI_DATATYPE_NULL => "MPI_DATATYPE_NULL".into(),
        _ => format!("datatype {:#x}", h as u32),
    }
}

/// The number of whole `t` elements in `bytes` wire bytes, or
/// `MPI_UNDEFINED` if they are not whole (MPI_Get_count).
pub fn count_of(t: &TypeInfo, bytes: usize) -> c_int {
    let wire = t.wire();
    if wire == 0 {
        return if bytes == 0 { 0 } else { MPI_UNDEFINED };
    }
    if !bytes.is_multiple_of(wire) {
        return MPI_UNDEFINED;
    }
    c_int::try_from(bytes / wire).unwrap_or(MPI_UNDEFINED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_types_take_their_size_from_the_handle() {
        let t = Types::default();
        assert_eq!(t.usable(MPI_INT).unwrap().size, 4);
        assert_eq!(t.usable(MPI_DOUBLE).unwrap().extent, 8);
        assert_eq!(t.usable(MPI_LONG_DOUBLE).unwrap().size, 16);
        assert_eq!(t.usable(MPI_C_DOUBLE_COMPLEX).unwrap().size, 16);
        let di = t.usable(MPI_DOUBLE_INT).unwrap();
        assert_eq!((di.size, di.extent, di.wire()), (12, 16, 16));
        assert_eq!(t.usable(MPI_DATATYPE_NULL).unwrap_err().class, MPI_ERR_TYPE);
        assert_eq!(t.usable(MPI_COMM_WORLD).unwrap_err().class, MPI_ERR_TYPE);
    }

    #[test]
    fn a_vector_packs_its_blocks_and_unpacks_them_back() {
        let int = predefined(MPI_INT).unwrap();
        // 3 blocks of 2 ints, 4 ints apart: ints 0,1, 4,5, 8,9.
        let v = int.vector_of(3, 2, 4);
        assert_eq!((v.size, v.extent, v.lb, v.runs.len()), (24, 40, 0, 3));
        assert!(!v.contiguous());
        let mem: Vec<u8> = (0..40u8).collect();
        let mut wire = Vec::new();
        v.pack(&mem, 1, &mut wire);
        let want: Vec<u8> = [0..8, 16..24, 32..40].into_iter().flatten().collect();
        assert_eq!(wire, want);
        let mut back = vec![0u8; 40];
        v.unpack(&wire, &mut back);
        for &(off, len) in &v.runs {
            let at = off as usize;
            assert_eq!(back[at..at + len], mem[at..at + len]);
        }
        assert_eq!(v.span(2), 40 + 40);
        // A contiguous type of a contiguous type stays contiguous.
        let c = int.contiguous_of(5);
        assert!(c.contiguous());
        assert_eq!((c.size, c.extent, c.runs.clone()), (20, 20, vec![(0, 20)]));
        // A negative stride: ints at 0, -8 and -16 bytes, in that order.
        let n = int.vector_of(3, 1, -2);
        assert_eq!((n.lb, n.extent, n.first(), n.span(1)), (-16, 20, -16, 20));
        let mem: Vec<u8> = (0..20u8).collect();
        n.pack(&mem, 1, &mut wire);
        let want: Vec<u8> = [16..20, 8..12, 0..4].into_iter().flatten().collect();
        assert_eq!(wire, want);
        assert_eq!(count_of(&c, 40), 2);
        assert_eq!(count_of(&c, 30), MPI_UNDEFINED);
    }

    #[test]
    fn made_types_need_a_commit_and_can_be_freed() {
        let mut t = Types::default();
        let h = t.add(predefined(MPI_INT).unwrap().contiguous_of(2));
        assert_eq!(t.usable(h).unwrap_err().class, MPI_ERR_TYPE);
        t.commit(h).unwrap();
        assert_eq!(t.usable(h).unwrap().size, 8);
        t.free(h).unwrap();
        assert_eq!(t.any(h).unwrap_err().class, MPI_ERR_TYPE);
        assert_eq!(t.free(MPI_INT).unwrap_err().class, MPI_ERR_TYPE);
    }
}
