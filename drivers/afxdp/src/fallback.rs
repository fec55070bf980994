//! The best Ethernet method on an interface: `afxdp` where it can run,
//! else `packet` (AF_PACKET), with the reason AF_XDP could not be used.
//!
//! Both methods put the same Ethernet II frames on the wire (and accept
//! each other's descriptors), so peers interoperate whichever one a node
//! got. This is the fallback the issue asks of the engine: probe `afxdp`
//! ([`crate::probe`]: capabilities, kernel support, interface state,
//! another XDP program), try to open it, and fall back to `packet` saying
//! why.
//!
//! ```no_run
//! use bcl_afxdp::{fallback::open_ethernet, AfXdpConfig};
//! let choice = open_ethernet(AfXdpConfig::new("eth0"))?;
//! eprintln!("{choice}"); // "afxdp on eth0 ..." or "packet on eth0 (afxdp not usable: ...)"
//! let method = choice.method;
//! # Ok::<(), bcl_core::method::MethodError>(())
//! ```

use bcl_core::method::{Availability, Method, MethodError};
use bcl_packet::{PacketConfig, PacketMethod};

use crate::config::AfXdpConfig;
use crate::method::{probe, AfXdpMethod};

/// The method [`open_ethernet`] opened, and why.
pub struct EthernetChoice {
    /// The opened method: `afxdp` or `packet`.
    pub method: Box<dyn Method>,
    /// The interface.
    pub ifname: String,
    /// Why `afxdp` is not used (`None` when it is).
    pub fallback_reason: Option<String>,
    /// What was obtained: the afxdp mode report, or the fallback line.
    pub report: String,
}

impl EthernetChoice {
    /// The chosen method's name (`afxdp` or `packet`).
    pub fn name(&self) -> &'static str {
        self.method.name()
    }
}

impl std::fmt::Display for EthernetChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fallback_reason {
            None => write!(f, "{}", self.report.trim_end()),
            Some(r) => write!(
                f,
                "packet on {} (AF_PACKET; afxdp not usable: {r})",
                self.ifname
            ),
        }
    }
}

/// Opens `afxdp` on `config.ifname` (in the calling thread's network
/// namespace) if the probe and the opening succeed; otherwise opens the
/// `packet` method on the same interface and EtherType, and records why.
/// Fails only when neither can be opened (the error then names both
/// reasons).
pub fn open_ethernet(config: AfXdpConfig) -> Result<EthernetChoice, MethodError> {
    let ifname = config.ifname.clone();
    let ethertype = config.ethertype;
    let reason = match probe(&ifname) {
        Availability::NotUsable(r) => r,
        Availability::Usable => match AfXdpMethod::open(config) {
            Ok(m) => {
                return Ok(EthernetChoice {
                    report: m.mode_report().to_string(),
                    method: Box::new(m),
                    ifname,
                    fallback_reason: None,
                })
            }
            Err(e) => e.to_string(),
        },
    };
    let packet = PacketMethod::open(PacketConfig {
        ifname: Some(ifname.clone()),
        ethertype,
        ..PacketConfig::default()
    })
    .map_err(|e| MethodError::NotUsable {
        method: crate::METHOD_NAME,
        reason: format!("afxdp: {reason}; and the packet fallback: {e}"),
    })?;
    Ok(EthernetChoice {
        report: format!("packet on {ifname} (AF_PACKET; afxdp not usable: {reason})"),
        method: Box::new(packet),
        ifname,
        fallback_reason: Some(reason),
    })
}
