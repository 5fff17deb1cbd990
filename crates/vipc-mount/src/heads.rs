//! The beginnings of small files, brought back by their OPEN
//! ([`vipc_fs::FsClient::open_with_head`]): the kernel's first reads of a
//! file opened through the mount are answered from here, without an
//! exchange of their own. A program that opens a small file and reads it
//! (`tar c`, a compiler, `grep -r`) makes one exchange with the server
//! instead of two.
//!
//! What a head holds is the file as it was when it was opened, as a read
//! right after the open would have seen it. It answers reads only for the
//! attribute TTL after the open (a later read goes to the server, as it
//! would without heads), and never after a write or a size change made
//! through this mount to the same file. Together they hold at most
//! [`BUDGET`] bytes: a program holding many small files open unread does
//! not make the mount hold them all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The file's first bytes of one open handle.
struct Head {
    ino: u64,
    bytes: Arc<[u8]>,
    /// `bytes` are the whole file: a read past them is at its end.
    whole: bool,
    at: Instant,
}

/// Most bytes all heads hold together.
pub(crate) const BUDGET: usize = 32 << 20;

/// The heads of the open handles that have one, by FUSE file handle.
#[derive(Default)]
pub(crate) struct Heads {
    held: Mutex<Held>,
}

/// The heads, and how many bytes they hold together.
#[derive(Default)]
struct Held {
    by_fh: HashMap<u64, Head>,
    bytes: usize,
}

impl Held {
    fn remove(&mut self, fh: u64) {
        if let Some(h) = self.by_fh.remove(&fh) {
            self.bytes -= h.bytes.len();
        }
    }

    fn retain(&mut self, keep: impl Fn(&Head) -> bool) {
        let before = self.by_fh.len();
        self.by_fh.retain(|_, h| keep(h));
        if self.by_fh.len() != before {
            self.bytes = self.by_fh.values().map(|h| h.bytes.len()).sum();
        }
    }
}

/// A read answered from a head: `bytes[range]`.
pub(crate) struct HeadRead {
    pub bytes: Arc<[u8]>,
    pub range: std::ops::Range<usize>,
}

impl Heads {
    /// Keeps `bytes`, the first bytes of node `ino` as opened by handle `fh`;
    /// `size` is the file's size at the open.
    pub fn insert(&self, fh: u64, ino: u64, bytes: Vec<u8>, size: u64) {
        let whole = bytes.len() as u64 == size;
        let mut held = self.lock();
        if held.bytes + bytes.len() > BUDGET {
            return; // asked for while there was room; the reads go to the server
        }
        held.remove(fh);
        held.bytes += bytes.len();
        held.by_fh.insert(fh, Head { ino, bytes: bytes.into(), whole, at: Instant::now() });
    }

    /// Whether a head of `len` bytes fits the budget, once heads older than
    /// `ttl` (which answer nothing any more) are dropped.
    pub fn room_for(&self, len: usize, ttl: Duration) -> bool {
        let mut held = self.lock();
        if held.bytes + len > BUDGET {
            held.retain(|h| h.at.elapsed() < ttl);
        }
        held.bytes + len <= BUDGET
    }

    /// The read of `size` bytes at `offset` by handle `fh`, if its head
    /// answers it whole (or up to the file's end) and is younger than `ttl`.
    pub fn read(&self, fh: u64, offset: u64, size: u32, ttl: Duration) -> Option<HeadRead> {
        let mut held = self.lock();
        let h = held.by_fh.get(&fh)?;
        if h.at.elapsed() >= ttl {
            held.remove(fh);
            return None;
        }
        let len = h.bytes.len() as u64;
        let end = offset.checked_add(u64::from(size))?;
        if end > len && !h.whole {
            return None;
        }
        let range = offset.min(len) as usize..end.min(len) as usize;
        Some(HeadRead { bytes: h.bytes.clone(), range })
    }

    /// Handle `fh` is released.
    pub fn forget(&self, fh: u64) {
        self.lock().remove(fh);
    }

    /// Node `ino` was written or resized through the mount: its heads are out of date.
    pub fn changed(&self, ino: u64) {
        self.lock().retain(|h| h.ino != ino);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn answer(h: &Heads, fh: u64, offset: u64, size: u32) -> Option<Vec<u8>> {
        h.read(fh, offset, size, TTL).map(|r| r.bytes[r.range].to_vec())
    }

    #[test]
    fn a_whole_file_answers_every_read_a_part_only_reads_inside_it() {
        let h = Heads::default();
        h.insert(1, 10, b"hello".to_vec(), 5);
        assert_eq!(answer(&h, 1, 0, 4096).as_deref(), Some(&b"hello"[..]), "up to the end of the file");
        assert_eq!(answer(&h, 1, 3, 1).as_deref(), Some(&b"l"[..]));
        assert_eq!(answer(&h, 1, 9, 10).as_deref(), Some(&b""[..]), "past the end: end of file");
        h.insert(2, 11, b"0123".to_vec(), 100);
        assert_eq!(answer(&h, 2, 0, 4).as_deref(), Some(&b"0123"[..]));
        assert_eq!(answer(&h, 2, 0, 5), None, "beyond a part: the server's");
        assert_eq!(answer(&h, 2, u64::MAX, 1), None);
        assert_eq!(answer(&h, 3, 0, 1), None, "a handle without a head");
    }

    #[test]
    fn heads_go_with_a_change_their_handle_or_their_age() {
        let h = Heads::default();
        h.insert(1, 10, b"a".to_vec(), 1);
        h.insert(2, 10, b"a".to_vec(), 1);
        h.insert(3, 11, b"b".to_vec(), 1);
        h.changed(10);
        assert!(answer(&h, 1, 0, 1).is_none() && answer(&h, 2, 0, 1).is_none(), "both handles of the node");
        assert!(answer(&h, 3, 0, 1).is_some(), "another node's");
        h.forget(3);
        assert!(answer(&h, 3, 0, 1).is_none());
        h.insert(4, 12, b"c".to_vec(), 1);
        assert!(h.read(4, 0, 1, Duration::ZERO).is_none(), "older than the TTL");
        assert!(answer(&h, 4, 0, 1).is_none(), "and dropped");
        assert_eq!(h.lock().bytes, 0, "every byte given back");
    }

    #[test]
    fn heads_hold_at_most_the_budget() {
        let h = Heads::default();
        let big = 16 << 20;
        assert!(h.room_for(big, TTL));
        h.insert(1, 10, vec![1; big], big as u64);
        h.insert(2, 11, vec![2; big], big as u64);
        assert!(!h.room_for(1, TTL), "full");
        h.insert(3, 12, vec![3], 1);
        assert!(answer(&h, 3, 0, 1).is_none(), "not kept beyond the budget");
        assert!(h.room_for(1, Duration::ZERO), "room again once the old heads expire");
        assert_eq!(h.lock().bytes, 0);
        h.insert(4, 13, vec![4; big], big as u64);
        h.changed(13);
        h.insert(5, 14, vec![5; BUDGET], BUDGET as u64);
        assert!(answer(&h, 5, 0, 1).is_some(), "a change gave its bytes back");
    }
}
