//! The names this mount changed lately, each with the epoch of its last change: a directory listing read at
//! some epoch is out of date for exactly these names, whether or not the kernel holds a node for them.
//!
//! The log keeps the latest [`KEPT`] changes. What falls off raises a floor: a listing older than the floor
//! may miss a change the log no longer names, so every one of its names counts as changed.

use std::collections::{HashMap, VecDeque};

/// Most changes remembered by name.
pub(crate) const KEPT: usize = 4096;

/// Changed names and when.
#[derive(Debug, Default)]
pub(crate) struct ChangeLog {
    /// Each name's latest change.
    by_path: HashMap<String, u64>,
    /// Changes in the order they were made (a name changed twice is here twice).
    order: VecDeque<(u64, String)>,
    /// The latest epoch forgotten: what began before it cannot be told from the log.
    floor: u64,
}

impl ChangeLog {
    /// `path` changed at `epoch` (epochs only grow).
    pub fn record(&mut self, path: &str, epoch: u64) {
        self.by_path.insert(path.to_string(), epoch);
        self.order.push_back((epoch, path.to_string()));
        while self.order.len() > KEPT {
            let (old, p) = self.order.pop_front().expect("longer than KEPT");
            if self.by_path.get(&p) == Some(&old) {
                self.by_path.remove(&p);
            }
            self.floor = self.floor.max(old);
        }
    }

    /// Whether `path` may have changed after epoch `since`.
    pub fn changed_since(&self, path: &str, since: u64) -> bool {
        since < self.floor || self.by_path.get(path).is_some_and(|&at| at > since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_counts_as_changed_for_what_began_before_its_change() {
        let mut log = ChangeLog::default();
        log.record("a", 5);
        assert!(log.changed_since("a", 4));
        assert!(!log.changed_since("a", 5), "began after the change");
        assert!(!log.changed_since("b", 0), "never changed");
        log.record("a", 9);
        assert!(log.changed_since("a", 5), "the latest change counts");
    }

    #[test]
    fn what_falls_off_the_log_makes_every_older_listing_out_of_date() {
        let mut log = ChangeLog::default();
        log.record("first", 1);
        for e in 2..=KEPT as u64 + 1 {
            log.record("busy", e);
        }
        assert_eq!(log.order.len(), KEPT);
        assert!(!log.by_path.contains_key("first"), "forgotten");
        assert!(log.changed_since("first", 0), "so anything begun before it is out of date");
        assert!(log.changed_since("other", 0));
        assert!(!log.changed_since("other", 1), "begun after what was forgotten");
        assert!(log.changed_since("busy", 1) && !log.changed_since("busy", KEPT as u64 + 1));
        assert_eq!(log.by_path.len(), 1, "a name changed many times is one entry");
    }
}
