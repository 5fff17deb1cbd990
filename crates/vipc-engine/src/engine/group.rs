//! Process groups (000 §6.3, §6.5): group ids, membership, Send to a group
//! and GetReply.
//!
//! Membership is known only on each member's own node, as in V. A Send to a
//! group goes to the local members and, on the broadcast channel, to every
//! other node; each node queues a copy of the message for each of its
//! members. Members receive it as an ordinary message from the sender and
//! reply to the sender. The first reply completes the Send (reply mode
//! `One`/`Many`); with `Many` the later ones wait for [`Engine::get_reply`]
//! until the sender's next Send (with `One` they are dropped). With `None`
//! the Send is a datagram: it returns at once, is never retransmitted, and
//! whatever replies come wait for GetReply.
//!
//! Until the first reply the Send is retransmitted every T_r like any Send;
//! a node whose members still hold the message answers a retransmission with
//! ReplyPending (so a slow group does not time out), and one whose members
//! replied resends the cached replies. A copy is forgotten 2·T_t after the
//! sender's last packet, like an alien.

use super::bulk::Grant;
use super::primitives::check_range;
use super::reliable::{Reliable, ReliableSend};
use super::*;
use std::net::Ipv4Addr;
use std::time::Duration;
use vipc_wire::Flags;

/// Group ids with this host field (the top bit alone) are the statically
/// reserved, well-known ones: never handed out by [`Engine::allocate_group_id`].
pub const WELL_KNOWN_GROUP_HOST: u16 = 0x8000;

/// The well-known group id number `n` (1..=0xFFFF).
pub const fn well_known_group(n: u16) -> Pid {
    Pid(((WELL_KNOWN_GROUP_HOST as u32) << 16) | n as u32)
}

/// The default base of group multicast addresses: 239.86.0.0/16, in the
/// organization-local scope (RFC 2365).
pub const GROUP_ADDR_BASE: Ipv4Addr = Ipv4Addr::new(239, 86, 0, 0);

/// The IP multicast address of `group` (PROTOCOL §4.10): the first two octets
/// of `base`, then 16 bits folded from the group id — the local field XOR the
/// creator's host field (group bit cleared) rotated by 8. Well-known group `n`
/// maps to `base.(n >> 8).(n & 255)`. Distinct groups may share an address;
/// receivers filter by group id, so a collision costs traffic, never
/// correctness.
pub const fn group_multicast_addr(base: Ipv4Addr, group: Pid) -> Ipv4Addr {
    let host = (group.0 >> 16) as u16 & !WELL_KNOWN_GROUP_HOST;
    let fold = (group.0 as u16) ^ host.rotate_left(8);
    let [a, b, _, _] = base.octets();
    Ipv4Addr::new(a, b, (fold >> 8) as u8, fold as u8)
}

/// The keys of `sender`'s copies in [`Groups::copies`], as a range.
fn copies_of_sender(sender: Pid) -> std::ops::RangeInclusive<(Pid, Pid)> {
    (sender, Pid(0))..=(sender, Pid(u32::MAX))
}

/// Where a member's copy of a group message stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CopyState {
    Queued,
    Received,
    /// Replied: the Reply packet (remote, non-idempotent sender), resent to
    /// retransmissions.
    Replied {
        packet: Option<Vec<u8>>,
    },
}

/// One member's copy of a group message, keyed by (sender, member).
#[derive(Debug)]
pub(crate) struct GroupCopy {
    incarnation: u16,
    seq: u32,
    msg: Message,
    idempotent: bool,
    /// Of a reliable Send: the reply is always kept, and the last one of
    /// this node acknowledges the Send.
    reliable: bool,
    /// The sender's node, or `None` when the sender is local.
    addr: Option<SocketAddr>,
    /// Some member of this node got no copy of this Send (no room): the
    /// acknowledgement on the last reply is a NACK.
    short: bool,
    /// The sender's segment: its size and the access granted (write only to
    /// the first replier, decided on the sender's node).
    segment_size: u32,
    access: Access,
    /// The first part of a read-granted segment that came with the message,
    /// counted in the node's buffered bytes until received or forgotten.
    appended: Vec<u8>,
    pub state: CopyState,
    last_heard: Time,
    timer_at: Option<Time>,
}

