//! `vipc mount` as a user runs it: a child process mounting an export served by this test process,
//! unmounting on SIGTERM (also while the mount is busy), a stale mount after SIGKILL cleaned up by the
//! next `vipc mount`, and one-line errors. Skipped (with the reason printed) without root, /dev/fuse or
//! fusermount3.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig};
use vipc_fs::{ExportConfig, FileServer};

fn fuse_unavailable() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root");
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse");
    }
    if Command::new("fusermount3").arg("-V").output().is_err() {
        return Some("no fusermount3 (Debian package fuse3)");
    }
    None
}

macro_rules! require_fuse {
    () => {
        if let Some(why) = fuse_unavailable() {
            vipc::testing::skipped(why);
            return;
        }
    };
}

/// A file server in this process: node host 1 on loopback, no multicast, export `clitest`.
struct Server {
    fs: Option<FileServer>,
    node: Node,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let node = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
        let cfg = ExportConfig { name: "clitest".into(), dir: dir.path().to_path_buf(), read_only: false, workers: 4 };
        let fs = FileServer::start(&node, cfg).unwrap();
        Server { fs: Some(fs), node, dir }
    }

    fn spec(&self) -> String {
        format!("{}:clitest", self.node.local_addr())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.take() {
            fs.stop();
        }
        self.node.shutdown();
    }
}

/// A `vipc mount` child, killed (and its mount detached) if the test fails half-way.
struct MountProc {
    child: Child,
    mnt: std::path::PathBuf,
    /// What it wrote to stderr so far (also passed on to the test's).
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// The thread reading it, done once the process has exited.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MountProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if vipc_mount::is_mount_point(&self.mnt) {
            let _ = vipc_mount::lazy_unmount(&self.mnt);
        }
    }
}

/// Starts `vipc mount SPEC MNT` and waits for its "mounted on" line.
fn start_mount(spec: &str, mnt: &Path) -> MountProc {
    let mut child = Command::new(VIPC)
        .args(["mount", spec])
        .arg(mnt)
        .args(["--host-id", "2", "--no-multicast"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vipc mount");
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (err, errors) = (child.stderr.take().unwrap(), stderr.clone());
    let stderr_reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            errors.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let proc = MountProc { child, mnt: mnt.to_path_buf(), stderr, stderr_reader: Some(stderr_reader) };
    let line = rx.recv_timeout(Duration::from_secs(20)).expect("vipc mount printed nothing");
    assert!(line.contains("mounted on"), "unexpected first line {line:?}");
    proc
}

fn signal(p: &MountProc, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.child.id() as i32), sig).unwrap();
}

