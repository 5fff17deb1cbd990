//! The simulator: engines on virtual nodes, the virtual network between them,
//! the simulated application (servers, clients, name lookups), faults, and
//! the invariant checks wired to every step.

use crate::check::{self, fmt_time, Call, CallKind, Calls, Invariant, Violation};
use crate::history::{ForwardRec, History, ProcId, Receipt, ReqState, RequestRec, Span};
use crate::net::{LinkParams, Net, Queue};
use crate::pattern::{fill, Expect, Writer};
use crate::proto::{Reply, Request, Status};
use crate::report::Report;
use crate::scenario::{HostIds, Scenario};
use crate::workload::{self, Misuse, Step};
use crate::Options;

mod actors;
mod servers;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;
use vipc_engine::{
    Access, AuthKey, Completion, Config, Destination, Engine, Error, Event, HostId, HostIdConfig, Pid, Received, Scope,
    Segment, SendOptions, Time, Transmit,
};

/// T_r of every engine.
pub const RETRANSMIT: Duration = Duration::from_millis(20);
/// T_t of every engine.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// Slack on top of T_t for a blocked call: timer granularity, delays, watchdog period.
pub const MARGIN: Duration = Duration::from_millis(150);
/// After the last completion, how long the run continues before its final
/// checks: long enough for every alien and cached reply to expire.
const QUIET: Duration = Duration::from_secs(3);
/// The longest a run may continue after the workload stops, waiting for
/// outstanding calls (idempotent requests re-executed after lost replies can
/// take several rounds).
const MAX_DRAIN: Duration = Duration::from_secs(40);
/// How often the liveness watchdog looks at blocked calls.
const WATCHDOG: Duration = Duration::from_millis(50);
/// A logical host no node has: sends there must time out.
const BOGUS_HOST: HostId = 0x7ABC;

/// A datagram's hash, for the run fingerprint.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(bytes.len() as u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}

/// When a node's timer event must fire for its engine's next timeout
/// (engine time shifted by the node's `clock`), or None if one already
/// armed at or before then will do; records it in `timers`.
pub(crate) fn next_timer(
    engine: Option<&Engine>,
    clock: u64,
    now: Time,
    timers: &mut std::collections::BTreeSet<Time>,
) -> Option<Time> {
    let t = engine?.poll_timeout()?;
    let t = Time(t.0.saturating_sub(clock)).max(now);
    if timers.first().is_some_and(|&a| a <= t) {
        return None;
    }
    timers.insert(t);
    Some(t)
}

pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The key of keyed scenarios.
pub fn cluster_key() -> AuthKey {
    AuthKey::from_bytes(*b"vipc-sim cluster key, 32 bytes!!")
}

/// The virtual address of node `i`.
pub fn node_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16))
}

