//! Suite `rmem`: the remote-memory operations of 003 between two nodes in
//! separate OS processes on loopback, each beside its baseline from the same
//! run — a remote read of N bytes against a raw UDP exchange of a 32-byte
//! request and an N-byte answer, CAS-II against the 32-byte UDP ping-pong
//! (both between the same two processes: the owner's answers the UDP too),
//! the cost of issuing a write against a raw `send_to` of the same size, and
//! a block read against TCP bulk transfer.
//!
//! | item | what |
//! |---|---|
//! | `latency` | read 8 B – 64 KB and CAS-II, medians and p99, against UDP (a read answered in one datagram also against that datagram sent raw, header included); a ping-pong of notified writes (a write with notify wakes the owner's thread, which writes back with notify) against the UDP ping-pong |
//! | `idle` | an 8-byte read after 3 ms without traffic, median and p99, against the UDP exchange after the same gap |
//! | `write` | time to issue a write (no round trip) against a UDP `send_to`, with an untimed read every 256 writes so the queue drains (the network keeps up) |
//! | `block` | 1 MiB read into an anonymous segment, and 1 MiB written then confirmed by a read of its last word, against TCP bulk, MB/s |
//! | `block_transfer` | 1 MiB through the block layer of 003 §5.3.1 against TCP bulk and MoveTo, MB/s ([`crate::layers`]) |
//! | `rapid` | a RAPID call, 32 B each way, against remote Send–Receive–Reply, µs ([`crate::layers`]) |
//! | `names` | the name service of 003 §7.3: export, lookup local / cached / pulled / by notification, delete, against one remote read and remote Send–Receive–Reply, µs ([`crate::names`]) |
//! | `file_styles` | file reads in the transfer styles of 003 §7.4 against a Send–Receive–Reply read, and the server's CPU per transfer ([`crate::filestyles`]) |
//! | `ising` | an Ising sweep (003 §6.3.1) on 2 and 4 nodes against 1, the workers as threads of this process and as separate processes, µs ([`crate::apps`], [`crate::apps_procs`]) |
//! | `chandy_misra` | a vector through the simulated 32-bit adder (003 §6.3.2) on 2 and 4 nodes against 1, µs ([`crate::apps`]) |

use crate::error::{BenchError, Result};
use crate::ipc::{label, Ctx, PENALTY_PACKET};
use crate::peer::{announce, stdin_lines, Peer, PeerArgs};
use crate::probe::{find, interleave, Probe};
use crate::tcp::TcpClient;
use crate::udp::UdpClient;
use crate::vserver::node_config;
use std::cell::RefCell;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions};

/// The items of the suite, in the order they run.
pub const ITEMS: &[&str] =
    &["latency", "idle", "write", "block", "block_transfer", "rapid", "names", "file_styles", "ising", "chandy_misra"];

/// Size of the exported segment and of the reader's anonymous one.
const SEGMENT: usize = 2 << 20;
/// Read sizes of item `latency`: each answer fits one datagram.
const READ_SIZES: [usize; 6] = [8, 64, 1024, 8192, 32768, 65536];
/// Write sizes of item `write`.
const WRITE_SIZES: [usize; 3] = [8, 1024, 8192];
/// How long one operation may take before the item fails.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The suite name of its records.
pub const SUITE: &str = "rmem";

/// Runs one item of the suite.
pub fn run_item(ctx: &mut Ctx<'_>, item: &str) -> Result<()> {
    match item {
        "latency" => latency(ctx),
        "idle" => idle(ctx),
        "write" => write(ctx),
        "block" => block(ctx),
        "block_transfer" => crate::layers::block_transfer(ctx),
        "rapid" => crate::layers::rapid(ctx),
        "names" => crate::names::names(ctx),
        "file_styles" => crate::filestyles::file_styles(ctx),
        "ising" => crate::apps::ising(ctx),
        "chandy_misra" => crate::apps::chandy_misra(ctx),
        other => Err(BenchError::Other(format!("unknown item rmem/{other} (items: {})", ITEMS.join(", ")))),
    }
}

