//! Waiting for a remote-memory operation: the waiter reads the socket
//! itself when it can, one datagram at a time.

use super::*;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

impl Shared {
    /// A thread waiting for a remote-memory operation reads the socket itself
    /// — one datagram, then the token is free again — so that the answer
    /// reaches it without a hand-off (as a process blocked in a remote Send
    /// reads its reply). If the background thread holds the token, blocked in
    /// a receive, it is asked to hand it over (and the waiter sleeps until it
    /// does, or its answer comes); if a process holds it, the waiter sleeps.
    /// Returns whether it read.
    pub(crate) fn read_for_op<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        spin_until: Option<Instant>,
    ) -> (MutexGuard<'a, State>, bool) {
        if st.stopped {
            return (st, false);
        }
        if st.reader != Reader::None {
            if st.reader == Reader::Background && st.reader_blocked && !st.kicked {
                st.kicked = true;
                st.wake_reader = true;
                // Sending the wake-up releases the lock: the background
                // thread may read it and give the token up meanwhile, with
                // nobody asleep yet to be told. Then the token is ours to
                // take now; sleeping would leave the socket unread for its GRACE.
                st = self.flush_locked(st);
            }
            if st.reader != Reader::None {
                return (st, false);
            }
        }
        st.reader = Reader::Op;
        st.reader_gen += 1;
        st.kicked = false;
        let mut st = self.read_one(st, spin_until);
        st.token_given_up();
        self.promote(&mut st);
        (st, true)
    }

    /// The token holder (not a process) reads one datagram, blocking up to
    /// [`net::RECV_POLL`] with the lock released, feeds it to the engine and
    /// sends what it produced; returns with the lock held.
    pub(super) fn read_one<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        spin_until: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        let spin = spin_until.filter(|t| Instant::now() < *t);
        st.reader_blocked = spin.is_none();
        let mut buf = std::mem::take(&mut st.rxbuf);
        let loan = if st.loan_waiters == 0 { st.engine.mem_lend() } else { None };
        drop(st);
        let never = AtomicBool::new(false);
        let spin = spin.map(|until| (&never, until));
        let mut st = match loan {
            Some(loan) => self.read_into_loan(loan, &mut buf, spin),
            None => {
                let got = match spin {
                    Some(spin) => net::recv_parts(&self.unicast, &mut buf, &mut [], Some(spin)),
                    None => net::recv(&self.unicast, &mut buf),
                };
                let mut st = self.lock();
                st.reader_blocked = false;
                if let Some((n, from)) = got {
                    // No process reads here: nothing is placed for this thread.
                    st = self.feed_received(st, from, &buf[..n], Origin::Net(None), |_, _| {});
                }
                st
            }
        };
        st.rxbuf = buf;
        self.flush_locked(st)
    }

    /// A thread waiting for a remote-memory event (an operation's answer, a
    /// segment's record) for at most `left`, after checking that it has not
    /// come: reads one datagram itself if it can ([`Shared::read_for_op`]),
    /// else sleeps until the event or the token is free. Only a waiter with
    /// a whole receive's timeout left asks for the token: the background
    /// thread hands it to a waiter after each datagram and leaves it idle for
    /// [`GRACE`], which a waiter that will not read would turn into a 2 ms stall.
    pub(crate) fn wait_mem<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        left: Duration,
        spin_until: Option<Instant>,
    ) -> MutexGuard<'a, State> {
        if left < net::RECV_POLL {
            return self.sleep_for_mem(st, left);
        }
        Self::op_waiting(&mut st, true);
        let (mut st, read) = self.read_for_op(st, spin_until);
        if !read {
            st = self.sleep_for_mem(st, left);
        }
        Self::op_waiting(&mut st, false);
        st
    }

    /// Sleeps on `rmem_cv` for at most `limit`, counted among its sleepers.
    pub(super) fn sleep_for_mem<'a>(&'a self, mut st: MutexGuard<'a, State>, limit: Duration) -> MutexGuard<'a, State> {
        st.rmem_sleepers += 1;
        let mut st = self.rmem_cv.wait_timeout(st, limit).unwrap_or_else(|e| e.into_inner()).0;
        st.rmem_sleepers -= 1;
        st
    }

    /// Counts a thread waiting for a remote-memory operation that wants the token.
    pub(super) fn op_waiting(st: &mut State, waiting: bool) {
        if waiting {
            st.op_waiters += 1;
        } else {
            st.op_waiters = st.op_waiters.saturating_sub(1);
        }
    }
}
