//! Sending what the engine produced: one thread at a time sends the queue,
//! in order, with the lock released; deferred sends go to the sender thread.

use super::slot::{signal_all, take_notify};
use super::*;
use crate::gso::{self, Part, Run};
use vipc_engine::HeaderFor;

impl Shared {
    /// Sends the queued datagrams (and the reader's wake-up), with the lock
    /// released meanwhile; returns with it held again. One thread at a time
    /// sends, in queue order, so the wire order is the engine's order (the
    /// bulk protocol reads reordering as loss); a thread that finds another
    /// one sending leaves its datagrams to it. A thread other than the
    /// sender thread sends at most [`SENDING_ROUNDS`] batches, then leaves
    /// the rest to the sender thread: a writer streaming remote writes keeps
    /// the queue full, and whoever happened to be sending it (the timer
    /// thread, the socket's reader, a process ending its call, a shutdown)
    /// would be kept at it for as long as the writer writes.
    pub(crate) fn flush_locked<'a>(&'a self, st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.flush_rounds(st, SENDING_ROUNDS)
    }

    /// [`Shared::flush_locked`] sending at most `rounds` batches.
    fn flush_rounds<'a>(&'a self, mut st: MutexGuard<'a, State>, rounds: usize) -> MutexGuard<'a, State> {
        let mut wake = std::mem::take(&mut st.wake_reader);
        let mut wake_holder = std::mem::take(&mut st.mcast.wake_holder);
        let mut notify = take_notify(&mut st);
        let send = !st.sending && !st.outq.is_empty();
        if !send && !wake && !wake_holder && notify.is_empty() {
            return st;
        }
        st.sending |= send;
        let mut round = 0;
        loop {
            round += 1;
            let batch = if send { self.take_queue(&mut st) } else { VecDeque::new() };
            drop(st);
            signal_all(&mut notify);
            if std::mem::take(&mut wake) {
                self.send_wake();
            }
            if std::mem::take(&mut wake_holder) {
                self.ring_holder();
            }
            net::send_all(&self.unicast, &self.gso, &batch);
            st = self.lock();
            if !send {
                return st;
            }
            give_back(&mut st, batch);
            if st.outq.is_empty() {
                self.stop_sending(&mut st);
                return st;
            }
            if round >= rounds {
                self.stop_sending(&mut st);
                if !std::mem::replace(&mut st.send_kick, true) {
                    self.sender_cv.notify_one();
                }
                return st;
            }
        }
    }

    /// Takes the whole send queue for the sending thread (throttled callers
    /// may go on: nothing is unsent any more).
    pub(super) fn take_queue(&self, st: &mut State) -> Outgoing {
        let spare = std::mem::take(&mut st.spare);
        st.outq_counted = (0, 0);
        if st.send_waiters > 0 {
            self.drained_cv.notify_all();
        }
        std::mem::replace(&mut st.outq, spare)
    }

    /// The sending thread is done: a writer waiting for its turn may go.
    pub(super) fn stop_sending(&self, st: &mut State) {
        st.sending = false;
        if st.send_waiters > 0 {
            self.drained_cv.notify_all();
        }
    }

    /// Sleeps until the sending thread takes the queue or finishes (the
    /// caller checks its own condition again; the limit only bounds a missed
    /// notification).
    pub(super) fn wait_drained<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        st.send_waiters += 1;
        let limit = Duration::from_millis(50);
        let mut st = self.drained_cv.wait_timeout(st, limit).unwrap_or_else(|e| e.into_inner()).0;
        st.send_waiters -= 1;
        st
    }

    /// Sends packets whose headers `f` encodes and whose data are ranges of
    /// `data` straight from the caller's buffer (no copy into a queued
    /// datagram), after everything queued before them: the caller waits for
    /// its turn as the one sending thread. `Ok(false)` if `f` declines, and
    /// with fault injection (which must see every datagram).
    pub(crate) fn send_from_buffer(
        &self,
        data: &[u8],
        f: impl FnOnce(&mut Engine) -> Result<Option<Vec<HeaderFor>>, vipc_engine::Error>,
    ) -> Result<bool> {
        let mut st = self.lock();
        if st.faults.is_some() {
            return Ok(false);
        }
        while st.sending && !st.stopped {
            st = self.wait_drained(st);
        }
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let Some(packets) = f(&mut st.engine)? else { return Ok(false) };
        let now = self.now();
        self.drain(&mut st, Origin::Call(None), now);
        st.sending = true;
        let batch = self.take_queue(&mut st);
        drop(st);
        net::send_all(&self.unicast, &self.gso, &batch);
        let sock = &self.unicast;
        let mut run = Run::new(sock, &self.gso, |to, (), parts| gso::send_logged(sock, to, parts));
        for p in &packets {
            run.push(p.to, Part::new(&p.head[..]), Part::new(&data[p.data.clone()]), ());
        }
        run.finish();
        let mut st = self.lock();
        give_back(&mut st, batch);
        self.stop_sending(&mut st);
        self.flush(st);
        Ok(true)
    }

    /// [`Shared::flush_locked`], then unlocks. With nothing to send, the
    /// threads to wake are signalled after unlocking and the lock is not
    /// taken again (a woken thread would find it held).
    pub(crate) fn flush(&self, st: MutexGuard<'_, State>) {
        if st.sending || st.outq.is_empty() {
            return self.unlock_and_signal(st);
        }
        drop(self.flush_locked(st));
    }

    /// Unlocks, then signals the threads to wake and the blocked reader, if
    /// any (without sending the queue).
    pub(super) fn unlock_and_signal(&self, mut st: MutexGuard<'_, State>) {
        let wake = std::mem::take(&mut st.wake_reader);
        let wake_holder = std::mem::take(&mut st.mcast.wake_holder);
        let mut notify = take_notify(&mut st);
        drop(st);
        signal_all(&mut notify);
        if wake {
            self.send_wake();
        }
        if wake_holder {
            self.ring_holder();
        }
    }

    /// Ends the wait of the process holding the multicast token.
    pub(super) fn ring_holder(&self) {
        if let Some(b) = &self.bells {
            b.holder.ring();
        }
    }

    /// An empty datagram to our own socket: ends the blocked reader's receive.
    pub(super) fn send_wake(&self) {
        if let Err(e) = self.unicast.send_to(&[], self.self_addr) {
            tracing::debug!("wake-up datagram failed: {e}");
        }
    }

    /// [`Shared::call`] whose datagrams the sender thread sends: the caller
    /// pays for the engine and a queue, not for the system calls — what a
    /// remote write costs the writer (003: the interface, not the writer,
    /// moves the data). Order is kept: one thread at a time sends the
    /// queue, in order, and a later call by anyone sends what is still queued
    /// before its own. While more than [`SEND_QUEUE_LIMIT`] bytes wait for
    /// the sender, the caller waits too, as a writer waits for a full
    /// interface queue.
    pub(crate) fn call_deferred<T>(
        &self,
        f: impl FnOnce(&mut Engine, Time) -> Result<T, vipc_engine::Error>,
    ) -> Result<T> {
        let (mut st, r) = self.enter(None, f)?;
        let kick = !st.sending && !st.outq.is_empty() && !std::mem::replace(&mut st.send_kick, true);
        if unsent_bytes(&mut st) > SEND_QUEUE_LIMIT {
            st.throttled_calls += 1;
            if kick {
                self.sender_cv.notify_one();
            }
            while !st.stopped && unsent_bytes(&mut st) > SEND_QUEUE_LIMIT {
                st = self.wait_drained(st);
            }
            self.unlock_and_signal(st);
            return Ok(r?);
        }
        self.unlock_and_signal(st);
        if kick {
            self.sender_cv.notify_one();
        }
        Ok(r?)
    }
}

