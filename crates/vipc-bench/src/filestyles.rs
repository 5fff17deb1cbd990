//! Item `file_styles` of suite `rmem`: the file-service transfer styles of
//! 003 §7.4 (crate `vipc-rmem-layers`, module `styles`) against a V file
//! server's Send–Receive–Reply read, the server in another OS process:
//!
//! | record | what | baseline |
//! |---|---|---|
//! | `file_read_direct_{S}` | read-only style: one remote read of the server's cache, µs | `file_read_srr_{S}` |
//! | `file_read_hybrid1_{S}` | hybrid-1: notify-write of the parameters, the block written back, the client polls, µs | `file_read_srr_{S}` |
//! | `file_read_hybrid2_{S}` | hybrid-2: the last write back notifies, the client sleeps, µs | `file_read_srr_{S}` |
//! | `server_cpu_direct_8KB` | the server process's CPU per 8 KB read-only transfer, µs | `server_cpu_hybrid1_8KB` |
//! | `server_cpu_srr_8KB` | the same for a Send–Receive–MoveTo–Reply read, µs | `server_cpu_hybrid1_8KB` |
//!
//! `file_read_srr_{S}` is a reply carrying the data for S ≤ 4 KB (2 packets)
//! and MoveTo then Reply above. 003 Fig. 7.3 found pure data transfer put
//! less than half the hybrid's load on the server.

use crate::error::{BenchError, Result};
use crate::ipc::{label, Ctx};
use crate::peer::{announce, say, stdin_lines, Peer, PeerArgs};
use crate::probe::{find, interleave, Probe};
use crate::rmem::{hex, unhex};
use crate::vserver::{self, call, node_config, request, serve};
use std::cell::RefCell;
use std::time::{Duration, Instant};
use vipc::{Node, Pid, SegmentRef};
use vipc_rmem_layers::styles::{CacheClient, CacheParams, CacheServer};

/// The read sizes.
const SIZES: &[usize] = &[1 << 10, 4 << 10, 32 << 10];
/// The cache: one block per size, each as large as the largest read.
const PARAMS: CacheParams = CacheParams { block: 32 << 10, blocks: 4, slots: 1 };
/// The size whose server CPU is measured.
const CPU_SIZE: usize = 8 << 10;
/// Largest read answered with the data in the reply (V's page read).
const APPENDED_MAX: usize = 4 << 10;
const OP_TIMEOUT: Duration = Duration::from_secs(5);

fn layer_err(e: vipc_rmem_layers::Error) -> BenchError {
    BenchError::Other(format!("rmem/file_styles: {e}"))
}

/// This process's CPU time (all threads): what the server pays.
fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The server peer (`file-styles-server --host H`): a node with a block
/// cache served in every style and a V bench server; READY `addr=`
/// `cache=` `requests=` `pid=`. A stdin line `CPU` is answered `CPU ns=N`.
pub fn server_peer(a: &PeerArgs) -> Result<()> {
    let node = Node::start(node_config(a.get("host")?, Vec::new(), None))?;
    let mut server = CacheServer::export(&node, PARAMS).map_err(layer_err)?;
    for b in 0..PARAMS.blocks {
        server.fill(b, &vec![b as u8 + 1; PARAMS.block]).map_err(layer_err)?;
    }
    let (cache, requests) = server.names();
    let (pid, _) = node.spawn(serve)?;
    std::thread::spawn(move || loop {
        if let Err(e) = server.serve_for(Duration::from_secs(1)) {
            eprintln!("file-styles-server: {e}");
            return;
        }
    });
    announce(&[
        ("addr", node.local_addr().to_string()),
        ("cache", hex(&cache)),
        ("requests", hex(&requests)),
        ("pid", pid.0.to_string()),
    ]);
    for line in stdin_lines() {
        if line == "CPU" {
            say(&format!("CPU ns={}", process_cpu().as_nanos()));
        }
    }
    Ok(())
}

/// The server process's CPU time so far.
fn peer_cpu(peer: &mut Peer) -> Result<Duration> {
    peer.send_line("CPU")?;
    let line = peer.read_line(OP_TIMEOUT)?;
    let ns = line.strip_prefix("CPU ns=").and_then(|n| n.parse().ok());
    ns.map(Duration::from_nanos).ok_or_else(|| BenchError::Other(format!("file-styles-server said {line:?}")))
}

