//! Remote execution between in-process nodes on loopback.

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig};
use vipc_exec::{least_loaded, query_loads, serve, start, team_server_on, ExecError, ExitStatus};

/// Two nodes on loopback (static peers, short T_t), hosts `first` and `first + 1`.
fn pair(first: u16) -> (Node, Node) {
    let socks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    let addrs: Vec<_> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    drop(socks);
    let start = |i: usize| {
        let mut cfg = NodeConfig::fixed(first + i as u16, addrs[i], addrs.clone());
        cfg.engine.timeout = Duration::from_millis(500);
        Node::start(cfg).unwrap()
    };
    (start(0), start(1))
}

fn wait_alive(node: &Node) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while node.alive_hosts().unwrap().hosts().count() < 1 {
        assert!(Instant::now() < deadline, "the other node never became alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

type Captured = Arc<Mutex<(Vec<u8>, Vec<u8>)>>;

fn run(node: &Node, team: vipc::Pid, argv: &[&str]) -> (Result<ExitStatus, ExecError>, Captured) {
    let out: Captured = Arc::default();
    let o = out.clone();
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let job = start(node, team, &argv, move |fd, bytes| {
        let mut g = o.lock().unwrap();
        if fd == 1 { &mut g.0 } else { &mut g.1 }.extend_from_slice(bytes);
    });
    match job {
        Ok(j) => (j.wait(), out),
        Err(e) => (Err(e), out),
    }
}

#[test]
fn a_command_runs_on_the_team_server_with_its_output_and_status() {
    let (a, b) = pair(61);
    let team = serve(&b).unwrap();
    wait_alive(&a);
    let p = a.attach().unwrap();
    let loads = query_loads(&p, Duration::from_millis(100)).unwrap();
    assert_eq!(loads.iter().map(|l| l.server).collect::<Vec<_>>(), vec![team]);
    assert_eq!(least_loaded(&loads), Some(team));

    let (st, out) = run(&a, team, &["sh", "-c", "echo out; echo err >&2; exit 3"]);
    assert_eq!(st.unwrap(), ExitStatus { code: 3, signal: None });
    let g = out.lock().unwrap();
    assert_eq!((g.0.as_slice(), g.1.as_slice()), (&b"out\n"[..], &b"err\n"[..]));
    drop(g);

    // Much more output than one message carries arrives whole and in order.
    let (st, out) = run(&a, team, &["sh", "-c", "seq 1 20000"]);
    assert_eq!(st.unwrap().code, 0);
    let want: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&out.lock().unwrap().0), want);

    let (st, _) = run(&a, team, &["/no/such/program"]);
    assert!(matches!(st, Err(ExecError::Spawn { .. })), "{st:?}");
    let (st, _) = run(&a, team, &[]);
    assert!(matches!(st, Err(ExecError::BadCommand(_))), "{st:?}");
}

#[test]
fn the_least_loaded_host_is_picked_and_a_signal_reaches_the_command() {
    let (a, b) = pair(63);
    let (ta, tb) = (serve(&a).unwrap(), serve(&b).unwrap());
    wait_alive(&a);
    let argv = vec!["sleep".to_string(), "30".to_string()];
    let busy = start(&a, tb, &argv, |_, _| {}).unwrap();
    std::thread::sleep(Duration::from_millis(100)); // the job is running on b
    let p = a.attach().unwrap();
    let loads = query_loads(&p, Duration::from_millis(200)).unwrap();
    assert_eq!(loads.len(), 2, "{loads:?}");
    assert_eq!(least_loaded(&loads), Some(ta), "b runs a job: a is less loaded ({loads:?})");

    // Another node may not signal it.
    let mut m = [0u8; 32];
    m[0] = vipc_exec::OP_SIGNAL;
    m[4..8].copy_from_slice(&busy.id().0.to_le_bytes());
    m[8..12].copy_from_slice(&9u32.to_le_bytes());
    b.attach().unwrap().send(&mut m, tb).unwrap();
    assert_eq!(m[0], vipc_exec::STATUS_NO_JOB);
    assert!(!busy.is_finished(), "still running");
    let t = Instant::now();
    assert!(busy.signal(2).unwrap(), "the job is known");
    let st = busy.wait().unwrap();
    assert_eq!(st.signal, Some(2));
    assert_eq!(st.shell_code(), 130);
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
}

