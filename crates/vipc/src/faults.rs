//! Fault injection on outgoing datagrams: loss, duplication and reordering
//! from a seeded generator, so that real-network tests run under loss too.

use crate::config::FaultConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use vipc_engine::Time;

/// The fault generator and the datagrams it holds back.
pub(crate) struct Faults {
    cfg: FaultConfig,
    rng: StdRng,
    delayed: Vec<(Time, SocketAddr, Vec<u8>)>,
}

impl Faults {
    /// A generator for `cfg`, or `None` if it injects nothing.
    pub fn new(cfg: &FaultConfig) -> Option<Faults> {
        if cfg.is_none() {
            return None;
        }
        Some(Faults { cfg: cfg.clone(), rng: StdRng::seed_from_u64(cfg.seed), delayed: Vec::new() })
    }

    /// Decides the fate of one datagram: dropped, pushed to `out` (once or
    /// twice), or held back until [`Faults::release`].
    pub fn apply(&mut self, now: Time, to: SocketAddr, bytes: Vec<u8>, out: &mut VecDeque<(SocketAddr, Vec<u8>)>) {
        if self.rng.gen::<f64>() < self.cfg.loss {
            return;
        }
        if self.rng.gen::<f64>() < self.cfg.duplicate {
            out.push_back((to, bytes.clone()));
        }
        if self.rng.gen::<f64>() < self.cfg.reorder {
            let delay = Duration::from_micros(self.rng.gen_range(200..2000));
            self.delayed.push((now + delay, to, bytes));
        } else {
            out.push_back((to, bytes));
        }
    }

    /// When the earliest held-back datagram is due.
    pub fn next_release(&self) -> Option<Time> {
        self.delayed.iter().map(|d| d.0).min()
    }

    /// Moves the held-back datagrams due at `now` to `out`.
    pub fn release(&mut self, now: Time, out: &mut VecDeque<(SocketAddr, Vec<u8>)>) {
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, to, bytes) = self.delayed.swap_remove(i);
                out.push_back((to, bytes));
            } else {
                i += 1;
            }
        }
    }
}
