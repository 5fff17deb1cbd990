//! What every simulated node shares: its virtual address, its engine
//! configuration and the protocol timers, and the seed mixing that gives
//! each generator (network, workload, engine) its own stream.

use crate::scenario::Scenario;
use std::net::SocketAddr;
use std::time::Duration;
use vipc_engine::{AuthKey, Config, HostIdConfig};

/// T_r of every engine.
pub const RETRANSMIT: Duration = Duration::from_millis(20);
/// T_t of every engine.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// Slack on top of T_t for a blocked call: timer granularity, delays, watchdog period.
pub const MARGIN: Duration = Duration::from_millis(150);

/// Mixes `b` into `a` (splitmix64): derives independent seeds and folds the fingerprint.
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut x = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The key of keyed scenarios.
pub(crate) fn cluster_key() -> AuthKey {
    AuthKey::from_bytes(*b"vipc-sim cluster key, 32 bytes!!")
}

/// The virtual address of node `i`.
pub fn node_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7000 + i as u16))
}

/// The engine configuration of node `node` in its incarnation `epoch` under `sc`.
pub fn engine_config(sc: &Scenario, seed: u64, node: usize, epoch: u32, host_id: HostIdConfig) -> Config {
    Config {
        host_id,
        retransmit: RETRANSMIT,
        timeout: TIMEOUT,
        max_packet: 1472,
        max_aliens: sc.max_aliens,
        buffer_limit: sc.buffer_limit,
        loopback_packet: sc.loopback_packet,
        key: sc.keyed.then(cluster_key),
        seed: mix(mix(seed, node as u64 + 1), epoch as u64 + 1),
        ..Config::default()
    }
}
