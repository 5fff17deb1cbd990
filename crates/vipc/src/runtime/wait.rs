//! Blocking calls: a process waits in its slot, reading the socket itself
//! while it holds the reader token (leader/follower), spinning first with
//! `poll_spin`.

use super::slot::{current_cpu, Done, NO_CPU};
use super::*;
use crate::gso::{self, Part, Run};
use std::time::Instant;
use vipc_wire::HEADER_LEN;

impl Shared {
    /// Runs a blocking engine call for `pid` and waits for its completion.
    pub(crate) fn block(
        &self,
        pid: Pid,
        lead: Lead,
        lend: Lend<'_>,
        f: impl FnOnce(&mut Engine, Time) -> Result<(), vipc_engine::Error>,
    ) -> Result<Completion> {
        let mut st = self.lock();
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        let now = self.now();
        // One lookup of the slot, held across the engine call (disjoint fields).
        let state = &mut *st;
        let Some(slot) = state.slots.get_mut(&pid) else {
            return Err(vipc_engine::Error::NotLocalProcess(pid).into());
        };
        let hot = |t: Option<Time>| t.is_some_and(|t| now.since(t) < HOT);
        let (signal, hot, mhot) = (slot.signal.clone(), hot(slot.last_net), hot(slot.last_mcast));
        let left = crate::within::remaining()?;
        let mut done = signal.done();
        if done.in_call {
            return Err(vipc_engine::Error::Busy(pid).into());
        }
        let mut r = f(&mut state.engine, now);
        // Only a call the engine took owns the slot: one refused must not
        // wipe the completion another call may have just been given. The new
        // call's own completions are still in the engine's events, drained below.
        let taken = r.is_ok();
        if taken {
            *done = Done { completion: None, in_call: true };
            slot.work.clear();
            slot.signal.ready.store(false, Ordering::Relaxed);
        }
        drop(done);
        if let (Ok(()), Some(left)) = (&r, left) {
            // The limit must not pass before the caller's deadline. It is
            // checked against the coarse clock, which never runs ahead of the
            // precise one but may lag it by more than its stated resolution
            // (7.7 ms against 4 ms here): counted from the precise time, the
            // coarse clock reaches it only once the deadline has passed.
            r = st.engine.limit(now, pid, self.precise_now() + left);
        }
        self.drain(&mut st, Origin::Call(Some(pid)), now);
        if let Err(e) = r {
            if taken {
                signal.done().in_call = false; // the deadline could not be set: the call is over
            }
            self.flush(st);
            return Err(e.into());
        }
        // A Receive whose messages came from the multicast socket lately reads that socket.
        let mlead = matches!(lead, Lead::IfHot) && mhot;
        let lead = match lead {
            Lead::Yes => true,
            Lead::No => false,
            Lead::IfHot => hot,
        };
        let result = if self.poll_spin.is_some() && !lead {
            // A spinning follower waits without the lock (see `wait`).
            self.flush(st);
            self.wait(pid, None, &signal, (lead, mlead), lend)
        } else {
            let st = self.flush_locked(st);
            self.wait(pid, Some(st), &signal, (lead, mlead), lend)
        };
        if result.is_err() {
            signal.done().in_call = false; // an Ok took its completion, which ended the call
        }
        result
    }

