//! Send, Receive, Reply, Forward, SetPid, GetPid and process destruction.

use super::*;
use vipc_wire::Flags;

/// Reason codes carried in byte 0 of an nAck's message.
pub(crate) mod nack {
    pub const NO_SUCH_PROCESS: u8 = 1;
    pub const NOT_AWAITING_REPLY: u8 = 2;
    pub const NO_READ_ACCESS: u8 = 3;
    pub const NO_WRITE_ACCESS: u8 = 4;
    pub const OUT_OF_SEGMENT: u8 = 5;
    /// A retransmitted Send names another incarnation of this node: it may
    /// have reached (and been executed by) the node's previous life.
    pub const RESTARTED: u8 = 6;
}

/// What the sender's thread lends for the whole exchange.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lending {
    None,
    /// Its read-only segment of this size ([`Engine::send_lending`]).
    Read(usize),
    /// Its write-only buffer of this size ([`Engine::send_lending_write`]).
    Write(usize),
}

/// Checks that `[offset, offset+len)` lies within a segment of `size` bytes.
pub(crate) fn check_range(offset: u64, len: u64, size: u64) -> Result<(), Error> {
    if offset.checked_add(len).is_some_and(|end| end <= size) {
        Ok(())
    } else {
        Err(Error::OutOfSegment { offset, len, size })
    }
}

/// [`Error::BadName`] unless `name` can be registered or looked up (1 to
/// [`crate::MAX_NAME`] bytes).
pub fn check_name(name: &[u8]) -> Result<(), Error> {
    if name.is_empty() || name.len() > MAX_NAME {
        Err(Error::BadName)
    } else {
        Ok(())
    }
}

fn check_destination(to: Pid) -> Result<(), Error> {
    if to.is_none() {
        Err(Error::NullPid)
    } else if to.is_group() {
        Err(Error::GroupId(to))
    } else {
        Ok(())
    }
}

impl Engine {
    /// Send: `from` blocks until [`Completion::Send`]. Misuse and a
    /// nonexistent local destination fail at once with `Err`.
    pub fn send(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        opts: SendOptions,
        segment: Option<Segment>,
    ) -> Result<(), Error> {
        self.send_inner(now, from, to, msg, opts, segment, Lending::None)
    }

    /// Send granting read access to `segment`, which the caller lends,
    /// unchanged, for the whole exchange: the engine copies only what the
    /// Send packet appends ([`Config::max_appended`]), and the data packets
    /// of a MoveFrom by the receiver are [`Transmit`]s with
    /// [`Transmit::lent`] set, whose data the runtime appends from the
    /// caller's memory — the segment is never copied whole. Should a
    /// Forward bring the Send to a process on this node, the engine asks
    /// for the whole segment with [`Event::FetchLent`]. For a remote
    /// destination on a node without a key only (else
    /// [`Error::Unsupported`]: a packet's MAC covers its data).
    pub fn send_lending(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        opts: SendOptions,
        segment: &[u8],
    ) -> Result<(), Error> {
        if self.cfg.key.is_some() {
            return Err(Error::Unsupported("a lent read segment on a node with a cluster key"));
        }
        if self.is_local(to) {
            return Err(Error::Unsupported("a lent read segment to a process on this node"));
        }
        if segment.len() > u32::MAX as usize {
            return Err(Error::TooLarge { what: "segment", len: segment.len() as u64, limit: u32::MAX as u64 });
        }
        let head =
            Segment { data: segment[..segment.len().min(self.cfg.max_appended())].to_vec(), access: Access::READ };
        self.send_inner(now, from, to, msg, opts, Some(head), Lending::Read(segment.len()))
    }

