//! What the clerk tests share: parameters, a clerk on every node, bindings.
#![allow(dead_code)]

use std::time::Duration;
use vipc::{Access, Node};
use vipc_rmem_names::{Binding, Clerk, ClerkParams};

/// How long a test waits for anything.
pub const WAIT: Duration = Duration::from_secs(5);

/// Default clerks whose peers are every node.
pub fn params(nodes: &[Node]) -> ClerkParams {
    ClerkParams { peers: nodes.iter().map(|n| n.host_id()).collect(), ..Default::default() }
}

/// A clerk on each node.
pub fn clerks(nodes: &[Node], p: &ClerkParams) -> Vec<Clerk> {
    nodes.iter().map(|n| Clerk::start(n, p.clone()).unwrap()).collect()
}

/// A binding whose every field follows from `k`: a reader can tell a whole one from a mix.
pub fn binding(k: u32, host: u16) -> Binding {
    let mut segment = [0u8; 16];
    for c in segment.chunks_mut(4) {
        c.copy_from_slice(&k.to_le_bytes());
    }
    Binding { segment, host, size: k.wrapping_mul(7), access: Access::READ, meta: u64::from(k) * 3 }
}
