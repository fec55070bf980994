//! The bridge process (`bcl-lab impair`): two AF_PACKET sockets, two engines,
//! one thread.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::sock::{poll_readable, set_timer_slack_ns, PacketSocket};
use super::{BridgeSpec, CountersFile, Engine, TxItem, VNET_LEN};

/// Frames per recvmmsg/sendmmsg call.
const BATCH: usize = 64;
/// Receive slot size: vnet header + the largest (GSO) frame veth can hand us.
const SLOT: usize = VNET_LEN + 65_536 + 64;
/// Receive batches per direction per loop turn (fairness between directions).
const TURNS: usize = 8;
const COUNTERS_EVERY: Duration = Duration::from_millis(100);
const IDLE_POLL_NS: u64 = 100_000_000;

/// Writes `file` atomically (temp file + rename).
pub(crate) fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

struct Dir {
    eng: Engine,
    out: Vec<TxItem>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs the bridge described by the spec file until SIGTERM/SIGINT or until an
/// interface disappears (the lab was torn down).
pub(crate) fn run(spec_path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(spec_path)
        .map_err(|e| format!("cannot read {}: {e}", spec_path.display()))?;
    let spec: BridgeSpec = serde_json::from_str(&text)
        .map_err(|e| format!("bad spec {}: {e}", spec_path.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| format!("signal: {e}"))?;
    }
    // A hang-up of the terminal `up` ran in must not end the lab.
    signal_hook::flag::register(
        signal_hook::consts::SIGHUP,
        Arc::new(AtomicBool::new(false)),
    )
    .map_err(|e| format!("signal: {e}"))?;
    set_timer_slack_ns(1);

    let mut socks = [
        PacketSocket::open(&spec.ifnames[0], BATCH)
            .map_err(|e| format!("AF_PACKET socket on {}: {e}", spec.ifnames[0]))?,
        PacketSocket::open(&spec.ifnames[1], BATCH)
            .map_err(|e| format!("AF_PACKET socket on {}: {e}", spec.ifnames[1]))?,
    ];
    let mut dirs = [
        Dir {
            eng: Engine::new(spec.forward.clone(), spec.seed),
            out: Vec::with_capacity(4 * BATCH),
        },
        Dir {
            eng: Engine::new(spec.reverse.clone(), spec.seed ^ 0x9e37_79b9_7f4a_7c15),
            out: Vec::with_capacity(4 * BATCH),
        },
    ];
    for (d, dir) in dirs.iter_mut().enumerate() {
        dir.eng.c.link = spec.link.clone();
        dir.eng.c.from = spec.ends[d].clone();
        dir.eng.c.to = spec.ends[1 - d].clone();
    }
    let mut slots: Vec<Box<[u8]>> = (0..BATCH)
        .map(|_| vec![0u8; SLOT].into_boxed_slice())
        .collect();
    let mut lens = vec![0usize; BATCH];

    let write_counters = |dirs: &[Dir; 2], exited: bool| {
        let f = CountersFile {
            link: spec.link.clone(),
            pid: std::process::id(),
            updated_unix_ms: unix_ms(),
            exited,
            directions: dirs
                .iter()
                .map(|d| {
                    let mut c = d.eng.c.clone();
                    c.queued = d.eng.queued();
                    c
                })
                .collect(),
        };
        if let Ok(j) = serde_json::to_vec_pretty(&f) {
            if let Err(e) = write_atomic(&spec.counters_file, &j) {
                eprintln!(
                    "bcl-lab impair: cannot write {}: {e}",
                    spec.counters_file.display()
                );
            }
        }
    };
    write_counters(&dirs, false);
    // The pid file says "ready": `up` waits for it.
    write_atomic(
        &spec.pid_file,
        format!("{}\n", std::process::id()).as_bytes(),
    )
    .map_err(|e| format!("cannot write {}: {e}", spec.pid_file.display()))?;
    eprintln!(
        "bcl-lab impair: link {} ready ({} <-> {}); forward: {}; reverse: {}",
        spec.link,
        spec.ifnames[0],
        spec.ifnames[1],
        spec.forward.describe(),
        spec.reverse.describe()
    );

    let t0 = Instant::now();
    let now_ns = || t0.elapsed().as_nanos() as u64;
    let mut last_write = Instant::now();
    let mut dirty = false;
    let mut result = Ok(());
    'main: while !stop.load(Ordering::Relaxed) {
        let now = now_ns();
        let mut timeout = IDLE_POLL_NS;
        for d in &dirs {
            if let Some(t) = d.eng.next_deadline() {
                timeout = timeout.min(t.saturating_sub(now));
            }
        }
        if dirty {
            let due = COUNTERS_EVERY.saturating_sub(last_write.elapsed());
            timeout = timeout.min(due.as_nanos() as u64);
        }
        let ready = match poll_readable([socks[0].raw(), socks[1].raw()], timeout) {
            Ok(r) => r,
            Err(e) => {
                result = Err(format!("poll: {e}"));
                break;
            }
        };
        for d in 0..2 {
            let now = now_ns();
            let (rx, tx) = if d == 0 {
                let (a, b) = socks.split_at_mut(1);
                (&mut a[0], &mut b[0])
            } else {
                let (a, b) = socks.split_at_mut(1);
                (&mut b[0], &mut a[0])
            };
            let dir = &mut dirs[d];
            dir.eng.release_due(now, &mut dir.out);
            if !dir.out.is_empty() {
                flush(tx, dir, &slots, &lens);
                dirty = true;
            }
            if !ready[d] {
                continue;
            }
            for _ in 0..TURNS {
                let n = match rx.recv_batch(&mut slots, &mut lens, &mut dir.eng.c.truncated) {
                    Ok(n) => n,
                    Err(e) => {
                        // ENETDOWN/ENXIO: the interface went away with the lab.
                        eprintln!(
                            "bcl-lab impair: receive on {}: {e}; exiting",
                            spec.ifnames[d]
                        );
                        break 'main;
                    }
                };
                if n == 0 {
                    break;
                }
                dirty = true;
                let now = now_ns();
                for (i, slot) in slots.iter_mut().enumerate().take(n) {
                    if lens[i] > 0 {
                        dir.eng.ingress(now, &mut slot[..lens[i]], i, &mut dir.out);
                    }
                }
                flush(tx, dir, &slots, &lens);
                if n < BATCH {
                    break;
                }
            }
            dir.eng.c.kernel_drops += rx.take_drops();
        }
        if dirty && last_write.elapsed() >= COUNTERS_EVERY {
            write_counters(&dirs, false);
            last_write = Instant::now();
            dirty = false;
        }
    }
    // Send what is still queued (delay, shaper, reorder hold) before exiting.
    for (d, dir) in dirs.iter_mut().enumerate() {
        dir.eng.drain(&mut dir.out);
        if !dir.out.is_empty() {
            flush(&mut socks[1 - d], dir, &slots, &lens);
        }
    }
    write_counters(&dirs, true);
    eprintln!("bcl-lab impair: link {} stopped", spec.link);
    result
}

/// Sends `dir.out` on `tx` and recycles owned buffers.
fn flush(tx: &mut PacketSocket, dir: &mut Dir, slots: &[Box<[u8]>], lens: &[usize]) {
    let frames: Vec<&[u8]> = dir
        .out
        .iter()
        .map(|it| match it {
            TxItem::Slot(i) => &slots[*i][..lens[*i]],
            TxItem::Owned(b) => &b[..],
        })
        .collect();
    let bytes: u64 = frames
        .iter()
        .map(|f| (f.len() - VNET_LEN.min(f.len())) as u64)
        .sum();
    let (sent, failed) = tx.send_batch(&frames);
    drop(frames);
    dir.eng.c.frames_out += sent;
    dir.eng.c.tx_errors += failed;
    if failed == 0 {
        dir.eng.c.bytes_out += bytes;
    }
    for it in dir.out.drain(..) {
        if let TxItem::Owned(b) = it {
            dir.eng.recycle(b);
        }
    }
}
