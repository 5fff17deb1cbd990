//! Node configuration: sockets, broadcast channel, key, fault injection and
//! the protocol knobs of the engine.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;
use vipc_engine::{AuthKey, Config, HostIdConfig};

/// The default multicast group of the broadcast channel.
pub const DEFAULT_GROUP: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 86, 73), 7700);

/// Everything [`crate::Node::start`] needs. `NodeConfig::default()` is a node on
/// `127.0.0.1` (ephemeral port) that allocates its logical host id over the
/// loopback multicast group [`DEFAULT_GROUP`].
///
/// # Memory
/// Measured resident cost (`cargo run --release -p vipc --example perf -- rss`):
/// an idle node process is about 2.8 MB (code, libraries, three threads, the
/// 64 KiB receive buffer); each local process adds about 0.8 KB plus its thread's
/// stack; each alien (a remote sender's exchange in progress, or its cached
/// reply, kept up to 2·T_t) about 0.6–0.8 KB, plus any appended segment data it holds
/// (at most `engine.buffer_limit` in all, 4 MiB by default). A server node
/// holding 1,000 remote exchanges is about 3.4–3.7 MB. A process keeps the
/// allocation of its last Send segment (up to 32 MiB) for reuse, and the
/// engine keeps up to 64 bulk-packet buffers (4 MiB) once it has streamed.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Address of the node's unicast socket. Every datagram is sent from it, so
    /// peers learn this address. Port 0 picks a free port.
    pub listen: SocketAddr,
    /// How the logical host id is chosen (overrides `engine.host_id`).
    pub host_id: HostIdConfig,
    /// Cluster key (overrides `engine.key`): when set every packet is MACed and
    /// packets without a valid MAC are dropped and counted.
    pub key: Option<AuthKey>,
    /// Protocol knobs: T_r (`retransmit`), T_t (`timeout`), host allocation
    /// wait, packet size, bulk window, limits. `host_id` and `key` are taken
    /// from this struct; a `seed` of 0 is replaced by a random one. The
    /// default sends packets carrying data of up to 65,507 bytes to loopback
    /// peers (`loopback_packet`) and announces the node every 100 ms
    /// (`alive_period`: I-Am-Here, a crashed host is declared down within
    /// about 0.4 s), and [`crate::Node::start`] lowers `window_bytes` to a
    /// quarter of the receive buffer the kernel granted (half of a small one).
    pub engine: Config,
    /// Where broadcasts (host allocation, location-cache misses, remote GetPid) go.
    pub broadcast: Broadcast,
    /// Faults injected into outgoing datagrams (testing under loss).
    pub faults: FaultConfig,
    /// SO_RCVBUF and SO_SNDBUF requested for the sockets. Run as root (or
    /// with CAP_NET_ADMIN) the node forces them past `net.core.rmem_max`
    /// (SO_RCVBUFFORCE); otherwise the kernel caps them there.
    pub socket_buffer: usize,
    /// After a fixed host id is announced, how long start-up waits for another
    /// node to complain that it holds the id ([`crate::Error::HostConflict`]).
    pub conflict_grace: Duration,
    /// Create the kernel server ([`crate::services::kernel_server`]) as the first
    /// process, so that it is `Pid::new(host, 1)`.
    pub kernel_server: bool,
    /// Busy-poll before sleeping: a process that blocks first spins this long
    /// — the reader on non-blocking receives of the socket, the others on
    /// their completion flag — and only then sleeps. Cuts the wake-up
    /// latency (a few µs per hand-off) at the cost of a busy core while
    /// waiting; after a few µs the spin yields the CPU each round, so that a
    /// peer sharing the core still runs. `None` (the default): never spin.
    pub poll_spin: Option<Duration>,
}

impl Default for NodeConfig {
    fn default() -> NodeConfig {
        NodeConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            host_id: HostIdConfig::Allocate,
            key: None,
            engine: Config {
                loopback_packet: Some(vipc_wire::MAX_DATAGRAM),
                alive_period: Some(Duration::from_millis(100)),
                ..Config::default()
            },
            broadcast: Broadcast::default(),
            faults: FaultConfig::default(),
            socket_buffer: 4 << 20,
            conflict_grace: Duration::from_millis(50),
            kernel_server: true,
            poll_spin: None,
        }
    }
}

impl NodeConfig {
    /// A node on `listen` with a fixed logical host id, no multicast and the
    /// given static peers: the usual setup of tests and of clusters without multicast.
    pub fn fixed(host: vipc_engine::HostId, listen: SocketAddr, peers: Vec<SocketAddr>) -> NodeConfig {
        NodeConfig {
            listen,
            host_id: HostIdConfig::Fixed(host),
            broadcast: Broadcast { multicast: None, peers },
            ..NodeConfig::default()
        }
    }

