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
}

impl Cache {
    pub fn new(ttl: Duration) -> Cache {
        Cache { map: HashMap::new(), ttl }
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

    pub fn put(&mut self, c: Cached) {
        self.map.insert(c.entry.name.clone(), c);
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
