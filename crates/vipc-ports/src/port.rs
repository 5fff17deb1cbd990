//! Typed ports with completion checkpoints and the region statement (002
//! §4.2). A port is a meeting point that no process owns: senders on any
//! node send typed messages to it by name; processes on the port's node
//! take them in a region ([`crate::Region`]) that waits on several ports
//! at once and serves the earliest-arrived message.
//!
//! Each node's [`Ports`] runs one keeper process (the "multiplexor" of 002
//! §4.2.4) holding every port's queue. A sender's call completes at the
//! [`Checkpoint`] it asks for; the keeper answers it at that point:
//!
//! | checkpoint | the call returns when… | what a failure means |
//! |---|---|---|
//! | `Immediate` | the message is queued on the sender's node | nothing is reported (counted in [`Ports::undelivered`]) |
//! | `OnReceipt` | the port's node holds it | the port's node or the network failed |
//! | `OnDelivery` | a process in a region has taken it | …or no process took it before the caller's deadline |
//! | `OnReturn` | that region's handler finished; its result comes back | …or the handler failed |
//!
//! A call with a result ([`PortRef::call`]) completes `OnReturn`; one
//! without ([`PortRef::send`]) completes at the checkpoint it is given (002's
//! default for it is `OnReceipt`, §4.2.4.2: pass it explicitly here).
//! A sender that gives up (`within`) does not withdraw a message the keeper
//! already holds: it will still be served (002's orphan problem, §4.3.2).

use crate::codec::{decode, encode, fingerprint};
use crate::frame::{answer, kind, read_answer, status, Request, ANSWER_INLINE};
use crate::transfer::{
    fetched, move_then_reply, read_args, send_result, status_error, Caller, Failure, Grant, Kept, MAX_ARGUMENTS,
};
use crate::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use vipc::{Message, Node, Pid, Process, ReceiveInfo, Scope, SegmentRef, SendOptions};

/// When a port call completes (002's four checkpoints).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Queued on the sender's node: returns at once, failures are not reported.
    Immediate,
    /// The port's node has the message.
    OnReceipt,
    /// A process in a region has taken it.
    OnDelivery,
    /// The region's handler has finished (the call returns its result).
    OnReturn,
}

impl Checkpoint {
    fn code(self) -> u8 {
        match self {
            Checkpoint::Immediate => 0,
            Checkpoint::OnReceipt => 1,
            Checkpoint::OnDelivery => 2,
            Checkpoint::OnReturn => 3,
        }
    }

    fn from_code(c: u8) -> Option<Checkpoint> {
        [Checkpoint::Immediate, Checkpoint::OnReceipt, Checkpoint::OnDelivery, Checkpoint::OnReturn]
            .get(c as usize)
            .copied()
    }
}

/// The registered name of port `name`.
fn registered(name: &str) -> String {
    format!("port:{name}")
}

/// A port's key: its name and message and result types. Senders and the
/// keeper must agree on all three.
pub(crate) fn port_key<T: ?Sized, R: ?Sized>(name: &str) -> u64 {
    fingerprint(&format!("port {name}: {} -> {}", std::any::type_name::<T>(), std::any::type_name::<R>()))
}

/// A message the keeper holds.
struct Held {
    port: u64,
    checkpoint: Checkpoint,
    payload: Vec<u8>,
    /// The sender, while it still waits for an answer at a later checkpoint.
    waiting: Option<Grant>,
}

/// A process of the keeper's node waiting in a region.
struct Taker {
    pid: Pid,
    ports: Vec<u64>,
    room: u32,
}

/// Immediate sends queued on the sender's node for its courier; beyond, a
/// send is counted undelivered at once (the courier may take T_t per send
/// to an unreachable keeper).
const COURIER_QUEUE: usize = 4096;

/// Most messages a node's port keeper holds (sent, not yet taken by a
/// region); a send beyond it fails with [`Error::Full`].
pub const MAX_HELD: usize = 4096;
/// Most bytes of messages a node's port keeper holds.
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// The ports open on a node, by key: each one's name and its opening (a
/// name opened again is a new port, whose key is the old one's).
type OpenPorts = HashMap<u64, (String, u64)>;

