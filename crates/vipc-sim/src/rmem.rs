//! The remote-memory simulation (003, docs/RMEM.md): every node exports a
//! counter segment (8 CAS-II cells) and 2–3 data segments (random size,
//! access, protection group and notify policy); callers on every node
//! import the other nodes' segments by name and issue random operations —
//! writes and writevs (in and out of bounds, with forged handles), reads
//! into an anonymous segment, CAS-II increments of counter cells retried
//! with the same nonce after a timeout (003 §4.2.3), requests from outside
//! the protection group (with a handle another host imported), stale handles
//! after an unexport — while the owners toggle write-inhibited ranges,
//! drain their control channels, apply their data channels' writes later,
//! and unexport and re-export (same name, new generation) their data
//! segments; on the same virtual network as the other simulations (loss,
//! duplication, reordering, partitions, owner crashes and restarts).
//!
//! The checks rest on a reference model of every node's table
//! ([`crate::rmodel`]), written from docs/RMEM.md and PROTOCOL §4.15: each
//! request datagram is fed to the owner's model at the moment it is delivered,
//! so the model predicts exactly what the engine must do with it. Written
//! bytes encode (write, offset) (`write_byte`), so a byte is attributable.
//! Invariants:
//!
//! 1. [`Invariant::MemRead`]: a completed read's bytes are, byte for byte,
//!    the bytes the owner held at a moment it served that read (the model's
//!    snapshot; a duplicated request is served twice, so a byte may come
//!    from either serving — with one serving the read equals it whole, so
//!    a write datagram it overlaps is never seen torn); a CAS-II or import
//!    answer is one the owner gave; a refusal is one it made.
//! 2. [`Invariant::MemModel`]: after every delivery the owner's segment bytes
//!    equal the model's, and at the end every segment of every node: refused
//!    requests (bad generation, out of range, no access, outside the
//!    protection group, inhibited CAS) change nothing, applied ones land whole.
//! 3. [`Invariant::MemExactlyOnce`]: on an owner that never crashed, each
//!    counter cell ends with `confirmed ≤ value ≤ confirmed + ambiguous`,
//!    where `confirmed` counts increments whose caller saw success (directly,
//!    or on a same-nonce retry that shows its nonce and new value) and
//!    `ambiguous` those it cannot decide (a retry after a timeout that shows
//!    a third party's swap, abandoned after 4 timeouts, caller crashed) — so
//!    with one caller per cell, exactly `confirmed`. No lost or doubled increment.
//! 4. [`Invariant::Liveness`] / [`Invariant::NoLeak`] / [`Invariant::MemCounters`]:
//!    every read, CAS-II and import completes within `rmem_timeout` + margin;
//!    no operation is left pending in any engine at the end; after every
//!    delivery the owner's counters (refusals per reason, writes applied,
//!    reads and CAS-IIs served, imports served, writes queued, notifications)
//!    equal the model's — exact under loss and duplication, since the model
//!    sees each datagram the owner sees.
//! 5. [`Invariant::MemChannels`]: each control-channel record the owner
//!    polls is the model's next (one per applied operation whose policy asks:
//!    Always, or Conditional with the notify bit; none for Never), each
//!    data-channel record likewise (the writes that hit an inhibited byte),
//!    and applying a data record puts its pieces in (checked by 2); a
//!    `MemNotify` names a segment with a non-empty channel.
//!
//! Which engine mutation each invariant caught (run by hand, then reverted):
//! see the module doc of `tests/sim.rs` (section "rmem").

use crate::check::{fmt_time, Invariant, Violation};
use crate::rmodel::{Counters, NodeModel, Served};
use crate::scenario::Scenario;
use crate::world::{mix, App, Driver, Plumbing, World, MARGIN};
use crate::Options;
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use vipc_engine::{
    Access, Cas, CasAnswer, Config, Descriptor, Error, Event, HostId, Imported, MemOpId, MemOutcome, Notify,
    ProtectionGroup, Refusal, SegmentId, SegmentName, SegmentOptions, Strided, Time,
};
use vipc_wire::rmem::{CasFields, ImportFields, ReadFields, WriteFields, WritevFields};
use vipc_wire::{Flags, PacketType};

const WARMUP: Duration = Duration::from_millis(100);
/// Quiet time after the last caller went idle: late duplicates land.
const QUIET: Duration = Duration::from_millis(500);
const MAX_DRAIN: Duration = Duration::from_secs(30);
/// Counter cells per node.
const CELLS: u32 = 16;
/// Size of each caller's anonymous destination segment.
const DEST: usize = 8192;
/// A CAS-II increment is abandoned (ambiguous) after this many timeouts.
const CAS_TRIES: u32 = 4;

/// Counters of an rmem run, added to the [`crate::Report`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RmemStats {
    /// Writes and writevs handed to the network.
    pub writes: u64,
    /// Reads that returned their bytes.
    pub reads: u64,
    /// CAS-II increments confirmed by their caller.
    pub increments: u64,
    /// CAS-II increments the caller could not decide.
    pub ambiguous: u64,
    /// Imports that returned a handle.
    pub imports: u64,
    /// Operations that timed out.
    pub timeouts: u64,
    /// Refusals the owners counted, every reason.
    pub refusals: [u64; Refusal::ALL.len()],
    /// Control-channel records polled.
    pub control_records: u64,
    /// Data-channel records applied by their owner.
    pub data_records: u64,
    /// Unexports (each followed by a re-export under the same name).
    pub unexports: u64,
    /// Counter cells checked exactly-once at the end.
    pub cells_checked: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Counter,
    Data,
}

