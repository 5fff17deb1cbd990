//! The team server: answers load queries, hands each Exec to a worker
//! process of its own, and signals running commands.

use crate::guard::Guard;
use crate::*;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid as OsPid;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use vipc::locate::TEAM_SERVER_GROUP;
use vipc::{Error, Message, Node, Pid, Process, SegmentRef, SendOptions};

/// Running commands: the pid that sent the Exec → the command's OS pid.
type Jobs = Arc<Mutex<HashMap<Pid, u32>>>;

fn lock(jobs: &Jobs) -> std::sync::MutexGuard<'_, HashMap<Pid, u32>> {
    jobs.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the team server on `node`: a process that joins the team servers'
/// group and serves until the node stops. Returns its pid once it is in the
/// group (a load query made right after finds it).
pub fn serve(node: &Node) -> Result<Pid> {
    let n = node.clone();
    let (joined, join) = std::sync::mpsc::channel();
    let (pid, _) = node.spawn(move |p| {
        let r = p.join_group(TEAM_SERVER_GROUP);
        let ok = r.is_ok();
        let _ = joined.send(r);
        if ok {
            team_server(&n, &p, &Jobs::default(), &Arc::new(Guard::start()));
        }
    })?;
    match join.recv() {
        Ok(Ok(())) => Ok(pid),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ExecError::Vipc(vipc::Error::NodeStopped)),
    }
}

fn load_average() -> u32 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
        .map(|l| (l * 100.0) as u32)
        .unwrap_or(0)
}

fn team_server(node: &Node, p: &Process, jobs: &Jobs, guard: &Arc<Guard>) {
    let mut argv = vec![0u8; MAX_ARGV];
    loop {
        let mut m: Message = [0; 32];
        let info = match p.receive_with_segment(&mut m, &mut argv) {
            Ok(i) => i,
            Err(_) => return, // the node stopped
        };
        let mut reply: Message = [0; 32];
        match m[0] {
            OP_LOAD => {
                put32(&mut reply, 4, lock(jobs).len() as u32);
                put32(&mut reply, 8, load_average());
            }
            OP_EXEC => match exec_request(p, &m, &info, &mut argv) {
                Ok(args) => {
                    let sink = Pid(le32(&m, 4));
                    let (jobs2, guard2, client, n) = (jobs.clone(), guard.clone(), info.from, node.clone());
                    let spawned = node.spawn(move |w| worker(w, &n, args, sink, client, &jobs2, &guard2));
                    match spawned.map_err(ExecError::from).and_then(|(wp, _)| Ok(p.forward(&m, info.from, wp)?)) {
                        Ok(()) => continue, // the worker replies
                        Err(e) => {
                            tracing::debug!("team server: cannot start a worker: {e}");
                            reply[0] = STATUS_SPAWN_FAILED;
                        }
                    }
                }
                Err(why) => {
                    tracing::debug!("team server: bad request from {}: {why}", info.from);
                    reply[0] = STATUS_BAD_REQUEST;
                }
            },
            OP_SIGNAL => {
                let (job, sig) = (Pid(le32(&m, 4)), le32(&m, 8) as i32);
                // Only from the node whose process started the job.
                let os = lock(jobs).get(&job).copied().filter(|_| info.from.host() == job.host());
                reply[0] = match (os, Signal::try_from(sig)) {
                    (Some(os), Ok(s)) => {
                        let _ = killpg(OsPid::from_raw(os as i32), s);
                        0
                    }
                    _ => STATUS_NO_JOB,
                };
            }
            _ => reply[0] = STATUS_BAD_REQUEST,
        }
        let _ = p.reply(&reply, info.from);
    }
}

/// The argument vector of an Exec: appended, or moved from the client.
fn exec_request(p: &Process, m: &Message, info: &vipc::ReceiveInfo, buf: &mut [u8]) -> Result<Vec<String>> {
    let size = info.segment_size as usize;
    if !info.access.read || size == 0 || size > buf.len() || Pid(le32(m, 4)).is_none() {
        return Err(ExecError::BadCommand("no argument vector or sink".into()));
    }
    if info.len < size {
        p.move_from(info.from, 0, &mut buf[..size])?;
    }
    argv(&buf[..size])
}

/// The argument vector of an Exec's segment: arguments separated by NUL
/// bytes (lossy UTF-8), the first non-empty. Any bytes are safe here.
pub(crate) fn argv(bytes: &[u8]) -> Result<Vec<String>> {
    let args: Vec<String> = bytes.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    if args.first().is_none_or(|a| a.is_empty()) {
        return Err(ExecError::BadCommand("empty command".into()));
    }
    Ok(args)
}

/// In the command's process, before exec: it is killed when the thread that
/// started it ends. That thread waits for the command, so it ends only with
/// the node: a node killed, or stopped, takes its commands with it (they ran
/// on, in their own process group, with nobody to read their output). Fails
/// if the node is gone already.
fn die_with_node(node: nix::unistd::Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    if nix::unistd::getppid() != node {
        return Err(nix::errno::Errno::ESRCH.into());
    }
    Ok(())
}

