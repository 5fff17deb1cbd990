//! Datagram dispatch: validation, location learning, and the handlers of the
//! exchange packets (Send, Reply, ReplyPending, nAck, Cancel).

use super::primitives::nack;
use super::*;
use vipc_wire::{Flags, ParseError};

impl Engine {
    /// Feeds one received datagram. Anything invalid is dropped and counted.
    pub fn handle_datagram(&mut self, now: Time, from: SocketAddr, bytes: &[u8]) {
        self.placement = None;
        let pkt = match vipc_wire::parse(bytes, self.cfg.key.as_ref()) {
            Ok(p) => p,
            Err(e) => return self.count_parse_error(from, e),
        };
        let h = pkt.header;
        self.stats.packets_in[h.ptype.index()] += 1;
        self.stats.bytes_in += bytes.len() as u64;
        match h.ptype {
            PacketType::HostRequest => return self.on_host_request(now, from, &h),
            PacketType::HostComplaint => return self.on_host_complaint(now, from, &h),
            _ => {}
        }
        let Some(host) = self.host else { return self.stray() };
        // Our own broadcasts come back to us; another incarnation with our host id is a conflict.
        if h.src.host() == host {
            if h.incarnation != self.incarnation {
                self.report_conflict(from);
            }
            return self.stray();
        }
        if h.src.is_group() || (h.src.host() == 0 && h.ptype != PacketType::GetPidReply) {
            return self.stray();
        }
        self.location.learn(h.src.host(), from, h.incarnation);
        self.alive_heard(now, h.src.host(), h.incarnation);
        if h.ptype == PacketType::IAmHere {
            return self.on_i_am_here(now, from, &h);
        }
        if h.ptype == PacketType::Send && h.dst.is_group() {
            return self.on_group_send(now, from, &h, pkt.data);
        }
        // Every remaining type is addressed to a process of ours (or to this
        // node), except the broadcast GetPid and MemImport.
        if !matches!(h.ptype, PacketType::GetPid | PacketType::MemImport) && h.dst.host() != host {
            return self.stray();
        }
        match h.ptype {
            PacketType::Send => self.on_send(now, from, &h, pkt.data),
            PacketType::Reply => self.on_reply(now, &h, pkt.data),
            PacketType::ReplyPending => self.on_reply_pending(now, &h),
            PacketType::Forward => self.on_forward(now, &h),
            PacketType::NAck => self.on_nack(&h),
            PacketType::Cancel => self.on_cancel(now, &h),
            PacketType::GetPid => self.on_get_pid(from, &h),
            PacketType::GetPidReply => self.on_get_pid_reply(&h),
            PacketType::MoveToData | PacketType::MoveFromData => self.on_data(now, from, &h, pkt.data),
            PacketType::MoveToAck | PacketType::MoveFromAck => self.on_ack(now, &h),
            PacketType::MoveFromRequest => self.on_move_from_request(now, from, &h),
            PacketType::GroupAck => self.on_group_ack(now, &h),
            PacketType::MemWrite
            | PacketType::MemRead
            | PacketType::MemCas
            | PacketType::MemWritev
            | PacketType::MemNack
            | PacketType::MemImport
            | PacketType::MemImportReply => self.on_mem_packet(from, &h, pkt.data),
            PacketType::HostRequest | PacketType::HostComplaint | PacketType::IAmHere => {
                unreachable!("handled above")
            }
        }
    }

    fn count_parse_error(&mut self, from: SocketAddr, e: ParseError) {
        match e {
            ParseError::BadVersion(version) => {
                self.stats.bad_version += 1;
                if self.version_reported.len() < 1024 && self.version_reported.insert(from) {
                    self.events.push_back(Event::VersionMismatch { addr: from, version });
                }
            }
            ParseError::MissingMac | ParseError::UnexpectedMac | ParseError::BadMac => self.stats.mac_failures += 1,
            _ => self.stats.malformed += 1,
        }
    }

