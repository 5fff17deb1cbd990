//! What the server does for each request: decode it, act on the confined
//! file system, and produce the reply (or the errno). Transport concerns
//! (receiving, moving large data, replying) are in [`super::worker`].

use super::confine::{attr_of, errno, fstat, granted_mode, proc_path, Errno, Root};
use super::handles::{Handles, OpenFile, ReadAhead};
use super::listings::Listings;
use crate::attr::{Reader, SetAttr, SetTime, StatFs};
use crate::proto::*;
use rustix::fd::{AsFd, BorrowedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Timespec, Timestamps, CWD, UTIME_NOW, UTIME_OMIT};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use vipc::Pid;

/// How long prefetched read-ahead data is trusted (files may change on the
/// server's side without going through the file service).
pub const READ_AHEAD_TTL: Duration = Duration::from_millis(200);

/// State shared by the workers of one export.
#[derive(Debug)]
pub struct Service {
    /// The exported directory.
    pub root: Root,
    /// Every mutation fails with EROFS.
    pub read_only: bool,
    /// Open files.
    pub handles: Handles,
    /// Random id of this server instance (HELLO).
    pub instance: u32,
    /// Bumped by every mutation through this server: invalidates read-ahead.
    pub epoch: AtomicU64,
    /// Whether sequential reads are prefetched.
    pub read_ahead: bool,
    /// Whether writes are answered before the data are written (write-behind).
    pub write_behind: bool,
    /// Writes answered but not yet written.
    pub pending: AtomicUsize,
    /// Guards waiting for `pending` to reach zero.
    pub behind: Mutex<()>,
    /// Signalled when `pending` reaches zero.
    pub settled: Condvar,
    /// Sorted listings kept between the READDIR batches of a listing.
    pub listings: Listings,
}

/// A write in flight behind its reply; dropping it marks the write done.
pub struct Behind<'a> {
    svc: &'a Service,
}

impl Drop for Behind<'_> {
    fn drop(&mut self) {
        let _g = self.svc.behind.lock().unwrap_or_else(|e| e.into_inner());
        if self.svc.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.svc.settled.notify_all();
        }
    }
}

/// Bumps the epoch when dropped (see [`Service::mutation`]).
struct Changed<'a>(&'a Service);

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        self.0.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

/// The data a reply carries back into the client's segment.
pub enum Data {
    /// None.
    None,
    /// The first `n` bytes of the worker's I/O buffer.
    Io(usize),
    /// These bytes.
    Owned(Vec<u8>),
    /// `len` bytes of an open file from `offset`, sent from the page cache
    /// by MoveTo (reads too large for the reply packet).
    File { file: std::sync::Arc<OpenFile>, offset: u64, len: usize },
}

/// A successful answer: the reply message, its data, and read-ahead to do after replying.
pub struct Answer {
    /// The reply message.
    pub rep: Rep,
    /// Data for the client's segment.
    pub data: Data,
    /// Read-ahead to start once the reply is sent.
    pub prefetch: Option<Prefetch>,
}

/// Read-ahead for a sequential reader: the kernel is asked for the blocks
/// after `off`, and, for reads answered from a buffer, the next `len` bytes
/// are read into the handle's.
#[derive(Clone, Copy, Debug)]
pub struct Prefetch {
    /// The reader's handle.
    pub handle: u64,
    /// Where its next read would start.
    pub off: u64,
    /// The length of its reads.
    pub len: usize,
    /// Whether the next block is read into the handle's buffer (else the
    /// page cache alone holds it, for a read sent from there).
    pub buffered: bool,
}

impl Answer {
    fn plain(rep: Rep) -> Answer {
        Answer { rep, data: Data::None, prefetch: None }
    }
    fn ok() -> Answer {
        Answer::plain(Rep::errno(0))
    }
    fn with(rep: Rep, data: Vec<u8>) -> Answer {
        let mut rep = rep;
        rep.set_count(data.len() as u32);
        Answer { rep, data: Data::Owned(data), prefetch: None }
    }
}

