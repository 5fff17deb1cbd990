//! TCP baselines: ping-pong with TCP_NODELAY and bulk transfer.
//!
//! A request is a 9-byte header — operation (0 echo, 1 sink) and length
//! (u64 little-endian) — and `length` bytes. Echo answers with the same
//! bytes; sink reads them all and answers with one byte. A bulk transfer
//! moves `length` distinct bytes into `length` distinct bytes, as a MoveTo or
//! MoveFrom of that size does (sending one MiB again and again into one MiB
//! kept its 16 MiB transfers in cache, which no transfer that keeps its data is).

use crate::error::Result;
use crate::peer::{announce, exit_when_stdin_closes, PeerArgs};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const OP_ECHO: u8 = 0;
const OP_SINK: u8 = 1;
const HEADER: usize = 9;

/// The echo/sink peer (`tcp-echo [--listen ADDR]`, default an ephemeral
/// loopback port): one thread per connection, until stdin closes.
pub fn echo_peer(a: &PeerArgs) -> Result<()> {
    let listener = TcpListener::bind(a.opt("listen")?.unwrap_or(std::net::SocketAddr::from(([127, 0, 0, 1], 0))))?;
    announce(&[("addr", listener.local_addr()?.to_string())]);
    exit_when_stdin_closes();
    for conn in listener.incoming() {
        let conn = conn?;
        std::thread::spawn(move || {
            let _ = serve(conn);
        });
    }
    Ok(())
}

fn serve(mut s: TcpStream) -> Result<()> {
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut head = [0u8; HEADER];
    loop {
        if s.read_exact(&mut head).is_err() {
            return Ok(());
        }
        let len = u64::from_le_bytes(head[1..9].try_into().unwrap_or([0; 8])) as usize;
        match head[0] {
            OP_ECHO => {
                let len = len.min(buf.len());
                s.read_exact(&mut buf[..len])?;
                s.write_all(&buf[..len])?;
            }
            _ => {
                // Into a buffer as large as the transfer, as a move's data
                // land in a segment of that size: not into the same cache-warm
                // MiB over and over, which no transfer that keeps its data does.
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                let mut got = 0;
                while got < len {
                    let n = s.read(&mut buf[got..len])?;
                    if n == 0 {
                        return Ok(());
                    }
                    got += n;
                }
                s.write_all(&[1])?;
            }
        }
    }
}

/// A connection to the TCP peer.
#[derive(Debug)]
pub struct TcpClient {
    s: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
}

impl TcpClient {
    /// Connects with TCP_NODELAY.
    pub fn connect(addr: SocketAddr) -> Result<TcpClient> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(TcpClient { s, out: vec![0x5a; 1 << 20], buf: vec![0u8; 1 << 20] })
    }

    /// One request/response of `len` bytes each way (header and data in one write).
    pub fn ping(&mut self, len: usize) -> Result<Duration> {
        let len = len.min(self.buf.len() - HEADER);
        self.out[0] = OP_ECHO;
        self.out[1..HEADER].copy_from_slice(&(len as u64).to_le_bytes());
        let start = Instant::now();
        self.s.write_all(&self.out[..HEADER + len])?;
        self.s.read_exact(&mut self.buf[..len])?;
        Ok(start.elapsed())
    }

    /// Sends `len` bytes and waits for the one-byte acknowledgement. The
    /// bytes come from a buffer as large as the transfer (as a move's come
    /// from a segment of that size) and the peer keeps them all in one.
    pub fn bulk(&mut self, len: usize) -> Result<Duration> {
        let mut head = [0u8; HEADER];
        head[0] = OP_SINK;
        head[1..].copy_from_slice(&(len as u64).to_le_bytes());
        if self.out.len() < len {
            self.out.resize(len, 0x5a);
        }
        let start = Instant::now();
        self.s.write_all(&head)?;
        self.s.write_all(&self.out[..len])?;
        let mut ack = [0u8; 1];
        self.s.read_exact(&mut ack)?;
        Ok(start.elapsed())
    }
}
