//! Gives the shared library MPICH's soname, `libmpi.so.12`: programs
//! linked against it (by `bclcc`, or by MPICH's own `mpicc` through
//! `libmpich.so.12`, see `bclcc --libdir`) find it under that name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");
}
