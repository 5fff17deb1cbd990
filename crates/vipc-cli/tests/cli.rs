//! The `vipc` binary as a user runs it: nodes as separate OS processes on
//! loopback, `ping`, `stat`, `keygen`, `demo`, and one-line errors.

mod common;

use common::*;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

/// A running `vipc node`, with what its first line said.
struct NodeProc {
    guard: Guard,
    host: u16,
    addr: SocketAddr,
    /// The echo service's pid, as the node prints it.
    echo: String,
}

/// Starts `vipc node ARGS` and reads host and address from its "listening" line.
fn start_node(args: &[&str]) -> NodeProc {
    let (guard, line) = start(&[&["node"], args].concat(), "vipc node: host ");
    // "vipc node: host 0xHHHH listening on ADDR, echo HHHH.LLLL"
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words.len(), 9, "unexpected first line {line:?}");
    let host = u16::from_str_radix(words[3].trim_start_matches("0x"), 16).unwrap();
    let addr = words[6].trim_end_matches(',').parse().unwrap();
    let echo = words[8].to_string();
    assert!(echo.starts_with(&format!("{host:04x}.")), "{line:?}");
    NodeProc { guard, host, addr, echo }
}

fn free_addrs(n: usize) -> Vec<SocketAddr> {
    let socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    socks.iter().map(|s| s.local_addr().unwrap()).collect()
}

