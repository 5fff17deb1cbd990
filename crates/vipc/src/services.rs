//! Services every node can host: the kernel server (and its mover), the echo service and a group member.
//!
//! # Kernel server
//! [`kernel_server`] is created first on every node (unless
//! [`NodeConfig::kernel_server`](crate::NodeConfig::kernel_server) is off), so
//! it is always `Pid::new(host, 1)` ([`kernel_pid`]). Requests are 32-byte
//! messages; byte 0 is the operation:
//!
//! | byte 0 | operation | request | reply |
//! |---|---|---|---|
//! | [`OP_STATS`] = 1 | counters | grant write access to a segment | the text `name=value\n` per counter of [`Stats::fields`](vipc_engine::Stats::fields) is written at offset 0 of the segment (reply-with-segment if it fits in one packet, else MoveTo) |
//! | [`OP_PING`] = 2 | ping | anything | at once |
//! | [`OP_HOSTS`] = 3 | the alive-host table (`GET_IAH_BIT_VECTOR`) | optionally a write-granted segment | bytes 4..8: sequence number; 8..12: rows; 16..32: bit *r* (byte 16 + *r*/8, bit *r*%8) set if row *r* < 128 holds a host; the segment gets a row per table row, all zero for a free row: if byte 1 of the request is [`HOST_ROW_LEN_V6`] (20), byte 12 of the reply is 20 and each row is host id (u16), port (u16) and the IPv6 address (16 bytes, in order; IPv4 as `::ffff:a.b.c.d`) it announced itself from; otherwise byte 12 is 0 and each row is 8 bytes: host id (u16), IPv4 address (4 bytes, in order), port (u16), `0.0.0.0:0` for IPv6 |
//! | [`OP_HOST_AT`] = 4 | one row (`GET_IAH_HOST_NO`) | bytes 4..8: sequence number, 8..12: row | bytes 12..14: host id, or status [`STATUS_STALE`] / [`STATUS_NO_ROW`] |
//! | [`OP_RESET_HOSTS`] = 5 | forget every host and ask them to announce again (`RESET_IAH_BIT_VECTOR`) | anything | at once |
//! | [`OP_LOCATE`](crate::locate::OP_LOCATE) = 6 | who serves a name (usually sent to the kernel servers' group, see [`crate::locate`]) | byte 1: length, bytes 2..: the name | bytes 4..8: the pid, or status [`STATUS_NOT_HERE`](crate::locate::STATUS_NOT_HERE) |
//!
//! [`OP_STATS`] and [`OP_HOSTS`] with a write-granted segment are forwarded
//! to the kernel mover ([`kernel_mover`], the node's second process), which
//! answers them: their MoveTo may be held up for T_t by a requester that
//! never acknowledges it, and must not hold up the rest.
//!
//! Integers are little-endian. The reply is the request with:
//! - byte 0: status — [`STATUS_OK`] = 0, [`STATUS_UNKNOWN_OP`] = 1,
//!   [`STATUS_NO_SEGMENT`] = 2 (stats without a write-granted segment),
//!   [`STATUS_STALE`] = 3, [`STATUS_NO_ROW`] = 4;
//! - bytes 4..8 (stats): bytes written into the segment, u32 little-endian;
//! - bytes 8..12 (stats): length of the whole text, u32 little-endian (larger
//!   than bytes 4..8 if the segment was too small);
//! - all other bytes unchanged (a ping's bytes 1..32 come back as sent).
//!
//! # Echo
//! [`echo`] replies to every message with the same message. With a
//! read-write segment it also echoes the segment's bytes back into it:
//! - if the whole segment arrived appended to the message, the reply carries
//!   it back (reply-with-segment: 2 packets in all);
//! - if the segment is larger, it is read with MoveFrom and written back
//!   with MoveTo before the reply (bulk transfers both ways), in pieces of
//!   at most [`ECHO_PIECE`] bytes.
//!
//! `vipc node` registers it under the name `echo`.
//!
//! # Group member
//! [`group_member`] joins a group and answers every message at once, with
//! its pid in bytes 24..28 of the reply (`vipc node --member GROUP`).

use crate::{Error, Node, Process, ReceiveInfo, Result, SegmentRef};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use vipc_engine::{AliveHost, AliveHosts, HostId, Message, Pid, Scope, SendOptions, Stats};