/// An exported segment of a node (current incarnation).
#[derive(Clone, Debug)]
struct Export {
    desc: Descriptor,
    name: SegmentName,
    kind: Kind,
    size: usize,
}

/// A node as an owner of segments: the model of its table and what it exports.
#[derive(Default)]
struct Owner {
    model: NodeModel,
    exports: Vec<Export>,
    /// Did this node ever crash (its counters are then out of scope)?
    crashed: bool,
}

/// A CAS-II increment in progress.
#[derive(Clone, Debug)]
struct Incr {
    owner: usize,
    cell: u32,
    expect: u32,
    nonce: u32,
    /// A timeout happened since this nonce was chosen: the swap may have been applied.
    retried: bool,
    timeouts: u32,
}

#[derive(Clone, Debug)]
enum OpKind {
    Import { owner: usize, slot: usize },
    Read { owner: usize, slot: usize, len: u32 },
    Cas,
}

#[derive(Clone, Debug)]
struct Op {
    id: MemOpId,
    kind: OpKind,
    started: Time,
}

struct Caller {
    node: usize,
    epoch: u32,
    dest: SegmentId,
    /// Handles by (owner node, slot).
    handles: BTreeMap<(usize, usize), Imported>,
    op: Option<Op>,
    incr: Option<Incr>,
}

/// The remote-memory workload's own events.
pub(crate) enum Ev {
    Act { caller: usize },
    Owner { node: usize, epoch: u32 },
    Drain { node: usize, epoch: u32 },
    Partition,
    Heal { id: u64 },
}

/// The key of a request: requester node, its incarnation, sequence number.
type Key = (usize, u32, u32);

/// Per counter cell (owner, cell): increments confirmed and undecided.
#[derive(Clone, Debug, Default)]
struct Tally {
    confirmed: u64,
    ambiguous: u64,
    /// The callers that incremented it (each caller has its own cell, `ci % CELLS`).
    callers: BTreeSet<usize>,
}

/// One rmem run.
pub struct RmemSim {
    w: World<Ev>,
    owners: Vec<Owner>,
    callers: Vec<Caller>,
    /// What each owner did with each request (a duplicate is served again).
    served: BTreeMap<Key, Vec<Served>>,
    /// Handles some host imported, by (owner, slot): lent to hosts refused.
    leaked: BTreeMap<(usize, usize), Imported>,
    tallies: BTreeMap<(usize, u32), Tally>,
    next_write: u64,
    next_nonce: u32,
    last_busy: Time,
}

/// Byte `o` of write `w`: every written byte says which write put it there
/// (up to the 1-in-256 chance of equal bytes).
fn write_byte(w: u64, o: u64) -> u8 {
    (mix(w, o) >> 24) as u8
}

fn seg_name(node: usize, slot: usize) -> SegmentName {
    let mut n = [0x5a; 16];
    n[0] = node as u8;
    n[1] = slot as u8;
    n
}

impl RmemSim {
    /// Prepares a run of the rmem scenario `sc` under `seed`.
    pub fn new(seed: u64, sc: &Scenario, opts: &Options) -> RmemSim {
        let plumbing = Plumbing { salt: 21, warmup: WARMUP, restart_ms: 100..1500, restart_grace: None };
        let w = World::new(seed, sc, opts, plumbing);
        RmemSim {
            owners: (0..w.nodes.len()).map(|_| Owner::default()).collect(),
            w,
            callers: Vec::new(),
            served: BTreeMap::new(),
            leaked: BTreeMap::new(),
            tallies: BTreeMap::new(),
            next_write: 1,
            next_nonce: 1,
            last_busy: Time::ZERO,
        }
    }

    fn busy(&self) -> bool {
        self.callers.iter().any(|c| c.op.is_some() || c.incr.is_some())
    }

    /// Feeds a request datagram to the owner's model, as the owner is about to see it.
    fn predict(&mut self, to: usize, from: usize, from_epoch: u32, bytes: &[u8]) {
        if !self.w.ready(to) {
            return;
        }
        let Ok(p) = vipc_wire::parse(bytes, None) else { return };
        let h = p.header;
        let model = &mut self.owners[to].model;
        let (src, host) = (h.src.host(), model.host);
        if src == host || src == 0 || h.src.is_group() {
            return;
        }
        if h.ptype != PacketType::MemImport && h.dst.host() != host {
            return;
        }
        let notify = h.flags.has(Flags::NOTIFY);
        let served = match h.ptype {
            PacketType::MemWrite if h.flags.has(Flags::ANSWER) => return,
            PacketType::MemWrite => {
                let f = WriteFields::get(&h);
                model.write(src, f.dest, f.offset, None, p.data, notify)
            }
            PacketType::MemWritev => {
                let f = WritevFields::get(&h);
                if f.count as u64 * f.elem as u64 != p.data.len() as u64 {
                    model.counters.refused[Refusal::Malformed.index()] += 1;
                    return;
                }
                model.write(src, f.dest, f.base, Some((f.stride, f.elem)), p.data, notify)
            }
            PacketType::MemRead => {
                let f = ReadFields::get(&h);
                // The token is the owner's secret: asked of the engine about to see this datagram.
                let (key, addr) = (self.w.key.is_some(), crate::world::node_addr(from));
                let token = self.w.nodes[to].engine.as_ref().map(|e| e.address_token(addr));
                model.read(src, (f.source, f.offset, f.len), notify, key || token == Some(f.token))
            }
            PacketType::MemCas => {
                let f = CasFields::get(&h);
                model.cas(src, f.target, f.offset, (f.expect, f.new, f.nonce), notify)
            }
            PacketType::MemImport => {
                let f = ImportFields::get(&h);
                let access = Access {
                    read: f.access & vipc_wire::rmem::ACCESS_READ != 0,
                    write: f.access & vipc_wire::rmem::ACCESS_WRITE != 0,
                };
                model.import(src, &f.name, access)
            }
            _ => return,
        };
        if matches!(h.ptype, PacketType::MemRead | PacketType::MemCas | PacketType::MemImport) {
            self.served.entry((from, from_epoch, h.seq)).or_default().push(served);
        }
    }