/// The engine configuration of node `node` in its incarnation `epoch` under `sc`.
pub fn engine_config(sc: &Scenario, seed: u64, node: usize, epoch: u32, host_id: HostIdConfig) -> Config {
    Config {
        host_id,
        retransmit: RETRANSMIT,
        timeout: TIMEOUT,
        max_packet: 1472,
        max_aliens: sc.max_aliens,
        buffer_limit: sc.buffer_limit,
        loopback_packet: sc.loopback_packet,
        key: sc.keyed.then(cluster_key),
        seed: mix(mix(seed, node as u64 + 1), epoch as u64 + 1),
        ..Config::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Server,
    Client,
    Lookup,
}

/// A server's work on one request.
#[derive(Clone, Debug)]
struct Job {
    rid: u64,
    client: Pid,
    /// Next step of the plan.
    step: usize,
    status: Status,
    /// Ranges this execution has certainly written.
    written: Vec<(u64, u64)>,
    /// Started the think time before replying.
    delayed: bool,
    /// When the current blocking move was made.
    call_started: Time,
    /// The move in flight uses a lent buffer (`move_to_lent`, `move_from_lent`).
    lent: bool,
    /// A MoveFrom from a client that is not awaiting our reply is in flight:
    /// it must fail with `NotAwaitingReply`.
    probe: Option<Pid>,
}

#[derive(Clone, Debug)]
enum Role {
    Server { cap: usize, job: Option<Job>, specific: Option<Pid> },
    Client { current: Option<u64> },
    Lookup { current: Option<LookupCall> },
}

/// A GetPid in progress: the name, scope, what is registered under the name
/// (pid and registering process) and when the lookup started.
type LookupCall = (String, Scope, Option<(Pid, ProcId, Scope)>, Time);

#[derive(Debug)]
struct Proc {
    node: usize,
    pid: Pid,
    role: Role,
}

struct Node {
    addr: SocketAddr,
    engine: Option<Engine>,
    /// Incremented at every crash and restart: stale deliveries and timers are ignored.
    epoch: u32,
    host_cfg: HostIdConfig,
    host: Option<HostId>,
    /// Times of queued timer events.
    timers: BTreeSet<Time>,
    /// This incarnation's clock: engine time = virtual time + offset (each
    /// machine's monotonic clock has its own epoch, reset at a restart).
    clock: u64,
    events: VecDeque<Event>,
}

enum Ev {
    Deliver { to: usize, to_epoch: u32, from: usize, from_epoch: u32, bytes: Vec<u8> },
    Timer { node: usize, epoch: u32 },
    Act { proc: ProcId },
    Spawn { node: usize, epoch: u32, kind: Kind },
    Start { node: usize },
    Destroy,
    Crash,
    Restart { node: usize },
    Cut { until: Time },
    Heal { id: u64, span: usize },
    Stop,
    Watchdog,
    End,
}

/// One simulated run.
pub struct Sim {
    seed: u64,
    sc: Scenario,
    opts: Options,
    now: Time,
    queue: Queue<Ev>,
    net: Net,
    rng: ChaCha8Rng,
    nodes: Vec<Node>,
    procs: BTreeMap<ProcId, Proc>,
    by_pid: BTreeMap<Pid, ProcId>,
    hist: History,
    calls: Calls,
    requests: BTreeMap<u64, RequestRec>,
    servers: Vec<Pid>,
    names: BTreeMap<String, (Pid, ProcId, Scope)>,
    /// Buffers lent to the engine by servers blocked in a lent move.
    lent: BTreeMap<Pid, Vec<u8>>,
    key: Option<AuthKey>,
    next_rid: u64,
    running: bool,
    begin: Time,
    stop_at: Time,
    last_completion: Time,
    squatted: Option<HostId>,
    /// The report so far.
    pub report: Report,
    violation: Option<Violation>,
}

impl Sim {
    /// Prepares a run of `scenario` under `seed`.
    pub fn new(seed: u64, sc: &Scenario, opts: &Options) -> Sim {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 1));
        let n = rng.gen_range(sc.min_nodes..=sc.max_nodes);
        let loss = if sc.loss > 0.0 { rng.gen_range(sc.loss / 2.0..=sc.loss) } else { 0.0 };
        let params = LinkParams {
            loss,
            duplicate: sc.duplicate,
            reorder: sc.reorder,
            reorder_delay: sc.reorder_delay,
            corrupt: sc.corrupt,
            ..LinkParams::default()
        };
        let alloc_time = match sc.host_ids {
            HostIds::Fixed => Duration::ZERO,
            HostIds::Allocate => Duration::from_millis(1500),
        };
        let begin = Time::ZERO + alloc_time;
        let stop_at = begin + sc.workload;
        let nodes = (0..n)
            .map(|i| Node {
                addr: node_addr(i),
                engine: None,
                epoch: 0,
                host_cfg: HostIdConfig::Fixed(i as HostId + 1),
                host: None,
                timers: BTreeSet::new(),
                clock: 0,
                events: VecDeque::new(),
            })
            .collect();
        let report = Report { seed, scenario: sc.name.to_string(), nodes: n, loss, ..Report::default() };
        Sim {
            seed,
            sc: sc.clone(),
            opts: opts.clone(),
            now: Time::ZERO,
            queue: Queue::default(),
            net: Net::new(mix(seed, 2), n, params),
            rng,
            nodes,
            procs: BTreeMap::new(),
            by_pid: BTreeMap::new(),
            hist: History { bogus_hosts: vec![BOGUS_HOST], ..History::default() },
            calls: Calls::default(),
            requests: BTreeMap::new(),
            servers: Vec::new(),
            names: BTreeMap::new(),
            lent: BTreeMap::new(),
            key: sc.keyed.then(cluster_key),
            next_rid: 1,
            running: true,
            begin,
            stop_at,
            last_completion: Time::ZERO,
            squatted: None,
            report,
            violation: None,
        }
    }

    /// Virtual time now.
    pub fn now(&self) -> Time {
        self.now
    }

    // ---------------------------------------------------------------- driver

    /// Runs to the end and performs the final checks.
    pub fn run(&mut self) -> Result<(), Violation> {
        let r = self.run_to_end();
        self.report.net = self.net.stats.clone();
        self.report.end = self.now;
        if let Err(v) = &r {
            self.trace(|| format!("VIOLATION {v}"));
        }
        r
    }

    fn run_to_end(&mut self) -> Result<(), Violation> {
        self.setup();
        while let Some((at, ev)) = self.queue.pop() {
            self.now = at;
            self.report.events += 1;
            if self.report.events > self.opts.max_events {
                return Err(self.violation_at(
                    Invariant::Budget,
                    format!("{} events processed without reaching the end of the run", self.opts.max_events),
                ));
            }
            if let Ev::End = ev {
                if self.ready_to_end() {
                    break;
                }
                continue;
            }
            self.handle(ev);
            if let Some(v) = self.violation.take() {
                return Err(v);
            }
        }
        self.final_checks()
    }

    /// At a scheduled end: stop if every call but idle receives has completed
    /// and all has been quiet for a while (so that state freed after T_t of
    /// silence is gone); otherwise look again later, up to a hard limit.
    fn ready_to_end(&mut self) -> bool {
        let busy = self.calls.busy();
        let quiet_at = self.last_completion + QUIET;
        if self.now >= self.stop_at + MAX_DRAIN || (!busy && self.now >= quiet_at) {
            return true;
        }
        let next = if busy { self.now + Duration::from_secs(1) } else { quiet_at };
        self.queue.push(next, Ev::End);
        false
    }

    fn violation_at(&self, invariant: Invariant, detail: String) -> Violation {
        Violation { invariant, at: self.now, detail }
    }

    fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    fn fail_if(&mut self, r: Result<(), Violation>) -> bool {
        match r {
            Ok(()) => false,
            Err(v) => {
                self.fail(v);
                true
            }
        }
    }

    fn trace(&self, f: impl FnOnce() -> String) {
        if self.opts.trace {
            eprintln!("[{}] {}", fmt_time(self.now), f());
        }
    }

    fn fingerprint(&mut self, words: &[u64]) {
        for &w in words {
            self.report.fingerprint = mix(self.report.fingerprint, w);
        }
    }

    fn setup(&mut self) {
        let n = self.nodes.len();
        if self.sc.host_ids == HostIds::Allocate {
            // Node 0 squats on the id node 1 would choose first, so node 1 must
            // hear a complaint and choose again.
            let probe = engine_config(&self.sc, self.seed, 1, 1, HostIdConfig::Allocate); // node 1, first incarnation
            let squat = probe_candidate(probe);
            self.squatted = squat;
            for (i, node) in self.nodes.iter_mut().enumerate() {
                node.host_cfg = match (i, squat) {
                    (0, Some(h)) => HostIdConfig::Fixed(h),
                    _ => HostIdConfig::Allocate,
                };
            }
            self.queue.push(Time::ZERO, Ev::Start { node: 0 });
            for i in 1..n {
                let at = Time::ZERO + Duration::from_micros(self.rng.gen_range(1000..100_000));
                self.queue.push(at, Ev::Start { node: i });
            }
        } else {
            for i in 0..n {
                let at = Time::ZERO + Duration::from_micros(self.rng.gen_range(0..2000));
                self.queue.push(at, Ev::Start { node: i });
            }
        }
        let begin = self.begin;
        let w = self.sc.workload.as_micros() as u64;
        if self.sc.destroy {
            for _ in 0..self.rng.gen_range(1..=self.sc.destroys.max(1)) {
                let at = begin + Duration::from_micros(self.rng.gen_range(0..w));
                self.queue.push(at, Ev::Destroy);
            }
        }
        if self.sc.partitions {
            for _ in 0..self.rng.gen_range(1..=3) {
                let at = begin + Duration::from_micros(self.rng.gen_range(0..w));
                let len = Duration::from_millis(self.rng.gen_range(50..2500));
                self.queue.push(at, Ev::Cut { until: (at + len).min(self.stop_at) });
            }
        }
        if self.sc.crashes {
            for _ in 0..self.rng.gen_range(1..=2) {
                let at = begin + Duration::from_micros(self.rng.gen_range(w / 10..w));
                self.queue.push(at, Ev::Crash);
            }
        }
        self.queue.push(self.stop_at, Ev::Stop);
        self.queue.push(self.stop_at + self.sc.drain, Ev::End);
        self.queue.push(Time::ZERO + WATCHDOG, Ev::Watchdog);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver { to, to_epoch, from, from_epoch, bytes } => {
                self.deliver(to, to_epoch, from, from_epoch, bytes)
            }
            Ev::Timer { node, epoch } => {
                if self.nodes[node].epoch != epoch || self.nodes[node].engine.is_none() {
                    return;
                }
                self.nodes[node].timers.remove(&self.now);
                let now = self.now;
                let local = Time(now.0 + self.nodes[node].clock);
                let due = self.nodes[node].engine.as_ref().and_then(|e| e.poll_timeout()).is_some_and(|t| t <= local);
                if due {
                    self.with_engine(node, |e, now| e.handle_timeout(now));
                }
                self.settle(node);
            }
            Ev::Act { proc } => {
                if let Some(node) = self.procs.get(&proc).map(|p| p.node) {
                    self.act(proc);
                    self.settle(node);
                }
            }
            Ev::Spawn { node, epoch, kind } => {
                if self.nodes[node].epoch == epoch && self.nodes[node].engine.is_some() {
                    self.spawn(node, kind);
                    self.settle(node);
                }
            }
            Ev::Start { node } => self.start_node(node),
            Ev::Destroy => self.destroy_random(),
            Ev::Crash => self.crash_random(),
            Ev::Restart { node } => self.start_node(node),
            Ev::Cut { until } => self.cut(until),
            Ev::Heal { id, span } => {
                self.net.heal(id);
                self.hist.cuts[span].1.to.get_or_insert(self.now);
                self.trace(|| format!("partition {id} healed"));
            }
            Ev::Stop => {
                self.trace(|| "workload stops; partitions heal".to_string());
                self.running = false;
                self.net.heal_all();
                let now = self.now;
                for (_, s) in self.hist.cuts.iter_mut() {
                    s.to.get_or_insert(now);
                }
            }
            Ev::End => {}
            Ev::Watchdog => {
                if let Some(v) = self.calls.overdue(self.now, TIMEOUT + MARGIN) {
                    self.fail(v);
                }
                self.queue.push(self.now + WATCHDOG, Ev::Watchdog);
            }
        }
    }

    // ------------------------------------------------------------- engines

    /// Calls into node `node`'s engine, then collects its datagrams and events.
    fn with_engine<R>(&mut self, node: usize, f: impl FnOnce(&mut Engine, Time) -> R) -> R {
        let now = Time(self.now.0 + self.nodes[node].clock);
        let e = self.nodes[node].engine.as_mut().expect("engine of a live node");
        let r = f(e, now);
        self.collect(node);
        r
    }

    fn collect(&mut self, node: usize) {
        loop {
            let Some(e) = self.nodes[node].engine.as_mut() else { return };
            let Some(t) = e.poll_transmit() else { break };
            self.transmit(node, t);
        }
        let n = &mut self.nodes[node];
        let Some(e) = n.engine.as_mut() else { return };
        while let Some(ev) = e.poll_event() {
            n.events.push_back(ev);
        }
    }

    /// Dispatches every queued event of `node` (which may cause more), then arms its timer.
    fn settle(&mut self, node: usize) {
        loop {
            self.collect(node);
            let Some(ev) = self.nodes[node].events.pop_front() else { break };
            self.dispatch(node, ev);
            if self.violation.is_some() {
                return;
            }
        }
        let epoch = self.nodes[node].epoch;
        let n = &mut self.nodes[node];
        if let Some(t) = next_timer(n.engine.as_ref(), n.clock, self.now, &mut n.timers) {
            self.queue.push(t, Ev::Timer { node, epoch });
        }
    }

    fn transmit(&mut self, from: usize, t: Transmit) {
        let targets: Vec<usize> = match t.to {
            Destination::Addr(a) => self.nodes.iter().position(|n| n.addr == a).into_iter().collect(),
            // The unicast runs use no groups; a group Send would go to every node.
            Destination::Broadcast | Destination::Group(_) => (0..self.nodes.len()).filter(|&i| i != from).collect(),
        };
        if self.opts.trace {
            let to = match t.to {
                Destination::Addr(a) => format!("{}", a.port() as usize - 7000),
                Destination::Broadcast | Destination::Group(_) => "*".to_string(),
            };
            self.trace(|| {
                format!("n{from} -> n{to} {}{}", describe(&t.bytes, None), if t.lent.is_some() { " +lent" } else { "" })
            });
        }
        let mut bytes = t.bytes;
        if let Some(l) = t.lent {
            // The datagram is the header the engine built, then the lent bytes.
            match self.lent.get(&l.pid).and_then(|b| b.get(l.offset..l.offset.checked_add(l.len)?)) {
                Some(data) => bytes.extend_from_slice(data),
                None => {
                    let v = self.violation_at(
                        Invariant::DataIntact,
                        format!("node {from} transmits {l:?} but {} lends no such bytes now", l.pid),
                    );
                    return self.fail(v);
                }
            }
        }
        let from_epoch = self.nodes[from].epoch;
        for (to, at) in self.net.route(self.now, from, &targets, bytes.len()) {
            if self.nodes[to].engine.is_none() {
                continue;
            }
            let to_epoch = self.nodes[to].epoch;
            self.queue.push(at, Ev::Deliver { to, to_epoch, from, from_epoch, bytes: bytes.clone() });
        }
        if let Some(e) = self.nodes[from].engine.as_mut() {
            e.recycle(bytes);
        }
    }

    fn deliver(&mut self, to: usize, to_epoch: u32, from: usize, from_epoch: u32, mut bytes: Vec<u8>) {
        let gone = |n: &Node, e: u32| n.epoch != e || n.engine.is_none();
        if gone(&self.nodes[to], to_epoch) || gone(&self.nodes[from], from_epoch) {
            self.report.vanished += 1;
            return;
        }
        self.report.delivered += 1;
        if self.net.corrupt(&mut bytes) {
            self.trace(|| "  (this datagram was damaged on purpose)".to_string());
        }
        let digest = digest(&bytes);
        self.fingerprint(&[self.now.0, from as u64, to as u64, digest]);
        self.trace(|| format!("n{from} => n{to} {}", describe(&bytes, self.key.as_ref())));
        if let Ok(p) = vipc_wire::parse(&bytes, self.key.as_ref()) {
            if p.header.ptype == vipc_wire::PacketType::HostComplaint {
                self.report.complaints += 1;
            }
            if let Some(&proc) = self.by_pid.get(&p.header.dst) {
                self.calls.progress(proc, self.now);
            }
        }
        let addr = self.nodes[from].addr;
        self.with_engine(to, |e, now| e.handle_datagram(now, addr, &bytes));
        // Bytes for a buffer lent to a MoveFrom go there before the next datagram.
        while let Some((l, range)) = self.nodes[to].engine.as_mut().and_then(|e| e.poll_placement()) {
            let src = bytes.get(range.clone());
            let dst = self.lent.get_mut(&l.pid).and_then(|b| b.get_mut(l.offset..l.offset.checked_add(l.len)?));
            match (src, dst) {
                (Some(s), Some(d)) if s.len() == d.len() => d.copy_from_slice(s),
                _ => {
                    let v = self.violation_at(
                        Invariant::DataIntact,
                        format!(
                            "node {to} places bytes {range:?} of a {}-byte datagram at {l:?}, which {} does not lend",
                            bytes.len(),
                            l.pid
                        ),
                    );
                    return self.fail(v);
                }
            }
        }
        self.settle(to);
    }

    fn dispatch(&mut self, node: usize, ev: Event) {
        match ev {
            Event::Wake { pid, completion } => {
                self.fingerprint(&[self.now.0, pid.0 as u64]);
                self.trace(|| format!("n{node} wake {pid}: {}", short(&completion)));
                let Some(&proc) = self.by_pid.get(&pid) else {
                    let dead = self.hist.procs.iter().any(|l| l.pid == pid && l.node == node);
                    let what = if dead { "a destroyed process" } else { "not a process of this node" };
                    let detail = format!("{pid} ({what}) was woken with {}", short(&completion));
                    return self.fail(self.violation_at(Invariant::OneCompletion, detail));
                };
                self.last_completion = self.now;
                match self.calls.complete(self.now, proc, pid, &completion) {
                    Ok(call) => self.on_completion(proc, call, completion),
                    Err(v) => self.fail(v),
                }
            }
            Event::HostReady(h) => self.host_ready(node, h),
            Event::HostUp { host, addr } => self.trace(|| format!("n{node} sees host {host:#x} up at {addr}")),
            Event::GroupJoined(_) | Event::GroupLeft(_) | Event::MemDone(_) | Event::MemNotify(_) => {}
            // The simulated processes never lend a write buffer.
            Event::Place { pid, .. } => {
                let v = self.violation_at(Invariant::DataIntact, format!("{pid} lent no buffer but got a placement"));
                self.fail(v)
            }
            Event::HostDown(host) => self.trace(|| format!("n{node} declares host {host:#x} down")),
            Event::HostConflict { host, addr } => {
                let v = self.violation_at(
                    Invariant::HostIds,
                    format!("node {node} reports a conflict for host {host:#x} with {addr}"),
                );
                self.fail(v)
            }
            Event::VersionMismatch { addr, version } => {
                let v =
                    self.violation_at(Invariant::HostIds, format!("node {node} reports version {version} at {addr}"));
                self.fail(v)
            }
        }
    }

    fn start_node(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.epoch += 1;
        n.host = None;
        n.timers.clear();
        n.events.clear();
        let cfg = engine_config(&self.sc, self.seed, node, n.epoch, n.host_cfg);
        n.clock = self.rng.gen_range(0..1u64 << 50);
        n.engine = Some(Engine::new(cfg, Time(self.now.0 + n.clock)));
        self.net.reset_egress(node, self.now);
        let now = self.now;
        for (n, s) in self.hist.outages.iter_mut() {
            if *n == node {
                s.to.get_or_insert(now);
            }
        }
        self.trace(|| format!("node {node} starts (incarnation {})", self.nodes[node].epoch));
        self.settle(node);
    }

    fn host_ready(&mut self, node: usize, h: HostId) {
        self.trace(|| format!("node {node} has host id {h:#x}"));
        if let Some(other) = (0..self.nodes.len())
            .find(|&i| i != node && self.nodes[i].engine.is_some() && self.nodes[i].host == Some(h))
        {
            let v = self
                .violation_at(Invariant::HostIds, format!("nodes {other} and {node} both hold logical host {h:#x}"));
            return self.fail(v);
        }
        if node == 1 && self.squatted == Some(h) {
            let v =
                self.violation_at(Invariant::HostIds, format!("node 1 took host {h:#x}, which node 0 already holds"));
            return self.fail(v);
        }
        self.nodes[node].host = Some(h);
        let epoch = self.nodes[node].epoch;
        let servers = self.rng.gen_range(1..=2);
        let clients = self.rng.gen_range(1..=self.sc.max_clients);
        let lookups = self.rng.gen_range(0..=1);
        for (kind, count) in [(Kind::Server, servers), (Kind::Client, clients), (Kind::Lookup, lookups)] {
            for _ in 0..count {
                self.queue.push(self.now, Ev::Spawn { node, epoch, kind });
            }
        }
    }

    // ------------------------------------------------------------ processes

    fn spawn(&mut self, node: usize, kind: Kind) {
        let pid = loop {
            let pid = match self.with_engine(node, |e, _| e.create_process()) {
                Ok(p) => p,
                Err(e) => {
                    let v = self
                        .violation_at(Invariant::Success, format!("create_process on ready node {node} failed: {e}"));
                    return self.fail(v);
                }
            };
            // Pid hygiene: after a restart the node hands out its old pids again.
            // A client holding a pid that clients know as a server's would be
            // sent requests it never receives (an application deadlock, not an
            // engine fault), so such a pid is destroyed at once and skipped.
            if kind == Kind::Server || !self.servers.contains(&pid) {
                break pid;
            }
            self.trace(|| format!("n{node} skips former server pid {pid}"));
            let id = self.hist.born(pid, node, self.now);
            self.hist.died(id, self.now);
            if let Err(e) = self.with_engine(node, |e, now| e.destroy_process(now, pid)) {
                let v = self.violation_at(Invariant::Success, format!("destroy_process({pid}) failed: {e}"));
                return self.fail(v);
            }
        };
        let id = self.hist.born(pid, node, self.now);
        self.by_pid.insert(pid, id);
        self.trace(|| format!("n{node} spawn {kind:?} {pid}"));
        let role = match kind {
            Kind::Server => {
                let cap = *[0usize, 256, 4096, 65536].choose(&mut self.rng).expect("non-empty");
                Role::Server { cap, job: None, specific: None }
            }
            Kind::Client => Role::Client { current: None },
            Kind::Lookup => Role::Lookup { current: None },
        };
        self.procs.insert(id, Proc { node, pid, role });
        match kind {
            Kind::Server => {
                let name = servers::server_name(pid);
                let scope = match self.rng.gen_range(0..10) {
                    0..=5 => Scope::Any,
                    6 | 7 => Scope::Local,
                    _ => Scope::Remote,
                };
                let r = self.with_engine(node, |e, _| e.set_pid(name.as_bytes(), pid, scope));
                if let Err(e) = r {
                    let v = self.violation_at(Invariant::Naming, format!("set_pid({name}) failed: {e}"));
                    return self.fail(v);
                }
                self.names.insert(name, (pid, id, scope));
                self.servers.push(pid);
                self.server_receive(id);
            }
            Kind::Client | Kind::Lookup => {
                let at = self.now + Duration::from_micros(self.rng.gen_range(0..5000));
                self.queue.push(at, Ev::Act { proc: id });
            }
        }
    }

    /// Removes a process that was destroyed or whose node crashed.
    fn bury(&mut self, id: ProcId) {
        let Some(p) = self.procs.remove(&id) else { return };
        self.by_pid.remove(&p.pid);
        self.lent.remove(&p.pid);
        self.hist.died(id, self.now);
        self.calls.abandon(id, p.pid);
        if let Role::Client { current: Some(rid) } = p.role {
            if let Some(r) = self.requests.get_mut(&rid) {
                if r.pending() {
                    r.state = ReqState::Abandoned(self.now);
                }
            }
        }
    }

    fn destroy_random(&mut self) {
        if !self.running {
            return;
        }
        let live: Vec<ProcId> = self.procs.keys().copied().collect();
        let Some(&id) = live.choose(&mut self.rng) else { return };
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let kind = match self.procs[&id].role {
            Role::Server { .. } => Kind::Server,
            Role::Client { .. } => Kind::Client,
            Role::Lookup { .. } => Kind::Lookup,
        };
        self.trace(|| format!("n{node} destroy {kind:?} {pid}"));
        self.bury(id);
        self.report.destroyed += 1;
        if let Err(e) = self.with_engine(node, |e, now| e.destroy_process(now, pid)) {
            let v =
                self.violation_at(Invariant::Success, format!("destroy_process({pid}) of a live process failed: {e}"));
            return self.fail(v);
        }
        let epoch = self.nodes[node].epoch;
        let at = self.now + Duration::from_millis(self.rng.gen_range(10..200));
        self.queue.push(at, Ev::Spawn { node, epoch, kind });
        self.settle(node);
    }

    fn crash_random(&mut self) {
        if !self.running {
            return;
        }
        let up: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.nodes[i].engine.is_some()).collect();
        if up.len() <= 2 {
            return;
        }
        let node = *up.choose(&mut self.rng).expect("non-empty");
        self.trace(|| format!("node {node} CRASHES"));
        self.report.crashes += 1;
        let n = &mut self.nodes[node];
        n.engine = None;
        n.epoch += 1;
        n.events.clear();
        n.timers.clear();
        self.hist.outages.push((node, Span { from: self.now, to: None }));
        let victims: Vec<ProcId> = self.procs.iter().filter(|(_, p)| p.node == node).map(|(&id, _)| id).collect();
        for id in victims {
            self.bury(id);
        }
        if self.sc.restarts && self.rng.gen_bool(0.8) {
            let at = self.now + Duration::from_millis(self.rng.gen_range(100..2500));
            if at < self.stop_at + Duration::from_secs(1) {
                self.queue.push(at, Ev::Restart { node });
            }
        }
    }

    fn cut(&mut self, until: Time) {
        if !self.running || until <= self.now {
            return;
        }
        let n = self.nodes.len();
        let mut side: Vec<usize> = (0..n).collect();
        side.shuffle(&mut self.rng);
        let k = self.rng.gen_range(1..n);
        let (a, b) = side.split_at(k);
        let pairs: Vec<(usize, usize)> = if self.rng.gen_bool(0.3) {
            vec![(a[0], b[0])]
        } else {
            a.iter().flat_map(|&x| b.iter().map(move |&y| (x, y))).collect()
        };
        // The history records undirected pairs: a one-way cut disturbs both ends.
        let norm: Vec<(usize, usize)> = pairs.iter().map(|&(x, y)| (x.min(y), x.max(y))).collect();
        let one_way = self.rng.gen_bool(0.3);
        let id = if one_way { self.net.cut_links(&pairs) } else { self.net.cut(&pairs) };
        self.trace(|| {
            format!("partition {id} cuts {pairs:?}{} until {}", if one_way { " one way" } else { "" }, fmt_time(until))
        });
        self.hist.cuts.push((norm, Span { from: self.now, to: None }));
        self.report.partitions += 1;
        let span = self.hist.cuts.len() - 1;
        self.queue.push(until, Ev::Heal { id, span });
    }

    // ---------------------------------------------------------------- the end

    fn final_checks(&mut self) -> Result<(), Violation> {
        self.calls.leftovers(self.now)?;
        for i in 0..self.nodes.len() {
            let Some(e) = self.nodes[i].engine.as_ref() else { continue };
            self.report.mac_failures += e.stats().mac_failures;
            let live = self.procs.values().filter(|p| p.node == i).count() as u64;
            check::check_gauges(self.now, i, &e.stats(), live)?;
        }
        let hosts: Vec<HostId> = self.nodes.iter().filter(|n| n.engine.is_some()).filter_map(|n| n.host).collect();
        let distinct: BTreeSet<HostId> = hosts.iter().copied().collect();
        if distinct.len() != hosts.len() {
            return Err(self.violation_at(Invariant::HostIds, format!("host ids at the end: {hosts:x?}")));
        }
        if let Some(i) = self.nodes.iter().position(|n| n.engine.is_some() && n.host.is_none()) {
            return Err(self.violation_at(Invariant::HostIds, format!("node {i} never got a host id")));
        }
        self.report.net = self.net.stats.clone();
        Ok(())
    }
}