/// Fire-and-forget calls (remote writes) wait while more than this many
/// bytes are queued and not yet taken by a sender: a writer faster than the
/// network would otherwise grow the queue without bound.
pub(super) const SEND_QUEUE_LIMIT: usize = 8 << 20;

/// A sent batch's buffers go back to the engine, the emptied queue back to `spare`.
pub(super) fn give_back(st: &mut State, mut batch: Outgoing) {
    // pop_front, not drain: a drain of one datagram cost 100 instructions (callgrind).
    while let Some((_, bytes)) = batch.pop_front() {
        st.engine.recycle(bytes);
    }
    if st.spare.capacity() < batch.capacity() {
        st.spare = batch;
    }
}

/// Bytes queued in `outq` and not yet taken by a sending thread.
pub(super) fn unsent_bytes(st: &mut State) -> usize {
    let (counted, bytes) = st.outq_counted;
    let more: usize = st.outq.range(counted..).map(|(_, b)| b.len()).sum();
    st.outq_counted = (st.outq.len(), bytes + more);
    bytes + more
}

/// The sender thread: sends what [`Shared::call_deferred`] queued.
pub(crate) fn sender_loop(shared: Arc<Shared>) {
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        if !st.send_kick {
            st = shared.sender_cv.wait(st).unwrap_or_else(|e| e.into_inner());
            continue;
        }
        st.send_kick = false;
        st = shared.flush_rounds(st, usize::MAX);
    }
}

/// Batches a thread other than the sender thread sends before it leaves
/// the rest of the queue to the sender thread: its own, and what others
/// queued meanwhile.
const SENDING_ROUNDS: usize = 2;