    /// Invariants 2 and 4 on the owner right after a delivery or an owner action.
    fn compare_owner(&mut self, node: usize) {
        let Some(e) = self.w.nodes[node].engine.as_ref() else { return };
        let got = Counters::of(&e.stats());
        let want = &self.owners[node].model.counters;
        if &got != want {
            let d = format!("node {node}: engine counters {got:?}, the model expects {want:?}");
            return self.w.fail_with(Invariant::MemCounters, d);
        }
        // Anonymous segments are the callers' destinations: answers write
        // them (checked by invariant 1), requests never may (NoAccess).
        for (desc, seg) in self.owners[node].model.segs.iter().filter(|(_, s)| s.name.is_some()) {
            let mut buf = vec![0; seg.bytes.len()];
            if let Err(err) = e.segment_read(*desc, 0, &mut buf) {
                let d = format!("node {node}: segment {desc:?} of the model unreadable: {err}");
                return self.w.fail_with(Invariant::MemModel, d);
            }
            if buf != seg.bytes {
                let at = (0..buf.len()).find(|&i| buf[i] != seg.bytes[i]).unwrap_or(0);
                let d = format!(
                    "node {node}: segment {desc:?} differs from the model at offset {at}: engine {:#04x}, model {:#04x} ({} bytes differ)",
                    buf[at],
                    seg.bytes[at],
                    (0..buf.len()).filter(|&i| buf[i] != seg.bytes[i]).count()
                );
                return self.w.fail_with(Invariant::MemModel, d);
            }
        }
    }
}

impl App for RmemSim {
    type Ev = Ev;

    fn world(&mut self) -> &mut World<Ev> {
        &mut self.w
    }

    fn config(&self, node: usize, epoch: u32) -> Config {
        let mut cfg = self.w.fixed_config(node, epoch);
        // Room for exactly the segments of a node (1 + 3 exported, 3 callers'
        // destinations): a re-export reuses the unexported slot with the next
        // generation, so stale handles meet a live slot.
        cfg.rmem_max_segments = 7;
        // Readers on even nodes receive every answer into lent memory when
        // they can; on odd nodes only reads of 2 KiB or more (the reads here
        // are 1 to 6000 bytes, all under the default limit of 8 KiB).
        cfg.rmem_lend_min = if node % 2 == 0 { 0 } else { 2048 };
        cfg
    }

