//! Node daemons in lab namespaces, for the tests that run jobs and tools
//! through them (`bcld_lab.rs`, `mixed_cluster.rs`).

#![allow(dead_code)]

use bcl::shm::engine::{query_status, Status};
use bcl_lab::Lab;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const BCLD: &str = env!("CARGO_BIN_EXE_bcld");

/// A directory every user may enter and write (sockets, JSON output,
/// copies of the tools an unprivileged user can execute wherever the
/// checkout lives).
pub fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// `tool` copied into `dir`, executable by everybody.
pub fn public_copy(tool: &str, dir: &Path) -> PathBuf {
    let to = dir.join(Path::new(tool).file_name().unwrap());
    std::fs::copy(tool, &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// A `bcld` running in a lab namespace.
pub struct Daemon {
    child: Child,
    /// Its socket.
    pub socket: PathBuf,
}

impl Daemon {
    /// Node `node`'s daemon on `ns`'s only interface.
    pub fn on_node(lab: &Lab, ns: &str, node: u32, socket: PathBuf) -> Daemon {
        let nic = lab.interfaces(ns).unwrap().remove(0).ifname;
        let args = ["--node".to_string(), node.to_string(), "--nic".into(), nic];
        Daemon::start(lab, ns, &args, socket)
    }

    /// The daemon of node `node` (a lab namespace of the same name) that
    /// finds its node and NICs in the resource database `cluster`, at
    /// `dir/bcld-NODE.sock` (what `BCL_BCLD_SOCKET=dir/bcld-%n.sock` names).
    pub fn from_cluster(lab: &Lab, node: &str, cluster: &Path, dir: &Path) -> Daemon {
        let args = [
            "--cluster".to_string(),
            cluster.display().to_string(),
            "--node-name".to_string(),
            node.to_string(),
        ];
        Daemon::start(lab, node, &args, dir.join(format!("bcld-{node}.sock")))
    }

    /// A daemon on `ns` started with `args` (besides `--foreground` and
    /// `--socket`), once its socket answers.
    pub fn start(lab: &Lab, ns: &str, args: &[String], socket: PathBuf) -> Daemon {
        let child = lab
            .command(ns, BCLD)
            .unwrap()
            .arg("--foreground")
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon { child, socket };
        let until = Instant::now() + Duration::from_secs(20);
        while query_status(&d.socket).is_err() {
            assert!(Instant::now() < until, "bcld on {ns} did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        d
    }

    /// What it reports.
    pub fn status(&self) -> Status {
        query_status(&self.socket).unwrap()
    }

    /// One of its counters (0 if never counted).
    pub fn counter(&self, name: &str) -> u64 {
        let s = self.status();
        s.counters
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILLs it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits until the daemon lists no client at `addr`.
    pub fn wait_gone(&self, addr: &str) {
        let until = Instant::now() + Duration::from_secs(10);
        while self.status().clients.iter().any(|c| c.addr == addr) {
            assert!(
                Instant::now() < until,
                "bcld still lists {addr}: {:?}",
                self.status()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// Watches the client lists of daemons while a job runs: the uids of every
/// client seen, once a view every 20 ms.
pub struct UidWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u32>>,
}

impl UidWatch {
    /// Starts watching the daemons at `sockets`.
    pub fn start(sockets: Vec<PathBuf>) -> UidWatch {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                for s in &sockets {
                    if let Ok(st) = query_status(s) {
                        seen.extend(st.clients.iter().map(|c| c.uid));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        UidWatch { stop, thread }
    }

    /// Stops watching; the uids seen, one per client per view.
    pub fn stop(self) -> Vec<u32> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