    /// Waits until `pid`'s slot is filled. A thread that `lead`s takes the
    /// reader token when it is free and reads the socket itself, feeding the
    /// engine and waking the others, until its own completion arrives; the
    /// others sleep on their slot. With `poll_spin`, first spins: the leader
    /// on non-blocking receives, a follower on its slot's flag. One that
    /// does not lead the unicast socket and `mlead`s reads the multicast
    /// socket if it can (see [`mcast`]).
    pub(super) fn wait<'a>(
        &'a self,
        pid: Pid,
        st: Option<MutexGuard<'a, State>>,
        signal: &Signal,
        (lead, mlead): (bool, bool),
        mut lend: Lend<'_>,
    ) -> Result<Completion> {
        let spin_until = self.poll_spin.map(|d| crate::within::deadline_after(Instant::now(), d));
        // Made at the first spin: a blocking wait reads no clock for it.
        let mut spinner = None;
        let mut work = VecDeque::new();
        let mut spent = Vec::new();
        if spin_until.is_some() {
            signal.cpu.store(current_cpu(), Ordering::Relaxed);
        }
        let mut st = match st {
            Some(st) => st,
            None => {
                // A spinning follower first spins on its flag without the
                // lock, and takes its completion without it: it holds no
                // reader token and has asked for none (see `release`). A
                // completion the call itself made (a queued message, a local
                // GetPid) raised no flag: taken first, not after the spin.
                if let Some(until) = spin_until {
                    if !lead {
                        if let Some(c) = signal.take() {
                            return Ok(c);
                        }
                    }
                    spin_on(signal, until, spinner.get_or_insert_with(net::Spin::cheap));
                    if !lead {
                        if let Some(c) = signal.take() {
                            return Ok(c);
                        }
                    }
                }
                self.lock()
            }
        };
        loop {
            let Some(slot) = st.slots.get_mut(&pid) else {
                self.release(&mut st, pid);
                return Err(vipc_engine::Error::Destroyed(pid).into());
            };
            if !slot.work.is_empty() {
                std::mem::swap(&mut work, &mut slot.work);
                if slot.signal.done().completion.is_none() {
                    slot.signal.ready.store(false, Ordering::Relaxed);
                }
                drop(st);
                self.do_work(pid, &mut work, &mut lend, &mut spent);
                st = self.lock();
                keep_place_bufs(&mut st, &mut spent);
                continue;
            }
            if let Some(c) = slot.signal.take() {
                self.release(&mut st, pid);
                return Ok(c);
            }
            let asked = slot.wants_lead;
            if st.stopped {
                self.release(&mut st, pid);
                return Err(Error::NodeStopped);
            }
            let spin = spin_until.filter(|t| Instant::now() < *t);
            if lead && matches!(st.reader, Reader::None) || st.reader == Reader::Process(pid) {
                if st.reader == Reader::None {
                    st.reader_gen += 1;
                    st.reader = Reader::Process(pid);
                    if let Some(slot) = st.slots.get_mut(&pid) {
                        slot.wants_lead = false;
                    }
                    // It may have read the multicast socket so far in this
                    // wait: blocked on the unicast one, it would leave that
                    // socket unread (the multicast thread waits for the token).
                    self.release_multicast(&mut st, pid);
                }
                st.reader_blocked = spin.is_none();
                signal.ready.store(false, Ordering::Relaxed); // nothing for us yet: checked above
                let (mut buf, mut saved) = (std::mem::take(&mut st.rxbuf), std::mem::take(&mut st.rxsave));
                let in_place = match &lend {
                    Lend::Write(dest) => {
                        st.engine.next_placement(pid).filter(|&(at, len)| at >= HEADER_LEN && at + len <= dest.len())
                    }
                    _ => None,
                };
                drop(st);
                let spin = spin.map(|until| (&signal.ready, until));
                if let (Some((at, len)), Lend::Write(dest)) = (in_place, &mut lend) {
                    st = self.read_in_place(pid, dest, (at, len), (&mut buf, &mut saved), spin);
                } else {
                    let got = net::recv_parts(&self.unicast, &mut buf, &mut [], spin);
                    st = self.lock();
                    st.reader_blocked = false;
                    if let Some((n, from)) = got {
                        let origin = Origin::Net(Some(pid));
                        st = self.feed_received(st, from, &buf[..n], origin, |at, data| place(&mut lend, at, data));
                    }
                }
                (st.rxbuf, st.rxsave) = (buf, saved);
                st = self.flush_locked(st);
                continue;
            }
            if self.may_lead_multicast(&st, pid, mlead) {
                st = self.lead_multicast(st, pid, signal, &mut lend);
                continue;
            }
            // A follower. One that would lead asks for the token; if the
            // background thread holds it, blocked in a receive, it is woken
            // to hand the token over.
            if lead && !asked {
                if let Some(slot) = st.slots.get_mut(&pid) {
                    slot.wants_lead = true;
                }
                st.lead_waiters.push_back(pid);
            }
            if lead && matches!(st.reader, Reader::Background | Reader::Op) && st.reader_blocked && !st.kicked {
                st.kicked = true;
                st.wake_reader = true;
                st = self.flush_locked(st);
                continue;
            }
            if let Some(until) = spin {
                // Nothing for us yet (checked under the lock): clear a stale
                // flag, then spin on it without touching the lock; one that
                // would lead looks at the token again now and then.
                signal.ready.store(false, Ordering::Relaxed);
                drop(st);
                let check = if lead { (Instant::now() + SPIN_CHECK).min(until) } else { until };
                spin_on(signal, check, spinner.get_or_insert_with(net::Spin::cheap));
                if !lead {
                    if let Some(c) = signal.take() {
                        return Ok(c);
                    }
                }
                st = self.lock();
                continue;
            }
            if let Some(slot) = st.slots.get_mut(&pid) {
                slot.sleeping = true;
            }
            self.multicast_unattended(&mut st);
            st = signal.cv.wait(st).unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = st.slots.get_mut(&pid) {
                slot.sleeping = false;
            }
        }
    }

    /// Does the queued work on the lent buffer (outside the lock), in order;
    /// the placed data's buffers go to `spent`, for [`keep_place_bufs`].
    pub(super) fn do_work(&self, pid: Pid, work: &mut VecDeque<Work>, lend: &mut Lend<'_>, spent: &mut Vec<Vec<u8>>) {
        let mut i = 0;
        while i < work.len() {
            // Consecutive sends go together, in runs ([`crate::gso`]).
            let sends = work.range(i..).take_while(|w| matches!(w, Work::Send { .. })).count();
            if sends > 0 {
                self.send_lent(work.range(i..i + sends), lend);
                i += sends;
                continue;
            }
            match &mut work[i] {
                Work::Send { .. } => {} // sent above, with the sends after it
                Work::Place { offset, data } => {
                    place(lend, *offset, data);
                    spent.push(std::mem::take(data));
                }
                Work::Fetch => match lend {
                    Lend::Read(data) => {
                        let _ = self.call(Some(pid), |e, now| {
                            e.lent_segment(now, pid, data);
                            Ok(())
                        });
                    }
                    _ => tracing::debug!("a fetch of lent bytes from a call that lends none"),
                },
            }
            i += 1;
        }
        work.clear();
    }

    /// Sends lent chunks: `Work::Send`s, each a header and a range of the lent data.
    fn send_lent<'w>(&self, sends: impl Iterator<Item = &'w Work>, lend: &Lend<'_>) {
        let sock = &self.unicast;
        let chunks = sends.filter_map(|w| match w {
            Work::Send { to, head, lent } => Some((*to, &head[..], lent.offset, lent.len)),
            _ => None,
        });
        match lend {
            Lend::Read(data) => {
                let mut run = Run::new(sock, &self.gso, |to, (), parts| gso::send_logged(sock, to, parts));
                for (to, head, at, n) in chunks {
                    match data.get(at..at.saturating_add(n)) {
                        Some(bytes) => run.push(to, Part::new(head), Part::new(bytes), ()),
                        None => tracing::debug!("a lent chunk beyond the lent data"),
                    }
                }
                run.finish();
            }
            Lend::File(window) => window.send_all(sock, &self.gso, chunks),
            _ => tracing::debug!("a lent chunk for a call that lends no such data"),
        }
    }

    /// `pid` stops waiting: if it held the reader token (or the token is
    /// free), the token goes to a process sleeping for it or, failing one, is
    /// left for the background thread (after [`GRACE`]).
    pub(super) fn release(&self, st: &mut State, pid: Pid) {
        if let Some(slot) = st.slots.get_mut(&pid) {
            slot.sleeping = false;
            // Its place in the queue goes too: a process calling again and
            // again while another holds the token queued once per call.
            if std::mem::take(&mut slot.wants_lead) {
                st.lead_waiters.retain(|&p| p != pid);
            }
        }
        self.release_multicast(st, pid);
        if st.reader == Reader::Process(pid) {
            st.token_given_up();
        }
        // Also when `pid` was woken to take a free token but leaves without
        // it: somebody must read the socket.
        if st.reader == Reader::None {
            self.promote(st);
        }
    }

    /// The token is free: wake one process sleeping for it, else the parked
    /// background thread.
    pub(super) fn promote(&self, st: &mut State) {
        while let Some(p) = st.lead_waiters.pop_front() {
            if let Some(slot) = st.slots.get_mut(&p) {
                if slot.wants_lead {
                    slot.wants_lead = false;
                    if slot.sleeping {
                        slot.signal.cv.notify_one();
                    }
                    return;
                }
            }
        }
        if st.op_waiters > 0 && st.rmem_sleepers > 0 {
            self.rmem_cv.notify_all();
        }
        if st.bg_parked {
            self.bg_cv.notify_one();
        }
    }

    /// True if some process sleeps waiting for the token (drops stale entries).
    pub(super) fn has_lead_waiter(&self, st: &mut State) -> bool {
        while let Some(p) = st.lead_waiters.front() {
            if st.slots.get(p).is_some_and(|s| s.wants_lead) {
                return true;
            }
            st.lead_waiters.pop_front();
        }
        false
    }
}

