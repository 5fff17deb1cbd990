//! Reliable group Sends (004 ch. 3–4): K_REPLY, ALL_REPLY, K_DELIVER and
//! ALL_DELIVER.
//!
//! The sender never learns who the members are. It copies the alive-host
//! table (I-Am-Here) when the Send starts; every host in that copy
//! acknowledges with its member count — at once for the DELIVER modes, on the
//! last of its members' replies for the REPLY modes, a bare ACK 0 when it has
//! no members, a NACK when it lacked the resources for some. Retransmissions
//! go, every T_r, only to the hosts that have not acknowledged; a host whose
//! members still owe replies answers them with ReplyPending (breath of life),
//! one whose members replied resends the replies. A host not heard from
//! (acknowledgement or ReplyPending) for T_t is given up: nothing more is
//! sent to it, since its copies may have expired and a copy made again
//! would deliver the message twice. "All members" means the members on the
//! hosts alive when the Send began. Nothing is ordered or atomic, and hosts
//! are assumed to fail by stopping.

use super::group::{CopyState, GroupCopy};
use super::*;
use vipc_wire::Flags;

/// A reliable mode of 004 §3.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reliable {
    /// Succeeds once K members replied (the first reply is returned).
    KReply(u32),
    /// Succeeds once every member on the hosts alive at the start replied.
    AllReply,
    /// Succeeds once the message was queued for K members.
    KDeliver(u32),
    /// Succeeds once the message was queued for every member on the hosts alive at the start.
    AllDeliver,
}

/// Largest K: it travels in 24 bits.
pub const MAX_K: u32 = (1 << 24) - 1;

impl Reliable {
    /// Wire code in a Send's `local_addr`: mode in bits 31..24, K in 23..0.
    pub(crate) fn code(self) -> u32 {
        match self {
            Reliable::KReply(k) => 1 << 24 | k,
            Reliable::AllReply => 2 << 24,
            Reliable::KDeliver(k) => 3 << 24 | k,
            Reliable::AllDeliver => 4 << 24,
        }
    }

    pub(crate) fn decode(code: u32) -> Option<Reliable> {
        let k = code & MAX_K;
        match code >> 24 {
            1 if k > 0 => Some(Reliable::KReply(k)),
            2 => Some(Reliable::AllReply),
            3 if k > 0 => Some(Reliable::KDeliver(k)),
            4 => Some(Reliable::AllDeliver),
            _ => None,
        }
    }

    /// True for the REPLY modes.
    pub fn wants_replies(self) -> bool {
        matches!(self, Reliable::KReply(_) | Reliable::AllReply)
    }
}

/// What a reliable group Send achieved (004 Appendix A).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupOutcome {
    /// The mode's condition was met.
    pub met: bool,
    /// Replies (REPLY modes) or deliveries (DELIVER modes) reached.
    pub count: u32,
    /// The first replier (`Pid::NONE` if none, and in the DELIVER modes unless a member replied).
    pub first_replier: Pid,
    /// The first reply (the message sent if there was none).
    pub reply: Message,
    /// Members known to have got the message: the local ones, each host's
    /// acknowledged count, and on a host whose acknowledgement had not come
    /// (it rides on its last reply) the members that replied.
    pub receivers: u32,
    /// Hosts of the alive-host snapshot that acknowledged, of `hosts`.
    pub hosts_acked: u32,
    /// Hosts in the snapshot taken when the Send began.
    pub hosts: u32,
}

/// The sender's side of a reliable group Send.
#[derive(Debug)]
pub(crate) struct ReliableSend {
    pub mode: Reliable,
    msg: Message,
    /// The sender's own host: its members are counted without acknowledgement.
    local_host: HostId,
    local_members: u32,
    snapshot: Vec<(HostId, SocketAddr)>,
    /// When each snapshot host was last heard from about this Send (its
    /// acknowledgements and ReplyPendings; the Send's start at first).
    heard: HashMap<HostId, Time>,
    /// Snapshot hosts given up: silent for T_t before their part was complete.
    silent: HashSet<HostId>,
    /// Hosts that acknowledged, with their member counts.
    acked: HashMap<HostId, u32>,
    /// Replies counted, by the replier's host (the local host and snapshot hosts only).
    replies: HashMap<HostId, u32>,
    receivers: u32,
    pub count: u32,
    nacked: bool,
    pub first: Option<(Pid, Message)>,
}

impl ReliableSend {
    /// Every snapshot host acknowledged or was given up.
    fn all_acked(&self) -> bool {
        self.snapshot.iter().all(|(h, _)| self.acked.contains_key(h) || self.silent.contains(h))
    }