/// One Send–Receive–Reply read of `size` bytes into `buf`.
fn srr_read(p: &vipc::Process, server: Pid, size: usize, buf: &mut [u8]) -> Result<()> {
    let op = if size <= APPENDED_MAX { vserver::OP_READ_APPENDED } else { vserver::OP_READ_MOVE };
    call(p, server, &mut request(op, size, 0), Some(SegmentRef::Write(&mut buf[..size])))
}

/// The item: latencies by size, then the server's CPU per transfer.
pub fn file_styles(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 300, 50);
    let host = ctx.host().to_string();
    let mut peer = Peer::spawn(&ctx.exe, "file-styles-server", &["--host".to_string(), host])?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let names = (unhex(peer.field("cache")?)?, unhex(peer.field("requests")?)?);
    let server = Pid(peer.parsed("pid")?);
    let client = RefCell::new(CacheClient::connect(&node, names, PARAMS, 0, OP_TIMEOUT).map_err(layer_err)?);
    let me = node.attach()?;
    let buf = RefCell::new(vec![0u8; PARAMS.block]);
    let expect = |block: usize, got: &[u8]| -> Result<()> {
        match got.iter().all(|&b| b == block as u8 + 1) {
            true => Ok(()),
            false => Err(BenchError::Other(format!("rmem/file_styles: block {block} read back other bytes"))),
        }
    };
    let mut probes = Vec::new();
    for (block, &size) in SIZES.iter().enumerate() {
        let l = label(size);
        let (client, buf, me) = (&client, &buf, &me);
        probes.push(Probe::micros(&format!("file_read_srr_{l}"), n, move || {
            let t = Instant::now();
            srr_read(me, server, size, &mut buf.borrow_mut())?;
            Ok(t.elapsed())
        }));
        probes.push(Probe::micros(&format!("file_read_direct_{l}"), n, move || {
            let t = Instant::now();
            let got = client.borrow().read_direct(block, size, OP_TIMEOUT).map_err(layer_err)?;
            let took = t.elapsed();
            expect(block, &got)?;
            Ok(took)
        }));
        for (style, notify_last) in [("hybrid1", false), ("hybrid2", true)] {
            probes.push(Probe::micros(&format!("file_read_{style}_{l}"), n, move || {
                let t = Instant::now();
                let got = client.borrow_mut().read_hybrid(block, size, notify_last, OP_TIMEOUT).map_err(layer_err)?;
                let took = t.elapsed();
                expect(block, &got)?;
                Ok(took)
            }));
        }
    }
    interleave(&mut probes, rounds, warm)?;
    for &size in SIZES {
        let l = label(size);
        let base = format!("file_read_srr_{l}");
        let b = find(&probes, &base)?.rounds.median();
        for style in ["direct", "hybrid1", "hybrid2"] {
            let name = format!("file_read_{style}_{l}");
            ctx.rec(&name, find(&probes, &name)?.rounds.median(), "us", &base, b);
        }
    }
    drop(probes);
    // Server CPU: each style alone for a batch, the peer's CPU clock read around it.
    let ops = if ctx.quick { 200 } else { 3000 };
    let mut per_op = |op: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let before = peer_cpu(&mut peer)?;
        for _ in 0..ops {
            op()?;
        }
        let after = peer_cpu(&mut peer)?;
        Ok((after - before).as_secs_f64() * 1e6 / ops as f64)
    };
    let c = &client;
    let direct = per_op(&mut || c.borrow().read_direct(0, CPU_SIZE, OP_TIMEOUT).map(drop).map_err(layer_err))?;
    let hybrid =
        per_op(&mut || c.borrow_mut().read_hybrid(0, CPU_SIZE, false, OP_TIMEOUT).map(drop).map_err(layer_err))?;
    let srr = per_op(&mut || srr_read(&me, server, CPU_SIZE, &mut buf.borrow_mut()))?;
    let l = label(CPU_SIZE);
    ctx.rec(&format!("server_cpu_direct_{l}"), direct, "us", &format!("server_cpu_hybrid1_{l}"), hybrid);
    ctx.rec(&format!("server_cpu_srr_{l}"), srr, "us", &format!("server_cpu_hybrid1_{l}"), hybrid);
    let retransmitted = client.borrow().retransmitted;
    if retransmitted > 0 {
        ctx.out.note(format!("rmem/file_styles: {retransmitted} hybrid requests written again"));
    }
    Ok(())
}
