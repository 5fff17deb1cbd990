//! `vipc demo`: a 3-node cluster on loopback in this process that exercises
//! every primitive and prints what happened, how long it took and how many
//! packets went over the wire.

use crate::error::{CliError, CliResult};
use std::time::{Duration, Instant};
use vipc::{
    services, Access, Message, Node, Notify, Pid, Process, ProtectionGroup, ProtocolError, ReplyMode, Scope,
    SegmentOptions, SegmentRef, SendOptions,
};

const OP_ECHO: u8 = 0x10;
const OP_APPENDED: u8 = 0x11;
const OP_PAGE_READ: u8 = 0x12;
const OP_FORWARD: u8 = 0x13;
const OP_MOVE_FROM: u8 = 0x14;
const OP_MOVE_TO: u8 = 0x15;
const STATUS_FAILED: u8 = 0xEE;

/// Size of a "page" for the 2-packet page read/write.
const PAGE: usize = 1024;
/// Size of the bulk moves.
const BULK: usize = 1 << 20;

/// Deterministic test bytes; each depends on its offset (period 251), so
/// data moved to the wrong place shows.
pub fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}

/// FNV-1a, 32 bits: a checksum for the demo's data.
fn fnv(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

fn put32(msg: &mut Message, at: usize, v: u32) {
    msg[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get32(msg: &Message, at: usize) -> u32 {
    u32::from_le_bytes([msg[at], msg[at + 1], msg[at + 2], msg[at + 3]])
}

/// The demo's server process: byte 0 of each message selects what it does.
fn server(p: Process) {
    let mut buf = vec![0u8; 8192];
    loop {
        let mut msg: Message = [0; 32];
        let Ok(info) = p.receive_with_segment(&mut msg, &mut buf) else { return };
        let size = info.segment_size as usize;
        let r = match msg[0] {
            OP_ECHO => p.reply(&msg, info.from),
            OP_APPENDED => {
                put32(&mut msg, 4, info.len as u32);
                put32(&mut msg, 8, fnv(&buf[..info.len]));
                p.reply(&msg, info.from)
            }
            OP_PAGE_READ => p.reply_with_segment(&msg, info.from, 0, &pattern(size.min(PAGE), 1)),
            OP_FORWARD => {
                let to = Pid(get32(&msg, 4));
                msg[0] = OP_ECHO;
                p.forward(&msg, info.from, to)
            }
            OP_MOVE_FROM => {
                let mut data = vec![0u8; size];
                match p.move_from(info.from, 0, &mut data) {
                    Ok(()) => put32(&mut msg, 8, fnv(&data)),
                    Err(_) => msg[0] = STATUS_FAILED,
                }
                p.reply(&msg, info.from)
            }
            OP_MOVE_TO => {
                if p.move_to(info.from, 0, &pattern(size, 2)).is_err() {
                    msg[0] = STATUS_FAILED;
                }
                p.reply(&msg, info.from)
            }
            _ => {
                msg[0] = STATUS_FAILED;
                p.reply(&msg, info.from)
            }
        };
        if let Err(vipc::Error::NodeStopped) = r {
            return;
        }
    }
}

fn start_cluster() -> CliResult<Vec<Node>> {
    Ok(vipc::loopback_cluster(3, 1, |_, _| {})?)
}

/// Packets on the wire so far: everything the cluster's nodes sent, except
/// housekeeping (host-id announcements and I-Am-Here heartbeats, which
/// belong to no step).
fn wire(nodes: &[Node]) -> u64 {
    nodes.iter().map(|n| n.stats().ipc_sent()).sum()
}

/// A short time as people read it: µs below a millisecond, else ms.
pub fn fmt_dur(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

struct Demo {
    nodes: Vec<Node>,
    failures: u32,
}

impl Demo {
    /// Runs one step, printing what happened, its time and the packets it cost.
    fn step(&mut self, what: &str, f: impl FnOnce() -> Result<String, String>) {
        let p0 = wire(&self.nodes);
        let t = Instant::now();
        let r = f();
        let dt = t.elapsed();
        let packets = wire(&self.nodes) - p0;
        match r {
            Ok(detail) => say!("ok    {what}: {detail} [{}, {packets} packets]", fmt_dur(dt)),
            Err(e) => {
                self.failures += 1;
                say!("FAIL  {what}: {e} [{}, {packets} packets]", fmt_dur(dt));
            }
        }
    }
}

fn expect(cond: bool, ok: String, bad: String) -> Result<String, String> {
    if cond {
        Ok(ok)
    } else {
        Err(bad)
    }
}

fn expect_err(r: vipc::Result<Pid>, want: impl Fn(&ProtocolError) -> bool) -> Result<String, String> {
    match r {
        Err(vipc::Error::Protocol(e)) if want(&e) => Ok(format!("failed as it should: {e}")),
        Err(e) => Err(format!("wrong error: {e}")),
        Ok(p) => Err(format!("unexpectedly answered by {p}")),
    }
}

/// A pid of `node` that no process has: one that existed a moment ago (local
/// ids come round again only after all 65,534 were handed out).
fn gone_pid(node: &vipc::Node) -> Result<Pid, String> {
    Ok(node.attach().map_err(|e| e.to_string())?.pid())
}

/// Runs the demo; an error if any step failed.
pub fn run() -> CliResult<()> {
    let nodes = start_cluster()?;
    say!("vipc demo: 3 nodes on loopback");
    for n in &nodes {
        say!(
            "  node host {:#06x} at {} (kernel server {})",
            n.host_id(),
            n.local_addr(),
            services::kernel_pid(n.host_id())
        );
    }
    let (n1, n2, n3) = (nodes[0].clone(), nodes[1].clone(), nodes[2].clone());
    let (srv1, _) = n1.spawn(server)?;
    let (srv3, _) = n3.spawn(server)?;
    n1.set_pid("demo-server", srv1, Scope::Any)?;
    let local_client = n1.attach()?;
    let client = n2.attach()?;
    say!(
        "  server {srv1} on host 1, server {srv3} on host 3, clients {} (host 1) and {} (host 2)",
        local_client.pid(),
        client.pid()
    );
    let mut d = Demo { nodes: nodes.clone(), failures: 0 };
    let send = |p: &Process, op: u8, to: Pid| -> vipc::Result<(Message, Pid)> {
        let mut m: Message = [0; 32];
        m[0] = op;
        m[16..32].copy_from_slice(b"hello, V kernel!");
        let r = p.send(&mut m, to)?;
        Ok((m, r))
    };
    let e = |e: vipc::Error| e.to_string();

    d.step("local Send/Receive/Reply (host 1 -> host 1)", || {
        let (m, r) = send(&local_client, OP_ECHO, srv1).map_err(e)?;
        expect(&m[16..] == b"hello, V kernel!" && r == srv1, format!("reply from {r}"), "wrong reply".into())
    });
    d.step("remote Send/Receive/Reply (host 2 -> host 1)", || {
        let (m, r) = send(&client, OP_ECHO, srv1).map_err(e)?;
        expect(&m[16..] == b"hello, V kernel!", format!("reply from {r}"), "wrong reply".into())
    });
    d.step("Send with appended segment: 1 KiB page write (host 2 -> host 1)", || {
        let page = pattern(PAGE, 3);
        let mut m: Message = [0; 32];
        m[0] = OP_APPENDED;
        client.send_with(&mut m, srv1, Some(SegmentRef::Read(&page)), SendOptions::default()).map_err(e)?;
        expect(
            get32(&m, 4) as usize == PAGE && get32(&m, 8) == fnv(&page),
            format!("receiver got all {PAGE} bytes with the message"),
            format!("receiver got {} bytes", get32(&m, 4)),
        )
    });
    d.step("ReplyWithSegment: 1 KiB page read (host 2 -> host 1)", || {
        let mut page = vec![0u8; PAGE];
        let mut m: Message = [0; 32];
        m[0] = OP_PAGE_READ;
        client.send_with(&mut m, srv1, Some(SegmentRef::Write(&mut page)), SendOptions::default()).map_err(e)?;
        expect(page == pattern(PAGE, 1), format!("{PAGE} bytes arrived with the reply"), "page contents wrong".into())
    });
    d.step("Forward (host 2 -> server on host 1 -> forwarded to server on host 3)", || {
        let mut m: Message = [0; 32];
        m[0] = OP_FORWARD;
        put32(&mut m, 4, srv3.0);
        let r = client.send(&mut m, srv1).map_err(e)?;
        expect(r == srv3, format!("reply came from {r}"), format!("reply came from {r}, not {srv3}"))
    });
    d.step("MoveFrom 1 MiB (server on host 1 reads the client's segment on host 2)", || {
        let data = pattern(BULK, 4);
        let mut m: Message = [0; 32];
        m[0] = OP_MOVE_FROM;
        let t = Instant::now();
        client.send_with(&mut m, srv1, Some(SegmentRef::Read(&data)), SendOptions::default()).map_err(e)?;
        let mbps = BULK as f64 / t.elapsed().as_secs_f64() / 1e6;
        expect(
            m[0] == OP_MOVE_FROM && get32(&m, 8) == fnv(&data),
            format!("1 MiB arrived intact ({mbps:.0} MB/s)"),
            "data corrupted or move failed".into(),
        )
    });
    d.step("MoveTo 1 MiB (server on host 1 writes the client's segment on host 2)", || {
        let mut data = vec![0u8; BULK];
        let mut m: Message = [0; 32];
        m[0] = OP_MOVE_TO;
        let t = Instant::now();
        client.send_with(&mut m, srv1, Some(SegmentRef::Write(&mut data)), SendOptions::default()).map_err(e)?;
        let mbps = BULK as f64 / t.elapsed().as_secs_f64() / 1e6;
        expect(
            m[0] == OP_MOVE_TO && data == pattern(BULK, 2),
            format!("1 MiB arrived intact ({mbps:.0} MB/s)"),
            "data corrupted or move failed".into(),
        )
    });
    d.step("GetPid \"demo-server\", scope local (host 1)", || {
        let r = local_client.get_pid("demo-server", Scope::Local).map_err(e)?;
        expect(r == Some(srv1), format!("found {srv1}"), format!("got {r:?}"))
    });
    d.step("GetPid \"demo-server\", scope remote (from host 2: broadcast)", || {
        let r = client.get_pid("demo-server", Scope::Remote).map_err(e)?;
        expect(r == Some(srv1), format!("found {srv1}"), format!("got {r:?}"))
    });
    d.step("GetPid \"no-such-name\", scope any (from host 2)", || {
        let r = client.get_pid("no-such-name", Scope::Any).map_err(e)?;
        expect(r.is_none(), "not found, as it should be".into(), format!("got {r:?}"))
    });
    d.step("remote memory: export on host 1, import, write, read and CAS-II from host 3", || {
        let opts =
            SegmentOptions { access: Access::READ_WRITE, notify: Notify::Never, protection: ProtectionGroup::Any };
        let seg = n1.export_segment(4096, opts).map_err(e)?;
        let remote = n3.import_segment(seg.name(), Access::READ_WRITE, Duration::from_secs(2)).map_err(e)?;
        let anon = n3.anonymous_segment(4096).map_err(e)?;
        remote.write(64, b"written by host 3", false).map_err(e)?;
        let t = Instant::now();
        remote.read(64, 17, (&anon, 0), false).map_err(e)?.wait(Duration::from_secs(2)).map_err(e)?;
        let read_us = t.elapsed().as_secs_f64() * 1e6;
        let cas = remote.cas(0, 0, 42, 3, (&anon, 100)).map_err(e)?.wait_cas(Duration::from_secs(2)).map_err(e)?;
        let owner_sees = seg.to_vec(64, 17).map_err(e)?;
        expect(
            anon.to_vec(0, 17).map_err(e)? == b"written by host 3"
                && owner_sees == b"written by host 3"
                && cas.nonce == 3,
            format!(
                "served by host 1's node, no process of it involved; read {read_us:.0} µs, CAS-II swapped (nonce {})",
                cas.nonce
            ),
            format!("read or CAS-II wrong: {cas:?}"),
        )
    });
    d.step("Send to a group, many replies (host 2 -> members on hosts 1 and 3)", || {
        let group = n2.allocate_group_id().map_err(e)?;
        let mut members = Vec::new();
        let (joined, all_joined) = std::sync::mpsc::channel();
        for n in [&n1, &n3] {
            let joined = joined.clone();
            let (pid, _) = n
                .spawn(move |p| {
                    let ok = p.join_group(group).is_ok();
                    let _ = joined.send(ok);
                    let mut m: Message = [0; 32];
                    if let (true, Ok(from)) = (ok, p.receive(&mut m)) {
                        let _ = p.reply(&m, from);
                    }
                })
                .map_err(e)?;
            members.push(pid);
        }
        for _ in 0..members.len() {
            if !all_joined.recv_timeout(Duration::from_secs(2)).unwrap_or(false) {
                return Err("a member could not join the group".into());
            }
        }
        let mut m: Message = [7; 32];
        let first = client.send_group(&mut m, group, ReplyMode::Many, SendOptions::default()).map_err(e)?;
        let second = client.get_reply(Duration::from_secs(1)).map_err(e)?.map(|(who, _)| who);
        let mut got = vec![first];
        got.extend(second);
        got.sort();
        members.sort();
        expect(got == members, format!("replies from {} and {}", got[0], got[got.len() - 1]), format!("got {got:?}"))
    });
    d.step("Send to a nonexistent local pid (host 2)", || {
        let r = send(&client, OP_ECHO, gone_pid(&n2)?).map(|x| x.1);
        expect_err(r, |e| matches!(e, ProtocolError::NoSuchProcess(_)))
    });
    d.step("Send to a nonexistent remote pid (host 3: nAck)", || {
        let r = send(&client, OP_ECHO, gone_pid(&n3)?).map(|x| x.1);
        expect_err(r, |e| matches!(e, ProtocolError::NoSuchProcess(_)))
    });
    d.step("Send to a process destroyed while the sender waits (host 2 -> host 3)", || {
        let victim = n3.attach().map_err(e)?;
        let vpid = victim.pid();
        let (_, waiter) = n2
            .spawn(move |p| {
                let t = Instant::now();
                let mut m: Message = [0; 32];
                (p.send(&mut m, vpid), t.elapsed())
            })
            .map_err(e)?;
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        drop(victim);
        let (r, _) = waiter.join().map_err(|_| "sender thread panicked".to_string())?;
        let after = t.elapsed();
        let first = expect_err(r, |e| matches!(e, ProtocolError::NoSuchProcess(_) | ProtocolError::Destroyed(_)))?;
        let again =
            expect_err(send(&client, OP_ECHO, vpid).map(|x| x.1), |e| matches!(e, ProtocolError::NoSuchProcess(_)))?;
        Ok(format!("{first} ({} after the destruction); a later Send {again}", fmt_dur(after)))
    });

    say!("counters:");
    for n in &nodes {
        let s = n.stats();
        say!(
            "  host {:#06x}: packets out {:>5} in {:>5}, local exchanges {}, remote exchanges {}, retransmissions {}, duplicates {}, timeouts {}, MAC failures {}",
            n.host_id(),
            s.packets_out.iter().sum::<u64>(),
            s.packets_in.iter().sum::<u64>(),
            s.local_exchanges,
            s.remote_exchanges,
            s.retransmissions,
            s.duplicates,
            s.timeouts,
            s.mac_failures
        );
    }
    drop(local_client);
    drop(client);
    let failures = d.failures;
    drop(d);
    for n in &nodes {
        n.shutdown();
    }
    if failures > 0 {
        return Err(CliError(format!("demo: {failures} step(s) failed")));
    }
    say!("vipc demo: every step succeeded");
    Ok(())
}
