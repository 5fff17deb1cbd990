//! The floor under suite `groups`: what plain UDP costs for the same
//! exchanges between the same namespaces, with no vipc in the path.
//!
//! Every member host runs an echo thread on [`RAW_PORT`] that joins the raw
//! multicast address of each group size it is a member of and sends every
//! datagram straight back to its sender. The client measures a unicast
//! echo with host 1 (the floor under the unicast exchange) and one datagram
//! multicast to the `S` echoes of a size, timing the first and the last of
//! the `S` answers (the floors under 1-reliable and ALL_REPLY: one packet
//! out, `S` back, each host's kernel and one user thread in the path).

use crate::error::Result;
use socket2::{Domain, Protocol, Socket, Type};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

/// The echoes' port (apart from the nodes' 7701 and the channel's 7702).
pub const RAW_PORT: u16 = 7703;

/// How long the client waits for the answers of one datagram before it
/// counts the round lost and sends the next (loss is rare on a bridge).
const ROUND_LIMIT: Duration = Duration::from_millis(50);

/// The raw multicast address of the echoes of the group of `size` hosts.
pub fn raw_group_addr(size: usize) -> Ipv4Addr {
    Ipv4Addr::new(239, 255, 88, size as u8)
}

/// Starts the echo thread of a member host whose interface has address
/// `ip`, joined to the raw addresses of `sizes`.
pub fn spawn_echo(ip: Ipv4Addr, sizes: &[usize]) -> Result<()> {
    let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    sock.bind(&SocketAddr::from((Ipv4Addr::UNSPECIFIED, RAW_PORT)).into())?;
    for &s in sizes {
        sock.join_multicast_v4(&raw_group_addr(s), &ip)?;
    }
    let sock: UdpSocket = sock.into();
    std::thread::Builder::new().name("raw-echo".into()).spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    })?;
    Ok(())
}

/// The client's side: one socket, rounds numbered so that a late answer of
/// a lost round is never taken for the current one.
pub struct RawClient {
    sock: UdpSocket,
    round: u64,
}

/// The times of one round that got every answer.
pub struct Round {
    pub first: Duration,
    pub all: Duration,
}

impl RawClient {
    /// A client sending from `ip` (its multicast goes out of that interface).
    pub fn new(ip: Ipv4Addr) -> Result<RawClient> {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))?;
        sock.bind(&SocketAddr::from((ip, 0)).into())?;
        sock.set_multicast_if_v4(&ip)?;
        sock.set_read_timeout(Some(ROUND_LIMIT))?;
        let sock: UdpSocket = sock.into();
        Ok(RawClient { sock, round: 0 })
    }

    /// One 32-byte datagram to `to`, waiting for `answers` echoes of it;
    /// `None` when they did not all come within the round's limit.
    pub fn round(&mut self, to: SocketAddrV4, answers: usize) -> Result<Option<Round>> {
        self.round += 1;
        let mut msg = [0u8; 32];
        msg[..8].copy_from_slice(&self.round.to_le_bytes());
        let start = Instant::now();
        self.sock.send_to(&msg, to)?;
        let (mut got, mut first) = (0, Duration::ZERO);
        let mut buf = [0u8; 64];
        while got < answers {
            match self.sock.recv_from(&mut buf) {
                Ok((n, _)) if n >= 8 && buf[..8] == self.round.to_le_bytes() => {
                    got += 1;
                    if got == 1 {
                        first = start.elapsed();
                    }
                }
                Ok(_) => {} // a late echo of an earlier round
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Ok(None);
                }
                Err(e) => return Err(e.into()),
            }
            if start.elapsed() > ROUND_LIMIT {
                return Ok(None);
            }
        }
        Ok(Some(Round { first, all: start.elapsed() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_counts_only_its_own_echoes() {
        // An echo that answers the first round and answers the second with
        // the first round's number: the second round is lost, not met by
        // the stale answer.
        let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(to) = echo.local_addr().unwrap() else { unreachable!() };
        let mut c = RawClient::new(Ipv4Addr::LOCALHOST).unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let (n, from) = echo.recv_from(&mut buf).unwrap();
            echo.send_to(&buf[..n], from).unwrap();
            let first_round = buf;
            let (n, from) = echo.recv_from(&mut buf).unwrap();
            echo.send_to(&first_round[..n], from).unwrap();
        });
        let r = c.round(to, 1).unwrap().expect("the round's own echo arrives");
        assert!(r.all >= r.first);
        assert!(c.round(to, 1).unwrap().is_none(), "a stale echo must not complete a round");
        t.join().unwrap();
    }
}
