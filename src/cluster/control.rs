//! Operator control of a running job through its rendezvous: take a node
//! out of the job on purpose and bring it back (`bcl-admin detach NODE`,
//! `bcl-admin rejoin NODE`), as BCL-3's operators did.
//!
//! Two more kinds of connection to [`bcl-run`'s rendezvous](super::bootstrap):
//!
//! - **The control feed.** Every rank that joined through the rendezvous
//!   opens a second connection ([`subscribe`]) and keeps it for its life.
//!   The rendezvous answers `{"ok":true}`, then writes one line per
//!   command: `{"detach":N}` or `{"rejoin":N}`, N a node number (the NODE
//!   of `NODE.PORT` addresses). A rank that subscribes late (a restarted
//!   one) gets a `detach` line for each node detached at that moment. A
//!   reader thread hands the commands to the endpoint
//!   ([`crate::admin`]), which applies them at its next progress round.
//! - **An operator's request** ([`request`]): one line, `{"bcl_rendezvous":
//!   1, "job":…, "secret":…, "admin": {"detach": "NODE"}}` (or `rejoin`,
//!   or `"status"`), NODE being a node's name as the job knows it (the
//!   `BCL_NODE` of its ranks: a lab node, a host) or its number. The answer
//!   lists every node of the job, its ranks and whether it is detached,
//!   and how many ranks the command reached.
//!
//! Both are checked against the job's id and secret like a rank's hello.
//! Every rank, the detached node's included, applies the same command: the
//! others cut the node off, and its own ranks cut themselves off from the
//! others, so nothing crosses in either direction even from a rank that
//! has not read the command yet.

use super::bootstrap::{
    read_line, refuse, secrets_equal, send_line, BootstrapError, JobInfo, RendezvousAddr, State,
    Stream, PROTOCOL_VERSION,
};
use crate::admin::{AdminCommand, AdminSender};
use bcl_core::{NodeId, ProcessAddr};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::BufReader;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// How long the rendezvous waits on a rank that does not read its feed
/// (a stopped process) before it gives up writing a command to it.
const FEED_WRITE_LIMIT: Duration = Duration::from_secs(2);

/// The control feeds open and the nodes detached (part of the rendezvous
/// state).
#[derive(Default)]
pub(super) struct Controls {
    feeds: Vec<(u64, Box<dyn Stream>)>,
    next_feed: u64,
    detached: BTreeSet<u32>,
}

/// What an operator asks the rendezvous.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminRequest {
    /// Cut the node (a name or a number) off the job.
    Detach(String),
    /// Bring the node back.
    Rejoin(String),
    /// Only list the nodes.
    Status,
}

/// One node of the job as the rendezvous sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// Its number (the NODE of its ranks' `NODE.PORT` addresses).
    pub node: u32,
    /// Its name (its ranks' `BCL_NODE`, or their host name).
    pub name: String,
    /// The ranks on it.
    pub ranks: Vec<u32>,
    /// Whether it is detached.
    pub detached: bool,
}

/// The rendezvous' answer to an [`AdminRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminReply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Why not, if not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The node the command was about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// How many ranks' control feeds the command was written to.
    #[serde(default)]
    pub told: u32,
    /// Every node of the job (the ranks that have joined).
    #[serde(default)]
    pub nodes: Vec<NodeState>,
}

/// A line of the control feed.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FeedLine {
    Detach(u32),
    Rejoin(u32),
}

