//! Mounting and unmounting: checks on the mount point, cleanup of a stale mount left by a crashed
//! `vipc mount`, the fuser session on its own threads, and an unmount that does not hang on a busy mount.

use crate::fs::VipcFs;
use crate::options::MountOptions;
use fuser::{Config, MountOption, SessionACL, SessionUnmounter};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vipc_fs::FsClient;

/// Why a mount could not be made or removed; each phrased as one line for the user.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// [`MountOptions::threads`] is 0 or over [`crate::options::MAX_THREADS`].
    #[error("a mount takes 1 to {max} request threads, not {0}", max = crate::options::MAX_THREADS)]
    Threads(usize),
    /// The mount point does not exist.
    #[error("mount point {0} does not exist")]
    Missing(PathBuf),
    /// The mount point is not a directory.
    #[error("mount point {0} is not a directory")]
    NotADirectory(PathBuf),
    /// Something is mounted there and answers (not stale).
    #[error("{0} is already a mount point (unmount it first)")]
    AlreadyMounted(PathBuf),
    /// No FUSE device: the kernel module is not loaded or the device is not visible here.
    #[error("no /dev/fuse: load the fuse module (modprobe fuse) or give the container the device")]
    NoFuseDevice,
    /// A stale mount could not be removed.
    #[error("cannot remove the stale mount on {path}: {reason}")]
    Stale {
        /// The mount point.
        path: PathBuf,
        /// What umount2 and fusermount3 said.
        reason: String,
    },
    /// The mount itself failed.
    #[error("cannot mount on {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// What the kernel or fusermount3 said.
        source: io::Error,
    },
    /// Unmounting failed.
    #[error("cannot unmount {path}: {source}")]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// What umount said.
        source: io::Error,
    },
}

/// True when `e` is the error a dead FUSE server's mount gives ("Transport endpoint is not connected").
fn is_stale_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTCONN)
}

/// True when `path` is a mount point (listed in /proc/self/mountinfo).
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.as_os_str().to_string_lossy();
    text.lines().filter_map(|l| l.split(' ').nth(4)).any(|mp| unescape_mountinfo(mp) == want)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches the mount on `path` lazily (umount2 with MNT_DETACH as root, `fusermount3 -uz` otherwise): it
/// disappears from the name space at once, even when busy, and goes when its last user leaves.
pub fn lazy_unmount(path: &Path) -> Result<(), String> {
    let direct = match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    match Command::new("fusermount3").arg("-u").arg("-z").arg("--").arg(path).output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("umount2: {direct}; fusermount3: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Err(format!("umount2: {direct}; fusermount3: {e}")),
    }
}

/// Checks that `path` can take a mount and returns its absolute form. A stale FUSE mount there (its
/// server died: "Transport endpoint is not connected") is detached first.
pub fn prepare_mountpoint(path: &Path) -> Result<PathBuf, MountError> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(path)).unwrap_or_else(|_| path.to_path_buf())
    };
    match std::fs::metadata(&abs) {
        Err(e) if is_stale_error(&e) => {
            tracing::info!("{}: stale mount (transport endpoint not connected): detaching it", abs.display());
            lazy_unmount(&abs).map_err(|reason| MountError::Stale { path: abs.clone(), reason })?;
            return prepare_mountpoint(&abs);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(MountError::Missing(abs)),
        Err(e) => return Err(MountError::Mount { path: abs, source: e }),
        Ok(m) if !m.is_dir() => return Err(MountError::NotADirectory(abs)),
        Ok(_) => {}
    }
    let abs = abs.canonicalize().map_err(|e| MountError::Mount { path: abs.clone(), source: e })?;
    if is_mount_point(&abs) && abs != Path::new("/") {
        // A dead FUSE server's mount may still answer stat from cached attributes; statfs always asks it.
        if let Err(nix::errno::Errno::ENOTCONN) = nix::sys::statfs::statfs(&abs) {
            tracing::info!("{}: stale mount (transport endpoint not connected): detaching it", abs.display());
            lazy_unmount(&abs).map_err(|reason| MountError::Stale { path: abs.clone(), reason })?;
            return prepare_mountpoint(&abs);
        }
        return Err(MountError::AlreadyMounted(abs));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(MountError::NoFuseDevice);
    }
    Ok(abs)
}

