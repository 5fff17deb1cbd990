//! The CLI's error: one line of text, printed as `vipc: error: ...`.

use std::fmt;
use std::io::ErrorKind;

/// A CLI failure, already phrased for the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keep it to one line whatever the source said.
        let one_line: String = self.0.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        f.write_str(&one_line)
    }
}

impl From<String> for CliError {
    fn from(s: String) -> CliError {
        CliError(s)
    }
}

impl From<&str> for CliError {
    fn from(s: &str) -> CliError {
        CliError(s.to_string())
    }
}

impl From<vipc::Error> for CliError {
    fn from(e: vipc::Error) -> CliError {
        CliError(match e {
            vipc::Error::Bind { addr, source } => match source.kind() {
                ErrorKind::AddrInUse => format!("cannot listen on {addr}: address already in use"),
                ErrorKind::AddrNotAvailable => format!("cannot listen on {addr}: not an address of this machine"),
                _ => format!("cannot listen on {addr}: {source}"),
            },
            other => other.to_string(),
        })
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        CliError(e.to_string())
    }
}

/// Result with a [`CliError`].
pub type CliResult<T> = Result<T, CliError>;
