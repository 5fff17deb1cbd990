//! The client side: choosing a team server, running a job, signalling it.

use crate::*;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vipc::locate::TEAM_SERVER_GROUP;
use vipc::{HostId, Message, Node, Pid, Process, ReplyMode, SegmentRef, SendOptions};

/// One team server's answer to the load query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLoad {
    /// The team server.
    pub server: Pid,
    /// Commands it is running.
    pub jobs: u32,
    /// Its host's 1-minute load average × 100.
    pub load: u32,
}

/// Asks the team servers' group for their load: the answers that come
/// within `deadline` (the first one at least, unless none answers within T_t).
pub fn query_loads(p: &Process, deadline: Duration) -> Result<Vec<HostLoad>> {
    let mut m: Message = [0; 32];
    m[0] = OP_LOAD;
    let until = vipc::deadline_after(Instant::now(), deadline);
    let first = match p.send_group(&mut m, TEAM_SERVER_GROUP, ReplyMode::Many, SendOptions { idempotent: true }) {
        Ok(who) => who,
        Err(vipc::Error::Protocol(vipc::ProtocolError::Timeout(_))) => return Err(ExecError::NoTeamServer),
        Err(e) => return Err(e.into()),
    };
    let answer = |server: Pid, m: &Message| HostLoad { server, jobs: le32(m, 4), load: le32(m, 8) };
    let mut loads = vec![answer(first, &m)];
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match p.get_reply(left)? {
            Some((who, r)) if !left.is_zero() => loads.push(answer(who, &r)),
            _ => return Ok(loads),
        }
    }
}

/// The team server of logical host `host`, asking the team servers' group
/// again until that host answers or `limit` passes (`None`): another team
/// server's answer ends a query, and the one from `host` may be lost or late.
pub fn team_server_on(p: &Process, host: u16, limit: Duration) -> Result<Option<Pid>> {
    let until = vipc::deadline_after(Instant::now(), limit);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        match vipc::within(left, || query_loads(p, ANSWER_WAIT.min(left))) {
            Ok(loads) => {
                if let Some(l) = loads.iter().find(|l| l.server.host() == host) {
                    return Ok(Some(l.server));
                }
            }
            Err(ExecError::NoTeamServer) => {}
            Err(ExecError::Vipc(e)) if e.is_deadline() => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// How long [`team_server_on`] waits for more answers to one query.
const ANSWER_WAIT: Duration = Duration::from_millis(100);

/// The least loaded of `loads`: fewest jobs, then lowest load average, then
/// the first to answer.
pub fn least_loaded(loads: &[HostLoad]) -> Option<Pid> {
    loads.iter().enumerate().min_by_key(|(i, l)| (l.jobs, l.load, *i)).map(|(_, l)| l.server)
}

/// How a remote command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitStatus {
    /// Its exit code (0 if a signal ended it).
    pub code: i32,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// The status a shell would give: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        self.signal.map(|s| s.saturating_add(128)).unwrap_or(self.code)
    }
}

/// A command running on a team server.
pub struct Job {
    node: Node,
    team: Pid,
    client: Pid,
    done: JoinHandle<Result<ExitStatus>>,
    sink: JoinHandle<()>,
}

