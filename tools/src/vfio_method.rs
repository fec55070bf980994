//! The tools' `vfio` transport: BCL over the `vfio` method of `bcl-vfio`,
//! on a NIC the process drives itself through VFIO (`--pci ADDRESS`, the
//! NIC bound to vfio-pci with `bcl-vfio bind`).
//!
//! * virtio-net NICs (1af4:1041) are opened with `VfioMethod`, Myri-10G
//!   NICs (vendor 14c1) with `Myri10geMethod` and the firmware of its
//!   default configuration.
//! * `--ethertype` applies as for the `packet` method; `--busy-poll`
//!   polls the receive ring, otherwise the NIC's MSI-X vector wakes the
//!   blocking progress engine.
//! * Frames are Ethernet II frames with the BCL EtherType, exactly as the
//!   `packet` and `afxdp` methods put them on a wire, so a `vfio` end can
//!   talk to a `packet` or `afxdp` end on the same Ethernet: `--connect`
//!   takes the descriptor of any of the three ([`ethernet_peer`]), e.g.
//!   `bcl-pingpong --method vfio --pci 0000:01:00.0 --connect
//!   packet:02:bc:01:00:00:01/2`.
//! * A `vfio` end serves one NIC, so `--local` (two ends in one process)
//!   is refused: start one process per NIC with `--serve` and `--connect`.

use crate::bcl_transport::BclTransport;
use crate::methods::{endpoint, BoxTransport, EndSpec, CLIENT_ADDR, SERVER_ADDR};
use bcl::{Descriptor, Method, ProgressMode};
use bcl_vfio::method::parse_mac;
use bcl_vfio::VfioMethodConfig;

/// Methods that carry BCL frames as Ethernet II frames with the BCL
/// EtherType, addressed by MAC: their ends can reach each other.
pub const ETHERNET_METHODS: [&str; 3] = ["packet", "afxdp", "vfio"];

/// Why `--local` does not apply to the vfio method.
pub const LOCAL_REFUSED: &str = "the vfio method drives one NIC per process: start one end per NIC, e.g. `bcl-pingpong --method vfio --pci 0000:01:00.0 --serve` and `bcl-pingpong --method vfio --pci 0000:02:00.0 --connect DESCRIPTOR`";

/// The peer descriptor for an end of `method` (one of
/// [`ETHERNET_METHODS`]) from `text`, the `listening:` descriptor of a
/// server of any Ethernet method: `vfio:MAC[@PCI]`, `packet:MAC/IFINDEX`
/// or `afxdp:MAC/IFINDEX`. Only the MAC matters on the wire; an interface
/// index the target method wants but the text lacks is given as 0 (the
/// `packet` and `afxdp` methods address peers by MAC alone).
pub fn ethernet_peer(text: &str, method: &str) -> Result<Descriptor, String> {
    let d: Descriptor = text.parse().map_err(|e| format!("--connect: {e}"))?;
    if !ETHERNET_METHODS.contains(&d.method.as_str()) {
        return Err(format!(
            "--connect {text:?} is a descriptor of method {:?}; the {method} method reaches only Ethernet peers ({})",
            d.method,
            ETHERNET_METHODS.join(", ")
        ));
    }
    if d.method == method {
        return Ok(d);
    }
    let mac = d.address.split(['/', '@']).next().unwrap_or_default();
    if parse_mac(mac).is_none() {
        return Err(format!(
            "--connect {text:?}: expected a MAC address such as 52:54:00:12:34:56 after \"{}:\"",
            d.method
        ));
    }
    let address = if method == "vfio" {
        mac.to_string()
    } else {
        match d.address.split_once('/') {
            Some((_, index)) if d.method != "vfio" => format!("{mac}/{index}"),
            _ => format!("{mac}/0"),
        }
    };
    Ok(Descriptor::new(method, address))
}

/// Opens the `vfio` method on the NIC of `--pci`.
pub fn open_method(spec: &EndSpec) -> Result<Box<dyn Method>, String> {
    // --pci, else --ifname (a PCI address or the NIC's interface name, as
    // for the other Ethernet methods), else the only NIC bound to vfio-pci.
    let pci = match &spec.pci {
        Some(p) => p.clone(),
        None => bcl_vfio::sysfs::Sysfs::system()
            .resolve_nic(spec.ifname.as_deref())
            .map_err(|e| format!("--method vfio: {e}"))?,
    };
    let pci = pci.as_str();
    let config = VfioMethodConfig {
        ethertype: spec.ethertype,
        interrupts: spec.mode() == ProgressMode::Blocking,
        ..VfioMethodConfig::default()
    };
    bcl_vfio::open_nic(pci, config).map_err(|e| e.to_string())
}