/// Openings of ports, counted from 1 (one sequence for every `Ports` of the process).
static OPENINGS: AtomicU64 = AtomicU64::new(1);

/// The keeper's state; only its thread touches it, except `ports`.
struct Keeper {
    process: Process,
    ports: Arc<Mutex<OpenPorts>>,
    /// Held messages by arrival number: the earliest first.
    held: BTreeMap<u64, Held>,
    next: u64,
    takers: VecDeque<Taker>,
    /// Messages taken by a region whose sender waits for the handler's
    /// result: the sender, and the process that took the message.
    serving: HashMap<u64, (Grant, Pid)>,
    kept: Kept,
    rbuf: Vec<u8>,
}

/// The ports of one node: their keeper process, and a courier that carries
/// `Immediate` sends from this node.
pub struct Ports {
    node: Node,
    keeper: Pid,
    ports: Arc<Mutex<OpenPorts>>,
    courier: Mutex<mpsc::SyncSender<Courier>>,
    undelivered: Arc<AtomicU64>,
}

impl std::fmt::Debug for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ports").field("keeper", &self.keeper).finish()
    }
}

/// An `Immediate` send for the courier.
struct Courier {
    keeper: Pid,
    port: u64,
    payload: Vec<u8>,
}

impl Ports {
    /// Starts the keeper and the courier on `node`. One per node is enough;
    /// the keeper lives until the node stops.
    pub fn start(node: &Node) -> Result<Ports> {
        let ports = Arc::new(Mutex::new(HashMap::new()));
        let p = node.attach()?;
        let keeper = p.pid();
        let mut k = Keeper {
            process: p,
            ports: ports.clone(),
            held: BTreeMap::new(),
            next: 0,
            takers: VecDeque::new(),
            serving: HashMap::new(),
            kept: Kept::default(),
            rbuf: vec![0; 64 << 10],
        };
        std::thread::Builder::new()
            .name(format!("vipc-ports-{keeper}"))
            .spawn(move || k.run())
            .map_err(vipc::Error::from)?;
        let (tx, rx) = mpsc::sync_channel::<Courier>(COURIER_QUEUE);
        let undelivered = Arc::new(AtomicU64::new(0));
        let lost = undelivered.clone();
        let (_, _courier) = node.spawn(move |p| {
            let caller = Caller::default();
            for c in rx {
                let req = Request {
                    kind: kind::PORT_SEND,
                    flags: Checkpoint::OnReceipt.code(),
                    method: 0,
                    fingerprint: c.port,
                    len: 0,
                };
                if caller.call(&p, c.keeper, req, &c.payload, 0).is_err() {
                    lost.fetch_add(1, Ordering::Relaxed);
                }
            }
        })?;
        Ok(Ports { node: node.clone(), keeper, ports, courier: Mutex::new(tx), undelivered })
    }

    /// Opens port `name` for messages of type `T` answered with `R` (`()`
    /// for an asynchronous port) on this node; senders anywhere find it by name.
    /// Opening it again while it is open is [`Error::AlreadyOpen`]; a name
    /// another `Ports` of this node has open is taken
    /// ([`vipc::ProtocolError::NameTaken`]).
    pub fn open<T, R>(&self, name: &str) -> Result<Port<T, R>> {
        let key = port_key::<T, R>(name);
        let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
        if ports.contains_key(&key) {
            return Err(Error::AlreadyOpen(name.to_string()));
        }
        // Registered first: a refused name leaves no port behind.
        self.node.claim_name(&registered(name), self.keeper, Scope::Any)?;
        let opening = OPENINGS.fetch_add(1, Ordering::Relaxed);
        ports.insert(key, (name.to_string(), opening));
        Ok(Port { key, opening, keeper: self.keeper, name: name.to_string(), _types: PhantomData })
    }

