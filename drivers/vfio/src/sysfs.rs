//! What the kernel says about PCI devices, IOMMU groups and VFIO, read from
//! sysfs and `/dev`.
//!
//! Every path is taken relative to a root directory ([`Sysfs::new`]), `/`
//! in production ([`Sysfs::system`]) and a temporary tree in tests, so the
//! checks behind `bcl-vfio list/bind/unbind/setup` and [`crate::probe`] are
//! unit-tested without root or hardware.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::devices::supported_driver;
use crate::pci::{PciAddress, CLASS_NETWORK};

/// The driver name of the kernel's VFIO PCI driver.
pub const VFIO_PCI_DRIVER: &str = "vfio-pci";

/// Drivers that may hold a device without making its IOMMU group unusable
/// for VFIO (the kernel's "driver manages DMA itself" list): VFIO drivers,
/// `pci-stub`, and `pcieport` for bridges.
fn driver_keeps_group_viable(driver: &str) -> bool {
    driver.starts_with("vfio") || driver == "pci-stub" || driver == "pcieport"
}

/// A view of sysfs and `/dev` under a root directory.
#[derive(Clone, Debug)]
pub struct Sysfs {
    root: PathBuf,
}

/// One PCI device as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciDeviceInfo {
    /// Its address.
    pub address: PciAddress,
    /// Vendor ID.
    pub vendor: u16,
    /// Device ID.
    pub device: u16,
    /// 24-bit class code (class, subclass, programming interface).
    pub class: u32,
    /// The kernel driver it is bound to, if any.
    pub driver: Option<String>,
    /// Its IOMMU group; `None` when no IOMMU is active.
    pub iommu_group: Option<u32>,
    /// Network interfaces the device provides (when a kernel driver owns
    /// it), e.g. `["eth0"]`.
    pub interfaces: Vec<String>,
    /// The driver forced with `driver_override`, if set.
    pub driver_override: Option<String>,
}

impl PciDeviceInfo {
    /// True for network controllers (PCI class 0x02).
    pub fn is_network(&self) -> bool {
        (self.class >> 16) as u8 == CLASS_NETWORK
    }

    /// The BCL driver that supports this device, if any.
    pub fn bcl_driver(&self) -> Option<&'static str> {
        supported_driver(self.vendor, self.device)
    }

    /// True if bound to `vfio-pci`.
    pub fn bound_to_vfio(&self) -> bool {
        self.driver.as_deref() == Some(VFIO_PCI_DRIVER)
    }
}

/// Why an IOMMU group cannot be used through VFIO.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("IOMMU group {group} is not viable: device {member} in the same group is bound to {driver}; bind it to vfio-pci too (bcl-vfio bind {member}) or unbind it")]
pub struct GroupNotViable {
    /// The group.
    pub group: u32,
    /// The device that is in the way.
    pub member: String,
    /// The driver it is bound to.
    pub driver: String,
}

