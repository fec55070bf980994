//! `bcl-vfio check PCI`: a self-test of the VFIO layer on a real device —
//! open, configuration space, BAR mapping and register reads, bus
//! mastering, DMA allocation and IOMMU map/unmap, MSI-X to eventfd, reset.

use std::time::Duration;

use bcl_vfio::pci::{
    wait_readable, BarKind, Mmio, PciAddress, PciFunction, CFG_COMMAND, COMMAND_BUS_MASTER,
};
use bcl_vfio::sysfs::Sysfs;
use bcl_vfio::vfio::{VfioPciFunction, HUGE_PAGE_SIZE};
use bcl_vfio::virtio::{
    find_caps, VirtioPciTransport, F_ACCESS_PLATFORM, F_VERSION_1, STATUS_ACKNOWLEDGE,
    VIRTIO_VENDOR_ID,
};

/// Outcome of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Worked.
    Pass,
    /// Failed: the device or setup is not usable.
    Fail,
    /// Not applicable to this device (not a failure).
    Skip,
}

/// One step of a self-test.
#[derive(Debug, Clone)]
pub struct Step {
    /// Step name.
    pub name: String,
    /// Outcome.
    pub outcome: Outcome,
    /// What was seen.
    pub detail: String,
}

impl Step {
    fn new(name: &str, outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            name: name.to_string(),
            outcome,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = match self.outcome {
            Outcome::Pass => "PASS",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "SKIP",
        };
        write!(f, "{o} {}: {}", self.name, self.detail)
    }
}

fn pass(name: &str, d: impl Into<String>) -> Step {
    Step::new(name, Outcome::Pass, d)
}
fn fail(name: &str, d: impl Into<String>) -> Step {
    Step::new(name, Outcome::Fail, d)
}

/// Runs the self-test on the device at `pci`; `out` gets each step as it
/// finishes. With `require_reset`, a device the kernel cannot reset fails
/// the test instead of skipping that step.
pub fn check_device(pci: &str, require_reset: bool, out: &mut dyn FnMut(&Step)) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut push = |s: Step, steps: &mut Vec<Step>| {
        out(&s);
        steps.push(s);
    };
    let address: PciAddress = match pci.parse() {
        Ok(a) => a,
        Err(e) => {
            push(fail("open", e.to_string()), &mut steps);
            return steps;
        }
    };
    let f = match VfioPciFunction::open(address) {
        Ok(f) => f,
        Err(e) => {
            push(fail("open", e.to_string()), &mut steps);
            return steps;
        }
    };
    push(
        pass(
            "open",
            format!(
                "{address}: IOMMU group {}, config space {} bytes, {} MSI-X vectors",
                f.iommu_group(),
                f.config_size(),
                f.msix_vectors()
            ),
        ),
        &mut steps,
    );

    // Configuration space agrees with sysfs.
    let sys = Sysfs::system().device(&address).ok().flatten();
    match (f.ids(), sys) {
        (Ok((v, d)), Some(s)) if v == s.vendor && d == s.device => push(
            pass("config ids", format!("{v:04x}:{d:04x} (matches sysfs)")),
            &mut steps,
        ),
        (r, s) => push(
            fail(
                "config ids",
                format!(
                    "config says {r:?}, sysfs says {:?}",
                    s.map(|s| (s.vendor, s.device))
                ),
            ),
            &mut steps,
        ),
    }
    let caps = f.capabilities().map(|c| {
        c.iter()
            .map(|c| format!("{:#04x}@{:#x}", c.id, c.offset))
            .collect::<Vec<_>>()
            .join(" ")
    });
    push(
        match caps {
            Ok(c) => pass("capabilities", c),
            Err(e) => fail("capabilities", e.to_string()),
        },
        &mut steps,
    );

    // BARs: map every memory BAR and read its first register.
    let mut any_bar = false;
    for i in 0..6u8 {
        let Some(info) = f.bar_info(i) else { continue };
        any_bar = true;
        let name = format!("BAR{i}");
        if info.kind == BarKind::Io {
            push(
                Step::new(
                    &name,
                    Outcome::Skip,
                    format!("I/O BAR of {:#x} bytes", info.size),
                ),
                &mut steps,
            );
            continue;
        }
        match f.map_bar(i) {
            Ok(bar) => {
                let v = bar.read_u32(0);
                push(
                    pass(
                        &name,
                        format!(
                            "{:#x} bytes, {}, first dword {v:#010x}",
                            info.size,
                            if bar.is_mapped() {
                                "mmap'ed"
                            } else {
                                "pread/pwrite (not mappable)"
                            }
                        ),
                    ),
                    &mut steps,
                );
            }
            Err(e) => push(fail(&name, e.to_string()), &mut steps),
        }
    }
    if !any_bar {
        push(fail("BARs", "the device has no BARs"), &mut steps);
    }

    // A virtio device: its registers through the mapped BAR.
    let vendor = f.ids().map(|i| i.0).unwrap_or(0);
    if vendor == VIRTIO_VENDOR_ID {
        match find_caps(&f).map_err(|e| e.to_string()).and_then(|caps| {
            let t = VirtioPciTransport::new(&f).map_err(|e| e.to_string())?;
            Ok((caps, t))
        }) {
            Ok((caps, t)) => {
                let feats = t.device_features();
                let nq = t.num_queues();
                let ok = feats & F_VERSION_1 != 0 && nq >= 2;
                push(
                    Step::new(
                        "virtio registers",
                        if ok { Outcome::Pass } else { Outcome::Fail },
                        format!(
                            "common cfg in BAR{} at {:#x}, {nq} queues, features {feats:#x} (VERSION_1 {}, ACCESS_PLATFORM {})",
                            caps.common.bar,
                            caps.common.offset,
                            feats & F_VERSION_1 != 0,
                            feats & F_ACCESS_PLATFORM != 0
                        ),
                    ),
                    &mut steps,
                );
            }
            Err(e) => push(fail("virtio registers", e), &mut steps),
        }
    }

    // Bus mastering.
    let bm = f
        .enable_bus_master()
        .and_then(|()| f.config_read_u16(CFG_COMMAND));
    push(
        match bm {
            Ok(c) if c & COMMAND_BUS_MASTER != 0 => pass("bus master", format!("command {c:#06x}")),
            Ok(c) => fail("bus master", format!("bit did not stick: command {c:#06x}")),
            Err(e) => fail("bus master", e.to_string()),
        },
        &mut steps,
    );

    push(check_dma(&f), &mut steps);

    // MSI-X through an eventfd (VFIO loopback trigger).
    if f.msix_vectors() == 0 {
        push(
            Step::new("MSI-X", Outcome::Skip, "device has no MSI-X"),
            &mut steps,
        );
    } else {
        let r = (|| -> Result<String, String> {
            f.enable_msix(1).map_err(|e| e.to_string())?;
            let fd = f.interrupt_eventfd(0).ok_or("no eventfd for vector 0")?;
            let before = wait_readable(std::os::fd::AsRawFd::as_raw_fd(fd), Duration::ZERO)
                .map_err(|e| e.to_string())?;
            f.trigger_interrupt(0).map_err(|e| e.to_string())?;
            let after = wait_readable(std::os::fd::AsRawFd::as_raw_fd(fd), Duration::from_secs(2))
                .map_err(|e| e.to_string())?;
            let n = fd.read().map_err(|e| e.to_string())?;
            f.disable_msix().map_err(|e| e.to_string())?;
            if before || !after || n != 1 {
                return Err(format!(
                    "eventfd readable before={before} after={after} count={n}"
                ));
            }
            Ok("vector 0 enabled, triggered, seen on its eventfd, disabled".into())
        })();
        push(
            match r {
                Ok(d) => pass("MSI-X", d),
                Err(e) => fail("MSI-X", e),
            },
            &mut steps,
        );
    }

    // Reset. On a virtio device, first leave a mark in the device status
    // (ACKNOWLEDGE); after a real reset it reads 0 again.
    let virtio = (vendor == VIRTIO_VENDOR_ID)
        .then(|| VirtioPciTransport::new(&f).ok())
        .flatten();
    if let Some(t) = &virtio {
        t.set_status(STATUS_ACKNOWLEDGE);
    }
    match f.reset() {
        Ok(()) => {
            let ids = f.ids();
            let status = virtio.as_ref().map(|t| t.status());
            push(
                match (ids, status) {
                    (Ok((v, _)), None) if v != 0xffff => pass(
                        "reset",
                        format!("VFIO_DEVICE_RESET done; device answers ({v:04x})"),
                    ),
                    (Ok((v, _)), Some(0)) if v != 0xffff => pass(
                        "reset",
                        "VFIO_DEVICE_RESET done; virtio status went from ACKNOWLEDGE to 0",
                    ),
                    (ids, status) => fail(
                        "reset",
                        format!("after reset: ids {ids:?}, virtio status {status:?}"),
                    ),
                },
                &mut steps,
            );
        }
        Err(bcl_vfio::pci::PciError::Unsupported(why)) => push(
            Step::new(
                "reset",
                if require_reset {
                    Outcome::Fail
                } else {
                    Outcome::Skip
                },
                why,
            ),
            &mut steps,
        ),
        Err(e) => push(fail("reset", e.to_string()), &mut steps),
    }
    steps
}