    fn replies_from(&self, host: HostId) -> u32 {
        self.replies.get(&host).copied().unwrap_or(0)
    }

    /// Every member known to have the message replied: the local ones, and
    /// on every snapshot host as many as it acknowledged (host by host, so
    /// that extra replies from one host never cover for another's).
    fn all_replied(&self) -> bool {
        self.replies_from(self.local_host) >= self.local_members
            && self
                .snapshot
                .iter()
                .all(|(h, _)| self.silent.contains(h) || self.acked.get(h).is_some_and(|n| self.replies_from(*h) >= *n))
    }

    /// Counts a distinct reply from a process on `host`; replies from hosts
    /// outside the snapshot are not part of this Send's "members".
    pub(crate) fn count_reply(&mut self, host: HostId) {
        if !self.mode.wants_replies() {
            return;
        }
        if host == self.local_host || self.snapshot.iter().any(|(h, _)| *h == host) {
            *self.replies.entry(host).or_default() += 1;
            self.count += 1;
        }
    }

    /// `Some(met)` once the outcome is decided.
    fn decided(&self) -> Option<bool> {
        let all = self.all_acked();
        match self.mode {
            Reliable::KReply(k) | Reliable::KDeliver(k) if self.count >= k => Some(true),
            Reliable::KReply(_) if all && self.all_replied() => Some(false),
            Reliable::KDeliver(_) if all => Some(false),
            Reliable::AllReply | Reliable::AllDeliver if self.nacked || !self.silent.is_empty() => Some(false),
            Reliable::AllReply if all && self.all_replied() => Some(true),
            Reliable::AllDeliver if all => Some(true),
            _ => None,
        }
    }

    /// Whether snapshot host `host`'s part is not complete: it did not
    /// acknowledge or, in the REPLY modes, fewer of its members replied.
    fn incomplete(&self, host: HostId) -> bool {
        match self.acked.get(&host) {
            None => true,
            Some(&n) => self.mode.wants_replies() && self.replies_from(host) < n,
        }
    }

    /// Hosts whose part is not complete: the snapshot hosts that did not
    /// acknowledge and, in the REPLY modes, those (and this host) with
    /// fewer replies than members.
    fn missing(&self) -> Vec<HostId> {
        let replies = self.mode.wants_replies();
        let mut v = Vec::new();
        if replies && self.replies_from(self.local_host) < self.local_members {
            v.push(self.local_host);
        }
        for (h, _) in &self.snapshot {
            match self.acked.get(h) {
                None => v.push(*h),
                Some(n) if replies && self.replies_from(*h) < *n => v.push(*h),
                Some(_) => {}
            }
        }
        v.sort_unstable();
        v
    }

    /// The members acknowledged, and the repliers on each host beyond its
    /// acknowledged count: a K_REPLY is decided at its K-th reply, often
    /// before the replying host's acknowledgement.
    fn known_receivers(&self) -> u32 {
        self.snapshot.iter().fold(self.receivers, |n, (h, _)| {
            let acked = self.acked.get(h).copied().unwrap_or(0);
            n.saturating_add(self.replies_from(*h).saturating_sub(acked))
        })
    }

    fn outcome(&self, met: bool) -> GroupOutcome {
        let (first_replier, reply) = self.first.unwrap_or((Pid::NONE, self.msg));
        GroupOutcome {
            met,
            count: self.count,
            first_replier,
            reply,
            receivers: self.known_receivers(),
            hosts_acked: self.acked.len() as u32,
            hosts: self.snapshot.len() as u32,
        }
    }
}