/// A request's inputs as the worker received them.
pub struct Input<'a> {
    /// The request.
    pub req: Req,
    /// The segment bytes the request needs (path, second path, setattr, write data).
    pub seg: &'a [u8],
    /// Size of the segment the client granted.
    pub seg_size: usize,
    /// The client may receive data in its segment.
    pub writable: bool,
}

fn io_errno(e: std::io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn utf8(b: &[u8]) -> Result<&str, Errno> {
    std::str::from_utf8(b).map_err(|_| libc::EINVAL)
}

/// The first path of a request.
pub fn path1<'a>(i: &Input<'a>) -> Result<&'a str, Errno> {
    utf8(i.seg.get(..i.req.path_len()).ok_or(libc::EINVAL)?)
}

/// The second path (rename target, symlink target), `a` bytes after the first.
pub fn path2<'a>(i: &Input<'a>) -> Result<&'a str, Errno> {
    let s = i.req.path_len();
    utf8(i.seg.get(s..s + i.req.a() as usize).ok_or(libc::EINVAL)?)
}

/// The SETATTR record after the path (`p` bytes) of a request's segment.
pub fn setattr_record(seg: &[u8], p: usize) -> Result<SetAttr, Errno> {
    SetAttr::decode(&mut Reader::new(seg.get(p..).ok_or(libc::EINVAL)?)).ok_or(libc::EINVAL)
}

/// Refuses a request whose lengths no client sends (a path over
/// [`MAX_PATH`], a second path over [`MAX_EXTRA`]) before the server fetches
/// its segment: [`needed`] believes them, and a RENAME claiming a 4 GiB
/// target must not make a worker allocate 4 GiB.
pub fn lengths_allowed(req: &Req) -> Result<(), Errno> {
    let second = if matches!(req.op(), OP_RENAME | OP_SYMLINK) { req.a() as usize } else { 0 };
    if req.path_len() > MAX_PATH || second > MAX_EXTRA {
        return Err(libc::ENAMETOOLONG);
    }
    Ok(())
}

/// Bytes of the segment a request needs before it can be served.
pub fn needed(req: &Req) -> usize {
    let p = req.path_len();
    match req.op() {
        OP_RENAME | OP_SYMLINK => p + req.a() as usize,
        OP_SETATTR => p + crate::attr::SETATTR_LEN,
        OP_WRITE => req.count() as usize,
        OP_LOOKUP | OP_OPEN | OP_READDIR | OP_MKDIR | OP_RMDIR | OP_UNLINK | OP_READLINK => p,
        _ => 0,
    }
}

/// A handle opened with one of these is written before the reply (no write-behind).
pub(super) const SYNC_FLAGS: i32 = libc::O_SYNC | libc::O_DSYNC;

/// The O_* flags a client may pass to OPEN.
const OPEN_FLAGS: i32 = libc::O_ACCMODE
    | libc::O_CREAT
    | libc::O_EXCL
    | libc::O_TRUNC
    | libc::O_APPEND
    | libc::O_DIRECTORY
    | libc::O_NOFOLLOW
    | libc::O_SYNC
    | libc::O_DSYNC
    | libc::O_NOATIME;

fn attr_bytes(a: &crate::attr::Attr) -> Vec<u8> {
    let mut v = Vec::with_capacity(crate::attr::ATTR_LEN);
    a.encode(&mut v);
    v
}

fn settime(t: Option<SetTime>) -> Timespec {
    match t {
        None => Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        Some(SetTime::Now) => Timespec { tv_sec: 0, tv_nsec: UTIME_NOW },
        Some(SetTime::At(ts)) => Timespec { tv_sec: ts.secs, tv_nsec: ts.nanos as _ },
    }
}

