//! The request/reply simulation: the simulated application (servers,
//! clients, name lookups), its faults beyond crashes (process destruction,
//! partitions) and the invariant checks wired to every step, in the
//! [`crate::world`] every simulation shares.

use crate::check::{self, Call, CallKind, Invariant, Violation};
use crate::history::{ForwardRec, History, ProcId, Receipt, ReqState, RequestRec};
use crate::pattern::{fill, Expect, Writer};
use crate::procs::{Proc, Procs};
use crate::proto::{Reply, Request, Status};
use crate::scenario::{HostIds, Scenario};
use crate::workload::{self, Misuse, Step};
use crate::world::{engine_config, node_addr, App, Driver, Plumbing, World};
use crate::Options;

mod actors;
mod servers;
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use vipc_engine::{
    Access, Completion, Config, Engine, Error, Event, HostId, HostIdConfig, Pid, Received, Scope, Segment, SendOptions,
    Time,
};

/// After the last completion, how long the run continues before its final
/// checks: long enough for every alien and cached reply to expire.
const QUIET: Duration = Duration::from_secs(3);
/// The longest a run may continue after the workload stops, waiting for
/// outstanding calls (idempotent requests re-executed after lost replies can
/// take several rounds).
const MAX_DRAIN: Duration = Duration::from_secs(40);
/// A logical host no node has: sends there must time out.
const BOGUS_HOST: HostId = 0x7ABC;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
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

/// The request/reply workload's own events.
pub(crate) enum Ev {
    Act {
        proc: ProcId,
    },
    Spawn {
        node: usize,
        epoch: u32,
        kind: Kind,
    },
    Destroy,
    Cut {
        until: Time,
    },
    Heal {
        id: u64,
        span: usize,
    },
    /// The lending thread of `pid` gives its engine the whole lent segment
    /// (asked for with `Event::FetchLent`), some time after it was asked.
    GiveLent {
        node: usize,
        epoch: u32,
        pid: Pid,
    },
}

/// One simulated run.
pub struct Sim {
    w: World<Ev>,
    /// How each node gets its host id (in `allocate`, node 0 squats on node 1's first choice).
    host_cfg: Vec<HostIdConfig>,
    procs: Procs<Role>,
    requests: BTreeMap<u64, RequestRec>,
    servers: Vec<Pid>,
    names: BTreeMap<String, (Pid, ProcId, Scope)>,
    next_rid: u64,
    squatted: Option<HostId>,
}

impl Sim {
    /// Prepares a run of `scenario` under `seed`.
    pub fn new(seed: u64, sc: &Scenario, opts: &Options) -> Sim {
        let warmup = match sc.host_ids {
            HostIds::Fixed => Duration::ZERO,
            HostIds::Allocate => Duration::from_millis(1500),
        };
        let plumbing = Plumbing { salt: 1, warmup, restart_ms: 100..2500, restart_grace: Some(Duration::from_secs(1)) };
        let w = World::new(seed, sc, opts, plumbing);
        let n = w.nodes.len();
        Sim {
            w,
            host_cfg: (0..n).map(|i| HostIdConfig::Fixed(i as HostId + 1)).collect(),
            procs: Procs::new(History { bogus_hosts: vec![BOGUS_HOST], ..History::default() }),
            requests: BTreeMap::new(),
            servers: Vec::new(),
            names: BTreeMap::new(),
            next_rid: 1,
            squatted: None,
        }
    }