    fn setup(&mut self) {
        self.w.start_all();
        self.w.schedule_crashes();
        if self.w.sc.partitions {
            let w = self.w.sc.workload.as_micros() as u64;
            for _ in 0..self.w.rng.gen_range(1..=3) {
                let at = self.w.begin + Duration::from_micros(self.w.rng.gen_range(0..w));
                self.w.push(at, Ev::Partition);
            }
        }
        self.w.schedule_end();
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Act { caller } => self.act(caller),
            Ev::Owner { node, epoch } => self.owner_act(node, epoch),
            Ev::Drain { node, epoch } => {
                if self.w.nodes[node].runs(epoch) {
                    self.drain(node);
                }
            }
            Ev::Partition => {
                if !self.w.running {
                    return;
                }
                let n = self.w.nodes.len();
                let a = self.w.rng.gen_range(0..n);
                let pairs: Vec<(usize, usize)> = (0..n).filter(|&b| b != a).map(|b| (a, b)).collect();
                let id = self.w.net.cut(&pairs);
                self.w.report.partitions += 1;
                let long = self.w.rng.gen_bool(0.3);
                let ms = if long { self.w.rng.gen_range(1000..2000) } else { self.w.rng.gen_range(20..300) };
                self.w.trace(|| format!("node {a} cut off for {ms} ms"));
                self.w.push(self.w.now + Duration::from_millis(ms), Ev::Heal { id });
            }
            Ev::Heal { id } => self.w.net.heal(id),
        }
    }

    fn on_event(&mut self, node: usize, ev: Event) {
        match ev {
            Event::MemDone(op) => {
                let found = self.callers.iter().position(|c| {
                    c.node == node && c.epoch == self.w.nodes[node].epoch && c.op.as_ref().is_some_and(|o| o.id == op)
                });
                let Some(ci) = found else {
                    return self.w.fail_with(Invariant::NoLeak, format!("node {node}: MemDone({op:?}) of no caller"));
                };
                let r = self.w.with_engine(node, |e, _| e.mem_poll(op));
                let Some(r) = r else {
                    return self
                        .w
                        .fail_with(Invariant::NoLeak, format!("node {node}: MemDone({op:?}) but mem_poll is None"));
                };
                self.w.fingerprint(&[self.w.now.0, op.0 as u64]);
                self.w.trace(|| format!("n{node} op {op:?} done: {r:?}"));
                self.completed(ci, r);
            }
            Event::MemNotify(desc) => {
                let Some(seg) = self.owners[node].model.segs.get(&desc) else {
                    return self
                        .w
                        .fail_with(Invariant::MemChannels, format!("node {node}: MemNotify({desc:?}) of no segment"));
                };
                if seg.control.is_empty() && seg.data.is_empty() {
                    let d = format!("node {node}: MemNotify({desc:?}) but the model's channels are empty");
                    return self.w.fail_with(Invariant::MemChannels, d);
                }
                let at = self.w.now + Duration::from_micros(self.w.rng.gen_range(0..20_000));
                let epoch = self.w.nodes[node].epoch;
                self.w.push(at, Ev::Drain { node, epoch });
            }
            Event::HostReady(h) => {
                let cfg = vipc_engine::Config::default();
                self.owners[node].model = NodeModel::new(h, cfg.rmem_control_queue, cfg.rmem_data_queue);
                self.exports(node);
                let epoch = self.w.nodes[node].epoch;
                for _ in 0..self.w.rng.gen_range(1..=3) {
                    self.spawn(node);
                }
                let at = self.w.now.max(Time::ZERO + WARMUP) + Duration::from_millis(self.w.rng.gen_range(5..50));
                self.w.push(at, Ev::Owner { node, epoch });
            }
            Event::Wake { pid, .. } | Event::Place { pid, .. } => {
                self.w.fail_with(Invariant::OneCompletion, format!("node {node}: {pid} woken in an rmem run"))
            }
            other => self.w.notice(node, other),
        }
    }

    fn started(&mut self, node: usize) {
        self.owners[node].exports.clear();
    }

    fn crashed(&mut self, node: usize) {
        self.owners[node].crashed = true;
        // Its callers die; an increment in flight may still be applied.
        for c in self.callers.iter_mut().filter(|c| c.node == node) {
            c.op = None;
            if let Some(i) = c.incr.take() {
                self.tallies.entry((i.owner, i.cell)).or_default().ambiguous += 1;
                self.w.report.rmem.ambiguous += 1;
            }
        }
    }

    fn arriving(&mut self, to: usize, from: usize, from_epoch: u32, bytes: &[u8]) {
        self.predict(to, from, from_epoch, bytes);
    }

    fn arrived(&mut self, to: usize) {
        self.compare_owner(to);
    }

    fn watchdog(&mut self) {
        let limit = vipc_engine::Config::default().rmem_timeout + MARGIN;
        let late = self
            .callers
            .iter()
            .filter_map(|c| c.op.as_ref().map(|o| (c, o)))
            .find(|(c, o)| self.w.nodes[c.node].epoch == c.epoch && self.w.now.since(o.started) > limit);
        if let Some((c, o)) = late {
            let d = format!(
                "node {} operation {:?} ({:?}) started at {} has not completed within rmem_timeout + margin",
                c.node,
                o.id,
                o.kind,
                fmt_time(o.started)
            );
            self.w.fail_with(Invariant::Liveness, d);
        }
    }

    /// Ends once no caller has been busy for a while (late duplicates landed).
    fn end_check(&mut self) -> Option<Time> {
        let busy = self.busy();
        if busy {
            self.last_busy = self.w.now;
        }
        let quiet_at = self.last_busy.max(self.w.stop_at) + QUIET;
        self.w.end_when(busy, quiet_at, MAX_DRAIN, Duration::from_millis(100))
    }

    /// Invariants 3 and 4 at the end, after every owner drained its channels.
    fn final_checks(&mut self) -> Result<(), Violation> {
        for node in 0..self.w.nodes.len() {
            if !self.w.ready(node) {
                continue;
            }
            self.drain(node);
            if let Some(v) = self.w.take_violation() {
                return Err(v);
            }
            let s = self.w.nodes[node].engine.as_ref().expect("live").stats();
            if s.rmem_ops_pending != 0 {
                let d =
                    format!("node {node}: {} remote-memory operations still pending at the end", s.rmem_ops_pending);
                return Err(self.w.violation_at(Invariant::NoLeak, d));
            }
            for (i, r) in s.rmem_refused.iter().enumerate().take(Refusal::ALL.len()) {
                self.w.report.rmem.refusals[i] += r;
            }
        }
        if let Some(c) = self.callers.iter().position(|c| c.op.is_some() && self.w.nodes[c.node].epoch == c.epoch) {
            let d = format!("caller c{c} still has {:?} pending at the end", self.callers[c].op);
            return Err(self.w.violation_at(Invariant::Liveness, d));
        }
        // Invariant 3 on owners that never crashed.
        // A cell shared by callers (a caller index reused after a restart):
        // a third party's swap hides ours, so only the lower bound holds.
        for (&(owner, cell), t) in &self.tallies {
            let (o, engine) = (&self.owners[owner], self.w.nodes[owner].engine.as_ref());
            if o.crashed
                || engine.is_none()
                || self.callers.iter().any(|c| c.incr.as_ref().is_some_and(|i| i.owner == owner && i.cell == cell))
            {
                continue;
            }
            let ex = o.exports.iter().find(|x| x.kind == Kind::Counter).expect("a counter segment");
            let mut b = [0; 8];
            engine.expect("live").segment_read(ex.desc, cell * 8, &mut b).expect("cell");
            let value = CasAnswer::from_bytes(&b).expect("8 bytes").value as u64;
            self.w.report.rmem.cells_checked += 1;
            let shared = t.callers.len() > 1;
            if value < t.confirmed || (!shared && value > t.confirmed + t.ambiguous) {
                let d = format!(
                    "node {owner} counter cell {cell} holds {value}, but {} increments were confirmed and {} undecided (callers {:?})",
                    t.confirmed, t.ambiguous, t.callers
                );
                return Err(self.w.violation_at(Invariant::MemExactlyOnce, d));
            }
        }
        Ok(())
    }
}

