//! The inode table: the FUSE node ids the kernel holds and the export paths they stand for.
//!
//! The file service is path-based, the kernel speaks node ids. Every entry the kernel learns (lookup, create,
//! mkdir, symlink, readdirplus) takes one reference; `forget` gives them back and the entry goes at zero.
//! Renames move the entry and its whole subtree to the new path; an entry whose name is unlinked or replaced
//! is *detached* (no path) but lives on while the kernel holds it, so that a file unlinked while open can
//! still be read and stat'ed through its open handles. Node ids are never reused (generation stays 0).
//!
//! Every change made through the mount bumps an epoch, once when it begins and once when it ends, and stamps
//! the nodes and names it touches. An answer from the server is cached only if nothing it describes changed
//! after the epoch its request began in: a `stat`, an open or a listing that raced a change would otherwise
//! keep the state from before it for the whole TTL.

use crate::changes::ChangeLog;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vipc_fs::{Attr, FileKind, Handle, Timestamp};

/// The node id of the export's root directory (fixed by FUSE).
pub const ROOT: u64 = 1;

/// What the table knows about one node id.
#[derive(Debug)]
struct Inode {
    /// The path in the export; `None` once unlinked or replaced.
    path: Option<String>,
    /// References the kernel holds (lookups not yet forgotten).
    lookups: u64,
    /// The server's inode number and kind when the entry was made: a path that now names another file
    /// gets a fresh node id.
    server_ino: u64,
    kind: FileKind,
    /// Attributes last seen and when.
    attr: Option<(Attr, Instant)>,
    /// The epoch of the last change made to it through the mount.
    changed_at: u64,
    /// Handles open on this node (an unlinked file is stat'ed through one).
    open: Vec<Handle>,
    /// (mtime, size) of the data the kernel's page cache was filled from: a later open that sees the same
    /// pair keeps the cache (close-to-open consistency, as NFS).
    cache_stamp: Option<(Timestamp, u64)>,
}

/// Node ids <-> paths, with reference counts, cached attributes and open handles. Not thread-safe by
/// itself: the file system keeps it under a mutex and never calls the server while holding it.
#[derive(Debug)]
pub struct InodeTable {
    nodes: HashMap<u64, Inode>,
    paths: HashMap<String, u64>,
    next: u64,
    /// Bumped when a change through the mount begins and when it ends.
    epoch: u64,
    /// The names changed lately (the kernel may hold no node for them).
    changed_names: ChangeLog,
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

/// `parent/name` in the export's path syntax ("" is the root).
pub fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

/// True when `path` lies strictly inside directory `dir`.
fn is_under(path: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return !path.is_empty();
    }
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

impl InodeTable {
    /// A table holding only the root.
    pub fn new() -> InodeTable {
        let mut t = InodeTable {
            nodes: HashMap::new(),
            paths: HashMap::new(),
            next: ROOT + 1,
            epoch: 0,
            changed_names: ChangeLog::default(),
        };
        t.nodes.insert(
            ROOT,
            Inode {
                path: Some(String::new()),
                lookups: 1,
                server_ino: 0,
                kind: FileKind::Dir,
                attr: None,
                changed_at: 0,
                open: Vec::new(),
                cache_stamp: None,
            },
        );
        t.paths.insert(String::new(), ROOT);
        t
    }

    /// The path of node `ino`: `None` for an unknown or detached node.
    pub fn path(&self, ino: u64) -> Option<String> {
        self.nodes.get(&ino).and_then(|n| n.path.clone())
    }

    /// The kind of file node `ino` stood for when the kernel learned it.
    pub fn kind(&self, ino: u64) -> Option<FileKind> {
        self.nodes.get(&ino).map(|n| n.kind)
    }

    /// Whether `attr` (looked up by node `ino`'s path) is still of the file
    /// the node stands for: the same server inode and kind (always, for the root).
    pub fn same_file(&self, ino: u64, attr: &Attr) -> bool {
        ino == ROOT || self.nodes.get(&ino).is_some_and(|n| n.server_ino == attr.ino && n.kind == attr.kind)
    }

    /// The node id for `path` if the kernel holds one.
    pub fn ino_of(&self, path: &str) -> Option<u64> {
        self.paths.get(path).copied()
    }

    /// True when the table still has node `ino` (attached or not).
    #[cfg(test)]
    pub fn contains(&self, ino: u64) -> bool {
        self.nodes.contains_key(&ino)
    }

