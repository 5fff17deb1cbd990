//! Unmodified programs on the file system under test: tar and untar of a tree, git init/add/commit/clone/
//! status, compiling a C program whose sources live there, and running binaries (and a shared library)
//! loaded from there.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

/// Runs a command, panicking with its output unless it succeeds.
#[track_caller]
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Makes a tree with nested directories, files of many sizes (0 B to ~300 KB), an executable, symlinks
/// and an empty directory; returns the number of regular files.
pub fn make_tree(root: &Path) -> usize {
    let mut files = 0;
    for d in 0..12 {
        let dir = root.join(format!("dir{d:02}")).join(format!("sub{}", d % 3));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..12 {
            let size = match (d * 12 + f) % 7 {
                0 => 0,
                1 => 1,
                2 => 4095,
                3 => 4097,
                4 => 65_536 + d * 7,
                5 => 300_000 + f * 13,
                _ => 123 * (f + 1),
            };
            let data: Vec<u8> = (0..size).map(|i| ((i * 31 + d * 7 + f) % 251) as u8).collect();
            fs::write(dir.join(format!("file{f:02}.dat")), data).unwrap();
            files += 1;
        }
    }
    fs::write(root.join("run.sh"), b"#!/bin/sh\necho tree\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(root.join("dir01/sub1/file00.dat"), fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("dir00/sub0/file01.dat", root.join("link")).unwrap();
    std::os::unix::fs::symlink("../../run.sh", root.join("dir02/sub2/uplink")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    files + 1
}

/// Asserts that two trees hold the same names, kinds, modes, sizes, contents, symlink targets and
/// (with `mtimes`) mtimes to the second.
#[track_caller]
pub fn assert_same_tree(a: &Path, b: &Path, mtimes: bool) {
    let mut names_a: Vec<_> = fs::read_dir(a).unwrap().map(|e| e.unwrap().file_name()).collect();
    let mut names_b: Vec<_> = fs::read_dir(b).unwrap().map(|e| e.unwrap().file_name()).collect();
    names_a.sort();
    names_b.sort();
    assert_eq!(names_a, names_b, "entries of {} and {}", a.display(), b.display());
    for n in names_a {
        let (pa, pb) = (a.join(&n), b.join(&n));
        let (ma, mb) = (fs::symlink_metadata(&pa).unwrap(), fs::symlink_metadata(&pb).unwrap());
        assert_eq!(ma.file_type(), mb.file_type(), "{}", pb.display());
        if ma.file_type().is_symlink() {
            assert_eq!(fs::read_link(&pa).unwrap(), fs::read_link(&pb).unwrap(), "{}", pb.display());
            continue;
        }
        assert_eq!(ma.mode() & 0o7777, mb.mode() & 0o7777, "mode of {}", pb.display());
        if ma.is_dir() {
            assert_same_tree(&pa, &pb, mtimes);
        } else {
            assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
            assert!(fs::read(&pa).unwrap() == fs::read(&pb).unwrap(), "contents of {}", pb.display());
            if mtimes {
                assert_eq!(ma.mtime(), mb.mtime(), "mtime of {}", pb.display());
            }
        }
    }
}

/// tar a local tree, untar it into `dir`, compare; tar it again from `dir` (archive written on `dir`),
/// untar locally, compare.
pub fn tar_untar(dir: &Path, local: &Path) {
    let src = local.join("src");
    fs::create_dir(&src).unwrap();
    make_tree(&src);
    let a = local.join("a.tar");
    run(Command::new("tar").arg("-C").arg(&src).arg("-cf").arg(&a).arg("."));
    let into = dir.join("untarred");
    fs::create_dir(&into).unwrap();
    run(Command::new("tar").arg("-C").arg(&into).arg("-xpf").arg(&a));
    assert_same_tree(&src, &into, true);
    let b = dir.join("b.tar");
    run(Command::new("tar").arg("-C").arg(&into).arg("-cf").arg(&b).arg("."));
    let back = local.join("back");
    fs::create_dir(&back).unwrap();
    run(Command::new("tar").arg("-C").arg(&back).arg("-xpf").arg(&b));
    assert_same_tree(&src, &back, true);
    // The tree runs from there too.
    let out = run(&mut Command::new(into.join("run.sh")));
    assert_eq!(out.stdout, b"tree\n");
}

fn git(home: &Path, cwd: &Path) -> Command {
    let mut c = Command::new("git");
    c.current_dir(cwd)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "vipc")
        .env("GIT_AUTHOR_EMAIL", "vipc@example.invalid")
        .env("GIT_COMMITTER_NAME", "vipc")
        .env("GIT_COMMITTER_EMAIL", "vipc@example.invalid")
        .args(["-c", "init.defaultBranch=main", "-c", "safe.directory=*"]);
    c
}

/// git init/add/commit inside `dir`, clone inside `dir` and out of it, status, a change, gc and fsck.
pub fn git_workflow(dir: &Path, local: &Path) {
    let repo = dir.join("repo");
    fs::create_dir(&repo).unwrap();
    make_tree(&repo);
    run(git(local, &repo).args(["init", "-q"]));
    run(git(local, &repo).args(["add", "."]));
    run(git(local, &repo).args(["commit", "-q", "-m", "a tree on the mount"]));
    let st = run(git(local, &repo).args(["status", "--porcelain"]));
    assert!(st.stdout.is_empty(), "status after commit: {}", String::from_utf8_lossy(&st.stdout));
    // Clone within the mount (git tries hard links and falls back to copying).
    run(git(local, dir).args(["clone", "-q", "repo", "clone"]));
    let clone = dir.join("clone");
    let st = run(git(local, &clone).args(["status", "--porcelain"]));
    assert!(st.stdout.is_empty(), "status of the clone: {}", String::from_utf8_lossy(&st.stdout));
    assert_same_tree(&repo.join("dir03"), &clone.join("dir03"), false);
    // A change shows in status, commits, and travels by pull.
    fs::write(clone.join("dir00/sub0/file03.dat"), b"changed").unwrap();
    fs::write(clone.join("new.txt"), b"new").unwrap();
    let st = run(git(local, &clone).args(["status", "--porcelain"]));
    assert_eq!(String::from_utf8_lossy(&st.stdout), " M dir00/sub0/file03.dat\n?? new.txt\n");
    run(git(local, &clone).args(["add", "-A"]));
    run(git(local, &clone).args(["commit", "-q", "-m", "change"]));
    run(git(local, &repo).args(["pull", "-q", "--ff-only", "../clone", "main"]));
    assert_eq!(fs::read(repo.join("new.txt")).unwrap(), b"new");
    // Packs (read through mmap) and an integrity check.
    run(git(local, &repo).args(["gc", "-q"]));
    run(git(local, &repo).args(["fsck", "--no-progress"]));
    // Clone from the mount to local disk and from local disk to the mount.
    run(git(local, local).arg("clone").arg("-q").arg(&repo).arg("out"));
    assert_eq!(fs::read(local.join("out/new.txt")).unwrap(), b"new");
    run(git(local, dir).arg("clone").arg("-q").arg("--no-local").arg(local.join("out")).arg("in"));
    let st = run(git(local, &dir.join("in")).args(["status", "--porcelain"]));
    assert!(st.stdout.is_empty());
    let log = run(git(local, &dir.join("in")).args(["log", "--oneline"]));
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 2);
}

