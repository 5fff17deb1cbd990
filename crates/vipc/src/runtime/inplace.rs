//! Receiving a datagram in place: its data where they belong, the socket's
//! copy the only one, as with TCP.
//!
//! The thread holding the reader token knows where the next datagram it
//! expects goes — the next chunk of a lent MoveFrom
//! ([`Engine::next_placement`]), or the next read answer into a segment
//! whose memory the engine lends for one receive ([`Engine::mem_lend`]) —
//! and receives with the header landing on the bytes just before that
//! place (saved and put back). When the datagram is what was expected its
//! data are already in place; anything else is handled as usual, and data
//! that belong elsewhere in the same buffer are copied there (a 64 KiB
//! read answer is otherwise copied again, ~2 µs here). While segment memory
//! is out, a call that reads that segment ends the receive and waits for it
//! ([`Shared::call_on_segment`]).

use super::wait::place_into;
use super::*;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use vipc_engine::{MemLoan, SegmentId};
use vipc_wire::coalesced::{continues, datagrams, stated_len};
use vipc_wire::HEADER_LEN;

/// Where the data of a datagram received in place are.
enum Source {
    /// In the destination itself, at this range.
    Dest(Range<usize>),
    /// In the receive buffer (the datagram was longer than expected).
    Buf(Range<usize>),
}

/// Longest a call waits for lent memory before asking again (a missed
/// notification only; the receive ends on the wake-up datagram).
const LOAN_WAIT: Duration = Duration::from_millis(10);

