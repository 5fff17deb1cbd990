//! The runtime's own measurements, each beside its baseline measured in the
//! same run (this machine is shared and noisy: compare ratios of medians,
//! never a lone absolute time). Servers run in a child OS process (this
//! program re-executed), so remote figures cross a process boundary.
//!
//! ```text
//! cargo run --release -p vipc --example perf -- [SUITE…] [--iters N]
//! ```
//! Suites: `remote` (32-byte Send–Receive–Reply between processes against
//! raw UDP ping-pong, blocking and busy-poll), `local` (two V processes on one
//! node against a condvar hand-off), `move` (MoveTo / MoveFrom against TCP
//! bulk transfer), `read` (64 KB read by transfer unit), `rss` (resident
//! memory of a server node holding 1,000 remote exchanges). No suite: all.
//! Also `tails`: percentiles and a histogram of the remote exchange beside
//! UDP ping-pong's, alternating in tenths, and the context switches of each
//! of this process's threads (which background wake-ups the tail comes
//! from); run it under `taskset -c 0` with `PERF_CHILD_CPU=0`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use vipc::{Message, Node, NodeConfig, Pid, SegmentRef, SendOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a.starts_with("child-")) {
        return child(&args);
    }
    let mut iters = 20_000usize;
    let mut suites = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--iters" => iters = it.next().and_then(|s| s.parse().ok()).expect("--iters N"),
            s => suites.push(s.to_string()),
        }
    }
    if suites.is_empty() {
        suites = ["remote", "local", "move", "read", "rss"].map(String::from).to_vec();
    }
    for s in &suites {
        match s.as_str() {
            "remote" => remote(iters),
            // Without baselines, for profiling.
            "udp-only" => {
                let mut u = UdpPingPong::new(false);
                let child = u._child.child.id();
                let (v, cpu) = with_cpu(child, || time_each(iters, || u.round_trip()));
                println!("udp median {:.2} µs, cpu {cpu:.2} µs per round trip", median(v));
            }
            "remote-only" | "remote-poll-only" => {
                let (c, _node, me, server) = start_server(s == "remote-poll-only");
                let (v, cpu) = with_cpu(c.child.id(), || {
                    time_each(iters, || {
                        let mut m: Message = [0; 32];
                        me.send(&mut m, server).unwrap();
                    })
                });
                println!("vipc remote median {:.2} µs, cpu {cpu:.2} µs per exchange", median(v));
            }
            "local" => local(iters),
            "tails" => {
                let mut u = UdpPingPong::new(false);
                let (c, _node, me, server) = start_server(false);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                for _ in 0..10 {
                    a.extend(time_each(iters / 10, || u.round_trip()));
                    b.extend(time_each(iters / 10, || {
                        let mut m: Message = [0; 32];
                        me.send(&mut m, server).unwrap();
                    }));
                }
                for line in thread_switches("self").into_iter().chain(thread_switches(&c.child.id().to_string())) {
                    println!("{line}");
                }
                for (name, mut v) in [("udp", a), ("vipc", b)] {
                    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
                    let q = |f: f64| v[((v.len() as f64 * f) as usize).min(v.len() - 1)];
                    println!(
                        "{name}: p50 {:.1} p90 {:.1} p95 {:.1} p98 {:.1} p99 {:.1} p99.5 {:.1} p99.9 {:.1}",
                        q(0.5),
                        q(0.9),
                        q(0.95),
                        q(0.98),
                        q(0.99),
                        q(0.995),
                        q(0.999)
                    );
                    let hist = [15.0, 20.0, 25.0, 30.0, 40.0, 60.0, 100.0, 1e9];
                    let mut prev = 0.0;
                    let counts: Vec<String> = hist
                        .iter()
                        .map(|&h| {
                            let c = v.iter().filter(|&&x| x >= prev && x < h).count();
                            prev = h;
                            format!("<{h}:{c}")
                        })
                        .collect();
                    println!("   {}", counts.join(" "));
                }
            }
            "local-poll-only" => {
                let node = Node::start(node_cfg(1, vec![], true)).unwrap();
                let (server, _t) = node
                    .spawn(|p| loop {
                        let mut m: Message = [0; 32];
                        let Ok(from) = p.receive(&mut m) else { return };
                        let _ = p.reply(&m, from);
                    })
                    .unwrap();
                let me = node.attach().unwrap();
                let v = time_each(iters, || {
                    let mut m: Message = [0; 32];
                    me.send(&mut m, server).unwrap();
                });
                println!("vipc local poll median {:.2} µs", median(v));
            }
            "move" => moves(),
            "read" => read_units(),
            "rss" => rss(iters.min(1000)),
            other => eprintln!("unknown suite {other}"),
        }
    }
}

