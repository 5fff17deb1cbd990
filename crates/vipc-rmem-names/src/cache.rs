//! Names pulled from other clerks, kept as hints: a cached binding may have
//! been deleted at its owner since (deletes are lazy and not pushed). An
//! entry is used for at most `ttl`, and [`crate::Clerk::refresh`] re-reads
//! each entry's bucket and purges those whose generation moved on (003
//! §7.3.1's periodic refresh).

use crate::entry::Entry;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vipc::HostId;

/// A pulled entry and where it came from.
#[derive(Clone, Debug)]
pub(crate) struct Cached {
    pub host: HostId,
    pub slot: u32,
    pub incarnation: u32,
    pub entry: Entry,
    pub at: Instant,
}

pub(crate) struct Cache {
    map: HashMap<String, Cached>,
    ttl: Duration,
    /// The size at which `put` next drops the entries past their `ttl`.
    purge_at: usize,
}

/// Fewest entries a purge waits for.
const PURGE_MIN: usize = 64;

impl Cache {
    pub fn new(ttl: Duration) -> Cache {
        Cache { map: HashMap::new(), ttl, purge_at: PURGE_MIN }
    }

    /// The entry of `name` if pulled less than `ttl` ago (an older one is dropped).
    pub fn get(&mut self, name: &str) -> Option<Cached> {
        let c = self.map.get(name)?;
        if c.at.elapsed() < self.ttl {
            return Some(c.clone());
        }
        self.map.remove(name);
        None
    }

    /// Keeps `c`; once the cache has doubled since the last purge, entries
    /// past their `ttl` go (each was dropped only when its name was looked up
    /// again, so every name ever pulled stayed).
    pub fn put(&mut self, c: Cached) {
        self.map.insert(c.entry.name.clone(), c);
        if self.map.len() >= self.purge_at {
            let ttl = self.ttl;
            self.map.retain(|_, c| c.at.elapsed() < ttl);
            self.purge_at = (2 * self.map.len()).max(PURGE_MIN);
        }
    }

    pub fn remove(&mut self, name: &str) {
        self.map.remove(name);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Every entry, for a refresh.
    pub fn snapshot(&self) -> Vec<Cached> {
        self.map.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Binding, EntryState};
    use vipc::Access;

    fn cached(name: &str, at: Instant) -> Cached {
        let binding = Binding { segment: [1; 16], host: 4, size: 8, access: Access::READ, meta: 0 };
        let entry = Entry { state: EntryState::Live, incarnation: 1, generation: 1, name: name.into(), binding };
        Cached { host: 4, slot: 0, incarnation: 1, entry, at }
    }

    #[test]
    fn names_pulled_once_and_never_again_do_not_stay() {
        let mut c = Cache::new(Duration::from_secs(10));
        let Some(old) = Instant::now().checked_sub(Duration::from_secs(60)) else { return }; // just booted
        for i in 0..10_000 {
            c.put(cached(&format!("old{i}"), old));
        }
        assert!(c.len() < PURGE_MIN, "{} expired entries kept", c.len());
        for i in 0..100 {
            c.put(cached(&format!("new{i}"), Instant::now()));
        }
        assert!(c.len() >= 100, "fresh ones are kept");
        assert!(c.get("new7").is_some());
    }
}