impl RmemSim {
    // -------------------------------------------------------------- owners

    /// Exports the node's counter segment (slot 0) and 2–3 data segments.
    fn exports(&mut self, node: usize) {
        let data = self.w.rng.gen_range(2..=3);
        for slot in 0..=data {
            self.export(node, slot);
        }
    }

    fn export(&mut self, node: usize, slot: usize) {
        let n = self.w.nodes.len();
        let (kind, size) = if slot == 0 { (Kind::Counter, CELLS as usize * 8) } else { (Kind::Data, 0) };
        let size = if kind == Kind::Data { self.w.rng.gen_range(64..6000) } else { size };
        let notify = *[Notify::Never, Notify::Always, Notify::Conditional].choose(&mut self.w.rng).expect("three");
        let access = if kind == Kind::Data && self.w.rng.gen_bool(0.2) { Access::READ } else { Access::READ_WRITE };
        let protection = if kind == Kind::Data && self.w.rng.gen_bool(0.3) {
            // Some other hosts, never all.
            let mut hosts: Vec<HostId> = (0..n).filter(|&i| i != node).map(|i| i as HostId + 1).collect();
            hosts.shuffle(&mut self.w.rng);
            hosts.truncate(self.w.rng.gen_range(1..n - 1).max(1));
            ProtectionGroup::Hosts(hosts)
        } else {
            ProtectionGroup::Any
        };
        let opts = SegmentOptions { access, notify, protection };
        let name = seg_name(node, slot);
        let r = self.w.with_engine(node, |e, _| e.export_segment(Some(name), size, opts.clone()));
        match r {
            Ok(desc) => {
                self.owners[node].model.export(desc, Some(name), opts, size);
                self.owners[node].exports.push(Export { desc, name, kind, size });
            }
            Err(e) => self.w.fail_with(Invariant::Success, format!("node {node}: export of slot {slot} failed: {e}")),
        }
    }

    /// An owner's random action: toggle inhibition, drain, unexport and re-export.
    fn owner_act(&mut self, node: usize, epoch: u32) {
        if self.w.nodes[node].epoch != epoch || self.w.nodes[node].engine.is_none() {
            return;
        }
        let roll = self.w.rng.gen_range(0..100);
        let k = self.w.rng.gen_range(0..self.owners[node].exports.len());
        let ex = self.owners[node].exports[k].clone();
        if roll < 45 {
            let (off, len) = if ex.kind == Kind::Counter {
                (self.w.rng.gen_range(0..CELLS) * 8, 8)
            } else {
                let off = self.w.rng.gen_range(0..ex.size);
                (off as u32, self.w.rng.gen_range(1..=(ex.size - off).min(600)) as u32)
            };
            let on = self.w.rng.gen_bool(0.5) && self.w.running;
            let r = self.w.with_engine(node, |e, _| e.segment_set_inhibit(ex.desc, off, len, on));
            if r.is_ok() {
                let seg = self.owners[node].model.segs.get_mut(&ex.desc).expect("exported");
                seg.inhibited[off as usize..(off + len) as usize].iter_mut().for_each(|b| *b = on);
                self.w.trace(|| format!("n{node} inhibit {:?} {off}+{len} {on}", ex.desc));
            }
        } else if roll < 75 {
            self.drain(node);
        } else if roll < 85 && ex.kind == Kind::Data && self.w.sc.rmem_unexport && self.w.running {
            self.drain(node);
            if let Err(e) = self.w.with_engine(node, |e, _| e.unexport_segment(ex.desc)) {
                return self.w.fail_with(Invariant::Success, format!("node {node}: unexport failed: {e}"));
            }
            self.owners[node].model.segs.remove(&ex.desc);
            self.owners[node].exports.remove(k);
            self.w.report.rmem.unexports += 1;
            let slot = ex.name[1] as usize;
            self.w.trace(|| format!("n{node} unexports {:?} (slot {slot})", ex.desc));
            self.export(node, slot);
        }
        self.compare_owner(node);
        self.settle(node);
        let gap = if self.w.running { self.w.rng.gen_range(5..60) } else { 100 };
        self.w.push(self.w.now + Duration::from_millis(gap), Ev::Owner { node, epoch });
    }

