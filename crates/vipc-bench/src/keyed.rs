//! Item `ipc/keyed`: what a cluster key costs. The same remote exchange and
//! the same 1 MiB MoveTo and MoveFrom between two nodes without a key and
//! between two keyed nodes (every packet MACed, PROTOCOL §2.1), interleaved
//! in one run; keyed figures against the unkeyed ones, and the keyed moves
//! against TCP bulk as well.

use crate::error::{BenchError, Result};
use crate::ipc::{
    label, local, local_with, mbps, pin_home, server_time, spawn_server, spawn_server_with, timed, Ctx, Local, Server,
};
use crate::peer::Peer;
use crate::probe::{find, interleave, Probe};
use crate::tcp::TcpClient;
use crate::vserver::{self, call, keyed as with_key, node_config, request};
use std::cell::RefCell;
use vipc::SegmentRef;

/// Bytes of the timed moves.
const MOVED: usize = 1 << 20;

/// Runs the item.
pub fn keyed(ctx: &mut Ctx<'_>) -> Result<()> {
    exchanges(ctx)?;
    let Pairs { srv, srv_k, plain, key } = pairs(ctx)?;
    let tcp = Peer::spawn(&ctx.exe, "tcp-echo", &[])?;
    let tc = RefCell::new(TcpClient::connect(tcp.parsed("addr")?)?);
    let seg = RefCell::new(vec![0u8; MOVED]);

    // The keyed path moves the right bytes (it copies through the engine).
    {
        let mut s = seg.borrow_mut();
        s.fill(0);
        call(&key.client, srv_k.pid, &mut request(vserver::OP_MOVE_TO, MOVED, 0), Some(SegmentRef::Write(&mut s)))?;
        if s.iter().any(|&b| b != 0x5a) {
            return Err(BenchError::Other("keyed MoveTo delivered wrong data".into()));
        }
    }

    let l = label(MOVED);
    let (rounds, n, warm) = ctx.scale(5, 16, 4);
    let mover = |p: &vipc::Process, to: vipc::Pid, op: u8| {
        let mut s = seg.borrow_mut();
        let segment = if op == vserver::OP_MOVE_TO { SegmentRef::Write(&mut s[..]) } else { SegmentRef::Read(&s[..]) };
        Ok(mbps(MOVED, server_time(p, to, request(op, MOVED, 0), Some(segment))?))
    };
    let m = |probes: &[Probe<'_>], name: &str| -> Result<f64> { Ok(find(probes, name)?.rounds.median()) };
    let mut moves = vec![
        Probe::new(&format!("tcp_bulk_{l}"), n, || Ok(mbps(MOVED, tc.borrow_mut().bulk(MOVED)?))),
        Probe::new(&format!("moveto_remote_{l}"), n, || mover(&plain.client, srv.pid, vserver::OP_MOVE_TO)),
        Probe::new(&format!("moveto_remote_{l}_keyed"), n, || mover(&key.client, srv_k.pid, vserver::OP_MOVE_TO)),
        Probe::new(&format!("movefrom_remote_{l}"), n, || mover(&plain.client, srv.pid, vserver::OP_MOVE_FROM)),
        Probe::new(&format!("movefrom_remote_{l}_keyed"), n, || mover(&key.client, srv_k.pid, vserver::OP_MOVE_FROM)),
    ];
    interleave(&mut moves, rounds, warm)?;
    let tcp_rate = m(&moves, &format!("tcp_bulk_{l}"))?;
    for dir in ["moveto", "movefrom"] {
        let plain_rate = m(&moves, &format!("{dir}_remote_{l}"))?;
        let keyed_rate = m(&moves, &format!("{dir}_remote_{l}_keyed"))?;
        ctx.rec(&format!("{dir}_remote_{l}_keyed"), keyed_rate, "MB/s", &format!("{dir}_remote_{l}"), plain_rate);
        ctx.rec(&format!("{dir}_remote_{l}_keyed_vs_tcp"), keyed_rate, "MB/s", &format!("tcp_bulk_{l}"), tcp_rate);
    }
    drop(moves);
    drop((srv.peer, srv_k.peer));
    Ok(())
}

/// A bench server and a node of ours talking to it, without a key and with one.
struct Pairs {
    srv: Server,
    srv_k: Server,
    plain: Local,
    key: Local,
}

fn pairs(ctx: &mut Ctx<'_>) -> Result<Pairs> {
    let srv = spawn_server(ctx, None)?;
    let srv_k = spawn_server_with(ctx, None, &["--keyed"])?;
    let plain = local(ctx, vec![srv.addr], None)?;
    let host = ctx.host();
    let key = local_with(with_key(node_config(host, vec![srv_k.addr], None)))?;
    Ok(Pairs { srv, srv_k, plain, key })
}

/// The exchange with and without a key, both ends of each on one CPU as in
/// item `exchange`. Unplaced, a pair whose ends the scheduler put on two
/// CPUs took 45–52 µs against 11–12 on one (each wake-up crossing CPUs is
/// the VM's), and the keyed/unkeyed ratio said where they landed: 0.22–0.26.
fn exchanges(ctx: &mut Ctx<'_>) -> Result<()> {
    let _home = pin_home(ctx, "keyed");
    let Pairs { srv, srv_k, plain, key } = pairs(ctx)?;
    let echo = || request(vserver::OP_ECHO, 0, 0);
    let (rounds, n, warm) = ctx.scale(9, 2000, 300);
    let mut exchanges = vec![
        Probe::micros("srr_remote_32B", n, || timed(&plain.client, srv.pid, echo(), None)),
        Probe::micros("srr_remote_32B_keyed", n, || timed(&key.client, srv_k.pid, echo(), None)),
    ];
    interleave(&mut exchanges, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&exchanges, name)?.rounds.median()) };
    let (plain_us, keyed_us) = (m("srr_remote_32B")?, m("srr_remote_32B_keyed")?);
    ctx.rec("srr_remote_32B_keyed", keyed_us, "us", "srr_remote_32B", plain_us);
    drop(exchanges);
    drop((srv.peer, srv_k.peer));
    Ok(())
}
