//! How a mount caches and how many requests it serves at once.

use std::time::Duration;

/// Most request threads a mount takes: each holds a clone of the /dev/fuse
/// descriptor and a 16 MiB request buffer.
pub const MAX_THREADS: usize = 256;

/// Settings of one mount. The defaults suit a workstation: attributes and names cached for 1 s, file data
/// kept in the page cache across opens while the file is unchanged, 16 request threads, subdirectories'
/// listings read ahead by 4 threads.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// How long the kernel may use attributes without asking again (another client's change shows after
    /// at most this long; this mount's own changes show at once).
    pub attr_ttl: Duration,
    /// How long the kernel may trust a name -> file mapping.
    pub entry_ttl: Duration,
    /// Request threads (each reads its own clone of the /dev/fuse descriptor): the number of calls that
    /// can wait on the server at once; 1 to [`MAX_THREADS`].
    pub threads: usize,
    /// Keep a file's cached pages when it is opened again unchanged (same mtime and size); otherwise every
    /// open starts from an empty cache (close-to-open consistency).
    pub data_cache: bool,
    /// Bypass the page cache: every read and write goes to the server as the program made it (for
    /// benchmarks of the protocol; mmap of files then fails).
    pub direct_io: bool,
    /// Let other users use the mount (the kernel then checks permissions from the file modes).
    pub allow_other: bool,
    /// Mount read-only even if the export is writable.
    pub read_only: bool,
    /// Largest read or write request the kernel sends (bytes), also the read-ahead window.
    pub max_io: u32,
    /// Threads that read the listings of the next subdirectories (a window of 16 ahead of the one opened)
    /// while a program walks a tree (`find`, `du`, `tar c`); 0 = no directory read-ahead. A listing read
    /// ahead is dropped by any change made through the mount and is never used older than the attribute TTL.
    pub dir_read_ahead: usize,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            attr_ttl: Duration::from_secs(1),
            entry_ttl: Duration::from_secs(1),
            threads: 16,
            data_cache: true,
            direct_io: false,
            // root may always allow others (fuse.conf's user_allow_other governs everybody else).
            allow_other: nix::unistd::geteuid().is_root(),
            read_only: false,
            max_io: 1 << 20,
            dir_read_ahead: 4,
        }
    }
}
