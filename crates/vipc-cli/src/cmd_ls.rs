//! `vipc ls [-l] NAME:PATH`: list a remote directory (or describe a file), without a mount.

use crate::error::CliResult;
use crate::fsremote::{connect, fs_error, remote};
use crate::opts::NodeArgs;
use vipc::Node;
use vipc_fs::{Attr, FileKind, FsClient, Timestamp};

/// `drwxr-x---` for an attribute set.
fn mode_string(a: &Attr) -> String {
    let kind = match a.kind {
        FileKind::Dir => 'd',
        FileKind::Symlink => 'l',
        FileKind::File => '-',
        FileKind::Other => '?',
    };
    let mut s = String::from(kind);
    for shift in [6, 3, 0] {
        let bits = (a.perm >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// `s` as the terminal should show it: control characters (a newline, an
/// escape sequence in a name from another host) escaped, as `ls` does.
fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
    } else {
        s.into()
    }
}

/// A modification time as `ls -l --time-style=long-iso` shows it, in local
/// time: `2026-11-27 13:20` (seconds since the epoch if out of range).
fn when(t: &Timestamp) -> String {
    match chrono::DateTime::from_timestamp(t.secs, 0) {
        Some(d) => d.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M").to_string(),
        None => t.secs.to_string(),
    }
}

/// One `-l` line.
fn long_line(c: &FsClient, dir: &str, name: &str, a: &Attr) -> String {
    let mut line = format!(
        "{} {:>3} {:>5} {:>5} {:>12} {:>16} {}",
        mode_string(a),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        when(&a.mtime),
        shown(name)
    );
    if a.kind == FileKind::Symlink {
        let p = if dir.is_empty() { name.to_string() } else { format!("{}/{name}", dir.trim_end_matches('/')) };
        if let Ok(t) = c.readlink(&p) {
            line.push_str(&format!(" -> {}", shown(&t)));
        }
    }
    line
}

/// Lists `spec`.
pub fn run(spec: &str, long: bool, args: &NodeArgs) -> CliResult<()> {
    let (export, path) = remote(spec)?;
    let node = Node::start(args.build()?)?;
    let c = connect(&node, &export, &args.peers)?;
    let attr = c.lookup(&path).map_err(|e| fs_error(spec, e))?;
    if attr.kind == FileKind::Dir {
        let mut entries = c.readdir(&path).map_err(|e| fs_error(spec, e))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in &entries {
            if long {
                say!("{}", long_line(&c, &path, &e.name, &e.attr));
            } else {
                say!("{}", shown(&e.name));
            }
        }
    } else {
        let name = path.rsplit('/').next().unwrap_or(&path).to_string();
        let dir = path.strip_suffix(name.as_str()).unwrap_or("");
        if long {
            say!("{}", long_line(&c, dir, &name, &attr));
        } else {
            say!("{}", shown(&name));
        }
    }
    drop(c);
    node.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_like_ls() {
        let t = Timestamp::default();
        let a = Attr {
            ino: 1,
            kind: FileKind::Dir,
            size: 0,
            blocks: 0,
            perm: 0o750,
            nlink: 2,
            uid: 0,
            gid: 0,
            atime: t,
            mtime: t,
            ctime: t,
            blksize: 4096,
        };
        assert_eq!(mode_string(&a), "drwxr-x---");
        assert_eq!(mode_string(&Attr { kind: FileKind::File, perm: 0o644, ..a }), "-rw-r--r--");
    }

    #[test]
    fn times_read_as_dates() {
        let t = |secs| Timestamp { secs, ..Timestamp::default() };
        // Local time: the date may be a day either side of the UTC one.
        let shown = when(&t(1_795_785_643)); // 2026-11-27 13:20:43 UTC
        assert_eq!(shown.len(), "2026-11-27 13:20".len(), "{shown}");
        assert!(shown.starts_with("2026-11-2"), "{shown}");
        assert_eq!(when(&t(i64::MAX)), i64::MAX.to_string(), "out of range: the number itself");
    }

    #[test]
    fn control_characters_in_names_are_escaped() {
        assert_eq!(shown("plain é"), "plain é");
        assert_eq!(shown("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
    }
}
