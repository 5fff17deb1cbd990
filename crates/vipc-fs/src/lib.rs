//! vipc-fs: the V file server (Cheriton and Zwaenepoel 1983, Zwaenepoel
//! 1985 ch. 3–4) over vipc: page-level file access through Send, Receive
//! and Reply. A page read is a Send granting a buffer and a reply carrying
//! the page (2 packets); a page write is a Send whose segment carries the
//! page (2 packets); larger transfers move by MoveTo/MoveFrom. The protocol
//! is specified in docs/PROTOCOL.md, "File service".
//!
//! The [`FileServer`] exports a directory under the logical name `fs:NAME`;
//! an [`FsClient`] on any node finds it by that name and uses paths
//! relative to the export's root. No request reaches outside the exported
//! directory: absolute paths, `..` beyond the root and symlinks that lead
//! out fail with EACCES; a read-only export fails every mutation with EROFS.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod attr;
mod client;
mod error;
pub mod proto;
mod server;

/// A random nonzero 32-bit id (server instances, client handle ranges).
fn random_nonzero_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    (h.finish() as u32).max(1)
}

pub use attr::{Attr, DirEntry, FileKind, SetAttr, SetTime, StatFs, Timestamp};
pub use client::{FsClient, Handle};
pub use error::{FsError, FsResult};
pub use server::{service_name, ExportConfig, FileServer, Tuning, MAX_WORKERS, MIN_SWEEP};

/// Every parser of bytes another host wrote, on `data`, for the fuzz target
/// `fs`: what a client reads from replies (attributes, file-system figures,
/// a directory listing, an OPEN's file beginning) and what the server reads
/// from requests (the request message, its paths, a SETATTR record). Each
/// returns a value or an error, never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    use attr::Reader;
    let _ = Attr::decode(&mut Reader::new(data));
    let _ = StatFs::decode(&mut Reader::new(data));
    let _ = SetAttr::decode(&mut Reader::new(data));
    let _ = client::parse_listing(data, &mut Vec::new());
    let _ = client::link_target(data);
    let mut msg = [0u8; 32];
    let n = data.len().min(32);
    msg[..n].copy_from_slice(&data[..n]);
    let rest = &data[n..];
    let head = rest.first().map_or(0, |&b| usize::from(b) << 8);
    let _ = client::open_reply(&proto::Rep(msg), rest, head);
    server::fuzz_request(proto::Req(msg), rest);
}
