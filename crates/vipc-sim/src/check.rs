//! The invariants, as checkers that judge a recorded history. The simulator
//! feeds them as it runs; the unit tests feed them hand-made bad histories to
//! show that each one really detects its violation.

use crate::history::{History, ProcId, Receipt, RequestRec};
use crate::pattern::Expect;
use crate::proto::{Reply, Request};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;
use vipc_engine::{Completion, Error, Pid, Received, SendOutcome, Stats, Time};

/// The invariants a run must keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Invariant {
    /// (1) Every accepted blocking call gets exactly one completion, of its own
    /// kind, and a destroyed process is never woken.
    OneCompletion,
    /// (1) Every blocking call completes: within T_t (plus a margin) of the
    /// last packet for it, and before the end of the run.
    Liveness,
    /// (2) A non-idempotent request is executed at most once: by one node,
    /// across its restarts too (a retransmission names the incarnation that
    /// took it, and a later one refuses it), and by another node only after
    /// the first one crashed (a Forward may be lost with it).
    AtMostOnce,
    /// (3) A server never receives a duplicate of a non-idempotent request.
    NoDuplicate,
    /// (4) Moved, appended and reply-segment data arrive intact.
    DataIntact,
    /// (5) Replies match their requests; received messages are intact and
    /// come from the right sender.
    ReplyMatches,
    /// (6) Once traffic stops, no exchange, alien or transfer state is left.
    NoLeak,
    /// (7) A call fails only for a reason: a destroyed or nonexistent
    /// process, a crash, a partition.
    Success,
    /// Misuse of the API is refused with the right typed error.
    Misuse,
    /// GetPid answers only with the registered pid, and finds live names on a reliable network.
    Naming,
    /// Logical host ids are distinct and no conflict is reported among distinct ids.
    HostIds,
    /// A node listens on a group's multicast address exactly while it has a
    /// local member of the group (`GroupJoined`/`GroupLeft` events).
    GroupListen,
    /// Remote memory (1): a read returns bytes the owner held when it served
    /// it; CAS-II and import answers and refusals are ones the owner gave.
    MemRead,
    /// Remote memory (2): segment bytes equal the reference model's (refused
    /// requests change nothing, applied ones land whole).
    MemModel,
    /// Remote memory (3): CAS-II increments retried with the same nonce count exactly once.
    MemExactlyOnce,
    /// Remote memory (4): the owner's counters (refusals per reason, served,
    /// applied, queued, notified) equal the model's.
    MemCounters,
    /// Remote memory (5): control and data channel records are exactly the model's.
    MemChannels,
    /// A host is declared down by a peer only after it was silent for
    /// `alive_down_after` of its announced periods (clamped to 1–10 of the
    /// peer's own), or when it restarted (PROTOCOL §4.12).
    AliveHosts,
    /// The engine panicked.
    Panic,
    /// The run did not finish within its event budget (livelock).
    Budget,
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Invariant::OneCompletion => "exactly one completion per blocking call",
            Invariant::Liveness => "every blocking call completes in time",
            Invariant::AtMostOnce => "a non-idempotent request executes at most once",
            Invariant::NoDuplicate => "a server never receives a duplicate non-idempotent request",
            Invariant::DataIntact => "moved data arrive intact",
            Invariant::ReplyMatches => "replies match requests",
            Invariant::NoLeak => "no state left once traffic stops",
            Invariant::Success => "calls fail only for a reason",
            Invariant::Misuse => "misuse is refused with a typed error",
            Invariant::Naming => "GetPid answers correctly",
            Invariant::HostIds => "logical host ids are distinct",
            Invariant::GroupListen => "a node listens on a group's address exactly while it has members",
            Invariant::MemRead => "remote reads and answers are what the owner served",
            Invariant::MemModel => "segment bytes match the reference model",
            Invariant::MemExactlyOnce => "CAS-II increments count exactly once",
            Invariant::MemCounters => "the owner's remote-memory counters match the model",
            Invariant::MemChannels => "control and data channel records match the model",
            Invariant::AliveHosts => "a host is declared down only after its announced periods of silence",
            Invariant::Panic => "the engine does not panic",
            Invariant::Budget => "the run finishes (no livelock)",
        };
        f.write_str(s)
    }
}

