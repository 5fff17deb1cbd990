//! Engine configuration and its defaults.

use std::time::Duration;
use vipc_wire::{AuthKey, HostId, HEADER_LEN, MAC_LEN};

/// How the node gets its logical host id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostIdConfig {
    /// Announcement–complaint over the broadcast channel (000 §5.3).
    Allocate,
    /// A configured id; still announced once so that a duplicate is reported.
    Fixed(HostId),
}

/// Every tunable of the protocol. The defaults suit a LAN or loopback.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the logical host id is chosen.
    pub host_id: HostIdConfig,
    /// T_r: retransmission interval of an unanswered Send, GetPid or bulk stream.
    pub retransmit: Duration,
    /// T_t: a Send fails after this long without a reply or replyPending;
    /// aliens and cached replies are freed after this long without traffic.
    pub timeout: Duration,
    /// How long a logical host candidate must go without complaint.
    pub host_alloc_wait: Duration,
    /// How many times the candidate is announced within `host_alloc_wait`.
    pub host_alloc_announcements: u32,
    /// How long a remote GetPid waits for the first answer.
    pub getpid_timeout: Duration,
    /// Largest UDP payload this node sends (header + data + MAC).
    pub max_packet: usize,
    /// Bulk-transfer window: data packets in flight before an acknowledgement.
    pub window: usize,
    /// Host-location cache capacity (logical hosts).
    pub location_cache: usize,
    /// Bytes of appended segment data kept for receivers not yet waiting.
    pub buffer_limit: usize,
    /// Maximum aliens (remote senders' exchanges) held at once.
    pub max_aliens: usize,
    /// Maximum local processes.
    pub max_processes: usize,
    /// Maximum names in the registry.
    pub max_names: usize,
    /// Cluster key: when set every packet is MACed and unMACed packets are dropped.
    pub key: Option<AuthKey>,
    /// Seed for the engine's random choices (host id candidates, first sequence number).
    pub seed: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            host_id: HostIdConfig::Allocate,
            retransmit: Duration::from_millis(20),
            timeout: Duration::from_millis(1000),
            host_alloc_wait: Duration::from_millis(500),
            host_alloc_announcements: 3,
            getpid_timeout: Duration::from_millis(300),
            max_packet: 1472,
            window: 64,
            location_cache: 256,
            buffer_limit: 4 << 20,
            max_aliens: 4096,
            max_processes: 16_384,
            max_names: 1024,
            key: None,
            seed: 0,
        }
    }
}

impl Config {
    /// Data bytes that fit in one packet after header and MAC.
    pub fn max_data(&self) -> usize {
        let mac = if self.key.is_some() { MAC_LEN } else { 0 };
        self.max_packet.clamp(HEADER_LEN + mac + 64, vipc_wire::MAX_DATAGRAM) - HEADER_LEN - mac
    }
}
