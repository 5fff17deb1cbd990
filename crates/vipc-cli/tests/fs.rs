//! `vipc node --export`, `vipc cp`, `vipc cat` and `vipc ls` as a user runs
//! them: a node process exporting directories, commands as separate
//! processes on loopback, one-line errors.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const VIPC: &str = env!("CARGO_BIN_EXE_vipc");

/// A child process killed when dropped (also on panic).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A multicast group of this test's own.
fn random_group() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let r = h.finish();
    format!("239.255.{}.{}:{}", (r >> 8) as u8, r as u8 | 1, 20_000 + (r >> 16) as u16 % 40_000)
}

/// Starts `vipc node ARGS` and waits for its "listening" line.
fn start_node(args: &[&str]) -> Guard {
    let mut child = Command::new(VIPC)
        .arg("node")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vipc node");
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("vipc node printed nothing");
    assert!(line.starts_with("vipc node: host "), "unexpected first line {line:?}");
    guard
}

/// Runs `vipc ARGS` to completion (with a time limit).
fn run(args: &[&str]) -> Output {
    let child =
        Command::new(VIPC).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn vipc");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("vipc {args:?} did not finish within 120 s");
        }
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the command failed with exactly one `vipc: error:` line containing `want`.
fn assert_one_line_error(o: &Output, want: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stdout {}", stdout(o));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected, got {err:?}");
    assert!(lines[0].starts_with("vipc: error: "), "{err:?}");
    assert!(lines[0].contains(want), "{err:?} lacks {want:?}");
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
    assert_one_line_error(&run(&["ls", "nosuch:", "--group", &g]), "no file server exports \"nosuch\"");
}

#[test]
fn bad_exports_are_one_line_errors() {
    let g = random_group();
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "nodir"]), "expected NAME=DIR");
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "x=/nonexistent-vipc-dir"]), "not a directory");
    assert_one_line_error(&run(&["node", "--group", &g, "--export", "bad name=/tmp"]), "invalid export name");
    assert_one_line_error(&run(&["cp", "a:x"]), "required");
}