fn packets_per_exchange(out: &str) -> f64 {
    let line = out.lines().find(|l| l.starts_with("packets per exchange: ")).expect("packets line");
    line["packets per exchange: ".len()..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn nodes_as_processes_answer_ping_and_stat_over_multicast() {
    let g = random_group();
    let n1 = start_node(&["--group", &g]);
    let n2 = start_node(&["--group", &g]);
    assert_ne!(n1.host, n2.host, "two nodes allocated distinct hosts");

    let o = run(&["ping", "echo", "-c", "20", "--group", &g]);
    assert!(o.status.success(), "ping failed: {}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("20 exchanges"), "{out}");
    assert!(out.contains("median"), "{out}");
    let ppe = packets_per_exchange(&out);
    assert!((2.0..3.0).contains(&ppe), "packets per exchange {ppe}: {out}");

    // A pid target with a bulk segment: the echo service moves it both ways.
    let o = run(&["ping", &n2.echo, "-c", "3", "--size", "200000", "--group", &g]);
    assert!(o.status.success(), "ping with a segment failed: {}", stderr(&o));
    assert!(stdout(&o).contains("200000-byte segment"), "{}", stdout(&o));

    // stat by host id (decimal and hex) and by name.
    let mut sends_in = Vec::new();
    for target in [n1.host.to_string(), format!("0x{:x}", n2.host), "echo".to_string()] {
        let o = run(&["stat", &target, "--group", &g]);
        assert!(o.status.success(), "stat {target} failed: {}", stderr(&o));
        let out = stdout(&o);
        let fields: Vec<(&str, u64)> = out
            .lines()
            .skip(1)
            .map(|l| {
                let mut w = l.split_whitespace();
                (w.next().unwrap(), w.next().unwrap().parse().unwrap())
            })
            .collect();
        let get = |k: &str| fields.iter().find(|f| f.0 == k).map(|f| f.1);
        assert!(get("packets_in.send").unwrap() >= 1, "{out}");
        assert_eq!(get("mac_failures"), Some(0), "{out}");
        assert!(get("processes").unwrap() >= 2, "kernel server and echo: {out}");
        assert!(fields.len() >= 40, "{out}");
        sends_in.push(get("packets_in.send").unwrap());
    }
    // The 20 pings of `echo` went to one node or the other, the 3 of the pid
    // target to the second: the two nodes took at least 23 Sends together.
    assert!(sends_in[0] + sends_in[1] >= 23, "Sends in by node: {sends_in:?}");
    drop((n1.guard, n2.guard));
}

#[test]
fn static_peers_without_multicast() {
    let addrs = free_addrs(2);
    let (a, b) = (addrs[0].to_string(), addrs[1].to_string());
    let n1 = start_node(&["--listen", &a, "--host-id", "11", "--peer", &b, "--no-multicast"]);
    let n2 = start_node(&["--listen", &b, "--host-id", "0xc", "--peer", &a, "--no-multicast"]);
    assert_eq!((n1.host, n2.host), (11, 12));
    assert_eq!(n1.addr.to_string(), a);
    let o = run(&["ping", "echo", "-c", "10", "--no-multicast", "--peer", &a, "--peer", &b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["stat", "12", "--no-multicast", "--peer", &a, "--peer", &b]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("vipc stat: host 0x000c"), "{}", stdout(&o));

    // Errors: a name nobody registered, a process that does not exist, a second
    // node claiming host 11, a port already in use.
    let o = run(&["ping", "nosuchname", "--no-multicast", "--peer", &a]);
    assert_one_line_error(&o, "no process is registered as \"nosuchname\"");
    // Half the id space from the echo service's local id: a node hands out
    // consecutive ids from a random start, and this one has a few processes.
    let echo: vipc::Pid = n1.echo.parse().unwrap();
    let nobody = vipc::Pid::new(11, ((u32::from(echo.local()) + 0x8000) % 0xFFFE + 2) as u16).to_string();
    let o = run(&["ping", &nobody, "--no-multicast", "--peer", &a]);
    assert_one_line_error(&o, &format!("no process {nobody}"));
    let o = run(&["node", "--host-id", "11", "--peer", &a, "--no-multicast"]);
    assert_one_line_error(&o, &format!("logical host 0x000b is already in use by {a}"));
    let o = run(&["node", "--listen", &a, "--no-multicast"]);
    assert_one_line_error(&o, "address already in use");
    drop((n1.guard, n2.guard));
}

#[test]
fn node_not_running_and_bad_arguments_are_one_line_errors() {
    let dead = free_addrs(1)[0].to_string();
    let t = Instant::now();
    let o = run(&["ping", "0001.0002", "--no-multicast", "--peer", &dead, "--timeout-ms", "300"]);
    assert_one_line_error(&o, "no answer from 0001.0002 (wrong key, or node not running?)");
    assert!(t.elapsed() < Duration::from_secs(10));

    // A listed peer no node answered at is named; one that runs, not.
    let o = run(&["ls", "docs:", "--no-multicast", "--peer", &dead, "--host-id", "9", "--timeout-ms", "300"]);
    assert_one_line_error(&o, &format!("its key differs; no vipc node answered at {dead})"));
    let mnt = tempfile::tempdir().unwrap();
    let spec = format!("{dead}:docs");
    let args =
        ["mount", &spec, mnt.path().to_str().unwrap(), "--host-id", "9", "--no-multicast", "--timeout-ms", "300"];
    assert_one_line_error(&run(&args), &format!("export \"docs\" not found: no vipc node answered at {dead}"));
    let up = free_addrs(1)[0].to_string();
    let _n = start_node(&["--listen", &up, "--host-id", "12", "--no-multicast"]);
    let o = run(&["ls", "docs:", "--no-multicast", "--peer", &up, "--host-id", "13", "--timeout-ms", "300"]);
    assert_one_line_error(
        &o,
        "no file server exports \"docs\" (nobody answered for fs:docs: no node serves it, or its key differs)",
    );
    let o = run(&["ping", "echo", "--listen", "not-an-address"]);
    assert_one_line_error(&o, "invalid address \"not-an-address\"");
    let o = run(&["node", "--peer", "1.2.3.4"]);
    assert_one_line_error(&o, "expected IP:PORT or HOST:PORT");
    let o = run(&["node", "--host-id", "0"]);
    assert_one_line_error(&o, "invalid logical host");
    let o = run(&["stat", "zz.1"]);
    assert_one_line_error(&o, "invalid pid");
    let o = run(&["node", "--listen", "192.0.2.77:7000", "--no-multicast"]);
    assert_one_line_error(&o, "cannot listen on 192.0.2.77:7000");
    let o = run(&["frobnicate"]);
    assert_one_line_error(&o, "frobnicate");
    let o = run(&["node", "--key", "/nonexistent/key"]);
    assert_one_line_error(&o, "cannot read key file /nonexistent/key");
    // Checked before anything is allocated or started.
    let o = run(&["ping", "echo", "-c", "4000000000"]);
    assert_one_line_error(&o, "--count must be 1 to 10000000");
    let o = run(&["ping", "echo", "--size", "100000000000"]);
    assert_one_line_error(&o, "--size must be at most 4294967295 bytes");
}

#[test]
fn keyed_nodes_ignore_a_client_with_the_wrong_key() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = dir.path().join("k1");
    let k2 = dir.path().join("k2");
    let (k1s, k2s) = (k1.to_str().unwrap(), k2.to_str().unwrap());
    assert!(run(&["keygen", k1s]).status.success());
    assert!(run(&["keygen", k2s]).status.success());
    let addr = free_addrs(1)[0].to_string();
    let n = start_node(&["--listen", &addr, "--host-id", "21", "--no-multicast", "--key", k1s]);
    let echo = n.echo.as_str();
    let common = ["--no-multicast", "--peer", &addr, "--host-id", "22", "--timeout-ms", "300"];
    let mut args = vec!["ping", echo, "-c", "5"];
    args.extend(common);
    args.extend(["--key", k1s]);
    let o = run(&args);
    assert!(o.status.success(), "right key: {}", stderr(&o));
    let mut args = vec!["ping", echo, "-c", "5"];
    args.extend(common);
    args.extend(["--key", k2s]);
    let o = run(&args);
    assert_one_line_error(&o, &format!("no answer from {echo} (wrong key, or node not running?)"));
    let mut args = vec!["stat", "21"];
    args.extend(common);
    args.extend(["--key", k1s]);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let mac = stdout(&o).lines().find(|l| l.starts_with("mac_failures")).unwrap().to_string();
    let count: u64 = mac.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(count >= 1, "the keyed node counted the wrong key's packets: {mac}");
    drop(n.guard);
}

#[test]
fn keygen_writes_a_private_key_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("cluster.key");
    let fs = f.to_str().unwrap();
    let o = run(&["keygen", fs]);
    assert!(o.status.success(), "{}", stderr(&o));
    let key = std::fs::read_to_string(&f).unwrap();
    assert_eq!(key.trim().len(), 64);
    assert!(key.trim().chars().all(|c| c.is_ascii_hexdigit()));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let o = run(&["keygen", fs]);
    assert_one_line_error(&o, "already exists");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), key, "not overwritten");
    let o = run(&["keygen", fs, "--force"]);
    assert!(o.status.success());
    assert_ne!(std::fs::read_to_string(&f).unwrap(), key, "a fresh key");
    // A directory is not "already there, --force to overwrite" (--force failed on it).
    let d = dir.path().to_str().unwrap();
    assert_one_line_error(&run(&["keygen", d, "--force"]), &format!("{d} is a directory"));
    // Output that cannot be written is an error, not a success.
    let full = std::fs::File::create("/dev/full").unwrap();
    let o = Command::new(VIPC).args(["keygen", fs, "--force"]).stdout(full).output().unwrap();
    assert_one_line_error(&o, "cannot write to standard output: No space left on device");
    // ... help included.
    let full = std::fs::File::create("/dev/full").unwrap();
    let o = Command::new(VIPC).args(["--help"]).stdout(full).output().unwrap();
    assert_one_line_error(&o, "cannot write to standard output: No space left on device");
}

