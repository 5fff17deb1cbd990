//! The simulated servers: receive, check, forward or execute the plan
//! (moves, misuse probes, think time), reply.

use super::*;

impl Sim {
    // ---- servers

    pub(super) fn server_receive(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Server { cap, .. } = self.procs[&id].role else { return };
        // Sometimes ReceiveSpecific for a local client whose request is known
        // to wait in our queue: it must be taken at once, whatever is ahead of it.
        let only = if self.w.sc.probes && self.w.rng.gen_bool(0.25) { self.queued_local_sender(pid) } else { None };
        if let Some(Role::Server { specific, .. }) = self.procs.role_mut(id) {
            *specific = only;
        }
        match self.w.with_engine(node, |e, now| e.receive(now, pid, only, cap)) {
            Ok(()) => self.procs.begin(&mut self.w, id, CallKind::Receive, only.is_some()),
            Err(e) => self.w.fail_with(Invariant::Success, format!("receive by idle server {pid} refused: {e}")),
        }
    }

    /// A local client whose request to `server` (not forwarded, not yet
    /// received) must be waiting in the server's queue.
    pub(super) fn queued_local_sender(&mut self, server: Pid) -> Option<Pid> {
        let waiting: Vec<Pid> = self
            .procs
            .live
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
        waiting.choose(&mut self.w.rng).copied()
    }