/// The owner peer (`rmem-owner --host H [--listen ADDR]`; on ADDR with the
/// default packet size, for a real link): a node exporting a segment of
/// `SEGMENT` bytes that any host may read and write (no notification), and
/// a thread answering the raw UDP baselines, so that they run between the
/// same two processes as the operations; READY `addr=` `name=` (hex)
/// `pong=` (hex) `udp=`. No thread of it touches the segment again: every
/// operation is served by its node. Runs until stdin closes.
pub fn owner_peer(a: &PeerArgs) -> Result<()> {
    let config = match a.opt("listen")? {
        Some(listen) => crate::link::link_config(a.get("host")?, listen, Vec::new()),
        None => node_config(a.get("host")?, Vec::new(), None),
    };
    let node = Node::start(config)?;
    let opts = SegmentOptions { access: Access::READ_WRITE, notify: Notify::Never, protection: ProtectionGroup::Any };
    let seg = node.export_segment(SEGMENT, opts.clone())?;
    seg.write(0, &vec![0x5a; SEGMENT])?;
    let pong = node.export_segment(PONG, SegmentOptions { notify: Notify::Conditional, ..opts })?;
    let udp = crate::udp::echo_socket(false)?;
    let udp_addr = udp.local_addr()?.to_string();
    std::thread::Builder::new().name("udp-echo".into()).spawn(move || {
        if let Err(e) = crate::udp::echo(&udp, false) {
            eprintln!("rmem-owner: udp echo: {e}");
        }
    })?;
    let fields = [("name", hex(&seg.name())), ("pong", hex(&pong.name())), ("udp", udp_addr)];
    announce(&[&[("addr", node.local_addr().to_string())], &fields[..]].concat());
    let n = node.clone();
    std::thread::spawn(move || {
        if let Err(e) = answer_pings(&n, &pong) {
            eprintln!("rmem-owner: {e}");
        }
    });
    stdin_lines().wait_for_close()
}

/// The pong segment: the pinger's segment name (16 bytes), then the ping word.
const PONG: usize = 24;

/// The owner's thread of the notified ping-pong: each notified write of
/// the ping word is written back, with notify, into the pinger's segment
/// (named in the pong segment's first 16 bytes).
fn answer_pings(node: &Node, pong: &vipc::ExportedSegment) -> Result<()> {
    let mut back: Option<(SegmentName, RemoteSegment)> = None;
    loop {
        if !pong.wait_record(Duration::from_secs(1))? {
            continue;
        }
        while let Some(rec) = pong.poll_control()? {
            if rec.offset != 16 {
                continue;
            }
            let all = pong.to_vec(0, PONG)?;
            let name: SegmentName = all[..16].try_into().map_err(|_| BenchError::Other("pong layout".into()))?;
            if back.as_ref().is_none_or(|(n, _)| *n != name) {
                back = Some((name, node.import_segment(name, Access::WRITE, OP_TIMEOUT)?));
            }
            if let Some((_, seg)) = &back {
                seg.write(0, &all[16..24], true)?;
            }
        }
    }
}

pub(crate) fn hex(name: &SegmentName) -> String {
    name.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Result<SegmentName> {
    let bad = || BenchError::Other(format!("bench: bad segment name {s:?}"));
    if s.len() != 32 {
        return Err(bad());
    }
    let mut name = [0u8; 16];
    for (i, b) in name.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(name)
}

/// A reader node of ours with the owner's segment imported and an anonymous segment for answers.
struct Reader {
    _owner: Peer,
    owner_addr: SocketAddr,
    /// The owner process's raw UDP echo.
    owner_udp: SocketAddr,
    node: Node,
    remote: RemoteSegment,
    anon: AnonSegment,
    /// The owner's pong segment (item `latency`'s notified ping-pong).
    pong: SegmentName,
}

fn reader(ctx: &mut Ctx<'_>) -> Result<Reader> {
    let host = ctx.host();
    let owner = Peer::spawn(&ctx.exe, "rmem-owner", &["--host".to_string(), host.to_string()])?;
    let owner_addr: SocketAddr = owner.parsed("addr")?;
    let owner_udp: SocketAddr = owner.parsed("udp")?;
    let name = unhex(owner.field("name")?)?;
    let node = Node::start(node_config(ctx.host(), vec![owner_addr], None))?;
    let remote = node.import_segment(name, Access::READ_WRITE, OP_TIMEOUT)?;
    let anon = node.anonymous_segment(SEGMENT)?;
    let pong = unhex(owner.field("pong")?)?;
    Ok(Reader { _owner: owner, owner_addr, owner_udp, node, remote, anon, pong })
}

/// The pinger's side of the notified ping-pong.
struct Pinger {
    pong: RemoteSegment,
    ping: vipc::ExportedSegment,
    seq: u64,
}

impl Pinger {
    fn new(r: &Reader) -> Result<Pinger> {
        let opts =
            SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection: ProtectionGroup::Any };
        let ping = r.node.export_segment(8, opts)?;
        let pong = r.node.import_segment(r.pong, Access::WRITE, OP_TIMEOUT)?;
        pong.write(0, &ping.name(), false)?;
        Ok(Pinger { pong, ping, seq: 0 })
    }

    /// One notified write there, one notified write back.
    fn round_trip(&mut self) -> Result<Duration> {
        self.seq += 1;
        let t = Instant::now();
        self.pong.write(16, &self.seq.to_le_bytes(), true)?;
        loop {
            if !self.ping.wait_record(OP_TIMEOUT)? {
                return Err(BenchError::Other("rmem: a notified ping was not answered".into()));
            }
            while self.ping.poll_control()?.is_some() {}
            let mut word = [0u8; 8];
            self.ping.read(0, &mut word)?;
            if u64::from_le_bytes(word) == self.seq {
                return Ok(t.elapsed());
            }
        }
    }
}

