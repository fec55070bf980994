//! The baselines between processes of one node that BCL's shared-memory
//! method is measured against: a Unix-domain stream socket (`unix`, what a
//! kernel-based stack would use) and two cache lines ping-ponged in shared
//! memory (`spin`, the floor no shared-memory protocol can beat).
//!
//! Descriptors: `unix:PATH` and `spin:PATH`.

use crate::kernel::KernelTcp;
use crate::transport::{BoxTransport, Transport, TransportError};
use bcl_bench::floors::{SpinLink, SPIN_MAX_MESSAGE};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A name no other run on this node uses at the same time.
fn unique_name(kind: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "bcl-{kind}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A Unix-domain listener waiting for the run's one client; its socket file
/// is removed when the client is there (or the listener is dropped).
pub struct UnixServer {
    listener: UnixListener,
    path: PathBuf,
}

impl UnixServer {
    /// Listens on a fresh socket under the temporary directory.
    pub fn bind() -> Result<(String, UnixServer), String> {
        let path = std::env::temp_dir().join(format!("{}.sock", unique_name("unix")));
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("listening on {}: {e}", path.display()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("listener mode: {e}"))?;
        Ok((
            format!("unix:{}", path.display()),
            UnixServer { listener, path },
        ))
    }

    /// Waits until `deadline` for the client.
    pub fn accept(self, busy: bool, deadline: Instant) -> Result<BoxTransport, String> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    return Ok(Box::new(
                        KernelTcp::over_unix(stream, busy).map_err(|e| e.to_string())?,
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err("no client connected in time".into());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(format!("accept: {e}")),
            }
        }
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The path in a `KIND:PATH` descriptor.
fn descriptor_path<'a>(kind: &str, descriptor: &'a str) -> Result<&'a Path, String> {
    descriptor
        .strip_prefix(kind)
        .and_then(|r| r.strip_prefix(':'))
        .filter(|p| !p.is_empty())
        .map(Path::new)
        .ok_or_else(|| {
            format!("--connect {descriptor:?}: expected {kind}:PATH as printed by the server's `listening:` line")
        })
}

/// Connects to the Unix-domain server at `descriptor`, retrying until
/// `deadline`.
pub fn open_unix_client(
    busy: bool,
    descriptor: &str,
    deadline: Instant,
) -> Result<BoxTransport, String> {
    let path = descriptor_path("unix", descriptor)?;
    loop {
        match UnixStream::connect(path) {
            Ok(s) => {
                return Ok(Box::new(
                    KernelTcp::over_unix(s, busy).map_err(|e| e.to_string())?,
                ))
            }
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("connecting to {}: {e}", path.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The floor: messages of at most 40 bytes through two cache lines of
/// shared memory, always spinning.
pub struct SpinTransport {
    link: SpinLink,
    buf: [u8; SPIN_MAX_MESSAGE],
}

impl SpinTransport {
    /// The serving end: creates the link file; its descriptor.
    pub fn serve() -> Result<(String, SpinTransport), String> {
        let path = Path::new("/dev/shm").join(unique_name("spin"));
        let link = SpinLink::create(&path).map_err(|e| e.to_string())?;
        Ok((
            format!("spin:{}", path.display()),
            SpinTransport {
                link,
                buf: [0; SPIN_MAX_MESSAGE],
            },
        ))
    }

    /// The connecting end of the link at `descriptor`.
    pub fn connect(descriptor: &str) -> Result<SpinTransport, String> {
        let path = descriptor_path("spin", descriptor)?;
        let link = SpinLink::open(path).map_err(|e| e.to_string())?;
        Ok(SpinTransport {
            link,
            buf: [0; SPIN_MAX_MESSAGE],
        })
    }
}

impl Transport for SpinTransport {
    fn send(&mut self, msg: &[u8], deadline: Instant) -> Result<(), TransportError> {
        let mut spins = 0u32;
        while !self
            .link
            .try_send(msg)
            .map_err(|e| TransportError(e.to_string()))?
        {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && Instant::now() >= deadline {
                return Err(TransportError::new(
                    "send",
                    "timed out (the peer does not read)",
                ));
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn recv(
        &mut self,
        deadline: Instant,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, TransportError> {
        let mut spins = 0u32;
        loop {
            if let Some(n) = self.link.try_recv(&mut self.buf) {
                f(&self.buf[..n]);
                return Ok(true);
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) && Instant::now() >= deadline {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    fn max_message(&self) -> usize {
        SPIN_MAX_MESSAGE
    }

    fn details(&self) -> String {
        format!("spin link {}", self.link.path().display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_name_their_kind() {
        assert_eq!(
            descriptor_path("unix", "unix:/tmp/x.sock").unwrap(),
            Path::new("/tmp/x.sock")
        );
        assert!(descriptor_path("unix", "spin:/tmp/x")
            .unwrap_err()
            .contains("unix:PATH"));
        assert!(descriptor_path("spin", "spin:").is_err());
    }

    #[test]
    fn spin_ends_exchange_and_reject_large_messages() {
        let (d, mut server) = SpinTransport::serve().unwrap();
        let mut client = SpinTransport::connect(&d).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        client.send(b"12345678", deadline).unwrap();
        let mut got = Vec::new();
        assert!(server.recv(deadline, &mut |m| got = m.to_vec()).unwrap());
        assert_eq!(got, b"12345678");
        assert!(client
            .send(&[0; 41], deadline)
            .unwrap_err()
            .to_string()
            .contains("at most 40"));
        assert!(
            !server.recv(Instant::now(), &mut |_| {}).unwrap(),
            "nothing more came"
        );
    }
}