fn check_dma(f: &VfioPciFunction) -> Step {
    let r = (|| -> Result<String, String> {
        let a = f.alloc_dma(HUGE_PAGE_SIZE).map_err(|e| e.to_string())?;
        let b = f.alloc_dma(4096).map_err(|e| e.to_string())?;
        for r in [&a, &b] {
            if r.iova() != r.as_ptr() as u64 {
                return Err(format!("IOVA {:#x} != VA {:p}", r.iova(), r.as_ptr()));
            }
        }
        let (a0, a1) = (a.iova(), a.iova() + a.len() as u64);
        if b.iova() < a1 && a0 < b.iova() + b.len() as u64 {
            return Err("two DMA regions overlap".into());
        }
        let pattern: Vec<u8> = (0..a.len()).map(|i| (i * 131 + 7) as u8).collect();
        a.write_bytes(0, &pattern);
        let mut back = vec![0u8; a.len()];
        a.read_bytes(0, &mut back);
        if back != pattern {
            return Err("pattern read back differs".into());
        }
        let detail = format!(
            "2 MiB at IOVA=VA {:#x} ({} pages{}), 4 KiB at {:#x}",
            a.iova(),
            if a.page_size() == HUGE_PAGE_SIZE {
                "2 MiB"
            } else {
                "4 KiB"
            },
            if a.page_size() == HUGE_PAGE_SIZE {
                ""
            } else {
                ": no huge pages reserved, run bcl-vfio setup --hugepages N"
            },
            b.iova()
        );
        drop(a);
        drop(b);
        // Unmapped and freed: mapping again must work.
        let c = f
            .alloc_dma(HUGE_PAGE_SIZE)
            .map_err(|e| format!("re-map after unmap: {e}"))?;
        Ok(format!(
            "{detail}; unmapped and mapped again at {:#x}",
            c.iova()
        ))
    })();
    match r {
        Ok(d) => pass("DMA map/unmap", d),
        Err(e) => fail("DMA map/unmap", e),
    }
}
