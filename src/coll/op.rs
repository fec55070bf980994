//! Reduction operations and the element datatypes they work on.
//!
//! Buffers are byte slices holding native-endian elements. They may be
//! sub-ranges of a `Vec<u8>` and so unaligned: every kernel reads and writes
//! elements through byte arrays (`from_ne_bytes`/`to_ne_bytes`), which the
//! compiler turns into plain vector loads and stores.
//!
//! The predefined operations follow MPI 3.1 §5.9.2 ([`BuiltinOp`]); a
//! [`UserOp`] is a function with MPI's `function(invec, inoutvec)` convention.
//! [`reduce_canonical`] combines one contribution per rank in a fixed tree
//! ([`canonical_split`]), so a floating-point reduction gives the same bits
//! however the collective moved the data.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// Element types a reduction works on; values are native-endian bytes in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Datatype {
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `struct { float v; int i; }`, 8 bytes (MPI_FLOAT_INT); [`FloatInt`].
    FloatInt,
    /// `struct { double v; int i; }`, 16 bytes with 4 bytes of tail padding
    /// (MPI_DOUBLE_INT); [`DoubleInt`].
    DoubleInt,
    /// `struct { long v; int i; }` with an `i64` value, 16 bytes with 4 bytes
    /// of tail padding (MPI_LONG_INT); [`LongInt`].
    LongInt,
    /// `struct { int v; int i; }`, 8 bytes (MPI_2INT); [`TwoInt`].
    TwoInt,
    /// `struct { short v; int i; }`: the value, 2 padding bytes, the index;
    /// 8 bytes (MPI_SHORT_INT); [`ShortInt`].
    ShortInt,
}

impl Datatype {
    /// Every datatype, in declaration order.
    pub const ALL: [Datatype; 15] = [
        Datatype::I8,
        Datatype::I16,
        Datatype::I32,
        Datatype::I64,
        Datatype::U8,
        Datatype::U16,
        Datatype::U32,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
        Datatype::FloatInt,
        Datatype::DoubleInt,
        Datatype::LongInt,
        Datatype::TwoInt,
        Datatype::ShortInt,
    ];

    /// Bytes per element (the C `sizeof`, padding included).
    pub fn size(self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
            Datatype::FloatInt | Datatype::TwoInt | Datatype::ShortInt => 8,
            Datatype::DoubleInt | Datatype::LongInt => 16,
        }
    }

    /// The name used in errors and reports: `"i32"`, `"f64"`, `"double_int"`, ...
    pub fn name(self) -> &'static str {
        match self {
            Datatype::I8 => "i8",
            Datatype::I16 => "i16",
            Datatype::I32 => "i32",
            Datatype::I64 => "i64",
            Datatype::U8 => "u8",
            Datatype::U16 => "u16",
            Datatype::U32 => "u32",
            Datatype::U64 => "u64",
            Datatype::F32 => "f32",
            Datatype::F64 => "f64",
            Datatype::FloatInt => "float_int",
            Datatype::DoubleInt => "double_int",
            Datatype::LongInt => "long_int",
            Datatype::TwoInt => "two_int",
            Datatype::ShortInt => "short_int",
        }
    }

    /// Whether this is a signed or unsigned integer type.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            Datatype::I8
                | Datatype::I16
                | Datatype::I32
                | Datatype::I64
                | Datatype::U8
                | Datatype::U16
                | Datatype::U32
                | Datatype::U64
        )
    }

    /// Whether this is `f32` or `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, Datatype::F32 | Datatype::F64)
    }

    /// Whether this is a value-index pair (the types of MinLoc and MaxLoc).
    pub fn is_pair(self) -> bool {
        matches!(
            self,
            Datatype::FloatInt
                | Datatype::DoubleInt
                | Datatype::LongInt
                | Datatype::TwoInt
                | Datatype::ShortInt
        )
    }
}

/// The predefined reductions (MPI's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BuiltinOp {
    /// Sum; integers wrap.
    Sum,
    /// Product; integers wrap.
    Prod,
    /// Minimum; floats by [`f64::total_cmp`] order, so -0.0 < +0.0.
    Min,
    /// Maximum; floats by [`f64::total_cmp`] order, so -0.0 < +0.0.
    Max,
    /// Bitwise and (integers).
    BitAnd,
    /// Bitwise or (integers).
    BitOr,
    /// Bitwise exclusive or (integers).
    BitXor,
    /// Logical and (integers; nonzero is true, the result is 1 or 0).
    LogicalAnd,
    /// Logical or (integers; nonzero is true, the result is 1 or 0).
    LogicalOr,
    /// Logical exclusive or (integers; nonzero is true, the result is 1 or 0).
    LogicalXor,
    /// The pair with the smaller value; on equal values the smaller index.
    /// Float values compare in total order, as in `Min`.
    MinLoc,
    /// The pair with the larger value; on equal values the smaller index.
    /// Float values compare in total order, as in `Max`.
    MaxLoc,
}

impl BuiltinOp {
    /// Every predefined reduction, in declaration order.
    pub const ALL: [BuiltinOp; 12] = [
        BuiltinOp::Sum,
        BuiltinOp::Prod,
        BuiltinOp::Min,
        BuiltinOp::Max,
        BuiltinOp::BitAnd,
        BuiltinOp::BitOr,
        BuiltinOp::BitXor,
        BuiltinOp::LogicalAnd,
        BuiltinOp::LogicalOr,
        BuiltinOp::LogicalXor,
        BuiltinOp::MinLoc,
        BuiltinOp::MaxLoc,
    ];

    /// The variant's name in lower case: `"sum"`, `"bitand"`, `"logicalxor"`, `"minloc"`, ...
    pub fn name(self) -> &'static str {
        match self {
            BuiltinOp::Sum => "sum",
            BuiltinOp::Prod => "prod",
            BuiltinOp::Min => "min",
            BuiltinOp::Max => "max",
            BuiltinOp::BitAnd => "bitand",
            BuiltinOp::BitOr => "bitor",
            BuiltinOp::BitXor => "bitxor",
            BuiltinOp::LogicalAnd => "logicaland",
            BuiltinOp::LogicalOr => "logicalor",
            BuiltinOp::LogicalXor => "logicalxor",
            BuiltinOp::MinLoc => "minloc",
            BuiltinOp::MaxLoc => "maxloc",
        }
    }

    /// The reduction whose [`name`](Self::name) is `s` (exactly), for command
    /// lines and configuration.
    pub fn from_name(s: &str) -> Option<BuiltinOp> {
        BuiltinOp::ALL.into_iter().find(|op| op.name() == s)
    }

    /// Whether MPI defines this reduction on `dt`.
    fn is_defined_on(self, dt: Datatype) -> bool {
        match self {
            BuiltinOp::Sum | BuiltinOp::Prod | BuiltinOp::Min | BuiltinOp::Max => {
                dt.is_integer() || dt.is_float()
            }
            BuiltinOp::BitAnd
            | BuiltinOp::BitOr
            | BuiltinOp::BitXor
            | BuiltinOp::LogicalAnd
            | BuiltinOp::LogicalOr
            | BuiltinOp::LogicalXor => dt.is_integer(),
            BuiltinOp::MinLoc | BuiltinOp::MaxLoc => dt.is_pair(),
        }
    }
}

/// The function of a [`UserOp`].
type UserFn = dyn Fn(Datatype, &[u8], &mut [u8]) + Send + Sync;

/// A user-defined reduction: `f(left, right)` must set `right[i] = left[i] op right[i]` for every element
/// (MPI's `function(invec, inoutvec)` convention); `commutative` says whether order may change.
///
/// The function gets whole buffers (every element at once, as with MPI), both
/// the same length, a multiple of the datatype's size. Clones share the function.
#[derive(Clone)]
pub struct UserOp {
    commutative: bool,
    f: Arc<UserFn>,
    /// Bytes of one indivisible element; 0: the datatype's size.
    element: usize,
}

