//! The file service's error: a Linux errno from the server, or a transport failure.

/// Why a file-service call failed. Every variant maps to a Linux errno
/// ([`FsError::errno`]) so that a FUSE layer can pass it through.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The server refused the operation with this errno (ENOENT, EACCES, EROFS, EXDEV, ...).
    #[error("{}", errno_text(*.0))]
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

/// The errno's words ("Read-only file system"), without the " (os error 30)"
/// that `std::io::Error` adds.
fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    text.split(" (os error").next().unwrap_or(&text).to_string()
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

#[cfg(test)]
mod tests {
    #[test]
    fn an_errno_reads_as_its_words_alone() {
        assert_eq!(super::FsError::Errno(libc::EROFS).to_string(), "Read-only file system");
        assert_eq!(super::FsError::Errno(libc::EIO).to_string(), "Input/output error");
    }
}
