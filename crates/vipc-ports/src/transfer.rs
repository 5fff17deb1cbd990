//! How encoded bytes travel with a request and its answer — the part that
//! interface calls and port messages share.
//!
//! Up to 16 bytes of arguments travel inside the 32-byte request; larger
//! ones in a segment the caller grants for reading (its first part
//! appended to the Send, the rest read by the receiver with MoveFrom
//! straight into its buffer). Up to 24 bytes of result come back inside the
//! answer; larger ones are written at offset 0 of a segment the caller
//! grants for writing (in the reply packet when small, by MoveTo
//! otherwise). The caller learns, per call site, how large results are and
//! grants a large enough segment; when one is too small the answerer keeps
//! the result and the caller fetches it once (status MORE, then FETCH) — a
//! handler never runs twice for one call. A call whose last argument is a
//! byte vector may send it as the segment itself (flag BULK): no copy on
//! either side but the transfer.

use crate::frame::{answer, flags, kind, read_answer, status, Request, ANSWER_INLINE, REQUEST_INLINE};
use crate::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;
use vipc::{Message, Pid, Process, ReceiveInfo, SegmentRef, SendOptions};

/// Results up to this size ride in the reply packet itself.
const REPLY_SEGMENT_MAX: usize = 1024;
/// Smallest result segment a caller grants once it knows results are large.
const MIN_RESULT_SEGMENT: usize = 4096;
/// Results an answerer keeps for a FETCH, the oldest dropped first.
const KEPT_MAX: usize = 64;
/// Bytes of results an answerer keeps together (one larger result is kept alone).
const KEPT_BYTES: usize = 64 << 20;
/// The most bytes of arguments a server reads, or of a result a caller
/// fetches, for one call (the other side's claim allocates that much).
pub const MAX_ARGUMENTS: usize = 256 << 20;

/// Why a call failed: the IPC, or the answerer said so (status, its 24 trailing bytes).
pub(crate) enum Failure {
    Vipc(Error),
    Status(u8, [u8; ANSWER_INLINE]),
}

impl<E: Into<Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Vipc(e.into())
    }
}

/// The caller's side: a reused segment buffer and what it learnt of result sizes.
#[derive(Default)]
pub(crate) struct Caller {
    /// The segment lent with calls, reused (a fresh large allocation costs a
    /// page fault per page).
    buf: RefCell<Vec<u8>>,
    /// Per call site, the size of its last result: how much to grant for the next.
    hints: RefCell<Vec<usize>>,
}

impl Caller {
    /// Sends `req` with `args` to `to` and returns the result bytes.
    pub fn call(
        &self,
        p: &Process,
        to: Pid,
        req: Request,
        args: &[u8],
        site: usize,
    ) -> std::result::Result<Vec<u8>, Failure> {
        self.call_with(p, to, req, args, site, |b| Ok(b.to_vec()))
    }

    /// Sends `req` with `args` to `to` and hands the result bytes, where
    /// they landed, to `take` (a decoder reads them without a copy first).
    pub fn call_with<T>(
        &self,
        p: &Process,
        to: Pid,
        mut req: Request,
        args: &[u8],
        site: usize,
        take: impl FnOnce(&[u8]) -> Result<T>,
    ) -> std::result::Result<T, Failure> {
        req.len = u32::try_from(args.len()).map_err(|_| Error::Encode("arguments over 4 GiB".into()))?;
        let mut msg = req.encode(args);
        let grant = self.grant(site);
        let big_args = args.len() > REQUEST_INLINE;
        // What the answerer may write into: the result lands at offset 0.
        let writable = if grant > 0 { grant.max(if big_args { args.len() } else { 0 }) } else { 0 };
        let mut buf = self.buf.borrow_mut();
        let segment = match (big_args, grant > 0) {
            (false, false) => None,
            (true, false) => Some(SegmentRef::Read(args)),
            (false, true) => {
                buf.resize(writable, 0);
                Some(SegmentRef::Write(&mut buf[..]))
            }
            (true, true) => {
                buf.clear();
                buf.extend_from_slice(args);
                buf.resize(writable, 0);
                Some(SegmentRef::ReadWrite(&mut buf[..]))
            }
        };
        p.send_with(&mut msg, to, segment, SendOptions::default())?;
        self.finish(p, to, &msg, &mut buf, writable, site, take)
    }

