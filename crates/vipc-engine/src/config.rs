//! Engine configuration and its defaults.

use std::net::SocketAddr;
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
    /// aliens and cached replies are freed after twice this long without traffic.
    pub timeout: Duration,
    /// How long a logical host candidate must go without complaint.
    pub host_alloc_wait: Duration,
    /// How many times the candidate is announced within `host_alloc_wait`.
    pub host_alloc_announcements: u32,
    /// How long a remote GetPid waits for the first answer.
    pub getpid_timeout: Duration,
    /// Largest UDP payload this node sends (header + data + MAC), except
    /// to loopback peers (see `loopback_packet`).
    pub max_packet: usize,
    /// If set, the largest UDP payload of a packet carrying data (a bulk
    /// chunk, an appended or a reply segment) sent to a peer on a loopback
    /// address (127.0.0.0/8, ::1): the loopback MTU is 64 KiB, so up to
    /// 65,507 bytes travel unfragmented. `None`: `max_packet`.
    pub loopback_packet: Option<usize>,
    /// Bulk-transfer window: data packets in flight before an acknowledgement.
    pub window: usize,
    /// Bulk-transfer window in bytes: a stream keeps at most
    /// `min(window, window_bytes / chunk)` (at least 2) chunks unacknowledged.
    /// Keep it within the receiver's socket buffer.
    pub window_bytes: usize,
    /// Bulk transfers must move at least this many bytes per second on
    /// average, beyond a first T_t: a MoveTo or MoveFrom of `n` bytes fails
    /// with `Timeout` after `T_t + n / min_stream_rate` however it
    /// progresses, so a peer that drips one small chunk per T_t cannot hold
    /// a mover for hours. 0: no limit.
    pub min_stream_rate: u64,
    /// Host-location cache capacity (logical hosts).
    pub location_cache: usize,
    /// Bytes of appended segment data kept for receivers not yet waiting.
    pub buffer_limit: usize,
    /// Maximum aliens (remote senders' exchanges) held at once.
    pub max_aliens: usize,
    /// Maximum local processes.
    pub max_processes: usize,
    /// Maximum group memberships of this node's processes, in all.
    pub max_memberships: usize,
    /// Most distinct replies kept for one group Send (counted toward its
    /// K or ALL, or queued for GetReply); later ones are dropped and counted.
    pub max_group_replies: usize,
    /// Maximum names in the registry.
    pub max_names: usize,
    /// Cluster key: when set every packet is MACed and unMACed packets are dropped.
    pub key: Option<AuthKey>,
    /// I-Am-Here (004 §4.2): how often this node announces itself on the
    /// broadcast channel; `None` turns the alive-host table off.
    pub alive_period: Option<Duration>,
    /// A host is declared down after this many `alive_period`s without a
    /// packet from it (detection within `(alive_down_after + 1.05) × alive_period`).
    pub alive_down_after: u32,
    /// Remote memory: slots of the descriptor table (at most 65,535).
    pub rmem_max_segments: usize,
    /// Remote memory: bytes of all segments this node holds.
    pub rmem_max_bytes: usize,
    /// Remote memory: reads, CAS-IIs and imports pending or not yet collected.
    pub rmem_max_ops: usize,
    /// Remote memory: a read or CAS-II fails with `Timeout` (an import with
    /// `Refused(UnknownName)`) after this long without its answer.
    pub rmem_timeout: Duration,
    /// Remote memory: a read whose first missing range is shorter than this
    /// is received the ordinary way and its answer copied, rather than received
    /// in place ([`crate::Engine::mem_lend`] lends nothing): a receive in
    /// place costs a two-part `recvmsg` and the loan's bookkeeping, more than
    /// copying up to 8 KiB (pinned to one CPU, medians: 8 B reads 13.1 → 12.8 µs,
    /// 1 KB 13.4 → 13.0, 4 KB 13.6 → 13.4; `vipc bench rmem/latency`, 8 KB
    /// 1.110–1.115 → 1.093–1.101 × UDP; 32 KB 15.6 in place, 15.9 copied).
    /// 0: every read is received in place when it can be.
    pub rmem_lend_min: usize,
    /// Remote memory: notification records a segment's control channel holds.
    pub rmem_control_queue: usize,
    /// Remote memory: data bytes a segment's data channel holds.
    pub rmem_data_queue: usize,
    /// Seed for the engine's random choices (host id candidates, first sequence number).
    pub seed: u64,
    /// The 128-bit key of this node's address tokens (PROTOCOL §4.15): it
    /// must be secret, and unrelated to anything on the wire. `None`:
    /// derived from `seed` (deterministic simulations); the runtime draws
    /// one from the operating system's random source.
    pub token_key: Option<[u64; 2]>,
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
            loopback_packet: None,
            window: 256,
            window_bytes: 4 << 20,
            min_stream_rate: 256 << 10,
            location_cache: 256,
            buffer_limit: 4 << 20,
            max_aliens: 4096,
            max_processes: 16_384,
            max_names: 1024,
            max_memberships: 4096,
            max_group_replies: 4096,
            key: None,
            alive_period: None,
            alive_down_after: 3,
            rmem_max_segments: 1024,
            rmem_max_bytes: 256 << 20,
            rmem_max_ops: 4096,
            rmem_timeout: Duration::from_millis(1000),
            rmem_lend_min: 16 << 10,
            rmem_control_queue: 1024,
            rmem_data_queue: 1 << 20,
            seed: 0,
            token_key: None,
        }
    }
}

impl Config {
    /// Data bytes that fit in one packet after header and MAC.
    pub fn max_data(&self) -> usize {
        self.data_in(self.max_packet)
    }

    /// Data bytes of one packet sent to `peer`: a bulk-transfer chunk, or an
    /// appended or reply segment (see `loopback_packet`).
    pub fn data_to(&self, peer: SocketAddr) -> usize {
        match self.loopback_packet {
            Some(p) if peer.ip().is_loopback() => self.data_in(p),
            _ => self.max_data(),
        }
    }

    /// Data bytes of a reply segment to a process on this node: as much as
    /// one packet to a loopback peer may carry, so that a server's limit does
    /// not depend on whether its client is local.
    pub fn local_data(&self) -> usize {
        self.data_in(self.loopback_packet.unwrap_or(self.max_packet))
    }

    /// The most segment bytes one Send packet may append, to any peer.
    pub fn max_appended(&self) -> usize {
        self.max_data().max(self.local_data())
    }

    /// Chunks a stream of `chunk`-byte chunks keeps unacknowledged at most.
    pub fn window_chunks(&self, chunk: usize) -> usize {
        self.window.min(self.window_bytes / chunk.max(1)).max(2)
    }

    fn data_in(&self, packet: usize) -> usize {
        let mac = if self.key.is_some() { MAC_LEN } else { 0 };
        // vipc_wire::MAX_DATA leaves room for a MAC even when there is none.
        (packet.clamp(HEADER_LEN + mac + 64, vipc_wire::MAX_DATAGRAM) - HEADER_LEN - mac).min(vipc_wire::MAX_DATA)
    }
}
