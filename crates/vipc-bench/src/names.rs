//! Item `names` of suite `rmem`: the name service of 003 §4.2.6 / §7.3
//! (crate `vipc-rmem-names`), its operations beside one remote read and a
//! remote Send–Receive–Reply from the same run, with the other clerk in
//! another OS process. 003 Table 7.3 gave export 665 µs, lookup 196 µs
//! cached (found locally) and 264 µs uncached (pulled), delete 307 µs,
//! LOOKUP with notification 524 µs (1.98 × the pull), and put the pull's
//! premium (68 µs) beside one remote read (45 µs).
//!
//! | record | what | baseline |
//! |---|---|---|
//! | `names_lookup_remote` | a cold lookup: local miss, then one remote read of the name's bucket at the peer's clerk | `rmem_read_8B` |
//! | `names_lookup_remote_vs_srr` | the same | `srr_remote_32B` (a V name lookup is an exchange) |
//! | `names_lookup_notify` | a lookup by notification: the request written with notify, the peer clerk's serving thread woken, the answer written back | `names_lookup_remote` (003: 524 / 264 µs = 1.98) |
//! | `names_lookup_notify_vs_srr` | the same | `srr_remote_32B` (both are one exchange with a control transfer) |
//! | `names_pull_premium` | remote − local lookup (003: 68 µs) | `rmem_read_8B` (003: 45 µs) |
//! | `names_lookup_local` | a name in the clerk's own table | `names_lookup_remote` |
//! | `names_lookup_cached` | a name pulled before | `names_lookup_remote` |
//! | `names_export` | register a name (one local write) | `names_lookup_local` |
//! | `names_delete` | delete it (lazy: one local write) | `names_lookup_local` |

use crate::error::{BenchError, Result};
use crate::ipc::{local, spawn_server, timed, Ctx};
use crate::peer::{announce, stdin_lines, Peer, PeerArgs};
use crate::probe::{find, interleave, Probe};
use crate::vserver::{self, node_config, request};
use std::cell::Cell;
use std::time::{Duration, Instant};
use vipc::{Access, HostId, Node, SegmentOptions};
use vipc_rmem_names::{well_known_name, Clerk, ClerkParams, Source};

/// The name the peer's clerk holds.
const TARGET: &str = "bench-target";
/// Buckets of both tables: room for every name the export probe registers.
const BUCKETS: u32 = 8192;
/// How long one operation may take before the item fails.
const OP_TIMEOUT: Duration = Duration::from_secs(5);

fn names_err(e: vipc_rmem_names::Error) -> BenchError {
    BenchError::Other(format!("rmem/names: {e}"))
}

/// The clerk peer (`names-clerk --host H`): a node whose clerk registers
/// `TARGET`, bound to a segment it exports; READY `addr=` `host=`. No
/// thread of it runs for a pull (the node serves the reads); its serving
/// thread answers lookups by notification.
pub fn clerk_peer(a: &PeerArgs) -> Result<()> {
    let node = Node::start(node_config(a.get("host")?, Vec::new(), None))?;
    let params = ClerkParams { buckets: BUCKETS, serve: true, ..Default::default() };
    let clerk = Clerk::start(&node, params).map_err(names_err)?;
    let opts = SegmentOptions { access: Access::READ, ..Default::default() };
    let _seg = clerk.export_segment(TARGET, 4096, opts).map_err(names_err)?;
    announce(&[("addr", node.local_addr().to_string()), ("host", node.host_id().to_string())]);
    stdin_lines().wait_for_close()
}

