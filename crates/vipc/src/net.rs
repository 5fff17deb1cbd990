//! Socket setup: the unicast socket every datagram is sent from, the optional
//! multicast socket that hears the broadcast channel, and the address lists
//! derived from the configuration.

use crate::config::{Multicast, NodeConfig};
use crate::gso::{Gso, Part, Run};
use crate::{Error, Result};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a blocking receive waits before its thread re-checks whether
/// the node has stopped.
pub(crate) const RECV_POLL: Duration = Duration::from_millis(100);

/// Size of a receive buffer: the largest UDP payload fits.
pub(crate) const RECV_BUFFER: usize = 65_536;

/// The node's receive buffer, placed half a page into its page
/// ([`vipc_engine::placed_buffer`]): where the allocator put it, a large
/// datagram's copy could run into 4K aliasing in every receive (with a
/// cluster key, pinned to one CPU: 32 KiB reads 47 µs with the buffer 16
/// bytes into a page, 36–37 µs at 0, 1,072, 1,392 or 2,048). Empty by
/// default, while it travels with the reader token.
#[derive(Default)]
pub(crate) struct RecvBuf {
    mem: Vec<u8>,
    start: usize,
}

impl RecvBuf {
    pub(crate) fn new() -> RecvBuf {
        let (mem, start) = vipc_engine::placed_buffer(RECV_BUFFER);
        RecvBuf { mem, start }
    }
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.mem[self.start..]
    }
}

impl std::ops::DerefMut for RecvBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..]
    }
}

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
    /// The static peers alone (every target but the multicast group).
    pub peers: Vec<SocketAddr>,
    /// How group ids map to multicast addresses, if multicast is enabled.
    pub groups: Option<GroupAddrs>,
    /// Source addresses under which our own datagrams come back to us.
    pub own: Vec<SocketAddr>,
    /// The receive buffer the kernel granted the unicast socket (bytes of
    /// datagrams, overheads included, it queues).
    pub recv_buffer: usize,
}

/// Sets the socket's receive and send buffers to `size`: forced past the
/// system limits when we may (root), else as large as the limits allow.
fn set_buffers(sock: &Socket, size: usize) {
    use nix::sys::socket::{setsockopt, sockopt};
    let size_i = size.min(i32::MAX as usize / 2);
    if setsockopt(sock, sockopt::RcvBufForce, &size_i).is_err() {
        let _ = sock.set_recv_buffer_size(size);
    }
    if setsockopt(sock, sockopt::SndBufForce, &size_i).is_err() {
        let _ = sock.set_send_buffer_size(size);
    }
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
    set_buffers(&sock, cfg.socket_buffer);
    sock.bind(&listen.into()).map_err(bind_error(listen))?;
    if let Some(m) = &cfg.broadcast.multicast {
        sock.set_multicast_if_v4(&m.interface)?;
        sock.set_multicast_ttl_v4(m.ttl)?;
        sock.set_multicast_loop_v4(m.loopback)?;
    }
    sock.set_read_timeout(Some(RECV_POLL))?;
    let recv_buffer = sock.recv_buffer_size().unwrap_or(0);
    let unicast: UdpSocket = sock.into();
    crate::gso::enable_gro(&unicast);
    let local = unicast.local_addr()?;

    let multicast = match (&cfg.broadcast.multicast, local) {
        (Some(m), SocketAddr::V4(l)) => {
            // Our multicast datagrams leave from the interface's address when
            // the listen address is the wildcard.
            let source = if l.ip().is_unspecified() { SocketAddrV4::new(m.interface, l.port()) } else { l };
            Some(open_multicast(m, cfg.socket_buffer, source)?)
        }
        _ => None,
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
    let peers = targets.iter().copied().filter(|a| !a.ip().is_multicast()).collect();
    let groups = cfg.broadcast.multicast.as_ref().map(|m| GroupAddrs {
        base: m.group_base,
        port: m.group.port(),
        interface: m.interface,
        broadcast: *m.group.ip(),
    });
    Ok(Sockets { unicast, multicast, local, targets, own, peers, groups, recv_buffer })
}

/// Where group Sends go with multicast (PROTOCOL §4.10): each group's own
/// address, on the broadcast channel's port and interface.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupAddrs {
    /// The /16 the group addresses are taken from.
    pub base: Ipv4Addr,
    /// The broadcast channel's port, shared by every group address.
    pub port: u16,
    /// The interface to join on.
    pub interface: Ipv4Addr,
    /// The broadcast channel's own group, joined for the node's whole life.
    pub broadcast: Ipv4Addr,
}