    /// Sends `req` (flag BULK) with the other arguments' encoding `head`
    /// (at most [`REQUEST_INLINE`] bytes) inline and `bulk` as the segment
    /// itself: the caller's bytes are read by the server where they are.
    #[allow(clippy::too_many_arguments)]
    pub fn call_bulk<T>(
        &self,
        p: &Process,
        to: Pid,
        mut req: Request,
        head: &[u8],
        mut bulk: Vec<u8>,
        site: usize,
        take: impl FnOnce(&[u8]) -> Result<T>,
    ) -> std::result::Result<T, Failure> {
        debug_assert!(head.len() <= REQUEST_INLINE);
        req.flags |= flags::BULK;
        req.len = u32::try_from(bulk.len()).map_err(|_| Error::Encode("arguments over 4 GiB".into()))?;
        let mut msg = req.encode(&[]);
        msg[16..16 + head.len()].copy_from_slice(head);
        let grant = self.grant(site);
        let writable = if grant > 0 { grant.max(bulk.len()) } else { 0 };
        let segment = if grant > 0 {
            bulk.resize(writable, 0);
            SegmentRef::ReadWrite(&mut bulk[..])
        } else {
            SegmentRef::Read(&bulk)
        };
        p.send_with(&mut msg, to, Some(segment), SendOptions::default())?;
        self.finish(p, to, &msg, &mut bulk, writable, site, take)
    }

    /// How much to grant for call site `site`'s result: 0 if it came inline last time.
    fn grant(&self, site: usize) -> usize {
        let hint = self.hints.borrow().get(site).copied().unwrap_or(0).min(MAX_ARGUMENTS);
        if hint > ANSWER_INLINE {
            hint.next_power_of_two().max(MIN_RESULT_SEGMENT)
        } else {
            0
        }
    }

    /// The answer `msg`: its result, inline, in `landed` (the segment the
    /// server could write `writable` bytes of) or fetched into it, to `take`.
    #[allow(clippy::too_many_arguments)]
    fn finish<T>(
        &self,
        p: &Process,
        to: Pid,
        msg: &Message,
        landed: &mut Vec<u8>,
        writable: usize,
        site: usize,
        take: impl FnOnce(&[u8]) -> Result<T>,
    ) -> std::result::Result<T, Failure> {
        let (st, n, inline) = read_answer(msg);
        let n = n as usize;
        // The length of a result, not whatever a failed call's answer claims:
        // the next call at this site allocates what it says.
        if matches!(st, status::OK | status::MORE) {
            let mut hints = self.hints.borrow_mut();
            if hints.len() <= site {
                hints.resize(site + 1, 0);
            }
            hints[site] = n.min(MAX_ARGUMENTS);
        }
        let bytes = match st {
            status::OK if n <= ANSWER_INLINE => &inline[..n],
            status::OK if writable >= n => &landed[..n],
            status::MORE => {
                fetch(p, to, n, landed)?;
                &landed[..n]
            }
            st => return Err(Failure::Status(st, inline.try_into().expect("24 bytes"))),
        };
        Ok(take(bytes)?)
    }
}

/// Fetches the `n`-byte result `to` kept after answering MORE into `buf[..n]`.
pub(crate) fn fetch(p: &Process, to: Pid, n: usize, buf: &mut Vec<u8>) -> std::result::Result<(), Failure> {
    // The answerer's word: a claim of 4 GiB must not make the caller allocate it.
    if n > MAX_ARGUMENTS {
        return Err(Error::Malformed(format!("a {n}-byte result (the most is {MAX_ARGUMENTS})")).into());
    }
    let req = Request { kind: kind::FETCH, flags: 0, method: 0, fingerprint: 0, len: 0 };
    let mut msg = req.encode(&[]);
    buf.resize(n, 0);
    p.send_with(&mut msg, to, Some(SegmentRef::Write(&mut buf[..n])), SendOptions::default())?;
    match read_answer(&msg) {
        (status::OK, got, _) if got as usize == n => Ok(()),
        (st, _, inline) => Err(Failure::Status(st, inline.try_into().expect("24 bytes"))),
    }
}

