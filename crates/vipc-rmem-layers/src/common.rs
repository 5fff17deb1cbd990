//! What both layers share: the error type, imports and probes that survive
//! loss, and little-endian fields in segments.

use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, MemOutcome, Node, ProtocolError, RemoteSegment, SegmentName};

/// Why a layer's operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A remote-memory primitive failed in a way the layer does not recover from.
    #[error(transparent)]
    Vipc(#[from] vipc::Error),
    /// The peer's segment is unexported (its reads are refused) or its node
    /// has not answered several probes in a row: the peer is gone.
    #[error("the peer is gone: {0}")]
    PeerGone(String),
    /// The operation did not finish within the caller's time.
    #[error("timed out")]
    Timeout,
    /// The segment is not laid out as this layer's (a wrong name, or another version).
    #[error("not a segment of this layer: {0}")]
    Layout(String),
    /// The data does not fit what the peer exported.
    #[error("{what} of {len} bytes exceeds the peer's limit of {max}")]
    TooLarge {
        /// What was too large (a block, arguments, a result).
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Every argument stack of the server is taken by another client.
    #[error("no free argument stack on the server")]
    NoFreeSlot,
    /// The remote procedure ran and answered a non-zero status.
    #[error("the remote procedure failed with status {0}")]
    Status(u32),
}

/// Result with the layers' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How often a lost import (its broadcast or answer dropped) is retried.
const IMPORT_RETRY: Duration = Duration::from_millis(150);

/// Imports `name`, retrying every 150 ms until `timeout`: an import is a
/// broadcast and its answer a datagram, either may be lost, and the engine
/// would otherwise wait its whole `rmem_timeout` before saying so.
pub fn import_retrying(node: &Node, name: SegmentName, access: Access, timeout: Duration) -> Result<RemoteSegment> {
    let deadline = vipc::deadline_after(Instant::now(), timeout);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match node.import_segment(name, access, IMPORT_RETRY.min(left)) {
            Ok(seg) => return Ok(seg),
            Err(e) if retryable(&e) && left > IMPORT_RETRY => continue,
            Err(e) if retryable(&e) => return Err(Error::Timeout),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Segment names that did not import lately: a serving loop tries a name a
/// peer gave it at most once per pause (1 s by default), since each try
/// holds the loop (and broadcasts) for up to its import wait.
#[derive(Debug)]
pub struct FailedImports {
    pause: Duration,
    at: std::collections::HashMap<SegmentName, Instant>,
}

impl Default for FailedImports {
    fn default() -> FailedImports {
        FailedImports::new(Duration::from_secs(1))
    }
}

impl FailedImports {
    /// Most names remembered (then all are forgotten).
    const MAX: usize = 1024;

    /// Names that fail are not tried again for `pause`.
    pub fn new(pause: Duration) -> FailedImports {
        FailedImports { pause, at: std::collections::HashMap::new() }
    }

    /// [`import_retrying`] unless `name` failed within the pause.
    pub fn import(&mut self, node: &Node, name: SegmentName, access: Access, wait: Duration) -> Option<RemoteSegment> {
        if self.at.get(&name).is_some_and(|at| at.elapsed() < self.pause) {
            return None;
        }
        let r = import_retrying(node, name, access, wait).ok();
        if r.is_none() {
            self.failed(name);
        }
        r
    }

    /// Counts `name` as failed now (it imported, but is of no use).
    pub fn failed(&mut self, name: SegmentName) {
        if self.at.len() >= Self::MAX {
            self.at.clear();
        }
        self.at.insert(name, Instant::now());
    }
}

/// A lost datagram rather than a refusal.
pub(crate) fn retryable(e: &vipc::Error) -> bool {
    matches!(e, vipc::Error::StillPending)
        || matches!(e.protocol(), Some(ProtocolError::Timeout(_) | ProtocolError::Refused(vipc::Refusal::UnknownName)))
}

/// What a probe of the peer's segment found.
pub(crate) enum Probe {
    /// The bytes read.
    Bytes(Vec<u8>),
    /// No answer in time (lost, or the node is down).
    Silent,
}

/// Reads `len` bytes at `offset` of the peer's segment into `anon` and back
/// out: the layers' liveness probe. A refusal (the segment unexported, or
/// access withdrawn) is [`Error::PeerGone`] at once.
pub(crate) fn probe(seg: &RemoteSegment, anon: &AnonSegment, offset: u32, len: u32, wait: Duration) -> Result<Probe> {
    let op = seg.read(offset, len, (anon, 0), false)?;
    match op.wait(wait) {
        Ok(MemOutcome::Read) => Ok(Probe::Bytes(anon.to_vec(0, len as usize)?)),
        Ok(other) => Err(vipc::Error::Internal(format!("a read finished with {other:?}")).into()),
        Err(e) if retryable(&e) => Ok(Probe::Silent),
        Err(e) => match e.protocol() {
            Some(ProtocolError::Refused(r)) => Err(Error::PeerGone(format!("its segment refuses reads ({r:?})"))),
            _ => Err(e.into()),
        },
    }
}

/// The little-endian u32 at `at`.
pub(crate) fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The little-endian u64 at `at`.
pub(crate) fn get64(b: &[u8], at: usize) -> u64 {
    u64::from(get32(b, at)) | (u64::from(get32(b, at + 4)) << 32)
}

/// Stores `v` little-endian at `at`.
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` little-endian at `at`.
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A random non-zero u32 (registration ids, CAS-II nonces).
pub(crate) fn nonzero_random() -> u32 {
    loop {
        let v: u32 = rand::random();
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_failed_to_import_is_not_tried_again_for_a_pause() {
        let node = Node::start(vipc::NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let mut failed = FailedImports::default();
        let wait = Duration::from_millis(300);
        let t = Instant::now();
        assert!(failed.import(&node, [7; 16], Access::READ, wait).is_none());
        assert!(t.elapsed() >= wait, "the first try waits");
        let t = Instant::now();
        assert!(failed.import(&node, [7; 16], Access::READ, wait).is_none());
        assert!(t.elapsed() < wait / 3, "the second does not: {:?}", t.elapsed());
    }
}
