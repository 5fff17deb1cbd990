//! The client: path-based calls on an export, each one exchange (or a few
//! for large reads, writes and directories) with the server found by its
//! logical name `fs:NAME`.
//!
//! Failure: a call whose exchange fails returns [`FsError::Transport`]
//! (EIO) within the node's T_t and makes the next call look the name up
//! again, so a restarted server is used as soon as it is registered. Open
//! handles are client-side ids; after a server restart a handle is reopened
//! once by its remembered path and flags (without O_CREAT, O_EXCL, O_TRUNC),
//! else the call fails with ESTALE.

use crate::attr::{Attr, DirEntry, Reader, SetAttr, StatFs, ATTR_LEN, STATFS_LEN};
use crate::error::{FsError, FsResult};
use crate::proto::*;
use crate::server::service_name;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vipc::{Error, Node, Pid, Process, ProtocolError, SegmentRef, SendOptions};

/// An open file of an [`FsClient`]: a client-side id, valid across server
/// restarts. Each client numbers its handles from a random base, so another
/// client's handle is not one of its own (EBADF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

/// Bytes of directory entries asked for per READDIR exchange.
const READDIR_BATCH: usize = 32 << 10;
/// Longest symlink target read back.
const READLINK_MAX: usize = 4096;
/// How long a client looks for its server again when it went away in the
/// middle of a call (its node said no such process, or that it restarted):
/// a restarted node answers for the export's name only once the export
/// serves again, a moment after the node itself.
const FIND_AGAIN: Duration = Duration::from_secs(3);
/// Between two of those lookups.
const FIND_AGAIN_PAUSE: Duration = Duration::from_millis(50);

/// The server as last resolved.
#[derive(Clone, Copy, Debug)]
struct Server {
    pid: Pid,
    instance: u64,
}

/// What the client remembers of an open file.
#[derive(Clone, Debug)]
struct Open {
    path: String,
    flags: i32,
    instance: u64,
    remote: u64,
    /// The file's inode: a reopen by path must find the same file.
    ino: u64,
}

/// The client's owner process: it answers the server's liveness pings, so
/// the server can release the files of a client that died.
struct Owner {
    pid: Pid,
    thread: Option<JoinHandle<()>>,
}

/// A client of one export. `Send + Sync`: it holds a small pool of vipc
/// processes on its node, so many threads may call at once.
pub struct FsClient {
    node: Node,
    export: String,
    name: String,
    server: Mutex<Option<Server>>,
    pool: Mutex<Vec<Process>>,
    owner: Owner,
    read_only: AtomicBool,
    unit: usize,
    page: usize,
    opens: Mutex<HashMap<u64, Open>>,
    /// Server handles (instance, handle) whose CLOSE did not reach the
    /// server: closed at the next successful close. The server's reaper
    /// keeps the files of a live client, so they would stay open for its
    /// whole life.
    unclosed: Mutex<Vec<(u64, u64)>>,
    next: AtomicU64,
}

/// Most server handles kept to be closed later.
const MAX_UNCLOSED: usize = 4096;

impl std::fmt::Debug for FsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsClient").field("export", &self.export).finish()
    }
}

