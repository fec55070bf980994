//! MPI for C programs on BCL (work in progress).
