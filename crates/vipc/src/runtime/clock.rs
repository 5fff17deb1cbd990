//! The node's clocks: a coarse one read on every call (the engine's time)
//! and a precise one for limits that must not pass early.

use super::*;
use std::time::Instant;

/// CLOCK_MONOTONIC_COARSE in nanoseconds: CLOCK_MONOTONIC read at the last
/// tick ([`precise_now`] itself on a kernel without it, before 2.6.32), so
/// the two share one time base and this one is never ahead.
pub(super) fn coarse_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE).map_or_else(|_| precise_now(), ns)
}

/// CLOCK_MONOTONIC in nanoseconds (the time since the first call if even
/// that clock fails, which Linux does not let it).
pub(super) fn precise_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or_else(
        |_| {
            static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
            START.get_or_init(Instant::now).elapsed().as_nanos().min(u64::MAX as u128) as u64
        },
        ns,
    )
}

pub(super) fn ns(t: nix::sys::time::TimeSpec) -> u64 {
    (t.tv_sec() as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec() as u64)
}

pub(super) fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    /// A limit counted from the precise time (`Shared::block`) never passes
    /// early only if the coarse clock is the same clock, never ahead of it.
    #[test]
    fn the_coarse_clock_is_never_ahead_of_the_precise_one() {
        let mut behind = 0u64;
        for _ in 0..100_000 {
            let coarse = super::coarse_now();
            let precise = super::precise_now();
            assert!(precise >= coarse, "precise {precise} < coarse {coarse}");
            behind = behind.max(precise - coarse);
        }
        // The same time base: a lag of ticks, never of seconds.
        assert!(behind < 1_000_000_000, "the clocks are {behind} ns apart");
    }
}