/// Operation: write the node's counters into the requester's segment.
pub const OP_STATS: u8 = 1;
/// Operation: reply at once.
pub const OP_PING: u8 = 2;
/// Operation: the alive-host table.
pub const OP_HOSTS: u8 = 3;
/// Operation: the host in one row of the alive-host table.
pub const OP_HOST_AT: u8 = 4;
/// Operation: reset the alive-host table.
pub const OP_RESET_HOSTS: u8 = 5;
/// Reply status: done.
pub const STATUS_OK: u8 = 0;
/// Reply status: byte 0 of the request is not a known operation.
pub const STATUS_UNKNOWN_OP: u8 = 1;
/// Reply status: the operation needs a write-granted segment.
pub const STATUS_NO_SEGMENT: u8 = 2;
/// Reply status: the alive-host table changed since the given sequence number.
pub const STATUS_STALE: u8 = 3;
/// Reply status: no host in that row.
pub const STATUS_NO_ROW: u8 = 4;
/// Status: the operation is for processes of the node itself (RESET_HOSTS).
pub const STATUS_LOCAL_ONLY: u8 = 5;
/// Bytes per row of [`OP_HOSTS`]'s segment in the original form: host id,
/// IPv4 address, port (an IPv6 address reads `0.0.0.0:0`).
pub const HOST_ROW_LEN: usize = 8;
/// Bytes per row of [`OP_HOSTS`]'s segment when the request's byte 1 asks
/// for it: host id, port, IPv6 address (IPv4 as `::ffff:a.b.c.d`). The
/// reply's byte 12 says which form the server wrote (0 = an older server's
/// [`HOST_ROW_LEN`] rows).
pub const HOST_ROW_LEN_V6: usize = 20;

/// Largest appended segment the echo service takes with a message.
pub const ECHO_BUFFER: usize = 64 * 1024;

/// Most bytes of a larger segment the echo holds at once: it moves such a
/// segment back in pieces of this size (MoveFrom, then MoveTo, each).
pub const ECHO_PIECE: usize = 4 << 20;

/// The pid of the kernel server of logical host `host`.
pub fn kernel_pid(host: HostId) -> Pid {
    Pid::new(host, 1)
}

/// The counters as text: one `name=value` line each.
pub fn stats_text(stats: &Stats) -> String {
    stats.fields().iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// Parses the text of [`stats_text`]; lines that are not `name=number` are skipped.
pub fn parse_stats_text(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The kernel server's loop (see the module docs). Returns when the node stops
/// or the process is destroyed. [`Node::start`] makes it a member of
/// [`KERNEL_SERVER_GROUP`](crate::locate::KERNEL_SERVER_GROUP) before returning.
///
/// Requests that write into the requester's segment ([`OP_STATS`],
/// [`OP_HOSTS`] with a write-granted segment) may need a MoveTo, which a
/// requester that never acknowledges it holds up for T_t: they are
/// forwarded to `mover` ([`kernel_mover`]), so that such a requester delays
/// only those, never pings, host rows or name lookups.
pub fn kernel_server(p: Process, mover: Pid) {
    serve(&p, "kernel server", |msg, info| {
        let mut reply = *msg;
        match msg[0] {
            OP_STATS | OP_HOSTS if info.access.write && info.segment_size > 0 => p.forward(msg, info.from, mover),
            OP_STATS => answer_stats(&p, msg, info),
            OP_HOSTS => answer_hosts(&p, msg, info),
            OP_PING => {
                reply[0] = STATUS_OK;
                p.reply(&reply, info.from)
            }
            OP_HOST_AT => {
                let seq = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
                let row = u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]) as usize;
                reply[0] = match p.alive_host_at(row, seq) {
                    Ok(host) => {
                        reply[12..14].copy_from_slice(&host.to_le_bytes());
                        STATUS_OK
                    }
                    Err(Error::Protocol(vipc_engine::Error::StaleTable { .. })) => STATUS_STALE,
                    Err(_) => STATUS_NO_ROW,
                };
                p.reply(&reply, info.from)
            }
            // Only from this node: a reset makes every host answer the
            // node's HELLO, and must not be any remote sender's to repeat.
            OP_RESET_HOSTS if info.from.host() != p.pid().host() => {
                reply[0] = STATUS_LOCAL_ONLY;
                p.reply(&reply, info.from)
            }
            OP_RESET_HOSTS => {
                reply[0] = STATUS_OK;
                p.reset_alive_hosts().and_then(|()| p.reply(&reply, info.from))
            }
            crate::locate::OP_LOCATE => {
                let remote = info.from.host() != p.pid().host();
                let found = match crate::locate::parse_query(msg) {
                    Some(name) => p.registered(name, remote),
                    None => Ok(None),
                };
                found.and_then(|f| p.reply(&crate::locate::locate_answer(f), info.from))
            }
            _ => {
                reply[0] = STATUS_UNKNOWN_OP;
                p.reply(&reply, info.from)
            }
        }
    })
}

