//! The runtime core: the engine behind one lock, the wait slots of blocked
//! processes, the reader token (leader/follower), draining the engine and
//! sending its datagrams. See [`crate::Node`] for the whole picture.

use crate::faults::Faults;
use crate::filemap::FileWindow;
use crate::net::{self, GroupAddrs};
use crate::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vipc_engine::{Completion, Destination, Engine, Event, HeaderFor, HostId, Lent, Pid, SegmentId, Stats, Time};
use vipc_wire::HEADER_LEN;

mod apart;
mod inplace;
mod mcast;
pub(crate) use mcast::{multicast_loop, set_up as mcast_set_up};

/// After a process gives the reader token up with no other process asking
/// for it, the background network thread leaves it this long for a process
/// to take back (a server between two Receives) before reading the socket itself.
pub(crate) const GRACE: Duration = Duration::from_millis(2);

/// A Receive leads (reads the socket while it waits) if one of the process's
/// completions came from the network this recently: an idle server that
/// hears nothing from the network leaves the socket to busier processes.
const HOT: Duration = Duration::from_millis(100);

/// The timer thread runs at most once per this interval: deadlines are met
/// at most this late (T_r is 20 ms), and the stale entries of the engine's
/// timer heap — one per exchange — cost one wake-up per interval instead of
/// one per exchange.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// How often a spinning follower looks whether the reader token is free.
const SPIN_CHECK: Duration = Duration::from_micros(2);

/// Hashes the local pids that key the slots. They are ours, not chosen by
/// peers, so one multiplication suffices (no need for a keyed hash).
#[derive(Default)]
pub(crate) struct PidHasher(u64);

impl std::hash::Hasher for PidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The slots, keyed by local pid.
type Slots = HashMap<Pid, Slot, std::hash::BuildHasherDefault<PidHasher>>;

/// Datagrams ready to go out, in the order the engine produced them.
pub(crate) type Outgoing = VecDeque<(SocketAddr, Vec<u8>)>;

/// Fire-and-forget calls (remote writes) wait while more than this many
/// bytes are queued and not yet taken by a sender: a writer faster than the
/// network would otherwise grow the queue without bound.
const SEND_QUEUE_LIMIT: usize = 8 << 20;

/// Where the data of a datagram belong: an offset in a buffer, and their range in the datagram.
type Placement = (usize, Range<usize>);

/// Who reads the unicast socket: at most one thread at a time holds the
/// reader token, so datagrams are fed to the engine in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// Nobody: the socket buffers what arrives.
    None,
    /// A process's thread, while it waits for its own completion (the leader).
    Process(Pid),
    /// The background network thread.
    Background,
    /// A thread waiting for a remote-memory operation (see [`Shared::read_for_op`]).
    Op,
}

/// What produced the engine output being drained; it decides who must be
/// woken and how.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Origin {
    /// An API call, by a process (whose own completion needs no wake-up) or not.
    Call(Option<Pid>),
    /// A datagram from the unicast socket, read by a process (the leader)
    /// or by a background thread.
    Net(Option<Pid>),
    /// A datagram from the multicast socket, read by the process holding
    /// the multicast token or by the multicast thread. It makes its receiver
    /// multicast-hot (see [`mcast`]), not hot: a group member leading the
    /// unicast socket would wait where its messages do not come, and hand
    /// every other process's datagram over.
    Multicast(Option<Pid>),
    /// A timer.
    Timer,
}

impl Origin {
    /// The process whose own thread is doing the work, if any.
    fn actor(self) -> Option<Pid> {
        match self {
            Origin::Call(by) | Origin::Net(by) | Origin::Multicast(by) => by,
            Origin::Timer => None,
        }
    }
}

/// Whether a blocked process reads the socket while it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lead {
    /// Its completion comes from the network (a remote Send, Move or GetPid).
    Yes,
    /// Its completion comes from this node (a local Send).
    No,
    /// A Receive: lead if the process has heard from the network recently.
    IfHot,
}

/// How a blocked thread learns that its slot has something for it (its
/// completion, or work on its lent buffer): a flag that a polling thread
/// spins on, and a condition variable it sleeps on. The completion itself
/// is kept here too, so that a thread that was only waiting (no reader
/// token, no lent buffer) takes it without the node's lock.
///
/// Aligned to its own cache lines: a spinning thread reads `ready` in a loop,
/// and must not share the line with another thread's signal or with the
/// reference counts of its `Arc`, which wakers touch.
#[repr(align(128))]
pub(crate) struct Signal {
    ready: AtomicBool,
    /// The CPU its thread was on when it last began to wait.
    cpu: AtomicUsize,
    /// The CPU of the thread this one last handed something to (the one
    /// that will most likely answer): spinning while it shares our CPU only
    /// keeps it from running.
    peer_cpu: AtomicUsize,
    /// The completion of the pending call, once delivered (put there under
    /// the node's lock).
    done: Mutex<Option<Completion>>,
    cv: Condvar,
}

impl Signal {
    fn new() -> Signal {
        Signal {
            ready: AtomicBool::new(false),
            cpu: AtomicUsize::new(NO_CPU),
            peer_cpu: AtomicUsize::new(NO_CPU),
            done: Mutex::new(None),
            cv: Condvar::new(),
        }
    }

    fn done(&self) -> MutexGuard<'_, Option<Completion>> {
        self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the completion, if delivered.
    fn take(&self) -> Option<Completion> {
        self.done().take()
    }
}

/// `Signal::cpu` when unknown.
const NO_CPU: usize = usize::MAX;

/// The CPU the calling thread runs on (a few ns: glibc reads it from rseq).
fn current_cpu() -> usize {
    nix::sched::sched_getcpu().unwrap_or(NO_CPU)
}

