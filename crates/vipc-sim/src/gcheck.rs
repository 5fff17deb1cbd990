//! The invariants of group sends (000 §6.3, 004 ch. 3–4), as checkers over
//! what the group simulation recorded: who was a member when, who received
//! and replied to which send, which hosts were up.

use crate::check::{Invariant, Violation};
use crate::history::{History, ProcId};
use std::collections::{BTreeMap, BTreeSet};
use vipc_engine::{GroupOutcome, HostId, Message, Pid, Reliable, ReplyMode, Time};

/// How a group send was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `send_group` with a reply mode.
    Plain(ReplyMode),
    /// `send_reliable`.
    Reliable(Reliable),
}

/// The message of group send `sid` from `sender`.
pub fn send_msg(sid: u64, sender: Pid) -> Message {
    let mut m = [0u8; 32];
    m[..8].copy_from_slice(&sid.to_le_bytes());
    m[8] = b'G';
    m[9..13].copy_from_slice(&sender.0.to_le_bytes());
    m
}

/// A member's reply to send `sid`.
pub fn reply_msg(sid: u64, replier: Pid) -> Message {
    let mut m = send_msg(sid, replier);
    m[8] = b'R';
    m
}

/// `(sid, pid, tag)` of a message made by [`send_msg`] or [`reply_msg`].
pub fn decode(m: &Message) -> Option<(u64, Pid, u8)> {
    let sid = u64::from_le_bytes(m[..8].try_into().ok()?);
    let pid = Pid(u32::from_le_bytes(m[9..13].try_into().ok()?));
    (m[13..].iter().all(|&b| b == 0) && matches!(m[8], b'G' | b'R')).then_some((sid, pid, m[8]))
}

/// One membership of one process: `[from, to)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// The member.
    pub proc: ProcId,
    /// Its pid.
    pub pid: Pid,
    /// Its node.
    pub node: usize,
    /// Joined at.
    pub from: Time,
    /// Left (or died) at.
    pub to: Option<Time>,
}

impl Membership {
    /// Member during all of `[a, b]`.
    pub fn throughout(&self, a: Time, b: Time) -> bool {
        self.from <= a && self.to.is_none_or(|t| t > b)
    }

    /// Member at some moment of `[a, b]`.
    pub fn during(&self, a: Time, b: Time) -> bool {
        self.from <= b && self.to.is_none_or(|t| t >= a)
    }
}

/// One group send and what became of it.
#[derive(Clone, Debug)]
pub struct GroupSend {
    /// Its id (in the message).
    pub sid: u64,
    /// The sender.
    pub sender: Pid,
    /// The sender's node.
    pub node: usize,
    /// How it was sent.
    pub mode: Mode,
    /// When.
    pub started: Time,
    /// The sender's alive-host table at the start (reliable modes).
    pub snapshot: Vec<HostId>,
    /// When it completed.
    pub ended: Option<Time>,
    /// Repliers the sender has been given (first reply, then GetReply).
    pub repliers: BTreeSet<Pid>,
    /// Receipts by members: process, pid, when.
    pub received: Vec<(ProcId, Pid, Time)>,
    /// Replies members made: pid → when.
    pub replied: BTreeMap<Pid, Time>,
    /// A reliable send's outcome was `met`.
    pub met: bool,
}

fn v(invariant: Invariant, at: Time, detail: String) -> Violation {
    Violation { invariant, at, detail }
}

/// A member receives message `msg` from `from`: it must be a send we know,
/// from its sender, received at most once by this process.
pub fn check_member_receipt(
    now: Time,
    send: Option<&GroupSend>,
    proc: ProcId,
    from: Pid,
    msg: &Message,
) -> Result<(), Violation> {
    let Some((sid, sender, b'G')) = decode(msg) else {
        return Err(v(Invariant::ReplyMatches, now, format!("a member received a damaged message {msg:?}")));
    };
    let Some(s) = send else {
        return Err(v(Invariant::ReplyMatches, now, format!("a member received unknown group send #{sid}")));
    };
    if from != s.sender || sender != s.sender {
        return Err(v(
            Invariant::ReplyMatches,
            now,
            format!("group send #{sid} of {} received as from {from} (message says {sender})", s.sender),
        ));
    }
    if let Some((_, pid, at)) = s.received.iter().find(|r| r.0 == proc) {
        return Err(v(
            Invariant::NoDuplicate,
            now,
            format!("member {pid} received group send #{sid} twice (first at {})", crate::fmt_time(*at)),
        ));
    }
    Ok(())
}

