//! Directory read-ahead: when a listing shows subdirectories, their listings are fetched from the server in
//! the background, so that a walk (`find`, `du`, `tar c`) finds the next directory's entries already here
//! instead of waiting a round trip per directory — the directory counterpart of the file server's read-ahead
//! (001 §4).
//!
//! Only a window of the subdirectories ahead of the walk is fetched: opening one asks for the next
//! [`WINDOW`] after it in its parent's listing, so that `ls` of a directory with thousands of subdirectories
//! costs the server a few listings, not thousands.
//!
//! A listing read ahead is used once, only while no change made through this mount can have made it stale
//! (every change bumps an epoch and drops what was read ahead), and only while younger than the attribute
//! TTL; the attributes it carries are handed to the kernel with what is left of that TTL, so another client's
//! change still shows within one TTL.

use crate::inodes::join;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vipc_fs::DirEntry;

/// A directory's entries as read from the server, and when the request for them was made.
#[derive(Debug)]
pub struct Listing {
    /// The entries, without "." and "..".
    pub entries: Vec<DirEntry>,
    /// When the server was asked (the entries are at least this old).
    pub at: Instant,
}

/// Most listings waiting to be fetched; more requests are dropped (the walk then fetches them itself).
const QUEUE: usize = 1024;
/// Most listings kept ready; beyond it, new ones are dropped.
const KEPT: usize = 4096;
/// Most entries of all listings kept ready together (each listing alone
/// may hold millions: a huge directory must not fill memory with copies).
const KEPT_ENTRIES: usize = 1 << 20;
/// Subdirectories read ahead of the one the walk opens.
pub const WINDOW: usize = 16;
/// Most directories whose subdirectories are remembered (the oldest are forgotten all at once).
const ROADS: usize = 256;

/// Reads a directory (by path) from the server.
pub type Fetch = dyn Fn(&str) -> Option<Vec<DirEntry>> + Send + Sync;