/// The buffer a blocked call lends (zero-copy MoveTo / MoveFrom): only its
/// own thread touches it, so other threads queue [`Work`] for it.
pub(crate) enum Lend<'a> {
    /// Nothing lent.
    None,
    /// The data of a MoveTo.
    Read(&'a [u8]),
    /// The destination of a MoveFrom.
    Write(&'a mut [u8]),
    /// The data of a MoveTo, sent from a file's page cache.
    File(&'a FileWindow<'a>),
}

/// Something only the thread owning a lent buffer can do.
enum Work {
    /// Send `head` followed by `lent` bytes of the buffer to `to`.
    Send { to: SocketAddr, head: Vec<u8>, lent: Lent },
    /// Copy `data` into the buffer at `offset`.
    Place { offset: usize, data: Vec<u8> },
    /// Give the engine the whole lent read-only buffer.
    Fetch,
}

/// Where a local process's completion is delivered.
struct Slot {
    /// Work on the lent buffer, in order.
    work: VecDeque<Work>,
    signal: Arc<Signal>,
    /// The thread sleeps on `signal.cv` (filling the slot must notify it).
    sleeping: bool,
    /// The thread sleeps waiting for the reader token (it is in `lead_waiters`).
    wants_lead: bool,
    /// When a datagram from the unicast socket last completed one of its
    /// calls; None after a local one.
    last_net: Option<Time>,
    /// The same for the multicast socket.
    last_mcast: Option<Time>,
}

/// Everything under the node's lock.
pub(crate) struct State {
    pub(crate) engine: Engine,
    slots: Slots,
    pub(crate) stopped: bool,
    faults: Option<Faults>,
    /// The deadline the timer thread sleeps towards (None: no timer armed).
    timer_deadline: Option<Time>,
    /// The timer thread does not run again before this (see [`TIMER_SLACK`]).
    timer_floor: Time,
    pub(crate) ready: Option<HostId>,
    pub(crate) conflict: Option<(HostId, SocketAddr)>,
    /// Log host conflicts (false while the start-up of a fixed-id node
    /// returns them as an error instead).
    pub(crate) log_conflicts: bool,
    /// Datagrams drained from the engine and not yet sent.
    outq: Outgoing,
    /// How many of `outq`'s datagrams, and bytes, have been counted towards
    /// [`SEND_QUEUE_LIMIT`] (the queue only grows at its back until it is
    /// taken whole, so counting is incremental).
    outq_counted: (usize, usize),
    /// Threads waiting on `drained_cv`: for the queue to shrink, or for the
    /// sending thread to finish.
    send_waiters: usize,
    /// Calls that waited so ([`Stats::writes_throttled`]).
    throttled_calls: u64,
    /// [`Stats::rmem_answers_from_segment`].
    answers_from_segment: u64,
    /// [`Stats::rmem_answers_in_place`].
    answers_in_place: u64,
    /// An empty queue kept to swap with `outq` (no allocation per send).
    spare: Outgoing,
    /// True while some thread is sending from `outq` (it sends everything queued).
    sending: bool,
    /// Who holds the reader token.
    reader: Reader,
    /// The reader is (about to be) blocked in a receive that only a datagram
    /// ends: waking it takes a datagram to our own socket.
    reader_blocked: bool,
    /// A completion for the blocked reader arrived by another way: send it the wake-up datagram.
    wake_reader: bool,
    /// Threads to signal once the lock is released (their flag set, and the
    /// condition variable notified if they sleep).
    notify: Notify,
    /// Counts the times the token was given up (lets the background thread
    /// see that it has been free for a whole [`GRACE`]).
    releases: u64,
    /// Counts the times a process took the token (lets the background thread see change).
    reader_gen: u64,
    /// Processes sleeping until the token is free (entries whose slot no longer `wants_lead` are stale).
    lead_waiters: VecDeque<Pid>,
    /// Threads waiting for a remote-memory operation that want the token
    /// (they sleep on `rmem_cv`, woken when it is freed).
    op_waiters: usize,
    /// Threads waiting for segment memory lent to a receive (none is lent meanwhile).
    loan_waiters: usize,
    /// Threads asleep on `rmem_cv`: only then is there anyone to notify (a
    /// notification is a system call even when nobody waits, and a waiter
    /// reading the socket itself would pay two per operation).
    rmem_sleepers: usize,
    /// The background network thread sleeps until notified.
    bg_parked: bool,
    /// Datagrams are queued for the sender thread (see [`Shared::call_deferred`]).
    send_kick: bool,
    /// A process has sent the wake-up datagram to take the token from the background thread.
    kicked: bool,
    /// The receive buffer; it travels with the reader token.
    rxbuf: net::RecvBuf,
    /// Who reads the multicast socket (see [`mcast`]).
    mcast: mcast::Token,
    /// Group multicast addresses the multicast socket has joined, with the
    /// number of local groups mapped to each (distinct groups may share one).
    joined: HashMap<Ipv4Addr, u32>,
    /// Unicast copies sent in place of multicast ([`Stats::unicast_fanout`]).
    fanout: u64,
    /// Buffers of placed data, kept for the next datagram read for another
    /// thread's lent buffer (a fresh 64 KiB allocation costs page faults).
    place_bufs: Vec<Vec<u8>>,
    /// Threads in `ExportedSegment::wait_record`, by segment: the condition
    /// variable they sleep on and how many they are. A record wakes only
    /// the waiters of its own segment, not every remote-memory waiter.
    pub(crate) record_waiters: HashMap<SegmentId, (Arc<Condvar>, usize)>,
}

/// State shared by the node's handles, processes and threads.
pub(crate) struct Shared {
    state: Mutex<State>,
    pub(crate) timer_cv: Condvar,
    pub(crate) ready_cv: Condvar,
    /// The background network thread sleeps on it.
    pub(crate) bg_cv: Condvar,
    /// Remote memory: notified whenever an operation finishes or the reader
    /// token is free (waiters look again under the lock).
    pub(crate) rmem_cv: Condvar,
    /// The sender thread sleeps on it.
    pub(crate) sender_cv: Condvar,
    /// Throttled fire-and-forget callers sleep on it (see [`SEND_QUEUE_LIMIT`]),
    /// and writers waiting for their turn to send ([`Shared::send_from_buffer`]).
    drained_cv: Condvar,
    /// The multicast thread sleeps on it while a process holds the multicast token.
    mcast_cv: Condvar,
    pub(crate) unicast: UdpSocket,
    pub(crate) multicast: Option<UdpSocket>,
    /// The doorbells of the multicast socket's readers (with `multicast`).
    bells: Option<mcast::Bells>,
    targets: Vec<SocketAddr>,
    peers: Vec<SocketAddr>,
    groups: Option<GroupAddrs>,
    own: Vec<SocketAddr>,
    pub(crate) local: SocketAddr,
    /// Where a wake-up datagram goes (our own socket).
    self_addr: SocketAddr,
    /// [`coarse_now`] when the node started: the engine's time zero.
    epoch: u64,
    pub(crate) poll_spin: Option<Duration>,
    keyed: bool,
}

/// CLOCK_MONOTONIC_COARSE in nanoseconds: CLOCK_MONOTONIC read at the last
/// tick ([`precise_now`] itself on a kernel without it, before 2.6.32), so
/// the two share one time base and this one is never ahead.
fn coarse_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE).map_or_else(|_| precise_now(), ns)
}

/// CLOCK_MONOTONIC in nanoseconds (the time since the first call if even
/// that clock fails, which Linux does not let it).
fn precise_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or_else(
        |_| {
            static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            START.get_or_init(Instant::now).elapsed().as_nanos().min(u64::MAX as u128) as u64
        },
        ns,
    )
}

fn ns(t: nix::sys::time::TimeSpec) -> u64 {
    (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64)
}

fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What [`Shared::new`] needs besides the engine.
pub(crate) struct Parts {
    pub unicast: UdpSocket,
    pub multicast: Option<UdpSocket>,
    pub bells: Option<mcast::Bells>,
    pub targets: Vec<SocketAddr>,
    pub peers: Vec<SocketAddr>,
    pub groups: Option<GroupAddrs>,
    pub own: Vec<SocketAddr>,
    pub local: SocketAddr,
    pub faults: Option<Faults>,
    pub log_conflicts: bool,
    pub poll_spin: Option<Duration>,
    pub keyed: bool,
}

