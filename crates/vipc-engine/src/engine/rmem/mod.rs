//! Remote memory (003, PROTOCOL §4.15): segments exported by this node and
//! operated on by other hosts with no thread of the exporter running — the
//! engine plays the trusted kernel — and this node's own reads, writes,
//! CAS-IIs and imports of other hosts' segments.
//!
//! `table` holds the segments and the checks, `ops` the calls of local
//! processes, `serve` the packets that arrive and the operations' timers.

mod loan;
mod ops;
mod serve;
mod table;
mod types;

pub use loan::MemLoan;
pub use ops::{Cas, Strided};
pub(crate) use table::Table;
pub use types::*;

use super::HashMap;
use crate::{Error, HostId, Time};
use std::collections::VecDeque;
use vipc_wire::rmem::ReadFields;

/// How many times a read is sent again with a fresh address token after
/// `Unvalidated` (the owner restarted, or our address changed, in between).
pub(crate) const TOKEN_TRIES: u8 = 2;

/// Remote-memory state of one node.
#[derive(Debug, Default)]
pub(crate) struct Rmem {
    pub table: Table,
    /// Reads, CAS-IIs and imports of this node, pending or finished and not
    /// yet collected, by the sequence number of their request.
    pub ops: HashMap<u32, PendingOp>,
    /// The deadlines of reads and CAS-IIs, with their seqs, in the order
    /// they were started (so in deadline order: every one is `rmem_timeout`
    /// after its start); one timer entry stands for the earliest
    /// (`TimerKey::MemDeadlines`). An entry whose operation is gone is
    /// dropped when it reaches the front. One heap entry per operation, each
    /// left stale a few µs later, had the timer thread pop tens of thousands
    /// a second under the node's lock.
    pub deadlines: VecDeque<(Time, u32)>,
    /// The segment whose memory the runtime holds ([`crate::Engine::mem_lend`]).
    pub lent: Option<SegmentId>,
    /// Set while [`crate::Engine::handle_datagram_lent`] feeds a datagram.
    pub feeding_lent: bool,
    /// Where the data of the datagram being fed belong in the lent memory.
    pub placement: Option<(usize, std::ops::Range<usize>)>,
    /// The SipHash key of this node's address tokens (see `Engine::address_token`).
    pub token_key: [u64; 2],
    /// The address token each owner host gave us last (in an `Unvalidated`
    /// MemNack): sent with every read to it.
    pub tokens: HashMap<HostId, u64>,
}

impl Rmem {
    /// Drops the deadlines at the front whose operations are gone: they
    /// finish in about the order they start, so the queue stays short.
    pub fn drop_gone_deadlines(&mut self) {
        while let Some(&(_, seq)) = self.deadlines.front() {
            if self.ops.contains_key(&seq) {
                return;
            }
            self.deadlines.pop_front();
        }
    }

    /// Gauge: operations not yet finished.
    pub fn pending(&self) -> usize {
        self.ops.values().filter(|o| o.done.is_none()).count()
    }
}

/// What a pending operation waits for.
#[derive(Debug)]
pub(crate) enum OpKind {
    /// MemWrite answers from `host` covering the request's `len` bytes at
    /// its `dest_offset` of its `dest`. The request is kept to be sent
    /// again with an address token, at most [`TOKEN_TRIES`] times (`tries`).
    Read { host: HostId, request: ReadFields, notify: bool, tries: u8, got: Coverage },
    /// One MemWrite answer from `host`: the 8 bytes at `dest_offset` of `dest`.
    Cas { host: HostId, dest: SegmentId, dest_offset: u32 },
    /// A MemImportReply (or MemNack) from any host; rebroadcast every T_r.
    Import { name: SegmentName, access: u8, next_retransmit: Time },
}

