//! Receiving a read's answer straight into its destination: the engine
//! lends the runtime the memory of the segment it expects the next answer
//! in, for one receive, and is told where each datagram's data belong. The
//! socket's copy is then the only one, as for a raw UDP receive.

use super::super::*;
use super::*;

/// The memory of a local segment, lent for one receive ([`Engine::mem_lend`]).
#[derive(Debug)]
pub struct MemLoan {
    /// The segment.
    pub id: SegmentId,
    /// The segment's memory: its bytes, after room for at least a packet header.
    pub mem: Vec<u8>,
    /// Where in `mem` the expected answer's data begin: its header fits just before.
    pub at: usize,
    /// The most data bytes it may carry there (the rest of the expected gap).
    pub len: usize,
}

impl Engine {
    /// Lends the memory of the segment the next answer is expected in: the
    /// pending read with the lowest sequence number, where its first missing
    /// bytes go. Nothing when there is a key (the MAC follows the data),
    /// when memory is lent already, when fewer than `rmem_lend_min` of that
    /// read's bytes are still to come, or when another pending operation also
    /// answers into that segment — a datagram that is not the one expected
    /// lands in bytes that no answer has written yet, which its own answer
    /// overwrites later. The segment's owner reads it only once the runtime
    /// gives it back with [`Engine::mem_return`].
    pub fn mem_lend(&mut self) -> Option<MemLoan> {
        if self.cfg.key.is_some() || self.rmem.lent.is_some() {
            return None;
        }
        let pending = |op: &&PendingOp| op.done.is_none();
        let (seq, host, dest, gap) = self
            .rmem
            .ops
            .iter()
            .filter(|(_, op)| pending(op))
            .filter_map(|(&seq, op)| match &op.kind {
                OpKind::Read { host, request: ReadFields { dest, dest_offset, len, .. }, got, .. } => {
                    let (lo, hi) = (*dest_offset as u64, *dest_offset as u64 + *len as u64);
                    Some((seq, *host, *dest, got.first_gap(lo, hi)?))
                }
                _ => None,
            })
            .min_by_key(|&(seq, ..)| seq)?;
        if gap.1 - gap.0 < self.cfg.rmem_lend_min as u64 {
            return None;
        }
        let shared = self.rmem.ops.iter().filter(|(_, op)| pending(op)).any(|(&s, op)| {
            s != seq && matches!(op.kind, OpKind::Read { request: ReadFields { dest: d, .. }, .. } | OpKind::Cas { dest: d, .. } if d == dest)
        });
        if shared {
            return None;
        }
        let chunk = self.cfg.data_to(self.location.peek(host)?);
        // Only an anonymous segment: no other host's request ever reads or writes it.
        let seg = self.rmem.table.get_mut(dest).filter(|s| s.name.is_none() && !s.is_lent() && gap.1 <= s.size())?;
        self.rmem.lent = Some(dest);
        let len = chunk.min((gap.1 - gap.0) as usize);
        Some(MemLoan { id: dest, at: seg.head() + gap.0 as usize, mem: seg.lend(), len })
    }

    /// [`Engine::handle_datagram`] of a datagram received while memory is
    /// lent: if it is an answer into that memory, where its data belong —
    /// the offset in [`MemLoan::mem`] and the range of `bytes` — for the
    /// runtime to copy them there unless they landed there already. A
    /// datagram fed otherwise never writes lent memory (it is dropped).
    pub fn handle_datagram_lent(&mut self, now: Time, from: SocketAddr, bytes: &[u8]) -> Option<(usize, Range<usize>)> {
        self.rmem.feeding_lent = true;
        self.handle_datagram(now, from, bytes);
        self.rmem.feeding_lent = false;
        self.rmem.placement.take()
    }

    /// Takes lent memory back (dropped if the segment went meanwhile).
    pub fn mem_return(&mut self, loan: MemLoan) {
        if self.rmem.lent == Some(loan.id) {
            self.rmem.lent = None;
        }
        if let Some(seg) = self.rmem.table.get_mut(loan.id).filter(|s| s.is_lent()) {
            seg.give_back(loan.mem);
        }
    }

    /// True while the memory of segment `id` is lent: calls that read or
    /// write it fail with [`Error::SegmentBusy`] until it comes back.
    pub fn segment_lent(&self, id: SegmentId) -> bool {
        self.rmem.lent == Some(id)
    }
}
