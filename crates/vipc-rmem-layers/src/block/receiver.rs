//! The receiving side: a segment of packet slots, each taken (checked and
//! copied into the block) as its notification comes, and one bitmask per
//! round written back into the sender's segment when the round's last packet asks.

use super::{
    full_mask, packets, Ack, BlockParams, Status, Tag, ACK_SLOT, ACK_SLOTS, HEADER, H_REG, H_STATUS, MAGIC, REG_LEN,
    TAG,
};
use crate::common::{get32, put32, Error, FailedImports, Result};
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
    /// The registration id of the sender `done` was completed for.
    done_by: u32,
    /// The registered sender's id (0: none yet): its packets' check words include it.
    reg: u32,
    /// Its acknowledgement segment, once imported.
    sender: Option<RemoteSegment>,
    /// Blocks returned.
    received: u64,
    /// Writes into the layout or the status, refused (see `export`).
    refused: u64,
    /// The block in progress, kept across calls that time out.
    progress: Option<Progress>,
    /// A packet's bytes until they are checked (the first of a block).
    scratch: Vec<u8>,
    /// Acknowledgement segments that did not import lately.
    failed: FailedImports,
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
        if params.packet == 0
            || params.packet > super::MAX_PACKET
            || !(1..=64).contains(&params.unit)
            || params.max_block > u32::MAX as usize / 2
        {
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
        // Senders write packets and their registration; the layout and the
        // status are the receiver's alone: a write there from any host is
        // queued on the data channel (003 write-inhibit), never applied, so
        // no host can make a sender believe a forged status.
        seg.set_protection(0, H_REG as u32, true)?;
        let node = node.clone();
        let scratch = Vec::with_capacity(params.packet);
        Ok(BlockReceiver {
            node,
            seg,
            params,
            done: 0,
            done_by: 0,
            reg: 0,
            sender: None,
            received: 0,
            refused: 0,
            progress: None,
            scratch,
            failed: FailedImports::default(),
        })
    }

    /// The segment's name: hand it to the sender.
    pub fn name(&self) -> SegmentName {
        self.seg.name()
    }

    /// Blocks returned so far.
    pub fn blocks_received(&self) -> u64 {
        self.received
    }

    /// Writes by other hosts into the segment's layout or status words,
    /// refused and discarded so far.
    pub fn refused_writes(&self) -> u64 {
        self.refused
    }

    /// Waits for the next block and returns it. [`Error::Timeout`] if it is
    /// not complete within `timeout`; the packets that arrived stay in the
    /// segment, so the next call goes on with the same block.
    pub fn recv(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        let deadline = vipc::deadline_after(Instant::now(), timeout);
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
        // The registration is read once per call whatever the queue says: a
        // sender that registered as the last block completed had its record
        // drained with that block's (see below), and its packets would never
        // match the old sender's id.
        let mut first = true;
        loop {
            let (notified, reg) = self.drain()?;
            if (reg || first || self.sender.is_none()) && self.register(deadline)? {
                *p = Progress::new(self.done.wrapping_add(1), &self.params); // another sender: start afresh
            }
            first = false;
            // Take each packet as its notification comes; a round's last asks
            // for its unit's mask. A tick (nothing came): look at the current
            // unit anyway and publish the status, but send no mask unasked —
            // packets may still be on their way, and the sender would resend them.
            let mut asked = BTreeSet::new();
            if notified.is_empty() {
                self.scan(p, p.lowest_incomplete())?;
            }
            for i in notified {
                if self.take(p, i)? == Some(true) {
                    asked.insert(i / self.params.unit);
                }
            }
            // An asking packet's unit is looked at whole before its mask is
            // written: a packet whose notification was dropped (a full control
            // queue, likelier with several units in flight) is taken, not resent.
            for &u in &asked {
                self.scan(p, u)?;
            }
            if p.complete() {
                (self.done, self.done_by) = (p.block, self.reg);
                self.received += 1;
                // This block's notifications are answered by the final record.
                // Drained before it is written: the sender moves on to the
                // next block only once it has it, so none of those is lost here.
                while self.seg.poll_control()?.is_some() {}
                let last = p.have.len() - 1;
                self.acknowledge(p, Some(last))?;
                return Ok(std::mem::take(&mut p.data));
            }
            self.acknowledge(p, None)?;
            for u in asked {
                self.acknowledge(p, Some(u))?;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            self.seg.wait_record(TICK.min(left))?;
        }
    }

    /// Drains the control channel: the slots whose packets notified, and
    /// whether the registration area was written. Discards (and counts) the
    /// refused writes queued on the data channel.
    fn drain(&mut self) -> Result<(BTreeSet<usize>, bool)> {
        while self.seg.poll_data()?.is_some() {
            self.refused += 1;
        }
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

    /// Reads the registration; true if a new sender registered. Imports its
    /// acknowledgement segment (waiting no later than `deadline`); a failed
    /// import (lost, or a bad name) is tried again after a pause: meanwhile
    /// the sender reads the status word.
    fn register(&mut self, deadline: Instant) -> Result<bool> {
        let reg = self.seg.to_vec(H_REG as u32, REG_LEN)?;
        let id = get32(&reg, 16);
        let new = id != self.reg;
        if new {
            (self.reg, self.sender) = (id, None);
        }
        if id != 0 && self.sender.is_none() {
            let name: SegmentName = reg[..16].try_into().unwrap_or_default();
            let wait = IMPORT_WAIT.min(deadline.saturating_duration_since(Instant::now()));
            self.sender = self.failed.import(&self.node, name, Access::WRITE, wait);
        }
        Ok(new)
    }

    /// Takes every packet of unit `u` that is there.
    fn scan(&mut self, p: &mut Progress, u: usize) -> Result<()> {
        let n = self.params.unit;
        for i in u * n..(u + 1) * n {
            if i < p.count(&self.params) && !p.has(i) {
                self.take(p, i)?;
            }
        }
        Ok(())
    }

    /// Takes slot `i` if it holds a whole packet of the current block (or
    /// of a later one: the sender gave the current block up, start over).
    /// `Some(ask)` if it holds a packet of the block, taken now or before.
    fn take(&mut self, p: &mut Progress, i: usize) -> Result<Option<bool>> {
        let packet = self.params.packet;
        let at = self.params.slot(i) as u32;
        let mut head = [0u8; TAG];
        self.seg.read(at, &mut head)?;
        let tag = Tag::get(&head);
        let total = tag.total as usize;
        let plausible = tag.index == i as u32 && total <= self.params.max_block && i < packets(total, packet);
        if !plausible || (tag.block != p.block && !super::newer_or_same(tag.block, p.block)) {
            return Ok(None); // never written, torn, or left by an older block
        }
        if tag.block == p.block && p.has(i) {
            return Ok(Some(tag.ask));
        }
        let len = packet.min(total - i * packet);
        let data_at = at + TAG as u32;
        let check = |reg, bytes: &[u8]| Tag::check_of(reg, tag.block, tag.index, tag.total, bytes) == tag.check;
        if tag.block == p.block && p.total == Some(total) {
            // The usual case: straight into the block. A packet changed since
            // the tag was read fails the check and is simply not taken.
            let dest = &mut p.data[i * packet..i * packet + len];
            self.seg.read(data_at, dest)?;
            if !check(self.reg, dest) {
                return Ok(None);
            }
        } else {
            // The block's first packet (or a later block's): check before
            // believing its length.
            self.scratch.resize(len, 0);
            self.seg.read(data_at, &mut self.scratch)?;
            if !check(self.reg, &self.scratch) || (tag.block == p.block && p.total.is_some()) {
                return Ok(None);
            }
            if tag.block != p.block {
                *p = Progress::new(tag.block, &self.params);
            }
            p.start(total);
            p.data[i * packet..i * packet + len].copy_from_slice(&self.scratch);
        }
        p.have[i / self.params.unit] |= 1 << (i % self.params.unit);
        Ok(Some(tag.ask))
    }

    /// Publishes the status (what the sender's reads see) and writes unit
    /// `u`'s bitmask, if any, into its slot of the sender's segment.
    fn acknowledge(&self, p: &Progress, u: Option<usize>) -> Result<()> {
        let low = p.lowest_incomplete();
        let done = if p.complete() { p.block } else { self.done };
        let ack = Ack { done, block: p.block, unit: low as u32, mask: p.have.get(low).copied().unwrap_or(0) };
        let status = Status { ack, serving: self.reg, done_by: self.done_by };
        self.seg.write(H_STATUS as u32, &status.to_bytes())?;
        match (&self.sender, u.and_then(|u| Some((u, *p.have.get(u)?)))) {
            (Some(ack), Some((u, mask))) => {
                let a = Ack { done, block: p.block, unit: u as u32, mask };
                Ok(ack.write(((u % ACK_SLOTS) * ACK_SLOT) as u32, &a.to_record(self.reg), true)?)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockSender;

    /// A second sender registers after a block, and its registration's
    /// notification is drained unread (as the drain at a block's completion
    /// does when the registration lands just then): the next `recv` still
    /// finds it, and takes the new sender's block.
    #[test]
    fn a_registration_whose_record_was_drained_is_read_at_the_next_recv() {
        let wait = Duration::from_secs(5);
        let nodes = vipc::loopback_cluster(3, 1, |_, _| {}).unwrap();
        let params = BlockParams { packet: 1024, unit: 4, max_block: 16 * 1024 };
        let mut rx = BlockReceiver::export(&nodes[0], params).unwrap();
        let mut a = BlockSender::connect(&nodes[1], rx.name(), wait).unwrap();
        let first = std::thread::spawn(move || a.send(&[1u8; 5000], wait));
        assert_eq!(rx.recv(wait).unwrap(), vec![1u8; 5000]);
        first.join().unwrap().unwrap();
        let mut b = BlockSender::connect(&nodes[2], rx.name(), wait).unwrap();
        while rx.seg.poll_control().unwrap().is_some() {}
        let second = std::thread::spawn(move || b.send(&[2u8; 5000], wait));
        assert_eq!(rx.recv(wait).unwrap(), vec![2u8; 5000]);
        second.join().unwrap().unwrap();
    }
}