impl GroupCopy {
    pub(crate) fn new(
        incarnation: u16,
        seq: u32,
        msg: Message,
        idempotent: bool,
        addr: Option<SocketAddr>,
        now: Time,
        reliable: bool,
    ) -> GroupCopy {
        GroupCopy {
            incarnation,
            seq,
            msg,
            idempotent,
            reliable,
            addr,
            short: false,
            segment_size: 0,
            access: Access::default(),
            appended: Vec::new(),
            state: CopyState::Queued,
            last_heard: now,
            timer_at: None,
        }
    }

    /// The copy grants `access` to a segment of `size` bytes whose first part is `appended`.
    fn with_segment(mut self, size: u32, access: Access, appended: Vec<u8>) -> GroupCopy {
        (self.segment_size, self.access, self.appended) = (size, access, appended);
        self
    }

    /// True if this copy is of the Send `seq` of incarnation `incarnation`.
    pub(crate) fn is_of(&self, incarnation: u16, seq: u32) -> bool {
        self.incarnation == incarnation && self.seq == seq
    }

    /// The address of the sender's node (`None`: the sender is local).
    pub(crate) fn sender_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The Reply packet kept for retransmissions, if any.
    pub(crate) fn reply_packet(&self) -> Option<&Vec<u8>> {
        match &self.state {
            CopyState::Replied { packet } => packet.as_ref(),
            _ => None,
        }
    }

    fn replied(&self) -> bool {
        matches!(self.state, CopyState::Replied { .. })
    }

    /// A retransmission of this Send delivers it again: the member replied
    /// to an idempotent Send, whose reply is not kept (as for one-to-one
    /// Sends, §4.3: the sender retransmits only while it has no reply).
    fn delivers_again(&self) -> bool {
        self.idempotent && !self.reliable && self.replied() && self.reply_packet().is_none()
    }
}

/// The replies to a process's last group Send, kept until its next Send.
#[derive(Debug)]
pub(crate) struct Collected {
    pub seq: u32,
    mode: ReplyMode,
    seen: HashSet<Pid>,
    queue: VecDeque<(Pid, Message)>,
    /// A GetReply is waiting, until this time.
    waiting: Option<Time>,
    /// The Send packet went out once (later transmissions are retransmissions).
    transmitted: bool,
    /// When the Send began: its transmissions carry its age (§4.10).
    began: Time,
    /// The state of a reliable Send (004).
    pub reliable: Option<ReliableSend>,
}

/// The group state of a node.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    /// Group id → its members on this node, sorted.
    members: HashMap<Pid, Vec<Pid>>,
    /// Members' copies by (sender, member): ordered, so that one Send's
    /// copies are a range, not a scan of every copy (each group Send packet
    /// and each reply to one looks them up).
    pub copies: std::collections::BTreeMap<(Pid, Pid), GroupCopy>,
    pub collected: HashMap<Pid, Collected>,
    next_id: u16,
}

/// A non-idempotent group Send's age as its transmissions carry it in
/// `remote_addr`: 1 + whole milliseconds since it began, at most `u32::MAX`
/// (0 is "no age": an idempotent Send, or a sender that does not say).
fn age_field(age: Duration) -> u32 {
    u32::try_from(age.as_millis()).unwrap_or(u32::MAX).saturating_add(1)
}

/// True if a group Send whose packet carries `age_field` began before this
/// node's life did (`uptime` ago): the previous life of this host may have
/// taken it. The packet's own transit makes the Send look younger than it
/// is, never older, so a Send begun after the start (by more than the two
/// clocks' error) is never taken for one begun before.
fn began_before(age_field: u32, uptime: Duration) -> bool {
    age_field != 0 && u128::from(age_field - 1) > uptime.as_millis()
}

fn check_group(group: Pid) -> Result<(), Error> {
    if group.is_group() {
        Ok(())
    } else {
        Err(Error::NotAGroup(group))
    }
}

impl Engine {
    /// A new group id, unique among the ids this node hands out during its
    /// life: the node's host id in the host field (with the group bit), a
    /// counter in the local field.
    pub fn allocate_group_id(&mut self) -> Result<Pid, Error> {
        let host = self.host.ok_or(Error::NotReady)?;
        let g = &mut self.groups;
        g.next_id = g.next_id.checked_add(1).ok_or(Error::Limit("group ids"))?;
        Ok(Pid::new(host | WELL_KNOWN_GROUP_HOST, g.next_id))
    }

