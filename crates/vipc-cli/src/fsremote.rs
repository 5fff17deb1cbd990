//! What `cp`, `cat` and `ls` share: `NAME:PATH` arguments, a client of an
//! export, and `--export NAME=DIR[:ro]` of `vipc node`.

use crate::error::{CliError, CliResult};
use std::net::SocketAddr;
use std::path::PathBuf;
use vipc::Node;
use vipc_fs::{ExportConfig, FsClient, FsError};

/// A file argument: a path on this machine, or `NAME:PATH` in export NAME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Spec {
    /// A local path.
    Local(PathBuf),
    /// A path relative to the root of an export.
    Remote {
        /// The export's name.
        export: String,
        /// The path inside it ("" = the root).
        path: String,
    },
}

/// Whether `s` can be an export name (1–29 bytes, letters, digits, `-_.`).
fn is_export_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 29 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// [`is_export_name`] as a one-line error naming the rule.
pub fn check_export_name(name: &str) -> CliResult<()> {
    if is_export_name(name) {
        Ok(())
    } else {
        Err(bad_export_name(name))
    }
}

fn bad_export_name(name: &str) -> CliError {
    CliError(format!("invalid export name {name:?}: 1 to 29 letters, digits, '-', '_' or '.'"))
}

impl Spec {
    /// Parses `NAME:PATH` (remote) or anything else (local: `./a:b` for a
    /// local name with a colon). A leading '/' of PATH is dropped.
    pub fn parse(s: &str) -> CliResult<Spec> {
        if s.is_empty() {
            return Err("empty file argument".into());
        }
        if let Some((name, path)) = s.split_once(':') {
            if is_export_name(name) && !name.contains('/') {
                let path = path.trim_start_matches('/').to_string();
                return Ok(Spec::Remote { export: name.to_string(), path });
            }
        }
        Ok(Spec::Local(PathBuf::from(s)))
    }

    /// Ends in '/': it can only name a directory.
    pub fn names_a_directory(&self) -> bool {
        match self {
            Spec::Local(p) => p.as_os_str().as_encoded_bytes().ends_with(b"/"),
            Spec::Remote { path, .. } => path.ends_with('/'),
        }
    }

    /// The argument as the user wrote it (for messages).
    pub fn show(&self) -> String {
        match self {
            Spec::Local(p) => p.display().to_string(),
            Spec::Remote { export, path } => format!("{export}:{path}"),
        }
    }
}

/// Requires a remote spec.
pub fn remote(s: &str) -> CliResult<(String, String)> {
    match Spec::parse(s)? {
        Spec::Remote { export, path } => Ok((export, path)),
        Spec::Local(_) => match s.split_once(':') {
            // NAME:PATH in form, but no export could have that name.
            Some((name, _)) if !name.is_empty() && !name.contains('/') => Err(bad_export_name(name)),
            _ => Err(CliError(format!("{s:?} is not a remote file: expected NAME:PATH"))),
        },
    }
}

/// Connects to export `name` from `node`, with a one-line error (naming
/// the listed `peers` no node answered at: a wrong address or a node down).
pub fn connect(node: &Node, name: &str, peers: &[SocketAddr]) -> CliResult<FsClient> {
    FsClient::connect(node, name).map_err(|e| match e {
        FsError::NotFound(_) => {
            let silent = silent_peers(node, peers);
            let hint = if silent.is_empty() { String::new() } else { format!("; {}", no_node_at(&silent)) };
            CliError(format!(
                "no file server exports {name:?} (nobody answered for fs:{name}: no node serves it, or its key differs{hint})"
            ))
        }
        e => CliError(format!("cannot reach export {name:?}: {e}")),
    })
}

/// Which of `peers` no node has answered from: a node that runs answers a
/// new node's first I-Am-Here within 10 ms, long before a lookup gives up.
pub fn silent_peers(node: &Node, peers: &[SocketAddr]) -> Vec<SocketAddr> {
    let heard: Vec<SocketAddr> =
        node.alive_hosts().map(|a| a.rows.iter().flatten().map(|r| r.addr).collect()).unwrap_or_default();
    peers.iter().filter(|p| !heard.contains(p)).copied().collect()
}

/// "no vipc node answered at A, B".
pub fn no_node_at(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
    format!("no vipc node answered at {}", list.join(", "))
}

/// A file-service error about `what`, as one line.
pub fn fs_error(what: &str, e: FsError) -> CliError {
    CliError(format!("{what}: {e}"))
}

/// Parses `NAME=DIR[:ro]` of `vipc node --export`.
pub fn parse_export(s: &str) -> CliResult<ExportConfig> {
    let bad = || CliError(format!("invalid export {s:?}: expected NAME=DIR or NAME=DIR:ro"));
    let (name, rest) = s.split_once('=').ok_or_else(bad)?;
    check_export_name(name)?;
    let (dir, read_only) = match rest.strip_suffix(":ro") {
        Some(d) => (d, true),
        None => (rest, false),
    };
    if dir.is_empty() {
        return Err(bad());
    }
    let dir = PathBuf::from(dir);
    if !dir.is_dir() {
        return Err(CliError(format!("cannot export {}: not a directory", dir.display())));
    }
    Ok(ExportConfig { name: name.to_string(), dir, read_only, workers: 4 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_and_exports_parse() {
        assert_eq!(Spec::parse("data:/a/b").unwrap(), Spec::Remote { export: "data".into(), path: "a/b".into() });
        assert_eq!(Spec::parse("data:").unwrap(), Spec::Remote { export: "data".into(), path: "".into() });
        assert_eq!(Spec::parse("./x:y").unwrap(), Spec::Local("./x:y".into()));
        assert_eq!(Spec::parse("/tmp/f").unwrap(), Spec::Local("/tmp/f".into()));
        assert!(Spec::parse("").is_err());
        let e = parse_export("docs=/tmp:ro").unwrap();
        assert_eq!((e.name.as_str(), e.dir.to_str().unwrap(), e.read_only), ("docs", "/tmp", true));
        assert!(!parse_export("docs=/tmp").unwrap().read_only);
        assert!(parse_export("docs").is_err());
        assert!(parse_export("=/tmp").is_err());
        assert!(parse_export("a b=/tmp").is_err());
        assert!(parse_export("docs=/nonexistent-dir-xyz").is_err());
    }

    /// A remote-looking argument whose name no export can have says why.
    #[test]
    fn remote_files_name_a_possible_export() {
        assert_eq!(remote("data:a").unwrap(), ("data".into(), "a".into()));
        let long = format!("{}:a", "n".repeat(30));
        assert!(remote(&long).unwrap_err().to_string().starts_with("invalid export name \"nnn"), "too long");
        assert!(remote("a b:c").unwrap_err().to_string().starts_with("invalid export name \"a b\""));
        assert!(remote("/etc/passwd").unwrap_err().to_string().ends_with("is not a remote file: expected NAME:PATH"));
        assert!(remote("./x:y").unwrap_err().to_string().ends_with("is not a remote file: expected NAME:PATH"));
    }
}
