//! POSIX behaviour through the mount (pjdfstest's categories), and the same checks on a local dir to show
//! that they hold where they should.

mod common;

use common::{posix, Served};
use vipc_mount::MountOptions;

#[test]
fn the_checks_hold_on_a_local_dir() {
    let d = tempfile::tempdir().unwrap();
    posix::run_all(d.path());
}

#[test]
fn posix_behaviour_through_the_mount() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    posix::run_all(s.root());
    // What the mount did is what the server's directory holds.
    let via_mount = std::fs::read(s.root().join("o_append/f")).unwrap();
    let on_server = std::fs::read(s.export_dir().join("o_append/f")).unwrap();
    assert_eq!(via_mount, on_server);
    assert_eq!(on_server, b"start:A1B1A2_mid_B2");
}

#[test]
fn posix_behaviour_without_the_page_cache() {
    require_fuse!();
    let s = Served::start(MountOptions { direct_io: true, ..MountOptions::default() });
    for (name, check) in posix::CHECKS {
        let dir = s.root().join(name);
        std::fs::create_dir(&dir).unwrap();
        check(&dir);
    }
}
