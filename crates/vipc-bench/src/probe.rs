//! Running measurements side by side: each probe times one operation; the
//! probes of one table run round-robin, a round of each in turn, so that
//! every figure and its baseline see the same state of the (shared, noisy)
//! machine.

use crate::error::Result;
use crate::stats::Rounds;
use std::time::Duration;

/// One timed operation, repeated.
pub struct Probe<'a> {
    /// Its name (the record's name or baseline).
    pub name: String,
    /// Operations per round.
    pub per_round: usize,
    /// Runs the operation once and returns the figure of that run (µs, MB/s, …).
    op: Box<dyn FnMut() -> Result<f64> + 'a>,
    /// The figures, round by round.
    pub rounds: Rounds,
}

impl std::fmt::Debug for Probe<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").field("name", &self.name).field("rounds", &self.rounds.len()).finish()
    }
}

impl<'a> Probe<'a> {
    /// A probe running `op` `per_round` times a round.
    pub fn new(name: &str, per_round: usize, op: impl FnMut() -> Result<f64> + 'a) -> Probe<'a> {
        Probe { name: name.to_string(), per_round: per_round.max(1), op: Box::new(op), rounds: Rounds::new() }
    }

    /// A probe whose operation returns a duration, recorded in microseconds.
    pub fn micros(name: &str, per_round: usize, mut op: impl FnMut() -> Result<Duration> + 'a) -> Probe<'a> {
        Probe::new(name, per_round, move || Ok(op()?.as_secs_f64() * 1e6))
    }

    fn round(&mut self, n: usize) -> Result<Vec<f64>> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push((self.op)()?);
        }
        Ok(v)
    }
}

/// Warms every probe up with `warmup` operations, then runs `rounds` rounds
/// of each probe in turn.
pub fn interleave(probes: &mut [Probe<'_>], rounds: usize, warmup: usize) -> Result<()> {
    for p in probes.iter_mut() {
        p.round(warmup.min(p.per_round))?;
    }
    for _ in 0..rounds.max(1) {
        for p in probes.iter_mut() {
            let n = p.per_round;
            let v = p.round(n)?;
            p.rounds.push(v);
        }
    }
    Ok(())
}

/// The probe called `name` (an error names a bug in the suite's own tables).
pub fn find<'p, 'a>(probes: &'p [Probe<'a>], name: &str) -> Result<&'p Probe<'a>> {
    probes.iter().find(|p| p.name == name).ok_or_else(|| format!("bench: no probe named {name}").into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaves_rounds() {
        let log = std::cell::RefCell::new(Vec::new());
        let mut probes = vec![
            Probe::new("a", 2, || {
                log.borrow_mut().push('a');
                Ok(1.0)
            }),
            Probe::new("b", 1, || {
                log.borrow_mut().push('b');
                Ok(2.0)
            }),
        ];
        interleave(&mut probes, 2, 1).unwrap();
        assert_eq!(log.borrow().iter().collect::<String>(), "abaabaab");
        assert_eq!(find(&probes, "a").unwrap().rounds.len(), 2);
        assert_eq!(find(&probes, "b").unwrap().rounds.median(), 2.0);
    }

    #[test]
    fn an_error_stops_the_run() {
        let mut probes = vec![Probe::new("x", 3, || Err("broken".into()))];
        assert!(interleave(&mut probes, 2, 0).is_err());
    }
}
