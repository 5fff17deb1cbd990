//! The reference model of one node's remote-memory table, written from
//! docs/RMEM.md and PROTOCOL §4.15 (not from the engine): the segments
//! (named or anonymous) by exact descriptor, their bytes, write-inhibited
//! bytes, control and data channels, and the counters the owner must keep.
//! The rmem simulation feeds it every request datagram at the moment it is
//! delivered to the owner, so it predicts exactly what the owner does with
//! it: apply, queue, refuse (for which reason), answer with which bytes.

use std::collections::{BTreeMap, VecDeque};
use vipc_engine::{
    Access, CasAnswer, ControlRecord, DataRecord, Descriptor, HostId, Imported, MemOp, Notify, Refusal, SegmentName,
    SegmentOptions, Stats, TOKENLESS_READ_MAX,
};

/// One segment as the model knows it.
#[derive(Clone, Debug)]
pub struct SegModel {
    /// `None`: anonymous.
    pub name: Option<SegmentName>,
    pub opts: SegmentOptions,
    pub bytes: Vec<u8>,
    /// One flag per byte.
    pub inhibited: Vec<bool>,
    pub control: VecDeque<ControlRecord>,
    pub data: VecDeque<DataRecord>,
    pub data_bytes: usize,
}

impl SegModel {
    fn check(&self, from: HostId, need: Access, offset: u64, len: u64) -> Result<(), Refusal> {
        if self.name.is_none() {
            return Err(Refusal::NoAccess);
        }
        if let vipc_engine::ProtectionGroup::Hosts(h) = &self.opts.protection {
            if !h.contains(&from) {
                return Err(Refusal::NotInGroup);
            }
        }
        let a = self.opts.access;
        if (need.read && !a.read) || (need.write && !a.write) {
            return Err(Refusal::NoAccess);
        }
        if offset + len > self.bytes.len() as u64 {
            return Err(Refusal::OutOfRange);
        }
        Ok(())
    }

    fn inhibited(&self, start: u64, end: u64) -> bool {
        self.inhibited[start as usize..end as usize].iter().any(|b| *b)
    }

    fn notifies(&self, asked: bool) -> bool {
        match self.opts.notify {
            Notify::Never => false,
            Notify::Always => true,
            Notify::Conditional => asked,
        }
    }
}

/// The counters of [`Stats`] the model predicts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub refused: [u64; Refusal::ALL.len()],
    pub writes_applied: u64,
    pub reads_served: u64,
    pub cas_served: u64,
    pub imports_served: u64,
    pub queued: u64,
    pub data_dropped: u64,
    pub notifications: u64,
    pub notify_dropped: u64,
}

impl Counters {
    /// The same counters of an engine.
    pub fn of(s: &Stats) -> Counters {
        let mut refused = [0; Refusal::ALL.len()];
        refused.copy_from_slice(&s.rmem_refused[..Refusal::ALL.len()]);
        Counters {
            refused,
            writes_applied: s.rmem_writes_applied,
            reads_served: s.rmem_reads_served,
            cas_served: s.rmem_cas_served,
            imports_served: s.rmem_imports_served,
            queued: s.rmem_queued,
            data_dropped: s.rmem_data_dropped,
            notifications: s.rmem_notifications,
            notify_dropped: s.rmem_notify_dropped,
        }
    }
}

/// What the owner does with one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// A write or writev applied.
    Applied,
    /// A write queued on the data channel (or dropped: channel full).
    Queued,
    /// A read served with these bytes.
    Read(Vec<u8>),
    /// A CAS-II served with this answer.
    Cas(CasAnswer),
    /// An import answered with this handle.
    Import(Imported),
    /// Refused (a read, CAS-II or import also gets a MemNack, except UnknownName).
    Refused(Refusal),
}

/// One node's table.
#[derive(Clone, Debug, Default)]
pub struct NodeModel {
    pub host: HostId,
    pub segs: BTreeMap<Descriptor, SegModel>,
    pub counters: Counters,
    pub control_queue: usize,
    pub data_queue: usize,
}

