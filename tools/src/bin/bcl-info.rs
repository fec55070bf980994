//! `bcl-info`: what BCL can use on this host and what it would choose in a
//! cluster (like `ucx_info -e` / `fi_info`).
//!
//! ```text
//! bcl-info                                   # methods usable here (and why not), NICs per fabric, the node daemon
//! bcl-info --cluster configs/mixed.toml --per-node 2   # + the method matrix of that cluster
//! bcl-info --cluster configs/mixed.toml --node a1      # NICs of this host as node a1 sees them
//! bcl-info --json                            # the same as one JSON object
//! bcl-run --lab L --cluster C --per-node 2 -- bcl-info --job   # a running job's actual links (and rails)
//! ```
//!
//! The matrix comes from the configuration alone, with the same policy
//! code the endpoints run (`bcl::cluster::select::choose`), including
//! `BCL_METHODS`; a running job prints its actual links (`bcl-alltoall`).

use bcl::cluster::join::{config_table, plan, policy_from};
use bcl::cluster::nics::{self, NicInfo};
use bcl::cluster::resources::ClusterConfig;
use bcl::cluster::select::choose;
use bcl::registry::{ProbeRow, Registry};
use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "bcl-info",
    about = "Methods usable on this host and why not, NICs per fabric, and a cluster's method matrix"
)]
struct Args {
    /// A resource database: show its method matrix.
    #[arg(long)]
    cluster: Option<PathBuf>,
    /// Processes per node in the matrix.
    #[arg(long, default_value_t = 1)]
    per_node: u32,
    /// This host's node in the cluster file (default: $BCL_NODE).
    #[arg(long)]
    node: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Run as a rank of a job started by bcl-run (`bcl-run ... -- bcl-info
    /// --job`): open a link to every other rank by policy, as applications
    /// do, and print this rank's row of the job's method matrix.
    #[arg(long)]
    job: bool,
    /// Print the collectives' algorithm choice table: for each collective
    /// and message size, the algorithm the LogGP cost model picks and its
    /// predicted time, for communicators of 2 to 1024 ranks with
    /// --per-node ranks per node. Reads BCL_COLL_MODEL (parameters),
    /// BCL_COLL_ALG (overrides) and BCL_COLL_DETERMINISTIC like a job does.
    #[arg(long)]
    coll: bool,
}

/// Whether each method of the registry can run here, probed on the
/// interfaces a method could be opened on (up, not loopback, bridges or
/// container plumbing).
fn probe_methods(registry: &Registry, ifs: &[NicInfo]) -> Vec<ProbeRow> {
    let candidates: Vec<String> = ifs
        .iter()
        .filter(|i| i.excluded.is_none() && i.up)
        .map(|i| i.name.clone())
        .collect();
    registry.probe(&candidates)
}

/// `--coll`: the choice table of the collectives' selector.
fn coll_table(per_node: usize) -> Result<(), String> {
    use bcl::coll::cost::choice_table;
    use bcl::coll::select::{deterministic_from_env, Selector};
    let selector = Selector::from_env().map_err(|e| e.to_string())?;
    let deterministic = deterministic_from_env();
    println!(
        "# collectives: algorithm chosen by predicted time (µs), {} reductions",
        if deterministic {
            "deterministic"
        } else {
            "fastest (BCL_COLL_DETERMINISTIC=0)"
        }
    );
    let m = selector.model();
    for (name, p) in [("intra-node", &m.intra), ("inter-node", &m.inter)] {
        println!(
            "# {name} LogGP: L {:.3} µs, o_s {:.3} µs, o_r {:.3} µs, g {:.3} µs, G {:.3} ns/B",
            p.l * 1e6,
            p.o_s * 1e6,
            p.o_r * 1e6,
            p.g * 1e6,
            p.big_g * 1e9
        );
    }
    for (c, a) in &selector.overrides().pairs {
        println!("# BCL_COLL_ALG: {} runs {}", c.name(), a.name());
    }
    print!(
        "{}",
        choice_table(
            m,
            deterministic,
            &[2, 4, 8, 16, 64, 256, 1024],
            &[8, 1024, 65536, 1 << 20, 4 << 20],
            per_node,
        )
    );
    Ok(())
}

