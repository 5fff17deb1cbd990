//! A cluster of nodes on 127.0.0.1 in this process: what the demo, the
//! examples, the benchmarks and the tests run on.

use crate::{Error, Node, NodeConfig, Result};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

/// How many times fresh ports are picked when another program takes one
/// between picking and binding.
const ATTEMPTS: usize = 5;

/// `n` nodes on loopback with fixed host ids `first, first + 1, …`, each
/// listing every node as a static peer (no multicast); `tweak(k, config)`
/// adjusts node k's configuration before it starts. Ports are picked free
/// and picked again if one is taken before its node binds it.
pub fn loopback_cluster(n: usize, first: u16, tweak: impl Fn(usize, &mut NodeConfig)) -> Result<Vec<Node>> {
    // Every host id from `first` on must exist (Node::start checks the range).
    if u16::try_from(n).ok().and_then(|n| first.checked_add(n.saturating_sub(1))).is_none() {
        return Err(Error::Config(format!("{n} hosts from {first} run past the last host id")));
    }
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let addrs = free_loopback_addrs(n)?;
        let started: Result<Vec<Node>> = (0..n)
            .map(|k| {
                let mut cfg = NodeConfig::fixed(first + k as u16, addrs[k], addrs.clone());
                tweak(k, &mut cfg);
                Node::start(cfg)
            })
            .collect();
        match started {
            Ok(nodes) => return Ok(nodes),
            Err(e @ Error::Bind { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Internal("no loopback ports".into())))
}

/// `n` distinct free UDP ports on 127.0.0.1 (bound together so that they
/// differ, then released).
pub fn free_loopback_addrs(n: usize) -> Result<Vec<SocketAddr>> {
    let io = |e: std::io::Error| Error::Internal(format!("no free loopback port: {e}"));
    let socks = (0..n).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))).collect::<std::io::Result<Vec<_>>>();
    socks.map_err(io)?.iter().map(|s| s.local_addr().map_err(io)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_get_their_hosts_and_distinct_ports() {
        let nodes = loopback_cluster(3, 7, |_, _| {}).unwrap();
        let hosts: Vec<u16> = nodes.iter().map(|n| n.host_id()).collect();
        assert_eq!(hosts, vec![7, 8, 9]);
        let mut ports: Vec<u16> = nodes.iter().map(|n| n.local_addr().port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 3);
    }

    #[test]
    fn hosts_past_the_last_id_are_a_config_error() {
        for (n, first) in [(2, u16::MAX), (70_000, 1)] {
            assert!(matches!(loopback_cluster(n, first, |_, _| {}), Err(Error::Config(_))), "{n} from {first}");
        }
    }
}
