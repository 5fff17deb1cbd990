//! Items `block_transfer` and `rapid` of suite `rmem`: the reliability
//! layers of 003 ch. 5 (crate `vipc-rmem-layers`), each against what V
//! offers for the same job, measured in the same run with the peer in
//! another OS process:
//!
//! | record | what | baselines |
//! |---|---|---|
//! | `rmem_block_transfer_1MiB` | a 1 MiB block written in N-packet units, bitmask-acknowledged, the sender's default window (`WINDOW` = 8 units in flight: here both units of the block), MB/s | `tcp_bulk_1MiB`, `moveto_remote_1MiB` |
//! | `rapid_rpc_32B` | a RAPID call with 32 B of arguments and 32 B of result, µs | `srr_remote_32B` |

use crate::error::{BenchError, Result};
use crate::ipc::{label, local, mbps, server_time, spawn_server, timed, Ctx};
use crate::peer::{announce, exit_when_stdin_closes, say, stdin_lines, Peer, PeerArgs};
use crate::probe::{find, interleave, Probe};
use crate::rmem::{hex, unhex};
use crate::tcp::TcpClient;
use crate::vserver::{self, node_config, request};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use vipc::{Node, SegmentRef};
use vipc_rmem_layers::block::{BlockParams, BlockReceiver, BlockSender};
use vipc_rmem_layers::rapid::{RapidClient, RapidParams, RapidServer};

/// The block of item `block_transfer`.
const BLOCK: usize = 1 << 20;
/// Its packets: 32 KiB (one loopback datagram each), in units of 16 (003's N):
/// 32 packets, 2 acknowledgement units, both in flight at once under the
/// sender's default window.
const PACKET: usize = 32 << 10;
const UNIT: usize = 16;
/// Arguments and result of item `rapid` (the 32-byte V message's size).
const RPC_BYTES: usize = 32;
/// How long one operation may take before the item fails.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

