//! Socket setup: the unicast socket every datagram is sent from, the optional
//! multicast socket that hears the broadcast channel, and the address lists
//! derived from the configuration.

use crate::config::{Multicast, NodeConfig};
use crate::{Error, Result};
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

/// How long a network thread's `recv_from` blocks before it re-checks whether
/// the node has stopped.
pub(crate) const RECV_POLL: Duration = Duration::from_millis(100);

/// The node's sockets and the addresses derived from its configuration.
pub(crate) struct Sockets {
    /// Bound to the listen address; all transmits leave from it.
    pub unicast: UdpSocket,
    /// Bound to the multicast group's port and joined to the group, if enabled.
    pub multicast: Option<UdpSocket>,
    /// The unicast socket's actual address.
    pub local: SocketAddr,
    /// Where a broadcast goes: the group (if any) and every static peer but ourselves.
    pub targets: Vec<SocketAddr>,
    /// Source addresses under which our own datagrams come back to us.
    pub own: Vec<SocketAddr>,
}

fn bind_error(addr: SocketAddr) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Bind { addr, source }
}

/// Opens and configures the sockets of a node.
pub(crate) fn open(cfg: &NodeConfig) -> Result<Sockets> {
    let listen = cfg.listen;
    if let Some(m) = &cfg.broadcast.multicast {
        if !listen.is_ipv4() {
            return Err(Error::Config(format!(
                "the multicast group {} is IPv4 but the listen address {listen} is IPv6: disable multicast and use static peers",
                m.group
            )));
        }
        if !m.group.ip().is_multicast() {
            return Err(Error::Config(format!("{} is not a multicast address", m.group.ip())));
        }
    }
    for p in &cfg.broadcast.peers {
        if p.is_ipv4() != listen.is_ipv4() || p.port() == 0 || p.ip().is_unspecified() {
            return Err(Error::Config(format!("peer {p} cannot be reached from the listen address {listen}")));
        }
    }

    let sock = Socket::new(Domain::for_address(listen), Type::DGRAM, Some(Protocol::UDP))?;
    // Buffer sizes are requests; the kernel caps them at its limits.
    let _ = sock.set_recv_buffer_size(cfg.socket_buffer);
    let _ = sock.set_send_buffer_size(cfg.socket_buffer);
    sock.bind(&listen.into()).map_err(bind_error(listen))?;
    if let Some(m) = &cfg.broadcast.multicast {
        sock.set_multicast_if_v4(&m.interface)?;
        sock.set_multicast_ttl_v4(m.ttl)?;
        sock.set_multicast_loop_v4(m.loopback)?;
    }
    sock.set_read_timeout(Some(RECV_POLL))?;
    let unicast: UdpSocket = sock.into();
    let local = unicast.local_addr()?;

    let multicast = match &cfg.broadcast.multicast {
        Some(m) => Some(open_multicast(m, cfg.socket_buffer)?),
        None => None,
    };

    let mut own = vec![local];
    if local.ip().is_unspecified() {
        let port = local.port();
        match local.ip() {
            IpAddr::V4(_) => {
                own.push(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
                if let Some(m) = &cfg.broadcast.multicast {
                    own.push(SocketAddr::from((m.interface, port)));
                }
            }
            IpAddr::V6(_) => own.push(SocketAddr::from((Ipv6Addr::LOCALHOST, port))),
        }
    }
    let mut targets: Vec<SocketAddr> = Vec::new();
    if let Some(m) = &cfg.broadcast.multicast {
        targets.push(SocketAddr::V4(m.group));
    }
    for p in &cfg.broadcast.peers {
        if !own.contains(p) && !targets.contains(p) {
            targets.push(*p);
        }
    }
    Ok(Sockets { unicast, multicast, local, targets, own })
}

/// A socket that hears the group: bound to the group address and port with
/// SO_REUSEADDR and SO_REUSEPORT (so every node on this machine hears it),
/// joined on the configured interface only.
fn open_multicast(m: &Multicast, buffer: usize) -> Result<UdpSocket> {
    let addr = SocketAddr::V4(m.group);
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    let _ = sock.set_recv_buffer_size(buffer);
    sock.bind(&addr.into()).map_err(bind_error(addr))?;
    sock.join_multicast_v4(m.group.ip(), &m.interface).map_err(|e| {
        Error::Config(format!("cannot join multicast group {} on interface {}: {e}", m.group.ip(), m.interface))
    })?;
    sock.set_multicast_loop_v4(m.loopback)?;
    sock.set_read_timeout(Some(RECV_POLL))?;
    Ok(sock.into())
}

/// The address to send a wake-up datagram to our own socket.
pub(crate) fn self_addr(local: SocketAddr) -> SocketAddr {
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, local.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, local.port())),
        _ => local,
    }
}
