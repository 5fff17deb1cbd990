//! Typed remote procedure calls over Send–Receive–Reply: the client stub's
//! engine ([`Client`]) and the server's loop ([`serve`]). The code that
//! `#[interface]` generates calls these.
//!
//! Arguments of at most 16 bytes travel inside the 32-byte message; larger
//! ones in a segment the caller grants for reading (its first part appended
//! to the Send, the rest read by the server with MoveFrom straight into its
//! buffer). Results of at most 24 bytes come back inside the reply; larger
//! ones are written into a segment the caller grants for writing (in the
//! reply packet when small, by MoveTo otherwise). The caller learns, per
//! method, how large results are and grants a large enough segment; when
//! one is too small the server keeps the result and the caller fetches it
//! once (status MORE, then FETCH) — the handler never runs twice.

use crate::codec::{decode, encode};
use crate::frame::{answer, kind, read_answer, status, Request, ANSWER_INLINE, REQUEST_INLINE};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use vipc::{Message, Pid, Process, ReceiveInfo, Scope, SegmentRef, SendOptions};

/// Results up to this size ride in the reply packet itself.
const REPLY_SEGMENT_MAX: usize = 1024;
/// Smallest result segment a caller grants once it knows results are large.
const MIN_RESULT_SEGMENT: usize = 4096;
/// Results a server keeps for a FETCH, oldest dropped first.
const KEPT_MAX: usize = 64;

/// The client side of one interface on one server.
pub struct Client<'p> {
    process: &'p Process,
    server: Pid,
    interface: &'static str,
    fingerprint: u64,
    /// The segment lent with calls, reused (a fresh large allocation costs a
    /// page fault per page).
    buf: RefCell<Vec<u8>>,
    /// Per method, the size of its last result: how much to grant for the next.
    hints: RefCell<Vec<usize>>,
}

impl std::fmt::Debug for Client<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("interface", &self.interface).field("server", &self.server).finish()
    }
}

impl<'p> Client<'p> {
    /// A client of `server`, calling from `process`.
    pub fn new(process: &'p Process, server: Pid, interface: &'static str, fingerprint: u64) -> Client<'p> {
        Client {
            process,
            server,
            interface,
            fingerprint,
            buf: RefCell::new(Vec::new()),
            hints: RefCell::new(Vec::new()),
        }
    }

    /// A client of the server registered as `name` (this node first, then the others).
    pub fn connect(process: &'p Process, name: &str, interface: &'static str, fingerprint: u64) -> Result<Client<'p>> {
        let server = process.get_pid(name, Scope::Any)?.ok_or_else(|| Error::NotFound(name.to_string()))?;
        Ok(Client::new(process, server, interface, fingerprint))
    }

    /// The server's pid.
    pub fn server(&self) -> Pid {
        self.server
    }

    /// Calls method `method` with `args`; decodes its result.
    pub fn call<A: Serialize + ?Sized, R: DeserializeOwned>(&self, method: u16, args: &A) -> Result<R> {
        let args = encode(args)?;
        decode(&self.call_raw(method, &args)?)
    }

    /// Calls method `method` with encoded `args`; returns the encoded result.
    pub fn call_raw(&self, method: u16, args: &[u8]) -> Result<Vec<u8>> {
        let len = u32::try_from(args.len()).map_err(|_| Error::Encode("arguments over 4 GiB".into()))?;
        let req = Request { kind: kind::CALL, flags: 0, method, fingerprint: self.fingerprint, len };
        let mut msg = req.encode(args);
        let hint = self.hints.borrow().get(method as usize).copied().unwrap_or(0);
        let grant = if hint > ANSWER_INLINE { hint.next_power_of_two().max(MIN_RESULT_SEGMENT) } else { 0 };
        let mut buf = self.buf.borrow_mut();
        let big_args = args.len() > REQUEST_INLINE;
        // What the server may write into: the result lands at offset 0.
        let writable = if grant > 0 { grant.max(if big_args { args.len() } else { 0 }) } else { 0 };
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
        self.process.send_with(&mut msg, self.server, segment, SendOptions::default())?;
        let (st, n, inline) = read_answer(&msg);
        let n = n as usize;
        let result = match st {
            status::OK if n <= ANSWER_INLINE => inline[..n].to_vec(),
            status::OK if writable >= n => buf[..n].to_vec(),
            status::MORE => self.fetch(method, n, &mut buf)?,
            _ => return Err(self.failure(method, st, inline)),
        };
        let mut hints = self.hints.borrow_mut();
        if hints.len() <= method as usize {
            hints.resize(method as usize + 1, 0);
        }
        hints[method as usize] = n;
        Ok(result)
    }

    /// Fetches the `n`-byte result the server kept after answering MORE.
    fn fetch(&self, method: u16, n: usize, buf: &mut Vec<u8>) -> Result<Vec<u8>> {
        let req = Request { kind: kind::FETCH, flags: 0, method, fingerprint: self.fingerprint, len: 0 };
        let mut msg = req.encode(&[]);
        buf.resize(n, 0);
        self.process.send_with(
            &mut msg,
            self.server,
            Some(SegmentRef::Write(&mut buf[..n])),
            SendOptions::default(),
        )?;
        match read_answer(&msg) {
            (status::OK, got, _) if got as usize == n => Ok(buf[..n].to_vec()),
            (st, _, inline) => Err(self.failure(method, st, inline)),
        }
    }

    fn failure(&self, method: u16, st: u8, inline: &[u8]) -> Error {
        let interface = self.interface;
        match st {
            status::MISMATCH => Error::Mismatch {
                interface,
                client: self.fingerprint,
                server: u64::from_le_bytes(inline[..8].try_into().expect("8 bytes")),
            },
            status::NO_SUCH => Error::NoSuchMethod { interface, method },
            status::BAD_ARGUMENTS => Error::Decode(format!("the server of {interface} could not decode the arguments")),
            status::PANICKED => Error::HandlerPanicked { interface, method },
            status::GONE => Error::Malformed("the kept result was gone".into()),
            other => Error::Malformed(format!("status {other} from the server of {interface}")),
        }
    }
}