#[derive(Deserialize)]
struct Credentials {
    job: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
struct ControlHello {
    bcl_rendezvous: u32,
    job: String,
    secret: String,
    control: ControlWho,
}

#[derive(Serialize, Deserialize)]
struct ControlWho {
    rank: u32,
}

#[derive(Serialize, Deserialize)]
struct AdminHello {
    bcl_rendezvous: u32,
    job: String,
    secret: String,
    admin: AdminRequest,
}

/// Whether a hello is for this module (a control feed or an operator).
pub(super) fn is_control(hello: &serde_json::Value) -> bool {
    hello.get("control").is_some() || hello.get("admin").is_some()
}

/// Serves a control feed or an operator's request (the hello has the
/// right protocol version; `is_control` said it is ours).
pub(super) fn serve(
    hello: serde_json::Value,
    mut w: Box<dyn Stream>,
    mut r: BufReader<Box<dyn Stream>>,
    state: &(Mutex<State>, Condvar),
    job: &str,
    secret: &str,
) {
    let Ok(who) = serde_json::from_value::<Credentials>(hello.clone()) else {
        return refuse(w.as_mut(), "control hello without job and secret".into());
    };
    if !secrets_equal(&who.secret, secret) {
        return refuse(w.as_mut(), "wrong job secret (BCL_JOB_SECRET)".into());
    }
    if who.job != job {
        return refuse(
            w.as_mut(),
            format!("job {:?} is not this job ({job:?})", who.job),
        );
    }
    if hello.get("control").is_some() {
        if serde_json::from_value::<ControlHello>(hello).is_err() {
            return refuse(w.as_mut(), "bad control hello".into());
        }
        return serve_feed(w, r, state);
    }
    let request = match serde_json::from_value::<AdminHello>(hello) {
        Ok(h) => h.admin,
        Err(e) => return refuse(w.as_mut(), format!("bad admin request: {e}")),
    };
    let reply = carry_out(&request, state);
    let _ = send_line(w.as_mut(), &reply);
    // The operator hangs up; nothing more is read.
    let _ = read_line(&mut r);
}

/// Registers a rank's feed, tells it what is detached now, and keeps it
/// until the rank hangs up.
fn serve_feed(
    mut w: Box<dyn Stream>,
    mut r: BufReader<Box<dyn Stream>>,
    state: &(Mutex<State>, Condvar),
) {
    let id = {
        let mut s = state.0.lock().unwrap_or_else(|e| e.into_inner());
        if send_line(w.as_mut(), &serde_json::json!({"ok": true})).is_err() {
            return;
        }
        for &node in &s.controls.detached {
            if send_line(w.as_mut(), &FeedLine::Detach(node)).is_err() {
                return;
            }
        }
        let _ = w.set_write_limit(Some(FEED_WRITE_LIMIT));
        let c = &mut s.controls;
        let id = c.next_feed;
        c.next_feed += 1;
        c.feeds.push((id, w));
        id
    };
    let _ = r.get_ref().set_timeout(None);
    while let Ok(Some(_)) = read_line(&mut r) {}
    let mut s = state.0.lock().unwrap_or_else(|e| e.into_inner());
    s.controls.feeds.retain(|(i, _)| *i != id);
}

/// The job's nodes from the members that have joined.
fn nodes(s: &State) -> Vec<NodeState> {
    let mut out: Vec<NodeState> = Vec::new();
    for m in s.members.iter().flatten() {
        let Ok(addr) = m.addr.parse::<ProcessAddr>() else {
            continue;
        };
        let node = addr.node.0;
        match out.iter_mut().find(|n| n.node == node) {
            Some(n) => n.ranks.push(m.rank),
            None => out.push(NodeState {
                node,
                name: m.table.host.clone(),
                ranks: vec![m.rank],
                detached: s.controls.detached.contains(&node),
            }),
        }
    }
    out.sort_by_key(|n| n.node);
    out
}

fn carry_out(request: &AdminRequest, state: &(Mutex<State>, Condvar)) -> AdminReply {
    let mut s = state.0.lock().unwrap_or_else(|e| e.into_inner());
    let all = nodes(&s);
    let (name, detach) = match request {
        AdminRequest::Status => {
            return AdminReply {
                ok: true,
                error: None,
                node: None,
                told: 0,
                nodes: all,
            }
        }
        AdminRequest::Detach(n) => (n, true),
        AdminRequest::Rejoin(n) => (n, false),
    };
    let Some(node) = all
        .iter()
        .find(|n| n.name == *name || n.node.to_string() == *name)
        .map(|n| n.node)
    else {
        let known: Vec<String> = all
            .iter()
            .map(|n| format!("{} (node {})", n.name, n.node))
            .collect();
        return AdminReply {
            ok: false,
            error: Some(format!(
                "no node {name:?} in this job; its nodes: {}",
                if known.is_empty() {
                    "none has joined yet".to_string()
                } else {
                    known.join(", ")
                }
            )),
            node: None,
            told: 0,
            nodes: all,
        };
    };
    let line = if detach {
        s.controls.detached.insert(node);
        FeedLine::Detach(node)
    } else {
        s.controls.detached.remove(&node);
        FeedLine::Rejoin(node)
    };
    let mut told = 0;
    // A feed that cannot take the line (its rank is gone or stuck) is
    // dropped; a rank that comes back subscribes again and is told then.
    s.controls.feeds.retain_mut(|(_, w)| {
        let ok = send_line(w.as_mut(), &line).is_ok();
        told += u32::from(ok);
        ok
    });
    let nodes = self::nodes(&s);
    AdminReply {
        ok: true,
        error: None,
        node: Some(node),
        told,
        nodes,
    }
}

fn connect(at: &RendezvousAddr, timeout: Duration) -> Result<Box<dyn Stream>, BootstrapError> {
    let io = |e: std::io::Error| BootstrapError::Rendezvous(format!("cannot reach {at}: {e}"));
    let s: Box<dyn Stream> = match at {
        RendezvousAddr::Tcp(a) => {
            let addr = std::net::ToSocketAddrs::to_socket_addrs(a)
                .map_err(io)?
                .next()
                .ok_or_else(|| BootstrapError::Rendezvous(format!("{a}: no address")))?;
            let s = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
            let _ = s.set_nodelay(true);
            Box::new(s)
        }
        RendezvousAddr::Unix(p) => Box::new(UnixStream::connect(p).map_err(io)?),
    };
    s.set_timeout(Some(timeout)).map_err(io)?;
    Ok(s)
}

fn first_line(
    r: &mut BufReader<Box<dyn Stream>>,
    at: &RendezvousAddr,
) -> Result<serde_json::Value, BootstrapError> {
    let line = read_line(r)
        .map_err(|e| BootstrapError::Rendezvous(format!("{at}: {e}")))?
        .ok_or_else(|| {
            BootstrapError::Rendezvous(format!("{at}: the rendezvous closed the connection"))
        })?;
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| BootstrapError::Rendezvous(format!("{at}: bad answer: {e}")))?;
    if v.get("ok") != Some(&serde_json::Value::Bool(true)) && v.get("error").is_some() {
        return Err(BootstrapError::Rendezvous(format!(
            "{at} refused: {}",
            v["error"].as_str().unwrap_or("no reason given")
        )));
    }
    Ok(v)
}