    /// A sender's handle on port `name` (on any node) for messages `T` answered by `R`.
    pub fn connect<T, R>(&self, process: &Process, name: &str) -> Result<PortRef<'_, T, R>> {
        let keeper =
            process.get_pid(&registered(name), Scope::Any)?.ok_or_else(|| Error::NotFound(name.to_string()))?;
        Ok(PortRef {
            ports: self,
            keeper,
            key: port_key::<T, R>(name),
            name: name.to_string(),
            caller: Caller::default(),
            _types: PhantomData,
        })
    }

    /// Closes `port`: senders no longer find it (its name is unregistered
    /// once no port of that name is open here), the messages held for it
    /// are dropped — a sender still waiting for one gets `NotFound` — and a
    /// region waiting on it alone ends with `NotFound`. By reference, so
    /// that another thread may close a port a region is waiting on; closing
    /// it again is `NotFound`. A name opened again is a new port.
    pub fn close<T, R>(&self, port: &Port<T, R>) -> Result<()> {
        if port.keeper != self.keeper {
            return Err(Error::OtherPorts(port.name.clone()));
        }
        // Attached first: on a full node the close fails with the port
        // still open, not half done (held messages and senders stranded).
        let p = self.node.attach()?;
        let still_named = {
            let mut ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
            // This opening of the port, not one made since under its name.
            if ports.get(&port.key).is_none_or(|(_, o)| *o != port.opening) {
                return Err(Error::NotFound(format!("port {:?} (closed already)", port.name)));
            }
            ports.remove(&port.key);
            ports.values().any(|(n, _)| *n == port.name)
        };
        let unnamed = if still_named { Ok(true) } else { self.node.unset_pid(&registered(&port.name), self.keeper) };
        let req = Request { kind: kind::PORT_CLOSE, flags: 0, method: 0, fingerprint: port.key, len: 0 };
        let mut msg = req.encode(&[]);
        p.send(&mut msg, self.keeper)?;
        unnamed?; // reported once the keeper has closed the port
        match read_answer(&msg).0 {
            status::OK => Ok(()),
            st => Err(status_error(st, "port close")),
        }
    }

    /// `Immediate` sends from this node that the courier could not deliver.
    pub fn undelivered(&self) -> u64 {
        self.undelivered.load(Ordering::Relaxed)
    }

    /// The keeper's pid.
    pub fn keeper(&self) -> Pid {
        self.keeper
    }
}

/// The receiving side of a port (for [`crate::Region::on`]).
#[derive(Debug)]
pub struct Port<T, R = ()> {
    pub(crate) key: u64,
    /// Which opening of the key it is.
    opening: u64,
    /// The keeper of the [`Ports`] that opened it.
    pub(crate) keeper: Pid,
    name: String,
    _types: PhantomData<fn(T) -> R>,
}

impl<T, R> Port<T, R> {
    /// The port's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A sender's handle on a port.
pub struct PortRef<'a, T, R = ()> {
    ports: &'a Ports,
    keeper: Pid,
    key: u64,
    name: String,
    caller: Caller,
    _types: PhantomData<fn(T) -> R>,
}

impl<T: Serialize, R: DeserializeOwned> PortRef<'_, T, R> {
    /// A functional port call: completes `OnReturn` with the handler's result.
    pub fn call(&self, process: &Process, message: &T) -> Result<R> {
        decode(&self.send_raw(process, &encode(message)?, Checkpoint::OnReturn)?)
    }

    /// An asynchronous port call completing at `checkpoint` (the handler's
    /// result, if any, is dropped).
    pub fn send(&self, process: &Process, message: &T, checkpoint: Checkpoint) -> Result<()> {
        let payload = encode(message)?;
        if checkpoint == Checkpoint::Immediate {
            let c = Courier { keeper: self.keeper, port: self.key, payload };
            let courier = self.ports.courier.lock().unwrap_or_else(|e| e.into_inner());
            return match courier.try_send(c) {
                Ok(()) => Ok(()),
                // As many queued as the courier may hold: this one is undelivered, as promised.
                Err(mpsc::TrySendError::Full(_)) => {
                    self.ports.undelivered.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
                Err(mpsc::TrySendError::Disconnected(_)) => Err(Error::Vipc(vipc::Error::NodeStopped)),
            };
        }
        self.send_raw(process, &payload, checkpoint).map(drop)
    }

    fn send_raw(&self, process: &Process, payload: &[u8], checkpoint: Checkpoint) -> Result<Vec<u8>> {
        let req = Request { kind: kind::PORT_SEND, flags: checkpoint.code(), method: 0, fingerprint: self.key, len: 0 };
        self.caller.call(process, self.keeper, req, payload, 0).map_err(|f| match f {
            Failure::Vipc(e) => e,
            Failure::Status(status::NO_SUCH, _) => Error::NotFound(format!("{} (with these types)", self.name)),
            Failure::Status(status::PANICKED, _) => Error::HandlerPanicked { interface: "port", method: 0 },
            Failure::Status(status::FULL, _) => Error::Full(format!("port {}", self.name)),
            Failure::Status(st, _) => status_error(st, &self.name),
        })
    }
}

