//! The bench's error: a measurement or a peer process that failed.

/// Why a suite item could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An I/O error (sockets, child processes, files).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The vipc runtime failed.
    #[error("vipc: {0}")]
    Vipc(#[from] vipc::Error),
    /// libzmq failed.
    #[error("zeromq: {0}")]
    Zmq(#[from] zmq::Error),
    /// The gRPC baseline failed.
    #[error("grpc: {0}")]
    Grpc(String),
    /// A child process of the bench misbehaved.
    #[error("peer {name}: {msg}")]
    Peer {
        /// Which peer (its kind).
        name: String,
        /// What went wrong.
        msg: String,
    },
    /// Bad arguments or anything else, already phrased.
    #[error("{0}")]
    Other(String),
}

impl From<String> for BenchError {
    fn from(s: String) -> BenchError {
        BenchError::Other(s)
    }
}

impl From<&str> for BenchError {
    fn from(s: &str) -> BenchError {
        BenchError::Other(s.to_string())
    }
}

/// Result with a [`BenchError`].
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