fn parse_hex(s: &str) -> Option<u32> {
    let t = s.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

fn link_name(path: &Path) -> Option<String> {
    fs::read_link(path)
        .ok()?
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
}

impl Sysfs {
    /// The running system (`/sys`, `/dev`).
    pub fn system() -> Self {
        Self::new("/")
    }

    /// A tree rooted at `root` (which contains `sys/` and `dev/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `root/rel`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// The sysfs directory of a PCI device.
    pub fn device_dir(&self, address: &PciAddress) -> PathBuf {
        self.path("sys/bus/pci/devices").join(address.to_string())
    }

    /// Information about one device; `Ok(None)` if there is no such device.
    pub fn device(&self, address: &PciAddress) -> io::Result<Option<PciDeviceInfo>> {
        let dir = self.device_dir(address);
        if !dir.exists() {
            return Ok(None);
        }
        let read_hex = |name: &str| -> io::Result<u32> {
            let s = fs::read_to_string(dir.join(name))?;
            parse_hex(&s).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: not hex: {s:?}", dir.join(name).display()),
                )
            })
        };
        let vendor = read_hex("vendor")? as u16;
        let device = read_hex("device")? as u16;
        let class = read_hex("class")?;
        let driver = link_name(&dir.join("driver"));
        let iommu_group = link_name(&dir.join("iommu_group")).and_then(|g| g.parse().ok());
        // Interfaces sit in `net/`, or one level down for drivers with
        // their own bus (virtio-pci: `virtio0/net/eth0`).
        let names = |d: &Path| -> Vec<String> {
            fs::read_dir(d.join("net"))
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut interfaces = names(&dir);
        if let Ok(rd) = fs::read_dir(&dir) {
            for e in rd.filter_map(|e| e.ok()) {
                if e.file_name().to_string_lossy().starts_with("virtio") {
                    interfaces.extend(names(&e.path()));
                }
            }
        }
        interfaces.sort();
        let driver_override = fs::read_to_string(dir.join("driver_override"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "(null)");
        Ok(Some(PciDeviceInfo {
            address: *address,
            vendor,
            device,
            class,
            driver,
            iommu_group,
            interfaces,
            driver_override,
        }))
    }

    /// All PCI devices, sorted by address. Entries that cannot be read are
    /// skipped.
    pub fn devices(&self) -> io::Result<Vec<PciDeviceInfo>> {
        let mut out = Vec::new();
        let dir = self.path("sys/bus/pci/devices");
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in rd.filter_map(|e| e.ok()) {
            let Ok(addr) = entry.file_name().to_string_lossy().parse::<PciAddress>() else {
                continue;
            };
            if let Ok(Some(info)) = self.device(&addr) {
                out.push(info);
            }
        }
        out.sort_by_key(|d| d.address);
        Ok(out)
    }

    /// The network controllers (class 0x02), sorted by address.
    pub fn network_devices(&self) -> io::Result<Vec<PciDeviceInfo>> {
        Ok(self
            .devices()?
            .into_iter()
            .filter(|d| d.is_network())
            .collect())
    }

    /// The PCI address of the NIC a tool should drive, from what the user
    /// gave (`name`): a PCI address as it is; an interface name (`eth1`) as
    /// the PCI device that provides it (still bound to its kernel driver:
    /// opening it then says how to bind it); nothing: the only supported
    /// NIC bound to vfio-pci. Errors say what was found and what to pass.
    pub fn resolve_nic(&self, name: Option<&str>) -> Result<String, String> {
        if let Some(n) = name {
            if n.parse::<PciAddress>().is_ok() {
                return Ok(n.to_string());
            }
        }
        let nics = self.network_devices().map_err(|e| {
            format!(
                "reading {}: {e}",
                self.path("sys/bus/pci/devices").display()
            )
        })?;
        match name {
            Some(ifname) => nics
                .iter()
                .find(|d| d.interfaces.iter().any(|i| i == ifname))
                .map(|d| d.address.to_string())
                .ok_or_else(|| {
                    format!(
                        "{ifname:?} is neither a PCI address (such as 0000:01:00.0) nor the interface of a PCI NIC here (`bcl-vfio list` shows the NICs)"
                    )
                }),
            None => {
                let bound: Vec<String> = nics
                    .iter()
                    .filter(|d| d.bound_to_vfio() && d.bcl_driver().is_some())
                    .map(|d| d.address.to_string())
                    .collect();
                match bound.as_slice() {
                    [one] => Ok(one.clone()),
                    [] => Err("no NIC BCL supports is bound to vfio-pci: bind one (`bcl-vfio list`, `bcl-vfio bind ADDRESS`) and pass --pci ADDRESS".into()),
                    many => Err(format!(
                        "several NICs are bound to vfio-pci ({}): choose one with --pci ADDRESS",
                        many.join(", ")
                    )),
                }
            }
        }
    }

    /// Names of the devices in IOMMU group `group` with their drivers.
    pub fn group_members(&self, group: u32) -> io::Result<Vec<(String, Option<String>)>> {
        let dir = self
            .path("sys/kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let driver = link_name(&entry.path().join("driver"));
            out.push((name, driver));
        }
        out.sort();
        Ok(out)
    }

    /// Checks that every device in `group` is bound to a VFIO driver, to a
    /// driver that leaves DMA alone (`pci-stub`, `pcieport`), or to none,
    /// which is what the kernel requires before `/dev/vfio/GROUP` can be
    /// used. Names the first device that is in the way.
    pub fn check_group_viable(&self, group: u32) -> io::Result<Result<(), GroupNotViable>> {
        for (member, driver) in self.group_members(group)? {
            if let Some(driver) = driver {
                if !driver_keeps_group_viable(&driver) {
                    return Ok(Err(GroupNotViable {
                        group,
                        member,
                        driver,
                    }));
                }
            }
        }
        Ok(Ok(()))
    }

    /// True if the kernel has IOMMU groups, i.e. an IOMMU is active (VFIO's
    /// type-1 backend needs one).
    pub fn iommu_active(&self) -> bool {
        fs::read_dir(self.path("sys/kernel/iommu_groups"))
            .map(|mut rd| rd.next().is_some())
            .unwrap_or(false)
    }

    /// True if the `vfio-pci` driver is registered (module loaded or
    /// built in).
    pub fn vfio_pci_loaded(&self) -> bool {
        self.path("sys/bus/pci/drivers")
            .join(VFIO_PCI_DRIVER)
            .exists()
    }

    /// Path of the VFIO container device, `/dev/vfio/vfio`.
    pub fn vfio_container_node(&self) -> PathBuf {
        self.path("dev/vfio/vfio")
    }

    /// Path of a group's device node, `/dev/vfio/GROUP`.
    pub fn vfio_group_node(&self, group: u32) -> PathBuf {
        self.path("dev/vfio").join(group.to_string())
    }

    /// Huge page sizes (in KiB) that the kernel offers, with the number of
    /// pages reserved and free: `(size_kib, total, free)`.
    pub fn hugepages(&self) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        let Ok(rd) = fs::read_dir(self.path("sys/kernel/mm/hugepages")) else {
            return out;
        };
        for e in rd.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(kib) = name
                .strip_prefix("hugepages-")
                .and_then(|s| s.strip_suffix("kB"))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let num = |f: &str| {
                fs::read_to_string(e.path().join(f))
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            out.push((kib, num("nr_hugepages"), num("free_hugepages")));
        }
        out.sort();
        out
    }
}

