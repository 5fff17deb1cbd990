//! The Ising model with every worker a separate OS process (`vipc bench-peer
//! ising-worker`, each its own node on loopback), driven over stdin/stdout:
//! each worker's rows equal the same rows of the sequential reference bit
//! for bit (by digest), after every run of sweeps.

mod common;

use common::VIPC;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vipc_bench::apps_procs::IsingProcs;
use vipc_bench::PeerExe;
use vipc_rmem_apps::ising::{model, IsingParams};

fn exe() -> PeerExe {
    PeerExe { program: VIPC.into(), prefix: vec!["bench-peer".into()] }
}

const DONE_TIMEOUT: Duration = Duration::from_secs(20);

/// One worker process of 8×8 (seed 1) with piped stdin and stdout.
fn worker(rank: u32, workers: u32, host: u16) -> std::process::Child {
    Command::new(VIPC)
        .args(["bench-peer", "ising-worker", "--size", "8", "--seed", "1"])
        .args(["--rank", &rank.to_string(), "--workers", &workers.to_string(), "--host", &host.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn")
}

#[test]
fn four_worker_processes_equal_the_sequential_reference() {
    let params = IsingParams::new(16, 7);
    let mut procs = IsingProcs::start(&exe(), &params, 4, 40).expect("workers");
    assert_eq!(procs.len(), 4);
    let mut total = 0;
    // Runs of one sweep, then longer ones: every run goes on where the last stopped.
    for chunk in [1, 99, 200] {
        let run = procs.run(chunk, DONE_TIMEOUT).expect("run");
        total += chunk;
        assert!(run.wall_us >= run.max_us() && run.max_us() > 0.0, "{run:?}");
        run.check(&model::reference(&params, total), params.size, 2 * total).expect("the reference's rows");
        assert_ne!(model::reference(&params, total), model::reference(&params, 0));
    }
    let stats = procs.stats().expect("stats");
    assert!(stats.iter().all(|s| s.half_sweeps == 2 * total && s.rows_written == 4 * total), "{stats:?}");
}

#[test]
fn uneven_bands_equal_the_sequential_reference() {
    // 18 rows over 3 workers, and 10 over 4 (bands of 2 and 3 rows).
    for (size, p, host) in [(18, 3, 50), (10, 4, 60)] {
        let params = IsingParams::new(size, 3);
        let mut procs = IsingProcs::start(&exe(), &params, p, host).expect("workers");
        let run = procs.run(50, DONE_TIMEOUT).expect("run");
        run.check(&model::reference(&params, 50), size, 100).expect("the reference's rows");
        // A wrong grid is caught, naming the worker.
        let err = run.check(&model::reference(&params, 49), size, 100).expect_err("another grid");
        assert!(err.to_string().contains("ising-worker 0"), "{err}");
    }
}

/// A worker's errors are one line each, never a hang: bad commands, RUN
/// before CONNECT, and bad arguments (the process exits with one error line).
#[test]
fn worker_errors_are_one_line() {
    let mut child = worker(1, 2, 70);
    let guard_pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let _guard = common::Guard(child);
    let mut line = String::new();
    let t = Instant::now();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("READY name=") && line.contains(" first=4 rows=4"), "{line:?} (pid {guard_pid})");
    for (cmd, want) in [
        ("RUN sweeps=3", "ERROR rank 1: RUN before CONNECT"),
        ("JUMP", "ERROR rank 1: unknown command"),
        ("RUN sweeps=x", "ERROR rank 1: bad sweeps=x"),
        ("CONNECT above=zz below=00", "ERROR rank 1: bench: bad segment name"),
        ("STATS", "STATS half_sweeps=0 rows_written=0"),
    ] {
        writeln!(stdin, "{cmd}").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with(want), "{cmd}: {line:?}");
    }
    assert!(t.elapsed() < Duration::from_secs(15));

    let bad = common::run(&[
        "bench-peer",
        "ising-worker",
        "--rank",
        "0",
        "--workers",
        "2",
        "--size",
        "7",
        "--seed",
        "1",
        "--host",
        "71",
    ]);
    common::assert_one_line_error(&bad, "a 7×7 grid (even, ≥ 2) over 2 workers");
}

/// A script piped in is answered in full: the worker exits only when it
/// asks for the next command after stdin has closed (it exited at once,
/// dropping every command still unread).
#[test]
fn a_piped_script_is_answered_in_full() {
    let mut child = worker(0, 1, 72);
    child.stdin.take().unwrap().write_all(b"RUN sweeps=1\nSTATS\nJUMP\n").unwrap();
    let out = child.wait_with_output().expect("the worker exits");
    assert!(out.status.success(), "{:?}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("READY name="), "{text}");
    assert!(lines[1].starts_with("DONE us=") && lines[1].contains(" half_sweeps=2 "), "{text}");
    assert!(lines[2].starts_with("STATS half_sweeps=2 "), "{text}");
    assert!(lines[3].starts_with("ERROR rank 0: unknown command \"JUMP\""), "{text}");
}
