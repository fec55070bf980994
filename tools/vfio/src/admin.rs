//! `list`, `bind`, `unbind` and `setup`: the administration of NICs for
//! VFIO, on a [`Sysfs`] tree (the real one, or a fake one in tests).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use bcl_core::method::Availability;
use bcl_vfio::method::probe_with;
use bcl_vfio::pci::PciAddress;
use bcl_vfio::sysfs::{PciDeviceInfo, Sysfs, VFIO_PCI_DRIVER};
use serde::Serialize;

/// Where `bind` remembers each device's original driver.
pub const DEFAULT_STATE_DIR: &str = "/run/bcl-vfio";

/// The kernel modules behind vfio-pci, in load order.
pub const VFIO_MODULES: &[&str] = &[
    "irqbypass",
    "vfio",
    "vfio_iommu_type1",
    "vfio_virqfd",
    "vfio-pci-core",
    "vfio-pci",
];

/// A failure of an administration command, explained for a person.
#[derive(Debug, PartialEq, Eq)]
pub struct AdminError(pub String);

impl std::fmt::Display for AdminError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AdminError {}

fn err(msg: impl Into<String>) -> AdminError {
    AdminError(msg.into())
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> AdminError {
    err(format!("{what} {}: {e}", path.display()))
}

/// One row of `bcl-vfio list`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NicRow {
    /// PCI address.
    pub pci: String,
    /// Vendor ID, hex.
    pub vendor: String,
    /// Device ID, hex.
    pub device: String,
    /// Class code, hex.
    pub class: String,
    /// Current kernel driver.
    pub driver: Option<String>,
    /// IOMMU group.
    pub iommu_group: Option<u32>,
    /// The BCL driver that supports the device, if any.
    pub bcl_driver: Option<String>,
    /// Network interfaces of the kernel driver.
    pub interfaces: Vec<String>,
    /// Whether the `vfio` method can open it now.
    pub usable: bool,
    /// Why not, when not usable.
    pub reason: Option<String>,
}

fn row(sysfs: &Sysfs, d: &PciDeviceInfo) -> NicRow {
    let (usable, reason) = match probe_with(&d.address.to_string(), sysfs) {
        Availability::Usable => (true, None),
        Availability::NotUsable(r) => (false, Some(r)),
    };
    NicRow {
        pci: d.address.to_string(),
        vendor: format!("{:04x}", d.vendor),
        device: format!("{:04x}", d.device),
        class: format!("{:06x}", d.class),
        driver: d.driver.clone(),
        iommu_group: d.iommu_group,
        bcl_driver: d.bcl_driver().map(str::to_string),
        interfaces: d.interfaces.clone(),
        usable,
        reason,
    }
}

/// The network controllers (PCI class 0x02).
pub fn list(sysfs: &Sysfs) -> Result<Vec<NicRow>, AdminError> {
    let devs = sysfs.network_devices().map_err(|e| {
        err(format!(
            "reading {}: {e}",
            sysfs.path("sys/bus/pci/devices").display()
        ))
    })?;
    Ok(devs.iter().map(|d| row(sysfs, d)).collect())
}

/// Formats rows as a table for people.
pub fn format_table(rows: &[NicRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<10} {:<12} {:<6} {:<11} {:<10} STATUS",
        "PCI", "ID", "DRIVER", "GROUP", "BCL", "IFACE"
    );
    for r in rows {
        let status = if r.usable {
            "ready for the vfio method".to_string()
        } else {
            r.reason.clone().unwrap_or_default()
        };
        let _ = writeln!(
            s,
            "{:<13} {:<10} {:<12} {:<6} {:<11} {:<10} {}",
            r.pci,
            format!("{}:{}", r.vendor, r.device),
            r.driver.as_deref().unwrap_or("-"),
            r.iommu_group.map_or("-".to_string(), |g| g.to_string()),
            r.bcl_driver.as_deref().unwrap_or("-"),
            if r.interfaces.is_empty() {
                "-".to_string()
            } else {
                r.interfaces.join(",")
            },
            status
        );
    }
    if rows.is_empty() {
        s.push_str("(no network controllers found)\n");
    }
    s
}

/// The administration context: the sysfs tree and where state is kept.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The sysfs/dev tree.
    pub sysfs: Sysfs,
    /// Directory for remembered drivers.
    pub state_dir: PathBuf,
}

