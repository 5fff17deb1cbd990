//! The Ising model of 003 §6.3.1: a spin glass on an L×L torus (every bond
//! its own interaction coefficient), optimised by Metropolis sweeps in
//! red/black order, its rows split over P nodes.
//!
//! - [`model`]: the physics and the sequential reference.
//! - [`IsingWorker`]: one node's band of rows, exchanging boundary rows by
//!   remote write and fetching lost ones by remote read.
//! - [`IsingCluster`]: P workers on P nodes of one process, for tests,
//!   benches and the example.

mod cluster;
mod layout;
pub mod model;
mod worker;

pub use cluster::IsingCluster;
pub use model::IsingParams;
pub use worker::{IsingWorker, WorkerConfig, WorkerStats};

/// A ghost-row slot as a worker reads it from its inbox (see [`crate::fuzz_parsers`]).
pub(crate) fn fuzz_decode(data: &[u8]) {
    let seq = data.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    for g in [layout::Ghost::Above, layout::Ghost::Below] {
        if let Some(row) = layout::decode(g, seq, data) {
            assert_eq!(row.len(), data.len() - 16);
        }
    }
}
