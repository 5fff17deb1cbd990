//! The group simulation: every node runs members of one well-known group and
//! senders that send to it in every reply mode (None, One, Many, then
//! GetReply) and every reliable mode (K_REPLY, ALL_REPLY, K_DELIVER,
//! ALL_DELIVER), with the alive-host table on, on the same virtual network as
//! the request/reply simulation (loss, duplication, reordering, crashes and
//! restarts), with slow repliers, members joining and leaving mid-send, and
//! nodes short of aliens. Every completion is judged by [`crate::gcheck`].

use crate::check::{Call, CallKind, Invariant, Violation};
use crate::gcheck::{self, GroupSend, Membership, Mode, Stable};
use crate::history::{History, ProcId};
use crate::procs::{Proc, Procs};
use crate::scenario::{GroupLoad, Scenario};
use crate::world::{App, Driver, Plumbing, World, TIMEOUT};
use crate::Options;
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use vipc_engine::{
    well_known_group, Completion, Config, Error, Event, GroupOutcome, HostId, Pid, Reliable, ReplyMode, Segment,
    SendOptions, SendOutcome, Time,
};

/// The alive-host period of every engine.
const ALIVE: Duration = Duration::from_millis(100);
/// Sends start once the alive-host tables have filled.
const WARMUP: Duration = Duration::from_millis(400);
/// Quiet time before the final checks: copies are kept 2·T_t after the sender's last packet.
const QUIET: Duration = Duration::from_millis(3000);
const MAX_DRAIN: Duration = Duration::from_secs(30);
/// Fraction of plain sends in mode One or Many that lend a segment (000 §6.8).
const SEGMENT_SHARE: f64 = 0.3;
/// Bytes of an appended segment a member takes with the message.
const SEGMENT_CAPACITY: usize = 256;

/// Byte `i` of the segment of send `sid`.
fn segment_byte(sid: u64, i: usize) -> u8 {
    ((sid as usize).wrapping_mul(31).wrapping_add(i * 7) % 251) as u8
}

fn segment_of(sid: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| segment_byte(sid, i)).collect()
}

#[derive(Clone, Debug)]
enum Role {
    /// Sends to the group; `current`: the sid of its last send; `gets`: GetReplys left.
    Sender { current: Option<u64>, gets: u32 },
    /// A member (or former member) blocked in Receive, or holding `sid` from `from` until it replies;
    /// `reading`: the (offset, length) of the send's segment it is MoveFrom-ing.
    Member { holding: Option<(u64, Pid)>, membership: Option<usize>, reading: Option<(usize, usize)> },
}

/// The group workload's own events.
pub(crate) enum Ev {
    Act { proc: ProcId },
    Reply { proc: ProcId },
    Leave { proc: ProcId },
    Spawn { node: usize, epoch: u32, member: bool },
}

/// Counters of a group run, added to the [`crate::Report`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Group sends made (all modes).
    pub sends: u64,
    /// Reliable sends whose condition was met.
    pub met: u64,
    /// Reliable sends not met.
    pub not_met: u64,
    /// ALL-mode sends not met although every snapshot host acknowledged (a NACK,
    /// or a counted member that never replied).
    pub all_failed_acked: u64,
    /// K-mode sends met on a run with a node short of aliens.
    pub k_met_tight: u64,
    /// Replies handed out by GetReply.
    pub get_replies: u64,
    /// Members' receipts of group messages.
    pub receipts: u64,
    /// Sends that lasted longer than T_t and were met or answered (breath of life at work).
    pub long_sends: u64,
    /// Plain sends in mode One/Many that failed.
    pub plain_failed: u64,
    /// Plain sends that lent a segment to the members.
    pub segment_sends: u64,
    /// Members' MoveFroms of a group send's segment that returned its bytes.
    pub segment_reads: u64,
}

