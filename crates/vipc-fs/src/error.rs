//! The file service's error: a Linux errno from the server, or a transport failure.

/// Why a file-service call failed. Every variant maps to a Linux errno
/// ([`FsError::errno`]) so that a FUSE layer can pass it through.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The server refused the operation with this errno (ENOENT, EACCES, EROFS, EXDEV, ...).
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Errno(i32),
    /// The server could not be reached or failed mid-call (maps to EIO).
    #[error("file server unreachable: {0}")]
    Transport(#[from] vipc::Error),
    /// The server's reply made no sense (maps to EIO).
    #[error("bad reply from the file server: {0}")]
    Protocol(String),
    /// No process is registered under the export's name (maps to EIO): the
    /// server is down or was never started.
    #[error("no file server registered as {0:?}")]
    NotFound(String),
}

impl FsError {
    /// The Linux errno this error stands for: the server's errno, else EIO.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Errno(e) => *e,
            _ => libc::EIO,
        }
    }
}

impl From<rustix::io::Errno> for FsError {
    fn from(e: rustix::io::Errno) -> FsError {
        FsError::Errno(e.raw_os_error())
    }
}

impl From<std::io::Error> for FsError {
    fn from(e: std::io::Error) -> FsError {
        FsError::Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

/// Result with an [`FsError`].
pub type FsResult<T> = Result<T, FsError>;
