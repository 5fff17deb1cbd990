//! The server's processes: the receiver that takes every request and
//! forwards it to the least busy worker (V style) — or, while every worker
//! is idle, serves a one-packet request itself, sparing it a hop — the
//! workers that serve requests and move data, and the reaper that releases
//! the files of clients that died.

use super::ops::{lengths_allowed, needed, Answer, Data, Input, Service, READ_AHEAD_TTL, SYNC_FLAGS};
use crate::attr::ATTR_LEN;
use crate::proto::*;
use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc::{Error, Message, Pid, Process, ProtocolError, ReceiveInfo};

/// How long the reaper waits for a client's owner to answer its ping (at
/// most a sweep).
const PING_LIMIT: Duration = Duration::from_secs(2);

/// Sweeps in a row whose ping a client's owner leaves unanswered before its
/// handles are released. Its node may never say it is gone: a ping to a
/// dead host fails only after T_t, which may be longer than the ping's limit.
const SILENT_SWEEPS: u32 = 3;

/// Receive buffer of a worker: the largest appended segment a packet can carry.
const RECEIVE_BUFFER: usize = MAX_PACKET_DATA + 1024;

/// The receiver's view of its workers.
pub struct Pool {
    /// Worker pids.
    pub workers: Vec<Pid>,
    /// Requests forwarded to each worker and not yet answered.
    pub load: Vec<AtomicUsize>,
}

/// Whether `e` means the node itself is gone (the process should exit).
fn stopped(e: &Error) -> bool {
    matches!(e, Error::NodeStopped | Error::Protocol(ProtocolError::NotLocalProcess(_)))
}

impl Pool {
    /// No request is with a worker.
    fn idle(&self) -> bool {
        self.load.iter().all(|l| l.load(Ordering::Relaxed) == 0)
    }
}

/// Requests the receiver may serve itself while the workers are idle: those
/// whose data travel in the request and reply packets (page reads and
/// writes, lookups, attributes, creating, renaming and removing names) —
/// served from the page cache in microseconds, so that a forward to a
/// worker would be much of their cost. Not those that move bulk data
/// (large reads, directory listings, writes not all appended) or wait for
/// the disk (fsync, a write to an O_SYNC or O_DSYNC handle: `sync_write`):
/// they would hold up the next client's request. A READ, an OPEN with the
/// file's head and a READLINK are ones only if their reply fits in the
/// reply packet to that client (`room`: 64 KiB on loopback, 1,400 bytes
/// over a 1,500-byte network by default); else it would go by MoveTo.
fn served_inline(
    req: &Req,
    info: &ReceiveInfo,
    room: impl FnOnce() -> usize,
    sync_write: impl FnOnce() -> bool,
) -> bool {
    let fits = |reply: usize, room: usize| reply <= MAX_PACKET_DATA.min(room);
    let appended = needed(req) <= info.len;
    match req.op() {
        OP_READ => fits(req.count() as usize, room()),
        OP_OPEN => {
            let head = (req.offset().min(OPEN_HEAD_MAX as u64) as usize).min(info.segment_size as usize);
            appended && fits(ATTR_LEN + head, room())
        }
        OP_READLINK => appended && fits(libc::PATH_MAX as usize, room()),
        OP_WRITE => appended && !sync_write(),
        OP_READDIR | OP_FSYNC | OP_STOP | OP_PING_OWNER => false,
        _ => appended,
    }
}

