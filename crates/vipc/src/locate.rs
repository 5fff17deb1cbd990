//! Server location through a well-known group (000 §6.6).
//!
//! Every node's kernel server is a member of [`KERNEL_SERVER_GROUP`]. A
//! client asks "who serves NAME?" with one group Send (reply mode Many); each
//! kernel server answers for its own node — with the pid registered under
//! NAME, or "not here" — and [`locate`] takes the first positive answer. This
//! is GetPid built on groups, as V did it; [`resolve`] tries the GetPid
//! broadcast first and the group query second, so a name is found either way.
//!
//! Well-known group numbers 1–99 are reserved for vipc's services:
//!
//! | number | group |
//! |---|---|
//! | 1 | [`KERNEL_SERVER_GROUP`]: every node's kernel server; answers [`OP_LOCATE`] |
//! | 2 | [`TEAM_SERVER_GROUP`]: the team servers of remote execution (crate `vipc-exec`) |
//!
//! The query is a 32-byte message: byte 0 = [`OP_LOCATE`], byte 1 = the
//! name's length L (1..=[`MAX_LOCATE_NAME`]), bytes 2..2+L = the name. The
//! answer: byte 0 = [`crate::services::STATUS_OK`] with the pid (u32
//! little-endian) in bytes 4..8, or [`STATUS_NOT_HERE`]; other bytes zero.

use crate::{Error, Process, Result};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use vipc_engine::{well_known_group, Message, Pid, ReplyMode, Scope, SendOptions};

/// The group of every node's kernel server.
pub const KERNEL_SERVER_GROUP: Pid = well_known_group(1);
/// The group of the team servers of remote execution (crate `vipc-exec`).
pub const TEAM_SERVER_GROUP: Pid = well_known_group(2);
/// Operation byte of a location query.
pub const OP_LOCATE: u8 = 6;
/// Answer status: no process is registered under that name on this node.
pub const STATUS_NOT_HERE: u8 = 5;
/// Longest name a location query carries (the rest of the message).
pub const MAX_LOCATE_NAME: usize = 30;

/// How long [`resolve`] waits for the group's answers.
pub const LOCATE_LIMIT: Duration = Duration::from_millis(500);

/// The query message for `name`.
pub fn locate_query(name: &str) -> Result<Message> {
    let n = name.as_bytes();
    if n.is_empty() || n.len() > MAX_LOCATE_NAME {
        return Err(Error::Protocol(vipc_engine::Error::TooLarge {
            what: "name to locate",
            len: n.len() as u64,
            limit: MAX_LOCATE_NAME as u64,
        }));
    }
    let mut m = [0u8; 32];
    m[0] = OP_LOCATE;
    m[1] = n.len() as u8;
    m[2..2 + n.len()].copy_from_slice(n);
    Ok(m)
}

/// The name in a query, if it is a well-formed one.
pub fn parse_query(m: &Message) -> Option<&str> {
    let len = m[1] as usize;
    if m[0] != OP_LOCATE || len == 0 || len > MAX_LOCATE_NAME {
        return None;
    }
    std::str::from_utf8(&m[2..2 + len]).ok()
}

/// The answer to a query: the pid found here, or "not here".
pub fn locate_answer(found: Option<Pid>) -> Message {
    let mut m = [0u8; 32];
    match found {
        Some(pid) => m[4..8].copy_from_slice(&pid.0.to_le_bytes()),
        None => m[0] = STATUS_NOT_HERE,
    }
    m
}

fn answered_pid(m: &Message) -> Option<Pid> {
    (m[0] == crate::services::STATUS_OK).then(|| Pid(u32::from_le_bytes([m[4], m[5], m[6], m[7]])))
}

/// Asks every kernel server who serves `name`: the first positive answer,
/// or `None` once every node in the alive-host table (and this one) said
/// "not here" or `limit` passed. A group Send is unreliable: while nodes are
/// missing, the query is sent again after [`RESEND_AFTER`] of silence.
pub fn locate(p: &Process, name: &str, limit: Duration) -> Result<Option<Pid>> {
    let query = locate_query(name)?;
    let expected = p.alive_hosts()?.hosts().count() + 1;
    let deadline = crate::within::deadline_after(Instant::now(), limit);
    let mut answered = BTreeSet::new();
    while answered.len() < expected && Instant::now() < deadline {
        let mut m = query;
        let first = match p.send_group(&mut m, KERNEL_SERVER_GROUP, ReplyMode::Many, SendOptions { idempotent: true }) {
            Ok(who) => who,
            Err(Error::Protocol(vipc_engine::Error::Timeout(_))) => continue,
            Err(e) => return Err(e),
        };
        let mut reply = Some((first, m));
        while let Some((who, r)) = reply {
            if let Some(pid) = answered_pid(&r) {
                return Ok(Some(pid));
            }
            answered.insert(who);
            if answered.len() >= expected {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now()).min(RESEND_AFTER);
            reply = if left.is_zero() { None } else { p.get_reply(left)? };
        }
    }
    Ok(None)
}

/// Silence after which [`locate`] asks the nodes that have not answered again.
pub const RESEND_AFTER: Duration = Duration::from_millis(100);

/// Finds the process registered as `name`: this node, then the GetPid
/// broadcast, then the kernel servers' group ([`locate`]).
pub fn resolve(p: &Process, name: &str) -> Result<Option<Pid>> {
    if let Some(pid) = p.get_pid(name, Scope::Any)? {
        return Ok(Some(pid));
    }
    if name.len() > MAX_LOCATE_NAME {
        return Ok(None);
    }
    locate(p, name, LOCATE_LIMIT)
}
