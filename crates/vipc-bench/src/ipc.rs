//! Suite `ipc`: vipc's primitives against the raw network and the
//! alternatives, item by item (issue 3):
//!
//! | item | what |
//! |---|---|
//! | `penalty` | raw UDP round trip / 2, 64 B–1 KB single datagrams, 2–64 KB streamed |
//! | `exchange` | Send–Receive–Reply 32 B local and remote (± `poll_spin`) against UDP, TCP, condvar, ZeroMQ, gRPC; packets per exchange |
//! | `idle` | the remote exchange and the UDP ping-pong each after [`IDLE_GAP`] without traffic, and back to back |
//! | `moves` | MoveTo / MoveFrom remote 1 KB–16 MiB against TCP bulk; 1 KB local |
//! | `keyed` | the remote exchange and 1 MiB MoveTo / MoveFrom between keyed nodes against unkeyed ones and TCP bulk ([`crate::keyed`]) |
//! | `pages` | page read / write 512 B and 4 KB: appended segment against MoveTo/MoveFrom; packets |
//! | `units` | 64 KB read by MoveTo transfer unit 1, 4, 16, 64 KB |
//! | `saturation` | exchanges/s one server sustains with 1, 2, 4, 8 client processes, against a UDP echo server |
//! | `memory` | resident size of a server node holding 1,000 concurrent remote exchanges |
//! | `link` | MoveTo / MoveFrom 1 MiB and 16 MiB and a 1 MiB remote-memory read over a veth link with a 1,500-byte MTU (two network namespaces, root) against TCP bulk over the same link ([`crate::link`]) |

use crate::condvar::HandOff;
use crate::error::{BenchError, Result};
use crate::grpc::GrpcClient;
use crate::peer::{Peer, PeerExe};
use crate::probe::{find, interleave, Probe};
use crate::tcp::TcpClient;
use crate::udp::UdpClient;
use crate::vserver::{self, call, node_config, request, serve};
use crate::zmq_rr::ReqClient;
use crate::Output;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vipc::{Node, Pid, Process, SegmentRef, Stats};

/// The items of the suite, in the order they run.
pub const ITEMS: &[&str] =
    &["penalty", "exchange", "idle", "moves", "keyed", "pages", "units", "saturation", "memory", "link"];

/// How long a node with `poll_spin` busy-polls before sleeping.
pub const SPIN: Duration = Duration::from_micros(200);

/// Datagram size of the streamed network penalty (an Ethernet frame's payload).
pub const PENALTY_PACKET: usize = 1472;

const SUITE: &str = "ipc";

/// What an item needs: how to start peers, how much to measure, where results go.
pub struct Ctx<'o> {
    /// How to start peer processes.
    pub exe: PeerExe,
    /// Few iterations (CI smoke run).
    pub quick: bool,
    /// Where records go.
    pub out: &'o mut Output,
    /// The suite its records belong to (`ipc`, or `rmem`, which shares this context).
    pub suite: &'static str,
    next_host: u16,
}

impl std::fmt::Debug for Ctx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").field("quick", &self.quick).finish()
    }
}

impl<'o> Ctx<'o> {
    /// A context; logical host ids are handed out from a per-process base.
    pub fn new(exe: PeerExe, quick: bool, out: &'o mut Output) -> Ctx<'o> {
        let base = 0x1000 + (std::process::id() % 0x300) as u16 * 0x20;
        Ctx { exe, quick, out, next_host: base, suite: SUITE }
    }

    pub(crate) fn host(&mut self) -> u16 {
        self.next_host += 1;
        self.next_host
    }

    pub(crate) fn rec(&mut self, name: &str, value: f64, unit: &str, baseline: &str, baseline_value: f64) {
        self.out.record(crate::Record::new(self.suite, name, value, unit, baseline, baseline_value));
    }

    /// (rounds, operations per round, warm-up operations), scaled down by `--quick`.
    pub(crate) fn scale(&self, rounds: usize, per_round: usize, warmup: usize) -> (usize, usize, usize) {
        if self.quick {
            (1, (per_round / 50).clamp(1, 40), (warmup / 20).clamp(1, 10))
        } else {
            (rounds, per_round, warmup)
        }
    }
}

/// Runs one item of the suite.
pub fn run_item(ctx: &mut Ctx<'_>, item: &str) -> Result<()> {
    match item {
        "penalty" => penalty(ctx),
        "exchange" => exchange(ctx),
        "idle" => idle(ctx),
        "moves" => moves(ctx),
        "keyed" => crate::keyed::keyed(ctx),
        "pages" => pages(ctx),
        "units" => units(ctx),
        "saturation" => saturation(ctx),
        "memory" => memory(ctx),
        "link" => crate::link::link(ctx),
        other => Err(BenchError::Other(format!("unknown item ipc/{other} (items: {})", ITEMS.join(", ")))),
    }
}

/// `64B`, `4KB`, `1MiB`.
pub fn label(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{}MiB", bytes >> 20)
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{}KB", bytes >> 10)
    } else {
        format!("{bytes}B")
    }
}