/// How often an idle keeper looks for takers destroyed without a PORT_DONE.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

impl Keeper {
    fn run(&mut self) {
        let mut swept = std::time::Instant::now();
        loop {
            let mut msg = [0u8; 32];
            let (process, rbuf) = (&self.process, &mut self.rbuf);
            match vipc::within(SWEEP_EVERY, || process.receive_with_segment(&mut msg, rbuf)) {
                Ok(info) => {
                    if let Err(e) = self.handle(&msg, info) {
                        if matches!(e, Error::Vipc(vipc::Error::NodeStopped)) {
                            return;
                        }
                        tracing::debug!("port keeper: request from {} not answered: {e}", info.from);
                    }
                    self.match_takers();
                }
                Err(e) if e.is_deadline() => {}
                Err(_) => return, // the node stopped
            }
            if swept.elapsed() >= SWEEP_EVERY {
                self.forget_vanished_takers();
                swept = std::time::Instant::now();
            }
        }
    }

    fn answer(&self, to: Pid, st: u8) -> Result<()> {
        Ok(self.process.reply(&answer(st, 0, &[]), to)?)
    }

    fn handle(&mut self, msg: &Message, info: ReceiveInfo) -> Result<()> {
        let from = info.from;
        // A process waits in one Send at a time: a new request means it gave
        // up any earlier one, whose late answer must not end this one.
        self.forget_waiting(from);
        let Some(req) = Request::decode(msg) else { return self.answer(from, status::NOT_A_REQUEST) };
        let payload = |k: &mut Keeper| read_args(&k.process, &req, msg, info, &k.rbuf);
        match req.kind {
            kind::PORT_SEND => {
                let known = self.ports.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&req.fingerprint);
                let Some(cp) = Checkpoint::from_code(req.flags).filter(|_| known) else {
                    return self.answer(from, status::NO_SUCH);
                };
                let Ok(payload) = payload(self) else { return self.answer(from, status::BAD_ARGUMENTS) };
                let bytes: usize = self.held.values().map(|h| h.payload.len()).sum();
                if self.held.len() >= MAX_HELD || bytes + payload.len() > MAX_HELD_BYTES {
                    return self.answer(from, status::FULL);
                }
                let id = self.next;
                self.next += 1;
                let early = matches!(cp, Checkpoint::Immediate | Checkpoint::OnReceipt);
                let waiting = (!early).then(|| Grant::of(&info));
                self.held.insert(id, Held { port: req.fingerprint, checkpoint: cp, payload, waiting });
                if early {
                    self.answer(from, status::OK)?;
                }
                Ok(())
            }
            // Only processes of the port's node take its messages, and only
            // the one that took a message says how it ended: ids are
            // sequential, and another host could take messages or forge an
            // OnReturn caller's result.
            kind::PORT_TAKE if from.host() == self.process.pid().host() => {
                let Ok(list) = payload(self).and_then(|b| decode::<Vec<u64>>(&b)) else {
                    return self.answer(from, status::BAD_ARGUMENTS);
                };
                // A take naming no port of this keeper would wait forever.
                let known = {
                    let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner());
                    list.iter().any(|k| ports.contains_key(k))
                };
                if !known {
                    return self.answer(from, status::NO_SUCH);
                }
                let room = if info.access.write { info.segment_size } else { 0 };
                self.takers.retain(|t| t.pid != from);
                self.takers.push_back(Taker { pid: from, ports: list, room });
                Ok(())
            }
            kind::PORT_DONE => {
                let result = payload(self);
                let _ = self.answer(from, status::OK);
                let Some(&(sender, taker)) = self.serving.get(&req.fingerprint) else { return Ok(()) };
                if taker != from {
                    return Ok(());
                }
                self.serving.remove(&req.fingerprint);
                match (req.flags, result) {
                    (status::OK, Ok(r)) => send_result(&self.process, sender, &r, &mut self.kept),
                    (status::OK, Err(_)) => self.answer(sender.to, status::BAD_ARGUMENTS),
                    (st, _) => self.answer(sender.to, st),
                }
            }
            kind::PORT_CLOSE if from.host() == self.process.pid().host() => {
                self.close(req.fingerprint);
                self.answer(from, status::OK)
            }
            kind::FETCH => fetched(&self.process, Grant::of(&info), &mut self.kept).map(drop),
            _ => self.answer(from, status::NOT_A_REQUEST),
        }
    }

    /// Gives each waiting taker, longest waiting first, the earliest-arrived
    /// message of its ports. A taker that gave up in the meantime is dropped
    /// and the message stays for the next.
    fn match_takers(&mut self) {
        let mut i = 0;
        while i < self.takers.len() {
            let t = &self.takers[i];
            let Some(id) = self.held.iter().find(|(_, h)| t.ports.contains(&h.port)).map(|(id, _)| *id) else {
                i += 1;
                continue;
            };
            let t = self.takers.remove(i).expect("index in range");
            let h = self.held.remove(&id).expect("found above");
            match self.deliver(&t, id, &h) {
                Ok(true) => match (h.checkpoint, h.waiting) {
                    (Checkpoint::OnDelivery, Some(sender)) => {
                        let _ = self.answer(sender.to, status::OK);
                    }
                    (Checkpoint::OnReturn, Some(sender)) => {
                        self.serving.insert(id, (sender, t.pid));
                    }
                    _ => {}
                },
                // Too large for the taker's buffer (it asks again with more
                // room), undelivered, or the taker is gone.
                Ok(false) | Err(_) => {
                    self.held.insert(id, h);
                }
            }
        }
    }

    /// Port `key` was closed (it is no longer in `ports`): its held
    /// messages go, their waiting senders answered NO_SUCH, and so do the
    /// takers left with no open port.
    fn close(&mut self, key: u64) {
        let gone: Vec<u64> = self.held.iter().filter(|(_, h)| h.port == key).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some(sender) = self.held.remove(&id).and_then(|h| h.waiting) {
                let _ = self.answer(sender.to, status::NO_SUCH);
            }
        }
        let ports = self.ports.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let (left, stranded): (VecDeque<Taker>, VecDeque<Taker>) =
            std::mem::take(&mut self.takers).into_iter().partition(|t| t.ports.iter().any(|k| ports.contains_key(k)));
        self.takers = left;
        for t in stranded {
            let _ = self.answer(t.pid, status::NO_SUCH);
        }
    }

    /// `pid` no longer waits for answers to earlier messages (they are still served).
    /// `pid` gave up whatever it waited in here: a message it sent, and a
    /// take (a message handed to that take would be answered into its next
    /// call, and lost).
    fn forget_waiting(&mut self, pid: Pid) {
        for h in self.held.values_mut() {
            if h.waiting.is_some_and(|g| g.to == pid) {
                h.waiting = None;
            }
        }
        self.serving.retain(|_, (g, _)| g.to != pid);
        self.takers.retain(|t| t.pid != pid);
    }

    /// Takers destroyed without a PORT_DONE: their senders still waiting
    /// are answered UNDELIVERED rather than left waiting for ever, and
    /// their takes go.
    fn forget_vanished_takers(&mut self) {
        let alive = |k: &Keeper, pid: Pid| k.process.is_local_process(pid).unwrap_or(true);
        let gone: Vec<u64> = self.serving.iter().filter(|(_, (_, t))| !alive(self, *t)).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some((sender, _)) = self.serving.remove(&id) {
                let _ = self.answer(sender.to, status::UNDELIVERED);
            }
        }
        let takers = std::mem::take(&mut self.takers);
        self.takers = takers.into_iter().filter(|t| alive(self, t.pid)).collect();
    }

    /// Hands message `id` to taker `t`: `Ok(false)` if it needs more room.
    fn deliver(&self, t: &Taker, id: u64, h: &Held) -> Result<bool> {
        let n = h.payload.len() as u32;
        let mut head = [0u8; ANSWER_INLINE];
        head[..8].copy_from_slice(&h.port.to_le_bytes());
        head[8..16].copy_from_slice(&id.to_le_bytes());
        // A sender that no longer waits needs no DONE.
        head[16] = if h.waiting.is_some() { h.checkpoint.code() } else { Checkpoint::OnReceipt.code() };
        if n > t.room {
            self.process.reply(&answer(status::MORE, n, &head), t.pid)?;
            return Ok(false);
        }
        let ok = answer(status::OK, n, &head);
        if n as usize <= 1024 {
            self.process.reply_with_segment(&ok, t.pid, 0, &h.payload)?;
        } else if !move_then_reply(&self.process, t.pid, &h.payload, &ok)? {
            return Ok(false); // undelivered: held for the next take
        }
        Ok(true)
    }
}

