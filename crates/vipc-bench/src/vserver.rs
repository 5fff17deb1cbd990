//! The vipc side of the bench: node configuration, the bench server process
//! (one V process answering every kind of request the suite makes), and the
//! server and saturation-client peers that run it in separate OS processes.
//!
//! A request is a 32-byte message: byte 0 the operation, bytes 4..8 a size
//! and 8..12 a transfer unit (u32 little-endian). The reply is the request
//! with byte 0 the status ([`STATUS_OK`] or [`STATUS_BAD`]) and bytes 16..24
//! the server-side time of the moves in nanoseconds (u64).

use crate::error::{BenchError, Result};
use crate::peer::{announce, say, stdin_lines, PeerArgs};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vipc::{Error, HostId, Message, Node, NodeConfig, Pid, Process};

/// Reply at once (Send–Receive–Reply).
pub const OP_ECHO: u8 = 0x10;
/// Page read, 2 packets: reply-with-segment of `size` bytes into the sender's write-granted segment.
pub const OP_READ_APPENDED: u8 = 0x11;
/// Page read, 4 packets: MoveTo `size` bytes, then Reply.
pub const OP_READ_MOVE: u8 = 0x12;
/// Page write, 2 packets: the `size` bytes arrive appended to the Send.
pub const OP_WRITE_APPENDED: u8 = 0x13;
/// Page write, Thoth style: MoveFrom `size` bytes, then Reply.
pub const OP_WRITE_MOVE: u8 = 0x14;
/// MoveTo `size` bytes (timed by the server), then Reply.
pub const OP_MOVE_TO: u8 = 0x15;
/// MoveFrom `size` bytes (timed by the server), then Reply.
pub const OP_MOVE_FROM: u8 = 0x16;
/// Read `size` bytes as a loop of MoveTo of `unit` bytes each (timed), then Reply.
pub const OP_READ_UNITS: u8 = 0x17;
/// Hold the sender without replying (memory test).
pub const OP_HOLD: u8 = 0x18;
/// Reply to every held sender, then to this one.
pub const OP_RELEASE: u8 = 0x19;
/// Reply status: done.
pub const STATUS_OK: u8 = 0;
/// Reply status: the request could not be carried out.
pub const STATUS_BAD: u8 = 1;

/// Smallest UDP payload the bench's nodes use: a 4 KB page must fit in one
/// packet with the header and a MAC (the page bars count 2 packets).
pub const MIN_PACKET: usize = 4096 + 256;

/// The cluster key of item `ipc/keyed`'s nodes: a constant, since the item
/// measures what authentication costs, not who may take part.
pub const BENCH_KEY: [u8; 32] = [0x6b; 32];

/// `c` with every packet MACed under [`BENCH_KEY`].
pub fn keyed(mut c: NodeConfig) -> NodeConfig {
    c.key = Some(vipc::AuthKey::from_bytes(BENCH_KEY));
    c
}

/// A node for the bench on loopback: fixed host id, no multicast, the given
/// static peers, `poll_spin` as asked, and packets of at least [`MIN_PACKET`].
pub fn node_config(host: HostId, peers: Vec<SocketAddr>, spin: Option<Duration>) -> NodeConfig {
    let mut c = NodeConfig::fixed(host, SocketAddr::from(([127, 0, 0, 1], 0)), peers);
    c.poll_spin = spin;
    c.engine.max_packet = c.engine.max_packet.max(MIN_PACKET);
    c
}

/// Builds a request message.
pub fn request(op: u8, size: usize, unit: usize) -> Message {
    let mut m: Message = [0; 32];
    m[0] = op;
    m[4..8].copy_from_slice(&(size as u32).to_le_bytes());
    m[8..12].copy_from_slice(&(unit as u32).to_le_bytes());
    m
}

fn u32_at(m: &Message, i: usize) -> usize {
    u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]) as usize
}

/// The server-side time carried by a reply.
pub fn reply_time(m: &Message) -> Duration {
    let mut b = [0u8; 8];
    b.copy_from_slice(&m[16..24]);
    Duration::from_nanos(u64::from_le_bytes(b))
}

fn grow(v: &mut Vec<u8>, n: usize) {
    if v.len() < n {
        v.resize(n, 0x5a);
    }
}

