//! `vipc node`: run a node hosting the kernel server and the echo service.

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use std::io::Write;
use vipc::{services, Node};

/// Runs a node until SIGINT or SIGTERM.
pub fn run(args: &NodeArgs) -> CliResult<()> {
    let cfg = args.build()?;
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(cfg)?;
    services::spawn_echo(&node, Some("echo"))?;
    say!("vipc node: host {:04x} listening on {}", node.host_id(), node.local_addr());
    let _ = std::io::stdout().flush();
    let _ = rx.recv();
    node.shutdown();
    Ok(())
}
