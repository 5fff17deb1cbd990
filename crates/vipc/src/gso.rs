//! Sending runs of datagrams with UDP generic segmentation offload (GSO):
//! consecutive datagrams of one size to one address (the last may be
//! shorter) leave in one `sendmsg`, and the kernel — or the network card —
//! cuts them apart. A bulk stream to a peer behind a 1,500-byte MTU sends
//! 1,472-byte datagrams; one system call each was most of its cost (a
//! 256 MiB `vipc cp` between two network namespaces: 300 MB/s, TCP on the
//! same link 2,600). A receiver is none the wiser: without UDP GRO its
//! kernel hands it the datagrams one by one; with GRO (vipc's own sockets,
//! [`enable_gro`]), several at once, which [`vipc_wire::coalesced`] splits.

use nix::errno::Errno;
use nix::sys::socket::{sendmsg, MsgFlags, SockaddrStorage};
use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` was 64
/// until 6.x raised it).
pub(crate) const MAX_SEGMENTS: usize = 64;
/// Most bytes of one GSO send: the UDP payload of one IPv4 packet, which
/// the kernel builds before cutting it.
pub(crate) const MAX_BYTES: usize = vipc_wire::MAX_DATAGRAM;

/// What this socket's kernel lets GSO do, learned from its refusals.
#[derive(Debug)]
pub(crate) struct Gso {
    /// Datagrams up to this size are sent in runs. A run refused with
    /// EINVAL (a datagram larger than the path's MTU, which only IP
    /// fragmentation can carry; a kernel without GSO) lowers it below that
    /// size; EIO (a device that cannot checksum) turns GSO off.
    max_segment: AtomicUsize,
    /// Runs sent in one call ([`vipc_engine::Stats::runs_sent`]).
    runs: AtomicU64,
}

impl Gso {
    /// GSO on, for datagrams of any size.
    pub(crate) fn new() -> Gso {
        Gso { max_segment: AtomicUsize::new(usize::MAX), runs: AtomicU64::new(0) }
    }

    /// How many runs went in one call each.
    pub(crate) fn runs_sent(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    /// GSO off: every datagram is sent on its own.
    #[cfg(test)]
    pub(crate) fn off() -> Gso {
        Gso { max_segment: AtomicUsize::new(0), runs: AtomicU64::new(0) }
    }

    /// Panics unless runs of `segment`-byte datagrams are still sent with GSO.
    #[cfg(test)]
    pub(crate) fn runs_allowed(&self, segment: usize) {
        assert!(self.allows(segment), "GSO narrowed below {segment} bytes");
    }

    fn allows(&self, segment: usize) -> bool {
        segment <= self.max_segment.load(Ordering::Relaxed)
    }

    fn refused(&self, segment: usize, e: Errno) {
        let limit = match e {
            Errno::EIO | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP => 0,
            Errno::EINVAL | Errno::EMSGSIZE => segment - 1,
            _ => return, // e.g. EAGAIN: a full socket buffer, not GSO's doing
        };
        let was = self.max_segment.fetch_min(limit, Ordering::Relaxed);
        if limit < was {
            tracing::debug!("UDP GSO refused ({e}) for {segment}-byte datagrams: sent one by one from now on");
        }
    }
}

/// Asks the kernel to hand over datagrams of one sender coalesced (UDP
/// GRO). Every receive on the socket must then split what it got
/// ([`vipc_wire::coalesced::datagrams`]). Kernels without it ignore the request.
pub(crate) fn enable_gro(sock: &UdpSocket) {
    if let Err(e) = nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::UdpGroSegment, &true) {
        tracing::debug!("UDP GRO not available: {e}");
    }
}

/// A part of a datagram (a header, or data sent without being joined to it).
pub(crate) type Part<'a> = IoSlice<'a>;

/// Datagrams collected into runs and sent: [`Run::push`] each in order,
/// then [`Run::finish`]. A datagram is up to two parts sent without being
/// joined (a header and lent data) and a tag of the caller's. A datagram
/// sent alone, and every datagram of a run the kernel refused, is sent by
/// the caller's `one(to, tag, parts)`: only the caller knows whether it may
/// block, and what to keep of a datagram that could not go. A `one` that
/// says it could not send (a full socket buffer, [`Run::nonblocking`])
/// stalls the run: every later datagram is handed to `one` as well, in
/// order, for the caller to keep.
pub(crate) struct Run<'a, 'g, T, F> {
    sock: &'a UdpSocket,
    gso: &'g Gso,
    to: Option<SocketAddr>,
    /// Size of the run's first datagram: every one but the last has it.
    segment: usize,
    count: usize,
    bytes: usize,
    /// A datagram shorter than `segment` ended the run.
    closed: bool,
    parts: [Part<'a>; 2 * MAX_SEGMENTS],
    used: usize,
    /// Each datagram's tag and where its parts start in `parts`.
    marks: [(T, usize); MAX_SEGMENTS],
    one: F,
    flags: MsgFlags,
    /// `one` could not send: nothing more is sent.
    stalled: bool,
}

impl<'a, 'g, T: Copy + Default, F: FnMut(SocketAddr, T, &[Part<'a>]) -> bool> Run<'a, 'g, T, F> {
    pub(crate) fn new(sock: &'a UdpSocket, gso: &'g Gso, one: F) -> Run<'a, 'g, T, F> {
        Run {
            sock,
            gso,
            to: None,
            segment: 0,
            count: 0,
            bytes: 0,
            closed: false,
            parts: [Part::new(&[]); 2 * MAX_SEGMENTS],
            used: 0,
            marks: [(T::default(), 0); MAX_SEGMENTS],
            one,
            flags: MsgFlags::empty(),
            stalled: false,
        }
    }

    /// Runs that never block: a full socket buffer refuses them (and `one` says so).
    pub(crate) fn nonblocking(mut self) -> Self {
        self.flags = MsgFlags::MSG_DONTWAIT;
        self
    }

    /// Adds the datagram `head` + `data` for `to`, sending the run so far
    /// first if the datagram cannot join it.
    pub(crate) fn push(&mut self, to: SocketAddr, head: Part<'a>, data: Part<'a>, tag: T) {
        let len = head.len() + data.len();
        let joins = self.to == Some(to)
            && len > 0
            && !self.closed
            && len <= self.segment
            && self.count < MAX_SEGMENTS
            && self.bytes + len <= MAX_BYTES
            && self.gso.allows(self.segment);
        if !joins {
            self.flush();
            self.to = Some(to);
            self.segment = len;
        }
        self.closed = len < self.segment;
        self.marks[self.count] = (tag, self.used);
        self.count += 1;
        self.bytes += len;
        for part in [head, data] {
            if !part.is_empty() {
                self.parts[self.used] = part;
                self.used += 1;
            }
        }
    }

    /// Sends what is collected.
    pub(crate) fn finish(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        let Some(to) = self.to.take() else { return };
        let sent = self.count > 1
            && !self.stalled
            && match send_gso(self.sock, to, &self.parts[..self.used], self.segment, self.flags) {
                Ok(()) => {
                    self.gso.runs.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(e) => {
                    self.gso.refused(self.segment, e);
                    false
                }
            };
        if !sent {
            for i in 0..self.count {
                let (tag, first) = self.marks[i];
                let end = if i + 1 < self.count { self.marks[i + 1].1 } else { self.used };
                let sent = (self.one)(to, tag, &self.parts[first..end]);
                self.stalled |= !sent;
            }
        }
        (self.count, self.bytes, self.used, self.closed) = (0, 0, 0, false);
    }
}

/// One sendmsg of `parts` cut into datagrams of `segment` bytes.
fn send_gso(
    sock: &UdpSocket,
    to: SocketAddr,
    parts: &[Part<'_>],
    segment: usize,
    flags: MsgFlags,
) -> Result<(), Errno> {
    use nix::sys::socket::ControlMessage;
    let size = segment as u16; // at most MAX_BYTES
    match sendmsg(
        sock.as_raw_fd(),
        parts,
        &[ControlMessage::UdpGsoSegments(&size)],
        flags,
        Some(&SockaddrStorage::from(to)),
    ) {
        Ok(_) | Err(Errno::ECONNREFUSED) => Ok(()), // ICMP port-unreachable: a peer is down
        Err(e) => Err(e),
    }
}

/// One datagram made of `parts` (the `one` of a [`Run`] of bytes in
/// memory), a failure logged: true, as sent.
pub(crate) fn send_logged(sock: &UdpSocket, to: SocketAddr, parts: &[Part<'_>]) -> bool {
    send_parts(sock, to, parts, MsgFlags::empty());
    true
}

/// [`send_logged`] that never blocks: false if the socket's buffer is full
/// (nothing was sent).
pub(crate) fn try_send(sock: &UdpSocket, to: SocketAddr, parts: &[Part<'_>]) -> bool {
    send_parts(sock, to, parts, MsgFlags::MSG_DONTWAIT)
}

fn send_parts(sock: &UdpSocket, to: SocketAddr, parts: &[Part<'_>], flags: MsgFlags) -> bool {
    match sendmsg(sock.as_raw_fd(), parts, &[], flags, Some(&SockaddrStorage::from(to))) {
        Ok(_) | Err(Errno::ECONNREFUSED) => true, // ICMP port-unreachable: a peer is down
        Err(Errno::EAGAIN) => false,
        Err(e) => {
            tracing::debug!("send to {to} failed: {e}");
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vipc_wire::coalesced::datagrams;
    use vipc_wire::{Header, PacketType};

    /// A vipc datagram with `n` data bytes, all `fill`.
    fn datagram(n: usize, fill: u8) -> Vec<u8> {
        vipc_wire::to_vec(&Header::new(PacketType::MoveToData), &vec![fill; n], None)
    }

    fn socket(gro: bool) -> UdpSocket {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        if gro {
            enable_gro(&s);
        }
        s
    }

    /// Sends `sent` (header and data as two parts) in one run to `to`.
    fn send_run(tx: &UdpSocket, gso: &Gso, to: SocketAddr, sent: &[Vec<u8>]) {
        let mut run = Run::new(tx, gso, |to, (), parts| send_logged(tx, to, parts));
        for d in sent {
            let (head, data) = d.split_at(vipc_wire::HEADER_LEN);
            run.push(to, Part::new(head), Part::new(data), ());
        }
        run.finish();
    }

    #[test]
    fn runs_of_parts_arrive_as_their_datagrams() {
        let sent: Vec<Vec<u8>> = (0..5).map(|i| datagram(1400, i)).chain([datagram(300, 9)]).collect();
        let (tx, plain, gro) = (socket(false), socket(false), socket(true));
        let gso = Gso::new();
        // A receiver without GRO gets them one by one, in order.
        send_run(&tx, &gso, plain.local_addr().unwrap(), &sent);
        let mut buf = vec![0u8; 65_536];
        for d in &sent {
            let n = plain.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &d[..]);
        }
        // One with GRO gets the run as one buffer (one send: loopback keeps
        // it whole), which splits into the same datagrams.
        send_run(&tx, &gso, gro.local_addr().unwrap(), &sent);
        let n = gro.recv(&mut buf).unwrap();
        assert_eq!(n, sent.iter().map(Vec::len).sum::<usize>(), "one coalesced receive");
        let got: Vec<&[u8]> = datagrams(&buf[..n]).collect();
        assert_eq!(got, sent.iter().map(|d| &d[..]).collect::<Vec<_>>());
        assert_eq!(gso.max_segment.load(Ordering::Relaxed), usize::MAX, "nothing refused");
    }

    #[test]
    fn runs_end_at_another_address_a_longer_datagram_or_the_size_limit() {
        let (tx, a, b) = (socket(false), socket(true), socket(true));
        let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let gso = Gso::new();
        let mut all = vec![(to_a, datagram(500, 1)), (to_a, datagram(900, 2)), (to_b, datagram(900, 3))];
        all.extend((0..50).map(|i| (to_a, datagram(1400, i))));
        let mut run = Run::new(&tx, &gso, |to, (), parts| send_logged(&tx, to, parts));
        for (to, d) in &all {
            let (head, data) = d.split_at(vipc_wire::HEADER_LEN);
            run.push(*to, Part::new(head), Part::new(data), ());
        }
        run.finish();
        let mut buf = vec![0u8; 65_536];
        let mut sizes = |s: &UdpSocket| -> Vec<usize> {
            let mut v = Vec::new();
            s.set_read_timeout(Some(std::time::Duration::from_millis(200))).unwrap();
            while let Ok(n) = s.recv(&mut buf) {
                v.push(datagrams(&buf[..n]).count());
            }
            v
        };
        // The 900 after the 500 is longer: a send of its own. Of the fifty
        // 1,472-byte datagrams 44 fit in one 65,507-byte send, the rest in the next.
        assert_eq!(sizes(&a), vec![1, 1, 44, 6]);
        assert_eq!(sizes(&b), vec![1]);
    }

    #[test]
    fn a_refusal_narrows_gso_and_the_run_still_goes() {
        let gso = Gso::new();
        gso.refused(1472, Errno::EAGAIN);
        assert!(gso.allows(1472), "a full buffer is not GSO's doing");
        gso.refused(1472, Errno::EINVAL);
        assert!(!gso.allows(1472) && gso.allows(1471), "EINVAL: not at that size");
        gso.refused(500, Errno::EIO);
        assert!(!gso.allows(1), "EIO: off");
        // With GSO off, a run leaves datagram by datagram.
        let (tx, gro) = (socket(false), socket(true));
        let sent: Vec<Vec<u8>> = (0..3).map(|i| datagram(1000, i)).collect();
        send_run(&tx, &Gso::off(), gro.local_addr().unwrap(), &sent);
        let mut buf = vec![0u8; 65_536];
        for d in &sent {
            let n = gro.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &d[..], "one datagram per receive");
        }
    }
}
