//! `vipc gsend`: Send to a process group from the shell, in any reply or
//! reliability mode, and report what each Send reached.

use crate::cmd_ping::quantile;
use crate::demo::fmt_dur;
use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use std::time::{Duration, Instant};
use vipc::{well_known_group, Node, Pid, Reliable, ReplyMode, SendOptions};

/// Parses GROUP: a well-known group number (1–65535) or a group id
/// `HHHH.LLLL` in hex with the top bit set (as `vipc` prints them).
pub fn parse_group_id(s: &str) -> Result<Pid, String> {
    if let Ok(n) = s.parse::<u16>() {
        return if n == 0 { Err("well-known groups are numbered 1 to 65535".into()) } else { Ok(well_known_group(n)) };
    }
    match s.parse::<Pid>() {
        Ok(p) if p.is_group() => Ok(p),
        _ => Err(format!("invalid group {s:?}: a well-known group number (1-65535) or a group id like 8001.0001")),
    }
}

/// How `vipc gsend` sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Reply modes of 000 §6.3.
    Plain(ReplyMode),
    /// The reliable modes of 004.
    Reliable(Reliable),
}

/// Parses `none`, `one`, `many`, `all-reply`, `k-reply=K`, `all-deliver`, `k-deliver=K`.
pub fn parse_mode(s: &str) -> Result<Mode, String> {
    let k = |v: &str| {
        v.parse::<u32>().ok().filter(|k| *k > 0).ok_or(format!("invalid K in {s:?}: a number from 1 to {}", u32::MAX))
    };
    Ok(match s.split_once('=') {
        None => match s {
            "none" => Mode::Plain(ReplyMode::None),
            "one" => Mode::Plain(ReplyMode::One),
            "many" => Mode::Plain(ReplyMode::Many),
            "all-reply" => Mode::Reliable(Reliable::AllReply),
            "all-deliver" => Mode::Reliable(Reliable::AllDeliver),
            _ => {
                return Err(format!(
                    "invalid mode {s:?}: none, one, many, all-reply, k-reply=K, all-deliver or k-deliver=K"
                ))
            }
        },
        Some(("k-reply", v)) => Mode::Reliable(Reliable::KReply(k(v)?)),
        Some(("k-deliver", v)) => Mode::Reliable(Reliable::KDeliver(k(v)?)),
        _ => {
            return Err(format!(
                "invalid mode {s:?}: none, one, many, all-reply, k-reply=K, all-deliver or k-deliver=K"
            ))
        }
    })
}

/// Sends `count` messages to `group` in `mode` (after listening `listen` for
/// the alive hosts, pausing `interval` between Sends), prints one line per
/// ", first from PID" for the Send's first replier, nothing if there is
/// none (mode none completes at once; a reliable Send may have no reply).
fn first_from(replier: Pid) -> String {
    if replier.is_none() {
        String::new()
    } else {
        format!(", first from {replier}")
    }
}

/// Send when `count` is small and a summary; fails if any reliable Send
/// missed its condition or any plain one got no reply.
pub fn run(group: Pid, mode: Mode, count: u32, listen: Duration, interval: Duration, args: &NodeArgs) -> CliResult<()> {
    let node = Node::start(args.build()?)?;
    std::thread::sleep(listen); // our HELLO: every live host answers within 10 ms
    let p = node.attach()?;
    let (mut times, mut missed) = (Vec::new(), 0u32);
    for i in 0..count {
        if i > 0 && !interval.is_zero() {
            std::thread::sleep(interval);
        }
        let mut msg = [0u8; 32];
        msg[0..4].copy_from_slice(&i.to_le_bytes());
        let start = Instant::now();
        // A plain Send's time is until its first reply (not the wait for more
        // after it, 100 ms past the last); a reliable one's until it is decided.
        let mut took = None;
        let line = match mode {
            Mode::Plain(m) => match p.send_group(&mut msg, group, m, SendOptions::default()) {
                Ok(first) => {
                    took = Some(start.elapsed());
                    let mut replies = u32::from(!first.is_none());
                    if m != ReplyMode::One {
                        while p.get_reply(Duration::from_millis(100))?.is_some() {
                            replies += 1;
                        }
                    }
                    format!("{replies} replies{}", first_from(first))
                }
                Err(e) => {
                    missed += 1;
                    format!("failed: {e}")
                }
            },
            Mode::Reliable(r) => {
                let o = p.send_reliable(&msg, group, r, SendOptions::default())?;
                missed += u32::from(!o.met);
                let what = if r.wants_replies() { "replies" } else { "deliveries" };
                format!(
                    "{}: {} {what} of {} members known, acknowledged by {} of {} other hosts{}",
                    if o.met { "met" } else { "NOT met" },
                    o.count,
                    o.receivers,
                    o.hosts_acked,
                    o.hosts,
                    first_from(o.first_replier)
                )
            }
        };
        let took = took.unwrap_or_else(|| start.elapsed());
        times.push(took);
        if count <= 10 {
            say!("send {i}: {line} in {}", fmt_dur(took));
        } else if i + 1 == count {
            say!("last send: {line}");
        }
    }
    times.sort();
    say!(
        "vipc gsend: {count} sends to {group}, {} met, {missed} not; median {}, p99 {}",
        count - missed,
        fmt_dur(quantile(&times, 0.5)),
        fmt_dur(quantile(&times, 0.99))
    );
    drop(p);
    node.shutdown();
    if missed > 0 {
        return Err(CliError(format!("{missed} of {count} sends to {group} did not reach their condition")));
    }
    Ok(())
}
