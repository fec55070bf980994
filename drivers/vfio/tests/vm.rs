//! The VFIO layer, the virtio-net driver and the `vfio` method on real
//! (emulated) hardware: runs `tests/vm/run.sh`, which boots a QEMU guest
//! with an emulated Intel IOMMU and virtio-net NICs, binds them to
//! vfio-pci and runs `tests/vm/guest-tests.sh` inside: the `bcl-vfio`
//! tool's list/bind/check/exchange/unbind, `bcl-pingpong` and `bcl-bw
//! --verify` with `--method vfio` between two NICs (one process each), a
//! two-rank `bcl-run` job in which the cluster layer opens vfio on each
//! rank's NIC from the resource database (`bcl-alltoall`, verified), and
//! the same tools between a guest NIC on vfio and BCL on AF_PACKET on the
//! host side of a tap (in a network namespace of its own), both ways.
//!
//! Needs root (apt-get for qemu-system-x86 and busybox-static, the kernel
//! cache in /var/cache/bcl-vm, the namespace and the tap). Set
//! `BCL_SKIP_PRIVILEGED=1` to skip it; otherwise it fails loudly when it
//! cannot run.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

#[test]
fn vfio_guest_runs_all_guest_tests() {
    if std::env::var("BCL_SKIP_PRIVILEGED").as_deref() == Ok("1") {
        eprintln!("SKIP vfio VM test (tests/vm/run.sh): BCL_SKIP_PRIVILEGED=1");
        return;
    }
    let euid = std::fs::metadata("/proc/self")
        .expect("reading /proc/self")
        .uid();
    assert_eq!(
        euid, 0,
        "the VFIO VM test must run as root (it installs qemu-system-x86 and busybox-static \
         with apt-get and caches a kernel in /var/cache/bcl-vm); \
         set BCL_SKIP_PRIVILEGED=1 to skip it"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/vm/run.sh");
    assert!(script.exists(), "{} is missing", script.display());
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .expect("cannot run bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The harness's own summary lines (not the whole guest console).
    for line in stderr.lines().filter(|l| l.starts_with("run.sh:")) {
        eprintln!("{line}");
    }
    if !out.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(80).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "tests/vm/run.sh failed ({}); last lines:\n{}",
            out.status,
            tail.join("\n")
        );
    }
    assert!(
        stderr.contains("BCL-VM-RESULT: PASS"),
        "run.sh exited 0 without the guest's PASS marker"
    );
}