/// The kernel mover: answers the requests [`kernel_server`] forwards to it
/// (counters and host rows written into the requester's segment), one at a
/// time. Returns when the node stops or the process is destroyed.
pub fn kernel_mover(p: Process) {
    serve(&p, "kernel mover", |msg, info| match msg[0] {
        OP_STATS => answer_stats(&p, msg, info),
        OP_HOSTS => answer_hosts(&p, msg, info),
        _ => {
            let mut reply = *msg;
            reply[0] = STATUS_UNKNOWN_OP;
            p.reply(&reply, info.from)
        }
    })
}

/// Receives requests one at a time and answers each with `answer`, until
/// the node stops or the process is destroyed; a failed answer is logged.
fn serve(p: &Process, who: &str, mut answer: impl FnMut(&Message, &ReceiveInfo) -> Result<()>) {
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut []) {
            Ok(i) => i,
            Err(Error::NodeStopped) => return,
            Err(e) => {
                tracing::debug!("{who}: receive failed: {e}");
                return;
            }
        };
        match answer(&msg, &info) {
            Err(Error::NodeStopped) => return,
            Err(e) => tracing::debug!("{who}: answering {} failed: {e}", info.from),
            Ok(()) => {}
        }
    }
}

/// [`OP_STATS`]: the counters as text into the requester's segment.
fn answer_stats(p: &Process, msg: &Message, info: &ReceiveInfo) -> Result<()> {
    let mut reply = *msg;
    let text = stats_text(&p.node_stats());
    reply[8..12].copy_from_slice(&(text.len() as u32).to_le_bytes());
    if !info.access.write || info.segment_size == 0 {
        reply[0] = STATUS_NO_SEGMENT;
        return p.reply(&reply, info.from);
    }
    let n = text.len().min(info.segment_size as usize);
    reply[0] = STATUS_OK;
    reply[4..8].copy_from_slice(&(n as u32).to_le_bytes());
    reply_with_bytes(p, &reply, info.from, &text.as_bytes()[..n])
}

/// [`OP_HOSTS`]: the alive-host table, its rows into the requester's segment if it granted one.
fn answer_hosts(p: &Process, msg: &Message, info: &ReceiveInfo) -> Result<()> {
    let mut reply = *msg;
    let t = p.alive_hosts()?;
    reply[0] = STATUS_OK;
    reply[4..8].copy_from_slice(&t.seq.to_le_bytes());
    reply[8..12].copy_from_slice(&(t.rows.len() as u32).to_le_bytes());
    reply[12..32].fill(0);
    for (r, row) in t.rows.iter().enumerate().take(128) {
        if row.is_some() {
            reply[16 + r / 8] |= 1 << (r % 8);
        }
    }
    let v6 = msg[1] as usize == HOST_ROW_LEN_V6;
    if v6 {
        reply[12] = HOST_ROW_LEN_V6 as u8;
    }
    let rows = encode_host_rows(&t, v6);
    let n = rows.len().min(if info.access.write { info.segment_size as usize } else { 0 });
    if n == 0 {
        return p.reply(&reply, info.from);
    }
    reply_with_bytes(p, &reply, info.from, &rows[..n])
}

/// Replies with `bytes` at offset 0 of the requester's segment: in the
/// reply packet if they fit, else by MoveTo first.
fn reply_with_bytes(p: &Process, reply: &Message, to: Pid, bytes: &[u8]) -> Result<()> {
    match p.reply_with_segment(reply, to, 0, bytes) {
        Err(Error::Protocol(vipc_engine::Error::TooLarge { .. })) => {
            p.move_to(to, 0, bytes).and_then(|()| p.reply(reply, to))
        }
        r => r,
    }
}

/// The echo service's loop (see the module docs). Returns when the node stops
/// or the process is destroyed.
pub fn echo(p: Process) {
    let mut buf = vec![0u8; ECHO_BUFFER];
    let mut pieces = Vec::new();
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut buf) {
            Ok(i) => i,
            Err(Error::NodeStopped) => return,
            Err(e) => {
                tracing::debug!("echo: receive failed: {e}");
                return;
            }
        };
        let size = info.segment_size as usize;
        let r = if info.access.read && info.access.write && size > 0 {
            if info.len >= size {
                match p.reply_with_segment(&msg, info.from, 0, &buf[..size]) {
                    Err(Error::Protocol(_)) => p.reply(&msg, info.from),
                    r => r,
                }
            } else {
                match echo_in_pieces(&p, info.from, size, &mut pieces) {
                    Err(Error::NodeStopped) => return,
                    // The sender is told by the reply either way (a failed move leaves its data as it was).
                    _ => p.reply(&msg, info.from),
                }
            }
        } else {
            p.reply(&msg, info.from)
        };
        match r {
            Err(Error::NodeStopped) => return,
            Err(e) => tracing::debug!("echo: reply to {} failed: {e}", info.from),
            Ok(()) => {}
        }
    }
}