/// In the command's process, before exec: every signal back to its default
/// action. An ignored signal stays ignored across exec, and a node started
/// as a script's background job or under `nohup` ignores SIGINT or SIGHUP:
/// its commands would shrug off [`crate::Job::signal`]. (The standard
/// library already empties the signal mask and restores SIGPIPE.)
#[allow(unsafe_code)]
fn default_signals() -> std::io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for sig in Signal::iterator().filter(|s| !matches!(s, Signal::SIGKILL | Signal::SIGSTOP)) {
        // SAFETY: SIG_DFL installs no handler, so no handler can observe
        // state the fork left inconsistent; sigaction is async-signal-safe.
        unsafe { sigaction(sig, &default) }?;
    }
    Ok(())
}

/// How long a new worker waits for the Exec forwarded to it.
const FORWARD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// One job: receives the forwarded Exec, runs the command, pumps its output
/// to the sink, and replies with how it ended.
fn worker(w: Process, node: &Node, args: Vec<String>, sink: Pid, client: Pid, jobs: &Jobs, guard: &Guard) {
    let mut m: Message = [0; 32];
    // The Exec forwarded to it; if the forward failed, none comes.
    let Ok(from) = vipc::within(FORWARD_WAIT, || w.receive_specific(&mut m, client)) else { return };
    debug_assert_eq!(from, client);
    let mut reply: Message = [0; 32];
    let mut command = Command::new(&args[0]);
    command.args(&args[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let node_pid = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: it makes plain system calls
    // (prctl, getppid, sigaction) and allocates nothing, takes no lock.
    // Exercised by vipc-cli's test `a_command_dies_with_its_team_servers_node`
    // and this crate's `a_command_starts_with_every_signal_at_its_default`.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            default_signals()?;
            die_with_node(node_pid)
        })
    };
    let child = command.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            reply[0] = STATUS_SPAWN_FAILED;
            put32(&mut reply, 4, e.raw_os_error().unwrap_or(0) as u32);
            let _ = w.reply(&reply, from);
            return;
        }
    };
    let os = child.id();
    guard.watch(os);
    lock(jobs).insert(client, os);
    let streams: [(u8, Option<Box<dyn Read + Send>>); 2] = [
        (1, child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>)),
        (2, child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>)),
    ];
    let pumps: Vec<_> = streams
        .into_iter()
        .filter_map(|(fd, r)| r.map(|r| (fd, r)))
        .filter_map(|(fd, r)| node.spawn(move |p| pump(&p, fd, r, sink, os)).ok().map(|(_, h)| h))
        .collect();
    let (job_over, over) = std::sync::mpsc::channel::<()>();
    let watchdog = node.spawn(move |p| watchdog(&p, sink, os, &over)).ok().map(|(_, h)| h);
    // Once the command has ended (seen, not yet reaped, so that its pid and
    // group id cannot be reused meanwhile) what is left of its group is no
    // longer the node's.
    let _ = waitid(Id::Pid(OsPid::from_raw(os as i32)), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT);
    guard.release(os);
    let status = child.wait();
    for h in pumps {
        let _ = h.join();
    }
    drop(job_over);
    if let Some(h) = watchdog {
        let _ = h.join();
    }
    lock(jobs).remove(&client);
    match status {
        Ok(s) => {
            put32(&mut reply, 8, s.code().unwrap_or(0) as u32);
            put32(&mut reply, 12, s.signal().unwrap_or(0) as u32);
        }
        Err(e) => {
            reply[0] = STATUS_SPAWN_FAILED;
            put32(&mut reply, 4, e.raw_os_error().unwrap_or(0) as u32);
        }
    }
    let _ = w.reply(&reply, from);
}

/// How often a job's watchdog checks that its client's sink is still there.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(2);

/// Until the job is over, Sends the sink an empty output every
/// [`KEEPALIVE`] and kills the command if that fails: the pumps notice a
/// vanished client only when there is output to send, so a silent command
/// would run for ever.
fn watchdog(p: &Process, sink: Pid, os_pid: u32, over: &std::sync::mpsc::Receiver<()>) {
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = over.recv_timeout(KEEPALIVE) {
        let mut m: Message = [0; 32];
        m[0] = OP_OUTPUT;
        m[1] = 1;
        if let Err(e) = p.send(&mut m, sink) {
            if !matches!(e, Error::NodeStopped) {
                tracing::debug!("team server: {sink} is gone ({e}): killing the command");
            }
            let _ = killpg(OsPid::from_raw(os_pid as i32), Signal::SIGKILL);
            return;
        }
    }
}

/// Copies one output stream to the sink; kills the command if the sink is gone.
fn pump(p: &Process, fd: u8, mut r: Box<dyn Read + Send>, sink: Pid, os_pid: u32) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut m: Message = [0; 32];
        m[0] = OP_OUTPUT;
        m[1] = fd;
        put32(&mut m, 4, n as u32);
        let sent = p.send_with(&mut m, sink, Some(SegmentRef::Read(&buf[..n])), SendOptions::default());
        if let Err(e) = sent {
            if !matches!(e, Error::NodeStopped) {
                tracing::debug!("team server: output to {sink} failed ({e}): killing the command");
            }
            let _ = killpg(OsPid::from_raw(os_pid as i32), Signal::SIGKILL);
            return;
        }
    }
}
