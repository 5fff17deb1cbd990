//! The runtime's error type.

use std::net::SocketAddr;
use vipc_engine::HostId;

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The protocol refused or failed the primitive (no such process, timeout, misuse…).
    #[error(transparent)]
    Protocol(#[from] vipc_engine::Error),
    /// A socket operation failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The listen address (or the multicast group's port) could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why (e.g. address already in use).
        source: std::io::Error,
    },
    /// The node was shut down; blocked and later calls return this.
    #[error("the node has stopped")]
    NodeStopped,
    /// Another node already holds the configured logical host id.
    #[error("logical host {host:#06x} is already in use by {addr}")]
    HostConflict {
        /// The contested id.
        host: HostId,
        /// The node holding it.
        addr: SocketAddr,
    },
    /// Remote memory: the operation had not finished when the caller's wait
    /// ended (it may still finish; the engine fails it after `rmem_timeout`).
    #[error("the remote-memory operation is still pending")]
    StillPending,
    /// The engine answered a call with a completion of another kind (a bug).
    #[error("internal error: {0}")]
    Internal(String),
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An object of one node was passed to a call on another (segment ids
    /// are per node: the call would act on whatever that node holds under it).
    #[error("{0} belongs to another node")]
    OtherNode(&'static str),
}

impl Error {
    /// The protocol error inside, if this is one.
    pub fn protocol(&self) -> Option<&vipc_engine::Error> {
        match self {
            Error::Protocol(e) => Some(e),
            _ => None,
        }
    }
}

/// Result with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
