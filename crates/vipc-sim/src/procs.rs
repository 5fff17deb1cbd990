//! The processes a workload runs on the simulated nodes (the request/reply
//! and group simulations): which process a pid names, their lives and their
//! nodes' outages, and their blocking calls. Wake-ups, progress and liveness
//! are judged the same way for every such workload, so they are judged here.

use crate::check::{Call, CallKind, Calls, Invariant};
use crate::history::{History, ProcId};
use crate::world::{World, MARGIN, TIMEOUT};
use std::collections::BTreeMap;
use std::ops::Index;
use vipc_engine::{Completion, Pid, Time};

/// A live process and what it plays in the workload (`R`).
#[derive(Debug)]
pub(crate) struct Proc<R> {
    pub node: usize,
    pub pid: Pid,
    pub role: R,
}

/// The workload's processes.
pub(crate) struct Procs<R> {
    /// The live processes.
    pub live: BTreeMap<ProcId, Proc<R>>,
    /// The live process each pid names.
    pub by_pid: BTreeMap<Pid, ProcId>,
    /// Every life, outage and partition (and request) so far.
    pub hist: History,
    /// The blocking calls in flight.
    pub calls: Calls,
    /// When a call last completed: the run ends after a quiet spell.
    pub last_completion: Time,
}

impl<R> Procs<R> {
    /// No processes yet; `hist` may say which hosts do not exist.
    pub fn new(hist: History) -> Procs<R> {
        Procs {
            live: BTreeMap::new(),
            by_pid: BTreeMap::new(),
            hist,
            calls: Calls::default(),
            last_completion: Time::ZERO,
        }
    }

    /// Records a process created on `node`.
    pub fn add(&mut self, node: usize, pid: Pid, role: R, now: Time) -> ProcId {
        let id = self.hist.born(pid, node, now);
        self.by_pid.insert(pid, id);
        self.live.insert(id, Proc { node, pid, role });
        id
    }

    /// Removes a process that was destroyed or whose node crashed: its call
    /// is abandoned and it may never be woken. Returns it for the workload's own records.
    pub fn bury(&mut self, id: ProcId, now: Time) -> Option<Proc<R>> {
        let p = self.live.remove(&id)?;
        self.by_pid.remove(&p.pid);
        self.hist.died(id, now);
        self.calls.abandon(id, p.pid);
        Some(p)
    }

    /// `node` crashed: records the outage and buries its processes, which are returned.
    pub fn crashed(&mut self, node: usize, now: Time) -> Vec<Proc<R>> {
        self.hist.node_down(node, now);
        let victims: Vec<ProcId> = self.live.iter().filter(|(_, p)| p.node == node).map(|(&id, _)| id).collect();
        victims.into_iter().filter_map(|id| self.bury(id, now)).collect()
    }

    /// The node of process `id`, if it lives.
    pub fn node_of(&self, id: ProcId) -> Option<usize> {
        self.live.get(&id).map(|p| p.node)
    }

    /// The role of process `id`, if it lives.
    pub fn role_mut(&mut self, id: ProcId) -> Option<&mut R> {
        self.live.get_mut(&id).map(|p| &mut p.role)
    }

    /// Records that process `id` made a blocking call (the engine accepted it).
    pub fn begin<E>(&mut self, w: &mut World<E>, id: ProcId, kind: CallKind, bounded: bool) {
        let call = Call { kind, pid: self.live[&id].pid, started: w.now, progress: w.now, bounded };
        if let Err(v) = self.calls.begin(w.now, id, call) {
            w.fail(v);
        }
    }

    /// A datagram for `dst` arrived: its call, if any, makes progress.
    pub fn progress_to(&mut self, dst: Pid, now: Time) {
        if let Some(&id) = self.by_pid.get(&dst) {
            self.calls.progress(id, now);
        }
    }

    /// `pid` on `node` was woken with `c`: folds that into the fingerprint and
    /// returns the process and the call it completes, or records why no
    /// process may be woken so (`show` writes `c` for the violation).
    pub fn woken<E>(
        &mut self,
        w: &mut World<E>,
        node: usize,
        pid: Pid,
        c: &Completion,
        show: impl FnOnce(&Completion) -> String,
    ) -> Option<(ProcId, Call)> {
        w.fingerprint(&[w.now.0, pid.0 as u64]);
        let Some(&id) = self.by_pid.get(&pid) else {
            let dead = self.hist.procs.iter().any(|l| l.pid == pid && l.node == node);
            let what = if dead { "a destroyed process" } else { "not a process of this node" };
            w.fail_with(Invariant::OneCompletion, format!("{pid} ({what}) was woken with {}", show(c)));
            return None;
        };
        self.last_completion = w.now;
        match self.calls.complete(w.now, id, pid, c) {
            Ok(call) => Some((id, call)),
            Err(v) => {
                w.fail(v);
                None
            }
        }
    }

    /// The watchdog: a bounded call with no progress for T_t + margin breaks liveness.
    pub fn watch<E>(&self, w: &mut World<E>) {
        if let Some(v) = self.calls.overdue(w.now, TIMEOUT + MARGIN) {
            w.fail(v);
        }
    }
}

impl<R> Index<&ProcId> for Procs<R> {
    type Output = Proc<R>;

    fn index(&self, id: &ProcId) -> &Proc<R> {
        &self.live[id]
    }
}