impl Admin {
    /// On the running system.
    pub fn system() -> Self {
        Self {
            sysfs: Sysfs::system(),
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
        }
    }

    fn state_file(&self, a: &PciAddress) -> PathBuf {
        self.state_dir.join(format!("{a}.driver"))
    }

    fn write_attr(&self, path: &Path, value: &str) -> Result<(), AdminError> {
        fs::write(path, value).map_err(|e| io_err("writing", path, e))
    }

    fn device(&self, pci: &str) -> Result<PciDeviceInfo, AdminError> {
        let a: PciAddress = pci.parse().map_err(|e| err(format!("{e}")))?;
        self.sysfs
            .device(&a)
            .map_err(|e| err(format!("reading sysfs for {a}: {e}")))?
            .ok_or_else(|| err(format!("no PCI device {a} (see `bcl-vfio list`)")))
    }

    /// Interfaces of the device that are administratively up.
    fn up_interfaces(&self, d: &PciDeviceInfo) -> Vec<String> {
        d.interfaces
            .iter()
            .filter(|i| {
                let flags = self.sysfs.path("sys/class/net").join(i).join("flags");
                fs::read_to_string(flags)
                    .ok()
                    .and_then(|s| u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
                    .is_some_and(|f| f & 1 != 0)
            })
            .cloned()
            .collect()
    }

    /// Binds `pci` to vfio-pci (driver_override, unbind, drivers_probe),
    /// remembering the original driver for [`unbind`](Self::unbind).
    /// Returns a line saying what happened.
    pub fn bind(&self, pci: &str, force: bool) -> Result<String, AdminError> {
        let d = self.device(pci)?;
        let a = d.address;
        if d.bound_to_vfio() {
            return Ok(format!("{a}: already bound to vfio-pci"));
        }
        let up = self.up_interfaces(&d);
        if !up.is_empty() && !force {
            return Err(err(format!(
                "{a}: device in use: interface {} is up. Take it down (ip link set {} down) or pass --force",
                up.join(", "),
                up[0]
            )));
        }
        if !self.sysfs.iommu_active() || d.iommu_group.is_none() {
            return Err(err(format!(
                "{a}: no IOMMU (the device has no IOMMU group), so VFIO cannot use it. Enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (or amd_iommu=on) iommu=pt"
            )));
        }
        if !self.sysfs.vfio_pci_loaded() {
            return Err(err(format!(
                "{a}: the vfio-pci driver is not loaded: run `bcl-vfio setup` first"
            )));
        }
        fs::create_dir_all(&self.state_dir).map_err(|e| io_err("creating", &self.state_dir, e))?;
        let state = self.state_file(&a);
        if !state.exists() {
            let orig = d.driver.clone().unwrap_or_default();
            self.write_attr(&state, &format!("{orig}\n"))?;
        }
        let dir = self.sysfs.device_dir(&a);
        self.write_attr(&dir.join("driver_override"), VFIO_PCI_DRIVER)?;
        if d.driver.is_some() {
            self.write_attr(&dir.join("driver/unbind"), &a.to_string())?;
        }
        self.write_attr(
            &self.sysfs.path("sys/bus/pci/drivers_probe"),
            &a.to_string(),
        )?;
        let now = self.device(pci)?;
        if !now.bound_to_vfio() {
            return Err(err(format!(
                "{a}: did not bind to vfio-pci (driver now {}); see dmesg",
                now.driver.as_deref().unwrap_or("none")
            )));
        }
        let mut msg = format!(
            "{a}: bound to vfio-pci (was {}), IOMMU group {}",
            d.driver.as_deref().unwrap_or("unbound"),
            now.iommu_group.map_or("?".into(), |g| g.to_string())
        );
        if let Some(note) = now.iommu_group.and_then(|g| self.viability_note(g)) {
            msg.push_str("; note: ");
            msg.push_str(&note);
        }
        Ok(msg)
    }

    /// Why IOMMU group `group` cannot be used yet, if it cannot.
    pub fn viability_note(&self, group: u32) -> Option<String> {
        match self.sysfs.check_group_viable(group) {
            Ok(Err(g)) => Some(g.to_string()),
            _ => None,
        }
    }

    /// Gives `pci` back to the driver it had before [`bind`](Self::bind).
    pub fn unbind(&self, pci: &str) -> Result<String, AdminError> {
        let d = self.device(pci)?;
        let a = d.address;
        let state = self.state_file(&a);
        let orig = fs::read_to_string(&state)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        if !d.bound_to_vfio() {
            let _ = fs::remove_file(&state);
            return Ok(format!(
                "{a}: not bound to vfio-pci (driver {}); nothing to do",
                d.driver.as_deref().unwrap_or("none")
            ));
        }
        // vfio-pci's unbind blocks until the user lets go of the device:
        // refuse instead of hanging if a process has the group open.
        if let Some(g) = d.iommu_group {
            let node = self.sysfs.vfio_group_node(g);
            if let Err(e) = fs::OpenOptions::new().read(true).write(true).open(&node) {
                if e.kind() == std::io::ErrorKind::ResourceBusy {
                    return Err(err(format!(
                        "{a}: device in use: a process has {} open; stop it first",
                        node.display()
                    )));
                }
            }
        }
        let dir = self.sysfs.device_dir(&a);
        self.write_attr(&dir.join("driver_override"), "\n")?;
        self.write_attr(&dir.join("driver/unbind"), &a.to_string())?;
        let Some(orig) = orig else {
            let _ = fs::remove_file(&state);
            return Ok(format!(
                "{a}: unbound from vfio-pci (it had no driver before)"
            ));
        };
        self.write_attr(
            &self.sysfs.path("sys/bus/pci/drivers_probe"),
            &a.to_string(),
        )?;
        if self.device(pci)?.driver.as_deref() != Some(orig.as_str()) {
            // drivers_probe picks the best match; ask the old driver directly.
            let bind = self
                .sysfs
                .path("sys/bus/pci/drivers")
                .join(&orig)
                .join("bind");
            let _ = fs::write(&bind, a.to_string());
        }
        let now = self.device(pci)?;
        if now.driver.as_deref() != Some(orig.as_str()) {
            return Err(err(format!(
                "{a}: unbound from vfio-pci but {orig} did not take it back (driver now {}); see dmesg",
                now.driver.as_deref().unwrap_or("none")
            )));
        }
        let _ = fs::remove_file(&state);
        Ok(format!("{a}: returned to {orig}"))
    }
}

/// What `setup` should do.
#[derive(Debug, Clone, Default)]
pub struct SetupOptions {
    /// Reserve at least this many 2 MiB huge pages.
    pub hugepages: u64,
    /// Let this user (name or numeric uid) open the VFIO groups of devices
    /// bound to vfio-pci.
    pub user: Option<String>,
    /// Where to look for vfio .ko files when modprobe cannot load them.
    pub modules_dir: Option<PathBuf>,
    /// Skip loading modules.
    pub no_modules: bool,
}

/// One line of the `setup` report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupStep {
    /// What was checked or done.
    pub what: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// Details.
    pub detail: String,
}