/// Appends up to `want` bytes of the beginning of `file`, `size` bytes long
/// when its attributes were taken, to an OPEN's reply `data` (within the
/// granted segment and [`OPEN_HEAD_MAX`]; never more than the attributes
/// say, even if the file grows meanwhile); none if they cannot be read: the
/// client then reads them as usual.
fn append_head(data: &mut Vec<u8>, file: &File, want: u64, size: u64, seg_size: usize) {
    let room = seg_size.saturating_sub(data.len()).min(OPEN_HEAD_MAX);
    let n = want.min(size).min(room as u64) as usize;
    if n == 0 {
        return;
    }
    let at = data.len();
    data.resize(at + n, 0);
    match read_full(file, 0, &mut data[at..]) {
        Ok(got) => data.truncate(at + got),
        Err(_) => data.truncate(at),
    }
}

/// Reads at `off` until `buf` is full or the file ends.
pub fn read_full(f: &File, mut off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], off) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                off += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_errno(e)),
        }
    }
    Ok(got)
}

impl Service {
    /// A change is about to be made: bumps the epoch now, and again when the
    /// returned guard goes once the change is made — a read-ahead that read
    /// the old bytes in between then carries an older epoch and is not served.
    fn mutation(&self) -> Result<Changed<'_>, Errno> {
        if self.read_only {
            return Err(libc::EROFS);
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
        Ok(Changed(self))
    }

    fn file(&self, h: u64) -> Result<std::sync::Arc<OpenFile>, Errno> {
        self.handles.get(h).ok_or(libc::EBADF)
    }