impl UserOp {
    /// A user reduction computing `right = left op right` with `f`.
    pub fn new(
        commutative: bool,
        f: impl Fn(Datatype, &[u8], &mut [u8]) + Send + Sync + 'static,
    ) -> UserOp {
        UserOp {
            commutative,
            f: Arc::new(f),
            element: 0,
        }
    }

    /// The same reduction on elements of `bytes` bytes (a multiple of the
    /// datatype's size) that are never split: an algorithm divides the data
    /// only between such elements, and the function always gets whole ones.
    /// For elements made of several values of the datatype, as an MPI
    /// derived datatype of four doubles under a 2×2 matrix product.
    pub fn with_element(mut self, bytes: usize) -> UserOp {
        self.element = bytes;
        self
    }

    /// Whether the operands of this reduction may be swapped.
    pub fn is_commutative(&self) -> bool {
        self.commutative
    }
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("commutative", &self.commutative)
            .finish()
    }
}

/// A reduction: predefined or user-defined.
#[derive(Clone, Debug)]
pub enum Op {
    /// A predefined reduction.
    Builtin(BuiltinOp),
    /// A user-defined reduction.
    User(UserOp),
}

impl From<BuiltinOp> for Op {
    fn from(op: BuiltinOp) -> Op {
        Op::Builtin(op)
    }
}

impl From<UserOp> for Op {
    fn from(op: UserOp) -> Op {
        Op::User(op)
    }
}

/// Why a reduction could not run.
#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpError {
    /// The operation is not defined on this datatype (MPI's rules: arithmetic
    /// and min/max on integers and floats, bitwise and logical operations on
    /// integers, minloc/maxloc on pairs).
    #[error("{op} is not defined on {datatype}")]
    NotDefined {
        /// The operation's name.
        op: &'static str,
        /// The datatype's name.
        datatype: &'static str,
    },
    /// A buffer's length is not a multiple of the element size, or two
    /// buffers that must have the same length do not.
    #[error(
        "buffer lengths {len} and {other} must be the same multiple of the {element}-byte element"
    )]
    Length {
        /// The length of one buffer, in bytes.
        len: usize,
        /// The length it must equal, in bytes.
        other: usize,
        /// The element size, in bytes.
        element: usize,
    },
    /// [`reduce_canonical`] was given no contributions: there is nothing to
    /// reduce, not even an identity element to write.
    #[error("a reduction needs at least one contribution")]
    NoContributions,
}

impl Op {
    /// The builtin's name, or `"user"`.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Builtin(op) => op.name(),
            Op::User(_) => "user",
        }
    }

    /// Whether the operands may be swapped: always for builtins, as declared
    /// for user reductions.
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::Builtin(_) => true,
            Op::User(op) => op.is_commutative(),
        }
    }

    /// Bytes of one element of this reduction on `dt`: the datatype's size,
    /// or a user reduction's own element ([`UserOp::with_element`]). Data
    /// is split only between elements.
    pub fn element_size(&self, dt: Datatype) -> usize {
        match self {
            Op::User(op) if op.element > 0 => op.element,
            _ => dt.size(),
        }
    }

    /// Checks the op is defined on `dt` (call once per collective, before any data moves).
    ///
    /// User reductions are defined on every datatype.
    pub fn check(&self, dt: Datatype) -> Result<(), OpError> {
        match self {
            Op::Builtin(op) if !op.is_defined_on(dt) => Err(not_defined(*op, dt)),
            _ => Ok(()),
        }
    }

    /// `right = left op right`, element-wise. Errors on length mismatch / undefined op,
    /// leaving `right` unchanged.
    pub fn combine_into_right(
        &self,
        dt: Datatype,
        left: &[u8],
        right: &mut [u8],
    ) -> Result<(), OpError> {
        self.check(dt)?;
        check_lengths(self.element_size(dt), left.len(), right.len())?;
        self.apply(dt, Target::Right { left, right }, &mut Vec::new())
    }

    /// `left = left op right`, element-wise. Errors on length mismatch / undefined op,
    /// leaving `left` unchanged.
    ///
    /// Builtins compute in place. A user function only writes its second
    /// operand, so for user reductions `right` is copied into `scratch` first;
    /// `scratch` keeps its capacity, so repeated calls allocate nothing once it
    /// has grown to the buffer length.
    pub fn combine_into_left(
        &self,
        dt: Datatype,
        left: &mut [u8],
        right: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Result<(), OpError> {
        self.check(dt)?;
        check_lengths(self.element_size(dt), left.len(), right.len())?;
        self.apply(dt, Target::Left { left, right }, scratch)
    }

    /// Runs the reduction on buffers whose lengths are already checked.
    fn apply(
        &self,
        dt: Datatype,
        target: Target<'_>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), OpError> {
        match self {
            Op::Builtin(op) => apply_builtin(*op, dt, target),
            Op::User(op) => {
                let f = &*op.f;
                match target {
                    Target::Right { left, right } => f(dt, left, right),
                    Target::Left { left, right } => {
                        scratch.clear();
                        scratch.extend_from_slice(right);
                        f(dt, left, scratch);
                        left.copy_from_slice(scratch);
                    }
                    Target::Out { left, right, out } => {
                        out.copy_from_slice(right);
                        f(dt, left, out);
                    }
                }
                Ok(())
            }
        }
    }
}

fn not_defined(op: BuiltinOp, dt: Datatype) -> OpError {
    OpError::NotDefined {
        op: op.name(),
        datatype: dt.name(),
    }
}

/// Two buffers of `len` and `other` bytes can be combined as `dt` elements.
fn check_lengths(element: usize, len: usize, other: usize) -> Result<(), OpError> {
    if len != other || !len.is_multiple_of(element) {
        return Err(OpError::Length {
            len,
            other,
            element,
        });
    }
    Ok(())
}

/// Where a combination's operands are and where its result goes; all slices
/// have the same length, a multiple of the element size.
enum Target<'a> {
    /// `right = left op right`.
    Right { left: &'a [u8], right: &'a mut [u8] },
    /// `left = left op right`.
    Left { left: &'a mut [u8], right: &'a [u8] },
    /// `out = left op right`: one pass instead of a copy and a combination.
    Out {
        left: &'a [u8],
        right: &'a [u8],
        out: &'a mut [u8],
    },
}

/// A numeric element read from and written to `N` native-endian bytes.
trait Num<const N: usize>: Copy {
    fn load(bytes: &[u8; N]) -> Self;
    fn store(self) -> [u8; N];
}

macro_rules! impl_num {
    ($($t:ty),*) => {$(
        impl Num<{ size_of::<$t>() }> for $t {
            #[inline(always)]
            fn load(bytes: &[u8; size_of::<$t>()]) -> Self {
                <$t>::from_ne_bytes(*bytes)
            }
            #[inline(always)]
            fn store(self) -> [u8; size_of::<$t>()] {
                self.to_ne_bytes()
            }
        }
    )*};
}

impl_num!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// Applies `f` element-wise to numeric elements. Iterating over `[u8; N]`
/// chunks keeps the loop free of bounds checks, so it vectorizes.
#[inline(always)]
fn map<T: Num<N>, const N: usize>(target: Target<'_>, f: impl Fn(T, T) -> T) {
    match target {
        Target::Right { left, right } => {
            for (l, r) in left
                .as_chunks::<N>()
                .0
                .iter()
                .zip(right.as_chunks_mut::<N>().0)
            {
                *r = f(T::load(l), T::load(r)).store();
            }
        }
        Target::Left { left, right } => {
            for (l, r) in left
                .as_chunks_mut::<N>()
                .0
                .iter_mut()
                .zip(right.as_chunks::<N>().0)
            {
                *l = f(T::load(l), T::load(r)).store();
            }
        }
        Target::Out { left, right, out } => {
            let operands = left.as_chunks::<N>().0.iter().zip(right.as_chunks::<N>().0);
            for ((l, r), o) in operands.zip(out.as_chunks_mut::<N>().0) {
                *o = f(T::load(l), T::load(r)).store();
            }
        }
    }
}

