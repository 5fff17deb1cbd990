//! The names this mount changed lately, each with the epoch of its last change: a directory listing read at
//! some epoch is out of date for exactly these names, whether or not the kernel holds a node for them.
//!
//! The log keeps the [`KEPT`] names changed last, each once (a file written again and again is one name).
//! What falls off raises a floor: a listing older than the floor may miss a change the log no longer names,
//! so every one of its names counts as changed.

use std::collections::{BTreeSet, HashMap};

/// Most names remembered.
pub(crate) const KEPT: usize = 4096;

/// Changed names and when.
#[derive(Debug, Default)]
pub(crate) struct ChangeLog {
    /// Each name's latest change.
    by_path: HashMap<String, u64>,
    /// The same, oldest first.
    order: BTreeSet<(u64, String)>,
    /// The latest epoch forgotten: what began before it cannot be told from the log.
    floor: u64,
}

impl ChangeLog {
    /// `path` changed at `epoch` (epochs only grow).
    pub fn record(&mut self, path: &str, epoch: u64) {
        if let Some(old) = self.by_path.insert(path.to_string(), epoch) {
            self.order.remove(&(old, path.to_string()));
        }
        self.order.insert((epoch, path.to_string()));
        while self.order.len() > KEPT {
            let (old, p) = self.order.pop_first().expect("longer than KEPT");
            self.by_path.remove(&p);
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
        // A name changed many times is one entry: nothing falls off.
        for e in 2..=3 * KEPT as u64 {
            log.record("busy", e);
        }
        assert_eq!((log.order.len(), log.by_path.len(), log.floor), (2, 2, 0));
        assert!(!log.changed_since("other", 0));
        let last = 3 * KEPT as u64;
        for (i, e) in (last + 1..=last + KEPT as u64).enumerate() {
            log.record(&format!("n{i}"), e);
        }
        assert_eq!(log.order.len(), KEPT);
        assert!(!log.by_path.contains_key("first") && !log.by_path.contains_key("busy"), "forgotten");
        assert!(log.changed_since("first", 0), "so anything begun before it is out of date");
        assert!(log.changed_since("other", last - 1));
        assert!(!log.changed_since("other", last), "begun after what was forgotten");
        assert!(log.changed_since("n5", last) && !log.changed_since("n5", last + KEPT as u64));
    }
}