/// The error for a status that is not specific to the kind of call.
pub(crate) fn status_error(st: u8, what: &str) -> Error {
    match st {
        status::BAD_ARGUMENTS => Error::Decode(format!("{what}: the receiver could not decode the arguments")),
        status::GONE => Error::Malformed(format!("{what}: the kept result was gone")),
        status::UNDELIVERED => Error::Undelivered(what.to_string()),
        other => Error::Malformed(format!("{what}: status {other}")),
    }
}

/// What a caller granted with its request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Grant {
    pub to: Pid,
    pub write: bool,
    pub size: u32,
}

impl Grant {
    pub fn of(info: &ReceiveInfo) -> Grant {
        Grant { to: info.from, write: info.access.write, size: info.segment_size }
    }
}

/// Results kept for a FETCH, one per caller, the oldest dropped first.
#[derive(Default)]
pub(crate) struct Kept(VecDeque<(Pid, Vec<u8>)>);

impl Kept {
    fn put(&mut self, caller: Pid, bytes: Vec<u8>) {
        self.0.retain(|(c, _)| *c != caller);
        // Room for it: the oldest go (a caller that died never fetches its own).
        let mut held: usize = self.0.iter().map(|(_, b)| b.len()).sum();
        while !self.0.is_empty() && (self.0.len() >= KEPT_MAX || held + bytes.len() > KEPT_BYTES) {
            held -= self.0.pop_front().map_or(0, |(_, b)| b.len());
        }
        self.0.push_back((caller, bytes));
    }

    fn take(&mut self, caller: Pid) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(c, _)| *c == caller)?;
        self.0.remove(i).map(|(_, b)| b)
    }
}

/// Answers `g.to` with status OK and `result`, the cheapest way its grant allows.
pub(crate) fn send_result(p: &Process, g: Grant, result: &[u8], kept: &mut Kept) -> Result<()> {
    let n = result.len();
    let len = u32::try_from(n).map_err(|_| Error::Encode("a result over 4 GiB".into()))?;
    if n <= ANSWER_INLINE {
        return Ok(p.reply(&answer(status::OK, len, result), g.to)?);
    }
    if fetched_later(&g, n) {
        kept.put(g.to, result.to_vec());
        return Ok(p.reply(&answer(status::MORE, len, &[]), g.to)?);
    }
    let ok = answer(status::OK, len, &[]);
    if n <= REPLY_SEGMENT_MAX {
        return Ok(p.reply_with_segment(&ok, g.to, 0, result)?);
    }
    move_then_reply(p, g.to, result, &ok).map(drop)
}

/// MoveTo of `data` into `to`'s segment, then `reply`: `Ok(true)`. If the
/// MoveTo fails (the caller cut off, or slower than the stream cap), a
/// caller still waiting is answered UNDELIVERED rather than left waiting:
/// `Ok(false)`.
pub(crate) fn move_then_reply(p: &Process, to: Pid, data: &[u8], reply: &Message) -> Result<bool> {
    match p.move_to(to, 0, data) {
        Ok(()) => Ok(p.reply(reply, to).map(|()| true)?),
        Err(e @ vipc::Error::NodeStopped) => Err(e.into()),
        Err(_) => Ok(p.reply(&answer(status::UNDELIVERED, 0, &[]), to).map(|()| false)?),
    }
}

/// Answers a FETCH with the result kept for its sender: whether it got it.
pub(crate) fn fetched(p: &Process, g: Grant, kept: &mut Kept) -> Result<bool> {
    match kept.take(g.to) {
        Some(bytes) if g.write && bytes.len() <= g.size as usize => {
            move_then_reply(p, g.to, &bytes, &answer(status::OK, bytes.len() as u32, &[]))
        }
        _ => Ok(p.reply(&answer(status::GONE, 0, &[]), g.to).map(|()| false)?),
    }
}