/// A broken invariant: which one, when, and the details.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant.
    pub invariant: Invariant,
    /// Virtual time of detection.
    pub at: Time,
    /// What exactly went wrong.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at {}): {}", self.invariant, fmt_time(self.at), self.detail)
    }
}

/// Formats virtual time as seconds with microseconds.
pub fn fmt_time(t: Time) -> String {
    format!("{}.{:06}s", t.0 / 1_000_000_000, t.0 % 1_000_000_000 / 1000)
}

fn v(invariant: Invariant, at: Time, detail: String) -> Violation {
    Violation { invariant, at, detail }
}

/// The kind of a blocking call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// Send of request `rid`.
    Send(u64),
    /// Receive.
    Receive,
    /// MoveTo or MoveFrom on behalf of request `rid`.
    Move(u64),
    /// GetPid.
    GetPid,
    /// A Send to a group (any reply or reliable mode) of send `sid`.
    Group(u64),
    /// GetReply after send `sid`.
    GetReply(u64),
}

impl CallKind {
    fn matches(self, c: &Completion) -> bool {
        matches!(
            (self, c),
            (CallKind::Send(_), Completion::Send(_))
                | (CallKind::Receive, Completion::Receive(_))
                | (CallKind::Move(_), Completion::Move(_))
                | (CallKind::GetPid, Completion::GetPid(_))
                | (CallKind::Group(_), Completion::Send(_) | Completion::Group(_))
                | (CallKind::GetReply(_), Completion::GetReply(_))
        )
    }
}

/// An outstanding blocking call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// What it is.
    pub kind: CallKind,
    /// The caller's pid.
    pub pid: Pid,
    /// When it was made.
    pub started: Time,
    /// The last sign of progress (start, or a packet for the caller).
    pub progress: Time,
    /// Must it complete within a bounded time of its last progress? (False
    /// for receives and for exchanges with a local process, which may wait
    /// indefinitely for a busy server.)
    pub bounded: bool,
}

/// Tracks outstanding blocking calls: exactly one completion each.
#[derive(Clone, Debug, Default)]
pub struct Calls {
    pending: BTreeMap<ProcId, Call>,
    dead: BTreeMap<ProcId, Pid>,
}

impl Calls {
    /// Records an accepted blocking call.
    pub fn begin(&mut self, now: Time, proc: ProcId, call: Call) -> Result<(), Violation> {
        if let Some(old) = self.pending.get(&proc) {
            return Err(v(
                Invariant::OneCompletion,
                now,
                format!(
                    "{} made {:?} while still blocked in {:?}: the engine accepted a call from a blocked process",
                    call.pid, call.kind, old.kind
                ),
            ));
        }
        self.pending.insert(proc, call);
        Ok(())
    }

    /// Records a completion; returns the call it completes.
    pub fn complete(&mut self, now: Time, proc: ProcId, pid: Pid, c: &Completion) -> Result<Call, Violation> {
        if self.dead.contains_key(&proc) {
            return Err(v(Invariant::OneCompletion, now, format!("destroyed process {pid} was woken with {c:?}")));
        }
        match self.pending.remove(&proc) {
            None => Err(v(
                Invariant::OneCompletion,
                now,
                format!("{pid} was woken with {} but has no call outstanding", short(c)),
            )),
            Some(call) if !call.kind.matches(c) => Err(v(
                Invariant::OneCompletion,
                now,
                format!("{pid} is blocked in {:?} but was woken with {}", call.kind, short(c)),
            )),
            Some(call) => Ok(call),
        }
    }

    /// The process died: its call (if any) is abandoned and it must never be woken.
    pub fn abandon(&mut self, proc: ProcId, pid: Pid) -> Option<Call> {
        self.dead.insert(proc, pid);
        self.pending.remove(&proc)
    }

    /// A packet for the caller arrived (or its exchange moved on).
    pub fn progress(&mut self, proc: ProcId, now: Time) {
        if let Some(c) = self.pending.get_mut(&proc) {
            c.progress = now;
        }
    }