/// Compiles a C program (two units, a header, a shared library) whose sources are in `dir` into `dir` and
/// runs it from there: the binary and the library are loaded from the file system under test.
pub fn compile_and_run(dir: &Path) {
    let src = dir.join("csrc");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("util.h"), "int triangle(int n);\nconst char *greeting(void);\n").unwrap();
    fs::write(
        src.join("util.c"),
        "#include \"util.h\"\nint triangle(int n) { return n <= 0 ? 0 : n + triangle(n - 1); }\n",
    )
    .unwrap();
    fs::write(src.join("greet.c"), "const char *greeting(void) { return \"hello from the mount\"; }\n").unwrap();
    fs::write(
        src.join("main.c"),
        "#include <stdio.h>\n#include <stdlib.h>\n#include \"util.h\"\n\
         int main(int argc, char **argv) {\n\
           int n = argc > 1 ? atoi(argv[1]) : 10;\n\
           printf(\"%s: %d\\n\", greeting(), triangle(n));\n\
           return 0;\n}\n",
    )
    .unwrap();
    run(Command::new("cc").current_dir(&src).args(["-O1", "-fPIC", "-shared", "-o", "libgreet.so", "greet.c"]));
    run(Command::new("cc").current_dir(&src).args(["-O1", "-c", "util.c", "-o", "util.o"]));
    run(Command::new("cc").current_dir(&src).args(["-O1", "-o", "prog", "main.c", "util.o", "-L.", "-lgreet"]));
    let prog = src.join("prog");
    assert!(fs::metadata(&prog).unwrap().permissions().mode() & 0o111 != 0, "the linker made it executable");
    for (arg, want) in [("10", "55"), ("100", "5050")] {
        let out = run(Command::new(&prog).arg(arg).env("LD_LIBRARY_PATH", &src));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("hello from the mount: {want}\n"));
    }
    // Rebuild after a change (the old binary is replaced while nothing runs it) and run again.
    fs::write(src.join("greet.c"), "const char *greeting(void) { return \"rebuilt\"; }\n").unwrap();
    run(Command::new("cc").current_dir(&src).args(["-O1", "-fPIC", "-shared", "-o", "libgreet.so", "greet.c"]));
    let out = run(Command::new(&prog).arg("3").env("LD_LIBRARY_PATH", &src));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "rebuilt: 6\n");
    // A system binary copied onto the file system runs from it.
    let ls = src.join("ls-copy");
    fs::copy("/bin/ls", &ls).unwrap();
    let out = run(Command::new(&ls).arg("-1").arg(&src));
    assert!(String::from_utf8_lossy(&out.stdout).lines().any(|l| l == "main.c"));
}
