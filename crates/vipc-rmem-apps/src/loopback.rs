//! Nodes on 127.0.0.1 in this process, every one a static peer of every
//! other: where the tests, the bench and the examples run their workers.

use crate::{Error, Result};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use vipc::{FaultConfig, Node, NodeConfig};

/// `n` nodes, hosts `first, first + 1, …`, each node's outgoing datagrams
/// dropped, duplicated and held back as `faults` says (node k's fault
/// generator seeded with `faults.seed + k`). Ports are picked free, and
/// picked again if another program takes one before the node binds it.
pub fn loopback_nodes(n: usize, first: u16, faults: &FaultConfig) -> Result<Vec<Node>> {
    let mut last = None;
    for _ in 0..5 {
        // Bound together so that the ports are distinct, then released for the nodes.
        let socks = (0..n).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))).collect::<std::io::Result<Vec<_>>>();
        let socks = socks.map_err(|e| Error::Params(format!("no free loopback port: {e}")))?;
        let addrs: Vec<SocketAddr> = socks.iter().filter_map(|s| s.local_addr().ok()).collect();
        drop(socks);
        let started: Result<Vec<Node>, vipc::Error> = (0..n)
            .map(|k| {
                let mut cfg = NodeConfig::fixed(first + k as u16, addrs[k], addrs.clone());
                cfg.faults = FaultConfig { seed: faults.seed.wrapping_add(k as u64), ..faults.clone() };
                Node::start(cfg)
            })
            .collect();
        match started {
            Ok(nodes) => return Ok(nodes),
            Err(e @ vipc::Error::Bind { .. }) => last = Some(e),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(|| Error::Params("no loopback ports".into()), Error::from))
}