#[cfg(any(test, feature = "test-support"))]
pub mod fake {
    //! A fake sysfs tree for tests of code that reads [`Sysfs`]
    //! (feature `test-support`).
    use super::*;
    use std::os::unix::fs::symlink;

    /// Builds `sys/...` and `dev/vfio` entries under a root directory that
    /// the caller owns (e.g. a temporary directory).
    pub struct FakeSys {
        root: PathBuf,
    }

    impl FakeSys {
        /// Creates the skeleton directories under `root`.
        pub fn new(root: &Path) -> io::Result<Self> {
            for d in [
                "sys/bus/pci/devices",
                "sys/bus/pci/drivers",
                "sys/kernel/iommu_groups",
                "sys/devices/pci0000:00",
                "dev/vfio",
            ] {
                fs::create_dir_all(root.join(d))?;
            }
            Ok(Self {
                root: root.to_path_buf(),
            })
        }

        /// The root directory.
        pub fn root(&self) -> &Path {
            &self.root
        }

        /// Registers a driver directory `sys/bus/pci/drivers/NAME` with
        /// `bind`/`unbind` files.
        pub fn add_driver(&self, name: &str) -> io::Result<()> {
            let d = self.root.join("sys/bus/pci/drivers").join(name);
            fs::create_dir_all(&d)?;
            for f in ["bind", "unbind"] {
                if !d.join(f).exists() {
                    fs::write(d.join(f), "")?;
                }
            }
            Ok(())
        }