impl Shared {
    pub(crate) fn new(engine: Engine, p: Parts) -> Shared {
        Shared {
            state: Mutex::new(State {
                engine,
                slots: Slots::default(),
                stopped: false,
                faults: p.faults,
                timer_deadline: None,
                timer_floor: Time::ZERO,
                ready: None,
                conflict: None,
                log_conflicts: p.log_conflicts,
                outq: VecDeque::new(),
                outq_counted: (0, 0),
                send_waiters: 0,
                throttled_calls: 0,
                answers_from_segment: 0,
                answers_in_place: 0,
                spare: VecDeque::new(),
                sending: false,
                reader: Reader::None,
                reader_blocked: false,
                wake_reader: false,
                notify: Vec::new(),
                releases: 0,
                reader_gen: 0,
                lead_waiters: VecDeque::new(),
                op_waiters: 0,
                rmem_sleepers: 0,
                loan_waiters: 0,
                bg_parked: false,
                send_kick: false,
                kicked: false,
                rxbuf: net::RecvBuf::new(),
                mcast: mcast::Token::default(),
                joined: HashMap::new(),
                fanout: 0,
                place_bufs: Vec::new(),
                record_waiters: HashMap::new(),
            }),
            timer_cv: Condvar::new(),
            ready_cv: Condvar::new(),
            bg_cv: Condvar::new(),
            rmem_cv: Condvar::new(),
            sender_cv: Condvar::new(),
            drained_cv: Condvar::new(),
            mcast_cv: Condvar::new(),
            bells: p.bells,
            self_addr: net::self_addr(p.local),
            unicast: p.unicast,
            multicast: p.multicast,
            targets: p.targets,
            peers: p.peers,
            groups: p.groups,
            own: p.own,
            local: p.local,
            epoch: coarse_now(),
            poll_spin: p.poll_spin.filter(|d| !d.is_zero()),
            keyed: p.keyed,
        }
    }

    /// True if the cluster has a key (packets are MACed).
    pub(crate) fn keyed(&self) -> bool {
        self.keyed
    }

    /// Now on the node's clock: CLOCK_MONOTONIC_COARSE, which reads in a
    /// fraction of the time of the precise clock (about 20 ns instead of 80
    /// here, several reads per exchange) and lags it by a tick or two
    /// (measured here: up to 7.7 ms with 4 ms ticks and tickless idle) —
    /// nothing next to T_r (20 ms), the finest engine timer.
    pub(crate) fn now(&self) -> Time {
        Time(coarse_now().saturating_sub(self.epoch))
    }

    /// The precise time on the node's clock: for a limit that must not
    /// pass early (see [`Shared::block`]).
    fn precise_now(&self) -> Time {
        Time(precise_now().saturating_sub(self.epoch))
    }