/// Opens this rank's control feed at the rendezvous `at` and starts the
/// thread that hands its commands to `to` for the life of the process
/// (it ends when the rendezvous closes the feed).
pub fn subscribe(
    at: &RendezvousAddr,
    secret: &str,
    info: &JobInfo,
    to: AdminSender,
    timeout: Duration,
) -> Result<(), BootstrapError> {
    let stream = connect(at, timeout)?;
    let mut w = stream
        .try_clone_box()
        .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?;
    let hello = ControlHello {
        bcl_rendezvous: PROTOCOL_VERSION,
        job: info.job_id.clone(),
        secret: secret.to_string(),
        control: ControlWho { rank: info.rank },
    };
    send_line(w.as_mut(), &hello).map_err(|e| BootstrapError::Rendezvous(format!("{at}: {e}")))?;
    let mut r = BufReader::new(stream);
    first_line(&mut r, at)?;
    let _ = r.get_ref().set_timeout(None);
    std::thread::Builder::new()
        .name("bcl-control".into())
        .spawn(move || {
            // Kept open: the rendezvous drops the feed when it closes.
            let _keep = w;
            while let Ok(Some(line)) = read_line(&mut r) {
                match serde_json::from_str::<FeedLine>(&line) {
                    Ok(FeedLine::Detach(n)) => to.send(AdminCommand::Detach(NodeId(n))),
                    Ok(FeedLine::Rejoin(n)) => to.send(AdminCommand::Rejoin(NodeId(n))),
                    // A line this build does not know (a newer launcher):
                    // skipped, the feed goes on.
                    Err(_) => {}
                }
            }
        })
        .map_err(|e| BootstrapError::Rendezvous(format!("control thread: {e}")))?;
    Ok(())
}