impl Shared {
    /// Receives one datagram with its header over the `HEADER_LEN` bytes of
    /// `dest` before `at` and up to `len` data bytes at `at` (the rest of a
    /// longer one in `buf`), and has `feed` handle it whole, with the lock
    /// held: in `dest` if it fit, else joined in `buf`. The bytes under the
    /// header are put back. Returns with the lock held, where `feed` says
    /// the data belong in `dest` with where they are now, and the same for
    /// the datagrams after the first of a receive GRO coalesced (their
    /// data in `buf`; the caller copies them after the first's).
    fn recv_in_place<'s>(
        &'s self,
        dest: &mut [u8],
        (at, len): (usize, usize),
        buf: &mut [u8],
        spin: Option<(&AtomicBool, Instant)>,
        mut feed: impl FnMut(&mut State, SocketAddr, &[u8]) -> Option<Placement>,
    ) -> (MutexGuard<'s, State>, Option<(usize, Source)>, Vec<Placement>) {
        let start = at - HEADER_LEN;
        let first = HEADER_LEN + len;
        let mut saved = [0u8; HEADER_LEN];
        saved.copy_from_slice(&dest[start..at]);
        let got = net::recv_parts(&self.unicast, &mut dest[start..start + first], buf, spin);
        let mut st = self.lock();
        st.reader_blocked = false;
        let (mut more, mut coalesced) = (Vec::new(), false);
        let placed = match got {
            None => None,
            Some((n, from)) if n <= first && datagrams(&dest[start..start + n]).piece_size() == n => {
                feed(&mut st, from, &dest[start..start + n])
                    .map(|(to, r)| (to, Source::Dest(start + r.start..start + r.end)))
            }
            // Coalesced, the first datagram the one expected in size: it is in place, the rest in `buf`.
            Some((n, from))
                if n > first && stated_len(&dest[start..]) == Some(first) && continues(&buf[..n - first], first) =>
            {
                coalesced = true;
                let placed = feed(&mut st, from, &dest[start..start + first])
                    .map(|(to, r)| (to, Source::Dest(start + r.start..start + r.end)));
                self.feed_rest(&mut st, from, &buf[..n - first], 0, &mut feed, &mut more);
                placed
            }
            Some((n, from)) => {
                // Longer than expected, or coalesced otherwise: joined in `buf`.
                let head = n.min(first);
                if n > first {
                    buf.copy_within(0..n - first, first);
                }
                buf[..head].copy_from_slice(&dest[start..start + head]);
                let one = datagrams(&buf[..n]).piece_size();
                coalesced = one < n;
                let placed = feed(&mut st, from, &buf[..one]).map(|(to, r)| (to, Source::Buf(r)));
                if one < n {
                    self.feed_rest(&mut st, from, &buf[one..n], one, &mut feed, &mut more);
                }
                placed
            }
        };
        dest[start..at].copy_from_slice(&saved);
        st.runs_received += u64::from(coalesced);
        (st, placed, more)
    }

    /// Feeds the datagrams of `rest` (which starts at `base` of the receive
    /// buffer) one by one; where their data belong in the lent buffer goes
    /// to `more`, with where they are in the receive buffer.
    fn feed_rest(
        &self,
        st: &mut State,
        from: SocketAddr,
        rest: &[u8],
        base: usize,
        feed: &mut impl FnMut(&mut State, SocketAddr, &[u8]) -> Option<Placement>,
        more: &mut Vec<Placement>,
    ) {
        let mut off = base;
        for d in datagrams(rest) {
            if let Some((to, r)) = feed(st, from, d) {
                more.push((to, off + r.start..off + r.end));
            }
            off += d.len();
        }
    }

    /// The leader of a lent MoveFrom, or of a Send whose write segment is
    /// lent, reads the next datagram in place into `dest`, the chunk the
    /// engine expects at `at` (`len` bytes at most). Data of another chunk
    /// are copied to their place outside the lock. The chunk's bytes are
    /// saved first and put back if anything else landed there: the
    /// expected chunk may never come (a mover that gave up its MoveTo, then
    /// replied), and bytes no mover wrote must stay the caller's, not
    /// another datagram's. Returns with the lock held.
    pub(super) fn read_in_place<'s>(
        &'s self,
        pid: Pid,
        dest: &mut [u8],
        next: (usize, usize),
        bufs: (&mut [u8], &mut Vec<u8>),
        spin: Option<(&AtomicBool, Instant)>,
    ) -> MutexGuard<'s, State> {
        let (buf, saved) = bufs;
        let (at, len) = next;
        saved.clear();
        saved.extend_from_slice(&dest[at..at + len]);
        let origin = Origin::Net(Some(pid));
        let (st, placed, more) =
            self.recv_in_place(dest, next, buf, spin, |st, from, bytes| self.feed(st, from, bytes, origin));
        let in_place = placed.as_ref().is_some_and(|(to, source)| landed(*to, source));
        if in_place && more.is_empty() {
            return st;
        }
        drop(st);
        // The chunk's place back as it was, then the data where they belong
        // (which may be that very place: a datagram longer than expected).
        match placed {
            _ if in_place => {}
            Some((to, Source::Dest(r))) => {
                let data = dest[r].to_vec(); // rare: another chunk came first
                dest[at..at + len].copy_from_slice(saved);
                place_into(dest, to, &data);
            }
            Some((to, Source::Buf(r))) => {
                dest[at..at + len].copy_from_slice(saved);
                place_into(dest, to, &buf[r]);
            }
            None => dest[at..at + len].copy_from_slice(saved),
        }
        for (to, r) in more {
            place_into(dest, to, &buf[r]);
        }
        self.lock()
    }

    /// Receives one datagram with `loan` out, in place at the answer the
    /// engine expects, copies an answer's data where they belong if they
    /// landed elsewhere, and gives the memory back. Returns with the lock held.
    pub(super) fn read_into_loan<'s>(
        &'s self,
        mut loan: MemLoan,
        buf: &mut [u8],
        spin: Option<(&AtomicBool, Instant)>,
    ) -> MutexGuard<'s, State> {
        let lent = |st: &mut State, from, bytes: &[u8]| self.feed_as(st, from, bytes, Origin::Net(None), true).1;
        let (mut st, placed, more) = self.recv_in_place(&mut loan.mem, (loan.at, loan.len), buf, spin, lent);
        match placed {
            Some((to, source)) if landed(to, &source) => st.answers_in_place += 1,
            Some((to, source)) => put(&mut loan.mem, buf, to, source),
            None => {} // not an answer into this segment
        }
        for (to, r) in more {
            put(&mut loan.mem, buf, to, Source::Buf(r));
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

/// True if data that belong at `to` are there already.
fn landed(to: usize, source: &Source) -> bool {
    matches!(source, Source::Dest(r) if r.start == to)
}

/// Copies data received in place to `to` of `dest`, where they belong (if they fit).
fn put(dest: &mut [u8], buf: &[u8], to: usize, source: Source) {
    match source {
        Source::Dest(r) if to.saturating_add(r.len()) <= dest.len() => dest.copy_within(r, to),
        Source::Dest(_) => tracing::debug!("data placed beyond the buffer received into"),
        Source::Buf(r) => place_into(dest, to, &buf[r]),
    }
}