    /// Locks the state (a panic elsewhere does not make the node unusable).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drains the engine after any input: datagrams into the send queue
    /// (through the fault injector), completions into slots — waking their
    /// threads as `origin` requires — and notices to the log; then makes sure
    /// the timer thread will wake for the engine's next deadline. The caller
    /// sends the queue with [`Shared::flush`] (or `flush_locked`).
    pub(crate) fn drain(&self, st: &mut State, origin: Origin, now: Time) {
        let actor = origin.actor();
        while let Some(mut t) = st.engine.poll_transmit_split() {
            if t.segment.is_some() && (self.send_split_now(st, &t) || !st.engine.join(&mut t)) {
                continue; // sent, or its segment is gone
            }
            if let Some(lent) = t.lent {
                // Only the lending thread can append the data.
                if let (Destination::Addr(to), Some(slot)) = (t.to, st.slots.get_mut(&lent.pid)) {
                    slot.work.push_back(Work::Send { to, head: t.bytes, lent });
                    self.wake(st, lent.pid, actor);
                }
                continue;
            }
            let State { faults, outq, engine, fanout, .. } = st;
            let mut push = |to: SocketAddr, bytes: Vec<u8>| match faults {
                Some(f) => f.apply(now, to, bytes, outq),
                None => outq.push_back((to, bytes)),
            };
            match (t.to, &self.groups) {
                (Destination::Addr(a), _) => push(a, t.bytes),
                (Destination::Broadcast, Some(_)) => {
                    for a in &self.targets {
                        push(*a, t.bytes.clone());
                    }
                }
                (Destination::Group(g), Some(groups)) => {
                    push(SocketAddr::V4(groups.of(g)), t.bytes.clone());
                    for a in &self.peers {
                        push(*a, t.bytes.clone());
                    }
                }
                // No multicast: unicast fan-out to the static peers and the alive hosts.
                (Destination::Broadcast | Destination::Group(_), None) => {
                    let alive = engine.alive_addrs().filter(|a| !self.peers.contains(a) && !self.own.contains(a));
                    for a in self.peers.iter().copied().chain(alive) {
                        *fanout += 1;
                        push(a, t.bytes.clone());
                    }
                }
            }
        }
        while let Some(ev) = st.engine.poll_event() {
            match ev {
                Event::Wake { pid, completion } => self.deliver(st, pid, completion, origin, now),
                Event::Place { pid, offset, data } => {
                    // Only the lending thread may write its buffer; it does before its completion.
                    if let Some(slot) = st.slots.get_mut(&pid) {
                        slot.work.push_back(Work::Place { offset, data });
                        self.wake(st, pid, origin.actor());
                    }
                }
                Event::FetchLent { pid } => {
                    // Only the lending thread can read its buffer.
                    if let Some(slot) = st.slots.get_mut(&pid) {
                        slot.work.push_back(Work::Fetch);
                        self.wake(st, pid, origin.actor());
                    }
                }
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
                Event::MemDone(_) => {
                    // A waiter reading the socket for its operation must stop:
                    // this one may be its own, finished another way (a timer).
                    if st.reader == Reader::Op && st.reader_blocked {
                        st.wake_reader = true;
                    }
                    if st.rmem_sleepers > 0 {
                        self.rmem_cv.notify_all()
                    }
                }
                Event::MemNotify(seg) => {
                    if let Some((cv, _)) = st.record_waiters.get(&seg) {
                        cv.notify_all();
                    }
                }
                Event::GroupJoined(g) => self.listen_to_group(st, g, true),
                Event::GroupLeft(g) => self.listen_to_group(st, g, false),
                Event::HostUp { host, addr } => tracing::debug!(host, %addr, "host up"),
                Event::HostDown(host) => tracing::info!(host, "host down: silent for too long"),
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
            let t = t.max(st.timer_floor);
            if st.timer_deadline.is_none_or(|d| t < d) {
                st.timer_deadline = Some(t);
                self.timer_cv.notify_one();
            }
        }
    }

    /// Sends a split read answer ([`Transmit::segment`]) straight from its
    /// segment, with the lock held (the bytes are the engine's), when it
    /// would be next on the wire anyway: nobody else sending, nothing queued,
    /// no fault injection. Never blocks: a full socket buffer says no.
    /// False if it was not sent (the caller joins it and queues it).
    fn send_split_now(&self, st: &mut State, t: &vipc_engine::Transmit) -> bool {
        let (Destination::Addr(to), Some(s)) = (t.to, t.segment) else { return false };
        if st.sending || !st.outq.is_empty() || st.faults.is_some() {
            return false;
        }
        let Some(data) = st.engine.segment_slice(&s) else { return false };
        let sent = net::try_send_parts(&self.unicast, to, &t.bytes, data);
        st.answers_from_segment += u64::from(sent);
        sent
    }

    /// Joins (or leaves) the multicast address of `group` on the multicast
    /// socket when its first local group mapped there appears (or its last
    /// goes). Without multicast, group Sends reach us by unicast: nothing to do.
    fn listen_to_group(&self, st: &mut State, group: Pid, join: bool) {
        let (Some(groups), Some(sock)) = (&self.groups, &self.multicast) else { return };
        let addr = *groups.of(group).ip();
        if addr == groups.broadcast {
            return; // always joined
        }
        let count = st.joined.entry(addr).or_insert(0);
        let result = if join {
            *count += 1;
            if *count > 1 {
                return;
            }
            sock.join_multicast_v4(&addr, &groups.interface)
        } else {
            *count = count.saturating_sub(1);
            if *count > 0 {
                return;
            }
            st.joined.remove(&addr);
            sock.leave_multicast_v4(&addr, &groups.interface)
        };
        if let Err(e) = result {
            let what = if join { "join" } else { "leave" };
            tracing::warn!("cannot {what} multicast address {addr} of group {group}: {e}");
        }
    }

    /// Puts a completion in its slot and wakes the thread waiting there: a
    /// spinning thread sees the flag; a thread blocked reading the socket
    /// gets a datagram; a sleeping one is notified. The thread whose own
    /// call or read produced it needs nothing.
    fn deliver(&self, st: &mut State, pid: Pid, completion: Completion, origin: Origin, now: Time) {
        let Some(slot) = st.slots.get_mut(&pid) else {
            tracing::debug!(%pid, "completion for a process that is gone");
            return;
        };
        *slot.signal.done() = Some(completion);
        match origin {
            Origin::Net(_) => slot.last_net = Some(now),
            Origin::Multicast(_) => slot.last_mcast = Some(now),
            // A local message cools a server for the unicast socket; it says
            // nothing of its group messages (those keep coming by multicast).
            Origin::Call(by) if by != Some(pid) => slot.last_net = None,
            Origin::Call(_) | Origin::Timer => {}
        }
        self.wake(st, pid, origin.actor());
    }

    /// Tells the thread of `pid` that its slot has something for it, unless
    /// that thread is the `actor` at work: a thread blocked reading the socket
    /// gets a datagram; otherwise, once the lock is released, its flag is set
    /// (a spinning thread sees it) and, if it sleeps, it is notified.
    fn wake(&self, st: &mut State, pid: Pid, actor: Option<Pid>) {
        if actor == Some(pid) {
            return;
        }
        let Some(slot) = st.slots.get(&pid) else { return };
        if self.poll_spin.is_some() {
            // The actor will wait for an answer, most likely from `pid`.
            let cpu = slot.signal.cpu.load(Ordering::Relaxed);
            if let Some(a) = actor.and_then(|a| st.slots.get(&a)) {
                a.signal.peer_cpu.store(cpu, Ordering::Relaxed);
            }
        }
        let Some(slot) = st.slots.get(&pid) else { return };
        if st.reader == Reader::Process(pid) && st.reader_blocked {
            st.wake_reader = true;
        } else if st.mcast.holder == Some(pid) && st.mcast.holder_blocked {
            st.mcast.wake_holder = true;
        } else {
            // Signalled once the lock is released (see `flush_locked`), so
            // that the woken thread does not find the lock still held.
            let entry = (slot.signal.clone(), slot.sleeping);
            st.notify.push(entry);
        }
    }

    /// Feeds one datagram to the engine and drains it (our own datagrams —
    /// looped-back broadcasts and wake-ups — are skipped). Data of the
    /// datagram that belong in a buffer lent by the `origin`'s own process are
    /// returned for it to copy; those of another process are queued for it.
    pub(crate) fn feed(&self, st: &mut State, from: SocketAddr, bytes: &[u8], origin: Origin) -> Option<Placement> {
        self.feed_as(st, from, bytes, origin, false).0
    }

    /// [`Shared::feed`]; with `lent`, segment memory is lent to this thread
    /// ([`Engine::handle_datagram_lent`]) and the second result says where
    /// in it the datagram's data belong.
    fn feed_as(
        &self,
        st: &mut State,
        from: SocketAddr,
        bytes: &[u8],
        origin: Origin,
        lent: bool,
    ) -> (Option<Placement>, Option<Placement>) {
        if self.own.contains(&from) {
            return (None, None);
        }
        let now = self.now();
        let into_loan = if lent {
            st.engine.handle_datagram_lent(now, from, bytes)
        } else {
            st.engine.handle_datagram(now, from, bytes);
            None
        };
        let mine = match st.engine.poll_placement() {
            Some((lent, range)) if origin.actor() == Some(lent.pid) => Some((lent.offset, range)),
            Some((lent, range)) => {
                let State { slots, place_bufs, .. } = &mut *st;
                if let Some(slot) = slots.get_mut(&lent.pid) {
                    let mut data = place_bufs.pop().unwrap_or_default();
                    data.clear();
                    data.extend_from_slice(&bytes[range]);
                    slot.work.push_back(Work::Place { offset: lent.offset, data });
                    self.wake(st, lent.pid, origin.actor());
                }
                None
            }
            None => None,
        };
        self.drain(st, origin, now);
        (mine, into_loan)
    }

    /// Sends the queued datagrams (and the reader's wake-up), with the lock
    /// released meanwhile; returns with it held again. One thread at a time
    /// sends, in queue order, so the wire order is the engine's order (the
    /// bulk protocol reads reordering as loss); a thread that finds another
    /// one sending leaves its datagrams to it.
    pub(crate) fn flush_locked<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        let mut wake = std::mem::take(&mut st.wake_reader);
        let mut wake_holder = std::mem::take(&mut st.mcast.wake_holder);
        let mut notify = take_notify(&mut st);
        let send = !st.sending && !st.outq.is_empty();
        if !send && !wake && !wake_holder && notify.is_empty() {
            return st;
        }
        st.sending |= send;
        loop {
            let mut batch = if send { self.take_queue(&mut st) } else { VecDeque::new() };
            drop(st);
            signal_all(&mut notify);
            if std::mem::take(&mut wake) {
                self.send_wake();
            }
            if std::mem::take(&mut wake_holder) {
                self.ring_holder();
            }
            net::send_all(&self.unicast, &mut batch);
            st = self.lock();
            if !send {
                return st;
            }
            give_back(&mut st, batch);
            if st.outq.is_empty() {
                self.stop_sending(&mut st);
                return st;
            }
        }
    }

    /// Takes the whole send queue for the sending thread (throttled callers
    /// may go on: nothing is unsent any more).
    fn take_queue(&self, st: &mut State) -> Outgoing {
        let spare = std::mem::take(&mut st.spare);
        st.outq_counted = (0, 0);
        if st.send_waiters > 0 {
            self.drained_cv.notify_all();
        }
        std::mem::replace(&mut st.outq, spare)
    }

    /// The sending thread is done: a writer waiting for its turn may go.
    fn stop_sending(&self, st: &mut State) {
        st.sending = false;
        if st.send_waiters > 0 {
            self.drained_cv.notify_all();
        }
    }

