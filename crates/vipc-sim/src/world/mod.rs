//! The simulated world every simulation runs in: the nodes' engines, the
//! virtual network between them, the virtual clock and its event queue,
//! timers, crashes and restarts, the trace and the run's fingerprint.
//!
//! The request/reply, group and remote-memory simulations differ only in
//! their workload and their checks; they plug those in through [`App`] and
//! are driven by [`Driver`]. Keeping one copy of the plumbing means a fault
//! model, a timer rule or a fingerprint fix lands in every simulation at once.

mod config;
mod drive;
mod engines;

pub(crate) use config::mix;
pub use config::{engine_config, node_addr, MARGIN, RETRANSMIT, TIMEOUT};
pub(crate) use drive::{App, Driver};
pub use engines::describe;

use crate::check::{fmt_time, Invariant, Violation};
use crate::net::{LinkParams, Net, Queue};
use crate::report::Report;
use crate::scenario::Scenario;
use crate::Options;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;
use vipc_engine::{AuthKey, Config, Engine, Event, HostId, HostIdConfig, Pid, Time};

/// How often the watchdog looks at blocked calls.
const WATCHDOG: Duration = Duration::from_millis(50);

/// The few numbers in which the simulations' plumbing differs.
#[derive(Clone, Debug)]
pub(crate) struct Plumbing {
    /// Seeds the workload's generator (`mix(seed, salt)`) and the network's
    /// (`mix(seed, salt + 1)`): each simulation draws its own runs from a seed.
    pub salt: u64,
    /// Time from zero to the workload's start (host ids settle, alive tables fill).
    pub warmup: Duration,
    /// A crashed node restarts (if the scenario restarts nodes) after this many milliseconds...
    pub restart_ms: Range<u64>,
    /// ...unless that is this long after the workload stopped (None: whenever).
    pub restart_grace: Option<Duration>,
}

/// An event on the virtual clock: the world's own, or the simulation's (`App`).
pub(crate) enum Ev<E> {
    /// A datagram reaches `to`, if both ends still run the incarnations that sent and awaited it.
    Deliver { to: usize, to_epoch: u32, from: usize, from_epoch: u32, bytes: Vec<u8> },
    /// `node`'s engine may be due for `handle_timeout`.
    Timer { node: usize, epoch: u32 },
    /// `node` boots (or reboots) a fresh engine.
    Start { node: usize },
    /// A random node (never fewer than three up) crashes.
    Crash,
    /// The workload stops; partitions heal.
    Stop,
    /// The simulation's liveness check, every [`WATCHDOG`].
    Watchdog,
    /// The run may end if the simulation agrees (`App::end_check`).
    End,
    /// The simulation's own event.
    App(E),
}

/// One simulated machine.
pub(crate) struct Node {
    /// The engine of its current incarnation; None while it is down.
    pub engine: Option<Engine>,
    /// The incarnation, incremented at every crash and restart: stale
    /// deliveries and timers are ignored.
    pub epoch: u32,
    /// The host id its engine announced (`HostReady`); kept through a crash,
    /// cleared at a start.
    pub host: Option<HostId>,
    /// The groups whose multicast address it listens on (its engine's
    /// `GroupJoined`/`GroupLeft`): where a `Destination::Group` goes.
    pub listening: BTreeSet<Pid>,
    /// Senders whose latest Send (by seq) this incarnation's engine took
    /// without its appended data (no room in `buffer_limit`, counted
    /// `appended_dropped`): the Receives of that message — by its receiver,
    /// or after a local Forward — may return an empty segment.
    pub appended_dropped: BTreeMap<Pid, u32>,
    /// Its virtual address ([`node_addr`]).
    addr: SocketAddr,
    /// Times of queued timer events.
    timers: BTreeSet<Time>,
    /// This incarnation's clock: engine time = virtual time + offset (each
    /// machine's monotonic clock has its own epoch, reset at a restart).
    clock: u64,
    /// Events the engine emitted that the simulation has not seen yet.
    events: VecDeque<Event>,
}