/// Reads the `size`-byte segment of `from` and writes it back, at most
/// [`ECHO_PIECE`] bytes at a time: the size is the sender's word, and a
/// Send claiming 4 GiB must not make the echo allocate 4 GiB.
fn echo_in_pieces(p: &Process, from: Pid, size: usize, piece: &mut Vec<u8>) -> Result<(), Error> {
    piece.resize(size.min(ECHO_PIECE), 0);
    for at in (0..size).step_by(ECHO_PIECE) {
        let n = ECHO_PIECE.min(size - at);
        p.move_from(from, at as u32, &mut piece[..n])?;
        p.move_to(from, at as u32, &piece[..n])?;
    }
    Ok(())
}

/// A group member (see [`spawn_group_member`]): joins `group` and answers
/// every message at once with the message, its bytes 24..28 replaced by the
/// member's pid (u32 little-endian). Returns when the node stops or the
/// process is destroyed.
pub fn group_member(p: Process, group: Pid) {
    if let Err(e) = p.join_group(group) {
        tracing::warn!("group member: cannot join {group}: {e}");
        return;
    }
    loop {
        let mut msg: Message = [0; 32];
        let from = match p.receive(&mut msg) {
            Ok(f) => f,
            Err(Error::NodeStopped) => return,
            Err(e) => {
                tracing::debug!("group member: receive failed: {e}");
                return;
            }
        };
        msg[24..28].copy_from_slice(&p.pid().0.to_le_bytes());
        match p.reply(&msg, from) {
            Err(Error::NodeStopped) => return,
            Err(e) => tracing::debug!("group member: reply to {from} failed: {e}"),
            Ok(()) => {}
        }
    }
}

/// Starts a [`group_member`] of `group` on `node`.
pub fn spawn_group_member(node: &Node, group: Pid) -> Result<Pid> {
    if !group.is_group() {
        return Err(vipc_engine::Error::NotAGroup(group).into());
    }
    let (pid, _thread) = node.spawn(move |p| group_member(p, group))?;
    Ok(pid)
}

/// Starts the echo service on `node`, registered under `name` (scope Any) if given.
pub fn spawn_echo(node: &Node, name: Option<&str>) -> Result<Pid> {
    name.map_or(Ok(()), Node::check_name)?; // before there is a process to leave behind
    let (pid, _thread) = node.spawn(echo)?;
    if let Some(name) = name {
        node.set_pid(name, pid, Scope::Any)?;
    }
    Ok(pid)
}

/// Asks the kernel server of `host` for its node's counters.
pub fn query_stats(p: &Process, host: HostId) -> Result<Vec<(String, u64)>> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut msg: Message = [0; 32];
    msg[0] = OP_STATS;
    p.send_with(&mut msg, kernel_pid(host), Some(SegmentRef::Write(&mut buf)), SendOptions::default())?;
    if msg[0] != STATUS_OK {
        return Err(Error::Internal(format!("the kernel server of host {host:#06x} answered status {}", msg[0])));
    }
    let n = (u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]) as usize).min(buf.len());
    Ok(parse_stats_text(&String::from_utf8_lossy(&buf[..n])))
}

/// The rows of [`OP_HOSTS`]'s segment: [`HOST_ROW_LEN_V6`] bytes each if
/// `v6`, else [`HOST_ROW_LEN`].
fn encode_host_rows(t: &AliveHosts, v6: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(t.rows.len() * HOST_ROW_LEN_V6);
    for row in &t.rows {
        let (host, addr) = match row {
            Some(h) => (h.host, h.addr),
            None => (0, SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))),
        };
        out.extend_from_slice(&host.to_le_bytes());
        if v6 {
            let ip = match addr.ip() {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            out.extend_from_slice(&addr.port().to_le_bytes());
            out.extend_from_slice(&ip.octets());
        } else if let SocketAddr::V4(a) = addr {
            out.extend_from_slice(&a.ip().octets());
            out.extend_from_slice(&a.port().to_le_bytes());
        } else {
            out.extend_from_slice(&[0; HOST_ROW_LEN - 2]);
        }
    }
    out
}

