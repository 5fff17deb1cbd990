//! The group multicast addresses a node listens on.
//!
//! Linux lets one socket hold `net.ipv4.igmp_max_memberships` addresses (20
//! by default), and the multicast socket already holds the broadcast
//! channel. Past that, a join fails with ENOBUFS: a node with members of more
//! groups than that would miss the rest's Sends. So an address the reading
//! socket has no room for is joined on a *holder*, a socket bound to an
//! ephemeral port that is never read, and the reading socket is switched to
//! IP_MULTICAST_ALL, which makes it hear every address joined on this
//! machine on its port. Until then it hears only its own (see
//! `net::open_multicast`): the switch costs some stray traffic from other
//! nodes' groups on the same machine, never a lost Send (receivers filter
//! group Sends by group id).

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, UdpSocket};

/// Where each address is joined and how many local groups map to it.
#[derive(Debug, Default)]
pub(crate) struct Memberships {
    /// Address → (local groups mapped to it, the holder it is joined on:
    /// `None` for the reading socket).
    joined: HashMap<Ipv4Addr, (u32, Option<usize>)>,
    /// Holders: the socket, its addresses, whether it refused one (full).
    holders: Vec<(UdpSocket, u32, bool)>,
    /// The reading socket hears the holders' addresses (IP_MULTICAST_ALL).
    hears_all: bool,
}

impl Memberships {
    /// One more local group maps to `addr`: joins it on the first.
    pub fn join(&mut self, reader: &UdpSocket, addr: Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        let count = &mut self.joined.entry(addr).or_insert((0, None)).0;
        *count += 1;
        if *count > 1 {
            return Ok(());
        }
        let r = match reader.join_multicast_v4(&addr, interface) {
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.join_on_holder(reader, addr, interface),
            r => r,
        };
        if r.is_err() {
            self.joined.remove(&addr);
        }
        r
    }

    fn join_on_holder(&mut self, reader: &UdpSocket, addr: Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        if !self.hears_all {
            socket2::SockRef::from(reader).set_multicast_all_v4(true)?;
            self.hears_all = true;
        }
        loop {
            let i = match self.holders.iter().position(|h| !h.2) {
                Some(i) => i,
                None => {
                    self.holders.push((UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?, 0, false));
                    self.holders.len() - 1
                }
            };
            let holder = &mut self.holders[i];
            match holder.0.join_multicast_v4(&addr, interface) {
                Ok(()) => {
                    holder.1 += 1;
                    self.joined.insert(addr, (1, Some(i)));
                    return Ok(());
                }
                // Full: the next holder (a new one refusing too would be another limit).
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && holder.1 > 0 => holder.2 = true,
                Err(e) => return Err(e),
            }
        }
    }

    /// One local group fewer maps to `addr`: leaves it with the last.
    pub fn leave(&mut self, reader: &UdpSocket, addr: Ipv4Addr, interface: &Ipv4Addr) -> io::Result<()> {
        let Some((count, on)) = self.joined.get_mut(&addr) else { return Ok(()) };
        *count -= 1;
        if *count > 0 {
            return Ok(());
        }
        let on = *on;
        self.joined.remove(&addr);
        match on {
            None => reader.leave_multicast_v4(&addr, interface),
            Some(i) => {
                let holder = &mut self.holders[i];
                (holder.1, holder.2) = (holder.1 - 1, false);
                holder.0.leave_multicast_v4(&addr, interface)
            }
        }
    }
}