fn packets(s: &Stats) -> u64 {
    s.ipc_packets()
}

/// Packets in and out of `node` per run of `op`, over `n` runs.
fn packets_per(node: &Node, n: usize, mut op: impl FnMut() -> Result<()>) -> Result<f64> {
    let before = packets(&node.stats());
    for _ in 0..n {
        op()?;
    }
    Ok((packets(&node.stats()) - before) as f64 / n.max(1) as f64)
}

/// A bench server in a separate OS process.
pub(crate) struct Server {
    pub(crate) peer: Peer,
    pub(crate) addr: SocketAddr,
    pub(crate) pid: Pid,
}

/// The CPUs `item`'s latency probes are placed on ([`crate::cpus`]), said in a note.
pub(crate) fn placement(ctx: &mut Ctx<'_>, item: &str) -> crate::cpus::Cpus {
    match crate::cpus::Cpus::allowed() {
        Some(c) if c.home != c.away => {
            ctx.out
                .note(format!("{item}: blocking probes on CPU {}, any busy-polling server on CPU {}", c.home, c.away));
            c
        }
        Some(c) => {
            ctx.out.note(format!("{item}: one CPU allowed (CPU {}): polling servers share it", c.home));
            c
        }
        None => {
            ctx.out.note(format!("{item}: CPU affinity unreadable: probes not placed"));
            crate::cpus::Cpus::NONE
        }
    }
}

/// Holds this thread to the home CPU for an item whose probes all block
/// (see [`crate::cpus`]); what the item starts meanwhile runs there too.
pub(crate) fn pin_home(ctx: &mut Ctx<'_>, item: &str) -> crate::cpus::Pinned {
    crate::cpus::Pinned::to(placement(ctx, item).home)
}

pub(crate) fn spawn_server(ctx: &mut Ctx<'_>, spin: Option<Duration>) -> Result<Server> {
    spawn_server_with(ctx, spin, &[])
}

/// [`spawn_server`] with more arguments for the peer (`--keyed`).
pub(crate) fn spawn_server_with(ctx: &mut Ctx<'_>, spin: Option<Duration>, more: &[&str]) -> Result<Server> {
    let mut args = vec!["--host".to_string(), ctx.host().to_string()];
    if let Some(s) = spin {
        args.extend(["--spin-us".to_string(), s.as_micros().to_string()]);
    }
    args.extend(more.iter().map(|a| a.to_string()));
    let peer = Peer::spawn(&ctx.exe, "vipc-server", &args)?;
    let addr = peer.parsed("addr")?;
    let pid = Pid(peer.parsed("pid")?);
    Ok(Server { peer, addr, pid })
}

/// A node in this process with a client process (and its own bench server).
pub(crate) struct Local {
    pub(crate) node: Node,
    pub(crate) client: Process,
    pub(crate) server: Pid,
}

pub(crate) fn local(ctx: &mut Ctx<'_>, peers: Vec<SocketAddr>, spin: Option<Duration>) -> Result<Local> {
    local_with(node_config(ctx.host(), peers, spin))
}

/// [`local`] on a node configured as `config`.
pub(crate) fn local_with(config: vipc::NodeConfig) -> Result<Local> {
    let node = Node::start(config)?;
    let (server, _thread) = node.spawn(serve)?;
    let client = node.attach()?;
    Ok(Local { node, client, server })
}

pub(crate) fn timed(p: &Process, to: Pid, mut msg: vipc::Message, seg: Option<SegmentRef<'_>>) -> Result<Duration> {
    let t = Instant::now();
    call(p, to, &mut msg, seg)?;
    Ok(t.elapsed())
}

