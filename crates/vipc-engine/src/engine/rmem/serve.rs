//! What arrives: requests served for other hosts (the owner's side, done by
//! the engine alone — no process of the exporter runs), the answers to this
//! node's own operations, and the operations' timers. Every refused request
//! is dropped and counted by reason; a refused read, CAS-II or import is
//! also answered with a MemNack so that its requester fails fast.

use super::super::*;
use super::ops::{import_check, Cas, Strided};
use super::*;
use crate::Access;
use vipc_wire::rmem::{CasFields, ImportFields, ImportReplyFields, NackFields, ReadFields, WriteFields, WritevFields};
use vipc_wire::Flags;

/// Read answers of at least this many bytes — those that would be encoded
/// into recycled large buffers — leave split (see `answer_read`).
const SPLIT_ANSWER_MIN: usize = 16 << 10;

impl Engine {
    /// Dispatches a remote-memory packet (already authenticated, addressed to us).
    pub(in super::super) fn on_mem_packet(&mut self, from: SocketAddr, h: &Header, data: &[u8]) {
        let (host, notify) = (h.src.host(), h.flags.has(Flags::NOTIFY));
        match h.ptype {
            PacketType::MemWrite if h.flags.has(Flags::ANSWER) => self.on_mem_answer(h, data),
            PacketType::MemWrite => {
                let f = WriteFields::get(h);
                let _ = self.serve_write(host, f.dest, f.offset, None, data, notify);
            }
            PacketType::MemWritev => {
                let f = WritevFields::get(h);
                if f.count as u64 * f.elem as u64 != data.len() as u64 {
                    return self.refuse(Refusal::Malformed);
                }
                let shape = Strided { stride: f.stride, elem: f.elem };
                let _ = self.serve_write(host, f.dest, f.base, Some(shape), data, notify);
            }
            PacketType::MemRead => {
                let f = ReadFields::get(h);
                if let Some(token) = self.unproven(from, &f) {
                    self.refuse(Refusal::Unvalidated);
                    return self.mem_nack(from, h, Refusal::Unvalidated, token);
                }
                match self.admit_read(host, f.source, f.offset, f.len, notify) {
                    Ok(()) => self.answer_read(from, h, &f),
                    Err(r) => self.mem_nack(from, h, r, 0),
                }
            }
            PacketType::MemCas => {
                let f = CasFields::get(h);
                let cas = Cas { expect: f.expect, new: f.new, nonce: f.nonce };
                match self.serve_cas(host, f.target, f.offset, cas, notify) {
                    Ok(a) => {
                        let mut w = self.mem_header(PacketType::MemWrite, h.seq, host, false);
                        w.flags = w.flags.with(Flags::ANSWER, true);
                        WriteFields { dest: f.dest, offset: f.dest_offset, total: CAS_CELL as u32 }.put(&mut w);
                        self.emit(Destination::Addr(from), &w, &a.to_bytes());
                    }
                    Err(r) => self.mem_nack(from, h, r, 0),
                }
            }
            PacketType::MemNack => self.on_mem_nack(h),
            PacketType::MemImport => self.on_mem_import(from, h),
            PacketType::MemImportReply => self.on_mem_import_reply(h),
            _ => self.stray(),
        }
    }

    /// The address token this node expects in a read of more than
    /// [`TOKENLESS_READ_MAX`] bytes from `addr` (what its `Unvalidated`
    /// MemNack to `addr` carries): a keyed hash of the address (SipHash, a
    /// short-input PRF), so only a host that receives at `addr` learns it.
    /// Never 0, which means "no token" on the wire. Changes when the node restarts.
    pub fn address_token(&self, addr: SocketAddr) -> u64 {
        use std::hash::Hasher;
        let ip = match addr.ip() {
            std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            std::net::IpAddr::V6(v6) => v6,
        };
        let [k0, k1] = self.rmem.token_key;
        let mut h = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
        h.write(&ip.octets());
        h.write(&addr.port().to_be_bytes());
        h.finish().max(1)
    }

