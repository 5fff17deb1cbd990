//! The calls of local processes: export and the owner's own access to its
//! segments, and operations on imported ones. None of them blocks: a write
//! is fire-and-forget, a read, CAS-II or import leaves a pending operation
//! that finishes with [`Event::MemDone`] and is collected with
//! [`Engine::mem_poll`].

use super::super::*;
use super::table::Segment;
use super::*;
use crate::Access;
use vipc_wire::rmem::{CasFields, ImportFields, ReadFields, WriteFields, WritevFields};

/// The operands of a CAS-II: if the cell's value is `expect`, store
/// `{new, nonce}`; either way answer the value found and the nonce now in the cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cas {
    /// The value expected.
    pub expect: u32,
    /// The value stored on success.
    pub new: u32,
    /// The caller's nonce, stored with it; a retry after a lost answer uses the same one.
    pub nonce: u32,
}

/// The shape of a strided write: elements of `elem` bytes, `stride` apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided {
    /// Distance between element starts, at least `elem`.
    pub stride: u32,
    /// Bytes per element, at least 1.
    pub elem: u32,
}

impl Engine {
    /// Exports a segment of `size` bytes (zeroed) under `name` — or, with
    /// `None`, an anonymous segment: never importable, the destination of
    /// this node's reads and CAS-IIs. The name must be unguessable (the
    /// runtime draws it from a CSPRNG; the engine stays deterministic).
    /// Errors: `TooLarge` (0 or over 2³² − 1 bytes), `Limit` (slots or
    /// `rmem_max_bytes`), `Unsupported` (name already exported here).
    pub fn export_segment(
        &mut self,
        name: Option<SegmentName>,
        size: usize,
        opts: SegmentOptions,
    ) -> Result<SegmentId, Error> {
        if size == 0 || size > u32::MAX as usize {
            return Err(Error::TooLarge { what: "segment", len: size as u64, limit: u32::MAX as u64 });
        }
        if self.rmem.table.bytes + size > self.cfg.rmem_max_bytes {
            return Err(Error::Limit("bytes of remote-memory segments"));
        }
        let mut opts = opts;
        if let ProtectionGroup::Hosts(h) = &mut opts.protection {
            h.sort_unstable();
            h.dedup();
        }
        self.rmem.table.insert(self.cfg.rmem_max_segments, Segment::new(name, opts, size))
    }

    /// Unexports (or frees an anonymous) segment: its generation moves on,
    /// so every later request naming it is refused. Queued records are dropped.
    pub fn unexport_segment(&mut self, id: SegmentId) -> Result<(), Error> {
        self.join_queued_from(id);
        self.rmem.table.remove(id).map(|_| ()).ok_or(Error::NoSuchSegment)
    }

    fn segment(&self, id: SegmentId) -> Result<&Segment, Error> {
        self.rmem.table.get(id).ok_or(Error::NoSuchSegment)
    }

    fn segment_mut(&mut self, id: SegmentId) -> Result<&mut Segment, Error> {
        self.rmem.table.get_mut(id).ok_or(Error::NoSuchSegment)
    }

    /// The size of a local segment.
    pub fn segment_size(&self, id: SegmentId) -> Result<u32, Error> {
        Ok(self.segment(id)?.size() as u32)
    }

    /// The owner reads its own segment (atomic with respect to every remote operation).
    pub fn segment_read(&self, id: SegmentId, offset: u32, buf: &mut [u8]) -> Result<(), Error> {
        let seg = self.segment(id)?;
        let at = span(offset, buf.len(), seg.size())?;
        buf.copy_from_slice(seg.bytes().get(at).ok_or(Error::SegmentBusy)?);
        Ok(())
    }

    /// The owner writes its own segment: no access, protection, inhibition
    /// or notification applies (they govern remote hosts).
    pub fn segment_write(&mut self, id: SegmentId, offset: u32, data: &[u8]) -> Result<(), Error> {
        let seg = self.rmem.table.get_mut(id).ok_or(Error::NoSuchSegment)?;
        let at = span(offset, data.len(), seg.size())?;
        join_queued(&mut self.transmits, &mut self.split_queued, id, seg.bytes());
        seg.bytes_mut().get_mut(at).ok_or(Error::SegmentBusy)?.copy_from_slice(data);
        Ok(())
    }

