//! Who reads the multicast socket: the multicast token.
//!
//! Group Sends arrive on the multicast socket. Read by the multicast thread,
//! each one destined to a member blocked in Receive costs a hand-off: the
//! thread wakes, feeds the engine and wakes the member, which then replies —
//! two threads woken per message on every member host. So, as with the
//! unicast socket's reader token, a process blocked in Receive whose
//! messages came from the multicast socket lately ("multicast-hot") takes
//! the multicast token and reads the socket itself while it waits: its own
//! group message then wakes nobody else.
//!
//! The token holder waits in `poll` on the socket and a doorbell (an
//! eventfd) rung when something else is for it — a completion that came
//! another way, or the node stopping. The multicast thread holds the token
//! when no process does: it polls the socket and its own doorbell, rung when
//! a process takes the token; when a process gives the token up, the thread
//! leaves it [`GRACE`] to come back (a member between two Receives) before
//! reading again, and sleeps while one process keeps it.
//!
//! Two readers may briefly overlap (the thread reading one datagram while a
//! process takes over): the engine does not depend on the order of
//! multicast datagrams (group Sends, their retransmissions, announcements),
//! only on that of a unicast stream, which is why the unicast token is strict.

use super::{Lend, MutexGuard, Origin, Shared, Signal, State, GRACE};
use crate::net;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use vipc_engine::Pid;

/// An eventfd that wakes whoever polls it; ringing twice before it is
/// heard wakes once.
pub(crate) struct Doorbell(EventFd);

impl Doorbell {
    pub(crate) fn new() -> std::io::Result<Doorbell> {
        Ok(Doorbell(EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?))
    }

    pub(crate) fn ring(&self) {
        if let Err(e) = self.0.write(1) {
            tracing::debug!("doorbell: {e}");
        }
    }

    /// Silences it (a ring after this is heard by the next wait).
    fn clear(&self) {
        let _ = self.0.read();
    }
}

/// The two doorbells of a node with multicast.
pub(crate) struct Bells {
    /// Rung for the process holding the token.
    pub(crate) holder: Doorbell,
    /// Rung for the multicast thread when a process takes the token.
    pub(crate) thread: Doorbell,
}

/// The token's state, under the node's lock.
#[derive(Default)]
pub(crate) struct Token {
    /// The process holding it; None: the multicast thread reads.
    pub(crate) holder: Option<Pid>,
    /// The holder is (about to be) in its poll: waking it takes its doorbell.
    pub(crate) holder_blocked: bool,
    /// Ring the holder's doorbell once the lock is released.
    pub(crate) wake_holder: bool,
    /// The multicast thread is (about to be) in its poll.
    thread_polling: bool,
    /// The thread sleeps until notified (one process has kept the token).
    thread_parked: bool,
    /// Counts the times a process took the token.
    taken: u64,
    /// Counts the times a process gave it up.
    released: u64,
    /// Datagrams read by the process they were for (no hand-off).
    pub(crate) by_receiver: u64,
    /// The holder's receive buffer.
    buf: net::RecvBuf,
    /// Whether the holder's next wait first tries a receive without polling.
    guess: Guess,
    /// A process went to sleep with the token free: the thread reads at once.
    skip_grace: bool,
}

/// The most waits a failed guess makes the holder skip guessing for.
const MAX_GUESS_GAP: u8 = 16;

/// Whether the next datagram is most likely there already when the holder
/// comes back to wait: under load it is, and one receive takes it without a
/// `poll` first (one system call per datagram, as a thread blocked in a
/// receive makes); in a request/response exchange it never is, and the
/// guess would cost a failed receive per message (about a tenth of a
/// member's system-call time in the groups bench). So a wrong guess makes
/// the holder skip guessing for a while — twice as long after each wrong
/// one, up to [`MAX_GUESS_GAP`] waits — and a right one keeps it guessing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Guess {
    /// The last wait read a datagram.
    busy: bool,
    /// Waits to skip before the next guess.
    skip: u8,
    /// Waits skipped after the last wrong guess.
    gap: u8,
}