/// Runs an allocating engine alone until it settles on a host id.
fn probe_candidate(cfg: Config) -> Option<HostId> {
    let mut e = Engine::new(cfg, Time::ZERO);
    for _ in 0..10_000 {
        while e.poll_transmit().is_some() {}
        while let Some(ev) = e.poll_event() {
            if let Event::HostReady(h) = ev {
                return Some(h);
            }
        }
        let t = e.poll_timeout()?;
        e.handle_timeout(t);
    }
    None
}

fn short(c: &Completion) -> String {
    match c {
        Completion::Send(Ok(o)) => format!(
            "send ok (replier {}, reply {:?}, segment {:?})",
            o.replier,
            Reply::decode(&o.reply),
            o.segment.as_ref().map(|s| s.data.len())
        ),
        Completion::Receive(Ok(m)) => format!(
            "received {:?} from {} via {} ({} appended of {})",
            Request::decode(&m.msg),
            m.from,
            m.forwarder,
            m.segment.len(),
            m.segment_size
        ),
        Completion::Move(Ok(d)) => format!("move ok ({} bytes)", d.len()),
        other => format!("{other:?}"),
    }
}

/// One line describing a datagram, for traces.
pub fn describe(bytes: &[u8], key: Option<&AuthKey>) -> String {
    match vipc_wire::parse(bytes, key) {
        Ok(p) => {
            let h = p.header;
            format!(
                "{} seq={} {}->{} fwd={} flags={:#x} total={} la={} ra={} data={}",
                h.ptype.name(),
                h.seq,
                h.src,
                h.dst,
                h.fwd,
                h.flags.0,
                h.total_len,
                h.local_addr,
                h.remote_addr,
                p.data.len()
            )
        }
        Err(e) => format!("unparsable datagram of {} bytes: {e}", bytes.len()),
    }
}
