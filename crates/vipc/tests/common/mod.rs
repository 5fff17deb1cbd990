//! Helpers shared by the integration tests: clusters of nodes on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;
use vipc::{Node, NodeConfig};

/// `n` distinct free UDP ports on 127.0.0.1.
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    vipc::free_loopback_addrs(n).unwrap()
}

/// `n` nodes on loopback with fixed host ids `first..first+n` (see [`vipc::loopback_cluster`]).
pub fn cluster_with(n: usize, first: u16, tweak: impl Fn(usize, &mut NodeConfig)) -> Vec<Node> {
    vipc::loopback_cluster(n, first, tweak).unwrap()
}

/// `n` nodes with default settings (see [`cluster_with`]).
pub fn cluster(n: usize) -> Vec<Node> {
    cluster_with(n, 1, |_, _| {})
}

/// Short protocol timers for tests that wait for timeouts.
pub fn short_timers(cfg: &mut NodeConfig) {
    cfg.engine.retransmit = Duration::from_millis(20);
    cfg.engine.timeout = Duration::from_millis(300);
}

/// Timers long enough that nothing is retransmitted on a busy machine:
/// for tests that count packets.
pub fn patient_timers(_: usize, cfg: &mut NodeConfig) {
    cfg.engine.retransmit = Duration::from_secs(2);
    cfg.engine.timeout = Duration::from_secs(10);
}

/// Sum of the IPC packets a node sent and received (no housekeeping).
pub fn packets(n: &Node) -> u64 {
    n.stats().ipc_packets()
}

/// Deterministic test bytes.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}