impl Guess {
    /// Whether this wait should try a receive before polling (counts a skip).
    fn now(&mut self) -> bool {
        if !self.busy {
            return false;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// What the wait found: whether it `guessed`, whether the guess found a
    /// datagram (`hit`), and whether the wait read one at all (`got`).
    fn after(&mut self, guessed: bool, hit: bool, got: bool) {
        if guessed {
            self.gap = if hit { 0 } else { (self.gap * 2).clamp(1, MAX_GUESS_GAP) };
            self.skip = self.gap;
        }
        self.busy = got;
    }
}

/// Waits until `sock` has a datagram or `bell` rings, at most `limit`;
/// true if the socket is readable. The bell is silenced.
fn wait_readable(sock: &UdpSocket, bell: &Doorbell, limit: Duration) -> bool {
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN), PollFd::new(bell.0.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(limit).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, timeout) {
        Ok(_) => {
            if fds[1].any().unwrap_or(false) {
                bell.clear();
            }
            fds[0].any().unwrap_or(false)
        }
        Err(e) => {
            tracing::debug!("poll: {e}");
            false
        }
    }
}

/// One datagram if one is there now (the socket does not block: see
/// [`set_up`]).
fn recv_now(sock: &UdpSocket, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    match sock.recv_from(buf) {
        Ok(got) => Some(got),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None, // another reader took it
        Err(e) => {
            tracing::debug!("multicast receive: {e}");
            None
        }
    }
}

/// Makes the multicast socket non-blocking (every reader polls before it
/// receives, and two may find the same datagram ready) and the doorbells.
pub(crate) fn set_up(sock: &UdpSocket) -> std::io::Result<Bells> {
    sock.set_nonblocking(true)?;
    Ok(Bells { holder: Doorbell::new()?, thread: Doorbell::new()? })
}

impl Shared {
    /// Whether `pid`, about to wait in Receive, should read the multicast
    /// socket: it is multicast-hot and no other process holds the token.
    pub(super) fn may_lead_multicast(&self, st: &State, pid: Pid, hot: bool) -> bool {
        hot && self.bells.is_some() && st.mcast.holder.is_none_or(|h| h == pid)
    }

    /// `pid` holds (or takes) the token and reads one multicast datagram,
    /// or until its doorbell rings or [`net::RECV_POLL`] passes; returns with
    /// the lock held.
    pub(super) fn lead_multicast<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        pid: Pid,
        signal: &Signal,
        lend: &mut Lend<'_>,
    ) -> MutexGuard<'a, State> {
        let (Some(sock), Some(bells)) = (self.multicast.as_ref(), self.bells.as_ref()) else { return st };
        let took = st.mcast.holder != Some(pid);
        if took {
            st.mcast.holder = Some(pid);
            st.mcast.taken += 1;
        }
        let kick = took && st.mcast.thread_polling;
        let guess = st.mcast.guess.now();
        st.mcast.holder_blocked = true;
        if let Some(slot) = st.slots.get_mut(&pid) {
            slot.wants_lead = false; // not also waiting for the unicast token
        }
        signal.ready.store(false, Ordering::Relaxed); // nothing for us yet: checked by the caller
        let mut buf = std::mem::take(&mut st.mcast.buf);
        if buf.is_empty() {
            buf = net::RecvBuf::new();
        }
        drop(st);
        if kick {
            bells.thread.ring();
        }
        let mut got = if guess { recv_now(sock, &mut buf) } else { None };
        let hit = got.is_some();
        if !hit && wait_readable(sock, &bells.holder, net::RECV_POLL) {
            got = recv_now(sock, &mut buf);
        }
        let mut st = self.lock();
        st.mcast.holder_blocked = false;
        st.mcast.guess.after(guess, hit, got.is_some());
        if let Some((n, from)) = got {
            let had = signal.done().completion.is_some();
            if let Some((offset, range)) = self.feed(&mut st, from, &buf[..n], Origin::Multicast(Some(pid))) {
                drop(st);
                super::wait::place(lend, offset, &buf[range]);
                st = self.lock();
            }
            if !had && signal.done().completion.is_some() {
                st.mcast.by_receiver += 1;
            }
        }
        st.mcast.buf = buf;
        self.flush_locked(st)
    }

    /// A process is going to sleep without reading any socket: if the
    /// multicast token is free, the thread reads now instead of leaving the
    /// token its [`GRACE`] (the process that gave it up may be this one, or
    /// busy elsewhere: nobody would read the socket meanwhile).
    pub(super) fn multicast_unattended(&self, st: &mut State) {
        if self.bells.is_some() && st.mcast.holder.is_none() && !st.mcast.thread_polling && !st.mcast.skip_grace {
            st.mcast.skip_grace = true;
            self.mcast_cv.notify_one();
        }
    }

    /// `pid` stops waiting: the token, if it held it, goes back to the thread.
    pub(super) fn release_multicast(&self, st: &mut State, pid: Pid) {
        if st.mcast.holder == Some(pid) {
            st.mcast.holder = None;
            st.mcast.released += 1;
            if st.mcast.thread_parked {
                self.mcast_cv.notify_one();
            }
        }
    }
}

