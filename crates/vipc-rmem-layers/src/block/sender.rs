//! The sending side: rounds of packet writes per unit, up to a window of
//! units in flight, a bitmask back per round in the unit's record, and a
//! read of the receiver's status when no bitmask comes.

use super::{
    full_mask, judge, newer_or_same, packets, Ack, BlockParams, Status, Tag, Verdict, ACK_SEGMENT, ACK_SLOT, ACK_SLOTS,
    HEADER, H_REG, H_STATUS, MAGIC, MAX_WINDOW, REG_LEN, TAG,
};
use crate::common::{get32, import_retrying, nonzero_random, probe, put32, Error, Probe, Result};
use std::time::{Duration, Instant};
use vipc::{
    Access, AnonSegment, ExportedSegment, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions,
};

/// Default retransmission timeout: a window with no bitmask for this long
/// has what is missing sent again, after a read of the receiver's status.
pub const RTO: Duration = Duration::from_millis(20);
/// Default number of units in flight. Chosen by measurement (docs/RMEM.md,
/// "Block transfer"): 1 MiB blocks of 1 KiB packets gained ~23% from 1 to 4
/// and little more up to 16; with units of 2–4 32 KiB packets 8 was ahead
/// of 4 in three of four sets (within the noise of a loaded machine).
pub const WINDOW: usize = 8;
/// Default number of status reads in a row that may go unanswered before
/// the receiver is declared gone.
pub const SILENT_PROBES: u32 = 10;

/// What a sender did, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Blocks completed.
    pub blocks: u64,
    /// Packets written, first copies and retransmissions.
    pub packets: u64,
    /// Packets written again because a bitmask said they were missing (or none came).
    pub retransmitted: u64,
    /// Bitmasks taken from the acknowledgement segment.
    pub acks: u64,
    /// Reads of the receiver's status after a round timed out.
    pub probes: u64,
    /// Acknowledgement records not taken: of another block or of a unit not
    /// in flight (late or duplicated), or failing their check word (garbage).
    pub ignored_acks: u64,
}

/// Sends blocks to one [`super::BlockReceiver`].
pub struct BlockSender {
    remote: RemoteSegment,
    /// Where answers to status reads land.
    anon: AnonSegment,
    /// The receiver writes its bitmasks here.
    acks: ExportedSegment,
    params: BlockParams,
    /// The registration id: part of every packet's check word.
    reg: u32,
    next: u32,
    rto: Duration,
    silent_limit: u32,
    /// Units in flight at most (1..=MAX_WINDOW).
    window: usize,
    buf: Vec<u8>,
    /// Per unit of the block being sent: the packets acknowledged (kept to reuse its allocation).
    have: Vec<u64>,
    stats: SenderStats,
}

impl std::fmt::Debug for BlockSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSender").field("params", &self.params).field("next", &self.next).finish()
    }
}

/// What came while the sender waited.
enum Wait {
    /// The receiver has the whole block.
    Done,
    /// Bitmasks of units in flight, by slot (bit `u % ACK_SLOTS`).
    Masks(u32),
    /// Nothing within the retransmission timeout.
    Late,
}

