//! Addressing: nodes, ports, processes and jobs.

use std::fmt;
use std::str::FromStr;

/// One host (one operating-system instance) in the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct NodeId(pub u32);

/// A communication endpoint inside a process on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PortId(pub u16);

/// The global name of a process: the node it runs on and its port there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ProcessAddr {
    /// The node the process runs on.
    pub node: NodeId,
    /// The port the process opened on that node.
    pub port: PortId,
}

impl ProcessAddr {
    /// The process at `port` on `node`.
    pub const fn new(node: u32, port: u16) -> Self {
        Self {
            node: NodeId(node),
            port: PortId(port),
        }
    }
}

impl fmt::Display for ProcessAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.node.0, self.port.0)
    }
}

/// Error from parsing a [`ProcessAddr`] written as `NODE.PORT`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad process address {0:?}: expected NODE.PORT, e.g. 3.1")]
pub struct ProcessAddrParseError(pub String);

impl FromStr for ProcessAddr {
    type Err = ProcessAddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ProcessAddrParseError(s.to_string());
        let (node, port) = s.split_once('.').ok_or_else(err)?;
        Ok(ProcessAddr {
            node: NodeId(node.parse().map_err(|_| err())?),
            port: PortId(port.parse().map_err(|_| err())?),
        })
    }
}

/// The key of a job: frames carrying another job's key are dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct JobKey(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_addr_round_trips_through_text() {
        let a = ProcessAddr::new(7, 3);
        assert_eq!(a.to_string(), "7.3");
        assert_eq!("7.3".parse::<ProcessAddr>().unwrap(), a);
        assert!("7".parse::<ProcessAddr>().is_err());
        assert!("7.x".parse::<ProcessAddr>().is_err());
        assert!("7.70000".parse::<ProcessAddr>().is_err());
    }
}
