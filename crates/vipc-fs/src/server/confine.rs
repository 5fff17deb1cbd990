//! Confinement: every path a request names is resolved by the kernel
//! beneath the export's root (openat2 with RESOLVE_BENEATH), so `..` beyond
//! the root, absolute paths and symlinks (or chains of them) that lead out
//! fail with EXDEV, which the server reports as EACCES. Operations on a last
//! component (mkdir, unlink, rename, ...) resolve the parent this way and act
//! on the name with the `*at` calls, never following a final symlink.

use crate::attr::{Attr, FileKind, Timestamp};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{openat2, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use std::path::Path;

/// An errno (the server's failures travel as Linux errno values).
pub type Errno = i32;

/// The errno of a failed system call.
pub fn errno(e: rustix::io::Errno) -> Errno {
    e.raw_os_error()
}

/// The exported directory, held open.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
}

/// The resolve flags of every lookup: stay beneath the root, no /proc magic links.
fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Maps a resolution failure: an escape (EXDEV) becomes EACCES.
fn escape(e: rustix::io::Errno) -> Errno {
    if e == rustix::io::Errno::XDEV {
        libc::EACCES
    } else {
        e.raw_os_error()
    }
}

/// Refuses what the kernel need not see: absolute paths, NULs, overlong paths.
pub fn check_path(path: &str) -> Result<(), Errno> {
    if path.starts_with('/') {
        return Err(libc::EACCES);
    }
    if path.contains('\0') {
        return Err(libc::EINVAL);
    }
    if path.len() > crate::proto::MAX_PATH {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(())
}

impl Root {
    /// Opens `dir` (which must be a directory) as an export root.
    pub fn open(dir: &Path) -> std::io::Result<Root> {
        let fd = rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(Root { fd })
    }

    /// The root itself.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Opens `path` (relative to the root, "" = the root) with `flags`,
    /// confined beneath the root. `mode` is used only with O_CREAT.
    pub fn open_at(&self, path: &str, flags: OFlags, mode: u32) -> Result<OwnedFd, Errno> {
        check_path(path)?;
        let p = if path.is_empty() { "." } else { path };
        let mode =
            if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(granted_mode(mode, false)) } else { Mode::empty() };
        openat2(&self.fd, p, flags | OFlags::CLOEXEC, mode, beneath()).map_err(escape)
    }

    /// An O_PATH descriptor of `path` itself (a final symlink is not followed).
    pub fn node(&self, path: &str) -> Result<OwnedFd, Errno> {
        self.open_at(path, OFlags::PATH | OFlags::NOFOLLOW, 0)
    }

    /// The parent directory of `path` (O_PATH) and the last component. The
    /// last component may not be empty, "." or ".." (EINVAL). A path ending
    /// in '/' names a directory: one that names another existing file is
    /// ENOTDIR, as `unlink("f/")` is on Linux (it removed "f").
    pub fn parent<'p>(&self, path: &'p str) -> Result<(OwnedFd, &'p str), Errno> {
        check_path(path)?;
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(libc::EINVAL);
        }
        let fd = self.open_at(dir, OFlags::PATH | OFlags::DIRECTORY, 0)?;
        if trimmed.len() < path.len() {
            if let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                if !matches!(FileType::from_raw_mode(st.st_mode as _), FileType::Directory | FileType::Symlink) {
                    return Err(libc::ENOTDIR);
                }
            }
        }
        Ok((fd, name))
    }
}

/// The permission bits a client may give a file: its own, without set-user-ID
/// and (but on a directory, where it makes new entries inherit the group)
/// set-group-ID. The server creates every file as its own user, root
/// perhaps: a client's set-user-ID program would run as that user on the
/// server's machine (what NFS's nosuid guards against).
pub fn granted_mode(mode: u32, dir: bool) -> u32 {
    let strip = if dir { libc::S_ISUID } else { libc::S_ISUID | libc::S_ISGID };
    mode & 0o7777 & !strip
}

/// The attributes in a stat buffer.
pub fn attr_of(st: &Stat) -> Attr {
    let kind = match FileType::from_raw_mode(st.st_mode as _) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    };
    let t = |s: i64, n: u64| Timestamp { secs: s, nanos: (n as u32).min(999_999_999) };
    Attr {
        ino: st.st_ino,
        kind,
        size: st.st_size.max(0) as u64,
        blocks: st.st_blocks as u64,
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        atime: t(st.st_atime, st.st_atime_nsec),
        mtime: t(st.st_mtime, st.st_mtime_nsec),
        ctime: t(st.st_ctime, st.st_ctime_nsec),
        blksize: st.st_blksize as u32,
    }
}

/// fstat as an [`Attr`].
pub fn fstat(fd: impl AsFd) -> Result<Attr, Errno> {
    rustix::fs::fstat(fd).map(|s| attr_of(&s)).map_err(|e| e.raw_os_error())
}

/// The /proc path of a descriptor: chmod and utimes act on the file an
/// O_PATH descriptor resolved (never on a path looked up again).
pub fn proc_path(fd: &impl AsFd) -> String {
    use std::os::fd::AsRawFd;
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}