impl GroupAddrs {
    /// The socket address a Send to `group` goes to.
    pub fn of(&self, group: vipc_engine::Pid) -> SocketAddrV4 {
        SocketAddrV4::new(vipc_engine::group_multicast_addr(self.base, group), self.port)
    }
}

/// A socket that hears the broadcast channel and the groups with local
/// members: bound to the wildcard address on the group port (so that it can
/// join further group addresses later) with SO_REUSEADDR (so every node on
/// this machine can bind it and each gets its own copy), joined on the
/// configured interface only. IP_MULTICAST_ALL is off, so it hears only the
/// groups it joined itself, not those other sockets of this machine joined on
/// the same port. Not SO_REUSEPORT: with it, a datagram from another host to
/// a group that only some of the nodes on a machine joined went to *one*
/// socket of the port's reuseport group, chosen by a hash of its addresses —
/// half the time one that had not joined it, which dropped it (`vipc exec
/// --on H` failed for about half the clients when a node without a team
/// server shared H's address). Our own datagrams, sent from `own`, are
/// dropped by the kernel (see [`not_from`]).
fn open_multicast(m: &Multicast, buffer: usize, own: SocketAddrV4) -> Result<UdpSocket> {
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, m.group.port()));
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    set_buffers(&sock, buffer);
    sock.bind(&addr.into()).map_err(bind_error(addr))?;
    sock.set_multicast_all_v4(false)?;
    sock.join_multicast_v4(m.group.ip(), &m.interface).map_err(|e| {
        Error::Config(format!("cannot join multicast group {} on interface {}: {e}", m.group.ip(), m.interface))
    })?;
    sock.set_multicast_loop_v4(m.loopback)?;
    if let Err(e) = sock.attach_filter(&not_from(own)) {
        // Still correct: the runtime skips our own datagrams (at the cost of a wake-up).
        tracing::debug!("multicast socket filter: {e}");
    }
    sock.set_read_timeout(Some(RECV_POLL))?;
    Ok(sock.into())
}

/// A classic BPF socket filter that drops the datagrams sent from `own`.
///
/// Every reliable group Send and every announcement goes to the broadcast
/// channel, which the sender has joined too, and IP_MULTICAST_LOOP (which
/// other nodes on this machine need) hands it a copy: without the filter
/// each such Send would wake a reader of the sender's multicast socket only
/// for the copy to be thrown away — a wasted thread wake-up on the sending
/// host, in the middle of the Send, per message.
fn not_from(own: SocketAddrV4) -> [libc::sock_filter; 6] {
    const LOAD_WORD: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const LOAD_HALF: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
    const JUMP_EQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RETURN: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    [
        // The IPv4 source address (offset 12 of the network header).
        op(LOAD_WORD, 0, 0, (libc::SKF_NET_OFF + 12) as u32),
        op(JUMP_EQ, 0, 3, u32::from(*own.ip())),
        // The UDP source port: a UDP socket's filter sees the packet from its UDP header on.
        op(LOAD_HALF, 0, 0, 0),
        op(JUMP_EQ, 0, 1, u32::from(own.port())),
        op(RETURN, 0, 0, 0),        // ours: dropped
        op(RETURN, 0, 0, u32::MAX), // anyone else's: kept whole
    ]
}

/// The address to send a wake-up datagram to our own socket.
pub(crate) fn self_addr(local: SocketAddr) -> SocketAddr {
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, local.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, local.port())),
        _ => local,
    }
}

