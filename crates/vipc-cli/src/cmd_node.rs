//! `vipc node`: run a node hosting the kernel server and the echo service.

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use std::io::Write;
use vipc::{services, Node, Scope};

/// Runs a node (serving pipes `pipes` and directories `exports`, and with a
/// member of each of `members`, and a team server if `team`) until SIGINT or SIGTERM.
pub fn run(args: &NodeArgs, pipes: &[String], exports: &[String], members: &[vipc::Pid], team: bool) -> CliResult<()> {
    let cfg = args.build()?;
    let exports = exports.iter().map(|e| crate::fsremote::parse_export(e)).collect::<CliResult<Vec<_>>>()?;
    given_once("export", exports.iter().map(|e| e.name.as_str()))?;
    given_once("pipe", pipes.iter().map(String::as_str))?;
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(cfg)?;
    let echo = services::spawn_echo(&node, Some("echo"))?;
    for g in members {
        services::spawn_group_member(&node, *g)?;
    }
    if team {
        vipc_exec::serve(&node).map_err(|e| CliError(e.to_string()))?;
    }
    let servers = crate::cmd_pipe::start_servers(&node, pipes, &crate::cmd_pipe::config(1 << 20, 5000)?)?;
    let files = start_exports(&node, exports)?;
    say!("vipc node: host {:#06x} listening on {}, echo {echo}", node.host_id(), node.local_addr());
    let _ = std::io::stdout().flush();
    let _ = rx.recv();
    drop(servers);
    files.into_iter().for_each(vipc_fs::FileServer::stop);
    node.shutdown();
    Ok(())
}

/// Starts the file servers of `exports` on `node`.
fn start_exports(node: &Node, exports: Vec<vipc_fs::ExportConfig>) -> CliResult<Vec<vipc_fs::FileServer>> {
    let names: Vec<String> = exports.iter().map(|e| e.name.clone()).collect();
    let files = exports
        .into_iter()
        .map(|e| vipc_fs::FileServer::start(node, e).map_err(|e| CliError(e.to_string())))
        .collect::<CliResult<Vec<_>>>()?;
    // Serving already: a server restarted at once is found by clients still
    // retrying. Dropped on a refusal, they stop.
    for n in &names {
        check_name_free(node, &vipc_fs::service_name(n), &format!("export {n}"))?;
    }
    Ok(files)
}

/// Refuses a name given twice: the node would serve only one of them.
fn given_once<'a>(what: &str, names: impl Iterator<Item = &'a str>) -> CliResult<()> {
    let mut seen = std::collections::HashSet::new();
    match names.into_iter().find(|n| !seen.insert(*n)) {
        Some(n) => Err(CliError(format!("{what} {n} is given twice"))),
        None => Ok(()),
    }
}

/// Refuses to serve `registered` (a service's name) when another node does
/// too: clients would find one or the other at random. One GetPid broadcast
/// (T_getpid, 300 ms, when nobody answers), made once the server serves.
pub fn check_name_free(node: &Node, registered: &str, what: &str) -> CliResult<()> {
    let p = node.attach()?;
    match p.get_pid(registered, Scope::Remote)? {
        Some(pid) => {
            Err(CliError(format!("{what} is already served by {pid}: stop that server, or choose another name")))
        }
        None => Ok(()),
    }
}
