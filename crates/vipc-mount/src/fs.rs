//! The FUSE file system: kernel requests turned into calls on an [`FsClient`].
//!
//! fuser runs several session threads (each with its own cloned `/dev/fuse` descriptor) that call into
//! this one shared object, so many programs' requests are served at once; the inode table and the handle
//! tables sit behind short mutexes that are never held across a call to the server.

use crate::convert::{self, errno, file_attr, name};
use crate::dirahead::{DirAhead, Listing};
use crate::heads::Heads;
use crate::inodes::{join, InodeTable};
use crate::options::MountOptions;
use fuser::{
    Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};
use vipc_fs::proto::OPEN_HEAD_MAX;
use vipc_fs::{Attr, FileKind, FsClient, Handle, SetAttr};

/// Open flags passed on to the server; the rest (O_CLOEXEC, O_NOCTTY, O_LARGEFILE, O_NONBLOCK, O_DIRECT,
/// O_NOFOLLOW: the kernel resolved the path already) concern the client side only.
const PASSED_FLAGS: i32 =
    libc::O_ACCMODE | libc::O_APPEND | libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_SYNC | libc::O_DSYNC;

/// How many times a lookup that raced a change of its name through the mount is asked again.
const LOOKUP_RETRIES: u32 = 3;

/// A directory opened through the mount: its listing, read once at the open, and the epoch it was asked
/// for in (its entries for names changed since are looked up again).
struct OpenDir {
    listing: Arc<Listing>,
    since: u64,
}

/// What [`VipcFs::change_ends`] tells of a change.
struct Ended {
    /// The epoch from which answers are up to date again.
    epoch: u64,
    /// No other change to the same nodes overlapped it: its own answer describes them.
    alone: bool,
}

/// A file opened through the mount.
#[derive(Clone, Copy, Debug)]
struct OpenFile {
    ino: u64,
    handle: Handle,
}

/// The mount's file system: one per mount, shared by fuser's session threads.
pub struct VipcFs {
    client: Arc<FsClient>,
    opts: MountOptions,
    table: Mutex<InodeTable>,
    files: Mutex<HashMap<u64, OpenFile>>,
    dirs: Mutex<HashMap<u64, Arc<OpenDir>>>,
    /// Small files' beginnings that came with their opens.
    heads: Heads,
    ahead: DirAhead,
    next_fh: AtomicU64,
}

impl std::fmt::Debug for VipcFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VipcFs").field("export", &self.client.export_name()).finish()
    }
}