/// Logs a receive error that is not part of normal operation, and pauses
/// briefly after one so that a persistent error does not spin.
fn receive_failed(e: std::io::Error) {
    // Timeouts end a blocking receive; ConnectionRefused is the echo of an
    // ICMP port-unreachable from a peer that is down.
    if !matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted | ErrorKind::ConnectionRefused
    ) {
        tracing::warn!("receive failed: {e}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One datagram, waiting at most [`RECV_POLL`]; `None` on timeout or error.
pub(crate) fn recv(sock: &UdpSocket, buf: &mut [u8]) -> Option<(usize, SocketAddr)> {
    match recv_one(sock, buf, false) {
        Ok((n, Some(from))) => Some((n, from)),
        Ok((_, None)) => None,
        Err(e) => {
            receive_failed(std::io::Error::from(e));
            None
        }
    }
}

/// One datagram scattered over `a`, then `b`. With `spin = (stop, until)`,
/// polls with non-blocking receives until one arrives, `stop` is set or
/// `until` passes; without, waits at most [`RECV_POLL`]. `None` on timeout or error.
pub(crate) fn recv_parts(
    sock: &UdpSocket,
    a: &mut [u8],
    b: &mut [u8],
    spin: Option<(&AtomicBool, Instant)>,
) -> Option<(usize, SocketAddr)> {
    use nix::sys::socket::{recvmsg, MsgFlags, SockaddrLike, SockaddrStorage};
    let fd = sock.as_raw_fd();
    let flags = if spin.is_some() { MsgFlags::MSG_DONTWAIT } else { MsgFlags::empty() };
    // Made at the first empty poll: a blocking receive reads no clock for it.
    let mut pacing = None;
    let mut rounds = 0u32;
    loop {
        let got = if b.is_empty() {
            // One buffer: recvfrom, which copies no message header or iovec
            // from user memory. A non-blocking poll of an empty socket took
            // 0.38-0.50 us here against 0.53-0.78 for recvmsg, and a
            // spinning receiver notices a datagram one poll after it lands.
            recv_one(sock, a, spin.is_some())
        } else {
            let mut iov = [IoSliceMut::new(&mut *a), IoSliceMut::new(&mut *b)];
            recvmsg::<SockaddrStorage>(fd, &mut iov, None, flags).map(|m| {
                let from = m.address.and_then(|a| match a.family() {
                    Some(nix::sys::socket::AddressFamily::Inet) => a.as_sockaddr_in().map(|a| SocketAddr::from(*a)),
                    Some(nix::sys::socket::AddressFamily::Inet6) => a.as_sockaddr_in6().map(|a| SocketAddr::from(*a)),
                    _ => None,
                });
                (m.bytes, from)
            })
        };
        match got {
            Ok((n, Some(from))) => return Some((n, from)),
            Ok((_, None)) => continue,
            Err(nix::errno::Errno::EAGAIN) => {
                let (stop, until) = spin?;
                rounds = rounds.wrapping_add(1);
                if stop.load(Ordering::Acquire) || (rounds % 8 == 0 && Instant::now() >= until) {
                    return None;
                }
                pacing.get_or_insert_with(Spin::syscalls).pause();
            }
            Err(e) => {
                receive_failed(std::io::Error::from(e));
                return None;
            }
        }
    }
}

/// One datagram into `buf` with `recvfrom` (non-blocking if `dontwait`):
/// its length and source (none if not an IP address).
fn recv_one(sock: &UdpSocket, buf: &mut [u8], dontwait: bool) -> nix::Result<(usize, Option<SocketAddr>)> {
    use rustix::net::RecvFlags;
    let flags = if dontwait { RecvFlags::DONTWAIT } else { RecvFlags::empty() };
    match rustix::net::recvfrom(sock, buf, flags) {
        Ok((n, _, from)) => Ok((n, from.and_then(|a| SocketAddr::try_from(a).ok()))),
        Err(e) => Err(nix::errno::Errno::from_raw(e.raw_os_error())),
    }
}

/// Sends every datagram of `batch`, in order: runs of one size to one
/// address in one system call each ([`crate::gso`]).
pub(crate) fn send_all(sock: &UdpSocket, gso: &Gso, batch: &std::collections::VecDeque<(SocketAddr, Vec<u8>)>) {
    if let (1, Some((to, bytes))) = (batch.len(), batch.front()) {
        return send_one(sock, *to, bytes); // an exchange's one datagram: no run to set up
    }
    let mut run = Run::new(sock, gso, |to, i: usize, _| {
        send_one(sock, to, &batch[i].1);
        true
    });
    for (i, (to, bytes)) in batch.iter().enumerate() {
        run.push(*to, Part::new(&bytes[..]), Part::new(&[][..]), i);
    }
    run.finish();
}

/// Sends one datagram.
fn send_one(sock: &UdpSocket, to: SocketAddr, bytes: &[u8]) {
    // rustix: the system call itself, without libc's cancellation-point wrapper.
    if let Err(e) = rustix::net::sendto(sock, bytes, rustix::net::SendFlags::empty(), &to) {
        // ConnectionRefused is the echo of an ICMP port-unreachable: a peer is down.
        if e != rustix::io::Errno::CONNREFUSED {
            tracing::debug!("send to {to} failed: {e}");
        }
    }
}

/// Pacing of a busy-wait loop: pure spinning for a short while, then a
/// `sched_yield` every `every` rounds, so that a thread sharing our CPU — the
/// peer we wait for, on a machine with fewer free cores than spinners — gets
/// to run, while a yield rarely delays noticing what we wait for.
pub(crate) struct Spin {
    start: Instant,
    pure: Duration,
    rounds: u32,
    every: u32,
    /// Whether `every` follows what yields cost (see [`Spin::syscalls`]).
    adaptive: bool,
}

/// A yield that took longer than this gave the CPU to another thread.
const YIELD_RAN_OTHERS: Duration = Duration::from_micros(2);
/// The longest gap between yields of an adaptive spinner.
const MAX_YIELD_GAP: u32 = 16;

thread_local! {
    /// An adaptive spinner's yield gap, kept from one wait to the next: a
    /// thread's CPU stays shared, or free, for longer than a wait.
    static YIELD_GAP: std::cell::Cell<u32> = const { std::cell::Cell::new(1) };
}

impl Spin {
    /// For a loop whose rounds are cheap (a flag load): spin 2 µs, then yield
    /// every 64 rounds (about 2 µs apart).
    pub(crate) fn cheap() -> Spin {
        Spin { start: Instant::now(), pure: Duration::from_micros(2), rounds: 0, every: 64, adaptive: false }
    }

    /// For a loop whose rounds are system calls (a non-blocking receive,
    /// about as costly as a yield): after 0.5 µs, yield — every round while
    /// yields give the CPU away, rarer (up to every 16th round) while they
    /// come straight back. The datagram we wait for comes from another
    /// process; if it shares our CPU, each round we do not yield delays it by
    /// a whole round (measured with `perf remote`, pinned to one CPU: 1.27 ×
    /// the busy-poll UDP ping-pong yielding every 8 rounds after 2 µs, 0.87 ×
    /// yielding every round after 0.5 µs); if it has a CPU of its own, each
    /// yield only delays our noticing it by a system call.
    pub(crate) fn syscalls() -> Spin {
        let every = YIELD_GAP.with(|g| g.get());
        Spin { start: Instant::now(), pure: Duration::from_nanos(500), rounds: 0, every, adaptive: true }
    }

    /// One round of waiting.
    pub(crate) fn pause(&mut self) {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % self.every != 0 || self.start.elapsed() < self.pure {
            std::hint::spin_loop();
            return;
        }
        if !self.adaptive {
            std::thread::yield_now();
            return;
        }
        let before = Instant::now();
        std::thread::yield_now();
        self.every = next_yield_gap(self.every, before.elapsed());
        YIELD_GAP.with(|g| g.set(self.every));
    }
}

/// An adaptive spinner's next yield gap after a yield that took `took`:
/// every round once a yield ran another thread, else twice the gap (capped).
fn next_yield_gap(every: u32, took: Duration) -> u32 {
    if took > YIELD_RAN_OTHERS {
        1
    } else {
        (every * 2).min(MAX_YIELD_GAP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_multicast_socket_hears_other_nodes_but_never_its_own_datagrams() {
        let r = rand::random::<u32>();
        let group =
            SocketAddrV4::new(Ipv4Addr::new(239, 255, (r >> 8) as u8, r as u8 | 1), 20_000 + (r >> 16) as u16 % 40_000);
        let mut cfg = NodeConfig::default();
        cfg.broadcast.multicast = Some(Multicast { group, ..Multicast::default() });
        let ours = open(&cfg).unwrap();
        let heard = ours.multicast.expect("multicast is configured");
        heard.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let other = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        other.set_multicast_if_v4(&Ipv4Addr::LOCALHOST).unwrap();
        other.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into()).unwrap();
        let other: UdpSocket = other.into();

        ours.unicast.send_to(b"own", group).unwrap();
        other.send_to(b"other", group).unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = heard.recv_from(&mut buf).expect("another node's datagram is heard");
        assert_eq!((&buf[..n], from), (&b"other"[..], other.local_addr().unwrap()));
        ours.unicast.send_to(b"own again", group).unwrap();
        let more = heard.recv_from(&mut buf).map(|(n, from)| (buf[..n].to_vec(), from));
        assert!(more.is_err(), "our own datagram came back: {more:?}");
    }

    /// Both receive paths — one buffer (recvfrom) and two (recvmsg) — give
    /// the datagram and its source; a spinning receive of an empty socket
    /// gives up at its deadline.
    #[test]
    fn a_datagram_is_received_whole_into_one_buffer_or_two() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = rx.local_addr().unwrap();
        let stop = AtomicBool::new(false);
        let spin = || Some((&stop, Instant::now() + Duration::from_secs(5)));
        tx.send_to(b"one buffer", to).unwrap();
        let mut a = [0u8; 64];
        assert_eq!(recv_parts(&rx, &mut a, &mut [], spin()), Some((10, tx.local_addr().unwrap())));
        assert_eq!(&a[..10], b"one buffer");
        tx.send_to(b"two buffers", to).unwrap();
        let (mut a, mut b) = ([0u8; 4], [0u8; 64]);
        assert_eq!(recv_parts(&rx, &mut a, &mut b, None), Some((11, tx.local_addr().unwrap())));
        assert_eq!((&a[..], &b[..7]), (&b"two "[..], &b"buffers"[..]));
        let until = Instant::now() + Duration::from_millis(20);
        assert_eq!(recv_parts(&rx, &mut a, &mut [], Some((&stop, until))), None);
        assert!(Instant::now() >= until, "not before its deadline");
    }

    #[test]
    fn yield_gap_doubles_while_yields_come_back_and_resets_when_one_ran_others() {
        let fast = Duration::from_nanos(300);
        let mut every = 1;
        let mut seen = Vec::new();
        for _ in 0..6 {
            every = next_yield_gap(every, fast);
            seen.push(every);
        }
        assert_eq!(seen, [2, 4, 8, 16, 16, 16]);
        assert_eq!(next_yield_gap(16, Duration::from_micros(30)), 1);
        assert_eq!(next_yield_gap(1, YIELD_RAN_OTHERS), 2, "exactly the threshold is still straight back");
    }

    #[test]
    fn a_spinner_starts_from_its_threads_last_gap() {
        std::thread::spawn(|| {
            assert_eq!(Spin::syscalls().every, 1, "a new thread yields at every round");
            YIELD_GAP.with(|g| g.set(8));
            assert_eq!(Spin::syscalls().every, 8);
            assert_eq!(Spin::cheap().every, 64, "a flag spinner does not adapt");
        })
        .join()
        .unwrap();
    }
}
