//! The simulated application's clients and name lookups, and the dispatch of
//! completions and wake-ups to every actor.

use super::*;

/// Local ids the simulation never lets a process keep (engines hand them
/// out like any other): sends to them must meet no such process.
pub(super) const UNUSED_LOCALS: std::ops::Range<u16> = 0x7FF0..0x7FF8;

impl Sim {
    // ---------------------------------------------------------------- actors

    pub(super) fn act(&mut self, id: ProcId) {
        let role = self.procs[&id].role.clone();
        match role {
            Role::Client { current: None } => self.client_send(id),
            Role::Lookup { current: None } => self.lookup(id),
            Role::Server { job: Some(_), .. } => self.server_continue(id),
            _ => {}
        }
    }

    pub(super) fn on_completion(&mut self, id: ProcId, call: Call, c: Completion) {
        match c {
            Completion::Send(r) => self.client_done(id, call, r),
            Completion::Receive(r) => self.server_received(id, r),
            Completion::Move(r) => self.server_moved(id, call, r),
            Completion::GetPid(r) => self.lookup_done(id, call, r),
            // No workload calls GetReply or sends to a group: `Calls::complete` reports such a
            // completion as a violation before it gets here.
            Completion::GetReply(_) | Completion::Group(_) => {}
        }
    }

    pub(super) fn think(&mut self, id: ProcId) {
        let d = match self.w.rng.gen_range(0..10) {
            0..=2 => Duration::ZERO,
            3..=8 => Duration::from_micros(self.w.rng.gen_range(0..5000)),
            _ => Duration::from_micros(self.w.rng.gen_range(5000..50_000)),
        };
        self.w.push(self.w.now + d, Ev::Act { proc: id });
    }

    // ---- clients

    pub(super) fn pick_target(&mut self) -> Pid {
        let live: Vec<Pid> = self.servers.iter().copied().filter(|p| self.procs.by_pid.contains_key(p)).collect();
        let bad = self.w.rng.gen_bool(self.w.sc.bad_targets);
        if !bad && !live.is_empty() && self.w.rng.gen_bool(0.9) {
            return *live.choose(&mut self.w.rng).expect("non-empty");
        }
        if !bad && !self.servers.is_empty() {
            // Possibly a destroyed server: the send must fail with NoSuchProcess.
            return *self.servers.choose(&mut self.w.rng).expect("non-empty");
        }
        if self.w.rng.gen_bool(0.1) {
            // No node has this host: the send must time out.
            return Pid::new(BOGUS_HOST, 1);
        }
        // A local id no process has (see `UNUSED_LOCALS`): the send must fail with NoSuchProcess.
        let hosts: Vec<HostId> = self.w.nodes.iter().filter_map(|n| n.host).collect();
        let h = *hosts.choose(&mut self.w.rng).expect("some node is up");
        Pid::new(h, self.w.rng.gen_range(UNUSED_LOCALS))
    }

    pub(super) fn client_send(&mut self, id: ProcId) {
        if !self.w.running {
            return;
        }
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let target = self.pick_target();
        let rid = self.next_rid;
        self.next_rid += 1;
        let (seg_len, access) = if !self.w.rng.gen_bool(self.w.sc.segments) {
            (0, Access::default())
        } else {
            let access = *[Access::READ, Access::WRITE, Access::READ_WRITE].choose(&mut self.w.rng).expect("non-empty");
            (workload::segment_size(&mut self.w.rng, self.w.sc.big_segment), access)
        };
        let idempotent = self.w.rng.gen_bool(self.w.sc.idempotent);
        let hops = match self.w.rng.gen_range(0..100) {
            0..=84 => 0,
            85..=96 => 1,
            _ => 2,
        };
        // Every virtual node is on loopback (see `node_addr`).
        let max_reply = engine_config(&self.w.sc, 0, 0, 0, HostIdConfig::Allocate).data_to(node_addr(0)) as u32;
        let plan = workload::plan(&mut self.w.rng, seg_len, access, max_reply);
        let req = Request { rid, hops, idempotent, access, seg_len };
        let data = (seg_len > 0).then(|| fill(rid, Writer::Client, 0, seg_len as usize));
        self.requests.insert(
            rid,
            RequestRec {
                req,
                client_pid: pid,
                client_node: node,
                target,
                plan,
                started: self.w.now,
                state: ReqState::Pending,
                forwards: vec![],
                receipts: vec![],
            },
        );
        self.w.trace(|| format!("n{node} {pid} send #{rid} to {target} {req:?}"));
        let opts = SendOptions { idempotent };
        let r = match data {
            // As the runtime does: a read-only segment to another node is lent, not copied.
            Some(data) if access == Access::READ && !self.w.sc.keyed && target.host() != pid.host() => {
                self.w.lent.insert(pid, data.clone());
                self.w.with_engine(node, |e, now| e.send_lending(now, pid, target, req.encode(), opts, &data))
            }
            data => {
                let segment = data.map(|data| Segment { data, access });
                self.w.with_engine(node, |e, now| e.send(now, pid, target, req.encode(), opts, segment))
            }
        };
        match r {
            Ok(()) => {
                self.w.report.sends += 1;
                if let Some(Role::Client { current }) = self.procs.role_mut(id) {
                    *current = Some(rid);
                }
                let remote = target.host() != pid.host();
                self.procs.begin(&mut self.w, id, CallKind::Send(rid), remote);
            }
            Err(e) => {
                self.w.trace(|| format!("  send refused: {e}"));
                self.w.lent.remove(&pid);
                self.w.report.send_errors += 1;
                self.finish_request(rid, Err(e));
                self.think(id);
            }
        }
    }

