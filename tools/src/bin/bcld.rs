//! `bcld`: the per-node BCL engine (see `bcl_tools::bcld`).

use bcl_tools::bcld::{resources, Candidate, Config, Daemon};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// The per-node BCL engine: owns the node's NICs and sends and receives
/// for the node's BCL processes, which then run without privileges and
/// cannot send as anyone but themselves.
///
/// Applications use it as the method `bcld` (`--method bcld` in the tools,
/// `BCL_METHODS=bcld` for jobs); they find the daemon at
/// $BCL_BCLD_SOCKET, else /run/bcl/bcld.sock.
#[derive(Parser, Debug)]
#[command(
    name = "bcld",
    version,
    after_help = "Examples (as root):\n  bcld --foreground --node 2 --nic eth0\n  bcld --foreground --node 2 --nic eth0 --method afxdp\n  bcld --foreground --node 2 --nic eth0 --nic eth1   # two NICs: clients use them as rails\n  bcld --foreground --cluster /etc/bcl/cluster.toml --node-name n2\nThen, as any user on that node:\n  BCL_BCLD_SOCKET=/run/bcl/bcld.sock bcl-pingpong --method bcld --serve\n  echo '\"status\"' | socat - UNIX:/run/bcl/bcld.sock   # the daemon's NIC, clients, counters"
)]
struct Args {
    /// Stay in the foreground (tests, systemd); otherwise detach and run
    /// in the background.
    #[arg(long)]
    foreground: bool,
    /// The resource database: the node's id and NICs come from its entry
    /// in this cluster file. The daemon owns every NIC listed there that
    /// opens (numbered in file order), each with the best method it
    /// allows that opens: vfio, afxdp, packet.
    #[arg(long, conflicts_with_all = ["node", "nic", "method"])]
    cluster: Option<PathBuf>,
    /// This node's name in --cluster (default: $BCL_NODE, else the host
    /// name).
    #[arg(long, requires = "cluster")]
    node_name: Option<String>,
    /// Without --cluster: this node's id (the cluster file's position of
    /// the node, from 1); the daemon serves only endpoints of this node.
    /// Below 2^26.
    #[arg(long, required_unless_present = "cluster")]
    node: Option<u32>,
    /// Without --cluster: an interface (packet, afxdp) or PCI device
    /// (vfio) to own; default: the only candidate. Repeat it for several
    /// NICs: a client goes through the first unless its hello names
    /// another, and a job with rails on (BCL_RAILS=on) goes through all.
    #[arg(long)]
    nic: Vec<String>,
    /// Without --cluster: the NIC method: packet (any NIC), afxdp
    /// (attaches an XDP program), vfio (a NIC bound to vfio-pci).
    #[arg(long, default_value = "packet")]
    method: String,
    /// EtherType of BCL frames, whatever the method: the default is the
    /// one `packet` endpoints of jobs speak, so that they and the daemons
    /// (on any method) reach each other.
    #[arg(long, value_parser = parse_ethertype, default_value = "0x88b6")]
    ethertype: u16,
    /// The socket applications connect to.
    #[arg(long, default_value = bcl::shm::engine::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Spin on one core instead of sleeping when idle (lowest latency).
    #[arg(long)]
    busy_poll: bool,
    /// Do not bundle small frames of several clients into one container
    /// frame for a remote daemon (containers from other daemons are still
    /// accepted). Bundling adds no delay: it packs only what one round of
    /// the daemon brought.
    #[arg(long)]
    no_bundle: bool,
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
    let (node, candidates) = match &args.cluster {
        Some(file) => {
            let name = args.node_name.clone().unwrap_or_else(resources::own_name);
            match resources::from_cluster(file, &name) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("bcld: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None if args.nic.is_empty() => (
            args.node.unwrap_or_default(),
            vec![Candidate {
                method: args.method.clone(),
                nic: None,
            }],
        ),
        None => (
            args.node.unwrap_or_default(),
            args.nic
                .iter()
                .map(|nic| Candidate {
                    method: args.method.clone(),
                    nic: Some(nic.clone()),
                })
                .collect(),
        ),
    };
    let cfg = Config {
        node,
        socket: args.socket,
        candidates,
        ethertype: Some(args.ethertype),
        busy_poll: args.busy_poll,
        bundle: !args.no_bundle,
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
        daemon.nic_labels().join(" + "),
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