    /// Turns write-inhibition of `[offset, offset + len)` on or off (003
    /// MPROT / MUNPROT): writes arriving for an inhibited byte are queued on
    /// the data channel, not applied; CAS-IIs there are refused.
    pub fn segment_set_inhibit(&mut self, id: SegmentId, offset: u32, len: u32, on: bool) -> Result<(), Error> {
        let seg = self.segment_mut(id)?;
        let at = span(offset, len as usize, seg.size())?;
        seg.set_inhibit(at.start as u64, at.end as u64, on)
    }

    /// The next notification of the segment's control channel.
    pub fn segment_poll_control(&mut self, id: SegmentId) -> Result<Option<ControlRecord>, Error> {
        Ok(self.segment_mut(id)?.control.pop_front())
    }

    /// The next write queued on the segment's data channel (it hit a write-inhibited range).
    pub fn segment_poll_data(&mut self, id: SegmentId) -> Result<Option<DataRecord>, Error> {
        let seg = self.segment_mut(id)?;
        let r = seg.data.pop_front();
        if let Some(r) = &r {
            seg.data_bytes -= r.data.len();
        }
        Ok(r)
    }

    /// True if the segment's control or data channel holds a record.
    pub fn segment_has_records(&self, id: SegmentId) -> Result<(bool, bool), Error> {
        let seg = self.segment(id)?;
        Ok((!seg.control.is_empty(), !seg.data.is_empty()))
    }

    /// Writes `data` at `offset` of an imported segment, in as many MemWrite
    /// packets as the path needs. Fire-and-forget: `Ok` means handed to the
    /// network, not applied (003 §3.3). To this node's own segment, applied
    /// at once (and a refusal is returned).
    pub fn mem_write(&mut self, to: &Imported, offset: u32, data: &[u8], notify: bool) -> Result<(), Error> {
        self.precheck(to, Access::WRITE, offset, data.len() as u64)?;
        let host = self.host.ok_or(Error::NotReady)?;
        if data.is_empty() {
            return Ok(());
        }
        if to.host == host {
            return self.serve_write(host, to.desc, offset, None, data, notify).map_err(Error::Refused);
        }
        let (dest, chunk) = self.path(to.host);
        let seq = self.fresh_seq();
        for (i, part) in data.chunks(chunk).enumerate() {
            let h = self.write_header(to, seq, offset, i * chunk, data.len(), notify);
            self.emit(dest, &h, part);
        }
        self.stats.rmem_writes += 1;
        Ok(())
    }

    /// [`Engine::mem_write`] of `len` bytes whose data stay in the caller's
    /// buffer: for each packet, its destination, its encoded header (data
    /// length set) and the range of the caller's bytes to append, for the
    /// runtime to send straight from the buffer (one copy fewer). `None`
    /// where a write cannot go so — to this node's own segment, with a key
    /// (the MAC needs the data), or to a host whose address is not cached —
    /// and [`Engine::mem_write`] is the way.
    pub fn mem_write_headers(
        &mut self,
        to: &Imported,
        offset: u32,
        len: usize,
        notify: bool,
    ) -> Result<Option<Vec<HeaderFor>>, Error> {
        self.precheck(to, Access::WRITE, offset, len as u64)?;
        let host = self.host.ok_or(Error::NotReady)?;
        if len == 0 || to.host == host || self.cfg.key.is_some() {
            return Ok(None);
        }
        let Some(addr) = self.location.lookup(to.host) else { return Ok(None) };
        let chunk = self.cfg.data_to(addr);
        let seq = self.fresh_seq();
        let packets = (0..len)
            .step_by(chunk)
            .map(|start| {
                let h = self.write_header(to, seq, offset, start, len, notify);
                let data = start..(start + chunk).min(len);
                HeaderFor { to: addr, head: self.lent_header(&h, data.len()), data }
            })
            .collect();
        self.stats.rmem_writes += 1;
        Ok(Some(packets))
    }

    /// The header of the packet of a `total`-byte write at `offset` that
    /// carries the bytes from `start` on.
    fn write_header(&self, to: &Imported, seq: u32, offset: u32, start: usize, total: usize, notify: bool) -> Header {
        let mut h = self.mem_header(PacketType::MemWrite, seq, to.host, notify);
        WriteFields { dest: to.desc, offset: offset + start as u32, total: total as u32 }.put(&mut h);
        h
    }

