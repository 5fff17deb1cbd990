//! Baselines and servers run as real programs in separate OS processes.
//!
//! The bench spawns its own executable with a hidden subcommand (for the
//! `vipc` binary: `vipc bench-peer KIND --key value …`). A peer prints one
//! line `READY key=value …` on stdout when it is serving, may then be driven
//! by lines on its stdin (`GO`), and exits when its stdin closes (once it has
//! answered the lines it read), so that no peer outlives the bench even if
//! the bench is killed.

use crate::error::{BenchError, Result};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

/// How to start a peer: a program and the arguments that come before the peer's kind.
#[derive(Clone, Debug)]
pub struct PeerExe {
    /// The executable (for the CLI: `vipc` itself).
    pub program: PathBuf,
    /// Arguments before the kind (for the CLI: `["bench-peer"]`).
    pub prefix: Vec<String>,
}

impl PeerExe {
    /// The running executable with `prefix` (e.g. `["bench-peer"]`).
    pub fn current(prefix: &[&str]) -> Result<PeerExe> {
        Ok(PeerExe { program: std::env::current_exe()?, prefix: prefix.iter().map(|s| s.to_string()).collect() })
    }
}

/// How long a peer may take to print its READY line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A running peer process. Dropping it closes its stdin and kills it.
pub struct Peer {
    kind: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    fields: HashMap<String, String>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("kind", &self.kind).field("pid", &self.child.id()).finish()
    }
}

