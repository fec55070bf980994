//! Interfaces: finding the one to use, its index and MAC address.

use crate::mac::Mac;
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;

/// What the method needs to know about its interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its MAC address.
    pub mac: Mac,
    /// Whether it is up.
    pub up: bool,
    /// Whether it is a loopback interface.
    pub loopback: bool,
}

/// Why no interface could be chosen.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InterfaceError {
    /// The named interface does not exist here.
    #[error("no interface named {name:?} in this network namespace (interfaces: {known})")]
    NotFound {
        /// The name asked for.
        name: String,
        /// The interfaces that exist.
        known: String,
    },
    /// No name given and no candidate.
    #[error("no interface is up apart from loopback; name one with --ifname")]
    NoneUp,
    /// No name given and several candidates.
    #[error("several interfaces are up ({0}); choose one with --ifname")]
    Several(String),
    /// The interface list could not be read.
    #[error("cannot list the interfaces: {0}")]
    List(String),
}

/// Every interface with a link-layer address, in the calling thread's
/// network namespace.
pub fn interfaces() -> Result<Vec<Interface>, InterfaceError> {
    let mut out: Vec<Interface> = Vec::new();
    for ifa in getifaddrs().map_err(|e| InterfaceError::List(e.to_string()))? {
        let Some(link) = ifa.address.as_ref().and_then(|a| a.as_link_addr()) else {
            continue;
        };
        if out.iter().any(|i| i.name == ifa.interface_name) {
            continue;
        }
        out.push(Interface {
            name: ifa.interface_name.clone(),
            index: link.ifindex() as u32,
            mac: Mac(link.addr().unwrap_or_default()),
            up: ifa.flags.contains(InterfaceFlags::IFF_UP),
            loopback: ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK),
        });
    }
    Ok(out)
}

/// The interface named `name`, or else the only non-loopback interface
/// that is up.
pub fn choose_interface(name: Option<&str>) -> Result<Interface, InterfaceError> {
    let all = interfaces()?;
    pick(&all, name)
}

fn pick(all: &[Interface], name: Option<&str>) -> Result<Interface, InterfaceError> {
    if let Some(name) = name {
        return all.iter().find(|i| i.name == name).cloned().ok_or_else(|| {
            InterfaceError::NotFound {
                name: name.to_string(),
                known: names(all.iter()),
            }
        });
    }
    let up: Vec<&Interface> = all.iter().filter(|i| i.up && !i.loopback).collect();
    match up.as_slice() {
        [] => Err(InterfaceError::NoneUp),
        [one] => Ok((*one).clone()),
        many => Err(InterfaceError::Several(names(many.iter().copied()))),
    }
}

fn names<'a>(it: impl Iterator<Item = &'a Interface>) -> String {
    let mut v: Vec<&str> = it.map(|i| i.name.as_str()).collect();
    v.sort_unstable();
    v.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, up: bool, loopback: bool) -> Interface {
        Interface {
            name: name.into(),
            index: 1,
            mac: Mac([2, 0, 0, 0, 0, 1]),
            up,
            loopback,
        }
    }

    #[test]
    fn the_only_up_interface_is_chosen_or_the_choice_is_explained() {
        let lo = iface("lo", true, true);
        let a = iface("to-b", true, false);
        let b = iface("to-c", true, false);
        let down = iface("eth9", false, false);
        assert_eq!(
            pick(&[lo.clone(), a.clone(), down.clone()], None).unwrap(),
            a
        );
        assert_eq!(
            pick(std::slice::from_ref(&lo), None),
            Err(InterfaceError::NoneUp)
        );
        let e = pick(&[lo.clone(), a.clone(), b.clone()], None).unwrap_err();
        assert_eq!(e, InterfaceError::Several("to-b, to-c".into()));
        assert!(e.to_string().contains("--ifname"));
        assert_eq!(
            pick(&[lo.clone(), a.clone(), b.clone()], Some("to-c")).unwrap(),
            b
        );
        let e = pick(&[lo, a], Some("nope")).unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("lo, to-b"), "{e}");
    }

    #[test]
    fn loopback_is_listed() {
        let all = interfaces().unwrap();
        assert!(all.iter().any(|i| i.loopback), "{all:?}");
    }
}