    /// Writes `data` — elements of `shape.elem` bytes — at `base`,
    /// `base + stride`, … of an imported segment (003 WRITEV, 2-D), whole
    /// elements per packet. Fire-and-forget like [`Engine::mem_write`].
    pub fn mem_writev(
        &mut self,
        to: &Imported,
        base: u32,
        shape: Strided,
        data: &[u8],
        notify: bool,
    ) -> Result<(), Error> {
        let (stride, elem) = (shape.stride as u64, shape.elem as u64);
        if elem == 0 || stride < elem || data.is_empty() || data.len() as u64 % elem != 0 {
            return Err(Error::Refused(Refusal::Malformed));
        }
        let count = data.len() as u64 / elem;
        self.precheck(to, Access::WRITE, base, (count - 1) * stride + elem)?;
        let host = self.host.ok_or(Error::NotReady)?;
        if to.host == host {
            return self.serve_write(host, to.desc, base, Some(shape), data, notify).map_err(Error::Refused);
        }
        let (dest, chunk) = self.path(to.host);
        if elem > chunk as u64 {
            return Err(Error::TooLarge { what: "writev element", len: elem, limit: chunk as u64 });
        }
        let per = (chunk as u64 / elem) as usize;
        let seq = self.fresh_seq();
        for (i, part) in data.chunks(per * elem as usize).enumerate() {
            let mut h = self.mem_header(PacketType::MemWritev, seq, to.host, notify);
            let first = (i * per) as u64;
            WritevFields {
                dest: to.desc,
                base: (base as u64 + first * stride) as u32,
                stride: shape.stride,
                count: (part.len() as u64 / elem) as u32,
                elem: shape.elem,
                total: data.len() as u32,
            }
            .put(&mut h);
            self.emit(dest, &h, part);
        }
        self.stats.rmem_writes += 1;
        Ok(())
    }

    /// Reads `len` bytes at `offset` of an imported segment into
    /// `dest.1` of local segment `dest.0` (usually anonymous). Finishes with
    /// [`Event::MemDone`] once every byte has arrived, or fails: refused by
    /// the owner (MemNack), or `Timeout` after `rmem_timeout`.
    pub fn mem_read(
        &mut self,
        now: Time,
        from: &Imported,
        offset: u32,
        len: u32,
        dest: (SegmentId, u32),
        notify: bool,
    ) -> Result<MemOpId, Error> {
        if len == 0 {
            return Err(Error::Refused(Refusal::Malformed));
        }
        self.precheck(from, Access::READ, offset, len as u64)?;
        self.dest_check(dest, len)?;
        let host = self.host.ok_or(Error::NotReady)?;
        self.op_room()?;
        let seq = self.fresh_seq();
        if from.host == host {
            let r = self.admit_read(host, from.desc, offset, len, notify).map_err(Error::Refused).and_then(|()| {
                // A copy: source and destination are segments of the same table.
                let range = offset as usize..offset as usize + len as usize;
                let seg = self.rmem.table.get(from.desc).ok_or(Error::NoSuchSegment)?;
                let bytes = seg.bytes().get(range).ok_or(Error::NoSuchSegment)?.to_vec();
                self.segment_write(dest.0, dest.1, &bytes)
            });
            let r = r.map(|_| MemOutcome::Read);
            return Ok(self.finish_at_once(now, seq, r));
        }
        let token = self.rmem.tokens.get(&from.host).copied().unwrap_or(0);
        let request = ReadFields { source: from.desc, offset, len, dest: dest.0, dest_offset: dest.1, token };
        self.start_op(now, seq, OpKind::Read { host: from.host, request, notify, tries: 0, got: Coverage::default() });
        self.transmit_read(seq, from.host, &request, notify);
        Ok(MemOpId(seq))
    }

    /// Sends the MemRead of operation `seq` to `host`'s node.
    pub(super) fn transmit_read(&mut self, seq: u32, host: HostId, read: &ReadFields, notify: bool) {
        let mut h = self.mem_header(PacketType::MemRead, seq, host, notify);
        read.put(&mut h);
        let to = self.route(Pid::new(host, 0));
        self.emit(to, &h, &[]);
    }

