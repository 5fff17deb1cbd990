//! `vipc exec`: run a command on an idle host's team server (000 §6.6).

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use std::io::Write;
use std::time::Duration;
use vipc::Node;
use vipc_exec::{least_loaded, query_loads, ExecError};

/// Runs `argv` on host `on` (or the least loaded host whose team server
/// answers within `deadline`), copying its output here; returns its exit
/// status as a shell would (128 + signal). SIGINT and SIGTERM are passed on.
pub fn run(argv: &[String], on: Option<u16>, deadline: Duration, listen: Duration, args: &NodeArgs) -> CliResult<i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(args.build()?)?;
    std::thread::sleep(listen); // the alive hosts answer our HELLO
    let p = node.attach()?;
    let loads = query_loads(&p, deadline).map_err(exec_error)?;
    let team = match on {
        Some(h) => loads.iter().find(|l| l.server.host() == h).map(|l| l.server).ok_or(ExecError::NoTeamServerOn(h)),
        None => least_loaded(&loads).ok_or(ExecError::NoTeamServer),
    }
    .map_err(exec_error)?;
    let job = vipc_exec::start(&node, team, argv, |fd, bytes| {
        let _ = if fd == 2 {
            std::io::stderr().write_all(bytes)
        } else {
            let mut o = std::io::stdout();
            o.write_all(bytes).and_then(|()| o.flush())
        };
    })
    .map_err(exec_error)?;
    while !job.is_finished() {
        if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
            // Ctrl-C (or SIGTERM): the remote command gets SIGINT.
            let _ = job.signal(vipc_exec::SIGINT);
        }
    }
    let status = job.wait().map_err(exec_error)?;
    node.shutdown();
    Ok(status.shell_code())
}

fn exec_error(e: ExecError) -> CliError {
    match e {
        ExecError::Vipc(vipc::Error::Protocol(vipc::ProtocolError::Timeout(pid))) => {
            CliError(format!("exec: the team server {pid} stopped answering (its node is down?)"))
        }
        e => CliError(format!("exec: {e}")),
    }
}
