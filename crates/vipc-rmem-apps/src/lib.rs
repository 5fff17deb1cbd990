//! The parallel applications Thekkath ran on his remote-memory primitives
//! (seed 003, ch. 6.3), built only on vipc's public API.
//!
//! - [`ising`]: a red/black Metropolis sweep of an L×L spin glass split by
//!   rows over P nodes. Every `depth` half-sweeps (8 by default) a node
//!   remote-writes its boundary rows (ghost rows `depth` deep) into its
//!   neighbours' exported segments; they carry the exchange's number and a
//!   check word, which is all the synchronisation the neighbours need. A row that is lost, duplicated
//!   or overtaken is fetched by a remote read of the writer's own copy, so
//!   every run equals the sequential one bit for bit.
//! - [`sim`]: a conservative (Chandy–Misra) gate-level simulation of a
//!   32-bit adder, its gates placed on P nodes. A gate's input queue fed
//!   from another node is a ring in that node's exported segment; the
//!   producer remote-writes each event (and null message) into it as a
//!   checked, numbered record, the reader acknowledges by remote write, and
//!   records unacknowledged after `rto` are written again. Every run makes
//!   exactly the output changes of the sequential event-driven simulation.
//!
//! What each promises and how it uses write, read and notification is in
//! `docs/RMEM.md`, "Applications".

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod error;
pub mod ising;
mod loopback;
pub mod sim;

pub use error::{Error, Result};
pub use loopback::loopback_nodes;

/// Every parser of bytes a peer wrote into this node's segments, on `data`,
/// for the fuzz target `apps`: an Ising ghost-row slot and the circuit
/// simulation's ring records. Each returns a value or `None`, never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    ising::fuzz_decode(data);
    sim::fuzz_decode(data);
}
