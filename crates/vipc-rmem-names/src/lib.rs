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
//!
//! The byte layout and what is promised are in `docs/RMEM.md`, "Name service".

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod cache;
mod clerk;
mod entry;
mod error;
mod layout;
mod local;
mod peers;
mod probe;

pub use clerk::{Clerk, ClerkParams, Found, Source};
pub use entry::{Binding, Entry, EntryState, ParseError};
pub use error::{Error, Result};
pub use layout::{bucket_of, well_known_name, Header, ENTRY_SIZE, HEADER_SIZE, MAX_BUCKETS, NAME_MAX};
pub use peers::PullStats;