        /// Points device `addr`'s `driver` link at `driver` (or removes it).
        pub fn set_driver(&self, addr: &str, driver: Option<&str>) -> io::Result<()> {
            let real = self.root.join("sys/devices/pci0000:00").join(addr);
            let link = real.join("driver");
            if fs::symlink_metadata(&link).is_ok() {
                fs::remove_file(&link)?;
            }
            if let Some(d) = driver {
                self.add_driver(d)?;
                symlink(self.root.join("sys/bus/pci/drivers").join(d), link)?;
            }
            Ok(())
        }

        /// Adds a device; `group` creates the IOMMU group if needed and
        /// links the device into it.
        pub fn add_device(
            &self,
            addr: &str,
            vendor: u16,
            device: u16,
            class: u32,
            driver: Option<&str>,
            group: Option<u32>,
        ) -> io::Result<()> {
            let real = self.root.join("sys/devices/pci0000:00").join(addr);
            fs::create_dir_all(&real)?;
            fs::write(real.join("vendor"), format!("0x{vendor:04x}\n"))?;
            fs::write(real.join("device"), format!("0x{device:04x}\n"))?;
            fs::write(real.join("class"), format!("0x{class:06x}\n"))?;
            fs::write(real.join("driver_override"), "(null)\n")?;
            self.set_driver(addr, driver)?;
            if let Some(g) = group {
                let gdir = self
                    .root
                    .join("sys/kernel/iommu_groups")
                    .join(g.to_string());
                fs::create_dir_all(gdir.join("devices"))?;
                symlink(&gdir, real.join("iommu_group"))?;
                symlink(&real, gdir.join("devices").join(addr))?;
            }
            symlink(&real, self.root.join("sys/bus/pci/devices").join(addr))?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSys;
    use super::*;

    fn fake() -> (tempfile::TempDir, FakeSys) {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeSys::new(dir.path()).unwrap();
        (dir, f)
    }

    #[test]
    fn reads_devices_and_filters_nics() {
        let (_dir, f) = fake();
        f.add_device("0000:00:02.0", 0x1af4, 0x1041, 0x020000, None, Some(2))
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
            "0000:00:1f.0",
            0x8086,
            0x2918,
            0x060100,
            Some("lpc_ich"),
            Some(1),
        )
        .unwrap();
        let fs_root = Sysfs::new(f.root());
        let nics = fs_root.network_devices().unwrap();
        assert_eq!(nics.len(), 2);
        assert_eq!(nics[0].address.to_string(), "0000:00:01.0");
        assert_eq!(nics[0].driver.as_deref(), Some("e1000e"));
        assert_eq!(nics[0].bcl_driver(), None);
        assert_eq!(nics[1].vendor, 0x1af4);
        assert_eq!(nics[1].iommu_group, Some(2));
        assert_eq!(nics[1].driver, None);
        assert_eq!(nics[1].driver_override, None);
        assert_eq!(nics[1].bcl_driver(), Some("virtio-net"));
        assert!(nics[1].interfaces.is_empty());
        let virtio_net = f
            .root()
            .join("sys/devices/pci0000:00/0000:00:02.0/virtio3/net/eth7");
        std::fs::create_dir_all(virtio_net).unwrap();
        let d = fs_root.device(&nics[1].address).unwrap().unwrap();
        assert_eq!(d.interfaces, vec!["eth7".to_string()]);
        assert!(fs_root.iommu_active());
        assert!(!fs_root.vfio_pci_loaded());
        f.add_driver("vfio-pci").unwrap();
        assert!(fs_root.vfio_pci_loaded());
    }

