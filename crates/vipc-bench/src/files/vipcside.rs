//! The vipc side of the suite: a file server in a separate OS process (peer
//! `fs-server`), an [`FsClient`] on a node of the bench's own, and, when this
//! build of `vipc` has them, the FUSE mount (`vipc mount`) and `vipc cp`.

use crate::error::{BenchError, Result};
use crate::peer::{announce, stdin_lines, Peer, PeerArgs, PeerExe};
use crate::vserver::node_config;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vipc::{Node, Pid};
use vipc_fs::{ExportConfig, FileServer, FsClient};

/// The export's name.
pub const EXPORT: &str = "bench";

/// Worker processes of the file server.
pub const WORKERS: usize = 8;

/// The step `vipc cp` writes a local file in (its `WRITE_PIECE`), for the local copy beside it.
pub const CP_CHUNK: usize = vipc_fs::proto::DEFAULT_UNIT;

/// The file server peer (`fs-server --host H --dir D`): a node exporting D
/// as [`EXPORT`], plus an echo process for the Send–Receive–Reply baseline;
/// READY `addr=` `echo=` (raw pid); runs until stdin closes.
pub fn fs_server_peer(a: &PeerArgs) -> Result<()> {
    let node = Node::start(node_config(a.get("host")?, Vec::new(), None))?;
    let dir: String = a.get("dir")?;
    let cfg = ExportConfig { name: EXPORT.into(), dir: PathBuf::from(dir), read_only: false, workers: WORKERS };
    let _server = FileServer::start(&node, cfg).map_err(|e| BenchError::Other(format!("file server: {e}")))?;
    let echo = vipc::services::spawn_echo(&node, None)?;
    announce(&[("addr", node.local_addr().to_string()), ("echo", echo.0.to_string())]);
    stdin_lines().wait_for_close()
}

/// The running file server and a client node of the bench's own.
pub struct VipcSide {
    _peer: Peer,
    /// The server node's address.
    pub addr: SocketAddr,
    /// The echo process on the server node.
    pub echo: Pid,
    /// The client node (in the bench process).
    pub node: Node,
    /// A client of the export.
    pub client: FsClient,
}

impl std::fmt::Debug for VipcSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VipcSide").field("addr", &self.addr).finish()
    }
}

impl VipcSide {
    /// Starts the server peer on logical host `server_host` exporting `dir`,
    /// and a client node on `client_host`.
    pub fn start(exe: &PeerExe, dir: &Path, server_host: u16, client_host: u16) -> Result<VipcSide> {
        let args = ["--host".to_string(), server_host.to_string(), "--dir".into(), dir.display().to_string()];
        let peer = Peer::spawn(exe, "fs-server", &args)?;
        let addr: SocketAddr = peer.parsed("addr")?;
        let echo = Pid(peer.parsed("echo")?);
        let node = Node::start(node_config(client_host, vec![addr], None))?;
        let client = FsClient::connect(&node, EXPORT).map_err(|e| BenchError::Other(format!("FsClient: {e}")))?;
        Ok(VipcSide { _peer: peer, addr, echo, node, client })
    }

    /// Another client of the export on the same node (a separate pool of processes).
    pub fn new_client(&self) -> Result<FsClient> {
        FsClient::connect(&self.node, EXPORT).map_err(|e| BenchError::Other(format!("FsClient: {e}")))
    }

    /// `ADDR:EXPORT`, as `vipc mount` takes it.
    pub fn spec(&self) -> String {
        format!("{}:{EXPORT}", self.addr)
    }
}

/// Whether the `vipc` binary of this run has subcommand `sub` (`vipc SUB --help` succeeds).
pub fn has_subcommand(exe: &PeerExe, sub: &str) -> bool {
    Command::new(&exe.program)
        .args([sub, "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A `vipc mount` child process; unmounted (SIGTERM, then a lazy unmount) when dropped.
#[derive(Debug)]
pub struct VipcMount {
    child: Child,
    /// The mount point.
    pub dir: PathBuf,
}

impl VipcMount {
    /// Runs `vipc mount SPEC DIR --host-id HOST --no-multicast` and waits for its "mounted on" line.
    pub fn start(exe: &PeerExe, spec: &str, dir: &Path, host: u16) -> Result<VipcMount> {
        std::fs::create_dir_all(dir)?;
        let mut child = Command::new(&exe.program)
            .args(["mount", spec])
            .arg(dir)
            .args(["--host-id", &host.to_string(), "--no-multicast"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("vipc mount: no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let m = VipcMount { child, dir: dir.to_path_buf() };
        let t = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(l) if l.contains("mounted on") => return Ok(m),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err("vipc mount exited before mounting".into()),
                Err(mpsc::RecvTimeoutError::Timeout) if t.elapsed() > Duration::from_secs(20) => {
                    return Err("vipc mount did not mount within 20 s".into())
                }
                Err(_) => {}
            }
        }
    }
}

impl Drop for VipcMount {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        super::ssh::unmount(&self.dir);
    }
}

/// Runs `vipc cp EXPORT:PATH DEST` from a node of its own
/// (logical host `host`, the server as static peer) and returns the rate it
/// reports on its summary line (`... bytes in S s (R MB/s)`), which leaves out
/// the node's start-up.
pub fn cp_rate(exe: &PeerExe, v: &VipcSide, path: &str, dest: &Path, host: u16) -> Result<f64> {
    let out = Command::new(&exe.program)
        .arg("cp")
        .arg(format!("{EXPORT}:{path}"))
        .arg(dest)
        .args(["--host-id", &host.to_string(), "--no-multicast", "--peer", &v.addr.to_string()])
        .stdin(Stdio::null())
        .output()?;
    let _ = std::fs::remove_file(dest);
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("vipc cp failed ({}): {}", out.status, err.trim()).into());
    }
    parse_rate(&text).ok_or_else(|| BenchError::Other(format!("vipc cp: no rate in its summary {text:?}")))
}

/// The `R` of `(R MB/s)` in `vipc cp`'s summary line.
pub fn parse_rate(summary: &str) -> Option<f64> {
    let end = summary.rfind(" MB/s)")?;
    let start = summary[..end].rfind('(')? + 1;
    summary[start..end].trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cp_summary_rate() {
        let s = "vipc cp: cpt:f.bin -> /tmp/out.bin: 67108864 bytes in 0.21 s (314.7 MB/s)\n";
        assert_eq!(super::parse_rate(s), Some(314.7));
        assert_eq!(super::parse_rate("copied"), None);
    }
}
