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