    fn host_ready(&mut self, node: usize, h: HostId) {
        self.w.trace(|| format!("node {node} has host id {h:#x}"));
        if let Some(other) = (0..self.w.nodes.len())
            .find(|&i| i != node && self.w.nodes[i].engine.is_some() && self.w.nodes[i].host == Some(h))
        {
            return self
                .w
                .fail_with(Invariant::HostIds, format!("nodes {other} and {node} both hold logical host {h:#x}"));
        }
        if node == 1 && self.squatted == Some(h) {
            return self
                .w
                .fail_with(Invariant::HostIds, format!("node 1 took host {h:#x}, which node 0 already holds"));
        }
        let epoch = self.w.nodes[node].epoch;
        let servers = self.w.rng.gen_range(1..=2);
        let clients = self.w.rng.gen_range(1..=self.w.sc.max_clients);
        let lookups = self.w.rng.gen_range(0..=1);
        for (kind, count) in [(Kind::Server, servers), (Kind::Client, clients), (Kind::Lookup, lookups)] {
            for _ in 0..count {
                self.w.push(self.w.now, Ev::Spawn { node, epoch, kind });
            }
        }
    }
}

impl App for Sim {
    type Ev = Ev;

    fn world(&mut self) -> &mut World<Ev> {
        &mut self.w
    }

    fn config(&self, node: usize, epoch: u32) -> Config {
        Config { host_id: self.host_cfg[node], ..self.w.fixed_config(node, epoch) }
    }