/// A Receive leads (reads the socket while it waits) if one of the process's
/// completions came from the network this recently: an idle server that
/// hears nothing from the network leaves the socket to busier processes.
pub(super) const HOT: Duration = Duration::from_millis(100);

/// How often a spinning follower looks whether the reader token is free.
pub(super) const SPIN_CHECK: Duration = Duration::from_micros(2);

/// Spins until `signal`'s flag is set or `until` passes. While the thread
/// expected to answer last ran on our CPU, each round yields it the CPU.
/// A wait that keeps finding its answerer on its own CPU moves the thread
/// away (see [`apart`]).
pub(super) fn spin_on(signal: &Signal, until: Instant, spinner: &mut net::Spin) {
    let mut rounds = 0u32;
    let mut together = None;
    while !signal.ready.load(Ordering::Acquire) {
        rounds = rounds.wrapping_add(1);
        if rounds % 16 == 0 && Instant::now() >= until {
            break;
        }
        let peer = signal.peer_cpu.load(Ordering::Relaxed);
        if peer != NO_CPU && peer == current_cpu() {
            together = Some(peer);
            std::thread::yield_now();
        } else {
            spinner.pause();
        }
    }
    if let Some(cpu) = together {
        apart::after_wait(true, cpu);
    } else if rounds > 0 {
        apart::after_wait(false, NO_CPU);
    }
}

/// Placed data's buffers kept for the next ones (see `State::place_bufs`).
pub(super) const PLACE_BUFS: usize = 64;

/// Gives the buffers of placed data back to the node, up to [`PLACE_BUFS`]
/// of at most a datagram each (a larger one came from a local writer).
pub(super) fn keep_place_bufs(st: &mut State, spent: &mut Vec<Vec<u8>>) {
    let room = PLACE_BUFS.saturating_sub(st.place_bufs.len());
    st.place_bufs.extend(spent.drain(..).filter(|b| b.capacity() <= net::RECV_BUFFER).take(room));
}

/// Copies `data` to `offset` of the lent buffer.
pub(super) fn place(lend: &mut Lend<'_>, offset: usize, data: &[u8]) {
    match lend {
        Lend::Write(buf) => place_into(buf, offset, data),
        _ => tracing::debug!("lent data for a call that lends no such buffer"),
    }
}

/// Copies `data` to `offset` of `buf`, if it fits.
pub(super) fn place_into(buf: &mut [u8], offset: usize, data: &[u8]) {
    match buf.get_mut(offset..offset.saturating_add(data.len())) {
        Some(to) => to.copy_from_slice(data),
        None => tracing::debug!("lent data beyond the lent buffer"),
    }
}
