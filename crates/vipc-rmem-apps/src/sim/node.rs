//! One node of the simulation: the logical processes of its gates, and a
//! link to every other node. It loops: take the records the links bring,
//! let every gate simulate as far as its inputs allow (changes for gates
//! here go straight into their queues, the others into the link to their
//! node), write what the links hold; with nothing to do, it sleeps on its
//! segment's control channel, woken by the records and acknowledgements
//! the other nodes write with the notify bit.

use super::circuit::{Circuit, Placement, Vector};
use super::link::{Addressed, Link, LinkStats, REGION};
use super::lp::{Lp, Msg};
use super::reference::{end_time, OutputEvent};
use crate::{Error, Result};
use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, ExportedSegment, Node, Notify, ProtectionGroup, SegmentName, SegmentOptions};

/// What a node's run cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Records written to other nodes (first time).
    pub records: u64,
    /// Null messages never sent because a later message on their channel went in the same write.
    pub nulls_dropped: u64,
    /// Records written again after no acknowledgement came within `rto`.
    pub rewritten: u64,
    /// Times it slept on its control channel.
    pub sleeps: u64,
}

/// One node's share of the circuit: see the module's documentation.
pub struct SimNode {
    me: usize,
    circuit: Circuit,
    owner: Vec<usize>,
    seg: ExportedSegment,
    anon: AnonSegment,
    links: Vec<Option<Link>>,
    /// How long records may go unacknowledged before they are written again.
    pub rto: Duration,
    /// How long a run may take.
    pub timeout: Duration,
    /// How long to look again before sleeping.
    pub spin: Duration,
    sleeps: u64,
}

impl std::fmt::Debug for SimNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNode").field("me", &self.me).field("stats", &self.stats()).finish()
    }
}

impl SimNode {
    /// Node `me` of `nodes`: exports its segment (a region per other node).
    pub fn export(node: &Node, circuit: &Circuit, placement: Placement, me: usize, nodes: usize) -> Result<SimNode> {
        if nodes == 0 || me >= nodes || nodes > 64 {
            return Err(Error::Params(format!("node {me} of {nodes} (1 to 64)")));
        }
        let opts = SegmentOptions {
            access: Access::READ_WRITE,
            notify: Notify::Conditional,
            protection: ProtectionGroup::Any,
        };
        let seg = node.export_segment(nodes * REGION, opts)?;
        let anon = node.anonymous_segment(8)?;
        let owner = placement.assign(circuit.gates.len(), nodes);
        let (rto, timeout, spin) = (Duration::from_millis(5), Duration::from_secs(20), Duration::from_micros(50));
        let links = (0..nodes).map(|_| None).collect();
        Ok(SimNode { me, circuit: circuit.clone(), owner, seg, anon, links, rto, timeout, spin, sleeps: 0 })
    }

    /// The name of its segment.
    pub fn name(&self) -> SegmentName {
        self.seg.name()
    }

    /// Imports every other node's segment (`names` by node index).
    pub fn connect(&mut self, node: &Node, names: &[SegmentName], timeout: Duration) -> Result<()> {
        for (peer, &name) in names.iter().enumerate().filter(|&(p, _)| p != self.me) {
            let remote = vipc_rmem_layers::import_retrying(node, name, Access::READ_WRITE, timeout)?;
            self.links[peer] = Some(Link::new(self.me, peer, remote));
        }
        Ok(())
    }

    /// What its links cost so far.
    pub fn stats(&self) -> SimStats {
        let mut s = SimStats { sleeps: self.sleeps, ..SimStats::default() };
        for l in self.links.iter().flatten() {
            let LinkStats { records, nulls_dropped, rewritten } = l.stats;
            (s.records, s.nulls_dropped, s.rewritten) =
                (s.records + records, s.nulls_dropped + nulls_dropped, s.rewritten + rewritten);
        }
        s
    }

    /// Simulates the vectors (one per period from time 0, from all signals
    /// low); the changes of the sum's gates placed here.
    pub fn run(&mut self, vectors: &[Vector]) -> Result<Vec<OutputEvent>> {
        let end = end_time(vectors);
        let c = &self.circuit;
        let mine: Vec<usize> = (0..c.gates.len()).filter(|&g| self.owner[g] == self.me).collect();
        let mut lps: Vec<Option<Lp>> = c.gates.iter().map(|_| None).collect();
        for &g in &mine {
            lps[g] = Some(Lp::new(c.gates[g].kind, c.gates[g].inputs.len()));
        }
        let (mut came, mut sent, mut trace) = (Vec::<Addressed>::new(), Vec::<Msg>::new(), Vec::new());
        let (start, mut busy) = (Instant::now(), Instant::now());
        loop {
            while self.seg.poll_control()?.is_some() {} // every wake-up is looked at below
            let mut progress = false;
            for l in self.links.iter_mut().flatten() {
                progress |= l.receive(&self.seg, &mut came)?;
                l.absorb_ack(&self.seg)?;
            }
            for (chan, m) in came.drain(..) {
                if let Some(lp) = lps.get_mut(usize::from(chan / 2)).and_then(Option::as_mut) {
                    lp.deliver(usize::from(chan % 2), m);
                }
            }
            loop {
                let mut moved = false;
                for &g in &mine {
                    sent.clear();
                    if !lps[g].as_mut().is_some_and(|lp| lp.step(g, vectors, end, &mut sent)) {
                        continue;
                    }
                    moved = true;
                    for &m in &sent {
                        if let (Some(value), true) = (m.1, c.outputs.contains(&g)) {
                            trace.push(OutputEvent { time: m.0, gate: g, value });
                        }
                        for &(r, pin) in &c.fanout[g] {
                            match (&mut lps[r], &mut self.links[self.owner[r]]) {
                                (Some(lp), _) => lp.deliver(pin, m),
                                (None, Some(link)) => link.push(((r * 2 + pin) as u16, m)),
                                (None, None) => return Err(Error::Params(format!("gate {r} has no node"))),
                            }
                        }
                    }
                }
                if !moved {
                    break;
                }
                progress = true;
            }
            for l in self.links.iter_mut().flatten() {
                l.flush()?;
            }
            let done = mine.iter().all(|&g| lps[g].as_ref().is_some_and(|lp| lp.done(end)));
            if done && self.links.iter().flatten().all(Link::idle) {
                trace.sort_unstable();
                return Ok(trace);
            }
            if progress {
                busy = Instant::now();
                continue;
            }
            for l in self.links.iter_mut().flatten().filter(|l| l.overdue(self.rto)) {
                l.recover(&self.anon, self.rto)?;
            }
            if start.elapsed() > self.timeout {
                return Err(Error::Timeout(format!("node {}: the simulation to time {end}", self.me)));
            }
            if busy.elapsed() < self.spin {
                std::thread::yield_now();
                continue;
            }
            self.sleeps += 1;
            self.seg.wait_record(self.rto)?;
        }
    }
}
