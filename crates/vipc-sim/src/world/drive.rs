//! The event loop over virtual time, and the hook through which a
//! simulation plugs its workload and checks into it.

use super::{digest, Ev, World, WATCHDOG};
use crate::check::{Invariant, Violation};
use rand::seq::SliceRandom;
use rand::Rng;
use std::time::Duration;
use vipc_engine::{Config, Engine, Event, Time};

/// What a simulation adds to the [`World`]: its engine configuration, its
/// own events, what it does with what the engines emit, and its checks.
/// Hooks run with `world().now` set to the moment they happen at.
pub(crate) trait App {
    /// The simulation's own events (its workload, its faults beyond crashes).
    type Ev;

    /// The world the simulation runs in.
    fn world(&mut self) -> &mut World<Self::Ev>;

    /// The engine configuration of `node` in its incarnation `epoch`.
    fn config(&self, node: usize, epoch: u32) -> Config;

    /// Schedules the first events: node starts ([`World::start_all`]), the
    /// workload, faults ([`World::schedule_crashes`]) and the end ([`World::schedule_end`]).
    fn setup(&mut self);

    /// One of the simulation's own events is due.
    fn handle(&mut self, ev: Self::Ev);

    /// `node`'s engine emitted `ev` (the world has already noted a
    /// `HostReady`'s host id and kept `GroupJoined`/`GroupLeft` to itself).
    fn on_event(&mut self, node: usize, ev: Event);

    /// `node` now runs a fresh engine (its first start or a restart).
    fn started(&mut self, _node: usize) {}

    /// `node` crashed: its engine and events are gone.
    fn crashed(&mut self, _node: usize) {}

    /// A datagram from `from` (incarnation `from_epoch`) is about to reach `to`'s engine.
    fn arriving(&mut self, _to: usize, _from: usize, _from_epoch: u32, _bytes: &[u8]) {}

    /// `to`'s engine has handled a datagram (its events not yet seen).
    fn arrived(&mut self, _to: usize) {}

    /// `node`'s events have all been seen; its timer is armed next.
    fn settled(&mut self, _node: usize) {}

    /// Every 50 ms: are blocked calls still within their bounds?
    fn watchdog(&mut self);

    /// The workload stopped and partitions healed.
    fn stopped(&mut self) {}

    /// At a scheduled end: None to end the run now, or when to look again
    /// (usually [`World::end_when`]).
    fn end_check(&mut self) -> Option<Time>;

    /// The checks once the run is over.
    fn final_checks(&mut self) -> Result<(), Violation>;
}

/// What the world does for every [`App`].
pub(crate) trait Driver: App {
    /// Runs to the end and performs the final checks.
    fn run(&mut self) -> Result<(), Violation>;

    /// Hands `node`'s pending events to the simulation (which may cause
    /// more), then arms its timer. Call after every call into its engine.
    fn settle(&mut self, node: usize);
}

impl<A: App> Driver for A {
    fn run(&mut self) -> Result<(), Violation> {
        let r = run_to_end(self);
        let w = self.world();
        w.report.net = w.net.stats.clone();
        w.report.end = w.now;
        if let Err(v) = &r {
            w.trace(|| format!("VIOLATION {v}"));
        }
        r
    }

    fn settle(&mut self, node: usize) {
        loop {
            let w = self.world();
            w.collect(node);
            let Some(ev) = w.nodes[node].events.pop_front() else { break };
            if note(w, node, &ev) {
                self.on_event(node, ev);
            }
            if self.world().failed() {
                return;
            }
        }
        self.settled(node);
        let w = self.world();
        if !w.failed() {
            w.arm_timer(node);
        }
    }
}

fn run_to_end<A: App>(app: &mut A) -> Result<(), Violation> {
    app.setup();
    loop {
        let w = app.world();
        let Some((at, ev)) = w.queue.pop() else { break };
        w.now = at;
        w.report.events += 1;
        if w.report.events > w.opts.max_events {
            let detail = format!("{} events processed without reaching the end of the run", w.opts.max_events);
            return Err(w.violation_at(Invariant::Budget, detail));
        }
        if let Ev::End = ev {
            match app.end_check() {
                None => break,
                Some(next) => app.world().queue.push(next, Ev::End),
            }
            continue;
        }
        handle(app, ev);
        if let Some(v) = app.world().take_violation() {
            return Err(v);
        }
    }
    app.final_checks()
}