/// The server-side time of a move request.
pub(crate) fn server_time(
    p: &Process,
    to: Pid,
    mut msg: vipc::Message,
    seg: Option<SegmentRef<'_>>,
) -> Result<Duration> {
    call(p, to, &mut msg, seg)?;
    Ok(vserver::reply_time(&msg).max(Duration::from_nanos(1)))
}

pub(crate) fn mbps(bytes: usize, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64().max(1e-9) / 1e6
}

/// Item 1: the network penalty.
fn penalty(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 400, 50);
    let udp = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let c = RefCell::new(UdpClient::new(udp.parsed("addr")?, false)?);
    let sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536];
    let mut probes: Vec<Probe<'_>> = sizes
        .iter()
        .map(|&size| {
            let c = &c;
            Probe::new(&format!("penalty_{}", label(size)), n, move || {
                Ok(c.borrow_mut().round_trip(size, PENALTY_PACKET, 0)?.as_secs_f64() * 1e6 / 2.0)
            })
        })
        .collect();
    interleave(&mut probes, rounds, warm)?;
    let base = find(&probes, "penalty_64B")?.rounds.median();
    for p in &probes {
        let v = p.rounds.median();
        ctx.rec(&p.name, v, "us", "penalty_64B", base);
    }
    let retries = c.borrow().retries;
    if retries > 0 {
        ctx.out.note(format!("penalty: {retries} UDP stream(s) lost and sent again"));
    }
    Ok(())
}