/// One group run.
pub struct GroupSim {
    w: World<Ev>,
    load: GroupLoad,
    /// Each node's `max_aliens` (some nodes are short of them in `exhaust`).
    max_aliens: Vec<usize>,
    procs: Procs<Role>,
    sends: BTreeMap<u64, GroupSend>,
    /// The segment length of each send that lent one.
    segments: BTreeMap<u64, usize>,
    members: Vec<Membership>,
    group: Pid,
    next_sid: u64,
    tight: bool,
}

impl GroupSim {
    /// Prepares a run of the group scenario `sc` under `seed`.
    pub fn new(seed: u64, sc: &Scenario, opts: &Options) -> GroupSim {
        let load = sc.group.clone().expect("a group scenario");
        let plumbing = Plumbing { salt: 11, warmup: WARMUP, restart_ms: 100..1500, restart_grace: None };
        let mut w = World::new(seed, sc, opts, plumbing);
        let mut aliens = vec![sc.max_aliens; w.nodes.len()];
        let mut tight = false;
        if let Some(t) = load.tight_aliens {
            // At least one node, never all, is short of aliens; node 0 never is.
            for (i, a) in aliens.iter_mut().enumerate().skip(1) {
                if i == 1 || w.rng.gen_bool(0.3) {
                    *a = w.rng.gen_range(1..=t.max(1));
                    tight = true;
                }
            }
        }
        GroupSim {
            w,
            load,
            max_aliens: aliens,
            procs: Procs::new(History::default()),
            sends: BTreeMap::new(),
            segments: BTreeMap::new(),
            members: Vec::new(),
            group: well_known_group(7),
            next_sid: 1,
            tight,
        }
    }
}

impl App for GroupSim {
    type Ev = Ev;

    fn world(&mut self) -> &mut World<Ev> {
        &mut self.w
    }

    fn config(&self, node: usize, epoch: u32) -> Config {
        Config { alive_period: Some(ALIVE), max_aliens: self.max_aliens[node], ..self.w.fixed_config(node, epoch) }
    }