    /// Sleeps until the sending thread takes the queue or finishes (the
    /// caller checks its own condition again; the limit only bounds a missed
    /// notification).
    fn wait_drained<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        st.send_waiters += 1;
        let limit = Duration::from_millis(50);
        let mut st = self.drained_cv.wait_timeout(st, limit).unwrap_or_else(|e| e.into_inner()).0;
        st.send_waiters -= 1;
        st
    }

    /// Sends packets whose headers `f` encodes and whose data are ranges of
    /// `data` straight from the caller's buffer (no copy into a queued
    /// datagram), after everything queued before them: the caller waits for
    /// its turn as the one sending thread. `Ok(false)` if `f` declines, and
    /// with fault injection (which must see every datagram).
    pub(crate) fn send_from_buffer(
        &self,
        data: &[u8],
        f: impl FnOnce(&mut Engine) -> Result<Option<Vec<HeaderFor>>, vipc_engine::Error>,
    ) -> Result<bool> {
        let mut st = self.lock();
        if st.faults.is_some() {
            return Ok(false);
        }
        while st.sending && !st.stopped {
            st = self.wait_drained(st);
        }
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let Some(packets) = f(&mut st.engine)? else { return Ok(false) };
        let now = self.now();
        self.drain(&mut st, Origin::Call(None), now);
        st.sending = true;
        let mut batch = self.take_queue(&mut st);
        drop(st);
        net::send_all(&self.unicast, &mut batch);
        for p in &packets {
            net::send_parts(&self.unicast, p.to, &p.head, &data[p.data.clone()]);
        }
        let mut st = self.lock();
        give_back(&mut st, batch);
        self.stop_sending(&mut st);
        self.flush(st);
        Ok(true)
    }

    /// [`Shared::flush_locked`], then unlocks. With nothing to send, the
    /// threads to wake are signalled after unlocking and the lock is not
    /// taken again (a woken thread would find it held).
    pub(crate) fn flush(&self, st: MutexGuard<'_, State>) {
        if st.sending || st.outq.is_empty() {
            return self.unlock_and_signal(st);
        }
        drop(self.flush_locked(st));
    }

    /// Unlocks, then signals the threads to wake and the blocked reader, if
    /// any (without sending the queue).
    fn unlock_and_signal(&self, mut st: MutexGuard<'_, State>) {
        let wake = std::mem::take(&mut st.wake_reader);
        let wake_holder = std::mem::take(&mut st.mcast.wake_holder);
        let mut notify = take_notify(&mut st);
        drop(st);
        signal_all(&mut notify);
        if wake {
            self.send_wake();
        }
        if wake_holder {
            self.ring_holder();
        }
    }

    /// A thread waiting for a remote-memory operation reads the socket itself
    /// — one datagram, then the token is free again — so that the answer
    /// reaches it without a hand-off (as a process blocked in a remote Send
    /// reads its reply). If the background thread holds the token, blocked in
    /// a receive, it is asked to hand it over (and the waiter sleeps until it
    /// does, or its answer comes); if a process holds it, the waiter sleeps.
    /// Returns whether it read.
    pub(crate) fn read_for_op<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        spin_until: Option<Instant>,
    ) -> (MutexGuard<'a, State>, bool) {
        if st.stopped {
            return (st, false);
        }
        if st.reader != Reader::None {
            if st.reader == Reader::Background && st.reader_blocked && !st.kicked {
                st.kicked = true;
                st.wake_reader = true;
                st = self.flush_locked(st);
            }
            return (st, false);
        }
        st.reader = Reader::Op;
        st.reader_gen += 1;
        st.kicked = false;
        let mut st = self.read_one(st, spin_until);
        st.reader = Reader::None;
        st.releases += 1;
        self.promote(&mut st);
        (st, true)
    }

    /// The token holder (not a process) reads one datagram, blocking up to
    /// [`net::RECV_POLL`] with the lock released, feeds it to the engine and
    /// sends what it produced; returns with the lock held.
    fn read_one<'a>(&'a self, mut st: MutexGuard<'a, State>, spin_until: Option<Instant>) -> MutexGuard<'a, State> {
        let spin = spin_until.filter(|t| Instant::now() < *t);
        st.reader_blocked = spin.is_none();
        let mut buf = std::mem::take(&mut st.rxbuf);
        let loan = if st.loan_waiters == 0 { st.engine.mem_lend() } else { None };
        drop(st);
        let never = AtomicBool::new(false);
        let spin = spin.map(|until| (&never, until));
        let mut st = match loan {
            Some(loan) => self.read_into_loan(loan, &mut buf, spin),
            None => {
                let got = match spin {
                    Some(spin) => net::recv_parts(&self.unicast, &mut buf, &mut [], Some(spin)),
                    None => net::recv(&self.unicast, &mut buf),
                };
                let mut st = self.lock();
                st.reader_blocked = false;
                if let Some((n, from)) = got {
                    self.feed(&mut st, from, &buf[..n], Origin::Net(None));
                }
                st
            }
        };
        st.rxbuf = buf;
        self.flush_locked(st)
    }

    /// A thread waiting for a remote-memory event (an operation's answer, a
    /// segment's record) for at most `left`, after checking that it has not
    /// come: reads one datagram itself if it can ([`Shared::read_for_op`]),
    /// else sleeps until the event or the token is free. Only a waiter with
    /// a whole receive's timeout left asks for the token: the background
    /// thread hands it to a waiter after each datagram and leaves it idle for
    /// [`GRACE`], which a waiter that will not read would turn into a 2 ms stall.
    pub(crate) fn wait_mem<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        left: Duration,
        spin_until: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        if left < net::RECV_POLL {
            return self.sleep_for_mem(st, left);
        }
        Self::op_waiting(&mut st, true);
        let (mut st, read) = self.read_for_op(st, spin_until);
        if !read {
            st = self.sleep_for_mem(st, left);
        }
        Self::op_waiting(&mut st, false);
        st
    }

    /// Sleeps on `rmem_cv` for at most `limit`, counted among its sleepers.
    fn sleep_for_mem<'a>(&'a self, mut st: MutexGuard<'a, State>, limit: Duration) -> MutexGuard<'a, State> {
        st.rmem_sleepers += 1;
        let mut st = self.rmem_cv.wait_timeout(st, limit).unwrap_or_else(|e| e.into_inner()).0;
        st.rmem_sleepers -= 1;
        st
    }

    /// Counts a thread waiting for a remote-memory operation that wants the token.
    fn op_waiting(st: &mut State, waiting: bool) {
        if waiting {
            st.op_waiters += 1;
        } else {
            st.op_waiters = st.op_waiters.saturating_sub(1);
        }
    }

    /// Ends the wait of the process holding the multicast token.
    fn ring_holder(&self) {
        if let Some(b) = &self.bells {
            b.holder.ring();
        }
    }

    /// An empty datagram to our own socket: ends the blocked reader's receive.
    fn send_wake(&self) {
        if let Err(e) = self.unicast.send_to(&[], self.self_addr) {
            tracing::debug!("wake-up datagram failed: {e}");
        }
    }

    /// Runs a non-blocking engine call (on behalf of process `by`, if any).
    pub(crate) fn call<T>(
        &self,
        by: Option<Pid>,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<T> {
        let (st, r) = self.enter(by, f)?;
        self.flush(st);
        Ok(r?)
    }

    /// Runs engine call `f` by `by` and drains its output; returns with the lock held.
    fn enter<T>(
        &self,
        by: Option<Pid>,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<(MutexGuard<'_, State>, Result<T, vipc_engine::Error>)> {
        self.enter_locked(self.lock(), by, f)
    }

    /// [`Shared::enter`] with the lock already taken.
    fn enter_locked<'s, T>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        by: Option<Pid>,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<(MutexGuard<'s, State>, Result<T, vipc_engine::Error>)> {
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let now = self.now();
        let r = f(&mut st.engine, now);
        self.drain(&mut st, Origin::Call(by), now);
        Ok((st, r))
    }

    /// [`Shared::call`] whose datagrams the sender thread sends: the caller
    /// pays for the engine and a queue, not for the system calls — what a
    /// remote write costs the writer (003: the interface, not the writer,
    /// moves the data). Order is kept: one thread at a time sends the
    /// queue, in order, and a later call by anyone sends what is still queued
    /// before its own. While more than [`SEND_QUEUE_LIMIT`] bytes wait for
    /// the sender, the caller waits too, as a writer waits for a full
    /// interface queue.
    pub(crate) fn call_deferred<T>(
        &self,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<T> {
        let (mut st, r) = self.enter(None, f)?;
        let kick = !st.sending && !st.outq.is_empty() && !std::mem::replace(&mut st.send_kick, true);
        if unsent_bytes(&mut st) > SEND_QUEUE_LIMIT {
            st.throttled_calls += 1;
            if kick {
                self.sender_cv.notify_one();
            }
            while !st.stopped && unsent_bytes(&mut st) > SEND_QUEUE_LIMIT {
                st = self.wait_drained(st);
            }
            self.unlock_and_signal(st);
            return Ok(r?);
        }
        self.unlock_and_signal(st);
        if kick {
            self.sender_cv.notify_one();
        }
        Ok(r?)
    }

    /// Runs a blocking engine call for `pid` and waits for its completion.
    pub(crate) fn block(
        &self,
        pid: Pid,
        lead: Lead,
        lend: Lend<'_>,
        f: impl FnOnce(&mut Engine, Time) -> Result<(), vipc_engine::Error>,
    ) -> Result<Completion> {
        let mut st = self.lock();
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let now = self.now();
        // One lookup of the slot, held across the engine call (disjoint fields).
        let state = &mut *st;
        let Some(slot) = state.slots.get_mut(&pid) else {
            return Err(vipc_engine::Error::NotLocalProcess(pid).into());
        };
        let hot = |t: Option<Time>| t.is_some_and(|t| now.since(t) < HOT);
        let (signal, hot, mhot) = (slot.signal.clone(), hot(slot.last_net), hot(slot.last_mcast));
        let left = crate::within::remaining()?;
        let mut r = f(&mut state.engine, now);
        // Only a call the engine took owns the slot: one refused (Busy: the
        // process already waits, in another thread) must not wipe the
        // completion that call may have just been given. The new call's own
        // completions are still in the engine's events, drained below.
        if r.is_ok() {
            *slot.signal.done() = None;
            slot.work.clear();
            slot.signal.ready.store(false, Ordering::Relaxed);
        }
        if let (Ok(()), Some(left)) = (&r, left) {
            // The limit must not pass before the caller's deadline. It is
            // checked against the coarse clock, which never runs ahead of the
            // precise one but may lag it by more than its stated resolution
            // (7.7 ms against 4 ms here): counted from the precise time, the
            // coarse clock reaches it only once the deadline has passed.
            r = st.engine.limit(now, pid, self.precise_now() + left);
        }
        self.drain(&mut st, Origin::Call(Some(pid)), now);
        if let Err(e) = r {
            self.flush(st);
            return Err(e.into());
        }
        // A Receive whose messages came from the multicast socket lately reads that socket.
        let mlead = matches!(lead, Lead::IfHot) && mhot;
        let lead = match lead {
            Lead::Yes => true,
            Lead::No => false,
            Lead::IfHot => hot,
        };
        if self.poll_spin.is_some() && !lead {
            // A spinning follower waits without the lock (see `wait`).
            self.flush(st);
            self.wait(pid, None, &signal, (lead, mlead), lend)
        } else {
            let st = self.flush_locked(st);
            self.wait(pid, Some(st), &signal, (lead, mlead), lend)
        }
    }

    /// Waits until `pid`'s slot is filled. A thread that `lead`s takes the
    /// reader token when it is free and reads the socket itself, feeding the
    /// engine and waking the others, until its own completion arrives; the
    /// others sleep on their slot. With `poll_spin`, first spins: the leader
    /// on non-blocking receives, a follower on its slot's flag. One that
    /// does not lead the unicast socket and `mlead`s reads the multicast
    /// socket if it can (see [`mcast`]).
    fn wait<'a>(
        &'a self,
        pid: Pid,
        st: Option<MutexGuard<'a, State>>,
        signal: &Signal,
        (lead, mlead): (bool, bool),
        mut lend: Lend<'_>,
    ) -> Result<Completion> {
        let spin_until = self.poll_spin.map(|d| crate::within::deadline_after(Instant::now(), d));
        // Made at the first spin: a blocking wait reads no clock for it.
        let mut spinner = None;
        let mut work = VecDeque::new();
        let mut spent = Vec::new();
        if spin_until.is_some() {
            signal.cpu.store(current_cpu(), Ordering::Relaxed);
        }
        let mut st = match st {
            Some(st) => st,
            None => {
                // A spinning follower first spins on its flag without the
                // lock, and takes its completion without it: it holds no
                // reader token and has asked for none (see `release`).
                if let Some(until) = spin_until {
                    spin_on(signal, until, spinner.get_or_insert_with(net::Spin::cheap));
                    if !lead {
                        if let Some(c) = signal.take() {
                            return Ok(c);
                        }
                    }
                }
                self.lock()
            }
        };
        loop {
            let Some(slot) = st.slots.get_mut(&pid) else {
                self.release(&mut st, pid);
                return Err(vipc_engine::Error::Destroyed(pid).into());
            };
            if !slot.work.is_empty() {
                std::mem::swap(&mut work, &mut slot.work);
                if slot.signal.done().is_none() {
                    slot.signal.ready.store(false, Ordering::Relaxed);
                }
                drop(st);
                self.do_work(pid, &mut work, &mut lend, &mut spent);
                st = self.lock();
                keep_place_bufs(&mut st, &mut spent);
                continue;
            }
            if let Some(c) = slot.signal.take() {
                self.release(&mut st, pid);
                return Ok(c);
            }
            let asked = slot.wants_lead;
            if st.stopped {
                self.release(&mut st, pid);
                return Err(Error::NodeStopped);
            }
            let spin = spin_until.filter(|t| Instant::now() < *t);
            if lead && matches!(st.reader, Reader::None) || st.reader == Reader::Process(pid) {
                if st.reader == Reader::None {
                    st.reader_gen += 1;
                    st.reader = Reader::Process(pid);
                    if let Some(slot) = st.slots.get_mut(&pid) {
                        slot.wants_lead = false;
                    }
                }
                st.reader_blocked = spin.is_none();
                signal.ready.store(false, Ordering::Relaxed); // nothing for us yet: checked above
                let mut buf = std::mem::take(&mut st.rxbuf);
                let in_place = match &lend {
                    Lend::Write(dest) => {
                        st.engine.next_placement(pid).filter(|&(at, len)| at >= HEADER_LEN && at + len <= dest.len())
                    }
                    _ => None,
                };
                drop(st);
                let spin = spin.map(|until| (&signal.ready, until));
                if let (Some((at, len)), Lend::Write(dest)) = (in_place, &mut lend) {
                    st = self.read_in_place(pid, dest, (at, len), &mut buf, spin);
                } else {
                    let got = net::recv_parts(&self.unicast, &mut buf, &mut [], spin);
                    st = self.lock();
                    st.reader_blocked = false;
                    if let Some((n, from)) = got {
                        if let Some((offset, range)) = self.feed(&mut st, from, &buf[..n], Origin::Net(Some(pid))) {
                            drop(st);
                            place(&mut lend, offset, &buf[range]);
                            st = self.lock();
                        }
                    }
                }
                st.rxbuf = buf;
                st = self.flush_locked(st);
                continue;
            }
            if self.may_lead_multicast(&st, pid, mlead) {
                st = self.lead_multicast(st, pid, signal, &mut lend);
                continue;
            }
            // A follower. One that would lead asks for the token; if the
            // background thread holds it, blocked in a receive, it is woken
            // to hand the token over.
            if lead && !asked {
                if let Some(slot) = st.slots.get_mut(&pid) {
                    slot.wants_lead = true;
                }
                st.lead_waiters.push_back(pid);
            }
            if lead && matches!(st.reader, Reader::Background | Reader::Op) && st.reader_blocked && !st.kicked {
                st.kicked = true;
                st.wake_reader = true;
                st = self.flush_locked(st);
                continue;
            }
            if let Some(until) = spin {
                // Nothing for us yet (checked under the lock): clear a stale
                // flag, then spin on it without touching the lock; one that
                // would lead looks at the token again now and then.
                signal.ready.store(false, Ordering::Relaxed);
                drop(st);
                let check = if lead { (Instant::now() + SPIN_CHECK).min(until) } else { until };
                spin_on(signal, check, spinner.get_or_insert_with(net::Spin::cheap));
                if !lead {
                    if let Some(c) = signal.take() {
                        return Ok(c);
                    }
                }
                st = self.lock();
                continue;
            }
            if let Some(slot) = st.slots.get_mut(&pid) {
                slot.sleeping = true;
            }
            self.multicast_unattended(&mut st);
            st = signal.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = st.slots.get_mut(&pid) {
                slot.sleeping = false;
            }
        }
    }

    /// Does the queued work on the lent buffer (outside the lock), in order;
    /// the placed data's buffers go to `spent`, for [`keep_place_bufs`].
    fn do_work(&self, pid: Pid, work: &mut VecDeque<Work>, lend: &mut Lend<'_>, spent: &mut Vec<Vec<u8>>) {
        for w in work.drain(..) {
            match w {
                Work::Send { to, head, lent } => match lend {
                    Lend::Read(data) if lent.offset + lent.len <= data.len() => {
                        net::send_parts(&self.unicast, to, &head, &data[lent.offset..lent.offset + lent.len]);
                    }
                    Lend::File(window) => window.send(&self.unicast, to, &head, lent.offset, lent.len),
                    _ => tracing::debug!("a lent chunk for a call that lends no such data"),
                },
                Work::Place { offset, data } => {
                    place(lend, offset, &data);
                    spent.push(data);
                }
                Work::Fetch => match lend {
                    Lend::Read(data) => {
                        let _ = self.call(Some(pid), |e, now| {
                            e.lent_segment(now, pid, data);
                            Ok(())
                        });
                    }
                    _ => tracing::debug!("a fetch of lent bytes from a call that lends none"),
                },
            }
        }
    }

    /// `pid` stops waiting: if it held the reader token (or the token is
    /// free), the token goes to a process sleeping for it or, failing one, is
    /// left for the background thread (after [`GRACE`]).
    fn release(&self, st: &mut State, pid: Pid) {
        if let Some(slot) = st.slots.get_mut(&pid) {
            slot.sleeping = false;
            slot.wants_lead = false;
        }
        self.release_multicast(st, pid);
        if st.reader == Reader::Process(pid) {
            st.reader = Reader::None;
            st.releases += 1;
        }
        // Also when `pid` was woken to take a free token but leaves without
        // it: somebody must read the socket.
        if st.reader == Reader::None {
            self.promote(st);
        }
    }

    /// The token is free: wake one process sleeping for it, else the parked
    /// background thread.
    fn promote(&self, st: &mut State) {
        while let Some(p) = st.lead_waiters.pop_front() {
            if let Some(slot) = st.slots.get_mut(&p) {
                if slot.wants_lead {
                    slot.wants_lead = false;
                    if slot.sleeping {
                        slot.signal.cv.notify_one();
                    }
                    return;
                }
            }
        }
        if st.op_waiters > 0 && st.rmem_sleepers > 0 {
            self.rmem_cv.notify_all();
        }
        if st.bg_parked {
            self.bg_cv.notify_one();
        }
    }

    /// True if some process sleeps waiting for the token (drops stale entries).
    fn has_lead_waiter(&self, st: &mut State) -> bool {
        while let Some(p) = st.lead_waiters.front() {
            if st.slots.get(p).is_some_and(|s| s.wants_lead) {
                return true;
            }
            st.lead_waiters.pop_front();
        }
        false
    }

    /// Creates a local process and its slot.
    pub(crate) fn create_process(&self) -> Result<Pid> {
        let mut st = self.lock();
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let pid = st.engine.create_process()?;
        let signal = Arc::new(Signal::new());
        let slot = Slot {
            work: VecDeque::new(),
            signal,
            sleeping: false,
            wants_lead: false,
            last_net: None,
            last_mcast: None,
        };
        st.slots.insert(pid, slot);
        Ok(pid)
    }

    /// Destroys a local process (its pending exchanges are cleaned up by the engine).
    pub(crate) fn destroy_process(&self, pid: Pid) {
        let mut st = self.lock();
        if let Some(slot) = st.slots.remove(&pid) {
            slot.signal.cv.notify_all();
        }
        if st.stopped {
            return;
        }
        let now = self.now();
        if let Err(e) = st.engine.destroy_process(now, pid) {
            tracing::debug!(%pid, "destroy_process: {e}");
        }
        self.drain(&mut st, Origin::Call(None), now);
        self.flush(st);
    }

    /// The engine's counters.
    pub(crate) fn stats(&self) -> Stats {
        let st = self.lock();
        Stats {
            unicast_fanout: st.fanout,
            multicast_by_receiver: st.mcast.by_receiver,
            writes_throttled: st.throttled_calls,
            rmem_answers_from_segment: st.answers_from_segment,
            rmem_answers_in_place: st.answers_in_place,
            ..st.engine.stats()
        }
    }

    /// Stops the node: threads exit, blocked calls return `NodeStopped`.
    pub(crate) fn stop(&self) {
        let mut st = self.lock();
        if st.stopped {
            return;
        }
        st.stopped = true;
        for slot in st.slots.values() {
            slot.signal.cv.notify_all();
        }
        self.timer_cv.notify_all();
        self.ready_cv.notify_all();
        self.bg_cv.notify_all();
        self.rmem_cv.notify_all();
        for (cv, _) in st.record_waiters.values() {
            cv.notify_all();
        }
        self.sender_cv.notify_all();
        self.drained_cv.notify_all();
        self.mcast_cv.notify_all();
        drop(st);
        // Wake the readers at once rather than after their read timeout.
        self.send_wake();
        if let Some(b) = &self.bells {
            b.holder.ring();
            b.thread.ring();
        }
    }
}

