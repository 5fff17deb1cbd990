//! The circuit simulator of 003 §6.3.2: a conservative (Chandy–Misra)
//! gate-level simulation of a 32-bit ripple-carry adder, its 225 gates
//! placed on P nodes.
//!
//! - [`circuit`]: the adder, the gates' delays and the input vectors.
//! - [`reference`](mod@reference): the sequential event-driven simulation the others must equal.
//! - [`SimCluster`]: one [`SimNode`] per vipc node; every gate is a logical
//!   process whose inputs are event queues; an event for a gate on another
//!   node is remote-written into a per-link ring in that node's segment.

pub mod circuit;
mod cluster;
mod link;
mod lp;
mod node;
pub mod reference;

pub use circuit::{Circuit, Placement, Vector};
pub use cluster::SimCluster;
pub use node::{SimNode, SimStats};
pub use reference::{Outcome, OutputEvent};

/// Ring records as a link reads them from its peer's region (see [`crate::fuzz_parsers`]).
pub(crate) fn fuzz_decode(data: &[u8]) {
    let (from, to) = (data.first().map_or(0, |&b| usize::from(b % 4)), data.get(1).map_or(1, |&b| usize::from(b % 4)));
    for (k, r) in data.get(2..).unwrap_or(&[]).chunks_exact(24).enumerate() {
        let seq = u64::from(u32::from_le_bytes([r[0], r[1], r[2], r[3]])) + ((k as u64) << 32);
        let _ = link::decode(from, to, seq, r);
    }
}