impl Reader {
    fn read(&self, len: usize) -> Result<Duration> {
        let t = Instant::now();
        self.remote.read(0, len as u32, (&self.anon, 0), false)?.wait(OP_TIMEOUT)?;
        Ok(t.elapsed())
    }

    /// `data` written at offset 0 with a fresh stamp in its last 8 bytes,
    /// then a read of those 8 bytes: the owner's node answers it after the
    /// write's datagrams (one path, in order), so it confirms they landed.
    fn write_confirmed(&self, data: &mut [u8]) -> Result<Duration> {
        let at = data.len() - 8;
        let stamp = u64::from_le_bytes(data[at..].try_into().map_err(|_| BenchError::Other("stamp".into()))?) + 1;
        data[at..].copy_from_slice(&stamp.to_le_bytes());
        let t = Instant::now();
        self.remote.write(0, data, false)?;
        self.remote.read(at as u32, 8, (&self.anon, 0), false)?.wait(OP_TIMEOUT)?;
        let took = t.elapsed();
        if self.anon.to_vec(0, 8)? != stamp.to_le_bytes() {
            return Err(BenchError::Other("rmem: a block write did not land whole before the read after it".into()));
        }
        Ok(took)
    }

    /// A CAS-II that fails on purpose (the cell never holds `u32::MAX`):
    /// the same work every time, the answer says what the cell holds.
    fn cas(&self) -> Result<Duration> {
        let t = Instant::now();
        self.remote.cas(0, u32::MAX, 1, 7, (&self.anon, 0))?.wait_cas(OP_TIMEOUT)?;
        Ok(t.elapsed())
    }
}

