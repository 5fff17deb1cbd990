//! The descriptor table: the segments a node holds, by slot and generation,
//! and the checks every remote request passes before it touches one.

use super::types::*;
use crate::{Access, Error, HostId};
use std::collections::VecDeque;

/// At most this many disjoint write-inhibited ranges per segment.
pub(crate) const MAX_INHIBITED: usize = 256;

/// Room before a segment's bytes for the header of a datagram received
/// straight into them (see [`super::MemLoan`]).
pub(crate) const ROOM: usize = vipc_wire::HEADER_LEN;

/// Anonymous segments of at least this size are placed in their page
/// ([`crate::placed_buffer`]): a datagram received at offset 0 (or any
/// multiple of 4 KiB) begins, header first, half a page in. Answers this
/// large arrive in page fragments, whose data start at a page's beginning.
const PLACED_MIN: usize = 16 << 10;

/// One segment: its bytes live here, in the engine, so that the node can
/// operate on them while every thread of the exporter is blocked.
#[derive(Debug)]
pub(crate) struct Segment {
    /// None: anonymous (never importable, written only by answers).
    pub name: Option<SegmentName>,
    pub opts: SegmentOptions,
    /// The segment's bytes at `head`, after at least [`ROOM`] bytes; empty
    /// while lent to the runtime.
    mem: Vec<u8>,
    head: usize,
    size: usize,
    /// Sorted, disjoint, non-empty `[start, end)` ranges.
    inhibited: Vec<(u64, u64)>,
    pub control: VecDeque<ControlRecord>,
    pub data: VecDeque<DataRecord>,
    pub data_bytes: usize,
}

impl Segment {
    pub fn new(name: Option<SegmentName>, opts: SegmentOptions, size: usize) -> Segment {
        let (mem, head) = if name.is_none() && size >= PLACED_MIN {
            let (mem, start) = crate::placed_buffer(ROOM + size);
            (mem, start + ROOM)
        } else {
            (vec![0; ROOM + size], ROOM)
        };
        Segment {
            name,
            opts,
            mem,
            head,
            size,
            inhibited: Vec::new(),
            control: VecDeque::new(),
            data: VecDeque::new(),
            data_bytes: 0,
        }
    }

    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// The segment's bytes (none while lent).
    pub fn bytes(&self) -> &[u8] {
        self.mem.get(self.head..self.head + self.size).unwrap_or_default()
    }

    /// The segment's bytes, to write (none while lent).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.mem.get_mut(self.head..self.head + self.size).unwrap_or_default()
    }

    /// Where the bytes begin in the memory [`Segment::lend`] hands out.
    pub fn head(&self) -> usize {
        self.head
    }

    /// True while the runtime holds the bytes.
    pub fn is_lent(&self) -> bool {
        self.mem.is_empty()
    }

    /// Hands the memory — the bytes at [`Segment::head`] — to the runtime.
    pub fn lend(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.mem)
    }

    /// Takes the memory back.
    pub fn give_back(&mut self, mem: Vec<u8>) {
        debug_assert!(mem.len() >= self.head + self.size);
        self.mem = mem;
    }

    /// The checks of a request from `from` needing `need` on `[offset, offset + len)`,
    /// in the order PROTOCOL §4.15 gives them.
    pub fn check(&self, from: HostId, need: Access, offset: u64, len: u64) -> Result<(), Refusal> {
        if self.name.is_none() {
            return Err(Refusal::NoAccess);
        }
        if !self.opts.protection.admits(from) {
            return Err(Refusal::NotInGroup);
        }
        let a = self.opts.access;
        if (need.read && !a.read) || (need.write && !a.write) {
            return Err(Refusal::NoAccess);
        }
        if offset.saturating_add(len) > self.size() {
            return Err(Refusal::OutOfRange);
        }
        Ok(())
    }

    /// True if some byte of `[start, end)` is write-inhibited.
    pub fn inhibited(&self, start: u64, end: u64) -> bool {
        self.inhibited.iter().any(|&(s, e)| s < end && start < e)
    }

    /// Turns write-inhibition of `[start, end)` on or off.
    pub fn set_inhibit(&mut self, start: u64, end: u64, on: bool) -> Result<(), Error> {
        if start >= end {
            return Ok(());
        }
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(self.inhibited.len() + 2);
        for &(s, e) in &self.inhibited {
            if on || e <= start || s >= end {
                out.push((s, e));
            } else {
                if s < start {
                    out.push((s, start));
                }
                if e > end {
                    out.push((end, e));
                }
            }
        }
        if on {
            out.push((start, end));
            out.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
            for (s, e) in out {
                match merged.last_mut() {
                    Some(last) if s <= last.1 => last.1 = last.1.max(e),
                    _ => merged.push((s, e)),
                }
            }
            out = merged;
        }
        if out.len() > MAX_INHIBITED {
            return Err(Error::Limit("write-inhibited ranges of a segment"));
        }
        self.inhibited = out;
        Ok(())
    }

    /// The write-inhibited ranges, sorted.
    #[cfg(test)]
    pub fn inhibited_ranges(&self) -> &[(u64, u64)] {
        &self.inhibited
    }

    /// True if a request with the notify bit `asked` notifies under the policy.
    pub fn notifies(&self, asked: bool) -> bool {
        match self.opts.notify {
            Notify::Never => false,
            Notify::Always => true,
            Notify::Conditional => asked,
        }
    }
}

