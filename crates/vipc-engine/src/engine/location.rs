//! The host-location cache (000 §5.4): logical host → socket address and
//! the incarnation last heard from it, learned from every packet, least
//! recently used entry evicted.

use crate::HostId;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;

/// Host ids are small integers: FxHash suffices (and keeps runs deterministic).
type HashMap<K, V> = rustc_hash::FxHashMap<K, V>;

pub(crate) struct LocationCache {
    capacity: usize,
    tick: u64,
    entries: HashMap<HostId, (SocketAddr, u16, u64)>,
}

impl LocationCache {
    pub fn new(capacity: usize) -> LocationCache {
        LocationCache { capacity: capacity.max(1), tick: 0, entries: HashMap::default() }
    }

    /// Records that `host`, running as `incarnation`, is at `addr`.
    pub fn learn(&mut self, host: HostId, addr: SocketAddr, incarnation: u16) {
        self.tick += 1;
        if let Entry::Occupied(mut e) = self.entries.entry(host) {
            *e.get_mut() = (addr, incarnation, self.tick);
            return;
        }
        if self.entries.len() >= self.capacity {
            if let Some(oldest) = self.entries.iter().min_by_key(|(_, (_, _, t))| *t).map(|(h, _)| *h) {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(host, (addr, incarnation, self.tick));
    }

    /// Where `host` is, if known (and marks it recently used).
    pub fn lookup(&mut self, host: HostId) -> Option<SocketAddr> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(&host).map(|(a, _, t)| {
            *t = tick;
            *a
        })
    }

    /// Where `host` is, if known, without marking it used.
    pub fn peek(&self, host: HostId) -> Option<SocketAddr> {
        self.entries.get(&host).map(|(a, _, _)| *a)
    }

    /// The incarnation last heard from `host`, if known.
    pub fn incarnation(&self, host: HostId) -> Option<u16> {
        self.entries.get(&host).map(|(_, i, _)| *i)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let a = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let mut c = LocationCache::new(2);
        c.learn(1, a(1), 7);
        c.learn(2, a(2), 7);
        assert_eq!(c.lookup(1), Some(a(1)));
        c.learn(3, a(3), 7);
        assert_eq!(c.lookup(2), None, "host 2 was least recently used");
        assert_eq!(c.lookup(1), Some(a(1)));
        assert_eq!(c.lookup(3), Some(a(3)));
        c.learn(1, a(9), 8);
        assert_eq!(c.lookup(1), Some(a(9)), "relearning updates the address");
        assert_eq!(c.incarnation(1), Some(8), "and the incarnation");
        assert_eq!(c.len(), 2);
    }
}