/// Why a dispatcher did not produce a result.
#[derive(Debug)]
pub enum DispatchError {
    /// The interface has no method with this index.
    NoSuchMethod,
    /// The arguments did not decode as the method's.
    BadArguments(Error),
}

impl From<Error> for DispatchError {
    fn from(e: Error) -> Self {
        DispatchError::BadArguments(e)
    }
}

/// A server-side interface: what `#[interface]` generates for a trait's
/// implementation.
pub trait Dispatch: Send + Sync {
    /// The interface's name.
    fn interface(&self) -> &'static str;
    /// Its fingerprint: a hash of its name, version and method signatures.
    fn fingerprint(&self) -> u64;
    /// Runs method `method` on encoded `args`; returns the encoded result.
    fn dispatch(&self, method: u16, args: &[u8]) -> Result<Vec<u8>, DispatchError>;
}

/// Results kept for a FETCH, one per client, the oldest dropped first.
#[derive(Default)]
struct Kept(VecDeque<(Pid, Vec<u8>)>);

impl Kept {
    fn put(&mut self, client: Pid, bytes: Vec<u8>) {
        self.0.retain(|(c, _)| *c != client);
        if self.0.len() == KEPT_MAX {
            self.0.pop_front();
        }
        self.0.push_back((client, bytes));
    }

    fn take(&mut self, client: Pid) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(c, _)| *c == client)?;
        self.0.remove(i).map(|(_, b)| b)
    }
}

/// A server process's state between requests.
pub struct Server<'a> {
    process: &'a Process,
    dispatch: &'a dyn Dispatch,
    /// Receives the appended first part of the arguments; grows to the largest arguments.
    rbuf: Vec<u8>,
    kept: Kept,
}