/// The receiver: forwards each request to an idle worker (the least loaded
/// one if none is idle), or serves it itself (see [`served_inline`]).
/// OP_STOP from a process of this node (not forwarded) ends the server: the workers are
/// told to stop, then the stopper gets its reply.
pub fn receiver(p: Process, svc: Arc<Service>, pool: Arc<Pool>, name: String, stop: Arc<AtomicBool>) {
    let me = p.pid();
    let mut rbuf = vec![0u8; RECEIVE_BUFFER];
    let (mut io, mut wbuf) = (Vec::new(), Vec::new());
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut rbuf) {
            Ok(i) => i,
            Err(e) => {
                if !stopped(&e) {
                    tracing::warn!("file server {name}: receive failed: {e}");
                }
                break;
            }
        };
        let from = info.from;
        let room = || p.reply_room(from).unwrap_or(0);
        let sync_write = || svc.handles.get(Req(msg).handle()).is_some_and(|f| f.flags & SYNC_FLAGS != 0);
        if pool.idle() && served_inline(&Req(msg), &info, room, sync_write) {
            if let Err(e) = handle(&p, &svc, &info, Req(msg), &rbuf[..info.len], &mut io, &mut wbuf) {
                if stopped(&e) {
                    break;
                }
            }
            continue;
        }
        if msg[0] == OP_STOP {
            // Straight from a process of this node: a Forward would let a
            // remote process pass one off as from the local process it got
            // a message from (the reaper's ping of a client-named owner).
            if from.host() != me.host() || info.forwarder != from {
                let _ = p.reply(&Rep::errno(libc::EPERM).0, from);
                continue;
            }
            stop.store(true, Ordering::SeqCst);
            let _ = p.unset_pid(&name, me); // not a newer server's under the same name
            for w in &pool.workers {
                let mut m = Req::new(OP_STOP).0;
                let _ = p.send(&mut m, *w);
            }
            let _ = p.reply(&Rep::errno(0).0, from);
            break;
        }
        let (i, _) = pool
            .load
            .iter()
            .enumerate()
            .min_by_key(|(_, l)| l.load(Ordering::Relaxed))
            .expect("a pool has at least one worker");
        pool.load[i].fetch_add(1, Ordering::Relaxed);
        if let Err(e) = p.forward(&msg, from, pool.workers[i]) {
            pool.load[i].fetch_sub(1, Ordering::Relaxed);
            if stopped(&e) {
                break;
            }
            tracing::debug!("file server {name}: forward from {from} failed: {e}");
        }
    }
    stop.store(true, Ordering::SeqCst);
}

/// The transfer unit of a READ or WRITE request (its `a`); of any other
/// (whose `a` means something else), the default.
fn unit(req: &Req) -> usize {
    match (req.op(), req.a() as usize) {
        (OP_READ | OP_WRITE, u) if u > 0 => u.clamp(MIN_UNIT, MAX_IO),
        _ => DEFAULT_UNIT,
    }
}

/// Sends `data` into the client's segment and replies: in the reply packet
/// if it fits (2 packets in all), else by MoveTo in `unit`-byte pieces first.
fn reply_data(p: &Process, to: Pid, rep: &Rep, data: &[u8], unit: usize) -> Result<(), Error> {
    if data.is_empty() {
        return p.reply(&rep.0, to);
    }
    if data.len() <= MAX_PACKET_DATA {
        match p.reply_with_segment(&rep.0, to, 0, data) {
            Err(Error::Protocol(ProtocolError::TooLarge { .. })) => {}
            r => return r,
        }
    }
    for (k, piece) in data.chunks(unit).enumerate() {
        p.move_to(to, (k * unit) as u32, piece)?;
    }
    p.reply(&rep.0, to)
}

/// Sends `len` bytes of `file` from `offset` into the client's segment by
/// MoveTo in `unit`-byte pieces, from the page cache, and replies; a
/// failure to read the file is answered with its errno (EIO if none).
fn reply_file(p: &Process, to: Pid, rep: &Rep, file: &File, offset: u64, len: usize, unit: usize) -> Result<(), Error> {
    for at in (0..len).step_by(unit) {
        let n = unit.min(len - at);
        match p.move_to_from_file(to, at as u32, file, offset + at as u64, n as u32) {
            Ok(()) => {}
            Err(Error::Io(e)) => return p.reply(&Rep::errno(e.raw_os_error().unwrap_or(libc::EIO)).0, to),
            Err(e) => return Err(e),
        }
    }
    p.reply(&rep.0, to)
}

/// Fetches the `need` first bytes of the client's segment: from the
/// appended part if it holds them, the rest by MoveFrom in `unit` pieces.
fn fetch<'a>(
    p: &Process,
    info: &ReceiveInfo,
    appended: &'a [u8],
    need: usize,
    unit: usize,
    io: &'a mut Vec<u8>,
) -> Result<Result<&'a [u8], i32>, Error> {
    if need <= appended.len() {
        return Ok(Ok(&appended[..need]));
    }
    if !info.access.read || (info.segment_size as usize) < need {
        return Ok(Err(libc::EINVAL));
    }
    if io.len() < need {
        io.resize(need, 0);
    }
    let have = appended.len();
    io[..have].copy_from_slice(appended);
    let mut off = have;
    while off < need {
        let end = (off + unit).min(need);
        p.move_from(info.from, off as u32, &mut io[off..end])?;
        off = end;
    }
    Ok(Ok(&io[..need]))
}

