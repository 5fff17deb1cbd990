//! Remote process activation (002 §4.3.4): start a process of a registered
//! kind on another node, with arguments, and get its pid at once; collect
//! its result later if wanted. Each node that accepts activations runs an
//! [`Activator`], a process registered as `vipc.activator.<host>`; it
//! creates the processes and keeps their results until asked once.

use crate::codec::{decode, encode, fingerprint};
use crate::frame::{answer, kind, status, Request};
use crate::transfer::{fetched, fetched_later, read_args, send_result, status_error, Caller, Failure, Grant, Kept};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use vipc::{HostId, Message, Node, Pid, Process, ReceiveInfo, Scope, SegmentRef, SendOptions};

/// Processes the activator remembers (the last ones it started, claimed or
/// not): the result of an older one is dropped.
const RESULTS_MAX: usize = 4096;

/// Most bytes of results an activator keeps for their askers (as a server
/// keeps large results for a FETCH): beyond it the oldest are forgotten.
const RESULT_BYTES_MAX: usize = 64 << 20;

/// The registered name of host `host`'s activator.
fn activator_name(host: HostId) -> String {
    format!("vipc.activator.{host}")
}

/// A kind's key: its name and argument and result types.
fn kind_key<A: ?Sized, R: ?Sized>(name: &str) -> u64 {
    fingerprint(&format!("process {name}: {} -> {}", std::any::type_name::<A>(), std::any::type_name::<R>()))
}

/// Runs a new process of a kind on its arguments: encoded result, or a status.
type Body = Arc<dyn Fn(&Process, &[u8]) -> std::result::Result<Vec<u8>, u8> + Send + Sync>;

/// A node's activator: the kinds it can start.
pub struct Activator {
    kinds: Arc<Mutex<HashMap<u64, Body>>>,
    pid: Pid,
}

impl std::fmt::Debug for Activator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activator").field("pid", &self.pid).finish()
    }
}

impl Activator {
    /// Starts `node`'s activator (one per node), which lives until the node stops.
    pub fn start(node: &Node) -> Result<Activator> {
        let kinds: Arc<Mutex<HashMap<u64, Body>>> = Arc::default();
        let (k, n) = (kinds.clone(), node.clone());
        let (pid, _) =
            node.spawn_server(&activator_name(node.host_id()), Scope::Any, move |p| Serving::new(p, n, k).run())?;
        Ok(Activator { kinds, pid })
    }

    /// Lets other nodes start processes of kind `name`: each runs `body` on
    /// its arguments, as a new process of this node, on a thread of its own.
    pub fn register<A, R>(&self, name: &str, body: impl Fn(&Process, A) -> R + Send + Sync + 'static)
    where
        A: DeserializeOwned,
        R: Serialize,
    {
        let run: Body = Arc::new(move |p, args| {
            let a: A = decode(args).map_err(|_| status::BAD_ARGUMENTS)?;
            let r = catch_unwind(AssertUnwindSafe(|| body(p, a))).map_err(|_| status::PANICKED)?;
            encode(&r).map_err(|_| status::BAD_ARGUMENTS)
        });
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).insert(kind_key::<A, R>(name), run);
    }
}

/// A started process, as its starter sees it.
#[derive(Debug)]
pub struct Activation<R> {
    /// The new process.
    pub pid: Pid,
    activator: Pid,
    _result: PhantomData<fn() -> R>,
}

/// Starts a process of kind `name` with `args` on host `host` and returns
/// as soon as it exists (its pid is in the [`Activation`]).
pub fn activate<A: Serialize, R: DeserializeOwned>(
    p: &Process,
    host: HostId,
    name: &str,
    args: &A,
) -> Result<Activation<R>> {
    let activator =
        p.get_pid(&activator_name(host), Scope::Any)?.ok_or_else(|| Error::NotFound(activator_name(host)))?;
    let req = Request { kind: kind::ACTIVATE, flags: 0, method: 0, fingerprint: kind_key::<A, R>(name), len: 0 };
    let bytes = Caller::default().call(p, activator, req, &encode(args)?, 0).map_err(|f| match f {
        Failure::Vipc(e) => e,
        Failure::Status(status::NO_SUCH, _) => {
            Error::NotFound(format!("process kind {name} (with these types) on host {host:#06x}"))
        }
        Failure::Status(status::FULL, _) => Error::Full(format!("the activator of host {host:#06x}")),
        Failure::Status(st, _) => status_error(st, name),
    })?;
    let pid: u32 = decode(&bytes)?;
    Ok(Activation { pid: Pid(pid), activator, _result: PhantomData })
}

