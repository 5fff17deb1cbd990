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

fn mix(a: u64, b: u64) -> u64 {
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
        let Some(t) = self.nodes[node].engine.as_ref().and_then(|e| e.poll_timeout()) else { return };
        let t = Time(t.0.saturating_sub(self.nodes[node].clock)).max(self.now);
        let armed = self.nodes[node].timers.first().is_some_and(|&a| a <= t);
        if !armed {
            self.nodes[node].timers.insert(t);
            self.queue.push(t, Ev::Timer { node, epoch });
        }
    }

    fn transmit(&mut self, from: usize, t: Transmit) {
        let targets: Vec<usize> = match t.to {
            Destination::Addr(a) => self.nodes.iter().position(|n| n.addr == a).into_iter().collect(),
            Destination::Broadcast => (0..self.nodes.len()).filter(|&i| i != from).collect(),
        };
        if self.opts.trace {
            let to = match t.to {
                Destination::Addr(a) => format!("{}", a.port() as usize - 7000),
                Destination::Broadcast => "*".to_string(),
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
        let digest = bytes.iter().fold(bytes.len() as u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3));
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
                let name = server_name(pid);
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

    // ---------------------------------------------------------------- actors

    fn act(&mut self, id: ProcId) {
        let role = self.procs[&id].role.clone();
        match role {
            Role::Client { current: None } => self.client_send(id),
            Role::Lookup { current: None } => self.lookup(id),
            Role::Server { job: Some(_), .. } => self.server_continue(id),
            _ => {}
        }
    }

    fn on_completion(&mut self, id: ProcId, call: Call, c: Completion) {
        match c {
            Completion::Send(r) => self.client_done(id, call, r),
            Completion::Receive(r) => self.server_received(id, r),
            Completion::Move(r) => self.server_moved(id, call, r),
            Completion::GetPid(r) => self.lookup_done(id, call, r),
        }
    }

    fn begin(&mut self, id: ProcId, kind: CallKind, bounded: bool) {
        let pid = self.procs[&id].pid;
        let call = Call { kind, pid, started: self.now, progress: self.now, bounded };
        if let Err(v) = self.calls.begin(self.now, id, call) {
            self.fail(v);
        }
    }

    fn think(&mut self, id: ProcId) {
        let d = match self.rng.gen_range(0..10) {
            0..=2 => Duration::ZERO,
            3..=8 => Duration::from_micros(self.rng.gen_range(0..5000)),
            _ => Duration::from_micros(self.rng.gen_range(5000..50_000)),
        };
        self.queue.push(self.now + d, Ev::Act { proc: id });
    }

    // ---- clients

    fn pick_target(&mut self) -> Pid {
        let live: Vec<Pid> = self.servers.iter().copied().filter(|p| self.by_pid.contains_key(p)).collect();
        let bad = self.rng.gen_bool(self.sc.bad_targets);
        if !bad && !live.is_empty() && self.rng.gen_bool(0.9) {
            return *live.choose(&mut self.rng).expect("non-empty");
        }
        if !bad && !self.servers.is_empty() {
            // Possibly a destroyed server: the send must fail with NoSuchProcess.
            return *self.servers.choose(&mut self.rng).expect("non-empty");
        }
        if self.rng.gen_bool(0.1) {
            // No node has this host: the send must time out.
            return Pid::new(BOGUS_HOST, 1);
        }
        // A local id no node ever hands out: the send must fail with NoSuchProcess.
        let hosts: Vec<HostId> = self.nodes.iter().filter_map(|n| n.host).collect();
        let h = *hosts.choose(&mut self.rng).expect("some node is up");
        Pid::new(h, 0x7FF0 + self.rng.gen_range(0..8))
    }

    fn client_send(&mut self, id: ProcId) {
        if !self.running {
            return;
        }
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let target = self.pick_target();
        let rid = self.next_rid;
        self.next_rid += 1;
        let (seg_len, access) = if !self.rng.gen_bool(self.sc.segments) {
            (0, Access::default())
        } else {
            let access = *[Access::READ, Access::WRITE, Access::READ_WRITE].choose(&mut self.rng).expect("non-empty");
            (workload::segment_size(&mut self.rng, self.sc.big_segment), access)
        };
        let idempotent = self.rng.gen_bool(self.sc.idempotent);
        let hops = match self.rng.gen_range(0..100) {
            0..=84 => 0,
            85..=96 => 1,
            _ => 2,
        };
        let max_reply = engine_config(&self.sc, 0, 0, 0, HostIdConfig::Allocate).max_data() as u32;
        let plan = workload::plan(&mut self.rng, seg_len, access, max_reply);
        let req = Request { rid, hops, idempotent, access, seg_len };
        let segment = (seg_len > 0).then(|| Segment { data: fill(rid, Writer::Client, 0, seg_len as usize), access });
        self.requests.insert(
            rid,
            RequestRec {
                req,
                client_pid: pid,
                client_node: node,
                target,
                plan,
                started: self.now,
                state: ReqState::Pending,
                forwards: vec![],
                receipts: vec![],
            },
        );
        self.trace(|| format!("n{node} {pid} send #{rid} to {target} {req:?}"));
        let r = self
            .with_engine(node, |e, now| e.send(now, pid, target, req.encode(), SendOptions { idempotent }, segment));
        match r {
            Ok(()) => {
                self.report.sends += 1;
                if let Some(Role::Client { current }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
                    *current = Some(rid);
                }
                let remote = target.host() != pid.host();
                self.begin(id, CallKind::Send(rid), remote);
            }
            Err(e) => {
                self.trace(|| format!("  send refused: {e}"));
                self.report.send_errors += 1;
                self.finish_request(rid, Err(e));
                self.think(id);
            }
        }
    }

    fn finish_request(&mut self, rid: u64, r: Result<(), Error>) {
        let now = self.now;
        let rec = self.requests.get_mut(&rid).expect("known request");
        match r {
            Ok(()) => rec.state = ReqState::Replied(now),
            Err(e) => {
                rec.state = ReqState::Failed(now);
                let nodes: Vec<Option<HostId>> = self.nodes.iter().map(|n| n.host).collect();
                let node_of = |p: Pid| nodes.iter().position(|h| *h == Some(p.host()));
                let j = check::justify_send_error(now, &self.requests[&rid], &e, &self.hist, node_of);
                self.fail_if(j);
            }
        }
    }

    fn client_done(&mut self, id: ProcId, _call: Call, r: Result<vipc_engine::SendOutcome, Error>) {
        let Some(Role::Client { current }) = self.procs.get_mut(&id).map(|p| &mut p.role) else { return };
        let Some(rid) = current.take() else { return };
        match r {
            Ok(out) => {
                self.report.replies += 1;
                let c = check::check_reply(self.now, &self.requests[&rid], &out);
                if let Err(v) = c {
                    return self.fail(v);
                }
                self.finish_request(rid, Ok(()));
            }
            Err(e) => {
                self.report.send_errors += 1;
                self.finish_request(rid, Err(e));
            }
        }
        self.think(id);
    }

    // ---- lookups

    fn lookup(&mut self, id: ProcId) {
        if !self.running {
            return;
        }
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let names: Vec<String> = self.names.keys().cloned().collect();
        let name = if names.is_empty() || self.rng.gen_bool(0.15) {
            format!("nobody{}", self.rng.gen_range(0..100))
        } else {
            names.choose(&mut self.rng).expect("non-empty").clone()
        };
        let scope = *[Scope::Local, Scope::Remote, Scope::Any].choose(&mut self.rng).expect("non-empty");
        let registered = self.names.get(&name).copied();
        self.trace(|| format!("n{node} {pid} get_pid({name}, {scope:?})"));
        let r = self.with_engine(node, |e, now| e.get_pid(now, pid, name.as_bytes(), scope));
        match r {
            Ok(()) => {
                if let Some(Role::Lookup { current }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
                    *current = Some((name, scope, registered, self.now));
                }
                self.begin(id, CallKind::GetPid, true);
            }
            Err(e) => {
                let v = self.violation_at(Invariant::Naming, format!("get_pid({name:?}, {scope:?}) refused: {e}"));
                self.fail(v)
            }
        }
    }

    fn lookup_done(&mut self, id: ProcId, _call: Call, answer: Option<Pid>) {
        let node = self.procs[&id].node;
        let Some(Role::Lookup { current }) = self.procs.get_mut(&id).map(|p| &mut p.role) else { return };
        let Some((name, scope, registered, started)) = current.take() else { return };
        self.report.lookups += 1;
        let own_host = self.nodes[node].host;
        // 000 §5.6.3: a local lookup sees names registered Local or Any, a
        // remote one (answered by the name's node) those registered Remote or
        // Any; scope Any looks locally first, then remotely.
        let sees = |&(r, _, reg): &(Pid, ProcId, Scope)| {
            let same = Some(r.host()) == own_host;
            match (same, scope) {
                (true, Scope::Local | Scope::Any) => reg != Scope::Remote,
                (false, Scope::Remote | Scope::Any) => reg != Scope::Local,
                _ => false,
            }
        };
        // The name may have been registered again (after a restart, with
        // another scope) while the lookup ran: either registration counts.
        let now_registered = self.names.get(&name).copied();
        let visible = registered.filter(sees).or(now_registered.filter(sees));
        let alive = registered.filter(sees).is_some_and(|(_, p, _)| {
            let l = &self.hist.procs[p as usize];
            l.born <= started && l.died.is_none()
        });
        let local = visible.is_some_and(|(r, _, _)| Some(r.host()) == own_host);
        let must_find = alive && (local || self.sc.reliable());
        let r = check::check_get_pid(self.now, &name, answer, visible.map(|v| v.0), must_find);
        // A remote answer may name a process that died meanwhile; that is still the registered pid.
        if !self.fail_if(r) {
            let at = self.now + Duration::from_millis(self.rng.gen_range(20..100));
            self.queue.push(at, Ev::Act { proc: id });
        }
    }

    // ---- servers

    fn server_receive(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Server { cap, .. } = self.procs[&id].role else { return };
        // Sometimes ReceiveSpecific for a local client whose request is known
        // to wait in our queue: it must be taken at once, whatever is ahead of it.
        let only = if self.sc.probes && self.rng.gen_bool(0.25) { self.queued_local_sender(pid) } else { None };
        if let Some(Role::Server { specific, .. }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
            *specific = only;
        }
        match self.with_engine(node, |e, now| e.receive(now, pid, only, cap)) {
            Ok(()) => self.begin(id, CallKind::Receive, only.is_some()),
            Err(e) => {
                let v = self.violation_at(Invariant::Success, format!("receive by idle server {pid} refused: {e}"));
                self.fail(v)
            }
        }
    }

    /// A local client whose request to `server` (not forwarded, not yet
    /// received) must be waiting in the server's queue.
    fn queued_local_sender(&mut self, server: Pid) -> Option<Pid> {
        let waiting: Vec<Pid> = self
            .procs
            .values()
            .filter(|p| p.pid.host() == server.host())
            .filter_map(|p| match p.role {
                Role::Client { current: Some(rid) } => {
                    let r = &self.requests[&rid];
                    let queued = r.pending() && r.target == server && r.forwards.is_empty() && r.receipts.is_empty();
                    queued.then_some(p.pid)
                }
                _ => None,
            })
            .collect();
        waiting.choose(&mut self.rng).copied()
    }

    fn server_received(&mut self, id: ProcId, r: Result<Received, Error>) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Server { cap, specific, .. } = self.procs[&id].role else { return };
        let m = match r {
            Ok(m) => m,
            Err(e) => {
                let v = self.violation_at(Invariant::Success, format!("receive by server {pid} failed: {e}"));
                return self.fail(v);
            }
        };
        if let Some(only) = specific.filter(|&o| o != m.from) {
            let v = self.violation_at(
                Invariant::ReplyMatches,
                format!("ReceiveSpecific({only}) by {pid} took a message from {} instead", m.from),
            );
            return self.fail(v);
        }
        if specific.is_some() {
            self.report.misuses += 1;
        }
        // 001 §2.5: the first part of a read-granted segment travels in the
        // Send packet (all of it locally) and Receive returns as much as fits.
        let local = m.from.host() == pid.host();
        let max_data = self.nodes[node].engine.as_ref().map_or(0, |e| e.config().max_data());
        let expected = if m.access.read {
            let limit = if local { usize::MAX } else { max_data };
            cap.min(m.segment_size as usize).min(limit)
        } else {
            0
        };
        // With a small buffer the engine may drop appended data (and count it).
        let dropped =
            m.segment.is_empty() && self.nodes[node].engine.as_ref().is_some_and(|e| e.stats().appended_dropped > 0);
        if m.segment.len() != expected && !dropped {
            let v = self.violation_at(
                Invariant::DataIntact,
                format!(
                    "{pid} received {} appended bytes from {} ({}) with capacity {cap} of a {}-byte {:?} segment; expected {expected}",
                    m.segment.len(),
                    m.from,
                    if local { "local" } else { "remote" },
                    m.segment_size,
                    m.access
                ),
            );
            return self.fail(v);
        }
        let Some(req) = Request::decode(&m.msg) else {
            let v = self.violation_at(
                Invariant::ReplyMatches,
                format!("server {pid} received a message that is no intact request: {:02x?} from {}", m.msg, m.from),
            );
            return self.fail(v);
        };
        let Some(rec) = self.requests.get(&req.rid) else {
            let v = self
                .violation_at(Invariant::ReplyMatches, format!("server {pid} received unknown request {}", req.rid));
            return self.fail(v);
        };
        self.report.receipts += 1;
        let receipt = Receipt { at: self.now, server: id, node: (node, self.nodes[node].epoch), hops: req.hops };
        let epochs: Vec<u32> = self.nodes.iter().map(|n| n.epoch).collect();
        let c = check::check_received(self.now, rec, &req, &m, cap)
            .and_then(|()| check::check_receipt(self.now, rec, &receipt, |n| epochs[n]));
        if self.fail_if(c) {
            return;
        }
        self.requests.get_mut(&req.rid).expect("known").receipts.push(receipt);
        if req.hops > 0 {
            return self.server_forward(id, req, m.from);
        }
        let job = Job {
            rid: req.rid,
            client: m.from,
            step: 0,
            status: Status::Ok,
            written: vec![],
            delayed: false,
            call_started: self.now,
            lent: false,
            probe: None,
        };
        if let Some(Role::Server { job: j, .. }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
            *j = Some(job);
        }
        self.trace(|| format!("n{node} {pid} executes #{}", req.rid));
        if self.sc.probes && self.rng.gen_bool(0.03) && self.foreign_probe(id, req.rid, m.from) {
            return;
        }
        self.server_continue(id);
    }

    fn server_forward(&mut self, id: ProcId, req: Request, client: Pid) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        // Not to itself, nor back to the sender (whose pid a server may hold
        // after the sender's node restarted): both are SendToSelf misuse.
        let ok = |p: Pid| p != pid && p != client;
        let live: Vec<Pid> = self.servers.iter().copied().filter(|&p| ok(p) && self.by_pid.contains_key(&p)).collect();
        let any: Vec<Pid> = self.servers.iter().copied().filter(|&p| ok(p)).collect();
        let to = match (live.choose(&mut self.rng).copied(), self.rng.gen_bool(0.9)) {
            (Some(p), true) => Some(p),
            _ => any.choose(&mut self.rng).copied(),
        };
        let Some(to) = to else {
            // No other server to forward to: answer directly.
            return self.forward_failed(id, req.rid, client);
        };
        let msg = Request { hops: req.hops - 1, ..req }.encode();
        let rec = self.requests.get_mut(&req.rid).expect("known");
        rec.forwards.push(ForwardRec { at: self.now, from: pid, to });
        self.trace(|| format!("n{node} {pid} forwards #{} from {client} to {to}", req.rid));
        match self.with_engine(node, |e, now| e.forward(now, pid, client, to, msg)) {
            Ok(()) => {
                self.report.forwards += 1;
                if self.sc.probes && self.rng.gen_bool(0.05) {
                    // The forwarder no longer owes the reply.
                    let msg = Reply { rid: req.rid, status: Status::Ok, executor: pid }.encode();
                    let r = self.with_engine(node, |e, now| e.reply(now, pid, client, msg, None));
                    let c = check::check_misuse(self.now, "a reply after forwarding", r.as_ref().map(|_| ()), |e| {
                        matches!(e, Error::NotAwaitingReply(_))
                    });
                    if self.fail_if(c) {
                        return;
                    }
                    self.report.misuses += 1;
                }
                if let Some(&cproc) = self.by_pid.get(&client) {
                    if self.requests[&req.rid].pending() {
                        self.calls.set_bounded(cproc, to.host() != client.host(), self.now);
                    }
                }
                self.server_receive(id);
            }
            Err(e) => {
                self.trace(|| format!("  forward refused: {e}"));
                self.requests.get_mut(&req.rid).expect("known").forwards.pop();
                let rec = &self.requests[&req.rid];
                let dead_target = matches!(e, Error::NoSuchProcess(p) if p == to) && !self.by_pid.contains_key(&to);
                if !dead_target {
                    let j = check::justify_server_error(self.now, self.now, rec, node, &e, &self.hist);
                    if self.fail_if(j) {
                        return;
                    }
                }
                self.forward_failed(id, req.rid, client);
            }
        }
    }

    /// Tries a MoveFrom from a client that awaits someone else's reply.
    /// Returns true if the probe is in flight (the job continues on its completion).
    /// `client` is the sender of the request being executed: even if it has
    /// moved on (a stale re-execution), it is not a foreigner to this server.
    fn foreign_probe(&mut self, id: ProcId, rid: u64, client: Pid) -> bool {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let others: Vec<Pid> = self
            .procs
            .values()
            .filter_map(|p| match p.role {
                Role::Client { current: Some(r) } if r != rid && p.pid != client => Some((p.pid, r)),
                _ => None,
            })
            .filter(|&(_, r)| self.requests[&r].pending() && !self.requests[&r].chain().any(|q| q == pid))
            .map(|(p, _)| p)
            .collect();
        let Some(&other) = others.choose(&mut self.rng) else { return false };
        let started = self.now;
        let r = self.with_engine(node, |e, now| e.move_from(now, pid, other, 0, 1));
        self.trace(|| format!("n{node} {pid} probes MoveFrom of {other}: {r:?}"));
        match r {
            Ok(()) => {
                self.set_job(id, |j| j.probe = Some(other));
                self.begin(id, CallKind::Move(rid), true);
                true
            }
            Err(e) => {
                self.check_probe(id, other, started, Err(e));
                false
            }
        }
    }

    /// Judges a foreign MoveFrom's outcome; true if the run goes on.
    fn check_probe(&mut self, id: ProcId, other: Pid, started: Time, r: Result<(), Error>) -> bool {
        let node = self.procs[&id].node;
        let other_node = self.nodes.iter().position(|n| n.host == Some(other.host()));
        let gone = !self.hist.alive_throughout(other, started, self.now)
            || other_node.is_some_and(|o| self.hist.disturbed(node, &[o], started, self.now));
        let ok = match &r {
            Err(Error::NotAwaitingReply(p)) => *p == other,
            Err(Error::NoSuchProcess(_) | Error::Timeout(_) | Error::Destroyed(_)) => gone,
            _ => false,
        };
        if ok {
            self.report.misuses += 1;
            return true;
        }
        let v = self.violation_at(
            Invariant::Misuse,
            format!(
                "MoveFrom by {} of {other}, which awaits another process's reply: expected NotAwaitingReply, got {r:?}",
                self.procs[&id].pid
            ),
        );
        self.fail(v);
        false
    }

    fn forward_failed(&mut self, id: ProcId, rid: u64, client: Pid) {
        let job = Job {
            rid,
            client,
            step: usize::MAX,
            status: Status::ForwardFailed,
            written: vec![],
            delayed: true,
            call_started: self.now,
            lent: false,
            probe: None,
        };
        if let Some(Role::Server { job: j, .. }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
            *j = Some(job);
        }
        self.server_continue(id);
    }

    /// Runs the job's next step, or replies when the plan is done.
    fn server_continue(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Server { job: Some(job), .. } = self.procs[&id].role.clone() else { return };
        let plan = self.requests[&job.rid].plan.clone();
        if let Some(&step) = plan.steps.get(job.step) {
            self.set_job(id, |j| {
                j.step += 1;
                j.call_started = Time::ZERO;
            });
            let (client, rid) = (job.client, job.rid);
            // A move to a remote client may lend the server's buffer instead
            // of handing the engine a copy (not a MoveTo on a keyed node).
            let misuse = matches!(step, Step::MoveFrom { misuse: Some(_), .. } | Step::MoveTo { misuse: Some(_), .. });
            let lendable = client.host() != pid.host() && !misuse;
            let lent = match step {
                Step::MoveFrom { .. } => lendable && self.rng.gen_bool(self.sc.lent),
                Step::MoveTo { .. } => lendable && self.key.is_none() && self.rng.gen_bool(self.sc.lent),
            };
            self.set_job(id, |j| j.lent = lent);
            let r = match (step, lent) {
                (Step::MoveFrom { off, len, .. }, false) => {
                    self.with_engine(node, |e, now| e.move_from(now, pid, client, off, len))
                }
                (Step::MoveFrom { off, len, .. }, true) => {
                    self.lent.insert(pid, vec![0; len as usize]);
                    self.with_engine(node, |e, now| e.move_from_lent(now, pid, client, off, len))
                }
                (Step::MoveTo { off, len, .. }, false) => {
                    let data = fill(rid, Writer::Server, off as u64, len as usize);
                    self.with_engine(node, |e, now| e.move_to(now, pid, client, off, data))
                }
                (Step::MoveTo { off, len, .. }, true) => {
                    self.lent.insert(pid, fill(rid, Writer::Server, off as u64, len as usize));
                    self.with_engine(node, |e, now| e.move_to_lent(now, pid, client, off, len))
                }
            };
            if r.is_err() {
                self.lent.remove(&pid);
            }
            self.trace(|| format!("n{node} {pid} #{rid} {step:?}{}: {r:?}", if lent { " lent" } else { "" }));
            let now = self.now;
            match r {
                Ok(()) => {
                    self.set_job(id, |j| j.call_started = now);
                    self.begin(id, CallKind::Move(rid), true);
                }
                Err(e) => {
                    self.move_failed(id, step, e);
                    self.server_continue(id);
                }
            }
            return;
        }
        if !job.delayed && !plan.delay.is_zero() {
            self.set_job(id, |j| j.delayed = true);
            self.queue.push(self.now + plan.delay, Ev::Act { proc: id });
            return;
        }
        self.server_reply(id, job, &plan);
    }

    fn set_job(&mut self, id: ProcId, f: impl FnOnce(&mut Job)) {
        if let Some(Role::Server { job: Some(j), .. }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
            f(j);
        }
    }

    /// A move failed (at once or by completion).
    fn move_failed(&mut self, id: ProcId, step: Step, e: Error) {
        let node = self.procs[&id].node;
        let Role::Server { job: Some(job), .. } = self.procs[&id].role.clone() else { return };
        let misuse = match step {
            Step::MoveFrom { misuse, .. } | Step::MoveTo { misuse, .. } => misuse,
        };
        if let Some(m) = misuse {
            let expected: fn(&Error) -> bool = match m {
                Misuse::NoAccess => |e| matches!(e, Error::NoAccess(_)),
                Misuse::OutOfSegment => |e| matches!(e, Error::OutOfSegment { .. }),
            };
            let rec = &self.requests[&job.rid];
            // Once the client is gone the engine may say so instead.
            if !rec.pending() {
                return;
            }
            let c = check::check_misuse(self.now, &format!("{step:?} for request {}", job.rid), Err(&e), expected);
            if !self.fail_if(c) {
                self.report.misuses += 1;
            }
            return;
        }
        self.report.move_errors += 1;
        let started = if job.call_started == Time::ZERO { self.now } else { job.call_started };
        let j = check::justify_server_error(self.now, started, &self.requests[&job.rid], node, &e, &self.hist);
        if self.fail_if(j) {
            return;
        }
        // Give up the remaining moves and reply.
        let steps = self.requests[&job.rid].plan.steps.len();
        self.set_job(id, |j| {
            j.status = Status::MoveFailed;
            j.step = steps;
        });
    }

    fn server_moved(&mut self, id: ProcId, call: Call, r: Result<Vec<u8>, Error>) {
        let Role::Server { job: Some(job), .. } = self.procs[&id].role.clone() else { return };
        if let Some(other) = job.probe {
            self.set_job(id, |j| j.probe = None);
            if self.check_probe(id, other, call.started, r.map(|_| ())) {
                self.server_continue(id);
            }
            return;
        }
        let plan = self.requests[&job.rid].plan.clone();
        let Some(&step) = job.step.checked_sub(1).and_then(|i| plan.steps.get(i)) else { return };
        // A lent move's completion carries no data: the bytes are in the lent buffer.
        let lent = if job.lent { self.lent.remove(&self.procs[&id].pid) } else { None };
        let r = match (r, lent) {
            (Ok(data), Some(buffer)) if data.is_empty() => {
                Ok(if matches!(step, Step::MoveFrom { .. }) { buffer } else { data })
            }
            (Ok(data), Some(_)) => {
                let v = self.violation_at(
                    Invariant::DataIntact,
                    format!("a lent move for request {} completed with {} bytes of data", job.rid, data.len()),
                );
                return self.fail(v);
            }
            (r, _) => r,
        };
        match (r, step) {
            (Ok(data), Step::MoveFrom { off, len, misuse: None }) => {
                if data.len() != len as usize {
                    let v = self.violation_at(
                        Invariant::DataIntact,
                        format!("MoveFrom of {len} bytes for request {} returned {} bytes", job.rid, data.len()),
                    );
                    return self.fail(v);
                }
                let e = Expect { written: job.written.clone(), maybe: plan.write_ranges() };
                if let Err(d) = e.check(job.rid, off as u64, &data) {
                    let v = self.violation_at(Invariant::DataIntact, format!("MoveFrom({off}, {len}): {d}"));
                    return self.fail(v);
                }
                self.report.moves += 1;
                self.report.moved_bytes += len as u64;
            }
            (Ok(data), Step::MoveTo { off, len, misuse: None }) => {
                if !data.is_empty() {
                    let v = self.violation_at(
                        Invariant::DataIntact,
                        format!("MoveTo for request {} completed with {} bytes of data", job.rid, data.len()),
                    );
                    return self.fail(v);
                }
                self.set_job(id, |j| j.written.push((off as u64, len as u64)));
                self.report.moves += 1;
                self.report.moved_bytes += len as u64;
            }
            (Ok(_), _) => {
                let v = self.violation_at(Invariant::Misuse, format!("{step:?} for request {} succeeded", job.rid));
                return self.fail(v);
            }
            (Err(e), _) => self.move_failed(id, step, e),
        }
        if self.violation.is_none() {
            self.server_continue(id);
        }
    }

    fn server_reply(&mut self, id: ProcId, job: Job, plan: &workload::Plan) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let (rid, client) = (job.rid, job.client);
        let status = job.status;
        let write = self.requests[&rid].req.access.write;
        let seg_len = self.requests[&rid].req.seg_len;
        let max_data = self.nodes[node].engine.as_ref().map_or(1400, |e| e.config().max_data()) as u32;
        if plan.oversized_reply && write && status == Status::Ok && seg_len > max_data {
            let len = (max_data + 1).min(seg_len);
            let data = fill(rid, Writer::Server, 0, len as usize);
            let msg = Reply { rid, status: Status::ReplySegmentRefused, executor: pid }.encode();
            let r = self.with_engine(node, |e, now| e.reply(now, pid, client, msg, Some((0, data))));
            let pending = self.requests[&rid].pending();
            if pending || r.is_ok() {
                let c = check::check_misuse(
                    self.now,
                    &format!("reply with a {len}-byte segment"),
                    r.as_ref().map(|_| ()),
                    |e| matches!(e, Error::TooLarge { .. }),
                );
                if self.fail_if(c) {
                    return;
                }
                self.report.misuses += 1;
            }
        }
        let segment = match plan.reply_segment {
            Some((off, len)) if write && status != Status::ForwardFailed => {
                Some((off, fill(rid, Writer::Server, off as u64, len as usize)))
            }
            _ => None,
        };
        let msg = Reply { rid, status, executor: pid }.encode();
        let r = self.with_engine(node, |e, now| e.reply(now, pid, client, msg, segment));
        self.trace(|| format!("n{node} {pid} replies #{rid} {status:?}: {r:?}"));
        if let Some(Role::Server { job, .. }) = self.procs.get_mut(&id).map(|p| &mut p.role) {
            *job = None;
        }
        match r {
            Ok(()) => {
                if plan.double_reply {
                    let msg = Reply { rid, status, executor: pid }.encode();
                    let again = self.with_engine(node, |e, now| e.reply(now, pid, client, msg, None));
                    let c = check::check_misuse(self.now, "a second reply", again.as_ref().map(|_| ()), |e| {
                        matches!(e, Error::NotAwaitingReply(_))
                    });
                    if self.fail_if(c) {
                        return;
                    }
                    self.report.misuses += 1;
                }
            }
            Err(e) => {
                let j = check::justify_server_error(self.now, self.now, &self.requests[&rid], node, &e, &self.hist);
                if self.fail_if(j) {
                    return;
                }
            }
        }
        self.server_receive(id);
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

/// The name a server registers.
fn server_name(pid: Pid) -> String {
    format!("srv{:08x}", pid.0)
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
