//! Where a blocked process waits: its slot, the signal that wakes it, the
//! buffer it lends, and the work only its own thread may do on that buffer.

use super::*;
use crate::filemap::FileWindow;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use vipc_engine::Lent;

/// Hashes the local pids that key the slots. They are ours, not chosen by
/// peers, so one multiplication suffices (no need for a keyed hash).
#[derive(Default)]
pub(super) struct PidHasher(u64);

impl std::hash::Hasher for PidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The slots, keyed by local pid.
pub(super) type Slots = HashMap<Pid, Slot, std::hash::BuildHasherDefault<PidHasher>>;

/// How a blocked thread learns that its slot has something for it (its
/// completion, or work on its lent buffer): a flag that a polling thread
/// spins on, and a condition variable it sleeps on. The completion itself
/// is kept here too, so that a thread that was only waiting (no reader
/// token, no lent buffer) takes it without the node's lock.
///
/// Aligned to its own cache lines: a spinning thread reads `ready` in a loop,
/// and must not share the line with another thread's signal or with the
/// reference counts of its `Arc`, which wakers touch.
#[repr(align(128))]
pub(crate) struct Signal {
    pub(super) ready: AtomicBool,
    /// The CPU its thread was on when it last began to wait.
    pub(super) cpu: AtomicUsize,
    /// The CPU of the thread this one last handed something to (the one
    /// that will most likely answer): spinning while it shares our CPU only
    /// keeps it from running.
    pub(super) peer_cpu: AtomicUsize,
    /// The pending call's state (put there under the node's lock).
    pub(super) done: Mutex<Done>,
    pub(super) cv: Condvar,
}

impl Signal {
    pub(super) fn new() -> Signal {
        Signal {
            ready: AtomicBool::new(false),
            cpu: AtomicUsize::new(NO_CPU),
            peer_cpu: AtomicUsize::new(NO_CPU),
            done: Mutex::new(Done::default()),
            cv: Condvar::new(),
        }
    }

    pub(super) fn done(&self) -> MutexGuard<'_, Done> {
        self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the completion, if delivered: the call is over.
    pub(super) fn take(&self) -> Option<Completion> {
        let mut done = self.done();
        let c = done.completion.take();
        if c.is_some() {
            done.in_call = false;
        }
        c
    }
}

/// A process's pending call, under its slot's own lock.
#[derive(Default)]
pub(super) struct Done {
    /// The call's completion, once delivered.
    pub(super) completion: Option<Completion>,
    /// A thread is in a blocking call of the process, from before the
    /// engine takes it until it collects the completion (or fails). The
    /// engine counts the process unblocked as soon as it delivers the
    /// completion, so another thread's call in that window was taken, and
    /// the two threads shared one slot (one took the other's reply, or
    /// waited for ever); such a call is refused with Busy.
    pub(super) in_call: bool,
}

/// `Signal::cpu` when unknown.
pub(super) const NO_CPU: usize = usize::MAX;

/// The CPU the calling thread runs on (a few ns: glibc reads it from rseq).
pub(super) fn current_cpu() -> usize {
    nix::sched::sched_getcpu().unwrap_or(NO_CPU)
}

/// The buffer a blocked call lends (zero-copy MoveTo / MoveFrom): only its
/// own thread touches it, so other threads queue [`Work`] for it.
pub(crate) enum Lend<'a> {
    /// Nothing lent.
    None,
    /// The data of a MoveTo.
    Read(&'a [u8]),
    /// The destination of a MoveFrom.
    Write(&'a mut [u8]),
    /// The data of a MoveTo, read from a file as they are sent.
    File(&'a FileWindow<'a>),
}

/// Something only the thread owning a lent buffer can do.
pub(super) enum Work {
    /// Send `head` followed by `lent` bytes of the buffer to `to`.
    Send { to: SocketAddr, head: Vec<u8>, lent: Lent },
    /// Copy `data` into the buffer at `offset`.
    Place { offset: usize, data: Vec<u8> },
    /// Give the engine the whole lent read-only buffer.
    Fetch,
}

/// Where a local process's completion is delivered.
pub(super) struct Slot {
    /// Work on the lent buffer, in order.
    pub(super) work: VecDeque<Work>,
    pub(super) signal: Arc<Signal>,
    /// The thread sleeps on `signal.cv` (filling the slot must notify it).
    pub(super) sleeping: bool,
    /// The thread sleeps waiting for the reader token (it is in `lead_waiters`).
    pub(super) wants_lead: bool,
    /// When a datagram from the unicast socket last completed one of its
    /// calls; None after a local one.
    pub(super) last_net: Option<Time>,
    /// The same for the multicast socket.
    pub(super) last_mcast: Option<Time>,
}

/// Threads to signal, and whether each sleeps on its condition variable.
pub(super) type Notify = Vec<(Arc<Signal>, bool)>;

thread_local! {
    /// An empty list with capacity, swapped with `State::notify` when a
    /// thread takes the signals to send out of the lock (no allocation per call).
    static NOTIFY_SPARE: std::cell::RefCell<Notify> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Takes the signals to send once the lock is released.
pub(super) fn take_notify(st: &mut State) -> Notify {
    if st.notify.is_empty() {
        return Vec::new();
    }
    let spare = NOTIFY_SPARE.with(|s| std::mem::take(&mut *s.borrow_mut()));
    std::mem::replace(&mut st.notify, spare)
}

/// Sets the flags (and wakes the sleepers) of `notify`, then keeps the
/// emptied list for this thread's next [`take_notify`].
pub(super) fn signal_all(notify: &mut Notify) {
    if notify.capacity() == 0 {
        return;
    }
    for (s, sleeping) in notify.drain(..) {
        s.ready.store(true, Ordering::Release);
        if sleeping {
            s.cv.notify_one();
        }
    }
    NOTIFY_SPARE.with(|s| {
        let mut s = s.borrow_mut();
        if s.capacity() < notify.capacity() {
            *s = std::mem::take(notify);
        }
    });
}
