//! Suite `typed`: the typed layer of issue 7 (seed 002) beside the
//! primitives it is built on, in the same run — what the language-level
//! convenience costs — and 002's relationships between the primitives.
//! The server side runs in separate OS processes (`typed-server`): a raw
//! bench server, a typed interface server, a port keeper with a region, a
//! remote variable, network port importers and a raw group member.
//!
//! | item | what |
//! |---|---|
//! | `calls` | typed RPC (remote and local) against Send–Receive–Reply; asynchronous (`OnReceipt`) against synchronous (`OnReturn`) port calls; RPC against a synchronous port call |
//! | `reads` | remote variable read (whole, qualified; blocking and spinning) against one raw remote-memory read and against an asynchronous port call; network port call against a raw reliable `ALL_REPLY` Send |
//! | `bulk` | 1 MiB as a typed argument and a typed result (`Vec<u8>` and `serde_bytes::ByteBuf`) against a raw MoveFrom and MoveTo of 1 MiB: what marshalling costs on bulk data |
//! | `multicast` | one network port call to N importers against a series of N RPCs, N = 1, 2, 4, 8 (002 Fig. 6-1) |

use crate::error::{BenchError, Result};
use crate::ipc::Ctx;
use crate::peer::{announce, stdin_lines, Peer, PeerArgs};
use crate::probe::{find, interleave, Probe};
use crate::vserver::{call, node_config, request, serve, OP_ECHO, OP_MOVE_FROM, OP_MOVE_TO};
use std::time::{Duration, Instant};
use vipc::{Access, Node, Notify, Pid, ProtectionGroup, Reliable, SegmentOptions, SendOptions};
use vipc_ports::rpc::spawn_server;
use vipc_ports::{Checkpoint, NetPort, Ports, Region, RemoteVars, Variables};

/// The items of the suite, in the order they run.
pub const ITEMS: &[&str] = &["calls", "reads", "bulk", "multicast"];

/// The suite name of its records.
pub const SUITE: &str = "typed";

/// The typed interface the bench calls.
#[vipc_ports::interface]
pub trait Bench {
    /// Returns its argument.
    fn echo(&self, x: u64) -> u64;
    /// Takes bulk data as a plain `Vec<u8>` (serde: a sequence of bytes); returns its length.
    fn sink(&self, data: Vec<u8>) -> u64;
    /// Returns `n` bytes as a plain `Vec<u8>`.
    fn source(&self, n: u64) -> Vec<u8>;
    /// Takes bulk data as `serde_bytes::ByteBuf` (serde: one byte string); returns its length.
    fn sink_bytes(&self, data: serde_bytes::ByteBuf) -> u64;
    /// Returns `n` bytes as `serde_bytes::ByteBuf`.
    fn source_bytes(&self, n: u64) -> serde_bytes::ByteBuf;
}

struct Echo;

impl Bench for Echo {
    fn echo(&self, x: u64) -> u64 {
        x
    }
    fn sink(&self, data: Vec<u8>) -> u64 {
        data.len() as u64
    }
    fn source(&self, n: u64) -> Vec<u8> {
        vec![0x5a; n as usize]
    }
    fn sink_bytes(&self, data: serde_bytes::ByteBuf) -> u64 {
        data.len() as u64
    }
    fn source_bytes(&self, n: u64) -> serde_bytes::ByteBuf {
        serde_bytes::ByteBuf::from(vec![0x5a; n as usize])
    }
}

const PORT: &str = "bench-port";
const NET_PORT: &str = "bench-net";
/// The raw group member's well-known group (the network port's is derived from its name).
const RAW_GROUP: u16 = 0x3f01;
const GRID: usize = 100;
/// `poll_spin` of the spinning reader's node.
const SPIN: Duration = Duration::from_micros(50);

