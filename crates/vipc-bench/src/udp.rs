//! Raw UDP baselines: the network penalty (a datagram or a stream of them
//! there and back, halved) and ping-pong, blocking or busy-polling.
//!
//! Every datagram starts with a 12-byte header: exchange id (u32), index in
//! the stream (u16), stream length (u16), reply length (u32), little-endian.
//! The echo peer collects a whole stream, then answers it: with one datagram
//! of `reply length` bytes if that is non-zero, else with datagrams of the
//! same sizes as the ones it received (streamed back to back).

use crate::error::{BenchError, Result};
use crate::peer::{announce, exit_when_stdin_closes, say, stdin_lines, PeerArgs};
use socket2::{Domain, Socket, Type};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// Bytes of the header every baseline datagram carries.
pub const HEADER: usize = 12;
/// Socket buffers of the UDP baselines.
const BUFFER: usize = 4 << 20;
/// A spinning socket falls back to blocking after this long without traffic.
///
/// Short, so that a spinning echo server does not hold a core while the
/// next probe (another baseline) runs.
const SPIN_IDLE: Duration = Duration::from_millis(1);
/// How long the client waits for an answer before sending the stream again.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// A UDP socket on loopback with large buffers.
pub fn socket(addr: SocketAddr) -> Result<UdpSocket> {
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, None)?;
    let _ = s.set_recv_buffer_size(BUFFER);
    let _ = s.set_send_buffer_size(BUFFER);
    s.bind(&addr.into())?;
    Ok(s.into())
}

fn put_header(buf: &mut [u8], id: u32, index: u16, total: u16, reply_len: u32) {
    buf[0..4].copy_from_slice(&id.to_le_bytes());
    buf[4..6].copy_from_slice(&index.to_le_bytes());
    buf[6..8].copy_from_slice(&total.to_le_bytes());
    buf[8..12].copy_from_slice(&reply_len.to_le_bytes());
}

fn get_header(buf: &[u8]) -> (u32, u16, u16, u32) {
    let u32_at = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    (u32_at(0), u16::from_le_bytes([buf[4], buf[5]]), u16::from_le_bytes([buf[6], buf[7]]), u32_at(8))
}

