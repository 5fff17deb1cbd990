//! fsx-style random operations on a file in the mount, compared with a local file after every step.
//! The seed is printed; replay with VIPC_FSX_SEED=N (and VIPC_FSX_OPS=N for a longer run).

mod common;

use common::{fsx, Served};
use vipc_mount::MountOptions;

#[test]
fn fsx_compares_two_local_files() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fsx::run(a.path(), b.path(), 7, 200);
}

#[test]
fn fsx_through_the_mount() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let local = tempfile::tempdir().unwrap();
    let seed = fsx::seed();
    let ops = fsx::ops(1500);
    eprintln!("fsx: seed {seed}, {ops} operations (replay: VIPC_FSX_SEED={seed})");
    fsx::run(s.root(), local.path(), seed, ops);
}

#[test]
fn fsx_through_the_mount_with_direct_io() {
    require_fuse!();
    let s = Served::start(MountOptions { direct_io: true, ..MountOptions::default() });
    let local = tempfile::tempdir().unwrap();
    let seed = fsx::seed() ^ 0x5eed;
    let ops = fsx::ops(800);
    eprintln!("fsx (direct_io): seed {seed}, {ops} operations (replay: VIPC_FSX_SEED={seed})");
    fsx::run(s.root(), local.path(), seed, ops);
}
