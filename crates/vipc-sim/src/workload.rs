//! The random workload: what requests clients make and what servers do with them.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;
use vipc_engine::Access;

/// The misuse a step deliberately commits; the engine must refuse it with a typed error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misuse {
    /// The access needed was not granted: `Error::NoAccess`.
    NoAccess,
    /// The range lies outside the segment: `Error::OutOfSegment`.
    OutOfSegment,
}

/// One operation of the executing server between Receive and Reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// MoveFrom `len` bytes at `off` of the client's segment.
    MoveFrom {
        /// Offset.
        off: u32,
        /// Length.
        len: u32,
        /// Set if the move is a deliberate misuse that must fail.
        misuse: Option<Misuse>,
    },
    /// MoveTo `len` bytes (the server's pattern) at `off`.
    MoveTo {
        /// Offset.
        off: u32,
        /// Length.
        len: u32,
        /// Set if the move is a deliberate misuse that must fail.
        misuse: Option<Misuse>,
    },
}

/// What the server that executes a request does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Moves, in order.
    pub steps: Vec<Step>,
    /// Reply with a segment `(offset, len)` of the server's pattern.
    pub reply_segment: Option<(u32, u32)>,
    /// Try to reply with a segment too large for one packet first (must be refused).
    pub oversized_reply: bool,
    /// Think time before replying.
    pub delay: Duration,
    /// After replying, reply again (must fail with `NotAwaitingReply`).
    pub double_reply: bool,
}

impl Plan {
    /// Every range `(offset, len)` a server may write into the client's segment.
    pub fn write_ranges(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .steps
            .iter()
            .filter_map(|s| match *s {
                Step::MoveTo { off, len, misuse: None } => Some((off as u64, len as u64)),
                _ => None,
            })
            .collect();
        v.extend(self.reply_segment.map(|(o, l)| (o as u64, l as u64)));
        v
    }
}

/// A random segment size: small ones mostly, up to 64 KiB, rarely 1 MiB.
pub fn segment_size(rng: &mut ChaCha8Rng, big: f64) -> u32 {
    if rng.gen_bool(big) {
        1 << 20
    } else if rng.gen_bool(0.6) {
        rng.gen_range(1..=2048)
    } else {
        rng.gen_range(2049..=65536)
    }
}

/// A random range inside a segment of `size` bytes (non-empty when `size > 0`).
fn range(rng: &mut ChaCha8Rng, size: u32) -> (u32, u32) {
    let len = if rng.gen_bool(0.2) { size } else { rng.gen_range(1..=size.clamp(1, 16 * 1024)) };
    let off = rng.gen_range(0..=size - len);
    (off, len)
}

/// A random plan for a request whose segment is `size` bytes with `access`.
/// `max_reply` is the largest reply segment that fits in one packet.
pub fn plan(rng: &mut ChaCha8Rng, size: u32, access: Access, max_reply: u32) -> Plan {
    let mut p = Plan::default();
    if size > 0 {
        for _ in 0..rng.gen_range(0..=3) {
            let (off, len) = range(rng, size);
            let step = match (access.read, access.write, rng.gen_bool(0.5)) {
                (true, true, true) | (true, false, _) => Step::MoveFrom { off, len, misuse: None },
                (_, true, _) => Step::MoveTo { off, len, misuse: None },
                (false, false, _) => continue,
            };
            p.steps.push(step);
        }
        if rng.gen_bool(0.05) {
            // A deliberate misuse: the engine must refuse it.
            let step = match (rng.gen_bool(0.5), access.read, access.write) {
                (true, false, _) => Step::MoveFrom { off: 0, len: 1, misuse: Some(Misuse::NoAccess) },
                (false, _, false) => Step::MoveTo { off: 0, len: 1, misuse: Some(Misuse::NoAccess) },
                (_, true, _) => Step::MoveFrom { off: size, len: 1, misuse: Some(Misuse::OutOfSegment) },
                (_, _, true) => Step::MoveTo { off: size - 1, len: 2, misuse: Some(Misuse::OutOfSegment) },
            };
            let at = rng.gen_range(0..=p.steps.len());
            p.steps.insert(at, step);
        }
        if access.write && rng.gen_bool(0.3) {
            let len = rng.gen_range(1..=size.min(max_reply));
            let off = rng.gen_range(0..=size - len);
            p.reply_segment = Some((off, len));
            p.oversized_reply = size > max_reply && rng.gen_bool(0.1);
        }
    }
    p.delay = match rng.gen_range(0..100) {
        0..=69 => Duration::ZERO,
        70..=97 => Duration::from_micros(rng.gen_range(0..60_000)),
        _ => Duration::from_millis(rng.gen_range(1200..2000)),
    };
    p.double_reply = rng.gen_bool(0.02);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn plans_stay_inside_the_segment_unless_misusing() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut misuses = 0;
        for _ in 0..5000 {
            let size = segment_size(&mut rng, 0.01);
            let access = Access { read: rng.gen(), write: rng.gen() };
            let p = plan(&mut rng, size, access, 1400);
            for s in &p.steps {
                let (off, len, misuse, needs) = match *s {
                    Step::MoveFrom { off, len, misuse } => (off, len, misuse, access.read),
                    Step::MoveTo { off, len, misuse } => (off, len, misuse, access.write),
                };
                match misuse {
                    None => assert!(needs && len > 0 && off as u64 + len as u64 <= size as u64),
                    Some(Misuse::NoAccess) => {
                        misuses += 1;
                        assert!(!needs)
                    }
                    Some(Misuse::OutOfSegment) => {
                        misuses += 1;
                        assert!(needs && off as u64 + len as u64 > size as u64)
                    }
                }
            }
            if let Some((off, len)) = p.reply_segment {
                assert!(access.write && len <= 1400 && off + len <= size, "{off}+{len} of {size}");
            }
        }
        assert!(misuses > 50);
    }
}