/// A live mount: its session threads serve the kernel until [`Mounted::unmount`] (or drop), or until
/// somebody unmounts it from outside ([`Mounted::wait`] then returns).
#[must_use = "dropping the mount unmounts it"]
pub struct Mounted {
    mountpoint: PathBuf,
    unmounter: Option<SessionUnmounter>,
    thread: Option<JoinHandle<()>>,
    ended: mpsc::Receiver<io::Result<()>>,
    read_ahead_used: Arc<AtomicU64>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted").field("mountpoint", &self.mountpoint).finish()
    }
}

/// Mounts `client`'s export on `mountpoint` (checked and cleaned with [`prepare_mountpoint`] first).
/// `source` names the mount in /proc/mounts (e.g. `vipc:EXPORT`).
pub fn mount(
    client: Arc<FsClient>,
    mountpoint: &Path,
    source: &str,
    opts: MountOptions,
) -> Result<Mounted, MountError> {
    if !(1..=crate::options::MAX_THREADS).contains(&opts.threads) {
        return Err(MountError::Threads(opts.threads));
    }
    let mountpoint = prepare_mountpoint(mountpoint)?;
    let mut mount_options = vec![
        MountOption::FSName(source.to_string()),
        MountOption::Subtype("vipc".to_string()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    if opts.read_only || client.read_only() {
        mount_options.push(MountOption::RO);
    }
    let mut config = Config::default();
    config.mount_options = mount_options;
    config.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.n_threads = Some(opts.threads);
    config.clone_fd = true;
    let fs = VipcFs::new(client, opts);
    let read_ahead_used = fs.listings_read_ahead();
    let mut session = fuser::Session::new(fs, &mountpoint, &config)
        .map_err(|source| MountError::Mount { path: mountpoint.clone(), source })?;
    let unmounter = session.unmount_callable();
    let (tx, ended) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("vipc-mount".into())
        .spawn(move || {
            let r = session.run();
            let _ = tx.send(r);
        })
        .map_err(|source| MountError::Mount { path: mountpoint.clone(), source })?;
    Ok(Mounted { mountpoint, unmounter: Some(unmounter), thread: Some(thread), ended, read_ahead_used })
}

impl Mounted {
    /// Where it is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Directory listings served from read-ahead so far (`MountOptions::dir_read_ahead`).
    pub fn listings_read_ahead(&self) -> u64 {
        self.read_ahead_used.load(Ordering::Relaxed)
    }

    /// Waits up to `timeout` for the session to end by itself (somebody ran `umount` or `fusermount3 -u`,
    /// or the session failed): `None` while it runs, else how it ended.
    pub fn wait(&self, timeout: Duration) -> Option<Result<(), String>> {
        match self.ended.recv_timeout(timeout) {
            Ok(r) => Some(r.map_err(|e| e.to_string())),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Ok(())),
        }
    }

    /// Unmounts. A busy mount (a shell inside it, an open file) is detached lazily instead: it leaves the
    /// name space now and its last users get errors once this process is gone.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.unmount_inner()
    }

    fn unmount_inner(&mut self) -> Result<(), MountError> {
        let Some(mut un) = self.unmounter.take() else { return Ok(()) };
        let result = match un.unmount() {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => lazy_unmount(&self.mountpoint).map_err(|reason| {
                MountError::Unmount { path: self.mountpoint.clone(), source: io::Error::other(reason) }
            }),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(source) => Err(MountError::Unmount { path: self.mountpoint.clone(), source }),
        };
        // After a plain unmount the session ends at once; after a lazy one it lasts while the mount is
        // busy, and then this process's exit ends it.
        if self.wait(Duration::from_secs(2)).is_some() {
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
        result
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Err(e) = self.unmount_inner() {
            tracing::warn!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo(r"/x\134y"), r"/x\y");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }

    #[test]
    fn mountpoint_errors_are_specific() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        assert!(matches!(prepare_mountpoint(&missing), Err(MountError::Missing(_))));
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(prepare_mountpoint(&file), Err(MountError::NotADirectory(_))));
        assert!(is_mount_point(Path::new("/")));
        assert!(!is_mount_point(dir.path()));
    }
}