/// Sends an operator's `request` to the rendezvous of job `job` at `at`
/// and returns its answer (an answer with `ok: false` says why the
/// request was not carried out).
pub fn request(
    at: &RendezvousAddr,
    secret: &str,
    job: &str,
    request: AdminRequest,
    timeout: Duration,
) -> Result<AdminReply, BootstrapError> {
    let stream = connect(at, timeout)?;
    let mut w = stream
        .try_clone_box()
        .map_err(|e| BootstrapError::Rendezvous(e.to_string()))?;
    let hello = AdminHello {
        bcl_rendezvous: PROTOCOL_VERSION,
        job: job.to_string(),
        secret: secret.to_string(),
        admin: request,
    };
    send_line(w.as_mut(), &hello).map_err(|e| BootstrapError::Rendezvous(format!("{at}: {e}")))?;
    let mut r = BufReader::new(stream);
    let v = first_line(&mut r, at)?;
    serde_json::from_value(v)
        .map_err(|e| BootstrapError::Rendezvous(format!("{at}: bad answer: {e}")))
}

/// What `bcl-admin` needs to reach a running job, left by `bcl-run` in
/// [`JobFile::dir`] (readable by its user only: it holds the job's
/// secret) and removed when the job ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFile {
    /// The job's id.
    pub job: String,
    /// Where its rendezvous listens.
    pub rendezvous: String,
    /// The job's secret.
    pub secret: String,
    /// The launcher's process id (a file whose launcher is gone is stale).
    pub launcher_pid: u32,
    /// Ranks in the job.
    pub ranks: u32,
    /// The program the ranks run, for people.
    pub command: String,
}