/// Item `latency`: remote read by size and CAS-II against raw UDP.
fn latency(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 1000, 200);
    let _home = crate::ipc::pin_home(ctx, "rmem/latency");
    let r = reader(ctx)?;
    // The owner process answers the UDP baselines too (the "between the same processes").
    let ub = RefCell::new(UdpClient::new(r.owner_udp, false)?);
    let (r, ub) = (&r, &ub);
    let pinger = RefCell::new(Pinger::new(r)?);
    // The CAS-II's baseline, and again in the notified ping-pong's own table below.
    let udp_pingpong = || Probe::micros("udp_pingpong_32B", n, || ub.borrow_mut().round_trip(32, PENALTY_PACKET, 0));
    let mut probes = vec![udp_pingpong(), Probe::micros("rmem_cas", n, || r.cas())];
    for size in READ_SIZES {
        let l = label(size);
        probes.push(Probe::micros(&format!("udp_answer_{l}"), n, move || ub.borrow_mut().round_trip(32, 65_000, size)));
        probes.push(Probe::micros(&format!("rmem_read_{l}"), n, move || r.read(size)));
        if let Some(wire) = answer_datagram(size) {
            let probe = Probe::micros(&format!("udp_answer_{l}_as_datagram"), n, move || {
                ub.borrow_mut().round_trip(32, 65_000, wire)
            });
            probes.push(probe);
        }
    }
    interleave(&mut probes, rounds, warm)?;
    // The notified ping-pong in a table of its own: a UDP probe right after
    // it in the round ran up to 1.5 × faster than the same probe elsewhere
    // (the host still polling for its frequent wake-ups), which skewed
    // whichever baseline came next.
    let mut notified =
        vec![udp_pingpong(), Probe::micros("rmem_notify_pingpong", n, || pinger.borrow_mut().round_trip())];
    interleave(&mut notified, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    ctx.rec("rmem_cas", m("rmem_cas")?, "us", "udp_pingpong_32B", m("udp_pingpong_32B")?);
    ctx.rec("rmem_cas_p99", p99("rmem_cas")?, "us", "udp_pingpong_32B_p99", p99("udp_pingpong_32B")?);
    // Two notified writes: each wakes a thread that the UDP ping-pong's blocked receive also wakes.
    let mn = |name: &str| -> Result<f64> { Ok(find(&notified, name)?.rounds.median()) };
    ctx.rec("rmem_notify_pingpong", mn("rmem_notify_pingpong")?, "us", "udp_pingpong_32B", mn("udp_pingpong_32B")?);
    for size in READ_SIZES {
        let l = label(size);
        let (v, b) = (format!("rmem_read_{l}"), format!("udp_answer_{l}"));
        ctx.rec(&v, m(&v)?, "us", &b, m(&b)?);
        ctx.rec(&format!("{v}_p99"), p99(&v)?, "us", &format!("{b}_p99"), p99(&b)?);
        if answer_datagram(size).is_some() {
            let d = format!("{b}_as_datagram");
            ctx.rec(&format!("{v}_vs_datagram"), m(&v)?, "us", &d, m(&d)?);
        }
    }
    Ok(())
}

/// Item `idle`: an 8-byte remote read after the network has been idle for
/// [`crate::ipc::IDLE_GAP`], against the UDP exchange with the same answer
/// after the same gap (median and p99: a waiter that lost a race with the
/// node's background thread once slept 2 ms here).
fn idle(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(5, 300, 20);
    let _home = crate::ipc::pin_home(ctx, "rmem/idle");
    let r = reader(ctx)?;
    let ub = RefCell::new(UdpClient::new(r.owner_udp, false)?);
    let (r, ub) = (&r, &ub);
    let gap = || std::thread::sleep(crate::ipc::IDLE_GAP);
    let mut probes = vec![
        Probe::micros("udp_answer_8B_idle", n, move || {
            gap();
            ub.borrow_mut().round_trip(32, 65_000, 8)
        }),
        Probe::micros("rmem_read_8B_idle", n, move || {
            gap();
            r.read(8)
        }),
    ];
    interleave(&mut probes, rounds, warm)?;
    let m = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.median()) };
    let p99 = |name: &str| -> Result<f64> { Ok(find(&probes, name)?.rounds.p99()) };
    ctx.rec("rmem_read_8B_idle", m("rmem_read_8B_idle")?, "us", "udp_answer_8B_idle", m("udp_answer_8B_idle")?);
    let (v, b) = (p99("rmem_read_8B_idle")?, p99("udp_answer_8B_idle")?);
    ctx.rec("rmem_read_8B_idle_p99", v, "us", "udp_answer_8B_idle_p99", b);
    Ok(())
}

/// The UDP payload of the datagram answering a read of `size` bytes, if
/// it is one datagram: the data and vipc's header. Sent raw, it shows what
/// the header's bytes cost the network itself: a 32 KiB answer is 72 bytes
/// over the 32 KiB page fragment the kernel copies a datagram's payload
/// into, and one more fragment costs a raw UDP round trip as much (0.7–0.8
/// µs here, measured with a C ping-pong: 32,768 against 32,808 bytes).
fn answer_datagram(size: usize) -> Option<usize> {
    let wire = size + vipc_wire::HEADER_LEN;
    (wire <= vipc_wire::MAX_DATAGRAM).then_some(wire)
}