/// Runs `argv` on the team server `team`; `output(stream, bytes)` gets the
/// command's stdout (1) and stderr (2) as they come, in order per stream.
pub fn start<F>(node: &Node, team: Pid, argv: &[String], mut output: F) -> Result<Job>
where
    F: FnMut(u8, &[u8]) + Send + 'static,
{
    let mut args = Vec::new();
    for (i, a) in argv.iter().enumerate() {
        if a.as_bytes().contains(&0) {
            return Err(ExecError::BadCommand(format!("argument {i} contains a NUL byte")));
        }
        if i > 0 {
            args.push(0);
        }
        args.extend_from_slice(a.as_bytes());
    }
    if argv.first().is_none_or(|a| a.is_empty()) {
        return Err(ExecError::BadCommand("empty command".into()));
    }
    if args.len() > MAX_ARGV {
        return Err(ExecError::BadCommand(format!("the arguments take {} bytes (at most {MAX_ARGV})", args.len())));
    }
    // Attached first: should the sink's spawn fail, nothing is left behind.
    let c = node.attach()?;
    let (sink_pid, sink) = node.spawn(move |s| {
        let mut buf = vec![0u8; CHUNK];
        let me = s.pid().host();
        loop {
            let mut m: Message = [0; 32];
            let Ok(info) = s.receive_with_segment(&mut m, &mut buf) else { return };
            // Output comes from the team server's host, the end from this node.
            match m[0] {
                OP_OUTPUT if info.from.host() == team.host() => {
                    let n = (le32(&m, 4) as usize).min(info.segment_size as usize).min(buf.len());
                    // Answered either way: the worker's sender waits for it.
                    if info.len < n && s.move_from(info.from, 0, &mut buf[..n]).is_err() {
                        let _ = s.reply(&[STATUS_BAD_REQUEST; 32], info.from);
                        continue;
                    }
                    if n > 0 {
                        output(m[1], &buf[..n]); // 0: the worker's keep-alive
                    }
                    let _ = s.reply(&[0; 32], info.from);
                }
                OP_DONE if info.from.host() == me => {
                    let _ = s.reply(&[0; 32], info.from);
                    return;
                }
                _ => {
                    let _ = s.reply(&[STATUS_BAD_REQUEST; 32], info.from);
                }
            }
        }
    })?;
    let client = c.pid();
    let host = team.host();
    let cmd = argv[0].clone();
    let done = std::thread::Builder::new()
        .name(format!("vipc-exec-{client}"))
        .spawn(move || {
            let mut m: Message = [0; 32];
            m[0] = OP_EXEC;
            put32(&mut m, 4, sink_pid.0);
            let r = c.send_with(&mut m, team, Some(SegmentRef::Read(&args)), SendOptions::default());
            let mut bye: Message = [0; 32];
            bye[0] = OP_DONE;
            let _ = c.send(&mut bye, sink_pid);
            r?;
            match m[0] {
                0 => {
                    let signal = le32(&m, 12) as i32;
                    Ok(ExitStatus { code: le32(&m, 8) as i32, signal: (signal != 0).then_some(signal) })
                }
                STATUS_SPAWN_FAILED => {
                    Err(ExecError::Spawn { cmd, host, err: std::io::Error::from_raw_os_error(le32(&m, 4) as i32) })
                }
                s => Err(ExecError::BadCommand(format!("the team server refused the command (status {s})"))),
            }
        })
        .map_err(|e| {
            // The sink would wait for its end for the node's life.
            if let Ok(p) = node.attach() {
                let mut bye: Message = [0; 32];
                bye[0] = OP_DONE;
                let _ = p.send(&mut bye, sink_pid);
            }
            vipc::Error::from(e)
        })?;
    Ok(Job { node: node.clone(), team, client, done, sink })
}

impl Job {
    /// The host the command runs on.
    pub fn host(&self) -> HostId {
        self.team.host()
    }

    /// The job's id at its team server: the pid that sent the Exec (what a
    /// Signal names; only processes of this node may signal it).
    pub fn id(&self) -> Pid {
        self.client
    }

    /// Sends signal `sig` to the command's process group.
    pub fn signal(&self, sig: i32) -> Result<bool> {
        let p = self.node.attach()?;
        let mut m: Message = [0; 32];
        m[0] = OP_SIGNAL;
        put32(&mut m, 4, self.client.0);
        put32(&mut m, 8, sig as u32);
        p.send(&mut m, self.team)?;
        Ok(m[0] == 0)
    }

    /// True once the command has ended (or the exchange failed).
    pub fn is_finished(&self) -> bool {
        self.done.is_finished()
    }

    /// Waits for the command to end and all its output to be delivered.
    pub fn wait(self) -> Result<ExitStatus> {
        let r = self.done.join().unwrap_or_else(|_| Err(ExecError::BadCommand("the exec thread panicked".into())));
        let _ = self.sink.join();
        r
    }
}