/// FNV-1a of a block: what the receiver peer reports of the last block it took.
fn digest(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

/// The receiver peer (`block-receiver --host H`): a node with a
/// [`BlockReceiver`] taking blocks on a thread; READY `addr=` `name=`. On a
/// stdin line `LAST` it answers `LAST blocks=N digest=D` (of the last block).
pub fn receiver_peer(a: &PeerArgs) -> Result<()> {
    let node = Node::start(node_config(a.get("host")?, Vec::new(), None))?;
    let params = BlockParams { packet: PACKET, unit: UNIT, max_block: BLOCK };
    let mut rx = BlockReceiver::export(&node, params).map_err(|e| BenchError::Other(e.to_string()))?;
    announce(&[("addr", node.local_addr().to_string()), ("name", hex(&rx.name()))]);
    // The last block is kept, its digest computed only when asked: hashing
    // each block as it comes would take the CPU the next transfer needs.
    let last = Arc::new(Mutex::new((0u64, Vec::new())));
    let l = last.clone();
    std::thread::spawn(move || loop {
        match rx.recv(Duration::from_secs(1)) {
            Ok(b) => *l.lock().unwrap_or_else(|e| e.into_inner()) = (rx.blocks_received(), b),
            Err(vipc_rmem_layers::Error::Timeout) => {}
            Err(e) => {
                eprintln!("block-receiver: {e}");
                return;
            }
        }
    });
    for line in stdin_lines() {
        if line == "LAST" {
            let (n, d) = {
                let g = last.lock().unwrap_or_else(|e| e.into_inner());
                (g.0, digest(&g.1))
            };
            say(&format!("LAST blocks={n} digest={d}"));
        }
    }
    Ok(())
}

/// The server peer (`rapid-server --host H`): a node with a [`RapidServer`]
/// whose procedure 1 returns its arguments; READY `addr=` `name=`.
pub fn rapid_peer(a: &PeerArgs) -> Result<()> {
    let node = Node::start(node_config(a.get("host")?, Vec::new(), None))?;
    let mut server = RapidServer::export(&node, RapidParams { slots: 4, max_args: 1024, max_result: 1024 })
        .map_err(|e| BenchError::Other(e.to_string()))?;
    announce(&[("addr", node.local_addr().to_string()), ("name", hex(&server.name()))]);
    exit_when_stdin_closes();
    loop {
        let r = server.serve_for(Duration::from_secs(1), |proc, args| match proc {
            1 => Ok(args.to_vec()),
            _ => Err(1),
        });
        if let Err(e) = r {
            return Err(BenchError::Other(format!("rapid-server: {e}")));
        }
    }
}

fn layer_err(e: vipc_rmem_layers::Error) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Item `block_transfer`: 1 MiB through the block layer against TCP bulk
/// and a remote MoveTo of the same size (the server's time of the move, as
/// item `ipc/moves` measures it), MB/s.
pub fn block_transfer(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 20, 3);
    let host = ctx.host().to_string();
    let mut peer = Peer::spawn(&ctx.exe, "block-receiver", &["--host".to_string(), host])?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let tx = BlockSender::connect(&node, unhex(peer.field("name")?)?, OP_TIMEOUT).map_err(layer_err)?;
    let srv = spawn_server(ctx, None)?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let tcp = Peer::spawn(&ctx.exe, "tcp-echo", &[])?;
    let tc = RefCell::new(TcpClient::connect(tcp.parsed("addr")?)?);
    let data: Vec<u8> = (0..BLOCK).map(|i| (i * 31 % 251) as u8).collect();
    let seg = RefCell::new(vec![0u8; BLOCK]);
    let txc = RefCell::new(tx);
    let l = label(BLOCK);
    let (v, tcp_name, mv) = (format!("rmem_block_transfer_{l}"), format!("tcp_bulk_{l}"), format!("moveto_remote_{l}"));
    let mut probes = vec![
        Probe::new(&tcp_name, n, || Ok(mbps(BLOCK, tc.borrow_mut().bulk(BLOCK)?))),
        Probe::new(&mv, n, || {
            let msg = request(vserver::OP_MOVE_TO, BLOCK, 0);
            Ok(mbps(BLOCK, server_time(&rem.client, srv.pid, msg, Some(SegmentRef::Write(&mut seg.borrow_mut())))?))
        }),
        Probe::new(&v, n, || {
            let t = std::time::Instant::now();
            txc.borrow_mut().send(&data, OP_TIMEOUT).map_err(layer_err)?;
            Ok(mbps(BLOCK, t.elapsed()))
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let (value, tcp_rate, move_rate) = (
        find(&probes, &v)?.rounds.median(),
        find(&probes, &tcp_name)?.rounds.median(),
        find(&probes, &mv)?.rounds.median(),
    );
    drop(probes);
    let tx = txc.into_inner();
    // The receiver took every block, and the last one is the data sent (it
    // may still be returning the last block when the sender's send returns).
    let want = format!("LAST blocks={} digest={}", tx.stats().blocks, digest(&data));
    let mut got = String::new();
    for _ in 0..100 {
        peer.send_line("LAST")?;
        got = peer.read_line(OP_TIMEOUT)?;
        if got == want {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if got != want {
        return Err(BenchError::Other(format!("rmem/block_transfer: the receiver says {got:?}, expected {want:?}")));
    }
    ctx.rec(&v, value, "MB/s", &tcp_name, tcp_rate);
    ctx.rec(&format!("{v}_vs_moveto"), value, "MB/s", &mv, move_rate);
    let s = tx.stats();
    ctx.out.note(format!(
        "rmem/block_transfer: {} blocks of {PACKET}-byte packets in units of {UNIT}, {} in flight: {} packets, {} sent again, {} bitmasks, {} status reads",
        s.blocks, tx.window(), s.packets, s.retransmitted, s.acks, s.probes
    ));
    Ok(())
}

/// Item `rapid`: a RAPID call of 32 B each way against a remote
/// Send–Receive–Reply of a 32-byte message, µs (003 Table 5.1 put RAPID
/// beside FRPC, an RPC on a conventional transport).
pub fn rapid(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(9, 2000, 300);
    let host = ctx.host().to_string();
    let peer = Peer::spawn(&ctx.exe, "rapid-server", &["--host".to_string(), host])?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let client = RapidClient::bind(&node, unhex(peer.field("name")?)?, OP_TIMEOUT).map_err(layer_err)?;
    let srv = spawn_server(ctx, None)?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let args = [0x5au8; RPC_BYTES];
    let c = RefCell::new(client);
    let mut probes = vec![
        Probe::micros("srr_remote_32B", n, || timed(&rem.client, srv.pid, request(vserver::OP_ECHO, 0, 0), None)),
        Probe::micros("rapid_rpc_32B", n, || {
            let t = std::time::Instant::now();
            let r = c.borrow_mut().call(1, &args, OP_TIMEOUT).map_err(layer_err)?;
            if r != args {
                return Err(BenchError::Other("rmem/rapid: a call returned other bytes".into()));
            }
            Ok(t.elapsed())
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    ctx.rec("rapid_rpc_32B", m("rapid_rpc_32B")?, "us", "srr_remote_32B", m("srr_remote_32B")?);
    ctx.rec("rapid_rpc_32B_p99", p99("rapid_rpc_32B")?, "us", "srr_remote_32B_p99", p99("srr_remote_32B")?);
    let s = c.borrow().stats();
    if s.retransmitted > 0 {
        ctx.out.note(format!("rmem/rapid: {} of {} calls written again", s.retransmitted, s.calls));
    }
    Ok(())
}