/// Item 2 (and the latency baselines of item 7): Send–Receive–Reply.
fn exchange(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(9, 2000, 300);
    // Blocking probes with both ends on one CPU, polling servers on the
    // other, and the blocking pair once more across the two (see `cpus`).
    let cpus = placement(ctx, "exchange");
    let _home = crate::cpus::Pinned::to(cpus.home);
    let udp_b = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let udp_s = crate::cpus::on(cpus.away, || Peer::spawn(&ctx.exe, "udp-echo", &["--spin".into()]))?;
    let udp_x = crate::cpus::on(cpus.away, || Peer::spawn(&ctx.exe, "udp-echo", &[]))?;
    let tcp = Peer::spawn(&ctx.exe, "tcp-echo", &[])?;
    let zmq = Peer::spawn(&ctx.exe, "zmq-rep", &[])?;
    let grpc = Peer::spawn(&ctx.exe, "grpc-echo", &[])?;
    let srv = spawn_server(ctx, None)?;
    let srv_s = crate::cpus::on(cpus.away, || spawn_server(ctx, Some(SPIN)))?;
    let srv_x = crate::cpus::on(cpus.away, || spawn_server(ctx, None))?;
    let loc = local(ctx, vec![], None)?;
    // The local polling pair: its server process (and the node's threads) on the other CPU.
    let loc_s = crate::cpus::on(cpus.away, || local(ctx, vec![], Some(SPIN)))?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let rem_s = local(ctx, vec![srv_s.addr], Some(SPIN))?;
    let rem_x = local(ctx, vec![srv_x.addr], None)?;

    let mut ub = UdpClient::new(udp_b.parsed("addr")?, false)?;
    let mut ux = UdpClient::new(udp_x.parsed("addr")?, false)?;
    let mut us = UdpClient::new(udp_s.parsed("addr")?, true)?;
    let mut tc = TcpClient::connect(tcp.parsed("addr")?)?;
    let cv = HandOff::start();
    let mut zc = ReqClient::connect(zmq.field("endpoint")?)?;
    let mut gc = GrpcClient::connect(grpc.field("addr")?)?;
    let payload = [0x5au8; 32];
    let echo = || request(vserver::OP_ECHO, 0, 0);

    let mut probes = vec![
        Probe::micros("udp_pingpong_32B", n, || ub.round_trip(32, PENALTY_PACKET, 0)),
        Probe::micros("udp_busypoll_32B", n, || us.round_trip(32, PENALTY_PACKET, 0)),
        Probe::micros("tcp_pingpong_32B", n, || tc.ping(32)),
        Probe::micros("condvar_roundtrip", n, || Ok(cv.round_trip())),
        Probe::micros("zmq_reqrep_32B", n, || zc.round_trip(&payload)),
        Probe::micros("grpc_unary_32B", n / 2, || gc.round_trip(&payload)),
        Probe::micros("srr_local_32B", n, || timed(&loc.client, loc.server, echo(), None)),
        Probe::micros("srr_remote_32B", n, || timed(&rem.client, srv.pid, echo(), None)),
        Probe::micros("srr_local_32B_spin", n, || timed(&loc_s.client, loc_s.server, echo(), None)),
        Probe::micros("srr_remote_32B_spin", n, || timed(&rem_s.client, srv_s.pid, echo(), None)),
        Probe::micros("udp_pingpong_32B_across", n, || ux.round_trip(32, PENALTY_PACKET, 0)),
        Probe::micros("srr_remote_32B_across", n, || timed(&rem_x.client, srv_x.pid, echo(), None)),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    let rows: [(&str, f64, &str, f64); 16] = [
        ("srr_local_32B", m("srr_local_32B")?, "condvar_roundtrip", m("condvar_roundtrip")?),
        ("srr_local_32B_p99", p99("srr_local_32B")?, "condvar_roundtrip_p99", p99("condvar_roundtrip")?),
        ("srr_remote_32B", m("srr_remote_32B")?, "udp_pingpong_32B", m("udp_pingpong_32B")?),
        ("srr_remote_32B_p99", p99("srr_remote_32B")?, "udp_pingpong_32B_p99", p99("udp_pingpong_32B")?),
        ("srr_remote_32B_vs_tcp", m("srr_remote_32B")?, "tcp_pingpong_32B", m("tcp_pingpong_32B")?),
        ("srr_remote_32B_vs_zmq", m("srr_remote_32B")?, "zmq_reqrep_32B", m("zmq_reqrep_32B")?),
        ("srr_remote_32B_vs_grpc", m("srr_remote_32B")?, "grpc_unary_32B", m("grpc_unary_32B")?),
        // gRPC beside the node's polling option too (the bar reads the blocking figure).
        ("srr_remote_32B_spin_vs_grpc", m("srr_remote_32B_spin")?, "grpc_unary_32B", m("grpc_unary_32B")?),
        ("srr_remote_over_local", m("srr_remote_32B")?, "srr_local_32B", m("srr_local_32B")?),
        ("srr_local_32B_spin", m("srr_local_32B_spin")?, "condvar_roundtrip", m("condvar_roundtrip")?),
        ("srr_local_32B_spin_p99", p99("srr_local_32B_spin")?, "condvar_roundtrip_p99", p99("condvar_roundtrip")?),
        ("srr_remote_32B_spin", m("srr_remote_32B_spin")?, "udp_busypoll_32B", m("udp_busypoll_32B")?),
        ("srr_remote_32B_spin_p99", p99("srr_remote_32B_spin")?, "udp_busypoll_32B_p99", p99("udp_busypoll_32B")?),
        ("srr_remote_32B_spin_vs_blocking", m("srr_remote_32B_spin")?, "srr_remote_32B", m("srr_remote_32B")?),
        ("srr_local_32B_spin_vs_blocking", m("srr_local_32B_spin")?, "srr_local_32B", m("srr_local_32B")?),
        // Server on the other CPU: each wake-up there is the VM's, for both.
        (
            "srr_remote_32B_across",
            m("srr_remote_32B_across")?,
            "udp_pingpong_32B_across",
            m("udp_pingpong_32B_across")?,
        ),
    ];
    for (name, v, base, bv) in rows {
        ctx.rec(name, v, "us", base, bv);
    }
    let udp = m("udp_pingpong_32B")?;
    for b in ["udp_busypoll_32B", "tcp_pingpong_32B", "condvar_roundtrip", "zmq_reqrep_32B", "grpc_unary_32B"] {
        let v = m(b)?;
        ctx.rec(b, v, "us", "udp_pingpong_32B", udp);
    }
    for p in &probes {
        ctx.out.cdf(&p.name, p.rounds.all_sorted());
    }
    drop(probes);

    let k = if ctx.quick { 20 } else { 1000 };
    let pk = packets_per(&rem.node, k, || timed(&rem.client, srv.pid, echo(), None).map(drop))?;
    ctx.rec("packets_per_exchange_remote", pk, "packets", "udp_pingpong_packets", 2.0);
    let pk = packets_per(&rem_s.node, k, || timed(&rem_s.client, srv_s.pid, echo(), None).map(drop))?;
    ctx.rec("packets_per_exchange_remote_spin", pk, "packets", "udp_pingpong_packets", 2.0);
    if ub.retries + us.retries + ux.retries > 0 {
        ctx.out.note(format!("exchange: {} UDP ping(s) lost and sent again", ub.retries + us.retries + ux.retries));
    }
    drop((srv.peer, srv_s.peer, srv_x.peer));
    Ok(())
}

/// How long items `ipc/idle` and `rmem/idle` leave the network idle before
/// each timed operation: longer than the runtime's GRACE (2 ms), after
/// which the node's background thread holds the socket and a process must
/// take it back (the sleep is not timed).
pub const IDLE_GAP: Duration = Duration::from_millis(3);

/// Item `idle`: the remote exchange after the network has been idle for
/// [`IDLE_GAP`], against the UDP ping-pong after the same gap, and against
/// itself back to back (what intermittent request/response traffic pays).
fn idle(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 300, 20);
    let cpus = placement(ctx, "idle");
    let _home = crate::cpus::Pinned::to(cpus.home);
    let udp = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let srv = spawn_server(ctx, None)?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let mut ub = UdpClient::new(udp.parsed("addr")?, false)?;
    let echo = || request(vserver::OP_ECHO, 0, 0);
    let gap = || std::thread::sleep(IDLE_GAP);
    let mut probes = vec![
        Probe::micros("udp_pingpong_32B_idle", n, || {
            gap();
            ub.round_trip(32, PENALTY_PACKET, 0)
        }),
        Probe::micros("srr_remote_32B_idle", n, || {
            gap();
            timed(&rem.client, srv.pid, echo(), None)
        }),
        Probe::micros("srr_remote_32B", n, || timed(&rem.client, srv.pid, echo(), None)),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    let (idle, udp_idle) = (m("srr_remote_32B_idle")?, m("udp_pingpong_32B_idle")?);
    ctx.rec("srr_remote_32B_idle", idle, "us", "udp_pingpong_32B_idle", udp_idle);
    let (v, b) = (p99("srr_remote_32B_idle")?, p99("udp_pingpong_32B_idle")?);
    ctx.rec("srr_remote_32B_idle_p99", v, "us", "udp_pingpong_32B_idle_p99", b);
    ctx.rec("srr_remote_32B_idle_vs_busy", idle, "us", "srr_remote_32B", m("srr_remote_32B")?);
    drop(srv.peer);
    Ok(())
}

/// Item 3: MoveTo and MoveFrom against TCP bulk transfer.
fn moves(ctx: &mut Ctx<'_>) -> Result<()> {
    let srv = spawn_server(ctx, None)?;
    let tcp = Peer::spawn(&ctx.exe, "tcp-echo", &[])?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let loc = local(ctx, vec![], None)?;
    let tc = RefCell::new(TcpClient::connect(tcp.parsed("addr")?)?);
    let seg = RefCell::new(vec![0u8; 16 << 20]);
    for (size, per_round) in [(1024usize, 400usize), (64 << 10, 100), (1 << 20, 16), (16 << 20, 3)] {
        // Check the data once: MoveTo fills the segment with the server's bytes.
        {
            let mut s = seg.borrow_mut();
            s[..size].fill(0);
            call(
                &rem.client,
                srv.pid,
                &mut request(vserver::OP_MOVE_TO, size, 0),
                Some(SegmentRef::Write(&mut s[..size])),
            )?;
            if s[..size].iter().any(|&b| b != 0x5a) {
                return Err(BenchError::Other(format!("MoveTo of {size} bytes delivered wrong data")));
            }
        }
        let (rounds, n, warm) = ctx.scale(5, per_round, (per_round / 4).max(1));
        let l = label(size);
        let mut probes = vec![
            Probe::new(&format!("tcp_bulk_{l}"), n, || Ok(mbps(size, tc.borrow_mut().bulk(size)?))),
            Probe::new(&format!("moveto_remote_{l}"), n, || {
                let mut s = seg.borrow_mut();
                let msg = request(vserver::OP_MOVE_TO, size, 0);
                Ok(mbps(size, server_time(&rem.client, srv.pid, msg, Some(SegmentRef::Write(&mut s[..size])))?))
            }),
            Probe::new(&format!("movefrom_remote_{l}"), n, || {
                let s = seg.borrow();
                let msg = request(vserver::OP_MOVE_FROM, size, 0);
                Ok(mbps(size, server_time(&rem.client, srv.pid, msg, Some(SegmentRef::Read(&s[..size])))?))
            }),
        ];
        if size == 1024 {
            probes.push(Probe::new("moveto_local_1KB", n, || {
                let mut s = seg.borrow_mut();
                let msg = request(vserver::OP_MOVE_TO, size, 0);
                Ok(mbps(size, server_time(&loc.client, loc.server, msg, Some(SegmentRef::Write(&mut s[..size])))?))
            }));
            probes.push(Probe::new("movefrom_local_1KB", n, || {
                let s = seg.borrow();
                let msg = request(vserver::OP_MOVE_FROM, size, 0);
                Ok(mbps(size, server_time(&loc.client, loc.server, msg, Some(SegmentRef::Read(&s[..size])))?))
            }));
        }
        interleave(&mut probes, rounds, warm)?;
        let tcp_rate = find(&probes, &format!("tcp_bulk_{l}"))?.rounds.median();
        for dir in ["moveto", "movefrom"] {
            let v = find(&probes, &format!("{dir}_remote_{l}"))?.rounds.median();
            ctx.rec(&format!("{dir}_remote_{l}"), v, "MB/s", &format!("tcp_bulk_{l}"), tcp_rate);
            if size == 1024 {
                // Times in µs, as 000 Tables 3-5…3-8 give them (remote against local).
                let local = find(&probes, &format!("{dir}_local_1KB"))?.rounds.median();
                let us = |rate: f64| size as f64 / rate.max(1e-9);
                ctx.rec(&format!("{dir}_remote_1KB_time"), us(v), "us", &format!("{dir}_local_1KB_time"), us(local));
            }
        }
    }
    Ok(())
}

/// Item 4: page read and page write.
fn pages(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 1000, 100);
    let _home = pin_home(ctx, "pages");
    let srv = spawn_server(ctx, None)?;
    let udp = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let loc = local(ctx, vec![], None)?;
    let uc = RefCell::new(UdpClient::new(udp.parsed("addr")?, false)?);
    let page = RefCell::new(vec![0x33u8; 4096]);
    for size in [512usize, 4096] {
        let l = label(size);
        // (name, op, server pid, client, write access?)
        let variants: [(String, u8, Pid, &Process, bool); 6] = [
            (format!("page_read_{l}"), vserver::OP_READ_APPENDED, srv.pid, &rem.client, true),
            (format!("page_read_{l}_thoth"), vserver::OP_READ_MOVE, srv.pid, &rem.client, true),
            (format!("page_write_{l}"), vserver::OP_WRITE_APPENDED, srv.pid, &rem.client, false),
            (format!("page_write_{l}_thoth"), vserver::OP_WRITE_MOVE, srv.pid, &rem.client, false),
            (format!("page_read_{l}_local"), vserver::OP_READ_APPENDED, loc.server, &loc.client, true),
            (format!("page_write_{l}_local"), vserver::OP_WRITE_APPENDED, loc.server, &loc.client, false),
        ];
        let run = |op: u8, to: Pid, p: &Process, write: bool| -> Result<Duration> {
            let mut pg = page.borrow_mut();
            let seg = if write { SegmentRef::Write(&mut pg[..size]) } else { SegmentRef::Read(&pg[..size]) };
            timed(p, to, request(op, size, 0), Some(seg))
        };
        let mut probes = vec![
            Probe::micros(&format!("udp_read_{l}"), n, || uc.borrow_mut().round_trip(32, PENALTY_PACKET, size)),
            Probe::micros(&format!("udp_write_{l}"), n, || uc.borrow_mut().round_trip(size, 65_000, 32)),
        ];
        for (name, op, to, p, write) in variants.iter().cloned() {
            probes.push(Probe::micros(&name, n, move || run(op, to, p, write)));
        }
        interleave(&mut probes, rounds, warm)?;
        let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
        for op in ["read", "write"] {
            let base = format!("udp_{op}_{l}");
            let two = format!("page_{op}_{l}");
            ctx.rec(&two, m(&two)?, "us", &base, m(&base)?);
            let four = format!("{two}_thoth");
            ctx.rec(&four, m(&four)?, "us", &two, m(&two)?);
            let loc_name = format!("{two}_local");
            ctx.rec(&format!("{two}_remote_over_local"), m(&two)?, "us", &loc_name, m(&loc_name)?);
        }
        drop(probes);
        let k = if ctx.quick { 10 } else { 200 };
        for (name, op, to, p, write) in variants.iter().take(4).cloned() {
            let pk = packets_per(&rem.node, k, || run(op, to, p, write).map(drop))?;
            ctx.rec(&format!("{name}_packets"), pk, "packets", "udp_page_packets", 2.0);
        }
    }
    Ok(())
}