    /// Changes whether the call is bounded (its exchange moved to a local or remote process).
    pub fn set_bounded(&mut self, proc: ProcId, bounded: bool, now: Time) {
        if let Some(c) = self.pending.get_mut(&proc) {
            c.bounded = bounded;
            c.progress = c.progress.max(now);
        }
    }

    /// True if some call other than a Receive is outstanding.
    pub fn busy(&self) -> bool {
        self.pending.values().any(|c| c.kind != CallKind::Receive)
    }

    /// The first bounded call with no progress for longer than `limit`.
    pub fn overdue(&self, now: Time, limit: Duration) -> Option<Violation> {
        self.pending.values().find(|c| c.bounded && now.since(c.progress) > limit).map(|c| {
            v(
                Invariant::Liveness,
                now,
                format!(
                    "{} has been blocked in {:?} since {} with no packet for it since {}: no completion within T_t + margin ({:?})",
                    c.pid,
                    c.kind,
                    fmt_time(c.started),
                    fmt_time(c.progress),
                    limit
                ),
            )
        })
    }

    /// At the end of a run: every call but Receive must have completed.
    pub fn leftovers(&self, now: Time) -> Result<(), Violation> {
        match self.pending.values().find(|c| c.kind != CallKind::Receive) {
            None => Ok(()),
            Some(c) => Err(v(
                Invariant::Liveness,
                now,
                format!(
                    "{} is still blocked in {:?} (since {}) after traffic stopped",
                    c.pid,
                    c.kind,
                    fmt_time(c.started)
                ),
            )),
        }
    }
}

fn short(c: &Completion) -> String {
    let s = format!("{c:?}");
    if s.len() > 160 {
        format!("{}…", &s[..s.char_indices().nth(160).map_or(s.len(), |(i, _)| i)])
    } else {
        s
    }
}