/// An operation of this node (see [`Rmem::ops`]).
#[derive(Debug)]
pub(crate) struct PendingOp {
    pub kind: OpKind,
    pub deadline: Time,
    /// Expected timer heap entry of an import (see `timers`); reads and
    /// CAS-IIs are timed by [`Rmem::deadlines`].
    pub timer_at: Option<Time>,
    /// Set once finished; kept until collected with `mem_poll` or `mem_forget`.
    pub done: Option<Result<MemOutcome, Error>>,
}

/// The byte ranges of a read that have arrived: duplicates are not counted twice.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// Sorted, disjoint, non-adjacent `[start, end)`.
    ranges: Vec<(u64, u64)>,
}

impl Coverage {
    /// Records `[start, end)`.
    pub fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let at = self.ranges.partition_point(|&(_, e)| e < start);
        let mut s = start;
        let mut e = end;
        let mut j = at;
        while j < self.ranges.len() && self.ranges[j].0 <= e {
            s = s.min(self.ranges[j].0);
            e = e.max(self.ranges[j].1);
            j += 1;
        }
        self.ranges.splice(at..j, [(s, e)]);
    }

    /// Records `got` and says whether `want` has wholly arrived. An answer
    /// that is the whole read (the usual one) is not stored: the read is over.
    pub fn add_covers(&mut self, got: (u64, u64), want: (u64, u64)) -> bool {
        if self.ranges.is_empty() && got.0 <= want.0 && want.1 <= got.1 {
            return true;
        }
        self.add(got.0, got.1);
        self.covers(want.0, want.1)
    }

    /// True if part of the read has arrived (and, the read still pending, not all of it).
    pub fn started(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// True if `[start, end)` has wholly arrived.
    pub fn covers(&self, start: u64, end: u64) -> bool {
        self.ranges.iter().any(|&(s, e)| s <= start && end <= e)
    }

    /// The first part of `[start, end)` that has not arrived.
    pub fn first_gap(&self, start: u64, end: u64) -> Option<(u64, u64)> {
        let mut from = start;
        for &(s, e) in &self.ranges {
            if s > from {
                break;
            }
            from = from.max(e);
        }
        let to = self.ranges.iter().map(|&(s, _)| s).find(|&s| s > from).unwrap_or(end).min(end);
        (from < to).then_some((from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::Coverage;

    #[test]
    fn an_answer_that_is_the_whole_read_covers_it_without_being_kept() {
        let mut c = Coverage::default();
        assert!(c.add_covers((0, 100), (0, 100)));
        assert!(c.ranges.is_empty(), "nothing stored: the read is over");
        assert!(!c.add_covers((0, 40), (0, 100)));
        assert!(!c.add_covers((0, 40), (0, 100)), "a duplicate adds nothing");
        assert!(!c.add_covers((60, 100), (0, 100)));
        assert!(c.add_covers((30, 70), (0, 100)));
        assert_eq!(c.ranges, vec![(0, 100)]);
    }

    #[test]
    fn coverage_merges_in_any_order() {
        let mut c = Coverage::default();
        c.add(10, 20);
        c.add(30, 40);
        assert!(!c.covers(10, 40));
        c.add(15, 25);
        c.add(25, 30);
        c.add(10, 20);
        assert!(c.covers(10, 40) && !c.covers(9, 40));
        assert_eq!(c.ranges, vec![(10, 40)]);
        c.add(0, 5);
        c.add(50, 60);
        c.add(4, 51);
        assert_eq!(c.ranges, vec![(0, 60)]);
    }

    #[test]
    fn first_gap_is_the_earliest_missing_range() {
        let mut c = Coverage::default();
        assert_eq!(c.first_gap(10, 50), Some((10, 50)));
        c.add(10, 20);
        c.add(30, 40);
        assert_eq!(c.first_gap(10, 50), Some((20, 30)));
        assert_eq!(c.first_gap(0, 50), Some((0, 10)));
        assert_eq!(c.first_gap(12, 18), None);
        c.add(20, 30);
        assert_eq!(c.first_gap(10, 50), Some((40, 50)));
        c.add(40, 50);
        assert_eq!(c.first_gap(10, 50), None);
    }
}