/// Item 5: 64 KB read by transfer unit.
fn units(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 60, 10);
    const TOTAL: usize = 64 << 10;
    let srv = spawn_server(ctx, None)?;
    let udp = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let loc = local(ctx, vec![], None)?;
    let mut uc = UdpClient::new(udp.parsed("addr")?, false)?;
    let buf = RefCell::new(vec![0u8; TOTAL]);
    let read = |p: &Process, to: Pid, unit: usize| -> Result<Duration> {
        let mut b = buf.borrow_mut();
        timed(p, to, request(vserver::OP_READ_UNITS, TOTAL, unit), Some(SegmentRef::Write(&mut b[..])))
    };
    let ms = |t: Duration| t.as_secs_f64() * 1e3;
    let mut probes = vec![Probe::new("udp_64KB_one_way", n, || Ok(ms(uc.round_trip(TOTAL, PENALTY_PACKET, 32)?)))];
    let (rc, lc, spid, lpid) = (&rem.client, &loc.client, srv.pid, loc.server);
    for unit in [1usize, 4, 16, 64] {
        let u = unit << 10;
        let read = &read;
        probes.push(Probe::new(&format!("read64k_unit_{unit}KB"), n, move || Ok(ms(read(rc, spid, u)?))));
        probes.push(Probe::new(&format!("read64k_unit_{unit}KB_local"), n, move || Ok(ms(read(lc, lpid, u)?))));
    }
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let base = m("udp_64KB_one_way")?;
    for unit in [1, 4, 16, 64] {
        let name = format!("read64k_unit_{unit}KB");
        ctx.rec(&name, m(&name)?, "ms", "udp_64KB_one_way", base);
        let lname = format!("{name}_local");
        ctx.rec(&format!("{name}_remote_over_local"), m(&name)?, "ms", &lname, m(&lname)?);
    }
    ctx.rec("read64k_unit_1KB_vs_64KB", m("read64k_unit_1KB")?, "ms", "read64k_unit_64KB", m("read64k_unit_64KB")?);
    Ok(())
}

