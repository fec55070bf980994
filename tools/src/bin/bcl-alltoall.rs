//! `bcl-alltoall`: a verification job for `bcl-run`. Every rank sends
//! every other rank one message of each size (system channel up to the
//! eager limit, a normal channel above it), checks every byte it receives,
//! and prints, one JSON line each:
//!
//! - `hash {"rank":R,"hash":"..."}`: the hash of its own executable (it
//!   also fails when `BCL_PROGRAM_HASH` from `bcl-run` differs: not the
//!   same build);
//! - `link {"rank":R,"peer":P,"method":"afxdp","reason":"..."}`: the method
//!   each of its links uses and why;
//! - `done {"rank":R,"received":N,"bytes":B}`.
//!
//! ```text
//! bcl-run --lab configs/lab/mixed.toml --cluster configs/mixed.toml --per-node 2 -- bcl-alltoall
//! ```

use bcl::cluster::join::{join, JoinOptions};
use bcl::core::sack::RX_WINDOW;
use bcl::core::wire::HEADER_LEN;
use bcl::{ChannelEvent, ChannelId, Endpoint, ProcessAddr, ProgressMode, SendEvent};
use clap::Parser;
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "bcl-alltoall",
    about = "Verified all-to-all exchange of a BCL job started by bcl-run; prints each link's method"
)]
struct Args {
    /// Message sizes in bytes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,64,1024,8192,65536,1048576"
    )]
    sizes: Vec<usize>,
    /// Seconds the whole exchange may take.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Busy-poll instead of sleeping in epoll between rounds.
    #[arg(long)]
    busy_poll: bool,
}

/// Byte `i` of the message of `size` bytes from rank `from` to rank `to`.
fn pattern(from: u32, to: u32, size: usize, i: usize) -> u8 {
    ((from as usize * 31 + to as usize * 17 + i * 7 + size) % 251) as u8
}

