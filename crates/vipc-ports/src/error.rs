//! The typed errors of every call in this crate.

/// Why a typed call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The IPC underneath failed (no such process, timeout, the caller's deadline…).
    #[error(transparent)]
    Vipc(#[from] vipc::Error),
    /// No process is registered under the name.
    #[error("no server is registered as {0:?}")]
    NotFound(String),
    /// Client and server were built from different versions of the interface.
    #[error("interface {interface}: the client ({client:#018x}) and the server ({server:#018x}) differ in version or methods")]
    Mismatch {
        /// The interface's name.
        interface: &'static str,
        /// The client's fingerprint of it.
        client: u64,
        /// The server's fingerprint.
        server: u64,
    },
    /// The server does not have the method (it cannot happen between matching fingerprints).
    #[error("interface {interface}: the server has no method {method}")]
    NoSuchMethod {
        /// The interface's name.
        interface: &'static str,
        /// The method's index.
        method: u16,
    },
    /// A value could not be encoded.
    #[error("cannot encode: {0}")]
    Encode(String),
    /// Bytes could not be decoded as the expected type (the peer said so, or we found so).
    #[error("cannot decode: {0}")]
    Decode(String),
    /// The server's handler panicked; the server lives on.
    #[error("interface {interface}: the handler of method {method} panicked")]
    HandlerPanicked {
        /// The interface's name.
        interface: &'static str,
        /// The method's index.
        method: u16,
    },
    /// The receiver holds as much as it may: a port's keeper as many
    /// messages ([`crate::MAX_HELD`], [`crate::MAX_HELD_BYTES`]) until
    /// regions take some, an activator as many processes as its node may run.
    #[error("{0} holds as much as it may; try again later")]
    Full(String),
    /// The answer could not be moved into this caller's segment (the
    /// transfer failed, or was slower than the stream cap); nothing of it
    /// was delivered (a port's message stays for the next take).
    #[error("{0}: the answer could not be moved to this caller (the transfer failed or was too slow)")]
    Undelivered(String),
    /// A port of this name and types is already open on this [`crate::Ports`]
    /// (two handles of one port: closing either closed both).
    #[error("port {0:?} is already open here with these types")]
    AlreadyOpen(String),
    /// The port belongs to another [`crate::Ports`] (another node's, or
    /// another keeper of this node).
    #[error("port {0:?} belongs to another Ports")]
    OtherPorts(String),
    /// The peer answered with something this crate does not speak.
    #[error("malformed answer: {0}")]
    Malformed(String),
    /// The deadline of a multi-node call passed before these nodes answered;
    /// `answered` counts the answers that came.
    #[error("no answer from {} node(s) before the deadline: {missing:?}", missing.len())]
    Missing {
        /// The hosts that did not answer.
        missing: Vec<vipc::HostId>,
        /// How many answered.
        answered: usize,
    },
}

impl Error {
    /// Whether the caller's own deadline (`vipc::within`) ended the call.
    pub fn is_deadline(&self) -> bool {
        matches!(self, Error::Vipc(e) if e.is_deadline())
    }
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
