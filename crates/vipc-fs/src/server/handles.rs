//! Open files of the server: the handle table, who owns each handle (the
//! client's owner process, so that a dead client's files can be released),
//! and the per-handle read-ahead state.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use vipc::Pid;

/// Read-ahead of one handle: after a sequential read the worker reads the
/// next block into `buf` once it has replied (001 §4, read-ahead).
#[derive(Debug, Default)]
pub struct ReadAhead {
    /// Offset the next sequential read would start at.
    pub next: u64,
    /// Consecutive sequential reads seen.
    pub streak: u32,
    /// Prefetched bytes, starting at `buf_off`.
    pub buf: Vec<u8>,
    /// File offset of `buf[0]`.
    pub buf_off: u64,
    /// The server's write epoch when `buf` was read (a write anywhere invalidates it).
    pub epoch: u64,
    /// When `buf` was read (it is trusted for a short time only).
    pub at: Option<Instant>,
    /// End of the bytes the kernel was last asked to read ahead.
    pub advised: u64,
}

impl ReadAhead {
    /// The part of `from..from + len` the kernel has not been asked to read
    /// ahead yet (all of it unless the last request ended inside it), now
    /// counted as asked. Asking for pages already in the cache costs a
    /// lookup each: five times over the file, for a reader asking five
    /// blocks ahead at every block (7% of a server's samples in `vipc cp`).
    pub fn unadvised(&mut self, from: u64, len: u64) -> Option<(u64, u64)> {
        let end = from.saturating_add(len);
        let start = if (from..end).contains(&self.advised) { self.advised } else { from };
        self.advised = end;
        (start < end).then(|| (start, end - start))
    }

    /// Records a read of `got` bytes at `off`; whether it continued the
    /// previous one (a sequential reader, after its first read).
    pub fn sequential(&mut self, off: u64, got: usize) -> bool {
        self.streak = if off == self.next && off != 0 { self.streak.saturating_add(1) } else { 0 };
        self.next = off + got as u64;
        self.streak >= 1
    }
}

/// One open file.
#[derive(Debug)]
pub struct OpenFile {
    /// The file (or directory) descriptor.
    pub file: File,
    /// The client's owner process.
    pub owner: Pid,
    /// The O_* flags it was opened with.
    pub flags: i32,
    /// Read-ahead state.
    pub ra: Mutex<ReadAhead>,
    /// Errno of a failed write-behind (through this or another handle of
    /// the file), reported by the next WRITE, FSYNC or CLOSE.
    pub deferred: AtomicI32,
}

#[derive(Debug, Default)]
struct Owner {
    handles: HashSet<u64>,
    last_seen: Option<Instant>,
}

#[derive(Debug, Default)]
struct Table {
    files: HashMap<u64, Arc<OpenFile>>,
    owners: HashMap<Pid, Owner>,
}

/// The handle table. Handle ids carry the server instance in their high 32
/// bits, so a restarted server never mistakes an old handle for one of its own.
#[derive(Debug)]
pub struct Handles {
    instance: u32,
    /// Most handles the owners on one host may hold together: per host, not
    /// per owner, since a client names its owner itself and could name many.
    per_host: usize,
    next: AtomicU32,
    table: Mutex<Table>,
}

