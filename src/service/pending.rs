//! The requests of an endpoint awaiting their answer.
//!
//! Request numbers count up from 0 across all peers, so the recent ones
//! are consecutive: each has the slot `number mod size` of a table whose
//! size is a power of two, found with a mask and checked by the number and
//! peer kept in it — no hashing on the round trip's path. A request whose
//! slot is wanted by a newer one while it is still pending (the table is
//! too small for the requests in flight) makes the table double, up to
//! [`MAX_SLOTS`]; past that, the older request moves to a hash map, so one
//! stuck request does not keep the table growing.

use super::RequestId;
use bcl_core::ProcessAddr;
use rustc_hash::FxHashMap as HashMap;

/// Slots the table starts with (at the first request).
const FIRST_SLOTS: usize = 64;
/// Slots the table grows to at most.
const MAX_SLOTS: usize = 4096;

#[derive(Clone, Copy)]
struct Slot {
    number: u32,
    handler: u32,
    peer: ProcessAddr,
}

/// Pending requests: the handler each asked for, by request.
#[derive(Default)]
pub(super) struct PendingTable {
    slots: Vec<Option<Slot>>,
    /// Requests moved out of a full table.
    old: HashMap<RequestId, u32>,
    count: usize,
}

impl PendingTable {
    /// Requests pending.
    pub fn len(&self) -> usize {
        self.count
    }

    #[inline]
    fn index(&self, number: u32) -> usize {
        number as usize & (self.slots.len().wrapping_sub(1))
    }

    /// Whether `request` is pending.
    pub fn contains(&self, request: RequestId) -> bool {
        let in_table = !self.slots.is_empty()
            && self.slots[self.index(request.number)]
                .is_some_and(|s| s.number == request.number && s.peer == request.peer);
        in_table || self.old.contains_key(&request)
    }

    /// Adds `request` for `handler`.
    #[inline]
    pub fn insert(&mut self, request: RequestId, handler: u32) {
        if self.slots.is_empty() {
            self.slots = vec![None; FIRST_SLOTS];
        }
        let new = Slot {
            number: request.number,
            handler,
            peer: request.peer,
        };
        loop {
            let i = self.index(request.number);
            match self.slots[i] {
                Some(_) if self.slots.len() < MAX_SLOTS => self.grow(),
                Some(s) => {
                    let older = RequestId {
                        peer: s.peer,
                        number: s.number,
                    };
                    self.old.insert(older, s.handler);
                    self.slots[i] = Some(new);
                    break;
                }
                None => {
                    self.slots[i] = Some(new);
                    break;
                }
            }
        }
        self.count += 1;
    }

    /// Doubles the table, placing every entry anew.
    #[cold]
    fn grow(&mut self) {
        let size = self.slots.len() * 2;
        let entries = std::mem::replace(&mut self.slots, vec![None; size]);
        for s in entries.into_iter().flatten() {
            let i = self.index(s.number);
            // Two pending numbers a multiple of the new size apart (only
            // after the numbers wrapped): the older goes to the map.
            if let Some(o) = self.slots[i].replace(s) {
                let older = RequestId {
                    peer: o.peer,
                    number: o.number,
                };
                self.old.insert(older, o.handler);
            }
        }
    }

    /// Removes `request`; its handler, if it was pending.
    #[inline]
    pub fn remove(&mut self, request: RequestId) -> Option<u32> {
        if !self.slots.is_empty() {
            let i = self.index(request.number);
            if let Some(s) = self.slots[i] {
                if s.number == request.number && s.peer == request.peer {
                    self.slots[i] = None;
                    self.count -= 1;
                    return Some(s.handler);
                }
            }
        }
        let h = self.old.remove(&request)?;
        self.count -= 1;
        Some(h)
    }

    /// The pending requests to `peer`, with their handlers.
    pub fn to_peer(&self, peer: ProcessAddr) -> Vec<(RequestId, u32)> {
        let recent = self
            .slots
            .iter()
            .flatten()
            .filter(|s| s.peer == peer)
            .map(|s| {
                let r = RequestId {
                    peer,
                    number: s.number,
                };
                (r, s.handler)
            });
        let old = self
            .old
            .iter()
            .filter(|(r, _)| r.peer == peer)
            .map(|(r, h)| (*r, *h));
        recent.chain(old).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(peer: u32, number: u32) -> RequestId {
        RequestId {
            peer: ProcessAddr::new(peer, 0),
            number,
        }
    }

    #[test]
    fn answers_in_any_order_and_a_stuck_request_moves_out_of_the_table() {
        let mut t = PendingTable::default();
        let start = u32::MAX - 10; // across the wrap of the numbers
        let n = MAX_SLOTS as u32 + 100;
        for k in 0..n {
            t.insert(req(k % 3, start.wrapping_add(k)), k);
        }
        assert_eq!(t.len(), n as usize);
        assert_eq!(t.slots.len(), MAX_SLOTS, "grown to the largest");
        assert_eq!(t.old.len(), 100, "the oldest moved to the map");
        assert!(t.contains(req(0, start)));
        assert_eq!(t.remove(req(1, start)), None, "wrong peer");
        // Answer all but the very first, last first.
        for k in (1..n).rev() {
            assert_eq!(t.remove(req(k % 3, start.wrapping_add(k))), Some(k));
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.to_peer(ProcessAddr::new(0, 0)), vec![(req(0, start), 0)]);
        assert_eq!(t.remove(req(0, start)), Some(0));
        assert_eq!(t.len(), 0);
        assert!(!t.contains(req(0, start)));
        t.insert(req(2, 5), 9);
        assert_eq!(t.remove(req(2, 5)), Some(9));
        assert!(!t.contains(req(2, 5)));
    }

    #[test]
    fn a_small_flight_keeps_the_first_table() {
        let mut t = PendingTable::default();
        for k in 0..100_000u32 {
            t.insert(req(1, k), 1);
            if k >= 10 {
                assert_eq!(t.remove(req(1, k - 10)), Some(1));
            }
        }
        assert_eq!(t.slots.len(), FIRST_SLOTS);
        assert_eq!(t.len(), 10);
    }
}