impl Peer {
    /// Starts peer `kind` with `args` and waits for its READY line.
    pub fn spawn(exe: &PeerExe, kind: &str, args: &[String]) -> Result<Peer> {
        let mut child = Command::new(&exe.program)
            .args(&exe.prefix)
            .arg(kind)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Peer { name: kind.into(), msg: format!("cannot start {:?}: {e}", exe.program) })?;
        let stdin = child.stdin.take();
        let stdout =
            child.stdout.take().ok_or_else(|| BenchError::Peer { name: kind.into(), msg: "no stdout".into() })?;
        let (tx, lines) = mpsc::channel();
        std::thread::Builder::new().name(format!("peer-{kind}")).spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                }
            }
        })?;
        let mut peer = Peer { kind: kind.to_string(), child, stdin, lines, fields: HashMap::new() };
        let line = peer.read_line(READY_TIMEOUT)?;
        let rest =
            line.strip_prefix("READY").ok_or_else(|| peer.error(format!("expected a READY line, got {line:?}")))?;
        peer.fields = parse_fields(rest);
        Ok(peer)
    }

    fn error(&self, msg: String) -> BenchError {
        BenchError::Peer { name: self.kind.clone(), msg }
    }

    /// A field of the READY line.
    pub fn field(&self, key: &str) -> Result<&str> {
        self.fields.get(key).map(String::as_str).ok_or_else(|| self.error(format!("the READY line has no {key}=")))
    }

    /// A field of the READY line, parsed.
    pub fn parsed<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let v = self.field(key)?;
        v.parse().map_err(|_| self.error(format!("bad {key}={v}")))
    }

    /// The peer's OS process id.
    pub fn os_pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one line to the peer's stdin.
    pub fn send_line(&mut self, line: &str) -> Result<()> {
        let kind = self.kind.clone();
        let stdin = self.stdin.as_mut().ok_or_else(|| BenchError::Peer { name: kind, msg: "stdin closed".into() })?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// The next line the peer prints, waiting at most `timeout`.
    pub fn read_line(&mut self, timeout: Duration) -> Result<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => Ok(l),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(self.error(format!("no answer within {timeout:?}"))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.child.try_wait().ok().flatten();
                Err(self.error(format!("exited ({status:?})")))
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses ` key=value key=value`.
pub fn parse_fields(s: &str) -> HashMap<String, String> {
    s.split_whitespace().filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

/// The child's side: announce readiness with fields.
pub fn announce(fields: &[(&str, String)]) {
    let mut line = String::from("READY");
    for (k, v) in fields {
        line.push_str(&format!(" {k}={v}"));
    }
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints one line on stdout (a peer's answer).
pub fn say(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The child's side, for a peer that takes commands: the lines of stdin, in
/// order. Each line read is answered: the process exits when it asks for the
/// next line after stdin has closed (a script piped in is answered in full).
pub fn stdin_lines() -> StdinLines {
    let (tx, rx) = mpsc::channel();
    let _ = std::thread::Builder::new().name("peer-stdin".into()).spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    StdinLines(rx)
}

/// The child's side, for a peer that takes no commands: the process exits
/// as soon as stdin closes, whatever its threads are doing.
pub fn exit_when_stdin_closes() {
    let _ = std::thread::Builder::new().name("peer-stdin".into()).spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(0);
    });
}

/// The lines of a peer's stdin ([`stdin_lines`]).
pub struct StdinLines(Receiver<String>);

impl StdinLines {
    /// Reads and ignores lines until stdin closes, then exits the process.
    pub fn wait_for_close(self) -> ! {
        self.for_each(drop);
        unreachable!("StdinLines ends by exiting the process")
    }
}

impl Iterator for StdinLines {
    type Item = String;

    /// The next line; once stdin has closed, exits the process (code 0).
    fn next(&mut self) -> Option<String> {
        match self.0.recv() {
            Ok(line) => Some(line),
            Err(_) => std::process::exit(0),
        }
    }
}

/// Arguments of a peer: `--key value` pairs and bare `--flag`s.
#[derive(Debug, Default)]
pub struct PeerArgs {
    map: HashMap<String, String>,
}

impl PeerArgs {
    /// Parses `--key value` / `--flag` arguments.
    pub fn parse(args: &[String]) -> Result<PeerArgs> {
        let mut map = HashMap::new();
        let mut i = 0;
        while i < args.len() {
            let key = args[i].strip_prefix("--").ok_or_else(|| format!("unexpected argument {:?}", args[i]))?;
            match args.get(i + 1) {
                Some(v) if !v.starts_with("--") => {
                    map.insert(key.to_string(), v.clone());
                    i += 2;
                }
                _ => {
                    map.insert(key.to_string(), String::new());
                    i += 1;
                }
            }
        }
        Ok(PeerArgs { map })
    }

    /// A required value.
    pub fn get<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        let v = self.map.get(key).ok_or_else(|| format!("missing --{key}"))?;
        v.parse().map_err(|_| BenchError::Other(format!("bad --{key} {v:?}")))
    }

    /// An optional value.
    pub fn opt<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        match self.map.contains_key(key) {
            true => self.get(key).map(Some),
            false => Ok(None),
        }
    }

    /// True if `--key` was given.
    pub fn flag(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }
}

/// The hidden entry point: runs peer `args[0]` with the rest of `args`.
/// Returns when the peer is done (most run until their stdin closes).
pub fn peer_main(args: &[String]) -> Result<()> {
    let (kind, rest) = args.split_first().ok_or("missing the peer kind")?;
    let a = PeerArgs::parse(rest)?;
    match kind.as_str() {
        "udp-echo" => crate::udp::echo_peer(&a),
        "udp-client" => crate::udp::client_peer(&a),
        "tcp-echo" => crate::tcp::echo_peer(&a),
        "zmq-rep" => crate::zmq_rr::rep_peer(&a),
        "grpc-echo" => crate::grpc::server_peer(&a),
        "vipc-server" => crate::vserver::server_peer(&a),
        "rmem-owner" => crate::rmem::owner_peer(&a),
        "typed-server" => crate::typed::server_peer(&a),
        "block-receiver" => crate::layers::receiver_peer(&a),
        "rapid-server" => crate::layers::rapid_peer(&a),
        "file-styles-server" => crate::filestyles::server_peer(&a),
        "names-clerk" => crate::names::clerk_peer(&a),
        "vipc-client" => crate::vserver::client_peer(&a),
        "link-client" => crate::link::client_peer(&a),
        "fs-server" => crate::files::vipcside::fs_server_peer(&a),
        "group-host" => crate::groups::peers::host_peer(&a),
        "group-client" => crate::groups::peers::client_peer(&a),
        "group-reaper" => crate::netns::reaper_peer(&a),
        crate::apps_procs::KIND => crate::apps_procs::worker_peer(&a),
        other => Err(format!("unknown peer kind {other:?}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_args_parse() {
        let f = parse_fields(" addr=127.0.0.1:5 pid=0001.0002");
        assert_eq!(f["addr"], "127.0.0.1:5");
        assert_eq!(f["pid"], "0001.0002");
        let a = PeerArgs::parse(&["--addr".into(), "x".into(), "--spin".into(), "--n".into(), "5".into()]).unwrap();
        assert_eq!(a.get::<String>("addr").unwrap(), "x");
        assert!(a.flag("spin"));
        assert_eq!(a.get::<u32>("n").unwrap(), 5);
        assert_eq!(a.opt::<u32>("m").unwrap(), None);
        assert!(a.get::<u32>("addr").is_err());
        assert!(PeerArgs::parse(&["bare".into()]).is_err());
    }
}