    /// The token a read from `from` must carry and does not: `Some` only
    /// without a cluster key (a keyed packet's source is a key holder) and
    /// for reads over [`TOKENLESS_READ_MAX`], whose answers a forged source
    /// address would aim at someone else. Costs one SipHash per such read.
    fn unproven(&self, from: SocketAddr, f: &ReadFields) -> Option<u64> {
        if self.cfg.key.is_some() || f.len <= TOKENLESS_READ_MAX {
            return None;
        }
        let token = self.address_token(from);
        (f.token != token).then_some(token)
    }

    fn refuse(&mut self, r: Refusal) {
        self.stats.rmem_refused[r.index()] += 1;
    }

    fn refused<T>(&mut self, r: Refusal) -> Result<T, Refusal> {
        self.refuse(r);
        Err(r)
    }

    /// Applies a write (`shape` None) or writev from `from` — or queues it on
    /// the data channel if it touches a write-inhibited byte — and notifies
    /// as the segment's policy says. Refusals are counted.
    pub(super) fn serve_write(
        &mut self,
        from: HostId,
        desc: Descriptor,
        offset: u32,
        shape: Option<Strided>,
        data: &[u8],
        notify: bool,
    ) -> Result<(), Refusal> {
        let (op, span, stride, elem) = match shape {
            None => (MemOp::Write, data.len() as u64, data.len() as u64, data.len() as u64),
            Some(s) => {
                let (stride, elem) = (s.stride as u64, s.elem as u64);
                if elem == 0 || stride < elem || data.len() as u64 % elem != 0 {
                    return self.refused(Refusal::Malformed);
                }
                let count = data.len() as u64 / elem;
                (MemOp::Writev, (count.max(1) - 1) * stride + elem, stride, elem)
            }
        };
        if data.is_empty() {
            return self.refused(Refusal::Malformed);
        }
        let Some(seg) = self.rmem.table.get_mut(desc) else { return self.refused(Refusal::UnknownSegment) };
        if let Err(r) = seg.check(from, Access::WRITE, offset as u64, span) {
            return self.refused(r);
        }
        let start = offset as u64;
        if seg.inhibited(start, start + span) {
            self.stats.rmem_queued += 1;
            if seg.data_bytes + data.len() > self.cfg.rmem_data_queue {
                self.stats.rmem_data_dropped += 1;
                return Ok(());
            }
            let was_empty = seg.data.is_empty();
            let record = DataRecord { from, offset, stride: stride as u32, elem: elem as u32, data: data.to_vec() };
            seg.data_bytes += data.len();
            seg.data.push_back(record);
            if was_empty {
                self.events.push_back(Event::MemNotify(desc));
            }
            return Ok(());
        }
        join_queued(&mut self.transmits, &mut self.split_queued, desc, seg.bytes());
        for (i, piece) in data.chunks(elem as usize).enumerate() {
            let at = (start + i as u64 * stride) as usize;
            seg.bytes_mut()[at..at + piece.len()].copy_from_slice(piece);
        }
        self.stats.rmem_writes_applied += 1;
        self.notify_owner(desc, notify, ControlRecord { op, from, offset, len: span as u32 });
        Ok(())
    }

    /// Admits a read from `from` of `len` bytes at `offset` of `desc`:
    /// checked, counted, and the owner notified if asked.
    pub(super) fn admit_read(
        &mut self,
        from: HostId,
        desc: Descriptor,
        offset: u32,
        len: u32,
        notify: bool,
    ) -> Result<(), Refusal> {
        if len == 0 {
            return self.refused(Refusal::Malformed);
        }
        let Some(seg) = self.rmem.table.get(desc) else { return self.refused(Refusal::UnknownSegment) };
        if let Err(r) = seg.check(from, Access::READ, offset as u64, len as u64) {
            return self.refused(r);
        }
        self.stats.rmem_reads_served += 1;
        self.notify_owner(desc, notify, ControlRecord { op: MemOp::Read, from, offset, len });
        Ok(())
    }

