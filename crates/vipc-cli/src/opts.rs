//! The node flags shared by `node`, `ping` and `stat`, the TOML file they may
//! come from, and their translation into a [`vipc::NodeConfig`].

use crate::error::{CliError, CliResult};
use clap::Args;
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;
use vipc::{AuthKey, Broadcast, FaultConfig, HostIdConfig, Multicast, NodeConfig};

/// Parses `IP:PORT` with a one-line error.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("invalid address {s:?}: expected IP:PORT (e.g. 127.0.0.1:7701 or [::1]:7701)"))
}

/// Parses a peer: `IP:PORT`, or `HOST:PORT` resolved now (its first
/// address), as `vipc mount SERVER:EXPORT` takes it.
pub fn parse_peer(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let shaped = s.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !shaped {
        return Err(format!(
            "invalid peer {s:?}: expected IP:PORT or HOST:PORT (e.g. 127.0.0.1:7701, [::1]:7701, server:7701)"
        ));
    }
    match s.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Ok(addr),
        Ok(None) => Err(format!("peer {s:?}: the name has no address")),
        Err(e) => Err(format!("peer {s:?}: cannot resolve the name: {e}")),
    }
}

/// Parses an IPv4 `IP:PORT` for the multicast group.
pub fn parse_group(s: &str) -> Result<SocketAddrV4, String> {
    s.parse().map_err(|_| format!("invalid multicast group {s:?}: expected IPv4:PORT (e.g. 239.255.86.73:7700)"))
}

/// Parses an IPv4 interface address.
pub fn parse_ipv4(s: &str) -> Result<Ipv4Addr, String> {
    s.parse().map_err(|_| format!("invalid interface {s:?}: expected an IPv4 address (e.g. 127.0.0.1)"))
}

/// Parses a logical host id, decimal or `0x` hex, in 1..=0x7fff.
pub fn parse_host(s: &str) -> Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse::<u32>(),
    };
    match v {
        Ok(v) if (1..=vipc_max_host()).contains(&v) => Ok(v as u16),
        _ => Err(format!("invalid logical host {s:?}: expected 1..=32767 (decimal or 0x hex)")),
    }
}

fn vipc_max_host() -> u32 {
    0x7fff
}

/// Flags that configure the node a command runs.
#[derive(Args, Debug, Default, Clone)]
pub struct NodeArgs {
    /// Address of the node's UDP socket [default: an ephemeral port on the --interface address, else on 127.0.0.1; with an IPv6 static peer, on [::1] if that peer is a loopback address, else on [::]].
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub listen: Option<SocketAddr>,
    /// Fixed logical host id (decimal or 0x hex) [default: allocated on the broadcast channel].
    #[arg(long, value_name = "N", value_parser = parse_host)]
    pub host_id: Option<u16>,
    /// Static peer that gets every broadcast, IP:PORT or HOST:PORT (repeatable).
    #[arg(long = "peer", value_name = "ADDR", value_parser = parse_peer)]
    pub peers: Vec<SocketAddr>,
    /// Multicast group of the broadcast channel [default: 239.255.86.73:7700].
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_group)]
    pub group: Option<SocketAddrV4>,
    /// Interface address for multicast [default: 127.0.0.1].
    #[arg(long, value_name = "IP", value_parser = parse_ipv4)]
    pub interface: Option<Ipv4Addr>,
    /// No multicast: broadcasts and group Sends go by unicast to the static peers and the alive hosts.
    #[arg(long)]
    pub no_multicast: bool,
    /// Cluster key file (from `vipc keygen`): every packet is authenticated.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Read settings from a TOML file (flags override it).
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// T_r: retransmission interval in milliseconds [default: 20].
    #[arg(long, value_name = "N")]
    pub retransmit_ms: Option<u64>,
    /// T_t: timeout in milliseconds [default: 1000].
    #[arg(long, value_name = "N")]
    pub timeout_ms: Option<u64>,
    /// MoveTo/MoveFrom fail if slower than N KiB/s after a first T_t [default: 256; 0: never].
    #[arg(long, value_name = "N")]
    pub min_stream_kib: Option<u64>,
    /// Testing: drop this fraction (0..1) of outgoing datagrams.
    #[arg(long, value_name = "P", value_parser = parse_probability, default_value_t = 0.0)]
    pub loss: f64,
    /// Testing: send this fraction (0..1) of outgoing datagrams twice.
    #[arg(long, value_name = "P", value_parser = parse_probability, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Testing: delay this fraction (0..1) of outgoing datagrams so later ones overtake them.
    #[arg(long, value_name = "P", value_parser = parse_probability, default_value_t = 0.0)]
    pub reorder: f64,
    /// Testing: seed of the fault generator.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub fault_seed: u64,
}

/// Parses a probability in 0..=1.
pub fn parse_probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("invalid probability {s:?}: expected a number from 0 to 1")),
    }
}

/// The TOML configuration file: the same settings as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Listen address.
    pub listen: Option<String>,
    /// Fixed logical host id.
    pub host_id: Option<u16>,
    /// Static peers.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Multicast group.
    pub group: Option<String>,
    /// Multicast interface.
    pub interface: Option<String>,
    /// Multicast on (default) or off.
    pub multicast: Option<bool>,
    /// Key file; a relative path is relative to the TOML file.
    pub key_file: Option<String>,
    /// T_r in milliseconds.
    pub retransmit_ms: Option<u64>,
    /// T_t in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Slowest bulk transfer in KiB/s (0: no limit).
    pub min_stream_kib: Option<u64>,
}

