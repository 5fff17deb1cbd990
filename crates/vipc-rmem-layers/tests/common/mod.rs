//! Loopback clusters for the layers' tests, with or without injected faults.
#![allow(dead_code)]

use vipc::{FaultConfig, Node};

/// `n` nodes on loopback, hosts `first..`, every node a static peer of every
/// other, each dropping, duplicating and delaying its outgoing datagrams as `faults` says.
pub fn cluster(n: usize, first: u16, faults: FaultConfig) -> Vec<Node> {
    vipc::loopback_cluster(n, first, |i, cfg| {
        cfg.faults = FaultConfig { seed: faults.seed.wrapping_add(i as u64), ..faults.clone() };
    })
    .expect("a loopback cluster")
}

/// No faults.
pub fn clean() -> FaultConfig {
    FaultConfig::default()
}

/// `loss` of every node's outgoing datagrams dropped, 2% duplicated, 2% overtaken.
pub fn lossy(loss: f64, seed: u64) -> FaultConfig {
    FaultConfig { loss, duplicate: 0.02, reorder: 0.02, seed }
}

/// Deterministic test bytes.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}