/// The multicast thread: reads the multicast socket while no process holds
/// the token, feeding every datagram to the engine.
pub(crate) fn multicast_loop(shared: Arc<Shared>) {
    let (Some(sock), Some(bells)) = (shared.multicast.as_ref(), shared.bells.as_ref()) else { return };
    let mut buf = net::RecvBuf::new();
    let (mut seen_taken, mut seen_released) = (u64::MAX, u64::MAX);
    let mut st = shared.lock();
    loop {
        if st.stopped {
            return;
        }
        if st.mcast.holder.is_some() {
            if st.mcast.taken == seen_taken {
                // One process has held it for a whole GRACE: sleep until it lets go.
                st.mcast.thread_parked = true;
                st = shared.mcast_cv.wait(st).unwrap_or_else(|e| e.into_inner());
                st.mcast.thread_parked = false;
            } else {
                seen_taken = st.mcast.taken;
                st = shared.mcast_cv.wait_timeout(st, GRACE).unwrap_or_else(|e| e.into_inner()).0;
            }
            continue;
        }
        if st.mcast.released != seen_released && !std::mem::take(&mut st.mcast.skip_grace) {
            // Given up since we last looked: leave it a GRACE to come back.
            seen_released = st.mcast.released;
            st = shared.mcast_cv.wait_timeout(st, GRACE).unwrap_or_else(|e| e.into_inner()).0;
            continue;
        }
        seen_released = st.mcast.released;
        st.mcast.skip_grace = false;
        st.mcast.thread_polling = true;
        drop(st);
        let got = if wait_readable(sock, &bells.thread, net::RECV_POLL) { recv_now(sock, &mut buf) } else { None };
        st = shared.lock();
        st.mcast.thread_polling = false;
        if st.stopped {
            return;
        }
        if let Some((n, from)) = got {
            shared.feed(&mut st, from, &buf[..n], Origin::Multicast(None));
            st = shared.flush_locked(st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `waits` waits whose guesses all miss; returns which ones guessed.
    fn guesses_missing(g: &mut Guess, waits: usize) -> Vec<bool> {
        (0..waits)
            .map(|_| {
                let guessed = g.now();
                g.after(guessed, false, true);
                guessed
            })
            .collect()
    }

    #[test]
    fn wrong_guesses_space_out_and_a_right_one_resumes_guessing() {
        let mut g = Guess { busy: true, ..Guess::default() };
        let seen = guesses_missing(&mut g, 40);
        let at: Vec<usize> = seen.iter().enumerate().filter(|(_, &x)| x).map(|(i, _)| i).collect();
        // Gaps of 1, 2, 4, 8, 16, 16 waits between guesses.
        assert_eq!(at, [0, 2, 5, 10, 19, 36]);
        // A guess that finds a datagram: guessing at every wait again.
        while !g.now() {}
        g.after(true, true, true);
        assert!(g.now() && g.now(), "after a right guess every wait guesses");
    }

    #[test]
    fn no_guess_after_a_wait_that_read_nothing() {
        let mut g = Guess { busy: true, ..Guess::default() };
        assert!(g.now());
        g.after(true, false, false);
        assert_eq!(g, Guess { busy: false, skip: 1, gap: 1 });
        assert!(!g.now() && !g.now(), "an idle holder polls");
    }
}
