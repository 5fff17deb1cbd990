//! Unmodified programs on the mount: tar/untar, git, cc, and running binaries loaded from it.

mod common;

use common::{programs, Served};
use vipc_mount::MountOptions;

#[test]
fn the_program_cases_pass_on_a_local_dir() {
    let (d, l) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    programs::tar_untar(d.path(), l.path());
    programs::compile_and_run(d.path());
}

#[test]
fn tar_and_untar_a_tree() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let local = tempfile::tempdir().unwrap();
    programs::tar_untar(s.root(), local.path());
    // The server's directory holds the same tree.
    programs::assert_same_tree(&local.path().join("src"), &s.export_dir().join("untarred"), true);
}

#[test]
fn git_init_commit_clone_status() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let local = tempfile::tempdir().unwrap();
    programs::git_workflow(s.root(), local.path());
}

#[test]
fn compile_and_run_a_c_program_from_the_mount() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    programs::compile_and_run(s.root());
}