    /// CAS-II from `from`: atomic, since the engine does every operation on
    /// the segment (the owner's own CAS-IIs included) under one lock.
    pub(super) fn serve_cas(
        &mut self,
        from: HostId,
        desc: Descriptor,
        offset: u32,
        cas: Cas,
        notify: bool,
    ) -> Result<CasAnswer, Refusal> {
        let Some(seg) = self.rmem.table.get_mut(desc) else { return self.refused(Refusal::UnknownSegment) };
        let (start, end) = (offset as u64, offset as u64 + CAS_CELL as u64);
        let check = seg.check(from, Access::READ_WRITE, start, CAS_CELL as u64).and_then(|_| {
            if offset % CAS_CELL as u32 != 0 {
                Err(Refusal::Misaligned)
            } else if seg.inhibited(start, end) {
                Err(Refusal::WriteInhibited)
            } else {
                Ok(())
            }
        });
        if let Err(r) = check {
            return self.refused(r);
        }
        join_queued(&mut self.transmits, &mut self.split_queued, desc, seg.bytes());
        let cell = &mut seg.bytes_mut()[start as usize..end as usize];
        let found = CasAnswer::from_bytes(cell).unwrap_or_default();
        let answer = if found.value == cas.expect {
            cell.copy_from_slice(&CasAnswer { value: cas.new, nonce: cas.nonce }.to_bytes());
            CasAnswer { value: found.value, nonce: cas.nonce }
        } else {
            found
        };
        self.stats.rmem_cas_served += 1;
        self.notify_owner(desc, notify, ControlRecord { op: MemOp::Cas, from, offset, len: CAS_CELL as u32 });
        Ok(answer)
    }

    /// Adds a record to the control channel if the policy asks for one.
    fn notify_owner(&mut self, desc: Descriptor, asked: bool, record: ControlRecord) {
        let Some(seg) = self.rmem.table.get_mut(desc) else { return };
        if !seg.notifies(asked) {
            return;
        }
        if seg.control.len() >= self.cfg.rmem_control_queue {
            self.stats.rmem_notify_dropped += 1;
            return;
        }
        self.stats.rmem_notifications += 1;
        seg.control.push_back(record);
        if seg.control.len() == 1 {
            self.events.push_back(Event::MemNotify(desc));
        }
    }

    /// Answers an admitted read with MemWrite packets (flag ANSWER) into the
    /// requester's destination, as large as the path to it allows. A large
    /// answer without a key leaves split ([`Transmit::segment`]): the runtime
    /// sends its data from the segment itself, the socket's copy the only
    /// one. Others are encoded straight from the segment into recycled
    /// buffers: no fresh large allocation, whose pages would fault in again
    /// once the allocator has handed them back to the system.
    fn answer_read(&mut self, to: SocketAddr, h: &Header, f: &ReadFields) {
        let chunk = self.cfg.data_to(to);
        let (start, end) = (f.offset as usize, f.offset as usize + f.len as usize);
        let keyed = self.cfg.key.is_some();
        let header = |e: &Self, at: usize| {
            let mut w = e.mem_header(PacketType::MemWrite, h.seq, h.src.host(), false);
            w.flags = w.flags.with(Flags::ANSWER, true);
            WriteFields { dest: f.dest, offset: f.dest_offset.wrapping_add((at - start) as u32), total: f.len }
                .put(&mut w);
            w
        };
        // Loops by hand: `step_by` cost 53 instructions per one-packet answer (callgrind).
        if !keyed && end - start >= SPLIT_ANSWER_MIN {
            let mut at = start;
            while at < end {
                let len = chunk.min(end - at);
                let bytes = self.lent_header(&header(self, at), len);
                let segment = Some(SegmentSlice { id: f.source, offset: at, len });
                self.transmits.push_back(Transmit { to: Destination::Addr(to), bytes, lent: None, segment });
                self.split_queued += 1;
                at += len;
            }
            return;
        }
        // Encoded packet by packet, with no list of them (most answers are one
        // packet); the range was admitted, so no chunk is missing.
        let mut at = start;
        while at < end {
            let part_end = end.min(at + chunk);
            let w = header(self, at);
            let mut out = self.buffers.get(vipc_wire::encoded_len(part_end - at, keyed));
            let Some(part) = self.rmem.table.get(f.source).and_then(|seg| seg.bytes().get(at..part_end)) else {
                return;
            };
            vipc_wire::encode(&w, part, self.cfg.key.as_ref(), &mut out);
            self.emit_raw(Destination::Addr(to), PacketType::MemWrite, out);
            at = part_end;
        }
    }

