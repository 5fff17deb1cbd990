//! The node: the engine behind a mutex, its sockets, the network threads and
//! the timer thread, and the slots where blocked processes wait. See
//! [`Node`] for how the threads cooperate.

use crate::config::NodeConfig;
use crate::faults::Faults;
use crate::net::{self, Sockets};
use crate::process::Process;
use crate::{services, Error, Result};
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vipc_engine::{Completion, Destination, Engine, Event, HostId, HostIdConfig, Pid, Scope, Stats, Time};

/// Datagrams ready to go out, in the order the engine produced them.
type Outgoing = VecDeque<(SocketAddr, Vec<u8>)>;

/// Where a blocked process waits for its completion.
struct Slot {
    done: Option<Completion>,
    cv: Arc<Condvar>,
}

/// Everything under the node's lock.
pub(crate) struct State {
    pub(crate) engine: Engine,
    slots: HashMap<Pid, Slot>,
    stopped: bool,
    faults: Option<Faults>,
    /// The deadline the timer thread sleeps towards (None: no timer armed).
    timer_deadline: Option<Time>,
    ready: Option<HostId>,
    conflict: Option<(HostId, SocketAddr)>,
    /// Datagrams drained from the engine and not yet sent.
    outq: Outgoing,
    /// True while some thread is sending from `outq` (it sends everything queued).
    sending: bool,
    /// Log host conflicts (false while the start-up of a fixed-id node
    /// returns them as an error instead).
    log_conflicts: bool,
}

/// State shared by the node's handles, processes and threads.
pub(crate) struct Shared {
    state: Mutex<State>,
    timer_cv: Condvar,
    ready_cv: Condvar,
    unicast: UdpSocket,
    multicast: Option<UdpSocket>,
    targets: Vec<SocketAddr>,
    own: Vec<SocketAddr>,
    local: SocketAddr,
    epoch: Instant,
}

fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Shared {
    /// Now on the node's clock.
    pub(crate) fn now(&self) -> Time {
        Time(self.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64)
    }

    /// Locks the state (a panic elsewhere does not make the node unusable).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains the engine after any call: datagrams into the send queue
    /// (through the fault injector), completions into slots, notices to the
    /// log; then makes sure the timer thread will wake for the engine's next
    /// deadline. The caller sends the queue with [`Shared::flush`] after
    /// releasing the lock.
    fn drain(&self, st: &mut State) {
        let now = self.now();
        let State { engine, faults, outq, .. } = st;
        while let Some(t) = engine.poll_transmit() {
            let mut push = |to: SocketAddr, bytes: Vec<u8>| match faults {
                Some(f) => f.apply(now, to, bytes, outq),
                None => outq.push_back((to, bytes)),
            };
            match t.to {
                Destination::Addr(a) => push(a, t.bytes),
                Destination::Broadcast => {
                    for a in &self.targets {
                        push(*a, t.bytes.clone());
                    }
                }
            }
        }
        while let Some(ev) = st.engine.poll_event() {
            match ev {
                Event::Wake { pid, completion } => match st.slots.get_mut(&pid) {
                    Some(slot) => {
                        slot.done = Some(completion);
                        slot.cv.notify_one();
                    }
                    None => tracing::debug!(%pid, "completion for a process that is gone"),
                },
                Event::HostReady(h) => {
                    tracing::debug!(host = h, "logical host ready");
                    st.ready = Some(h);
                    self.ready_cv.notify_all();
                }
                Event::HostConflict { host, addr } => {
                    if st.log_conflicts {
                        tracing::warn!(
                            "logical host {host} is also claimed by the node at {addr}: check the configuration"
                        );
                    }
                    st.conflict = Some((host, addr));
                    self.ready_cv.notify_all();
                }
                Event::VersionMismatch { addr, version } => {
                    tracing::warn!(
                        "the node at {addr} speaks protocol version {version}, we speak {}",
                        vipc_wire::VERSION
                    );
                }
            }
        }
        let next = earliest(st.engine.poll_timeout(), st.faults.as_ref().and_then(Faults::next_release));
        if let Some(t) = next {
            if st.timer_deadline.is_none_or(|d| t < d) {
                st.timer_deadline = Some(t);
                self.timer_cv.notify_one();
            }
        }
    }

    /// Sends the queued datagrams, outside the lock. One thread at a time
    /// sends, in queue order, so the wire order is the engine's order (the
    /// bulk protocol reads reordering as loss); a thread that finds another
    /// one sending leaves its datagrams to it.
    pub(crate) fn flush(&self) {
        loop {
            let batch = {
                let mut st = self.lock();
                if st.sending || st.outq.is_empty() {
                    return;
                }
                st.sending = true;
                std::mem::take(&mut st.outq)
            };
            for (to, bytes) in batch {
                if let Err(e) = self.unicast.send_to(&bytes, to) {
                    // ConnectionRefused is the echo of an ICMP port-unreachable: a peer is down.
                    if e.kind() != std::io::ErrorKind::ConnectionRefused {
                        tracing::debug!("send to {to} failed: {e}");
                    }
                }
            }
            self.lock().sending = false;
        }
    }

    /// Runs a non-blocking engine call.
    pub(crate) fn call<T>(&self, f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>) -> Result<T> {
        let r = {
            let mut st = self.lock();
            if st.stopped {
                return Err(Error::NodeStopped);
            }
            let r = f(&mut st.engine, self.now());
            self.drain(&mut st);
            r
        };
        self.flush();
        Ok(r?)
    }

    /// Runs a blocking engine call for `pid` and waits for its completion.
    pub(crate) fn block(
        &self,
        pid: Pid,
        f: impl FnOnce(&mut Engine, Time) -> Result<(), vipc_engine::Error>,
    ) -> Result<Completion> {
        let cv = {
            let mut st = self.lock();
            if st.stopped {
                return Err(Error::NodeStopped);
            }
            let cv = match st.slots.get_mut(&pid) {
                Some(slot) => {
                    slot.done = None;
                    slot.cv.clone()
                }
                None => return Err(vipc_engine::Error::NotLocalProcess(pid).into()),
            };
            let r = f(&mut st.engine, self.now());
            self.drain(&mut st);
            if let Err(e) = r {
                drop(st);
                self.flush();
                return Err(e.into());
            }
            cv
        };
        self.flush();
        let mut st = self.lock();
        loop {
            match st.slots.get_mut(&pid) {
                Some(slot) => {
                    if let Some(c) = slot.done.take() {
                        return Ok(c);
                    }
                }
                None => return Err(vipc_engine::Error::Destroyed(pid).into()),
            }
            if st.stopped {
                return Err(Error::NodeStopped);
            }
            st = cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Creates a local process and its slot.
    pub(crate) fn create_process(&self) -> Result<Pid> {
        let mut st = self.lock();
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let pid = st.engine.create_process()?;
        st.slots.insert(pid, Slot { done: None, cv: Arc::new(Condvar::new()) });
        Ok(pid)
    }

    /// Destroys a local process (its pending exchanges are cleaned up by the engine).
    pub(crate) fn destroy_process(&self, pid: Pid) {
        {
            let mut st = self.lock();
            if let Some(slot) = st.slots.remove(&pid) {
                slot.cv.notify_all();
            }
            if st.stopped {
                return;
            }
            let now = self.now();
            if let Err(e) = st.engine.destroy_process(now, pid) {
                tracing::debug!(%pid, "destroy_process: {e}");
            }
            self.drain(&mut st);
        }
        self.flush();
    }

    /// The engine's counters.
    pub(crate) fn stats(&self) -> Stats {
        self.lock().engine.stats()
    }

    /// Stops the node: threads exit, blocked calls return `NodeStopped`.
    fn stop(&self) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        st.stopped = true;
        for slot in st.slots.values() {
            slot.cv.notify_all();
        }
        self.timer_cv.notify_all();
        self.ready_cv.notify_all();
        drop(st);
        // Wake our own network thread at once rather than after its read timeout.
        let _ = self.unicast.send_to(&[], net::self_addr(self.local));
    }
}

/// The timer thread: runs the engine's timers and releases held-back datagrams when due.
fn timer_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        let now = shared.now();
        let engine_next = st.engine.poll_timeout();
        let next = earliest(engine_next, st.faults.as_ref().and_then(Faults::next_release));
        match next {
            Some(t) if t <= now => {
                if engine_next.is_some_and(|e| e <= now) {
                    st.engine.handle_timeout(now);
                }
                let State { faults, outq, .. } = &mut *st;
                if let Some(f) = faults {
                    f.release(now, outq);
                }
                st.timer_deadline = None;
                shared.drain(&mut st);
                if !st.outq.is_empty() {
                    drop(st);
                    shared.flush();
                    st = shared.lock();
                }
            }
            Some(t) => {
                st.timer_deadline = Some(t);
                st = shared.timer_cv.wait_timeout(st, t - now).unwrap_or_else(|e| e.into_inner()).0;
            }
            None => {
                st.timer_deadline = None;
                st = shared.timer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// A network thread: feeds every datagram arriving on `sock` to the engine.
fn net_loop(shared: Arc<Shared>, multicast: bool) {
    let sock = if multicast { shared.multicast.as_ref() } else { Some(&shared.unicast) };
    let Some(sock) = sock else { return };
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) => {
                use std::io::ErrorKind::*;
                if shared.lock().stopped {
                    return;
                }
                // ConnectionRefused: an ICMP port-unreachable from a peer that is down.
                if !matches!(e.kind(), WouldBlock | TimedOut | Interrupted | ConnectionRefused) {
                    tracing::warn!("receive failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        {
            let mut st = shared.lock();
            if st.stopped {
                return;
            }
            if shared.own.contains(&from) {
                continue; // our own broadcast, looped back
            }
            let now = shared.now();
            st.engine.handle_datagram(now, from, &buf[..n]);
            shared.drain(&mut st);
        }
        shared.flush();
    }
}

/// The part of a node its user handles share; dropping the last one stops the node.
struct Handle {
    shared: Arc<Shared>,
    host: HostId,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Handle {
    fn shutdown(&self) {
        self.shared.stop();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A running vipc node: a logical host with its sockets and threads.
///
/// `Node` is a cheap handle (clone it freely). The node runs until
/// [`Node::shutdown`] is called or the last `Node` handle is dropped
/// ([`Process`]es do not keep it running: their calls then fail with
/// [`Error::NodeStopped`]).
///
/// # Threads and wake-ups
/// The sans-IO engine sits behind one mutex, together with a slot per local
/// process (its pending completion and a condition variable).
/// - One **network thread per socket** (unicast, and multicast if enabled)
///   blocks in `recv_from` with a 100 ms read timeout (so that it notices
///   shutdown), feeds each datagram to the engine under the lock and drains it.
/// - One **timer thread** sleeps on a condition variable until the engine's
///   [`poll_timeout`](vipc_engine::Engine::poll_timeout) (or the release of a
///   datagram held back by fault injection) is due, then runs
///   [`handle_timeout`](vipc_engine::Engine::handle_timeout). Whoever drains
///   the engine — an application thread after an API call, a network thread
///   after a datagram — compares the engine's next deadline with the one the
///   timer thread sleeps towards and notifies it if the new one is earlier, so
///   a deadline armed from any thread is met.
/// - **Application threads** (V processes) call the engine directly under the
///   lock, drain it, send, and then wait on their own slot until the engine's
///   `Event::Wake` for them fills it.
///
/// Draining moves completions into slots and datagrams into a send queue;
/// the datagrams are sent after the lock is released, by one thread at a
/// time in queue order (a thread that finds another one sending leaves its
/// datagrams to it), so the wire order is the engine's order.
///
/// TODO (performance): [`NodeConfig::poll_spin`] — busy-polling before
/// sleeping — is not implemented yet.
#[derive(Clone)]
pub struct Node {
    handle: Arc<Handle>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("host", &self.handle.host).field("addr", &self.handle.shared.local).finish()
    }
}

impl Node {
    /// Binds the sockets, starts the threads and waits until the node has its
    /// logical host id. With a fixed id it then waits `conflict_grace` for a
    /// complaint from a node already holding the id. Unless disabled, it then
    /// creates the kernel server as process 1.
    pub fn start(config: NodeConfig) -> Result<Node> {
        if let HostIdConfig::Fixed(h) = config.host_id {
            if h == 0 || h > vipc_wire::MAX_HOST_ID {
                return Err(Error::Config(format!("logical host {h} is outside 1..={}", vipc_wire::MAX_HOST_ID)));
            }
        }
        let Sockets { unicast, multicast, local, targets, own } = net::open(&config)?;
        let mut ecfg = config.engine.clone();
        ecfg.host_id = config.host_id;
        ecfg.key = config.key.clone();
        if ecfg.seed == 0 {
            ecfg.seed = rand::random::<u64>() | 1;
        }
        let epoch = Instant::now();
        let engine = Engine::new(ecfg.clone(), Time::ZERO);
        let has_multicast = multicast.is_some();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                engine,
                slots: HashMap::new(),
                stopped: false,
                faults: Faults::new(&config.faults),
                timer_deadline: None,
                ready: None,
                conflict: None,
                outq: VecDeque::new(),
                sending: false,
                log_conflicts: !matches!(config.host_id, HostIdConfig::Fixed(_)),
            }),
            timer_cv: Condvar::new(),
            ready_cv: Condvar::new(),
            unicast,
            multicast,
            targets,
            own,
            local,
            epoch,
        });
        {
            let mut st = shared.lock();
            shared.drain(&mut st);
        }
        shared.flush();

        let mut threads = Vec::new();
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.to_string()).spawn(f).map_err(Error::Io)
        };
        let s = shared.clone();
        threads.push(spawn("vipc-timer", Box::new(move || timer_loop(s)))?);
        let s = shared.clone();
        threads.push(spawn("vipc-net", Box::new(move || net_loop(s, false)))?);
        if has_multicast {
            let s = shared.clone();
            threads.push(spawn("vipc-mcast", Box::new(move || net_loop(s, true)))?);
        }
        let mut handle = Handle { shared: shared.clone(), host: 0, threads: Mutex::new(threads) };

        // Wait for the logical host id.
        let wait = ecfg.host_alloc_wait * 20 + Duration::from_secs(2);
        let deadline = Instant::now() + wait;
        let fixed = matches!(config.host_id, HostIdConfig::Fixed(_));
        let host = {
            let mut st = shared.lock();
            loop {
                if let (true, Some((host, addr))) = (fixed, st.conflict) {
                    drop(st);
                    return Err(Error::HostConflict { host, addr });
                }
                if let Some(h) = st.ready {
                    break h;
                }
                let now = Instant::now();
                if now >= deadline {
                    drop(st);
                    return Err(Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("logical host allocation did not finish within {wait:?}"),
                    )));
                }
                st = shared.ready_cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        };
        if fixed {
            let deadline = Instant::now() + config.conflict_grace;
            let mut st = shared.lock();
            loop {
                if let Some((host, addr)) = st.conflict {
                    drop(st);
                    return Err(Error::HostConflict { host, addr });
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                st = shared.ready_cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        handle.host = host;
        shared.lock().log_conflicts = true;
        let node = Node { handle: Arc::new(handle) };
        if config.kernel_server {
            node.spawn(services::kernel_server)?;
        }
        Ok(node)
    }

    /// The node's logical host id.
    pub fn host_id(&self) -> HostId {
        self.handle.host
    }

    /// The address of the node's unicast socket (peers reach it there).
    pub fn local_addr(&self) -> SocketAddr {
        self.handle.shared.local
    }

    /// The node's counters.
    pub fn stats(&self) -> Stats {
        self.handle.shared.stats()
    }

    /// Registers `pid` under `name` with `scope` (SetPid). A null pid removes the name.
    pub fn set_pid(&self, name: &str, pid: Pid, scope: Scope) -> Result<()> {
        self.handle.shared.call(|e, _| e.set_pid(name.as_bytes(), pid, scope))
    }

    /// Makes the calling thread a V process: the returned [`Process`] owns a
    /// new pid, destroyed when it is dropped.
    pub fn attach(&self) -> Result<Process> {
        let pid = self.handle.shared.create_process()?;
        Ok(Process::new(self.handle.shared.clone(), pid))
    }

    /// Creates a process running `f` on a new thread; returns its pid and the
    /// thread's handle. The process is destroyed when `f` returns.
    pub fn spawn<F, T>(&self, f: F) -> Result<(Pid, JoinHandle<T>)>
    where
        F: FnOnce(Process) -> T + Send + 'static,
        T: Send + 'static,
    {
        let process = self.attach()?;
        let pid = process.pid();
        let jh = std::thread::Builder::new().name(format!("vipc-{pid}")).spawn(move || f(process))?;
        Ok((pid, jh))
    }

    /// Stops the node: its threads exit and every blocked or later call on
    /// its processes returns [`Error::NodeStopped`]. Idempotent.
    pub fn shutdown(&self) {
        self.handle.shutdown();
    }
}
