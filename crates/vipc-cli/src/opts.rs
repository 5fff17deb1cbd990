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

/// Parses a wait in milliseconds, at most an hour (as T_t): a longer one is a typo.
pub fn parse_wait_ms(s: &str) -> Result<u64, String> {
    const HOUR_MS: u64 = 3_600_000;
    match s.parse::<u64>() {
        Ok(ms) if ms <= HOUR_MS => Ok(ms),
        _ => Err(format!("{s:?} is not a wait in milliseconds from 0 to {HOUR_MS} (an hour)")),
    }
}

/// Parses an IPv4 `IP:PORT` for the multicast group.
pub fn parse_group(s: &str) -> Result<SocketAddrV4, String> {
    let bad = |why: &str| format!("invalid multicast group {s:?}: {why} (e.g. 239.255.86.73:7700)");
    let group: SocketAddrV4 = s.parse().map_err(|_| bad("expected IPv4:PORT"))?;
    if !group.ip().is_multicast() {
        return Err(bad("not a multicast address (224.0.0.0/4)"));
    }
    if group.port() == 0 {
        return Err(bad("port 0 would be a different port on every node"));
    }
    Ok(group)
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
    /// Address of the node's UDP socket [default: an ephemeral port on the --interface address; else on 127.0.0.1, or on 0.0.0.0 if a static peer is not a loopback address; with IPv6 static peers, on [::1] or [::] alike].
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
    let text = read_small_file(path, "key file", 4 << 10)?;
    AuthKey::from_hex(&text).map_err(|e| CliError(format!("key file {}: {e}", path.display())))
}

/// The text of the regular file `path`, at most `limit` bytes: a FIFO, a
/// device or a huge file is refused rather than waited on or read to the end.
fn read_small_file(path: &Path, what: &str, limit: u64) -> CliResult<String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| CliError(format!("cannot read {what} {}: {e}", path.display()));
    if !std::fs::metadata(path).map_err(cannot)?.is_file() {
        return Err(CliError(format!("{what} {} is not a regular file", path.display())));
    }
    let mut text = String::new();
    std::fs::File::open(path).map_err(cannot)?.take(limit + 1).read_to_string(&mut text).map_err(cannot)?;
    if text.len() as u64 > limit {
        return Err(CliError(format!("{what} {} is larger than {limit} bytes", path.display())));
    }
    Ok(text)
}

/// Without a listen address: an ephemeral port on the multicast interface;
/// else on the loopback of the peers' address family if every peer of it
/// is there, on the wildcard address if one is elsewhere (a socket bound to
/// loopback cannot reach another machine: `vipc cp --peer 192.0.2.10:7701`
/// on machine B found nobody).
fn default_listen(interface: Option<Ipv4Addr>, peers: &[SocketAddr]) -> SocketAddr {
    let beyond = |v6: bool| peers.iter().any(|p| p.is_ipv6() == v6 && !p.ip().is_loopback());
    match interface {
        Some(i) => SocketAddr::from((i, 0)),
        None if peers.iter().any(|p| p.is_ipv6()) && beyond(true) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        None if peers.iter().any(|p| p.is_ipv6()) => SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
        None if beyond(false) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
        None => SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
    }
}

/// "line L, column C: " of byte `at` in `text` (both counted from 1), to
/// find a syntax error in a long file.
fn line_and_column(text: &str, at: usize) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("line {line}, column {column}: ")
}