fn owner_loop(p: Process) {
    loop {
        let mut m = [0u8; 32];
        let Ok(info) = p.receive_with_segment(&mut m, &mut []) else { return };
        let from = info.from;
        let _ = p.reply(&Rep::errno(0).0, from);
        // Straight from a process of this node, not forwarded from elsewhere.
        if m[0] == OP_STOP && from.host() == p.pid().host() && info.forwarder == from {
            return;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `e` means the server was not reached (rather than that it refused).
fn unreached(e: &FsError) -> bool {
    matches!(e, FsError::Transport(_) | FsError::NotFound(_))
}

/// A request that may be carried out twice with the effect of once: every
/// operation but the ones that create or remove a name, and an exclusive
/// create. (A second WRITE rewrites the same bytes, unless its handle
/// appends: see [`FsClient::write`]; a handle of the server's previous life
/// is refused and reopened.)
fn repeatable(req: &Req) -> bool {
    match req.op() {
        OP_MKDIR | OP_RMDIR | OP_UNLINK | OP_RENAME | OP_SYMLINK => false,
        OP_OPEN => req.count() & libc::O_EXCL as u32 == 0,
        _ => true,
    }
}

fn bad(what: &str) -> FsError {
    FsError::Protocol(what.to_string())
}

/// The attributes a reply carries at the start of its segment.
fn attr_reply(rep: &Rep, seg: &[u8]) -> FsResult<Attr> {
    if (rep.count() as usize) < ATTR_LEN {
        return Err(bad("short attributes"));
    }
    Attr::decode(&mut Reader::new(seg)).ok_or_else(|| bad("invalid attributes"))
}

/// An OPEN's reply: the attributes, then up to `head` bytes of the file's
/// beginning (never more than the file holds).
pub(crate) fn open_reply(rep: &Rep, seg: &[u8], head: usize) -> FsResult<(Attr, Vec<u8>)> {
    let attr = attr_reply(rep, seg)?;
    let got = (rep.count() as usize).saturating_sub(ATTR_LEN).min(head);
    if got as u64 > attr.size {
        return Err(bad("more of the file's beginning than the file holds"));
    }
    let bytes = seg.get(ATTR_LEN..ATTR_LEN + got).ok_or_else(|| bad("a reply longer than its segment"))?;
    Ok((attr, bytes.to_vec()))
}

/// One READDIR batch (the used bytes of its reply): entries of a u16 name
/// length, the name (UTF-8) and its attributes, appended to `out`.
pub(crate) fn parse_listing(batch: &[u8], out: &mut Vec<DirEntry>) -> FsResult<()> {
    let mut r = Reader::new(batch);
    while r.pos() < batch.len() {
        let n = r.u16().ok_or_else(|| bad("short entry"))? as usize;
        let name = r.bytes(n).ok_or_else(|| bad("short entry name"))?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| bad("entry name not UTF-8"))?;
        if !valid_entry_name(&name) {
            return Err(bad("an entry name no directory holds"));
        }
        let attr = Attr::decode(&mut r).ok_or_else(|| bad("invalid entry attributes"))?;
        out.push(DirEntry { name, attr });
    }
    Ok(())
}

/// Most entries [`FsClient::readdir`] lists of one directory (4 Mi, ~0.5 GiB
/// of entries; ext4 directories stay far below it).
pub const MAX_LISTING: usize = 1 << 22;

/// Most bytes of entries [`FsClient::readdir`] takes for one directory
/// (256 MiB: some 2.5 million entries of usual names).
pub const MAX_LISTING_BYTES: usize = 256 << 20;

/// A link target as a kernel would take it: 1 to 4095 bytes of UTF-8, no NUL.
pub(crate) fn link_target(b: &[u8]) -> FsResult<String> {
    if b.is_empty() || b.len() >= READLINK_MAX || b.contains(&0) {
        return Err(bad("a link target no file system holds"));
    }
    String::from_utf8(b.to_vec()).map_err(|_| bad("link target not UTF-8"))
}

/// A name a directory entry can have: 1 to 255 bytes, no `/` or NUL, not
/// `.` or `..` (a kernel fails a whole listing over one that is not).
fn valid_entry_name(name: &str) -> bool {
    (1..=255).contains(&name.len()) && !name.contains(['/', '\0']) && name != "." && name != ".."
}

/// The segment of a path request: the path, then `extra`, in a buffer of at
/// least `reply` bytes (the reply segment is written at its start).
fn path_segment(path: &str, extra: &[u8], reply: usize) -> FsResult<Vec<u8>> {
    if path.len() > MAX_PATH || extra.len() > MAX_EXTRA {
        return Err(FsError::Errno(libc::ENAMETOOLONG));
    }
    let mut v = Vec::with_capacity((path.len() + extra.len()).max(reply));
    v.extend_from_slice(path.as_bytes());
    v.extend_from_slice(extra);
    if v.len() < reply {
        v.resize(reply, 0);
    }
    Ok(v)
}

impl FsClient {
    /// Finds the server of `export` by its logical name `fs:NAME` (scope Any) from `node`.
    pub fn connect(node: &Node, export: &str) -> FsResult<FsClient> {
        let (pid, thread) = node.spawn(owner_loop)?;
        let page = if node.local_addr().ip().is_loopback() { MAX_PACKET_DATA } else { ETHERNET_PACKET_DATA };
        let c = FsClient {
            node: node.clone(),
            export: export.to_string(),
            name: service_name(export),
            server: Mutex::new(None),
            pool: Mutex::new(Vec::new()),
            owner: Owner { pid, thread: Some(thread) },
            read_only: AtomicBool::new(false),
            unit: DEFAULT_UNIT,
            page,
            opens: Mutex::new(HashMap::new()),
            unclosed: Mutex::new(Vec::new()),
            next: AtomicU64::new(u64::from(crate::random_nonzero_u32()) << 32),
        };
        // The first HELLO names the owner, which holds nothing yet: handles
        // the server still keeps for an earlier holder of its pid (a client
        // node restarted with the same host id) are released.
        let p = c.process()?;
        let r = c.resolve(&p, true);
        c.give_back(p);
        r?;
        Ok(c)
    }

    /// The export's name.
    pub fn export_name(&self) -> &str {
        &self.export
    }

    /// Whether the export is read-only (every mutation fails with EROFS).
    pub fn read_only(&self) -> bool {
        self.read_only.load(Ordering::Relaxed)
    }

    /// Largest read or write done as one 2-packet exchange (data in the
    /// reply or in the Send), on this node's network.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Sets the transfer unit of large reads and writes (the server moves
    /// their data by MoveTo/MoveFrom in pieces of this size), within
    /// [`MIN_UNIT`]..=[`MAX_IO`].
    pub fn set_unit(&mut self, unit: usize) {
        self.unit = unit.clamp(MIN_UNIT, MAX_IO);
    }

    /// The transfer unit (see [`FsClient::set_unit`]).
    pub fn unit(&self) -> usize {
        self.unit
    }

    /// The pid of the server process, looked up by name if not known (or after a failure).
    fn server(&self) -> FsResult<Server> {
        let known = *lock(&self.server);
        if let Some(s) = known {
            return Ok(s);
        }
        let p = self.process()?;
        let r = self.resolve(&p, false);
        self.give_back(p);
        r
    }

    /// Finds the server and greets it; `fresh`: as a client holding nothing.
    fn resolve(&self, p: &Process, fresh: bool) -> FsResult<Server> {
        // GetPid's broadcast, then the kernel servers' group (000 §6.6).
        let pid = vipc::locate::resolve(p, &self.name)?.ok_or_else(|| FsError::NotFound(self.name.clone()))?;
        let mut req = Req::new(OP_HELLO);
        if fresh {
            req.set_b(self.owner_b());
        }
        let mut m = req.0;
        p.send(&mut m, pid)?;
        let rep = Rep(m);
        if rep.error() != 0 {
            return Err(FsError::Errno(rep.error()));
        }
        self.read_only.store(rep.flags() & RF_READ_ONLY != 0, Ordering::Relaxed);
        let s = Server { pid, instance: rep.value() };
        *lock(&self.server) = Some(s);
        Ok(s)
    }

    /// [`FsClient::resolve`] of a server that went away mid-call, tried
    /// again for [`FIND_AGAIN`] while nobody answers for its name.
    fn resolve_again(&self, p: &Process) -> FsResult<Server> {
        let deadline = Instant::now() + FIND_AGAIN;
        loop {
            match self.resolve(p, false) {
                Err(FsError::NotFound(_)) if Instant::now() < deadline => std::thread::sleep(FIND_AGAIN_PAUSE),
                r => return r,
            }
        }
    }

    fn process(&self) -> FsResult<Process> {
        if let Some(p) = lock(&self.pool).pop() {
            return Ok(p);
        }
        Ok(self.node.attach()?)
    }

    fn give_back(&self, p: Process) {
        let mut pool = lock(&self.pool);
        if pool.len() < 64 {
            pool.push(p);
        }
    }

    /// One exchange with the server. A destination that no longer exists
    /// (the server restarted on a live node) is looked up again and the
    /// request sent once more (it never ran). So is a request the server's
    /// node refused because it restarted during the exchange, if doing it
    /// twice does no harm (see [`repeatable`]). Any other failure forgets
    /// the server, so the next call looks it up.
    fn call(&self, req: Req, seg: Option<SegmentRef<'_>>) -> FsResult<(Rep, Server)> {
        self.call_as(req, seg, repeatable(&req))
    }

    /// [`FsClient::call`], sending a request refused by a restarted node
    /// again only if `repeat`.
    fn call_as(&self, req: Req, mut seg: Option<SegmentRef<'_>>, repeat: bool) -> FsResult<(Rep, Server)> {
        let p = self.process()?;
        let r = (|| {
            let known = *lock(&self.server);
            let mut server = match known {
                Some(s) => s,
                None => self.resolve(&p, false)?,
            };
            for attempt in 0..2 {
                // A path request names the server instance it is for (see `Rep` ESTALE below).
                let mut stamped = req;
                if req.op() != OP_HELLO && req.handle() == 0 {
                    stamped.set_handle(server.instance << 32);
                }
                let mut m = stamped.0;
                let seg_again = match &mut seg {
                    None => None,
                    Some(SegmentRef::Read(b)) => Some(SegmentRef::Read(b)),
                    Some(SegmentRef::Write(b)) => Some(SegmentRef::Write(b)),
                    Some(SegmentRef::ReadWrite(b)) => Some(SegmentRef::ReadWrite(b)),
                };
                match p.send_with(&mut m, server.pid, seg_again, SendOptions::default()) {
                    // Another server has that pid now (its node restarted, its
                    // processes started in another order): it refused the request
                    // untouched. Find ours again by name.
                    Ok(_) if Rep(m).error() == libc::ESTALE && stamped.handle() != req.handle() && attempt == 0 => {
                        *lock(&self.server) = None;
                        server = self.resolve(&p, false)?;
                    }
                    Ok(_) => return Ok((Rep(m), server)),
                    Err(e) => {
                        *lock(&self.server) = None;
                        let gone = match &e {
                            Error::Protocol(ProtocolError::NoSuchProcess(_)) => true,
                            Error::Protocol(ProtocolError::ReceiverRestarted(_)) => repeat,
                            _ => false,
                        };
                        if gone && attempt == 0 && req.op() != OP_HELLO {
                            // A CLOSE has nothing to close on a new server: it need not wait for one.
                            server =
                                if req.op() == OP_CLOSE { self.resolve(&p, false)? } else { self.resolve_again(&p)? };
                            continue;
                        }
                        return Err(FsError::Transport(e));
                    }
                }
            }
            Err(bad("unreachable retry"))
        })();
        self.give_back(p);
        r
    }

    /// [`FsClient::call`], failing with the server's errno.
    fn call_ok(&self, req: Req, seg: Option<SegmentRef<'_>>) -> FsResult<(Rep, Server)> {
        self.call_ok_as(req, seg, repeatable(&req))
    }

    /// [`FsClient::call_ok`] with [`FsClient::call_as`]'s `repeat`.
    fn call_ok_as(&self, req: Req, seg: Option<SegmentRef<'_>>, repeat: bool) -> FsResult<(Rep, Server)> {
        let (rep, s) = self.call_as(req, seg, repeat)?;
        match rep.error() {
            0 => Ok((rep, s)),
            e if e > 0 => Err(FsError::Errno(e)),
            e => Err(bad(&format!("negative errno {e}"))),
        }
    }

    fn owner_b(&self) -> u32 {
        self.owner.pid.0
    }

    /// A path request with a read-write segment holding the path (and
    /// `extra`), room for `reply` bytes of reply; returns the reply and the segment.
    fn path_call(&self, mut req: Req, path: &str, extra: &[u8], reply: usize) -> FsResult<(Rep, Vec<u8>)> {
        let mut seg = path_segment(path, extra, reply)?;
        req.set_path_len(path.len());
        req.set_b(self.owner_b());
        let (rep, _) = self.call_ok(req, Some(SegmentRef::ReadWrite(&mut seg)))?;
        Ok((rep, seg))
    }

    /// Attributes of `path` (lstat: a final symlink is not followed).
    pub fn lookup(&self, path: &str) -> FsResult<Attr> {
        let (rep, seg) = self.path_call(Req::new(OP_LOOKUP), path, &[], ATTR_LEN)?;
        attr_reply(&rep, &seg)
    }

    /// The entries of directory `path` with their attributes, without "." and "..".
    pub fn readdir(&self, path: &str) -> FsResult<Vec<DirEntry>> {
        let mut out = Vec::new();
        let (mut cookie, mut bytes) = (0u64, 0usize);
        loop {
            let mut req = Req::new(OP_READDIR);
            req.set_offset(cookie);
            req.set_count(READDIR_BATCH as u32);
            let (rep, seg) = self.path_call(req, path, &[], READDIR_BATCH)?;
            let had = out.len();
            parse_listing(&seg[..(rep.count() as usize).min(seg.len())], &mut out)?;
            if rep.flags() & RF_EOF != 0 {
                return Ok(out);
            }
            // A server that never says EOF must not make the client loop and grow forever.
            if rep.next() <= cookie || out.len() == had {
                return Err(bad("readdir made no progress"));
            }
            bytes += rep.count() as usize;
            if out.len() > MAX_LISTING || bytes > MAX_LISTING_BYTES {
                return Err(bad("a directory listing larger than MAX_LISTING entries or MAX_LISTING_BYTES"));
            }
            cookie = rep.next();
        }
    }

    /// Opens (with O_CREAT: creates) `path`; O_CREAT, O_EXCL, O_TRUNC and O_APPEND are honoured.
    pub fn open(&self, path: &str, flags: i32, mode: u32) -> FsResult<(Handle, Attr)> {
        self.open_with_head(path, flags, mode, 0).map(|(h, attr, _)| (h, attr))
    }

    /// [`FsClient::open`], and up to `head` bytes of the file's beginning as
    /// they were when it was opened (none for a file opened write-only or
    /// not a regular file; at most [`OPEN_HEAD_MAX`]; fewer if the file is
    /// shorter): one exchange for a small file's opening and first read.
    pub fn open_with_head(&self, path: &str, flags: i32, mode: u32, head: usize) -> FsResult<(Handle, Attr, Vec<u8>)> {
        let (remote, attr, instance, head) = self.open_remote(path, flags, mode, head.min(OPEN_HEAD_MAX))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.opens).insert(id, Open { path: path.to_string(), flags, instance, remote, ino: attr.ino });
        Ok((Handle(id), attr, head))
    }

    fn open_remote(&self, path: &str, flags: i32, mode: u32, head: usize) -> FsResult<(u64, Attr, u64, Vec<u8>)> {
        let mut seg = path_segment(path, &[], ATTR_LEN + head)?;
        let mut req = Req::new(OP_OPEN);
        req.set_path_len(path.len());
        req.set_a(mode);
        req.set_offset(head as u64);
        req.set_count(flags as u32);
        req.set_b(self.owner_b());
        let (rep, server) = self.call_ok(req, Some(SegmentRef::ReadWrite(&mut seg)))?;
        let (attr, head) = open_reply(&rep, &seg, head)?;
        Ok((rep.value(), attr, server.instance, head))
    }

    /// EBADF, as the server would answer, if `h` was opened `forbidding`
    /// (O_WRONLY for a read, O_RDONLY for a write). Decided here: the
    /// server's EBADF means a handle it does not know, which is reopened.
    fn check_access(&self, h: Handle, forbidding: i32) -> FsResult<()> {
        match lock(&self.opens).get(&h.0) {
            Some(o) if o.flags & libc::O_ACCMODE != forbidding => Ok(()),
            _ => Err(FsError::Errno(libc::EBADF)),
        }
    }

    /// A handle request: `build` makes the request for the server's handle.
    /// A handle of an earlier server instance (or one the server no longer
    /// knows) is reopened once by path; if that fails: ESTALE.
    fn with_handle<T>(&self, h: Handle, mut f: impl FnMut(u64) -> FsResult<T>) -> FsResult<T> {
        let open = lock(&self.opens).get(&h.0).cloned().ok_or(FsError::Errno(libc::EBADF))?;
        let current = self.server()?;
        let mut open = if open.instance != current.instance { self.reopen(h, &open)? } else { open };
        match f(open.remote) {
            Err(FsError::Errno(libc::EBADF)) => {
                open = self.reopen(h, &open)?;
                f(open.remote)
            }
            r => r,
        }
    }

    fn reopen(&self, h: Handle, old: &Open) -> FsResult<Open> {
        let flags = old.flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC);
        let (remote, attr, instance, _) = match self.open_remote(&old.path, flags, 0, 0) {
            Ok(r) => r,
            Err(FsError::Errno(_)) => return Err(FsError::Errno(libc::ESTALE)),
            Err(e) => return Err(e),
        };
        if attr.ino != old.ino {
            // Another file under that name now (renamed over, or deleted and made again).
            let _ = self.close_remote(instance, remote);
            return Err(FsError::Errno(libc::ESTALE));
        }
        let new = Open { path: old.path.clone(), flags: old.flags, instance, remote, ino: old.ino };
        let mut opens = lock(&self.opens);
        match opens.get(&h.0) {
            Some(cur) if (cur.instance, cur.remote) == (old.instance, old.remote) => {
                opens.insert(h.0, new.clone());
                Ok(new)
            }
            // Another thread reopened it meanwhile (or it was closed): ours is surplus.
            cur => {
                let cur = cur.cloned();
                drop(opens);
                let _ = self.close_remote(instance, remote);
                cur.ok_or(FsError::Errno(libc::EBADF))
            }
        }
    }

    /// Reads at `offset` into `buf`; returns the bytes read (short only at end of file).
    pub fn read(&self, h: Handle, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        self.check_access(h, libc::O_WRONLY)?;
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(MAX_IO);
            let piece = &mut buf[done..done + n];
            let at = offset.checked_add(done as u64).ok_or(FsError::Errno(libc::EINVAL))?;
            let got = self.with_handle(h, |remote| {
                let mut req = Req::new(OP_READ);
                req.set_handle(remote);
                req.set_offset(at);
                req.set_count(n as u32);
                req.set_a(self.unit as u32);
                let (rep, _) = self.call_ok(req, Some(SegmentRef::Write(&mut *piece)))?;
                Ok(rep.count() as usize)
            })?;
            if got > n {
                return Err(bad("read returned more than asked"));
            }
            done += got;
            if got < n {
                break;
            }
        }
        Ok(done)
    }

    /// Writes `data` at `offset` (an O_APPEND handle appends); returns the bytes written.
    /// A write refused by the server's restarted node is sent again, unless
    /// the handle appends (the data would be appended twice): that one fails.
    pub fn write(&self, h: Handle, offset: u64, data: &[u8]) -> FsResult<usize> {
        self.check_access(h, libc::O_RDONLY)?;
        let appends = lock(&self.opens).get(&h.0).is_some_and(|o| o.flags & libc::O_APPEND != 0);
        let mut done = 0;
        while done < data.len() {
            let n = (data.len() - done).min(MAX_IO);
            let piece = &data[done..done + n];
            let at = offset.checked_add(done as u64).ok_or(FsError::Errno(libc::EINVAL))?;
            let put = self.with_handle(h, |remote| {
                let mut req = Req::new(OP_WRITE);
                req.set_handle(remote);
                req.set_offset(at);
                req.set_count(n as u32);
                req.set_a(self.unit as u32);
                let (rep, _) = self.call_ok_as(req, Some(SegmentRef::Read(piece)), !appends)?;
                Ok(rep.count() as usize)
            })?;
            if put == 0 || put > n {
                return Err(bad("write made no progress"));
            }
            done += put;
        }
        Ok(done)
    }

    /// Flushes the file's data (and with `datasync` false, its metadata) to stable storage.
    pub fn fsync(&self, h: Handle, datasync: bool) -> FsResult<()> {
        self.with_handle(h, |remote| {
            let mut req = Req::new(OP_FSYNC);
            req.set_handle(remote);
            req.set_b(u32::from(datasync));
            self.call_ok(req, None).map(|_| ())
        })
    }

    /// Closes `h`. After a server restart there is nothing left to close on
    /// the server. If the server cannot be reached, `h` is gone here all the
    /// same, and the server's handle is closed at a later close.
    pub fn close(&self, h: Handle) -> FsResult<()> {
        let open = lock(&self.opens).remove(&h.0).ok_or(FsError::Errno(libc::EBADF))?;
        self.close_remote(open.instance, open.remote)?;
        let mut left = std::mem::take(&mut *lock(&self.unclosed)).into_iter();
        while let Some((instance, remote)) = left.next() {
            if self.close_remote(instance, remote).is_err_and(|e| unreached(&e)) {
                let mut unclosed = lock(&self.unclosed);
                let room = MAX_UNCLOSED.saturating_sub(unclosed.len());
                unclosed.extend(left.take(room));
                break;
            }
        }
        Ok(())
    }

    /// Closes the server's handle `remote` of server instance `instance`;
    /// keeps it in `unclosed` if the server could not be reached.
    fn close_remote(&self, instance: u64, remote: u64) -> FsResult<()> {
        let r = self.server().and_then(|current| {
            if current.instance != instance {
                return Ok(());
            }
            let mut req = Req::new(OP_CLOSE);
            req.set_handle(remote);
            match self.call_ok(req, None) {
                Ok(_) | Err(FsError::Errno(libc::EBADF)) => Ok(()),
                Err(e) => Err(e),
            }
        });
        if r.as_ref().is_err_and(unreached) {
            let mut unclosed = lock(&self.unclosed);
            if unclosed.len() < MAX_UNCLOSED {
                unclosed.push((instance, remote));
            }
        }
        r
    }

    /// lseek's SEEK_DATA (`hole` false) or SEEK_HOLE (`hole` true) on an
    /// open file: where the next data or hole begins at or after `offset`
    /// (every file ends with a hole). `Errno(ENXIO)`: nothing such there
    /// (no data after `offset`, or `offset` past the end).
    pub fn seek(&self, h: Handle, offset: u64, hole: bool) -> FsResult<u64> {
        self.with_handle(h, |remote| {
            let mut req = Req::new(OP_SEEK);
            req.set_handle(remote);
            req.set_offset(offset);
            req.set_a(if hole { libc::SEEK_HOLE } else { libc::SEEK_DATA } as u32);
            self.call_ok(req, None).map(|(rep, _)| rep.value())
        })
    }

    /// Attributes of an open file.
    pub fn fstat(&self, h: Handle) -> FsResult<Attr> {
        self.with_handle(h, |remote| {
            let mut req = Req::new(OP_FSTAT);
            req.set_handle(remote);
            let mut seg = vec![0u8; ATTR_LEN];
            let (rep, _) = self.call_ok(req, Some(SegmentRef::Write(&mut seg)))?;
            attr_reply(&rep, &seg)
        })
    }

    /// chmod, truncate and utimes of `path`, or of the open file `h` if given.
    pub fn setattr(&self, path: &str, h: Option<Handle>, set: &SetAttr) -> FsResult<Attr> {
        let mut extra = Vec::new();
        set.encode(&mut extra);
        let go = |remote: u64| {
            let mut req = Req::new(OP_SETATTR);
            req.set_handle(remote);
            let (rep, seg) = self.path_call(req, path, &extra, ATTR_LEN)?;
            attr_reply(&rep, &seg)
        };
        match h {
            Some(h) => self.with_handle(h, go),
            None => go(0),
        }
    }

    /// Creates directory `path`.
    pub fn mkdir(&self, path: &str, mode: u32) -> FsResult<Attr> {
        let mut req = Req::new(OP_MKDIR);
        req.set_a(mode);
        let (rep, seg) = self.path_call(req, path, &[], ATTR_LEN)?;
        attr_reply(&rep, &seg)
    }

    /// Removes the empty directory `path`.
    pub fn rmdir(&self, path: &str) -> FsResult<()> {
        self.path_call(Req::new(OP_RMDIR), path, &[], 0).map(|_| ())
    }

    /// Removes the non-directory `path`.
    pub fn unlink(&self, path: &str) -> FsResult<()> {
        self.path_call(Req::new(OP_UNLINK), path, &[], 0).map(|_| ())
    }

    /// Renames `from` to `to`; `flags` are renameat2's (RENAME_NOREPLACE, RENAME_EXCHANGE; 0 = plain).
    pub fn rename(&self, from: &str, to: &str, flags: u32) -> FsResult<()> {
        let mut req = Req::new(OP_RENAME);
        req.set_a(to.len() as u32);
        req.set_count(flags);
        self.path_call(req, from, to.as_bytes(), 0).map(|_| ())
    }

    /// Creates the symbolic link `path` pointing at `target` (stored as given).
    pub fn symlink(&self, target: &str, path: &str) -> FsResult<Attr> {
        let mut req = Req::new(OP_SYMLINK);
        req.set_a(target.len() as u32);
        let (rep, seg) = self.path_call(req, path, target.as_bytes(), ATTR_LEN)?;
        attr_reply(&rep, &seg)
    }

    /// The target of the symbolic link `path`.
    pub fn readlink(&self, path: &str) -> FsResult<String> {
        let (rep, seg) = self.path_call(Req::new(OP_READLINK), path, &[], READLINK_MAX)?;
        let n = rep.count() as usize;
        link_target(seg.get(..n).ok_or_else(|| bad("readlink length beyond the segment"))?)
    }

    /// Usage of the export's file system.
    pub fn statfs(&self) -> FsResult<StatFs> {
        let mut seg = vec![0u8; STATFS_LEN];
        let (_, _) = self.call_ok(Req::new(OP_STATFS), Some(SegmentRef::Write(&mut seg)))?;
        StatFs::decode(&mut Reader::new(&seg)).ok_or_else(|| bad("invalid statfs"))
    }
}