fn find_file(dir: &Path, name: &str, depth: u32) -> Option<PathBuf> {
    let rd = fs::read_dir(dir).ok()?;
    let mut subdirs = Vec::new();
    for e in rd.filter_map(|e| e.ok()) {
        let p = e.path();
        if p.is_dir() {
            subdirs.push(p);
        } else if e.file_name().to_string_lossy() == name {
            return Some(p);
        }
    }
    if depth == 0 {
        return None;
    }
    subdirs
        .into_iter()
        .find_map(|d| find_file(&d, name, depth - 1))
}

/// `uid:gid` of a user name (from /etc/passwd) or a numeric uid.
pub fn resolve_user(passwd: &str, user: &str) -> Option<(u32, u32)> {
    if let Ok(uid) = user.parse::<u32>() {
        let gid = passwd
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.len() > 3 && f[2] == user)
            .and_then(|f| f[3].parse().ok())
            .unwrap_or(uid);
        return Some((uid, gid));
    }
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 3 && f[0] == user).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

impl Admin {
    fn module_loaded(&self, m: &str) -> bool {
        self.sysfs
            .path("sys/module")
            .join(m.replace('-', "_"))
            .exists()
    }

    fn load_modules(&self, opts: &SetupOptions) -> SetupStep {
        let what = "load vfio-pci".to_string();
        if self.sysfs.vfio_pci_loaded() && self.module_loaded("vfio_iommu_type1") {
            return SetupStep {
                what,
                ok: true,
                detail: "already loaded".into(),
            };
        }
        let modprobe = Command::new("modprobe")
            .args(["-a", "vfio-pci", "vfio_iommu_type1"])
            .output();
        if self.sysfs.vfio_pci_loaded() {
            return SetupStep {
                what,
                ok: true,
                detail: "loaded with modprobe".into(),
            };
        }
        let dir = opts.modules_dir.clone().unwrap_or_else(|| {
            let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
            PathBuf::from("/lib/modules").join(release.trim())
        });
        let mut notes = vec![match modprobe {
            Ok(o) => format!(
                "modprobe failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => format!("modprobe not runnable: {e}"),
        }];
        for m in VFIO_MODULES {
            if self.module_loaded(m) {
                continue;
            }
            match find_file(&dir, &format!("{m}.ko"), 6) {
                Some(ko) => match Command::new("insmod").arg(&ko).output() {
                    Ok(o) if o.status.success() => notes.push(format!("insmod {m}")),
                    Ok(o) => notes.push(format!(
                        "insmod {m}: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => notes.push(format!("insmod not runnable: {e}")),
                },
                None => notes.push(format!("{m}.ko not found under {}", dir.display())),
            }
        }
        SetupStep {
            what,
            ok: self.sysfs.vfio_pci_loaded(),
            detail: notes.join("; "),
        }
    }

    fn reserve_hugepages(&self, want: u64) -> SetupStep {
        let what = format!("reserve {want} huge pages of 2 MiB");
        let path = self
            .sysfs
            .path("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
        let read = || {
            fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        let Some(have) = read() else {
            return SetupStep {
                what,
                ok: false,
                detail: format!(
                    "{} missing: no 2 MiB huge pages in this kernel; DMA falls back to 4 KiB pages",
                    path.display()
                ),
            };
        };
        if have >= want {
            return SetupStep {
                what,
                ok: true,
                detail: format!("{have} reserved already"),
            };
        }
        if let Err(e) = fs::write(&path, want.to_string()) {
            return SetupStep {
                what,
                ok: false,
                detail: format!("writing {}: {e}", path.display()),
            };
        }
        let got = read().unwrap_or(0);
        SetupStep {
            what,
            ok: got >= want,
            detail: if got >= want {
                format!("{got} reserved")
            } else {
                format!("only {got} could be reserved (memory fragmented or short); DMA falls back to 4 KiB pages when they run out")
            },
        }
    }

    fn grant_user(&self, user: &str) -> SetupStep {
        let what = format!("give {user} access to VFIO groups");
        let passwd = fs::read_to_string(self.sysfs.path("etc/passwd")).unwrap_or_default();
        let Some((uid, gid)) = resolve_user(&passwd, user) else {
            return SetupStep {
                what,
                ok: false,
                detail: format!("unknown user {user}"),
            };
        };
        let mut groups: Vec<u32> = self
            .sysfs
            .network_devices()
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.bound_to_vfio())
            .filter_map(|d| d.iommu_group)
            .collect();
        groups.sort();
        groups.dedup();
        if groups.is_empty() {
            return SetupStep {
                what,
                ok: false,
                detail: "no NIC is bound to vfio-pci yet: run `bcl-vfio bind PCI` first".into(),
            };
        }
        let mut done = Vec::new();
        for g in groups {
            let node = self.sysfs.vfio_group_node(g);
            if let Err(e) = std::os::unix::fs::chown(&node, Some(uid), Some(gid)) {
                return SetupStep {
                    what,
                    ok: false,
                    detail: format!("chown {}: {e}", node.display()),
                };
            }
            done.push(node.display().to_string());
        }
        SetupStep {
            what,
            ok: true,
            detail: format!(
                "{} now owned by uid {uid}; the user also needs a memlock limit covering its DMA memory (e.g. '{user} - memlock unlimited' in /etc/security/limits.conf)",
                done.join(", ")
            ),
        }
    }

    /// Prepares the host: IOMMU check, vfio-pci modules, huge pages,
    /// optional user access. Returns the steps; any step not ok means the
    /// host is not ready.
    pub fn setup(&self, opts: &SetupOptions) -> Vec<SetupStep> {
        let mut steps = Vec::new();
        let iommu = self.sysfs.iommu_active();
        steps.push(SetupStep {
            what: "IOMMU active".into(),
            ok: iommu,
            detail: if iommu {
                "IOMMU groups present".into()
            } else {
                "no IOMMU groups: enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (or amd_iommu=on) iommu=pt".into()
            },
        });
        if !opts.no_modules {
            steps.push(self.load_modules(opts));
        }
        let node = self.sysfs.vfio_container_node();
        steps.push(SetupStep {
            what: "VFIO container device".into(),
            ok: node.exists(),
            detail: if node.exists() {
                format!("{} present", node.display())
            } else {
                format!("{} missing: vfio-pci is not loaded", node.display())
            },
        });
        if opts.hugepages > 0 {
            steps.push(self.reserve_hugepages(opts.hugepages));
        }
        if let Some(u) = &opts.user {
            steps.push(self.grant_user(u));
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bcl_vfio::sysfs::fake::FakeSys;

    fn admin() -> (tempfile::TempDir, FakeSys, Admin) {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeSys::new(dir.path()).unwrap();
        let a = Admin {
            sysfs: Sysfs::new(dir.path()),
            state_dir: dir.path().join("run/bcl-vfio"),
        };
        (dir, f, a)
    }

    #[test]
    fn list_marks_supported_nics_and_explains_status() {
        let (_d, f, a) = admin();
        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            Some(2),
        )
        .unwrap();
        f.add_device(
            "0000:00:01.0",
            0x8086,
            0x10d3,
            0x020000,
            Some("e1000e"),
            Some(1),
        )
        .unwrap();
        f.add_device(
            "0000:00:1f.2",
            0x8086,
            0x2922,
            0x010601,
            Some("ahci"),
            Some(3),
        )
        .unwrap();
        let rows = list(&a.sysfs).unwrap();
        assert_eq!(rows.len(), 2, "only network controllers");
        assert_eq!(rows[0].pci, "0000:00:01.0");
        assert_eq!(rows[0].bcl_driver, None);
        assert_eq!(rows[1].bcl_driver.as_deref(), Some("virtio-net"));
        assert!(!rows[1].usable);
        assert!(rows[1].reason.as_ref().unwrap().contains("bcl-vfio bind"));
        let t = format_table(&rows);
        assert!(t.contains("1af4:1041") && t.contains("virtio-net") && t.contains("virtio-pci"));
        let j = serde_json::to_value(&rows).unwrap();
        assert_eq!(j[1]["iommu_group"], 2);
        assert_eq!(j[1]["vendor"], "1af4");
        assert_eq!(j[0]["bcl_driver"], serde_json::Value::Null);
    }

    #[test]
    fn bind_checks_preconditions_then_writes_override_unbind_probe() {
        let (d, f, a) = admin();
        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            None,
        )
        .unwrap();
        let e = a.bind("0000:00:02.0", false).unwrap_err();
        assert!(e.0.contains("no IOMMU"), "{e}");

        f.add_device(
            "0000:00:03.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("virtio-pci"),
            Some(3),
        )
        .unwrap();
        let e = a.bind("00:03.0", false).unwrap_err();
        assert!(e.0.contains("bcl-vfio setup"), "{e}");
        f.add_driver("vfio-pci").unwrap();

        // An interface that is up means the device is in use.
        let dev = d.path().join("sys/devices/pci0000:00/0000:00:03.0");
        fs::create_dir_all(dev.join("net/eth1")).unwrap();
        fs::create_dir_all(d.path().join("sys/class/net/eth1")).unwrap();
        fs::write(d.path().join("sys/class/net/eth1/flags"), "0x1003\n").unwrap();
        let e = a.bind("00:03.0", false).unwrap_err();
        assert!(e.0.contains("in use") && e.0.contains("eth1"), "{e}");
        fs::write(d.path().join("sys/class/net/eth1/flags"), "0x1002\n").unwrap();

        // The fake kernel does not act on the writes: bind reports that,
        // after having written the right things.
        let e = a.bind("00:03.0", false).unwrap_err();
        assert!(e.0.contains("did not bind"), "{e}");
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "vfio-pci"
        );
        let unbind = d.path().join("sys/bus/pci/drivers/virtio-pci/unbind");
        assert_eq!(fs::read_to_string(unbind).unwrap(), "0000:00:03.0");
        let probe = d.path().join("sys/bus/pci/drivers_probe");
        assert_eq!(fs::read_to_string(probe).unwrap(), "0000:00:03.0");
        let state = a.state_dir.join("0000:00:03.0.driver");
        assert_eq!(fs::read_to_string(&state).unwrap(), "virtio-pci\n");

        // Now "the kernel" binds it; the original driver is still remembered.
        f.set_driver("0000:00:03.0", Some("vfio-pci")).unwrap();
        assert!(a.bind("00:03.0", false).unwrap().contains("already bound"));
        assert_eq!(fs::read_to_string(&state).unwrap(), "virtio-pci\n");

        // Unbind clears the override, unbinds from vfio-pci, reprobes and,
        // since the fake kernel does nothing, asks virtio-pci directly.
        let e = a.unbind("00:03.0").unwrap_err();
        assert!(e.0.contains("virtio-pci did not take it back"), "{e}");
        assert_eq!(
            fs::read_to_string(dev.join("driver_override")).unwrap(),
            "\n"
        );
        let vbind = d.path().join("sys/bus/pci/drivers/virtio-pci/bind");
        assert_eq!(fs::read_to_string(vbind).unwrap(), "0000:00:03.0");
        f.set_driver("0000:00:03.0", Some("virtio-pci")).unwrap();
        assert!(a.unbind("00:03.0").unwrap().contains("not bound"));
        assert!(!state.exists(), "state forgotten once the device is back");
        assert!(a
            .bind("00:09.0", false)
            .unwrap_err()
            .0
            .contains("no PCI device"));
    }

    #[test]
    fn setup_reports_iommu_hugepages_and_user_access() {
        let (d, f, a) = admin();
        let hp = d.path().join("sys/kernel/mm/hugepages/hugepages-2048kB");
        fs::create_dir_all(&hp).unwrap();
        fs::write(hp.join("nr_hugepages"), "4\n").unwrap();
        fs::create_dir_all(d.path().join("etc")).unwrap();
        fs::write(
            d.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
        )
        .unwrap();
        let opts = SetupOptions {
            hugepages: 16,
            user: Some("alice".into()),
            no_modules: true,
            ..Default::default()
        };
        let steps = a.setup(&opts);
        assert!(!steps[0].ok && steps[0].detail.contains("intel_iommu=on"));
        assert!(!steps[1].ok, "no /dev/vfio/vfio");
        assert!(
            steps[2].ok && steps[2].detail.contains("16"),
            "{:?}",
            steps[2]
        );
        assert_eq!(fs::read_to_string(hp.join("nr_hugepages")).unwrap(), "16");
        assert!(!steps[3].ok && steps[3].detail.contains("bcl-vfio bind"));

        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("vfio-pci"),
            Some(2),
        )
        .unwrap();
        fs::write(d.path().join("dev/vfio/2"), "").unwrap();
        fs::write(d.path().join("dev/vfio/vfio"), "").unwrap();
        // Grant to ourselves, so the chown is allowed without root too.
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(d.path()).unwrap();
        fs::write(
            d.path().join("etc/passwd"),
            format!("me:x:{}:{}::/:/bin/sh\n", meta.uid(), meta.gid()),
        )
        .unwrap();
        let steps = a.setup(&SetupOptions {
            user: Some("me".into()),
            ..opts
        });
        assert!(steps.iter().all(|s| s.ok), "{steps:?}");
        assert!(steps[3].detail.contains("dev/vfio/2"));
    }

    #[test]
    fn users_resolve_by_name_or_uid() {
        let p = "root:x:0:0::/root:/bin/sh\nbob:x:1001:100::/home/bob:/bin/sh\n";
        assert_eq!(resolve_user(p, "bob"), Some((1001, 100)));
        assert_eq!(resolve_user(p, "1001"), Some((1001, 100)));
        assert_eq!(resolve_user(p, "4242"), Some((4242, 4242)));
        assert_eq!(resolve_user(p, "carol"), None);
    }
}
