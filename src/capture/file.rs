//! The capture file: one pcap-ng section per file, shared by every endpoint
//! of the process that names it, locked against other processes.

use super::{PseudoHeader, LINKTYPE_BCL, PSEUDO_HEADER_LEN, SNAPLEN};
use nix::fcntl::{Flock, FlockArg};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness};
use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// The capture files this process has open, by the path asked for (after
/// `%p` expansion, made absolute). Files stay open until the process exits,
/// so that endpoints built one after another append to one file.
static OPEN: Mutex<Vec<(PathBuf, Arc<CaptureFile>)>> = Mutex::new(Vec::new());

/// One pcap-ng capture file (see the [module documentation](super)).
pub struct CaptureFile {
    /// The file written (FILE, or FILE with the pid inserted).
    path: PathBuf,
    state: Mutex<State>,
}

struct State {
    out: PcapNgWriter<BufWriter<File>>,
    /// Interfaces described so far.
    interfaces: u32,
    /// The record being put together: pseudo-header, then the item.
    scratch: Vec<u8>,
    /// A write failed: capture has stopped (said once on standard error).
    broken: bool,
    /// Holds the file's lock for the life of the process.
    _lock: Flock<File>,
}

/// `path` with `%p` replaced by the process id and `%%` by `%`.
pub fn expand(path: &Path, pid: u32) -> PathBuf {
    let text = path.to_string_lossy();
    if !text.contains('%') {
        return path.to_path_buf();
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('%', Some('p')) => {
                out.push_str(&pid.to_string());
                chars.next();
            }
            ('%', Some('%')) => {
                out.push('%');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    PathBuf::from(out)
}

/// `path` with `.PID` inserted before its extension (`run.pcapng` →
/// `run.1234.pcapng`; `run` → `run.1234`).
pub fn with_pid(path: &Path, pid: u32) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{pid}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{pid}"),
    };
    path.with_file_name(name)
}

/// Opens `path` for writing without truncating it and takes its exclusive
/// lock without waiting; `Ok(None)` if another process holds the lock.
fn open_locked(path: &Path) -> io::Result<Option<Flock<File>>> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(Some(locked)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(io::Error::from(e)),
    }
}

impl CaptureFile {
    /// The capture file for `requested` (see the module documentation):
    /// the one this process already has open, or a new one.
    pub fn open(requested: &Path) -> io::Result<Arc<CaptureFile>> {
        let pid = std::process::id();
        let path = expand(requested, pid);
        let key = std::path::absolute(&path)?;
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, f)) = open.iter().find(|(k, _)| *k == key) {
            return Ok(f.clone());
        }
        let (path, lock) = match open_locked(&path)? {
            Some(lock) => (path, lock),
            None => {
                let alt = with_pid(&path, pid);
                let lock = open_locked(&alt)?.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("{} is locked by another process too", alt.display()),
                    )
                })?;
                eprintln!(
                    "bcl: capture file {} is in use by another process; process {pid} writes {}",
                    path.display(),
                    alt.display()
                );
                (alt, lock)
            }
        };
        lock.set_len(0)?;
        let writer = BufWriter::with_capacity(1 << 16, lock.try_clone()?);
        let section = SectionHeaderBlock {
            endianness: Endianness::native(),
            options: vec![SectionHeaderOption::UserApplication(Cow::Owned(format!(
                "BCL {} (pid {pid})",
                env!("CARGO_PKG_VERSION")
            )))],
            ..Default::default()
        };
        let mut out = PcapNgWriter::with_section_header(writer, section).map_err(to_io)?;
        out.get_mut().flush()?;
        let file = Arc::new(CaptureFile {
            path,
            state: Mutex::new(State {
                out,
                interfaces: 0,
                scratch: Vec::new(),
                broken: false,
                _lock: lock,
            }),
        });
        open.push((key, file.clone()));
        Ok(file)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves at worst a half-written
        // record; capture goes on.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Describes a new interface (one endpoint's method) and returns its
    /// number.
    pub(crate) fn add_interface(&self, name: &str, description: &str) -> u32 {
        let mut st = self.state();
        let id = st.interfaces;
        st.interfaces += 1;
        let block = InterfaceDescriptionBlock {
            linktype: DataLink::from(LINKTYPE_BCL),
            snaplen: SNAPLEN,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Owned(name.to_string())),
                InterfaceDescriptionOption::IfDescription(Cow::Owned(description.to_string())),
                // Nanosecond timestamps (the writer writes nanoseconds).
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        let r = st.out.write_pcapng_block(block);
        st.check(r.map(drop), &self.path);
        id
    }

    /// Appends one record on interface `iface`: the pseudo-header, then
    /// `data` (cut so that the record fits [`SNAPLEN`]).
    pub(crate) fn record(&self, iface: u32, ph: &PseudoHeader, data: &[u8]) {
        let mut st = self.state();
        if st.broken {
            return;
        }
        let keep = data.len().min(SNAPLEN as usize - PSEUDO_HEADER_LEN);
        let mut scratch = std::mem::take(&mut st.scratch);
        scratch.clear();
        scratch.extend_from_slice(&ph.to_bytes());
        scratch.extend_from_slice(&data[..keep]);
        let original = (PSEUDO_HEADER_LEN as u64).saturating_add(ph.total_len);
        let block = EnhancedPacketBlock {
            interface_id: iface,
            timestamp: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            original_len: u32::try_from(original).unwrap_or(u32::MAX),
            data: Cow::Borrowed(&scratch),
            options: vec![EnhancedPacketOption::Flags(u32::from(ph.direction as u8))],
        };
        let r = st.out.write_pcapng_block(block);
        st.scratch = scratch;
        st.check(r.map(drop), &self.path);
    }

    /// Writes out what is buffered.
    pub(crate) fn flush(&self) {
        let mut st = self.state();
        if st.broken {
            return;
        }
        let r = st
            .out
            .get_mut()
            .flush()
            .map_err(pcap_file::PcapError::IoError);
        st.check(r, &self.path);
    }
}

impl State {
    /// Stops capturing (and says so once) if `r` failed.
    fn check(&mut self, r: Result<(), pcap_file::PcapError>, path: &Path) {
        if let Err(e) = r {
            if !self.broken {
                eprintln!("bcl: capture to {} stopped: {e}", path.display());
            }
            self.broken = true;
        }
    }
}

fn to_io(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_p_is_the_pid_and_the_fallback_name_keeps_the_extension() {
        assert_eq!(
            expand(Path::new("/tmp/run-%p.pcapng"), 42),
            Path::new("/tmp/run-42.pcapng")
        );
        assert_eq!(expand(Path::new("a%%p%"), 7), Path::new("a%p%"));
        assert_eq!(expand(Path::new("plain"), 7), Path::new("plain"));
        assert_eq!(
            with_pid(Path::new("/tmp/run.pcapng"), 42),
            Path::new("/tmp/run.42.pcapng")
        );
        assert_eq!(with_pid(Path::new("run"), 42), Path::new("run.42"));
    }
}
