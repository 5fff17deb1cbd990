//! The sequential event-driven simulation: one global queue of output
//! changes by time. At each time every change is applied, then every gate
//! that reads a changed signal computes its output, and schedules a change
//! `delay` later if the output differs from the last one it scheduled.

use super::circuit::{Circuit, Vector, INPUTS, PERIOD};
use std::collections::BTreeMap;

/// A change of one of the sum's gates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OutputEvent {
    /// When.
    pub time: u64,
    /// Which gate.
    pub gate: usize,
    /// Its new value.
    pub value: bool,
}

/// What the adder showed for one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The sum's 33 bits when the next vector came.
    pub sum: u64,
    /// Time from the vector to the last change of the sum's bits (0: none changed).
    pub settle: u64,
}

/// The time every run ends: one period per vector.
pub fn end_time(vectors: &[Vector]) -> u64 {
    vectors.len() as u64 * PERIOD
}

/// The changes of the sum's gates while the vectors are applied one per period, in (time, gate) order.
pub fn simulate(c: &Circuit, vectors: &[Vector]) -> Vec<OutputEvent> {
    let n = c.gates.len();
    let (mut signal, mut scheduled) = (vec![false; n], vec![false; n]);
    let mut queue: BTreeMap<u64, Vec<(usize, bool)>> = BTreeMap::new();
    for (k, v) in vectors.iter().enumerate() {
        for (g, last) in scheduled.iter_mut().enumerate().take(INPUTS) {
            if v.bit(g) != *last {
                *last = v.bit(g);
                queue.entry(k as u64 * PERIOD + c.gates[g].kind.delay()).or_default().push((g, v.bit(g)));
            }
        }
    }
    let mut trace = Vec::new();
    while let Some((t, changes)) = queue.pop_first() {
        let mut readers = Vec::new();
        for (g, v) in changes {
            signal[g] = v;
            if c.outputs.contains(&g) {
                trace.push(OutputEvent { time: t, gate: g, value: v });
            }
            readers.extend(c.fanout[g].iter().map(|&(r, _)| r));
        }
        readers.sort_unstable();
        readers.dedup();
        for r in readers {
            let gate = &c.gates[r];
            let v = gate.kind.eval(signal[gate.inputs[0]], signal[gate.inputs[1]]);
            if v != scheduled[r] {
                scheduled[r] = v;
                queue.entry(t + gate.kind.delay()).or_default().push((r, v));
            }
        }
    }
    trace.sort_unstable();
    trace
}

/// Each vector's sum and settle time, read off the changes of the sum's gates.
pub fn outcomes(c: &Circuit, vectors: &[Vector], trace: &[OutputEvent]) -> Vec<Outcome> {
    let mut bits = vec![false; c.outputs.len()];
    let mut events = trace.iter().peekable();
    (0..vectors.len() as u64)
        .map(|k| {
            let (start, mut settle) = (k * PERIOD, 0);
            while let Some(e) = events.next_if(|e| e.time < start + PERIOD) {
                let bit = c.outputs.iter().position(|&g| g == e.gate).unwrap_or(0);
                bits[bit] = e.value;
                settle = e.time - start;
            }
            Outcome { sum: bits.iter().enumerate().map(|(i, &b)| u64::from(b) << i).sum(), settle }
        })
        .collect()
}
