//! Engine time: nanoseconds on a clock the caller owns (real or virtual).

use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an epoch chosen by the caller.
/// The engine never reads a clock: every entry point is given `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);

    /// Time elapsed since `earlier` (zero if `earlier` is later).
    pub fn since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, d: Duration) -> Time {
        Time(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

impl Sub<Time> for Time {
    type Output = Duration;
    fn sub(self, earlier: Time) -> Duration {
        self.since(earlier)
    }
}