/// Threads to signal, and whether each sleeps on its condition variable.
type Notify = Vec<(Arc<Signal>, bool)>;

thread_local! {
    /// An empty list with capacity, swapped with `State::notify` when a
    /// thread takes the signals to send out of the lock (no allocation per call).
    static NOTIFY_SPARE: std::cell::RefCell<Notify> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes the signals to send once the lock is released.
fn take_notify(st: &mut State) -> Notify {
    if st.notify.is_empty() {
        return Vec::new();
    }
    let spare = NOTIFY_SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()));
    std::mem::replace(&mut st.notify, spare)
}

/// Sets the flags (and wakes the sleepers) of `notify`, then keeps the
/// emptied list for this thread's next [`take_notify`].
fn signal_all(notify: &mut Notify) {
    if notify.capacity() == 0 {
        return;
    }
    for (s, sleeping) in notify.drain(..) {
        s.ready.store(true, Ordering::Release);
        if sleeping {
            s.cv.notify_one();
        }
    }
    NOTIFY_SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.capacity() < notify.capacity() {
            *s = std::mem::take(notify);
        }
    });
}

/// Spins until `signal`'s flag is set or `until` passes. While the thread
/// expected to answer last ran on our CPU, each round yields it the CPU.
/// A wait that keeps finding its answerer on its own CPU moves the thread
/// away (see [`apart`]).
fn spin_on(signal: &Signal, until: Instant, spinner: &mut net::Spin) {
    let mut rounds = 0u32;
    let mut together = None;
    while !signal.ready.load(Ordering::Acquire) {
        rounds = rounds.wrapping_add(1);
        if rounds % 16 == 0 && Instant::now() >= until {
            break;
        }
        let peer = signal.peer_cpu.load(Ordering::Relaxed);
        if peer != NO_CPU && peer == current_cpu() {
            together = Some(peer);
            std::thread::yield_now();
        } else {
            spinner.pause();
        }
    }
    if let Some(cpu) = together {
        apart::after_wait(true, cpu);
    } else if rounds > 0 {
        apart::after_wait(false, NO_CPU);
    }
}