/// Runs one item of the suite.
pub fn run_item(ctx: &mut Ctx<'_>, item: &str) -> Result<()> {
    match item {
        "calls" => calls(ctx),
        "reads" => reads(ctx),
        "bulk" => bulk(ctx),
        "multicast" => multicast(ctx),
        other => Err(BenchError::Other(format!("unknown item typed/{other} (items: {})", ITEMS.join(", ")))),
    }
}

/// The server peer (`typed-server --host H [--nets 1,2,4,8]`: also imports network ports `bench-net-N` for each N); READY `addr=` `raw=` (pid) `seg=` (hex rmem segment).
pub fn server_peer(a: &PeerArgs) -> Result<()> {
    let host: u16 = a.get("host")?;
    let node = Node::start(node_config(host, Vec::new(), None))?;
    let (raw, _) = node.spawn(serve)?;
    spawn_server(&node, "bench-typed", BenchServer(Echo)).map_err(ports_err)?;
    spawn_server(&node, &format!("bench-typed@{host}"), BenchServer(Echo)).map_err(ports_err)?;
    let nets: String = a.opt("nets")?.unwrap_or_default();
    for n in nets.split(',').filter(|s| !s.is_empty()) {
        NetPort::<u64, u64>::new(&format!("bench-net-{n}")).import(&node, |x| x).map_err(ports_err)?;
    }
    let ports = Ports::start(&node).map_err(ports_err)?;
    let port = ports.open::<u64, u64>(PORT).map_err(ports_err)?;
    let (n, p2) = (node.clone(), std::sync::Arc::new(ports));
    let keeper = p2.clone();
    std::thread::spawn(move || {
        let Ok(me) = n.attach() else { return };
        let _ = Region::new(&me, &keeper).on(&port, |x: u64| x).serve();
    });
    let vars = Variables::start(&node).map_err(ports_err)?;
    let _word = vars.export("word", 64, &7u64).map_err(ports_err)?;
    let _grid = vars.export("grid", 8 << 10, &(0..GRID as u64).collect::<Vec<_>>()).map_err(ports_err)?;
    NetPort::<u64, u64>::new(NET_PORT).import(&node, |x| x).map_err(ports_err)?;
    vipc::services::spawn_group_member(&node, vipc::well_known_group(RAW_GROUP))?;
    let opts = SegmentOptions { access: Access::READ, notify: Notify::Never, protection: ProtectionGroup::Any };
    let seg = node.export_segment(4096, opts)?;
    let name = crate::rmem::hex(&seg.name());
    announce(&[("addr", node.local_addr().to_string()), ("raw", raw.0.to_string()), ("seg", name)]);
    stdin_lines().wait_for_close()
}

fn spawn_peer(ctx: &mut Ctx<'_>) -> Result<Peer> {
    let host = ctx.host().to_string();
    Peer::spawn(&ctx.exe, "typed-server", &["--host".into(), host])
}