    /// Serves every request that needs no bulk transfer, and READ (whose data
    /// land in `io`). WRITE is served by [`Service::begin_write`] and [`Service::finish_write`].
    pub fn serve(&self, i: &Input<'_>, io: &mut Vec<u8>) -> Result<Answer, Errno> {
        let req = i.req;
        let need_reply = |n: usize| if i.writable && i.seg_size >= n { Ok(()) } else { Err(libc::EINVAL) };
        match req.op() {
            OP_HELLO => {
                let mut rep = Rep::errno(0);
                rep.set_value(u64::from(self.instance));
                rep.set_flags(if self.read_only { RF_READ_ONLY } else { 0 });
                Ok(Answer::plain(rep))
            }
            OP_LOOKUP => {
                need_reply(crate::attr::ATTR_LEN)?;
                let fd = self.root.node(path1(i)?)?;
                Ok(Answer::with(Rep::errno(0), attr_bytes(&fstat(&fd)?)))
            }
            OP_OPEN => {
                need_reply(crate::attr::ATTR_LEN)?;
                self.open(i)
            }
            OP_CLOSE => {
                let f = self.handles.remove(req.handle()).ok_or(libc::EBADF)?;
                match f.deferred.swap(0, Ordering::SeqCst) {
                    0 => Ok(Answer::ok()),
                    e => Err(e),
                }
            }
            OP_READ => self.read(i, io),
            OP_FSTAT => {
                need_reply(crate::attr::ATTR_LEN)?;
                let f = self.file(req.handle())?;
                Ok(Answer::with(Rep::errno(0), attr_bytes(&fstat(&f.file)?)))
            }
            OP_SEEK => {
                let f = self.file(req.handle())?;
                let whence = match req.a() as i32 {
                    libc::SEEK_DATA => rustix::fs::SeekFrom::Data(req.offset()),
                    libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(req.offset()),
                    _ => return Err(libc::EINVAL),
                };
                // The handle's file position is nobody's: reads and writes are positional.
                let at = rustix::fs::seek(&f.file, whence).map_err(errno)?;
                let mut rep = Rep::errno(0);
                rep.set_value(at);
                Ok(Answer::plain(rep))
            }
            OP_FSYNC => {
                self.take_deferred(req.handle())?;
                let f = self.file(req.handle())?;
                let r = if req.b() != 0 { f.file.sync_data() } else { f.file.sync_all() };
                r.map_err(io_errno)?;
                Ok(Answer::ok())
            }
            OP_READDIR => self.readdir(i),
            OP_MKDIR => {
                need_reply(crate::attr::ATTR_LEN)?;
                let _changed = self.mutation()?;
                let (dir, name) =
                    self.root.parent(path1(i)?).map_err(|e| if e == libc::EINVAL { libc::EEXIST } else { e })?;
                rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(granted_mode(req.a(), true))).map_err(errno)?;
                let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
                Ok(Answer::with(Rep::errno(0), attr_bytes(&attr_of(&st))))
            }
            OP_RMDIR | OP_UNLINK => {
                let _changed = self.mutation()?;
                let (dir, name) = self.root.parent(path1(i)?)?;
                let flags = if req.op() == OP_RMDIR { AtFlags::REMOVEDIR } else { AtFlags::empty() };
                rustix::fs::unlinkat(&dir, name, flags).map_err(errno)?;
                Ok(Answer::ok())
            }
            OP_RENAME => {
                let _changed = self.mutation()?;
                let flags = RenameFlags::from_bits(req.count()).ok_or(libc::EINVAL)?;
                let (d1, n1) = self.root.parent(path1(i)?)?;
                let (d2, n2) = self.root.parent(path2(i)?)?;
                rustix::fs::renameat_with(&d1, n1, &d2, n2, flags).map_err(errno)?;
                Ok(Answer::ok())
            }
            OP_SETATTR => {
                need_reply(crate::attr::ATTR_LEN)?;
                self.setattr(i)
            }
            OP_SYMLINK => {
                need_reply(crate::attr::ATTR_LEN)?;
                let _changed = self.mutation()?;
                let (dir, name) = self.root.parent(path1(i)?)?;
                rustix::fs::symlinkat(path2(i)?, &dir, name).map_err(errno)?;
                let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno)?;
                Ok(Answer::with(Rep::errno(0), attr_bytes(&attr_of(&st))))
            }
            OP_READLINK => {
                let fd = self.root.node(path1(i)?)?;
                let target = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(|e| {
                    if e == rustix::io::Errno::NOENT {
                        libc::EINVAL // "" on a non-symlink O_PATH descriptor: not a link
                    } else {
                        errno(e)
                    }
                })?;
                let bytes = target.into_bytes();
                if !i.writable || bytes.len() > i.seg_size {
                    return Err(libc::ENAMETOOLONG);
                }
                Ok(Answer::with(Rep::errno(0), bytes))
            }
            OP_STATFS => {
                need_reply(crate::attr::STATFS_LEN)?;
                let v = rustix::fs::fstatvfs(self.root.fd()).map_err(errno)?;
                let s = StatFs {
                    blocks: v.f_blocks,
                    bfree: v.f_bfree,
                    bavail: v.f_bavail,
                    files: v.f_files,
                    ffree: v.f_ffree,
                    bsize: v.f_frsize.max(v.f_bsize) as u32,
                    namelen: v.f_namemax as u32,
                };
                let mut out = Vec::with_capacity(crate::attr::STATFS_LEN);
                s.encode(&mut out);
                Ok(Answer::with(Rep::errno(0), out))
            }
            _ => Err(libc::ENOSYS),
        }
    }

    fn open(&self, i: &Input<'_>) -> Result<Answer, Errno> {
        let req = i.req;
        let flags = req.count() as i32;
        if flags & !OPEN_FLAGS != 0 {
            return Err(libc::EINVAL);
        }
        let acc = flags & libc::O_ACCMODE;
        let writes = acc != libc::O_RDONLY || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        // Held until the open (O_TRUNC) is done.
        let _changed = if writes { Some(self.mutation()?) } else { None };
        let owner = Pid(req.b());
        // Before the open: one over the quota must not create or truncate the file.
        self.handles.room_for(owner)?;
        // O_NONBLOCK: opening a FIFO in the export must never block a worker.
        let oflags = OFlags::from_bits_retain(flags as u32) | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.root.open_at(path1(i)?, oflags, req.a())?;
        let attr = fstat(&fd)?;
        let file = File::from(fd);
        let mut data = attr_bytes(&attr);
        if acc != libc::O_WRONLY && attr.kind == crate::attr::FileKind::File {
            append_head(&mut data, &file, req.offset(), attr.size, i.seg_size);
        }
        let id = self.handles.insert(OpenFile {
            file,
            owner,
            flags,
            ra: Mutex::new(ReadAhead::default()),
            deferred: std::sync::atomic::AtomicI32::new(0),
        })?;
        let mut rep = Rep::errno(0);
        rep.set_value(id);
        rep.set_flags(if self.read_only { RF_READ_ONLY } else { 0 });
        Ok(Answer::with(rep, data))
    }

    fn read(&self, i: &Input<'_>, io: &mut Vec<u8>) -> Result<Answer, Errno> {
        let req = i.req;
        let n = req.count() as usize;
        if n > MAX_IO || !i.writable || i.seg_size < n {
            return Err(libc::EINVAL);
        }
        let f = self.file(req.handle())?;
        if f.flags & libc::O_ACCMODE == libc::O_WRONLY {
            return Err(libc::EBADF);
        }
        let off = req.offset();
        // A file offset is an off_t: a read ending past i64::MAX is invalid
        // (pread's answer), and no sum of offsets below can overflow.
        if off.checked_add(n as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(libc::EINVAL);
        }
        if n > MAX_PACKET_DATA {
            // Too large for the reply packet: sent by MoveTo from the page cache.
            let len = fstat(&f.file)?.size.saturating_sub(off).min(n as u64) as usize;
            if len > MAX_PACKET_DATA {
                let prefetch = self.note_read(&f, off, len).then_some(Prefetch {
                    handle: req.handle(),
                    off: off + len as u64,
                    len,
                    buffered: false,
                });
                let mut rep = Rep::errno(0);
                rep.set_count(len as u32);
                return Ok(Answer { rep, data: Data::File { file: f, offset: off, len }, prefetch });
            }
        }
        if io.len() < n {
            io.resize(n, 0);
        }
        let mut ra = f.ra.lock().unwrap_or_else(|e| e.into_inner());
        let epoch = self.epoch.load(Ordering::SeqCst);
        let fresh = ra.at.is_some_and(|t| t.elapsed() < READ_AHEAD_TTL) && ra.epoch == epoch;
        let hit = fresh && off >= ra.buf_off && off + n as u64 <= ra.buf_off + ra.buf.len() as u64;
        let got = if hit && off == ra.buf_off && n == ra.buf.len() {
            // The whole block read ahead: taken, not copied (the worker's
            // buffer becomes the handle's, for the next read-ahead to fill).
            std::mem::swap(io, &mut ra.buf);
            ra.at = None;
            n
        } else if hit {
            let s = (off - ra.buf_off) as usize;
            io[..n].copy_from_slice(&ra.buf[s..s + n]);
            n
        } else {
            read_full(&f.file, off, &mut io[..n])?
        };
        let sequential = ra.sequential(off, got);
        let prefetch = (self.read_ahead && sequential && got == n && n > 0).then(|| Prefetch {
            handle: req.handle(),
            off: off + n as u64,
            len: n,
            buffered: true,
        });
        drop(ra);
        let mut rep = Rep::errno(0);
        rep.set_count(got as u32);
        Ok(Answer { rep, data: Data::Io(got), prefetch })
    }

    /// Records a read of `len` bytes at `off` sent from the page cache, as
    /// a buffered read is recorded; whether to read ahead after it.
    fn note_read(&self, f: &OpenFile, off: u64, len: usize) -> bool {
        let sequential = f.ra.lock().unwrap_or_else(|e| e.into_inner()).sequential(off, len);
        self.read_ahead && sequential
    }

    /// Read-ahead after a reply: asks the kernel to start on the blocks
    /// after a sequential reader's next one and, for a reader answered from
    /// a buffer, reads that next block into its handle.
    pub fn prefetch(&self, p: Prefetch) {
        let Prefetch { handle, off, len, buffered } = p;
        let Some(f) = self.handles.get(handle) else { return };
        let mut ra = f.ra.lock().unwrap_or_else(|e| e.into_inner());
        if ra.next != off {
            return; // the reader moved on meanwhile
        }
        let (ahead, far) = if buffered { (off + len as u64, 4 * len as u64) } else { (off, 5 * len as u64) };
        if let Some((from, n)) = ra.unadvised(ahead, far) {
            let _ = rustix::fs::fadvise(&f.file, from, std::num::NonZeroU64::new(n), rustix::fs::Advice::WillNeed);
        }
        if !buffered {
            return;
        }
        let epoch = self.epoch.load(Ordering::SeqCst);
        let mut buf = std::mem::take(&mut ra.buf);
        if buf.capacity() > 2 * len {
            // A worker's buffer swapped in after a large request: not kept for small blocks.
            buf = Vec::new();
        }
        buf.resize(len, 0);
        match read_full(&f.file, off, &mut buf) {
            Ok(got) => {
                buf.truncate(got);
                ra.buf = buf;
                ra.buf_off = off;
                ra.epoch = epoch;
                ra.at = Some(Instant::now());
            }
            Err(_) => ra.at = None,
        }
    }

    /// Waits until no write-behind is in flight: every request but the
    /// writes themselves starts with this, so whatever a client does after
    /// a write's reply sees that write.
    pub fn settle(&self) {
        if self.pending.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut g = self.behind.lock().unwrap_or_else(|e| e.into_inner());
        while self.pending.load(Ordering::SeqCst) != 0 {
            g = self.settled.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// WRITE, part 1: validates it and, with write-behind, registers the
    /// write as in flight (until the returned [`Behind`] is done) so that the
    /// reply may leave before the data are written.
    pub fn begin_write(&self, req: &Req) -> Result<(std::sync::Arc<OpenFile>, Option<Behind<'_>>), Errno> {
        let f = self.file(req.handle())?;
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(libc::EBADF);
        }
        // The epoch goes up again in finish_write, once the data are in.
        drop(self.mutation()?);
        let e = f.deferred.swap(0, Ordering::SeqCst);
        if e != 0 {
            return Err(e);
        }
        let sync = f.flags & SYNC_FLAGS != 0;
        let behind = (self.write_behind && !sync).then(|| {
            let _g = self.behind.lock().unwrap_or_else(|e| e.into_inner());
            self.pending.fetch_add(1, Ordering::SeqCst);
            Behind { svc: self }
        });
        Ok((f, behind))
    }

    /// WRITE, part 2: writes `data` (after the reply, with write-behind; a
    /// failure is then reported by the next WRITE, FSYNC or CLOSE of each
    /// handle of the file).
    pub fn finish_write(&self, f: &OpenFile, req: &Req, data: &[u8], behind: Option<Behind<'_>>) -> Result<(), Errno> {
        let r = f.file.write_all_at(data, req.offset()).map_err(io_errno);
        // Before the write counts as done (settle): a read-ahead of the old bytes is stale from here on.
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if let (Err(e), Some(_)) = (&r, &behind) {
            f.deferred.store(*e, Ordering::SeqCst);
            self.handles.defer_to_file(f, *e);
        }
        drop(behind);
        r
    }

    /// A pending write-behind error of handle `h`, taken (FSYNC and CLOSE report it).
    pub fn take_deferred(&self, h: u64) -> Result<(), Errno> {
        match self.handles.get(h).map(|f| f.deferred.swap(0, Ordering::SeqCst)) {
            Some(e) if e != 0 => Err(e),
            _ => Ok(()),
        }
    }

    /// Checks a WRITE before its data are fetched.
    pub fn check_write(&self, i: &Input<'_>) -> Result<(), Errno> {
        let n = i.req.count() as usize;
        if n > MAX_IO || i.seg_size < n {
            return Err(libc::EINVAL);
        }
        if self.read_only {
            return Err(libc::EROFS);
        }
        let f = self.file(i.req.handle())?;
        if f.flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(libc::EBADF);
        }
        // As for READ: a write ending past i64::MAX is invalid, refused
        // before a write-behind reply could say it was done.
        if i.req.offset().checked_add(n as u64).is_none_or(|end| end > i64::MAX as u64) {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    fn readdir(&self, i: &Input<'_>) -> Result<Answer, Errno> {
        let req = i.req;
        let cap = (req.count() as usize).min(i.seg_size);
        if !i.writable {
            return Err(libc::EINVAL);
        }
        let fd = self.root.open_at(path1(i)?, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK, 0)?;
        let names = self.listings.names(&fd, req.offset())?;
        let mut out = Vec::new();
        let mut next = req.offset() as usize;
        let mut entries = 0u32;
        while next < names.len() {
            let name = &names[next];
            let st = match rustix::fs::statat(&fd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => {
                    next += 1; // removed meanwhile
                    continue;
                }
                Err(e) => return Err(errno(e)),
            };
            let name = String::from_utf8_lossy(name);
            let len = 2 + name.len() + crate::attr::ATTR_LEN;
            if out.len() + len > cap {
                if entries == 0 {
                    return Err(libc::EINVAL); // the client's buffer cannot hold one entry
                }
                break;
            }
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            attr_of(&st).encode(&mut out);
            entries += 1;
            next += 1;
        }
        let mut rep = Rep::errno(0);
        rep.set_next(next as u64);
        rep.set_flags(if next >= names.len() { RF_EOF } else { 0 });
        let mut a = Answer::with(rep, out);
        a.rep.set_value(u64::from(entries));
        Ok(a)
    }

    fn setattr(&self, i: &Input<'_>) -> Result<Answer, Errno> {
        let req = i.req;
        let p = req.path_len();
        let set = setattr_record(i.seg, p)?;
        let _changed = self.mutation()?;
        let path = path1(i)?;
        // By path: no handle in the low half (the high half may name this instance).
        let handle = if req.handle() as u32 != 0 { Some(self.file(req.handle())?) } else { None };
        // The object: the open file, or the path (a final symlink is followed, as chmod(2) does).
        let node;
        let fd: BorrowedFd<'_> = match &handle {
            Some(f) => f.file.as_fd(),
            None => {
                node = self.root.open_at(path, OFlags::PATH, 0)?;
                node.as_fd()
            }
        };
        let target = proc_path(&fd);
        if let Some(size) = set.size {
            let truncated = match &handle {
                Some(f) if f.flags & libc::O_ACCMODE != libc::O_RDONLY => f.file.set_len(size).map_err(io_errno),
                _ => Err(libc::EBADF),
            };
            if truncated.is_err() {
                let fd = self.root.open_at(path, OFlags::WRONLY | OFlags::NONBLOCK, 0)?;
                rustix::fs::ftruncate(&fd, size).map_err(errno)?;
            }
        }
        if let Some(perm) = set.perm {
            let dir = fstat(fd)?.kind == crate::attr::FileKind::Dir;
            rustix::fs::chmod(target.as_str(), Mode::from_raw_mode(granted_mode(u32::from(perm), dir)))
                .map_err(errno)?;
        }
        if set.atime.is_some() || set.mtime.is_some() {
            let times = Timestamps { last_access: settime(set.atime), last_modification: settime(set.mtime) };
            rustix::fs::utimensat(CWD, target.as_str(), &times, AtFlags::empty()).map_err(errno)?;
        }
        let attr = fstat(fd)?;
        Ok(Answer::with(Rep::errno(0), attr_bytes(&attr)))
    }
}