#[derive(Debug)]
struct Slot {
    generation: u16,
    seg: Option<Segment>,
}

/// The descriptor table of one node.
#[derive(Debug, Default)]
pub(crate) struct Table {
    slots: Vec<Slot>,
    /// Where the round-robin search for a free slot starts.
    cursor: usize,
    names: super::HashMap<SegmentName, u16>,
    /// Bytes of all segments.
    pub bytes: usize,
    live: usize,
}

impl Table {
    /// Number of segments held.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Puts `seg` in a free slot: a never-used one while the table may grow,
    /// then round robin, so that a freed slot is reused as late as possible.
    pub fn insert(&mut self, max_slots: usize, seg: Segment) -> Result<Descriptor, Error> {
        if let Some(name) = seg.name {
            if self.names.contains_key(&name) {
                return Err(Error::Unsupported("a segment with that name is already exported"));
            }
        }
        let max = max_slots.clamp(1, u16::MAX as usize);
        let index = if self.slots.len() < max {
            self.slots.push(Slot { generation: 1, seg: None });
            self.slots.len() - 1
        } else {
            let n = self.slots.len();
            let found = (0..n).map(|i| (self.cursor + i) % n).find(|&i| self.slots[i].seg.is_none());
            found.ok_or(Error::Limit("segments"))?
        };
        self.cursor = (index + 1) % max;
        self.bytes += seg.size;
        self.live += 1;
        if let Some(name) = seg.name {
            self.names.insert(name, index as u16);
        }
        let slot = &mut self.slots[index];
        slot.seg = Some(seg);
        Ok(Descriptor { index: index as u16, generation: slot.generation })
    }

    /// Frees the slot of `d` and moves its generation on: requests still
    /// carrying `d` are refused from now on.
    pub fn remove(&mut self, d: Descriptor) -> Option<Segment> {
        let slot = self.slots.get_mut(d.index as usize).filter(|s| s.generation == d.generation)?;
        let seg = slot.seg.take()?;
        slot.generation = slot.generation.checked_add(1).unwrap_or(1);
        self.bytes -= seg.size;
        self.live -= 1;
        if let Some(name) = seg.name {
            self.names.remove(&name);
        }
        Some(seg)
    }

    pub fn get(&self, d: Descriptor) -> Option<&Segment> {
        self.slots.get(d.index as usize).filter(|s| s.generation == d.generation)?.seg.as_ref()
    }

    pub fn get_mut(&mut self, d: Descriptor) -> Option<&mut Segment> {
        self.slots.get_mut(d.index as usize).filter(|s| s.generation == d.generation)?.seg.as_mut()
    }

