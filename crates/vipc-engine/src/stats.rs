//! Counters, in the spirit of AeronStat: everything a node did, for `vipc stat`.

use vipc_wire::rmem::Refusal;
use vipc_wire::PacketType;

/// Number of packet types (per-type counters).
pub const TYPES: usize = PacketType::ALL.len();
/// Number of remote-memory refusal reasons (per-reason counters).
pub const REFUSALS: usize = Refusal::ALL.len();

/// Host allocation and I-Am-Here: packets that belong to no exchange.
fn is_housekeeping(t: PacketType) -> bool {
    matches!(t, PacketType::HostRequest | PacketType::HostComplaint | PacketType::IAmHere)
}

/// The node's counters. All are monotone except the gauges at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Valid packets received, by type.
    pub packets_in: [u64; TYPES],
    /// Packets sent, by type (a broadcast counts once).
    pub packets_out: [u64; TYPES],
    /// Bytes received in valid packets.
    pub bytes_in: u64,
    /// Bytes sent.
    pub bytes_out: u64,
    /// Sends, GetPids and bulk packets retransmitted.
    pub retransmissions: u64,
    /// Duplicate packets recognised and dropped (or answered from the reply cache).
    pub duplicates: u64,
    /// Duplicate sends answered from the reply cache.
    pub replies_resent: u64,
    /// Datagrams that failed MAC verification (missing, unexpected or wrong).
    pub mac_failures: u64,
    /// Datagrams that are not vipc packets or are malformed.
    pub malformed: u64,
    /// Packets of another protocol version.
    pub bad_version: u64,
    /// Valid packets that made no sense in the current state (late, unknown exchange).
    pub stray: u64,
    /// Sends that failed with a timeout.
    pub timeouts: u64,
    /// Bulk transfers dropped at their cap, for moving slower than
    /// `min_stream_rate` (also counted in `timeouts`, but a MoveTo's
    /// receiving end, which no process here waits on).
    pub slow_streams: u64,
    /// Blocking primitives abandoned because the caller's own limit passed.
    pub deadlines: u64,
    /// Local sends completed (no packets).
    pub local_exchanges: u64,
    /// Remote sends completed with a reply.
    pub remote_exchanges: u64,
    /// Appended segment data dropped for lack of buffer space.
    pub appended_dropped: u64,
    /// Retransmitted Sends refused because they named a previous incarnation of this node.
    pub restart_refusals: u64,
    /// Finished exchanges' records (refused, cancelled, or idempotent and
    /// replied) dropped from a full alien table to make room for a new Send.
    pub aliens_evicted: u64,
    /// Location-cache misses (sends that had to be broadcast).
    pub location_misses: u64,
    /// I-Am-Here: hosts that came up.
    pub hosts_up: u64,
    /// I-Am-Here: hosts declared down.
    pub hosts_down: u64,
    /// Sends to a group made by this node's processes.
    pub group_sends: u64,
    /// Copies of group messages queued for members here.
    pub group_deliveries: u64,
    /// Replies to group Sends taken (the first, and those kept for GetReply).
    pub group_replies: u64,
    /// Later replies to a group Send in mode `One`, dropped.
    pub group_replies_dropped: u64,
    /// Group messages not queued for a member: too many copies held.
    pub group_dropped: u64,
    /// Segments of replies to a group Send not written: not the first reply,
    /// or the segment was not write-granted or out of range.
    pub group_segment_dropped: u64,
    /// Reliable group Sends whose condition was not met.
    pub group_failures: u64,
    /// Unicast copies sent in place of one multicast datagram where the node
    /// has no multicast (a broadcast or group Send fanned out to n hosts
    /// counts n). Counted by the runtime; the engine leaves it 0.
    pub unicast_fanout: u64,
    /// Datagrams from the multicast socket read by the process they
    /// completed, waiting in Receive (no hand-off from the multicast
    /// thread). Counted by the runtime; the engine leaves it 0.
    pub multicast_by_receiver: u64,
    /// Datagrams from this node's own addresses, skipped unread: its
    /// wake-ups of a thread blocked reading the socket, its broadcasts
    /// looped back, or forged ones. Counted by the runtime; the engine leaves it 0.
    pub own_datagrams: u64,
    /// Sends that carried several datagrams to one address in one system
    /// call (UDP GSO; the kernel cuts them apart). Counted by the runtime;
    /// the engine leaves it 0.
    pub runs_sent: u64,
    /// Receives that returned several datagrams of one sender at once (UDP
    /// GRO), split by their headers. Counted by the runtime; the engine leaves it 0.
    pub runs_received: u64,
    /// Fire-and-forget calls (remote writes) that waited because more than
    /// the runtime's send-queue limit was queued unsent. Counted by the
    /// runtime; the engine leaves it 0.
    pub writes_throttled: u64,
    /// Remote memory: read answers sent straight from this node's segment,
    /// without a copy into a packet. Counted by the runtime; the engine leaves it 0.
    pub rmem_answers_from_segment: u64,
    /// Remote memory: read-answer datagrams received straight into their
    /// destination segment. Counted by the runtime; the engine leaves it 0.
    pub rmem_answers_in_place: u64,
    /// Remote memory: writes and writevs issued by this node (operations, not packets).
    pub rmem_writes: u64,
    /// Remote memory: write and writev packets applied to this node's segments.
    pub rmem_writes_applied: u64,
    /// Remote memory: reads served from this node's segments.
    pub rmem_reads_served: u64,
    /// Remote memory: CAS-IIs performed on this node's segments.
    pub rmem_cas_served: u64,
    /// Remote memory: imports of this node's segments answered.
    pub rmem_imports_served: u64,
    /// Remote memory: writes that hit a write-inhibited range (queued on the data channel).
    pub rmem_queued: u64,
    /// Remote memory: of those, dropped because the data channel was full.
    pub rmem_data_dropped: u64,
    /// Remote memory: notification records put on control channels.
    pub rmem_notifications: u64,
    /// Remote memory: notifications dropped because the control channel was full.
    pub rmem_notify_dropped: u64,
    /// Remote memory: requests refused and dropped, by reason ([`crate::Refusal::index`]).
    pub rmem_refused: [u64; REFUSALS],
    /// Remote memory: this node's reads, CAS-IIs and imports that succeeded.
    pub rmem_ops_done: u64,
    /// Remote memory: this node's reads, CAS-IIs and imports that failed (refused or timed out).
    pub rmem_ops_failed: u64,
    /// Remote memory: of those, the ones that timed out.
    pub rmem_timeouts: u64,
    /// Remote memory: reads sent again with the address token an owner gave in an
    /// `Unvalidated` MemNack (per owner, the reads in flight when the token
    /// was first needed; again after it restarted).
    pub rmem_token_retries: u64,
    /// Gauge: exchanges this node's processes have outstanding.
    pub active_exchanges: u64,
    /// Gauge: aliens (remote senders' exchanges) held, including cached replies.
    pub active_aliens: u64,
    /// Gauge: bulk transfers in progress.
    pub active_transfers: u64,
    /// Gauge: live local processes.
    pub processes: u64,
    /// Gauge: hosts in the alive-host table.
    pub alive_hosts: u64,
    /// Gauge: group memberships of this node's processes.
    pub memberships: u64,
    /// Gauge: copies of group messages held for members here.
    pub group_copies: u64,
    /// Gauge: remote-memory segments held (exported and anonymous).
    pub rmem_segments: u64,
    /// Gauge: bytes of those segments.
    pub rmem_bytes: u64,
    /// Gauge: remote-memory operations of this node still pending.
    pub rmem_ops_pending: u64,
    /// Gauge: entries in the engine's timer heap, live or stale (each busy
    /// peer, or stream of operations, keeps about one).
    pub timer_entries: u64,
}