impl Node {
    fn new(i: usize) -> Node {
        Node {
            engine: None,
            epoch: 0,
            host: None,
            listening: BTreeSet::new(),
            appended_dropped: BTreeMap::new(),
            addr: node_addr(i),
            timers: BTreeSet::new(),
            clock: 0,
            events: VecDeque::new(),
        }
    }

    /// True while incarnation `epoch` runs.
    pub fn runs(&self, epoch: u32) -> bool {
        self.epoch == epoch && self.engine.is_some()
    }
}

/// Engines on virtual nodes, the network between them and the clock; `E` is
/// the simulation's own event type.
pub(crate) struct World<E> {
    /// The run's seed.
    pub seed: u64,
    /// The scenario.
    pub sc: Scenario,
    opts: Options,
    plumbing: Plumbing,
    /// Virtual time now.
    pub now: Time,
    queue: Queue<Ev<E>>,
    /// The link model.
    pub net: Net,
    /// The workload's generator (the world draws node starts, crashes and clocks from it too).
    pub rng: ChaCha8Rng,
    /// The machines.
    pub nodes: Vec<Node>,
    /// The scenario's MAC key, to parse what the engines send.
    pub key: Option<AuthKey>,
    /// Buffers processes lent to their engine (`move_to_lent`, `move_from_lent`), by pid:
    /// lent datagrams are read from them and placements written to them.
    pub lent: BTreeMap<Pid, Vec<u8>>,
    /// False once the workload stopped.
    pub running: bool,
    /// When the workload starts.
    pub begin: Time,
    /// When it stops.
    pub stop_at: Time,
    /// The report so far.
    pub report: Report,
    violation: Option<Violation>,
}