impl NodeModel {
    pub fn new(host: HostId, control_queue: usize, data_queue: usize) -> NodeModel {
        NodeModel { host, control_queue, data_queue, ..NodeModel::default() }
    }

    pub fn export(&mut self, d: Descriptor, name: Option<SegmentName>, opts: SegmentOptions, size: usize) {
        let seg = SegModel {
            name,
            opts,
            bytes: vec![0; size],
            inhibited: vec![false; size],
            control: VecDeque::new(),
            data: VecDeque::new(),
            data_bytes: 0,
        };
        self.segs.insert(d, seg);
    }

    fn refuse(&mut self, r: Refusal) -> Served {
        self.counters.refused[r.index()] += 1;
        Served::Refused(r)
    }

    fn notify(&mut self, d: Descriptor, asked: bool, record: ControlRecord) {
        let cap = self.control_queue;
        let seg = self.segs.get_mut(&d).expect("present");
        if !seg.notifies(asked) {
            return;
        }
        if seg.control.len() >= cap {
            self.counters.notify_dropped += 1;
            return;
        }
        self.counters.notifications += 1;
        seg.control.push_back(record);
    }

    /// A write (`shape` None) or writev (`Some((stride, elem))`) from `from`.
    pub fn write(
        &mut self,
        from: HostId,
        d: Descriptor,
        offset: u32,
        shape: Option<(u32, u32)>,
        data: &[u8],
        asked: bool,
    ) -> Served {
        let n = data.len() as u64;
        let (op, span, stride, elem) = match shape {
            None => (MemOp::Write, n, n, n),
            Some((stride, elem)) => {
                let (s, e) = (stride as u64, elem as u64);
                if e == 0 || s < e || n % e != 0 {
                    return self.refuse(Refusal::Malformed);
                }
                (MemOp::Writev, (n / e).max(1).saturating_sub(1) * s + e, s, e)
            }
        };
        if data.is_empty() {
            return self.refuse(Refusal::Malformed);
        }
        let dq = self.data_queue;
        let Some(seg) = self.segs.get_mut(&d) else { return self.refuse(Refusal::UnknownSegment) };
        if let Err(r) = seg.check(from, Access::WRITE, offset as u64, span) {
            return self.refuse(r);
        }
        let start = offset as u64;
        if seg.inhibited(start, start + span) {
            self.counters.queued += 1;
            if seg.data_bytes + data.len() > dq {
                self.counters.data_dropped += 1;
            } else {
                let r = DataRecord { from, offset, stride: stride as u32, elem: elem as u32, data: data.to_vec() };
                seg.data_bytes += data.len();
                seg.data.push_back(r);
            }
            return Served::Queued;
        }
        for (i, piece) in data.chunks(elem as usize).enumerate() {
            let at = (start + i as u64 * stride) as usize;
            seg.bytes[at..at + piece.len()].copy_from_slice(piece);
        }
        self.counters.writes_applied += 1;
        self.notify(d, asked, ControlRecord { op, from, offset, len: span as u32 });
        Served::Applied
    }

    /// A read of `len` bytes at `offset` of `d`; `proven`: the request
    /// carries the owner's token for its source address (or the cluster is keyed).
    pub fn read(
        &mut self,
        from: HostId,
        (d, offset, len): (Descriptor, u32, u32),
        asked: bool,
        proven: bool,
    ) -> Served {
        if len > TOKENLESS_READ_MAX && !proven {
            return self.refuse(Refusal::Unvalidated);
        }
        if len == 0 {
            return self.refuse(Refusal::Malformed);
        }
        let Some(seg) = self.segs.get(&d) else { return self.refuse(Refusal::UnknownSegment) };
        if let Err(r) = seg.check(from, Access::READ, offset as u64, len as u64) {
            return self.refuse(r);
        }
        let bytes = seg.bytes[offset as usize..offset as usize + len as usize].to_vec();
        self.counters.reads_served += 1;
        self.notify(d, asked, ControlRecord { op: MemOp::Read, from, offset, len });
        Served::Read(bytes)
    }