    /// Send granting write access to a buffer of `size` bytes that the
    /// caller lends, untouched by anyone else, for the whole exchange: the
    /// engine keeps no copy, and every write into it (MoveTo data, a reply's
    /// segment) is handed to the runtime to place in that buffer — as a
    /// placement of the datagram being handled ([`Engine::poll_placement`])
    /// or, for a writer on this node, an [`Event::Place`]. The
    /// [`SendOutcome`]'s segment is then empty. For a remote destination
    /// only (else [`Error::Unsupported`]). As in V, a receiver writes
    /// straight into the sender's memory: if the exchange fails, what was
    /// written stays written.
    pub fn send_lending_write(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        opts: SendOptions,
        size: u32,
    ) -> Result<(), Error> {
        if self.is_local(to) {
            return Err(Error::Unsupported("a lent write segment to a process on this node"));
        }
        let segment = Segment { data: Vec::new(), access: Access::WRITE };
        self.send_inner(now, from, to, msg, opts, Some(segment), Lending::Write(size as usize))
    }

    /// Writes `data` at `offset` of `sender`'s exchange segment (the caller
    /// checked access and range). Into a lent buffer ([`Engine::send_lending_write`])
    /// they go as a placement when `in_datagram` (they are the data part of
    /// the datagram being handled), else as an [`Event::Place`].
    pub(crate) fn write_exchange_segment(&mut self, sender: Pid, offset: usize, data: &[u8], in_datagram: bool) {
        let Some(ex) = self.exchanges.get_mut(&sender) else { return };
        if ex.lent_write.is_some() {
            if in_datagram {
                let lent = Lent { pid: sender, offset, len: data.len() };
                self.placement = Some((lent, vipc_wire::HEADER_LEN..vipc_wire::HEADER_LEN + data.len()));
            } else {
                self.events.push_back(Event::Place { pid: sender, offset, data: data.to_vec() });
            }
            return;
        }
        if let Some(seg) = ex.segment.as_mut().filter(|s| offset + data.len() <= s.data.len()) {
            seg.data[offset..offset + data.len()].copy_from_slice(data);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn send_inner(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        opts: SendOptions,
        segment: Option<Segment>,
        lending: Lending,
    ) -> Result<(), Error> {
        self.check_caller(from)?;
        check_destination(to)?;
        if to == from {
            return Err(Error::SendToSelf);
        }
        self.forget_collected(from);
        if let Some(s) = &segment {
            if s.data.len() > u32::MAX as usize {
                return Err(Error::TooLarge { what: "segment", len: s.data.len() as u64, limit: u32::MAX as u64 });
            }
        }
        if self.is_local(to) && !self.procs.contains_key(&to) {
            return Err(Error::NoSuchProcess(to));
        }
        self.exchanges.insert(
            from,
            Exchange {
                to,
                forwarder: from,
                msg,
                opts,
                segment,
                lent_read: match lending {
                    Lending::Read(size) => Some(size),
                    _ => None,
                },
                lent_write: match lending {
                    Lending::Write(size) => Some(size),
                    _ => None,
                },
                state: ExchangeState::Local { received_by: None },
                timer_at: None,
            },
        );
        self.set_blocked(from, Blocked::Send);
        self.dispatch_exchange(now, from);
        Ok(())
    }

    /// Routes the exchange of `sender` to its current destination: queued
    /// locally, or sent as a fresh remote Send with new timers.
    fn dispatch_exchange(&mut self, now: Time, sender: Pid) {
        let Some(ex) = self.exchanges.get(&sender) else { return };
        let to = ex.to;
        if self.is_local(to) {
            let lacks_bytes = ex.lacks_lent_bytes();
            let Some(p) = self.procs.get_mut(&to) else {
                self.exchanges.remove(&sender);
                self.wake(sender, Completion::Send(Err(Error::NoSuchProcess(to))));
                return;
            };
            if !lacks_bytes {
                p.queue.push_back(Incoming::Local(sender));
            }
            if let Some(ex) = self.exchanges.get_mut(&sender) {
                ex.state = ExchangeState::Local { received_by: None };
            }
            if lacks_bytes {
                // Forwarded here: a receiver on this node reads the segment from the engine.
                self.events.push_back(Event::FetchLent { pid: sender });
                return;
            }
            self.try_deliver(to);
        } else {
            let seq = self.fresh_seq();
            let (retransmit, deadline) = (now + self.cfg.retransmit, now + self.cfg.timeout);
            let timer = self.timer_entry(retransmit, TimerKey::Exchange(sender));
            let receiver = self.location.incarnation(to.host()).unwrap_or(0);
            if let Some(ex) = self.exchanges.get_mut(&sender) {
                ex.state =
                    ExchangeState::Remote { seq, next_retransmit: retransmit, deadline, receiver, sent_to: None };
                ex.timer_at = Some(timer);
            }
            self.transmit_send(now, sender, false);
        }
    }

    /// The whole read-only segment `sender` lends ([`Engine::send_lending`]),
    /// asked for with [`Event::FetchLent`]: its Send, forwarded to a process
    /// on this node, is queued for that process. Ignored unless the engine
    /// asked for exactly these many bytes and still waits for them.
    pub fn lent_segment(&mut self, now: Time, sender: Pid, bytes: &[u8]) {
        let Some(ex) = self.exchanges.get_mut(&sender) else { return };
        let waiting = matches!(ex.state, ExchangeState::Local { received_by: None }) && ex.lacks_lent_bytes();
        if !waiting || ex.lent_read != Some(bytes.len()) {
            return;
        }
        if let Some(s) = ex.segment.as_mut() {
            s.data.clear();
            s.data.extend_from_slice(bytes);
        }
        self.dispatch_exchange(now, sender);
    }

    /// The node of `sender`'s receiver, as `incarnation`, answered (ReplyPending)
    /// or moved data for its exchange `seq`: retransmissions name that life.
    pub(crate) fn heard_receiver(&mut self, sender: Pid, seq: u32, from: Pid, incarnation: u16) {
        let Some(ex) = self.exchanges.get_mut(&sender).filter(|ex| !ex.to.is_group() && ex.to.host() == from.host())
        else {
            return;
        };
        if let ExchangeState::Remote { seq: s, receiver, .. } = &mut ex.state {
            if *s == seq {
                *receiver = incarnation;
            }
        }
    }

    /// Before a retransmission: an exchange begun before anything was heard from
    /// its receiver's host takes the incarnation heard since, if any. (Its first
    /// Send went out on the broadcast channel and its answers were lost; that
    /// life is most likely the one that took it.)
    fn name_receiver_life(&mut self, sender: Pid) {
        let Some(ex) = self.exchanges.get_mut(&sender) else { return };
        if let ExchangeState::Remote { receiver: receiver @ 0, .. } = &mut ex.state {
            *receiver = self.location.incarnation(ex.to.host()).unwrap_or(0);
        }
    }

    /// Transmits the Send packet of a remote exchange, or (`again`) retransmits it.
    pub(crate) fn transmit_send(&mut self, now: Time, sender: Pid, again: bool) {
        if again {
            self.name_receiver_life(sender);
        }
        let mut h = self.header(PacketType::Send);
        // One lookup of the exchange: the fields used below are disjoint from it.
        let Some(ex) = self.exchanges.get_mut(&sender) else { return };
        if ex.to.is_group() {
            return self.transmit_group_send(now, sender);
        }
        let ExchangeState::Remote { seq, receiver, ref mut sent_to, .. } = ex.state else { return };
        let to = super::route_in(&mut self.location, &mut self.stats, ex.to);
        let limit = match to {
            Destination::Addr(a) => {
                sent_to.get_or_insert(a);
                self.cfg.data_to(a)
            }
            Destination::Broadcast | Destination::Group(_) => self.cfg.max_data(),
        };
        let access = ex.access();
        h.flags = Flags(0)
            .with(Flags::IDEMPOTENT, ex.opts.idempotent)
            .with(Flags::SEG_READ, access.read)
            .with(Flags::SEG_WRITE, access.write)
            .with(Flags::EARLY_PENDING, matches!(to, Destination::Broadcast) && !ex.opts.idempotent);
        h.seq = seq;
        h.src = sender;
        h.dst = ex.to;
        h.fwd = ex.forwarder;
        h.total_len = ex.segment_size() as u32;
        // Only a retransmission can be a copy of one the receiver's previous life took;
        // only a non-idempotent Send must not be carried out twice.
        h.remote_addr = if again && !ex.opts.idempotent { u32::from(receiver) } else { 0 };
        h.message = ex.msg;
        let appended = match (&ex.segment, access.read) {
            (Some(s), true) => &s.data[..s.data.len().min(limit)],
            _ => &[][..],
        };
        let mut bytes = self.buffers.for_packet(vipc_wire::encoded_len(appended.len(), self.cfg.key.is_some()));
        vipc_wire::encode(&h, appended, self.cfg.key.as_ref(), &mut bytes);
        self.emit_raw(to, PacketType::Send, bytes);
    }

    /// Receive (FCFS) or, with `only = Some(p)`, ReceiveSpecific. `pid` blocks
    /// until [`Completion::Receive`]; up to `segment_capacity` bytes of an
    /// appended segment are returned with the message.
    pub fn receive(&mut self, _now: Time, pid: Pid, only: Option<Pid>, segment_capacity: usize) -> Result<(), Error> {
        self.check_caller(pid)?;
        if let Some(o) = only {
            check_destination(o)?;
            if o == pid {
                return Err(Error::ReceiveFromSelf);
            }
            if self.is_local(o) && !self.procs.contains_key(&o) {
                return Err(Error::NoSuchProcess(o));
            }
        }
        self.set_blocked(pid, Blocked::Receive { only, capacity: segment_capacity });
        self.try_deliver(pid);
        Ok(())
    }

    /// If `receiver` waits in Receive and a matching message is queued, delivers it.
    pub(crate) fn try_deliver(&mut self, receiver: Pid) {
        let Some(p) = self.procs.get_mut(&receiver) else { return };
        let Blocked::Receive { only, capacity } = p.blocked else { return };
        let Some(idx) = p.queue.iter().position(|i| only.is_none_or(|o| o == i.sender())) else { return };
        let item = p.queue.remove(idx).expect("index from position");
        let received = match item {
            Incoming::Local(sender) => {
                let Some(ex) = self.exchanges.get_mut(&sender) else { return };
                ex.state = ExchangeState::Local { received_by: Some(receiver) };
                let access = ex.access();
                let segment = match (&ex.segment, access.read) {
                    (Some(s), true) => s.data[..s.data.len().min(capacity)].to_vec(),
                    _ => Vec::new(),
                };
                Received {
                    from: sender,
                    forwarder: ex.forwarder,
                    msg: ex.msg,
                    segment,
                    segment_size: ex.segment_size() as u32,
                    access,
                }
            }
            Incoming::Group(sender) => {
                let Some(r) = self.take_copy(sender, receiver, capacity) else { return };
                r
            }
            Incoming::Remote(sender) => {
                let Some(a) = self.aliens.get_mut(&sender) else { return };
                a.state = AlienState::Received { by: receiver };
                Received {
                    from: sender,
                    forwarder: a.forwarder,
                    msg: a.msg,
                    segment: a.appended[..a.appended.len().min(capacity)].to_vec(),
                    segment_size: a.segment_size,
                    access: a.access,
                }
            }
        };
        self.wake(receiver, Completion::Receive(Ok(received)));
    }

    /// Reply to `to`, which must be awaiting a reply from `from`. With a
    /// segment `(offset, bytes)`, the bytes are written at `offset` of the
    /// sender's write-granted segment (they must fit in one packet to the
    /// sender: [`Config::data_to`], or [`Config::local_data`] locally). Never blocks.
    pub fn reply(
        &mut self,
        now: Time,
        from: Pid,
        to: Pid,
        msg: Message,
        segment: Option<(u32, Vec<u8>)>,
    ) -> Result<(), Error> {
        if !self.procs.contains_key(&from) {
            return Err(Error::NotLocalProcess(from));
        }
        let too_large = |data: &[u8], limit: usize| {
            (data.len() > limit).then_some(Error::TooLarge {
                what: "reply segment",
                len: data.len() as u64,
                limit: limit as u64,
            })
        };
        if let Some(ex) = self.exchanges.get_mut(&to) {
            if matches!(ex.state, ExchangeState::Local { received_by: Some(r) } if r == from) {
                if let Some((off, data)) = &segment {
                    if let Some(e) = too_large(data, self.cfg.local_data()) {
                        return Err(e);
                    }
                    if !ex.access().write {
                        return Err(Error::NoAccess("write"));
                    }
                    check_range(*off as u64, data.len() as u64, ex.segment_size() as u64)?;
                    self.write_exchange_segment(to, *off as usize, data, false);
                }
                let ex = self.exchanges.remove(&to).expect("just looked up");
                self.stats.local_exchanges += 1;
                self.wake(to, Completion::Send(Ok(SendOutcome { reply: msg, replier: from, segment: ex.segment })));
                return Ok(());
            }
        }
        let alien = self.aliens.get(&to).filter(|a| a.state == (AlienState::Received { by: from }));
        if alien.is_none() {
            return self.reply_to_group_copy(now, from, to, msg, &segment).unwrap_or(Err(Error::NotAwaitingReply(to)));
        }
        let a = alien.expect("checked");
        let (offset, data) = segment.unwrap_or_default();
        if let Some(e) = too_large(&data, self.cfg.data_to(a.addr)) {
            return Err(e);
        }
        if !data.is_empty() {
            if !a.access.write {
                return Err(Error::NoAccess("write"));
            }
            check_range(offset as u64, data.len() as u64, a.segment_size as u64)?;
        }
        let h = reply_header(self.incarnation, (to, a.seq), from, a.segment_size, offset, msg);
        let (addr, idempotent) = (a.addr, a.opts.idempotent);
        // An idempotent sender's retransmission is served again, so its reply is not kept.
        let state = if idempotent {
            self.emit(Destination::Addr(addr), &h, &data);
            AlienState::Done
        } else {
            self.emit(Destination::Addr(addr), &h, &data);
            AlienState::Replied { by: from, offset, data }
        };
        let released = {
            let a = self.aliens.get_mut(&to).expect("looked up above");
            a.state = state;
            a.msg = msg;
            std::mem::take(&mut a.appended).len()
        };
        self.buffered -= released;
        Ok(())
    }

    /// Forward the message of `sender` (awaiting a reply from `from`) to `to`,
    /// as if `sender` had sent `msg` to `to`. Never blocks.
    pub fn forward(&mut self, now: Time, from: Pid, sender: Pid, to: Pid, msg: Message) -> Result<(), Error> {
        if !self.procs.contains_key(&from) {
            return Err(Error::NotLocalProcess(from));
        }
        check_destination(to)?;
        if to == sender {
            return Err(Error::SendToSelf);
        }
        if self.is_local(to) && !self.procs.contains_key(&to) {
            return Err(Error::NoSuchProcess(to));
        }
        if let Some(ex) = self.exchanges.get_mut(&sender) {
            if matches!(ex.state, ExchangeState::Local { received_by: Some(r) } if r == from) {
                ex.to = to;
                ex.forwarder = from;
                ex.msg = msg;
                self.dispatch_exchange(now, sender);
                return Ok(());
            }
        }
        let Some(a) = self.aliens.get_mut(&sender) else { return Err(Error::NotAwaitingReply(sender)) };
        if a.state != (AlienState::Received { by: from }) {
            return Err(Error::NotAwaitingReply(sender));
        }
        if self.host == Some(to.host()) {
            a.dst = to;
            a.forwarder = from;
            a.msg = msg;
            a.state = AlienState::Queued;
            self.procs.get_mut(&to).expect("checked alive").queue.push_back(Incoming::Remote(sender));
            self.try_deliver(to);
            return Ok(());
        }
        let (seq, addr) = (a.seq, a.addr);
        let h = forward_header(self.incarnation, sender, seq, from, to, msg);
        self.emit(Destination::Addr(addr), &h, &[]);
        let a = self.aliens.get_mut(&sender).expect("looked up above");
        a.state = AlienState::Forwarded { by: from, to };
        a.msg = msg;
        let released = std::mem::take(&mut a.appended).len();
        self.buffered -= released;
        Ok(())
    }

    /// The sender's node re-sends a forwarded exchange to its new destination.
    pub(crate) fn on_forward(&mut self, now: Time, h: &Header) {
        let Some(ex) = self.exchanges.get_mut(&h.dst) else { return self.stray() };
        match ex.state {
            ExchangeState::Remote { seq, .. } if seq == h.seq && ex.to.host() == h.src.host() => {}
            _ => return self.stray(),
        }
        // Checked before the exchange changes: a Forward to nobody, to a
        // group or to the sender itself (which would wait on itself for
        // ever; `forward` refuses it) leaves the Send bound for its receiver.
        if h.fwd.is_none() || h.fwd.is_group() || h.fwd == h.dst {
            return self.stray();
        }
        ex.to = h.fwd;
        ex.forwarder = h.src;
        ex.msg = h.message;
        self.dispatch_exchange(now, h.dst);
    }

    /// SetPid: registers `pid` under `name` with `scope` (overwrites). A null
    /// pid removes the registration. Never blocks.
    pub fn set_pid(&mut self, name: &[u8], pid: Pid, scope: Scope) -> Result<(), Error> {
        check_name(name)?;
        if pid.is_none() {
            self.names.remove(name);
            return Ok(());
        }
        if !self.names.contains_key(name) && self.names.len() >= self.cfg.max_names {
            return Err(Error::Limit("names"));
        }
        self.names.insert(name.to_vec(), (pid, scope));
        Ok(())
    }

    /// SetPid for a server starting under `name`: refused with
    /// [`Error::NameTaken`] while another live process (or a pid of another
    /// node) holds the name, which `set_pid` would silently take over.
    pub fn claim_name(&mut self, name: &[u8], pid: Pid, scope: Scope) -> Result<(), Error> {
        check_name(name)?;
        if let Some(&(holder, _)) = self.names.get(name) {
            let alive = !self.is_local(holder) || self.procs.contains_key(&holder);
            if holder != pid && alive {
                return Err(Error::NameTaken(holder));
            }
        }
        self.set_pid(name, pid, scope)
    }

    /// The most segment bytes a Reply to `to` may carry in its packet
    /// ([`Engine::reply`] refuses more): a packet's data to `to`'s node, or
    /// to a local sender what a loopback packet holds. 0 if `to` awaits no
    /// reply from a process of this node (or is a group Send's sender).
    pub fn reply_room(&self, to: Pid) -> usize {
        if self.exchanges.get(&to).is_some_and(|ex| matches!(ex.state, ExchangeState::Local { received_by: Some(_) })) {
            return self.cfg.local_data();
        }
        self.aliens
            .get(&to)
            .filter(|a| matches!(a.state, AlienState::Received { .. }))
            .map_or(0, |a| self.cfg.data_to(a.addr))
    }

    /// Removes the registration of `name` if it is `pid`'s; whether it was.
    /// A server that stops must not remove the name a newer one has taken
    /// over since. Never blocks.
    pub fn unset_pid(&mut self, name: &[u8], pid: Pid) -> bool {
        let ours = self.names.get(name).is_some_and(|&(p, _)| p == pid);
        if ours {
            self.names.remove(name);
        }
        ours
    }

    /// The pid registered under `name` as a GetPid from another node
    /// (`remote`) or from this one would find it, without blocking: what a
    /// server answering a location query on behalf of its node needs.
    pub fn registered(&self, name: &[u8], remote: bool) -> Option<Pid> {
        self.lookup_name(name, remote)
    }

    /// A registered pid visible to a lookup from `remote` (or local) callers.
    fn lookup_name(&self, name: &[u8], remote: bool) -> Option<Pid> {
        let &(pid, scope) = self.names.get(name)?;
        let visible = if remote { scope != Scope::Local } else { scope != Scope::Remote };
        let alive = !self.is_local(pid) || self.procs.contains_key(&pid);
        (visible && alive).then_some(pid)
    }

    /// GetPid: `caller` blocks until [`Completion::GetPid`]. Local scope
    /// completes at once; remote scope broadcasts and the first answer wins.
    pub fn get_pid(&mut self, now: Time, caller: Pid, name: &[u8], scope: Scope) -> Result<(), Error> {
        self.check_caller(caller)?;
        check_name(name)?;
        self.set_blocked(caller, Blocked::GetPid);
        if scope != Scope::Remote {
            let found = self.lookup_name(name, false);
            if found.is_some() || scope == Scope::Local {
                self.wake(caller, Completion::GetPid(found));
                return Ok(());
            }
        }
        let seq = self.fresh_seq();
        let next = now + self.cfg.retransmit;
        let deadline = now + self.cfg.getpid_timeout;
        self.lookups.insert(
            caller,
            Lookup { seq, name: name.to_vec(), next_retransmit: next, deadline, timer_at: Some(next.min(deadline)) },
        );
        self.arm(next.min(deadline), TimerKey::Lookup(caller));
        self.transmit_lookup(caller);
        Ok(())
    }

    pub(crate) fn transmit_lookup(&mut self, caller: Pid) {
        let Some(l) = self.lookups.get(&caller) else { return };
        let mut h = self.header(PacketType::GetPid);
        h.seq = l.seq;
        h.src = caller;
        h.total_len = l.name.len() as u32;
        h.message[..l.name.len()].copy_from_slice(&l.name);
        self.emit(Destination::Broadcast, &h, &[]);
    }

    pub(crate) fn on_get_pid(&mut self, from: SocketAddr, h: &Header) {
        let len = h.total_len as usize;
        if len == 0 || len > MAX_NAME {
            return self.malformed();
        }
        let Some(pid) = self.lookup_name(&h.message[..len], true) else { return };
        let host = self.host.expect("dispatch requires a host");
        let mut r = self.header(PacketType::GetPidReply);
        r.seq = h.seq;
        r.src = Pid::new(host, 0);
        r.dst = h.src;
        r.fwd = pid;
        r.total_len = h.total_len;
        r.message = h.message;
        self.emit(Destination::Addr(from), &r, &[]);
    }

    pub(crate) fn on_get_pid_reply(&mut self, h: &Header) {
        match self.lookups.get(&h.dst) {
            Some(l) if l.seq == h.seq && !h.fwd.is_none() => {
                self.lookups.remove(&h.dst);
                self.wake(h.dst, Completion::GetPid(Some(h.fwd)));
            }
            _ => self.stats.duplicates += 1,
        }
    }

    /// Answers Send `h` from `addr` with ReplyPending: this node has it.
    pub(crate) fn send_reply_pending(&mut self, addr: SocketAddr, h: &Header) {
        let mut p = self.header(PacketType::ReplyPending);
        p.seq = h.seq;
        p.src = h.dst;
        p.dst = h.src;
        self.emit(Destination::Addr(addr), &p, &[]);
    }

    /// Sends an nAck for a packet `h` that came from `addr`.
    pub(crate) fn send_nack(&mut self, addr: SocketAddr, h: &Header, reason: u8, detail: [u32; 3]) {
        let mut n = self.header(PacketType::NAck);
        n.seq = h.seq;
        n.src = h.dst;
        n.dst = h.src;
        n.fwd = h.dst;
        n.message[0] = reason;
        n.local_addr = detail[0];
        n.total_len = detail[1];
        n.remote_addr = detail[2];
        self.emit(Destination::Addr(addr), &n, &[]);
    }

    /// Destroys a local process: its blocked call is abandoned (no completion),
    /// local senders waiting on it fail with `NoSuchProcess` at once, remote ones
    /// get an nAck, and its own remote exchange is cancelled at the peer.
    pub fn destroy_process(&mut self, now: Time, pid: Pid) -> Result<(), Error> {
        let proc_ = self.procs.remove(&pid).ok_or(Error::NotLocalProcess(pid))?;
        self.names.retain(|_, (p, _)| *p != pid);
        self.lookups.remove(&pid);
        self.cancel_exchange(pid);
        self.cancel_streams_of(pid);
        self.forget_group_state_of(pid);
        // Senders queued on it or awaiting its reply learn at once that it is gone.
        let mut local_waiting: Vec<Pid> = proc_
            .queue
            .iter()
            .filter_map(|i| if let Incoming::Local(s) = i { Some(*s) } else { None })
            .chain(self.exchanges.iter().filter_map(|(s, ex)| {
                matches!(ex.state, ExchangeState::Local { received_by: Some(r) } if r == pid).then_some(*s)
            }))
            .collect();
        local_waiting.sort();
        local_waiting.dedup();
        for s in local_waiting {
            if self.exchanges.remove(&s).is_some() {
                self.wake(s, Completion::Send(Err(Error::NoSuchProcess(pid))));
            }
        }
        // So do processes waiting for a message from it alone (ReceiveSpecific).
        let mut receivers: Vec<Pid> = self
            .procs
            .iter()
            .filter(|(_, p)| matches!(p.blocked, Blocked::Receive { only: Some(o), .. } if o == pid))
            .map(|(r, _)| *r)
            .collect();
        receivers.sort();
        for r in receivers {
            self.wake(r, Completion::Receive(Err(Error::NoSuchProcess(pid))));
        }
        let mut remote_waiting: Vec<Pid> = self
            .aliens
            .iter()
            .filter(|(_, a)| a.dst == pid && matches!(a.state, AlienState::Queued | AlienState::Received { .. }))
            .map(|(s, _)| *s)
            .collect();
        remote_waiting.sort();
        for s in remote_waiting {
            self.bury_alien(now, s, true);
            let a = &self.aliens[&s];
            let mut h = self.header(PacketType::Send);
            h.seq = a.seq;
            h.src = s;
            h.dst = pid;
            let addr = a.addr;
            self.send_nack(addr, &h, nack::NO_SUCH_PROCESS, [0; 3]);
        }
        Ok(())
    }

    pub(crate) fn stray(&mut self) {
        self.stats.stray += 1;
    }

    pub(crate) fn malformed(&mut self) {
        self.stats.malformed += 1;
    }
}

/// The Reply to `sender`'s exchange `seq` from `by`: message `msg`, segment
/// data for `offset` of a segment of `segment_size` bytes. Built again,
/// identically, for a duplicate.
pub(crate) fn reply_header(
    incarnation: u16,
    (sender, seq): (Pid, u32),
    by: Pid,
    segment_size: u32,
    offset: u32,
    msg: Message,
) -> Header {
    let mut h = Header::new(PacketType::Reply);
    h.incarnation = incarnation;
    h.seq = seq;
    h.src = by;
    h.dst = sender;
    h.fwd = by;
    h.total_len = segment_size;
    h.remote_addr = offset;
    h.message = msg;
    h
}

/// The Forward of alien `sender`'s exchange `seq` by `by` to `to` with
/// message `msg`. Built again, identically, for a duplicate.
pub(crate) fn forward_header(incarnation: u16, sender: Pid, seq: u32, by: Pid, to: Pid, msg: Message) -> Header {
    let mut h = Header::new(PacketType::Forward);
    h.incarnation = incarnation;
    h.seq = seq;
    h.src = by;
    h.dst = sender;
    h.fwd = to;
    h.message = msg;
    h
}