    /// CAS-II on the 8-byte cell at `offset` (a multiple of 8) of an imported
    /// segment (003 §4.2.3); the answer — value found, nonce now in the cell —
    /// is written at `dest.1` of local segment `dest.0` and returned by the
    /// operation. The engine does not retry: a caller that sees `Timeout`
    /// retries with the same nonce. Needs read and write access.
    pub fn mem_cas(
        &mut self,
        now: Time,
        target: &Imported,
        offset: u32,
        cas: Cas,
        dest: (SegmentId, u32),
        notify: bool,
    ) -> Result<MemOpId, Error> {
        if offset % CAS_CELL as u32 != 0 {
            return Err(Error::Refused(Refusal::Misaligned));
        }
        self.precheck(target, Access::READ_WRITE, offset, CAS_CELL as u64)?;
        self.dest_check(dest, CAS_CELL as u32)?;
        let host = self.host.ok_or(Error::NotReady)?;
        self.op_room()?;
        let seq = self.fresh_seq();
        if target.host == host {
            let r = self.serve_cas(host, target.desc, offset, cas, notify).map_err(Error::Refused);
            let r = r.and_then(|a| self.segment_write(dest.0, dest.1, &a.to_bytes()).map(|_| MemOutcome::Cas(a)));
            return Ok(self.finish_at_once(now, seq, r));
        }
        self.start_op(now, seq, OpKind::Cas { host: target.host, dest: dest.0, dest_offset: dest.1 });
        let mut h = self.mem_header(PacketType::MemCas, seq, target.host, notify);
        let (expect, new, nonce) = (cas.expect, cas.new, cas.nonce);
        CasFields { target: target.desc, offset, expect, new, nonce, dest: dest.0, dest_offset: dest.1 }.put(&mut h);
        let to = self.route(Pid::new(target.host, 0));
        self.emit(to, &h, &[]);
        Ok(MemOpId(seq))
    }

    /// Imports the segment exported under `name` with at least `access`:
    /// this node's table first, then a MemImport broadcast, repeated every
    /// T_r, until the owner answers or `rmem_timeout` passes (then
    /// `Refused(UnknownName)`). Maps nothing: the result is a handle.
    pub fn mem_import(&mut self, now: Time, name: SegmentName, access: Access) -> Result<MemOpId, Error> {
        let host = self.host.ok_or(Error::NotReady)?;
        self.op_room()?;
        let seq = self.fresh_seq();
        if let Some((desc, seg)) = self.rmem.table.by_name(&name) {
            let r = match import_check(seg, host, access) {
                Ok(()) => {
                    Ok(MemOutcome::Import(Imported { host, desc, size: seg.size() as u32, access: seg.opts.access }))
                }
                Err(r) => Err(Error::Refused(r)),
            };
            return Ok(self.finish_at_once(now, seq, r));
        }
        let bits = access_bits(access);
        self.start_op(now, seq, OpKind::Import { name, access: bits, next_retransmit: now + self.cfg.retransmit });
        self.transmit_import(seq, name, bits);
        Ok(MemOpId(seq))
    }

    /// The result of an operation once it has finished (then forgotten);
    /// `None` while it is pending or if it is unknown.
    pub fn mem_poll(&mut self, op: MemOpId) -> Option<Result<MemOutcome, Error>> {
        let std::collections::hash_map::Entry::Occupied(e) = self.rmem.ops.entry(op.0) else { return None };
        e.get().done.as_ref()?;
        let done = e.remove().done;
        self.rmem.drop_gone_deadlines();
        done
    }

    /// True if `op` is known and still pending.
    pub fn mem_pending(&self, op: MemOpId) -> bool {
        self.rmem.ops.get(&op.0).is_some_and(|o| o.done.is_none())
    }

    /// True if `op` is a read whose answer has partly arrived: the rest was
    /// sent with it, back to back, and is due within microseconds.
    pub fn mem_answer_arriving(&self, op: MemOpId) -> bool {
        self.rmem
            .ops
            .get(&op.0)
            .is_some_and(|o| o.done.is_none() && matches!(&o.kind, OpKind::Read { got, .. } if got.started()))
    }