    fn on_send(&mut self, now: Time, from: SocketAddr, h: &Header, data: &[u8]) {
        if h.dst.is_none() || h.dst.is_group() || data.len() > h.total_len as usize {
            return self.malformed();
        }
        let keyed = self.cfg.key.is_some();
        if let Some(a) = self.aliens.get_mut(&h.src) {
            if a.incarnation == h.incarnation && a.seq == h.seq {
                self.stats.duplicates += 1;
                a.last_heard = now;
                match &a.state {
                    AlienState::Queued | AlienState::Received { .. } => return self.send_reply_pending(from, h),
                    AlienState::Replied { by, offset, data } => {
                        let (reply, data) = (
                            primitives::reply_header(
                                self.incarnation,
                                (h.src, a.seq),
                                *by,
                                a.segment_size,
                                *offset,
                                a.msg,
                            ),
                            data.clone(),
                        );
                        let to = resend_addr(keyed, a.addr, from);
                        self.stats.replies_resent += 1;
                        self.emit(Destination::Addr(to), &reply, &data);
                        return;
                    }
                    AlienState::Forwarded { by, to } => {
                        let forward = primitives::forward_header(self.incarnation, h.src, a.seq, *by, *to, a.msg);
                        let to = resend_addr(keyed, a.addr, from);
                        self.stats.replies_resent += 1;
                        self.emit(Destination::Addr(to), &forward, &[]);
                        return;
                    }
                    AlienState::Gone { nack: true } => return self.send_nack(from, h, nack::NO_SUCH_PROCESS, [0; 3]),
                    AlienState::Gone { nack: false } => return,
                    // Idempotent and already replied: the reply was lost, execute again.
                    AlienState::Done => {}
                }
            } else if a.incarnation == h.incarnation && !state::seq_newer(h.seq, a.seq) {
                self.stats.duplicates += 1;
                return; // a stale retransmission of an exchange already superseded
            } else if a.incarnation != h.incarnation && a.addr != from && !keyed {
                // The sender's node restarted, says a Send from elsewhere:
                // taken on trust, it would replace the alien, and the
                // sender's next retransmission would run its request
                // again. A restarted node at its old address is believed
                // at once; from another address, once the alien expires.
                return self.stray();
            }
        }
        if h.remote_addr != 0 && h.remote_addr != u32::from(self.incarnation) {
            // A retransmission of a Send this node's previous life may have
            // taken: executing it now could execute it twice.
            self.stats.restart_refusals += 1;
            return self.send_nack(from, h, nack::RESTARTED, [0; 3]);
        }
        // A newer exchange from the same sender (implicitly acknowledging a
        // cached reply), or the sender's node restarted: the new alien takes
        // the old one's place in the table, which it leaves as it found it.
        let replacing = self.release_alien(h.src);
        let exists = self.procs.contains_key(&h.dst);
        if !replacing && self.aliens.len() >= self.cfg.max_aliens && !self.evict_finished_alien(now) {
            if !exists {
                return self.send_nack(from, h, nack::NO_SUCH_PROCESS, [0; 3]);
            }
            return self.send_reply_pending(from, h);
        }
        let read = h.flags.has(Flags::SEG_READ);
        let appended = if !exists || !read || data.is_empty() {
            Vec::new()
        } else if self.buffered + data.len() <= self.cfg.buffer_limit {
            self.buffered += data.len();
            data.to_vec()
        } else {
            self.stats.appended_dropped += 1;
            Vec::new()
        };
        let expiry = now + self.alien_lifetime();
        let timer = self.timer_entry(expiry, TimerKey::Alien(h.src));
        let alien = Alien {
            incarnation: h.incarnation,
            seq: h.seq,
            dst: h.dst,
            forwarder: h.fwd,
            msg: h.message,
            opts: SendOptions { idempotent: h.flags.has(Flags::IDEMPOTENT) },
            access: Access { read, write: h.flags.has(Flags::SEG_WRITE) },
            segment_size: h.total_len,
            appended,
            addr: from,
            state: if exists { AlienState::Queued } else { AlienState::Gone { nack: true } },
            last_heard: now,
            timer_at: Some(timer),
        };
        match self.aliens.get_mut(&h.src) {
            Some(old) => *old = alien,
            None => {
                self.aliens.insert(h.src, alien);
            }
        }
        if !exists {
            // Remembered as a tombstone, so that a late retransmission of this
            // sender's previous request is still recognised as stale.
            return self.send_nack(from, h, nack::NO_SUCH_PROCESS, [0; 3]);
        }
        if h.flags.has(Flags::EARLY_PENDING) {
            // Before any Reply (one arriving after it is only `stray`).
            self.send_reply_pending(from, h);
        }
        self.procs.get_mut(&h.dst).expect("checked above").queue.push_back(Incoming::Remote(h.src));
        self.try_deliver(h.dst);
    }