/// Receives one datagram, busy-polling (non-blocking recv in a loop) when
/// `spin`; a spinning receiver blocks after [`SPIN_IDLE`] without traffic.
/// `None` on timeout (a blocking socket's timeout is its read timeout).
fn recv(
    sock: &UdpSocket,
    buf: &mut [u8],
    spin: bool,
    timeout: Option<Duration>,
) -> Result<Option<(usize, SocketAddr)>> {
    if spin {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            match sock.recv_from(buf) {
                Ok(r) => return Ok(Some(r)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
            spins = spins.wrapping_add(1);
            // Let another runnable thread of this core go first now and then:
            // on a loaded 2-core machine two spinners would otherwise hold a
            // core each for whole scheduler time slices.
            if spins % 16 == 0 {
                std::thread::yield_now();
            }
            if spins % 256 == 0 {
                let idle = start.elapsed();
                if let Some(t) = timeout {
                    if idle >= t {
                        return Ok(None);
                    }
                }
                if idle >= SPIN_IDLE && timeout.is_none() {
                    sock.set_nonblocking(false)?;
                    sock.set_read_timeout(None)?;
                    let r = sock.recv_from(buf);
                    sock.set_nonblocking(true)?;
                    return Ok(Some(r?));
                }
            }
            std::hint::spin_loop();
        }
    }
    // A blocking socket's read timeout is set once by its owner.
    match sock.recv_from(buf) {
        Ok(r) => Ok(Some(r)),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Largest datagram of an answer.
const ANSWER_PACKET: usize = 65_000;

/// An answer of `len` bytes: its length (at least a header) and its datagrams.
fn answer_parts(len: usize) -> (usize, usize) {
    let len = len.max(HEADER);
    (len, len.div_ceil(ANSWER_PACKET))
}

/// The echo peer (`udp-echo [--spin]`): answers streams until stdin closes.
pub fn echo_peer(a: &PeerArgs) -> Result<()> {
    let spin = a.flag("spin");
    let sock = echo_socket(spin)?;
    announce(&[("addr", sock.local_addr()?.to_string())]);
    exit_when_stdin_closes();
    echo(&sock, spin)
}

/// A socket on loopback for [`echo`].
pub fn echo_socket(spin: bool) -> Result<UdpSocket> {
    let sock = socket("127.0.0.1:0".parse().map_err(|_| "addr")?)?;
    sock.set_nonblocking(spin)?;
    Ok(sock)
}

/// Answers streams on `sock` (see the module docs), for ever.
pub fn echo(sock: &UdpSocket, spin: bool) -> Result<()> {
    let mut buf = vec![0u8; 65_536];
    let mut out = vec![0u8; 65_536];
    let (mut cur, mut count, mut lens) = (u32::MAX, 0u16, Vec::<usize>::new());
    loop {
        let Some((n, from)) = recv(sock, &mut buf, spin, None)? else { continue };
        if n < HEADER {
            continue;
        }
        let (id, _index, total, reply_len) = get_header(&buf);
        if total <= 1 && reply_len == 0 {
            sock.send_to(&buf[..n], from)?;
            continue;
        }
        if id != cur {
            (cur, count) = (id, 0);
            lens.clear();
        }
        count += 1;
        lens.push(n);
        if count < total {
            continue;
        }
        out[..HEADER].copy_from_slice(&buf[..HEADER]);
        if reply_len > 0 {
            // One datagram, or as many as an answer larger than one needs.
            let (mut left, parts) = answer_parts(reply_len as usize);
            for i in 0..parts {
                let len = left.clamp(HEADER, ANSWER_PACKET);
                left = left.saturating_sub(len);
                put_header(&mut out, id, i as u16, parts as u16, reply_len);
                sock.send_to(&out[..len], from)?;
            }
        } else {
            for (i, len) in lens.iter().enumerate() {
                put_header(&mut out, id, i as u16, total, 0);
                sock.send_to(&out[..*len], from)?;
            }
        }
        (cur, count) = (u32::MAX, 0);
        lens.clear();
    }
}

/// The client side of the UDP baselines.
#[derive(Debug)]
pub struct UdpClient {
    sock: UdpSocket,
    server: SocketAddr,
    spin: bool,
    id: u32,
    out: Vec<u8>,
    buf: Vec<u8>,
    /// Streams sent again after a loss.
    pub retries: u64,
}

impl UdpClient {
    /// A client of the echo peer at `server`, busy-polling if `spin`.
    pub fn new(server: SocketAddr, spin: bool) -> Result<UdpClient> {
        let sock = socket("127.0.0.1:0".parse().map_err(|_| "addr")?)?;
        sock.set_nonblocking(spin)?;
        if !spin {
            sock.set_read_timeout(Some(RETRY_AFTER))?;
        }
        Ok(UdpClient { sock, server, spin, id: 0, out: vec![0u8; 65_536], buf: vec![0u8; 65_536], retries: 0 })
    }

    /// Sends `bytes` as datagrams of at most `packet` bytes (at least the
    /// header each) and waits for the answer: `reply_len` bytes in one
    /// datagram (in datagrams of 65,000 bytes beyond that), or (0) the same
    /// datagrams back. Returns the round-trip time.
    pub fn round_trip(&mut self, bytes: usize, packet: usize, reply_len: usize) -> Result<Duration> {
        let packet = packet.clamp(HEADER, 65_000);
        let bytes = bytes.max(HEADER);
        let total = bytes.div_ceil(packet);
        if total > usize::from(u16::MAX) {
            return Err(BenchError::Other(format!("a {bytes}-byte stream needs too many datagrams")));
        }
        let expect = if reply_len > 0 { answer_parts(reply_len).1 } else { total };
        for _attempt in 0..10 {
            self.id = self.id.wrapping_add(1);
            let start = Instant::now();
            let mut left = bytes;
            for i in 0..total {
                let len = left.min(packet).max(HEADER);
                left = left.saturating_sub(len);
                put_header(&mut self.out, self.id, i as u16, total as u16, reply_len as u32);
                self.sock.send_to(&self.out[..len], self.server)?;
            }
            let mut got = 0;
            while got < expect {
                match recv(&self.sock, &mut self.buf, self.spin, Some(RETRY_AFTER))? {
                    Some((n, _)) if n >= HEADER && get_header(&self.buf).0 == self.id => got += 1,
                    Some(_) => {}
                    None => break,
                }
            }
            if got == expect {
                return Ok(start.elapsed());
            }
            self.retries += 1;
        }
        Err(BenchError::Other(format!("udp: no answer to a {bytes}-byte stream after 10 tries")))
    }
}

/// The saturation client peer (`udp-client --addr A --duration-ms D`):
/// READY, then on `GO` 32-byte ping-pongs for D, then `DONE count=N secs=S` (again at each `GO`).
pub fn client_peer(a: &PeerArgs) -> Result<()> {
    let server: SocketAddr = a.get("addr")?;
    let duration = Duration::from_millis(a.get("duration-ms")?);
    let mut c = UdpClient::new(server, false)?;
    c.round_trip(32, 1472, 0)?;
    announce(&[]);
    for line in stdin_lines() {
        if line != "GO" {
            continue;
        }
        let (start, mut count) = (Instant::now(), 0u64);
        while start.elapsed() < duration {
            c.round_trip(32, 1472, 0)?;
            count += 1;
        }
        say(&format!("DONE count={count} secs={}", start.elapsed().as_secs_f64()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let mut b = [0u8; HEADER];
        put_header(&mut b, 0xdead_beef, 7, 45, 4096);
        assert_eq!(get_header(&b), (0xdead_beef, 7, 45, 4096));
    }
}
