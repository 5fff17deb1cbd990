//! `vipc bench --quick --json` on a subset of suite `ipc`: every line is a
//! well-formed record with a positive ratio, and the bars' records are there.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn quick_json_lines_parse_and_ratios_are_positive() {
    let start = Instant::now();
    let (names, stderr) = quick_bench("ipc", &["ipc/exchange", "ipc/pages", "ipc/units"]);
    for want in [
        "srr_local_32B",
        "srr_remote_32B",
        "srr_remote_32B_spin",
        "srr_remote_32B_vs_zmq",
        "srr_remote_32B_vs_grpc",
        "srr_remote_32B_spin_vs_grpc",
        "packets_per_exchange_remote",
        "page_read_512B_packets",
        "page_write_4KB_packets",
        "read64k_unit_1KB_vs_64KB",
    ] {
        assert!(names.iter().any(|n| n == want), "no record {want}; got {names:?}");
    }
    // The bars go to stderr in JSON mode.
    assert!(stderr.contains("remote SRR / UDP ping-pong"), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(120), "took {:?}", start.elapsed());
}

#[test]
fn unknown_suite_is_an_error() {
    let out = Command::new(VIPC).args(["bench", "--quick", "disk"]).output().expect("run vipc bench");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown suite"));
    // A report that cannot be written fails before anything runs (it failed after the whole run).
    let t = std::time::Instant::now();
    let out =
        Command::new(VIPC).args(["bench", "--quick", "ipc", "--report", "/proc/no-report"]).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("report directory /proc/no-report"), "{err}");
    assert!(!err.contains("ipc/exchange"), "an item ran: {err}");
    assert!(t.elapsed() < Duration::from_secs(5), "took {:?}", t.elapsed());
}
