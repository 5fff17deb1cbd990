//! The channels between two nodes: every message from node O to node X is
//! a 24-byte record remote-written into a ring in X's segment, and X tells
//! O how far it has read by remote-writing a count into O's segment.
//!
//! Each node's segment holds, for every other node X, a region:
//! {ack: how many of my records X has read (written by X), consumed: how
//! many of X's records I have read (written by me, read by X when its acks
//! are late), the ring of X's records to me}. A record is {sequence number
//! u32, channel u16, kind u8 (0, 1: a change to that value; 2: null), 0,
//! time u64, check word u64}; it sits in slot `seq mod RING` and counts
//! only with the expected sequence number and a matching check word, so a
//! lost, duplicated, late or torn record is never taken. The sender keeps
//! every record until it is acknowledged, never has more than `RING`
//! outstanding, and when no acknowledgement has come for `rto` reads the
//! receiver's `consumed` (a remote read: no receiver thread runs) and
//! writes the rest again.

use super::lp::Msg;
use crate::Result;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};
use vipc::{AnonSegment, ExportedSegment, RemoteSegment};

/// Records per ring.
pub(crate) const RING: u64 = 256;
const RECORD: usize = 24;
const HEAD: usize = 16;

/// Bytes of one peer's region.
pub(crate) const REGION: usize = HEAD + RING as usize * RECORD;

/// A message on the channel to a gate's pin (`gate * 2 + pin`).
pub(crate) type Addressed = (u16, Msg);

fn region(peer: usize) -> u32 {
    (peer * REGION) as u32
}

fn check(from: usize, to: usize, head: &[u8]) -> u64 {
    let tag = [from as u8, to as u8];
    tag.iter().chain(head).fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn encode(from: usize, to: usize, seq: u64, (chan, (time, change)): Addressed) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&(seq as u32).to_le_bytes());
    r[4..6].copy_from_slice(&chan.to_le_bytes());
    r[6] = change.map_or(2, u8::from);
    r[8..16].copy_from_slice(&time.to_le_bytes());
    let c = check(from, to, &r[..16]);
    r[16..24].copy_from_slice(&c.to_le_bytes());
    r
}

pub(super) fn decode(from: usize, to: usize, seq: u64, r: &[u8]) -> Option<Addressed> {
    let word = |at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap_or([0; 8]));
    let seq_ok = r[0..4] == (seq as u32).to_le_bytes();
    if !seq_ok || word(16) != check(from, to, &r[..16]) || r[6] > 2 {
        return None;
    }
    let change = if r[6] == 2 { None } else { Some(r[6] == 1) };
    Some((u16::from_le_bytes([r[4], r[5]]), (word(8), change)))
}

/// What a link's traffic cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Records written (first time).
    pub records: u64,
    /// Null messages dropped before sending because a later message on the same channel went with them.
    pub nulls_dropped: u64,
    /// Records written again after no acknowledgement came within `rto`.
    pub rewritten: u64,
}

/// This node's end of the channels to and from one other node.
pub(crate) struct Link {
    me: usize,
    peer: usize,
    remote: RemoteSegment,
    pending: Vec<Addressed>,
    unacked: VecDeque<(u64, [u8; RECORD])>,
    next_seq: u64,
    acked: u64,
    waited_since: Instant,
    consumed: u64,
    pub(crate) stats: LinkStats,
}

impl Link {
    pub(crate) fn new(me: usize, peer: usize, remote: RemoteSegment) -> Link {
        let (pending, unacked) = (Vec::new(), VecDeque::new());
        let stats = LinkStats::default();
        let now = Instant::now();
        Link { me, peer, remote, pending, unacked, next_seq: 0, acked: 0, waited_since: now, consumed: 0, stats }
    }

    /// Queues a message for the peer.
    pub(crate) fn push(&mut self, m: Addressed) {
        self.pending.push(m);
    }

    /// Nothing queued and everything written acknowledged.
    pub(crate) fn idle(&self) -> bool {
        self.pending.is_empty() && self.unacked.is_empty()
    }