// ───────────────────────── helpers ─────────────────────────

/// Each thread of process `pid` (or `self`): its name and context switches (voluntary, involuntary).
fn thread_switches(pid: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let st = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let f = |k: &str| {
            st.lines().find(|l| l.starts_with(k)).map(|l| l[k.len()..].trim().to_string()).unwrap_or_default()
        };
        out.push(format!(
            "{} vol {} invol {}",
            f("Name:"),
            f("voluntary_ctxt_switches:"),
            f("nonvoluntary_ctxt_switches:")
        ));
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn p99(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() * 99 / 100]
}

/// Times `n` calls of `f` after `n/10` warm-up calls; microseconds each.
fn time_each(n: usize, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..n / 10 {
        f();
    }
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn row(name: &str, v: &[f64], base_name: &str, base: f64) {
    let m = median(v.to_vec());
    println!(
        "{name:<34} median {m:>9.2} µs  p99 {:>9.2} µs   {base_name:<28} {base:>9.2} µs   ratio {:>5.2}",
        p99(v.to_vec()),
        m / base
    );
}

/// A child process of this program running `args`, and the first line it prints.
struct ChildProc {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl ChildProc {
    fn start(args: &[&str]) -> (ChildProc, String) {
        // PERF_CHILD_CPU=N pins the child to CPU N (run this program under
        // `taskset -c M` to pin it too): both sides on their own core, or on one.
        let exe = std::env::current_exe().unwrap();
        let mut cmd = match std::env::var("PERF_CHILD_CPU") {
            Ok(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu]).arg(exe);
                c
            }
            Err(_) => Command::new(exe),
        };
        let mut child = cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn child");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        (ChildProc { child, out }, line.trim().to_string())
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        line.trim().to_string()
    }

    fn tell(&mut self, s: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{s}").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for ChildProc {
    /// Closes the child's stdin, its cue to exit (so that a profiler running
    /// it sees a normal exit); kills it if it has not within 10 s.
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let give_up = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_cfg(host: u16, peers: Vec<SocketAddr>, poll: bool) -> NodeConfig {
    let mut cfg = NodeConfig::fixed(host, "127.0.0.1:0".parse().unwrap(), peers);
    cfg.kernel_server = std::env::var("PERF_KS").is_ok();
    if poll {
        cfg.poll_spin = Some(Duration::from_micros(200));
    }
    cfg
}

/// Blocks until the parent closes our stdin (or writes to it).
fn wait_parent() -> String {
    let mut s = String::new();
    let _ = std::io::stdin().read_line(&mut s);
    s
}

// ───────────────────────── children ─────────────────────────

fn child(args: &[String]) {
    let poll = args.iter().any(|a| a == "--poll");
    match args[0].as_str() {
        "child-udp-echo" => {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            println!("{}", s.local_addr().unwrap());
            let mut buf = [0u8; 2048];
            loop {
                let (n, from) = recv_polling(&s, &mut buf, poll);
                s.send_to(&buf[..n], from).unwrap();
            }
        }
        "child-tcp-sink" => {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            println!("{}", l.local_addr().unwrap());
            let (mut c, _) = l.accept().unwrap();
            c.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; 16 << 20];
            let mut hdr = [0u8; 8];
            while c.read_exact(&mut hdr).is_ok() {
                let n = u64::from_le_bytes(hdr) as usize;
                c.read_exact(&mut buf[..n]).unwrap();
                c.write_all(&[1]).unwrap();
            }
        }
        "child-vipc-server" => {
            // Replies to every message; with a segment, byte 0 of the message
            // says what to do with it: 1 MoveFrom all of it, 2 MoveTo all of
            // it, 4 MoveTo all of it in units of bytes 4..8 (u32 LE). The
            // moves' duration in ns goes back in bytes 8..16 of the reply.
            let node = Node::start(node_cfg(1, vec![], poll)).unwrap();
            let (pid, _t) = node
                .spawn(|p| {
                    let mut buf = vec![0x5au8; 16 << 20];
                    let mut seg = vec![0u8; 64 << 10];
                    loop {
                        let mut m: Message = [0; 32];
                        let Ok(info) = p.receive_with_segment(&mut m, &mut seg) else { return };
                        let size = info.segment_size as usize;
                        let t = Instant::now();
                        let r = match m[0] {
                            1 => p.move_from(info.from, 0, &mut buf[..size]),
                            2 => p.move_to(info.from, 0, &buf[..size]),
                            4 => {
                                let unit = u32::from_le_bytes(m[4..8].try_into().unwrap()) as usize;
                                let mut r = Ok(());
                                for off in (0..size).step_by(unit.max(1)) {
                                    let n = unit.min(size - off);
                                    r = r.and_then(|()| p.move_to(info.from, off as u32, &buf[off..off + n]));
                                }
                                r
                            }
                            _ => Ok(()),
                        };
                        if let Err(e) = r {
                            eprintln!("server: {e}");
                        }
                        m[8..16].copy_from_slice(&(t.elapsed().as_nanos() as u64).to_le_bytes());
                        let _ = p.reply(&m, info.from);
                    }
                })
                .unwrap();
            println!("{} {}", node.local_addr(), pid.0);
            wait_parent();
        }
        "child-rss-server" => {
            // Receives from N clients without replying, then replies to all:
            // the node holds N aliens (then N cached replies). Prints its
            // resident set size after each phase when the parent asks.
            let n: usize = args[1].parse().unwrap();
            let node = Node::start(node_cfg(1, vec![], false)).unwrap();
            let (pid, t) = node
                .spawn(move |p| {
                    let mut froms = Vec::with_capacity(n);
                    for _ in 0..n {
                        let mut m: Message = [0; 32];
                        froms.push(p.receive(&mut m).unwrap());
                    }
                    println!("received {}", rss_kib());
                    wait_parent();
                    for f in froms {
                        p.reply(&[7; 32], f).unwrap();
                    }
                    println!("replied {}", rss_kib());
                })
                .unwrap();
            println!("{} {} {}", node.local_addr(), pid.0, rss_kib());
            t.join().unwrap();
            // The cost of a process (without its thread): 10,000 of them.
            let before = rss_kib();
            let procs: Vec<_> = (0..10_000).map(|_| node.attach().unwrap()).collect();
            println!("processes {}", rss_kib() - before);
            drop(procs);
            wait_parent();
        }
        other => panic!("unknown child {other}"),
    }
}

/// CPU time (user + system, all threads) of process `pid` so far, in µs.
fn cpu_us(pid: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks * 1e6 / 100.0 // USER_HZ
}

/// Runs `f` (which times some calls) and returns its samples with the CPU
/// time this process and `child` spent per sample.
fn with_cpu(child: u32, f: impl FnOnce() -> Vec<f64>) -> (Vec<f64>, f64) {
    let child = child.to_string();
    let before = cpu_us("self") + cpu_us(&child);
    let v = f();
    let cpu = (cpu_us("self") + cpu_us(&child) - before) / (v.len() + v.len() / 10) as f64;
    (v, cpu)
}

/// Minor page faults of this process so far.
fn minor_faults() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &s[s.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(7).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

// ───────────────────────── suites ─────────────────────────

/// A UDP ping-pong client against an echo child (blocking, or busy-polling:
/// both sides spin on non-blocking receives, for up to 200 µs before blocking).
struct UdpPingPong {
    _child: ChildProc,
    sock: UdpSocket,
    poll: bool,
    buf: [u8; 2048],
}

impl UdpPingPong {
    fn new(poll: bool) -> UdpPingPong {
        let (child, addr) = ChildProc::start(if poll { &["child-udp-echo", "--poll"] } else { &["child-udp-echo"] });
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(&addr).unwrap();
        UdpPingPong { _child: child, sock, poll, buf: [0; 2048] }
    }

    fn round_trip(&mut self) {
        self.sock.send(&[0u8; 32 + 72]).unwrap();
        recv_polling(&self.sock, &mut self.buf, self.poll);
    }
}

/// One datagram; with `poll`, spins on non-blocking receives for up to 200 µs
/// first — yielding the CPU every few rounds after 2 µs, as vipc's
/// `poll_spin` does, so that two spinners sharing a core on this loaded
/// machine still make progress.
fn recv_polling(s: &UdpSocket, buf: &mut [u8], poll: bool) -> (usize, SocketAddr) {
    if poll {
        s.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let mut rounds = 0u32;
        while start.elapsed() < Duration::from_micros(200) {
            match s.recv_from(buf) {
                Ok(x) => {
                    s.set_nonblocking(false).unwrap();
                    return x;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    rounds += 1;
                    if rounds % 8 == 0 && start.elapsed() > Duration::from_micros(2) {
                        std::thread::yield_now();
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        s.set_nonblocking(false).unwrap();
    }
    s.recv_from(buf).unwrap()
}

/// Runs `a` and `b` alternately in blocks (so that both see the same load on
/// this shared machine) and returns the microseconds of each call of each.
fn interleave(total: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Vec<f64>, Vec<f64>) {
    let block = (total / 20).max(50);
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    while va.len() < total {
        va.extend(time_each(block, &mut a));
        vb.extend(time_each(block, &mut b));
    }
    (va, vb)
}

fn start_server(poll: bool) -> (ChildProc, Node, vipc::Process, Pid) {
    let args: &[&str] = if poll { &["child-vipc-server", "--poll"] } else { &["child-vipc-server"] };
    let (c, line) = ChildProc::start(args);
    let mut parts = line.split_whitespace();
    let addr: SocketAddr = parts.next().unwrap().parse().unwrap();
    let server = Pid(parts.next().unwrap().parse().unwrap());
    let node = Node::start(node_cfg(2, vec![addr], poll)).unwrap();
    let me = node.attach().unwrap();
    (c, node, me, server)
}

fn remote(iters: usize) {
    println!("== remote Send–Receive–Reply, 32 B, server in another process");
    for poll in [false, true] {
        let mut udp = UdpPingPong::new(poll);
        let (_c, node, me, server) = start_server(poll);
        let before = node.stats();
        let (vu, v) = interleave(
            iters,
            || udp.round_trip(),
            || {
                let mut m: Message = [0; 32];
                me.send(&mut m, server).unwrap();
            },
        );
        let after = node.stats();
        let pk = |s: &vipc::Stats| s.packets_out.iter().sum::<u64>() + s.packets_in.iter().sum::<u64>();
        let ex = after.remote_exchanges - before.remote_exchanges;
        if poll {
            row("vipc remote (poll_spin)", &v, "udp ping-pong busy-poll", median(vu));
        } else {
            row("vipc remote (blocking)", &v, "udp ping-pong blocking", median(vu));
        }
        println!("   packets per exchange {:.3}", (pk(&after) - pk(&before)) as f64 / ex as f64);
    }
}

/// Two threads handing a counter back and forth through a mutex and two
/// condition variables: the round trip of a thread hand-off.
struct CondvarPingPong {
    shared: Arc<(Mutex<u64>, Condvar, Condvar)>,
    next: u64,
}

impl CondvarPingPong {
    fn new() -> CondvarPingPong {
        let shared = Arc::new((Mutex::new(0u64), Condvar::new(), Condvar::new()));
        let s2 = shared.clone();
        std::thread::spawn(move || {
            let (m, to_server, to_client) = &*s2;
            let mut g = m.lock().unwrap();
            loop {
                while *g % 2 == 0 {
                    g = to_server.wait(g).unwrap();
                }
                *g += 1;
                to_client.notify_one();
            }
        });
        CondvarPingPong { shared, next: 0 }
    }

    fn round_trip(&mut self) {
        let (m, to_server, to_client) = &*self.shared;
        let mut g = m.lock().unwrap();
        *g += 1;
        self.next += 2;
        to_server.notify_one();
        while *g != self.next {
            g = to_client.wait(g).unwrap();
        }
    }
}

fn local(iters: usize) {
    println!("== local Send–Receive–Reply, 32 B, two V processes on one node");
    let mut cv = CondvarPingPong::new();
    for poll in [false, true] {
        let node = Node::start(node_cfg(1, vec![], poll)).unwrap();
        let (server, _t) = node
            .spawn(|p| loop {
                let mut m: Message = [0; 32];
                let Ok(from) = p.receive(&mut m) else { return };
                let _ = p.reply(&m, from);
            })
            .unwrap();
        let me = node.attach().unwrap();
        let (vc, v) = interleave(
            iters,
            || cv.round_trip(),
            || {
                let mut m: Message = [0; 32];
                me.send(&mut m, server).unwrap();
            },
        );
        row(if poll { "vipc local (poll_spin)" } else { "vipc local (blocking)" }, &v, "condvar hand-off", median(vc));
        println!("   local exchanges counted {} (timed {})", node.stats().local_exchanges, v.len());
        node.shutdown();
    }
}

/// TCP bulk transfer to a sink child: `size` bytes, then a 1-byte answer.
struct TcpBulk {
    _child: ChildProc,
    sock: TcpStream,
    buf: Vec<u8>,
}

impl TcpBulk {
    fn new() -> TcpBulk {
        let (child, addr) = ChildProc::start(&["child-tcp-sink"]);
        let sock = TcpStream::connect(&addr).unwrap();
        sock.set_nodelay(true).unwrap();
        TcpBulk { _child: child, sock, buf: vec![0xa5u8; 16 << 20] }
    }

    fn transfer(&mut self, size: usize) {
        let mut one = [0u8; 1];
        self.sock.write_all(&(size as u64).to_le_bytes()).unwrap();
        self.sock.write_all(&self.buf[..size]).unwrap();
        self.sock.read_exact(&mut one).unwrap();
    }
}

fn moves() {
    println!("== MoveTo / MoveFrom between processes (the server moves and times it), TCP bulk interleaved");
    let (_c, node, me, server) = start_server(false);
    let mut tcp = TcpBulk::new();
    for (size, reps) in [(1 << 10, 2000), (64 << 10, 1000), (1 << 20, 200), (16 << 20, 40)] {
        let mut seg = vec![0x11u8; size];
        let (mut vt, mut vf, mut vto, mut ef, mut eto) = (vec![], vec![], vec![], vec![], vec![]);
        let before = node.stats();
        let faults0 = minor_faults();
        for i in 0..reps + reps / 10 {
            let t = Instant::now();
            tcp.transfer(size);
            let tt = t.elapsed().as_secs_f64() * 1e6;
            let mut one = |op: u8| {
                let mut m: Message = [0; 32];
                m[0] = op;
                let t = Instant::now();
                // As `vipc bench` does: read access for MoveFrom, write for MoveTo.
                let s = if op == 1 { SegmentRef::Read(&seg) } else { SegmentRef::Write(&mut seg) };
                me.send_with(&mut m, server, Some(s), SendOptions::default()).unwrap();
                (u64::from_le_bytes(m[8..16].try_into().unwrap()) as f64 / 1e3, t.elapsed().as_secs_f64() * 1e6)
            };
            let (mf, xf) = one(1);
            let (mt, xt) = one(2);
            if i >= reps / 10 {
                vt.push(tt);
                vf.push(mf);
                vto.push(mt);
                ef.push(xf);
                eto.push(xt);
            }
        }
        let after = node.stats();
        let mbps = |v: Vec<f64>| size as f64 / median(v);
        let tcp = mbps(vt);
        for (name, mv, ex) in [("MoveFrom", mbps(vf), mbps(ef)), ("MoveTo", mbps(vto), mbps(eto))] {
            println!(
                "{name:<8} {:>6} KiB: move {mv:>8.1} MB/s  exchange {ex:>8.1} MB/s   tcp {tcp:>8.1} MB/s   ratio move {:.2} exchange {:.2}",
                size >> 10,
                mv / tcp,
                ex / tcp
            );
        }
        println!(
            "   client node: retransmissions {} duplicates {}; client process page faults {}",
            after.retransmissions - before.retransmissions,
            after.duplicates - before.duplicates,
            minor_faults() - faults0
        );
    }
}

fn read_units() {
    println!(
        "== 64 KiB read by transfer unit: the server MoveTos it in units (timed by the server), as vipc bench does"
    );
    let (_c, _node, me, server) = start_server(false);
    let mut seg = vec![0u8; 64 << 10];
    let mut res = Vec::new();
    for unit in [1usize << 10, 4 << 10, 16 << 10, 64 << 10] {
        let mut v = Vec::new();
        for _ in 0..220 {
            let mut m: Message = [0; 32];
            m[0] = 4;
            m[4..8].copy_from_slice(&(unit as u32).to_le_bytes());
            me.send_with(&mut m, server, Some(SegmentRef::Write(&mut seg)), SendOptions::default()).unwrap();
            v.push(u64::from_le_bytes(m[8..16].try_into().unwrap()) as f64 / 1e3);
        }
        let m = median(v[20..].to_vec());
        println!("unit {:>3} KiB: {m:>9.1} µs per 64 KiB", unit >> 10);
        res.push(m);
    }
    println!("1 KiB units / 64 KiB units: {:.2} (bar: at least 3)", res[0] / res[3]);
}

fn rss(n: usize) {
    println!("== resident memory of a server node holding {n} remote exchanges");
    let (mut c, line) = ChildProc::start(&["child-rss-server", &n.to_string()]);
    let mut parts = line.split_whitespace();
    let addr: SocketAddr = parts.next().unwrap().parse().unwrap();
    let server = Pid(parts.next().unwrap().parse().unwrap());
    let idle: u64 = parts.next().unwrap().parse().unwrap();
    let mut cfg = node_cfg(2, vec![addr], false);
    cfg.engine.max_processes = n + 10;
    let node = Node::start(cfg).unwrap();
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let p = node.attach().unwrap();
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let mut m: Message = [1; 32];
                    p.send(&mut m, server).unwrap();
                })
                .unwrap()
        })
        .collect();
    let received: u64 = c.line().trim_start_matches("received ").parse().unwrap();
    c.tell("go");
    let replied: u64 = c.line().trim_start_matches("replied ").parse().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    let procs: u64 = c.line().trim_start_matches("processes ").parse().unwrap();
    println!(
        "server RSS: idle {idle} KiB; holding {n} aliens {received} KiB; {n} cached replies {replied} KiB (bar: 50 MB)"
    );
    println!(
        "   per alien {:.0} B (incl. its cached reply); per process (no thread) {:.0} B",
        (received.max(replied) - idle) as f64 * 1024.0 / n as f64,
        procs as f64 * 1024.0 / 10_000.0
    );
}
