//! The node's background threads: the timers and the network reader of last resort.

use super::*;

/// The timer thread runs at most once per this interval: deadlines are met
/// at most this late (T_r is 20 ms), and the stale entries of the engine's
/// timer heap — one per exchange — cost one wake-up per interval instead of
/// one per exchange.
pub(super) const TIMER_SLACK: Duration = Duration::from_millis(1);

/// The timer thread: runs the engine's timers and releases held-back datagrams when due.
pub(crate) fn timer_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        let now = shared.now();
        let engine_next = st.engine.poll_timeout();
        let next = earliest(engine_next, st.faults.as_ref().and_then(Faults::next_release));
        match next {
            Some(t) if t <= now && now >= st.timer_floor => {
                st.timer_floor = now + TIMER_SLACK;
                if engine_next.is_some_and(|e| e <= now) {
                    st.engine.handle_timeout(now);
                }
                let State { faults, outq, .. } = &mut *st;
                if let Some(f) = faults {
                    f.release(now, outq);
                }
                st.timer_deadline = None;
                shared.drain(&mut st, Origin::Timer, now);
                st = shared.flush_locked(st);
            }
            Some(t) => {
                let t = t.max(st.timer_floor);
                st.timer_deadline = Some(t);
                // At least TIMER_SLACK: `now` is the coarse clock, which
                // moves only at its ticks (4 ms here), so a deadline a few µs
                // ahead of it stays ahead until the next tick — waiting
                // just `t - now` woke the thread every 80 µs meanwhile
                // (1,300 wake-ups a second beside a ping-pong). An earlier
                // deadline set meanwhile still wakes it (`drain`).
                let wait = (t - now).max(TIMER_SLACK);
                st = shared.timer_cv.wait_timeout(st, wait).unwrap_or_else(|e| e.into_inner()).0;
            }
            None => {
                st.timer_deadline = None;
                st = shared.timer_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
}

/// The longest the background thread sleeps between looks at a token that
/// processes keep taking: each look that finds it taken, or given up less
/// than a [`GRACE`] ago, since the last look doubles the sleep from `GRACE`
/// up to this; taking the token, or parking, starts again from `GRACE`.
/// Every wake-up of that thread costs a busy process on its CPU two context
/// switches: at one per `GRACE` they were the slowest 0.5–1% of a tight
/// loop of remote reads (p99 1.3–2.3 × the UDP exchange's; 1.03–1.22 × with
/// this). Once such a loop stops, the socket waits at most this plus a
/// `GRACE` for the thread (2 ms before).
const BUSY_GRACE_MAX: Duration = Duration::from_millis(8);

/// The background network thread: reads the unicast socket while no
/// process does — when the token has been free for [`GRACE`] — and hands the
/// token to a process that asks for it after each datagram.
pub(crate) fn net_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    let (mut seen_gen, mut seen_release) = (u64::MAX, u64::MAX);
    let mut busy_grace = GRACE;
    loop {
        if st.stopped {
            return;
        }
        match st.reader {
            Reader::None => {
                if st.releases != seen_release && st.released_at.elapsed() < GRACE {
                    // Given up lately (taken and given up again since we
                    // last looked, if we did): a process may take it back.
                    seen_release = st.releases;
                    st = shared.bg_cv.wait_timeout(st, busy_grace).unwrap_or_else(|e| e.into_inner()).0;
                    busy_grace = (busy_grace * 2).min(BUSY_GRACE_MAX);
                    continue;
                }
                busy_grace = GRACE;
                st.reader = Reader::Background;
                st.kicked = false;
                loop {
                    st = shared.read_one(st, None);
                    if st.stopped {
                        return;
                    }
                    if shared.has_lead_waiter(&mut st) || st.op_waiters > 0 {
                        st.token_given_up();
                        shared.promote(&mut st);
                        break;
                    }
                }
            }
            Reader::Process(_) | Reader::Background | Reader::Op => {
                if st.reader_gen == seen_gen {
                    // The same process has held the token for a whole GRACE: sleep until it lets go.
                    st.bg_parked = true;
                    busy_grace = GRACE;
                    st = shared.bg_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                    st.bg_parked = false;
                } else {
                    seen_gen = st.reader_gen;
                    st = shared.bg_cv.wait_timeout(st, busy_grace).unwrap_or_else(|e| e.into_inner()).0;
                    busy_grace = (busy_grace * 2).min(BUSY_GRACE_MAX);
                }
            }
        }
    }
}