impl BlockSender {
    /// Imports the receiver's segment, reads its layout, exports the
    /// acknowledgement segment and registers it in the receiver's header
    /// (written, then read back until it is there: the write may be lost).
    pub fn connect(node: &Node, receiver: SegmentName, timeout: Duration) -> Result<BlockSender> {
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        let remote = import_retrying(node, receiver, Access::READ_WRITE, timeout)?;
        let anon = node.anonymous_segment(HEADER)?;
        let head = read_until(&remote, &anon, 0, HEADER, deadline)?;
        let (packet, unit, slots) =
            (get32(&head, super::H_PACKET), get32(&head, super::H_UNIT), get32(&head, super::H_SLOTS));
        let params =
            BlockParams { packet: packet as usize, unit: unit as usize, max_block: slots as usize * packet as usize };
        if get32(&head, 0) != MAGIC
            || packet == 0
            || packet as usize > super::MAX_PACKET
            || slots == 0
            || params.max_block > u32::MAX as usize / 2
            || !(1..=64).contains(&unit)
            || remote.size() as usize != params.slot(slots as usize)
        {
            return Err(Error::Layout(format!("{head:02x?}")));
        }
        let opts =
            SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection: ProtectionGroup::Any };
        let acks = node.export_segment(ACK_SEGMENT, opts)?;
        let mut reg = [0u8; REG_LEN];
        reg[..16].copy_from_slice(&acks.name());
        let id = nonzero_random();
        put32(&mut reg, 16, id);
        loop {
            remote.write(H_REG as u32, &reg, true)?;
            if let Probe::Bytes(b) = probe(&remote, &anon, H_REG as u32, REG_LEN as u32, RTO)? {
                if b == reg {
                    break;
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
        }
        // The receiver starts afresh with a new sender, after its last block.
        let next = Ack::from_bytes(&head[H_STATUS..]).done.wrapping_add(1);
        let (rto, silent_limit) = (RTO, SILENT_PROBES);
        let buf = Vec::with_capacity(TAG + params.packet);
        let stats = SenderStats::default();
        let (window, have) = (WINDOW, Vec::new());
        Ok(BlockSender { remote, anon, acks, params, reg: id, next, rto, silent_limit, window, buf, have, stats })
    }

    /// Sets the retransmission timeout and how many unanswered status reads
    /// in a row mean the receiver is gone.
    pub fn set_patience(&mut self, rto: Duration, silent_probes: u32) {
        (self.rto, self.silent_limit) = (rto.max(Duration::from_micros(100)), silent_probes.max(1));
    }

    /// Keeps up to `units` acknowledgement units in flight (clamped to
    /// 1..=[`MAX_WINDOW`]); 1 is stop-and-wait, each unit acknowledged before the next.
    pub fn set_window(&mut self, units: usize) {
        self.window = units.clamp(1, MAX_WINDOW);
    }

    /// Units in flight at most.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The receiver's layout.
    pub fn params(&self) -> BlockParams {
        self.params
    }

    /// What this sender did so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// Sends `data` as the next block; `Ok` once the receiver has taken
    /// every packet. [`Error::PeerGone`] if its segment refuses the status
    /// read or the read goes unanswered too often, [`Error::Timeout`] after
    /// `timeout`. A failed block is abandoned: the next one gets a new number.
    pub fn send(&mut self, data: &[u8], timeout: Duration) -> Result<()> {
        if data.len() > self.params.max_block {
            return Err(Error::TooLarge { what: "block", len: data.len(), max: self.params.max_block });
        }
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        let mut block = self.next;
        let units = packets(data.len(), self.params.packet).div_ceil(self.params.unit);
        let mut have = std::mem::take(&mut self.have);
        let r = loop {
            self.next = block.wrapping_add(1);
            have.clear();
            have.resize(units, 0);
            match self.send_units(data, block, &mut have, deadline) {
                // The receiver turned to this sender expecting a later number
                // (its predecessor's last block completed as this one registered).
                Ok(Some(expected)) => block = expected,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.have = have;
        r?;
        self.stats.blocks += 1;
        Ok(())
    }

    /// Keeps up to `window` units in flight, lowest first: a unit's first
    /// round goes out as soon as the window has room, a partial bitmask has
    /// its unit's missing packets sent again at once, and a window with no
    /// bitmask for an `rto` reads the receiver's status.
    /// `Some(n)`: the receiver ignores this block's packets, it expects
    /// block `n` of this sender: send it again under that number.
    fn send_units(&mut self, data: &[u8], block: u32, have: &mut [u64], deadline: Instant) -> Result<Option<u32>> {
        let units = have.len();
        let (mut lo, mut next, mut silent) = (0, 0, 0);
        while lo < units {
            // Bitmasks that never complete the block must not keep it going.
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            while next < units && next < lo + self.window {
                self.write_unit(data, block, next, 0, false)?;
                next += 1;
            }
            match self.wait_acks(data, block, (lo, next), have, deadline)? {
                Wait::Done => return Ok(None),
                Wait::Masks(fresh) => {
                    for u in (lo..next).filter(|u| fresh & (1 << (u % ACK_SLOTS)) != 0) {
                        if have[u] != self.full(data, u) {
                            self.stats.retransmitted += self.write_unit(data, block, u, have[u], false)?;
                        }
                    }
                }
                Wait::Late => {
                    // The status names the receiver's lowest incomplete unit:
                    // those below it are in, its mask is exact. With no answer
                    // (or one of another block) nothing is learnt.
                    // Only a status of the receiver serving this sender speaks of its blocks.
                    let low = match self.status(&mut silent, deadline)? {
                        Some(s) if s.serving != self.reg => lo,
                        // It finished this block (or, by its word, a later one) for this sender.
                        Some(s) if s.done_by == self.reg && newer_or_same(s.ack.done, block) => return Ok(None),
                        Some(s) if !newer_or_same(block, s.ack.block) => return Ok(Some(s.ack.block)),
                        Some(Status { ack: s, .. }) if s.block == block => {
                            let low = (s.unit as usize).clamp(lo, next);
                            for (u, h) in have.iter_mut().enumerate().take(low).skip(lo) {
                                *h = self.full(data, u);
                            }
                            // (A status below the window says nothing of unit `lo`.)
                            if low < next && low == s.unit as usize {
                                have[low] |= s.mask & self.full(data, low);
                            }
                            low
                        }
                        _ => lo,
                    };
                    // That unit's missing packets again; units above it only
                    // their last missing packet, asking for their masks: they
                    // may well be in, their bitmasks lost.
                    for (u, &h) in have.iter().enumerate().take(next).skip(low) {
                        self.stats.retransmitted += self.write_unit(data, block, u, h, u != low)?;
                    }
                }
            }
            while lo < next && have[lo] == self.full(data, lo) {
                lo += 1;
            }
        }
        Ok(None)
    }

    /// Every packet of unit `u` of `data`, as a mask.
    fn full(&self, data: &[u8], u: usize) -> u64 {
        let first = u * self.params.unit;
        full_mask((packets(data.len(), self.params.packet) - first).min(self.params.unit))
    }

    /// Writes the packets of unit `u` not in `have`, the last asking for the
    /// unit's mask; only that last one if `poke`. Returns how many it wrote.
    fn write_unit(&mut self, data: &[u8], block: u32, u: usize, have: u64, poke: bool) -> Result<u64> {
        let missing = self.full(data, u) & !have;
        if missing == 0 {
            return Ok(0);
        }
        let first = u * self.params.unit;
        let last = 63 - missing.leading_zeros() as usize;
        let mut written = 0;
        for i in (0..=last).filter(|&i| missing & (1 << i) != 0 && (!poke || i == last)) {
            self.write_packet(data, block, first + i, i == last)?;
            written += 1;
        }
        Ok(written)
    }

    /// Writes packet `i`: its tag and bytes in one write, notifying (the
    /// receiver takes each packet as it comes); `ask` on a round's last.
    fn write_packet(&mut self, data: &[u8], block: u32, i: usize, ask: bool) -> Result<()> {
        let p = self.params.packet;
        let bytes = &data[(i * p).min(data.len())..((i + 1) * p).min(data.len())];
        self.buf.clear();
        self.buf.resize(TAG, 0);
        let tag = Tag::new(self.reg, block, i as u32, data.len() as u32, bytes);
        Tag { ask, ..tag }.put(&mut self.buf);
        self.buf.extend_from_slice(bytes);
        self.remote.write(self.params.slot(i) as u32, &self.buf, true)?;
        self.stats.packets += 1;
        Ok(())
    }

    /// Waits up to the retransmission timeout for bitmasks of units
    /// `lo..next` and ORs them into `have`. Only slots written since the last
    /// look are read (a slot's old record was already taken); records of
    /// other blocks or units, and garbage, are counted and skipped.
    fn wait_acks(
        &mut self,
        data: &[u8],
        block: u32,
        span: (usize, usize),
        have: &mut [u64],
        deadline: Instant,
    ) -> Result<Wait> {
        let (lo, next) = span;
        let end = vipc::deadline_after(Instant::now(), self.rto).min(deadline);
        loop {
            let mut touched = 0u32;
            while let Some(r) = self.acks.poll_control()? {
                let (from, len) = (r.offset as usize, (r.len as usize).max(1));
                for slot in from / ACK_SLOT..(from + len).div_ceil(ACK_SLOT).min(ACK_SLOTS) {
                    touched |= 1 << slot;
                }
            }
            let mut fresh = 0u32;
            for slot in (0..ACK_SLOTS).filter(|s| touched & (1 << s) != 0) {
                let mut rec = [0u8; ACK_SLOT];
                self.acks.read((slot * ACK_SLOT) as u32, &mut rec)?;
                match judge(&rec, slot, self.reg, block, lo, next) {
                    Verdict::Done => {
                        self.stats.acks += 1;
                        return Ok(Wait::Done);
                    }
                    Verdict::Mask { unit, mask } => {
                        self.stats.acks += 1;
                        have[unit] |= mask & self.full(data, unit);
                        fresh |= 1 << slot;
                    }
                    Verdict::Stale | Verdict::Garbled => self.stats.ignored_acks += 1,
                }
            }
            if fresh != 0 {
                return Ok(Wait::Masks(fresh));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Wait::Late);
            }
            self.acks.wait_record(left)?;
        }
    }

    /// No bitmask in time: reads the receiver's status instead (it
    /// recovers a lost bitmask). `None`: no answer either, send again.
    fn status(&mut self, silent: &mut u32, deadline: Instant) -> Result<Option<Status>> {
        if Instant::now() >= deadline {
            return Err(Error::Timeout);
        }
        self.stats.probes += 1;
        let wait = self.rto.min(deadline.saturating_duration_since(Instant::now()));
        match probe(&self.remote, &self.anon, H_STATUS as u32, super::STATUS_LEN as u32, wait)? {
            Probe::Silent => {
                *silent += 1;
                if *silent >= self.silent_limit {
                    return Err(Error::PeerGone(format!("{silent} status reads in a row unanswered")));
                }
                Ok(None)
            }
            Probe::Bytes(b) => {
                *silent = 0;
                Ok(Some(Status::from_bytes(&b)))
            }
        }
    }
}

/// Reads `len` bytes at `offset` until an answer comes or `deadline` passes.
fn read_until(seg: &RemoteSegment, anon: &AnonSegment, offset: u32, len: usize, deadline: Instant) -> Result<Vec<u8>> {
    loop {
        if let Probe::Bytes(b) = probe(seg, anon, offset, len as u32, RTO * 5)? {
            return Ok(b);
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout);
        }
    }
}
