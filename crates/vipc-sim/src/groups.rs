//! The group simulation: every node runs members of one well-known group and
//! senders that send to it in every reply mode (None, One, Many, then
//! GetReply) and every reliable mode (K_REPLY, ALL_REPLY, K_DELIVER,
//! ALL_DELIVER), with the alive-host table on, on the same virtual network as
//! the request/reply simulation (loss, duplication, reordering, crashes and
//! restarts), with slow repliers, members joining and leaving mid-send, and
//! nodes short of aliens. Every completion is judged by [`crate::gcheck`].

use crate::check::fmt_time;
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

/// `alive_down_after` of every engine (the default).
const DOWN_AFTER: u32 = 3;
/// A host announcing a longer period than ours is given at most this many of ours (PROTOCOL §4.12).
const PERIOD_MAX_FACTOR: u32 = 10;
/// A reply made this long before its reliable Send ended has reached the
/// sender (or been resent on a retransmission) unless its node was cut off or down.
const REPLY_SETTLES: Duration = Duration::from_millis(300);
/// How long before a send a crash or cut may still disturb it (a crashed
/// host lingers in the alive tables for up to 3 × 10 periods of its peers; a
/// healed one is missing until its next announcement).
const DISTURBS: Duration = Duration::from_secs(2);
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
    Act {
        proc: ProcId,
    },
    Reply {
        proc: ProcId,
    },
    Leave {
        proc: ProcId,
    },
    Spawn {
        node: usize,
        epoch: u32,
        member: bool,
    },
    /// A partition begins, healing at `until`.
    Cut {
        until: Time,
    },
    /// Partition `id` (history span `span`) heals.
    Heal {
        id: u64,
        span: usize,
    },
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
    /// Hosts declared down by a peer (each checked against its announced period).
    pub hosts_down: u64,
    /// Plain sends a member received twice after a cut of 2·T_t (allowed, GROUPS.md).
    pub plain_again: u64,
    /// K-mode sends not met whose count was checked against the replies or deliveries made.
    pub k_counted: u64,
    /// Members checked to have received a reliable DELIVER send counted as delivered.
    pub delivered_checked: u64,
}