struct Shared {
    /// Bumped by every change made through the mount.
    epoch: AtomicU64,
    /// Fetched listings by path. All are from the present epoch: `changed` empties it under the same lock
    /// as it bumps the epoch, and a fetch is kept only if the epoch it began in is still the present one.
    ready: Mutex<HashMap<String, Arc<Listing>>>,
    /// Paths queued or being fetched.
    pending: Mutex<HashSet<String>>,
    /// The subdirectories of directories listed lately, in listing order.
    roads: Mutex<HashMap<String, Arc<Vec<String>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The read-ahead: a queue of directories and the threads that fetch them. Dropping it stops the threads
/// once they finish the fetch in hand.
pub struct DirAhead {
    shared: Arc<Shared>,
    queue: Option<SyncSender<(String, u64)>>,
    /// Listings handed out by [`DirAhead::take`]: read ahead and used.
    used: Arc<AtomicU64>,
}

impl DirAhead {
    /// Read-ahead by `threads` threads calling `fetch`, its listings kept
    /// at most `max_age` (no use after: [`DirAhead::take`] wants younger
    /// ones); with 0 threads it does nothing.
    pub fn new(threads: usize, max_age: Duration, fetch: Arc<Fetch>) -> DirAhead {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            ready: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
            roads: Mutex::new(HashMap::new()),
        });
        if threads == 0 {
            return DirAhead { shared, queue: None, used: Arc::default() };
        }
        let (tx, rx) = sync_channel::<(String, u64)>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let (rx, shared, fetch) = (rx.clone(), shared.clone(), fetch.clone());
            let spawned = std::thread::Builder::new().name(format!("dirahead-{i}")).spawn(move || loop {
                let Ok((path, epoch)) = lock(&rx).recv() else { return };
                let at = Instant::now();
                let got = if shared.epoch.load(Ordering::SeqCst) == epoch { fetch(&path) } else { None };
                let mut ready = lock(&shared.ready);
                if let Some(entries) = got {
                    // Listings nobody took in time make room (and never hold it for good).
                    ready.retain(|_, l| l.at.elapsed() < max_age);
                    // Checked under the lock `changed` clears under: a change after the fetch began wins.
                    let held: usize = ready.values().map(|l| l.entries.len()).sum();
                    let room = ready.len() < KEPT && held + entries.len() <= KEPT_ENTRIES;
                    if shared.epoch.load(Ordering::SeqCst) == epoch && room {
                        ready.insert(path.clone(), Arc::new(Listing { entries, at }));
                    }
                }
                lock(&shared.pending).remove(&path);
            });
            if spawned.is_err() {
                break; // fewer threads (or none): the walk fetches what they would have
            }
        }
        DirAhead { shared, queue: Some(tx), used: Arc::default() }
    }

    /// The count of listings read ahead and used, shared (it outlives the file system handed to the session).
    pub fn used(&self) -> Arc<AtomicU64> {
        self.used.clone()
    }

    /// Directory `path` was listed and holds subdirectories `subdirs` (names, in listing order): the first
    /// [`WINDOW`] of them are read ahead.
    pub fn listed(&self, path: &str, subdirs: Vec<String>) {
        if self.queue.is_none() || subdirs.is_empty() {
            return;
        }
        for name in subdirs.iter().take(WINDOW) {
            self.request(&join(path, name));
        }
        let mut roads = lock(&self.shared.roads);
        if roads.len() >= ROADS {
            roads.clear();
        }
        roads.insert(path.to_string(), Arc::new(subdirs));
    }

    /// Directory `path` is being opened: the [`WINDOW`] subdirectories after it in its parent's listing
    /// are read ahead.
    pub fn opened(&self, path: &str) {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let Some(road) = lock(&self.shared.roads).get(parent).cloned() else { return };
        if let Some(i) = road.iter().position(|n| n == name) {
            for next in road.iter().skip(i + 1).take(WINDOW) {
                self.request(&join(parent, next));
            }
        }
    }

    /// Asks for the listing of the directory at `path` in the background (at most once at a time).
    fn request(&self, path: &str) {
        let Some(queue) = &self.queue else { return };
        if lock(&self.shared.ready).contains_key(path) || !lock(&self.shared.pending).insert(path.to_string()) {
            return;
        }
        let epoch = self.shared.epoch.load(Ordering::SeqCst);
        if queue.try_send((path.to_string(), epoch)).is_err() {
            lock(&self.shared.pending).remove(path); // queue full: the walk will fetch it itself
        }
    }

    /// The listing of `path` read ahead, if there is one younger than `max_age` (it is handed out once).
    pub fn take(&self, path: &str, max_age: Duration) -> Option<Arc<Listing>> {
        let listing = lock(&self.shared.ready).remove(path)?;
        let fresh = (listing.at.elapsed() < max_age).then_some(listing);
        if fresh.is_some() {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        fresh
    }

    /// Something changed through the mount: nothing read ahead so far may be used.
    pub fn changed(&self) {
        let mut ready = lock(&self.shared.ready);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        ready.clear();
    }

    /// Listings kept ready.
    #[cfg(test)]
    fn ready_count(&self) -> usize {
        lock(&self.shared.ready).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc::{channel, Receiver, Sender};
    use vipc_fs::FileKind;

    fn entry(name: &str) -> DirEntry {
        DirEntry { name: name.into(), attr: crate::inodes::tests::attr(1, FileKind::Dir) }
    }

    /// A fetch that lists `[path]` and counts its calls.
    fn counting() -> (Arc<Fetch>, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        (
            Arc::new(move |p: &str| {
                c.fetch_add(1, Ordering::SeqCst);
                Some(vec![entry(p)])
            }),
            calls,
        )
    }

    /// A fetch that waits for a go-ahead per call (to change things while a fetch is in flight).
    fn gated() -> (Arc<Fetch>, Sender<()>, Receiver<()>) {
        let (go_tx, go_rx) = channel::<()>();
        let (started_tx, started_rx) = channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let started_tx = Mutex::new(started_tx);
        let f = move |p: &str| {
            let _ = lock(&started_tx).send(());
            lock(&go_rx).recv().ok()?;
            Some(vec![entry(p)])
        };
        (Arc::new(f), go_tx, started_rx)
    }

    fn wait_ready(a: &DirAhead, n: usize) {
        let t = Instant::now();
        while a.ready_count() < n {
            assert!(t.elapsed() < Duration::from_secs(10), "read-ahead never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_requested_listing_is_taken_once() {
        let (fetch, calls) = counting();
        let a = DirAhead::new(2, Duration::from_secs(60), fetch);
        a.request("d/e");
        wait_ready(&a, 1);
        let l = a.take("d/e", Duration::from_secs(5)).expect("read ahead");
        assert_eq!(l.entries[0].name, "d/e");
        assert!(a.take("d/e", Duration::from_secs(5)).is_none(), "handed out twice");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn listings_kept_ready_hold_at_most_kept_entries_together() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let big = (0..KEPT_ENTRIES / 2 + 1).map(|i| entry(&i.to_string())).collect::<Vec<_>>();
        let fetch: Arc<Fetch> = Arc::new(move |_: &str| {
            c.fetch_add(1, Ordering::SeqCst);
            Some(big.clone())
        });
        let a = DirAhead::new(1, Duration::from_secs(60), fetch);
        for d in ["a", "b", "c"] {
            a.request(d);
        }
        let t = Instant::now();
        while calls.load(Ordering::SeqCst) < 3 || !lock(&a.shared.pending).is_empty() {
            assert!(t.elapsed() < Duration::from_secs(10), "read-ahead never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(a.ready_count(), 1, "a second half-budget listing would pass the bound");
    }

    #[test]
    fn a_ready_listing_is_not_fetched_again() {
        let (fetch, calls) = counting();
        let a = DirAhead::new(1, Duration::from_secs(60), fetch);
        a.request("x");
        wait_ready(&a, 1);
        a.request("x");
        a.request("x");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_change_during_the_fetch_discards_it() {
        let (fetch, go, started) = gated();
        let a = DirAhead::new(1, Duration::from_secs(60), fetch);
        a.request("p");
        started.recv().unwrap();
        a.changed(); // e.g. a write through the mount while the server was listing
        go.send(()).unwrap();
        // The thread is free again once its fetch is done: a new request goes through and is kept.
        a.request("q");
        started.recv().unwrap();
        go.send(()).unwrap();
        wait_ready(&a, 1);
        assert!(a.take("p", Duration::from_secs(5)).is_none(), "a listing older than a change was kept");
        assert!(a.take("q", Duration::from_secs(5)).is_some());
    }

    #[test]
    fn a_change_after_the_fetch_drops_it() {
        let (fetch, _) = counting();
        let a = DirAhead::new(1, Duration::from_secs(60), fetch);
        a.request("a");
        wait_ready(&a, 1);
        a.changed();
        assert!(a.take("a", Duration::from_secs(5)).is_none());
    }

    #[test]
    fn an_old_listing_is_not_used() {
        let (fetch, _) = counting();
        let a = DirAhead::new(1, Duration::from_secs(60), fetch);
        a.request("b");
        wait_ready(&a, 1);
        std::thread::sleep(Duration::from_millis(30));
        assert!(a.take("b", Duration::from_millis(10)).is_none());
    }

    #[test]
    fn listings_nobody_takes_in_time_are_dropped_when_the_next_one_comes() {
        let (fetch, _) = counting();
        let a = DirAhead::new(1, Duration::from_millis(30), fetch);
        for p in ["x", "y", "z"] {
            a.request(p);
        }
        wait_ready(&a, 3);
        std::thread::sleep(Duration::from_millis(40));
        a.request("w");
        let t = Instant::now();
        while a.ready_count() != 1 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(a.ready_count(), 1, "only the new one is kept");
        assert!(a.take("w", Duration::from_secs(5)).is_some());
    }

    #[test]
    fn a_listing_reads_ahead_a_window_that_the_walk_moves() {
        let (fetch, calls) = counting();
        let a = DirAhead::new(2, Duration::from_secs(60), fetch);
        let names: Vec<String> = (0..100).map(|i| format!("s{i:03}")).collect();
        a.listed("top", names);
        wait_ready(&a, WINDOW);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), WINDOW, "more than the window was fetched");
        let age = Duration::from_secs(5);
        assert!(a.take(&format!("top/s{:03}", WINDOW - 1), age).is_some());
        assert!(a.take(&format!("top/s{WINDOW:03}"), age).is_none());
        // The walk opens s010: the window now ends 16 after it (s015, taken above, is fetched again).
        a.opened("top/s010");
        wait_ready(&a, 27);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), WINDOW + 12);
        assert!(a.take("top/s026", age).is_some());
        assert!(a.take("top/s027", age).is_none());
        // One whose parent was never listed moves nothing; a directory of the root is found.
        a.opened("elsewhere/x");
        a.listed("", vec!["r".into()]);
        a.opened("r");
        wait_ready(&a, 27);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(calls.load(Ordering::SeqCst), WINDOW + 13);
        assert!(a.take("r", age).is_some());
    }

    #[test]
    fn without_threads_nothing_is_read_ahead() {
        let (fetch, calls) = counting();
        let a = DirAhead::new(0, Duration::from_secs(60), fetch);
        a.request("a");
        std::thread::sleep(Duration::from_millis(20));
        assert!(a.take("a", Duration::from_secs(5)).is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
    }
}