/// Item `names`.
pub fn names(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 1000, 200);
    let host = ctx.host().to_string();
    let peer = Peer::spawn(&ctx.exe, "names-clerk", &["--host".to_string(), host])?;
    let peer_host: HostId = peer.parsed("host")?;
    let node = Node::start(node_config(ctx.host(), vec![peer.parsed("addr")?], None))?;
    let params = ClerkParams { buckets: BUCKETS, peers: vec![peer_host], timeout: OP_TIMEOUT, ..Default::default() };
    let clerk = Clerk::start(&node, params).map_err(names_err)?;
    // The baseline read: 8 bytes of the peer clerk's own table, from the same process.
    let table = node.import_segment(well_known_name(peer_host), Access::READ, OP_TIMEOUT)?;
    let anon = node.anonymous_segment(64)?;
    let srv = spawn_server(ctx, None)?;
    let rem = local(ctx, vec![srv.addr], None)?;
    let me = node.host_id();
    let own = vipc_rmem_names::Binding { segment: [7; 16], host: me, size: 1, access: Access::READ, meta: 0 };
    clerk.register("bench-local", own).map_err(names_err)?;
    clerk.lookup(TARGET, None).map_err(names_err)?; // cached from here on
    let (exported, deleted) = (Cell::new(0usize), Cell::new(0usize));
    let name_of = |i: usize| format!("bench-e{}", i % n);
    let expect = |got: Source, want: Source| -> Result<()> {
        match got == want {
            true => Ok(()),
            false => Err(BenchError::Other(format!("rmem/names: a lookup answered from {got:?}, not {want:?}"))),
        }
    };
    // The source a lookup must answer from says which call makes it.
    let lookup = |name: &str, want: Source| -> Result<Duration> {
        let t = Instant::now();
        let f = match want {
            Source::Remote => clerk.lookup_fresh(name, Some(peer_host)),
            Source::Notified => clerk.lookup_notify(name, peer_host, OP_TIMEOUT),
            Source::Local | Source::Cache => clerk.lookup(name, None),
        };
        let el = t.elapsed();
        expect(f.map_err(names_err)?.source, want)?;
        Ok(el)
    };
    let mut probes = vec![
        Probe::micros("rmem_read_8B", n, || {
            let t = Instant::now();
            table.read(0, 8, (&anon, 0), false)?.wait(OP_TIMEOUT)?;
            Ok(t.elapsed())
        }),
        Probe::micros("srr_remote_32B", n, || timed(&rem.client, srv.pid, request(vserver::OP_ECHO, 0, 0), None)),
        Probe::micros("names_lookup_remote", n, || lookup(TARGET, Source::Remote)),
        Probe::micros("names_lookup_notify", n, || lookup(TARGET, Source::Notified)),
        Probe::micros("names_lookup_local", n, || lookup("bench-local", Source::Local)),
        Probe::micros("names_lookup_cached", n, || lookup(TARGET, Source::Cache)),
        // Export registers names 0..n round after round; delete then deletes them.
        Probe::micros("names_export", n, || {
            let name = name_of(exported.replace(exported.get() + 1));
            let t = Instant::now();
            clerk.register(&name, own).map_err(names_err)?;
            Ok(t.elapsed())
        }),
        Probe::micros("names_delete", n, || {
            let name = name_of(deleted.replace(deleted.get() + 1));
            let t = Instant::now();
            clerk.delete(&name).map_err(names_err)?;
            Ok(t.elapsed())
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let (remote, local_, read) = (m("names_lookup_remote")?, m("names_lookup_local")?, m("rmem_read_8B")?);
    ctx.rec("names_lookup_remote", remote, "us", "rmem_read_8B", read);
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    ctx.rec("names_lookup_remote_p99", p99("names_lookup_remote")?, "us", "rmem_read_8B_p99", p99("rmem_read_8B")?);
    let srr = m("srr_remote_32B")?;
    ctx.rec("names_lookup_remote_vs_srr", remote, "us", "srr_remote_32B", srr);
    let notify = m("names_lookup_notify")?;
    ctx.rec("names_lookup_notify", notify, "us", "names_lookup_remote", remote);
    ctx.rec("names_lookup_notify_vs_srr", notify, "us", "srr_remote_32B", srr);
    ctx.rec("names_pull_premium", remote - local_, "us", "rmem_read_8B", read);
    ctx.rec("names_lookup_local", local_, "us", "names_lookup_remote", remote);
    ctx.rec("names_lookup_cached", m("names_lookup_cached")?, "us", "names_lookup_remote", remote);
    ctx.rec("names_export", m("names_export")?, "us", "names_lookup_local", local_);
    ctx.rec("names_delete", m("names_delete")?, "us", "names_lookup_local", local_);
    let (s, q) = (clerk.stats(), clerk.notify_stats());
    ctx.out.note(format!(
        "rmem/names: {} remote reads ({} sent again), {} table imports, {} requests by notification ({} sent again); 003 Table 7.3: export 665, lookup 196 cached / 264 uncached, delete 307, LOOKUP with notification 524 µs",
        s.reads, s.resent, s.imports, q.requests, q.resent
    ));
    Ok(())
}
