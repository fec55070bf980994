//! A rail taken down and brought back mid-stream, shared by the direct
//! rails test (`rails_lab.rs`) and the one through the node daemons
//! (`bcld_rails.rs`).

#![allow(dead_code)]

use bcl_lab::Lab;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const BW: &str = env!("CARGO_BIN_EXE_bcl-bw");

/// Windows of 64 x 64 KiB the stream sends, the warm-up one included: 92
/// MB, some 4 s over two rails shaped to 100 Mbit/s each.
pub const WINDOWS: u64 = 22;

/// Streams [`WINDOWS`] verified windows of 64 KiB messages over the rails
/// `to-r0,to-r1` of the lab (`configs/lab/rails4-shaped.toml`), `bcl-bw
/// --method METHOD` from node a to node b, each end with `env` and its
/// node's `socket` for `BCL_BCLD_SOCKET` if given; node a's `to-r1` goes
/// down half a second in, for half a second. Returns the sender's report
/// and how long the stream took; both ends must succeed.
pub fn stream_through_an_outage(
    lab: &Lab,
    method: &str,
    sockets: Option<(&Path, &Path)>,
    json: &Path,
) -> (Value, Duration) {
    let two = "to-r0,to-r1";
    let tool = |ns: &str| {
        let mut c = lab.command(ns, BW).unwrap();
        if let Some((a, b)) = sockets {
            c.env("BCL_BCLD_SOCKET", if ns == "a" { a } else { b });
        }
        c
    };
    let mut server = tool("b");
    server.args(["--method", method, "--serve", "--verify", "--rails", two]);
    let (mut server, descriptor, rest) = crate::serve_common::spawn_listening(server);
    let iters = (WINDOWS - 1).to_string();
    let mut client = tool("a")
        .args(["--method", method, "--verify", "--rails", two])
        .args(["--sizes", "65536", "--iters", &iters, "--warmup", "1"])
        .args(["--connect", &descriptor, "--json"])
        .arg(json)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let link = |state: &str| {
        let st = lab
            .command("a", "ip")
            .unwrap()
            .args(["link", "set", "to-r1", state])
            .status()
            .unwrap();
        assert!(st.success(), "ip link set to-r1 {state}");
    };
    std::thread::sleep(Duration::from_millis(500));
    link("down");
    std::thread::sleep(Duration::from_millis(500));
    link("up");
    let status = client.wait().unwrap();
    let took = start.elapsed();
    assert!(status.success(), "client exit {status}");
    assert!(server.wait().unwrap().success(), "{}", rest.join().unwrap());
    let report: Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    (report, took)
}

/// What [`stream_through_an_outage`] must show: every message once, in
/// order, intact; the stream outlasting the outage; rail 1 taken out, back
/// up, and used again (out for half a second of some 4, it carried most
/// of an equal part; left unused it would have carried a seventh of it).
pub fn assert_rail_left_and_used_again(report: &Value, took: Duration) {
    let v = &report["verify"];
    assert_eq!(v["delivered"], WINDOWS * 64, "{v}");
    for k in ["lost", "duplicated", "out_of_order", "corrupted"] {
        assert_eq!(v[k], 0, "{k}: {v}");
    }
    assert!(
        took > Duration::from_secs(2),
        "the stream outlasted the outage ({took:?})"
    );
    let rails = report["rails"].as_array().expect("rails in the report");
    let (r0, r1) = (&rails[0], &rails[1]);
    assert!(
        r1["downs"].as_u64().unwrap() >= 1,
        "rail 1 was taken out: {report}"
    );
    assert_eq!(r1["state"], "up", "rail 1 is back: {report}");
    let bytes = |r: &Value| r["bytes_delivered"].as_u64().unwrap();
    assert!(
        bytes(r1) * 2 > bytes(r0),
        "rail 1 carried {} bytes against rail 0's {}: {report}",
        bytes(r1),
        bytes(r0)
    );
}