impl Drop for FsClient {
    fn drop(&mut self) {
        // Close what is still open (best effort), then stop the owner process.
        // Only a server known to be up is told: a dead one must not delay the drop.
        let opens: Vec<u64> = lock(&self.opens).keys().copied().collect();
        let known = *lock(&self.server);
        if let Some(s) = known {
            for id in opens {
                if let Some(o) = lock(&self.opens).remove(&id) {
                    if o.instance == s.instance {
                        let mut req = Req::new(OP_CLOSE);
                        req.set_handle(o.remote);
                        // A server that stopped answering would cost T_t per handle:
                        // the first failure ends the closing (its reaper frees the rest).
                        if self.call(req, None).is_err_and(|e| unreached(&e)) {
                            break;
                        }
                    }
                }
            }
        }
        if let Ok(p) = self.process() {
            let mut m = Req::new(OP_STOP).0;
            let _ = p.send(&mut m, self.owner.pid);
        }
        if let Some(t) = self.owner.thread.take() {
            let _ = t.join();
        }
    }
}

/// Checks at compile time that the client may be shared between threads.
#[allow(dead_code)]
fn assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<FsClient>();
    is::<Arc<FsClient>>();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr::tests::attr;

    fn listing(names: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for n in names {
            v.extend_from_slice(&(n.len() as u16).to_le_bytes());
            v.extend_from_slice(n);
            attr().encode(&mut v);
        }
        v
    }

    #[test]
    fn a_listing_parses_whole_or_not_at_all() {
        let mut out = Vec::new();
        parse_listing(&listing(&[b"a", b"bc"]), &mut out).unwrap();
        assert_eq!(out.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "bc"]);
        assert_eq!(out[1].attr, attr());
        let whole = listing(&[b"a", b"bc"]);
        for cut in [1, 3, whole.len() - 1] {
            assert!(parse_listing(&whole[..cut], &mut Vec::new()).is_err(), "cut at {cut}");
        }
        assert!(parse_listing(&listing(&[b"\xff"]), &mut Vec::new()).is_err(), "a name not UTF-8");
        let long = [b'x'; 256];
        for bad in [&b""[..], b"a/b", b"a\0b", b".", b"..", &long] {
            assert!(parse_listing(&listing(&[b"ok", bad]), &mut Vec::new()).is_err(), "{bad:?}");
        }
        parse_listing(&listing(&[&long[..255], b"...", b".x"]), &mut Vec::new()).unwrap();
    }

    #[test]
    fn a_link_target_is_what_a_kernel_takes() {
        assert_eq!(link_target(b"../x").unwrap(), "../x");
        assert!(link_target(&[b'a'; 4095]).is_ok());
        for bad in [&b""[..], b"a\0b", b"\xff", &[b'a'; 4096]] {
            assert!(link_target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_open_reply_gives_at_most_the_file() {
        let mut seg = Vec::new();
        let mut a = attr();
        a.size = 3;
        a.encode(&mut seg);
        seg.extend_from_slice(b"xyz-more");
        let mut rep = Rep::errno(0);
        rep.set_count((ATTR_LEN + 3) as u32);
        assert_eq!(open_reply(&rep, &seg, 100).unwrap().1, b"xyz");
        assert_eq!(open_reply(&rep, &seg, 2).unwrap().1, b"xy", "what was asked");
        rep.set_count((ATTR_LEN + 5) as u32);
        assert!(open_reply(&rep, &seg, 100).is_err(), "more than the file holds");
        rep.set_count((ATTR_LEN + 3) as u32);
        assert!(open_reply(&rep, &seg[..ATTR_LEN + 1], 100).is_err(), "more than the segment holds");
        rep.set_count(10);
        assert!(open_reply(&rep, &seg, 100).is_err(), "short attributes");
    }

    #[test]
    fn no_prefix_of_a_good_listing_makes_a_parser_panic() {
        let good = listing(&[b"name", b"other"]);
        for cut in 0..=good.len() {
            crate::fuzz_parsers(&good[..cut]);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        /// What the fuzz target `fs` runs, on arbitrary bytes.
        #[test]
        fn no_bytes_make_a_parser_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            crate::fuzz_parsers(&bytes);
        }
    }
}
