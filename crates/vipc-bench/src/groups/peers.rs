//! The two peer programs of suite `groups`, each a vipc node in its own
//! network namespace: a member host (kernel server plus one member of each
//! group it is told to join) and the measuring client, driven line by line.

use super::raw;
use crate::error::Result;
use crate::peer::{announce, say, stdin_lines, PeerArgs};
use crate::stats::{median, quantile, sort};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc::services::{ping_kernel, spawn_group_member};
use vipc::{
    well_known_group, Broadcast, HostIdConfig, Multicast, Node, NodeConfig, Process, Reliable, ReplyMode, SendOptions,
};

/// The broadcast channel of the bench's namespaces (kept apart from a
/// default cluster that may run on the machine).
pub const BENCH_CHANNEL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 255, 87, 1), 7702);

/// Long enough for every late packet of a command to arrive (a few round trips).
const QUIET: Duration = Duration::from_millis(30);

/// Well-known group of the members of a group of `size` hosts.
pub fn group_of_size(size: usize) -> u16 {
    100 + size as u16
}

/// Well-known group of `size` hosts whose members receive and never reply:
/// what the DELIVER modes measure (004's packet formula has no replies).
pub fn silent_group_of_size(size: usize) -> u16 {
    200 + size as u16
}

/// A member that takes every message, counts it and never replies.
fn spawn_silent_member(node: &Node, group: vipc::Pid, got: Arc<AtomicU64>) -> Result<()> {
    node.spawn(move |p| {
        if p.join_group(group).is_ok() {
            while p.receive(&mut [0u8; 32]).is_ok() {
                got.fetch_add(1, Ordering::Relaxed);
            }
        }
    })?;
    Ok(())
}