    pub fn cas(&mut self, from: HostId, d: Descriptor, offset: u32, cas: (u32, u32, u32), asked: bool) -> Served {
        let (expect, new, nonce) = cas;
        let Some(seg) = self.segs.get_mut(&d) else { return self.refuse(Refusal::UnknownSegment) };
        let (start, end) = (offset as usize, offset as usize + 8);
        let check = seg.check(from, Access::READ_WRITE, start as u64, 8).and_then(|_| {
            if offset % 8 != 0 {
                Err(Refusal::Misaligned)
            } else if seg.inhibited(start as u64, end as u64) {
                Err(Refusal::WriteInhibited)
            } else {
                Ok(())
            }
        });
        if let Err(r) = check {
            return self.refuse(r);
        }
        let found = CasAnswer::from_bytes(&seg.bytes[start..end]).expect("8 bytes");
        let answer = if found.value == expect {
            seg.bytes[start..end].copy_from_slice(&CasAnswer { value: new, nonce }.to_bytes());
            CasAnswer { value: found.value, nonce }
        } else {
            found
        };
        self.counters.cas_served += 1;
        self.notify(d, asked, ControlRecord { op: MemOp::Cas, from, offset, len: 8 });
        Served::Cas(answer)
    }

    pub fn import(&mut self, from: HostId, name: &SegmentName, access: Access) -> Served {
        let found = self.segs.iter().find(|(_, s)| s.name.as_ref() == Some(name));
        let Some((&desc, seg)) = found else { return self.refuse(Refusal::UnknownName) };
        if let Err(r) = seg.check(from, access, 0, 0) {
            return self.refuse(r);
        }
        let h = Imported { host: self.host, desc, size: seg.bytes.len() as u32, access: seg.opts.access };
        self.counters.imports_served += 1;
        Served::Import(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_refuses_in_protocol_order_and_queues_inhibited_writes() {
        let mut m = NodeModel::new(1, 4, 100);
        let d = Descriptor { index: 0, generation: 1 };
        let stale = || Descriptor { index: 0, generation: 2 };
        let opts = SegmentOptions {
            access: Access::READ,
            notify: Notify::Always,
            protection: vipc_engine::ProtectionGroup::Hosts(vec![2]),
        };
        m.export(d, Some([1; 16]), opts, 16);
        assert_eq!(m.write(3, d, 0, None, &[1], false), Served::Refused(Refusal::NotInGroup));
        assert_eq!(m.write(2, d, 0, None, &[1], false), Served::Refused(Refusal::NoAccess));
        assert_eq!(m.read(2, (d, 10, 7), false, false), Served::Refused(Refusal::OutOfRange));
        let big = TOKENLESS_READ_MAX + 1;
        assert_eq!(m.read(2, (stale(), 0, big), false, false), Served::Refused(Refusal::Unvalidated), "checked first");
        assert_eq!(m.read(2, (stale(), 0, big), false, true), Served::Refused(Refusal::UnknownSegment));
        m.segs.get_mut(&d).unwrap().opts.access = Access::READ_WRITE;
        m.segs.get_mut(&d).unwrap().inhibited[8] = true;
        assert_eq!(m.cas(2, d, 8, (0, 1, 9), false), Served::Refused(Refusal::WriteInhibited));
        assert_eq!(m.write(2, d, 6, Some((2, 1)), &[5, 5], false), Served::Queued);
        assert_eq!(m.cas(2, d, 0, (0, 1, 9), false), Served::Cas(CasAnswer { value: 0, nonce: 9 }));
        assert_eq!(
            m.read(2, (d, 0, 8), false, false),
            Served::Read(CasAnswer { value: 1, nonce: 9 }.to_bytes().to_vec())
        );
        let s = &m.segs[&d];
        assert_eq!((s.control.len(), s.data.len()), (2, 1));
        assert_eq!(m.counters.refused.iter().sum::<u64>(), 6);
        assert_eq!(m.counters.refused[Refusal::Unvalidated.index()], 1);
    }
}