/// Checks a server's receipt of a request against the request's history so
/// far (before the receipt is added): invariants (2) and (3).
/// `epoch_now(node)` is the node's current incarnation.
pub fn check_receipt(
    now: Time,
    rec: &RequestRec,
    r: &Receipt,
    epoch_now: impl Fn(usize) -> u32,
) -> Result<(), Violation> {
    if rec.req.idempotent {
        return Ok(());
    }
    for old in rec.receipts.iter().filter(|o| o.hops == r.hops) {
        if old.server == r.server {
            return Err(v(
                Invariant::NoDuplicate,
                now,
                format!(
                    "non-idempotent request {} (hops left {}) received twice by the same server (process #{}), at {} and now",
                    rec.req.rid,
                    r.hops,
                    r.server,
                    fmt_time(old.at)
                ),
            ));
        }
        if old.node.0 == r.node.0 || epoch_now(old.node.0) == old.node.1 {
            return Err(v(
                Invariant::AtMostOnce,
                now,
                format!(
                    "non-idempotent request {} (hops left {}) executed by process #{} on node {} (incarnation {}) at {} and again by process #{} on node {} (incarnation {})",
                    rec.req.rid,
                    r.hops,
                    old.server,
                    old.node.0,
                    old.node.1,
                    fmt_time(old.at),
                    r.server,
                    r.node.0,
                    r.node.1
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a received message against the request it claims to be:
/// sender, forwarder, segment description and appended data.
pub fn check_received(
    now: Time,
    rec: &RequestRec,
    req: &Request,
    got: &Received,
    capacity: usize,
) -> Result<(), Violation> {
    let rid = rec.req.rid;
    let mism = |what: String| Err(v(Invariant::ReplyMatches, now, format!("request {rid}: {what}")));
    if (Request { hops: rec.req.hops, ..*req }) != rec.req || req.hops > rec.req.hops {
        return mism(format!("received message {req:?} differs from the one sent {:?}", rec.req));
    }
    if got.from != rec.client_pid {
        return mism(format!("received from {} but sent by {}", got.from, rec.client_pid));
    }
    if got.forwarder != rec.client_pid && !rec.forwards.iter().any(|f| f.from == got.forwarder) {
        return mism(format!("forwarder {} is neither the sender nor a server that forwarded it", got.forwarder));
    }
    if got.segment_size != rec.req.seg_len || got.access != rec.req.access {
        return mism(format!(
            "segment {} bytes {:?} received, {} bytes {:?} sent",
            got.segment_size, got.access, rec.req.seg_len, rec.req.access
        ));
    }
    let n = got.segment.len();
    if n > capacity || n > rec.req.seg_len as usize || (!rec.req.access.read && n > 0) {
        return Err(v(
            Invariant::DataIntact,
            now,
            format!(
                "request {rid}: {n} appended bytes received with capacity {capacity}, segment {} bytes, read access {}",
                rec.req.seg_len, rec.req.access.read
            ),
        ));
    }
    let e = Expect { written: vec![], maybe: rec.plan.write_ranges() };
    e.check(rid, 0, &got.segment).map_err(|d| v(Invariant::DataIntact, now, format!("appended segment: {d}")))
}

/// Checks the reply a client got: invariant (5), and (4) for the returned segment.
pub fn check_reply(now: Time, rec: &RequestRec, out: &SendOutcome) -> Result<Reply, Violation> {
    let rid = rec.req.rid;
    let bad = |inv, what: String| Err(v(inv, now, format!("request {rid} from {}: {what}", rec.client_pid)));
    let Some(r) = Reply::decode(&out.reply) else {
        return bad(Invariant::ReplyMatches, format!("reply message is not an intact reply: {:02x?}", out.reply));
    };
    if r.rid != rid {
        return bad(Invariant::ReplyMatches, format!("got the reply to request {} instead", r.rid));
    }
    if r.executor != out.replier {
        return bad(
            Invariant::ReplyMatches,
            format!("reply written by {} but the engine says {} replied", r.executor, out.replier),
        );
    }
    if !rec.chain().any(|p| p == out.replier) {
        return bad(
            Invariant::ReplyMatches,
            format!("replier {} is neither the destination nor a forward target", out.replier),
        );
    }
    match (&out.segment, rec.req.seg_len) {
        (None, 0) => Ok(r),
        (Some(s), n) if n > 0 && s.data.len() == n as usize && s.access == rec.req.access => {
            let mut e = Expect::default();
            if rec.req.access.write {
                // A reply saying "Ok" comes from an execution that wrote every
                // range; otherwise some writes may or may not have happened.
                if r.status == crate::proto::Status::Ok {
                    e.written = rec.plan.write_ranges();
                } else {
                    e.maybe = rec.plan.write_ranges();
                }
            }
            e.check(rid, 0, &s.data)
                .map(|()| r)
                .map_err(|d| v(Invariant::DataIntact, now, format!("returned segment: {d}")))
        }
        (s, n) => bad(
            Invariant::DataIntact,
            format!("lent a {n}-byte segment, got back {:?}", s.as_ref().map(|s| (s.data.len(), s.access))),
        ),
    }
}

/// A Send failed with `err`: is there a reason? (Invariant 7.)
pub fn justify_send_error(
    now: Time,
    rec: &RequestRec,
    err: &Error,
    h: &History,
    nodes_of: impl Fn(Pid) -> Option<usize>,
) -> Result<(), Violation> {
    let (a, b) = (rec.started, now);
    let chain: Vec<Pid> = rec.chain().collect();
    let someone_died = chain.iter().any(|&p| !h.alive_throughout(p, a, b));
    let nodes: Vec<usize> = chain.iter().filter_map(|&p| nodes_of(p)).collect();
    let disturbed = h.disturbed(rec.client_node, &nodes, a, b);
    let bogus = chain.iter().any(|p| h.bogus_hosts.contains(&p.host()));
    let ok = match err {
        Error::NoSuchProcess(p) | Error::Destroyed(p) => chain.contains(p) && someone_died,
        Error::Timeout(_) => bogus || disturbed,
        // The receiver's node restarted during the request, or before it while
        // the client still knew the previous life (its first packet was lost).
        Error::ReceiverRestarted(p) => {
            chain.contains(p) && nodes_of(*p).is_some_and(|n| h.down_during(n, Time::ZERO, b))
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(v(
            Invariant::Success,
            now,
            format!(
                "request {} from {} to {} (chain {:?}, started {}) failed with {err:?} ({err}) although every process in the chain lived and no fault touched its nodes",
                rec.req.rid,
                rec.client_pid,
                rec.target,
                chain,
                fmt_time(rec.started)
            ),
        ))
    }
}

/// A server's move, reply or forward for `rec` failed with `err` (the call was
/// made at `started` from `server_node`): is there a reason?
pub fn justify_server_error(
    now: Time,
    started: Time,
    rec: &RequestRec,
    server_node: usize,
    err: &Error,
    h: &History,
) -> Result<(), Violation> {
    let client_gone = !rec.pending();
    let disturbed = h.disturbed(server_node, &[rec.client_node], started, now);
    let plausible =
        matches!(err, Error::NotAwaitingReply(_) | Error::Timeout(_) | Error::NoSuchProcess(_) | Error::Destroyed(_));
    if plausible && (client_gone || disturbed) {
        Ok(())
    } else {
        Err(v(
            Invariant::Success,
            now,
            format!(
                "server on node {server_node} failed an operation (started {}) for request {} of {} (sent {}, state {:?}) with {err:?} ({err}) and no fault explains it",
                fmt_time(started),
                rec.req.rid,
                rec.client_pid,
                fmt_time(rec.started),
                rec.state
            ),
        ))
    }
}

/// After traffic stopped: the node's gauges must show no leftover state.
pub fn check_gauges(now: Time, node: usize, s: &Stats, live_processes: u64) -> Result<(), Violation> {
    let leak =
        s.active_exchanges != 0 || s.active_aliens != 0 || s.active_transfers != 0 || s.processes != live_processes;
    if leak {
        Err(v(
            Invariant::NoLeak,
            now,
            format!(
                "node {node} after traffic stopped: active_exchanges {} active_aliens {} active_transfers {} (all must be 0), processes {} (harness has {live_processes})",
                s.active_exchanges, s.active_aliens, s.active_transfers, s.processes
            ),
        ))
    } else {
        Ok(())
    }
}

/// A deliberate misuse got `got`: it must be the expected typed error.
pub fn check_misuse(
    now: Time,
    what: &str,
    got: Result<(), &Error>,
    expected: fn(&Error) -> bool,
) -> Result<(), Violation> {
    match got {
        Err(e) if expected(e) => Ok(()),
        other => Err(v(Invariant::Misuse, now, format!("{what}: expected a typed refusal, got {other:?}"))),
    }
}

/// Checks a GetPid answer for `name`, which is registered to `registered`
/// (None: never registered). `strict`: the answer must be found.
pub fn check_get_pid(
    now: Time,
    name: &str,
    answer: Option<Pid>,
    registered: Option<Pid>,
    must_find: bool,
) -> Result<(), Violation> {
    match (answer, registered) {
        (Some(a), Some(r)) if a == r => Ok(()),
        (None, _) if !must_find => Ok(()),
        _ => Err(v(
            Invariant::Naming,
            now,
            format!("GetPid({name:?}) answered {answer:?}; registered {registered:?}, must be found: {must_find}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{ForwardRec, ReqState, Span};
    use crate::pattern::{fill, Writer};
    use crate::workload::{Plan, Step};
    use vipc_engine::{Access, Segment};

    fn rec(idempotent: bool, seg_len: u32, access: Access) -> RequestRec {
        RequestRec {
            req: Request { rid: 42, hops: 1, idempotent, access, seg_len },
            client_pid: Pid::new(1, 1),
            client_node: 0,
            target: Pid::new(2, 1),
            plan: Plan::default(),
            started: Time(1000),
            state: ReqState::Pending,
            forwards: vec![],
            receipts: vec![],
        }
    }

    fn call(kind: CallKind, bounded: bool) -> Call {
        Call { kind, pid: Pid::new(1, 1), started: Time(0), progress: Time(0), bounded }
    }

    #[test]
    fn one_completion_detects_missing_extra_wrong_and_dead_wakes() {
        let mut c = Calls::default();
        let send_ok = Completion::Send(Err(Error::Timeout(Pid::new(2, 1))));
        // A completion without a call.
        assert_eq!(c.complete(Time(1), 0, Pid::new(1, 1), &send_ok).unwrap_err().invariant, Invariant::OneCompletion);
        c.begin(Time(0), 0, call(CallKind::Send(1), true)).unwrap();
        // A second call while blocked.
        assert!(c.begin(Time(0), 0, call(CallKind::Receive, false)).is_err());
        // The wrong kind.
        assert!(c.complete(Time(1), 0, Pid::new(1, 1), &Completion::GetPid(None)).is_err());
        c.begin(Time(0), 0, call(CallKind::Send(1), true)).unwrap();
        assert!(c.complete(Time(1), 0, Pid::new(1, 1), &send_ok).is_ok());
        // Two completions for one call.
        assert!(c.complete(Time(2), 0, Pid::new(1, 1), &send_ok).is_err());
        // A destroyed process woken.
        c.begin(Time(3), 1, call(CallKind::Receive, false)).unwrap();
        assert!(c.abandon(1, Pid::new(1, 2)).is_some());
        let e = c.complete(Time(4), 1, Pid::new(1, 2), &Completion::GetPid(None)).unwrap_err();
        assert!(e.detail.contains("destroyed"));
    }

    #[test]
    fn liveness_detects_overdue_and_leftover_calls() {
        let mut c = Calls::default();
        c.begin(Time(0), 0, call(CallKind::Send(1), true)).unwrap();
        c.begin(Time(0), 1, call(CallKind::Receive, false)).unwrap();
        let limit = Duration::from_millis(1100);
        assert!(c.overdue(Time(1_000_000_000), limit).is_none());
        c.progress(0, Time(500_000_000));
        assert!(c.overdue(Time(1_500_000_000), limit).is_none());
        assert_eq!(c.overdue(Time(1_700_000_000), limit).unwrap().invariant, Invariant::Liveness);
        c.set_bounded(0, false, Time(1_700_000_000));
        assert!(c.overdue(Time(5_000_000_000), limit).is_none());
        // The receive may stay; the send may not.
        assert!(c.leftovers(Time(9)).is_err());
        c.complete(Time(9), 0, Pid::new(1, 1), &Completion::Send(Err(Error::Timeout(Pid::new(2, 1))))).unwrap();
        assert!(c.leftovers(Time(9)).is_ok());
    }

    #[test]
    fn duplicate_and_double_execution_are_detected() {
        let mut r = rec(false, 0, Access::default());
        let first = Receipt { at: Time(1), server: 7, node: (1, 0), hops: 0 };
        r.receipts.push(first.clone());
        // Same server again: a duplicate.
        let again = Receipt { at: Time(2), ..first.clone() };
        assert_eq!(check_receipt(Time(2), &r, &again, |_| 0).unwrap_err().invariant, Invariant::NoDuplicate);
        // Another process on the same incarnation: executed twice.
        let other = Receipt { at: Time(2), server: 8, node: (1, 0), hops: 0 };
        assert_eq!(check_receipt(Time(2), &r, &other, |_| 0).unwrap_err().invariant, Invariant::AtMostOnce);
        // Node 1 restarted: its new life must not execute it again.
        let after_crash = Receipt { at: Time(3), server: 9, node: (1, 1), hops: 0 };
        assert_eq!(check_receipt(Time(3), &r, &after_crash, |_| 1).unwrap_err().invariant, Invariant::AtMostOnce);
        // Another node may, once node 1 crashed (a Forward it sent may be lost with it).
        let elsewhere = Receipt { at: Time(3), server: 10, node: (2, 0), hops: 0 };
        assert!(check_receipt(Time(3), &r, &elsewhere, |n| if n == 1 { 1 } else { 0 }).is_ok());
        assert_eq!(check_receipt(Time(3), &r, &elsewhere, |_| 0).unwrap_err().invariant, Invariant::AtMostOnce);
        // Another hop (a forward) is not a duplicate.
        let fwd = Receipt { hops: 1, ..again.clone() };
        assert!(check_receipt(Time(2), &r, &fwd, |_| 0).is_ok());
        // Idempotent requests may run again.
        r.req.idempotent = true;
        assert!(check_receipt(Time(2), &r, &again, |_| 0).is_ok());
    }

    fn received(r: &RequestRec, segment: Vec<u8>) -> Received {
        Received {
            from: r.client_pid,
            forwarder: r.client_pid,
            msg: r.req.encode(),
            segment,
            segment_size: r.req.seg_len,
            access: r.req.access,
        }
    }

    #[test]
    fn received_messages_are_checked() {
        let r = rec(false, 100, Access::READ);
        let good = received(&r, fill(42, Writer::Client, 0, 50));
        assert!(check_received(Time(0), &r, &r.req, &good, 64).is_ok());
        // Over capacity.
        assert_eq!(check_received(Time(0), &r, &r.req, &good, 10).unwrap_err().invariant, Invariant::DataIntact);
        // Corrupted appended data.
        let mut bad = good.clone();
        bad.segment[3] = bad.segment[3].wrapping_add(1);
        assert_eq!(check_received(Time(0), &r, &r.req, &bad, 64).unwrap_err().invariant, Invariant::DataIntact);
        // Wrong sender, unknown forwarder, wrong segment description.
        let wrong = Received { from: Pid::new(9, 9), ..good.clone() };
        assert_eq!(check_received(Time(0), &r, &r.req, &wrong, 64).unwrap_err().invariant, Invariant::ReplyMatches);
        let fwd = Received { forwarder: Pid::new(3, 1), ..good.clone() };
        assert!(check_received(Time(0), &r, &r.req, &fwd, 64).is_err());
        let mut r2 = r.clone();
        r2.forwards.push(ForwardRec { at: Time(0), from: Pid::new(3, 1), to: Pid::new(4, 1) });
        assert!(check_received(Time(0), &r2, &r.req, &fwd, 64).is_ok());
        let size = Received { segment_size: 99, ..good.clone() };
        assert!(check_received(Time(0), &r, &r.req, &size, 64).is_err());
        // Appended data without read access.
        let w = rec(false, 100, Access::WRITE);
        let leak = received(&w, fill(42, Writer::Client, 0, 5));
        assert!(check_received(Time(0), &w, &w.req, &leak, 64).is_err());
    }

    fn outcome(r: &RequestRec, replier: Pid, data: Option<Vec<u8>>) -> SendOutcome {
        SendOutcome {
            reply: Reply { rid: r.req.rid, status: crate::proto::Status::Ok, executor: replier }.encode(),
            replier,
            segment: data.map(|data| Segment { data, access: r.req.access }),
        }
    }

    #[test]
    fn replies_and_returned_segments_are_checked() {
        let mut r = rec(false, 64, Access::WRITE);
        r.plan.steps.push(Step::MoveTo { off: 8, len: 8, misuse: None });
        let mut seg = fill(42, Writer::Client, 0, 64);
        seg[8..16].copy_from_slice(&fill(42, Writer::Server, 8, 8));
        assert!(check_reply(Time(0), &r, &outcome(&r, r.target, Some(seg.clone()))).is_ok());
        // Data outside the written range changed.
        let mut bad = seg.clone();
        bad[40] ^= 0xff;
        assert_eq!(
            check_reply(Time(0), &r, &outcome(&r, r.target, Some(bad))).unwrap_err().invariant,
            Invariant::DataIntact
        );
        // No segment returned.
        assert!(check_reply(Time(0), &r, &outcome(&r, r.target, None)).is_err());
        // Replier not in the chain.
        assert_eq!(
            check_reply(Time(0), &r, &outcome(&r, Pid::new(5, 5), Some(seg.clone()))).unwrap_err().invariant,
            Invariant::ReplyMatches
        );
        // The reply of another request.
        let mut other = outcome(&r, r.target, Some(seg.clone()));
        other.reply = Reply { rid: 43, status: crate::proto::Status::Ok, executor: r.target }.encode();
        assert_eq!(check_reply(Time(0), &r, &other).unwrap_err().invariant, Invariant::ReplyMatches);
        // Garbage.
        let mut garbage = outcome(&r, r.target, Some(seg));
        garbage.reply = [1; 32];
        assert!(check_reply(Time(0), &r, &garbage).is_err());
    }

    #[test]
    fn failures_need_a_reason() {
        let mut h = History::default();
        let r = rec(false, 0, Access::default());
        let node_of = |p: Pid| Some(p.host() as usize - 1);
        h.born(r.target, 1, Time(0));
        let end = Time(2_000_000_000);
        // The target lived and nothing failed: no excuse.
        let e = justify_send_error(end, &r, &Error::Timeout(r.target), &h, node_of).unwrap_err();
        assert_eq!(e.invariant, Invariant::Success);
        assert!(justify_send_error(end, &r, &Error::NoSuchProcess(r.target), &h, node_of).is_err());
        // Misuse errors are never an excuse.
        assert!(justify_send_error(end, &r, &Error::NotAwaitingReply(r.target), &h, node_of).is_err());
        // A partition excuses a timeout.
        let mut hp = h.clone();
        hp.cuts.push((vec![(0, 1)], Span { from: Time(5000), to: Some(Time(6000)) }));
        assert!(justify_send_error(end, &r, &Error::Timeout(r.target), &hp, node_of).is_ok());
        // The target's death excuses NoSuchProcess, but not a timeout on a reliable network.
        let mut hd = History::default();
        let t = hd.born(r.target, 1, Time(0));
        hd.died(t, Time(1_000_000));
        assert!(justify_send_error(end, &r, &Error::NoSuchProcess(r.target), &hd, node_of).is_ok());
        assert!(justify_send_error(end, &r, &Error::Timeout(r.target), &hd, node_of).is_err());
        // A crash excuses a timeout.
        let mut hc = h.clone();
        hc.outages.push((1, Span { from: Time(0), to: None }));
        assert!(justify_send_error(end, &r, &Error::Timeout(r.target), &hc, node_of).is_ok());
        // A restart of the target's node, and only that, excuses ReceiverRestarted.
        assert!(justify_send_error(end, &r, &Error::ReceiverRestarted(r.target), &hc, node_of).is_ok());
        assert!(justify_send_error(end, &r, &Error::ReceiverRestarted(r.target), &hp, node_of).is_err());
        // Server side: the client still waits and nothing failed.
        assert!(justify_server_error(end, Time(0), &r, 1, &Error::NotAwaitingReply(r.client_pid), &h).is_err());
        // Idempotence is no excuse while the client still waits for this execution.
        let mut idem = r.clone();
        idem.req.idempotent = true;
        assert!(justify_server_error(end, Time(0), &idem, 1, &Error::NotAwaitingReply(r.client_pid), &h).is_err());
        let mut gone = r.clone();
        gone.state = ReqState::Abandoned(Time(5));
        assert!(justify_server_error(end, Time(0), &gone, 1, &Error::NotAwaitingReply(r.client_pid), &h).is_ok());
    }

    #[test]
    fn leaks_misuse_and_naming() {
        let mut s = Stats { processes: 2, ..Stats::default() };
        assert!(check_gauges(Time(0), 0, &s, 2).is_ok());
        assert!(check_gauges(Time(0), 0, &s, 3).is_err());
        s.active_aliens = 1;
        assert_eq!(check_gauges(Time(0), 0, &s, 2).unwrap_err().invariant, Invariant::NoLeak);
        let no_access = |e: &Error| matches!(e, Error::NoAccess(_));
        assert!(check_misuse(Time(0), "x", Err(&Error::NoAccess("read")), no_access).is_ok());
        assert!(check_misuse(Time(0), "x", Ok(()), no_access).is_err());
        assert!(check_misuse(Time(0), "x", Err(&Error::NullPid), no_access).is_err());
        let p = Pid::new(1, 1);
        assert!(check_get_pid(Time(0), "a", Some(p), Some(p), true).is_ok());
        assert!(check_get_pid(Time(0), "a", None, Some(p), false).is_ok());
        assert!(check_get_pid(Time(0), "a", None, Some(p), true).is_err());
        assert!(check_get_pid(Time(0), "a", Some(Pid::new(1, 2)), Some(p), false).is_err());
        assert!(check_get_pid(Time(0), "a", Some(p), None, false).is_err());
    }
}