/// Reads a key file.
pub fn read_key(path: &Path) -> CliResult<AuthKey> {
    let text =
        std::fs::read_to_string(path).map_err(|e| CliError(format!("cannot read key file {}: {e}", path.display())))?;
    AuthKey::from_hex(&text).map_err(|e| CliError(format!("key file {}: {e}", path.display())))
}

impl NodeArgs {
    /// The node configuration these flags (and the config file) describe.
    pub fn build(&self) -> CliResult<NodeConfig> {
        let file = match &self.config {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| CliError(format!("cannot read config file {}: {e}", p.display())))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| CliError(format!("config file {}: {}", p.display(), e.message())))?
            }
            None => FileConfig::default(),
        };
        let base = self.config.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));

        let mut peers = self.peers.clone();
        for p in &file.peers {
            peers.push(parse_peer(p)?);
        }
        let group = match (self.group, &file.group) {
            (Some(g), _) => Some(g),
            (None, Some(s)) => Some(parse_group(s)?),
            (None, None) => None,
        };
        let interface = match (self.interface, &file.interface) {
            (Some(i), _) => Some(i),
            (None, Some(s)) => Some(parse_ipv4(s)?),
            (None, None) => None,
        };
        // Without a listen address: an ephemeral port on the multicast
        // interface, or on the loopback of the peers' address family.
        let listen = match (self.listen, &file.listen) {
            (Some(a), _) => a,
            (None, Some(s)) => parse_addr(s)?,
            (None, None) => match (interface, peers.iter().find(|p| p.is_ipv6())) {
                (Some(i), _) => SocketAddr::from((i, 0)),
                (None, Some(p)) if p.ip().is_loopback() => SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
                (None, Some(_)) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
                (None, None) => SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            },
        };
        let multicast_on = !self.no_multicast && file.multicast.unwrap_or(true);
        // An IPv6 node without an explicit group uses static peers only.
        let multicast = if multicast_on && (listen.is_ipv4() || group.is_some()) {
            let mut m = Multicast::default();
            if let Some(g) = group {
                m.group = g;
            }
            if let Some(i) = interface {
                m.interface = i;
            }
            Some(m)
        } else {
            None
        };
        let key = match (&self.key, &file.key_file) {
            (Some(p), _) => Some(read_key(p)?),
            (None, Some(p)) => Some(read_key(&base.join(p))?),
            (None, None) => None,
        };
        let mut cfg = NodeConfig {
            listen,
            host_id: match self.host_id.or(file.host_id) {
                Some(h) => HostIdConfig::Fixed(h),
                None => HostIdConfig::Allocate,
            },
            key,
            broadcast: Broadcast { multicast, peers },
            faults: FaultConfig {
                loss: self.loss,
                duplicate: self.duplicate,
                reorder: self.reorder,
                seed: self.fault_seed,
            },
            ..NodeConfig::default()
        };
        if let Some(ms) = self.retransmit_ms.or(file.retransmit_ms) {
            if ms == 0 {
                return Err("--retransmit-ms must be at least 1".into());
            }
            cfg.engine.retransmit = Duration::from_millis(ms);
        }
        if let Some(ms) = self.timeout_ms.or(file.timeout_ms) {
            if ms == 0 {
                return Err("--timeout-ms must be at least 1".into());
            }
            cfg.engine.timeout = Duration::from_millis(ms);
        }
        if let Some(kib) = self.min_stream_kib.or(file.min_stream_kib) {
            cfg.engine.min_stream_rate = kib.saturating_mul(1024);
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--min-stream-kib` and the file's `min_stream_kib` set the engine's
    /// rate in bytes (the flag winning); 0 turns the cap off; unset, the default.
    #[test]
    fn min_stream_kib_sets_the_engines_rate() {
        let build = |kib: Option<u64>, config: Option<PathBuf>| {
            NodeArgs { min_stream_kib: kib, config, ..NodeArgs::default() }.build().unwrap().engine.min_stream_rate
        };
        assert_eq!(build(None, None), vipc::EngineConfig::default().min_stream_rate);
        assert_eq!(build(Some(64), None), 64 << 10);
        assert_eq!(build(Some(0), None), 0);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, "min_stream_kib = 8\n").unwrap();
        assert_eq!(build(None, Some(file.clone())), 8 << 10);
        assert_eq!(build(Some(16), Some(file)), 16 << 10, "the flag wins");
    }

    /// A peer's name that does not resolve says so; a malformed one shows the forms.
    #[test]
    fn peers_are_addresses_or_names_that_resolve() {
        assert_eq!(parse_peer("127.0.0.1:7701"), Ok("127.0.0.1:7701".parse().unwrap()));
        assert_eq!(parse_peer("localhost:7701").map(|a| a.port()), Ok(7701));
        let e = parse_peer("nohost.invalid:7701").unwrap_err();
        assert!(e.starts_with("peer \"nohost.invalid:7701\": cannot resolve the name"), "{e}");
        for bad in ["7701", "server", ":7701", "server:99999"] {
            let e = parse_peer(bad).unwrap_err();
            assert!(e.starts_with(&format!("invalid peer {bad:?}: expected IP:PORT or HOST:PORT")), "{e}");
        }
    }
}