    #[test]
    fn the_nic_to_drive_is_found_by_address_interface_or_binding() {
        let (_d, f) = fake();
        f.add_driver("virtio-pci").unwrap();
        f.add_driver("vfio-pci").unwrap();
        let net = 0x02_00_00;
        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            net,
            Some("virtio-pci"),
            Some(2),
        )
        .unwrap();
        f.add_device(
            "0000:00:03.0",
            0x1af4,
            0x1041,
            net,
            Some("vfio-pci"),
            Some(3),
        )
        .unwrap();
        std::fs::create_dir_all(
            f.root()
                .join("sys/devices/pci0000:00/0000:00:02.0/virtio0/net/eth1"),
        )
        .unwrap();
        let s = Sysfs::new(f.root());
        assert_eq!(s.resolve_nic(Some("0000:00:09.0")).unwrap(), "0000:00:09.0");
        assert_eq!(s.resolve_nic(Some("eth1")).unwrap(), "0000:00:02.0");
        let e = s.resolve_nic(Some("eth9")).unwrap_err();
        assert!(e.contains("\"eth9\" is neither a PCI address"), "{e}");
        // One NIC bound to vfio-pci: it.
        assert_eq!(s.resolve_nic(None).unwrap(), "0000:00:03.0");
        f.add_device(
            "0000:00:04.0",
            0x1af4,
            0x1041,
            net,
            Some("vfio-pci"),
            Some(4),
        )
        .unwrap();
        let e = s.resolve_nic(None).unwrap_err();
        assert!(
            e.contains("several NICs are bound to vfio-pci (0000:00:03.0, 0000:00:04.0)"),
            "{e}"
        );
        let (_d2, empty) = fake();
        let e = Sysfs::new(empty.root()).resolve_nic(None).unwrap_err();
        assert!(
            e.contains("no NIC BCL supports is bound to vfio-pci"),
            "{e}"
        );
    }

    #[test]
    fn group_viability_names_the_device_in_the_way() {
        let (_dir, f) = fake();
        f.add_device(
            "0000:00:01.0",
            0x8086,
            0x10d3,
            0x020000,
            Some("vfio-pci"),
            Some(1),
        )
        .unwrap();
        f.add_device(
            "0000:00:01.1",
            0x8086,
            0x10d3,
            0x020000,
            Some("e1000e"),
            Some(1),
        )
        .unwrap();
        f.add_device(
            "0000:00:02.0",
            0x1af4,
            0x1041,
            0x020000,
            Some("vfio-pci"),
            Some(2),
        )
        .unwrap();
        f.add_device(
            "0000:00:02.1",
            0x8086,
            0x0000,
            0x060400,
            Some("pcieport"),
            Some(2),
        )
        .unwrap();
        f.add_device("0000:00:02.2", 0x8086, 0x0000, 0x020000, None, Some(2))
            .unwrap();
        let s = Sysfs::new(f.root());
        let err = s.check_group_viable(1).unwrap().unwrap_err();
        assert_eq!(err.member, "0000:00:01.1");
        assert_eq!(err.driver, "e1000e");
        assert!(err.to_string().contains("bcl-vfio bind 0000:00:01.1"));
        assert!(s.check_group_viable(2).unwrap().is_ok());
        assert!(
            s.check_group_viable(9).is_err(),
            "missing group is an I/O error"
        );
    }

    #[test]
    fn no_iommu_groups_means_no_iommu() {
        let (_dir, f) = fake();
        f.add_device("0000:00:02.0", 0x1af4, 0x1041, 0x020000, None, None)
            .unwrap();
        let s = Sysfs::new(f.root());
        assert!(!s.iommu_active());
        let d = s.device(&"00:02.0".parse().unwrap()).unwrap().unwrap();
        assert_eq!(d.iommu_group, None);
        assert!(s.device(&"00:03.0".parse().unwrap()).unwrap().is_none());
    }
}