/// Item `write`: what a remote write costs the writer — handing the packet
/// to the network, no round trip — against a raw `send_to` of the same size.
fn write(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 2000, 200);
    let r = reader(ctx)?;
    // A raw socket sending to the owner's node: the datagrams are dropped
    // there as malformed, as a baseline of the system call alone.
    let sock = UdpSocket::bind("127.0.0.1:0")?;
    let data = vec![0xa5u8; *WRITE_SIZES.iter().max().unwrap_or(&8)];
    let mut probes = Vec::new();
    for size in WRITE_SIZES {
        let l = label(size);
        let (sock, data, r, to) = (&sock, &data, &r, r.owner_addr);
        probes.push(Probe::micros(&format!("udp_send_{l}"), n, move || {
            let t = Instant::now();
            sock.send_to(&data[..size], to)?;
            Ok(t.elapsed())
        }));
        let issued = std::cell::Cell::new(0usize);
        probes.push(Probe::micros(&format!("rmem_write_issue_{l}"), n, move || {
            // What issuing costs while the network keeps up: every 256
            // writes, an untimed read (answered after them) lets the queue
            // drain, so no write waits for the send-queue limit (8 MiB).
            issued.set(issued.get() + 1);
            if issued.get() % 256 == 0 {
                r.read(8)?;
            }
            let t = Instant::now();
            r.remote.write(0, &data[..size], false)?;
            Ok(t.elapsed())
        }));
    }
    interleave(&mut probes, rounds, warm)?;
    // The writes all arrived (none lost on loopback): a read after them sees the last one.
    r.read(8)?;
    if r.anon.to_vec(0, 8)? != data[..8] {
        ctx.out.note("rmem/write: a read after the writes did not see them (datagrams lost)".into());
    }
    for size in WRITE_SIZES {
        let l = label(size);
        let (v, b) = (format!("rmem_write_issue_{l}"), format!("udp_send_{l}"));
        ctx.rec(&v, find(&probes, &v)?.rounds.median(), "us", &b, find(&probes, &b)?.rounds.median());
    }
    Ok(())
}

/// Item `block`: a 1 MiB remote read (many answer datagrams, no
/// acknowledgements: 003's primitives leave reliability to layers above)
/// against TCP bulk transfer of the same size, MB/s.
fn block(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 20, 3);
    let size = 1 << 20;
    let r = reader(ctx)?;
    let tcp = Peer::spawn(&ctx.exe, "tcp-echo", &[])?;
    let tc = RefCell::new(TcpClient::connect(tcp.parsed("addr")?)?);
    let mbps = |t: Duration| size as f64 / t.as_secs_f64().max(1e-9) / 1e6;
    let l = label(size);
    let data = RefCell::new(vec![0xc3u8; size]);
    let mut probes = vec![
        Probe::new(&format!("tcp_bulk_{l}"), n, || Ok(mbps(tc.borrow_mut().bulk(size)?))),
        Probe::new(&format!("rmem_block_read_{l}"), n, || Ok(mbps(r.read(size)?))),
        Probe::new(&format!("rmem_block_write_{l}"), n, || Ok(mbps(r.write_confirmed(&mut data.borrow_mut())?))),
    ];
    interleave(&mut probes, rounds, warm)?;
    let b = format!("tcp_bulk_{l}");
    for v in [format!("rmem_block_read_{l}"), format!("rmem_block_write_{l}")] {
        ctx.rec(&v, find(&probes, &v)?.rounds.median(), "MB/s", &b, find(&probes, &b)?.rounds.median());
    }
    Ok(())
}

/// The report's section on remote memory: every figure of the suite beside
/// its baseline, as 003 §4.3 put its operations beside the network's own
/// round trip. `None` if the suite did not run.
pub fn report_section(records: &[crate::Record]) -> Option<String> {
    use std::fmt::Write;
    let rows: Vec<&crate::Record> = records.iter().filter(|r| r.suite == SUITE).collect();
    if rows.is_empty() {
        return None;
    }
    let mut s = String::from(
        "\n## Remote memory (003 §4.3, Table 4.2)\n\n\
         Thekkath (003 Table 4.2) measured a remote read at 45 µs, a CAS at 38 µs and a write at \
         30 µs where the raw polled device wrote in about 11 µs — protection and multiplexing added \
         about 19–23 µs — and block throughput at about 70% of the raw device's. Here each figure \
         beside the raw UDP or TCP figure of the same run.\n\n\
         | figure | value | baseline | baseline value | ratio |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {:.2} {} | {} | {:.2} | {:.3} |",
            r.name, r.value, r.unit, r.baseline, r.baseline_value, r.ratio
        );
    }
    Some(s)
}