/// Starts `GO` on every client, collects `DONE count=N secs=S`, returns the summed rate.
fn drive(clients: &mut [Peer]) -> Result<f64> {
    for c in clients.iter_mut() {
        c.send_line("GO")?;
    }
    let mut rate = 0.0;
    for c in clients.iter_mut() {
        let line = c.read_line(Duration::from_secs(60))?;
        let f = crate::peer::parse_fields(line.strip_prefix("DONE").unwrap_or(""));
        let count: f64 = f.get("count").and_then(|v| v.parse().ok()).ok_or("saturation client: no count")?;
        let secs: f64 = f.get("secs").and_then(|v| v.parse().ok()).ok_or("saturation client: no secs")?;
        rate += count / secs.max(1e-9);
    }
    Ok(rate)
}

/// Item 6: server saturation.
fn saturation(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, duration_ms) = if ctx.quick { (1, 150) } else { (3, 700) };
    let srv = spawn_server(ctx, None)?;
    let udp = Peer::spawn(&ctx.exe, "udp-echo", &[])?;
    let udp_addr: SocketAddr = udp.parsed("addr")?;
    let mut points = Vec::new();
    for clients in [1usize, 2, 4, 8] {
        let mut vipc_clients = Vec::new();
        let mut udp_clients = Vec::new();
        for _ in 0..clients {
            let args = [
                "--host".to_string(),
                ctx.host().to_string(),
                "--server-addr".into(),
                srv.addr.to_string(),
                "--server-pid".into(),
                srv.pid.0.to_string(),
                "--duration-ms".into(),
                duration_ms.to_string(),
            ];
            vipc_clients.push(Peer::spawn(&ctx.exe, "vipc-client", &args)?);
            let args = ["--addr".to_string(), udp_addr.to_string(), "--duration-ms".into(), duration_ms.to_string()];
            udp_clients.push(Peer::spawn(&ctx.exe, "udp-client", &args)?);
        }
        let (mut v, mut u) = (crate::stats::Rounds::new(), crate::stats::Rounds::new());
        for _ in 0..rounds {
            u.push(vec![drive(&mut udp_clients)?]);
            v.push(vec![drive(&mut vipc_clients)?]);
        }
        points.push((clients, v.median(), u.median()));
    }
    for (clients, v, u) in points {
        ctx.rec(&format!("saturation_{clients}_clients"), v, "exchanges/s", &format!("udp_echo_{clients}_clients"), u);
    }
    Ok(())
}