/// Waits for the child to exit (at most `limit`).
fn wait_exit(p: &mut MountProc, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st;
        }
        assert!(t0.elapsed() < limit, "vipc mount still running after {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mount_serves_files_and_unmounts_on_sigterm_even_when_busy() {
    require_fuse!();
    let server = Server::start();
    std::fs::write(server.dir.path().join("hello"), b"from the server").unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut p = start_mount(&server.spec(), mnt.path());
    assert!(vipc_mount::is_mount_point(mnt.path()));
    assert_eq!(std::fs::read(mnt.path().join("hello")).unwrap(), b"from the server");
    std::fs::write(mnt.path().join("back"), b"from the client").unwrap();
    // The server answers a write before its data reach the disk (write-behind): a reader on the server's
    // own disk, outside the service, sees them a moment later.
    let t0 = Instant::now();
    while std::fs::read(server.dir.path().join("back")).unwrap() != b"from the client" {
        assert!(t0.elapsed() < Duration::from_secs(2), "the write never reached the server's disk");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Busy: a file held open in the mount. SIGTERM still unmounts (lazily) and exits.
    let held = std::fs::File::open(mnt.path().join("hello")).unwrap();
    signal(&p, nix::sys::signal::Signal::SIGTERM);
    let st = wait_exit(&mut p, Duration::from_secs(10));
    assert!(st.success(), "vipc mount exited with {st}");
    assert!(!vipc_mount::is_mount_point(mnt.path()), "still mounted after SIGTERM");
    drop(held);
    // SIGINT likewise, on an idle mount.
    let mut p = start_mount(&server.spec(), mnt.path());
    signal(&p, nix::sys::signal::Signal::SIGINT);
    assert!(wait_exit(&mut p, Duration::from_secs(10)).success());
    assert!(!vipc_mount::is_mount_point(mnt.path()));
}

/// `fusermount3 -u` from outside ends `vipc mount` with status 0, saying so, and nothing on stderr
/// (fuser's own unmount of what was already unmounted logged a warning).
#[test]
fn an_unmount_from_outside_ends_vipc_mount_quietly() {
    require_fuse!();
    let server = Server::start();
    let mnt = tempfile::tempdir().unwrap();
    let mut p = start_mount(&server.spec(), mnt.path());
    let o = Command::new("fusermount3").arg("-u").arg(mnt.path()).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = wait_exit(&mut p, Duration::from_secs(10));
    assert!(st.success(), "vipc mount exited with {st}");
    p.stderr_reader.take().unwrap().join().unwrap(); // all of stderr
    let errors = p.stderr.lock().unwrap().clone();
    assert!(errors.is_empty(), "vipc mount wrote to stderr: {errors}");
}

#[test]
fn a_stale_mount_after_sigkill_is_cleaned_up_by_the_next_mount() {
    require_fuse!();
    let server = Server::start();
    std::fs::write(server.dir.path().join("f"), b"data").unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mut p = start_mount(&server.spec(), mnt.path());
    assert_eq!(std::fs::read(mnt.path().join("f")).unwrap(), b"data");
    signal(&p, nix::sys::signal::Signal::SIGKILL);
    let _ = wait_exit(&mut p, Duration::from_secs(10));
    // statfs always reaches the (dead) server; stat may still be answered from cached attributes.
    let e = nix::sys::statfs::statfs(mnt.path()).unwrap_err();
    assert_eq!(e, nix::errno::Errno::ENOTCONN, "a killed mount leaves a stale mount point: {e}");
    assert!(vipc_mount::is_mount_point(mnt.path()));
    let mut p2 = start_mount(&server.spec(), mnt.path());
    assert_eq!(std::fs::read(mnt.path().join("f")).unwrap(), b"data");
    signal(&p2, nix::sys::signal::Signal::SIGTERM);
    assert!(wait_exit(&mut p2, Duration::from_secs(10)).success());
    assert!(std::fs::metadata(mnt.path()).unwrap().is_dir());
    assert!(!vipc_mount::is_mount_point(mnt.path()));
}

#[test]
fn mount_errors_are_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let cases: [(&Path, &str, &str); 3] = [
        (&missing, ":x", "does not exist"),
        (&file, ":x", "is not a directory"),
        (dir.path(), "x", "expected SERVER:EXPORT"),
    ];
    for (mnt, spec, want) in cases {
        let out = run(&["mount", spec, mnt.to_str().unwrap(), "--no-multicast"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(err.starts_with("vipc: error: ") && err.contains(want), "{spec} {}: {err:?}", mnt.display());
        assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    }
    // Read-ahead threads are bounded: a typo must not start thousands of threads.
    let out = run(&["mount", ":x", dir.path().to_str().unwrap(), "--dir-read-ahead", "1000"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.starts_with("vipc: error: ") && err.contains("0..=64"), "{err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    if fuse_unavailable().is_some() {
        return;
    }
    // An export nobody serves.
    let server = Server::start();
    let spec = format!("{}:nosuchexport", server.node.local_addr());
    let t0 = Instant::now();
    let out = run(&["mount", &spec, dir.path().to_str().unwrap(), "--host-id", "2", "--no-multicast"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.starts_with("vipc: error: ") && err.contains("not found"), "{err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
    assert!(t0.elapsed() < Duration::from_secs(15));
    assert!(!vipc_mount::is_mount_point(dir.path()));
}