/// A message taken from a port by a region.
#[derive(Debug)]
pub(crate) struct Taken {
    pub port: u64,
    pub id: u64,
    pub checkpoint: Checkpoint,
    pub payload: Vec<u8>,
}

/// Takes the earliest-arrived message of `ports` from `keeper` (blocks;
/// bounded by `within`). `buf` is the reused receive buffer.
pub(crate) fn take(p: &Process, keeper: Pid, ports: &[u64], buf: &mut Vec<u8>) -> Result<Taken> {
    let list = encode(ports)?;
    loop {
        // Room for the answer, and for the list itself (10 bytes a port: a
        // region over 410 ports overran 4 KiB).
        let room = 4096.max(list.len());
        if buf.len() < room {
            buf.resize(room, 0);
        }
        let req = Request { kind: kind::PORT_TAKE, flags: 0, method: 0, fingerprint: 0, len: list.len() as u32 };
        let mut msg = req.encode(&list);
        let segment = if list.len() > crate::frame::REQUEST_INLINE {
            // The list is read from the front of the buffer; the message overwrites it.
            buf[..list.len()].copy_from_slice(&list);
            SegmentRef::ReadWrite(&mut buf[..])
        } else {
            SegmentRef::Write(&mut buf[..])
        };
        p.send_with(&mut msg, keeper, Some(segment), SendOptions::default())?;
        let (st, n, head) = read_answer(&msg);
        let n = n as usize;
        match st {
            status::OK => {
                return Ok(Taken {
                    port: u64::from_le_bytes(head[..8].try_into().expect("8 bytes")),
                    id: u64::from_le_bytes(head[8..16].try_into().expect("8 bytes")),
                    checkpoint: Checkpoint::from_code(head[16]).ok_or_else(|| Error::Malformed("checkpoint".into()))?,
                    payload: buf[..n.min(buf.len())].to_vec(),
                })
            }
            status::MORE if n <= MAX_ARGUMENTS => buf.resize(n.next_power_of_two(), 0),
            status::MORE => return Err(Error::Malformed(format!("port take: a {n}-byte message"))),
            status::NO_SUCH => {
                return Err(Error::NotFound("a port of the region opened with this node's Ports".into()))
            }
            st => return Err(status_error(st, "port take")),
        }
    }
}

/// Tells the keeper that the handler of message `id` finished with `result`
/// (or failed with `st`), for its `OnReturn` sender.
pub(crate) fn done(p: &Process, keeper: Pid, id: u64, st: u8, result: &[u8]) -> Result<()> {
    let req = Request { kind: kind::PORT_DONE, flags: st, method: 0, fingerprint: id, len: result.len() as u32 };
    let mut msg = req.encode(result);
    let seg = (result.len() > crate::frame::REQUEST_INLINE).then_some(SegmentRef::Read(result));
    p.send_with(&mut msg, keeper, seg, SendOptions::default())?;
    Ok(())
}