    /// Takes the peer's records from the ring in sequence order into `into`,
    /// and acknowledges them; true if any came.
    pub(crate) fn receive(&mut self, seg: &ExportedSegment, into: &mut Vec<Addressed>) -> Result<bool> {
        let ring = seg.to_vec(region(self.peer) + HEAD as u32, RING as usize * RECORD)?;
        let start = self.consumed;
        loop {
            let at = (self.consumed % RING) as usize * RECORD;
            match decode(self.peer, self.me, self.consumed, &ring[at..at + RECORD]) {
                Some(m) => into.push(m),
                None => break,
            }
            self.consumed += 1;
        }
        if self.consumed == start {
            return Ok(false);
        }
        seg.write(region(self.peer) + 8, &self.consumed.to_le_bytes())?;
        self.remote.write(region(self.me), &self.consumed.to_le_bytes(), true)?;
        Ok(true)
    }

    /// Takes the peer's acknowledgement from this node's segment.
    pub(crate) fn absorb_ack(&mut self, seg: &ExportedSegment) -> Result<()> {
        let mut b = [0u8; 8];
        seg.read(region(self.peer), &mut b)?;
        self.acked_upto(u64::from_le_bytes(b));
        Ok(())
    }

    fn acked_upto(&mut self, n: u64) {
        if n > self.acked && n <= self.next_seq {
            self.acked = n;
            self.waited_since = Instant::now();
            while self.unacked.front().is_some_and(|u| u.0 < n) {
                self.unacked.pop_front();
            }
        }
    }

    /// Writes what is queued, as far as the ring has room: a null message
    /// is dropped if a later message on its channel goes in the same batch.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut later = HashSet::new();
        let mut keep: Vec<Addressed> = Vec::with_capacity(self.pending.len());
        for &m in self.pending.iter().rev() {
            if later.insert(m.0) || m.1 .1.is_some() {
                keep.push(m);
            } else {
                self.stats.nulls_dropped += 1;
            }
        }
        keep.reverse();
        let room = (self.acked + RING - self.next_seq) as usize;
        let rest = keep.split_off(room.min(keep.len()));
        self.pending = rest;
        let first = self.next_seq;
        for m in keep {
            let r = encode(self.me, self.peer, self.next_seq, m);
            if self.unacked.is_empty() {
                self.waited_since = Instant::now();
            }
            self.unacked.push_back((self.next_seq, r));
            self.next_seq += 1;
            self.stats.records += 1;
        }
        self.write_from(first)
    }

    /// Writes the unacknowledged records from `first` on, in runs that do not wrap the ring.
    fn write_from(&mut self, first: u64) -> Result<()> {
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = first;
        let base = region(self.me) + HEAD as u32;
        for (seq, r) in self.unacked.iter().filter(|u| u.0 >= first) {
            if !run.is_empty() && seq % RING == 0 {
                self.remote.write(base + (run_start % RING) as u32 * RECORD as u32, &run, true)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = *seq;
            }
            run.extend_from_slice(r);
        }
        if !run.is_empty() {
            self.remote.write(base + (run_start % RING) as u32 * RECORD as u32, &run, true)?;
        }
        Ok(())
    }

    /// When did it last hear from the peer, with records outstanding.
    pub(crate) fn overdue(&self, rto: Duration) -> bool {
        !self.unacked.is_empty() && self.waited_since.elapsed() >= rto
    }

    /// No acknowledgement for `rto`: reads the peer's `consumed` and writes
    /// the records it has not taken again (also when the read goes unanswered).
    pub(crate) fn recover(&mut self, anon: &AnonSegment, rto: Duration) -> Result<()> {
        let op = self.remote.read(region(self.me) + 8, 8, (anon, 0), false)?;
        match op.wait(rto) {
            Ok(_) => {
                let mut b = [0u8; 8];
                anon.read(0, &mut b)?;
                self.acked_upto(u64::from_le_bytes(b));
            }
            Err(e) if crate::error::lost(&e) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(&(first, _)) = self.unacked.front() {
            self.stats.rewritten += self.unacked.len() as u64;
            self.write_from(first)?;
        }
        self.waited_since = Instant::now();
        Ok(())
    }
}