    /// Forgets an operation (its caller lost interest): later answers are dropped.
    pub fn mem_forget(&mut self, op: MemOpId) {
        self.rmem.ops.remove(&op.0);
        self.rmem.drop_gone_deadlines();
    }

    pub(super) fn transmit_import(&mut self, seq: u32, name: SegmentName, access: u8) {
        let mut h = self.mem_header(PacketType::MemImport, seq, 0, false);
        h.dst = Pid::NONE;
        ImportFields { name, access }.put(&mut h);
        self.emit(Destination::Broadcast, &h, &[]);
    }

    /// The requester's own checks against what the import told it (fail
    /// fast); the owner checks again.
    fn precheck(&self, to: &Imported, need: Access, offset: u32, len: u64) -> Result<(), Error> {
        if (need.read && !to.access.read) || (need.write && !to.access.write) {
            return Err(Error::NoAccess(if need.write && !to.access.write { "write" } else { "read" }));
        }
        if offset as u64 + len > to.size as u64 {
            return Err(Error::OutOfSegment { offset: offset as u64, len, size: to.size as u64 });
        }
        Ok(())
    }

    fn dest_check(&self, dest: (SegmentId, u32), len: u32) -> Result<(), Error> {
        span(dest.1, len as usize, self.segment(dest.0)?.size()).map(|_| ())
    }

    fn op_room(&self) -> Result<(), Error> {
        if self.rmem.ops.len() >= self.cfg.rmem_max_ops {
            return Err(Error::Limit("pending remote-memory operations"));
        }
        Ok(())
    }

    fn start_op(&mut self, now: Time, seq: u32, kind: OpKind) {
        let deadline = now + self.cfg.rmem_timeout;
        if let OpKind::Import { next_retransmit, .. } = &kind {
            // Rare, and rebroadcast every T_r: a timer of its own.
            let at = (*next_retransmit).min(deadline);
            self.rmem.ops.insert(seq, PendingOp { kind, deadline, timer_at: Some(at), done: None });
            return self.arm(at, TimerKey::MemImport(seq));
        }
        self.rmem.ops.insert(seq, PendingOp { kind, deadline, timer_at: None, done: None });
        self.rmem.deadlines.push_back((deadline, seq));
        // Usually the entry of an earlier operation, due no later, is reused.
        self.timer_entry(deadline, TimerKey::MemDeadlines);
    }

    /// Records an operation that finished without leaving the node.
    fn finish_at_once(&mut self, now: Time, seq: u32, r: Result<MemOutcome, Error>) -> MemOpId {
        let kind = OpKind::Cas { host: 0, dest: SegmentId::default(), dest_offset: 0 };
        self.rmem.ops.insert(seq, PendingOp { kind, deadline: now, timer_at: None, done: None });
        self.finish_op(seq, r);
        MemOpId(seq)
    }

    /// A remote-memory header from this node to `host`'s node.
    pub(super) fn mem_header(&self, ptype: PacketType, seq: u32, host: HostId, notify: bool) -> Header {
        let mut h = self.header(ptype);
        h.seq = seq;
        h.src = Pid::new(self.host.unwrap_or(0), 0);
        h.dst = Pid::new(host, 0);
        h.flags = h.flags.with(vipc_wire::Flags::NOTIFY, notify);
        h
    }

    /// Where packets for `host` go and how much data each may carry.
    fn path(&mut self, host: HostId) -> (Destination, usize) {
        match self.route(Pid::new(host, 0)) {
            Destination::Addr(a) => (Destination::Addr(a), self.cfg.data_to(a)),
            d => (d, self.cfg.max_data()),
        }
    }
}

/// May `host` import `seg` with `access`?
pub(super) fn import_check(seg: &Segment, host: HostId, access: Access) -> Result<(), Refusal> {
    seg.check(host, access, 0, 0)
}

/// `[offset, offset + len)` as indices of a `size`-byte segment.
fn span(offset: u32, len: usize, size: u64) -> Result<std::ops::Range<usize>, Error> {
    let end = offset as u64 + len as u64;
    if end > size {
        return Err(Error::OutOfSegment { offset: offset as u64, len: len as u64, size });
    }
    Ok(offset as usize..end as usize)
}
