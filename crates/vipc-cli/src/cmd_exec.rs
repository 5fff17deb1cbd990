//! `vipc exec`: run a command on an idle host's team server (000 §6.6).

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use std::io::Write;
use std::time::Duration;
use vipc::Node;
use vipc_exec::{least_loaded, query_loads, team_server_on, ExecError};

/// How long `--on HOST` keeps asking for that host's team server.
const ON_LIMIT: Duration = Duration::from_secs(2);

/// Runs `argv` on host `on` (or the least loaded host whose team server
/// answers within `deadline`), copying its output here; returns its exit
/// status as a shell would (128 + signal). SIGINT and SIGTERM are passed on
/// as SIGINT, a second one as SIGKILL; output that cannot be written here
/// kills the command and fails the call.
pub fn run(argv: &[String], on: Option<u16>, deadline: Duration, listen: Duration, args: &NodeArgs) -> CliResult<i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(args.build()?)?;
    std::thread::sleep(listen); // the alive hosts answer our HELLO
    let p = node.attach()?;
    let team = match on {
        // Asked until that host answers (its answer may be lost or come after another's).
        Some(h) => team_server_on(&p, h, ON_LIMIT.max(deadline)).and_then(|t| t.ok_or(ExecError::NoTeamServerOn(h))),
        None => query_loads(&p, deadline).and_then(|loads| least_loaded(&loads).ok_or(ExecError::NoTeamServer)),
    }
    .map_err(exec_error)?;
    // Output that cannot be written here (a closed pipe, a full disk) ends the command.
    let (lost_tx, lost) = std::sync::mpsc::channel::<std::io::Error>();
    let job = vipc_exec::start(&node, team, argv, move |fd, bytes| {
        let r = if fd == 2 {
            std::io::stderr().write_all(bytes)
        } else {
            let mut o = std::io::stdout();
            o.write_all(bytes).and_then(|()| o.flush())
        };
        if let Err(e) = r {
            let _ = lost_tx.send(e);
        }
    })
    .map_err(exec_error)?;
    let (mut interrupts, mut failed) = (0, None);
    while !job.is_finished() {
        if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
            // Ctrl-C (or SIGTERM): the remote command gets SIGINT; a second time, SIGKILL.
            interrupts += 1;
            let _ = job.signal(if interrupts == 1 { vipc_exec::SIGINT } else { SIGKILL });
        }
        if let (None, Ok(e)) = (&failed, lost.try_recv()) {
            let _ = job.signal(SIGKILL);
            failed = Some(e);
        }
    }
    let status = job.wait().map_err(exec_error);
    node.shutdown();
    match failed {
        // The reader went away (`vipc exec … | head`): as a local command
        // dies of SIGPIPE then, quietly, with the shell's status for it.
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(128 + SIGPIPE),
        Some(e) => Err(CliError(format!("exec: cannot write the command's output: {e}"))),
        None => Ok(status?.shell_code()),
    }
}

/// The signal a local command gets writing to a pipe nobody reads.
const SIGPIPE: i32 = 13;

/// The signal that ends a command which ignores SIGINT.
const SIGKILL: i32 = 9;

fn exec_error(e: ExecError) -> CliError {
    match e {
        ExecError::Vipc(vipc::Error::Protocol(vipc::ProtocolError::Timeout(pid))) => {
            CliError(format!("exec: the team server {pid} stopped answering (its node is down?)"))
        }
        e => CliError(format!("exec: {e}")),
    }
}