/// Applies a selection element-wise to `N`-byte elements: `left_wins(l, r)`
/// says whether the left operand is the result. The whole winning element is
/// copied, padding included.
#[inline(always)]
fn select<const N: usize>(target: Target<'_>, left_wins: impl Fn(&[u8; N], &[u8; N]) -> bool) {
    match target {
        Target::Right { left, right } => {
            for (l, r) in left
                .as_chunks::<N>()
                .0
                .iter()
                .zip(right.as_chunks_mut::<N>().0)
            {
                if left_wins(l, r) {
                    *r = *l;
                }
            }
        }
        Target::Left { left, right } => {
            for (l, r) in left
                .as_chunks_mut::<N>()
                .0
                .iter_mut()
                .zip(right.as_chunks::<N>().0)
            {
                if !left_wins(l, r) {
                    *l = *r;
                }
            }
        }
        Target::Out { left, right, out } => {
            let operands = left.as_chunks::<N>().0.iter().zip(right.as_chunks::<N>().0);
            for ((l, r), o) in operands.zip(out.as_chunks_mut::<N>().0) {
                *o = if left_wins(l, r) { *l } else { *r };
            }
        }
    }
}

/// The smaller of two floats in [`f64::total_cmp`] order. Values equal in that
/// order have the same bits, so the result never depends on operand order
/// (plain `<` would return either zero for -0.0 and +0.0).
macro_rules! total_min {
    ($a:expr, $b:expr) => {
        if $a.total_cmp(&$b) == Ordering::Greater {
            $b
        } else {
            $a
        }
    };
}

/// The larger of two floats in [`f64::total_cmp`] order (see `total_min!`).
macro_rules! total_max {
    ($a:expr, $b:expr) => {
        if $a.total_cmp(&$b) == Ordering::Less {
            $b
        } else {
            $a
        }
    };
}

/// The kernels of one integer type.
macro_rules! int_kernel {
    ($t:ty, $op:expr, $dt:expr, $target:expr) => {
        match $op {
            BuiltinOp::Sum => map($target, <$t>::wrapping_add),
            BuiltinOp::Prod => map($target, <$t>::wrapping_mul),
            BuiltinOp::Min => map($target, <$t as Ord>::min),
            BuiltinOp::Max => map($target, <$t as Ord>::max),
            BuiltinOp::BitAnd => map($target, |a: $t, b: $t| a & b),
            BuiltinOp::BitOr => map($target, |a: $t, b: $t| a | b),
            BuiltinOp::BitXor => map($target, |a: $t, b: $t| a ^ b),
            BuiltinOp::LogicalAnd => map($target, |a: $t, b: $t| <$t>::from((a != 0) & (b != 0))),
            BuiltinOp::LogicalOr => map($target, |a: $t, b: $t| <$t>::from((a != 0) | (b != 0))),
            BuiltinOp::LogicalXor => map($target, |a: $t, b: $t| <$t>::from((a != 0) ^ (b != 0))),
            BuiltinOp::MinLoc | BuiltinOp::MaxLoc => return Err(not_defined($op, $dt)),
        }
    };
}

/// The kernels of one float type.
macro_rules! float_kernel {
    ($t:ty, $op:expr, $dt:expr, $target:expr) => {
        match $op {
            BuiltinOp::Sum => map($target, |a: $t, b: $t| a + b),
            BuiltinOp::Prod => map($target, |a: $t, b: $t| a * b),
            BuiltinOp::Min => map($target, |a: $t, b: $t| total_min!(a, b)),
            BuiltinOp::Max => map($target, |a: $t, b: $t| total_max!(a, b)),
            _ => return Err(not_defined($op, $dt)),
        }
    };
}

/// The kernels of one pair type: the value type `$v`, its comparison `$cmp`,
/// the index's offset and the element size.
macro_rules! pair_kernel {
    ($v:ty, $cmp:ident, $index_at:expr, $size:expr, $op:expr, $dt:expr, $target:expr) => {{
        const V: usize = size_of::<$v>();
        // The value at 0, the index at `$index_at`, both native-endian.
        #[inline(always)]
        fn parts(e: &[u8; $size]) -> ($v, i32) {
            let mut value = [0; V];
            value.copy_from_slice(&e[..V]);
            let mut index = [0; 4];
            index.copy_from_slice(&e[$index_at..$index_at + 4]);
            (<$v>::from_ne_bytes(value), i32::from_ne_bytes(index))
        }
        // Which value order makes the left operand win outright. On equal
        // values the smaller index wins, and the left operand on a full tie,
        // so the padding copied is always that of a definite operand.
        let wins = match $op {
            BuiltinOp::MinLoc => Ordering::Less,
            BuiltinOp::MaxLoc => Ordering::Greater,
            _ => return Err(not_defined($op, $dt)),
        };
        select::<$size>($target, |l, r| {
            let (lv, li) = parts(l);
            let (rv, ri) = parts(r);
            match lv.$cmp(&rv) {
                Ordering::Equal => li <= ri,
                order => order == wins,
            }
        })
    }};
}

/// Runs a predefined reduction on `dt` elements.
fn apply_builtin(op: BuiltinOp, dt: Datatype, target: Target<'_>) -> Result<(), OpError> {
    match dt {
        Datatype::I8 => int_kernel!(i8, op, dt, target),
        Datatype::I16 => int_kernel!(i16, op, dt, target),
        Datatype::I32 => int_kernel!(i32, op, dt, target),
        Datatype::I64 => int_kernel!(i64, op, dt, target),
        Datatype::U8 => int_kernel!(u8, op, dt, target),
        Datatype::U16 => int_kernel!(u16, op, dt, target),
        Datatype::U32 => int_kernel!(u32, op, dt, target),
        Datatype::U64 => int_kernel!(u64, op, dt, target),
        Datatype::F32 => float_kernel!(f32, op, dt, target),
        Datatype::F64 => float_kernel!(f64, op, dt, target),
        // Pair values compare like Min and Max: floats in total order.
        Datatype::FloatInt => pair_kernel!(f32, total_cmp, 4, 8, op, dt, target),
        Datatype::DoubleInt => pair_kernel!(f64, total_cmp, 8, 16, op, dt, target),
        Datatype::LongInt => pair_kernel!(i64, cmp, 8, 16, op, dt, target),
        Datatype::TwoInt => pair_kernel!(i32, cmp, 4, 8, op, dt, target),
        Datatype::ShortInt => pair_kernel!(i16, cmp, 4, 8, op, dt, target),
    }
    Ok(())
}

/// The split point of the canonical tree over ranks [lo, hi) (hi - lo >= 2):
/// lo + 2^(ceil(log2(hi - lo)) - 1).
///
/// The left part is the largest power of two smaller than the range, so every
/// left subtree is complete and the tree depends only on the number of ranks.
///
/// # Panics
///
/// If `hi - lo < 2` (a single rank is not split).
pub fn canonical_split(lo: usize, hi: usize) -> usize {
    assert!(
        hi >= lo && hi - lo >= 2,
        "canonical_split needs at least two ranks, got [{lo}, {hi})"
    );
    lo + (hi - lo).next_power_of_two() / 2
}

/// Reduces `contributions` (one per rank, index = rank, all the same length) into `out` in the
/// canonical order. `out.len()` equals each contribution's length. `scratch` as in
/// [`Op::combine_into_left`].
///
/// The canonical reduction of ranks [lo, hi) is `x[lo]` for one rank, else
/// `canonical(lo, m) op canonical(m, hi)` with `m = canonical_split(lo, hi)`:
/// lower ranks are always the left operand, so a non-commutative user
/// reduction sees rank order, and the fixed association makes float results
/// bitwise reproducible. For 6 ranks: `((x0 op x1) op (x2 op x3)) op (x4 op x5)`.
///
/// Partial results of left subtrees go to `scratch`, at most
/// `ceil(log2(P)) - 1` buffers of `out.len()` bytes; right subtrees are built
/// in `out` itself.
pub fn reduce_canonical(
    op: &Op,
    dt: Datatype,
    contributions: &[&[u8]],
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), OpError> {
    op.check(dt)?;
    if contributions.is_empty() {
        return Err(OpError::NoContributions);
    }
    let element = op.element_size(dt);
    check_lengths(element, out.len(), out.len())?;
    for c in contributions {
        check_lengths(element, c.len(), out.len())?;
    }
    let ranks = contributions.len();
    let depth = ranks.next_power_of_two().trailing_zeros() as usize;
    let need = depth.saturating_sub(1) * out.len();
    if scratch.len() < need {
        scratch.resize(need, 0);
    }
    let tree = Tree {
        op,
        dt,
        contributions,
    };
    tree.reduce(0, ranks, out, &mut scratch[..need])
}

