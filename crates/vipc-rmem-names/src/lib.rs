//! A name service built only on vipc's public remote-memory API, as
//! Thekkath built his segment name server on his primitives (seed 003,
//! §4.2.6 and §7.3).
//!
//! There is no central server. Each node runs one [`Clerk`], which exports
//! its **name table** in a well-known segment ([`well_known_name`]): an
//! open-addressed hash table laid out identically on every node, so a clerk
//! computes where a name would sit in any other clerk's table.
//!
//! - **Register** ([`Clerk::register`], [`Clerk::export_segment`]) is a local
//!   write into the clerk's own table; nothing is pushed to other nodes.
//! - **Lookup** ([`Clerk::lookup`]) looks in the local table, then in the
//!   cache of names pulled before, then **pulls**: remote reads of the
//!   name's bucket in the tables of the hinted host and the clerk's peers —
//!   one read when the name sits in its home bucket. No thread of the owning
//!   node runs for it.
//! - **Delete** ([`Clerk::delete`]) only marks the local entry deleted. Every
//!   entry carries a generation number and a check word, so a reader that
//!   races a delete or re-registration sees the old entry whole, the new one
//!   whole, or nothing — never a mix; caches are made good by
//!   [`Clerk::refresh`] and by [`Clerk::import`], which pulls again when a
//!   cached binding no longer imports.
//! - **Lookup by notification** ([`Clerk::lookup_notify`]) is 003's other
//!   way: a remote write with notify of the request into the other clerk's
//!   well-known request segment ([`well_known_requests`]); its serving
//!   thread looks the name up and writes the answer back. [`LookupPolicy`]
//!   lets [`Clerk::lookup`] probe a few windows by reads and then ask so
//!   (003's option 3).
//!
//! The byte layout and what is promised are in `docs/RMEM.md`, "Name service".

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod ask;
mod cache;
mod clerk;
mod entry;
mod error;
mod layout;
mod local;
mod message;
mod peers;
mod probe;
mod serve;

pub use ask::NotifyStats;
pub use clerk::{Clerk, ClerkParams, Found, LookupPolicy, Source};
pub use entry::{Binding, Entry, EntryState, ParseError};
pub use error::{Error, Result};
pub use layout::{
    bucket_of, well_known_name, well_known_requests, Header, ENTRY_SIZE, HEADER_SIZE, MAX_BUCKETS, NAME_MAX,
};
pub use message::{Answer, Request, ANSWER_SIZE, REQUEST_SIZE};
pub use peers::PullStats;
pub use serve::ServeStats;

/// Locks a mutex; a poisoned one (a holder panicked) is used as it is.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every parser of bytes other hosts wrote (table header and entries,
/// requests and answers of the lookup by notification, a request slot) on
/// `data`, for the fuzz target: each returns an error or a value, never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    let word = |at: usize| data.get(at..at + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let _ = Header::parse(data, word(0));
    let _ = Entry::parse(data);
    let _ = Request::parse(data);
    let _ = Answer::parse(data);
    let _ = serve::parse_slot(data, word(4), word(8));
    let _ = serve::slots_touched(word(0), word(4), word(8));
    // The same bytes with their check words made good: random bytes pass a
    // BLAKE3 check word never, and every field check after it would go
    // unfuzzed (an answer's entry carries a check word of its own).
    let sealed = |n: usize, inner: Option<usize>| {
        let mut b = data.to_vec();
        b.resize(b.len().max(n), 0);
        if let Some(at) = inner {
            entry::seal(&mut b[at..at + ENTRY_SIZE]);
        }
        entry::seal(&mut b[..n]);
        b
    };
    let _ = Entry::parse(&sealed(ENTRY_SIZE, None));
    let _ = Request::parse(&sealed(REQUEST_SIZE, None));
    let _ = serve::parse_slot(&sealed(REQUEST_SIZE, None), word(4), word(8));
    let answer = sealed(ANSWER_SIZE, Some(16));
    let _ = Answer::parse(&answer);
    // An answer read from this clerk's answer area, for the request of `word(4)`.
    let name = std::str::from_utf8(data.get(64..64 + (data.len() % 17)).unwrap_or(b"n")).unwrap_or("n");
    let _ = ask::accept(data, word(4), word(8) as u16, name);
    let _ = ask::accept(&answer, word(4), word(8) as u16, name);
    fuzz_walk(data, name);
}

/// A remote table as a puller walks it: its header (the segment as long as
/// `data`), then windows of buckets read from it, each entry parsed and
/// checked for the table's incarnation.
fn fuzz_walk(data: &[u8], name: &str) {
    let Ok(h) = Header::parse(data, data.len() as u32) else { return };
    let window = data.get(18).map_or(1, |&b| u32::from(b) % 9);
    let reads = data.get(19).map_or(probe::WHOLE, |&b| if b == 0 { probe::WHOLE } else { u32::from(b) });
    let walk = probe::Walk { host: h.host, buckets: h.buckets, incarnation: h.incarnation, window, reads };
    let mut calls = 0u32;
    let r = probe::find(&walk, name, |first, count| {
        calls += 1;
        assert!(count >= 1 && first.checked_add(count).is_some_and(|end| end <= h.buckets), "read outside the table");
        let at = layout::slot_offset(first) as usize;
        let end = at + count as usize * ENTRY_SIZE;
        let mut window = data.get(at.min(data.len())..end.min(data.len())).unwrap_or(&[]).to_vec();
        // Buckets whose byte 0 is odd get a good check word (see above), the others keep theirs.
        for b in window.chunks_exact_mut(ENTRY_SIZE).filter(|b| b[0] & 1 == 1) {
            entry::seal(b);
        }
        Ok(window)
    });
    // Each window is read at most three times; every bucket at most once per walk.
    assert!(calls as u64 <= 3 * u64::from(h.buckets), "{calls} reads of {} buckets", h.buckets);
    if let Ok(probe::Probed::Found(slot, e)) = r {
        assert!(slot < h.buckets && e.name == name && e.incarnation == h.incarnation);
    }
}
