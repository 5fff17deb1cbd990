//! The runtime core: the engine behind one lock, draining it — datagrams
//! to send, completions to deliver, threads to wake — and feeding it what
//! the socket brings. See [`crate::Node`] for the whole picture; the parts
//! live in the submodules: the slots where processes wait ([`slot`]),
//! blocking calls and the reader token ([`wait`]), sending ([`outgoing`]),
//! remote-memory waits ([`memwait`]), the clocks ([`clock`]) and the
//! background threads ([`threads`]).

use crate::faults::Faults;
use crate::gso::{self, Part, Run};
use crate::net::{self, GroupAddrs};
use crate::{Error, Result};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vipc_engine::{Completion, Destination, Engine, Event, HostId, Pid, SegmentId, Stats, Time};

mod apart;
mod clock;
mod inplace;
mod mcast;
mod memberships;
mod memwait;
mod outgoing;
mod slot;
mod threads;
mod wait;
use clock::{coarse_now, earliest, precise_now};
pub(crate) use mcast::{multicast_loop, set_up as mcast_set_up};
pub(crate) use outgoing::sender_loop;
pub(crate) use slot::Lend;
use slot::{Notify, Signal, Slot, Slots, Work};
pub(crate) use threads::{net_loop, timer_loop};

/// After a process gives the reader token up with no other process asking
/// for it, the background network thread leaves it this long for a process
/// to take back (a server between two Receives) before reading the socket itself.
pub(crate) const GRACE: Duration = Duration::from_millis(2);

/// Datagrams ready to go out, in the order the engine produced them.
pub(crate) type Outgoing = VecDeque<(SocketAddr, Vec<u8>)>;

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

/// Everything under the node's lock.
pub(crate) struct State {
    pub(crate) engine: Engine,
    slots: Slots,
    pub(crate) stopped: bool,
    faults: Option<Faults>,
    /// The deadline the timer thread sleeps towards (None: no timer armed).
    timer_deadline: Option<Time>,
    /// The timer thread does not run again before this (see [`threads::TIMER_SLACK`]).
    timer_floor: Time,
    pub(crate) ready: Option<HostId>,
    pub(crate) conflict: Option<(HostId, SocketAddr)>,
    /// Log host conflicts (false while the start-up of a fixed-id node
    /// returns them as an error instead).
    pub(crate) log_conflicts: bool,
    /// Datagrams drained from the engine and not yet sent.
    outq: Outgoing,
    /// How many of `outq`'s datagrams, and bytes, have been counted towards
    /// [`outgoing::SEND_QUEUE_LIMIT`] (the queue only grows at its back until it is
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
    pub(crate) reader: Reader,
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
    /// When the token was last given up.
    released_at: Instant,
    /// Counts the times a process took the token (lets the background thread see change).
    reader_gen: u64,
    /// Processes sleeping until the token is free (entries whose slot no longer `wants_lead` are stale).
    pub(crate) lead_waiters: VecDeque<Pid>,
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
    pub(crate) rxbuf: net::RecvBuf,
    /// Where a receive in place saves the bytes it lands on (with the token too).
    rxsave: Vec<u8>,
    /// Who reads the multicast socket (see [`mcast`]).
    mcast: mcast::Token,
    /// Group multicast addresses joined, with the number of local groups
    /// mapped to each (distinct groups may share one).
    joined: memberships::Memberships,
    /// Unicast copies sent in place of multicast ([`Stats::unicast_fanout`]).
    fanout: u64,
    /// Datagrams from our own addresses, skipped ([`Stats::own_datagrams`]).
    own_datagrams: u64,
    /// Receives that held several datagrams ([`Stats::runs_received`]).
    pub(crate) runs_received: u64,
    /// Split read answers being collected into runs (kept for its capacity).
    splits: Vec<vipc_engine::Transmit>,
    /// Buffers of placed data, kept for the next datagram read for another
    /// thread's lent buffer (a fresh 64 KiB allocation costs page faults).
    place_bufs: Vec<Vec<u8>>,
    /// Threads in `ExportedSegment::wait_record`, by segment: the condition
    /// variable they sleep on and how many they are. A record wakes only
    /// the waiters of its own segment, not every remote-memory waiter.
    pub(crate) record_waiters: HashMap<SegmentId, (Arc<Condvar>, usize)>,
}