/// One row of [`OP_HOSTS`]'s segment, `HOST_ROW_LEN` or `HOST_ROW_LEN_V6`
/// bytes long: `None` for a free row.
fn decode_host_row(r: &[u8]) -> Option<AliveHost> {
    let host = u16::from_le_bytes([r[0], r[1]]);
    let addr = if r.len() == HOST_ROW_LEN_V6 {
        let ip: [u8; 16] = r[4..20].try_into().ok()?;
        SocketAddr::new(Ipv6Addr::from(ip).to_canonical(), u16::from_le_bytes([r[2], r[3]]))
    } else {
        SocketAddr::from((Ipv4Addr::new(r[2], r[3], r[4], r[5]), u16::from_le_bytes([r[6], r[7]])))
    };
    (host != 0).then_some(AliveHost { host, addr })
}

/// Asks the kernel server of `host` for its alive-host table, with IPv6
/// addresses (a server older than [`HOST_ROW_LEN_V6`] gives them as `0.0.0.0:0`).
pub fn query_hosts(p: &Process, host: HostId) -> Result<AliveHosts> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut msg: Message = [0; 32];
    msg[0] = OP_HOSTS;
    msg[1] = HOST_ROW_LEN_V6 as u8;
    p.send_with(&mut msg, kernel_pid(host), Some(SegmentRef::Write(&mut buf)), SendOptions::default())?;
    if msg[0] != STATUS_OK {
        return Err(Error::Internal(format!("the kernel server of host {host:#06x} answered status {}", msg[0])));
    }
    Ok(host_rows(&msg, &buf))
}

/// The alive-host table an [`OP_HOSTS`] answer `msg` describes, its rows read from `buf`.
fn host_rows(msg: &Message, buf: &[u8]) -> AliveHosts {
    let seq = u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]);
    let n = u32::from_le_bytes([msg[8], msg[9], msg[10], msg[11]]) as usize;
    let row_len = if msg[12] as usize == HOST_ROW_LEN_V6 { HOST_ROW_LEN_V6 } else { HOST_ROW_LEN };
    let rows = buf.chunks_exact(row_len).take(n).map(decode_host_row).collect();
    AliveHosts { seq, rows }
}

/// Every parser of bytes other hosts wrote that the kernel server and its
/// clients use, on `data`, for the fuzz target `services`: a LOCATE query,
/// the counters' text, an OP_HOSTS answer's rows. Each returns a value,
/// never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    let mut msg: Message = [0; 32];
    let n = data.len().min(32);
    msg[..n].copy_from_slice(&data[..n]);
    if let Some(name) = crate::locate::parse_query(&msg) {
        assert!(!name.is_empty() && name.len() <= crate::locate::MAX_LOCATE_NAME);
    }
    let rest = &data[n..];
    let _ = parse_stats_text(&String::from_utf8_lossy(rest));
    let t = host_rows(&msg, rest);
    assert!(t.rows.len() <= rest.len() / HOST_ROW_LEN);
}

/// Pings the kernel server of `host` (one exchange).
pub fn ping_kernel(p: &Process, host: HostId) -> Result<()> {
    let mut msg: Message = [0; 32];
    msg[0] = OP_PING;
    p.send(&mut msg, kernel_pid(host))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> AliveHosts {
        let v4 = AliveHost { host: 2, addr: "10.1.2.3:7701".parse().unwrap() };
        let v6 = AliveHost { host: 3, addr: "[fd00::17]:7702".parse().unwrap() };
        AliveHosts { seq: 9, rows: vec![Some(v4), None, Some(v6)] }
    }

    fn decode(rows: &[u8], len: usize) -> Vec<Option<AliveHost>> {
        rows.chunks_exact(len).map(decode_host_row).collect()
    }

    #[test]
    fn host_rows_of_the_long_form_carry_both_address_families() {
        let t = table();
        let rows = encode_host_rows(&t, true);
        assert_eq!(rows.len(), 3 * HOST_ROW_LEN_V6);
        // The IPv4 address goes as ::ffff:10.1.2.3 and comes back as IPv4.
        assert_eq!(&rows[4..20], &Ipv4Addr::new(10, 1, 2, 3).to_ipv6_mapped().octets());
        assert_eq!(decode(&rows, HOST_ROW_LEN_V6), t.rows);
    }

    #[test]
    fn host_rows_of_the_short_form_blank_ipv6_addresses() {
        let rows = encode_host_rows(&table(), false);
        assert_eq!(rows.len(), 3 * HOST_ROW_LEN);
        let blank = AliveHost { host: 3, addr: "0.0.0.0:0".parse().unwrap() };
        assert_eq!(decode(&rows, HOST_ROW_LEN), vec![table().rows[0], None, Some(blank)]);
    }
}