/// The serving end over `method`: its descriptor and its transport.
pub fn serve_on(method: Box<dyn Method>, spec: &EndSpec) -> Result<(String, BoxTransport), String> {
    let d = method.descriptor().to_string();
    let ep = endpoint(SERVER_ADDR, method, spec, None)?;
    Ok((d, Box::new(BclTransport::new(ep, None, None))))
}

/// The connecting end over `method`, towards `peer`.
pub fn connect_on(
    method: Box<dyn Method>,
    spec: &EndSpec,
    peer: Descriptor,
) -> Result<BoxTransport, String> {
    let mut ep = endpoint(CLIENT_ADDR, method, spec, None)?;
    ep.add_peer(SERVER_ADDR, peer);
    Ok(Box::new(BclTransport::new(ep, Some(SERVER_ADDR), None)))
}

/// Opens the serving end of `--method vfio`.
pub fn serve(spec: &EndSpec) -> Result<(String, BoxTransport), String> {
    serve_on(open_method(spec)?, spec)
}

/// Opens the connecting end of `--method vfio` towards `descriptor`, the
/// server's `listening:` descriptor (vfio, packet or afxdp).
pub fn connect(spec: &EndSpec, descriptor: &str) -> Result<BoxTransport, String> {
    let peer = ethernet_peer(descriptor, "vfio")?;
    connect_on(open_method(spec)?, spec, peer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::methods::MethodArg;

    fn spec(pci: Option<&str>) -> EndSpec {
        EndSpec {
            pci: pci.map(str::to_string),
            ..EndSpec::new(MethodArg::Vfio)
        }
    }

    #[test]
    fn descriptors_of_all_ethernet_methods_are_peers() {
        let v = "vfio:52:54:00:bc:10:0a@0000:01:00.0";
        let p = "packet:02:bc:01:00:00:01/2";
        let x = "afxdp:02:bc:01:00:00:03/7";
        assert_eq!(ethernet_peer(v, "vfio").unwrap().to_string(), v);
        assert_eq!(
            ethernet_peer(p, "vfio").unwrap().to_string(),
            "vfio:02:bc:01:00:00:01"
        );
        assert_eq!(
            ethernet_peer(x, "vfio").unwrap().to_string(),
            "vfio:02:bc:01:00:00:03"
        );
        assert_eq!(
            ethernet_peer(v, "packet").unwrap().to_string(),
            "packet:52:54:00:bc:10:0a/0"
        );
        assert_eq!(
            ethernet_peer("vfio:52:54:00:bc:10:0a", "afxdp")
                .unwrap()
                .to_string(),
            "afxdp:52:54:00:bc:10:0a/0"
        );
        assert_eq!(
            ethernet_peer(x, "packet").unwrap().to_string(),
            "packet:02:bc:01:00:00:03/7"
        );
        assert_eq!(ethernet_peer(p, "packet").unwrap().to_string(), p);
    }

    #[test]
    fn other_descriptors_are_refused_with_reasons() {
        let e = ethernet_peer("udp:10.0.0.1:5", "vfio").unwrap_err();
        assert!(e.contains("only Ethernet peers"), "{e}");
        let e = ethernet_peer("packet:nomac/2", "vfio").unwrap_err();
        assert!(e.contains("expected a MAC"), "{e}");
        let e = ethernet_peer("vfio 52", "packet").unwrap_err();
        assert!(e.contains("bad descriptor"), "{e}");
    }

    #[test]
    fn opening_says_what_is_missing() {
        // On this machine no NIC is bound to vfio-pci.
        let e = open_method(&spec(None)).err().unwrap();
        assert!(e.contains("--pci ADDRESS"), "{e}");
        let e = open_method(&spec(Some("0000:ff:1f.7"))).err().unwrap();
        assert!(e.contains("no PCI device 0000:ff:1f.7"), "{e}");
        let e = open_method(&spec(Some("not-an-address"))).err().unwrap();
        assert!(e.contains("not-an-address"), "{e}");
        let e = connect(&spec(Some("0000:ff:1f.7")), "udp:1.2.3.4:5")
            .err()
            .unwrap();
        assert!(e.contains("only Ethernet peers"), "{e}");
    }
}