impl State {
    /// The token is free: counted and timed for the background thread.
    fn token_given_up(&mut self) {
        self.reader = Reader::None;
        self.releases += 1;
        self.released_at = Instant::now();
    }
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
    /// Throttled fire-and-forget callers sleep on it (see [`outgoing::SEND_QUEUE_LIMIT`]),
    /// and writers waiting for their turn to send ([`Shared::send_from_buffer`]).
    drained_cv: Condvar,
    /// The multicast thread sleeps on it while a process holds the multicast token.
    mcast_cv: Condvar,
    pub(crate) unicast: UdpSocket,
    /// What UDP GSO may do on `unicast`.
    pub(crate) gso: crate::gso::Gso,
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
    /// Outgoing data may be sent straight from a caller's buffer (see [`Shared::lends`]).
    lends: bool,
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
        let lends = !p.keyed && p.faults.is_none();
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
                released_at: Instant::now(),
                reader_gen: 0,
                lead_waiters: VecDeque::new(),
                op_waiters: 0,
                rmem_sleepers: 0,
                loan_waiters: 0,
                bg_parked: false,
                send_kick: false,
                kicked: false,
                rxbuf: net::RecvBuf::new(),
                rxsave: Vec::new(),
                mcast: mcast::Token::default(),
                joined: memberships::Memberships::default(),
                fanout: 0,
                own_datagrams: 0,
                runs_received: 0,
                splits: Vec::new(),
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
            gso: crate::gso::Gso::new(),
            multicast: p.multicast,
            targets: p.targets,
            peers: p.peers,
            groups: p.groups,
            own: p.own,
            local: p.local,
            epoch: coarse_now(),
            poll_spin: p.poll_spin.filter(|d| !d.is_zero()),
            lends,
        }
    }

    /// Whether data a caller lends may leave straight from its buffer, by
    /// the lending thread: not with a cluster key (the MAC needs the data in
    /// the engine), nor with fault injection, which must see every datagram
    /// (lent MoveTo chunks went out unharmed by `--loss`).
    pub(crate) fn lends(&self) -> bool {
        self.lends
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
        let mut splits = std::mem::take(&mut st.splits);
        while let Some(mut t) = st.engine.poll_transmit_split() {
            if t.segment.is_some() {
                if self.may_send_split_now(st, &t) {
                    splits.push(t); // sent together, straight from the segment
                    continue;
                }
                if !st.engine.join(&mut t) {
                    continue; // its segment is gone
                }
            }
            // What came before goes first.
            self.send_splits(st, &mut splits);
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
                // No multicast: unicast fan-out to the static peers and the
                // alive hosts, one copy per address (rows that share one —
                // forged announcements — must not multiply the traffic).
                (Destination::Broadcast | Destination::Group(_), None) => {
                    let mut sent: HashSet<SocketAddr> = self.own.iter().copied().collect();
                    let targets = self.peers.iter().copied().chain(engine.alive_addrs());
                    for a in targets.filter(|a| sent.insert(*a)) {
                        *fanout += 1;
                        push(a, t.bytes.clone());
                    }
                }
            }
        }
        self.send_splits(st, &mut splits);
        st.splits = splits;
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
                            "logical host {host:#06x} is also claimed by the node at {addr}: check the configuration"
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

    /// True if a split read answer ([`vipc_engine::Transmit::segment`]) may
    /// be sent straight from its segment, with the lock held (the bytes are
    /// the engine's): it would be next on the wire anyway (nobody else
    /// sending, nothing queued) and there is no fault injection.
    fn may_send_split_now(&self, st: &State, t: &vipc_engine::Transmit) -> bool {
        matches!(t.to, Destination::Addr(_)) && !st.sending && st.outq.is_empty() && st.faults.is_none()
    }

    /// Sends the split read answers `splits` straight from their segments,
    /// in runs ([`crate::gso`]), never blocking: from the first one a full
    /// socket buffer refuses on, they are joined and queued, in order. An
    /// answer whose segment is gone is dropped.
    fn send_splits(&self, st: &mut State, splits: &mut Vec<vipc_engine::Transmit>) {
        if splits.is_empty() {
            return;
        }
        let sock = &self.unicast;
        if let [vipc_engine::Transmit { to: Destination::Addr(to), segment: Some(s), bytes, .. }] = &splits[..] {
            // One answer (a read of up to 64 KiB): no run to set up. Refused, the run below queues it.
            let Some(data) = st.engine.segment_slice(s) else {
                splits.clear(); // its segment is gone: dropped
                return;
            };
            if gso::try_send(sock, *to, &[Part::new(&bytes[..]), Part::new(data)]) {
                st.answers_from_segment += 1;
                splits.clear();
                return;
            }
        }
        let mut unsent = Vec::new();
        let mut run = Run::new(sock, &self.gso, |to, i: usize, parts| {
            let sent = unsent.is_empty() && gso::try_send(sock, to, parts);
            if !sent {
                unsent.push(i);
            }
            sent
        })
        .nonblocking();
        let mut pushed = 0;
        for (i, t) in splits.iter().enumerate() {
            let (Destination::Addr(to), Some(s)) = (t.to, t.segment) else { continue };
            if let Some(data) = st.engine.segment_slice(&s) {
                run.push(to, Part::new(&t.bytes[..]), Part::new(data), i);
                pushed += 1;
            }
        }
        run.finish();
        st.answers_from_segment += (pushed - unsent.len()) as u64;
        let mut splits = splits.drain(..).enumerate();
        for i in unsent {
            let Some((_, mut t)) = splits.find(|(j, _)| *j == i) else { continue };
            if let (true, Destination::Addr(to)) = (st.engine.join(&mut t), t.to) {
                st.outq.push_back((to, t.bytes));
            }
        }
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
        let result = if join {
            st.joined.join(sock, addr, &groups.interface)
        } else {
            st.joined.leave(sock, addr, &groups.interface)
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
        slot.signal.done().completion = Some(completion);
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

    /// Whether a thread of `pid` is asleep, or blocked reading a socket, in a
    /// wait: then a call by `pid` that completes it was made by another of
    /// its threads (a Process used from two threads: one waits in Receive,
    /// the other forwards a message to the process itself), which must wake
    /// the waiting one (it slept on, past any deadline).
    fn waits_elsewhere(&self, st: &State, pid: Pid) -> bool {
        st.slots.get(&pid).is_some_and(|s| s.sleeping)
            || st.reader == Reader::Process(pid) && st.reader_blocked
            || st.mcast.holder == Some(pid) && st.mcast.holder_blocked
    }

    /// Tells the thread of `pid` that its slot has something for it, unless
    /// that thread is the `actor` at work: a thread blocked reading the socket
    /// gets a datagram; otherwise, once the lock is released, its flag is set
    /// (a spinning thread sees it) and, if it sleeps, it is notified.
    fn wake(&self, st: &mut State, pid: Pid, actor: Option<Pid>) {
        if actor == Some(pid) && !self.waits_elsewhere(st, pid) {
            return;
        }
        let Some(slot) = st.slots.get(&pid) else { return };
        if self.poll_spin.is_some() {
            // The actor will wait for an answer, most likely from `pid`.
            let cpu = slot.signal.cpu.load(Ordering::Relaxed);
            if let Some(a) = actor.filter(|&a| a != pid).and_then(|a| st.slots.get(&a)) {
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

    /// [`Shared::feed`] of every datagram of one receive (several if GRO
    /// coalesced them, counted as a run); `placed` gets the data of each one
    /// that belong in the reader's lent buffer, with the lock released.
    pub(crate) fn feed_received<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        from: SocketAddr,
        received: &[u8],
        origin: Origin,
        mut placed: impl FnMut(usize, &[u8]),
    ) -> MutexGuard<'s, State> {
        let pieces = vipc_wire::coalesced::datagrams(received);
        st.runs_received += u64::from(pieces.piece_size() < received.len());
        for d in pieces {
            if let Some((offset, range)) = self.feed(&mut st, from, d, origin) {
                drop(st);
                placed(offset, &d[range]);
                st = self.lock();
            }
        }
        st
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
            st.own_datagrams += 1;
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
        // A process whose call unwound (a panic) while it held the reader
        // token gives it back, with a receive buffer in place of the one it
        // took along: or nobody would read the socket again.
        if st.reader == Reader::Process(pid) && st.rxbuf.is_empty() {
            st.rxbuf = net::RecvBuf::new();
        }
        self.release(&mut st, pid);
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
            own_datagrams: st.own_datagrams,
            runs_sent: self.gso.runs_sent(),
            runs_received: st.runs_received,
            multicast_by_receiver: st.mcast.by_receiver,
            writes_throttled: st.throttled_calls,
            rmem_answers_from_segment: st.answers_from_segment,
            rmem_answers_in_place: st.answers_in_place,
            ..st.engine.stats()
        }
    }

    /// Stops the node: threads exit, blocked calls return `NodeStopped`.
    pub(crate) fn stop(&self) {
        // Goodbye first, while the sockets still send: the other hosts drop
        // this one from their alive-host tables now (best effort).
        let _ = self.call(None, |e, _| {
            e.leave();
            Ok(())
        });
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