/// Whether a result of `n` bytes answering a call granted `g` is announced
/// (MORE) and then fetched, rather than sent with the answer.
pub(crate) fn fetched_later(g: &Grant, n: usize) -> bool {
    n > ANSWER_INLINE && (!g.write || n > g.size as usize)
}

/// The encoded arguments of `req`: inline, appended (`rbuf[..info.len]`),
/// and the rest read with MoveFrom.
pub(crate) fn read_args(p: &Process, req: &Request, msg: &Message, info: ReceiveInfo, rbuf: &[u8]) -> Result<Vec<u8>> {
    let mut args = Vec::new();
    read_args_into(p, req, msg, info, rbuf, &mut args)?;
    Ok(args)
}

/// [`read_args`] into `args` (replacing its contents): a server reusing one
/// buffer takes no page faults for large arguments.
pub(crate) fn read_args_into(
    p: &Process,
    req: &Request,
    msg: &Message,
    info: ReceiveInfo,
    rbuf: &[u8],
    args: &mut Vec<u8>,
) -> Result<()> {
    args.clear();
    if let Some(inline) = req.inline(msg) {
        args.extend_from_slice(&inline);
        return Ok(());
    }
    let n = arguments_len(req, info)?;
    let have = info.len.min(n);
    args.extend_from_slice(&rbuf[..have]);
    args.resize(n, 0);
    if have < n {
        p.move_from(info.from, have as u32, &mut args[have..])?;
    }
    Ok(())
}

/// The bytes of arguments `req` announces, if the caller's segment holds
/// them and they are within [`MAX_ARGUMENTS`].
fn arguments_len(req: &Request, info: ReceiveInfo) -> Result<usize> {
    let n = req.len as usize;
    if n > MAX_ARGUMENTS || !info.access.read || (info.segment_size as usize) < n {
        return Err(Error::Malformed(format!("{n} bytes of arguments but a {}-byte segment", info.segment_size)));
    }
    Ok(n)
}

/// The byte vector of a BULK request: the appended part, then the rest by
/// MoveFrom straight into the vector handed to the handler.
pub(crate) fn read_bulk(p: &Process, req: &Request, info: ReceiveInfo, rbuf: &[u8]) -> Result<Vec<u8>> {
    let n = arguments_len(req, info)?;
    let have = info.len.min(n);
    let mut bulk = Vec::with_capacity(n);
    bulk.extend_from_slice(&rbuf[..have]);
    bulk.resize(n, 0);
    if have < n {
        p.move_from(info.from, have as u32, &mut bulk[have..])?;
    }
    Ok(bulk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_results_are_bounded_by_count_and_bytes_the_oldest_going_first() {
        let mut k = Kept::default();
        for i in 0..KEPT_MAX as u32 + 3 {
            k.put(Pid(i), vec![1; 10]);
        }
        assert_eq!(k.0.len(), KEPT_MAX);
        assert!(k.take(Pid(2)).is_none() && k.take(Pid(3)).is_some());
        k.put(Pid(1000), vec![2; KEPT_BYTES - 100]);
        let held: usize = k.0.iter().map(|(_, b)| b.len()).sum();
        assert!(held <= KEPT_BYTES, "{held} bytes kept");
        assert!(k.take(Pid(1000)).is_some(), "the newest is kept");
        k.put(Pid(1001), vec![3; KEPT_BYTES + 1]);
        assert_eq!(k.take(Pid(1001)).map(|b| b.len()), Some(KEPT_BYTES + 1), "one larger than the cap alone");
    }

    #[test]
    fn a_result_claimed_over_max_arguments_is_refused_before_anything_is_allocated_or_sent() {
        let node = vipc::Node::start(vipc::NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let p = node.attach().unwrap();
        let before = node.stats().ipc_packets();
        let mut buf = Vec::new();
        let r = fetch(&p, Pid::new(1, 99), MAX_ARGUMENTS + 1, &mut buf);
        assert!(matches!(r, Err(Failure::Vipc(Error::Malformed(_)))));
        assert!(buf.is_empty(), "nothing allocated");
        assert_eq!(node.stats().ipc_packets(), before, "nothing sent");
    }
}
