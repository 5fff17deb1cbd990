//! `vipc mount SERVER:EXPORT MOUNTPOINT`: the diskless workstation. Starts a node, finds the file server's
//! export by its logical name, mounts it with FUSE and serves until SIGINT/SIGTERM, then unmounts.

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use clap::Args;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vipc::Node;
use vipc_mount::{MountError, MountOptions};

/// Arguments of `vipc mount`.
#[derive(Args, Debug)]
pub struct MountArgs {
    /// SERVER:EXPORT. EXPORT is the export's name (`vipc node --export EXPORT=DIR`); SERVER is the address
    /// (IP:PORT or name:PORT) of the server's node, used as a static peer so the name is found without
    /// multicast, or empty (`:EXPORT`) to find the export anywhere on the broadcast channel.
    pub spec: String,
    /// The directory to mount on.
    pub mountpoint: PathBuf,
    /// Attribute and name cache lifetime in milliseconds (another client's changes show after this long).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub ttl_ms: u64,
    /// Request threads: how many calls may wait on the server at once (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=vipc_mount::MAX_THREADS as u64))]
    pub threads: usize,
    /// Bypass the page cache: every read and write goes to the server (benchmarks; no mmap).
    #[arg(long)]
    pub direct_io: bool,
    /// Drop a file's cached pages at every open, even when it is unchanged.
    #[arg(long)]
    pub no_data_cache: bool,
    /// Threads reading the next 16 subdirectories' listings ahead while a program walks a tree (0: none; at most 64).
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=64))]
    pub dir_read_ahead: usize,
    /// Mount read-only.
    #[arg(long)]
    pub read_only: bool,
    #[command(flatten)]
    pub node: NodeArgs,
}

/// Splits SERVER:EXPORT (SERVER may itself contain colons: `[::1]:7701:home`).
fn parse_spec(spec: &str) -> CliResult<(Option<SocketAddr>, String)> {
    let (server, export) = match spec.rsplit_once(':') {
        Some((s, e)) => (s, e),
        None => {
            return Err(CliError(format!("invalid {spec:?}: expected SERVER:EXPORT (SERVER may be empty: :EXPORT)")))
        }
    };
    if export.is_empty() {
        return Err(CliError(format!("invalid {spec:?}: the export name after the last ':' is empty")));
    }
    crate::fsremote::check_export_name(export)?;
    if server.is_empty() {
        return Ok((None, export.to_string()));
    }
    // Resolved as a --peer is (it becomes the mount node's static peer).
    let addr = crate::opts::parse_peer(server).map_err(|e| CliError(format!("server of {spec:?}: {e}")))?;
    Ok((Some(addr), export.to_string()))
}

/// Runs the mount until a signal or an unmount from outside.
pub fn run(args: &MountArgs) -> CliResult<()> {
    let (server, export) = parse_spec(&args.spec)?;
    // Check the mount point (and clear a stale mount) before joining the cluster: fail fast.
    let mountpoint = vipc_mount::prepare_mountpoint(&args.mountpoint).map_err(mount_error)?;
    let mut node_args = args.node.clone();
    if let Some(a) = server {
        node_args.peers.push(a);
    }
    let cfg = node_args.build()?;
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(cfg)?;
    let client = match vipc_fs::FsClient::connect(&node, &export) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            let silent = server.map(|a| crate::fsremote::silent_peers(&node, &[a])).unwrap_or_default();
            node.shutdown();
            return Err(CliError(match server {
                Some(_) if !silent.is_empty() => {
                    format!("file server export {export:?} not found: {}", crate::fsremote::no_node_at(&silent))
                }
                Some(a) => format!("file server export {export:?} not found at {a}: {e}"),
                None => format!("file server export {export:?} not found: {e}"),
            }));
        }
    };
    let opts = MountOptions {
        attr_ttl: Duration::from_millis(args.ttl_ms),
        entry_ttl: Duration::from_millis(args.ttl_ms),
        threads: args.threads,
        data_cache: !args.no_data_cache,
        direct_io: args.direct_io,
        read_only: args.read_only,
        dir_read_ahead: args.dir_read_ahead,
        ..MountOptions::default()
    };
    let source = format!("vipc:{export}");
    let mounted = match vipc_mount::mount(client, &mountpoint, &source, opts) {
        Ok(m) => m,
        Err(e) => {
            node.shutdown();
            return Err(mount_error(e));
        }
    };
    say!("vipc mount: {export} mounted on {} (host {:#06x})", mountpoint.display(), node.host_id());
    let _ = std::io::stdout().flush();
    // Until a signal, or until somebody unmounts it from outside (or the session fails).
    let mut failed = None;
    loop {
        if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
            break;
        }
        match mounted.wait(Duration::ZERO) {
            None => continue,
            Some(Ok(())) => say!("vipc mount: {} was unmounted", mountpoint.display()),
            Some(Err(e)) => failed = Some(CliError(format!("the mount of {} failed: {e}", mountpoint.display()))),
        }
        break;
    }
    let r = mounted.unmount().map_err(mount_error);
    node.shutdown();
    failed.map_or(r, Err)
}

fn mount_error(e: MountError) -> CliError {
    CliError(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(parse_spec(":home").unwrap(), (None, "home".to_string()));
        let (a, e) = parse_spec("127.0.0.1:7701:home").unwrap();
        assert_eq!((a.unwrap().port(), e.as_str()), (7701, "home"));
        let (a, _) = parse_spec("[::1]:7701:x").unwrap();
        assert!(a.unwrap().is_ipv6());
        assert!(parse_spec("home").is_err());
        assert!(parse_spec("127.0.0.1:7701:").is_err());
        assert!(parse_spec("nohost:home").is_err());
    }
}