    fn setup(&mut self) {
        self.w.start_all();
        self.w.schedule_crashes();
        if self.load.churn {
            // Members joining mid-run, on random nodes.
            let w = self.w.sc.workload.as_micros() as u64;
            for _ in 0..self.w.rng.gen_range(1..=4) {
                let at = self.w.begin + Duration::from_micros(self.w.rng.gen_range(0..w));
                let node = self.w.rng.gen_range(0..self.w.nodes.len());
                self.w.push(at, Ev::Spawn { node, epoch: u32::MAX, member: true });
            }
        }
        self.w.schedule_end();
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Act { proc } => self.if_live(proc, Self::sender_act),
            Ev::Reply { proc } => self.if_live(proc, Self::member_reply),
            Ev::Leave { proc } => self.leave(proc),
            Ev::Spawn { node, epoch, member } => {
                // `u32::MAX`: a join scheduled at setup, for whatever incarnation runs then.
                let ok = epoch == u32::MAX || self.w.nodes[node].epoch == epoch;
                if ok && self.w.running && self.w.ready(node) {
                    self.spawn(node, member);
                    self.settle(node);
                }
            }
        }
    }

    fn on_event(&mut self, node: usize, ev: Event) {
        match ev {
            Event::Wake { pid, completion } => {
                self.w.trace(|| format!("n{node} wake {pid}: {completion:?}"));
                let shown = |c: &Completion| format!("{c:?}");
                if let Some((proc, call)) = self.procs.woken(&mut self.w, node, pid, &completion, shown) {
                    self.on_completion(proc, call, completion);
                }
            }
            Event::HostReady(_) => {
                let epoch = self.w.nodes[node].epoch;
                let senders = self.w.rng.gen_range(1..=2);
                let lo = usize::from(node == 0);
                let members = self.w.rng.gen_range(lo..=self.load.max_members.max(lo));
                for _ in 0..senders {
                    self.w.push(self.w.now, Ev::Spawn { node, epoch, member: false });
                }
                for _ in 0..members {
                    self.w.push(self.w.now, Ev::Spawn { node, epoch, member: true });
                }
            }
            other => self.w.notice(node, other),
        }
    }

    fn arriving(&mut self, _to: usize, _from: usize, _from_epoch: u32, bytes: &[u8]) {
        if let Ok(p) = vipc_wire::parse(bytes, self.w.key.as_ref()) {
            self.procs.progress_to(p.header.dst, self.w.now);
        }
    }

    /// The node's engine has exactly the members the simulation made there
    /// (joined, not left, not destroyed, not crashed), and the node listens
    /// on the group's address exactly while there are some.
    fn settled(&mut self, node: usize) {
        if let Some(e) = self.w.nodes[node].engine.as_ref() {
            let group = self.group;
            let model: BTreeSet<Pid> =
                self.members.iter().filter(|m| m.node == node && m.to.is_none()).map(|m| m.pid).collect();
            let engine: BTreeSet<Pid> = e.group_members(group).into_iter().collect();
            let listening = self.w.nodes[node].listening.contains(&group);
            if engine != model || listening == model.is_empty() {
                let detail = format!(
                    "node {node}: members of {group} {model:?}, its engine has {engine:?}, listening: {listening}"
                );
                self.w.fail_with(Invariant::GroupListen, detail);
            }
        }
    }

    fn crashed(&mut self, node: usize) {
        for p in self.procs.crashed(node, self.w.now) {
            self.forget(p);
        }
    }

    fn watchdog(&mut self) {
        self.procs.watch(&mut self.w);
    }

    fn started(&mut self, node: usize) {
        self.procs.hist.node_up(node, self.w.now);
    }

    /// Ends once no call is pending and no member owes a reply, and all has
    /// been quiet long enough for the engines to drop their copies.
    fn end_check(&mut self) -> Option<Time> {
        let holding = self.procs.live.values().any(|p| matches!(p.role, Role::Member { holding: Some(_), .. }));
        self.w.end_when(
            self.procs.calls.busy() || holding,
            self.procs.last_completion + QUIET,
            MAX_DRAIN,
            Duration::from_secs(1),
        )
    }

    fn final_checks(&mut self) -> Result<(), Violation> {
        self.procs.calls.leftovers(self.w.now)?;
        if let Some(s) = self.sends.values().find(|s| s.ended.is_none()) {
            return Err(self.w.violation_at(Invariant::Liveness, format!("group send #{} never completed", s.sid)));
        }
        for (i, n) in self.w.nodes.iter().enumerate() {
            let Some(e) = n.engine.as_ref() else { continue };
            let st = e.stats();
            if st.active_exchanges != 0 || st.active_aliens != 0 || st.group_copies != 0 {
                return Err(self.w.violation_at(
                    Invariant::NoLeak,
                    format!(
                        "node {i} after traffic stopped: active_exchanges {} active_aliens {} group_copies {}",
                        st.active_exchanges, st.active_aliens, st.group_copies
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl GroupSim {
    /// Runs `f` for process `id` if it still lives, then settles its node.
    fn if_live(&mut self, id: ProcId, f: fn(&mut Self, ProcId)) {
        let Some(node) = self.procs.node_of(id) else { return };
        f(self, id);
        self.settle(node);
    }

    /// What dies with a process: its membership, its send.
    fn forget(&mut self, p: Proc<Role>) {
        match p.role {
            Role::Member { membership: Some(m), .. } => {
                self.members[m].to.get_or_insert(self.w.now);
            }
            Role::Sender { current: Some(sid), .. } => {
                // Its send dies with it: nothing may complete it any more.
                if let Some(s) = self.sends.get_mut(&sid) {
                    s.ended.get_or_insert(self.w.now);
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------ processes

    fn spawn(&mut self, node: usize, member: bool) {
        let pid = match self.w.with_engine(node, |e, _| e.create_process()) {
            Ok(p) => p,
            Err(e) => {
                return self.w.fail_with(Invariant::Success, format!("create_process on node {node} failed: {e}"));
            }
        };
        self.w.trace(|| format!("n{node} spawn {} {pid}", if member { "member" } else { "sender" }));
        if !member {
            let id = self.procs.add(node, pid, Role::Sender { current: None, gets: 0 }, self.w.now);
            let at = (Time::ZERO + WARMUP).max(self.w.now) + Duration::from_micros(self.w.rng.gen_range(0..20_000));
            self.w.push(at, Ev::Act { proc: id });
            return;
        }
        let membership = Some(self.members.len());
        let id = self.procs.add(node, pid, Role::Member { holding: None, membership, reading: None }, self.w.now);
        let group = self.group;
        if let Err(e) = self.w.with_engine(node, |e, _| e.join_group(pid, group)) {
            return self.w.fail_with(Invariant::Success, format!("join_group({pid}) failed: {e}"));
        }
        self.members.push(Membership { proc: id, pid, node, from: self.w.now, to: None });
        if self.load.leaves && self.w.rng.gen_bool(0.2) {
            let at = self.w.now + Duration::from_millis(self.w.rng.gen_range(100..2000));
            self.w.push(at, Ev::Leave { proc: id });
        }
        self.member_receive(id);
    }

    fn leave(&mut self, id: ProcId) {
        let Some(p) = self.procs.live.get_mut(&id) else { return };
        let Role::Member { membership, .. } = &mut p.role else { return };
        let Some(m) = membership.take() else { return };
        let (node, pid, group) = (p.node, p.pid, self.group);
        self.members[m].to = Some(self.w.now);
        self.w.trace(|| format!("n{node} {pid} leaves the group"));
        if let Err(e) = self.w.with_engine(node, |e, _| e.leave_group(pid, group)) {
            self.w.fail_with(Invariant::Success, format!("leave_group({pid}) of a member failed: {e}"));
        }
        self.settle(node);
    }

    // ---- members

    fn member_receive(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        match self.w.with_engine(node, |e, now| e.receive(now, pid, None, SEGMENT_CAPACITY)) {
            Ok(()) => self.procs.begin(&mut self.w, id, CallKind::Receive, false),
            Err(e) => self.w.fail_with(Invariant::Success, format!("receive by member {pid} refused: {e}")),
        }
    }

    fn member_received(&mut self, id: ProcId, r: Result<vipc_engine::Received, Error>) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let m = match r {
            Ok(m) => m,
            Err(e) => {
                return self.w.fail_with(Invariant::Success, format!("receive by member {pid} failed: {e}"));
            }
        };
        let sid = gcheck::decode(&m.msg).map(|d| d.0);
        let send = sid.and_then(|s| self.sends.get(&s));
        if let Err(v) = gcheck::check_member_receipt(self.w.now, send, id, m.from, &m.msg)
            .and_then(|()| gcheck::check_one_life(self.w.now, send.expect("checked"), node, &self.procs.hist))
        {
            return self.w.fail(v);
        }
        let sid = sid.expect("checked");
        self.w.report.group.receipts += 1;
        let now = self.w.now;
        let s = self.sends.get_mut(&sid).expect("checked");
        s.received.push((id, pid, now));
        let sender = s.sender;
        if let Some(&sp) = self.procs.by_pid.get(&sender) {
            self.procs.calls.progress(sp, now);
        }
        if let Some(Role::Member { holding, .. }) = self.procs.role_mut(id) {
            *holding = Some((sid, sender));
        }
        if let Some(&len) = self.segments.get(&sid) {
            return self.member_got_segment(id, sid, &m, len);
        }
        self.schedule_reply(id);
    }

    /// A member checks the segment that came with send `sid` (its size,
    /// access and appended part) and MoveFroms part of it, or replies.
    fn member_got_segment(&mut self, id: ProcId, sid: u64, m: &vipc_engine::Received, len: usize) {
        let pid = self.procs[&id].pid;
        let appended_ok = m.segment.is_empty() || m.segment.len() == len.min(SEGMENT_CAPACITY);
        if m.segment_size as usize != len
            || m.access != vipc_engine::Access::READ_WRITE
            || !appended_ok
            || m.segment != segment_of(sid, m.segment.len())
        {
            let detail = format!(
                "member {pid} got send #{sid}'s segment of {len} bytes as size {} access {:?} with {} bytes appended, \
                 or not its bytes",
                m.segment_size,
                m.access,
                m.segment.len()
            );
            return self.w.fail_with(Invariant::DataIntact, detail);
        }
        if !self.w.rng.gen_bool(0.5) {
            return self.schedule_reply(id);
        }
        let node = self.procs[&id].node;
        let off = self.w.rng.gen_range(0..len);
        let n = self.w.rng.gen_range(1..=len - off);
        let from = m.from;
        match self.w.with_engine(node, |e, now| e.move_from(now, pid, from, off as u32, n as u32)) {
            Ok(()) => {
                if let Some(Role::Member { reading, .. }) = self.procs.role_mut(id) {
                    *reading = Some((off, n));
                }
                self.procs.begin(&mut self.w, id, CallKind::Move(sid), true);
            }
            // The send completed already (its sender is on this node).
            Err(Error::NotAwaitingReply(_)) => self.schedule_reply(id),
            Err(e) => self.w.fail_with(Invariant::Success, format!("move_from by {pid} of #{sid}'s segment: {e}")),
        }
    }

    /// The member's MoveFrom of send `sid`'s segment completed.
    fn member_moved(&mut self, id: ProcId, sid: u64, r: Result<Vec<u8>, Error>) {
        let pid = self.procs[&id].pid;
        let Some(Role::Member { reading, .. }) = self.procs.role_mut(id) else { return };
        let Some((off, n)) = reading.take() else { return };
        match r {
            Ok(data) if data.len() == n && data.iter().enumerate().all(|(i, &b)| b == segment_byte(sid, off + i)) => {
                self.w.report.group.segment_reads += 1;
            }
            Ok(data) => {
                let detail =
                    format!("member {pid} read {} bytes at {off} of #{sid}'s segment, not its {n} bytes", data.len());
                return self.w.fail_with(Invariant::DataIntact, detail);
            }
            // Refused once the send completed, or failed with its sender's node.
            Err(Error::NotAwaitingReply(_) | Error::Timeout(_) | Error::NoSuchProcess(_)) => {}
            Err(e) => {
                return self.w.fail_with(Invariant::Success, format!("move_from by {pid} of #{sid}'s segment: {e}"));
            }
        }
        self.schedule_reply(id);
    }

    /// The member replies now, soon, or (slow) after T_t.
    fn schedule_reply(&mut self, id: ProcId) {
        let delay = if self.w.rng.gen_bool(self.load.slow) {
            Duration::from_millis(self.w.rng.gen_range(1200..2500))
        } else if self.w.rng.gen_bool(0.4) {
            Duration::from_micros(self.w.rng.gen_range(0..50_000))
        } else {
            Duration::ZERO
        };
        self.w.push(self.w.now + delay, Ev::Reply { proc: id });
    }

    fn member_reply(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Some(Role::Member { holding, .. }) = self.procs.role_mut(id) else { return };
        let Some((sid, to)) = holding.take() else { return };
        let msg = gcheck::reply_msg(sid, pid);
        // Every member writes its pid into a lent segment: only the first reply's lands.
        let segment = self.segments.contains_key(&sid).then(|| (0, pid.0.to_le_bytes().to_vec()));
        let r = self.w.with_engine(node, |e, now| e.reply(now, pid, to, msg, segment));
        self.w.trace(|| format!("n{node} {pid} replies to #{sid} of {to}: {r:?}"));
        if r.is_ok() {
            let now = self.w.now;
            if let Some(s) = self.sends.get_mut(&sid) {
                s.replied.insert(pid, now);
            }
            if let Some(&sp) = self.procs.by_pid.get(&to) {
                self.procs.calls.progress(sp, now);
            }
        }
        self.member_receive(id);
    }

    // ---- senders

    fn pick_mode(&mut self, members: usize) -> Mode {
        let k = self.w.rng.gen_range(1..=(members + 1).max(1)) as u32;
        if self.w.rng.gen_bool(self.load.reliable) {
            Mode::Reliable(match self.w.rng.gen_range(0..4) {
                0 => Reliable::KReply(k),
                1 => Reliable::AllReply,
                2 => Reliable::KDeliver(k),
                _ => Reliable::AllDeliver,
            })
        } else {
            Mode::Plain(*[ReplyMode::None, ReplyMode::One, ReplyMode::Many].choose(&mut self.w.rng).expect("non-empty"))
        }
    }

    fn sender_act(&mut self, id: ProcId) {
        let (node, pid) = (self.procs[&id].node, self.procs[&id].pid);
        let Role::Sender { current, gets } = self.procs[&id].role.clone() else { return };
        if gets > 0 {
            if let Some(sid) = current {
                let limit = Duration::from_millis(self.w.rng.gen_range(0..200));
                match self.w.with_engine(node, |e, now| e.get_reply(now, pid, limit)) {
                    Ok(()) => self.procs.begin(&mut self.w, id, CallKind::GetReply(sid), true),
                    Err(e) => self.w.fail_with(Invariant::Success, format!("get_reply by {pid} after #{sid}: {e}")),
                }
                return;
            }
        }
        if !self.w.running {
            return;
        }
        let live_members = self.members.iter().filter(|m| m.to.is_none()).count();
        let mode = self.pick_mode(live_members);
        let sid = self.next_sid;
        self.next_sid += 1;
        let msg = gcheck::send_msg(sid, pid);
        let snapshot: Vec<HostId> = match mode {
            Mode::Reliable(_) => self.w.nodes[node].engine.as_ref().expect("live").alive_hosts().hosts().collect(),
            Mode::Plain(_) => vec![],
        };
        self.sends.insert(
            sid,
            GroupSend {
                sid,
                sender: pid,
                node,
                mode,
                started: self.w.now,
                snapshot,
                ended: None,
                repliers: BTreeSet::new(),
                received: vec![],
                replied: BTreeMap::new(),
            },
        );
        if let Some(Role::Sender { current, gets }) = self.procs.role_mut(id) {
            *current = Some(sid);
            *gets = 0;
        }
        let group = self.group;
        let opts = SendOptions { idempotent: false };
        let lend = matches!(mode, Mode::Plain(ReplyMode::One | ReplyMode::Many)) && self.w.rng.gen_bool(SEGMENT_SHARE);
        let segment = lend.then(|| {
            let len = self.w.rng.gen_range(4..6000);
            self.segments.insert(sid, len);
            self.w.report.group.segment_sends += 1;
            Segment { data: segment_of(sid, len), access: vipc_engine::Access::READ_WRITE }
        });
        self.w.trace(|| {
            format!("n{node} {pid} sends #{sid} to the group, {mode:?}, segment {:?}", self.segments.get(&sid))
        });
        let r = self.w.with_engine(node, |e, now| match (mode, segment) {
            (Mode::Plain(m), Some(seg)) => e.send_group_with_segment(now, pid, group, msg, m, opts, seg),
            (Mode::Plain(m), None) => e.send_group(now, pid, group, msg, m, opts),
            (Mode::Reliable(m), _) => e.send_reliable(now, pid, group, msg, m, opts),
        });
        self.w.report.group.sends += 1;
        self.w.report.sends += 1;
        match r {
            Ok(()) => self.procs.begin(&mut self.w, id, CallKind::Group(sid), true),
            Err(e) => self.w.fail_with(Invariant::Success, format!("group send #{sid} {mode:?} refused: {e}")),
        }
    }

    fn on_completion(&mut self, id: ProcId, call: Call, c: Completion) {
        match (call.kind, c) {
            (CallKind::Receive, Completion::Receive(r)) => self.member_received(id, r),
            (CallKind::Group(sid), Completion::Send(r)) => self.plain_done(id, sid, r),
            (CallKind::Group(sid), Completion::Group(o)) => self.reliable_done(id, sid, o),
            (CallKind::GetReply(sid), Completion::GetReply(r)) => self.got_reply(id, sid, r),
            (CallKind::Move(sid), Completion::Move(r)) => self.member_moved(id, sid, r),
            (kind, c) => self.w.fail_with(Invariant::OneCompletion, format!("{kind:?} completed with {c:?}")),
        }
    }

    fn finish_send(&mut self, id: ProcId, sid: u64, gets: bool, ok: bool) {
        let now = self.w.now;
        let s = self.sends.get_mut(&sid).expect("known send");
        if s.ended.is_some() {
            return self.w.fail_with(Invariant::OneCompletion, format!("group send #{sid} completed twice"));
        }
        s.ended = Some(now);
        if ok && now.since(s.started) > TIMEOUT {
            self.w.report.group.long_sends += 1;
        }
        let n = if gets && self.w.rng.gen_bool(0.7) { self.w.rng.gen_range(1..=6) } else { 0 };
        if let Some(Role::Sender { gets, .. }) = self.procs.role_mut(id) {
            *gets = n;
        }
        self.think(id);
    }

    fn think(&mut self, id: ProcId) {
        let d = Duration::from_micros(self.w.rng.gen_range(0..20_000));
        self.w.push(self.w.now + d, Ev::Act { proc: id });
    }

    fn plain_done(&mut self, id: ProcId, sid: u64, r: Result<SendOutcome, Error>) {
        let s = &self.sends[&sid];
        let Mode::Plain(mode) = s.mode else {
            return self.w.fail_with(Invariant::OneCompletion, format!("reliable send #{sid} completed as a Send"));
        };
        let ok = r.is_ok();
        match (mode, r) {
            (ReplyMode::None, Ok(o)) if o.replier.is_none() && self.w.now == s.started => {}
            (ReplyMode::None, other) => {
                return self.w.fail_with(Invariant::ReplyMatches, format!("datagram #{sid} completed with {other:?}"));
            }
            (_, Ok(o)) => {
                if let Err(v) = gcheck::check_reply(self.w.now, s, o.replier, &o.reply, "first reply") {
                    return self.w.fail(v);
                }
                if let Some(&len) = self.segments.get(&sid) {
                    let mut want = segment_of(sid, len);
                    want[..4].copy_from_slice(&o.replier.0.to_le_bytes());
                    if o.segment.as_ref().map(|s| &s.data) != Some(&want) {
                        let detail = format!(
                            "send #{sid}'s segment came back without exactly the first replier {}'s write",
                            o.replier
                        );
                        return self.w.fail_with(Invariant::DataIntact, detail);
                    }
                }
                self.w.report.replies += 1;
                self.sends.get_mut(&sid).expect("known").repliers.insert(o.replier);
            }
            (_, Err(Error::Timeout(_))) => {
                self.w.report.group.plain_failed += 1;
                self.w.report.send_errors += 1;
                let stable = self.stable(sid, false);
                if self.must_meet(sid, &stable) && !stable.members.is_empty() {
                    return self.w.fail_with(
                        Invariant::Success,
                        format!("group send #{sid} {mode:?} timed out although {:?} stayed members", stable.members),
                    );
                }
            }
            (_, Err(e)) => {
                return self.w.fail_with(Invariant::Success, format!("group send #{sid} {mode:?} failed: {e}"));
            }
        }
        let gets = mode != ReplyMode::One || self.w.rng.gen_bool(0.3);
        self.finish_send(id, sid, gets, ok);
    }

    /// Must send `sid` be met (see [`GroupLoad::must_meet`])? Not when a
    /// member on the sender's own node still owes its reply: no breath of
    /// life covers local members, so the send may time out T_t after the last
    /// packet although that member will reply (finding B6 in tests/sim.rs).
    fn must_meet(&self, sid: u64, stable: &Stable) -> bool {
        let s = &self.sends[&sid];
        let local_owed = stable.members.iter().any(|m| m.host() == s.sender.host() && !s.replied.contains_key(m));
        // A member that left mid-send may never receive the copy it was counted for.
        let left = self.members.iter().any(|m| m.to.is_some_and(|t| t >= s.started));
        self.load.must_meet && self.procs.hist.outages.is_empty() && !self.tight && !local_owed && !left
    }

    /// The members that stayed put through send `sid` (so far), and how many
    /// processes were members at some moment of it.
    fn stable(&self, sid: u64, reliable: bool) -> Stable {
        let s = &self.sends[&sid];
        let (a, b) = (s.started, self.w.now);
        let host_of = |n: usize| n as HostId + 1;
        let sender_down = self.procs.hist.down_during(s.node, a, b);
        let members = self
            .members
            .iter()
            .filter(|m| m.throughout(a, b) && m.pid != s.sender && !self.procs.hist.down_during(m.node, a, b))
            .filter(|m| m.node == s.node || !reliable || s.snapshot.contains(&host_of(m.node)))
            .filter(|_| !sender_down)
            .map(|m| m.pid)
            .collect();
        let anytime = self.members.iter().filter(|m| m.during(a, b)).count();
        Stable { members, anytime }
    }

    fn reliable_done(&mut self, id: ProcId, sid: u64, o: GroupOutcome) {
        let Mode::Reliable(mode) = self.sends[&sid].mode else {
            return self.w.fail_with(Invariant::OneCompletion, format!("plain send #{sid} completed as reliable"));
        };
        let stable = self.stable(sid, true);
        let must = self.must_meet(sid, &stable);
        if let Err(v) = gcheck::check_outcome(self.w.now, &self.sends[&sid], mode, &o, &stable, must) {
            return self.w.fail(v);
        }
        if o.met {
            self.w.report.group.met += 1;
        } else {
            self.w.report.group.not_met += 1;
            self.w.report.send_errors += 1;
            if matches!(mode, Reliable::AllReply | Reliable::AllDeliver) && o.hosts_acked == o.hosts {
                self.w.report.group.all_failed_acked += 1;
            }
        }
        if o.met && self.tight && matches!(mode, Reliable::KReply(_) | Reliable::KDeliver(_)) {
            self.w.report.group.k_met_tight += 1;
        }
        if !o.first_replier.is_none() {
            let s = &self.sends[&sid];
            if let Err(v) = gcheck::check_reply(self.w.now, s, o.first_replier, &o.reply, "first reply") {
                return self.w.fail(v);
            }
            self.w.report.replies += 1;
            self.sends.get_mut(&sid).expect("known").repliers.insert(o.first_replier);
        }
        self.finish_send(id, sid, true, o.met);
    }

    fn got_reply(&mut self, id: ProcId, sid: u64, r: Option<(Pid, vipc_engine::Message)>) {
        let Some((replier, msg)) = r else {
            if let Some(Role::Sender { gets, .. }) = self.procs.role_mut(id) {
                *gets = 0;
            }
            return self.think(id);
        };
        let s = &self.sends[&sid];
        if s.mode == Mode::Plain(ReplyMode::One) {
            return self.w.fail_with(
                Invariant::ReplyMatches,
                format!("GetReply after send #{sid} in mode One returned {replier}'s reply"),
            );
        }
        if let Err(v) = gcheck::check_reply(self.w.now, s, replier, &msg, "GetReply") {
            return self.w.fail(v);
        }
        self.w.report.group.get_replies += 1;
        self.sends.get_mut(&sid).expect("known").repliers.insert(replier);
        if let Some(Role::Sender { gets, .. }) = self.procs.role_mut(id) {
            *gets = gets.saturating_sub(1);
        }
        self.think(id);
    }
}