/// Locks a mutex, going on with the data if another thread panicked while holding it (the tables stay
/// consistent step by step).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl VipcFs {
    /// A file system serving `client`'s export with `opts`.
    pub fn new(client: Arc<FsClient>, opts: MountOptions) -> VipcFs {
        let c = client.clone();
        let max_age = opts.attr_ttl.min(opts.entry_ttl);
        let ahead = DirAhead::new(opts.dir_read_ahead, max_age, Arc::new(move |path: &str| c.readdir(path).ok()));
        VipcFs {
            client,
            opts,
            ahead,
            table: Mutex::new(InodeTable::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            heads: Heads::default(),
            next_fh: AtomicU64::new(1),
        }
    }

    /// The count of directory listings read ahead and then used, shared.
    pub(crate) fn listings_read_ahead(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.ahead.used()
    }

    /// Number of node ids the kernel holds (for tests and statistics).
    pub fn inode_count(&self) -> usize {
        lock(&self.table).len()
    }

    fn path(&self, ino: INodeNo) -> Result<String, Errno> {
        lock(&self.table).path(ino.0).ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, n: &OsStr) -> Result<String, Errno> {
        let n = name(n)?;
        Ok(join(&self.path(parent)?, n))
    }

    fn file(&self, fh: FileHandle) -> Result<OpenFile, Errno> {
        lock(&self.files).get(&fh.0).copied().ok_or(Errno::EBADF)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a new entry of `path`, asked for at epoch `since`, and answers the kernel with it.
    fn entry(&self, path: &str, attr: &Attr, since: u64, reply: ReplyEntry) {
        let (ino, kept) = lock(&self.table).remember(path, attr, Instant::now(), since);
        reply.entry_with_ttls(&self.attr_ttl(kept), &self.opts.entry_ttl, &file_attr(ino, attr), Generation(0));
    }

    /// How long the kernel may keep attributes: not at all if they may be older than a change made
    /// through the mount (they were not `kept` in the table either).
    fn attr_ttl(&self, kept: bool) -> Duration {
        if kept {
            self.opts.attr_ttl
        } else {
            Duration::ZERO
        }
    }

    /// The present epoch: taken before a request whose answer may be cached.
    fn epoch(&self) -> u64 {
        lock(&self.table).epoch()
    }

    /// A change to nodes `inos` and names `paths` is about to be sent: nothing cached of them is used from
    /// now on (see [`InodeTable::changing`]), small files' heads included. Returns the change's epoch.
    fn change_begins(&self, inos: &[u64], paths: &[&str]) -> u64 {
        let began = lock(&self.table).changing(inos, paths);
        for &ino in inos {
            self.heads.changed(ino);
        }
        began
    }

    /// The change begun at epoch `began` has been answered: `update` brings the table in line with it, then
    /// the nodes and names are stamped again, so that what was asked for while the change was under way is
    /// refused too, and whatever such answers left (attributes, heads, listings read ahead) is dropped.
    fn change_ends(&self, began: u64, inos: &[u64], paths: &[&str], update: impl FnOnce(&mut InodeTable)) -> Ended {
        let mut t = lock(&self.table);
        let alone = inos.iter().all(|&i| !t.changed_since(i, began));
        // The nodes the names stood for (an unlinked or replaced one loses its name in `update`).
        let named: Vec<u64> = paths.iter().filter_map(|p| t.ino_of(p)).collect();
        update(&mut t);
        let touched: Vec<u64> = inos.iter().copied().chain(named).collect();
        let epoch = t.changing(&touched, paths);
        // Under the table's lock: an opendir that reads the new epoch finds no listing from before.
        self.ahead.changed();
        drop(t);
        for ino in touched {
            self.heads.changed(ino);
        }
        Ended { epoch, alone }
    }

    /// Fresh attributes of `ino`, with how long the kernel may keep them:
    /// through the open handle the kernel names, else by path — unless the
    /// name now stands for another file (renamed over by another client):
    /// then the node loses that name and is asked through any handle still
    /// open on it, or is stale.
    fn fetch_attr(&self, ino: u64, fh: Option<FileHandle>) -> Result<(Attr, Duration), Errno> {
        let named = fh.and_then(|fh| lock(&self.files).get(&fh.0).map(|f| f.handle));
        let (path, handle, since) = {
            let t = lock(&self.table);
            (t.path(ino), named.or_else(|| t.any_handle(ino)), t.epoch())
        };
        let r = match (named, path, handle) {
            (Some(h), _, _) | (None, None, Some(h)) => self.client.fstat(h),
            (None, Some(p), _) => match self.client.lookup(&p) {
                Ok(a) if !lock(&self.table).same_file(ino, &a) => {
                    // Only if `p` is still this node's: a lookup meanwhile
                    // may have given it to the new file's node.
                    let mut t = lock(&self.table);
                    if t.ino_of(&p) == Some(ino) {
                        t.detach(&p);
                    }
                    drop(t);
                    match handle {
                        Some(h) => self.client.fstat(h),
                        None => return Err(Errno::ESTALE),
                    }
                }
                r => r,
            },
            (None, None, None) => return Err(Errno::ENOENT),
        };
        let attr = r.map_err(|e| errno(&e))?;
        let kept = lock(&self.table).set_attr(ino, &attr, Instant::now(), since);
        Ok((attr, self.attr_ttl(kept)))
    }

    /// How much of its beginning to ask with the open of node `ino` with
    /// `flags`: all of a regular file of at most [`OPEN_HEAD_MAX`] bytes by
    /// its cached attributes, unless the open may write it, reads bypass the
    /// page cache, the kernel keeps its pages from an earlier open (it will
    /// not read it at all), or the heads held already fill their budget.
    fn head_wanted(&self, ino: u64, flags: i32) -> usize {
        if self.opts.direct_io || flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return 0;
        }
        let t = lock(&self.table);
        match t.cached_attr(ino, self.opts.attr_ttl, Instant::now()) {
            Some((a, _))
                if a.kind == FileKind::File
                    && a.size <= OPEN_HEAD_MAX as u64
                    && !(self.opts.data_cache && t.pages_kept(ino, a.mtime, a.size))
                    && self.heads.room_for(a.size as usize, self.opts.attr_ttl) =>
            {
                a.size as usize
            }
            _ => 0,
        }
    }

    /// Registers an open handle, asked for at epoch `since` with the file's
    /// first bytes `head` if wanted, and decides whether the kernel may keep
    /// the file's cached pages. The attributes and the head are kept only if
    /// the file did not change through the mount since: checked and kept
    /// under the table's lock, which a write takes before it drops the heads.
    fn register_open(
        &self,
        ino: u64,
        handle: Handle,
        attr: &Attr,
        since: u64,
        head: Option<Vec<u8>>,
    ) -> (u64, FopenFlags) {
        let fh = self.new_fh();
        lock(&self.files).insert(fh, OpenFile { ino, handle });
        let mut t = lock(&self.table);
        t.opened(ino, handle);
        if t.set_attr(ino, attr, Instant::now(), since) {
            if let Some(head) = head {
                self.heads.insert(fh, ino, head, attr.size);
            }
        }
        let same = t.check_cache_stamp(ino, attr.mtime, attr.size);
        let mut flags = FopenFlags::empty();
        if self.opts.direct_io {
            flags |= FopenFlags::FOPEN_DIRECT_IO;
        } else if same && self.opts.data_cache {
            flags |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        (fh, flags)
    }
}

impl Filesystem for VipcFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Each capability on its own: an old kernel refuses some, and that is fine.
        for cap in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_ATOMIC_O_TRUNC,
            InitFlags::FUSE_AUTO_INVAL_DATA,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_MAX_PAGES,
        ] {
            let _ = config.add_capabilities(cap);
        }
        let io = self.opts.max_io;
        if let Err(nearest) = config.set_max_write(io) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(io) {
            let _ = config.set_max_readahead(nearest);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        let open: Vec<OpenFile> = lock(&self.files).drain().map(|(_, f)| f).collect();
        for f in open {
            let _ = self.client.close(f.handle);
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEntry) {
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        // The kernel revalidates a name without the directory's lock: an answer that raced this mount's
        // own change of the name (a rename over it) is asked for again, a few times.
        for retry in 0.. {
            let since = self.epoch();
            match self.client.lookup(&path) {
                Ok(_) if retry < LOOKUP_RETRIES && lock(&self.table).name_changed_since(&path, since) => continue,
                Ok(attr) => return self.entry(&path, &attr, since, reply),
                Err(e) => return reply.error(errno(&e)),
            }
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        lock(&self.table).forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let cached = lock(&self.table).cached_attr(ino.0, self.opts.attr_ttl, Instant::now());
        if let Some((attr, left)) = cached {
            return reply.attr(&left, &file_attr(ino.0, &attr));
        }
        match self.fetch_attr(ino.0, fh) {
            Ok((attr, ttl)) => reply.attr(&ttl, &file_attr(ino.0, &attr)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // The service has no chown: a change of owner is refused, "changing" to the present owner is
        // accepted (tar and cp -p do that).
        if uid.is_some() || gid.is_some() {
            // The owner changes only by a chown on the server host itself, so attributes within their TTL
            // answer (tar changes the owner of every file it has just created: a round trip saved per file).
            let cached = lock(&self.table).cached_attr(ino.0, self.opts.attr_ttl, Instant::now());
            let cur = match cached {
                Some((a, _)) => a,
                None => match self.fetch_attr(ino.0, fh) {
                    Ok((a, _)) => a,
                    Err(e) => return reply.error(e),
                },
            };
            if uid.is_some_and(|u| u != cur.uid) || gid.is_some_and(|g| g != cur.gid) {
                return reply.error(Errno::EPERM);
            }
            if mode.is_none() && size.is_none() && atime.is_none() && mtime.is_none() {
                return reply.attr(&self.opts.attr_ttl, &file_attr(ino.0, &cur));
            }
        }
        // Times of a symlink itself (utimensat with AT_SYMLINK_NOFOLLOW, as tar does): the service sets times
        // through a final symlink, which would change the target instead, so they are accepted and not kept
        // (docs/FILES.md). chmod and truncate never reach a symlink: the kernel follows it first.
        if lock(&self.table).kind(ino.0) == Some(FileKind::Symlink) && mode.is_none() && size.is_none() {
            return match self.fetch_attr(ino.0, fh) {
                Ok((a, ttl)) => reply.attr(&ttl, &file_attr(ino.0, &a)),
                Err(e) => reply.error(e),
            };
        }
        let set = SetAttr {
            perm: mode.map(|m| (m & 0o7777) as u16),
            size,
            atime: atime.map(convert::set_time),
            mtime: mtime.map(convert::set_time),
        };
        let handle = fh.and_then(|fh| lock(&self.files).get(&fh.0).map(|f| f.handle));
        // A detached node (unlinked while open) has no path to name, and the service's setattr is by path.
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let began = self.change_begins(&[ino.0], &[]);
        let r = self.client.setattr(&path, handle, &set);
        // The answer is the file after this change, unless another one overlapped it.
        let ended = self.change_ends(began, &[ino.0], &[], |_| {});
        match r {
            Ok(attr) => {
                let kept = ended.alone && lock(&self.table).set_attr(ino.0, &attr, Instant::now(), ended.epoch);
                reply.attr(&self.attr_ttl(kept), &file_attr(ino.0, &attr));
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        match self.client.readlink(&path) {
            Ok(target) => reply.data(target.as_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(&self, _req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, _rdev: u32, reply: ReplyEntry) {
        // Only regular files: the service has no devices, fifos or sockets.
        if mode & libc::S_IFMT != libc::S_IFREG {
            return reply.error(Errno::EPERM);
        }
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.open(&path, flags, mode & !umask & 0o7777);
        let done = self.change_ends(began, &[parent.0], &[&path], |_| {}).epoch;
        match r {
            Ok((h, attr)) => {
                let _ = self.client.close(h);
                self.entry(&path, &attr, done, reply);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.mkdir(&path, mode & !umask & 0o7777);
        let done = self.change_ends(began, &[parent.0], &[&path], |_| {}).epoch;
        match r {
            Ok(attr) => self.entry(&path, &attr, done, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.unlink(&path);
        self.change_ends(began, &[parent.0], &[&path], |t| {
            if r.is_ok() {
                t.detach(&path);
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, n: &OsStr, reply: ReplyEmpty) {
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.rmdir(&path);
        self.change_ends(began, &[parent.0], &[&path], |t| {
            if r.is_ok() {
                t.detach(&path);
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link: &OsStr, target: &Path, reply: ReplyEntry) {
        let path = match self.child(parent, link) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let Some(target) = target.to_str() else { return reply.error(Errno::EINVAL) };
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.symlink(target, &path);
        let done = self.change_ends(began, &[parent.0], &[&path], |_| {}).epoch;
        match r {
            Ok(attr) => self.entry(&path, &attr, done, reply),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (from, to) = match (self.child(parent, n), self.child(newparent, newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let (dirs, names) = ([parent.0, newparent.0], [from.as_str(), to.as_str()]);
        let began = self.change_begins(&dirs, &names);
        let r = self.client.rename(&from, &to, flags.bits());
        self.change_ends(began, &dirs, &names, |t| match r {
            Ok(()) if flags.contains(RenameFlags::RENAME_EXCHANGE) => t.exchange(&from, &to),
            Ok(()) => t.rename(&from, &to),
            Err(_) => {}
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        // Hard links are not supported: the mount names files by path (see docs/FILES.md).
        reply.error(Errno::EPERM);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let raw = flags.0 & PASSED_FLAGS & !(libc::O_CREAT | libc::O_EXCL);
        let truncates = raw & libc::O_TRUNC != 0;
        let began = if truncates { self.change_begins(&[ino.0], &[]) } else { self.epoch() };
        let want = self.head_wanted(ino.0, raw);
        let r = self.client.open_with_head(&path, raw, 0, want);
        // A truncating open is a change: its answer is the file after it, unless another change overlapped.
        let since = if truncates {
            let ended = self.change_ends(began, &[ino.0], &[], |_| {});
            if ended.alone {
                ended.epoch
            } else {
                began
            }
        } else {
            began
        };
        match r {
            Ok((h, attr, head)) => {
                let (fh, fl) = self.register_open(ino.0, h, &attr, since, (want > 0).then_some(head));
                reply.opened(FileHandle(fh), fl);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Some(r) = self.heads.read(fh.0, offset, size, self.opts.attr_ttl) {
            return reply.data(&r.bytes[r.range]);
        }
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; size as usize];
        match self.client.read(f.handle, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n.min(buf.len())]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let began = self.change_begins(&[f.ino], &[]);
        let r = self.client.write(f.handle, offset, data);
        self.change_ends(began, &[f.ino], &[], |_| {});
        match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Writes went to the server as they were made; nothing is buffered here. ENOSYS, not success: the
        // kernel then stops sending FLUSH at all (close(2) stays a success), which saves a round trip to
        // this process on every close — a third of `tar c`'s time per file.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let Some(f) = lock(&self.files).remove(&fh.0) else { return reply.error(Errno::EBADF) };
        self.heads.forget(fh.0);
        lock(&self.table).closed(f.ino, f.handle);
        match self.client.close(f.handle) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        match self.client.fsync(f.handle, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let path = match self.path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        // The listing is read once and paged out of memory, so offsets stay stable while others change the
        // directory. One read ahead is at least as new as the epoch now: any change since it was asked for
        // dropped it.
        let since = self.epoch();
        let listing = match self.ahead.take(&path, self.opts.attr_ttl.min(self.opts.entry_ttl)) {
            Some(l) => l,
            None => {
                let at = Instant::now();
                match self.client.readdir(&path) {
                    Ok(entries) => Arc::new(Listing { entries, at }),
                    Err(e) => return reply.error(errno(&e)),
                }
            }
        };
        // A walk opens the next subdirectories: have their listings read meanwhile.
        self.ahead.opened(&path);
        let subdirs = listing.entries.iter().filter(|e| e.attr.kind == FileKind::Dir).map(|e| e.name.clone());
        self.ahead.listed(&path, subdirs.collect());
        let fh = self.new_fh();
        lock(&self.dirs).insert(fh, Arc::new(OpenDir { listing, since }));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(dir) = lock(&self.dirs).get(&fh.0).cloned() else { return reply.error(Errno::EBADF) };
        let entries = &dir.listing.entries;
        let t = lock(&self.table);
        let Some(dir) = t.path(ino.0) else {
            drop(t);
            return reply.error(Errno::ENOENT);
        };
        let total = entries.len() as u64 + 2;
        for i in offset..total {
            let full = match i {
                0 => reply.add(ino, 1, fuser::FileType::Directory, "."),
                1 => reply.add(ino, 2, fuser::FileType::Directory, ".."),
                _ => {
                    let e = &entries[(i - 2) as usize];
                    // d_ino: the node id if the kernel holds one, else the server's (never 0, which readdir(3)
                    // would skip).
                    let d_ino = t.ino_of(&join(&dir, &e.name)).unwrap_or(e.attr.ino.max(2));
                    reply.add(INodeNo(d_ino), i + 1, convert::file_type(e.attr.kind), &e.name)
                }
            };
            if full {
                break;
            }
        }
        drop(t);
        reply.ok();
    }

    /// Like `readdir`, each entry with its attributes, which the kernel
    /// keeps: an entry whose name changed through the mount after the
    /// listing was read is looked up again (and left out if gone), so that
    /// no name or size from before the change is handed on.
    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Some(open) = lock(&self.dirs).get(&fh.0).cloned() else { return reply.error(Errno::EBADF) };
        let (listing, entries) = (&open.listing, &open.listing.entries);
        let Ok(dir) = self.path(ino) else { return reply.error(Errno::ENOENT) };
        // The attributes are as old as the listing: the kernel may keep them for what is left of the TTL.
        let listing_ttl = self.opts.attr_ttl.saturating_sub(listing.at.elapsed());
        let total = entries.len() as u64 + 2;
        let mut added = false;
        for i in offset..total {
            let full = match i {
                0 => reply.add(ino, 1, ".", &listing_ttl, &convert::dir_attr(ino.0), Generation(0)),
                1 => reply.add(ino, 2, "..", &listing_ttl, &convert::dir_attr(ino.0), Generation(0)),
                _ => {
                    let e = &entries[(i - 2) as usize];
                    let path = join(&dir, &e.name);
                    let current = !lock(&self.table).name_changed_since(&path, open.since);
                    let (attr, at, since) = if current {
                        (e.attr.clone(), listing.at, open.since)
                    } else {
                        let (at, since) = (Instant::now(), self.epoch());
                        match self.client.lookup(&path) {
                            Ok(a) => (a, at, since),
                            Err(err) if errno(&err) == Errno::ENOENT => continue,
                            // The entries given so far go (the kernel holds them now); the next call asks again.
                            Err(_) if added => break,
                            Err(err) => return reply.error(errno(&err)),
                        }
                    };
                    // Each entry handed out is a lookup the kernel will forget; one that did not fit is not.
                    let mut t = lock(&self.table);
                    let (child, kept) = t.remember(&path, &attr, at, since);
                    let ttl = match (kept, current) {
                        (false, _) => Duration::ZERO,
                        (true, true) => listing_ttl,
                        (true, false) => self.opts.attr_ttl.saturating_sub(at.elapsed()),
                    };
                    let full = reply.add(INodeNo(child), i + 1, &e.name, &ttl, &file_attr(child, &attr), Generation(0));
                    if full {
                        t.forget(child, 1);
                    }
                    added |= !full;
                    full
                }
            };
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Directory changes are made by the server as they come; it has nothing buffered to flush for them.
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, _size: u32, reply: fuser::ReplyXattr) {
        // No extended attributes (docs/FILES.md): ENOSYS makes the kernel answer EOPNOTSUPP from now on.
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    // The three below answer what fuser would with a warning on the mount's
    // stderr each time (an `isatty` on a file here is an ioctl).

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // No ioctl is served: what a local regular file answers to one it does not know.
        reply.error(Errno::ENOTTY);
    }

    /// SEEK_DATA and SEEK_HOLE, answered by the server's file (the kernel
    /// handles the other kinds of seek itself).
    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, off: i64, whence: i32, reply: fuser::ReplyLseek) {
        let hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(off) = u64::try_from(off) else { return reply.error(Errno::ENXIO) };
        let f = match self.file(fh) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        match self.client.seek(f.handle, off, hole) {
            Ok(at) => reply.offset(at as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // The protocol has no allocation request (docs/FILES.md).
        reply.error(Errno::EOPNOTSUPP);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.client.statfs() {
            Ok(s) => reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        n: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let path = match self.child(parent, n) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let raw = (flags & PASSED_FLAGS) | libc::O_CREAT;
        let began = self.change_begins(&[parent.0], &[&path]);
        let r = self.client.open(&path, raw, mode & !umask & 0o7777);
        let done = self.change_ends(began, &[parent.0], &[&path], |_| {}).epoch;
        match r {
            Ok((h, attr)) => {
                let ino = lock(&self.table).remember(&path, &attr, Instant::now(), done).0;
                let (fh, fl) = self.register_open(ino, h, &attr, done, None);
                reply.created(&self.opts.entry_ttl, &file_attr(ino, &attr), Generation(0), FileHandle(fh), fl);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }
}