impl<R: DeserializeOwned> Activation<R> {
    /// Waits for the process's result (bounded by `within`). Asked once:
    /// the activator forgets a result once the asker has it (one over 24
    /// bytes once fetched, so an ask whose limit passed in between asks again).
    pub fn result(&self, p: &Process) -> Result<R> {
        let req =
            Request { kind: kind::ACTIVATION_RESULT, flags: 0, method: 0, fingerprint: self.pid.0 as u64, len: 0 };
        let bytes = Caller::default().call(p, self.activator, req, &[], 0).map_err(|f| match f {
            Failure::Vipc(e) => e,
            Failure::Status(status::NO_SUCH, _) => Error::NotFound(format!("the result of {}", self.pid)),
            Failure::Status(status::PANICKED, _) => Error::HandlerPanicked { interface: "activation", method: 0 },
            Failure::Status(st, _) => status_error(st, "activation"),
        })?;
        decode(&bytes)
    }
}

/// An activated process's end: its result, or a status.
type Outcome = std::result::Result<Vec<u8>, u8>;

/// The activator process's state.
struct Serving {
    p: Process,
    node: Node,
    kinds: Arc<Mutex<HashMap<u64, Body>>>,
    /// Processes started and not yet asked about: their outcome once they end.
    outcomes: HashMap<Pid, Option<Outcome>>,
    /// Bytes of the results in `outcomes`, at most [`RESULT_BYTES_MAX`].
    held_bytes: usize,
    started: VecDeque<Pid>,
    /// Who waits for which process's result.
    waiting: HashMap<Pid, Grant>,
    kept: Kept,
    /// Askers told a result is there to fetch, with the process it is of:
    /// the result stays in `outcomes` until fetched, so an asker whose
    /// limit passed in between asks again and gets it.
    announced: HashMap<Pid, Pid>,
    rbuf: Vec<u8>,
}

impl Serving {
    fn new(p: Process, node: Node, kinds: Arc<Mutex<HashMap<u64, Body>>>) -> Serving {
        Serving {
            p,
            node,
            kinds,
            outcomes: HashMap::new(),
            held_bytes: 0,
            started: VecDeque::new(),
            waiting: HashMap::new(),
            kept: Kept::default(),
            announced: HashMap::new(),
            rbuf: vec![0; 64 << 10],
        }
    }

    fn run(mut self) {
        loop {
            let mut msg = [0u8; 32];
            let Ok(info) = self.p.receive_with_segment(&mut msg, &mut self.rbuf) else { return };
            if let Err(e) = self.handle(&msg, info) {
                tracing::debug!("activator: request from {} not answered: {e}", info.from);
            }
        }
    }

    fn answer(&self, to: Pid, st: u8) -> Result<()> {
        Ok(self.p.reply(&answer(st, 0, &[]), to)?)
    }

    fn handle(&mut self, msg: &Message, info: ReceiveInfo) -> Result<()> {
        let from = info.from;
        self.waiting.retain(|_, g| g.to != from); // it gave up an earlier wait
        let Some(req) = Request::decode(msg) else { return self.answer(from, status::NOT_A_REQUEST) };
        match req.kind {
            kind::ACTIVATE => {
                let body = self.kinds.lock().unwrap_or_else(|e| e.into_inner()).get(&req.fingerprint).cloned();
                let Some(body) = body else { return self.answer(from, status::NO_SUCH) };
                let Ok(args) = read_args(&self.p, &req, msg, info, &self.rbuf) else {
                    return self.answer(from, status::BAD_ARGUMENTS);
                };
                let me = self.p.pid();
                let spawned = self.node.spawn(move |p| {
                    let outcome = body(&p, &args);
                    report(&p, me, outcome);
                });
                let Ok((pid, _)) = spawned else { return self.answer(from, status::FULL) };
                self.remember(pid);
                send_result(&self.p, Grant::of(&info), &encode(&pid.0)?, &mut self.kept)
            }
            kind::ACTIVATION_RESULT => {
                let pid = Pid(req.fingerprint as u32);
                match self.outcomes.get_mut(&pid) {
                    None => self.answer(from, status::NO_SUCH),
                    // The result goes to one asker: a second is refused, not left waiting.
                    Some(None) if self.waiting.contains_key(&pid) => self.answer(from, status::NO_SUCH),
                    Some(None) => {
                        self.waiting.insert(pid, Grant::of(&info));
                        Ok(())
                    }
                    Some(Some(_)) => self.hand_out(Grant::of(&info), pid),
                }
            }
            kind::PORT_DONE if self.outcomes.get(&from).is_some_and(Option::is_none) => {
                let outcome = match req.flags {
                    status::OK => read_args(&self.p, &req, msg, info, &self.rbuf).map_err(|_| status::BAD_ARGUMENTS),
                    st => Err(st),
                };
                let _ = self.answer(from, status::OK);
                self.hold(from, outcome);
                match self.waiting.remove(&from) {
                    Some(g) => self.hand_out(g, from),
                    None => Ok(()),
                }
            }
            kind::FETCH => {
                let got = fetched(&self.p, Grant::of(&info), &mut self.kept)?;
                if let Some(pid) = self.announced.remove(&from).filter(|_| got) {
                    self.take_outcome(pid);
                }
                Ok(())
            }
            _ => self.answer(from, status::NOT_A_REQUEST),
        }
    }