#[test]
fn config_file_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addrs(1)[0];
    let cfg = dir.path().join("node.toml");
    std::fs::write(
        &cfg,
        format!("listen = \"{addr}\"\nhost_id = 31\nmulticast = false\nretransmit_ms = 10\ntimeout_ms = 500\nmin_stream_kib = 64\n"),
    )
    .unwrap();
    let mut n = start_node(&["--config", cfg.to_str().unwrap()]);
    assert_eq!((n.host, n.addr), (31, addr));
    let a = addr.to_string();
    let o = run(&["ping", "001f.0001", "-c", "3", "--no-multicast", "--peer", &a]);
    assert!(o.status.success(), "{}", stderr(&o));
    // SIGTERM stops the node cleanly.
    let pid = n.guard.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let t = Instant::now();
    loop {
        if let Some(st) = n.guard.0.try_wait().unwrap() {
            assert!(st.success(), "exit status {st}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "node still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    // A bad config file is a one-line error.
    std::fs::write(&cfg, "listen = 5\n").unwrap();
    let o = run(&["node", "--config", cfg.to_str().unwrap()]);
    assert_one_line_error(&o, "config file");
}

#[test]
fn ping_under_injected_loss_between_processes() {
    let addrs = free_addrs(1);
    let a = addrs[0].to_string();
    let loss = ["--loss", "0.2", "--duplicate", "0.05", "--reorder", "0.05"];
    let mut args = vec!["--listen", a.as_str(), "--host-id", "41", "--no-multicast", "--fault-seed", "7"];
    args.extend(loss);
    let n = start_node(&args);
    let mut args =
        vec!["ping", n.echo.as_str(), "-c", "100", "--no-multicast", "--peer", a.as_str(), "--host-id", "42"];
    args.extend(loss);
    args.extend(["--timeout-ms", "3000"]);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("100 exchanges"), "{}", stdout(&o));
    assert!(packets_per_exchange(&stdout(&o)) > 2.0, "loss forces retransmissions: {}", stdout(&o));
    let o = run(&["ping", "x", "--loss", "2"]);
    assert_one_line_error(&o, "invalid probability");
    drop(n.guard);
}

#[test]
fn demo_exercises_every_primitive_and_exits_zero() {
    let o = run(&["demo"]);
    let out = stdout(&o);
    assert!(o.status.success(), "demo failed:\n{out}\n{}", stderr(&o));
    assert!(!out.contains("FAIL"), "{out}");
    for what in [
        "local Send",
        "remote Send",
        "appended segment",
        "ReplyWithSegment",
        "Forward",
        "MoveFrom 1 MiB",
        "MoveTo 1 MiB",
        "GetPid",
        "remote memory",
        "Send to a group",
        "nonexistent",
        "destroyed",
    ] {
        assert!(out.contains(what), "demo output lacks {what:?}:\n{out}");
    }
    assert!(out.contains("every step succeeded"), "{out}");
}

#[test]
fn hosts_lists_live_nodes_and_forgets_one_killed_with_sigkill() {
    let addrs = free_addrs(3);
    let s: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let node = |i: usize, host: &str| {
        let mut args = vec!["--listen", &s[i], "--host-id", host, "--no-multicast"];
        for (j, a) in s.iter().enumerate() {
            if j != i {
                args.extend(["--peer", a.as_str()]);
            }
        }
        start_node(&args)
    };
    let (_n1, _n2, mut n3) = (node(0, "21"), node(1, "22"), node(2, "23"));
    let hosts_of_21 = || {
        let o = run(&["hosts", "21", "--no-multicast", "--peer", &s[0]]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    // Our own view: we said HELLO, everyone answered.
    let o = run(&["hosts", "--no-multicast", "--peer", &s[0], "--peer", &s[1], "--peer", &s[2]]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for h in ["0x0015", "0x0016", "0x0017"] {
        assert!(out.contains(&format!("  {h}  127.0.0.1:")), "{h} missing from {out}");
    }
    // Host 21's view, through its kernel server.
    let out = hosts_of_21();
    assert!(out.starts_with("vipc hosts: host 0x0015 hears"), "{out}");
    assert!(out.contains("  0x0016  ") && out.contains("  0x0017  "), "{out}");
    // SIGKILL host 23: host 21 forgets it.
    n3.guard.0.kill().unwrap();
    let killed = Instant::now();
    loop {
        let out = hosts_of_21();
        if !out.contains("  0x0017  ") {
            assert!(out.contains("  0x0016  "), "the live host stays: {out}");
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "host 23 never declared down: {out}");
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("host 23 declared down {:?} after SIGKILL (as seen by polling)", killed.elapsed());
    let o = run(&["hosts", "--listen-ms", "x"]);
    assert_one_line_error(&o, "invalid value 'x' for '--listen-ms <LISTEN_MS>'");
}

#[test]
fn gsend_reaches_group_members_on_node_processes() {
    let addrs = free_addrs(2);
    let s: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    let _a = start_node(&["--listen", &s[0], "--host-id", "31", "--no-multicast", "--peer", &s[1], "--member", "5"]);
    let _b = start_node(&[
        "--listen",
        &s[1],
        "--host-id",
        "32",
        "--no-multicast",
        "--peer",
        &s[0],
        "--member",
        "5",
        "--member",
        "5",
    ]);
    let peers = ["--no-multicast", "--peer", s[0].as_str(), "--peer", s[1].as_str()];
    let gsend = |extra: &[&str]| {
        let mut args = vec!["gsend", "5"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&peers);
        run(&args)
    };
    let o = gsend(&["--mode", "all-reply", "-c", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("met: 3 replies of 3 members known, acknowledged by 2 of 2 other hosts"), "{out}");
    assert!(out.contains("3 sends to 8000.0005, 3 met, 0 not"), "{out}");
    let o = gsend(&["--mode", "many"]);
    assert!(o.status.success() && stdout(&o).contains("send 0: 3 replies"), "{}", stdout(&o));
    let o = gsend(&["--mode", "k-deliver=3"]);
    assert!(o.status.success() && stdout(&o).contains("met: 3 deliveries"), "{}", stdout(&o));
    let o = gsend(&["--mode", "k-reply=4"]);
    assert_one_line_error(&o, "1 of 1 sends to 8000.0005 did not reach their condition");
    let o = run(&["gsend", "8000", "--mode", "k-reply=0"]);
    assert_one_line_error(&o, "invalid value 'k-reply=0' for '--mode <MODE>'");
    let o = run(&["gsend", "8000", "--mode", "k-reply=99999999999"]);
    assert_one_line_error(&o, "a number from 1 to 4294967295");
    // No Sends, or a wait no one means (they ran until killed), are usage errors.
    assert_one_line_error(&run(&["gsend", "8000", "-c", "0"]), "invalid value '0' for '--count <COUNT>'");
    for flag in ["--listen-ms", "--interval-ms"] {
        assert_one_line_error(&run(&["gsend", "8000", flag, "99999999999"]), "(an hour)");
    }
    assert_one_line_error(&run(&["hosts", "--listen-ms", "3600001"]), "(an hour)");
    assert_one_line_error(&run(&["mount", ":x", "/tmp", "--threads", "4294967295"]), "is not in 1..=256");
    let o = run(&["node", "--member", "0012.0001"]);
    assert_one_line_error(&o, "invalid value '0012.0001' for '--member <GROUP>'");
}