/// The operands of one [`reduce_canonical`].
struct Tree<'a> {
    op: &'a Op,
    dt: Datatype,
    contributions: &'a [&'a [u8]],
}

impl Tree<'_> {
    /// Writes the canonical reduction of ranks [lo, hi) to `dest`, using
    /// `temps` (a multiple of `dest.len()`) for partial results.
    fn reduce(
        &self,
        lo: usize,
        hi: usize,
        dest: &mut [u8],
        temps: &mut [u8],
    ) -> Result<(), OpError> {
        let x = self.contributions;
        if hi - lo == 1 {
            dest.copy_from_slice(x[lo]);
            return Ok(());
        }
        let m = canonical_split(lo, hi);
        // Only `Right` and `Out` targets: a user function writes its result
        // into its second operand, so neither needs a copy into scratch.
        // Every target's slices have `dest.len()` bytes.
        let mut unused = Vec::new();
        let target = match (m - lo == 1, hi - m == 1) {
            (true, true) => Target::Out {
                left: x[lo],
                right: x[m],
                out: dest,
            },
            (true, false) => {
                self.reduce(m, hi, dest, temps)?;
                Target::Right {
                    left: x[lo],
                    right: dest,
                }
            }
            (false, right_is_leaf) => {
                if !right_is_leaf {
                    self.reduce(m, hi, dest, temps)?;
                }
                let (tmp, rest) = temps.split_at_mut(dest.len());
                self.reduce(lo, m, tmp, rest)?;
                if right_is_leaf {
                    Target::Out {
                        left: tmp,
                        right: x[m],
                        out: dest,
                    }
                } else {
                    Target::Right {
                        left: tmp,
                        right: dest,
                    }
                }
            }
        };
        self.op.apply(self.dt, target, &mut unused)
    }
}

/// Typed elements for the Rust-facing API: i8..i64, u8..u64, f32, f64, and the
/// pair structs ([`FloatInt`], [`DoubleInt`], [`LongInt`], [`TwoInt`], [`ShortInt`]).
///
/// A slice of elements is the byte buffer of its [`Datatype`]
/// (`zerocopy::IntoBytes::as_bytes`) and back (`FromBytes`).
pub trait Element:
    zerocopy::IntoBytes + zerocopy::FromBytes + zerocopy::Immutable + Copy + 'static
{
    /// The datatype whose elements have this layout.
    const DATATYPE: Datatype;
}

macro_rules! impl_element {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl Element for $t {
            const DATATYPE: Datatype = Datatype::$dt;
        }
    )*};
}

impl_element!(
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f32 => F32, f64 => F64,
);

/// A value with the index of the rank that had it (MinLoc/MaxLoc), laid out
/// as one of MPI's pair types; implemented by the five pair structs.
///
/// The structs are separate types rather than one generic struct because
/// their C layouts put padding in different places, and the `IntoBytes`
/// derive needs explicit padding fields.
pub trait Pair: Element {
    /// The value's type.
    type Value: Copy;
    /// The pair of `value` and `index`, padding zeroed.
    fn new(value: Self::Value, index: i32) -> Self;
    /// The value.
    fn value(&self) -> Self::Value;
    /// The index.
    fn index(&self) -> i32;
}

/// Value types that have a pair type: `f32`, `f64`, `i64`, `i32`, `i16`.
pub trait PairValue: Copy + 'static {
    /// The pair struct holding this value and an index.
    type Pair: Pair<Value = Self>;
}

/// The pair struct of value type `T`: `ValueIndex<f64>` is [`DoubleInt`].
pub type ValueIndex<T> = <T as PairValue>::Pair;

macro_rules! pair_impls {
    ($name:ident($v:ty, $dt:ident), size $size:literal, align $align:literal) => {
        // Fails to build if the layout is not C's.
        const _: () = assert!(size_of::<$name>() == $size && align_of::<$name>() == $align);

        impl $name {
            /// The pair of `value` and `index`, padding zeroed.
            pub fn new(value: $v, index: i32) -> $name {
                let mut pair = <$name as FromZeros>::new_zeroed();
                pair.value = value;
                pair.index = index;
                pair
            }
        }

        impl Element for $name {
            const DATATYPE: Datatype = Datatype::$dt;
        }

        impl Pair for $name {
            type Value = $v;
            fn new(value: $v, index: i32) -> $name {
                $name::new(value, index)
            }
            fn value(&self) -> $v {
                self.value
            }
            fn index(&self) -> i32 {
                self.index
            }
        }

        impl PairValue for $v {
            type Pair = $name;
        }

        // Value and index only: padding is not part of the pair's value.
        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.value == other.value && self.index == other.index
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("value", &self.value)
                    .field("index", &self.index)
                    .finish()
            }
        }
    };
}

/// `struct { float v; int i; }` (MPI_FLOAT_INT), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct FloatInt {
    /// The value.
    pub value: f32,
    /// The index (the rank that had the value, in MinLoc and MaxLoc).
    pub index: i32,
}
pair_impls!(FloatInt(f32, FloatInt), size 8, align 4);

/// `struct { double v; int i; }` (MPI_DOUBLE_INT), 16 bytes, 4 of them tail padding.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DoubleInt {
    /// The value.
    pub value: f64,
    /// The index (the rank that had the value, in MinLoc and MaxLoc).
    pub index: i32,
    tail: [u8; 4],
}
pair_impls!(DoubleInt(f64, DoubleInt), size 16, align 8);

/// `struct { long v; int i; }` (MPI_LONG_INT) with an `i64` value, 16 bytes,
/// 4 of them tail padding.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct LongInt {
    /// The value.
    pub value: i64,
    /// The index (the rank that had the value, in MinLoc and MaxLoc).
    pub index: i32,
    tail: [u8; 4],
}
pair_impls!(LongInt(i64, LongInt), size 16, align 8);

/// `struct { int v; int i; }` (MPI_2INT), 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct TwoInt {
    /// The value.
    pub value: i32,
    /// The index (the rank that had the value, in MinLoc and MaxLoc).
    pub index: i32,
}
pair_impls!(TwoInt(i32, TwoInt), size 8, align 4);

