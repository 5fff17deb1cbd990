//! Nodes on 127.0.0.1 in this process, every one a static peer of every
//! other: where the tests, the bench and the examples run their workers.

use crate::Result;
use vipc::{FaultConfig, Node};

/// `n` nodes, hosts `first, first + 1, …` ([`vipc::loopback_cluster`]), each
/// node's outgoing datagrams dropped, duplicated and held back as `faults`
/// says (node k's fault generator seeded with `faults.seed + k`).
pub fn loopback_nodes(n: usize, first: u16, faults: &FaultConfig) -> Result<Vec<Node>> {
    let nodes = vipc::loopback_cluster(n, first, |k, cfg| {
        cfg.faults = FaultConfig { seed: faults.seed.wrapping_add(k as u64), ..faults.clone() };
    })?;
    Ok(nodes)
}