/// Load of a host during the soak: one process sending ALL_REPLY back to
/// back to the group of `size` until `stop`.
struct Load {
    stop: Arc<AtomicBool>,
    sends: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

fn start_load(node: &Node, size: usize) -> Result<Load> {
    let (stop, sends) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let (s, n) = (stop.clone(), sends.clone());
    let group = well_known_group(group_of_size(size));
    let (_, thread) = node.spawn(move |p| {
        while !s.load(Ordering::Relaxed) {
            if p.send_reliable(&[3u8; 32], group, Reliable::AllReply, SendOptions::default()).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            n.fetch_add(1, Ordering::Relaxed);
        }
    })?;
    Ok(Load { stop, sends, thread })
}

fn v4(listen: SocketAddr) -> Result<Ipv4Addr> {
    match listen {
        SocketAddr::V4(a) => Ok(*a.ip()),
        SocketAddr::V6(_) => Err("groups bench: IPv4 listen address needed".into()),
    }
}

fn node_config(listen: SocketAddr, host: u16) -> Result<NodeConfig> {
    let mut cfg = NodeConfig::fixed(host, listen, Vec::new());
    cfg.host_id = HostIdConfig::Fixed(host);
    cfg.broadcast = Broadcast {
        multicast: Some(Multicast { group: BENCH_CHANNEL, interface: v4(listen)?, ..Multicast::default() }),
        peers: Vec::new(),
    };
    Ok(cfg)
}

/// `bench-peer group-host --listen IP:PORT --host H --groups 2,4`: joins a
/// replying and a silent member to the groups of those sizes and serves until
/// stdin closes. Commands: `STATS` answers `STATS hosts_down=D recv_S=R …`
/// (R: messages the silent member of size S has received); `LOAD size=S`
/// starts ALL_REPLY Sends back to back to the group of S; `UNLOAD` stops
/// them and answers `UNLOADED sends=N`.
pub fn host_peer(a: &PeerArgs) -> Result<()> {
    let listen: SocketAddr = a.get("listen")?;
    let node = Node::start(node_config(listen, a.get("host")?)?)?;
    let groups: String = a.opt("groups")?.unwrap_or_default();
    let mut sizes = Vec::new();
    for g in groups.split(',').filter(|s| !s.is_empty()) {
        sizes.push(g.parse::<usize>().map_err(|_| format!("bad group size {g:?}"))?);
    }
    raw::spawn_echo(v4(listen)?, &sizes)?;
    let mut received = Vec::new();
    for &size in &sizes {
        spawn_group_member(&node, well_known_group(group_of_size(size)))?;
        let got = Arc::new(AtomicU64::new(0));
        spawn_silent_member(&node, well_known_group(silent_group_of_size(size)), got.clone())?;
        received.push((size, got));
    }
    announce(&[("host", node.host_id().to_string())]);
    let mut load: Option<Load> = None;
    for line in stdin_lines() {
        if line == "STATS" {
            let stats = node.stats();
            let mut out = format!("STATS hosts_down={} by_receiver={}", stats.hosts_down, stats.multicast_by_receiver);
            for (size, got) in &received {
                out.push_str(&format!(" recv_{size}={}", got.load(Ordering::Relaxed)));
            }
            say(&out);
        } else if line.starts_with("LOAD") {
            match field::<usize>(&line, "size").and_then(|size| start_load(&node, size)) {
                Ok(l) => {
                    load = Some(l);
                    say("LOADED");
                }
                Err(e) => say(&format!("ERROR {e}")),
            }
        } else if line == "UNLOAD" {
            let sends = match load.take() {
                Some(l) => {
                    l.stop.store(true, Ordering::Relaxed);
                    let _ = l.thread.join();
                    l.sends.load(Ordering::Relaxed)
                }
                None => 0,
            };
            say(&format!("UNLOADED sends={sends}"));
        }
    }
    if let Some(l) = load {
        l.stop.store(true, Ordering::Relaxed);
    }
    node.shutdown();
    Ok(())
}

/// `bench-peer group-client --listen IP:PORT --host H --expect N`: waits until
/// N hosts are alive, then runs the commands it reads (see `client_command`).
pub fn client_peer(a: &PeerArgs) -> Result<()> {
    let listen: SocketAddr = a.get("listen")?;
    let node = Node::start(node_config(listen, a.get("host")?)?)?;
    let mut raw = raw::RawClient::new(v4(listen)?)?;
    let expect: usize = a.get("expect")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.alive_hosts()?.hosts().count() < expect {
        if Instant::now() > deadline {
            return Err(
                format!("only {} of {expect} hosts alive after 10 s", node.alive_hosts()?.hosts().count()).into()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let p = node.attach()?;
    announce(&[("alive", expect.to_string())]);
    for line in stdin_lines() {
        let answer = match line.split_whitespace().next() {
            Some("RAWUNICAST" | "RAWMCAST") => raw_command(&mut raw, &line),
            _ => client_command(&node, &p, &line),
        };
        match answer {
            Ok(out) => say(&format!("RESULT {out}")),
            Err(e) => say(&format!("ERROR {e}")),
        }
    }
    node.shutdown();
    Ok(())
}

/// `key=value` fields of a command line after its verb.
fn field<T: FromStr>(line: &str, key: &str) -> Result<T> {
    let f = crate::peer::parse_fields(line);
    let v = f.get(key).ok_or_else(|| format!("missing {key}= in {line:?}"))?;
    v.parse().map_err(|_| format!("bad {key}={v}").into())
}

/// Latency samples (µs) of `n` runs of `op`, with the IPC packets per run.
fn measure(node: &Node, n: usize, mut op: impl FnMut() -> Result<bool>) -> Result<String> {
    // Late replies and acknowledgements of the last command land before we
    // count, and ours before we stop counting: packets per run are exact.
    std::thread::sleep(QUIET);
    let before = node.stats();
    let mut t = Vec::with_capacity(n);
    let mut met = 0usize;
    for _ in 0..n {
        let start = Instant::now();
        met += usize::from(op()?);
        t.push(start.elapsed().as_secs_f64() * 1e6);
    }
    std::thread::sleep(QUIET);
    let after = node.stats();
    let packets = (after.ipc_packets() - before.ipc_packets()) as f64 / n as f64;
    sort(&mut t);
    Ok(format!("median={:.2} p99={:.2} met={met} n={n} packets={packets:.3}", median(&t), quantile(&t, 0.99)))
}

fn parse_mode(s: &str) -> Result<Reliable> {
    let k = |v: &str| v.parse::<u32>().map_err(|_| format!("bad K in {s:?}"));
    Ok(match s {
        "all-reply" => Reliable::AllReply,
        "all-deliver" => Reliable::AllDeliver,
        _ if s.starts_with("k-reply=") => Reliable::KReply(k(&s[8..])?),
        _ if s.starts_with("k-deliver=") => Reliable::KDeliver(k(&s[10..])?),
        _ => return Err(format!("unknown mode {s:?}").into()),
    })
}

/// One command of the client:
/// - `UNICAST host=H n=N`: Send–Receive–Reply with host H's kernel server;
/// - `SERIES hosts=S n=N`: one exchange with each of hosts 1..=S in turn;
/// - `RELIABLE mode=M size=S n=N`: reliable Sends to the group of S hosts
///   (its silent twin for the DELIVER modes; `fraction=` is the mean share
///   of the members reached);
/// - `DATAGRAM size=S n=N`: group Sends with reply mode None (V's
///   datagram) to the silent group of S;
/// - `ONE size=S n=N`: V's group Send in reply mode One (the first reply);
/// - `RETRY size=S n=N`: an unreliable Send (reply mode Many) collecting S
///   replies, resent up to 3 times after 20 ms of silence (user-level retries);
/// - `WATCH host=H`: answers when H has left the alive-host table;
/// - `SOAK size=S secs=T`: ALL_REPLY Sends back to back for T seconds.
fn client_command(node: &Node, p: &Process, line: &str) -> Result<String> {
    let verb = line.split_whitespace().next().unwrap_or("");
    match verb {
        "UNICAST" => {
            let host: u16 = field(line, "host")?;
            measure(node, field(line, "n")?, || ping_kernel(p, host).map(|_| true).map_err(Into::into))
        }
        "SERIES" => {
            let hosts: u16 = field(line, "hosts")?;
            measure(node, field(line, "n")?, || {
                for h in 1..=hosts {
                    ping_kernel(p, h)?;
                }
                Ok(true)
            })
        }
        "RELIABLE" => {
            let mode = parse_mode(&field::<String>(line, "mode")?)?;
            let size: usize = field(line, "size")?;
            let group = match mode {
                Reliable::AllDeliver | Reliable::KDeliver(_) => well_known_group(silent_group_of_size(size)),
                _ => well_known_group(group_of_size(size)),
            };
            let mut share = 0.0;
            let n: usize = field(line, "n")?;
            let out = measure(node, n, || {
                let o = p.send_reliable(&[0u8; 32], group, mode, SendOptions::default())?;
                share += o.count as f64 / size as f64;
                Ok(o.met)
            })?;
            Ok(format!("{out} fraction={:.4}", share / n as f64))
        }
        "DATAGRAM" => {
            let group = well_known_group(silent_group_of_size(field(line, "size")?));
            measure(node, field(line, "n")?, || {
                let mut m = [4u8; 32];
                p.send_group(&mut m, group, ReplyMode::None, SendOptions::default())?;
                Ok(true)
            })
        }
        "ONE" => {
            let group = well_known_group(group_of_size(field(line, "size")?));
            measure(node, field(line, "n")?, || {
                let mut m = [5u8; 32];
                p.send_group(&mut m, group, ReplyMode::One, SendOptions::default())?;
                Ok(true)
            })
        }
        "RETRY" => {
            let size: usize = field(line, "size")?;
            let group = well_known_group(group_of_size(size));
            measure(node, field(line, "n")?, || retry_send(p, group, size))
        }
        "WATCH" => {
            let host: u16 = field(line, "host")?;
            say("WATCHING");
            let start = Instant::now();
            while node.alive_hosts()?.hosts().any(|h| h == host) {
                if start.elapsed() > Duration::from_secs(10) {
                    return Err(format!("host {host} still alive after 10 s").into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(format!("down_after_ms={:.1}", start.elapsed().as_secs_f64() * 1e3))
        }
        "SOAK" => {
            let group = well_known_group(group_of_size(field(line, "size")?));
            let secs: f64 = field(line, "secs")?;
            let down_before = node.stats().hosts_down;
            let (mut sends, mut missed) = (0u64, 0u64);
            let start = Instant::now();
            while start.elapsed().as_secs_f64() < secs {
                let o = p.send_reliable(&[1u8; 32], group, Reliable::AllReply, SendOptions::default())?;
                sends += 1;
                missed += u64::from(!o.met);
            }
            let downs = node.stats().hosts_down - down_before;
            Ok(format!("sends={sends} missed={missed} hosts_down={downs}"))
        }
        _ => Err(format!("unknown command {line:?}").into()),
    }
}

/// The raw UDP floor (see [`raw`]):
/// - `RAWUNICAST host=H n=N`: a 32-byte echo with host H;
/// - `RAWMCAST size=S n=N`: one datagram to the echoes of size S, timing the
///   first (`first=`) and the last (`median=`) of their answers.
///
/// Rounds that lost a datagram are counted (`lost=`) and not timed.
fn raw_command(c: &mut raw::RawClient, line: &str) -> Result<String> {
    let n: usize = field(line, "n")?;
    let (to, answers) = if line.starts_with("RAWUNICAST") {
        (SocketAddrV4::new(super::topology::host_ip(field(line, "host")?), raw::RAW_PORT), 1)
    } else {
        let size: usize = field(line, "size")?;
        (SocketAddrV4::new(raw::raw_group_addr(size), raw::RAW_PORT), size)
    };
    let (mut first, mut all, mut lost) = (Vec::with_capacity(n), Vec::with_capacity(n), 0usize);
    for _ in 0..n {
        match c.round(to, answers)? {
            Some(r) => {
                first.push(r.first.as_secs_f64() * 1e6);
                all.push(r.all.as_secs_f64() * 1e6);
            }
            None => lost += 1,
        }
    }
    if all.is_empty() {
        return Err(format!("every one of {n} raw rounds to {to} was lost").into());
    }
    sort(&mut first);
    sort(&mut all);
    Ok(format!(
        "median={:.2} first={:.2} p99={:.2} lost={lost} n={n}",
        median(&all),
        median(&first),
        quantile(&all, 0.99)
    ))
}

/// An unreliable group Send made reliable by the user: collect `size`
/// distinct replies, resending (at most 3 times) after 20 ms of silence.
fn retry_send(p: &Process, group: vipc::Pid, size: usize) -> Result<bool> {
    let mut got = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let mut m = [2u8; 32];
        match p.send_group(&mut m, group, ReplyMode::Many, SendOptions::default()) {
            Ok(first) => {
                got.insert(first);
            }
            Err(vipc::Error::Protocol(_)) => continue,
            Err(e) => return Err(e.into()),
        }
        while got.len() < size {
            match p.get_reply(Duration::from_millis(20))? {
                Some((who, _)) => {
                    got.insert(who);
                }
                None => break,
            }
        }
        if got.len() >= size {
            return Ok(true);
        }
    }
    Ok(false)
}
