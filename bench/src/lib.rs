//! bcl-bench