/// `--job`: one message to and from every other rank opens every link;
/// prints `link {"rank":R,"peer":P,"method":M,"reason":...}` per peer.
fn job_row() -> Result<(), String> {
    use std::time::Duration;
    let mut j = bcl::cluster::join::join(bcl::cluster::join::JoinOptions::default())
        .map_err(|e| e.to_string())?;
    let me = j.info.rank;
    let wait = Duration::from_secs(30);
    let peers: Vec<usize> = (0..j.addrs.len()).filter(|p| *p as u32 != me).collect();
    let ep = &mut j.endpoint;
    for p in &peers {
        ep.send(j.addrs[*p], b"bcl-info")
            .map_err(|e| e.to_string())?;
    }
    let (mut sent, mut received) = (0, 0);
    let deadline = std::time::Instant::now() + wait;
    while sent < peers.len() || received < peers.len() {
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "rank {me}: {sent} of {} sends done, {received} messages received within {wait:?}",
                peers.len()
            ));
        }
        ep.progress_or_wait(Some(ep.now() + Duration::from_millis(5)))
            .map_err(|e| e.to_string())?;
        while let Some(ev) = ep.poll_send_event() {
            match ev {
                bcl::SendEvent::Complete(_) => sent += 1,
                bcl::SendEvent::Failed(_, f) => return Err(format!("a send failed: {f}")),
            }
        }
        while let Some(d) = ep.poll_delivery() {
            ep.release(d).map_err(|e| e.to_string())?;
            received += 1;
        }
    }
    for p in peers {
        let (method, reason) = match ep.link(j.addrs[p]) {
            Some(r) => (r.method.unwrap_or_else(|| "none".into()), r.reason),
            None => ("none".into(), "no link".into()),
        };
        // Rails (a cluster file with `rails = true`): each with its state.
        let rails: Vec<serde_json::Value> = ep
            .rails(j.addrs[p])
            .iter()
            .map(|(name, r)| json!({"method": name, "state": r.state.to_string()}))
            .collect();
        let mut row = json!({"rank": me, "peer": p, "method": method, "reason": reason});
        if !rails.is_empty() {
            row["rails"] = json!(rails);
        }
        println!("link {row}");
    }
    // Stay until every rank has its row (peers still need our acks).
    if let Some(s) = j.session.as_mut() {
        let ep = &mut j.endpoint;
        let done = std::sync::atomic::AtomicBool::new(false);
        let r = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                let r = s.barrier(wait);
                done.store(true, std::sync::atomic::Ordering::Release);
                r
            });
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let _ = ep.progress_or_wait(Some(ep.now() + Duration::from_millis(5)));
            }
            h.join()
        });
        r.map_err(|_| "barrier thread panicked".to_string())?
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-info: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.job {
        return job_row();
    }
    if args.coll {
        return coll_table(args.per_node as usize);
    }
    let cfg = match &args.cluster {
        Some(p) => Some(ClusterConfig::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let registry = Registry::builtin();
    let policy = policy_from(cfg.as_ref(), registry)?;
    let ifs = nics::interfaces().map_err(|e| format!("listing interfaces: {e}"))?;
    let methods = probe_methods(registry, &ifs);
    let node_name = args.node.clone().or_else(|| std::env::var("BCL_NODE").ok());
    let node = match (&cfg, &node_name) {
        (Some(c), Some(n)) => Some(
            c.node(n)
                .ok_or_else(|| format!("node {n:?} is not in {}", c.file.display()))?,
        ),
        _ => None,
    };
    // NICs: the fabric each is on (from the file for this node, else the
    // discovered subnet).
    let mut fabric_of: std::collections::HashMap<String, String> = Default::default();
    let mut plan_notes = Vec::new();
    if let (Some(c), Some(n)) = (&cfg, node) {
        // The plan below reports a resolution error; here only the fabrics.
        if let Ok(found) = nics::resolve(c, n, &ifs) {
            for (nic, i) in n.nics.iter().zip(found) {
                fabric_of.insert(i.name.clone(), nic.fabric.clone());
            }
        }
    }
    match plan(
        cfg.as_ref().filter(|_| node.is_some()),
        node,
        &ifs,
        0,
        &policy,
    ) {
        Ok((_, notes)) => plan_notes.extend(notes),
        Err(e) => plan_notes.push(e),
    }
    let nic_rows: Vec<serde_json::Value> = ifs
        .iter()
        .map(|i| {
            let fabric = fabric_of.get(&i.name).cloned().or_else(|| {
                i.excluded
                    .is_none()
                    .then(|| i.discovered_fabric())
                    .flatten()
            });
            json!({
                "name": i.name, "index": i.index, "up": i.up,
                "ipv4": i.ipv4.iter().map(|(a, l)| format!("{a}/{l}")).collect::<Vec<_>>(),
                "fabric": fabric, "excluded": i.excluded,
            })
        })
        .collect();
    let mut matrix = Vec::new();
    if let Some(c) = &cfg {
        let mut ranks = Vec::new();
        for n in &c.nodes {
            for l in 0..args.per_node {
                let (t, _) = config_table(n, l, &policy);
                ranks.push((format!("{}/{l}", n.name), t));
            }
        }
        for (a, ta) in &ranks {
            for (b, tb) in &ranks {
                if a == b {
                    continue;
                }
                let (method, reason) = match choose(ta, tb, &policy) {
                    Ok((c, why)) => (c.method, why),
                    Err(why) => ("none".to_string(), why),
                };
                matrix.push(json!({"from": a, "to": b, "method": method, "reason": reason}));
            }
        }
    }
    let daemon_socket = bcl::shm::engine::socket_path();
    let daemon = bcl::shm::engine::query_status(&daemon_socket).ok();
    if args.json {
        let v = json!({
            "bcld": daemon.as_ref().map(|d| json!({
                "socket": daemon_socket.display().to_string(),
                "pid": d.pid, "node": d.node, "nics": d.nics, "nic_names": d.nic_names,
                "clients": d.clients.iter().map(|c| json!({
                    "addr": c.addr, "job": c.job, "uid": c.uid, "pid": c.pid,
                    "counters": c.counters.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                })).collect::<Vec<_>>(),
                "counters": d.counters.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            })),
            "methods": methods.iter().map(|r| json!({
                "method": r.method, "usable": r.usable, "why": r.detail,
                "scope": r.scope.name(), "summary": r.summary,
            })).collect::<Vec<_>>(),
            "order": policy.order,
            "pin": policy.pin.as_ref().map(|p| p.source.clone()),
            "nics": nic_rows,
            "notes": plan_notes,
            "matrix": matrix,
        });
        println!("{v}");
        return Ok(());
    }
    println!("Methods on this host:");
    for r in &methods {
        let (m, why) = (r.method, &r.detail);
        let state = if r.usable { "usable" } else { "not usable" };
        if why.is_empty() {
            println!("  {m:<7} {state}");
        } else {
            println!("  {m:<7} {state}: {why}");
        }
    }
    println!(
        "Policy order: {}{}",
        policy.order.join(", "),
        policy
            .pin
            .as_ref()
            .map(|p| format!(" (pinned by {})", p.source))
            .unwrap_or_default()
    );
    println!("NICs:");
    for r in &nic_rows {
        let ips: Vec<String> = r["ipv4"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let what = match (r["excluded"].as_str(), r["fabric"].as_str()) {
            (Some(why), _) => format!("never picked unless named ({why})"),
            (None, Some(f)) => format!("fabric {f}"),
            (None, None) => "no fabric (no IPv4 address)".into(),
        };
        println!(
            "  {:<12} {:<5} {:<20} {what}",
            r["name"].as_str().unwrap_or(""),
            if r["up"].as_bool() == Some(true) {
                "up"
            } else {
                "down"
            },
            ips.join(",")
        );
    }
    match &daemon {
        Some(d) => {
            println!(
                "Node daemon (bcld) at {}: pid {}, node {}, {}; {} client(s)",
                daemon_socket.display(),
                d.pid,
                d.node,
                d.nics
                    .iter()
                    .zip(d.nic_names.iter().chain(std::iter::repeat(&String::new())))
                    .map(|(nic, name)| match name.as_str() {
                        "" => nic.clone(),
                        name => format!("{name}={nic}"),
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                d.clients.len()
            );
            for c in &d.clients {
                let counters: Vec<String> =
                    c.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
                println!(
                    "  {} job {:#x} uid {} pid {}: {}",
                    c.addr,
                    c.job,
                    c.uid,
                    c.pid,
                    counters.join(" ")
                );
            }
            let refused: Vec<String> = d
                .counters
                .iter()
                .filter(|(k, v)| *v > 0 && (k.starts_with("refused") || k.starts_with("rx_")))
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            if !refused.is_empty() {
                println!("  counters: {}", refused.join(" "));
            }
        }
        None => println!(
            "Node daemon (bcld): none answers at {}",
            daemon_socket.display()
        ),
    }
    if !plan_notes.is_empty() {
        println!("Left out here:");
        for n in &plan_notes {
            println!("  {n}");
        }
    }
    if let Some(c) = &cfg {
        println!(
            "Method matrix of {} ({} per node):",
            c.file.display(),
            args.per_node
        );
        let names: Vec<String> = c
            .nodes
            .iter()
            .flat_map(|n| (0..args.per_node).map(move |l| format!("{}/{l}", n.name)))
            .collect();
        let w = names.iter().map(String::len).max().unwrap_or(4).max(6);
        print!("  {:w$}", "");
        for n in &names {
            print!(" {n:>w$}");
        }
        println!();
        for a in &names {
            print!("  {a:w$}");
            for b in &names {
                let m = matrix
                    .iter()
                    .find(|x| x["from"] == a.as_str() && x["to"] == b.as_str())
                    .and_then(|x| x["method"].as_str())
                    .unwrap_or("-");
                print!(" {m:>w$}");
            }
            println!();
        }
        println!("Reasons:");
        for x in &matrix {
            println!(
                "  {} -> {}: {}",
                x["from"].as_str().unwrap_or(""),
                x["to"].as_str().unwrap_or(""),
                x["reason"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}