    /// Invariant 5: the owner polls every channel; each record must be the
    /// model's next; data records are applied by the owner now.
    fn drain(&mut self, node: usize) {
        let descs: Vec<Descriptor> = self.owners[node].exports.iter().map(|x| x.desc).collect();
        for desc in descs {
            loop {
                let got = self.w.with_engine(node, |e, _| e.segment_poll_control(desc));
                let seg = self.owners[node].model.segs.get_mut(&desc).expect("exported");
                let want = seg.control.pop_front();
                match got {
                    Ok(g) if g == want => {
                        if g.is_none() {
                            break;
                        }
                        self.w.report.rmem.control_records += 1;
                    }
                    other => {
                        let d = format!("node {node} {desc:?}: control channel gave {other:?}, the model {want:?}");
                        return self.w.fail_with(Invariant::MemChannels, d);
                    }
                }
            }
            loop {
                let got = self.w.with_engine(node, |e, _| e.segment_poll_data(desc));
                let seg = self.owners[node].model.segs.get_mut(&desc).expect("exported");
                let want = seg.data.pop_front();
                if let Some(w) = &want {
                    seg.data_bytes -= w.data.len();
                }
                match got {
                    Ok(g) if g == want => {
                        let Some(r) = g else { break };
                        self.w.report.rmem.data_records += 1;
                        for (off, piece) in r.pieces() {
                            let seg = self.owners[node].model.segs.get_mut(&desc).expect("exported");
                            seg.bytes[off as usize..off as usize + piece.len()].copy_from_slice(piece);
                            let w = self.w.with_engine(node, |e, _| e.segment_write(desc, off as u32, piece));
                            if let Err(e) = w {
                                let d = format!("node {node}: applying a data record at {off} failed: {e}");
                                return self.w.fail_with(Invariant::MemChannels, d);
                            }
                        }
                    }
                    other => {
                        let d = format!("node {node} {desc:?}: data channel gave {other:?}, the model {want:?}");
                        return self.w.fail_with(Invariant::MemChannels, d);
                    }
                }
            }
        }
        self.compare_owner(node);
    }

    // ------------------------------------------------------------- callers

    fn spawn(&mut self, node: usize) {
        let dest = match self.w.with_engine(node, |e, _| e.export_segment(None, DEST, SegmentOptions::default())) {
            Ok(d) => d,
            Err(e) => return self.w.fail_with(Invariant::Success, format!("node {node}: anonymous segment: {e}")),
        };
        self.owners[node].model.export(dest, None, SegmentOptions::default(), DEST);
        let epoch = self.w.nodes[node].epoch;
        self.callers.push(Caller { node, epoch, dest, handles: BTreeMap::new(), op: None, incr: None });
        let at = self.w.now.max(Time::ZERO + WARMUP) + Duration::from_micros(self.w.rng.gen_range(0..20_000));
        self.w.push(at, Ev::Act { caller: self.callers.len() - 1 });
    }

    fn alive(&self, ci: usize) -> bool {
        let c = &self.callers[ci];
        self.w.nodes[c.node].epoch == c.epoch && self.w.ready(c.node)
    }

    fn next_act(&mut self, ci: usize, lo: u64, hi: u64) {
        let at = self.w.now + Duration::from_micros(self.w.rng.gen_range(lo..hi));
        self.w.push(at, Ev::Act { caller: ci });
    }

    fn act(&mut self, ci: usize) {
        if !self.alive(ci) || self.callers[ci].op.is_some() {
            return;
        }
        let node = self.callers[ci].node;
        if let Some(incr) = self.callers[ci].incr.clone() {
            // An increment in progress goes on (after a timeout: the same nonce).
            self.cas(ci, incr);
        } else if self.w.running {
            self.random_op(ci);
        }
        self.settle(node);
        if self.callers[ci].op.is_none() && (self.w.running || self.callers[ci].incr.is_some()) {
            self.next_act(ci, 500, 8000);
        }
    }