/// A worker: serves the requests the receiver forwards to it.
pub fn worker(p: Process, svc: Arc<Service>, pool: Arc<Pool>, index: usize) {
    let mut rbuf = vec![0u8; RECEIVE_BUFFER];
    let mut io: Vec<u8> = Vec::new();
    let mut wbuf: Vec<u8> = Vec::new();
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut rbuf) {
            Ok(i) => i,
            Err(e) => {
                if !stopped(&e) {
                    tracing::warn!("file server worker: receive failed: {e}");
                }
                return;
            }
        };
        let req = Req(msg);
        if req.op() == OP_STOP && info.from.host() == p.pid().host() && info.forwarder == info.from {
            let _ = p.reply(&Rep::errno(0).0, info.from);
            return;
        }
        let r = handle(&p, &svc, &info, req, &rbuf[..info.len], &mut io, &mut wbuf);
        pool.load[index].fetch_sub(1, Ordering::Relaxed);
        if r.is_err() {
            return;
        }
    }
}

/// Serves one request; if the exchange with the client fails (a transfer
/// failed or was too slow, or the client died or vanished), answers EIO; a
/// client that cannot even be answered has its files released. Errs only
/// when the node has stopped.
fn handle(
    p: &Process,
    svc: &Service,
    info: &ReceiveInfo,
    req: Req,
    appended: &[u8],
    io: &mut Vec<u8>,
    wbuf: &mut Vec<u8>,
) -> Result<(), Error> {
    let owner = match req.op() {
        op if is_handle_op(op) => svc.handles.owner_of(req.handle()),
        _ => Pid(req.b()),
    };
    match serve_one(p, svc, info, req, appended, io, wbuf) {
        Ok(()) => Ok(()),
        Err(e) if stopped(&e) => Err(e),
        Err(e) => {
            // A client still waiting (stopped a while, or behind a link slower
            // than the stream cap) must not wait for ever: it gets EIO and
            // keeps its files (and their deferred write errors); if it is in
            // fact gone, the reaper releases them. One that no longer waits
            // is gone: its files are released now.
            if p.reply(&Rep::errno(libc::EIO).0, info.from).is_ok() {
                tracing::debug!("file server: exchange with {} failed ({e}); answered EIO", info.from);
                return Ok(());
            }
            let n = owner_to_release(owner, info.from).map_or(0, |o| svc.handles.release_owner(o));
            tracing::debug!("file server: exchange with {} failed ({e}); released {n} handles", info.from);
            Ok(())
        }
    }
}

/// Whose files a failed exchange with `from` releases: its client's owner
/// `owner` — but only an owner on `from`'s own host, since a path request
/// names its owner itself and must not release another client's files.
fn owner_to_release(owner: Pid, from: Pid) -> Option<Pid> {
    (!owner.is_none() && owner.host() == from.host()).then_some(owner)
}