impl Engine {
    /// A reliable Send to a group: `from` blocks until the mode's condition
    /// is met or cannot be, then gets [`Completion::Group`]. Replies beyond
    /// the first wait for [`Engine::get_reply`] as after [`ReplyMode::Many`].
    pub fn send_reliable(
        &mut self,
        now: Time,
        from: Pid,
        group: Pid,
        msg: Message,
        mode: Reliable,
        opts: SendOptions,
    ) -> Result<(), Error> {
        self.check_caller(from)?;
        if !group.is_group() {
            return Err(Error::NotAGroup(group));
        }
        if let Reliable::KReply(k) | Reliable::KDeliver(k) = mode {
            if k == 0 || k > MAX_K {
                return Err(Error::BadK(k));
            }
        }
        if self.cfg.alive_period.is_none() {
            return Err(Error::NoAliveService);
        }
        let seq = self.fresh_seq();
        let snapshot: Vec<(HostId, SocketAddr)> =
            self.alive_hosts().rows.iter().flatten().map(|r| (r.host, r.addr)).collect();
        let mut state = ReliableSend {
            mode,
            msg,
            local_host: from.host(),
            local_members: 0,
            replies: HashMap::default(),
            heard: snapshot.iter().map(|(h, _)| (*h, now)).collect(),
            silent: HashSet::default(),
            snapshot,
            acked: HashMap::default(),
            receivers: 0,
            count: 0,
            nacked: false,
            first: None,
        };
        let local: Vec<Pid> = self.group_members(group).into_iter().filter(|m| *m != from).collect();
        for m in &local {
            let copy = GroupCopy::new(self.incarnation, seq, msg, opts.idempotent, None, now, true);
            self.queue_copy(now, from, *m, copy);
        }
        state.receivers = local.len() as u32;
        state.local_members = state.receivers;
        if !mode.wants_replies() {
            state.count = state.receivers;
        }
        self.start_group_exchange(now, from, group, msg, opts, seq, ReplyMode::Many, Some(state));
        self.stats.group_sends += 1;
        self.transmit_send(now, from, false);
        if !self.decide_reliable(from) {
            let retransmit = now + self.cfg.retransmit;
            if let Some(ex) = self.exchanges.get_mut(&from) {
                ex.timer_at = Some(retransmit);
            }
            self.set_blocked(from, Blocked::Send);
            self.arm(retransmit, TimerKey::Exchange(from));
        }
        Ok(())
    }

    /// The hosts whose members did not all acknowledge (or reply to, in the
    /// REPLY modes) `sender`'s last reliable Send, until its next Send;
    /// `None` if its last Send was not reliable.
    pub fn reliable_missing(&self, sender: Pid) -> Option<Vec<HostId>> {
        self.groups.collected.get(&sender)?.reliable.as_ref().map(ReliableSend::missing)
    }

    /// Completes `sender`'s reliable Send if its outcome is decided.
    pub(super) fn decide_reliable(&mut self, sender: Pid) -> bool {
        let Some(r) = self.groups.collected.get(&sender).and_then(|c| c.reliable.as_ref()) else { return false };
        let Some(met) = r.decided() else { return false };
        let seq = self.groups.collected[&sender].seq;
        if !self.group_exchange_pending(sender, seq) {
            return false;
        }
        let outcome = r.outcome(met);
        self.exchanges.remove(&sender);
        if !met {
            self.stats.group_failures += 1;
        }
        self.wake(sender, Completion::Group(outcome));
        true
    }

    /// At the deadline: the condition was not met in time.
    pub(super) fn reliable_deadline(&mut self, sender: Pid) -> Option<GroupOutcome> {
        let r = self.groups.collected.get(&sender)?.reliable.as_ref()?;
        self.stats.group_failures += 1;
        Some(r.outcome(false))
    }

    /// Where a reliable Send goes: first to all (broadcast), then only to the
    /// hosts of the snapshot that have not acknowledged — or, in the REPLY
    /// modes, whose acknowledged members' replies are not all in (one was
    /// lost). `None`: not reliable.
    pub(super) fn reliable_targets(&self, sender: Pid, first: bool) -> Option<(u32, Vec<SocketAddr>)> {
        let c = self.groups.collected.get(&sender)?;
        let r = c.reliable.as_ref()?;
        let code = r.mode.code();
        if first {
            return Some((code, Vec::new()));
        }
        let pending =
            r.snapshot.iter().filter(|(h, _)| r.incomplete(*h) && !r.silent.contains(h)).map(|(_, a)| *a).collect();
        Some((code, pending))
    }

    /// `host` answered `sender`'s reliable Send `seq` (an acknowledgement or
    /// a ReplyPending): it holds its copies, and is retransmitted to for T_t more.
    pub(super) fn reliable_heard(&mut self, now: Time, sender: Pid, seq: u32, host: HostId) {
        let r = self.groups.collected.get_mut(&sender).filter(|c| c.seq == seq).and_then(|c| c.reliable.as_mut());
        if let Some(t) = r.and_then(|r| r.heard.get_mut(&host)) {
            *t = (*t).max(now);
        }
    }