/// Placed data's buffers kept for the next ones (see `State::place_bufs`).
const PLACE_BUFS: usize = 64;

/// Gives the buffers of placed data back to the node, up to [`PLACE_BUFS`]
/// of at most a datagram each (a larger one came from a local writer).
fn keep_place_bufs(st: &mut State, spent: &mut Vec<Vec<u8>>) {
    let room = PLACE_BUFS.saturating_sub(st.place_bufs.len());
    st.place_bufs.extend(spent.drain(..).filter(|b| b.capacity() <= net::RECV_BUFFER).take(room));
}

/// Copies `data` to `offset` of the lent buffer.
fn place(lend: &mut Lend<'_>, offset: usize, data: &[u8]) {
    match lend {
        Lend::Write(buf) => place_into(buf, offset, data),
        _ => tracing::debug!("lent data for a call that lends no such buffer"),
    }
}

/// Copies `data` to `offset` of `buf`, if it fits.
fn place_into(buf: &mut [u8], offset: usize, data: &[u8]) {
    match buf.get_mut(offset..offset.saturating_add(data.len())) {
        Some(to) => to.copy_from_slice(data),
        None => tracing::debug!("lent data beyond the lent buffer"),
    }
}

/// The timer thread: runs the engine's timers and releases held-back datagrams when due.
pub(crate) fn timer_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        let now = shared.now();
        let engine_next = st.engine.poll_timeout();
        let next = earliest(engine_next, st.faults.as_ref().and_then(Faults::next_release));
        match next {
            Some(t) if t <= now && now >= st.timer_floor => {
                st.timer_floor = now + TIMER_SLACK;
                if engine_next.is_some_and(|e| e <= now) {
                    st.engine.handle_timeout(now);
                }
                let State { faults, outq, .. } = &mut *st;
                if let Some(f) = faults {
                    f.release(now, outq);
                }
                st.timer_deadline = None;
                shared.drain(&mut st, Origin::Timer, now);
                st = shared.flush_locked(st);
            }
            Some(t) => {
                let t = t.max(st.timer_floor);
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

/// A sent batch's buffers go back to the engine, the emptied queue back to `spare`.
fn give_back(st: &mut State, mut batch: Outgoing) {
    // pop_front, not drain: a drain of one datagram cost 100 instructions (callgrind).
    while let Some((_, bytes)) = batch.pop_front() {
        st.engine.recycle(bytes);
    }
    if st.spare.capacity() < batch.capacity() {
        st.spare = batch;
    }
}

/// Bytes queued in `outq` and not yet taken by a sending thread.
fn unsent_bytes(st: &mut State) -> usize {
    let (counted, bytes) = st.outq_counted;
    let more: usize = st.outq.range(counted..).map(|(_, b)| b.len()).sum();
    st.outq_counted = (st.outq.len(), bytes + more);
    bytes + more
}

/// The sender thread: sends what [`Shared::call_deferred`] queued.
pub(crate) fn sender_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        if !st.send_kick {
            st = shared.sender_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        st.send_kick = false;
        st = shared.flush_locked(st);
    }
}

/// The background network thread: reads the unicast socket while no
/// process does — when the token has been free for [`GRACE`] — and hands the
/// token to a process that asks for it after each datagram.
pub(crate) fn net_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    let (mut seen_gen, mut seen_release) = (u64::MAX, u64::MAX);
    loop {
        if st.stopped {
            return;
        }
        match st.reader {
            Reader::None => {
                if st.releases != seen_release {
                    // Freed since we last looked: leave it a GRACE to a process.
                    seen_release = st.releases;
                    st = shared.bg_cv.wait_timeout(st, GRACE).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
                st.reader = Reader::Background;
                st.kicked = false;
                loop {
                    st = shared.read_one(st, None);
                    if st.stopped {
                        return;
                    }
                    if shared.has_lead_waiter(&mut st) || st.op_waiters > 0 {
                        st.reader = Reader::None;
                        st.releases += 1;
                        shared.promote(&mut st);
                        break;
                    }
                }
            }
            Reader::Process(_) | Reader::Background | Reader::Op => {
                if st.reader_gen == seen_gen {
                    // The same process has held the token for a whole GRACE: sleep until it lets go.
                    st.bg_parked = true;
                    st = shared.bg_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                    st.bg_parked = false;
                } else {
                    seen_gen = st.reader_gen;
                    st = shared.bg_cv.wait_timeout(st, GRACE).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// A limit counted from the precise time (`Shared::block`) never passes
    /// early only if the coarse clock is the same clock, never ahead of it.
    #[test]
    fn the_coarse_clock_is_never_ahead_of_the_precise_one() {
        let mut behind = 0u64;
        for _ in 0..100_000 {
            let coarse = super::coarse_now();
            let precise = super::precise_now();
            assert!(precise >= coarse, "precise {precise} < coarse {coarse}");
            behind = behind.max(precise - coarse);
        }
        // The same time base: a lag of ticks, never of seconds.
        assert!(behind < 1_000_000_000, "the clocks are {behind} ns apart");
    }
}