/// Resident set size of an OS process, in bytes (Linux /proc).
pub fn rss_bytes(os_pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{os_pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| BenchError::Other(format!("no VmRSS in /proc/{os_pid}/status")))
}

/// The bars' memory figure: a server node holding many concurrent remote exchanges.
fn memory(ctx: &mut Ctx<'_>) -> Result<()> {
    let held = if ctx.quick { 100 } else { 1000 };
    let srv = spawn_server(ctx, None)?;
    // The held clients retransmit their Sends every T_r until the server's
    // replyPending; a longer T_r and T_t keep 1,000 of them from flooding
    // the machine and timing out while the server holds them.
    let mut cfg = node_config(ctx.host(), vec![srv.addr], None);
    cfg.engine.retransmit = Duration::from_millis(200);
    cfg.engine.timeout = Duration::from_secs(30);
    let node = Node::start(cfg)?;
    let cl = Local { client: node.attach()?, server: srv.pid, node };
    call(&cl.client, srv.pid, &mut request(vserver::OP_ECHO, 0, 0), None)?;
    std::thread::sleep(Duration::from_millis(100));
    let idle = rss_bytes(srv.peer.os_pid())?;
    let mut threads = Vec::with_capacity(held);
    for _ in 0..held {
        let node = cl.node.clone();
        let to = srv.pid;
        threads.push(std::thread::Builder::new().stack_size(128 << 10).spawn(move || -> Result<()> {
            let p = node.attach()?;
            call(&p, to, &mut request(vserver::OP_HOLD, 0, 0), None)
                .map_err(|e| BenchError::Other(format!("memory: held exchange: {e}")))
        })?);
    }
    // Wait until the server holds them all (its kernel server reports the gauge).
    let deadline = Instant::now() + Duration::from_secs(60);
    let host = srv.pid.host();
    let mut aliens = 0;
    while aliens < held as u64 {
        if Instant::now() > deadline {
            return Err(BenchError::Other(format!("memory: the server holds {aliens} of {held} exchanges after 60 s")));
        }
        std::thread::sleep(Duration::from_millis(50));
        let stats = vipc::services::query_stats(&cl.client, host)
            .map_err(|e| BenchError::Other(format!("memory: reading the server's counters: {e}")))?;
        aliens = stats.iter().find(|(k, _)| k == "active_aliens").map_or(0, |(_, v)| *v);
    }
    let loaded = rss_bytes(srv.peer.os_pid())?;
    // Release them from another node (default T_t); the figure is taken either way.
    let releaser = local(ctx, vec![srv.addr], None)?;
    let released = call(&releaser.client, srv.pid, &mut request(vserver::OP_RELEASE, 0, 0), None);
    if let Err(e) = &released {
        ctx.out.note(format!("memory: releasing the {held} held exchanges failed: {e}"));
    }
    if released.is_ok() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while threads.iter().any(|t| !t.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let waiting = threads.iter().filter(|t| !t.is_finished()).count();
        if waiting > 0 {
            ctx.out.note(format!("memory: {waiting} of {held} held clients had no reply 10 s after the release"));
        }
    }
    cl.node.shutdown();
    let mut failed = 0;
    for t in threads {
        if t.join().map_err(|_| "memory: a client thread panicked")?.is_err() {
            failed += 1;
        }
    }
    if released.is_ok() && failed > 0 {
        ctx.out.note(format!("memory: {failed} of {held} held exchanges failed"));
    }
    let mb = |b: u64| b as f64 / 1e6;
    ctx.rec(&format!("server_rss_{held}_held"), mb(loaded), "MB", "server_rss_idle", mb(idle));
    let per = loaded.saturating_sub(idle) as f64 / held as f64;
    ctx.out.note(format!(
        "memory: {held} concurrent remote exchanges held by one server: resident {:.1} MB (idle {:.1} MB), about {per:.0} bytes each",
        mb(loaded),
        mb(idle)
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(label(64), "64B");
        assert_eq!(label(1024), "1KB");
        assert_eq!(label(65536), "64KB");
        assert_eq!(label(1 << 20), "1MiB");
        assert_eq!(label(16 << 20), "16MiB");
        assert_eq!(label(1500), "1500B");
    }

    #[test]
    fn rss_of_this_process() {
        let r = rss_bytes(std::process::id()).unwrap();
        assert!(r > 100_000, "{r}");
    }
}