fn handle<A: App>(app: &mut A, ev: Ev<A::Ev>) {
    match ev {
        Ev::Deliver { to, to_epoch, from, from_epoch, bytes } => deliver(app, to, to_epoch, from, from_epoch, bytes),
        Ev::Timer { node, epoch } => timer(app, node, epoch),
        Ev::Start { node } => start(app, node),
        Ev::Crash => crash(app),
        Ev::Stop => {
            let w = app.world();
            w.trace(|| "workload stops; partitions heal".to_string());
            w.running = false;
            w.net.heal_all();
            app.stopped();
        }
        Ev::Watchdog => {
            app.watchdog();
            let w = app.world();
            w.queue.push(w.now + WATCHDOG, Ev::Watchdog);
        }
        Ev::End => {}
        Ev::App(ev) => app.handle(ev),
    }
}

/// What the world itself keeps of an engine event: host ids, and the group
/// addresses that route `Destination::Group`. True if the simulation gets it.
fn note<E>(w: &mut World<E>, node: usize, ev: &Event) -> bool {
    match *ev {
        Event::HostReady(h) => w.nodes[node].host = Some(h),
        Event::GroupJoined(g) => {
            if !w.nodes[node].listening.insert(g) {
                w.fail_with(Invariant::GroupListen, format!("node {node}: joined {g} twice"));
            }
            return false;
        }
        Event::GroupLeft(g) => {
            if !w.nodes[node].listening.remove(&g) {
                w.fail_with(Invariant::GroupListen, format!("node {node}: left {g}, not joined"));
            }
            return false;
        }
        _ => {}
    }
    true
}

fn deliver<A: App>(app: &mut A, to: usize, to_epoch: u32, from: usize, from_epoch: u32, mut bytes: Vec<u8>) {
    let w = app.world();
    if !w.nodes[to].runs(to_epoch) || !w.nodes[from].runs(from_epoch) {
        w.report.vanished += 1;
        return;
    }
    w.report.delivered += 1;
    if w.net.corrupt(&mut bytes) {
        w.trace(|| "  (this datagram was damaged on purpose)".to_string());
    }
    w.fingerprint(&[w.now.0, from as u64, to as u64, digest(&bytes)]);
    w.trace(|| format!("n{from} => n{to} {}", super::describe(&bytes, w.key.as_ref())));
    app.arriving(to, from, from_epoch, &bytes);
    let w = app.world();
    let addr = w.nodes[from].addr;
    w.feed(to, addr, &bytes);
    // Bytes for a buffer lent to a MoveFrom go there before the next datagram.
    if !w.place(to, &bytes) {
        return;
    }
    app.arrived(to);
    app.settle(to);
}

fn timer<A: App>(app: &mut A, node: usize, epoch: u32) {
    let w = app.world();
    if !w.nodes[node].runs(epoch) {
        return;
    }
    let now = w.now;
    let n = &mut w.nodes[node];
    n.timers.remove(&now);
    let local = Time(now.0 + n.clock);
    if n.engine.as_ref().and_then(|e| e.poll_timeout()).is_some_and(|t| t <= local) {
        w.with_engine(node, |e, now| e.handle_timeout(now));
    }
    app.settle(node);
}

fn start<A: App>(app: &mut A, node: usize) {
    let n = &mut app.world().nodes[node];
    n.epoch += 1;
    n.host = None;
    n.timers.clear();
    n.events.clear();
    n.listening.clear();
    n.appended_dropped.clear();
    let epoch = n.epoch;
    let cfg = app.config(node, epoch);
    let w = app.world();
    let (now, clock) = (w.now, w.rng.gen_range(0..1u64 << 50));
    let n = &mut w.nodes[node];
    n.clock = clock;
    n.engine = Some(Engine::new(cfg, Time(now.0 + clock)));
    w.net.reset_egress(node, now);
    app.started(node);
    app.world().trace(|| format!("node {node} starts (incarnation {epoch})"));
    app.settle(node);
}

fn crash<A: App>(app: &mut A) {
    let w = app.world();
    if !w.running {
        return;
    }
    let up: Vec<usize> = (0..w.nodes.len()).filter(|&i| w.nodes[i].engine.is_some()).collect();
    if up.len() <= 2 {
        return;
    }
    let node = *up.choose(&mut w.rng).expect("non-empty");
    w.trace(|| format!("node {node} CRASHES"));
    w.report.crashes += 1;
    let n = &mut w.nodes[node];
    n.engine = None;
    n.epoch += 1;
    n.events.clear();
    n.timers.clear();
    app.crashed(node);
    let w = app.world();
    if w.sc.restarts && w.rng.gen_bool(0.8) {
        let at = w.now + Duration::from_millis(w.rng.gen_range(w.plumbing.restart_ms.clone()));
        if w.plumbing.restart_grace.is_none_or(|g| at < w.stop_at + g) {
            w.start_at(at, node);
        }
    }
}
