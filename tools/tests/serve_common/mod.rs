//! Starting a tool's server end in a test: the `listening: DESCRIPTOR`
//! line it prints first, and the rest of its output read on a thread so
//! that the server never blocks on a full pipe.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// Spawns `server` (a `bcl-bw --serve` or `bcl-pingpong --serve` command)
/// with its output piped; returns the child, the descriptor of its
/// `listening:` line and a thread that returns the rest of its output.
/// Panics, naming the line, when the first line is not `listening: …`.
pub fn spawn_listening(mut server: Command) -> (Child, String, JoinHandle<String>) {
    let mut child = server.stdout(Stdio::piped()).spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let descriptor = line
        .strip_prefix("listening: ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .trim()
        .to_string();
    (child, descriptor, rest)
}