    /// Number of node ids held (the root included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Records that the kernel learned `path` with attributes `attr`, asked for at time `now` and epoch
    /// `since` (one more reference), and returns its node id and whether the attributes were kept (not if
    /// the node changed after `since`). A path whose entry stands for another file (the server's inode
    /// number or kind changed, e.g. replaced by another client) is detached and gets a fresh node id.
    pub fn remember(&mut self, path: &str, attr: &Attr, now: Instant, since: u64) -> (u64, bool) {
        if let Some(&ino) = self.paths.get(path) {
            let n = self.nodes.get_mut(&ino).expect("paths and nodes agree");
            if ino == ROOT || (n.server_ino == attr.ino && n.kind == attr.kind) {
                n.lookups += 1;
                // A listing read ahead may be older than what a lookup has brought meanwhile.
                let kept = n.changed_at <= since && n.attr.as_ref().is_none_or(|(_, seen)| *seen <= now);
                if kept {
                    n.attr = Some((attr.clone(), now));
                }
                return (ino, kept);
            }
            if n.changed_at > since {
                // An answer from before this mount put another file at `path` (a rename over it): stale,
                // it takes the name from nobody; the kernel gets the present node, its attributes unkept.
                n.lookups += 1;
                return (ino, false);
            }
            self.detach(path);
        }
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Inode {
                path: Some(path.to_string()),
                lookups: 1,
                server_ino: attr.ino,
                kind: attr.kind,
                attr: Some((attr.clone(), now)),
                changed_at: 0,
                open: Vec::new(),
                cache_stamp: None,
            },
        );
        self.paths.insert(path.to_string(), ino);
        (ino, true)
    }

