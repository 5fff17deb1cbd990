//! The name service's error type.

use vipc::HostId;

/// Why a name-service operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A remote-memory primitive failed in a way the clerk does not recover from.
    #[error(transparent)]
    Vipc(#[from] vipc::Error),
    /// No table the clerk asked holds the name as a live entry.
    #[error("name {0:?} is not registered")]
    NotFound(String),
    /// The name is empty or longer than [`crate::NAME_MAX`] bytes.
    #[error("bad name ({len} bytes; 1 to {max} allowed)")]
    BadName {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The local table already holds the name as a live entry.
    #[error("name {0:?} is already registered here")]
    AlreadyRegistered(String),
    /// Every bucket of the local table holds a live entry.
    #[error("the name table's {0} buckets are all taken")]
    TableFull(u32),
    /// The host exports no name table (no clerk runs there, or it is unreachable).
    #[error("no clerk answers on host {0:#06x}")]
    NoClerk(HostId),
    /// The host's table is not laid out as this crate's (another version, or garbage).
    #[error("host {host:#06x}'s name table is not usable: {why}")]
    Layout {
        /// The host.
        host: HostId,
        /// What is wrong with it.
        why: String,
    },
    /// An entry failed its check word on every re-read: it is not a write in
    /// progress but damage (or a peer that does not follow the layout).
    #[error("host {host:#06x}'s entry {slot} fails its check on every read")]
    Corrupt {
        /// The host.
        host: HostId,
        /// The bucket.
        slot: u32,
    },
    /// The operation did not finish within the clerk's time.
    #[error("timed out")]
    Timeout,
}

/// Result with the name service's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