/// A member on `node` receives `s` (every group send of the simulation is
/// non-idempotent): no earlier life of that node may have received it — the
/// new life would execute it a second time (PROTOCOL §4.10).
pub fn check_one_life(now: Time, s: &GroupSend, node: usize, hist: &History) -> Result<(), Violation> {
    let earlier = |r: &&(ProcId, Pid, Time)| hist.procs[r.0 as usize].node == node && hist.down_during(node, r.2, now);
    match s.received.iter().find(earlier) {
        Some((_, pid, at)) => Err(v(
            Invariant::NoDuplicate,
            now,
            format!(
                "group send #{} taken by two lives of node {node}: by {pid} at {} before the node restarted",
                s.sid,
                crate::fmt_time(*at)
            ),
        )),
        None => Ok(()),
    }
}

/// A reply handed to the sender of `s` (as its first reply or by GetReply):
/// it must be a reply to this very send, by a member that received it and
/// replied, and the first from that replier.
pub fn check_reply(now: Time, s: &GroupSend, replier: Pid, msg: &Message, how: &str) -> Result<(), Violation> {
    let bad = |d: String| Err(v(Invariant::ReplyMatches, now, format!("group send #{} ({how}): {d}", s.sid)));
    match decode(msg) {
        Some((sid, p, b'R')) if sid == s.sid && p == replier => {}
        other => return bad(format!("reply from {replier} is {other:?}, not this send's reply from it")),
    }
    if !s.received.iter().any(|r| r.1 == replier) {
        return bad(format!("{replier} replied but never received the message"));
    }
    if !s.replied.contains_key(&replier) {
        return bad(format!("{replier} is given as replier but never replied"));
    }
    if s.repliers.contains(&replier) {
        return Err(v(
            Invariant::NoDuplicate,
            now,
            format!("group send #{} ({how}): the reply of {replier} was handed to the sender twice", s.sid),
        ));
    }
    Ok(())
}

/// What the world looked like during a reliable send, for judging its outcome.
#[derive(Clone, Debug, Default)]
pub struct Stable {
    /// Members that stayed members on nodes that stayed up (and, for remote
    /// nodes, were in the snapshot) from the start to the end of the send.
    pub members: Vec<Pid>,
    /// Processes that were members at some moment of the send (anywhere).
    pub anytime: usize,
}

