//! The pipe client's error.

use crate::proto;

/// Why a pipe operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    /// No pipe server is registered under this name.
    #[error("no pipe named {0:?} (no server registered as pipe:{0})")]
    NotFound(String),
    /// The name is empty or longer than [`proto::MAX_NAME`] bytes.
    #[error("invalid pipe name {0:?}: 1 to 27 bytes")]
    BadName(String),
    /// Another live server on this node already serves the pipe.
    #[error("pipe {0:?} is already served by {1}")]
    Taken(String, vipc::Pid),
    /// The server no longer has this open end: it restarted, or heard nothing
    /// from this client (its heartbeats) for a whole lease (errno EBADF).
    #[error(
        "the pipe server no longer has this end open (it restarted, or heard nothing from this client for a lease)"
    )]
    EndLost,
    /// The pipe server refused the operation with this errno (EPIPE, EBADF, EINVAL, ...).
    #[error("pipe server: {}", std::io::Error::from_raw_os_error(i32::from(*.0)))]
    Errno(u8),
    /// The server could not be reached or failed mid-call.
    #[error("pipe server unreachable: {0}")]
    Transport(#[from] vipc::Error),
    /// The server's reply made no sense.
    #[error("bad reply from the pipe server: {0}")]
    Protocol(String),
}

impl PipeError {
    /// The Linux errno this error stands for (EIO for transport and protocol failures).
    pub fn errno(&self) -> i32 {
        match self {
            PipeError::Errno(e) => i32::from(*e),
            PipeError::EndLost => i32::from(proto::EBADF),
            PipeError::NotFound(_) => 2, // ENOENT
            PipeError::BadName(_) => 22, // EINVAL
            _ => 5,                      // EIO
        }
    }

    /// Whether every reader has gone (EPIPE).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, PipeError::Errno(proto::EPIPE))
    }
}

impl From<PipeError> for std::io::Error {
    fn from(e: PipeError) -> std::io::Error {
        match e {
            PipeError::Errno(n) => std::io::Error::from_raw_os_error(i32::from(n)),
            other => std::io::Error::other(other),
        }
    }
}

/// Result with a [`PipeError`].
pub type PipeResult<T> = Result<T, PipeError>;
