//! Linear probing through a table, window by window: the same walk for the
//! clerk's own table and for another clerk's, read remotely. It stops at the
//! live entry of the name, or at an empty bucket (the name was never placed
//! beyond it), or after every bucket — or, for 003's option (3), after a
//! given number of reads, leaving the rest to a lookup by notification.

use crate::entry::{Entry, EntryState, ParseError};
use crate::error::{Error, Result};
use crate::layout::{bucket_of, ENTRY_SIZE};
use vipc::HostId;

/// How often a window whose entry fails its check is read again before the
/// entry is called corrupt: one write is applied whole under the owner's
/// lock, so a failed check is damage, not a race — but a read answered in
/// several datagrams could in principle mix two.
const REREADS: usize = 3;

/// The table being walked.
pub(crate) struct Walk {
    /// Whose table (for errors).
    pub host: HostId,
    /// Its bucket count.
    pub buckets: u32,
    /// Its incarnation: every entry must carry it.
    pub incarnation: u32,
    /// Buckets per read.
    pub window: u32,
    /// The most windows read ([`WHOLE`]: until the walk ends by itself).
    pub reads: u32,
}

/// [`Walk::reads`] for a walk that is never cut short.
pub(crate) const WHOLE: u32 = u32::MAX;

/// How a walk ended.
#[derive(Debug)]
pub(crate) enum Probed {
    /// The live entry of the name, in this bucket.
    Found(u32, Entry),
    /// Not in the table: an empty bucket ended the chain, or every bucket was read.
    Absent,
    /// [`Walk::reads`] windows read, every bucket holding another name or a deleted one.
    Unfinished,
}

impl Probed {
    /// The entry and its bucket, if found.
    pub fn found(self) -> Option<(u32, Entry)> {
        match self {
            Probed::Found(slot, e) => Some((slot, e)),
            Probed::Absent | Probed::Unfinished => None,
        }
    }
}

/// Walks the chain of `name`. `read(first, count)` returns the bytes of
/// buckets `first..first + count` (never wrapping).
pub(crate) fn find(walk: &Walk, name: &str, mut read: impl FnMut(u32, u32) -> Result<Vec<u8>>) -> Result<Probed> {
    let home = bucket_of(name, walk.buckets);
    let mut done = 0u32;
    for _ in 0..walk.reads {
        if done >= walk.buckets {
            return Ok(Probed::Absent);
        }
        let first = (home + done) % walk.buckets;
        let count = walk.window.max(1).min(walk.buckets - first).min(walk.buckets - done);
        let entries = read_checked(walk, first, count, &mut read)?;
        for (k, e) in entries.into_iter().enumerate() {
            match e {
                None => return Ok(Probed::Absent),
                Some(e) if e.state == EntryState::Live && e.name == name => {
                    return Ok(Probed::Found(first + k as u32, e))
                }
                Some(_) => {}
            }
        }
        done += count;
    }
    Ok(if done >= walk.buckets { Probed::Absent } else { Probed::Unfinished })
}

/// Reads a window and parses it, re-reading on a failed check.
fn read_checked(
    walk: &Walk,
    first: u32,
    count: u32,
    read: &mut impl FnMut(u32, u32) -> Result<Vec<u8>>,
) -> Result<Vec<Option<Entry>>> {
    let mut bad = first;
    for _ in 0..REREADS {
        let bytes = read(first, count)?;
        match parse_window(walk, first, &bytes, count) {
            Ok(v) => return Ok(v),
            Err(slot) => bad = slot,
        }
    }
    Err(Error::Corrupt { host: walk.host, slot: bad })
}

/// The entries of a window, or the first bucket that does not parse (or
/// carries another incarnation than its table's).
fn parse_window(walk: &Walk, first: u32, bytes: &[u8], count: u32) -> Result<Vec<Option<Entry>>, u32> {
    (0..count)
        .map(|k| {
            let at = k as usize * ENTRY_SIZE;
            let slot = first + k;
            let e = Entry::parse(bytes.get(at..).unwrap_or(&[])).map_err(|_: ParseError| slot)?;
            match e {
                Some(e) if e.incarnation != walk.incarnation => Err(slot),
                other => Ok(other),
            }
        })
        .collect()
}
