//! Typed remote procedure calls over Send–Receive–Reply: the client stub's
//! engine ([`Client`]) and the server's loop ([`serve`]). The code that
//! `#[interface]` generates calls these.
//!
//! How the bytes travel (inline, segments, MORE/FETCH) is in `transfer.rs`.

use crate::codec::{decode, encode, encode_into};
use crate::frame::{answer, flags, kind, read_answer, status, Request, REQUEST_INLINE};
use crate::transfer::{fetched, read_args_into, read_bulk, send_result, status_error, Caller, Failure, Grant, Kept};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::panic::{catch_unwind, AssertUnwindSafe};
use vipc::{Message, Pid, Process, ReceiveInfo, Scope};

/// The client side of one interface on one server.
pub struct Client<'p> {
    process: &'p Process,
    server: Pid,
    interface: &'static str,
    fingerprint: u64,
    caller: Caller,
}

impl std::fmt::Debug for Client<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("interface", &self.interface).field("server", &self.server).finish()
    }
}

impl<'p> Client<'p> {
    /// A client of `server`, calling from `process`.
    pub fn new(process: &'p Process, server: Pid, interface: &'static str, fingerprint: u64) -> Client<'p> {
        Client { process, server, interface, fingerprint, caller: Caller::default() }
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
        self.call_with(method, args, decode)
    }

    /// Calls method `method` with `args`; hands the result's bytes to `take`.
    pub fn call_with<A: Serialize + ?Sized, T>(
        &self,
        method: u16,
        args: &A,
        take: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        self.call_encoded(method, &encode(args)?, take)
    }

    /// Calls method `method` whose arguments are `head` (a tuple of all
    /// but the last) and the byte vector `bulk`: `bulk` is the segment the
    /// server reads (flag BULK), unless it is small or `head` does not fit
    /// the request, when the call is encoded as [`Client::call_with`] would.
    pub fn call_bulk<H: Serialize, T>(
        &self,
        method: u16,
        head: &H,
        bulk: Vec<u8>,
        take: impl FnOnce(&[u8]) -> Result<T>,
    ) -> Result<T> {
        let mut args = encode(head)?;
        if args.len() > REQUEST_INLINE || bulk.len() <= REQUEST_INLINE {
            // A tuple's encoding is its fields' in order: the head's, then the bytes'.
            encode_into(serde_bytes::Bytes::new(&bulk), &mut args)?;
            return self.call_encoded(method, &args, take);
        }
        let req = Request { kind: kind::CALL, flags: flags::BULK, method, fingerprint: self.fingerprint, len: 0 };
        let r = self.caller.call_bulk(self.process, self.server, req, &args, bulk, method as usize, take);
        r.map_err(|f| self.failed(method, f))
    }

    /// Calls method `method` with encoded `args`; returns the encoded result.
    pub fn call_raw(&self, method: u16, args: &[u8]) -> Result<Vec<u8>> {
        self.call_encoded(method, args, |b| Ok(b.to_vec()))
    }

    fn call_encoded<T>(&self, method: u16, args: &[u8], take: impl FnOnce(&[u8]) -> Result<T>) -> Result<T> {
        let req = Request { kind: kind::CALL, flags: 0, method, fingerprint: self.fingerprint, len: 0 };
        self.caller
            .call_with(self.process, self.server, req, args, method as usize, take)
            .map_err(|f| self.failed(method, f))
    }

    fn failed(&self, method: u16, f: Failure) -> Error {
        match f {
            Failure::Vipc(e) => e,
            Failure::Status(st, inline) => self.failure(method, st, &inline),
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
            status::PANICKED => Error::HandlerPanicked { interface, method },
            st => status_error(st, interface),
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
    /// Runs method `method` on encoded `args`; appends the encoded result
    /// to `result` (empty, and reused between calls: no fresh pages for a
    /// large result) or replaces it by the result's own bytes (a method
    /// returning `Vec<u8>`: no copy).
    fn dispatch(&self, method: u16, args: &[u8], result: &mut Vec<u8>) -> Result<(), DispatchError>;
    /// Runs method `method` whose last argument, a byte vector, travelled
    /// as the segment (flag BULK): `head` holds the other arguments'
    /// encoding, zero-padded. Interfaces with no such method keep the default.
    fn dispatch_bulk(
        &self,
        method: u16,
        head: &[u8],
        bulk: Vec<u8>,
        result: &mut Vec<u8>,
    ) -> Result<(), DispatchError> {
        let _ = (method, head, bulk, result);
        Err(DispatchError::NoSuchMethod)
    }
}

/// A server process's state between requests.
pub struct Server<'a> {
    process: &'a Process,
    dispatch: &'a dyn Dispatch,
    /// Receives the appended first part of the arguments; grows to the largest arguments.
    rbuf: Vec<u8>,
    /// The arguments of the call being handled, reused between calls (up to
    /// [`KEEP_BUFFER`] bytes) so that large arguments cost no fresh pages.
    args: Vec<u8>,
    /// The encoded result, reused the same way.
    result: Vec<u8>,
    kept: Kept,
    /// A process of this node asked it to stop (`kind::STOP`).
    stopped: bool,
}