/// Waits until `node`'s alive-host table lists every host of `hosts`.
fn wait_alive(node: &Node, hosts: &[u16]) -> Result<()> {
    let t = Instant::now();
    while !hosts.iter().all(|h| node.alive_hosts().map(|a| a.hosts().any(|x| x == *h)).unwrap_or(false)) {
        if t.elapsed() > Duration::from_secs(5) {
            return Err("typed: the servers' nodes never all appeared in the alive-host table".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn ports_err(e: vipc_ports::Error) -> BenchError {
    BenchError::Other(format!("vipc-ports: {e}"))
}

fn micros(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Typed calls and port calls against Send–Receive–Reply.
fn calls(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 1000, 200);
    let _home = crate::ipc::pin_home(ctx, "typed/calls");
    let peer = spawn_peer(ctx)?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let raw = Pid(peer.parsed("raw")?);
    let (local_raw, _) = node.spawn(serve)?;
    let (local_typed, _) = spawn_server(&node, "bench-typed-local", BenchServer(Echo)).map_err(ports_err)?;
    let me = node.attach()?;
    let typed = BenchClient::connect(&me, "bench-typed").map_err(ports_err)?;
    let typed_local = BenchClient::at(&me, local_typed);
    let ports = Ports::start(&node).map_err(ports_err)?;
    let port = ports.connect::<u64, u64>(&me, PORT).map_err(ports_err)?;
    let mut probes = vec![
        Probe::new("srr_remote_32B", n, || {
            let t = Instant::now();
            call(&me, raw, &mut request(OP_ECHO, 0, 0), None)?;
            Ok(micros(t))
        }),
        Probe::new("srr_local_32B", n, || {
            let t = Instant::now();
            call(&me, local_raw, &mut request(OP_ECHO, 0, 0), None)?;
            Ok(micros(t))
        }),
        Probe::new("typed_call_remote", n, || {
            let t = Instant::now();
            typed.echo(7).map_err(ports_err)?;
            Ok(micros(t))
        }),
        Probe::new("typed_call_local", n, || {
            let t = Instant::now();
            typed_local.echo(7).map_err(ports_err)?;
            Ok(micros(t))
        }),
        Probe::new("port_call_on_return", n, || {
            let t = Instant::now();
            port.call(&me, &7).map_err(ports_err)?;
            Ok(micros(t))
        }),
        Probe::new("port_send_on_receipt", n, || {
            let t = Instant::now();
            port.send(&me, &7, Checkpoint::OnReceipt).map_err(ports_err)?;
            Ok(micros(t))
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let rows = [
        ("typed_call_remote", "srr_remote_32B"),
        ("typed_call_local", "srr_local_32B"),
        ("port_call_on_return", "srr_remote_32B"),
        ("port_send_on_receipt", "srr_remote_32B"),
        // 002's relationships (Fig. 4-1, 4-5): asynchronous against synchronous port calls, RPC against a synchronous port.
        ("port_send_on_receipt", "port_call_on_return"),
        ("typed_call_remote", "port_call_on_return"),
    ];
    for (name, base) in rows {
        let (v, b) = (m(name)?, m(base)?);
        ctx.rec(name, v, "us", base, b);
    }
    // Named as suite ipc names it: a record `srr_remote_32B` would be read by that suite's bar.
    ctx.rec("srr_remote_over_local", m("srr_remote_32B")?, "us", "srr_local_32B", m("srr_local_32B")?);
    Ok(())
}

/// Remote variables and network ports against the raw primitives under them.
fn reads(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 500, 100);
    let _home = crate::ipc::pin_home(ctx, "typed/reads");
    let peer = spawn_peer(ctx)?;
    let peer_addr = peer.parsed("addr")?;
    let node = Node::start(node_config(ctx.host(), vec![peer_addr], None))?;
    let me = node.attach()?;
    let host = Pid(peer.parsed::<u32>("raw")?).host();
    let t = Instant::now();
    while !node.alive_hosts()?.hosts().any(|h| h == host) {
        if t.elapsed() > Duration::from_secs(5) {
            return Err("typed: the server's node never appeared in the alive-host table".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let name = crate::rmem::unhex(peer.field("seg")?)?;
    let raw_seg = node.import_segment(name, Access::READ, Duration::from_secs(1))?;
    let into = node.anonymous_segment(4096)?;
    let vars = RemoteVars::connect(&node, &me, host).map_err(ports_err)?;
    // The same reads from a node whose waiters spin before they block (002's processor-synchronous wait).
    let spin_node = Node::start(node_config(ctx.host(), vec![peer_addr], Some(SPIN)))?;
    let spin_me = spin_node.attach()?;
    let spin_seg = spin_node.import_segment(name, Access::READ, Duration::from_secs(1))?;
    let spin_into = spin_node.anonymous_segment(4096)?;
    let spin_vars = RemoteVars::connect(&spin_node, &spin_me, host).map_err(ports_err)?;
    let net = NetPort::<u64, u64>::new(NET_PORT);
    let ports = Ports::start(&node).map_err(ports_err)?;
    let port = ports.connect::<u64, u64>(&me, PORT).map_err(ports_err)?;
    let raw_group = vipc::well_known_group(RAW_GROUP);
    let mut probes = vec![
        Probe::new("rmem_read_8B", n, || {
            let t = Instant::now();
            raw_seg.read(0, 8, (&into, 0), false)?.wait(Duration::from_secs(1))?;
            Ok(micros(t))
        }),
        Probe::new("var_read_word", n, || {
            let t = Instant::now();
            let v: u64 = vars.read("word", "").map_err(ports_err)?;
            if v != 7 {
                return Err(format!("typed: variable read {v}, not 7").into());
            }
            Ok(micros(t))
        }),
        Probe::new("rmem_read_8B_spin", n, || {
            let t = Instant::now();
            spin_seg.read(0, 8, (&spin_into, 0), false)?.wait(Duration::from_secs(1))?;
            Ok(micros(t))
        }),
        Probe::new("var_read_word_spin", n, || {
            let t = Instant::now();
            let v: u64 = spin_vars.read("word", "").map_err(ports_err)?;
            if v != 7 {
                return Err(format!("typed: variable read {v} on the spinning node, not 7").into());
            }
            Ok(micros(t))
        }),
        Probe::new("var_read_qualified", n, || {
            let t = Instant::now();
            let v: u64 = vars.read("grid", "[50]").map_err(ports_err)?;
            if v != 50 {
                return Err(format!("typed: grid[50] read {v}").into());
            }
            Ok(micros(t))
        }),
        Probe::new("port_send_on_receipt", n, || {
            let t = Instant::now();
            port.send(&me, &7, Checkpoint::OnReceipt).map_err(ports_err)?;
            Ok(micros(t))
        }),
        Probe::new("reliable_all_reply_1", n, || {
            let t = Instant::now();
            let o = me.send_reliable(&[0; 32], raw_group, Reliable::AllReply, SendOptions::default())?;
            if !o.met {
                return Err("typed: raw ALL_REPLY not met".into());
            }
            Ok(micros(t))
        }),
        Probe::new("netport_call_1", n, || {
            let t = Instant::now();
            let g = net.call_all(&me, &5, Duration::from_secs(1)).map_err(ports_err)?;
            if g.results.len() != 1 || !g.missing.is_empty() {
                return Err(format!("typed: network port gathered {g:?}").into());
            }
            Ok(micros(t))
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let spin_vs_blocking = (m("var_read_word_spin")?, m("var_read_word")?);
    ctx.rec("var_read_spin_vs_blocking", spin_vs_blocking.0, "us", "var_read_word", spin_vs_blocking.1);
    for (name, base) in [
        ("var_read_word", "rmem_read_8B"),
        ("var_read_qualified", "rmem_read_8B"),
        ("var_read_word_spin", "rmem_read_8B_spin"),
        ("netport_call_1", "reliable_all_reply_1"),
        // 002 Fig. 5-1: a remote variable read against an asynchronous port call.
        ("var_read_word", "port_send_on_receipt"),
    ] {
        let (v, b) = (m(name)?, m(base)?);
        ctx.rec(name, v, "us", base, b);
    }
    Ok(())
}

/// 1 MiB through a typed call each way against the raw move of the same
/// size, timed by the caller: the typed call adds marshalling (encode into
/// a buffer, decode out of it) to the same MoveFrom or MoveTo.
fn bulk(ctx: &mut Ctx<'_>) -> Result<()> {
    const SIZE: usize = 1 << 20;
    let (rounds, n, warm) = ctx.scale(7, 30, 5);
    let peer = spawn_peer(ctx)?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let raw = Pid(peer.parsed("raw")?);
    let me = node.attach()?;
    let typed = BenchClient::connect(&me, "bench-typed").map_err(ports_err)?;
    let data = vec![0x5au8; SIZE];
    let bytes = serde_bytes::ByteBuf::from(data.clone());
    let buf = std::cell::RefCell::new(vec![0u8; SIZE]);
    let mbps = |t: Instant| SIZE as f64 / t.elapsed().as_secs_f64().max(1e-9) / 1e6;
    let sent = |len: u64| -> Result<()> {
        match len as usize {
            SIZE => Ok(()),
            other => Err(format!("typed: the server took {other} bytes of {SIZE}").into()),
        }
    };
    let got = |len: usize| -> Result<()> {
        match len {
            SIZE => Ok(()),
            other => Err(format!("typed: a result of {other} bytes, not {SIZE}").into()),
        }
    };
    let mut probes = vec![
        Probe::new("move_from_1MiB", n, || {
            let t = Instant::now();
            call(&me, raw, &mut request(OP_MOVE_FROM, SIZE, 0), Some(vipc::SegmentRef::Read(&data)))?;
            Ok(mbps(t))
        }),
        Probe::new("typed_arg_1MiB", n, || {
            let owned = data.clone();
            let t = Instant::now();
            sent(typed.sink(owned).map_err(ports_err)?)?;
            Ok(mbps(t))
        }),
        Probe::new("typed_arg_bytes_1MiB", n, || {
            let owned = bytes.clone();
            let t = Instant::now();
            sent(typed.sink_bytes(owned).map_err(ports_err)?)?;
            Ok(mbps(t))
        }),
        Probe::new("move_to_1MiB", n, || {
            let t = Instant::now();
            let mut b = buf.borrow_mut();
            call(&me, raw, &mut request(OP_MOVE_TO, SIZE, 0), Some(vipc::SegmentRef::Write(&mut b)))?;
            Ok(mbps(t))
        }),
        Probe::new("typed_result_1MiB", n, || {
            let t = Instant::now();
            got(typed.source(SIZE as u64).map_err(ports_err)?.len())?;
            Ok(mbps(t))
        }),
        Probe::new("typed_result_bytes_1MiB", n, || {
            let t = Instant::now();
            got(typed.source_bytes(SIZE as u64).map_err(ports_err)?.len())?;
            Ok(mbps(t))
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    for (name, base) in [
        ("typed_arg_1MiB", "move_from_1MiB"),
        ("typed_arg_bytes_1MiB", "move_from_1MiB"),
        ("typed_result_1MiB", "move_to_1MiB"),
        ("typed_result_bytes_1MiB", "move_to_1MiB"),
    ] {
        let (v, b) = (m(name)?, m(base)?);
        ctx.rec(name, v, "MB/s", base, b);
    }
    Ok(())
}

/// One network port call to N importers (one per node) against a series
/// of N typed calls, one to each of those nodes (002 Fig. 6-1). Each size
/// runs on a cluster of exactly N server nodes: a reliable group Send waits
/// for every alive host, member or not, so extra nodes would be charged to
/// the multicast.
fn multicast(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 300, 50);
    let sizes: &[usize] = if ctx.quick { &[1, 2] } else { &[1, 2, 4, 8] };
    for &size in sizes {
        let (v, b) = multicast_of(ctx, size, rounds, n, warm)?;
        ctx.rec(&format!("multicast_{size}"), v, "us", &format!("series_{size}"), b);
    }
    Ok(())
}

/// Medians of one multicast to `size` nodes and of a series of `size` calls.
fn multicast_of(ctx: &mut Ctx<'_>, size: usize, rounds: usize, n: usize, warm: usize) -> Result<(f64, f64)> {
    let mut peers = Vec::new();
    for _ in 0..size {
        let host = ctx.host();
        let args = ["--host".into(), host.to_string(), "--nets".into(), size.to_string()];
        peers.push((host, Peer::spawn(&ctx.exe, "typed-server", &args)?));
    }
    let addrs = peers.iter().map(|(_, p)| p.parsed("addr")).collect::<Result<Vec<_>>>()?;
    let node = Node::start(node_config(ctx.host(), addrs, None))?;
    let hosts: Vec<u16> = peers.iter().map(|(h, _)| *h).collect();
    wait_alive(&node, &hosts)?;
    let me = node.attach()?;
    let clients = hosts
        .iter()
        .map(|h| BenchClient::connect(&me, &format!("bench-typed@{h}")).map_err(ports_err))
        .collect::<Result<Vec<_>>>()?;
    let net: NetPort<u64, u64> = NetPort::new(&format!("bench-net-{size}"));
    let (me, clients, net) = (&me, &clients, &net);
    let mut probes = vec![
        Probe::new(&format!("multicast_{size}"), n, move || {
            let t = Instant::now();
            let g = net.call_all(me, &3, Duration::from_secs(1)).map_err(ports_err)?;
            if g.results.len() != size {
                let got = g.results.len();
                return Err(
                    format!("typed: a multicast to {size} gathered {got} results, missing {:?}", g.missing).into()
                );
            }
            Ok(micros(t))
        }),
        Probe::new(&format!("series_{size}"), n, move || {
            let t = Instant::now();
            for c in clients {
                c.echo(3).map_err(ports_err)?;
            }
            Ok(micros(t))
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let v = find(&probes, &format!("multicast_{size}"))?.rounds.median();
    let b = find(&probes, &format!("series_{size}"))?.rounds.median();
    drop(probes);
    drop(peers);
    Ok((v, b))
}

/// The report's section: each figure beside its primitive, and 002's
/// processor-synchronous against process-synchronous ratio.
pub fn report_section(records: &[crate::Record]) -> Option<String> {
    use std::fmt::Write;
    let rows: Vec<&crate::Record> = records.iter().filter(|r| r.suite == SUITE).collect();
    if rows.is_empty() {
        return None;
    }
    let mut s = String::from(
        "\n## Language-level primitives (002)\n\n\
         LeBlanc (002 §6.2.1, §7.1) measured a processor-synchronous remote read at about 1 ms against \
         about 11 ms for an asynchronous port call and 20 ms for a synchronous one or an RPC: the \
         read cost 0.05–0.09 of a call. Here each typed figure beside the primitive it is built on, \
         from the same run.\n\n\
         | figure | value | baseline | baseline value | ratio |\n|---|---|---|---|---|\n",
    );
    for r in &rows {
        let _ = writeln!(
            s,
            "| {} | {:.2} {} | {} | {:.2} | {:.3} |",
            r.name, r.value, r.unit, r.baseline, r.baseline_value, r.ratio
        );
    }
    let get = |n: &str| rows.iter().find(|r| r.name == n).map(|r| r.value);
    let _ = writeln!(s, "\n| 002's relationship | here | 002 |\n|---|---|---|");
    let mut compare = |what: &str, a: &str, b: &str, then: &str| {
        if let (Some(x), Some(y)) = (get(a), get(b)) {
            let _ = writeln!(s, "| {what} | {:.2} | {then} |", x / y);
        }
    };
    compare(
        "asynchronous / synchronous port call",
        "port_send_on_receipt",
        "port_call_on_return",
        "about 0.55 (11 ms / 20 ms)",
    );
    compare("RPC / synchronous port call", "typed_call_remote", "port_call_on_return", "about 1 (both about 20 ms)");
    compare(
        "remote variable read / asynchronous port call",
        "var_read_word",
        "port_send_on_receipt",
        "about 0.09 (1 ms / 11 ms)",
    );
    compare("remote variable read / synchronous port call", "var_read_word", "port_call_on_return", "about 0.05");
    for n in [2, 4, 8] {
        compare(
            &format!("multicast to {n} / series of {n} calls"),
            &format!("multicast_{n}"),
            &format!("series_{n}"),
            "below 1, falling with N",
        );
    }
    Some(s)
}