impl JobFile {
    /// The directory of this user's job files: `$XDG_RUNTIME_DIR/bcl-jobs`,
    /// else `/tmp/bcl-jobs-UID`.
    pub fn dir() -> std::path::PathBuf {
        use std::os::unix::fs::MetadataExt;
        match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            Some(d) => std::path::PathBuf::from(d).join("bcl-jobs"),
            None => {
                let uid = std::fs::metadata("/proc/self")
                    .map(|m| m.uid())
                    .unwrap_or(0);
                std::env::temp_dir().join(format!("bcl-jobs-{uid}"))
            }
        }
    }

    /// Writes the file (mode 0600, in a directory of mode 0700 that this
    /// user owns) and returns its path.
    pub fn write(&self) -> std::io::Result<std::path::PathBuf> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
        let dir = Self::dir();
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let me = std::fs::metadata("/proc/self")?.uid();
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
            return Err(std::io::Error::other(format!(
                "{} is not a private directory of this user",
                dir.display()
            )));
        }
        let path = dir.join(format!("{}.json", self.job));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(
            serde_json::to_string_pretty(self)
                .map_err(std::io::Error::other)?
                .as_bytes(),
        )?;
        Ok(path)
    }

    /// This user's jobs whose launcher still runs, oldest first.
    pub fn running() -> Vec<JobFile> {
        let Ok(entries) = std::fs::read_dir(Self::dir()) else {
            return Vec::new();
        };
        let mut jobs: Vec<(std::time::SystemTime, JobFile)> = entries
            .flatten()
            .filter_map(|e| {
                let text = std::fs::read_to_string(e.path()).ok()?;
                let job: JobFile = serde_json::from_str(&text).ok()?;
                let alive = std::path::Path::new(&format!("/proc/{}", job.launcher_pid)).exists();
                let when = e.metadata().and_then(|m| m.modified()).ok()?;
                alive.then_some((when, job))
            })
            .collect();
        jobs.sort_by_key(|(t, _)| *t);
        jobs.into_iter().map(|(_, j)| j).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admin::admin_channel;
    use crate::cluster::bootstrap::{exchange, RendezvousServer};
    use crate::cluster::descriptor::DescriptorTable;

    fn info(rank: u32) -> JobInfo {
        JobInfo {
            rank,
            size: 2,
            local_rank: 0,
            node: None,
            job_id: "j1".into(),
        }
    }

    /// Waits (up to 5 s) for `n` commands in `inbox`.
    fn commands(inbox: &crate::admin::AdminInbox, n: usize) -> Vec<AdminCommand> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            got.extend(inbox.take());
            std::thread::sleep(Duration::from_millis(2));
        }
        got
    }

    #[test]
    fn an_operators_detach_reaches_every_rank_and_late_subscribers_learn_it() {
        let t = Duration::from_secs(10);
        let s = RendezvousServer::bind(
            &RendezvousAddr::Tcp("127.0.0.1:0".into()),
            "s3cret",
            "j1",
            2,
            t,
        )
        .unwrap();
        let at = s.addr().clone();
        std::thread::spawn(move || s.serve());
        let ranks: Vec<_> = (0..2u32)
            .map(|r| {
                let at = at.clone();
                std::thread::spawn(move || {
                    let table = DescriptorTable::new(format!("id{r}"), format!("host{r}"));
                    let (_, session) = exchange(
                        &at,
                        "s3cret",
                        &info(r),
                        ProcessAddr::new(r + 1, 0),
                        &table,
                        t,
                    )
                    .unwrap();
                    let (to, inbox) = admin_channel().unwrap();
                    subscribe(&at, "s3cret", &info(r), to, t).unwrap();
                    (session, inbox)
                })
            })
            .collect();
        let ranks: Vec<_> = ranks.into_iter().map(|h| h.join().unwrap()).collect();

        let status = request(&at, "s3cret", "j1", AdminRequest::Status, t).unwrap();
        assert_eq!(
            status
                .nodes
                .iter()
                .map(|n| (n.node, n.name.as_str(), n.detached))
                .collect::<Vec<_>>(),
            vec![(1, "host0", false), (2, "host1", false)]
        );
        // By name, then by number.
        let reply = request(&at, "s3cret", "j1", AdminRequest::Detach("host1".into()), t).unwrap();
        assert_eq!((reply.ok, reply.node, reply.told), (true, Some(2), 2));
        assert!(reply.nodes[1].detached);
        for (_, inbox) in &ranks {
            assert_eq!(commands(inbox, 1), vec![AdminCommand::Detach(NodeId(2))]);
        }
        // A rank that subscribes now (a restarted one) is told at once.
        let (to, late) = admin_channel().unwrap();
        subscribe(&at, "s3cret", &info(1), to, t).unwrap();
        assert_eq!(commands(&late, 1), vec![AdminCommand::Detach(NodeId(2))]);
        let reply = request(&at, "s3cret", "j1", AdminRequest::Rejoin("2".into()), t).unwrap();
        assert_eq!((reply.node, reply.told), (Some(2), 3));
        for inbox in ranks.iter().map(|(_, i)| i).chain([&late]) {
            assert_eq!(commands(inbox, 1), vec![AdminCommand::Rejoin(NodeId(2))]);
        }

        // Clear errors: an unknown node, a wrong secret, another job.
        let e = request(&at, "s3cret", "j1", AdminRequest::Detach("host9".into()), t).unwrap_err();
        assert!(
            e.to_string().contains(
                "no node \"host9\" in this job; its nodes: host0 (node 1), host1 (node 2)"
            ),
            "{e}"
        );
        let e = request(&at, "wrong", "j1", AdminRequest::Status, t).unwrap_err();
        assert!(e.to_string().contains("wrong job secret"), "{e}");
        let (to, _) = admin_channel().unwrap();
        let mut other = info(0);
        other.job_id = "j2".into();
        let e = subscribe(&at, "s3cret", &other, to, t).unwrap_err();
        assert!(e.to_string().contains("is not this job"), "{e}");
    }
}
