//! Loopback clusters for the layers' tests, with or without injected faults.
#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use vipc::{Error, FaultConfig, Node, NodeConfig};

/// `n` distinct free UDP ports on 127.0.0.1 (bound together, then released).
fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    socks.iter().map(|s| s.local_addr().unwrap()).collect()
}

/// `n` nodes on loopback, hosts `first..`, every node a static peer of every
/// other, each dropping, duplicating and delaying its outgoing datagrams as `faults` says.
pub fn cluster(n: usize, first: u16, faults: FaultConfig) -> Vec<Node> {
    for _ in 0..5 {
        let addrs = free_addrs(n);
        let mut nodes = Vec::new();
        let mut retry = false;
        for (i, a) in addrs.iter().enumerate() {
            let mut cfg = NodeConfig::fixed(first + i as u16, *a, addrs.clone());
            cfg.faults = FaultConfig { seed: faults.seed.wrapping_add(i as u64), ..faults.clone() };
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
