//! Sorted directory listings kept between the READDIR batches of one
//! listing. A READDIR names its place by index into the sorted names; reading
//! and sorting the whole directory for every batch made listing a directory
//! of N entries cost N²/batch (`ls` of 40,000 entries took 2–4 s). A listing
//! is read afresh at offset 0 and whenever the directory changed (its inode,
//! mtime or ctime), so a batch never mixes two states of a directory it saw
//! change.

use super::confine::{errno, Errno};
use rustix::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Listings kept at once (clients listing that many directories at a time).
const SLOTS: usize = 4;
/// A listing with more name bytes than this is read again for each batch.
const MAX_BYTES: usize = 8 << 20;
/// A listing unused this long is dropped.
const MAX_IDLE: Duration = Duration::from_secs(30);

/// The sorted names of a directory.
pub type Names = Arc<Vec<Vec<u8>>>;

/// What identifies one state of a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DirState {
    dev: u64,
    ino: u64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

#[derive(Debug)]
struct Listing {
    state: DirState,
    names: Names,
    used: Instant,
}

/// The kept listings of one export.
#[derive(Debug, Default)]
pub struct Listings {
    kept: Mutex<Vec<Listing>>,
}

impl Listings {
    /// The sorted names of the open directory `dir` for a READDIR starting at
    /// `offset`: the kept listing if the directory is unchanged since it was
    /// read and the READDIR continues one (offset > 0), else read now.
    pub fn names(&self, dir: impl AsFd, offset: u64) -> Result<Names, Errno> {
        let st = rustix::fs::fstat(&dir).map_err(errno)?;
        let state = DirState {
            dev: st.st_dev,
            ino: st.st_ino,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        };
        let now = Instant::now();
        if offset > 0 {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.retain(|l| now.duration_since(l.used) < MAX_IDLE);
            if let Some(l) = kept.iter_mut().find(|l| l.state == state) {
                l.used = now;
                return Ok(l.names.clone());
            }
        }
        let names = Arc::new(read_sorted(dir)?);
        if names.iter().map(|n| n.len() + 24).sum::<usize>() <= MAX_BYTES {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.retain(|l| l.state.ino != state.ino || l.state.dev != state.dev);
            kept.retain(|l| now.duration_since(l.used) < MAX_IDLE);
            if kept.len() >= SLOTS {
                let oldest = kept.iter().enumerate().min_by_key(|(_, l)| l.used).map(|(i, _)| i);
                kept.swap_remove(oldest.expect("SLOTS > 0"));
            }
            kept.push(Listing { state, names: names.clone(), used: now });
        }
        Ok(names)
    }

    /// Listings kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.lock().unwrap().len()
    }
}

/// Every name of `dir` but `.`, `..` and names that are not UTF-8 (no path
/// can name them: paths travel as UTF-8), sorted.
fn read_sorted(dir: impl AsFd) -> Result<Vec<Vec<u8>>, Errno> {
    let mut names = Vec::new();
    let mut d = rustix::fs::Dir::read_from(dir).map_err(errno)?;
    while let Some(e) = d.read() {
        let e = e.map_err(errno)?;
        let name = e.file_name().to_bytes();
        if name != b"." && name != b".." && std::str::from_utf8(name).is_ok() {
            names.push(name.to_vec());
        }
    }
    names.sort_unstable();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn dir_fd(p: &std::path::Path) -> File {
        File::open(p).unwrap()
    }

    #[test]
    fn a_listing_is_reused_until_the_directory_changes() {
        let d = tempfile::tempdir().unwrap();
        for n in ["b", "a", "c"] {
            std::fs::write(d.path().join(n), b"").unwrap();
        }
        let l = Listings::default();
        let first = l.names(dir_fd(d.path()), 0).unwrap();
        assert_eq!(*first, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        let next = l.names(dir_fd(d.path()), 2).unwrap();
        assert!(Arc::ptr_eq(&first, &next), "the next batch uses the listing read for the first");
        std::fs::write(d.path().join("d"), b"").unwrap();
        let changed = l.names(dir_fd(d.path()), 2).unwrap();
        assert_eq!(changed.len(), 4, "a changed directory is read again");
        let fresh = l.names(dir_fd(d.path()), 0).unwrap();
        assert!(!Arc::ptr_eq(&changed, &fresh), "a listing from the start is read again");
        assert_eq!(l.len(), 1, "one listing per directory");
    }

    #[test]
    fn at_most_a_few_listings_are_kept() {
        let dirs: Vec<_> = (0..SLOTS + 2).map(|_| tempfile::tempdir().unwrap()).collect();
        let l = Listings::default();
        for d in &dirs {
            l.names(dir_fd(d.path()), 0).unwrap();
        }
        assert_eq!(l.len(), SLOTS);
    }
}