impl Handles {
    /// An empty table for server instance `instance`, the owners on each
    /// host holding at most `per_host` handles together.
    pub fn new(instance: u32, per_host: usize) -> Handles {
        Handles { instance, per_host, next: AtomicU32::new(1), table: Mutex::new(Table::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// EMFILE if the owners on `owner`'s host hold as many handles as they may.
    pub fn room_for(&self, owner: Pid) -> Result<(), i32> {
        Self::room(&self.lock(), self.per_host, owner)
    }

    fn room(t: &Table, per_host: usize, owner: Pid) -> Result<(), i32> {
        let held: usize = t.owners.iter().filter(|(p, _)| p.host() == owner.host()).map(|(_, o)| o.handles.len()).sum();
        if held >= per_host {
            return Err(libc::EMFILE);
        }
        Ok(())
    }

    /// Adds an open file; returns its handle, or EMFILE (and the file is
    /// closed) if the owners on its owner's host already hold as many as they may.
    pub fn insert(&self, f: OpenFile) -> Result<u64, i32> {
        let owner = f.owner;
        let mut t = self.lock();
        Self::room(&t, self.per_host, owner)?;
        // After 2^32 opens the counter comes round: skip 0 and ids still open.
        let id = loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed);
            let id = (u64::from(self.instance) << 32) | u64::from(n);
            if n != 0 && !t.files.contains_key(&id) {
                break id;
            }
        };
        t.files.insert(id, Arc::new(f));
        let o = t.owners.entry(owner).or_default();
        o.handles.insert(id);
        o.last_seen = Some(Instant::now());
        Ok(id)
    }

    /// The open file of `id`, noting that its owner is alive.
    pub fn get(&self, id: u64) -> Option<Arc<OpenFile>> {
        let mut t = self.lock();
        let f = t.files.get(&id)?.clone();
        if let Some(o) = t.owners.get_mut(&f.owner) {
            o.last_seen = Some(Instant::now());
        }
        Some(f)
    }

    /// The owner of `id` (noting that it is alive), or the null pid.
    pub fn owner_of(&self, id: u64) -> Pid {
        self.get(id).map_or(Pid::NONE, |f| f.owner)
    }

    /// Removes `id` (closing the file when the last user lets go).
    pub fn remove(&self, id: u64) -> Option<Arc<OpenFile>> {
        let mut t = self.lock();
        let f = t.files.remove(&id)?;
        if let Some(o) = t.owners.get_mut(&f.owner) {
            o.handles.remove(&id);
            if o.handles.is_empty() {
                t.owners.remove(&f.owner);
            }
        }
        Some(f)
    }

    /// Records write-behind error `e` on every open handle of `f`'s file
    /// (same device and inode) that has none pending: as on Linux, a failed
    /// write is reported by an fsync or close through any descriptor of the
    /// file, not only through the one that wrote (the mount's writeback
    /// picks any of its handles).
    pub fn defer_to_file(&self, f: &OpenFile, e: i32) {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = f.file.metadata() else { return };
        let open: Vec<Arc<OpenFile>> = self.lock().files.values().cloned().collect();
        for g in open {
            if g.file.metadata().is_ok_and(|n| (n.dev(), n.ino()) == (m.dev(), m.ino())) {
                let _ = g.deferred.compare_exchange(0, e, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
    }

    /// Releases every handle of `owner` (a client that died); returns how many.
    pub fn release_owner(&self, owner: Pid) -> usize {
        let mut t = self.lock();
        let Some(o) = t.owners.remove(&owner) else { return 0 };
        for id in &o.handles {
            t.files.remove(id);
        }
        o.handles.len()
    }

    /// Owners holding handles that have not been heard from since `before`.
    pub fn idle_owners(&self, before: Instant) -> Vec<Pid> {
        let t = self.lock();
        t.owners.iter().filter(|(_, o)| o.last_seen.is_none_or(|s| s < before)).map(|(p, _)| *p).collect()
    }

    /// Notes that `owner` is alive (it answered a ping).
    pub fn seen(&self, owner: Pid) {
        if let Some(o) = self.lock().owners.get_mut(&owner) {
            o.last_seen = Some(Instant::now());
        }
    }

    /// Frees the read-ahead buffers not filled since `before` (a reader
    /// that stopped, or moved elsewhere): an idle handle would otherwise
    /// keep its last block until it is closed. Returns the bytes freed.
    pub fn shed_read_ahead(&self, before: Instant) -> usize {
        let files: Vec<Arc<OpenFile>> = self.lock().files.values().cloned().collect();
        let mut freed = 0;
        for f in files {
            // A handle being read or read ahead right now is not stale.
            let Ok(mut ra) = f.ra.try_lock() else { continue };
            if ra.buf.capacity() > 0 && ra.at.is_none_or(|t| t < before) {
                freed += std::mem::take(&mut ra.buf).capacity();
                ra.at = None;
            }
        }
        freed
    }

    /// Open handles.
    pub fn len(&self) -> usize {
        self.lock().files.len()
    }

    /// Drops every handle (the server stops).
    pub fn clear(&self) {
        let mut t = self.lock();
        t.files.clear();
        t.owners.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(owner: u32) -> OpenFile {
        OpenFile {
            file: File::open("/").unwrap(),
            owner: Pid(owner),
            flags: 0,
            ra: Mutex::new(ReadAhead::default()),
            deferred: AtomicI32::new(0),
        }
    }

    #[test]
    fn read_ahead_asks_the_kernel_for_each_byte_once_while_a_reader_goes_on() {
        const MB: u64 = 1 << 20;
        let mut ra = ReadAhead::default();
        assert_eq!(ra.unadvised(MB, 5 * MB), Some((MB, 5 * MB)));
        // The next block: only the one block past what was asked.
        assert_eq!(ra.unadvised(2 * MB, 5 * MB), Some((6 * MB, MB)));
        assert_eq!(ra.unadvised(3 * MB, 5 * MB), Some((7 * MB, MB)));
        // A jump back, or past what was asked: all of it again.
        assert_eq!(ra.unadvised(0, 5 * MB), Some((0, 5 * MB)));
        assert_eq!(ra.unadvised(100 * MB, 5 * MB), Some((100 * MB, 5 * MB)));
        assert_eq!(ra.unadvised(100 * MB, 0), None);
    }

    #[test]
    fn handles_carry_the_instance_and_owners_release_theirs() {
        let h = Handles::new(7, 10);
        let a = h.insert(file(0x10001)).unwrap();
        let b = h.insert(file(0x10001)).unwrap();
        let c = h.insert(file(0x20001)).unwrap();
        assert_eq!(a >> 32, 7);
        assert_ne!(a, b);
        assert_eq!(h.len(), 3);
        assert_eq!(h.release_owner(Pid(0x10001)), 2);
        assert!(h.get(a).is_none() && h.get(b).is_none() && h.get(c).is_some());
        assert!(h.remove(c).is_some());
        assert_eq!(h.len(), 0);
        assert_eq!(h.release_owner(Pid(0x20001)), 0);
    }

    #[test]
    fn a_handle_id_coming_round_again_skips_the_ones_still_open() {
        let h = Handles::new(7, 10);
        h.next.store(u32::MAX, Ordering::Relaxed);
        let last = h.insert(file(0x10001)).unwrap();
        assert_eq!(last, (7 << 32) | u64::from(u32::MAX));
        h.next.store(1, Ordering::Relaxed);
        let one = h.insert(file(0x10001)).unwrap();
        assert_eq!(one, (7 << 32) | 1);
        // Round again: 0, 1 (open) and u32::MAX (open) are skipped.
        h.next.store(u32::MAX, Ordering::Relaxed);
        let next = h.insert(file(0x20001)).unwrap();
        assert_eq!(next, (7 << 32) | 2);
        assert_eq!(h.len(), 3);
        assert_eq!(h.get(last).unwrap().owner, Pid(0x10001), "the open handles are untouched");
        assert_eq!(h.get(one).unwrap().owner, Pid(0x10001));
    }

    #[test]
    fn stale_read_ahead_buffers_are_freed_and_fresh_ones_kept() {
        let h = Handles::new(7, 10);
        let (stale, fresh) = (h.insert(file(0x10001)).unwrap(), h.insert(file(0x10001)).unwrap());
        let now = Instant::now();
        for (id, at) in [(stale, None), (fresh, Some(now))] {
            let f = h.get(id).unwrap();
            let mut ra = f.ra.lock().unwrap();
            ra.buf = vec![1; 64 << 10];
            ra.at = at;
        }
        assert_eq!(h.shed_read_ahead(now - std::time::Duration::from_millis(200)), 64 << 10);
        assert_eq!(h.get(stale).unwrap().ra.lock().unwrap().buf.capacity(), 0);
        assert_eq!(h.get(fresh).unwrap().ra.lock().unwrap().buf.len(), 64 << 10);
        assert_eq!(h.shed_read_ahead(now + std::time::Duration::from_secs(1)), 64 << 10, "once it is old");
    }

    #[test]
    fn a_host_holds_at_most_its_share_and_others_are_not_refused() {
        let h = Handles::new(7, 2);
        let a = h.insert(file(0x10001)).unwrap();
        h.insert(file(0x10002)).unwrap();
        assert_eq!(h.insert(file(0x10001)), Err(libc::EMFILE));
        assert_eq!(h.insert(file(0x10003)), Err(libc::EMFILE), "another owner on the same host shares its share");
        assert!(h.insert(file(0x20001)).is_ok(), "an owner on another host has room");
        h.remove(a);
        assert!(h.insert(file(0x10001)).is_ok(), "room again after a close");
        assert_eq!(h.len(), 3);
    }
}
