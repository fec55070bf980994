//! The one descriptor grammar of the Ethernet methods.
//!
//! ```text
//! METHOD:MAC[/IFINDEX][@PCI]
//! packet:02:bc:01:00:00:02/3
//! afxdp:02:bc:01:00:00:02/3
//! vfio:52:54:00:12:34:56@0000:00:02.0
//! ```
//!
//! The MAC is what matters: it is what peers put in the destination field.
//! The interface index (on the descriptor's own host) and the PCI address
//! of the NIC are for people; each method prints what it knows and every
//! Ethernet method parses every form. Since all of them put the same
//! frames on the wire, a descriptor of one Ethernet method is opened by
//! another with only the method name changed
//! ([`ETHERNET_METHODS`]).

use crate::mac::Mac;
use bcl_core::method::{Descriptor, MethodError};
use std::fmt;

/// The methods that speak this grammar and put the same frames on the
/// wire; each opens a link from a descriptor of any of them.
pub const ETHERNET_METHODS: [&str; 4] = ["packet", "afxdp", "vfio", "bcld"];

/// The address part of an Ethernet method's descriptor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DescriptorAddress {
    /// The station's MAC (unicast).
    pub mac: Mac,
    /// Its interface index on its own host, when it has one (informational).
    pub ifindex: Option<u32>,
    /// The PCI address of its NIC, when the method drives one
    /// (informational, e.g. `0000:00:02.0`).
    pub pci: Option<String>,
}

impl DescriptorAddress {
    /// The address of a station with MAC `mac` and nothing else known.
    pub fn new(mac: Mac) -> Self {
        DescriptorAddress {
            mac,
            ifindex: None,
            pci: None,
        }
    }

    /// With interface index `ifindex`.
    pub fn with_ifindex(mut self, ifindex: u32) -> Self {
        self.ifindex = Some(ifindex);
        self
    }

    /// With PCI address `pci` (its text form, as printed by the driver).
    pub fn with_pci(mut self, pci: impl Into<String>) -> Self {
        self.pci = Some(pci.into());
        self
    }
}

impl fmt::Display for DescriptorAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.mac)?;
        if let Some(i) = self.ifindex {
            write!(f, "/{i}")?;
        }
        if let Some(p) = &self.pci {
            write!(f, "@{p}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for DescriptorAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let form =
            "MAC[/IFINDEX][@PCI], e.g. 02:bc:01:00:00:02/3 or 52:54:00:12:34:56@0000:00:02.0";
        let (rest, pci) = match s.split_once('@') {
            Some((r, p)) => (r, Some(p)),
            None => (s, None),
        };
        let (mac, ifindex) = match rest.split_once('/') {
            Some((m, i)) => (m, Some(i)),
            None => (rest, None),
        };
        let mac: Mac = mac
            .parse()
            .map_err(|e: String| format!("{s:?} is not {form}: {e}"))?;
        if mac.is_multicast() {
            return Err(format!(
                "{s:?}: {mac} is a multicast address, which cannot name a station"
            ));
        }
        let ifindex = match ifindex {
            None => None,
            Some(i) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => Some(
                i.parse::<u32>()
                    .map_err(|_| format!("{s:?}: interface index {i:?} is out of range"))?,
            ),
            Some(i) => {
                return Err(format!(
                    "{s:?} is not {form}: interface index {i:?} is not a number"
                ))
            }
        };
        let pci = match pci {
            None => None,
            Some(p) if is_pci_address(p) => Some(p.to_string()),
            Some(p) => {
                return Err(format!(
                    "{s:?} is not {form}: {p:?} is not a PCI address ([DDDD:]BB:DD.F)"
                ))
            }
        };
        Ok(DescriptorAddress { mac, ifindex, pci })
    }
}

/// Whether `s` has the shape of a PCI address, `[DDDD:]BB:DD.F` in hex.
fn is_pci_address(s: &str) -> bool {
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    let (head, func) = match s.rsplit_once('.') {
        Some(x) => x,
        None => return false,
    };
    if !(func.len() == 1 && matches!(func.as_bytes()[0], b'0'..=b'7')) {
        return false;
    }
    let parts: Vec<&str> = head.split(':').collect();
    let (bus, dev) = match parts.as_slice() {
        [d, b, v] if hex(d, 4) => (*b, *v),
        [b, v] => (*b, *v),
        _ => return false,
    };
    hex(bus, 2) && hex(dev, 2) && u8::from_str_radix(dev, 16).is_ok_and(|d| d < 32)
}

