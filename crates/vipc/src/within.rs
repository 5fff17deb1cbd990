//! Timeouts around any block — 002's completion statement. `within(d, f)`
//! bounds every blocking primitive `f` calls on this thread (Send, Receive,
//! MoveTo, MoveFrom, group Sends, GetReply, remote-memory waits) by one
//! deadline `d` from now; the first call still blocked when it passes fails
//! with [`Error::Protocol`]`(`[`ProtocolError::Deadline`](vipc_engine::Error::Deadline)`)`
//! ([`Error::is_deadline`]), and so does every later call inside `f`. The
//! caller decides whether to retry or abandon. Nested `within`s keep the
//! earlier deadline.

use crate::{Error, Result};
use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with every blocking primitive it calls on this thread bounded
/// by `limit` from now — 002's completion statement: the first call still
/// blocked at the deadline fails with a deadline error
/// ([`Error::is_deadline`]), and so does every later call inside `f`;
/// nested `within`s keep the earlier deadline.
///
/// ```
/// use std::time::Duration;
/// use vipc::{Node, NodeConfig};
/// # fn main() -> Result<(), vipc::Error> {
/// let node = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
/// let me = node.attach()?;
/// let mut msg = [0u8; 32];
/// // Nobody sends to us: the Receive ends after 20 ms with a typed error.
/// let r = vipc::within(Duration::from_millis(20), || me.receive(&mut msg));
/// assert!(r.unwrap_err().is_deadline());
/// # Ok(()) }
/// ```
pub fn within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let at = Instant::now().checked_add(limit);
    let outer = DEADLINE.get();
    let inner = match (outer, at) {
        (Some(o), Some(a)) => Some(o.min(a)),
        (o, a) => o.or(a),
    };
    /// Puts the outer deadline back even if `f` panics.
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
        }
    }
    let _restore = Restore(outer);
    DEADLINE.set(inner);
    f()
}

/// `now + d`, or a century from now if that overflows: a limit of
/// `Duration::MAX` means "no limit" to every wait, never a panic.
pub fn deadline_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Runs `f` outside the deadline of any enclosing [`within`] (the deadline
/// is back once `f` returns or panics): for a call that must be made even
/// after the deadline, such as handing back a result its sender waits for,
/// or one that cannot block.
pub fn without_limit<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEADLINE.set(self.0);
        }
    }
    let _restore = Restore(DEADLINE.replace(None));
    f()
}

/// The time left before this thread's deadline: `None` without one, an
/// error once it has passed.
pub(crate) fn remaining() -> Result<Option<Duration>> {
    match DEADLINE.get() {
        None => Ok(None),
        Some(at) => match at.checked_duration_since(Instant::now()) {
            Some(d) if !d.is_zero() => Ok(Some(d)),
            _ => Err(vipc_engine::Error::Deadline.into()),
        },
    }
}

/// `wait` capped by this thread's deadline (for calls that take their own limit).
pub(crate) fn cap(wait: Duration) -> Result<Duration> {
    Ok(remaining()?.map_or(wait, |left| left.min(wait)))
}

impl Error {
    /// Whether the caller's own deadline ([`within`]) ended the call.
    pub fn is_deadline(&self) -> bool {
        matches!(self, Error::Protocol(vipc_engine::Error::Deadline))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_limits_keep_the_earlier_deadline_and_restore_the_outer() {
        assert!(remaining().unwrap().is_none());
        within(Duration::from_millis(50), || {
            let outer = remaining().unwrap().unwrap();
            within(Duration::from_secs(60), || {
                assert!(remaining().unwrap().unwrap() <= outer, "a later inner deadline does not extend the outer");
            });
            within(Duration::from_millis(1), || {
                assert!(remaining().unwrap().unwrap() <= Duration::from_millis(1));
            });
            assert!(remaining().unwrap().unwrap() > Duration::from_millis(1));
        });
        assert!(remaining().unwrap().is_none());
    }

    #[test]
    fn a_passed_deadline_is_a_typed_error_and_caps_waits() {
        within(Duration::ZERO, || {
            assert!(remaining().unwrap_err().is_deadline());
            assert!(cap(Duration::from_secs(1)).unwrap_err().is_deadline());
        });
        assert_eq!(cap(Duration::from_secs(1)).unwrap(), Duration::from_secs(1));
    }

    #[test]
    fn without_limit_lifts_the_deadline_and_puts_it_back_even_after_a_panic() {
        within(Duration::ZERO, || {
            without_limit(|| assert!(remaining().unwrap().is_none()));
            assert!(remaining().unwrap_err().is_deadline());
            let r = std::panic::catch_unwind(|| without_limit(|| panic!("in f")));
            assert!(r.is_err());
            assert!(remaining().unwrap_err().is_deadline(), "the deadline is back after a panic");
        });
    }

    #[test]
    fn a_panic_inside_restores_the_outer_deadline() {
        let r = std::panic::catch_unwind(|| within(Duration::from_millis(5), || panic!("boom")));
        assert!(r.is_err());
        assert!(remaining().unwrap().is_none());
    }
}