    pub(super) fn server_received(&mut self, id: ProcId, r: Result<Received, Error>) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Server { cap, specific, .. } = self.procs[&id].role else { return };
        let m = match r {
            Ok(m) => m,
            Err(e) => {
                return self.w.fail_with(Invariant::Success, format!("receive by server {pid} failed: {e}"));
            }
        };
        if let Some(only) = specific.filter(|&o| o != m.from) {
            return self.w.fail_with(
                Invariant::ReplyMatches,
                format!("ReceiveSpecific({only}) by {pid} took a message from {} instead", m.from),
            );
        }
        if specific.is_some() {
            self.w.report.misuses += 1;
        }
        // 001 §2.5: the first part of a read-granted segment travels in the
        // Send packet (all of it locally) and Receive returns as much as fits:
        // one packet's data to a known peer — every virtual node is on
        // loopback, so `data_to(any node)` — or `max_data` if the Send was
        // broadcast because the sender did not know where the receiver is.
        let local = m.from.host() == pid.host();
        let cfg =
            self.w.nodes[node].engine.as_ref().map(|e| (e.config().max_data(), e.config().data_to(node_addr(node))));
        let (broadcast_data, packet_data) = cfg.unwrap_or((0, 0));
        let fits = |limit: usize| if m.access.read { cap.min(m.segment_size as usize).min(limit) } else { 0 };
        let expected =
            if local { fits(usize::MAX)..=fits(usize::MAX) } else { fits(broadcast_data)..=fits(packet_data) };
        // With a small buffer the engine may drop a Send's appended data (and
        // count it): excused for that sender's latest message only.
        let dropped = m.segment.is_empty() && self.w.nodes[node].appended_dropped.contains_key(&m.from);
        if !expected.contains(&m.segment.len()) && !dropped {
            return self.w.fail_with(
                Invariant::DataIntact,
                format!(
                    "{pid} received {} appended bytes from {} ({}) with capacity {cap} of a {}-byte {:?} segment; expected {expected:?}",
                    m.segment.len(),
                    m.from,
                    if local { "local" } else { "remote" },
                    m.segment_size,
                    m.access
                ),
            );
        }
        let Some(req) = Request::decode(&m.msg) else {
            return self.w.fail_with(
                Invariant::ReplyMatches,
                format!("server {pid} received a message that is no intact request: {:02x?} from {}", m.msg, m.from),
            );
        };
        let Some(rec) = self.requests.get(&req.rid) else {
            return self
                .w
                .fail_with(Invariant::ReplyMatches, format!("server {pid} received unknown request {}", req.rid));
        };
        self.w.report.receipts += 1;
        let receipt = Receipt { at: self.w.now, server: id, node: (node, self.w.nodes[node].epoch), hops: req.hops };
        let epochs: Vec<u32> = self.w.nodes.iter().map(|n| n.epoch).collect();
        let c = check::check_received(self.w.now, rec, &req, &m, cap)
            .and_then(|()| check::check_receipt(self.w.now, rec, &receipt, |n| epochs[n]));
        if self.w.fail_if(c) {
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
            call_started: self.w.now,
            lent: false,
            probe: None,
        };
        if let Some(Role::Server { job: j, .. }) = self.procs.role_mut(id) {
            *j = Some(job);
        }
        self.w.trace(|| format!("n{node} {pid} executes #{}", req.rid));
        if self.w.sc.probes && self.w.rng.gen_bool(0.03) && self.foreign_probe(id, req.rid, m.from) {
            return;
        }
        self.server_continue(id);
    }

    pub(super) fn server_forward(&mut self, id: ProcId, req: Request, client: Pid) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        // Not to itself, nor back to the sender (whose pid a server may hold
        // after the sender's node restarted): both are SendToSelf misuse.
        let ok = |p: Pid| p != pid && p != client;
        let live: Vec<Pid> =
            self.servers.iter().copied().filter(|&p| ok(p) && self.procs.by_pid.contains_key(&p)).collect();
        let any: Vec<Pid> = self.servers.iter().copied().filter(|&p| ok(p)).collect();
        let to = match (live.choose(&mut self.w.rng).copied(), self.w.rng.gen_bool(0.9)) {
            (Some(p), true) => Some(p),
            _ => any.choose(&mut self.w.rng).copied(),
        };
        let Some(to) = to else {
            // No other server to forward to: answer directly.
            return self.forward_failed(id, req.rid, client);
        };
        let msg = Request { hops: req.hops - 1, ..req }.encode();
        let rec = self.requests.get_mut(&req.rid).expect("known");
        rec.forwards.push(ForwardRec { at: self.w.now, from: pid, to });
        self.w.trace(|| format!("n{node} {pid} forwards #{} from {client} to {to}", req.rid));
        match self.w.with_engine(node, |e, now| e.forward(now, pid, client, to, msg)) {
            Ok(()) => {
                self.w.report.forwards += 1;
                if self.w.sc.probes && self.w.rng.gen_bool(0.05) {
                    // The forwarder no longer owes the reply.
                    let msg = Reply { rid: req.rid, status: Status::Ok, executor: pid }.encode();
                    let r = self.w.with_engine(node, |e, now| e.reply(now, pid, client, msg, None));
                    let c = check::check_misuse(self.w.now, "a reply after forwarding", r.as_ref().map(|_| ()), |e| {
                        matches!(e, Error::NotAwaitingReply(_))
                    });
                    if self.w.fail_if(c) {
                        return;
                    }
                    self.w.report.misuses += 1;
                }
                if let Some(&cproc) = self.procs.by_pid.get(&client) {
                    if self.requests[&req.rid].pending() {
                        self.procs.calls.set_bounded(cproc, to.host() != client.host(), self.w.now);
                    }
                }
                self.server_receive(id);
            }
            Err(e) => {
                self.w.trace(|| format!("  forward refused: {e}"));
                self.requests.get_mut(&req.rid).expect("known").forwards.pop();
                let rec = &self.requests[&req.rid];
                let dead_target =
                    matches!(e, Error::NoSuchProcess(p) if p == to) && !self.procs.by_pid.contains_key(&to);
                if !dead_target {
                    let j = check::justify_server_error(self.w.now, self.w.now, rec, node, &e, &self.procs.hist);
                    if self.w.fail_if(j) {
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
    pub(super) fn foreign_probe(&mut self, id: ProcId, rid: u64, client: Pid) -> bool {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let others: Vec<Pid> = self
            .procs
            .live
            .values()
            .filter_map(|p| match p.role {
                Role::Client { current: Some(r) } if r != rid && p.pid != client => Some((p.pid, r)),
                _ => None,
            })
            .filter(|&(_, r)| self.requests[&r].pending() && !self.requests[&r].chain().any(|q| q == pid))
            .map(|(p, _)| p)
            .collect();
        let Some(&other) = others.choose(&mut self.w.rng) else { return false };
        let started = self.w.now;
        let r = self.w.with_engine(node, |e, now| e.move_from(now, pid, other, 0, 1));
        self.w.trace(|| format!("n{node} {pid} probes MoveFrom of {other}: {r:?}"));
        match r {
            Ok(()) => {
                self.set_job(id, |j| j.probe = Some(other));
                self.procs.begin(&mut self.w, id, CallKind::Move(rid), true);
                true
            }
            Err(e) => {
                self.check_probe(id, other, started, Err(e));
                false
            }
        }
    }

    /// Judges a foreign MoveFrom's outcome; true if the run goes on.
    pub(super) fn check_probe(&mut self, id: ProcId, other: Pid, started: Time, r: Result<(), Error>) -> bool {
        let node = self.procs[&id].node;
        let other_node = self.w.nodes.iter().position(|n| n.host == Some(other.host()));
        let gone = !self.procs.hist.alive_throughout(other, started, self.w.now)
            || other_node.is_some_and(|o| self.procs.hist.disturbed(node, &[o], started, self.w.now));
        let ok = match &r {
            Err(Error::NotAwaitingReply(p)) => *p == other,
            Err(Error::NoSuchProcess(_) | Error::Timeout(_) | Error::Destroyed(_)) => gone,
            _ => false,
        };
        if ok {
            self.w.report.misuses += 1;
            return true;
        }
        self.w.fail_with(
            Invariant::Misuse,
            format!(
                "MoveFrom by {} of {other}, which awaits another process's reply: expected NotAwaitingReply, got {r:?}",
                self.procs[&id].pid
            ),
        );
        false
    }

    pub(super) fn forward_failed(&mut self, id: ProcId, rid: u64, client: Pid) {
        let job = Job {
            rid,
            client,
            step: usize::MAX,
            status: Status::ForwardFailed,
            written: vec![],
            delayed: true,
            call_started: self.w.now,
            lent: false,
            probe: None,
        };
        if let Some(Role::Server { job: j, .. }) = self.procs.role_mut(id) {
            *j = Some(job);
        }
        self.server_continue(id);
    }

    /// Runs the job's next step, or replies when the plan is done.
    pub(super) fn server_continue(&mut self, id: ProcId) {
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
                Step::MoveFrom { .. } => lendable && self.w.rng.gen_bool(self.w.sc.lent),
                Step::MoveTo { .. } => lendable && self.w.key.is_none() && self.w.rng.gen_bool(self.w.sc.lent),
            };
            self.set_job(id, |j| j.lent = lent);
            let r = match (step, lent) {
                (Step::MoveFrom { off, len, .. }, false) => {
                    self.w.with_engine(node, |e, now| e.move_from(now, pid, client, off, len))
                }
                (Step::MoveFrom { off, len, .. }, true) => {
                    self.w.lent.insert(pid, vec![0; len as usize]);
                    self.w.with_engine(node, |e, now| e.move_from_lent(now, pid, client, off, len))
                }
                (Step::MoveTo { off, len, .. }, false) => {
                    let data = fill(rid, Writer::Server, off as u64, len as usize);
                    self.w.with_engine(node, |e, now| e.move_to(now, pid, client, off, data))
                }
                (Step::MoveTo { off, len, .. }, true) => {
                    self.w.lent.insert(pid, fill(rid, Writer::Server, off as u64, len as usize));
                    self.w.with_engine(node, |e, now| e.move_to_lent(now, pid, client, off, len))
                }
            };
            if r.is_err() {
                self.w.lent.remove(&pid);
            }
            self.w.trace(|| format!("n{node} {pid} #{rid} {step:?}{}: {r:?}", if lent { " lent" } else { "" }));
            let now = self.w.now;
            match r {
                Ok(()) => {
                    self.set_job(id, |j| j.call_started = now);
                    self.procs.begin(&mut self.w, id, CallKind::Move(rid), true);
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
            self.w.push(self.w.now + plan.delay, Ev::Act { proc: id });
            return;
        }
        self.server_reply(id, job, &plan);
    }

    pub(super) fn set_job(&mut self, id: ProcId, f: impl FnOnce(&mut Job)) {
        if let Some(Role::Server { job: Some(j), .. }) = self.procs.role_mut(id) {
            f(j);
        }
    }

    /// A move failed (at once or by completion).
    pub(super) fn move_failed(&mut self, id: ProcId, step: Step, e: Error) {
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
            let c = check::check_misuse(self.w.now, &format!("{step:?} for request {}", job.rid), Err(&e), expected);
            if !self.w.fail_if(c) {
                self.w.report.misuses += 1;
            }
            return;
        }
        self.w.report.move_errors += 1;
        let started = if job.call_started == Time::ZERO { self.w.now } else { job.call_started };
        let j = check::justify_server_error(self.w.now, started, &self.requests[&job.rid], node, &e, &self.procs.hist);
        if self.w.fail_if(j) {
            return;
        }
        // Give up the remaining moves and reply.
        let steps = self.requests[&job.rid].plan.steps.len();
        self.set_job(id, |j| {
            j.status = Status::MoveFailed;
            j.step = steps;
        });
    }

    pub(super) fn server_moved(&mut self, id: ProcId, call: Call, r: Result<Vec<u8>, Error>) {
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
        let lent = if job.lent { self.w.lent.remove(&self.procs[&id].pid) } else { None };
        let r = match (r, lent) {
            (Ok(data), Some(buffer)) if data.is_empty() => {
                Ok(if matches!(step, Step::MoveFrom { .. }) { buffer } else { data })
            }
            (Ok(data), Some(_)) => {
                return self.w.fail_with(
                    Invariant::DataIntact,
                    format!("a lent move for request {} completed with {} bytes of data", job.rid, data.len()),
                );
            }
            (r, _) => r,
        };
        match (r, step) {
            (Ok(data), Step::MoveFrom { off, len, misuse: None }) => {
                if data.len() != len as usize {
                    return self.w.fail_with(
                        Invariant::DataIntact,
                        format!("MoveFrom of {len} bytes for request {} returned {} bytes", job.rid, data.len()),
                    );
                }
                let e = Expect { written: job.written.clone(), maybe: plan.write_ranges() };
                if let Err(d) = e.check(job.rid, off as u64, &data) {
                    return self.w.fail_with(Invariant::DataIntact, format!("MoveFrom({off}, {len}): {d}"));
                }
                self.w.report.moves += 1;
                self.w.report.moved_bytes += len as u64;
            }
            (Ok(data), Step::MoveTo { off, len, misuse: None }) => {
                if !data.is_empty() {
                    return self.w.fail_with(
                        Invariant::DataIntact,
                        format!("MoveTo for request {} completed with {} bytes of data", job.rid, data.len()),
                    );
                }
                self.set_job(id, |j| j.written.push((off as u64, len as u64)));
                self.w.report.moves += 1;
                self.w.report.moved_bytes += len as u64;
            }
            (Ok(_), _) => {
                return self.w.fail_with(Invariant::Misuse, format!("{step:?} for request {} succeeded", job.rid));
            }
            (Err(e), _) => self.move_failed(id, step, e),
        }
        if !self.w.failed() {
            self.server_continue(id);
        }
    }

    pub(super) fn server_reply(&mut self, id: ProcId, job: Job, plan: &workload::Plan) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let (rid, client) = (job.rid, job.client);
        let status = job.status;
        let write = self.requests[&rid].req.access.write;
        let seg_len = self.requests[&rid].req.seg_len;
        // Every virtual node is on loopback: local or remote, a reply segment
        // may be as large as one packet to a loopback peer.
        let max_data = self.w.nodes[node].engine.as_ref().map_or(1400, |e| e.config().data_to(node_addr(node))) as u32;
        if plan.oversized_reply && write && status == Status::Ok && seg_len > max_data {
            let len = (max_data + 1).min(seg_len);
            let data = fill(rid, Writer::Server, 0, len as usize);
            let msg = Reply { rid, status: Status::ReplySegmentRefused, executor: pid }.encode();
            let r = self.w.with_engine(node, |e, now| e.reply(now, pid, client, msg, Some((0, data))));
            let pending = self.requests[&rid].pending();
            if pending || r.is_ok() {
                let c = check::check_misuse(
                    self.w.now,
                    &format!("reply with a {len}-byte segment"),
                    r.as_ref().map(|_| ()),
                    |e| matches!(e, Error::TooLarge { .. }),
                );
                if self.w.fail_if(c) {
                    return;
                }
                self.w.report.misuses += 1;
            }
        }
        let segment = match plan.reply_segment {
            Some((off, len)) if write && status != Status::ForwardFailed => {
                Some((off, fill(rid, Writer::Server, off as u64, len as usize)))
            }
            _ => None,
        };
        let msg = Reply { rid, status, executor: pid }.encode();
        let r = self.w.with_engine(node, |e, now| e.reply(now, pid, client, msg, segment));
        self.w.trace(|| format!("n{node} {pid} replies #{rid} {status:?}: {r:?}"));
        if let Some(Role::Server { job, .. }) = self.procs.role_mut(id) {
            *job = None;
        }
        match r {
            Ok(()) => {
                if plan.double_reply {
                    let msg = Reply { rid, status, executor: pid }.encode();
                    let again = self.w.with_engine(node, |e, now| e.reply(now, pid, client, msg, None));
                    let c = check::check_misuse(self.w.now, "a second reply", again.as_ref().map(|_| ()), |e| {
                        matches!(e, Error::NotAwaitingReply(_))
                    });
                    if self.w.fail_if(c) {
                        return;
                    }
                    self.w.report.misuses += 1;
                }
            }
            Err(e) => {
                let j = check::justify_server_error(
                    self.w.now,
                    self.w.now,
                    &self.requests[&rid],
                    node,
                    &e,
                    &self.procs.hist,
                );
                if self.w.fail_if(j) {
                    return;
                }
            }
        }
        self.server_receive(id);
    }
}

/// The name a server registers.
pub(super) fn server_name(pid: Pid) -> String {
    format!("srv{:08x}", pid.0)
}