impl Stats {
    /// Packets in of one type.
    pub fn sent(&self, t: PacketType) -> u64 {
        self.packets_out[t.index()]
    }

    /// Packets out of one type.
    pub fn received(&self, t: PacketType) -> u64 {
        self.packets_in[t.index()]
    }

    /// Packets of the IPC protocol proper sent: every type but the
    /// housekeeping ones (host allocation, I-Am-Here), which come on their
    /// own schedule — what "packets per exchange" counts.
    pub fn ipc_sent(&self) -> u64 {
        PacketType::ALL.iter().filter(|t| !is_housekeeping(**t)).map(|&t| self.sent(t)).sum()
    }

    /// Packets of the IPC protocol proper received (see [`Stats::ipc_sent`]).
    pub fn ipc_received(&self) -> u64 {
        PacketType::ALL.iter().filter(|t| !is_housekeeping(**t)).map(|&t| self.received(t)).sum()
    }

    /// [`Stats::ipc_sent`] plus [`Stats::ipc_received`].
    pub fn ipc_packets(&self) -> u64 {
        self.ipc_sent() + self.ipc_received()
    }

    /// Named counters in a stable order, for printing and serialising.
    pub fn fields(&self) -> Vec<(String, u64)> {
        let mut v = Vec::new();
        for t in PacketType::ALL {
            v.push((format!("packets_in.{}", t.name()), self.received(t)));
        }
        for t in PacketType::ALL {
            v.push((format!("packets_out.{}", t.name()), self.sent(t)));
        }
        let named = [
            ("bytes_in", self.bytes_in),
            ("bytes_out", self.bytes_out),
            ("retransmissions", self.retransmissions),
            ("duplicates", self.duplicates),
            ("replies_resent", self.replies_resent),
            ("mac_failures", self.mac_failures),
            ("malformed", self.malformed),
            ("bad_version", self.bad_version),
            ("stray", self.stray),
            ("timeouts", self.timeouts),
            ("slow_streams", self.slow_streams),
            ("deadlines", self.deadlines),
            ("local_exchanges", self.local_exchanges),
            ("remote_exchanges", self.remote_exchanges),
            ("appended_dropped", self.appended_dropped),
            ("restart_refusals", self.restart_refusals),
            ("aliens_evicted", self.aliens_evicted),
            ("location_misses", self.location_misses),
            ("active_exchanges", self.active_exchanges),
            ("active_aliens", self.active_aliens),
            ("timer_entries", self.timer_entries),
            ("active_transfers", self.active_transfers),
            ("processes", self.processes),
            ("group_sends", self.group_sends),
            ("group_deliveries", self.group_deliveries),
            ("group_replies", self.group_replies),
            ("group_replies_dropped", self.group_replies_dropped),
            ("group_dropped", self.group_dropped),
            ("group_segment_dropped", self.group_segment_dropped),
            ("group_failures", self.group_failures),
            ("unicast_fanout", self.unicast_fanout),
            ("multicast_by_receiver", self.multicast_by_receiver),
            ("own_datagrams", self.own_datagrams),
            ("runs_sent", self.runs_sent),
            ("runs_received", self.runs_received),
            ("writes_throttled", self.writes_throttled),
            ("rmem_answers_from_segment", self.rmem_answers_from_segment),
            ("rmem_answers_in_place", self.rmem_answers_in_place),
            ("memberships", self.memberships),
            ("group_copies", self.group_copies),
            ("hosts_up", self.hosts_up),
            ("hosts_down", self.hosts_down),
            ("alive_hosts", self.alive_hosts),
            ("rmem_writes", self.rmem_writes),
            ("rmem_writes_applied", self.rmem_writes_applied),
            ("rmem_reads_served", self.rmem_reads_served),
            ("rmem_cas_served", self.rmem_cas_served),
            ("rmem_imports_served", self.rmem_imports_served),
            ("rmem_queued", self.rmem_queued),
            ("rmem_data_dropped", self.rmem_data_dropped),
            ("rmem_notifications", self.rmem_notifications),
            ("rmem_notify_dropped", self.rmem_notify_dropped),
            ("rmem_ops_done", self.rmem_ops_done),
            ("rmem_ops_failed", self.rmem_ops_failed),
            ("rmem_timeouts", self.rmem_timeouts),
            ("rmem_token_retries", self.rmem_token_retries),
            ("rmem_segments", self.rmem_segments),
            ("rmem_bytes", self.rmem_bytes),
            ("rmem_ops_pending", self.rmem_ops_pending),
        ];
        v.extend(named.iter().map(|(k, n)| (k.to_string(), *n)));
        for r in Refusal::ALL {
            v.push((format!("rmem_refused.{}", r.name()), self.rmem_refused[r.index()]));
        }
        v
    }
}