    fn setup(&mut self) {
        let n = self.w.nodes.len();
        if self.w.sc.host_ids == HostIds::Allocate {
            // Node 0 squats on the id node 1 would choose first, so node 1 must
            // hear a complaint and choose again.
            let probe = engine_config(&self.w.sc, self.w.seed, 1, 1, HostIdConfig::Allocate); // node 1, first incarnation
            let squat = probe_candidate(probe);
            self.squatted = squat;
            for (i, cfg) in self.host_cfg.iter_mut().enumerate() {
                *cfg = match (i, squat) {
                    (0, Some(h)) => HostIdConfig::Fixed(h),
                    _ => HostIdConfig::Allocate,
                };
            }
            self.w.start_at(Time::ZERO, 0);
            for i in 1..n {
                let at = Time::ZERO + Duration::from_micros(self.w.rng.gen_range(1000..100_000));
                self.w.start_at(at, i);
            }
        } else {
            self.w.start_all();
        }
        let begin = self.w.begin;
        let w = self.w.sc.workload.as_micros() as u64;
        if self.w.sc.destroy {
            for _ in 0..self.w.rng.gen_range(1..=self.w.sc.destroys.max(1)) {
                let at = begin + Duration::from_micros(self.w.rng.gen_range(0..w));
                self.w.push(at, Ev::Destroy);
            }
        }
        if self.w.sc.partitions {
            for _ in 0..self.w.rng.gen_range(1..=3) {
                let at = begin + Duration::from_micros(self.w.rng.gen_range(0..w));
                let len = Duration::from_millis(self.w.rng.gen_range(50..2500));
                self.w.push(at, Ev::Cut { until: (at + len).min(self.w.stop_at) });
            }
        }
        self.w.schedule_crashes();
        self.w.schedule_end();
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Act { proc } => {
                if let Some(node) = self.procs.node_of(proc) {
                    self.act(proc);
                    self.settle(node);
                }
            }
            Ev::Spawn { node, epoch, kind } => {
                if self.w.nodes[node].runs(epoch) {
                    self.spawn(node, kind);
                    self.settle(node);
                }
            }
            Ev::Destroy => self.destroy_random(),
            Ev::GiveLent { node, epoch, pid } => {
                if let (true, Some(bytes)) = (self.w.nodes[node].runs(epoch), self.w.lent.get(&pid).cloned()) {
                    self.w.with_engine(node, |e, now| e.lent_segment(now, pid, &bytes));
                    self.w.report.lent_given += 1;
                    self.settle(node);
                }
            }
            Ev::Cut { until } => self.cut(until),
            Ev::Heal { id, span } => {
                self.w.net.heal(id);
                self.procs.hist.cuts[span].1.to.get_or_insert(self.w.now);
                self.w.trace(|| format!("partition {id} healed"));
            }
        }
    }

    fn on_event(&mut self, node: usize, ev: Event) {
        match ev {
            Event::Wake { pid, completion } => {
                self.w.trace(|| format!("n{node} wake {pid}: {}", short(&completion)));
                if let Some((proc, call)) = self.procs.woken(&mut self.w, node, pid, &completion, short) {
                    self.on_completion(proc, call, completion);
                }
            }
            Event::HostReady(h) => self.host_ready(node, h),
            Event::FetchLent { pid } => {
                if !self.w.lent.contains_key(&pid) {
                    return self
                        .w
                        .fail_with(Invariant::DataIntact, format!("{pid} lends no segment but was asked for it"));
                }
                let at = self.w.now + Duration::from_micros(self.w.rng.gen_range(0..300));
                let epoch = self.w.nodes[node].epoch;
                self.w.push(at, Ev::GiveLent { node, epoch, pid });
            }
            // GroupJoined and GroupLeft stay with the world; this workload uses no groups.
            other => self.w.notice(node, other),
        }
    }

    fn started(&mut self, node: usize) {
        self.procs.hist.node_up(node, self.w.now);
    }

    fn crashed(&mut self, node: usize) {
        for p in self.procs.crashed(node, self.w.now) {
            self.forget(p);
        }
    }

    fn arriving(&mut self, _to: usize, _from: usize, _from_epoch: u32, bytes: &[u8]) {
        if let Ok(p) = vipc_wire::parse(bytes, self.w.key.as_ref()) {
            if p.header.ptype == vipc_wire::PacketType::HostComplaint {
                self.w.report.complaints += 1;
            }
            self.procs.progress_to(p.header.dst, self.w.now);
        }
    }

    fn watchdog(&mut self) {
        self.procs.watch(&mut self.w);
    }

    fn stopped(&mut self) {
        let now = self.w.now;
        for (_, s) in self.procs.hist.cuts.iter_mut() {
            s.to.get_or_insert(now);
        }
    }

    /// Ends once every call but idle receives has completed and all has been
    /// quiet for a while (so that state freed after T_t of silence is gone).
    fn end_check(&mut self) -> Option<Time> {
        self.w.end_when(self.procs.calls.busy(), self.procs.last_completion + QUIET, MAX_DRAIN, Duration::from_secs(1))
    }

    fn final_checks(&mut self) -> Result<(), Violation> {
        self.procs.calls.leftovers(self.w.now)?;
        for i in 0..self.w.nodes.len() {
            let Some(e) = self.w.nodes[i].engine.as_ref() else { continue };
            self.w.report.mac_failures += e.stats().mac_failures;
            let live = self.procs.live.values().filter(|p| p.node == i).count() as u64;
            check::check_gauges(self.w.now, i, &e.stats(), live)?;
        }
        let hosts: Vec<HostId> = self.w.nodes.iter().filter(|n| n.engine.is_some()).filter_map(|n| n.host).collect();
        let distinct: BTreeSet<HostId> = hosts.iter().copied().collect();
        if distinct.len() != hosts.len() {
            return Err(self.w.violation_at(Invariant::HostIds, format!("host ids at the end: {hosts:x?}")));
        }
        if let Some(i) = self.w.nodes.iter().position(|n| n.engine.is_some() && n.host.is_none()) {
            return Err(self.w.violation_at(Invariant::HostIds, format!("node {i} never got a host id")));
        }
        Ok(())
    }
}

impl Sim {
    // ------------------------------------------------------------ processes

