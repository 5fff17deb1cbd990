//! Read answers received straight into their destination segment.
//!
//! Before it receives, the thread holding the reader token borrows from the
//! engine the memory of the anonymous segment the next read answer is
//! expected in ([`Engine::mem_lend`]) and receives with the header landing
//! just before the expected place: when that answer is what comes, its data
//! are where they belong and the socket's copy was the only one (a 64 KiB
//! answer is otherwise copied again, ~2 µs here). Any other datagram is
//! handled as usual. While the memory is out, a call that reads or writes
//! that segment ends the receive and waits for it ([`Shared::call_on_segment`]).

use super::*;
use vipc_engine::{MemLoan, SegmentId};

/// Where the data of a datagram received with memory lent are.
enum Source {
    /// In the lent memory itself, at this range.
    Lent(Range<usize>),
    /// In the receive buffer (the datagram was longer than expected).
    Buf(Range<usize>),
}

/// Longest a call waits for lent memory before asking again (a missed
/// notification only; the receive ends on the wake-up datagram).
const LOAN_WAIT: Duration = Duration::from_millis(10);

impl Shared {
    /// Receives one datagram with `loan` out, feeds it, puts the data of an
    /// answer into the segment where they belong (unless they landed there)
    /// and gives the memory back. The header lands in the bytes just before
    /// the expected place, which are saved and put back. Returns with the
    /// lock held.
    pub(super) fn read_into_loan<'s>(
        &'s self,
        mut loan: MemLoan,
        buf: &mut [u8],
        spin: Option<(&AtomicBool, Instant)>,
    ) -> MutexGuard<'s, State> {
        let start = loan.at - HEADER_LEN;
        let first = HEADER_LEN + loan.len;
        let mut saved = [0u8; HEADER_LEN];
        saved.copy_from_slice(&loan.mem[start..loan.at]);
        let got = net::recv_parts(&self.unicast, &mut loan.mem[start..start + first], buf, spin);
        let mut st = self.lock();
        st.reader_blocked = false;
        let origin = Origin::Net(None);
        let placed = match got {
            None => None,
            Some((n, from)) if n <= first => {
                let placed = self.feed_as(&mut st, from, &loan.mem[start..start + n], origin, true).1;
                placed.map(|(to, r)| (to, Source::Lent(start + r.start..start + r.end)))
            }
            Some((n, from)) => {
                // Longer than expected: join its two parts in `buf`.
                buf.copy_within(0..n - first, first);
                buf[..first].copy_from_slice(&loan.mem[start..start + first]);
                self.feed_as(&mut st, from, &buf[..n], origin, true).1.map(|(to, r)| (to, Source::Buf(r)))
            }
        };
        loan.mem[start..loan.at].copy_from_slice(&saved);
        // The engine checked that `to` plus the data's length lies in the segment.
        match placed {
            Some((to, Source::Lent(r))) if to == r.start => st.answers_in_place += 1,
            Some((to, Source::Lent(r))) => loan.mem.copy_within(r, to),
            Some((to, Source::Buf(r))) => loan.mem[to..to + r.len()].copy_from_slice(&buf[r]),
            None => {} // not an answer into this segment
        }
        st.engine.mem_return(loan);
        if st.rmem_sleepers > 0 {
            self.rmem_cv.notify_all();
        }
        st
    }

    /// [`Shared::call`] of a call that reads or writes local segment `id`:
    /// if its memory is lent to a receive, that receive is ended (the
    /// wake-up datagram) and the call waits for the memory to come back.
    /// Nothing is lent while a call waits.
    pub(crate) fn call_on_segment<T>(
        &self,
        id: SegmentId,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<T> {
        let mut st = self.lock();
        if st.engine.segment_lent(id) {
            st.loan_waiters += 1;
            while st.engine.segment_lent(id) && !st.stopped {
                st.wake_reader = true;
                st = self.flush_locked(st);
                if st.engine.segment_lent(id) {
                    st = self.sleep_for_mem(st, LOAN_WAIT);
                }
            }
            st.loan_waiters -= 1;
        }
        let (st, r) = self.enter_locked(st, None, f)?;
        self.flush(st);
        Ok(r?)
    }
}