    fn random_op(&mut self, ci: usize) {
        let node = self.callers[ci].node;
        let others: Vec<usize> = (0..self.w.nodes.len()).filter(|&i| i != node).collect();
        let owner = *others.choose(&mut self.w.rng).expect("other nodes");
        let roll = self.w.rng.gen_range(0..100);
        if roll < 25 {
            // A CAS-II increment of a counter cell.
            let Some(h) = self.handle_of(ci, owner, 0) else { return };
            let _ = h;
            let cell = ci as u32 % CELLS;
            let nonce = self.fresh_nonce();
            self.tallies.entry((owner, cell)).or_default().callers.insert(ci);
            let incr = Incr { owner, cell, expect: 0, nonce, retried: false, timeouts: 0 };
            self.callers[ci].incr = Some(incr.clone());
            return self.cas(ci, incr);
        }
        // Slot 3 exists on some nodes only: an import of it may end in UnknownName.
        let slots = if self.w.rng.gen_bool(0.05) { 3 } else { self.w.rng.gen_range(1..=2) };
        let Some(mut h) = self.handle_of(ci, owner, slots) else { return };
        if self.w.rng.gen_bool(0.1) {
            // A forged handle: more bytes and more access than granted.
            h = Imported { size: h.size + 512, access: Access::READ_WRITE, ..h };
        }
        let notify = self.w.rng.gen_bool(0.5);
        let size = h.size;
        if roll < 65 {
            if !h.access.write {
                return;
            }
            let off = self.w.rng.gen_range(0..size);
            let len = self.w.rng.gen_range(1..=(size - off).min(3000));
            let w = self.next_write;
            self.next_write += 1;
            let r = if self.w.rng.gen_bool(0.3) {
                let elem = self.w.rng.gen_range(1..=len.min(64));
                let stride = elem + self.w.rng.gen_range(0..=elem * 2);
                let count = ((size - off - elem) / stride + 1).min(40);
                let count = self.w.rng.gen_range(1..=count);
                let data: Vec<u8> = (0..(count * elem) as u64).map(|o| write_byte(w, o)).collect();
                self.w.trace(|| format!("c{ci} writev #{w} {:?} {off} stride {stride} elem {elem} x{count}", h.desc));
                let shape = Strided { stride, elem };
                self.w.with_engine(node, |e, _| e.mem_writev(&h, off, shape, &data, notify))
            } else {
                let data: Vec<u8> = (0..len as u64).map(|o| write_byte(w, off as u64 + o)).collect();
                self.w.trace(|| format!("c{ci} write #{w} {:?} {off}+{len}", h.desc));
                self.w.with_engine(node, |e, _| e.mem_write(&h, off, &data, notify))
            };
            match r {
                Ok(()) => self.w.report.rmem.writes += 1,
                Err(e) => {
                    self.w.fail_with(Invariant::Success, format!("c{ci}: a write within the handle refused: {e}"))
                }
            }
        } else {
            let off = self.w.rng.gen_range(0..size);
            let len = self.w.rng.gen_range(1..=(size - off).min(DEST as u32));
            let dest = self.callers[ci].dest;
            let now = self.w.now;
            let r = self.w.with_engine(node, |e, t| e.mem_read(t, &h, off, len, (dest, 0), notify));
            self.w.trace(|| format!("c{ci} read {:?} {off}+{len}: {r:?}", h.desc));
            match r {
                Ok(id) => {
                    self.callers[ci].op = Some(Op { id, kind: OpKind::Read { owner, slot: slots, len }, started: now })
                }
                Err(e) => self.w.fail_with(Invariant::Success, format!("c{ci}: a read within the handle refused: {e}")),
            }
        }
    }

    fn fresh_nonce(&mut self) -> u32 {
        self.next_nonce += 1;
        self.next_nonce
    }

    /// The caller's handle of (owner, slot); if it has none, starts an
    /// import (and returns None) — or, refused before, borrows another host's.
    fn handle_of(&mut self, ci: usize, owner: usize, slot: usize) -> Option<Imported> {
        if let Some(h) = self.callers[ci].handles.get(&(owner, slot)) {
            return Some(*h);
        }
        if self.w.rng.gen_bool(0.3) {
            if let Some(h) = self.leaked.get(&(owner, slot)) {
                return Some(*h);
            }
        }
        let node = self.callers[ci].node;
        let access = if self.w.rng.gen_bool(0.7) { Access::READ_WRITE } else { Access::READ };
        let name = seg_name(owner, slot);
        let now = self.w.now;
        match self.w.with_engine(node, |e, t| e.mem_import(t, name, access)) {
            Ok(id) => self.callers[ci].op = Some(Op { id, kind: OpKind::Import { owner, slot }, started: now }),
            Err(e) => self.w.fail_with(Invariant::Success, format!("c{ci}: import refused at once: {e}")),
        }
        None
    }

    fn cas(&mut self, ci: usize, incr: Incr) {
        let node = self.callers[ci].node;
        let h = self.callers[ci].handles.get(&(incr.owner, 0)).copied();
        let Some(h) = h else {
            // Lost its handle (stale): re-import; the increment waits.
            self.handle_of(ci, incr.owner, 0);
            return;
        };
        let cas = Cas { expect: incr.expect, new: incr.expect.wrapping_add(1), nonce: incr.nonce };
        let (dest, notify, now) = (self.callers[ci].dest, self.w.rng.gen_bool(0.5), self.w.now);
        let r = self.w.with_engine(node, |e, t| e.mem_cas(t, &h, incr.cell * 8, cas, (dest, 0), notify));
        self.w.trace(|| format!("c{ci} cas {:?} cell {} {cas:?}: {r:?}", h.desc, incr.cell));
        match r {
            Ok(id) => self.callers[ci].op = Some(Op { id, kind: OpKind::Cas, started: now }),
            Err(e) => self.w.fail_with(Invariant::Success, format!("c{ci}: CAS-II refused at once: {e}")),
        }
    }