#[test]
fn a_dead_team_server_node_is_an_error_not_a_hang() {
    let (a, b) = pair(65);
    let team = serve(&b).unwrap();
    wait_alive(&a);
    let argv = vec!["sleep".to_string(), "30".to_string()];
    let job = start(&a, team, &argv, |_, _| {}).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    b.shutdown();
    let r = job.wait();
    assert!(matches!(r, Err(ExecError::Vipc(_))), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
}

/// A node that ignores signals (a script's background job ignores SIGINT,
/// `nohup` SIGHUP) starts its commands with every signal at its default
/// action, or `Job::signal` could not stop them.
#[test]
fn a_command_starts_with_every_signal_at_its_default() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    for sig in [Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: SIG_IGN installs no handler. Other tests of this binary
        // start commands too, and with the fix they do not inherit this.
        unsafe { signal(sig, SigHandler::SigIgn) }.unwrap();
    }
    let (a, b) = pair(71);
    let team = serve(&b).unwrap();
    wait_alive(&a);
    let (st, out) = run(&a, team, &["grep", "^SigIgn:", "/proc/self/status"]);
    assert_eq!(st.unwrap().code, 0);
    let line = String::from_utf8_lossy(&out.lock().unwrap().0).into_owned();
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    // Signals 1–31 (bit n − 1 for signal n); the real-time ones from 32 on
    // belong to the C library, which sometimes leaves 32 ignored.
    assert_eq!(mask & 0x7fff_ffff, 0, "the command ignores signals: {line}");
}

/// A silent command whose client's node dies is killed: the pumps, which
/// notice a vanished client when they have output to send, have none.
#[test]
fn a_silent_command_is_killed_when_its_client_vanishes() {
    let (a, b) = pair(67);
    let team = serve(&b).unwrap();
    wait_alive(&a);
    let argv = vec!["sleep".to_string(), "60".to_string()];
    let _job = start(&a, team, &argv, |_, _| {}).unwrap();
    let p = b.attach().unwrap();
    let jobs = || query_loads(&p, Duration::from_millis(100)).unwrap()[0].jobs;
    let t = Instant::now();
    while jobs() == 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(jobs(), 1, "the job never started");
    a.shutdown();
    // Within a keep-alive (2 s) and the client's T_t (0.5 s here).
    let t = Instant::now();
    while jobs() > 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(jobs(), 0, "still running after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
}

/// `--on HOST`: that host's team server is found although another one
/// answers the load query first and its own answers are often lost.
#[test]
fn a_chosen_hosts_team_server_is_found_though_its_answers_are_lost() {
    let socks: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    let addrs: Vec<_> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    drop(socks);
    let start_node = |i: usize, loss: f64| {
        let mut cfg = NodeConfig::fixed(69 + i as u16, addrs[i], addrs.clone());
        cfg.engine.timeout = Duration::from_millis(500);
        cfg.faults.loss = loss;
        Node::start(cfg).unwrap()
    };
    let (a, b) = (start_node(0, 0.0), start_node(1, 0.6));
    let (_ta, tb) = (serve(&a).unwrap(), serve(&b).unwrap());
    let p = a.attach().unwrap();
    for _ in 0..10 {
        assert_eq!(team_server_on(&p, b.host_id(), Duration::from_secs(10)).unwrap(), Some(tb));
    }
    assert_eq!(team_server_on(&p, 99, Duration::from_millis(300)).unwrap(), None, "no team server on host 99");
}

/// A start that cannot get both of its processes (the node is full) leaves
/// nothing behind: its output sink was started first and then waited for
/// its end for the node's life, holding a process slot.
#[test]
fn a_start_on_a_full_node_leaves_no_process_behind() {
    // Room for the kernel server, its mover and one more process.
    let mut cfg = NodeConfig::fixed(75, "127.0.0.1:0".parse().unwrap(), vec![]);
    cfg.engine.max_processes = 3;
    let a = Node::start(cfg).unwrap();
    let argv = vec!["true".to_string()];
    let team = vipc::Pid::new(76, 5);
    assert!(start(&a, team, &argv, |_, _| {}).is_err(), "two processes do not fit");
    let p = a.attach().expect("the slot is free again");
    drop(p);
}
