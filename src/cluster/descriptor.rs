//! Descriptor tables: every method a process can be reached by, with its
//! address and the fabric it is on.
//!
//! A table is what a process publishes at start-up (through the
//! [bootstrap](super::bootstrap)) and what a peer chooses a method from on
//! first send. It is versioned and small: a compact JSON object of a few
//! hundred bytes, e.g.
//!
//! ```json
//! {"version":1,"node":"3f2a9c1d-f0000098","host":"a1",
//!  "entries":[{"method":"shm","address":"7.0@3f2a9c1d-f0000098"},
//!             {"method":"afxdp","address":"02:bc:01:00:00:01/2","fabric":"A"},
//!             {"method":"udp","address":"10.77.8.1:40112","fabric":"A"}]}
//! ```

use bcl_core::method::Descriptor;
use serde::{Deserialize, Serialize};

/// The version of the table format this build writes and reads.
pub const TABLE_VERSION: u32 = 1;
/// Largest table accepted from a peer, in bytes of its text form.
pub const MAX_TABLE_BYTES: usize = 8192;
/// Most entries accepted in one table.
pub const MAX_ENTRIES: usize = 32;

/// One way of reaching a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorEntry {
    /// The method's name (`shm`, `afxdp`, `packet`, `udp`, ...).
    pub method: String,
    /// The address in that method's syntax.
    pub address: String,
    /// The fabric (L2 segment) the address is on; none for node-local
    /// methods and when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
}

impl DescriptorEntry {
    /// The entry as a method descriptor.
    pub fn descriptor(&self) -> Descriptor {
        Descriptor::new(self.method.clone(), self.address.clone())
    }
}

/// Every method a process can be reached by (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescriptorTable {
    /// Format version, [`TABLE_VERSION`].
    pub version: u32,
    /// The node identity (see [`node_identity`](super::node_identity)):
    /// equal identities share memory.
    pub node: String,
    /// The node's name in the cluster configuration, or its host name; for
    /// people.
    #[serde(default)]
    pub host: String,
    /// The methods, in the publisher's order of preference.
    pub entries: Vec<DescriptorEntry>,
}

/// A table that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// Written by a build with another table format.
    #[error("descriptor table version {found}, this build reads version {expected}")]
    Version {
        /// The version in the table.
        found: u64,
        /// The version this build reads.
        expected: u32,
    },
    /// Larger than [`MAX_TABLE_BYTES`] or with more than [`MAX_ENTRIES`].
    #[error("descriptor table too large ({0})")]
    TooLarge(String),
    /// Not a table.
    #[error("malformed descriptor table: {0}")]
    Malformed(String),
}

impl DescriptorTable {
    /// An empty table for a process on node `node`.
    pub fn new(node: impl Into<String>, host: impl Into<String>) -> Self {
        Self {
            version: TABLE_VERSION,
            node: node.into(),
            host: host.into(),
            entries: Vec::new(),
        }
    }

    /// Adds `descriptor`, on `fabric` if known.
    pub fn push(&mut self, descriptor: &Descriptor, fabric: Option<&str>) {
        self.entries.push(DescriptorEntry {
            method: descriptor.method.clone(),
            address: descriptor.address.clone(),
            fabric: fabric.map(str::to_string),
        });
    }

    /// The entries of `method`.
    pub fn entries_of<'a>(&'a self, method: &'a str) -> impl Iterator<Item = &'a DescriptorEntry> {
        self.entries.iter().filter(move |e| e.method == method)
    }

    /// The method names, in table order, without repeats.
    pub fn methods(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for e in &self.entries {
            if !out.contains(&e.method.as_str()) {
                out.push(&e.method);
            }
        }
        out
    }

    /// The compact text form (one line of JSON).
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("a descriptor table always serialises")
    }

    /// Parses the text form, checking the version first (so a table of
    /// another version is reported as such, not as malformed) and the size.
    pub fn from_text(text: &str) -> Result<Self, TableError> {
        if text.len() > MAX_TABLE_BYTES {
            return Err(TableError::TooLarge(format!(
                "{} bytes, at most {MAX_TABLE_BYTES}",
                text.len()
            )));
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| TableError::Malformed(e.to_string()))?;
        Self::from_value(value)
    }

    /// Like [`from_text`](Self::from_text), from parsed JSON.
    pub fn from_value(value: serde_json::Value) -> Result<Self, TableError> {
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| TableError::Malformed("no numeric `version`".into()))?;
        if version != u64::from(TABLE_VERSION) {
            return Err(TableError::Version {
                found: version,
                expected: TABLE_VERSION,
            });
        }
        let table: DescriptorTable =
            serde_json::from_value(value).map_err(|e| TableError::Malformed(e.to_string()))?;
        if table.entries.len() > MAX_ENTRIES {
            return Err(TableError::TooLarge(format!(
                "{} entries, at most {MAX_ENTRIES}",
                table.entries.len()
            )));
        }
        for e in &table.entries {
            let token = e.descriptor().to_string();
            if e.method.is_empty() || e.address.is_empty() || token.contains(char::is_whitespace) {
                return Err(TableError::Malformed(format!(
                    "entry {token:?}: method and address must be non-empty, without spaces"
                )));
            }
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> DescriptorTable {
        let mut t = DescriptorTable::new("abcd-1", "a1");
        t.push(&"shm:7.0@abcd-1".parse().unwrap(), None);
        t.push(&"afxdp:02:bc:01:00:00:01/2".parse().unwrap(), Some("A"));
        t.push(&"udp:10.77.8.1:40112".parse().unwrap(), Some("A"));
        t
    }

    #[test]
    fn tables_round_trip_and_are_small() {
        let t = sample();
        let text = t.to_text();
        assert!(!text.contains('\n'));
        assert!(text.len() < 300, "{} bytes: {text}", text.len());
        assert_eq!(DescriptorTable::from_text(&text).unwrap(), t);
        assert_eq!(t.methods(), vec!["shm", "afxdp", "udp"]);
        assert_eq!(t.entries_of("udp").count(), 1);
    }

    #[test]
    fn other_versions_and_garbage_are_refused_by_name() {
        let text = sample().to_text().replace("\"version\":1", "\"version\":2");
        assert_eq!(
            DescriptorTable::from_text(&text).unwrap_err(),
            TableError::Version {
                found: 2,
                expected: TABLE_VERSION
            }
        );
        for bad in ["", "[]", "{\"version\":1}", "{\"version\":\"1\"}", "nul"] {
            assert!(matches!(
                DescriptorTable::from_text(bad),
                Err(TableError::Malformed(_))
            ));
        }
        let spaced = sample()
            .to_text()
            .replace("10.77.8.1:40112", "10.77.8.1 :1");
        assert!(matches!(
            DescriptorTable::from_text(&spaced),
            Err(TableError::Malformed(_))
        ));
        let big = format!(
            "{{\"version\":1,\"pad\":\"{}\"}}",
            "x".repeat(MAX_TABLE_BYTES)
        );
        assert!(matches!(
            DescriptorTable::from_text(&big),
            Err(TableError::TooLarge(_))
        ));
    }
}