    /// Invariant 1 (and the caller's side of 3): an operation finished.
    fn completed(&mut self, ci: usize, r: Result<MemOutcome, Error>) {
        let c = &self.callers[ci];
        let (node, epoch, dest) = (c.node, c.epoch, c.dest);
        let op = self.callers[ci].op.take().expect("a pending operation");
        let served = self.served.remove(&(node, epoch, op.id.0)).unwrap_or_default();
        if let Err(Error::Timeout(_)) | Err(Error::Refused(Refusal::UnknownName)) = &r {
            self.w.report.rmem.timeouts += 1;
        } else if let Err(Error::Refused(why)) = &r {
            if !served.contains(&Served::Refused(*why)) {
                let d = format!("c{ci} {:?} ({:?}) refused {why:?}; the owner's refusals: {served:?}", op.id, op.kind);
                return self.w.fail_with(Invariant::MemRead, d);
            }
        }
        match (&op.kind, r) {
            (OpKind::Import { owner, slot }, Ok(MemOutcome::Import(h))) => {
                if !served.contains(&Served::Import(h)) {
                    let d = format!("c{ci}: import of ({owner}, {slot}) gave {h:?}; the owner answered {served:?}");
                    return self.w.fail_with(Invariant::MemRead, d);
                }
                self.w.report.rmem.imports += 1;
                self.callers[ci].handles.insert((*owner, *slot), h);
                self.leaked.insert((*owner, *slot), h);
            }
            (OpKind::Read { len, .. }, Ok(MemOutcome::Read)) => {
                let mut got = vec![0; *len as usize];
                if let Err(e) = self.w.with_engine(node, |e, _| e.segment_read(dest, 0, &mut got)) {
                    return self.w.fail_with(Invariant::MemRead, format!("c{ci}: destination unreadable: {e}"));
                }
                let snaps: Vec<&Vec<u8>> =
                    served.iter().filter_map(|s| if let Served::Read(b) = s { Some(b) } else { None }).collect();
                let bad = (0..got.len()).find(|&i| !snaps.iter().any(|s| s.get(i) == Some(&got[i])));
                if snaps.is_empty() || bad.is_some() {
                    let i = bad.unwrap_or(0);
                    let d = format!(
                        "c{ci}: read {:?} of {len} bytes: byte {i} is {:#04x}, but the owner served {} snapshot(s) with {:?} there",
                        op.id,
                        got[i],
                        snaps.len(),
                        snaps.iter().map(|s| s.get(i)).collect::<Vec<_>>()
                    );
                    return self.w.fail_with(Invariant::MemRead, d);
                }
                self.w.report.rmem.reads += 1;
            }
            (OpKind::Cas, Ok(MemOutcome::Cas(a))) => {
                let mut cell = [0; 8];
                let readable = self.w.with_engine(node, |e, _| e.segment_read(dest, 0, &mut cell)).is_ok();
                if !served.contains(&Served::Cas(a)) || !readable || cell != a.to_bytes() {
                    let d = format!("c{ci}: CAS-II answer {a:?} (destination {cell:?}); the owner answered {served:?}");
                    return self.w.fail_with(Invariant::MemRead, d);
                }
                self.cas_answer(ci, a);
            }
            (OpKind::Cas, Err(e)) => self.cas_failed(ci, e),
            (OpKind::Import { owner, slot: 0 }, Err(_)) => {
                // No handle for the counter: an increment waiting for it is given up.
                if let Some(i) = self.callers[ci].incr.take_if(|i| i.owner == *owner) {
                    if i.retried {
                        self.tallies.entry((i.owner, i.cell)).or_default().ambiguous += 1;
                        self.w.report.rmem.ambiguous += 1;
                    }
                }
            }
            (OpKind::Import { .. }, Err(_)) => {}
            (OpKind::Read { owner, slot, .. }, Err(Error::Refused(Refusal::UnknownSegment))) => {
                // A stale handle (unexported, or the owner restarted): import again later.
                self.callers[ci].handles.remove(&(*owner, *slot));
            }
            (OpKind::Read { .. }, Err(_)) => {}
            (kind, r) => {
                return self.w.fail_with(Invariant::MemRead, format!("c{ci}: {kind:?} finished with {r:?}"));
            }
        }
        if self.alive(ci) && (self.w.running || self.callers[ci].incr.is_some()) {
            self.next_act(ci, 200, 5000);
        }
    }

    fn cas_answer(&mut self, ci: usize, a: CasAnswer) {
        let Some(mut incr) = self.callers[ci].incr.take() else { return };
        let new = incr.expect.wrapping_add(1);
        let tally = self.tallies.entry((incr.owner, incr.cell)).or_default();
        // Success answers {expect, our nonce}. An answer {new, our nonce}
        // also shows our swap: a retry after a lost answer — or the answer to
        // a duplicate of the request, served after the swap, that arrived first.
        let done = a.nonce == incr.nonce && (a.value == incr.expect || a.value == new);
        if done {
            tally.confirmed += 1;
        } else if incr.retried && tally.callers.len() > 1 {
            // Our swap may have happened and been overwritten since.
            tally.ambiguous += 1;
        }
        if done {
            self.w.report.rmem.increments += 1;
            return;
        }
        // Try again from the value found, with a fresh nonce.
        incr.expect = a.value;
        incr.nonce = self.fresh_nonce();
        incr.retried = false;
        incr.timeouts = 0;
        self.callers[ci].incr = Some(incr);
    }

    fn cas_failed(&mut self, ci: usize, e: Error) {
        let Some(mut incr) = self.callers[ci].incr.take() else { return };
        match e {
            Error::Timeout(_) => {
                incr.timeouts += 1;
                incr.retried = true;
                if incr.timeouts < CAS_TRIES {
                    self.callers[ci].incr = Some(incr);
                    return;
                }
            }
            // Inhibited: not applied; try again later with the same nonce.
            Error::Refused(Refusal::WriteInhibited) => {
                self.callers[ci].incr = Some(incr);
                return;
            }
            _ => {
                // A stale handle (the owner restarted): start over.
                self.callers[ci].handles.remove(&(incr.owner, 0));
            }
        }
        if incr.retried {
            self.tallies.entry((incr.owner, incr.cell)).or_default().ambiguous += 1;
            self.w.report.rmem.ambiguous += 1;
        }
    }
}
