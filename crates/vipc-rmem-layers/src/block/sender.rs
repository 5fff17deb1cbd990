//! The sending side: rounds of packet writes per unit, a bitmask back per
//! round, and a read of the receiver's status when the bitmask is late.

use super::{
    full_mask, newer_or_same, packets, Ack, BlockParams, Tag, ACK_LEN, ACK_SEGMENT, HEADER, H_REG, H_STATUS, MAGIC,
    REG_LEN, TAG,
};
use crate::common::{get32, import_retrying, nonzero_random, probe, put32, Error, Probe, Result};
use std::time::{Duration, Instant};
use vipc::{
    Access, AnonSegment, ExportedSegment, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions,
};

/// Default retransmission timeout: a round with no bitmask for this long is
/// sent again (what is missing), after a read of the receiver's status.
pub const RTO: Duration = Duration::from_millis(20);
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
    buf: Vec<u8>,
    stats: SenderStats,
}

impl std::fmt::Debug for BlockSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockSender").field("params", &self.params).field("next", &self.next).finish()
    }
}

/// How a round ended.
enum Round {
    /// A bitmask (or status) for the unit.
    Mask(u64),
    /// The receiver has the whole block.
    BlockDone,
}

impl BlockSender {
    /// Imports the receiver's segment, reads its layout, exports the
    /// acknowledgement segment and registers it in the receiver's header
    /// (written, then read back until it is there: the write may be lost).
    pub fn connect(node: &Node, receiver: SegmentName, timeout: Duration) -> Result<BlockSender> {
        let deadline = Instant::now() + timeout;
        let remote = import_retrying(node, receiver, Access::READ_WRITE, timeout)?;
        let anon = node.anonymous_segment(HEADER)?;
        let head = read_until(&remote, &anon, 0, HEADER, deadline)?;
        let (packet, unit, slots) =
            (get32(&head, super::H_PACKET), get32(&head, super::H_UNIT), get32(&head, super::H_SLOTS));
        let params =
            BlockParams { packet: packet as usize, unit: unit as usize, max_block: slots as usize * packet as usize };
        if get32(&head, 0) != MAGIC
            || packet == 0
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
        Ok(BlockSender { remote, anon, acks, params, reg: id, next, rto, silent_limit, buf, stats })
    }

    /// Sets the retransmission timeout and how many unanswered status reads
    /// in a row mean the receiver is gone.
    pub fn set_patience(&mut self, rto: Duration, silent_probes: u32) {
        (self.rto, self.silent_limit) = (rto.max(Duration::from_micros(100)), silent_probes.max(1));
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
        let deadline = Instant::now() + timeout;
        let block = self.next;
        self.next = self.next.wrapping_add(1);
        let units = packets(data.len(), self.params.packet).div_ceil(self.params.unit);
        for u in 0..units {
            if self.send_unit(data, block, u, deadline)? {
                break;
            }
        }
        self.stats.blocks += 1;
        Ok(())
    }

    /// Sends unit `u` until all of it is acknowledged (false) or the
    /// receiver says it has the whole block (true).
    fn send_unit(&mut self, data: &[u8], block: u32, u: usize, deadline: Instant) -> Result<bool> {
        let n = self.params.unit;
        let first = u * n;
        let count = (packets(data.len(), self.params.packet) - first).min(n);
        let (full, mut have, mut silent, mut again) = (full_mask(count), 0u64, 0, false);
        loop {
            let missing: Vec<usize> = (0..count).filter(|i| have & (1 << i) == 0).collect();
            for (k, &i) in missing.iter().enumerate() {
                self.write_packet(data, block, first + i, k + 1 == missing.len())?;
            }
            if again {
                self.stats.retransmitted += missing.len() as u64;
            }
            again = true;
            let mask = match self.wait_ack(block, u, deadline)? {
                Some(r) => r,
                None => match self.status(block, u, &mut silent, deadline)? {
                    Some(r) => r,
                    None => continue,
                },
            };
            match mask {
                Round::BlockDone => return Ok(true),
                Round::Mask(m) => have |= m & full,
            }
            if have == full {
                return Ok(false);
            }
        }
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

    /// Waits up to the retransmission timeout for a bitmask of unit `u`
    /// (older ones, of other units or blocks, are skipped).
    fn wait_ack(&mut self, block: u32, u: usize, deadline: Instant) -> Result<Option<Round>> {
        let end = (Instant::now() + self.rto).min(deadline);
        loop {
            let mut fresh = false;
            while self.acks.poll_control()?.is_some() {
                fresh = true;
            }
            if fresh {
                let a = Ack::from_bytes(&self.acks.to_vec(0, ACK_LEN)?);
                if newer_or_same(a.done, block) {
                    self.stats.acks += 1;
                    return Ok(Some(Round::BlockDone));
                }
                if a.block == block && a.unit as usize == u {
                    self.stats.acks += 1;
                    return Ok(Some(Round::Mask(a.mask)));
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.acks.wait_record(left)?;
        }
    }

    /// No bitmask in time: reads the receiver's status instead (it
    /// recovers a lost bitmask). `None`: no answer either, send again.
    fn status(&mut self, block: u32, u: usize, silent: &mut u32, deadline: Instant) -> Result<Option<Round>> {
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
                let s = Ack::from_bytes(&b);
                Ok(Some(if newer_or_same(s.done, block) {
                    Round::BlockDone
                } else if s.block == block && s.unit as usize == u {
                    Round::Mask(s.mask)
                } else if s.block == block && s.unit as usize > u {
                    Round::Mask(u64::MAX) // its lowest incomplete unit is past this one
                } else {
                    Round::Mask(0)
                }))
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
