//! The namespaces of suite `groups`: `hosts` member hosts and one client on
//! a bridge, each running a bench peer, removed again when dropped (also
//! after an error; a bench killed outright leaves namespaces named
//! `vb<pid>-…`, which `ip netns list` shows).

use super::Fields;
use crate::error::Result;
pub use crate::netns::Setup;
use crate::netns::{in_namespace, ip, Namespaces};
use crate::peer::{parse_fields, Peer, PeerExe};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

const PORT: u16 = 7701;
const CLIENT_HOST: u16 = 250;

/// Counters of the member hosts, summed.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct HostStats {
    /// Hosts declared down by any host.
    pub hosts_down: u64,
    /// Messages taken by the silent members of the group of each size.
    pub received: BTreeMap<usize, u64>,
}

/// The running namespaces and peers.
pub struct Topology {
    client: Option<Peer>,
    hosts: Vec<Option<Peer>>,
    /// Removed once the peers are gone (fields drop in this order).
    namespaces: Namespaces,
}

/// The address of member host `i` (200: the client).
pub fn host_ip(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 87, 0, i)
}

impl Topology {
    /// Builds the bridge, `hosts` member hosts (host `i` joins the group of
    /// every size `≥ i`) and the client, and waits until the client sees
    /// every host alive.
    pub fn create(exe: &PeerExe, hosts: usize, sizes: &[usize]) -> std::result::Result<Topology, Setup> {
        let namespaces = Namespaces::new(exe, format!("vb{}-", std::process::id()))?;
        let mut t = Topology { hosts: Vec::new(), client: None, namespaces };
        let br = t.namespaces.add("br")?;
        ip(&["-n", &br, "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"]).map_err(Setup::Unavailable)?;
        ip(&["-n", &br, "link", "set", "br0", "up"]).map_err(Setup::Failed)?;
        for i in 1..=hosts + 1 {
            let ns = t.namespaces.add(&ns_suffix(i, hosts))?;
            add_port(&br, &ns, i, if i <= hosts { host_ip(i as u8) } else { host_ip(200) }).map_err(Setup::Failed)?;
        }
        let err = |e: crate::BenchError| Setup::Failed(format!("a peer did not start: {e}"));
        for i in 1..=hosts {
            let groups: Vec<String> = sizes.iter().filter(|&&s| s >= i).map(|s| s.to_string()).collect();
            let args = vec![
                "--listen".into(),
                format!("{}:{PORT}", host_ip(i as u8)),
                "--host".into(),
                i.to_string(),
                "--groups".into(),
                groups.join(","),
            ];
            let ns = t.namespaces.name(&ns_suffix(i, hosts));
            let peer = Peer::spawn(&in_namespace(exe, &ns), "group-host", &args).map_err(err)?;
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
        let client_ns = t.namespaces.name(&ns_suffix(hosts + 1, hosts));
        t.client = Some(Peer::spawn(&in_namespace(exe, &client_ns), "group-client", &args).map_err(err)?);
        Ok(t)
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
        Ok(self.host_stats()?.hosts_down)
    }

    /// The hosts' counters, summed over the live hosts.
    pub fn host_stats(&mut self) -> Result<HostStats> {
        let mut sum = HostStats::default();
        for h in self.hosts.iter_mut().flatten() {
            h.send_line("STATS")?;
            let line = h.read_line(Duration::from_secs(10))?;
            let f = parse_fields(line.strip_prefix("STATS").ok_or("bad STATS line")?);
            for (k, v) in f {
                let n: u64 = v.parse().map_err(|_| format!("bad STATS field {k}={v}"))?;
                if k == "hosts_down" {
                    sum.hosts_down += n;
                } else if let Some(size) = k.strip_prefix("recv_").and_then(|s| s.parse().ok()) {
                    *sum.received.entry(size).or_default() += n;
                }
            }
        }
        Ok(sum)
    }

    /// Every host starts sending ALL_REPLY back to back to the group of `size`.
    pub fn load_all(&mut self, size: usize) -> Result<()> {
        for h in self.hosts.iter_mut().flatten() {
            h.send_line(&format!("LOAD size={size}"))?;
            let line = h.read_line(Duration::from_secs(10))?;
            if line != "LOADED" {
                return Err(format!("host: {line}").into());
            }
        }
        Ok(())
    }

    /// Stops the hosts' load; the number of Sends they made.
    pub fn unload_all(&mut self) -> Result<u64> {
        let mut sends = 0;
        for h in self.hosts.iter_mut().flatten() {
            h.send_line("UNLOAD")?;
        }
        for h in self.hosts.iter_mut().flatten() {
            let line = h.read_line(Duration::from_secs(30))?;
            let f = parse_fields(line.strip_prefix("UNLOADED").ok_or_else(|| format!("host: {line}"))?);
            sends += f.get("sends").and_then(|v| v.parse::<u64>().ok()).ok_or("bad UNLOADED line")?;
        }
        Ok(sends)
    }

    /// SIGKILLs host `i` (1-based).
    pub fn kill_host(&mut self, i: usize) {
        if let Some(slot) = self.hosts.get_mut(i - 1) {
            slot.take(); // Peer's drop: SIGKILL and wait
        }
    }
}

/// The namespace of member host `i` (`h1`…), or the client's (`c`) past `hosts`.
fn ns_suffix(i: usize, hosts: usize) -> String {
    if i > hosts {
        "c".into()
    } else {
        format!("h{i}")
    }
}

/// Joins namespace `ns` to the bridge in `br` (port `p<i>`) at `addr`, multicast routed there.
fn add_port(br: &str, ns: &str, i: usize, addr: Ipv4Addr) -> std::result::Result<(), String> {
    let port = format!("p{i}");
    ip(&["-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", br])?;
    ip(&["-n", br, "link", "set", &port, "master", "br0", "up"])?;
    ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
    ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])
}