/// A node's alive-host row of another as the simulator tracks it: that
/// host's incarnation (epoch), when it was last heard in it, and when an
/// IAmHere of a new incarnation replaced the row.
type AliveRow = (u32, Time, Option<Time>);

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
    /// Each node's I-Am-Here period.
    alive: Vec<Duration>,
    /// `heard[n][h]`: node `n`'s view of node `h` as its alive-host table
    /// row has it: the incarnation of `h`'s last IAmHere, when `n` last got a
    /// datagram of that incarnation, and when an IAmHere of another one
    /// replaced the row (PROTOCOL §4.12).
    heard: Vec<Vec<Option<AliveRow>>>,
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
        let (lo, hi) = load.alive_ms;
        let alive = (0..w.nodes.len()).map(|_| Duration::from_millis(w.rng.gen_range(lo..=hi))).collect();
        let heard = vec![vec![None; w.nodes.len()]; w.nodes.len()];
        GroupSim {
            alive,
            heard,
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
        Config {
            alive_period: Some(self.alive[node]),
            alive_down_after: DOWN_AFTER,
            max_aliens: self.max_aliens[node],
            ..self.w.fixed_config(node, epoch)
        }
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
        if self.w.sc.partitions {
            // Cuts of 50 ms to 3.5 s: some longer than a copy's 2·T_t.
            let w = self.w.sc.workload.as_micros() as u64;
            for _ in 0..self.w.rng.gen_range(1..=3) {
                let at = self.w.begin + Duration::from_micros(self.w.rng.gen_range(0..w));
                let len = Duration::from_millis(self.w.rng.gen_range(50..3500));
                self.w.push(at, Ev::Cut { until: (at + len).min(self.w.stop_at) });
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
            Ev::Cut { until } => self.cut(until),
            Ev::Heal { id, span } => {
                self.w.net.heal(id);
                self.procs.hist.cuts[span].1.to.get_or_insert(self.w.now);
                self.w.trace(|| format!("partition {id} healed"));
            }
        }
    }

    fn stopped(&mut self) {
        let now = self.w.now;
        for (_, s) in self.procs.hist.cuts.iter_mut() {
            s.to.get_or_insert(now);
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
            Event::HostDown(host) => {
                self.w.trace(|| format!("n{node} declares host {host:#x} down"));
                self.host_down(node, host);
            }
            other => self.w.notice(node, other),
        }
    }

    fn arriving(&mut self, to: usize, from: usize, from_epoch: u32, bytes: &[u8]) {
        if let Ok(p) = vipc_wire::parse(bytes, self.w.key.as_ref()) {
            self.procs.progress_to(p.header.dst, self.w.now);
            // Any valid packet but a HostRequest or HostComplaint shows its host alive (§4.12).
            use vipc_wire::PacketType as T;
            if !matches!(p.header.ptype, T::HostRequest | T::HostComplaint) {
                let now = self.w.now;
                let row = &mut self.heard[to][from];
                match row {
                    Some((e, last, _)) if *e == from_epoch => *last = now,
                    Some((e, last, replaced)) if p.header.ptype == T::IAmHere => {
                        (*e, *last, *replaced) = (from_epoch, now, Some(now));
                    }
                    None if p.header.ptype == T::IAmHere => *row = Some((from_epoch, now, None)),
                    _ => {}
                }
            }
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

    /// A group send whose sender's node still has a local member owing its
    /// reply lives on (PROTOCOL §4.10: the sender's node counts its local
    /// members as a remote one's ReplyPending), so only the other sends are
    /// held to T_t after their last packet. Every node's copies stay within
    /// one per sender and member (PROTOCOL §4.10).
    fn watchdog(&mut self) {
        let now = self.w.now;
        for (&id, p) in &self.procs.live {
            let Role::Sender { current: Some(sid), .. } = p.role else { continue };
            let Some(s) = self.sends.get(&sid).filter(|s| s.ended.is_none()) else { continue };
            if self.local_owed(s) {
                self.procs.calls.progress(id, now);
            }
        }
        self.procs.watch(&mut self.w);
        for (i, n) in self.w.nodes.iter().enumerate() {
            let Some(e) = n.engine.as_ref() else { continue };
            let senders =
                self.procs.hist.procs.iter().filter(|l| self.sends.values().any(|s| s.sender == l.pid)).count();
            let members = self.members.iter().filter(|m| m.node == i).count();
            let copies = e.stats().group_copies as usize;
            if copies > senders * members {
                let detail =
                    format!("node {i} holds {copies} group copies for {senders} senders and {members} members");
                return self.w.fail_with(Invariant::NoLeak, detail);
            }
        }
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
        self.check_delivered()?;
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
        // A plain Send kept alive past a cut of 2·T_t between the sender's
        // node and this one may make a new copy (GROUPS.md): a second receipt then is allowed.
        let again = send.filter(|s| matches!(s.mode, Mode::Plain(_))).and_then(|s| {
            let first = s.received.iter().find(|r| r.0 == id)?.2;
            self.cut_for(s.node, node, first, self.w.now, TIMEOUT * 2 - Duration::from_millis(100)).then_some(s.sid)
        });
        if let Some(sid) = again {
            self.w.report.group.plain_again += 1;
            self.w.trace(|| format!("n{node} {pid} receives plain #{sid} again after a long cut (allowed)"));
            if let Some(Role::Member { holding, .. }) = self.procs.role_mut(id) {
                *holding = Some((sid, m.from));
            }
            return self.schedule_reply(id);
        }
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
            Duration::from_millis(self.w.rng.gen_range(self.load.slow_ms.0..=self.load.slow_ms.1))
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
                met: false,
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

    /// Must send `sid` be met (see [`GroupLoad::must_meet`])? Yes on a
    /// scenario that promises it, unless a node was down or a partition in
    /// force from [`DISTURBS`] before the send to now, or nodes are short of
    /// aliens. Slow members on the sender's own node and members that left
    /// the group after they got the message no longer excuse a miss: the
    /// sender's node counts its local members as signs of life, and a
    /// departed member's copy still counts (GROUPS.md, PROTOCOL §4.10–4.11;
    /// both were excused before e32cb05).
    fn must_meet(&self, sid: u64, _stable: &Stable) -> bool {
        let s = &self.sends[&sid];
        let (a, b) = (Time(s.started.0.saturating_sub(DISTURBS.as_nanos() as u64)), self.w.now);
        let down = (0..self.w.nodes.len()).any(|n| self.procs.hist.down_during(n, a, b));
        let cut = self.procs.hist.cuts.iter().any(|(_, span)| span.overlaps(a, b));
        self.load.must_meet && !self.tight && !down && !cut
    }

    /// True if a member on the sender's own node that had the send's copy
    /// (a member when it began) still lives and owes its reply: the send
    /// lives on (PROTOCOL §4.10, §5).
    fn local_owed(&self, s: &GroupSend) -> bool {
        self.members.iter().any(|m| {
            m.node == s.node
                && m.pid != s.sender
                && m.from <= s.started
                && m.to.is_none_or(|t| t >= s.started)
                && self.procs.live.contains_key(&m.proc)
                && !s.replied.contains_key(&m.pid)
        })
    }

    /// Were nodes `x` and `y` cut apart for at least `len` at some moment of `[a, b]`?
    fn cut_for(&self, x: usize, y: usize, a: Time, b: Time, len: Duration) -> bool {
        let p = (x.min(y), x.max(y));
        self.procs.hist.cuts.iter().any(|(pairs, span)| {
            pairs.contains(&p) && span.overlaps(a, b) && span.to.unwrap_or(self.w.now).since(span.from) >= len
        })
    }

    /// A K-mode reliable send `sid` ended not met with `count`: every member
    /// that was a member when it began, on the sender's node or a snapshot
    /// host that stayed up and connected to the sender's, and that replied
    /// (K_REPLY) or received it (K_DELIVER) at least [`REPLY_SETTLES`]
    /// before the end, is counted — its reply reached the sender or was
    /// resent on a retransmission (its host NACKed or not, the member left
    /// the group since or not), its delivery was acknowledged.
    fn check_k_count(&mut self, sid: u64, mode: Reliable, count: u32) -> Result<(), Violation> {
        let s = &self.sends[&sid];
        let (a, b) = (s.started, self.w.now);
        let settled = Time(b.0.saturating_sub(REPLY_SETTLES.as_nanos() as u64));
        let host_of = |n: usize| n as HostId + 1;
        let hist = &self.procs.hist;
        let healthy = |proc: ProcId| {
            self.members.iter().find(|m| m.proc == proc).filter(|m| {
                m.from <= a
                    && (m.node == s.node || s.snapshot.contains(&host_of(m.node)))
                    && !hist.down_during(m.node, a, b)
                    && !hist.down_during(s.node, a, b)
                    && (m.node == s.node || !hist.cut_during(s.node, m.node, a, b))
            })
        };
        let made: Vec<Pid> = s
            .received
            .iter()
            .filter(|(proc, _, at)| {
                let Some(m) = healthy(*proc) else { return false };
                let when = if mode.wants_replies() { s.replied.get(&m.pid).copied() } else { Some(*at) };
                when.is_some_and(|t| t <= settled)
            })
            .map(|r| r.1)
            .collect();
        // K_REPLY ends unmet only when every counted member replied or after
        // T_t without a sign of life: a member still working on it keeps it
        // alive (ReplyPending, or its own node's count of local members).
        let owed: Vec<Pid> = s
            .received
            .iter()
            .filter(|(proc, pid, at)| {
                mode.wants_replies() && *at <= settled && !s.replied.contains_key(pid) && healthy(*proc).is_some()
            })
            .map(|r| r.1)
            .collect();
        if !owed.is_empty() {
            return Err(self.w.violation_at(
                Invariant::Success,
                format!(
                    "reliable send #{sid} {mode:?} ended not met with count {count} while members {owed:?} on hosts \
                     that stayed up and connected still worked on it (received at least {REPLY_SETTLES:?} before)"
                ),
            ));
        }
        if (count as usize) < made.len() {
            let what = if mode.wants_replies() { "replied" } else { "received it" };
            return Err(self.w.violation_at(
                Invariant::Success,
                format!(
                    "reliable send #{sid} {mode:?} not met with count {count}, but members {made:?} on hosts that \
                     stayed up and connected {what} at least {REPLY_SETTLES:?} before it ended"
                ),
            ));
        }
        self.w.report.group.k_counted += 1;
        Ok(())
    }

    /// Node `node` declared `host` down: unless `host` restarted or crashed
    /// since `node` last heard it, that was at least `alive_down_after` of
    /// its announced periods (clamped to 1–10 of `node`'s own) ago (PROTOCOL §4.12).
    fn host_down(&mut self, node: usize, host: HostId) {
        self.w.report.group.hosts_down += 1;
        let h = host as usize - 1;
        let Some((epoch, last, replaced)) = self.heard[node].get(h).copied().flatten() else { return };
        // Crashed since, or an IAmHere of its new life just replaced the old one's row.
        if epoch != self.w.nodes[h].epoch || replaced == Some(self.w.now) {
            return;
        }
        let (mine, theirs) = (self.alive[node], self.alive[h]);
        let silence = theirs.clamp(mine, mine * PERIOD_MAX_FACTOR) * DOWN_AFTER;
        if self.w.now.since(last) < silence {
            let detail = format!(
                "node {node} (period {mine:?}) declared host {host:#x} (period {theirs:?}, same life) down \
                 {:?} after it last heard it at {}; {silence:?} of silence are needed",
                self.w.now.since(last),
                fmt_time(last)
            );
            self.w.fail_with(Invariant::AliveHosts, detail);
        }
    }

    /// A met ALL_DELIVER send counts a copy queued for every member as
    /// delivered, and that copy stays queued until its member takes it
    /// (GROUPS.md: only the same sender's next message replaces it). So
    /// every member that had its copy — a member from the send's start to
    /// its end, on the sender's node or a snapshot host not short of aliens
    /// that stayed up to the end of the run and connected during the send,
    /// alive at the end — received it, or a later send of the same sender
    /// (unless a later one was plain: its copy may expire).
    fn check_delivered(&mut self) -> Result<(), Violation> {
        let end = self.w.now;
        let host_of = |n: usize| n as HostId + 1;
        let hist = &self.procs.hist;
        let mut checked = 0;
        for s in self.sends.values() {
            // Only a met ALL_DELIVER says every such member had its copy (a K
            // mode may be met before the Send reached some hosts).
            if s.mode != Mode::Reliable(Reliable::AllDeliver) || !s.met {
                continue;
            }
            let Some(ended) = s.ended else { continue };
            let later: Vec<&GroupSend> =
                self.sends.range(s.sid + 1..).map(|(_, l)| l).filter(|l| l.sender == s.sender).collect();
            if later.iter().any(|l| matches!(l.mode, Mode::Plain(_))) || hist.down_during(s.node, s.started, ended) {
                continue;
            }
            for m in &self.members {
                let eligible = m.from <= s.started
                    && m.to.is_none_or(|t| t > ended)
                    && m.pid != s.sender
                    && self.procs.live.contains_key(&m.proc)
                    && (m.node == s.node || s.snapshot.contains(&host_of(m.node)))
                    && self.max_aliens[m.node] == self.w.sc.max_aliens
                    && !hist.down_during(m.node, s.started, end)
                    && (m.node == s.node || !hist.cut_during(s.node, m.node, s.started, ended));
                if !eligible {
                    continue;
                }
                checked += 1;
                let got = |l: &GroupSend| l.received.iter().any(|r| r.0 == m.proc);
                if !got(s) && !later.iter().any(|l| got(l)) {
                    return Err(self.w.violation_at(
                        Invariant::Success,
                        format!(
                            "reliable send #{} {:?} from {} (ended {}): member {} had its copy but never received it \
                             (nor a later send of that sender)",
                            s.sid,
                            s.mode,
                            s.sender,
                            fmt_time(ended),
                            m.pid
                        ),
                    ));
                }
            }
        }
        self.w.report.group.delivered_checked += checked;
        Ok(())
    }

    fn cut(&mut self, until: Time) {
        if !self.w.running || until <= self.w.now {
            return;
        }
        let (id, span) = self.w.cut_at_random(&mut self.procs.hist, until);
        self.w.push(until, Ev::Heal { id, span });
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
        if !o.met && matches!(mode, Reliable::KReply(_) | Reliable::KDeliver(_)) {
            if let Err(v) = self.check_k_count(sid, mode, o.count) {
                return self.w.fail(v);
            }
        }
        self.sends.get_mut(&sid).expect("known").met = o.met;
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
