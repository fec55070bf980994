//! `bcl-vfio`: prepare NICs for BCL's VFIO userspace drivers and test them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bcl_vfio::method::VfioMethodConfig;
use bcl_vfio_cli::admin::{self, Admin, SetupOptions};
use bcl_vfio_cli::check::{check_device, Outcome};
use bcl_vfio_cli::exchange::{exchange, ExchangeOptions};
use clap::{Parser, Subcommand};

/// Prepare NICs for BCL's VFIO userspace drivers, and test them.
///
/// Typical use, as root:
///
///   bcl-vfio setup --hugepages 64        # vfio-pci loaded, IOMMU on, huge pages
///   bcl-vfio list                        # find the NIC's PCI address
///   bcl-vfio bind 0000:00:02.0           # give it to vfio-pci
///   bcl-vfio setup --user alice          # optional: let alice open it
///   ...run BCL with the vfio method (descriptor vfio:MAC@PCI)...
///   bcl-vfio unbind 0000:00:02.0         # give it back to its kernel driver
#[derive(Parser, Debug)]
#[command(name = "bcl-vfio", version, about, long_about, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// List network controllers (PCI class 0x02): PCI address, vendor:device,
    /// current driver, IOMMU group, the BCL driver that supports it, and
    /// whether the vfio method can open it now (and why not).
    List {
        /// Print JSON (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Bind NICs to vfio-pci (driver_override, unbind, drivers_probe). The
    /// original driver is remembered in /run/bcl-vfio/ for `unbind`.
    Bind {
        /// PCI addresses, e.g. 0000:00:02.0 (or 00:02.0).
        #[arg(required = true)]
        pci: Vec<String>,
        /// Bind even if the NIC's network interface is up.
        #[arg(long)]
        force: bool,
    },
    /// Return NICs from vfio-pci to the driver they had before `bind`.
    Unbind {
        /// PCI addresses.
        #[arg(required = true)]
        pci: Vec<String>,
    },
    /// Prepare this host: check that an IOMMU is on, load vfio-pci (modprobe,
    /// else insmod from --modules-dir), reserve 2 MiB huge pages for DMA
    /// memory, and optionally let a non-root user open the VFIO groups of
    /// NICs bound to vfio-pci.
    Setup {
        /// Reserve at least this many 2 MiB huge pages (0: leave as is).
        #[arg(long, default_value_t = 64)]
        hugepages: u64,
        /// Give this user (name or uid) ownership of /dev/vfio/GROUP for every
        /// NIC bound to vfio-pci (run after `bind`).
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
        /// Directory searched (recursively) for vfio .ko files when modprobe
        /// fails; default /lib/modules/$(uname -r).
        #[arg(long, value_name = "DIR")]
        modules_dir: Option<PathBuf>,
        /// Do not try to load kernel modules.
        #[arg(long)]
        no_modules: bool,
    },
    /// Self-test the VFIO layer on one device bound to vfio-pci: open,
    /// config space, BAR mmap and register reads, bus mastering, DMA
    /// map/unmap (huge pages, IOVA = VA), MSI-X to eventfd, reset.
    Check {
        /// PCI address.
        pci: String,
        /// Fail (instead of skipping that step) if the kernel cannot reset
        /// the device.
        #[arg(long)]
        require_reset: bool,
    },
    /// Exchange frames of varied sizes between two NICs (on one L2 segment,
    /// both bound to vfio-pci) through the vfio method, both ways, verifying
    /// every byte; also checks the MSI-X wake-up and EtherType filtering.
    Exchange {
        /// PCI address of NIC A.
        a: String,
        /// PCI address of NIC B.
        b: String,
        /// Frames each way.
        #[arg(long, default_value_t = 1000)]
        frames: usize,
        /// EtherType of BCL frames (hex, e.g. 88b5).
        #[arg(long, default_value = "88b5", value_parser = parse_hex_u16)]
        ethertype: u16,
        /// Entries per NIC queue.
        #[arg(long, default_value_t = 256)]
        queue_size: u16,
        /// Most frames in flight (default: the queue size, at most 64). A
        /// window larger than the receive ring makes frames wait for
        /// buffers: a real NIC drops them, and QEMU's hub delivers them out
        /// of order, so the in-order check fails by design.
        #[arg(long)]
        window: Option<usize>,
        /// Poll only (no MSI-X).
        #[arg(long)]
        no_interrupts: bool,
        /// Seconds allowed per direction.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
}

fn parse_hex_u16(s: &str) -> Result<u16, String> {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{s}: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::List { json } => match admin::list(&bcl_vfio::sysfs::Sysfs::system()) {
            Ok(rows) if json => {
                println!("{}", serde_json::to_string_pretty(&rows).expect("JSON"));
                ExitCode::SUCCESS
            }
            Ok(rows) => {
                print!("{}", admin::format_table(&rows));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("bcl-vfio list: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Bind { pci, force } => each(&pci, |p| Admin::system().bind(p, force)),
        Cmd::Unbind { pci } => each(&pci, |p| Admin::system().unbind(p)),
        Cmd::Setup {
            hugepages,
            user,
            modules_dir,
            no_modules,
        } => {
            let steps = Admin::system().setup(&SetupOptions {
                hugepages,
                user,
                modules_dir,
                no_modules,
            });
            let mut ok = true;
            for s in &steps {
                println!(
                    "{} {}: {}",
                    if s.ok { "ok  " } else { "FAIL" },
                    s.what,
                    s.detail
                );
                ok &= s.ok;
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Check { pci, require_reset } => {
            let steps = check_device(&pci, require_reset, &mut |s| println!("{s}"));
            let failed = steps.iter().filter(|s| s.outcome == Outcome::Fail).count();
            println!(
                "CHECK {pci}: {}",
                if failed == 0 {
                    "PASS".to_string()
                } else {
                    format!("FAIL ({failed} steps)")
                }
            );
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Cmd::Exchange {
            a,
            b,
            frames,
            ethertype,
            queue_size,
            window,
            no_interrupts,
            timeout,
        } => {
            let opts = ExchangeOptions {
                frames,
                window: window.unwrap_or(usize::from(queue_size).min(64)),
                timeout: Duration::from_secs(timeout),
                method: VfioMethodConfig {
                    ethertype,
                    queue_size,
                    interrupts: !no_interrupts,
                },
            };
            match exchange(&a, &b, opts, &mut |line| println!("{line}")) {
                Ok(()) => {
                    println!("EXCHANGE {a} <-> {b}: PASS");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("EXCHANGE {a} <-> {b}: FAIL: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Runs `f` on every address; prints results; fails if any failed.
fn each(pci: &[String], f: impl Fn(&str) -> Result<String, admin::AdminError>) -> ExitCode {
    let mut ok = true;
    for p in pci {
        match f(p) {
            Ok(msg) => println!("{msg}"),
            Err(e) => {
                eprintln!("bcl-vfio: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid_and_parses_examples() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from([
            "bcl-vfio",
            "exchange",
            "00:02.0",
            "00:03.0",
            "--ethertype",
            "0x0800",
        ])
        .unwrap();
        assert!(matches!(
            c.command,
            Cmd::Exchange {
                ethertype: 0x0800,
                frames: 1000,
                ..
            }
        ));
        let c = Cli::try_parse_from(["bcl-vfio", "list", "--json"]).unwrap();
        assert!(matches!(c.command, Cmd::List { json: true }));
        assert!(
            Cli::try_parse_from(["bcl-vfio", "bind"]).is_err(),
            "bind needs an address"
        );
    }
}