/// Serves one request; an error means the exchange with the client failed.
fn serve_one(
    p: &Process,
    svc: &Service,
    info: &ReceiveInfo,
    req: Req,
    appended: &[u8],
    io: &mut Vec<u8>,
    wbuf: &mut Vec<u8>,
) -> Result<(), Error> {
    let to = info.from;
    // Meant for another instance: the server that had this pid before its
    // node restarted (a path request carries the instance in the high half
    // of its handle field; a handle carries it anyway). Refused before
    // anything is done, so that the client finds its server again.
    let (tag, low) = ((req.handle() >> 32) as u32, req.handle() as u32);
    if req.op() != OP_HELLO && tag != 0 && low == 0 && tag != svc.instance {
        return p.reply(&Rep::errno(libc::ESTALE).0, to);
    }
    // A client's owner process lives on the client's node: an OPEN naming
    // one elsewhere would charge its handles to another host's share.
    if req.op() == OP_OPEN && Pid(req.b()).host() != to.host() {
        return p.reply(&Rep::errno(libc::EINVAL).0, to);
    }
    // A handle is used only from its owner's host: ids are guessable, and
    // another host could read, write or close a client's file (and take its
    // deferred write error).
    if is_handle_op(req.op()) && svc.handles.get(req.handle()).is_some_and(|f| f.owner.host() != to.host()) {
        return p.reply(&Rep::errno(libc::EBADF).0, to);
    }
    // A new client's owner holds nothing: what is held under its pid was an
    // earlier holder's (a client restarted with the same host id), whose
    // handles the reaper would never release, since the pid answers again.
    if req.op() == OP_HELLO {
        if let Some(owner) = owner_to_release(Pid(req.b()), to) {
            let n = svc.handles.release_owner(owner);
            if n > 0 {
                tracing::debug!("file server: new client {owner} held {n} handles of an earlier one; released");
            }
        }
    }
    svc.settle();
    let unit = unit(&req);
    let need = needed(&req);
    let mut i = Input { req, seg: appended, seg_size: info.segment_size as usize, writable: info.access.write };
    let checked = if req.op() == OP_WRITE { svc.check_write(&i) } else { lengths_allowed(&req) };
    if let Err(e) = checked {
        return p.reply(&Rep::errno(e).0, to);
    }
    let seg = match fetch(p, info, appended, need, unit, wbuf)? {
        Ok(s) => s,
        Err(e) => return p.reply(&Rep::errno(e).0, to),
    };
    i.seg = seg;
    if req.op() == OP_WRITE {
        let (f, behind) = match svc.begin_write(&req) {
            Ok(x) => x,
            Err(e) => return p.reply(&Rep::errno(e).0, to),
        };
        let mut rep = Rep::errno(0);
        rep.set_count(seg.len() as u32);
        if behind.is_some() {
            // Write-behind: the reply leaves first; requests that come after
            // it wait (Service::settle) until the data are written.
            let r = p.reply(&rep.0, to);
            let _ = svc.finish_write(&f, &req, seg, behind);
            return r;
        }
        return match svc.finish_write(&f, &req, seg, None) {
            Ok(()) => p.reply(&rep.0, to),
            Err(e) => p.reply(&Rep::errno(e).0, to),
        };
    }
    match svc.serve(&i, io) {
        Err(e) => p.reply(&Rep::errno(e).0, to),
        Ok(Answer { rep, data, prefetch }) => {
            let sent = match data {
                Data::None => p.reply(&rep.0, to),
                Data::Io(n) => reply_data(p, to, &rep, &io[..n], unit),
                Data::Owned(v) => reply_data(p, to, &rep, &v, unit),
                Data::File { file, offset, len } => reply_file(p, to, &rep, &file.file, offset, len, unit),
            };
            if let Err(e) = sent {
                // The client never learns a handle whose OPEN reply did not
                // reach it, and never closes it.
                if req.op() == OP_OPEN {
                    svc.handles.remove(rep.value());
                }
                return Err(e);
            }
            if let Some(ahead) = prefetch {
                svc.prefetch(ahead);
            }
            Ok(())
        }
    }
}

/// The reaper: every `sweep`, frees stale read-ahead buffers and pings the
/// owner process of each client that holds handles and has been silent for
/// a whole `sweep`; a client whose owner is gone (its node says no such
/// process, or its node is down) or has left [`SILENT_SWEEPS`] pings in a
/// row unanswered has its handles released. The pings go out together, one
/// per process of `pingers` at a time: a ping to a dead host fails only
/// after T_t, and one at a time released at most one dead client a second
/// (90 killed `vipc cp` clients held 100 descriptors, and the disk space of
/// deleted files, for 110 s).
pub fn reaper(pingers: Vec<Process>, svc: Arc<Service>, sweep: Duration, stop: Arc<AtomicBool>) {
    let mut last = Instant::now();
    let mut silent: HashMap<Pid, u32> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50).min(sweep));
        if last.elapsed() < sweep {
            continue;
        }
        last = Instant::now();
        svc.handles.shed_read_ahead(last - READ_AHEAD_TTL);
        let idle = svc.handles.idle_owners(last - sweep);
        silent.retain(|o, _| idle.contains(o));
        for batch in idle.chunks(pingers.len().max(1)) {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            for (owner, answer) in ping_owners(&pingers, batch, PING_LIMIT.min(sweep)) {
                if !reap(&svc, &mut silent, owner, answer) {
                    return;
                }
            }
        }
    }
}

/// Pings each of `owners` from its own process of `pingers` (as many as
/// there are owners, at most), all at once, each bounded by `limit`: an
/// owner that receives and never replies is kept alive by its node forever,
/// and must not stop the sweep.
fn ping_owners(pingers: &[Process], owners: &[Pid], limit: Duration) -> Vec<(Pid, Result<Pid, Error>)> {
    std::thread::scope(|s| {
        let pings: Vec<_> = owners
            .iter()
            .zip(pingers)
            .map(|(&owner, p)| {
                s.spawn(move || {
                    let mut m = Req::new(OP_PING_OWNER).0;
                    (owner, vipc::within(limit, || p.send(&mut m, owner)))
                })
            })
            .collect();
        pings.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    })
}

