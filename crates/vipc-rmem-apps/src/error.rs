//! The applications' error type.

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A remote-memory primitive failed in a way the application does not recover from.
    #[error(transparent)]
    Vipc(#[from] vipc::Error),
    /// A neighbour's segment could not be imported.
    #[error(transparent)]
    Layers(#[from] vipc_rmem_layers::Error),
    /// A neighbour's rows did not come within the caller's time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// The parameters do not describe a run (a grid too small for the workers, an odd size).
    #[error("bad parameters: {0}")]
    Params(String),
}

/// Result with the applications' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A read or CAS-II lost on the way (its request or its answer), rather than refused.
pub(crate) fn lost(e: &vipc::Error) -> bool {
    matches!(e, vipc::Error::StillPending) || matches!(e.protocol(), Some(vipc::ProtocolError::Timeout(_)))
}