    /// Makes local process `pid` a member of `group`. Joining twice is harmless.
    pub fn join_group(&mut self, pid: Pid, group: Pid) -> Result<(), Error> {
        check_group(group)?;
        if !self.procs.contains_key(&pid) {
            return Err(Error::NotLocalProcess(pid));
        }
        let total: usize = self.groups.members.values().map(Vec::len).sum();
        let list = self.groups.members.entry(group).or_default();
        if let Err(at) = list.binary_search(&pid) {
            if total >= self.cfg.max_memberships {
                if list.is_empty() {
                    self.groups.members.remove(&group);
                }
                return Err(Error::Limit("group memberships"));
            }
            list.insert(at, pid);
            if list.len() == 1 {
                self.events.push_back(Event::GroupJoined(group));
            }
        }
        Ok(())
    }

    /// Removes local process `pid` from `group`. Errors: `NotMember`.
    pub fn leave_group(&mut self, pid: Pid, group: Pid) -> Result<(), Error> {
        check_group(group)?;
        let list = self.groups.members.get_mut(&group).ok_or(Error::NotMember { pid, group })?;
        let at = list.binary_search(&pid).map_err(|_| Error::NotMember { pid, group })?;
        list.remove(at);
        if list.is_empty() {
            self.groups.members.remove(&group);
            self.events.push_back(Event::GroupLeft(group));
        }
        Ok(())
    }

    /// The members of `group` on this node, sorted.
    pub fn group_members(&self, group: Pid) -> Vec<Pid> {
        self.groups.members.get(&group).cloned().unwrap_or_default()
    }

    /// Send to a group: `from` blocks until the first reply
    /// ([`Completion::Send`]), or — with [`ReplyMode::None`] — completes at
    /// once.
    pub fn send_group(
        &mut self,
        now: Time,
        from: Pid,
        group: Pid,
        msg: Message,
        mode: ReplyMode,
        opts: SendOptions,
    ) -> Result<(), Error> {
        self.send_group_inner(now, from, group, msg, mode, opts, None)
    }

    /// Send to a group with a segment (000 §6.8): every member may MoveFrom
    /// a read-granted segment (its first part comes with the message, as
    /// with a Send to one process) until the Send completes; a
    /// write-granted one is written only by the first reply, whose segment
    /// lands in it — later replies' segments are dropped and counted
    /// (`group_segment_dropped`), and MoveTo by a member is refused. The
    /// segment comes back in the [`SendOutcome`]. Not with
    /// [`ReplyMode::None`]: the sender does not wait, so nothing could read it.
    #[allow(clippy::too_many_arguments)]
    pub fn send_group_with_segment(
        &mut self,
        now: Time,
        from: Pid,
        group: Pid,
        msg: Message,
        mode: ReplyMode,
        opts: SendOptions,
        segment: Segment,
    ) -> Result<(), Error> {
        if mode == ReplyMode::None {
            return Err(Error::Unsupported("a segment with a group Send that waits for no reply"));
        }
        if segment.data.len() > u32::MAX as usize {
            let len = segment.data.len() as u64;
            return Err(Error::TooLarge { what: "segment", len, limit: u32::MAX as u64 });
        }
        self.send_group_inner(now, from, group, msg, mode, opts, Some(segment))
    }

    #[allow(clippy::too_many_arguments)]
    fn send_group_inner(
        &mut self,
        now: Time,
        from: Pid,
        group: Pid,
        msg: Message,
        mode: ReplyMode,
        opts: SendOptions,
        segment: Option<Segment>,
    ) -> Result<(), Error> {
        self.check_caller(from)?;
        check_group(group)?;
        let seq = self.fresh_seq();
        let members: Vec<Pid> = self.group_members(group).into_iter().filter(|m| *m != from).collect();
        let (size, access) = segment.as_ref().map_or((0, Access::default()), |s| (s.data.len() as u32, s.access));
        for m in members {
            let appended = match &segment {
                Some(s) if access.read => s.data[..s.data.len().min(self.cfg.local_data())].to_vec(),
                _ => Vec::new(),
            };
            self.buffered += appended.len();
            let copy = GroupCopy::new(self.incarnation, seq, msg, opts.idempotent, None, now, false)
                .with_segment(size, access, appended);
            self.queue_copy(now, from, m, copy);
        }
        self.start_group_exchange(now, from, group, msg, opts, seq, mode, None);
        if let Some(ex) = self.exchanges.get_mut(&from) {
            ex.segment = segment;
        }
        let retransmit = now + self.cfg.retransmit;
        self.transmit_send(now, from, false);
        self.stats.group_sends += 1;
        if mode == ReplyMode::None {
            self.exchanges.remove(&from);
            let outcome = SendOutcome { reply: msg, replier: Pid::NONE, segment: None };
            self.wake(from, Completion::Send(Ok(outcome)));
            return Ok(());
        }
        if let Some(ex) = self.exchanges.get_mut(&from) {
            ex.timer_at = Some(retransmit);
        }
        self.set_blocked(from, Blocked::Send);
        self.arm(retransmit, TimerKey::Exchange(from));
        Ok(())
    }

