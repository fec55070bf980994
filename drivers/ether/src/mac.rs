//! MAC addresses: the one type every Ethernet method uses and its text
//! form.

use std::fmt;

/// An Ethernet MAC address (six octets, in the order they are sent).
///
/// Text form: six two-digit hex octets separated by `:` (printed in lower
/// case); parsing also takes upper case and `-` as the separator
/// (`02-BC-00-00-00-01`), one separator throughout.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// The broadcast address, `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: Mac = Mac([0xff; 6]);

    /// Whether the group bit (bit 0 of the first octet) is set: a multicast
    /// address, broadcast included. Such an address never names a station.
    #[inline]
    pub const fn is_multicast(self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this is the broadcast address.
    #[inline]
    pub fn is_broadcast(self) -> bool {
        self == Mac::BROADCAST
    }

    /// Whether this names one station (the group bit is clear).
    #[inline]
    pub const fn is_unicast(self) -> bool {
        !self.is_multicast()
    }

    /// The six octets.
    #[inline]
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// The address in `bytes`, which must be exactly six octets long.
    pub fn from_bytes(bytes: &[u8]) -> Option<Mac> {
        bytes.try_into().ok().map(Mac)
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mac({self})")
    }
}

impl std::str::FromStr for Mac {
    type Err = String;

    fn from_str(s: &str) -> Result<Mac, String> {
        let err = || {
            format!("{s:?} is not a MAC address (six two-digit hex bytes separated by ':' or '-')")
        };
        let b = s.as_bytes();
        // Exactly "hh?hh?hh?hh?hh?hh": 17 bytes, one separator throughout.
        if b.len() != 17 {
            return Err(err());
        }
        let sep = b[2];
        if sep != b':' && sep != b'-' {
            return Err(err());
        }
        let mut out = [0u8; 6];
        for (i, o) in out.iter_mut().enumerate() {
            let at = i * 3;
            if i > 0 && b[at - 1] != sep {
                return Err(err());
            }
            let hi = hex(b[at]).ok_or_else(err)?;
            let lo = hex(b[at + 1]).ok_or_else(err)?;
            *o = hi << 4 | lo;
        }
        Ok(Mac(out))
    }
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl From<[u8; 6]> for Mac {
    fn from(octets: [u8; 6]) -> Mac {
        Mac(octets)
    }
}

impl From<Mac> for [u8; 6] {
    fn from(mac: Mac) -> [u8; 6] {
        mac.0
    }
}

impl PartialEq<[u8; 6]> for Mac {
    fn eq(&self, other: &[u8; 6]) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Mac> for [u8; 6] {
    fn eq(&self, other: &Mac) -> bool {
        *self == other.0
    }
}

impl AsRef<[u8]> for Mac {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn macs_round_trip_and_bad_ones_are_explained() {
        let m: Mac = "02:bc:0a:00:00:ff".parse().unwrap();
        assert_eq!(m, Mac([2, 0xbc, 0x0a, 0, 0, 0xff]));
        assert_eq!(m.to_string(), "02:bc:0a:00:00:ff");
        assert_eq!(format!("{m:?}"), "Mac(02:bc:0a:00:00:ff)");
        assert_eq!("02-BC-0A-00-00-FF".parse::<Mac>(), Ok(m));
        for bad in [
            "02:bc:0a:00:00",
            "02:bc:0a:00:00:ff:01",
            "zz:00:00:00:00:00",
            "020:0:0:0:0:0",
            "2:0:0:0:2:a",
            "02:bc-0a:00:00:ff",
            "02.bc.0a.00.00.ff",
            "+2:bc:0a:00:00:ff",
            "02:bc:0a:00:00:f\u{e9}",
            "",
        ] {
            assert!(
                bad.parse::<Mac>().unwrap_err().contains("not a MAC"),
                "{bad}"
            );
        }
    }

    #[test]
    fn group_bit_and_conversions() {
        assert!(Mac::BROADCAST.is_multicast() && Mac::BROADCAST.is_broadcast());
        assert!(Mac([1, 0, 0x5e, 0, 0, 1]).is_multicast());
        assert!(Mac([2, 0, 0, 0, 0, 1]).is_unicast());
        let m = Mac([2, 0, 0, 0, 0, 1]);
        assert_eq!(<[u8; 6]>::from(m), [2, 0, 0, 0, 0, 1]);
        assert_eq!(m, [2, 0, 0, 0, 0, 1]);
        assert_eq!([2, 0, 0, 0, 0, 1], m);
        assert_eq!(Mac::from_bytes(&[2, 0, 0, 0, 0, 1]), Some(m));
        assert_eq!(Mac::from_bytes(&[2, 0, 0]), None);
    }

    proptest! {
        #[test]
        fn any_mac_prints_and_parses_back(o in any::<[u8; 6]>()) {
            let m = Mac(o);
            prop_assert_eq!(m.to_string().parse::<Mac>(), Ok(m));
            prop_assert_eq!(m.to_string().replace(':', "-").to_uppercase().parse::<Mac>(), Ok(m));
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panic(s in ".{0,24}") {
            let _ = s.parse::<Mac>();
        }
    }
}