    /// Before a retransmission of `sender`'s reliable Send: the hosts whose
    /// part is not complete and that were not heard from for T_t are given
    /// up (their copies live 2·T_t after the last retransmission they
    /// heard). Returns whether that decided the Send.
    pub(super) fn give_up_silent_hosts(&mut self, now: Time, sender: Pid) -> bool {
        let timeout = self.cfg.timeout;
        let Some(r) = self.groups.collected.get_mut(&sender).and_then(|c| c.reliable.as_mut()) else { return false };
        let silent: Vec<HostId> = r
            .snapshot
            .iter()
            .map(|(h, _)| *h)
            .filter(|h| r.incomplete(*h) && !r.silent.contains(h))
            .filter(|h| r.heard.get(h).is_some_and(|t| now.since(*t) >= timeout))
            .collect();
        if silent.is_empty() {
            return false;
        }
        r.silent.extend(silent);
        self.decide_reliable(sender)
    }

    /// A host's acknowledgement of `sender`'s reliable Send `seq`: `count`
    /// members there got it (replied, for the REPLY modes).
    pub(super) fn reliable_ack(&mut self, now: Time, sender: Pid, seq: u32, host: HostId, count: u32, nack: bool) {
        self.reliable_heard(now, sender, seq, host);
        let Some(r) = self.groups.collected.get_mut(&sender).filter(|c| c.seq == seq).and_then(|c| c.reliable.as_mut())
        else {
            return self.stray();
        };
        if !r.snapshot.iter().any(|(h, _)| *h == host) {
            // A host that came up after the Send began.
            self.stats.duplicates += 1;
            return;
        }
        r.nacked |= nack;
        // A repeated ACK may count more members (one joined and got a
        // retransmission): the larger count stands.
        let before = r.acked.get(&host).copied();
        let added = count.saturating_sub(before.unwrap_or(0));
        if before.is_some() && added == 0 && !nack {
            self.stats.duplicates += 1;
            return;
        }
        r.acked.insert(host, before.unwrap_or(0).max(count));
        // The count is the peer's word: saturating, so a count near
        // u32::MAX cannot overflow the sums (a panic in a debug build).
        r.receivers = r.receivers.saturating_add(added);
        if !r.mode.wants_replies() {
            r.count = r.count.saturating_add(added);
        }
        self.decide_reliable(sender);
    }

    /// A GroupAck packet.
    pub(super) fn on_group_ack(&mut self, now: Time, h: &Header) {
        self.reliable_ack(now, h.dst, h.seq, h.src.host(), h.local_addr, h.flags.has(Flags::NACK));
    }

    /// The receiving node's answer to a reliable group Send: ACK 0 without
    /// copies of it; for DELIVER an ACK with the deliveries (a NACK if some
    /// could not be made); for REPLY a NACK at once if resources lacked, else
    /// nothing — the ACK rides on the last reply — and, to a retransmission,
    /// the replies made so far again and a ReplyPending if some are owed.
    /// The copies counted are all of this Send's here, members that left
    /// since included: their replies and deliveries were made.
    pub(super) fn answer_reliable(&mut self, from: SocketAddr, h: &Header, mode: Reliable, refused: u32, again: bool) {
        let copies: Vec<&GroupCopy> = self.copies_of(h.src, h.incarnation, h.seq).map(|(_, c)| c).collect();
        let delivered = copies.len() as u32;
        if !mode.wants_replies() || copies.is_empty() {
            return self.send_group_ack(from, h, delivered, refused > 0);
        }
        let keyed = self.cfg.key.is_some();
        let resend: Vec<(SocketAddr, Vec<u8>)> = copies
            .iter()
            .filter_map(|c| Some((resend_addr(keyed, c.sender_addr()?, from), c.reply_packet()?.clone())))
            .collect();
        let owed = copies.iter().any(|c| !matches!(c.state, CopyState::Replied { .. }));
        if refused > 0 {
            // The members that did get a copy still reply: their replies and
            // ReplyPendings below keep counting toward K.
            self.send_group_ack(from, h, delivered, true);
        }
        if !again {
            return;
        }
        for (to, p) in resend {
            self.stats.replies_resent += 1;
            self.emit_raw(Destination::Addr(to), PacketType::Reply, p);
        }
        if owed {
            self.breath_of_life(from, h);
        }
    }

    fn send_group_ack(&mut self, to: SocketAddr, h: &Header, count: u32, nack: bool) {
        let mut a = self.header(PacketType::GroupAck);
        a.flags = Flags(0).with(Flags::NACK, nack);
        a.seq = h.seq;
        a.src = Pid::new(self.host.unwrap_or(0), 0);
        a.dst = h.src;
        a.local_addr = count;
        self.emit(Destination::Addr(to), &a, &[]);
    }
}