    pub(super) fn finish_request(&mut self, rid: u64, r: Result<(), Error>) {
        let now = self.w.now;
        let rec = self.requests.get_mut(&rid).expect("known request");
        match r {
            Ok(()) => rec.state = ReqState::Replied(now),
            Err(e) => {
                rec.state = ReqState::Failed(now);
                let nodes: Vec<Option<HostId>> = self.w.nodes.iter().map(|n| n.host).collect();
                let node_of = |p: Pid| nodes.iter().position(|h| *h == Some(p.host()));
                let j = check::justify_send_error(now, &self.requests[&rid], &e, &self.procs.hist, node_of);
                self.w.fail_if(j);
            }
        }
    }

    pub(super) fn client_done(&mut self, id: ProcId, _call: Call, r: Result<vipc_engine::SendOutcome, Error>) {
        let Some(Role::Client { current }) = self.procs.role_mut(id) else { return };
        let Some(rid) = current.take() else { return };
        // A lent segment is the client's again: the segment it gets back is its own buffer.
        let lent = self.w.lent.remove(&self.procs[&id].pid);
        match r {
            Ok(mut out) => {
                if let (Some(data), Some(s)) = (lent, out.segment.as_mut()) {
                    s.data = data;
                }
                self.w.report.replies += 1;
                let c = check::check_reply(self.w.now, &self.requests[&rid], &out);
                if let Err(v) = c {
                    return self.w.fail(v);
                }
                self.finish_request(rid, Ok(()));
            }
            Err(e) => {
                self.w.report.send_errors += 1;
                self.finish_request(rid, Err(e));
            }
        }
        self.think(id);
    }

    // ---- lookups

    pub(super) fn lookup(&mut self, id: ProcId) {
        if !self.w.running {
            return;
        }
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let names: Vec<String> = self.names.keys().cloned().collect();
        let name = if names.is_empty() || self.w.rng.gen_bool(0.15) {
            format!("nobody{}", self.w.rng.gen_range(0..100))
        } else {
            names.choose(&mut self.w.rng).expect("non-empty").clone()
        };
        let scope = *[Scope::Local, Scope::Remote, Scope::Any].choose(&mut self.w.rng).expect("non-empty");
        let registered = self.names.get(&name).copied();
        self.w.trace(|| format!("n{node} {pid} get_pid({name}, {scope:?})"));
        let r = self.w.with_engine(node, |e, now| e.get_pid(now, pid, name.as_bytes(), scope));
        match r {
            Ok(()) => {
                if let Some(Role::Lookup { current }) = self.procs.role_mut(id) {
                    *current = Some((name, scope, registered, self.w.now));
                }
                self.procs.begin(&mut self.w, id, CallKind::GetPid, true);
            }
            Err(e) => self.w.fail_with(Invariant::Naming, format!("get_pid({name:?}, {scope:?}) refused: {e}")),
        }
    }

    pub(super) fn lookup_done(&mut self, id: ProcId, _call: Call, answer: Option<Pid>) {
        let node = self.procs[&id].node;
        let Some(Role::Lookup { current }) = self.procs.role_mut(id) else { return };
        let Some((name, scope, registered, started)) = current.take() else { return };
        self.w.report.lookups += 1;
        let own_host = self.w.nodes[node].host;
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
            let l = &self.procs.hist.procs[p as usize];
            l.born <= started && l.died.is_none()
        });
        let local = visible.is_some_and(|(r, _, _)| Some(r.host()) == own_host);
        let must_find = alive && (local || self.w.sc.reliable());
        let r = check::check_get_pid(self.w.now, &name, answer, visible.map(|v| v.0), must_find);
        // A remote answer may name a process that died meanwhile; that is still the registered pid.
        if !self.w.fail_if(r) {
            let at = self.w.now + Duration::from_millis(self.w.rng.gen_range(20..100));
            self.w.push(at, Ev::Act { proc: id });
        }
    }
}