    /// The exported segment called `name`.
    pub fn by_name(&self, name: &SegmentName) -> Option<(Descriptor, &Segment)> {
        let index = *self.names.get(name)?;
        let slot = &self.slots[index as usize];
        Some((Descriptor { index, generation: slot.generation }, slot.seg.as_ref()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(size: usize) -> Segment {
        Segment::new(Some([1; 16]), SegmentOptions { access: Access::READ_WRITE, ..Default::default() }, size)
    }

    #[test]
    fn generations_refuse_stale_descriptors_and_slots_rotate() {
        let mut t = Table::default();
        let a = t.insert(2, seg(8)).unwrap();
        assert_eq!(a, Descriptor { index: 0, generation: 1 });
        assert!(t.insert(2, seg(8)).is_err(), "the name is taken");
        t.remove(a).unwrap();
        assert!(t.get(a).is_none());
        let b = t.insert(2, seg(8)).unwrap();
        assert_eq!(b.index, 1, "a never-used slot before a freed one");
        let mut named = seg(8);
        named.name = Some([2; 16]);
        let c = t.insert(2, named).unwrap();
        assert_eq!(c, Descriptor { index: 0, generation: 2 });
        assert!(t.get(a).is_none() && t.get(c).is_some());
        assert!(matches!(t.insert(2, Segment::new(None, Default::default(), 1)), Err(Error::Limit(_))));
        assert_eq!((t.len(), t.bytes), (2, 16));
    }

    #[test]
    fn inhibited_ranges_merge_and_split() {
        let mut s = seg(100);
        s.set_inhibit(10, 20, true).unwrap();
        s.set_inhibit(15, 30, true).unwrap();
        s.set_inhibit(40, 50, true).unwrap();
        assert_eq!(s.inhibited_ranges(), &[(10, 30), (40, 50)]);
        s.set_inhibit(12, 45, false).unwrap();
        assert_eq!(s.inhibited_ranges(), &[(10, 12), (45, 50)]);
        assert!(s.inhibited(11, 13) && !s.inhibited(12, 45) && s.inhibited(0, 100));
        // Up to the limit, disjoint ranges are kept apart.
        for i in 0..(MAX_INHIBITED - 2) as u64 {
            s.set_inhibit(60 + 2 * i, 61 + 2 * i, true).unwrap();
        }
        assert_eq!(s.inhibited_ranges().len(), MAX_INHIBITED);
        let full = s.inhibited_ranges().to_vec();
        // One more range, or a split of one, is refused and changes nothing.
        assert!(matches!(s.set_inhibit(1000, 1001, true), Err(Error::Limit(_))));
        assert!(matches!(s.set_inhibit(46, 47, false), Err(Error::Limit(_))));
        assert_eq!(s.inhibited_ranges(), &full[..]);
        // Merging or removing still works at the limit.
        s.set_inhibit(60, 63, true).unwrap();
        assert_eq!(s.inhibited_ranges().len(), MAX_INHIBITED - 1);
        s.set_inhibit(45, 50, false).unwrap();
        assert_eq!(s.inhibited_ranges().len(), MAX_INHIBITED - 2);
    }

    #[test]
    fn checks_in_order() {
        let mut s = seg(16);
        s.opts.protection = ProtectionGroup::Hosts(vec![2]);
        s.opts.access = Access::READ;
        assert_eq!(s.check(3, Access::READ, 0, 1), Err(Refusal::NotInGroup));
        assert_eq!(s.check(2, Access::WRITE, 0, 1), Err(Refusal::NoAccess));
        assert_eq!(s.check(2, Access::READ, 8, 9), Err(Refusal::OutOfRange));
        assert_eq!(s.check(2, Access::READ, u64::MAX, 1), Err(Refusal::OutOfRange));
        assert_eq!(s.check(2, Access::READ, 8, 8), Ok(()));
        s.name = None;
        assert_eq!(s.check(2, Access::READ, 0, 1), Err(Refusal::NoAccess), "anonymous segments grant nothing");
    }
}
