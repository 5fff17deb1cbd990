//! What happened during a run that the invariant checks need to judge an
//! outcome: process lifetimes, node outages, partitions and every request.

use crate::proto::Request;
use crate::workload::Plan;
use vipc_engine::{Pid, Time};

/// A simulated process, unique over the run (pids can be reused after a node restart).
pub type ProcId = u32;

/// One process's life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Its pid.
    pub pid: Pid,
    /// The node it ran on.
    pub node: usize,
    /// Created at.
    pub born: Time,
    /// Destroyed (or its node crashed) at.
    pub died: Option<Time>,
}

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqState {
    /// The client is blocked in the Send.
    Pending,
    /// The Send completed with a reply at the given time.
    Replied(Time),
    /// The Send failed (synchronously or by completion) at the given time.
    Failed(Time),
    /// The client was destroyed or its node crashed at the given time.
    Abandoned(Time),
}

/// One receipt of a request by a server process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// When.
    pub at: Time,
    /// By which process.
    pub server: ProcId,
    /// Its node and that node's incarnation at the time.
    pub node: (usize, u32),
    /// Forwards still to be made (0: the server executes it).
    pub hops: u8,
}

/// A Forward of a request by a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardRec {
    /// When.
    pub at: Time,
    /// The forwarding server.
    pub from: Pid,
    /// The new destination.
    pub to: Pid,
}

/// Everything about one request.
#[derive(Clone, Debug)]
pub struct RequestRec {
    /// The request as sent.
    pub req: Request,
    /// The client's pid.
    pub client_pid: Pid,
    /// The client's node.
    pub client_node: usize,
    /// The first destination.
    pub target: Pid,
    /// What the executing server does.
    pub plan: Plan,
    /// When the Send was made.
    pub started: Time,
    /// Where it stands.
    pub state: ReqState,
    /// Forwards made.
    pub forwards: Vec<ForwardRec>,
    /// Receipts by servers.
    pub receipts: Vec<Receipt>,
}

impl RequestRec {
    /// The original destination and every forward target.
    pub fn chain(&self) -> impl Iterator<Item = Pid> + '_ {
        std::iter::once(self.target).chain(self.forwards.iter().map(|f| f.to))
    }

    /// True while the client is blocked in this request's Send.
    pub fn pending(&self) -> bool {
        self.state == ReqState::Pending
    }
}

/// An interval during which something (an outage, a partition) was in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Start.
    pub from: Time,
    /// End (`None`: still in force).
    pub to: Option<Time>,
}

impl Span {
    /// True if the span overlaps `[a, b]`.
    pub fn overlaps(&self, a: Time, b: Time) -> bool {
        self.from <= b
            && match self.to {
                Some(t) => t >= a,
                None => true,
            }
    }
}

/// The record of a run.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Every process, indexed by [`ProcId`].
    pub procs: Vec<Lifetime>,
    /// Node outages: `(node, span)`.
    pub outages: Vec<(usize, Span)>,
    /// Partitions: the cut pairs and when.
    pub cuts: Vec<(Vec<(usize, usize)>, Span)>,
    /// Host ids of nodes that do not exist (sends to them must time out).
    pub bogus_hosts: Vec<u16>,
}

impl History {
    /// Records a new process and returns its id.
    pub fn born(&mut self, pid: Pid, node: usize, at: Time) -> ProcId {
        self.procs.push(Lifetime { pid, node, born: at, died: None });
        (self.procs.len() - 1) as ProcId
    }

    /// Records a process's death.
    pub fn died(&mut self, p: ProcId, at: Time) {
        if let Some(l) = self.procs.get_mut(p as usize) {
            l.died.get_or_insert(at);
        }
    }

    /// Records that `node` crashed.
    pub fn node_down(&mut self, node: usize, at: Time) {
        self.outages.push((node, Span { from: at, to: None }));
    }

    /// Records that `node` (re)started: its outage, if any, ends.
    pub fn node_up(&mut self, node: usize, at: Time) {
        for (n, s) in self.outages.iter_mut() {
            if *n == node {
                s.to.get_or_insert(at);
            }
        }
    }

    /// True if one process with this pid lived through all of `[a, b]`.
    pub fn alive_throughout(&self, pid: Pid, a: Time, b: Time) -> bool {
        self.procs.iter().any(|l| {
            l.pid == pid
                && l.born <= a
                && match l.died {
                    Some(d) => d > b,
                    None => true,
                }
        })
    }

    /// True if `node` was down at some moment of `[a, b]`.
    pub fn down_during(&self, node: usize, a: Time, b: Time) -> bool {
        self.outages.iter().any(|(n, s)| *n == node && s.overlaps(a, b))
    }

    /// True if `x` and `y` were separated by a partition at some moment of `[a, b]`.
    pub fn cut_during(&self, x: usize, y: usize, a: Time, b: Time) -> bool {
        let p = (x.min(y), x.max(y));
        self.cuts.iter().any(|(pairs, s)| s.overlaps(a, b) && pairs.contains(&p))
    }

    /// True if any of `nodes` was down, or any two of them (or any of them and
    /// `hub`) were cut apart, at some moment of `[a, b]`.
    pub fn disturbed(&self, hub: usize, nodes: &[usize], a: Time, b: Time) -> bool {
        std::iter::once(hub).chain(nodes.iter().copied()).any(|n| self.down_during(n, a, b))
            || nodes.iter().any(|&n| n != hub && self.cut_during(hub, n, a, b))
            || nodes.iter().any(|&x| nodes.iter().any(|&y| x != y && self.cut_during(x, y, a, b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes_outages_and_cuts() {
        let mut h = History::default();
        let p = h.born(Pid::new(1, 1), 0, Time(10));
        assert!(h.alive_throughout(Pid::new(1, 1), Time(10), Time(1000)));
        h.died(p, Time(50));
        assert!(h.alive_throughout(Pid::new(1, 1), Time(10), Time(49)));
        assert!(!h.alive_throughout(Pid::new(1, 1), Time(10), Time(50)));
        assert!(!h.alive_throughout(Pid::new(1, 2), Time(10), Time(11)));
        h.outages.push((2, Span { from: Time(100), to: Some(Time(200)) }));
        assert!(h.down_during(2, Time(0), Time(100)));
        assert!(!h.down_during(2, Time(201), Time(300)));
        assert!(!h.down_during(1, Time(0), Time(300)));
        h.cuts.push((vec![(0, 3)], Span { from: Time(5), to: None }));
        assert!(h.cut_during(3, 0, Time(1000), Time(2000)));
        assert!(h.disturbed(0, &[3], Time(1000), Time(2000)));
        assert!(h.disturbed(1, &[2], Time(150), Time(160)));
        assert!(!h.disturbed(1, &[0], Time(150), Time(160)));
    }
}