    fn spawn(&mut self, node: usize, kind: Kind) {
        let pid = loop {
            let pid = match self.w.with_engine(node, |e, _| e.create_process()) {
                Ok(p) => p,
                Err(e) => {
                    return self
                        .w
                        .fail_with(Invariant::Success, format!("create_process on ready node {node} failed: {e}"));
                }
            };
            // Pid hygiene: a node restarted may hand out an old pid again (rarely:
            // its local ids start at a random point), and any node one of the
            // ids clients send to as nonexistent. A client holding a pid that
            // clients know as a server's, or such an id, would be sent requests
            // it never receives (an application deadlock, not an engine fault),
            // so such a pid is destroyed at once and skipped.
            let reserved = actors::UNUSED_LOCALS.contains(&pid.local());
            if !reserved && (kind == Kind::Server || !self.servers.contains(&pid)) {
                break pid;
            }
            self.w.trace(|| format!("n{node} skips pid {pid}"));
            let id = self.procs.hist.born(pid, node, self.w.now);
            self.procs.hist.died(id, self.w.now);
            if let Err(e) = self.w.with_engine(node, |e, now| e.destroy_process(now, pid)) {
                return self.w.fail_with(Invariant::Success, format!("destroy_process({pid}) failed: {e}"));
            }
        };
        self.w.trace(|| format!("n{node} spawn {kind:?} {pid}"));
        let role = match kind {
            Kind::Server => {
                let cap = *[0usize, 256, 4096, 65536].choose(&mut self.w.rng).expect("non-empty");
                Role::Server { cap, job: None, specific: None }
            }
            Kind::Client => Role::Client { current: None },
            Kind::Lookup => Role::Lookup { current: None },
        };
        let id = self.procs.add(node, pid, role, self.w.now);
        match kind {
            Kind::Server => {
                let name = servers::server_name(pid);
                let scope = match self.w.rng.gen_range(0..10) {
                    0..=5 => Scope::Any,
                    6 | 7 => Scope::Local,
                    _ => Scope::Remote,
                };
                let r = self.w.with_engine(node, |e, _| e.set_pid(name.as_bytes(), pid, scope));
                if let Err(e) = r {
                    return self.w.fail_with(Invariant::Naming, format!("set_pid({name}) failed: {e}"));
                }
                self.names.insert(name, (pid, id, scope));
                self.servers.push(pid);
                self.server_receive(id);
            }
            Kind::Client | Kind::Lookup => {
                let at = self.w.now + Duration::from_micros(self.w.rng.gen_range(0..5000));
                self.w.push(at, Ev::Act { proc: id });
            }
        }
    }

    /// Removes a process that was destroyed or whose node crashed.
    fn bury(&mut self, id: ProcId) {
        if let Some(p) = self.procs.bury(id, self.w.now) {
            self.forget(p);
        }
    }

    /// What dies with a process: its lent buffer, its pending request.
    fn forget(&mut self, p: Proc<Role>) {
        self.w.lent.remove(&p.pid);
        if let Role::Client { current: Some(rid) } = p.role {
            if let Some(r) = self.requests.get_mut(&rid) {
                if r.pending() {
                    r.state = ReqState::Abandoned(self.w.now);
                }
            }
        }
    }

    fn destroy_random(&mut self) {
        if !self.w.running {
            return;
        }
        let live: Vec<ProcId> = self.procs.live.keys().copied().collect();
        let Some(&id) = live.choose(&mut self.w.rng) else { return };
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let kind = match self.procs[&id].role {
            Role::Server { .. } => Kind::Server,
            Role::Client { .. } => Kind::Client,
            Role::Lookup { .. } => Kind::Lookup,
        };
        self.w.trace(|| format!("n{node} destroy {kind:?} {pid}"));
        self.bury(id);
        self.w.report.destroyed += 1;
        if let Err(e) = self.w.with_engine(node, |e, now| e.destroy_process(now, pid)) {
            return self
                .w
                .fail_with(Invariant::Success, format!("destroy_process({pid}) of a live process failed: {e}"));
        }
        let epoch = self.w.nodes[node].epoch;
        let at = self.w.now + Duration::from_millis(self.w.rng.gen_range(10..200));
        self.w.push(at, Ev::Spawn { node, epoch, kind });
        self.settle(node);
    }

    fn cut(&mut self, until: Time) {
        if !self.w.running || until <= self.w.now {
            return;
        }
        let (id, span) = self.w.cut_at_random(&mut self.procs.hist, until);
        self.w.push(until, Ev::Heal { id, span });
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
