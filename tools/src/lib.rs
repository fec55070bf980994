//! Shared code of BCL's command-line tools: argument parsing, latency
//! recording and reporting, and the pingpong exchange used by
//! `bcl-pingpong`.

pub mod args;
pub mod latency;
pub mod pingpong;
pub mod report;
