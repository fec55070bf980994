//! `bcld`: the per-node BCL engine (see `bcl_tools::bcld`).

use bcl_tools::bcld::{Config, Daemon};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The per-node BCL engine: owns the node's NIC and sends and receives
/// for the node's BCL processes, which then run without privileges and
/// cannot send as anyone but themselves.
///
/// Applications use it as the method `bcld` (`--method bcld` in the tools,
/// `BCL_METHODS=bcld` for jobs); they find the daemon at
/// $BCL_BCLD_SOCKET, else /run/bcl/bcld.sock.
#[derive(Parser, Debug)]
#[command(name = "bcld", version)]
struct Args {
    /// Stay in the foreground (tests, systemd); otherwise detach and run
    /// in the background.
    #[arg(long)]
    foreground: bool,
    /// This node's id, as in the cluster description; the daemon serves
    /// only endpoints of this node. Below 2^30.
    #[arg(long)]
    node: u32,
    /// The interface (packet, afxdp) or PCI device (vfio) to own; default:
    /// the only candidate.
    #[arg(long)]
    nic: Option<String>,
    /// The NIC method: packet (any NIC), afxdp (attaches an XDP program),
    /// vfio (a NIC bound to vfio-pci).
    #[arg(long, default_value = "packet")]
    method: String,
    /// EtherType of BCL frames (e.g. 0x88b6); default: the method's for
    /// jobs. Every direct peer on the fabric must use the same.
    #[arg(long, value_parser = parse_ethertype)]
    ethertype: Option<u16>,
    /// The socket applications connect to.
    #[arg(long, default_value = bcl::shm::engine::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Spin on one core instead of sleeping when idle (lowest latency).
    #[arg(long)]
    busy_poll: bool,
    /// Where the rings are created.
    #[arg(long, default_value = "/dev/shm")]
    shm_dir: PathBuf,
}

fn parse_ethertype(s: &str) -> Result<u16, String> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u16::from_str_radix(t, 16)
        .map_err(|_| format!("{s:?} is not a hexadecimal EtherType such as 0x88b6"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let cfg = Config {
        node: args.node,
        socket: args.socket,
        method: args.method,
        nic: args.nic,
        ethertype: args.ethertype,
        busy_poll: args.busy_poll,
        shm_dir: args.shm_dir,
    };
    let mut daemon = match Daemon::start(cfg.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bcld: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "bcld: node {}, {}, socket {}, pid {}",
        cfg.node,
        daemon.descriptor(),
        cfg.socket.display(),
        std::process::id()
    );
    for note in daemon.notes() {
        eprintln!("bcld: {note}");
    }
    if !args.foreground {
        if let Err(e) = nix::unistd::daemon(false, false) {
            eprintln!("bcld: detaching: {e}");
            return ExitCode::FAILURE;
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("bcld: installing a handler for signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    daemon.run(&stop);
    drop(daemon);
    let _ = std::fs::remove_file(&cfg.socket);
    eprintln!("bcld: stopped");
    ExitCode::SUCCESS
}