    /// The remote exchange of `sender` if it is waiting with sequence number `seq`.
    fn remote_exchange(&mut self, sender: Pid, seq: u32) -> Option<&mut Exchange> {
        self.exchanges
            .get_mut(&sender)
            .filter(|ex| matches!(ex.state, ExchangeState::Remote { seq: s, .. } if s == seq))
    }

    fn on_reply(&mut self, now: Time, h: &Header, data: &[u8]) {
        let ex = match self.remote_exchange(h.dst, h.seq) {
            Some(ex) if !ex.to.is_group() => ex,
            _ => {
                // A reply to a group Send (a later one, or a duplicate).
                self.collect_reply(now, h.dst, h.seq, h.src, h.message, (h.remote_addr, data));
                if h.flags.has(Flags::GROUP_ACK) {
                    self.reliable_ack(now, h.dst, h.seq, h.src.host(), h.local_addr, h.flags.has(Flags::NACK));
                }
                return;
            }
        };
        if ex.to.host() != h.src.host() {
            return self.stray();
        }
        if !data.is_empty() {
            let fits = primitives::check_range(h.remote_addr as u64, data.len() as u64, ex.segment_size() as u64);
            if !ex.access().write || fits.is_err() {
                return self.malformed();
            }
            self.write_exchange_segment(h.dst, h.remote_addr as usize, data, true);
        }
        let ex = self.exchanges.remove(&h.dst).expect("found above");
        self.stats.remote_exchanges += 1;
        self.wake(h.dst, Completion::Send(Ok(SendOutcome { reply: h.message, replier: h.src, segment: ex.segment })));
    }

    fn on_reply_pending(&mut self, now: Time, h: &Header) {
        let (retransmit, deadline) = (now + self.cfg.retransmit, now + self.cfg.timeout);
        let Some(ex) = self.remote_exchange(h.dst, h.seq) else { return self.stray() };
        // From the receiver's host only (any member's, for a group Send):
        // anyone else could keep an exchange with a dead host alive for ever.
        if !ex.to.is_group() && ex.to.host() != h.src.host() {
            return self.stray();
        }
        if let ExchangeState::Remote { next_retransmit, deadline: d, .. } = &mut ex.state {
            *next_retransmit = retransmit;
            *d = deadline;
        }
        ex.timer_at = Some(retransmit);
        self.arm(retransmit, TimerKey::Exchange(h.dst));
        self.heard_receiver(h.dst, h.seq, h.src, h.incarnation);
        self.reliable_heard(now, h.dst, h.seq, h.src.host());
    }

    fn on_nack(&mut self, h: &Header) {
        let about = h.src;
        let err = match h.message[0] {
            nack::NOT_AWAITING_REPLY => Error::NotAwaitingReply(about),
            nack::NO_READ_ACCESS => Error::NoAccess("read"),
            nack::NO_WRITE_ACCESS => Error::NoAccess("write"),
            nack::OUT_OF_SEGMENT => {
                Error::OutOfSegment { offset: h.local_addr as u64, len: h.total_len as u64, size: h.remote_addr as u64 }
            }
            nack::RESTARTED => Error::ReceiverRestarted(about),
            _ => Error::NoSuchProcess(about),
        };
        if self.fail_stream(h.src, h.seq, h.dst, err.clone()) {
            return;
        }
        // Only the receiver's host refuses a Send; nobody NAcks a group Send
        // (its seq is multicast: anyone could end it).
        match self.remote_exchange(h.dst, h.seq) {
            Some(ex) if !ex.to.is_group() && ex.to.host() == about.host() => {}
            _ => return self.stray(),
        }
        self.exchanges.remove(&h.dst);
        self.wake(h.dst, Completion::Send(Err(err)));
    }

    fn on_cancel(&mut self, now: Time, h: &Header) {
        match self.aliens.get(&h.src) {
            Some(a) if a.seq == h.seq && a.incarnation == h.incarnation => self.bury_alien(now, h.src, false),
            _ => self.stray(),
        }
    }
}
