//! Where a latency probe's threads run.
//!
//! On a VM whose idle vCPUs halt at once (Firecracker with guest halt-polling
//! off, as here), waking a thread on the other, idle vCPU costs tens of µs
//! more than waking one on the waker's own: a blocking UDP ping-pong between
//! two processes took 14 µs with both on one CPU and 79 µs with one on each
//! (`taskset`, medians). Left to the scheduler, a pair lands on one CPU or on
//! two from probe to probe, so the ratio of two probes compared whichever
//! mix each drew (the same run once had the vipc exchange at 0.28 × UDP and
//! a remote read at 3.5 × it). Latency items therefore place their threads:
//! blocking probes, both ends, on one CPU ([`Cpus::home`]), where a figure is
//! the software's own cost per round trip; busy-polling probes with the
//! client on one CPU and the server on the other ([`Cpus::away`]), where
//! polling belongs. Threads inherit their creator's placement, and child
//! processes their parent's, so a peer or node started inside [`on`] stays
//! there.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The two CPUs the latency items use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    /// Where the bench's own thread and every blocking probe run.
    pub home: usize,
    /// Where a busy-polling server runs (the same CPU if only one is allowed).
    pub away: usize,
}

impl Cpus {
    /// No placement: [`Pinned::to`] either CPU leaves a thread where it was.
    pub const NONE: Cpus = Cpus { home: usize::MAX, away: usize::MAX };

    /// The first two CPUs this thread may run on, or `None` if the affinity
    /// cannot be read (then nothing is placed).
    pub fn allowed() -> Option<Cpus> {
        let set = sched_getaffinity(None).ok()?;
        let mut ids = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c));
        let home = ids.next()?;
        Some(Cpus { home, away: ids.next().unwrap_or(home) })
    }
}

/// This thread held to one CPU until dropped, then given back what it had.
#[derive(Debug)]
pub struct Pinned {
    before: Option<CpuSet>,
}

impl Pinned {
    /// Holds this thread to `cpu`, also from inside another placement (a CPU
    /// the system does not let it run on is ignored: the placement stays as
    /// it was and the figures are measured unplaced).
    pub fn to(cpu: usize) -> Pinned {
        let Some(before) = sched_getaffinity(None).ok().filter(|_| cpu < CpuSet::MAX_CPU) else {
            return Pinned { before: None };
        };
        let mut only = CpuSet::new();
        only.set(cpu);
        match sched_setaffinity(None, &only) {
            Ok(()) => Pinned { before: Some(before) },
            Err(_) => Pinned { before: None },
        }
    }

    /// True if the thread was placed.
    pub fn placed(&self) -> bool {
        self.before.is_some()
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(set) = &self.before {
            let _ = sched_setaffinity(None, set);
        }
    }
}

/// Runs `f` with this thread held to `cpu`: whatever `f` starts (threads,
/// child processes) stays on `cpu` after it returns.
pub fn on<T>(cpu: usize, f: impl FnOnce() -> T) -> T {
    let _pin = Pinned::to(cpu);
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_there_and_gets_its_placement_back() {
        let Some(cpus) = Cpus::allowed() else {
            vipc::testing::skipped("this thread's CPU affinity cannot be read");
            return;
        };
        let before = sched_getaffinity(None).expect("affinity");
        for cpu in [cpus.home, cpus.away] {
            // Also from inside another placement.
            let outer = Pinned::to(if cpu == cpus.home { cpus.away } else { cpus.home });
            let pin = Pinned::to(cpu);
            assert!(pin.placed());
            // A thread started now inherits the placement.
            let inherited =
                std::thread::spawn(|| sched_getaffinity(None).expect("affinity").count()).join().expect("thread");
            assert_eq!(inherited, 1);
            assert_eq!(rustix::thread::sched_getcpu(), cpu);
            drop(pin);
            assert!(outer.placed());
            drop(outer);
            assert_eq!(sched_getaffinity(None).expect("affinity").count(), before.count());
        }
    }

    #[test]
    fn a_cpu_not_allowed_leaves_the_placement_alone() {
        let before = sched_getaffinity(None).expect("affinity").count();
        for cpu in [CpuSet::MAX_CPU - 1, Cpus::NONE.home, Cpus::NONE.away] {
            let pin = Pinned::to(cpu);
            assert!(!pin.placed());
            assert_eq!(sched_getaffinity(None).expect("affinity").count(), before);
            assert_eq!(on(cpu, || 7), 7);
        }
    }
}
