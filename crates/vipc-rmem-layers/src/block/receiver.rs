//! The receiving side: a segment of packet slots, checked unit by unit when
//! the sender's notification (or a tick) says something arrived, and one
//! bitmask per unit written back into the sender's segment.

use super::{full_mask, packets, Ack, BlockParams, Tag, ACK_LEN, HEADER, H_REG, H_STATUS, MAGIC, REG_LEN, TAG};
use crate::common::{get32, import_retrying, put32, Error, Result};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use vipc::{Access, ExportedSegment, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions};

/// How long the receiver sleeps before checking the current unit on its own
/// (the sender's notifying packet may be the one that was lost).
const TICK: Duration = Duration::from_millis(5);
/// How long an import of the sender's acknowledgement segment may take.
const IMPORT_WAIT: Duration = Duration::from_millis(500);

/// Receives blocks into a segment it exports. One sender at a time (the
/// last to register gets the acknowledgements).
pub struct BlockReceiver {
    node: Node,
    seg: ExportedSegment,
    params: BlockParams,
    /// The last block completed (blocks are numbered from 1).
    done: u32,
    /// The registered sender: its registration id and acknowledgement segment.
    sender: Option<(u32, RemoteSegment)>,
    /// The block in progress, kept across calls that time out.
    progress: Option<Progress>,
}

impl std::fmt::Debug for BlockReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockReceiver").field("params", &self.params).field("done", &self.done).finish()
    }
}

/// The block in progress.
struct Progress {
    block: u32,
    packet: usize,
    /// Packets per unit.
    n: usize,
    /// The block's length and packets, once a packet has said it.
    total: Option<usize>,
    packets: usize,
    data: Vec<u8>,
    /// Per unit: the packets in.
    have: Vec<u64>,
}

impl BlockReceiver {
    /// Exports a segment for blocks of up to `params.max_block` bytes,
    /// writable by any host, notifying only packets that ask.
    pub fn export(node: &Node, params: BlockParams) -> Result<BlockReceiver> {
        if params.packet == 0 || !(1..=64).contains(&params.unit) || params.max_block > u32::MAX as usize / 2 {
            return Err(Error::Layout(format!("bad block parameters {params:?}")));
        }
        let size = params.slot(params.slots());
        let opts = SegmentOptions {
            access: Access::READ_WRITE,
            notify: Notify::Conditional,
            protection: ProtectionGroup::Any,
        };
        let seg = node.export_segment(size, opts)?;
        let mut head = [0u8; HEADER];
        put32(&mut head, 0, MAGIC);
        put32(&mut head, super::H_PACKET, params.packet as u32);
        put32(&mut head, super::H_UNIT, params.unit as u32);
        put32(&mut head, super::H_SLOTS, params.slots() as u32);
        seg.write(0, &head)?;
        Ok(BlockReceiver { node: node.clone(), seg, params, done: 0, sender: None, progress: None })
    }

    /// The segment's name: hand it to the sender.
    pub fn name(&self) -> SegmentName {
        self.seg.name()
    }

    /// Blocks completed so far.
    pub fn blocks_done(&self) -> u32 {
        self.done
    }

    /// Waits for the next block and returns it. [`Error::Timeout`] if it is
    /// not complete within `timeout`; the packets that arrived stay in the
    /// segment, so the next call goes on with the same block.
    pub fn recv(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut p = match self.progress.take() {
            Some(p) => p,
            None => Progress::new(self.done.wrapping_add(1), &self.params),
        };
        let r = self.receive(&mut p, deadline);
        if matches!(r, Err(Error::Timeout)) {
            self.progress = Some(p);
        }
        r
    }