/// The bench server's loop (see the module docs); returns when its node stops.
pub fn serve(p: Process) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut data: Vec<u8> = Vec::new();
    let mut held: Vec<Pid> = Vec::new();
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut buf) {
            Ok(i) => i,
            Err(Error::NodeStopped) => return,
            Err(e) => {
                eprintln!("bench server: receive failed: {e}");
                return;
            }
        };
        let from = info.from;
        let (op, size, unit) = (msg[0], u32_at(&msg, 4), u32_at(&msg, 8).max(1));
        let mut reply = msg;
        reply[0] = STATUS_OK;
        let start = Instant::now();
        let r = match op {
            OP_ECHO => p.reply(&reply, from),
            OP_READ_APPENDED => {
                grow(&mut data, size);
                p.reply_with_segment(&reply, from, 0, &data[..size])
            }
            OP_READ_MOVE | OP_MOVE_TO => {
                grow(&mut data, size);
                let r = p.move_to(from, 0, &data[..size]);
                reply[16..24].copy_from_slice(&(start.elapsed().as_nanos() as u64).to_le_bytes());
                r.and_then(|()| p.reply(&reply, from))
            }
            OP_WRITE_APPENDED => {
                if info.len < size {
                    reply[0] = STATUS_BAD;
                }
                p.reply(&reply, from)
            }
            OP_WRITE_MOVE | OP_MOVE_FROM => {
                grow(&mut data, size);
                let r = p.move_from(from, 0, &mut data[..size]);
                reply[16..24].copy_from_slice(&(start.elapsed().as_nanos() as u64).to_le_bytes());
                r.and_then(|()| p.reply(&reply, from))
            }
            OP_READ_UNITS => {
                grow(&mut data, size);
                let mut r = Ok(());
                let mut off = 0;
                while off < size && r.is_ok() {
                    let n = unit.min(size - off);
                    r = p.move_to(from, off as u32, &data[off..off + n]);
                    off += n;
                }
                reply[16..24].copy_from_slice(&(start.elapsed().as_nanos() as u64).to_le_bytes());
                r.and_then(|()| p.reply(&reply, from))
            }
            OP_HOLD => {
                held.push(from);
                Ok(())
            }
            OP_RELEASE => {
                let (n, mut failed) = (held.len(), Vec::new());
                for h in held.drain(..) {
                    if let Err(e) = p.reply(&reply, h) {
                        failed.push(e.to_string());
                    }
                }
                if let Some(e) = failed.first() {
                    eprintln!("bench server: {} of {n} replies to held senders failed, first: {e}", failed.len());
                }
                p.reply(&reply, from)
            }
            _ => {
                reply[0] = STATUS_BAD;
                p.reply(&reply, from)
            }
        };
        match r {
            Err(Error::NodeStopped) => return,
            Err(e) => {
                // Tell the sender if it is still waiting; the bench reports the status.
                reply[0] = STATUS_BAD;
                let _ = p.reply(&reply, from);
                eprintln!("bench server: {op:#x} from {from} failed: {e}");
            }
            Ok(()) => {}
        }
    }
}

/// Sends `msg` and checks the status of the reply.
pub fn call(p: &Process, to: Pid, msg: &mut Message, seg: Option<vipc::SegmentRef<'_>>) -> Result<()> {
    let op = msg[0];
    p.send_with(msg, to, seg, vipc::SendOptions::default())?;
    if msg[0] != STATUS_OK {
        return Err(BenchError::Other(format!("bench server: request {op:#x} answered status {}", msg[0])));
    }
    Ok(())
}

fn spin_arg(a: &PeerArgs) -> Result<Option<Duration>> {
    Ok(a.opt::<u64>("spin-us")?.map(Duration::from_micros))
}

/// The server peer (`vipc-server --host H [--spin-us N] [--keyed] [--listen
/// ADDR]`): a node with the bench server (its packets MACed under
/// [`BENCH_KEY`] with `--keyed`; on ADDR with the default packet size, for a
/// real link, with `--listen`); READY `addr=` `pid=` (raw u32); runs until
/// stdin closes.
pub fn server_peer(a: &PeerArgs) -> Result<()> {
    let mut config = match a.opt("listen")? {
        // On a real link (item `ipc/link`): the default packet size.
        Some(listen) => crate::link::link_config(a.get("host")?, listen, Vec::new()),
        None => node_config(a.get("host")?, Vec::new(), spin_arg(a)?),
    };
    if a.flag("keyed") {
        config = keyed(config);
    }
    let node = Node::start(config)?;
    let (pid, _thread) = node.spawn(serve)?;
    announce(&[("addr", node.local_addr().to_string()), ("pid", pid.0.to_string())]);
    stdin_lines().wait_for_close()
}

/// The saturation client peer (`vipc-client --host H --server-addr A
/// --server-pid P --duration-ms D`): READY after one exchange, then on `GO`
/// exchanges for D, then `DONE count=N secs=S` (again at each `GO`).
pub fn client_peer(a: &PeerArgs) -> Result<()> {
    let server: SocketAddr = a.get("server-addr")?;
    let to = Pid(a.get("server-pid")?);
    let duration = Duration::from_millis(a.get("duration-ms")?);
    let node = Node::start(node_config(a.get("host")?, vec![server], spin_arg(a)?))?;
    let p = node.attach()?;
    call(&p, to, &mut request(OP_ECHO, 0, 0), None)?;
    announce(&[]);
    for line in stdin_lines() {
        if line != "GO" {
            continue;
        }
        let (start, mut count) = (Instant::now(), 0u64);
        while start.elapsed() < duration {
            call(&p, to, &mut request(OP_ECHO, 0, 0), None)?;
            count += 1;
        }
        say(&format!("DONE count={count} secs={}", start.elapsed().as_secs_f64()));
    }
    Ok(())
}