    /// Records `from`'s group Send `seq` (replacing the replies of its last
    /// one) as a remote exchange, so that it is retransmitted and times out.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_group_exchange(
        &mut self,
        now: Time,
        from: Pid,
        group: Pid,
        msg: Message,
        opts: SendOptions,
        seq: u32,
        mode: ReplyMode,
        reliable: Option<ReliableSend>,
    ) {
        let collected = Collected {
            seq,
            mode,
            seen: HashSet::default(),
            queue: VecDeque::new(),
            waiting: None,
            transmitted: false,
            began: now,
            reliable,
        };
        self.groups.collected.insert(from, collected);
        let (retransmit, deadline) = (now + self.cfg.retransmit, now + self.cfg.timeout);
        let state = ExchangeState::Remote { seq, next_retransmit: retransmit, deadline, receiver: 0, sent_to: None };
        let ex = Exchange {
            to: group,
            forwarder: from,
            msg,
            opts,
            segment: None,
            lent_read: None,
            lent_write: None,
            state,
            timer_at: None,
        };
        self.exchanges.insert(from, ex);
    }

    /// True if `sender`'s group Send `seq` still waits.
    pub(super) fn group_exchange_pending(&self, sender: Pid, seq: u32) -> bool {
        self.exchanges
            .get(&sender)
            .is_some_and(|ex| ex.to.is_group() && matches!(ex.state, ExchangeState::Remote { seq: s, .. } if s == seq))
    }

    /// (Re)transmits `sender`'s group Send: the first time on the broadcast
    /// channel; a reliable one later only to the hosts that have not acknowledged.
    pub(super) fn transmit_group_send(&mut self, now: Time, sender: Pid) {
        let Some(c) = self.groups.collected.get_mut(&sender) else { return };
        let first = !std::mem::replace(&mut c.transmitted, true);
        let age = now - c.began;
        let reliable = self.reliable_targets(sender, first);
        let Some(ex) = self.exchanges.get(&sender) else { return };
        let ExchangeState::Remote { seq, .. } = ex.state else { return };
        let access = ex.access();
        let mut h = self.header(PacketType::Send);
        h.flags = Flags(0)
            .with(Flags::IDEMPOTENT, ex.opts.idempotent)
            .with(Flags::RELIABLE, reliable.is_some())
            .with(Flags::SEG_READ, access.read)
            .with(Flags::SEG_WRITE, access.write);
        h.seq = seq;
        h.src = sender;
        h.dst = ex.to;
        h.fwd = sender;
        h.total_len = ex.segment_size() as u32;
        h.remote_addr = if ex.opts.idempotent { 0 } else { age_field(age) };
        h.message = ex.msg;
        match reliable {
            None => {
                let appended = match &ex.segment {
                    Some(s) if access.read => &s.data[..s.data.len().min(self.cfg.max_data())],
                    _ => &[][..],
                };
                let bytes = vipc_wire::to_vec(&h, appended, self.cfg.key.as_ref());
                self.emit_raw(Destination::Group(ex.to), PacketType::Send, bytes);
            }
            Some((code, _)) if first => {
                h.local_addr = code;
                self.emit(Destination::Broadcast, &h, &[]);
            }
            Some((code, targets)) => {
                h.local_addr = code;
                let bytes = vipc_wire::to_vec(&h, &[], self.cfg.key.as_ref());
                for a in targets {
                    self.emit_raw(Destination::Addr(a), PacketType::Send, bytes.clone());
                }
            }
        }
    }

    /// The copies here of `sender`'s Send `seq` of incarnation `incarnation`,
    /// with their members (those that left the group since included).
    pub(super) fn copies_of(
        &self,
        sender: Pid,
        incarnation: u16,
        seq: u32,
    ) -> impl Iterator<Item = (Pid, &GroupCopy)> + '_ {
        self.groups
            .copies
            .range(copies_of_sender(sender))
            .filter(move |(_, c)| c.is_of(incarnation, seq))
            .map(|((_, m), c)| (*m, c))
    }

    /// `sender`'s group Send `seq` is still pending: its copies queued for
    /// local members live on. Returns whether one of them still owes a reply.
    pub(super) fn local_copies_heard(&mut self, now: Time, sender: Pid, seq: u32) -> bool {
        let incarnation = self.incarnation;
        let mut owed = false;
        for (_, c) in self.groups.copies.range_mut(copies_of_sender(sender)) {
            if c.addr.is_none() && c.is_of(incarnation, seq) {
                c.last_heard = now;
                owed |= matches!(c.state, CopyState::Queued | CopyState::Received);
            }
        }
        owed
    }

    /// Breath of life: members here still owe replies to `h`'s Send.
    pub(super) fn breath_of_life(&mut self, to: SocketAddr, h: &Header) {
        let mut p = self.header(PacketType::ReplyPending);
        p.seq = h.seq;
        p.src = Pid::new(self.host.unwrap_or(0), 0);
        p.dst = h.src;
        self.emit(Destination::Addr(to), &p, &[]);
    }

    /// GetReply: the next reply to `pid`'s last group Send (mode `Many`),
    /// waiting up to `limit` for one: [`Completion::GetReply`] with `None` at
    /// the limit. Errors: `NoGroupSend` if its last Send was not to a group.
    pub fn get_reply(&mut self, now: Time, pid: Pid, limit: Duration) -> Result<(), Error> {
        self.check_caller(pid)?;
        let c = self.groups.collected.get_mut(&pid).ok_or(Error::NoGroupSend)?;
        if let Some(r) = c.queue.pop_front() {
            self.wake(pid, Completion::GetReply(Some(r)));
            return Ok(());
        }
        if limit.is_zero() {
            // Nothing in yet and no wait asked for: no timer either.
            self.wake(pid, Completion::GetReply(None));
            return Ok(());
        }
        let until = now + limit;
        c.waiting = Some(until);
        self.set_blocked(pid, Blocked::GetReply);
        self.arm(until, TimerKey::GetReply(pid));
        Ok(())
    }

    /// A Send to a group from another node.
    pub(super) fn on_group_send(&mut self, now: Time, from: SocketAddr, h: &Header, data: &[u8]) {
        let access = Access { read: h.flags.has(Flags::SEG_READ), write: h.flags.has(Flags::SEG_WRITE) };
        let has_segment = access.read || access.write;
        if data.len() > h.total_len as usize
            || (!access.read && !data.is_empty())
            || (has_segment && h.flags.has(Flags::RELIABLE))
        {
            return self.malformed();
        }
        let reliable = if h.flags.has(Flags::RELIABLE) {
            match Reliable::decode(h.local_addr) {
                Some(r) => Some(r),
                None => return self.malformed(),
            }
        } else {
            None
        };
        let members = self.group_members(h.dst);
        // Members that left the group since they got their copies keep them:
        // a retransmission still refreshes them and gets their replies again.
        let departed: Vec<Pid> =
            self.copies_of(h.src, h.incarnation, h.seq).map(|(m, _)| m).filter(|m| !members.contains(m)).collect();
        if members.is_empty() && departed.is_empty() {
            return match reliable {
                Some(r) => self.answer_reliable(from, h, r, 0, false),
                None => self.stray(),
            };
        }
        let (mut pending, mut duplicate, mut refused) = (false, false, 0);
        let keyed = self.cfg.key.is_some();
        for m in departed {
            duplicate = true;
            pending |= self.copy_heard_again(now, from, (h.src, m), reliable.is_none());
        }
        let before_this_life = !h.flags.has(Flags::IDEMPOTENT) && began_before(h.remote_addr, now - self.started);
        let mut restart_refused = false;
        for m in members {
            let again = self
                .groups
                .copies
                .get(&(h.src, m))
                .is_some_and(|c| c.is_of(h.incarnation, h.seq) && c.delivers_again());
            match self.groups.copies.get_mut(&(h.src, m)).filter(|_| !again) {
                Some(c) if c.is_of(h.incarnation, h.seq) => {
                    duplicate = true;
                    pending |= self.copy_heard_again(now, from, (h.src, m), reliable.is_none());
                }
                Some(c) if c.incarnation == h.incarnation && !state::seq_newer(h.seq, c.seq) => {
                    self.stats.duplicates += 1;
                }
                // Another incarnation from another address than the copy's
                // sender: not believed (see `on_send`), or the sender's next
                // retransmission would run its request again.
                Some(c) if c.incarnation != h.incarnation && c.addr.is_some_and(|a| a != from) && !keyed => {
                    self.stats.stray += 1;
                }
                _ if before_this_life => {
                    // Its members here joined after it began; and executing
                    // it could execute it twice if this host's previous life took it.
                    restart_refused = true;
                    refused += 1;
                }
                _ => {
                    if self.groups.copies.len() >= self.cfg.max_aliens {
                        self.stats.group_dropped += 1;
                        refused += 1;
                        continue;
                    }
                    let idempotent = h.flags.has(Flags::IDEMPOTENT);
                    // The appended part is kept only while the buffer limit allows
                    // (as for one-to-one Sends); without it the member can still MoveFrom.
                    let appended = if self.buffered + data.len() <= self.cfg.buffer_limit {
                        self.buffered += data.len();
                        data.to_vec()
                    } else {
                        Vec::new()
                    };
                    let copy = GroupCopy::new(
                        h.incarnation,
                        h.seq,
                        h.message,
                        idempotent,
                        Some(from),
                        now,
                        reliable.is_some(),
                    )
                    .with_segment(h.total_len, access, appended);
                    self.queue_copy(now, h.src, m, copy);
                }
            }
        }
        if restart_refused {
            self.stats.restart_refusals += 1;
        }
        if refused > 0 {
            let of_sender = self.groups.copies.range_mut(copies_of_sender(h.src));
            for (_, c) in of_sender.filter(|(_, c)| c.is_of(h.incarnation, h.seq)) {
                c.short = true;
            }
        }
        match reliable {
            Some(r) => self.answer_reliable(from, h, r, refused, duplicate),
            None if pending => self.breath_of_life(from, h),
            None => {}
        }
    }

    /// A retransmission from `from` reached copy `key`: it lives on, and the
    /// reply made to it is sent again if `resend` (plain Sends; a reliable
    /// one's replies are resent by `answer_reliable`). Returns whether the
    /// member still owes its reply.
    fn copy_heard_again(&mut self, now: Time, from: SocketAddr, key: (Pid, Pid), resend: bool) -> bool {
        let keyed = self.cfg.key.is_some();
        let Some(c) = self.groups.copies.get_mut(&key) else { return false };
        self.stats.duplicates += 1;
        c.last_heard = now;
        match &c.state {
            CopyState::Queued | CopyState::Received => true,
            // (A copy of a local sender keeps no packet.)
            CopyState::Replied { packet: Some(p) } if resend => {
                if let Some(to) = c.addr.map(|recorded| resend_addr(keyed, recorded, from)) {
                    let p = p.clone();
                    self.stats.replies_resent += 1;
                    self.emit_raw(Destination::Addr(to), PacketType::Reply, p);
                }
                false
            }
            CopyState::Replied { .. } => false,
        }
    }

    /// Queues `copy` of `sender`'s message for member `m` (replacing an older one).
    pub(super) fn queue_copy(&mut self, now: Time, sender: Pid, m: Pid, mut copy: GroupCopy) {
        if let Some(old) = self.groups.copies.remove(&(sender, m)) {
            self.buffered -= old.appended.len();
            if old.state == CopyState::Queued {
                self.unqueue(m, Incoming::Group(sender));
            }
        }
        let expiry = now + self.alien_lifetime();
        copy.timer_at = Some(expiry);
        self.groups.copies.insert((sender, m), copy);
        self.arm(expiry, TimerKey::GroupCopy(sender, m));
        self.stats.group_deliveries += 1;
        if let Some(p) = self.procs.get_mut(&m) {
            p.queue.push_back(Incoming::Group(sender));
        }
        self.try_deliver(m);
    }

    /// Receive takes member `m`'s copy of `sender`'s group message.
    /// Up to `capacity` bytes of the appended segment go with it.
    pub(super) fn take_copy(&mut self, sender: Pid, m: Pid, capacity: usize) -> Option<Received> {
        let c = self.groups.copies.get_mut(&(sender, m))?;
        c.state = CopyState::Received;
        let mut segment = std::mem::take(&mut c.appended);
        self.buffered -= segment.len();
        segment.truncate(capacity);
        Some(Received {
            from: sender,
            forwarder: sender,
            msg: c.msg,
            segment,
            segment_size: c.segment_size,
            access: c.access,
        })
    }

    /// What member `m` may do with the segment of `sender`'s group Send it
    /// received: read if granted, never MoveTo (a write-granted segment is
    /// written by the first reply only). `None` if `m` holds no such copy or,
    /// for a local sender, the Send is over.
    pub(super) fn group_grant(&self, sender: Pid, m: Pid) -> Option<Grant> {
        let c = self.groups.copies.get(&(sender, m)).filter(|c| c.state == CopyState::Received)?;
        let access = Access { read: c.access.read, write: false };
        let size = c.segment_size as u64;
        match c.addr {
            Some(a) => Some(Grant { access, size, remote: Some((a, c.seq)) }),
            None => self.group_exchange_pending(sender, c.seq).then_some(Grant { access, size, remote: None }),
        }
    }

    /// Reply from member `from` to `to`'s group message, if `from` holds one
    /// (returns `None` otherwise: not a group reply).
    pub(super) fn reply_to_group_copy(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        segment: &Option<(u32, Vec<u8>)>,
    ) -> Option<Result<(), Error>> {
        let c = self.groups.copies.get(&(to, from))?;
        if c.state != CopyState::Received {
            return None;
        }
        let (offset, data) = segment.as_ref().map_or((0, &[][..]), |(o, d)| (*o, d.as_slice()));
        if !data.is_empty() {
            if !c.access.write {
                return Some(Err(Error::NoAccess("write")));
            }
            if let Err(e) = check_range(offset as u64, data.len() as u64, c.segment_size as u64) {
                return Some(Err(e));
            }
            let limit = c.addr.map_or(self.cfg.local_data(), |a| self.cfg.data_to(a));
            if data.len() > limit {
                let (len, limit) = (data.len() as u64, limit as u64);
                return Some(Err(Error::TooLarge { what: "reply segment", len, limit }));
            }
        }
        let (seq, incarnation, addr, keep, reliable) = (c.seq, c.incarnation, c.addr, !c.idempotent, c.reliable);
        let segment_size = c.segment_size;
        // Replied before the packet is built: the last reply of this node acknowledges a reliable Send.
        self.groups.copies.get_mut(&(to, from)).expect("looked up").state = CopyState::Replied { packet: None };
        let Some(addr) = addr else {
            self.collect_reply(now, to, seq, from, msg, (offset, data));
            return Some(Ok(()));
        };
        let mut h = super::primitives::reply_header(self.incarnation, (to, seq), from, segment_size, offset, msg);
        if reliable {
            let copies: Vec<&GroupCopy> = self.copies_of(to, incarnation, seq).map(|(_, c)| c).collect();
            if copies.iter().all(|c| c.replied()) {
                let short = copies.iter().any(|c| c.short);
                h.flags = Flags(0).with(Flags::GROUP_ACK, true).with(Flags::NACK, short);
                h.local_addr = copies.len() as u32;
            }
        }
        if keep || reliable {
            let packet = self.emit_kept(Destination::Addr(addr), &h, data);
            let c = self.groups.copies.get_mut(&(to, from)).expect("looked up");
            c.state = CopyState::Replied { packet: Some(packet) };
        } else {
            self.emit(Destination::Addr(addr), &h, data);
        }
        Some(Ok(()))
    }

    /// A reply from `replier` to `sender`'s group Send with sequence number
    /// `seq`: the first completes the Send, later ones wait for GetReply.
    /// The first reply's segment `(offset, data)` lands in the sender's
    /// write-granted segment; any other reply's is dropped and counted.
    pub(super) fn collect_reply(
        &mut self,
        _now: Time,
        sender: Pid,
        seq: u32,
        replier: Pid,
        msg: Message,
        (offset, data): (u32, &[u8]),
    ) {
        let first = self.group_exchange_pending(sender, seq);
        let written = data.is_empty() || (first && self.write_first_reply_segment(sender, offset, data));
        if !written {
            self.stats.group_segment_dropped += 1;
        }
        let Some(c) = self.groups.collected.get_mut(&sender).filter(|c| c.seq == seq) else {
            self.stats.duplicates += 1;
            return;
        };
        if c.seen.contains(&replier) {
            self.stats.duplicates += 1;
            return;
        }
        // Nothing more is kept of a Send that takes one reply and has it, nor
        // beyond `max_group_replies` (any host can claim to be a member).
        let one_done = c.reliable.is_none() && c.mode == ReplyMode::One && !first;
        if one_done || c.seen.len() >= self.cfg.max_group_replies {
            self.stats.group_replies_dropped += 1;
            return;
        }
        c.seen.insert(replier);
        if let Some(r) = c.reliable.as_mut() {
            // 004: every distinct reply counts (in the REPLY modes); the first
            // is returned, the others wait for GetReply.
            r.count_reply(replier.host());
            self.stats.group_replies += 1;
            // The first is the outcome's only while the Send is still
            // pending: once it ended (on acknowledgements, at its deadline
            // or its caller's limit) every reply waits for GetReply.
            if r.first.is_none() && first {
                r.first = Some((replier, msg));
            } else if c.waiting.take().is_some() {
                self.wake(sender, Completion::GetReply(Some((replier, msg))));
            } else {
                c.queue.push_back((replier, msg));
            }
            self.decide_reliable(sender);
            return;
        }
        if first {
            let segment = self.exchanges.remove(&sender).and_then(|ex| ex.segment);
            self.stats.group_replies += 1;
            let outcome = SendOutcome { reply: msg, replier, segment };
            self.wake(sender, Completion::Send(Ok(outcome)));
        } else if c.waiting.take().is_some() {
            self.stats.group_replies += 1;
            self.wake(sender, Completion::GetReply(Some((replier, msg))));
        } else {
            self.stats.group_replies += 1;
            c.queue.push_back((replier, msg));
        }
    }

    /// Writes the first reply's segment into `sender`'s pending group Send's
    /// segment, if write-granted and in range. False if it was refused.
    fn write_first_reply_segment(&mut self, sender: Pid, offset: u32, data: &[u8]) -> bool {
        let Some(ex) = self.exchanges.get_mut(&sender) else { return false };
        let size = ex.segment_size() as u64;
        if !ex.access().write || check_range(offset as u64, data.len() as u64, size).is_err() {
            return false;
        }
        let Some(seg) = ex.segment.as_mut() else { return false };
        seg.data[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        true
    }

    pub(super) fn get_reply_timer(&mut self, pid: Pid, at: Time) {
        let Some(c) = self.groups.collected.get_mut(&pid) else { return };
        if c.waiting == Some(at) {
            c.waiting = None;
            self.wake(pid, Completion::GetReply(None));
        }
    }

    pub(super) fn group_copy_timer(&mut self, now: Time, key: (Pid, Pid), at: Time) {
        let lifetime = self.alien_lifetime();
        let Some(c) = self.groups.copies.get_mut(&key) else { return };
        if c.timer_at != Some(at) {
            return;
        }
        // A reliable Send's copy was acknowledged as delivered: it stays
        // queued until its member takes it (the table's size bounds them).
        let kept = c.reliable && c.state == CopyState::Queued;
        let expiry = if kept { now + lifetime } else { c.last_heard + lifetime };
        if now >= expiry {
            let c = self.groups.copies.remove(&key).expect("present");
            self.buffered -= c.appended.len();
            if c.state == CopyState::Queued {
                self.unqueue(key.1, Incoming::Group(key.0));
            }
        } else {
            c.timer_at = Some(expiry);
            self.arm(expiry, TimerKey::GroupCopy(key.0, key.1));
        }
    }

    /// A destroyed process leaves its groups; its copies and collected replies go.
    pub(super) fn forget_group_state_of(&mut self, pid: Pid) {
        let events = &mut self.events;
        self.groups.members.retain(|group, list| {
            list.retain(|m| *m != pid);
            if list.is_empty() {
                events.push_back(Event::GroupLeft(*group));
            }
            !list.is_empty()
        });
        // Its own copies as a member go, and so do the copies of its group
        // Sends still queued for local members (as its one-to-one Sends are
        // unqueued): nobody would take their replies.
        let mut released = 0;
        let mut unqueue = Vec::new();
        self.groups.copies.retain(|&(s, m), c| {
            let keep = m != pid && !(s == pid && c.addr.is_none() && c.state == CopyState::Queued);
            if !keep {
                released += c.appended.len();
                if m != pid {
                    unqueue.push(m);
                }
            }
            keep
        });
        self.buffered -= released;
        for m in unqueue {
            self.unqueue(m, Incoming::Group(pid));
        }
        self.groups.collected.remove(&pid);
    }

    /// Forgets the replies to `pid`'s last group Send (its next Send began).
    pub(super) fn forget_collected(&mut self, pid: Pid) {
        self.groups.collected.remove(&pid);
    }

    /// Gauges for [`Engine::stats`].
    pub(super) fn group_gauges(&self) -> (u64, u64) {
        let memberships = self.groups.members.values().map(|l| l.len() as u64).sum();
        (memberships, self.groups.copies.len() as u64)
    }
}
