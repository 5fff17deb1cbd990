//! Spinning pairs that share a CPU: moving one of them away.
//!
//! With `poll_spin`, two local processes exchanging messages each spin
//! while the other works. On different CPUs an exchange costs about a
//! microsecond. On the same CPU each must yield for the other to run, and
//! an exchange costs two context switches (four times as long). The
//! scheduler does not always separate them: each yields, so both look
//! briefly runnable and then not, and the idle CPU's balancing pulls
//! neither. So a thread that found its answerer on its own CPU for
//! [`TOGETHER`] waits in a row (and has not moved for [`COOL_DOWN`]) moves
//! itself to another CPU it may run on — by narrowing its affinity to that
//! CPU and restoring the original mask at once (the thread stays where it
//! was moved until the scheduler decides otherwise).

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid as OsPid;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// Waits in a row that found the answerer on our CPU before we move.
const TOGETHER: u32 = 64;

/// A thread moves at most once in this long (two threads that moved
/// together, to the same CPU, try again after it).
const COOL_DOWN: Duration = Duration::from_millis(20);

thread_local! {
    /// Consecutive waits that yielded to a co-located answerer.
    static STREAK: Cell<u32> = const { Cell::new(0) };
    /// When this thread last moved.
    static MOVED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Notes how one wait went: `together` if it yielded to an answerer on our
/// CPU `cpu`. Moves the thread to another CPU when that keeps happening.
pub(super) fn after_wait(together: bool, cpu: usize) {
    if !together {
        STREAK.with(|s| s.set(0));
        return;
    }
    let streak = STREAK.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let cooled = MOVED.with(|m| m.get().is_none_or(|t| t.elapsed() >= COOL_DOWN));
    // The threshold differs a little between threads (by thread id), so
    // that the two of a pair rarely move at the same wait.
    if streak >= TOGETHER + own_jitter() && cooled {
        STREAK.with(|s| s.set(0));
        MOVED.with(|m| m.set(Some(Instant::now())));
        move_off(cpu);
    }
}

/// 0..32, fixed per thread.
fn own_jitter() -> u32 {
    (nix::unistd::gettid().as_raw() as u32).wrapping_mul(0x9E37_79B9) >> 27
}

/// Moves the calling thread off `cpu` to another CPU of its affinity mask,
/// then restores the mask. Does nothing if it may run on no other CPU.
fn move_off(cpu: usize) {
    let me = OsPid::from_raw(0);
    let Ok(mask) = sched_getaffinity(me) else { return };
    let Some(to) = other_cpu(cpu, CpuSet::count(), |c| mask.is_set(c).unwrap_or(false)) else { return };
    let mut only = CpuSet::new();
    if only.set(to).is_ok() && sched_setaffinity(me, &only).is_ok() {
        if let Err(e) = sched_setaffinity(me, &mask) {
            tracing::warn!("could not restore the CPU affinity of a spinning thread: {e}");
        }
    }
}

/// The next allowed CPU after `cpu` (wrapping), not `cpu` itself.
fn other_cpu(cpu: usize, count: usize, allowed: impl Fn(usize) -> bool) -> Option<usize> {
    (1..count).map(|i| (cpu + i) % count).find(|&c| allowed(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_cpu_is_the_next_allowed_one() {
        assert_eq!(other_cpu(0, 4, |_| true), Some(1));
        assert_eq!(other_cpu(3, 4, |_| true), Some(0));
        assert_eq!(other_cpu(1, 4, |c| c == 0 || c == 1), Some(0));
        assert_eq!(other_cpu(1, 4, |c| c == 1), None, "no other CPU allowed");
        assert_eq!(other_cpu(0, 1, |_| true), None);
    }

    #[test]
    fn a_thread_moves_only_after_a_streak_and_keeps_its_affinity() {
        // Exercises the real system calls: after the streak the thread has
        // moved off its CPU if it may run elsewhere, and its mask is the
        // one it had.
        std::thread::spawn(|| {
            let me = OsPid::from_raw(0);
            let before = sched_getaffinity(me).unwrap();
            let allowed = (0..CpuSet::count()).filter(|&c| before.is_set(c).unwrap_or(false)).count();
            let cpu = nix::sched::sched_getcpu().unwrap();
            after_wait(false, cpu);
            for _ in 0..TOGETHER - 1 {
                after_wait(true, cpu);
            }
            assert!(MOVED.with(|m| m.get()).is_none(), "moved before the streak");
            for _ in 0..=32 {
                after_wait(true, cpu);
            }
            assert!(MOVED.with(|m| m.get()).is_some(), "did not move after the streak");
            if allowed > 1 {
                assert_ne!(nix::sched::sched_getcpu().unwrap(), cpu, "still on CPU {cpu}");
            }
            let after = sched_getaffinity(me).unwrap();
            for c in 0..CpuSet::count() {
                assert_eq!(before.is_set(c).unwrap(), after.is_set(c).unwrap(), "mask changed at CPU {c}");
            }
        })
        .join()
        .unwrap();
    }
}