impl NodeArgs {
    /// The node configuration these flags (and the config file) describe.
    pub fn build(&self) -> CliResult<NodeConfig> {
        let file = match &self.config {
            Some(p) => {
                let text = read_small_file(p, "config file", 1 << 20)?;
                toml::from_str::<FileConfig>(&text).map_err(|e| {
                    let at = e.span().map(|s| line_and_column(&text, s.start)).unwrap_or_default();
                    CliError(format!("config file {}: {at}{}", p.display(), e.message()))
                })?
            }
            None => FileConfig::default(),
        };
        let base = self.config.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
        // A value from the file is wrong in the file: say which.
        let in_file = |e: String| match &self.config {
            Some(p) => CliError(format!("config file {}: {e}", p.display())),
            None => CliError(e),
        };

        let mut peers = self.peers.clone();
        for p in &file.peers {
            peers.push(parse_peer(p).map_err(in_file)?);
        }
        let group = match (self.group, &file.group) {
            (Some(g), _) => Some(g),
            (None, Some(s)) => Some(parse_group(s).map_err(in_file)?),
            (None, None) => None,
        };
        let interface = match (self.interface, &file.interface) {
            (Some(i), _) => Some(i),
            (None, Some(s)) => Some(parse_ipv4(s).map_err(in_file)?),
            (None, None) => None,
        };
        let listen = match (self.listen, &file.listen) {
            (Some(a), _) => a,
            (None, Some(s)) => parse_addr(s).map_err(in_file)?,
            (None, None) => default_listen(interface, &peers),
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
            host_id: match (self.host_id, file.host_id) {
                (Some(h), _) => HostIdConfig::Fixed(h),
                (None, Some(h)) if h == 0 || u32::from(h) > vipc_max_host() => {
                    return Err(in_file(format!("host_id {h} is outside 1..={}", vipc_max_host())))
                }
                (None, Some(h)) => HostIdConfig::Fixed(h),
                (None, None) => HostIdConfig::Allocate,
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
        // Milliseconds of a flag or else of the file's key, at least 1.
        let ms = |flag: Option<u64>, key: Option<u64>, flag_name: &str, key_name: &str| match (flag, key) {
            (Some(0), _) => Err(CliError(format!("{flag_name} must be at least 1"))),
            (None, Some(0)) => Err(in_file(format!("{key_name} must be at least 1"))),
            (f, k) => Ok(f.or(k).map(Duration::from_millis)),
        };
        if let Some(t) = ms(self.retransmit_ms, file.retransmit_ms, "--retransmit-ms", "retransmit_ms")? {
            cfg.engine.retransmit = t;
        }
        if let Some(t) = ms(self.timeout_ms, file.timeout_ms, "--timeout-ms", "timeout_ms")? {
            cfg.engine.timeout = t;
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

    /// With no listen address or interface, a node binds loopback only when
    /// all its peers (of the family it uses, IPv6 if any) are there.
    #[test]
    fn the_default_listen_address_reaches_the_peers() {
        let peers = |list: &[&str]| list.iter().map(|p| p.parse().unwrap()).collect::<Vec<SocketAddr>>();
        for (list, want) in [
            (&[][..], "127.0.0.1:0"),
            (&["127.0.0.1:7701"][..], "127.0.0.1:0"),
            (&["192.0.2.10:7701"][..], "0.0.0.0:0"),
            (&["127.0.0.1:7701", "192.0.2.10:7701"][..], "0.0.0.0:0"),
            (&["[::1]:7701"][..], "[::1]:0"),
            (&["[2001:db8::2]:7701"][..], "[::]:0"),
            (&["192.0.2.10:7701", "[::1]:7701"][..], "[::1]:0"),
        ] {
            assert_eq!(default_listen(None, &peers(list)), want.parse().unwrap(), "peers {list:?}");
        }
        let on = Ipv4Addr::new(192, 0, 2, 20);
        assert_eq!(default_listen(Some(on), &peers(&["192.0.2.10:7701"])), SocketAddr::from((on, 0)));
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

    /// A key file that is a FIFO (it hung in open), a device (read until
    /// memory ran out) or too large is refused in one line.
    #[test]
    fn key_files_are_small_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = |p: &Path| read_key(p).map(|_| ()).unwrap_err().to_string();
        assert_eq!(err(&fifo), format!("key file {} is not a regular file", fifo.display()));
        assert_eq!(err(Path::new("/dev/zero")), "key file /dev/zero is not a regular file");
        let big = dir.path().join("big");
        std::fs::write(&big, "0".repeat(5000)).unwrap();
        assert_eq!(err(&big), format!("key file {} is larger than 4096 bytes", big.display()));
        let good = dir.path().join("key");
        std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
        assert!(read_key(&good).is_ok());
    }

    #[test]
    fn groups_are_multicast_addresses_with_a_port() {
        assert_eq!(parse_group("239.1.2.3:7700"), Ok(SocketAddrV4::new(Ipv4Addr::new(239, 1, 2, 3), 7700)));
        for (bad, why) in [
            ("239.1.2.3", "expected IPv4:PORT"),
            ("10.0.0.1:7700", "not a multicast address"),
            ("239.1.1.1:0", "port 0 would be"),
        ] {
            let e = parse_group(bad).unwrap_err();
            assert!(e.starts_with(&format!("invalid multicast group {bad:?}: {why}")), "{e}");
        }
        assert_eq!(parse_wait_ms("3600000"), Ok(3_600_000));
        assert!(parse_wait_ms("3600001").unwrap_err().contains("from 0 to 3600000"));
    }

    /// A bad value in the config file names the file and its key, not a flag.
    #[test]
    fn bad_file_values_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        let build = |text: &str| {
            std::fs::write(&file, text).unwrap();
            NodeArgs { config: Some(file.clone()), ..NodeArgs::default() }.build().map(|_| ()).unwrap_err().to_string()
        };
        let named = |e: String| e.strip_prefix(&format!("config file {}: ", file.display())).map(str::to_string);
        assert_eq!(named(build("timeout_ms = 0\n")).as_deref(), Some("timeout_ms must be at least 1"));
        assert_eq!(named(build("retransmit_ms = 0\n")).as_deref(), Some("retransmit_ms must be at least 1"));
        assert!(named(build("listen = \"nowhere\"\n")).unwrap().starts_with("invalid address \"nowhere\""));
        assert!(named(build("peers = [\"x\"]\n")).unwrap().starts_with("invalid peer \"x\""));
        assert_eq!(named(build("host_id = 0\n")).as_deref(), Some("host_id 0 is outside 1..=32767"));
        assert_eq!(named(build("host_id = 40000\n")).as_deref(), Some("host_id 40000 is outside 1..=32767"));
        // A syntax error says where it is.
        let syntax = named(build("timeout_ms = 5\nlisten = \"127.0.0.1:1\n")).unwrap();
        assert!(syntax.starts_with("line 2, column "), "{syntax}");
        let flag = NodeArgs { timeout_ms: Some(0), ..NodeArgs::default() }.build().map(|_| ()).unwrap_err();
        assert_eq!(flag.to_string(), "--timeout-ms must be at least 1");
    }
}
