//! Helpers shared by the integration tests: clusters of nodes on loopback.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;
use vipc::{Error, Node, NodeConfig};

/// `n` distinct free UDP ports on 127.0.0.1 (bound together, then released).
pub fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    socks.iter().map(|s| s.local_addr().unwrap()).collect()
}

/// `n` nodes on loopback with fixed host ids `first..first+n`, each listing
/// every node as a static peer, no multicast; `tweak` adjusts each config.
pub fn cluster_with(n: usize, first: u16, tweak: impl Fn(usize, &mut NodeConfig)) -> Vec<Node> {
    for _ in 0..5 {
        let addrs = free_addrs(n);
        let mut nodes = Vec::new();
        let mut retry = false;
        for (i, a) in addrs.iter().enumerate() {
            let mut cfg = NodeConfig::fixed(first + i as u16, *a, addrs.clone());
            tweak(i, &mut cfg);
            match Node::start(cfg) {
                Ok(node) => nodes.push(node),
                Err(Error::Bind { .. }) => {
                    retry = true; // another test took the port meanwhile
                    break;
                }
                Err(e) => panic!("node {i} failed to start: {e}"),
            }
        }
        if !retry {
            return nodes;
        }
    }
    panic!("could not bind a cluster's ports");
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

/// Sum of the IPC packets a node sent and received (no housekeeping).
pub fn packets(n: &Node) -> u64 {
    n.stats().ipc_packets()
}

/// Deterministic test bytes.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}
