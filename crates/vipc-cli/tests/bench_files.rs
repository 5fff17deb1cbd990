//! `vipc bench --quick --json files/...`: the suite runs, every record line
//! parses with a finite positive ratio, the vipc library figures are there,
//! sshfs figures are there when this machine can run sshd and FUSE (else a
//! reason is printed), and what cannot run says "not measured" instead of a number.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

fn sshfs_possible() -> bool {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false);
    root && std::path::Path::new("/usr/sbin/sshd").exists()
        && std::path::Path::new("/dev/fuse").exists()
        && Command::new("sshfs").arg("-V").output().is_ok()
}

#[test]
fn files_suite_quick_json() {
    let start = Instant::now();
    let (names, stderr) = quick_bench("files", &["files/pages", "files/tree", "files/clients"]);
    for want in [
        "files_page_read_4KB_lib",
        "files_page_read_4KB_lib_vs_srr_pread",
        "files_randread_4KB_16r_lib",
        "files_find_lib_walk",
        "files_clients_1_cycle",
        "files_clients_8_rate",
    ] {
        assert!(names.iter().any(|n| n == want), "no record {want}; got {names:?}");
    }
    if sshfs_possible() {
        for want in ["files_page_read_4KB_sshfs", "files_randread_4KB_1r_lib_vs_sshfs", "files_tar_c_sshfs_cached"] {
            assert!(names.iter().any(|n| n == want), "no record {want}; got {names:?}\n{stderr}");
        }
    } else {
        assert!(stderr.contains("not measured: sshfs"), "{stderr}");
    }
    // The mount's figures exist exactly when the mount does not say why it is missing.
    let mount_missing = stderr.contains("not measured: page reads through the vipc mount");
    assert_eq!(names.iter().any(|n| n == "files_page_read_4KB_mount"), !mount_missing, "{stderr}");
    assert!(stderr.contains("files: 4 KB page read via library / (remote SRR + local pread)"), "{stderr}");
    assert!(start.elapsed() < Duration::from_secs(120), "took {:?}", start.elapsed());
}
