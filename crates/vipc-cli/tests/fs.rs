//! `vipc node --export`, `vipc cp`, `vipc cat` and `vipc ls` as a user runs
//! them: a node process exporting directories, commands as separate
//! processes on loopback, one-line errors.

mod common;

use common::*;
use std::time::{Duration, Instant};

/// Starts `vipc node ARGS` and waits for its "listening" line.
fn start_node(args: &[&str]) -> Guard {
    start(&[&["node"], args].concat(), "vipc node: host ").0
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8).collect()
}

#[test]
fn cp_cat_and_ls_work_against_an_exporting_node() {
    let g = random_group();
    let data = tempfile::tempdir().unwrap();
    let docs = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    std::fs::create_dir(data.path().join("sub")).unwrap();
    std::fs::write(data.path().join("hello.txt"), b"hello, world\n").unwrap();
    std::os::unix::fs::symlink("hello.txt", data.path().join("link")).unwrap();
    std::fs::write(docs.path().join("ro.txt"), b"read only").unwrap();
    let big = pattern(5_000_000);
    std::fs::write(data.path().join("big"), &big).unwrap();
    let e1 = format!("data={}", data.path().display());
    let e2 = format!("docs={}:ro", docs.path().display());
    let _n = start_node(&["--group", &g, "--export", &e1, "--export", &e2]);

    // ls and ls -l
    let o = run(&["ls", "data:", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "big\nhello.txt\nlink\nsub\n");
    let o = run(&["ls", "-l", "data:/", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = |name: &str| out.lines().find(|l| l.ends_with(name) || l.contains(&format!(" {name} "))).unwrap();
    assert!(line("hello.txt").starts_with("-rw"), "{out}");
    assert!(line("hello.txt").contains(" 13 "), "{out}");
    assert!(line("sub").starts_with('d'), "{out}");
    assert!(line("link").starts_with('l') && line("link").ends_with("link -> hello.txt"), "{out}");
    let o = run(&["ls", "data:hello.txt", "--group", &g]);
    assert_eq!(stdout(&o), "hello.txt\n");

    // cat
    let o = run(&["cat", "data:hello.txt", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, b"hello, world\n");
    let o = run(&["cat", "data:big", "--group", &g]);
    assert!(o.stdout == big, "cat of a 5 MB file differs");

    // cp down, into a directory, and up
    let dst = local.path().join("copy");
    let o = run(&["cp", "data:big", dst.to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("5000000 bytes"), "{}", stdout(&o));
    assert!(std::fs::read(&dst).unwrap() == big);
    let o = run(&["cp", "-q", "data:hello.txt", local.path().to_str().unwrap(), "--group", &g]);
    assert!(o.status.success() && o.stdout.is_empty(), "{}", stderr(&o));
    assert_eq!(std::fs::read(local.path().join("hello.txt")).unwrap(), b"hello, world\n");
    let o = run(&["cp", dst.to_str().unwrap(), "data:sub/", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(data.path().join("sub/copy")).unwrap() == big);

    // --resume continues a partial copy by size (both directions)
    std::fs::write(&dst, &big[..1_234_567]).unwrap();
    let o = run(&["cp", "--resume", "data:big", dst.to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("resumed at 1234567"), "{}", stdout(&o));
    assert!(std::fs::read(&dst).unwrap() == big);
    std::fs::write(data.path().join("up"), &big[..777]).unwrap();
    let o = run(&["cp", "--resume", dst.to_str().unwrap(), "data:up", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(data.path().join("up")).unwrap() == big);
    // ... only onto the beginning of the same file: another file's bytes are not finished into a mix.
    std::fs::write(data.path().join("other"), b"unrelated").unwrap();
    let o = run(&["cp", "--resume", dst.to_str().unwrap(), "data:other", "--group", &g]);
    assert_one_line_error(&o, "cannot resume: bytes 0..9 of data:other differ from those of");
    assert_eq!(std::fs::read(data.path().join("other")).unwrap(), b"unrelated", "left alone");

    // between two exports: read-only source to writable destination
    let o = run(&["cp", "docs:ro.txt", "data:from-docs", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(data.path().join("from-docs")).unwrap(), b"read only");

    // errors: one line each, non-zero exit
    assert_one_line_error(&run(&["cat", "data:nope", "--group", &g]), "No such file");
    assert_one_line_error(&run(&["cat", "data:../../etc/passwd", "--group", &g]), "Permission denied");
    assert_one_line_error(&run(&["cat", "data:sub", "--group", &g]), "Is a directory");
    assert_one_line_error(&run(&["ls", "data:nope", "--group", &g]), "No such file");
    assert_one_line_error(&run(&["cp", "data:hello.txt", "docs:x", "--group", &g]), "Read-only file system");
    assert_one_line_error(&run(&["cp", "data:sub", "/tmp/x", "--group", &g]), "not a regular file");
    assert_one_line_error(&run(&["cp", "/etc/hostname", "/tmp/x", "--group", &g]), "both SRC and DST are local");
    assert_one_line_error(&run(&["cp", "--resume", "data:hello.txt", "data:big", "--group", &g]), "cannot resume");
    assert_one_line_error(&run(&["cat", "/etc/passwd", "--group", &g]), "not a remote file");
    // A file onto itself (here through its directory) would be emptied; a device has no size to copy;
    // a resume onto a link trusts no size.
    assert_one_line_error(&run(&["cp", "data:sub/copy", "data:sub", "--group", &g]), "are the same file");
    assert!(std::fs::read(data.path().join("sub/copy")).unwrap() == big, "left whole");
    // ... as would one onto a symlink to it, or onto this machine's own file behind the export.
    assert_one_line_error(&run(&["cp", "data:hello.txt", "data:link", "--group", &g]), "are the same file");
    let behind = data.path().join("hello.txt");
    assert_one_line_error(
        &run(&["cp", "data:hello.txt", behind.to_str().unwrap(), "--group", &g]),
        "are the same file",
    );
    assert_one_line_error(&run(&["cp", behind.to_str().unwrap(), "data:link", "--group", &g]), "are the same file");
    assert_eq!(std::fs::read(&behind).unwrap(), b"hello, world\n", "left whole");
    // A symlink as the source is followed, as by cp(1).
    let o = run(&["cp", "data:link", local.path().join("via-link").to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(local.path().join("via-link")).unwrap(), b"hello, world\n");
    // A local write error names the file.
    assert_one_line_error(&run(&["cp", "data:hello.txt", "/dev/full", "--group", &g]), "/dev/full: No space left");
    let full = std::fs::File::create("/dev/full").unwrap();
    let o =
        std::process::Command::new(VIPC).args(["cat", "data:hello.txt", "--group", &g]).stdout(full).output().unwrap();
    assert_one_line_error(&o, "cannot write to standard output: No space left on device");
    // A destination ending in '/' that is no directory is said to be missing (was "Is a directory").
    let nodir = format!("{}/", local.path().join("nodir").display());
    assert_one_line_error(
        &run(&["cp", "data:hello.txt", &nodir, "--group", &g]),
        &format!("{nodir}: no such directory"),
    );
    assert_one_line_error(&run(&["cp", &nodir, "data:x", "--group", &g]), "No such file");
    assert_one_line_error(
        &run(&["cp", "data:hello.txt", "data:nodir/", "--group", &g]),
        "data:nodir/: no such directory",
    );
    assert_one_line_error(&run(&["cp", "/dev/null", "data:null", "--group", &g]), "not a regular file");
    // A FIFO with nobody at its other end is refused, not waited on (both hung).
    let fifo = local.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let fifo = fifo.to_str().unwrap();
    assert_one_line_error(&run(&["cp", fifo, "data:from-fifo", "--group", &g]), "not a regular file");
    assert_one_line_error(&run(&["cp", "data:hello.txt", fifo, "--group", &g]), "a FIFO or socket has no offsets");
    assert_one_line_error(&run(&["cp", "--resume", "data:big", "data:link", "--group", &g]), "not a regular file");
    assert_one_line_error(&run(&["ls", "nosuch:", "--group", &g]), "no file server exports \"nosuch\"");
}

#[test]
fn bad_exports_are_one_line_errors() {
    let g = random_group();
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "nodir"]), "expected NAME=DIR");
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "x=/nonexistent-vipc-dir"]), "not a directory");
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "bad name=/tmp"]), "invalid export name");
    // One name twice: the node served the last one only.
    let twice = ["node", "--group", &g, "--export", "y=/tmp", "--export", "y=/var"];
    assert_one_line_error(&run(&twice), "export y is given twice");
    assert_one_line_error(&run(&["node", "--group", &g, "--pipe", "p", "--pipe", "p"]), "pipe p is given twice");
    assert_one_line_error(&run(&["cp", "a:x"]), "required");
}

#[test]
fn a_second_node_may_not_serve_an_export_or_pipe_name_already_served() {
    let g = random_group();
    let data = tempfile::tempdir().unwrap();
    let e = format!("data={}", data.path().display());
    let _n = start_node(&["--group", &g, "--export", &e, "--pipe", "p1"]);
    let o = run(&["node", "--group", &g, "--export", &e]);
    assert_one_line_error(&o, "export data is already served by ");
    let o = run(&["pipe", "serve", "p1", "--group", &g]);
    assert_one_line_error(&o, "pipe p1 is already served by ");
}

/// A sparse file copied down from an export and up again keeps its holes;
/// a dense one of the same bytes stays dense (as with cp(1)'s `--sparse=auto`).
#[test]
fn cp_keeps_the_holes_of_a_sparse_file_both_ways() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let g = random_group();
    let data = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    // 64 KiB of data, a 40 MiB hole, 4 KiB of data, and a 20 MiB hole at the end.
    let size: u64 = (64 << 10) + (40 << 20) + 4096 + (20 << 20);
    let f = std::fs::File::create(data.path().join("sparse")).unwrap();
    f.write_all_at(&pattern(64 << 10), 0).unwrap();
    f.write_all_at(&pattern(4096), (64 << 10) + (40 << 20)).unwrap();
    f.set_len(size).unwrap();
    std::fs::write(data.path().join("dense-zeros"), vec![0u8; 1 << 20]).unwrap();
    let e = format!("data={}", data.path().display());
    let (_n, line) = start(&["node", "--group", &g, "--export", &e], "vipc node: host ");
    let host = line.split_whitespace().nth(3).unwrap().trim_end_matches(',').to_string();
    let bytes_out = || {
        let o = run(&["stat", &host, "--group", &g]);
        let out = stdout(&o);
        let line = out.lines().find(|l| l.starts_with("bytes_out ")).unwrap_or_else(|| panic!("{out}"));
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
    };
    let allocated = |p: &std::path::Path| std::fs::metadata(p).unwrap().blocks() * 512;

    let down = local.path().join("sparse");
    let before = bytes_out();
    let o = run(&["cp", "-q", "data:sparse", down.to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sent = bytes_out() - before;
    // The data lie in two of cp's 2 MiB chunks; the holes are 60 MiB.
    assert!(sent < 8 << 20, "the holes crossed the network: {sent} bytes sent for 68 KiB of data");
    assert!(std::fs::read(&down).unwrap() == std::fs::read(data.path().join("sparse")).unwrap(), "down: differs");
    assert!(allocated(&down) < 1 << 20, "down: {} bytes allocated of {size}", allocated(&down));

    let o = run(&["cp", "-q", down.to_str().unwrap(), "data:up", "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    let up = data.path().join("up");
    assert_eq!(std::fs::metadata(&up).unwrap().len(), size, "up: the trailing hole counts in the size");
    assert!(std::fs::read(&up).unwrap() == std::fs::read(&down).unwrap(), "up: differs");
    assert!(allocated(&up) < 1 << 20, "up: {} bytes allocated of {size}", allocated(&up));

    // A copy cut short after its first 64 KiB, resumed: the same bytes, the holes kept.
    let resumed = local.path().join("resumed");
    std::fs::write(&resumed, &std::fs::read(&down).unwrap()[..64 << 10]).unwrap();
    let o = run(&["cp", "-q", "--resume", "data:sparse", resumed.to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&resumed).unwrap() == std::fs::read(&down).unwrap(), "resumed: differs");
    assert!(allocated(&resumed) < 1 << 20, "resumed: {} bytes allocated of {size}", allocated(&resumed));

    // Holes only in a regular file: a device gets every byte (and no size to set).
    let o = run(&["cp", "-q", "data:sparse", "/dev/null", "--group", &g]);
    assert!(o.status.success(), "to /dev/null: {}", stderr(&o));

    // A file of zeros without holes is copied block for block.
    let o = run(&["cp", "-q", "data:dense-zeros", local.path().join("z").to_str().unwrap(), "--group", &g]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(allocated(&local.path().join("z")) >= 1 << 20, "a dense source stays dense");
}

/// A transfer that fails while its client waits on (here: a server node
/// with T_t of 30 ms losing half its datagrams; the client's Send lives on,
/// answered with ReplyPending): the request is answered with an error. The
/// server used to answer nothing, and the client waited for ever.
#[test]
fn a_read_whose_transfer_fails_is_answered_not_left_waiting() {
    let g = random_group();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("big"), pattern(64 << 20)).unwrap();
    let e = format!("data={}", data.path().display());
    let lossy = ["--timeout-ms", "30", "--retransmit-ms", "20", "--loss", "0.5", "--min-stream-kib", "1000000000"];
    let _n = start_node(&[&["--group", g.as_str(), "--export", e.as_str()][..], &lossy[..]].concat());
    let mut cat = std::process::Command::new(VIPC)
        .args(["cat", "data:big", "--group", &g])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = cat.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(30) {
            let _ = cat.kill();
            panic!("vipc cat still waiting after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut cat.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success() && err.lines().count() == 1, "{status}: {err}");
    assert!(err.contains("Input/output error"), "{err}");
}