/// The largest argument or result buffer a server keeps between calls.
const KEEP_BUFFER: usize = 16 << 20;

impl<'a> Server<'a> {
    /// A server of `dispatch` in `process`.
    pub fn new(process: &'a Process, dispatch: &'a dyn Dispatch) -> Server<'a> {
        Server {
            process,
            dispatch,
            rbuf: vec![0; 64 << 10],
            args: Vec::new(),
            result: Vec::new(),
            kept: Kept::default(),
            stopped: false,
        }
    }

    /// Receives and answers requests until the node stops, the process is
    /// destroyed or a process of its node asks it to stop ([`stop_server`])
    /// (then `Ok`); a client that gave up is skipped, not an error.
    pub fn run(&mut self) -> Result<()> {
        while !self.stopped {
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
        Ok(())
    }

    /// Answers one received request.
    pub fn handle(&mut self, msg: &Message, info: ReceiveInfo) -> Result<()> {
        let from = info.from;
        let Some(req) = Request::decode(msg) else {
            return self.answer(from, status::NOT_A_REQUEST, &[]);
        };
        match req.kind {
            kind::CALL if req.fingerprint != self.dispatch.fingerprint() => {
                self.answer(from, status::MISMATCH, &self.dispatch.fingerprint().to_le_bytes())
            }
            kind::CALL => {
                let d = self.dispatch;
                let mut result = std::mem::take(&mut self.result);
                result.clear();
                let outcome = if req.flags & flags::BULK != 0 {
                    read_bulk(self.process, &req, info, &self.rbuf).map(|bulk| {
                        catch_unwind(AssertUnwindSafe(|| d.dispatch_bulk(req.method, &msg[16..], bulk, &mut result)))
                    })
                } else {
                    let mut args = std::mem::take(&mut self.args);
                    let read = read_args_into(self.process, &req, msg, info, &self.rbuf, &mut args);
                    let outcome =
                        read.map(|()| catch_unwind(AssertUnwindSafe(|| d.dispatch(req.method, &args, &mut result))));
                    if args.capacity() <= KEEP_BUFFER {
                        self.args = args;
                    }
                    outcome
                };
                let answered = match outcome {
                    Ok(Ok(Ok(()))) => send_result(self.process, Grant::of(&info), &result, &mut self.kept),
                    Ok(Ok(Err(DispatchError::NoSuchMethod))) => self.answer(from, status::NO_SUCH, &[]),
                    Ok(Ok(Err(DispatchError::BadArguments(_)))) => self.answer(from, status::BAD_ARGUMENTS, &[]),
                    Ok(Err(_)) => self.answer(from, status::PANICKED, &[]),
                    Err(e @ Error::Vipc(vipc::Error::NodeStopped)) => Err(e),
                    // Whatever went wrong, the caller is answered, never left
                    // waiting: arguments that could not be moved here are an
                    // IPC failure (Undelivered), not undecodable ones.
                    Err(Error::Vipc(_)) => self.answer(from, status::UNDELIVERED, &[]),
                    Err(_) => self.answer(from, status::BAD_ARGUMENTS, &[]),
                };
                if result.capacity() <= KEEP_BUFFER {
                    self.result = result;
                }
                answered
            }
            kind::FETCH => fetched(self.process, Grant::of(&info), &mut self.kept).map(drop),
            kind::STOP if from.host() == self.process.pid().host() => {
                self.stopped = true;
                self.answer(from, status::OK, &[])
            }
            _ => self.answer(from, status::NOT_A_REQUEST, &[]),
        }
    }

    fn answer(&self, to: Pid, st: u8, inline: &[u8]) -> Result<()> {
        Ok(self.process.reply(&answer(st, 0, inline), to)?)
    }
}

/// Serves `dispatch` in `process` until the node stops (see [`Server::run`]).
pub fn serve(process: &Process, dispatch: &dyn Dispatch) -> Result<()> {
    Server::new(process, dispatch).run()
}

/// Stops the server process `server` of `node` (one that [`serve`]s, as
/// [`spawn_server`] and `NetPort::import` start): it answers, then its
/// process ends, and with it its name and group memberships. It must be a
/// process of `node`: a server of another node refuses (an error).
pub fn stop_server(node: &vipc::Node, server: Pid) -> Result<()> {
    let p = node.attach()?;
    let req = Request { kind: kind::STOP, flags: 0, method: 0, fingerprint: 0, len: 0 };
    let mut msg = req.encode(&[]);
    p.send(&mut msg, server)?;
    match read_answer(&msg).0 {
        status::OK => Ok(()),
        st => Err(status_error(st, "stop")),
    }
}

/// Starts a server process for `dispatch` on `node`, registered as `name`
/// (found by [`Client::connect`] from any node); returns its pid and thread.
pub fn spawn_server(
    node: &vipc::Node,
    name: &str,
    dispatch: impl Dispatch + 'static,
) -> Result<(Pid, std::thread::JoinHandle<Result<()>>)> {
    Ok(node.spawn_server(name, Scope::Any, move |p| serve(&p, &dispatch))?)
}