    /// Why this configuration cannot run, if it cannot: a host id out of
    /// range, a zero or over-an-hour protocol time, a zero I-Am-Here period,
    /// a timeout no longer than the retransmission interval, or a
    /// `poll_spin` over a second (it keeps a core busy that long).
    pub fn check(&self) -> Result<(), String> {
        if let HostIdConfig::Fixed(h) = self.host_id {
            if h == 0 || h > vipc_wire::MAX_HOST_ID {
                return Err(format!("logical host {h} is outside 1..={}", vipc_wire::MAX_HOST_ID));
            }
        }
        let e = &self.engine;
        // (name, value if set, whether zero is refused)
        let times = [
            ("retransmit", Some(e.retransmit), true),
            ("timeout", Some(e.timeout), true),
            ("alive_period", e.alive_period, true),
            ("host_alloc_wait", Some(e.host_alloc_wait), false),
            ("getpid_timeout", Some(e.getpid_timeout), false),
            ("rmem_timeout", Some(e.rmem_timeout), false),
            ("conflict_grace", Some(self.conflict_grace), false),
        ];
        for (name, t, nonzero) in times {
            match t {
                Some(t) if t > MAX_PROTOCOL_TIME => return Err(format!("{name} {t:?} is over an hour")),
                Some(t) if t.is_zero() && nonzero => return Err(format!("{name} must not be zero")),
                _ => {}
            }
        }
        // A Send would fail before its first retransmission, whose ReplyPending
        // is what keeps a Send to a slow server alive (PROTOCOL §5).
        if e.timeout <= e.retransmit {
            return Err(format!("timeout {:?} must be longer than retransmit {:?}", e.timeout, e.retransmit));
        }
        match self.poll_spin {
            Some(d) if d > Duration::from_secs(1) => Err(format!("poll_spin {d:?} is over a second")),
            _ => Ok(()),
        }
    }
}

/// The longest protocol time a node accepts: longer ones are mistakes (and
/// would overflow the engine's clock arithmetic near `Duration::MAX`).
const MAX_PROTOCOL_TIME: Duration = Duration::from_secs(3600);

/// The broadcast channel: an IP multicast group and/or a list of static peers.
/// A broadcast is sent to the group (if enabled) and to every peer.
#[derive(Clone, Debug)]
pub struct Broadcast {
    /// The multicast group, if any (IPv4 only).
    pub multicast: Option<Multicast>,
    /// Static peers: nodes that get every broadcast by unicast. Use them where
    /// multicast does not reach (IPv6, routed networks, containers without multicast).
    pub peers: Vec<SocketAddr>,
}

impl Default for Broadcast {
    fn default() -> Broadcast {
        Broadcast { multicast: Some(Multicast::default()), peers: Vec::new() }
    }
}

/// An IPv4 multicast group used as the broadcast channel. Traffic to the group
/// leaves only through `interface` (IP_MULTICAST_IF) and the group is joined on
/// that interface only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Multicast {
    /// Group address and port. Every node of a cluster uses the same one.
    pub group: SocketAddrV4,
    /// Address of the local interface to send and join on. The default,
    /// `127.0.0.1`, keeps the cluster on this machine; use a LAN address to span machines.
    pub interface: Ipv4Addr,
    /// IP_MULTICAST_TTL; 1 keeps datagrams on the local link.
    pub ttl: u32,
    /// IP_MULTICAST_LOOP: deliver the group's datagrams to other nodes on this machine.
    pub loopback: bool,
    /// The /16 that process groups' multicast addresses come from (only its
    /// first two octets count; PROTOCOL §4.10). Every node of a cluster uses the same one.
    pub group_base: Ipv4Addr,
}

impl Default for Multicast {
    fn default() -> Multicast {
        Multicast {
            group: DEFAULT_GROUP,
            interface: Ipv4Addr::LOCALHOST,
            ttl: 1,
            loopback: true,
            group_base: vipc_engine::GROUP_ADDR_BASE,
        }
    }
}

/// Faults injected into outgoing datagrams, independently per datagram and
/// destination, from a seeded generator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability a datagram is dropped.
    pub loss: f64,
    /// Probability a datagram is sent twice.
    pub duplicate: f64,
    /// Probability a datagram is held back 0.2–2 ms, so that later ones overtake it.
    pub reorder: f64,
    /// Seed of the fault generator.
    pub seed: u64,
}

impl FaultConfig {
    /// True if no fault is configured.
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.duplicate <= 0.0 && self.reorder <= 0.0
    }
}