    /// Refuses request `h` to its datagram's source `to`; `token` is `to`'s
    /// address token with `Unvalidated`, else 0.
    fn mem_nack(&mut self, to: SocketAddr, h: &Header, r: Refusal, token: u64) {
        let mut n = self.mem_header(PacketType::MemNack, h.seq, h.src.host(), false);
        NackFields {
            reason: r as u8,
            refused: h.ptype as u8,
            desc: Descriptor::from_u32(h.local_addr),
            offset: h.remote_addr,
            len: h.total_len,
            token,
        }
        .put(&mut n);
        self.emit(Destination::Addr(to), &n, &[]);
    }

    /// An answer to one of our reads or CAS-IIs: written into its
    /// destination only if it matches the operation exactly (host, seq,
    /// destination, range) — so an anonymous segment is writable by nobody
    /// else. Into a segment lent to the runtime, only when fed with
    /// [`Engine::handle_datagram_lent`], which says where the data belong.
    fn on_mem_answer(&mut self, h: &Header, data: &[u8]) {
        let f = WriteFields::get(h);
        let (start, end) = (f.offset as u64, f.offset as u64 + data.len() as u64);
        let Some(op) = self.rmem.ops.get_mut(&h.seq).filter(|o| o.done.is_none()) else { return self.stray() };
        let (host, dest) = match &op.kind {
            OpKind::Read { host, request: ReadFields { dest, dest_offset, len, .. }, .. } => {
                let (lo, hi) = (*dest_offset as u64, *dest_offset as u64 + *len as u64);
                (*host, if data.is_empty() || start < lo || end > hi { None } else { Some(*dest) })
            }
            OpKind::Cas { host, dest, dest_offset } => {
                (*host, (f.offset == *dest_offset && data.len() == CAS_CELL).then_some(*dest))
            }
            OpKind::Import { .. } => return self.stray(),
        };
        let Some(dest) = dest.filter(|&d| host == h.src.host() && d == f.dest) else { return self.stray() };
        let Some(seg) = self.rmem.table.get_mut(dest).filter(|s| end <= s.size()) else {
            return self.finish_op(h.seq, Err(Error::NoSuchSegment));
        };
        if !seg.is_lent() {
            // Answers still queued from this segment carry its bytes of the
            // moment they were served, as for every other change of them.
            join_queued(&mut self.transmits, &mut self.split_queued, dest, seg.bytes());
            seg.bytes_mut()[start as usize..end as usize].copy_from_slice(data);
        } else if self.rmem.feeding_lent {
            let at = seg.head() + start as usize;
            self.rmem.placement = Some((at, vipc_wire::HEADER_LEN..vipc_wire::HEADER_LEN + data.len()));
        } else {
            return self.stray();
        }
        let outcome = match &mut op.kind {
            OpKind::Read { request: ReadFields { dest_offset, len, .. }, got, .. } => got
                .add_covers((start, end), (*dest_offset as u64, *dest_offset as u64 + *len as u64))
                .then_some(MemOutcome::Read),
            _ => CasAnswer::from_bytes(data).map(MemOutcome::Cas),
        };
        if let Some(outcome) = outcome {
            self.finish_op(h.seq, Ok(outcome));
        }
    }

    fn on_mem_nack(&mut self, h: &Header) {
        let f = NackFields::get(h);
        let Some(op) = self.rmem.ops.get_mut(&h.seq).filter(|o| o.done.is_none()) else { return self.stray() };
        let matches = match op.kind {
            OpKind::Read { host, .. } => host == h.src.host() && f.refused == PacketType::MemRead as u8,
            OpKind::Cas { host, .. } => host == h.src.host() && f.refused == PacketType::MemCas as u8,
            OpKind::Import { .. } => f.refused == PacketType::MemImport as u8,
        };
        if !matches {
            return self.stray();
        }
        let reason = Refusal::from_u8(f.reason).unwrap_or(Refusal::Malformed);
        if let (Refusal::Unvalidated, OpKind::Read { host, request, notify, tries, .. }) = (reason, &mut op.kind) {
            if *tries < TOKEN_TRIES && f.token != 0 {
                // The token proves our address from now on: this read again with it.
                *tries += 1;
                request.token = f.token;
                let (host, request, notify) = (*host, *request, *notify);
                self.rmem.tokens.insert(host, f.token);
                self.stats.rmem_token_retries += 1;
                return self.transmit_read(h.seq, host, &request, notify);
            }
        }
        self.finish_op(h.seq, Err(Error::Refused(reason)));
    }