impl<E> World<E> {
    /// A world for `sc` under `seed`: its node count and loss rate are drawn here.
    pub fn new(seed: u64, sc: &Scenario, opts: &Options, plumbing: Plumbing) -> World<E> {
        let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, plumbing.salt));
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
        let begin = Time::ZERO + plumbing.warmup;
        World {
            seed,
            sc: sc.clone(),
            opts: opts.clone(),
            now: Time::ZERO,
            queue: Queue::default(),
            net: Net::new(mix(seed, plumbing.salt + 1), n, params),
            rng,
            nodes: (0..n).map(Node::new).collect(),
            key: sc.keyed.then(config::cluster_key),
            lent: BTreeMap::new(),
            running: true,
            begin,
            stop_at: begin + sc.workload,
            report: Report { seed, scenario: sc.name.to_string(), nodes: n, loss, ..Report::default() },
            violation: None,
            plumbing,
        }
    }

    /// Schedules the simulation's event `ev` at `at`.
    pub fn push(&mut self, at: Time, ev: E) {
        self.queue.push(at, Ev::App(ev));
    }

    /// Boots `node` at `at`.
    pub fn start_at(&mut self, at: Time, node: usize) {
        self.queue.push(at, Ev::Start { node });
    }

    /// Boots every node within the first 2 ms.
    pub fn start_all(&mut self) {
        for node in 0..self.nodes.len() {
            let at = Time::ZERO + Duration::from_micros(self.rng.gen_range(0..2000));
            self.start_at(at, node);
        }
    }

    /// If the scenario crashes nodes: one or two crashes during the workload (not in its first tenth).
    pub fn schedule_crashes(&mut self) {
        if !self.sc.crashes {
            return;
        }
        let w = self.sc.workload.as_micros() as u64;
        for _ in 0..self.rng.gen_range(1..=2) {
            let at = self.begin + Duration::from_micros(self.rng.gen_range(w / 10..w));
            self.queue.push(at, Ev::Crash);
        }
    }

    /// The workload's stop, the first look at the end, and the watchdog.
    pub fn schedule_end(&mut self) {
        self.queue.push(self.stop_at, Ev::Stop);
        self.queue.push(self.stop_at + self.sc.drain, Ev::End);
        self.queue.push(Time::ZERO + WATCHDOG, Ev::Watchdog);
    }

    /// The usual answer to [`App::end_check`]: end once nothing is `busy` and
    /// it is `quiet_at` (so that state freed after a quiet spell is gone), or
    /// `max_drain` after the workload stopped whatever is left; else look again
    /// `recheck` later (or at `quiet_at`).
    pub fn end_when(&self, busy: bool, quiet_at: Time, max_drain: Duration, recheck: Duration) -> Option<Time> {
        if self.now >= self.stop_at + max_drain || (!busy && self.now >= quiet_at) {
            return None;
        }
        Some(if busy { self.now + recheck } else { quiet_at })
    }

    /// The engine configuration of `node` in its incarnation `epoch`, with the fixed host id `node + 1`.
    pub fn fixed_config(&self, node: usize, epoch: u32) -> Config {
        engine_config(&self.sc, self.seed, node, epoch, HostIdConfig::Fixed(node as HostId + 1))
    }

    /// True once `node` runs an engine that has its host id.
    pub fn ready(&self, node: usize) -> bool {
        self.nodes[node].engine.is_some() && self.nodes[node].host.is_some()
    }

    /// A violation of `invariant` now.
    pub fn violation_at(&self, invariant: Invariant, detail: String) -> Violation {
        Violation { invariant, at: self.now, detail }
    }

    /// Records `v` (the first violation stops the run after the current event).
    pub fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(v);
        }
    }

    /// Records a violation of `invariant` now.
    pub fn fail_with(&mut self, invariant: Invariant, detail: String) {
        self.fail(self.violation_at(invariant, detail));
    }

    /// Records the violation in `r`, if any; true if there was one.
    pub fn fail_if(&mut self, r: Result<(), Violation>) -> bool {
        match r {
            Ok(()) => false,
            Err(v) => {
                self.fail(v);
                true
            }
        }
    }

    /// True once a violation was recorded.
    pub fn failed(&self) -> bool {
        self.violation.is_some()
    }

    /// The violation recorded, if any (for checks after the event loop).
    pub fn take_violation(&mut self) -> Option<Violation> {
        self.violation.take()
    }

    /// Prints a trace line (with `Options::trace`).
    /// Cuts the network in two at random sides (all links between them, or
    /// one pair; both ways, or one way) until `until`, recorded in `hist`:
    /// returns the partition's id and its history span, for the heal.
    pub fn cut_at_random(&mut self, hist: &mut crate::history::History, until: Time) -> (u64, usize) {
        use rand::seq::SliceRandom;
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
        hist.cuts.push((norm, crate::history::Span { from: self.now, to: None }));
        self.report.partitions += 1;
        (id, hist.cuts.len() - 1)
    }

    pub fn trace(&self, f: impl FnOnce() -> String) {
        if self.opts.trace {
            eprintln!("[{}] {}", fmt_time(self.now), f());
        }
    }

    /// Judges the engine notices no workload acts on: hosts going up and down
    /// are traced; a host-id conflict, a version mismatch or a placement for a
    /// process that lent no buffer break an invariant. Other events are ignored.
    pub fn notice(&mut self, node: usize, ev: Event) {
        match ev {
            Event::HostUp { host, addr } => self.trace(|| format!("n{node} sees host {host:#x} up at {addr}")),
            Event::HostDown(host) => self.trace(|| format!("n{node} declares host {host:#x} down")),
            Event::Place { pid, .. } => {
                self.fail_with(Invariant::DataIntact, format!("{pid} lent no buffer but got a placement"))
            }
            Event::HostConflict { host, addr } => self.fail_with(
                Invariant::HostIds,
                format!("node {node} reports a conflict for host {host:#x} with {addr}"),
            ),
            Event::VersionMismatch { addr, version } => {
                self.fail_with(Invariant::HostIds, format!("node {node} reports version {version} at {addr}"))
            }
            _ => {}
        }
    }

    /// Folds `words` into the run's fingerprint: equal runs have equal fingerprints.
    pub fn fingerprint(&mut self, words: &[u64]) {
        for &w in words {
            self.report.fingerprint = mix(self.report.fingerprint, w);
        }
    }
}

/// A datagram's hash, for the run fingerprint.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(bytes.len() as u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}