    /// The kernel gave back `n` references to `ino`; at zero the entry goes (the root stays).
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else { return };
        node.lookups = node.lookups.saturating_sub(n);
        if node.lookups == 0 {
            let node = self.nodes.remove(&ino).expect("just seen");
            if let Some(p) = node.path {
                if self.paths.get(&p) == Some(&ino) {
                    self.paths.remove(&p);
                }
            }
        }
    }

    /// `path` (and, for a directory, everything under it) no longer has that name: the nodes stay for the
    /// kernel's references but lose their paths.
    pub fn detach(&mut self, path: &str) {
        if path.is_empty() {
            return;
        }
        let doomed: Vec<String> =
            self.paths.keys().filter(|k| k.as_str() == path || is_under(k, path)).cloned().collect();
        for k in doomed {
            if let Some(ino) = self.paths.remove(&k) {
                if let Some(n) = self.nodes.get_mut(&ino) {
                    n.path = None;
                }
            }
        }
    }

    /// `from` was renamed to `to`: whatever `to` named is detached, then `from` and its subtree move.
    pub fn rename(&mut self, from: &str, to: &str) {
        if from == to || from.is_empty() {
            return;
        }
        self.detach(to);
        let moving: Vec<String> =
            self.paths.keys().filter(|k| k.as_str() == from || is_under(k, from)).cloned().collect();
        for old in moving {
            let new = format!("{to}{}", &old[from.len()..]);
            if let Some(ino) = self.paths.remove(&old) {
                if let Some(n) = self.nodes.get_mut(&ino) {
                    n.path = Some(new.clone());
                }
                self.paths.insert(new, ino);
            }
        }
    }

    /// `a` and `b` swapped places (RENAME_EXCHANGE), with their subtrees.
    pub fn exchange(&mut self, a: &str, b: &str) {
        if a == b || a.is_empty() || b.is_empty() {
            return;
        }
        let tmp = format!("\0exchange\0{a}");
        self.rename(a, &tmp);
        self.rename(b, a);
        self.rename(&tmp, b);
    }

    /// The cached attributes of `ino` if younger than `ttl`, with the time they have left.
    pub fn cached_attr(&self, ino: u64, ttl: Duration, now: Instant) -> Option<(Attr, Duration)> {
        let (attr, at) = self.nodes.get(&ino)?.attr.as_ref()?;
        let age = now.saturating_duration_since(*at);
        (age < ttl).then(|| (attr.clone(), ttl - age))
    }

    /// Stores attributes of `ino` asked for at epoch `since`, unless it changed after: tells whether they
    /// were kept.
    pub fn set_attr(&mut self, ino: u64, attr: &Attr, now: Instant, since: u64) -> bool {
        match self.nodes.get_mut(&ino) {
            Some(n) if n.changed_at <= since => {
                n.attr = Some((attr.clone(), now));
                true
            }
            _ => false,
        }
    }

    /// The present epoch: what a request about to be sent is stamped with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A change through the mount to nodes `inos` and names `paths` begins or has ended: the epoch moves
    /// on, their cached attributes go, and answers asked for before (at an older epoch) will not be kept
    /// for them. Returns the new epoch.
    pub fn changing(&mut self, inos: &[u64], paths: &[&str]) -> u64 {
        self.epoch += 1;
        let epoch = self.epoch;
        let named: Vec<u64> = paths.iter().filter_map(|p| self.ino_of(p)).collect();
        for ino in inos.iter().chain(&named) {
            if let Some(n) = self.nodes.get_mut(ino) {
                n.changed_at = epoch;
                n.attr = None;
            }
        }
        let node_paths: Vec<String> = inos.iter().filter_map(|&i| self.path(i)).collect();
        for p in node_paths.iter().map(String::as_str).chain(paths.iter().copied()) {
            self.changed_names.record(p, epoch);
        }
        epoch
    }

    /// Whether node `ino` changed through the mount after epoch `since`.
    pub fn changed_since(&self, ino: u64, since: u64) -> bool {
        self.nodes.get(&ino).is_some_and(|n| n.changed_at > since)
    }

    /// Whether an entry for `path` read at epoch `since` may be out of date: the name, or the node it
    /// names, changed through the mount after.
    pub fn name_changed_since(&self, path: &str, since: u64) -> bool {
        self.changed_names.changed_since(path, since) || self.ino_of(path).is_some_and(|i| self.changed_since(i, since))
    }

    /// Handle `h` was opened on `ino`.
    pub fn opened(&mut self, ino: u64, h: Handle) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.open.push(h);
        }
    }

    /// Handle `h` on `ino` was closed.
    pub fn closed(&mut self, ino: u64, h: Handle) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            if let Some(i) = n.open.iter().position(|x| *x == h) {
                n.open.swap_remove(i);
            }
        }
    }

    /// Some handle open on `ino`.
    pub fn any_handle(&self, ino: u64) -> Option<Handle> {
        self.nodes.get(&ino)?.open.first().copied()
    }

    /// Whether the page cache of `ino` was filled from a file of this `mtime` and `size` (an open that
    /// finds the file so lets the kernel keep its pages).
    pub fn pages_kept(&self, ino: u64, mtime: Timestamp, size: u64) -> bool {
        self.nodes.get(&ino).is_some_and(|n| n.cache_stamp == Some((mtime, size)))
    }

    /// Records what the page cache of `ino` was filled from and tells whether it matched the previous
    /// record (then the kernel may keep its cached pages).
    pub fn check_cache_stamp(&mut self, ino: u64, mtime: Timestamp, size: u64) -> bool {
        let Some(n) = self.nodes.get_mut(&ino) else { return false };
        let same = n.cache_stamp == Some((mtime, size));
        n.cache_stamp = Some((mtime, size));
        same
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Attributes of a file of size 0 for tests.
    pub(crate) fn attr(ino: u64, kind: FileKind) -> Attr {
        let t = Timestamp { secs: 0, nanos: 0 };
        Attr {
            ino,
            kind,
            size: 0,
            blocks: 0,
            perm: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            atime: t,
            mtime: t,
            ctime: t,
            blksize: 4096,
        }
    }

    #[test]
    fn lookups_count_and_forget_removes_at_zero() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let a = t.remember("a", &attr(10, FileKind::File), now, 0).0;
        assert_eq!(t.remember("a", &attr(10, FileKind::File), now, 0).0, a);
        t.forget(a, 1);
        assert_eq!(t.path(a).as_deref(), Some("a"));
        t.forget(a, 1);
        assert_eq!(t.path(a), None);
        assert!(!t.contains(a));
        assert_eq!(t.ino_of("a"), None);
        // A new lookup gets a new id: ids are never reused.
        assert_ne!(t.remember("a", &attr(10, FileKind::File), now, 0).0, a);
        t.forget(ROOT, 100);
        assert_eq!(t.path(ROOT).as_deref(), Some(""));
    }

    #[test]
    fn rename_moves_the_subtree_and_detaches_the_target() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let d = t.remember("d", &attr(1, FileKind::Dir), now, 0).0;
        let f = t.remember("d/f", &attr(2, FileKind::File), now, 0).0;
        let g = t.remember("d/sub/g", &attr(3, FileKind::File), now, 0).0;
        let dx = t.remember("dx", &attr(4, FileKind::File), now, 0).0;
        let e = t.remember("e", &attr(5, FileKind::Dir), now, 0).0;
        t.rename("d", "e");
        assert_eq!(t.path(d).as_deref(), Some("e"));
        assert_eq!(t.path(f).as_deref(), Some("e/f"));
        assert_eq!(t.path(g).as_deref(), Some("e/sub/g"));
        assert_eq!(t.path(dx).as_deref(), Some("dx"), "a sibling sharing the prefix stays");
        assert_eq!(t.path(e), None, "the replaced target is detached");
        assert!(t.contains(e), "but lives while the kernel holds it");
        assert_eq!(t.ino_of("e/f"), Some(f));
        assert_eq!(t.ino_of("d/f"), None);
    }

    #[test]
    fn exchange_swaps_subtrees() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let a = t.remember("a", &attr(1, FileKind::Dir), now, 0).0;
        let ax = t.remember("a/x", &attr(2, FileKind::File), now, 0).0;
        let b = t.remember("b", &attr(3, FileKind::File), now, 0).0;
        t.exchange("a", "b");
        assert_eq!(t.path(a).as_deref(), Some("b"));
        assert_eq!(t.path(ax).as_deref(), Some("b/x"));
        assert_eq!(t.path(b).as_deref(), Some("a"));
    }

    #[test]
    fn a_path_naming_another_file_gets_a_new_id() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let a = t.remember("a", &attr(1, FileKind::File), now, 0).0;
        let b = t.remember("a", &attr(2, FileKind::File), now, 0).0;
        assert_ne!(a, b);
        assert_eq!(t.path(a), None);
        assert_eq!(t.path(b).as_deref(), Some("a"));
        let c = t.remember("a", &attr(2, FileKind::Dir), now, 0).0;
        assert_ne!(b, c);
    }

    #[test]
    fn older_attributes_do_not_replace_newer_ones() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let mut fresh = attr(1, FileKind::File);
        fresh.size = 8;
        let a = t.remember("a", &fresh, now, 0).0;
        // A listing read before the lookup above brings the file again, with its older size.
        let old = now - Duration::from_millis(100);
        assert_eq!(t.remember("a", &attr(1, FileKind::File), old, 0).0, a);
        let ttl = Duration::from_secs(1);
        assert_eq!(t.cached_attr(a, ttl, now).map(|(at, _)| at.size), Some(8));
        // A newer one does.
        assert_eq!(t.remember("a", &attr(1, FileKind::File), now + Duration::from_millis(1), 0).0, a);
        assert_eq!(t.cached_attr(a, ttl, now).map(|(at, _)| at.size), Some(0));
    }

    #[test]
    fn attr_cache_expires_and_handles_are_tracked() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let a = t.remember("a", &attr(1, FileKind::File), now, 0).0;
        let ttl = Duration::from_secs(1);
        assert!(t.cached_attr(a, ttl, now).is_some());
        assert!(t.cached_attr(a, ttl, now + Duration::from_millis(1500)).is_none());
        t.changing(&[a], &[]);
        assert!(t.cached_attr(a, ttl, now).is_none());
        t.opened(a, Handle(7));
        t.detach("a");
        assert_eq!(t.any_handle(a), Some(Handle(7)));
        t.closed(a, Handle(7));
        assert_eq!(t.any_handle(a), None);
        let m = Timestamp { secs: 5, nanos: 0 };
        assert!(!t.check_cache_stamp(a, m, 3));
        assert!(t.check_cache_stamp(a, m, 3));
        assert!(!t.check_cache_stamp(a, m, 4));
    }

    #[test]
    fn answers_asked_for_before_a_change_are_not_kept() {
        let mut t = InodeTable::new();
        let now = Instant::now();
        let d = t.remember("d", &attr(1, FileKind::Dir), now, 0).0;
        let f = t.remember("d/f", &attr(2, FileKind::File), now, 0).0;
        let asked = t.epoch();
        let began = t.changing(&[f], &[]);
        assert!(t.cached_attr(f, Duration::from_secs(1), now).is_none(), "the change drops what was cached");
        assert!(!t.set_attr(f, &attr(2, FileKind::File), now, asked), "asked before the change began");
        let done = t.changing(&[f], &[]);
        assert!(!t.set_attr(f, &attr(2, FileKind::File), now, began), "asked while it was under way");
        assert!(t.set_attr(f, &attr(2, FileKind::File), now, done), "asked after it ended");
        assert_eq!(t.remember("d/f", &attr(2, FileKind::File), now, began), (f, false));
        assert!(t.changed_since(f, began) && !t.changed_since(f, done) && !t.changed_since(d, 0));

        // Names: a listing read at `asked` is out of date for the names changed since, held by a node or not.
        assert!(t.name_changed_since("d/f", asked), "written");
        assert!(!t.name_changed_since("d/g", asked));
        t.changing(&[d], &["d/g"]);
        assert!(t.name_changed_since("d/g", done), "created (no node holds it)");
        assert!(!t.name_changed_since("d/f", done), "the directory's change is not its other names'");
        t.rename("d/f", "d/h");
        let later = t.epoch();
        t.changing(&[], &["d/f", "d/h"]);
        assert!(t.changed_since(f, later), "a name's change reaches the node holding it");
        assert!(t.name_changed_since("d/f", later) && t.name_changed_since("d/h", later));
    }
}