/// The MAC of `peer` for method `method` whose own MAC is `own`: the
/// descriptor must be of an Ethernet method ([`ETHERNET_METHODS`]), parse
/// in the grammar above and name another station.
pub fn peer_mac(method: &'static str, own: Mac, peer: &Descriptor) -> Result<Mac, MethodError> {
    let bad = |reason: String| MethodError::BadDescriptor {
        method,
        descriptor: peer.clone(),
        reason,
    };
    if !ETHERNET_METHODS.contains(&peer.method.as_str()) {
        return Err(bad(format!(
            "it is for method {:?}, not one of the Ethernet methods ({})",
            peer.method,
            ETHERNET_METHODS.join(", ")
        )));
    }
    let a: DescriptorAddress = peer.address.parse().map_err(bad)?;
    if a.mac == own {
        return Err(bad(format!("{} is this endpoint's own MAC", a.mac)));
    }
    Ok(a.mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const M: Mac = Mac([2, 0xbc, 1, 0, 0, 2]);

    #[test]
    fn every_form_parses_and_prints_back() {
        for (text, want) in [
            ("02:bc:01:00:00:02", DescriptorAddress::new(M)),
            (
                "02:bc:01:00:00:02/3",
                DescriptorAddress::new(M).with_ifindex(3),
            ),
            (
                "02:bc:01:00:00:02@0000:00:02.0",
                DescriptorAddress::new(M).with_pci("0000:00:02.0"),
            ),
            (
                "02:bc:01:00:00:02/0@00:1f.7",
                DescriptorAddress::new(M)
                    .with_ifindex(0)
                    .with_pci("00:1f.7"),
            ),
        ] {
            let a: DescriptorAddress = text.parse().unwrap();
            assert_eq!(a, want, "{text}");
            assert_eq!(a.to_string(), text);
        }
        assert_eq!(
            "02-BC-01-00-00-02/3".parse::<DescriptorAddress>().unwrap(),
            DescriptorAddress::new(M).with_ifindex(3)
        );
    }

    #[test]
    fn bad_addresses_say_why() {
        for (bad, why) in [
            ("", "not a MAC"),
            ("02:bc:01:00:00", "not a MAC"),
            ("02:bc:01:00:00:02/", "not a number"),
            ("02:bc:01:00:00:02/x", "not a number"),
            ("02:bc:01:00:00:02/99999999999", "out of range"),
            ("02:bc:01:00:00:02@to-b", "not a PCI address"),
            ("02:bc:01:00:00:02@0000:00:20.0", "not a PCI address"),
            ("02:bc:01:00:00:02@00:02.8", "not a PCI address"),
            ("02:bc:01:00:00:02@3/4", "not a PCI address"),
            ("01:00:5e:00:00:01/3", "multicast"),
            ("ff:ff:ff:ff:ff:ff", "multicast"),
        ] {
            let e = bad.parse::<DescriptorAddress>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn any_ethernet_method_name_is_taken_and_the_mac_checked() {
        let own = Mac([2, 0, 0, 0, 0, 1]);
        for m in ETHERNET_METHODS {
            let d = Descriptor::new(m, "02:bc:01:00:00:02@0000:00:02.0");
            assert_eq!(peer_mac("afxdp", own, &d).unwrap(), M);
        }
        let e = peer_mac("vfio", own, &"udp:10.0.0.1:7".parse().unwrap()).unwrap_err();
        assert!(
            matches!(&e, MethodError::BadDescriptor { method: "vfio", .. }),
            "{e}"
        );
        let e = peer_mac(
            "packet",
            own,
            &"packet:02:00:00:00:00:01/2".parse().unwrap(),
        );
        assert!(e.unwrap_err().to_string().contains("own MAC"));
    }

    proptest! {
        #[test]
        fn arbitrary_text_is_parsed_or_refused_without_panic(s in "[0-9a-fA-F:/@.\\-x]{0,40}") {
            if let Ok(a) = s.parse::<DescriptorAddress>() {
                prop_assert_eq!(a.to_string().parse::<DescriptorAddress>(), Ok(a));
            }
        }

        #[test]
        fn any_unicode_is_refused_or_parsed_without_panic(s in "\\PC{0,40}") {
            let _ = s.parse::<DescriptorAddress>();
        }
    }
}