    /// Records a started process, forgetting the oldest beyond
    /// [`RESULTS_MAX`] (whoever waits for its result is told so).
    fn remember(&mut self, pid: Pid) {
        self.started.push_back(pid);
        self.outcomes.insert(pid, None);
        if self.started.len() > RESULTS_MAX {
            if let Some(old) = self.started.pop_front() {
                self.take_outcome(old);
                self.outcomes.remove(&old);
                if let Some(g) = self.waiting.remove(&old) {
                    let _ = self.answer(g.to, status::NO_SUCH);
                }
            }
        }
    }

    /// Keeps `pid`'s outcome until it is asked for, forgetting the oldest
    /// kept results while they take more than [`RESULT_BYTES_MAX`] (the
    /// count alone let 4096 results of any size pile up).
    fn hold(&mut self, pid: Pid, outcome: Outcome) {
        self.held_bytes += outcome.as_ref().map_or(0, Vec::len);
        self.outcomes.insert(pid, Some(outcome));
        let mut i = 0;
        while self.held_bytes > RESULT_BYTES_MAX && i < self.started.len() {
            let old = self.started[i];
            i += 1;
            if old != pid {
                self.take_outcome(old); // forgotten: a later ask is told NO_SUCH
            }
        }
    }

    /// Takes `pid`'s finished outcome out of `outcomes`, if it has one.
    fn take_outcome(&mut self, pid: Pid) -> Option<Outcome> {
        let outcome = self.outcomes.get_mut(&pid)?.take()?;
        self.outcomes.remove(&pid);
        self.held_bytes -= outcome.as_ref().map_or(0, Vec::len);
        Some(outcome)
    }

    /// Hands `pid`'s finished outcome to the asker `g`. It is forgotten once
    /// the asker has it: at once if it goes with the answer; if announced
    /// to be fetched, once fetched (see `announced`); kept if the asker gave
    /// up its wait (a deadline), for its next ask.
    fn hand_out(&mut self, g: Grant, pid: Pid) -> Result<()> {
        let Some(Some(outcome)) = self.outcomes.get(&pid) else { return self.answer(g.to, status::NO_SUCH) };
        let r = match outcome {
            Ok(bytes) if fetched_later(&g, bytes.len()) => {
                self.announced.insert(g.to, pid);
                return send_result(&self.p, g, bytes, &mut self.kept);
            }
            Ok(bytes) => send_result(&self.p, g, bytes, &mut self.kept),
            Err(st) => self.answer(g.to, *st),
        };
        match r {
            Err(Error::Vipc(vipc::Error::Protocol(vipc::ProtocolError::NotAwaitingReply(_)))) => Ok(()),
            r => {
                self.take_outcome(pid);
                r
            }
        }
    }
}

/// An activated process tells its activator how it ended.
fn report(p: &Process, activator: Pid, outcome: Outcome) {
    let (st, bytes) = match &outcome {
        Ok(b) => (status::OK, &b[..]),
        Err(st) => (*st, &[][..]),
    };
    let req = Request { kind: kind::PORT_DONE, flags: st, method: 0, fingerprint: 0, len: bytes.len() as u32 };
    let mut msg = req.encode(bytes);
    let seg = (bytes.len() > crate::frame::REQUEST_INLINE).then_some(SegmentRef::Read(bytes));
    if let Err(e) = p.send_with(&mut msg, activator, seg, SendOptions::default()) {
        tracing::debug!("activated process {}: result not reported: {e}", p.pid());
    }
}