impl<'a> Server<'a> {
    /// A server of `dispatch` in `process`.
    pub fn new(process: &'a Process, dispatch: &'a dyn Dispatch) -> Server<'a> {
        Server { process, dispatch, rbuf: vec![0; 64 << 10], kept: Kept::default() }
    }

    /// Receives and answers requests until the node stops or the process is
    /// destroyed (then `Ok`); a client that gave up is skipped, not an error.
    pub fn run(&mut self) -> Result<()> {
        loop {
            let mut msg = [0u8; 32];
            let info = match self.process.receive_with_segment(&mut msg, &mut self.rbuf) {
                Ok(i) => i,
                Err(vipc::Error::NodeStopped) => return Ok(()),
                Err(e) if matches!(e.protocol(), Some(vipc::ProtocolError::Destroyed(_))) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if let Err(e) = self.handle(&msg, info) {
                match e {
                    Error::Vipc(vipc::Error::NodeStopped) => return Ok(()),
                    e => tracing::debug!("{}: request from {} not answered: {e}", self.dispatch.interface(), info.from),
                }
            }
        }
    }

    /// Answers one received request.
    pub fn handle(&mut self, msg: &Message, info: ReceiveInfo) -> Result<()> {
        let from = info.from;
        let Some(req) = Request::decode(msg) else {
            return self.answer(from, status::NOT_A_REQUEST, &[]);
        };
        if req.fingerprint != self.dispatch.fingerprint() {
            return self.answer(from, status::MISMATCH, &self.dispatch.fingerprint().to_le_bytes());
        }
        match req.kind {
            kind::CALL => {
                let args = match read_args(self.process, &req, msg, info, &self.rbuf) {
                    Ok(args) => args,
                    Err(e @ Error::Vipc(vipc::Error::NodeStopped)) => return Err(e),
                    // Whatever went wrong, the caller is answered, never left waiting.
                    Err(_) => return self.answer(from, status::BAD_ARGUMENTS, &[]),
                };
                let d = self.dispatch;
                match catch_unwind(AssertUnwindSafe(|| d.dispatch(req.method, &args))) {
                    Ok(Ok(result)) => self.result(info, result),
                    Ok(Err(DispatchError::NoSuchMethod)) => self.answer(from, status::NO_SUCH, &[]),
                    Ok(Err(DispatchError::BadArguments(_))) => self.answer(from, status::BAD_ARGUMENTS, &[]),
                    Err(_) => self.answer(from, status::PANICKED, &[]),
                }
            }
            kind::FETCH => match self.kept.take(from) {
                Some(bytes) if info.access.write && bytes.len() <= info.segment_size as usize => {
                    self.process.move_to(from, 0, &bytes)?;
                    Ok(self.process.reply(&answer(status::OK, bytes.len() as u32, &[]), from)?)
                }
                _ => self.answer(from, status::GONE, &[]),
            },
            _ => self.answer(from, status::NOT_A_REQUEST, &[]),
        }
    }

    fn answer(&self, to: Pid, st: u8, inline: &[u8]) -> Result<()> {
        Ok(self.process.reply(&answer(st, 0, inline), to)?)
    }

    /// Sends `result` back the cheapest way the caller's grant allows.
    fn result(&mut self, info: ReceiveInfo, result: Vec<u8>) -> Result<()> {
        let (p, to, n) = (self.process, info.from, result.len());
        let len = u32::try_from(n).map_err(|_| Error::Encode("a result over 4 GiB".into()))?;
        if n <= ANSWER_INLINE {
            return Ok(p.reply(&answer(status::OK, len, &result), to)?);
        }
        if !info.access.write || n > info.segment_size as usize {
            self.kept.put(to, result);
            return Ok(p.reply(&answer(status::MORE, len, &[]), to)?);
        }
        let ok = answer(status::OK, len, &[]);
        if n <= REPLY_SEGMENT_MAX {
            return Ok(p.reply_with_segment(&ok, to, 0, &result)?);
        }
        p.move_to(to, 0, &result)?;
        Ok(p.reply(&ok, to)?)
    }
}

/// The encoded arguments of `req`: inline, appended, and the rest read with MoveFrom.
pub(crate) fn read_args(p: &Process, req: &Request, msg: &Message, info: ReceiveInfo, rbuf: &[u8]) -> Result<Vec<u8>> {
    if let Some(inline) = req.inline(msg) {
        return Ok(inline);
    }
    let n = req.len as usize;
    if !info.access.read || (info.segment_size as usize) < n {
        return Err(Error::Malformed(format!("{n} bytes of arguments but a {}-byte segment", info.segment_size)));
    }
    let mut args = vec![0u8; n];
    let have = info.len.min(n);
    args[..have].copy_from_slice(&rbuf[..have]);
    if have < n {
        p.move_from(info.from, have as u32, &mut args[have..])?;
    }
    Ok(args)
}

/// Serves `dispatch` in `process` until the node stops (see [`Server::run`]).
pub fn serve(process: &Process, dispatch: &dyn Dispatch) -> Result<()> {
    Server::new(process, dispatch).run()
}

/// Starts a server process for `dispatch` on `node`, registered as `name`
/// (found by [`Client::connect`] from any node); returns its pid and thread.
pub fn spawn_server(
    node: &vipc::Node,
    name: &str,
    dispatch: impl Dispatch + 'static,
) -> Result<(Pid, std::thread::JoinHandle<Result<()>>)> {
    let (pid, thread) = node.spawn(move |p| serve(&p, &dispatch))?;
    node.set_pid(name, pid, Scope::Any)?;
    Ok((pid, thread))
}