fn message(from: u32, to: u32, size: usize) -> Vec<u8> {
    (0..size).map(|i| pattern(from, to, size, i)).collect()
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcl-alltoall: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a rank still waits for.
struct Progress {
    small_left: usize,
    large_left: usize,
    sends_left: usize,
    received: usize,
    bytes: usize,
}

fn run(args: &Args) -> Result<(), String> {
    let hash = bcl_tools::job::file_hash(std::path::Path::new("/proc/self/exe"))
        .map_err(|e| format!("hashing /proc/self/exe: {e}"))?;
    let mut joined = join(JoinOptions {
        timeout: Duration::from_secs(args.timeout.min(30)),
        mode: if args.busy_poll {
            ProgressMode::BusyPoll
        } else {
            ProgressMode::Blocking
        },
        configure: Box::new(|c, mtu| {
            let fit = RX_WINDOW as usize * mtu.saturating_sub(HEADER_LEN);
            c.eager_limit = (fit.min(256 << 10) / 1024) * 1024;
            c.ring_block_size = 256;
            c.ring_blocks = 16384;
        }),
        ..JoinOptions::default()
    })
    .map_err(|e| e.to_string())?;
    let me = joined.info.rank;
    println!("hash {{\"rank\":{me},\"hash\":\"{hash}\"}}");
    if let Ok(expected) = std::env::var("BCL_PROGRAM_HASH") {
        if expected != "remote" && expected != hash {
            return Err(format!(
                "this executable's hash {hash} differs from the launched program's {expected}: not the same build"
            ));
        }
    }
    for n in &joined.notes {
        eprintln!("note: {n}");
    }
    let size = joined.info.size;
    let addrs = joined.addrs.clone();
    let rank_of: HashMap<ProcessAddr, u32> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| (*a, i as u32))
        .collect();
    let ep = &mut joined.endpoint;
    let eager = ep.port().config().eager_limit;
    let small: Vec<usize> = args.sizes.iter().copied().filter(|s| *s <= eager).collect();
    let large: Vec<usize> = args.sizes.iter().copied().filter(|s| *s > eager).collect();
    let largest = large.iter().copied().max().unwrap_or(0);
    let peers: Vec<u32> = (1..size).map(|k| (me + k) % size).collect();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);

    // One normal channel per peer for the large messages; its id goes to
    // the peer in the first system message.
    let mut channel_of_peer: HashMap<u32, ChannelId> = HashMap::new();
    let mut peer_of_channel: HashMap<ChannelId, u32> = HashMap::new();
    if !large.is_empty() {
        for &p in &peers {
            let ch = ep.open_normal_channel().map_err(|e| e.to_string())?;
            ep.post(ch, Some(addrs[p as usize]), vec![0; largest])
                .map_err(|e| format!("post: {}", e.error))?;
            channel_of_peer.insert(p, ch);
            peer_of_channel.insert(ch, p);
        }
    }
    let mut progress = Progress {
        small_left: small.len() * peers.len(),
        large_left: large.len() * peers.len(),
        sends_left: (small.len() + large.len()) * peers.len(),
        received: 0,
        bytes: 0,
    };
    // Hello: our channel for the peer (u16 LE), then the small messages.
    let mut outbox: Vec<(u32, Vec<u8>)> = Vec::new();
    for &p in &peers {
        let ch = channel_of_peer.get(&p).map_or(0, |c| c.0);
        outbox.push((p, ch.to_le_bytes().to_vec()));
    }
    for &s in &small {
        for &p in &peers {
            outbox.push((p, message(me, p, s)));
        }
    }
    progress.sends_left += peers.len();
    let mut their_channel: HashMap<u32, ChannelId> = HashMap::new();
    let mut hellos = 0usize;
    let mut next = 0usize;
    let mut large_queue: Vec<(u32, usize)> = Vec::new();
    let mut large_sent = false;
    let mut received_small: HashMap<u32, usize> = HashMap::new();
    while progress.small_left + progress.large_left + progress.sends_left > 0
        || hellos < peers.len()
    {
        if Instant::now() > deadline {
            return Err(format!(
                "rank {me}: timed out with {} small and {} large messages still to arrive, {} sends incomplete, {} hellos",
                progress.small_left, progress.large_left, progress.sends_left, hellos
            ));
        }
        // Send what the port takes.
        while next < outbox.len() {
            let (p, data) = &outbox[next];
            match ep.send(addrs[*p as usize], data) {
                Ok(_) => next += 1,
                Err(bcl::endpoint::Error::Send(bcl::core::port::SendError::WouldBlock(_))) => break,
                Err(e) => return Err(format!("send to rank {p}: {e}")),
            }
        }
        if !large_sent && hellos == peers.len() {
            large_sent = true;
            for &s in &large {
                for &p in &peers {
                    large_queue.push((p, s));
                }
            }
        }
        while let Some(&(p, s)) = large_queue.first() {
            let ch = their_channel[&p];
            match ep.send_on_channel(addrs[p as usize], ch, message(me, p, s)) {
                Ok(_) => {
                    large_queue.remove(0);
                }
                Err(r)
                    if matches!(
                        r.error,
                        bcl::ChannelError::Send(bcl::core::port::SendError::WouldBlock(_))
                    ) =>
                {
                    break
                }
                Err(r) => return Err(format!("send_on_channel to rank {p}: {}", r.error)),
            }
        }
        ep.progress_or_wait(Some(ep.now() + Duration::from_millis(20)))
            .map_err(|e| e.to_string())?;
        while let Some(ev) = ep.poll_send_event() {
            match ev {
                SendEvent::Complete(_) => progress.sends_left -= 1,
                SendEvent::Failed(_, f) => return Err(format!("a send failed: {f}")),
            }
        }
        while let Some(d) = ep.poll_delivery() {
            let from = *rank_of
                .get(&d.from)
                .ok_or_else(|| format!("a message from {} which is no rank of the job", d.from))?;
            let data = ep.message(&d).ok_or("delivery without data")?.to_vec();
            ep.release(d).map_err(|e| e.to_string())?;
            let n = received_small.entry(from).or_insert(0);
            if *n == 0 {
                if data.len() != 2 {
                    return Err(format!(
                        "rank {from}: first message is {} bytes, not the 2-byte hello",
                        data.len()
                    ));
                }
                their_channel.insert(from, ChannelId(u16::from_le_bytes([data[0], data[1]])));
                hellos += 1;
            } else {
                let expect = small
                    .get(*n - 1)
                    .copied()
                    .ok_or_else(|| format!("rank {from}: too many messages"))?;
                if data.len() != expect || data != message(from, me, expect) {
                    return Err(format!(
                        "rank {from}: message {} ({} bytes, expected {expect}) is corrupt or out of order",
                        *n, data.len()
                    ));
                }
                progress.small_left -= 1;
                progress.received += 1;
                progress.bytes += data.len();
            }
            *n += 1;
        }
        while let Some(ev) = ep.poll_channel_event() {
            match ev {
                ChannelEvent::SendDone { .. } => progress.sends_left -= 1,
                ChannelEvent::SendFailed { error, .. } => {
                    return Err(format!("a channel send failed: {error}"))
                }
                ChannelEvent::Received {
                    channel,
                    from,
                    buffer,
                    len,
                } => {
                    let p = peer_of_channel
                        .get(&channel)
                        .copied()
                        .ok_or("a message on an unknown channel")?;
                    if rank_of.get(&from) != Some(&p) {
                        return Err(format!("channel of rank {p} received from {from}"));
                    }
                    if !large.contains(&len) || buffer[..len] != message(p, me, len)[..] {
                        return Err(format!("rank {p}: a {len}-byte channel message is corrupt"));
                    }
                    progress.large_left -= 1;
                    progress.received += 1;
                    progress.bytes += len;
                    let mut buffer = buffer;
                    buffer.iter_mut().for_each(|b| *b = 0);
                    ep.post(channel, Some(from), buffer)
                        .map_err(|e| format!("re-post: {}", e.error))?;
                }
                ChannelEvent::ReceiveFailed { from, error, .. } => {
                    return Err(format!("receiving from {from} failed: {error}"))
                }
                other => return Err(format!("unexpected channel event {other:?}")),
            }
        }
    }
    report_links(ep, me, &addrs);
    println!(
        "done {{\"rank\":{me},\"received\":{},\"bytes\":{}}}",
        progress.received, progress.bytes
    );
    // Stay until everybody is done: a rank leaving early would leave its
    // peers' last acknowledgements unanswered. Without a rendezvous (static
    // job file) there is no barrier: keep answering for a second.
    if joined.session.is_none() {
        let ep = &mut joined.endpoint;
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until {
            ep.progress_or_wait(Some(ep.now() + Duration::from_millis(10)))
                .map_err(|e| e.to_string())?;
        }
    }
    if let Some(s) = joined.session.as_mut() {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(5));
        let ep = &mut joined.endpoint;
        // Keep answering while waiting at the barrier.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = {
            let stop = stop.clone();
            std::thread::scope(|scope| {
                let h = scope.spawn(|| {
                    let r = s.barrier(left);
                    stop.store(true, std::sync::atomic::Ordering::Release);
                    r
                });
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let _ = ep.progress_or_wait(Some(ep.now() + Duration::from_millis(5)));
                }
                h.join()
            })
        };
        match waiter {
            Ok(r) => r.map_err(|e| e.to_string())?,
            Err(_) => return Err("the barrier thread panicked".into()),
        }
    }
    Ok(())
}

fn report_links(ep: &Endpoint, me: u32, addrs: &[ProcessAddr]) {
    for (p, a) in addrs.iter().enumerate() {
        if p as u32 == me {
            continue;
        }
        let (method, reason) = match ep.link(*a) {
            Some(r) => (r.method.unwrap_or_else(|| "none".into()), r.reason),
            None => ("none".into(), "no link".into()),
        };
        println!(
            "link {}",
            serde_json::json!({"rank": me, "peer": p, "method": method, "reason": reason})
        );
    }
}
