//! A gate as a logical process of the conservative algorithm: one FIFO
//! queue of timestamped changes per input pin, each with a clock (the time
//! of the last message on it, change or null). The gate may simulate up to
//! the smallest clock, and after doing so promises, by a null message, no
//! change before that time plus its delay. A pin's messages come in time
//! order, so nothing earlier can arrive later.

use super::circuit::{Kind, Vector, PERIOD};
use std::collections::VecDeque;

/// A message on a channel: a change (`Some`) or a null message (`None`) at a time.
pub(crate) type Msg = (u64, Option<bool>);

#[derive(Debug, Default)]
struct Pin {
    changes: VecDeque<(u64, bool)>,
    clock: u64,
    value: bool,
}

/// One gate's process.
#[derive(Debug)]
pub(crate) struct Lp {
    kind: Kind,
    pins: Vec<Pin>,
    /// The last value it sent.
    out: bool,
    /// The time of the last message it sent.
    sent: u64,
    /// Simulated up to here.
    lvt: u64,
}

impl Lp {
    pub(crate) fn new(kind: Kind, pins: usize) -> Lp {
        Lp { kind, pins: (0..pins).map(|_| Pin::default()).collect(), out: false, sent: 0, lvt: 0 }
    }

    /// Takes a message for `pin`; one for a pin it does not have (a peer's
    /// mistake, or bytes from another host) is dropped.
    pub(crate) fn deliver(&mut self, pin: usize, (time, change): Msg) {
        let Some(p) = self.pins.get_mut(pin) else { return };
        p.clock = p.clock.max(time);
        if let Some(v) = change {
            p.changes.push_back((time, v));
        }
    }

    /// Done: it has sent its last message (one at or after `end`), and has
    /// every pin's last one, so nothing more is on its way to it.
    pub(crate) fn done(&self, end: u64) -> bool {
        self.sent >= end && self.pins.iter().all(|p| p.clock >= end)
    }

    /// Simulates as far as its pins allow, appending what it sends to `out`;
    /// false if it could not move.
    pub(crate) fn step(&mut self, gate: usize, vectors: &[Vector], end: u64, out: &mut Vec<Msg>) -> bool {
        if self.sent >= end {
            return false;
        }
        let d = self.kind.delay();
        if self.kind == Kind::Input {
            for (k, v) in vectors.iter().enumerate() {
                self.send(k as u64 * PERIOD + d, v.bit(gate), out);
            }
            self.close(end, out);
            return true;
        }
        let safe = self.pins.iter().map(|p| p.clock).min().unwrap_or(0);
        if safe <= self.lvt {
            return false;
        }
        while let Some(t) = self.pins.iter().filter_map(|p| p.changes.front().map(|c| c.0)).filter(|&t| t <= safe).min()
        {
            for p in &mut self.pins {
                if let Some(&(_, v)) = p.changes.front().filter(|c| c.0 == t) {
                    p.value = v;
                    p.changes.pop_front();
                }
            }
            let v = self.kind.eval(self.pins[0].value, self.pins[1].value);
            self.send(t.saturating_add(d), v, out);
        }
        self.lvt = safe;
        if safe.saturating_add(d) >= end {
            self.close(end, out);
        } else if safe + d > self.sent {
            self.sent = safe + d;
            out.push((self.sent, None));
        }
        true
    }

    /// Sends a change at `t` if `v` is not what it last sent.
    fn send(&mut self, t: u64, v: bool, out: &mut Vec<Msg>) {
        if v != self.out {
            self.out = v;
            self.sent = t;
            out.push((t, Some(v)));
        }
    }

    /// The last message: a null at `end` unless a change at or after it went already.
    fn close(&mut self, end: u64, out: &mut Vec<Msg>) {
        if self.sent < end {
            self.sent = end;
            out.push((end, None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_for_a_pin_it_lacks_or_at_the_end_of_time_is_harmless() {
        let mut input = Lp::new(Kind::Input, 0);
        input.deliver(0, (5, Some(true)));
        input.deliver(usize::MAX, (5, None));
        let mut and = Lp::new(Kind::And, 2);
        and.deliver(0, (u64::MAX, Some(true)));
        and.deliver(1, (u64::MAX, Some(true)));
        let mut out = Vec::new();
        assert!(and.step(0, &[], u64::MAX, &mut out), "it moves to the end of time without overflowing");
    }
}
