//! The CLI's error: one line of text, printed as `vipc: error: ...`.

use std::fmt;
use std::io::ErrorKind;

/// A CLI failure, already phrased for the user.
#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keep it to one line whatever the source said, in the error's own words.
        let one_line: String = self.0.lines().map(str::trim).collect::<Vec<_>>().join(" ");
        f.write_str(&without_os_error_codes(&one_line))
    }
}

/// `text` without the " (os error N)" that `std::io::Error` adds to its words.
fn without_os_error_codes(text: &str) -> String {
    const MARK: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        out.push_str(&rest[..at]);
        if digits > 0 && after[digits..].starts_with(')') {
            rest = &after[digits + 1..];
        } else {
            out.push_str(MARK);
            rest = after;
        }
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_without_os_error_codes() {
        let e = CliError("cannot write keys: Is a directory (os error 21)\n  more".into());
        assert_eq!(e.to_string(), "cannot write keys: Is a directory more");
        let io = std::io::Error::from_raw_os_error(28);
        assert_eq!(CliError::from(io).to_string(), "No space left on device");
        // Only the code in std's form goes.
        assert_eq!(CliError("a (os error x) b (os error 5".into()).to_string(), "a (os error x) b (os error 5");
    }
}