/// Acts on `owner`'s answer to its ping: keeps its handles, counts a silent
/// sweep, or releases them. False if the node has stopped.
fn reap(svc: &Service, silent: &mut HashMap<Pid, u32>, owner: Pid, answer: Result<Pid, Error>) -> bool {
    let gone = match answer {
        Ok(_) => {
            svc.handles.seen(owner);
            silent.remove(&owner);
            return true;
        }
        Err(e) if stopped(&e) => return false,
        Err(e) if e.is_deadline() => {
            let n = silent.entry(owner).or_default();
            *n += 1;
            tracing::debug!("file server: client {owner} did not answer its ping ({n} in a row)");
            if *n < SILENT_SWEEPS {
                return true;
            }
            format!("{SILENT_SWEEPS} pings unanswered")
        }
        Err(e) => e.to_string(),
    };
    silent.remove(&owner);
    let n = svc.handles.release_owner(owner);
    tracing::debug!("file server: client {owner} is gone ({gone}); released {n} handles");
    true
}

/// The operations that name an open file by its handle.
fn is_handle_op(op: u8) -> bool {
    matches!(op, OP_READ | OP_WRITE | OP_FSTAT | OP_FSYNC | OP_SEEK | OP_CLOSE)
}

#[cfg(test)]
mod tests {
    use super::{owner_to_release, served_inline, unit};
    use crate::proto::{Req, MAX_IO, MIN_UNIT, OP_OPEN, OP_READ, OP_READLINK, OP_WRITE};
    use vipc::{Access, Pid, ReceiveInfo};

    /// A page read the receiver serves itself only if it fits the reply
    /// packet to its client: over a real network the rest would be a MoveTo
    /// holding up every other client's request.
    #[test]
    fn a_read_is_served_inline_only_if_it_fits_the_reply_packet() {
        let info = ReceiveInfo {
            from: Pid::new(5, 2),
            forwarder: Pid::new(5, 2),
            len: 0,
            segment_size: 1 << 20,
            access: Access::READ_WRITE,
        };
        let read = |n: u32| {
            let mut r = Req::new(OP_READ);
            r.set_count(n);
            r
        };
        let inline = |r: &Req, room: usize| served_inline(r, &info, || room, || false);
        assert!(inline(&read(4096), 65_419), "on loopback");
        assert!(!inline(&read(4096), 1_400), "over a 1,500-byte network");
        assert!(inline(&read(1_400), 1_400));
        assert!(!inline(&read(512), 0), "a sender that awaits no reply here");
    }

    /// So is an OPEN with the file's head, and a READLINK; a write that
    /// waits for the disk (an O_SYNC handle) never is.
    #[test]
    fn opens_readlinks_and_sync_writes_are_served_inline_only_if_quick() {
        let info = ReceiveInfo {
            from: Pid::new(5, 2),
            forwarder: Pid::new(5, 2),
            len: 64,
            segment_size: 1 << 20,
            access: Access::READ_WRITE,
        };
        let op = |op: u8, offset: u64| {
            let mut r = Req::new(op);
            r.set_path_len(1);
            r.set_offset(offset);
            r
        };
        let inline = |r: &Req, room: usize| served_inline(r, &info, || room, || false);
        assert!(inline(&op(OP_OPEN, 0), 1_400), "no head asked");
        assert!(inline(&op(OP_OPEN, 1_000), 1_400));
        assert!(!inline(&op(OP_OPEN, 65_536), 1_400), "a 64 KiB head over a 1,500-byte network");
        assert!(!inline(&op(OP_OPEN, 65_536), 65_419), "nor on loopback: 80 bytes of attributes more");
        assert!(inline(&op(OP_READLINK, 0), 65_419));
        assert!(!inline(&op(OP_READLINK, 0), 1_400), "a target of up to 4 KiB");
        let mut w = Req::new(OP_WRITE);
        w.set_count(64);
        assert!(served_inline(&w, &info, || 1_400, || false));
        assert!(!served_inline(&w, &info, || 1_400, || true), "a write to an O_SYNC handle");
    }

    /// A client's transfer unit is taken within 64 KiB..8 MiB: a tiny one
    /// would make a request thousands of moves, each allowed T_t.
    #[test]
    fn transfer_units_are_clamped() {
        let read = |a: u32| {
            let mut r = Req::new(OP_READ);
            r.set_a(a);
            unit(&r)
        };
        assert_eq!(read(1024), MIN_UNIT);
        assert_eq!(read(1 << 20), 1 << 20);
        assert_eq!(read(u32::MAX), MAX_IO);
    }

    #[test]
    fn a_failed_exchange_releases_only_an_owner_of_its_own_host() {
        let (owner, pool) = (Pid::new(5, 2), Pid::new(5, 9));
        assert_eq!(owner_to_release(owner, pool), Some(owner));
        assert_eq!(owner_to_release(owner, Pid::new(6, 9)), None, "named by another host");
        assert_eq!(owner_to_release(Pid::NONE, pool), None);
    }
}
