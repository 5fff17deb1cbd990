//! The namespaces of suite `groups`: `hosts` member hosts and one client on
//! a bridge, each running a bench peer, removed again when dropped (also
//! after an error; a bench killed outright leaves namespaces named
//! `vb<pid>-…`, which `ip netns list` shows).

use super::Fields;
use crate::error::Result;
use crate::peer::{parse_fields, Peer, PeerExe};
use std::process::Command;
use std::time::Duration;

/// Why the namespaces could not be set up.
pub enum Setup {
    /// The machine cannot make them (not root, no iproute2, no namespaces):
    /// the suite is skipped.
    Unavailable(String),
    /// They were made but something failed: the item fails.
    Failed(String),
}

const PORT: u16 = 7701;
const CLIENT_HOST: u16 = 250;

/// The running namespaces and peers.
pub struct Topology {
    prefix: String,
    created: Vec<String>,
    hosts: Vec<Option<Peer>>,
    client: Option<Peer>,
}

fn ip(args: &[&str]) -> std::result::Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn host_ip(i: usize) -> String {
    format!("10.87.0.{i}")
}

impl Topology {
    /// Builds the bridge, `hosts` member hosts (host `i` joins the group of
    /// every size `≥ i`) and the client, and waits until the client sees
    /// every host alive.
    pub fn create(exe: &PeerExe, hosts: usize, sizes: &[usize]) -> std::result::Result<Topology, Setup> {
        let prefix = format!("vb{}-", std::process::id());
        let mut t = Topology { prefix: prefix.clone(), created: Vec::new(), hosts: Vec::new(), client: None };
        let br = format!("{prefix}br");
        ip(&["netns", "add", &br])
            .map_err(|e| Setup::Unavailable(format!("cannot create a network namespace ({e})")))?;
        t.created.push(br.clone());
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"]).map_err(Setup::Unavailable)?;
        ip(&["-n", &br, "link", "set", "br0", "up"]).map_err(Setup::Failed)?;
        for i in 1..=hosts + 1 {
            let ns = t.ns(i, hosts);
            t.add_namespace(&br, &ns, i, if i <= hosts { host_ip(i) } else { host_ip(200) }).map_err(Setup::Failed)?;
        }
        let err = |e: crate::BenchError| Setup::Failed(format!("a peer did not start: {e}"));
        for i in 1..=hosts {
            let groups: Vec<String> = sizes.iter().filter(|&&s| s >= i).map(|s| s.to_string()).collect();
            let args = vec![
                "--listen".into(),
                format!("{}:{PORT}", host_ip(i)),
                "--host".into(),
                i.to_string(),
                "--groups".into(),
                groups.join(","),
            ];
            let peer = Peer::spawn(&in_namespace(exe, &t.ns(i, hosts)), "group-host", &args).map_err(err)?;
            t.hosts.push(Some(peer));
        }
        let args = vec![
            "--listen".into(),
            format!("{}:{PORT}", host_ip(200)),
            "--host".into(),
            CLIENT_HOST.to_string(),
            "--expect".into(),
            hosts.to_string(),
        ];
        t.client = Some(Peer::spawn(&in_namespace(exe, &t.ns(hosts + 1, hosts)), "group-client", &args).map_err(err)?);
        Ok(t)
    }

    fn ns(&self, i: usize, hosts: usize) -> String {
        if i > hosts {
            format!("{}c", self.prefix)
        } else {
            format!("{}h{i}", self.prefix)
        }
    }

    fn add_namespace(&mut self, br: &str, ns: &str, i: usize, addr: String) -> std::result::Result<(), String> {
        ip(&["netns", "add", ns])?;
        self.created.push(ns.to_string());
        let port = format!("p{i}");
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        ip(&["-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", br])?;
        ip(&["-n", br, "link", "set", &port, "master", "br0", "up"])?;
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
        ip(&["-n", ns, "link", "set", "eth0", "up"])?;
        ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])
    }

    /// The number of member hosts.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    fn client(&mut self) -> Result<&mut Peer> {
        self.client.as_mut().ok_or_else(|| "the client is gone".into())
    }

    /// Sends a command line to the client.
    pub fn send(&mut self, line: &str) -> Result<()> {
        self.client()?.send_line(line)
    }

    /// Reads lines until `want`.
    pub fn expect_line(&mut self, want: &str) -> Result<()> {
        let line = self.client()?.read_line(Duration::from_secs(30))?;
        if line == want {
            Ok(())
        } else {
            Err(format!("expected {want:?} from the client, got {line:?}").into())
        }
    }

    /// The client's answer to the last command: `RESULT k=v …`, or its error.
    pub fn answer(&mut self, within: Duration) -> Result<Fields> {
        let line = self.client()?.read_line(within)?;
        match line.strip_prefix("RESULT") {
            Some(rest) => Ok(parse_fields(rest).into_iter().collect()),
            None => Err(format!("client: {}", line.strip_prefix("ERROR ").unwrap_or(&line)).into()),
        }
    }

    /// Sends a command and waits up to `within` for its answer.
    pub fn ask_within(&mut self, line: &str, within: Duration) -> Result<Fields> {
        self.send(line)?;
        self.answer(within)
    }

    /// Sends a command and waits for its answer (a few minutes at most).
    pub fn ask(&mut self, line: &str) -> Result<Fields> {
        self.ask_within(line, Duration::from_secs(300))
    }

    /// The sum of the hosts' "declared down" counters.
    pub fn hosts_down(&mut self) -> Result<u64> {
        let mut sum = 0;
        for h in self.hosts.iter_mut().flatten() {
            h.send_line("STATS")?;
            let line = h.read_line(Duration::from_secs(10))?;
            let f = parse_fields(line.strip_prefix("STATS").unwrap_or(""));
            sum += f.get("hosts_down").and_then(|v| v.parse::<u64>().ok()).ok_or("bad STATS line")?;
        }
        Ok(sum)
    }

    /// SIGKILLs host `i` (1-based).
    pub fn kill_host(&mut self, i: usize) {
        if let Some(slot) = self.hosts.get_mut(i - 1) {
            slot.take(); // Peer's drop: SIGKILL and wait
        }
    }
}

/// `exe` run inside namespace `ns` (`ip netns exec` execs it, so the peer's
/// pid is the program's own).
fn in_namespace(exe: &PeerExe, ns: &str) -> PeerExe {
    let mut prefix = vec!["netns".to_string(), "exec".to_string(), ns.to_string()];
    prefix.push(exe.program.to_string_lossy().into_owned());
    prefix.extend(exe.prefix.iter().cloned());
    PeerExe { program: "ip".into(), prefix }
}

impl Drop for Topology {
    fn drop(&mut self) {
        self.client.take();
        self.hosts.clear();
        for ns in self.created.drain(..).rev() {
            // Anything still running in our own namespaces was started by us.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}
