//! `vipc bench --quick --json` on a subset of suite `ipc`: every line is a
//! well-formed record with a positive ratio, and the bars' records are there.

use std::process::Command;
use std::time::{Duration, Instant};

const VIPC: &str = env!("CARGO_BIN_EXE_vipc");

#[test]
fn quick_json_lines_parse_and_ratios_are_positive() {
    let start = Instant::now();
    let out = Command::new(VIPC)
        .args(["bench", "--quick", "--json", "ipc/exchange", "ipc/pages", "ipc/units"])
        .output()
        .expect("run vipc bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "vipc bench failed: {stderr}\n{stdout}");
    let mut names = Vec::new();
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let o = v.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["baseline", "baseline_value", "name", "ratio", "suite", "unit", "value"], "{line}");
        assert_eq!(o["suite"], "ipc");
        let (value, base, ratio) =
            (o["value"].as_f64().unwrap(), o["baseline_value"].as_f64().unwrap(), o["ratio"].as_f64().unwrap());
        assert!(value > 0.0 && base > 0.0 && ratio > 0.0 && ratio.is_finite(), "{line}");
        assert!((ratio - value / base).abs() <= 1e-9 * ratio.max(1.0), "{line}");
        names.push(o["name"].as_str().unwrap().to_string());
    }
    for want in [
        "srr_local_32B",
        "srr_remote_32B",
        "srr_remote_32B_spin",
        "srr_remote_32B_vs_zmq",
        "srr_remote_32B_vs_grpc",
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
}