/// The outcome of a reliable send, against the protocol's promises (004 §3.2,
/// Appendix A; PROTOCOL §4.11). `must_meet`: the network kept its promise
/// (no crash, no exhaustion, bounded loss), so ALL modes must be met and K
/// modes with K ≤ the stable members too.
pub fn check_outcome(
    now: Time,
    s: &GroupSend,
    mode: Reliable,
    o: &GroupOutcome,
    stable: &Stable,
    must_meet: bool,
) -> Result<(), Violation> {
    let bad =
        |i: Invariant, d: String| Err(v(i, now, format!("reliable send #{} {mode:?}: {d}; outcome {o:?}", s.sid)));
    let replies = s.replied.keys().filter(|p| s.received.iter().any(|r| r.1 == **p)).count() as u32;
    if o.hosts != s.snapshot.len() as u32 || o.hosts_acked > o.hosts {
        return bad(Invariant::ReplyMatches, format!("snapshot had {} hosts", s.snapshot.len()));
    }
    if mode.wants_replies() {
        if o.count > replies {
            return bad(Invariant::ReplyMatches, format!("count {} but only {replies} members replied", o.count));
        }
        if o.count > 0 && o.first_replier.is_none() {
            return bad(Invariant::ReplyMatches, "replies counted but no first replier".into());
        }
    } else if o.count as usize > stable.anytime {
        return bad(
            Invariant::ReplyMatches,
            format!("count {} deliveries but only {} processes were members during the send", o.count, stable.anytime),
        );
    }
    if o.met {
        match mode {
            Reliable::KReply(k) | Reliable::KDeliver(k) if o.count < k => {
                return bad(Invariant::Success, format!("met with count {} < K = {k}", o.count));
            }
            Reliable::AllReply | Reliable::AllDeliver if o.hosts_acked != o.hosts => {
                return bad(Invariant::Success, "ALL met without every snapshot host's acknowledgement".into());
            }
            Reliable::AllReply => {
                if o.count < o.receivers {
                    return bad(Invariant::Success, "ALL_REPLY met with fewer replies than receivers".into());
                }
                if let Some(m) = stable.members.iter().find(|m| !s.replied.contains_key(m)) {
                    return bad(Invariant::Success, format!("ALL_REPLY met but stable member {m} never replied"));
                }
            }
            Reliable::AllDeliver if (o.count as usize) < stable.members.len() => {
                return bad(
                    Invariant::Success,
                    format!("ALL_DELIVER met with {} deliveries but {} stable members", o.count, stable.members.len()),
                );
            }
            _ => {}
        }
    } else if must_meet {
        let k_ok = |k: u32| k as usize <= stable.members.len();
        let promised = match mode {
            Reliable::AllReply | Reliable::AllDeliver => true,
            Reliable::KReply(k) | Reliable::KDeliver(k) => k_ok(k),
        };
        if promised {
            return bad(
                Invariant::Success,
                format!("not met on a network that promises it ({} stable members)", stable.members.len()),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(mode: Mode) -> GroupSend {
        GroupSend {
            sid: 7,
            sender: Pid::new(1, 5),
            node: 0,
            mode,
            started: Time(0),
            snapshot: vec![2, 3],
            ended: None,
            repliers: BTreeSet::new(),
            received: vec![],
            replied: BTreeMap::new(),
            met: false,
        }
    }

    fn outcome(met: bool, count: u32, receivers: u32, acked: u32) -> GroupOutcome {
        GroupOutcome {
            met,
            count,
            first_replier: if count > 0 { Pid::new(2, 1) } else { Pid::NONE },
            reply: [0; 32],
            receivers,
            hosts_acked: acked,
            hosts: 2,
        }
    }

    #[test]
    fn messages_round_trip() {
        let p = Pid::new(3, 9);
        assert_eq!(decode(&send_msg(42, p)), Some((42, p, b'G')));
        assert_eq!(decode(&reply_msg(42, p)), Some((42, p, b'R')));
        let mut m = reply_msg(1, p);
        m[20] = 1;
        assert_eq!(decode(&m), None);
    }

    #[test]
    fn receipts_and_replies_are_checked() {
        let mut s = send(Mode::Plain(ReplyMode::Many));
        let m = Pid::new(2, 1);
        let msg = send_msg(7, s.sender);
        assert!(check_member_receipt(Time(1), Some(&s), 4, s.sender, &msg).is_ok());
        assert!(check_member_receipt(Time(1), None, 4, s.sender, &msg).is_err());
        assert!(check_member_receipt(Time(1), Some(&s), 4, m, &msg).is_err());
        s.received.push((4, m, Time(1)));
        let dup = check_member_receipt(Time(2), Some(&s), 4, s.sender, &msg).unwrap_err();
        assert_eq!(dup.invariant, Invariant::NoDuplicate);
        // A reply by a member that never replied, to another send, or twice.
        assert!(check_reply(Time(3), &s, m, &reply_msg(7, m), "first").is_err());
        s.replied.insert(m, Time(2));
        assert!(check_reply(Time(3), &s, m, &reply_msg(7, m), "first").is_ok());
        assert!(check_reply(Time(3), &s, m, &reply_msg(6, m), "first").is_err());
        assert!(check_reply(Time(3), &s, Pid::new(2, 2), &reply_msg(7, Pid::new(2, 2)), "GetReply").is_err());
        s.repliers.insert(m);
        assert_eq!(
            check_reply(Time(3), &s, m, &reply_msg(7, m), "GetReply").unwrap_err().invariant,
            Invariant::NoDuplicate
        );
    }

    #[test]
    fn outcomes_are_checked() {
        let mut s = send(Mode::Reliable(Reliable::AllReply));
        let (a, b) = (Pid::new(2, 1), Pid::new(3, 1));
        s.received = vec![(1, a, Time(1)), (2, b, Time(1))];
        s.replied.insert(a, Time(2));
        let stable = Stable { members: vec![a, b], anytime: 2 };
        // ALL_REPLY met although stable member b never replied.
        assert!(check_outcome(Time(5), &s, Reliable::AllReply, &outcome(true, 1, 1, 2), &stable, false).is_err());
        // More replies counted than members replied.
        assert!(check_outcome(Time(5), &s, Reliable::KReply(1), &outcome(true, 2, 2, 2), &stable, false).is_err());
        // K met below K.
        assert!(check_outcome(Time(5), &s, Reliable::KReply(2), &outcome(true, 1, 2, 2), &stable, false).is_err());
        assert!(check_outcome(Time(5), &s, Reliable::KReply(1), &outcome(true, 1, 2, 2), &stable, false).is_ok());
        // ALL met with a host missing.
        assert!(check_outcome(Time(5), &s, Reliable::AllDeliver, &outcome(true, 2, 2, 1), &stable, false).is_err());
        // Not met where the network promised it; fine where it did not.
        assert!(check_outcome(Time(5), &s, Reliable::AllDeliver, &outcome(false, 2, 2, 1), &stable, true).is_err());
        assert!(check_outcome(Time(5), &s, Reliable::AllDeliver, &outcome(false, 2, 2, 1), &stable, false).is_ok());
        assert!(check_outcome(Time(5), &s, Reliable::KDeliver(3), &outcome(false, 2, 2, 2), &stable, true).is_ok());
        s.replied.insert(b, Time(3));
        assert!(check_outcome(Time(5), &s, Reliable::AllReply, &outcome(true, 2, 2, 2), &stable, true).is_ok());
        // Deliveries beyond every process that was ever a member.
        let few = Stable { members: vec![], anytime: 1 };
        assert!(check_outcome(Time(5), &s, Reliable::KDeliver(1), &outcome(true, 2, 2, 2), &few, false).is_err());
    }
}