/// `struct { short v; int i; }` (MPI_SHORT_INT), 8 bytes: the value, 2
/// padding bytes, the index.
#[repr(C)]
#[derive(Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ShortInt {
    /// The value.
    pub value: i16,
    gap: [u8; 2],
    /// The index (the rank that had the value, in MinLoc and MaxLoc).
    pub index: i32,
}
pair_impls!(ShortInt(i16, ShortInt), size 8, align 4);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    const INTS: [&str; 8] = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"];
    const FLOATS: [&str; 2] = ["f32", "f64"];
    const PAIRS: [&str; 5] = [
        "float_int",
        "double_int",
        "long_int",
        "two_int",
        "short_int",
    ];

    /// MPI 3.1 §5.9.2, written out by name.
    fn mpi_defines(op: BuiltinOp, dt: Datatype) -> bool {
        let on: Vec<&str> = match op.name() {
            "sum" | "prod" | "min" | "max" => INTS.iter().chain(&FLOATS).copied().collect(),
            "bitand" | "bitor" | "bitxor" | "logicaland" | "logicalor" | "logicalxor" => {
                INTS.to_vec()
            }
            "minloc" | "maxloc" => PAIRS.to_vec(),
            other => panic!("unknown op {other}"),
        };
        on.contains(&dt.name())
    }

    const SPECIAL: [f64; 12] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        1e-310,
    ];

    fn splitmix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn int_bytes(v: i64, size: usize) -> Vec<u8> {
        match size {
            1 => (v as i8).to_ne_bytes().to_vec(),
            2 => (v as i16).to_ne_bytes().to_vec(),
            4 => (v as i32).to_ne_bytes().to_vec(),
            _ => v.to_ne_bytes().to_vec(),
        }
    }

    /// One element of `dt` from `seed`: random bits three times in four,
    /// otherwise a value from a small set (so that operands tie, and floats
    /// meet zeros of both signs, NaNs, infinities and subnormals).
    fn element(dt: Datatype, seed: u64) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut s = seed;
        while bytes.len() < dt.size() {
            s = splitmix(s);
            bytes.extend_from_slice(&s.to_ne_bytes());
        }
        bytes.truncate(dt.size());
        if !seed.is_multiple_of(4) {
            return bytes;
        }
        let k = (seed >> 2) as usize;
        let small = (k % 5) as i64 - 2;
        let f = SPECIAL[k % SPECIAL.len()];
        let index = ((k / 7) % 3) as i32;
        let (value, index_at) = match dt {
            Datatype::F32 => return (f as f32).to_ne_bytes().to_vec(),
            Datatype::F64 => return f.to_ne_bytes().to_vec(),
            dt if dt.is_integer() => return int_bytes(small, dt.size()),
            Datatype::FloatInt => ((f as f32).to_ne_bytes().to_vec(), 4),
            Datatype::DoubleInt => (f.to_ne_bytes().to_vec(), 8),
            Datatype::LongInt => (int_bytes(small, 8), 8),
            Datatype::TwoInt => (int_bytes(small, 4), 4),
            Datatype::ShortInt => (int_bytes(small, 2), 4),
            _ => unreachable!(),
        };
        bytes[..value.len()].copy_from_slice(&value);
        bytes[index_at..index_at + 4].copy_from_slice(&index.to_ne_bytes());
        bytes
    }

    fn buffer(dt: Datatype, seeds: &[u64]) -> Vec<u8> {
        seeds.iter().flat_map(|&s| element(dt, s)).collect()
    }

    macro_rules! int_reference {
        ($t:ty, $op:expr, $l:expr, $r:expr) => {{
            let l = <$t>::from_ne_bytes($l.try_into().unwrap());
            let r = <$t>::from_ne_bytes($r.try_into().unwrap());
            let (wide_l, wide_r) = (l as i128, r as i128);
            let v: $t = match $op {
                BuiltinOp::Sum => (wide_l + wide_r) as $t,
                BuiltinOp::Prod => wide_l.wrapping_mul(wide_r) as $t,
                BuiltinOp::Min => {
                    if l < r {
                        l
                    } else {
                        r
                    }
                }
                BuiltinOp::Max => {
                    if l > r {
                        l
                    } else {
                        r
                    }
                }
                BuiltinOp::BitAnd => l & r,
                BuiltinOp::BitOr => l | r,
                BuiltinOp::BitXor => l ^ r,
                BuiltinOp::LogicalAnd => (l != 0 && r != 0) as $t,
                BuiltinOp::LogicalOr => (l != 0 || r != 0) as $t,
                BuiltinOp::LogicalXor => ((l != 0) != (r != 0)) as $t,
                BuiltinOp::MinLoc | BuiltinOp::MaxLoc => unreachable!(),
            };
            v.to_ne_bytes().to_vec()
        }};
    }

    macro_rules! float_reference {
        ($t:ty, $op:expr, $l:expr, $r:expr) => {{
            let l = <$t>::from_ne_bytes($l.try_into().unwrap());
            let r = <$t>::from_ne_bytes($r.try_into().unwrap());
            let mut sorted = [l, r];
            sorted.sort_by(<$t>::total_cmp);
            let v: $t = match $op {
                BuiltinOp::Sum => l + r,
                BuiltinOp::Prod => l * r,
                BuiltinOp::Min => sorted[0],
                BuiltinOp::Max => sorted[1],
                _ => unreachable!(),
            };
            v.to_ne_bytes().to_vec()
        }};
    }

    /// MinLoc/MaxLoc on elements read as the typed pair struct; the result is
    /// the whole winning element, padding included.
    fn pair_reference<P: Pair>(
        op: BuiltinOp,
        l: &[u8],
        r: &[u8],
        cmp: fn(&P::Value, &P::Value) -> Ordering,
    ) -> Vec<u8> {
        let lp = P::read_from_bytes(l).unwrap();
        let rp = P::read_from_bytes(r).unwrap();
        let left_wins = match (op, cmp(&lp.value(), &rp.value())) {
            (_, Ordering::Equal) => lp.index() <= rp.index(),
            (BuiltinOp::MinLoc, order) => order == Ordering::Less,
            (BuiltinOp::MaxLoc, order) => order == Ordering::Greater,
            _ => unreachable!(),
        };
        if left_wins { l } else { r }.to_vec()
    }

    /// `left op right` element by element on typed values.
    fn reference(op: BuiltinOp, dt: Datatype, left: &[u8], right: &[u8]) -> Vec<u8> {
        let n = dt.size();
        let mut out = Vec::new();
        for (l, r) in left.chunks_exact(n).zip(right.chunks_exact(n)) {
            out.extend(match dt {
                Datatype::I8 => int_reference!(i8, op, l, r),
                Datatype::I16 => int_reference!(i16, op, l, r),
                Datatype::I32 => int_reference!(i32, op, l, r),
                Datatype::I64 => int_reference!(i64, op, l, r),
                Datatype::U8 => int_reference!(u8, op, l, r),
                Datatype::U16 => int_reference!(u16, op, l, r),
                Datatype::U32 => int_reference!(u32, op, l, r),
                Datatype::U64 => int_reference!(u64, op, l, r),
                Datatype::F32 => float_reference!(f32, op, l, r),
                Datatype::F64 => float_reference!(f64, op, l, r),
                Datatype::FloatInt => pair_reference::<FloatInt>(op, l, r, f32::total_cmp),
                Datatype::DoubleInt => pair_reference::<DoubleInt>(op, l, r, f64::total_cmp),
                Datatype::LongInt => pair_reference::<LongInt>(op, l, r, i64::cmp),
                Datatype::TwoInt => pair_reference::<TwoInt>(op, l, r, i32::cmp),
                Datatype::ShortInt => pair_reference::<ShortInt>(op, l, r, i16::cmp),
            });
        }
        out
    }

    /// Equal bytes, except that an arithmetic float result may be any NaN
    /// where the reference is NaN (Rust leaves NaN payloads unspecified).
    fn same(op: BuiltinOp, dt: Datatype, got: &[u8], want: &[u8]) -> bool {
        let arithmetic = matches!(op, BuiltinOp::Sum | BuiltinOp::Prod);
        match dt {
            Datatype::F32 if arithmetic => {
                got.len() == want.len()
                    && got.chunks_exact(4).zip(want.chunks_exact(4)).all(|(g, w)| {
                        let g = f32::from_ne_bytes(g.try_into().unwrap());
                        let w = f32::from_ne_bytes(w.try_into().unwrap());
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
                    })
            }
            Datatype::F64 if arithmetic => {
                got.len() == want.len()
                    && got.chunks_exact(8).zip(want.chunks_exact(8)).all(|(g, w)| {
                        let g = f64::from_ne_bytes(g.try_into().unwrap());
                        let w = f64::from_ne_bytes(w.try_into().unwrap());
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
                    })
            }
            _ => got == want,
        }
    }

    proptest! {
        #[test]
        fn builtins_match_the_typed_reference(
            op in 0..BuiltinOp::ALL.len(),
            dt in 0..Datatype::ALL.len(),
            seeds in proptest::collection::vec((any::<u64>(), any::<u64>()), 0..64),
        ) {
            let (builtin, dt) = (BuiltinOp::ALL[op], Datatype::ALL[dt]);
            let op = Op::from(builtin);
            let left = buffer(dt, &seeds.iter().map(|s| s.0).collect::<Vec<_>>());
            let right = buffer(dt, &seeds.iter().map(|s| s.1).collect::<Vec<_>>());
            let mut scratch = Vec::new();

            let mut into_right = right.clone();
            let mut into_left = left.clone();
            let mut out = vec![0xA5; left.len()];
            let r = op.combine_into_right(dt, &left, &mut into_right);
            let l = op.combine_into_left(dt, &mut into_left, &right, &mut scratch);
            let c = reduce_canonical(&op, dt, &[&left, &right], &mut out, &mut scratch);

            if mpi_defines(builtin, dt) {
                prop_assert_eq!(op.check(dt), Ok(()));
                prop_assert_eq!((r, l, c), (Ok(()), Ok(()), Ok(())));
                let want = reference(builtin, dt, &left, &right);
                prop_assert!(same(builtin, dt, &into_right, &want), "into right {:?}", into_right);
                prop_assert!(same(builtin, dt, &into_left, &want), "into left {:?}", into_left);
                prop_assert!(same(builtin, dt, &out, &want), "canonical {:?}", out);
            } else {
                let err = OpError::NotDefined { op: builtin.name(), datatype: dt.name() };
                prop_assert_eq!(op.check(dt), Err(err));
                prop_assert_eq!((r, l, c), (Err(err), Err(err), Err(err)));
                prop_assert_eq!(into_right, right);
                prop_assert_eq!(into_left, left);
            }
        }

        #[test]
        fn canonical_reduction_of_builtins_follows_the_tree(
            ranks in 1usize..20,
            seeds in proptest::collection::vec(any::<u64>(), 0..16),
            dt in prop_oneof![Just(Datatype::F64), Just(Datatype::F32), Just(Datatype::I16)],
        ) {
            let contributions: Vec<Vec<u8>> = (0..ranks as u64)
                .map(|rank| buffer(dt, &seeds.iter().map(|s| splitmix(s ^ rank)).collect::<Vec<_>>()))
                .collect();
            let refs: Vec<&[u8]> = contributions.iter().map(|c| &c[..]).collect();
            let op = Op::from(BuiltinOp::Sum);
            // The tree written out recursively, with fresh buffers at every node.
            fn tree(op: &Op, dt: Datatype, x: &[&[u8]], lo: usize, hi: usize) -> Vec<u8> {
                if hi - lo == 1 {
                    return x[lo].to_vec();
                }
                let m = canonical_split(lo, hi);
                let left = tree(op, dt, x, lo, m);
                let mut right = tree(op, dt, x, m, hi);
                op.combine_into_right(dt, &left, &mut right).unwrap();
                right
            }
            let want = tree(&op, dt, &refs, 0, ranks);
            let mut out = vec![0; want.len()];
            let mut scratch = Vec::new();
            reduce_canonical(&op, dt, &refs, &mut out, &mut scratch).unwrap();
            prop_assert!(same(BuiltinOp::Sum, dt, &out, &want));
        }
    }

    #[test]
    fn not_defined_where_mpi_says() {
        let err = Op::from(BuiltinOp::BitAnd)
            .check(Datatype::F64)
            .unwrap_err();
        assert_eq!(
            err,
            OpError::NotDefined {
                op: "bitand",
                datatype: "f64"
            }
        );
        assert_eq!(err.to_string(), "bitand is not defined on f64");
        let user = Op::User(UserOp::new(false, |_, _, _| {}));
        for dt in Datatype::ALL {
            assert_eq!(user.check(dt), Ok(()));
            for op in BuiltinOp::ALL {
                assert_eq!(
                    Op::from(op).check(dt).is_ok(),
                    mpi_defines(op, dt),
                    "{op:?} on {dt:?}"
                );
            }
        }
    }

    fn pairs<P: Pair>(elements: &[(P::Value, i32)]) -> Vec<u8> {
        elements
            .iter()
            .flat_map(|&(v, i)| P::new(v, i).as_bytes().to_vec())
            .collect()
    }

    /// `op` on two single-element buffers, into the right and into the left.
    fn both_ways(op: BuiltinOp, dt: Datatype, l: &[u8], r: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let op = Op::from(op);
        let mut right = r.to_vec();
        op.combine_into_right(dt, l, &mut right).unwrap();
        let mut left = l.to_vec();
        op.combine_into_left(dt, &mut left, r, &mut Vec::new())
            .unwrap();
        (right, left)
    }

    #[test]
    fn minloc_and_maxloc_break_ties_by_smaller_index() {
        let a = pairs::<DoubleInt>(&[(1.0, 5), (2.0, 0), (-0.0, 4)]);
        let b = pairs::<DoubleInt>(&[(1.0, 3), (1.0, 9), (0.0, 1)]);
        let min = pairs::<DoubleInt>(&[(1.0, 3), (1.0, 9), (-0.0, 4)]);
        let max = pairs::<DoubleInt>(&[(1.0, 3), (2.0, 0), (0.0, 1)]);
        for (l, r) in [(&a, &b), (&b, &a)] {
            let (right, left) = both_ways(BuiltinOp::MinLoc, Datatype::DoubleInt, l, r);
            assert_eq!((&right, &left), (&min, &min));
            let (right, left) = both_ways(BuiltinOp::MaxLoc, Datatype::DoubleInt, l, r);
            assert_eq!((&right, &left), (&max, &max));
        }
        let a = pairs::<TwoInt>(&[(7, 2), (-1, 1)]);
        let b = pairs::<TwoInt>(&[(7, 1), (-1, 1)]);
        let (right, left) = both_ways(BuiltinOp::MinLoc, Datatype::TwoInt, &a, &b);
        assert_eq!((&right, &left), (&b, &b));
        let (right, left) = both_ways(BuiltinOp::MaxLoc, Datatype::TwoInt, &b, &a);
        assert_eq!((&right, &left), (&b, &b));
    }

    #[test]
    fn pair_padding_comes_from_the_winner() {
        let element = |value: i16, pad: u8, index: i32| {
            let mut e = ShortInt::new(value, index).as_bytes().to_vec();
            e[2..4].fill(pad);
            e
        };
        let small = element(1, 0xAA, 0);
        let large = element(2, 0xBB, 1);
        for (l, r) in [(&small, &large), (&large, &small)] {
            let (right, left) = both_ways(BuiltinOp::MinLoc, Datatype::ShortInt, l, r);
            assert_eq!((&right, &left), (&small, &small));
            let (right, left) = both_ways(BuiltinOp::MaxLoc, Datatype::ShortInt, l, r);
            assert_eq!((&right, &left), (&large, &large));
        }
        let mut a = LongInt::new(3, 0).as_bytes().to_vec();
        a[12..].copy_from_slice(&[1, 2, 3, 4]);
        let b = LongInt::new(3, 1).as_bytes().to_vec();
        assert_eq!(
            both_ways(BuiltinOp::MinLoc, Datatype::LongInt, &b, &a),
            (a.clone(), a)
        );
    }

    fn i32s(values: &[i32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_ne_bytes()).collect()
    }

    #[test]
    fn logical_ops_give_zero_or_one() {
        let l = i32s(&[5, 0, -3, 0]);
        let r = i32s(&[-7, 9, 0, 0]);
        for (op, want) in [
            (BuiltinOp::LogicalAnd, [1, 0, 0, 0]),
            (BuiltinOp::LogicalOr, [1, 1, 1, 0]),
            (BuiltinOp::LogicalXor, [0, 1, 1, 0]),
        ] {
            let (right, left) = both_ways(op, Datatype::I32, &l, &r);
            assert_eq!((&right, &left), (&i32s(&want), &i32s(&want)), "{op:?}");
        }
        let (right, _) = both_ways(BuiltinOp::LogicalOr, Datatype::U8, &[255, 0], &[128, 0]);
        assert_eq!(right, [1, 0]);
    }

    #[test]
    fn integer_arithmetic_wraps() {
        let sum = Op::from(BuiltinOp::Sum);
        let prod = Op::from(BuiltinOp::Prod);
        let mut r = (1i8).to_ne_bytes();
        sum.combine_into_right(Datatype::I8, &127i8.to_ne_bytes(), &mut r)
            .unwrap();
        assert_eq!(i8::from_ne_bytes(r), -128);
        let mut r = [2u8];
        prod.combine_into_right(Datatype::U8, &[200], &mut r)
            .unwrap();
        assert_eq!(r, [144]);
        let mut r = 1i64.to_ne_bytes();
        sum.combine_into_right(Datatype::I64, &i64::MAX.to_ne_bytes(), &mut r)
            .unwrap();
        assert_eq!(i64::from_ne_bytes(r), i64::MIN);
        let mut r = 2u64.to_ne_bytes();
        sum.combine_into_right(Datatype::U64, &u64::MAX.to_ne_bytes(), &mut r)
            .unwrap();
        assert_eq!(u64::from_ne_bytes(r), 1);
        let mut r = (-1i32).to_ne_bytes();
        prod.combine_into_right(Datatype::I32, &i32::MIN.to_ne_bytes(), &mut r)
            .unwrap();
        assert_eq!(i32::from_ne_bytes(r), i32::MIN);
    }

    #[test]
    fn float_min_and_max_do_not_depend_on_operand_order() {
        let values = [
            -0.0,
            0.0,
            1.0,
            -1.0,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for a in values {
            for b in values {
                for op in [BuiltinOp::Min, BuiltinOp::Max] {
                    let ab = both_ways(op, Datatype::F64, &a.to_ne_bytes(), &b.to_ne_bytes());
                    let ba = both_ways(op, Datatype::F64, &b.to_ne_bytes(), &a.to_ne_bytes());
                    assert_eq!(
                        (&ab.0, &ab.1, &ba.0),
                        (&ba.1, &ab.0, &ab.0),
                        "{op:?} {a} {b}"
                    );
                }
            }
        }
        let f64_of = |b: Vec<u8>| f64::from_ne_bytes(b.try_into().unwrap());
        let (min, _) = both_ways(
            BuiltinOp::Min,
            Datatype::F64,
            &0.0f64.to_ne_bytes(),
            &(-0.0f64).to_ne_bytes(),
        );
        assert!(f64_of(min).is_sign_negative());
        let (max, _) = both_ways(
            BuiltinOp::Max,
            Datatype::F64,
            &(-0.0f64).to_ne_bytes(),
            &0.0f64.to_ne_bytes(),
        );
        assert!(f64_of(max).is_sign_positive());
        // Total order: a positive NaN is above +inf, a negative one below -inf.
        let (max, _) = both_ways(
            BuiltinOp::Max,
            Datatype::F64,
            &f64::NAN.to_ne_bytes(),
            &f64::INFINITY.to_ne_bytes(),
        );
        assert!(f64_of(max).is_nan());
        let (min, _) = both_ways(
            BuiltinOp::Min,
            Datatype::F64,
            &f64::NAN.to_ne_bytes(),
            &1.0f64.to_ne_bytes(),
        );
        assert_eq!(f64_of(min), 1.0);
        let (min, _) = both_ways(
            BuiltinOp::Min,
            Datatype::F32,
            &(-f32::NAN).to_ne_bytes(),
            &f32::NEG_INFINITY.to_ne_bytes(),
        );
        assert!(f32::from_ne_bytes(min.try_into().unwrap()).is_nan());
    }

    type Matrix = [u32; 4];

    fn mat_mul(a: Matrix, b: Matrix) -> Matrix {
        let dot =
            |x: u32, y: u32, z: u32, w: u32| x.wrapping_mul(y).wrapping_add(z.wrapping_mul(w));
        [
            dot(a[0], b[0], a[1], b[2]),
            dot(a[0], b[1], a[1], b[3]),
            dot(a[2], b[0], a[3], b[2]),
            dot(a[2], b[1], a[3], b[3]),
        ]
    }

    fn matrices(bytes: &[u8]) -> Vec<Matrix> {
        <[u32]>::ref_from_bytes(bytes)
            .map(|s| s.to_vec())
            .unwrap_or_else(|_| {
                bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
                    .collect()
            })
            .chunks_exact(4)
            .map(|m| m.try_into().unwrap())
            .collect()
    }

    fn matrix_bytes(ms: &[Matrix]) -> Vec<u8> {
        ms.iter().flatten().flat_map(|v| v.to_ne_bytes()).collect()
    }

    /// 2x2 matrix product mod 2^32, four `u32` per matrix: associative, not commutative.
    fn matrix_op() -> Op {
        Op::User(UserOp::new(false, |dt, l, r| {
            assert_eq!(dt, Datatype::U32);
            let product = matrix_bytes(
                &matrices(l)
                    .into_iter()
                    .zip(matrices(r))
                    .map(|(a, b)| mat_mul(a, b))
                    .collect::<Vec<_>>(),
            );
            r.copy_from_slice(&product);
        }))
    }

    fn random_matrices(seed: u64, n: usize) -> Vec<Matrix> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                [0; 4].map(|_: u32| {
                    s = splitmix(s);
                    s as u32
                })
            })
            .collect()
    }

    #[test]
    fn combine_into_left_keeps_operand_order_for_user_ops() {
        let op = matrix_op();
        assert!(!op.is_commutative());
        let a = random_matrices(1, 3);
        let b = random_matrices(2, 3);
        let ab: Vec<Matrix> = a.iter().zip(&b).map(|(x, y)| mat_mul(*x, *y)).collect();
        let ba: Vec<Matrix> = a.iter().zip(&b).map(|(x, y)| mat_mul(*y, *x)).collect();
        assert_ne!(ab, ba);
        let (l, r) = (matrix_bytes(&a), matrix_bytes(&b));
        let mut right = r.clone();
        op.combine_into_right(Datatype::U32, &l, &mut right)
            .unwrap();
        assert_eq!(matrices(&right), ab);
        let mut scratch = Vec::new();
        let mut left = l.clone();
        op.combine_into_left(Datatype::U32, &mut left, &r, &mut scratch)
            .unwrap();
        assert_eq!(matrices(&left), ab);
        // Once grown, scratch is reused as it is.
        let (grown, capacity) = (scratch.as_ptr(), scratch.capacity());
        let mut left = l.clone();
        op.combine_into_left(Datatype::U32, &mut left, &r, &mut scratch)
            .unwrap();
        assert_eq!(matrices(&left), ab);
        assert_eq!((scratch.as_ptr(), scratch.capacity()), (grown, capacity));
    }

    fn text(bytes: &[u8]) -> &str {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        std::str::from_utf8(&bytes[..end]).unwrap()
    }

    #[test]
    fn canonical_reduction_has_the_canonical_parenthesisation() {
        const LEN: usize = 64;
        // Writes "(" left right ")": the result spells out the tree.
        let op = Op::User(UserOp::new(false, |dt, l, r| {
            assert_eq!(dt, Datatype::U8);
            let s = format!("({}{})", text(l), text(r));
            r.fill(0);
            r[..s.len()].copy_from_slice(s.as_bytes());
        }));
        let want = [
            "0",
            "(01)",
            "((01)2)",
            "((01)(23))",
            "(((01)(23))4)",
            "(((01)(23))(45))",
            "(((01)(23))((45)6))",
            "(((01)(23))((45)(67)))",
            "((((01)(23))((45)(67)))8)",
        ];
        let mut scratch = Vec::new();
        for (ranks, want) in (1..).zip(want) {
            let contributions: Vec<[u8; LEN]> = (0..ranks)
                .map(|rank| {
                    let mut c = [0; LEN];
                    c[0] = b'0' + rank;
                    c
                })
                .collect();
            let refs: Vec<&[u8]> = contributions.iter().map(|c| &c[..]).collect();
            let mut out = [0xFF; LEN];
            reduce_canonical(&op, Datatype::U8, &refs, &mut out, &mut scratch).unwrap();
            assert_eq!(text(&out), want);
        }
    }

    #[test]
    fn canonical_float_sums_associate_as_the_tree() {
        let x = [0.1f64, 0.7, 1e16, -1e16, 0.3, 0.9];
        let bytes: Vec<[u8; 8]> = x.iter().map(|v| v.to_ne_bytes()).collect();
        let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
        let sum = Op::from(BuiltinOp::Sum);
        let mut scratch = Vec::new();
        let canonical = |ranks: usize, scratch: &mut Vec<u8>| {
            let mut out = [0; 8];
            reduce_canonical(&sum, Datatype::F64, &refs[..ranks], &mut out, scratch).unwrap();
            f64::from_ne_bytes(out)
        };
        let fold = |ranks: usize| x[..ranks].iter().fold(0.0, |a, b| a + b);
        let five = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
        let six = ((x[0] + x[1]) + (x[2] + x[3])) + (x[4] + x[5]);
        assert_ne!(five.to_bits(), fold(5).to_bits());
        assert_ne!(six.to_bits(), fold(6).to_bits());
        assert_eq!(canonical(5, &mut scratch).to_bits(), five.to_bits());
        assert_eq!(canonical(6, &mut scratch).to_bits(), six.to_bits());
    }

    #[test]
    fn canonical_reduction_of_an_associative_op_is_the_left_fold() {
        let op = matrix_op();
        let mut scratch = Vec::new();
        let mut reversed_differs = 0;
        for ranks in 1..=40u64 {
            let contributions: Vec<Vec<Matrix>> = (0..ranks)
                .map(|rank| random_matrices(rank * 1000 + 7, 3))
                .collect();
            let bytes: Vec<Vec<u8>> = contributions.iter().map(|c| matrix_bytes(c)).collect();
            let refs: Vec<&[u8]> = bytes.iter().map(|b| &b[..]).collect();
            let mut out = vec![0; 48];
            reduce_canonical(&op, Datatype::U32, &refs, &mut out, &mut scratch).unwrap();
            let fold = |order: &mut dyn Iterator<Item = &Vec<Matrix>>| {
                let first = order.next().unwrap().clone();
                order.fold(first, |acc, c| {
                    acc.iter().zip(c).map(|(a, b)| mat_mul(*a, *b)).collect()
                })
            };
            assert_eq!(
                matrices(&out),
                fold(&mut contributions.iter()),
                "{ranks} ranks"
            );
            if matrices(&out) != fold(&mut contributions.iter().rev()) {
                reversed_differs += 1;
            }
            assert!(scratch.len() <= 48 * 5);
        }
        // The check can tell rank order from reversed order.
        assert_eq!(reversed_differs, 39);
    }

    #[test]
    fn canonical_split_points() {
        let cases = [
            ((0, 2), 1),
            ((0, 3), 2),
            ((0, 4), 2),
            ((0, 5), 4),
            ((0, 6), 4),
            ((0, 8), 4),
            ((0, 9), 8),
            ((3, 5), 4),
            ((10, 17), 14),
            ((4, 40), 36),
        ];
        for ((lo, hi), m) in cases {
            assert_eq!(canonical_split(lo, hi), m, "[{lo}, {hi})");
        }
    }

    #[test]
    fn length_errors_are_reported() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let user = Op::User(UserOp::new(true, move |_, _, _| {
            counted.fetch_add(1, AtomicOrdering::Relaxed);
        }));
        let mut scratch = Vec::new();
        for op in [Op::from(BuiltinOp::Sum), user] {
            let mut right = [7u8; 16];
            assert_eq!(
                op.combine_into_right(Datatype::F64, &[0; 8], &mut right),
                Err(OpError::Length {
                    len: 8,
                    other: 16,
                    element: 8
                })
            );
            let mut left = [7u8; 12];
            assert_eq!(
                op.combine_into_left(Datatype::F64, &mut left, &[0; 12], &mut scratch),
                Err(OpError::Length {
                    len: 12,
                    other: 12,
                    element: 8
                })
            );
            assert_eq!((right, left), ([7; 16], [7; 12]));
            let a = [1u8; 16];
            let b = [2u8; 8];
            let mut out = [7u8; 16];
            assert_eq!(
                reduce_canonical(&op, Datatype::I32, &[&a, &b], &mut out, &mut scratch),
                Err(OpError::Length {
                    len: 8,
                    other: 16,
                    element: 4
                })
            );
            assert_eq!(
                reduce_canonical(&op, Datatype::I32, &[], &mut out, &mut scratch),
                Err(OpError::NoContributions)
            );
            let mut odd = [7u8; 6];
            assert_eq!(
                reduce_canonical(&op, Datatype::I32, &[&[0; 6]], &mut odd, &mut scratch),
                Err(OpError::Length {
                    len: 6,
                    other: 6,
                    element: 4
                })
            );
            assert_eq!((out, odd), ([7; 16], [7; 6]));
        }
        assert_eq!(calls.load(AtomicOrdering::Relaxed), 0);
        assert_eq!(
            OpError::Length {
                len: 8,
                other: 16,
                element: 8
            }
            .to_string(),
            "buffer lengths 8 and 16 must be the same multiple of the 8-byte element"
        );
    }

    #[test]
    fn names_sizes_and_layouts() {
        let names: std::collections::HashSet<_> = Datatype::ALL.iter().map(|d| d.name()).collect();
        assert_eq!(names.len(), 15);
        for op in BuiltinOp::ALL {
            assert_eq!(BuiltinOp::from_name(op.name()), Some(op));
            assert_eq!(Op::from(op).name(), op.name());
            assert!(Op::from(op).is_commutative());
        }
        assert_eq!(BuiltinOp::from_name("minloc"), Some(BuiltinOp::MinLoc));
        assert_eq!(BuiltinOp::from_name("Sum"), None);
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Op>();
        let user = UserOp::new(false, |_, _, _| {});
        assert_eq!(format!("{user:?}"), "UserOp { commutative: false }");
        assert_eq!(Op::User(user).name(), "user");

        fn size<E: Element>() -> (Datatype, usize) {
            (E::DATATYPE, size_of::<E>())
        }
        for (dt, size) in [
            size::<i8>(),
            size::<i16>(),
            size::<i32>(),
            size::<i64>(),
            size::<u8>(),
            size::<u16>(),
            size::<u32>(),
            size::<u64>(),
            size::<f32>(),
            size::<f64>(),
            size::<ValueIndex<f32>>(),
            size::<ValueIndex<f64>>(),
            size::<ValueIndex<i64>>(),
            size::<ValueIndex<i32>>(),
            size::<ValueIndex<i16>>(),
        ] {
            assert_eq!(dt.size(), size, "{dt:?}");
        }
        for dt in Datatype::ALL {
            let kinds = [dt.is_integer(), dt.is_float(), dt.is_pair()];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{dt:?}");
        }

        let d = DoubleInt::new(1.5, 7);
        let b = d.as_bytes();
        assert_eq!(
            (&b[..8], &b[8..12], &b[12..]),
            (
                &1.5f64.to_ne_bytes()[..],
                &7i32.to_ne_bytes()[..],
                &[0u8; 4][..]
            )
        );
        let s: ValueIndex<i16> = ShortInt::new(-2, 9);
        let b = s.as_bytes();
        assert_eq!(
            (&b[..2], &b[2..4], &b[4..]),
            (
                &(-2i16).to_ne_bytes()[..],
                &[0u8; 2][..],
                &9i32.to_ne_bytes()[..]
            )
        );
        assert_eq!(
            FloatInt::read_from_bytes(FloatInt::new(2.5, 3).as_bytes()),
            Ok(FloatInt::new(2.5, 3))
        );
        assert_eq!(format!("{s:?}"), "ShortInt { value: -2, index: 9 }");

        // A typed MinLoc through the byte interface.
        let mut right = vec![TwoInt::new(4, 1), TwoInt::new(-5, 1)];
        let left = [TwoInt::new(4, 0), TwoInt::new(9, 0)];
        Op::from(BuiltinOp::MinLoc)
            .combine_into_right(TwoInt::DATATYPE, left.as_bytes(), right.as_mut_bytes())
            .unwrap();
        assert_eq!(right, [TwoInt::new(4, 0), TwoInt::new(-5, 1)]);
    }
}
