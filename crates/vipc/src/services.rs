//! Services every node can host: the kernel server and the echo service.
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
//!
//! The reply is the request with:
//! - byte 0: status — [`STATUS_OK`] = 0, [`STATUS_UNKNOWN_OP`] = 1,
//!   [`STATUS_NO_SEGMENT`] = 2 (stats without a write-granted segment);
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
//! - if the segment is larger, the whole segment is read with MoveFrom and
//!   written back with MoveTo before the reply (bulk transfers both ways).
//!
//! `vipc node` registers it under the name `echo`.

use crate::{Error, Node, Process, Result, SegmentRef};
use vipc_engine::{HostId, Message, Pid, Scope, SendOptions, Stats};

/// Operation: write the node's counters into the requester's segment.
pub const OP_STATS: u8 = 1;
/// Operation: reply at once.
pub const OP_PING: u8 = 2;
/// Reply status: done.
pub const STATUS_OK: u8 = 0;
/// Reply status: byte 0 of the request is not a known operation.
pub const STATUS_UNKNOWN_OP: u8 = 1;
/// Reply status: the operation needs a write-granted segment.
pub const STATUS_NO_SEGMENT: u8 = 2;

/// Largest appended segment the echo service takes with a message.
pub const ECHO_BUFFER: usize = 64 * 1024;

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
/// or the process is destroyed.
pub fn kernel_server(p: Process) {
    loop {
        let mut msg: Message = [0; 32];
        let info = match p.receive_with_segment(&mut msg, &mut []) {
            Ok(i) => i,
            Err(Error::NodeStopped) => return,
            Err(e) => {
                tracing::debug!("kernel server: receive failed: {e}");
                return;
            }
        };
        let mut reply = msg;
        let r = match msg[0] {
            OP_STATS => {
                let text = stats_text(&p.node_stats());
                reply[8..12].copy_from_slice(&(text.len() as u32).to_le_bytes());
                if !info.access.write || info.segment_size == 0 {
                    reply[0] = STATUS_NO_SEGMENT;
                    p.reply(&reply, info.from)
                } else {
                    let n = text.len().min(info.segment_size as usize);
                    reply[0] = STATUS_OK;
                    reply[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                    let bytes = &text.as_bytes()[..n];
                    match p.reply_with_segment(&reply, info.from, 0, bytes) {
                        Err(Error::Protocol(vipc_engine::Error::TooLarge { .. })) => {
                            p.move_to(info.from, 0, bytes).and_then(|()| p.reply(&reply, info.from))
                        }
                        r => r,
                    }
                }
            }
            OP_PING => {
                reply[0] = STATUS_OK;
                p.reply(&reply, info.from)
            }
            _ => {
                reply[0] = STATUS_UNKNOWN_OP;
                p.reply(&reply, info.from)
            }
        };
        match r {
            Err(Error::NodeStopped) => return,
            Err(e) => tracing::debug!("kernel server: answering {} failed: {e}", info.from),
            Ok(()) => {}
        }
    }
}

/// The echo service's loop (see the module docs). Returns when the node stops
/// or the process is destroyed.
pub fn echo(p: Process) {
    let mut buf = vec![0u8; ECHO_BUFFER];
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
                let mut data = vec![0u8; size];
                match p.move_from(info.from, 0, &mut data).and_then(|()| p.move_to(info.from, 0, &data)) {
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

/// Starts the echo service on `node`, registered under `name` (scope Any) if given.
pub fn spawn_echo(node: &Node, name: Option<&str>) -> Result<Pid> {
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
        return Err(Error::Internal(format!("the kernel server of host {host} answered status {}", msg[0])));
    }
    let n = (u32::from_le_bytes([msg[4], msg[5], msg[6], msg[7]]) as usize).min(buf.len());
    Ok(parse_stats_text(&String::from_utf8_lossy(&buf[..n])))
}

/// Pings the kernel server of `host` (one exchange).
pub fn ping_kernel(p: &Process, host: HostId) -> Result<()> {
    let mut msg: Message = [0; 32];
    msg[0] = OP_PING;
    p.send(&mut msg, kernel_pid(host))?;
    Ok(())
}