    fn on_mem_import(&mut self, from: SocketAddr, h: &Header) {
        let f = ImportFields::get(h);
        let Some((desc, seg)) = self.rmem.table.by_name(&f.name) else {
            return self.refuse(Refusal::UnknownName);
        };
        let (size, access) = (seg.size() as u32, access_bits(seg.opts.access));
        if let Err(r) = import_check(seg, h.src.host(), access_from_bits(f.access)) {
            self.refuse(r);
            return self.mem_nack(from, h, r, 0);
        }
        self.stats.rmem_imports_served += 1;
        let mut r = self.mem_header(PacketType::MemImportReply, h.seq, h.src.host(), false);
        ImportReplyFields { name: f.name, desc, size, access }.put(&mut r);
        self.emit(Destination::Addr(from), &r, &[]);
    }

    fn on_mem_import_reply(&mut self, h: &Header) {
        let f = ImportReplyFields::get(h);
        let Some(op) = self.rmem.ops.get(&h.seq).filter(|o| o.done.is_none()) else { return self.stray() };
        match op.kind {
            OpKind::Import { name, .. } if name == f.name && f.size > 0 && f.desc.generation != 0 => {}
            _ => return self.stray(),
        }
        let imported = Imported { host: h.src.host(), desc: f.desc, size: f.size, access: access_from_bits(f.access) };
        self.finish_op(h.seq, Ok(MemOutcome::Import(imported)));
    }

    /// Finishes an operation: the result waits for `mem_poll`; the runtime hears of it.
    pub(super) fn finish_op(&mut self, seq: u32, r: Result<MemOutcome, Error>) {
        let Some(op) = self.rmem.ops.get_mut(&seq) else { return };
        match &r {
            Ok(_) => self.stats.rmem_ops_done += 1,
            Err(_) => self.stats.rmem_ops_failed += 1,
        }
        op.done = Some(r);
        op.timer_at = None;
        self.events.push_back(Event::MemDone(MemOpId(seq)));
    }

    /// The earliest deadline of the reads and CAS-IIs: those past it that
    /// are still pending fail with `Timeout`; the timer is set again for the
    /// next deadline.
    pub(in super::super) fn mem_deadlines_timer(&mut self, now: Time) {
        while let Some(&(deadline, seq)) = self.rmem.deadlines.front() {
            let pending = self.rmem.ops.get(&seq).filter(|op| op.done.is_none()).map(|op| match op.kind {
                OpKind::Read { host, .. } | OpKind::Cas { host, .. } => host,
                OpKind::Import { .. } => 0, // never queued here
            });
            match pending {
                Some(host) if deadline <= now => {
                    self.stats.rmem_timeouts += 1;
                    self.finish_op(seq, Err(Error::Timeout(Pid::new(host, 0))));
                }
                Some(_) => {
                    self.timer_entry(deadline, TimerKey::MemDeadlines);
                    return;
                }
                None => {} // finished (and not yet collected) or gone
            }
            self.rmem.deadlines.pop_front();
        }
    }

    /// The timer of an import: rebroadcast every T_r; at the deadline the
    /// import fails with `UnknownName`.
    pub(in super::super) fn mem_import_timer(&mut self, now: Time, seq: u32, at: Time) {
        let retransmit = self.cfg.retransmit;
        let Some(PendingOp { kind, deadline, timer_at, done }) = self.rmem.ops.get_mut(&seq) else { return };
        let OpKind::Import { name, access, next_retransmit } = kind else { return };
        if *timer_at != Some(at) || done.is_some() {
            return;
        }
        if now >= *deadline {
            self.stats.rmem_timeouts += 1;
            return self.finish_op(seq, Err(Error::Refused(Refusal::UnknownName)));
        }
        let resend = (now >= *next_retransmit).then(|| {
            *next_retransmit = now + retransmit;
            (*name, *access)
        });
        let next = (*next_retransmit).min(*deadline);
        *timer_at = Some(next);
        self.arm(next, TimerKey::MemImport(seq));
        if let Some((name, access)) = resend {
            self.stats.retransmissions += 1;
            self.transmit_import(seq, name, access);
        }
    }
}