    fn receive(&mut self, p: &mut Progress, deadline: Instant) -> Result<Vec<u8>> {
        loop {
            let (notified, reg) = self.drain()?;
            if reg || self.sender.is_none() {
                self.register()?;
            }
            // A notification ends one of the sender's rounds: it waits for
            // the unit's mask. A tick: look at the current unit anyway and
            // publish the status, but send nothing unasked (packets may still
            // be on their way: a mask now would make the sender resend them).
            let mut units: BTreeSet<usize> = notified.iter().map(|i| i / self.params.unit).collect();
            if units.is_empty() {
                units.insert(p.lowest_incomplete());
            }
            for &u in &units {
                self.scan(p, u)?;
            }
            if p.complete() {
                self.done = p.block;
                let last = p.have.len() - 1;
                self.acknowledge(p, last, true)?;
                while self.seg.poll_control()?.is_some() {} // this block's: answered
                return Ok(std::mem::take(&mut p.data));
            }
            for &u in &units {
                // Only a notification by a packet of this block asks for a mask
                // (a late one of the last block would make the sender resend).
                let asked = notified.iter().any(|&i| i / self.params.unit == u && p.has(i));
                self.acknowledge(p, u, asked)?;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            self.seg.wait_record(TICK.min(left))?;
        }
    }

    /// Drains the control channel: the slots whose packets notified, and
    /// whether the registration area was written.
    fn drain(&self) -> Result<(BTreeSet<usize>, bool)> {
        let (mut slots, mut reg) = (BTreeSet::new(), false);
        while let Some(r) = self.seg.poll_control()? {
            let off = r.offset as usize;
            if off < HEADER {
                reg = true;
            } else {
                slots.insert((off - HEADER) / (TAG + self.params.packet));
            }
        }
        Ok((slots, reg))
    }

    /// Imports the acknowledgement segment named in the header if its
    /// registration id is new. A failed import is tried again next time.
    fn register(&mut self) -> Result<()> {
        let reg = self.seg.to_vec(H_REG as u32, REG_LEN)?;
        let id = get32(&reg, 16);
        if id == 0 || self.sender.as_ref().is_some_and(|(have, _)| *have == id) {
            return Ok(());
        }
        let name: SegmentName = reg[..16].try_into().unwrap_or_default();
        match import_retrying(&self.node, name, Access::WRITE, IMPORT_WAIT) {
            Ok(seg) => self.sender = Some((id, seg)),
            Err(Error::Timeout) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Takes every packet of unit `u` that is in and correct. A correct
    /// packet of a later block means the sender gave the current one up:
    /// start over with that block.
    fn scan(&self, p: &mut Progress, u: usize) -> Result<()> {
        let n = self.params.unit;
        let mut i = u * n;
        while i < p.count(&self.params).min((u + 1) * n) {
            if !p.has(i) {
                if let Some((tag, bytes)) = self.slot(i)? {
                    if tag.block != p.block {
                        if !super::newer_or_same(tag.block, p.block) {
                            i += 1;
                            continue;
                        }
                        *p = Progress::new(tag.block, &self.params);
                        i = u * n;
                        continue;
                    }
                    if p.total.is_some_and(|t| t != tag.total as usize) {
                        i += 1;
                        continue;
                    }
                    p.start(tag.total as usize);
                    let at = i * self.params.packet;
                    p.data[at..at + bytes.len()].copy_from_slice(&bytes);
                    p.have[i / n] |= 1 << (i % n);
                }
            }
            i += 1;
        }
        Ok(())
    }

    /// Slot `i`'s tag and bytes, if it holds a whole packet (of any block).
    fn slot(&self, i: usize) -> Result<Option<(Tag, Vec<u8>)>> {
        let packet = self.params.packet;
        let at = self.params.slot(i) as u32;
        let tag = Tag::get(&self.seg.to_vec(at, TAG)?);
        let total = tag.total as usize;
        if tag.index != i as u32 || total > self.params.max_block || i >= packets(total, packet) {
            return Ok(None); // never written, or torn
        }
        let len = packet.min(total - i * packet);
        // Tag and bytes in one read: atomic with respect to every remote write.
        let mut slot = self.seg.to_vec(at, TAG + len)?;
        if Tag::get(&slot) != tag || Tag::check_of(tag.block, tag.index, tag.total, &slot[TAG..]) != tag.check {
            return Ok(None);
        }
        Ok(Some((tag, slot.split_off(TAG))))
    }

    /// Publishes the status (what the sender's reads see) and, if `to_sender`,
    /// writes unit `u`'s bitmask into the sender's segment.
    fn acknowledge(&self, p: &Progress, u: usize, to_sender: bool) -> Result<()> {
        let low = p.lowest_incomplete();
        let done = if p.complete() { p.block } else { self.done };
        let status = Ack { done, block: p.block, unit: low as u32, mask: p.have.get(low).copied().unwrap_or(0) };
        self.seg.write(H_STATUS as u32, &status.to_bytes())?;
        match (&self.sender, p.have.get(u)) {
            (Some((_, ack)), Some(&mask)) if to_sender => {
                let a = Ack { done, block: p.block, unit: u as u32, mask };
                Ok(ack.write(0, &a.to_bytes()[..ACK_LEN], true)?)
            }
            _ => Ok(()),
        }
    }
}

impl Progress {
    fn new(block: u32, params: &BlockParams) -> Progress {
        let (packet, n) = (params.packet, params.unit);
        Progress { block, packet, n, total: None, packets: 0, data: Vec::new(), have: vec![0] }
    }

    /// Sizes the block on its first packet.
    fn start(&mut self, total: usize) {
        if self.total.is_none() {
            self.total = Some(total);
            self.packets = packets(total, self.packet);
            self.data = vec![0; total];
            self.have = vec![0; self.packets.div_ceil(self.n)];
        }
    }

    /// Packets to look at: the block's, or every slot until its length is known.
    fn count(&self, params: &BlockParams) -> usize {
        if self.total.is_some() {
            self.packets
        } else {
            params.slots()
        }
    }

    fn has(&self, i: usize) -> bool {
        self.have.get(i / self.n).is_some_and(|m| m & (1 << (i % self.n)) != 0)
    }

    /// Every packet of unit `u`.
    fn unit_mask(&self, u: usize) -> u64 {
        full_mask(self.packets.saturating_sub(u * self.n).min(self.n))
    }

    /// The first unit not complete: the one the sender is on, unless an
    /// acknowledgement was lost (0 until the block's length is known).
    fn lowest_incomplete(&self) -> usize {
        if self.total.is_none() {
            return 0;
        }
        (0..self.have.len()).find(|&u| self.have[u] != self.unit_mask(u)).unwrap_or(self.have.len())
    }

    fn complete(&self) -> bool {
        self.total.is_some() && self.lowest_incomplete() == self.have.len()
    }
}
