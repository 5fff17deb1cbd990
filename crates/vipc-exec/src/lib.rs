//! Remote execution over vipc (000 §6.6): a **team server** on each node
//! that offers it, members of the well-known group
//! [`TEAM_SERVER_GROUP`](vipc::locate::TEAM_SERVER_GROUP), and a client that
//! asks the group for the hosts' load with one many-reply Send, picks the
//! least loaded (or a named host), runs a command there, gets its output
//! streamed back and its exit status, and can signal it.
//!
//! # Protocol (32-byte messages, integers little-endian)
//! - **Load query** — group Send, reply mode Many: byte 0 = [`OP_LOAD`].
//!   Reply: bytes 4..8 running jobs, 8..12 the 1-minute load average × 100.
//! - **Exec** — Send to a team server, granting read access to the argument
//!   vector (arguments separated by NUL bytes): byte 0 = [`OP_EXEC`], bytes
//!   4..8 the pid of the client's *sink* process. The team server creates a
//!   worker process and Forwards the request to it; the worker runs the
//!   command (stdin from /dev/null, in a process group of its own), and
//!   replies when it has exited and all its output was delivered: byte 0 =
//!   0 (ran) or [`STATUS_SPAWN_FAILED`] with the errno in bytes 4..8; bytes
//!   8..12 the exit code, 12..16 the signal that ended it (0 if none).
//!   While it runs, the client's retransmissions are answered with
//!   ReplyPending; if the team server's node dies the Send fails after T_t.
//! - **Output** — Send from the worker's pumps to the sink, with the bytes as
//!   a read-granted segment: byte 0 = [`OP_OUTPUT`], byte 1 = the stream (1
//!   stdout, 2 stderr), bytes 4..8 the length. The sink replies once it has
//!   written them (flow control). A pump whose Send fails (the client is
//!   gone) kills the command. Every 2 s of the job the worker also Sends an
//!   empty output (length 0, no segment), which the sink answers and
//!   ignores, and kills the command if that fails: a silent command whose
//!   client vanished does not run for ever.
//! - **Signal** — Send to the team server: byte 0 = [`OP_SIGNAL`], bytes 4..8
//!   the pid that sent the Exec, 8..12 the signal number. The team server
//!   signals the command's process group; reply byte 0 = 0, or
//!   [`STATUS_NO_JOB`] (also to a Signal from another node than the one
//!   that sent the Exec). The sink takes Output only from the team server's
//!   host and answers every one, also one whose bytes it could not fetch.
//!
//! **Security**: a team server runs any command, as the node's user, for
//! anyone who can reach the node. Run it (`vipc node --team`) only in a
//! cluster whose packets are authenticated with a key (`--key`) or on a
//! trusted network.

#![deny(unsafe_code)] // exceptions: the command's setup between fork and exec (server.rs)

mod client;
mod guard;
mod server;

pub use client::{least_loaded, query_loads, start, team_server_on, ExitStatus, HostLoad, Job};
pub use server::serve;

/// Operation: the host's load.
pub const OP_LOAD: u8 = 1;
/// Operation: run a command.
pub const OP_EXEC: u8 = 2;
/// Operation: output for the sink.
pub const OP_OUTPUT: u8 = 3;
/// Operation: signal a running command.
pub const OP_SIGNAL: u8 = 4;
/// Operation (local, client to its own sink): the job is over.
pub const OP_DONE: u8 = 5;
/// Reply status: the command could not be started.
pub const STATUS_SPAWN_FAILED: u8 = 1;
/// Reply status: no such job.
pub const STATUS_NO_JOB: u8 = 2;
/// Reply status: the request is malformed.
pub const STATUS_BAD_REQUEST: u8 = 3;
/// The signal Ctrl-C sends, for [`Job::signal`].
pub const SIGINT: i32 = nix::libc::SIGINT;
/// Longest argument vector (bytes, NULs included).
pub const MAX_ARGV: usize = 64 * 1024;
/// Output bytes per Output message.
pub const CHUNK: usize = 8 * 1024;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The vipc call failed.
    #[error(transparent)]
    Vipc(#[from] vipc::Error),
    /// No team server answered.
    #[error("no team server answered (is a node running with --team?)")]
    NoTeamServer,
    /// No team server answered on the named host.
    #[error("no team server answered on host {0:#06x} (host down, another key, or no --team?)")]
    NoTeamServerOn(u16),
    /// The command could not be started there.
    #[error("cannot run {cmd:?} on host {host:#06x}: {err}")]
    Spawn {
        /// The command.
        cmd: String,
        /// Where.
        host: u16,
        /// The OS error.
        err: std::io::Error,
    },
    /// A bad argument vector.
    #[error("{0}")]
    BadCommand(String),
}

/// Result of this crate.
pub type Result<T> = std::result::Result<T, ExecError>;

/// Every parser of bytes another host wrote, on `data`, for the fuzz target
/// `exec`: the team server's Exec argument vector (its segment) and the
/// fields of the 32-byte messages (requests, Output, replies). Each returns
/// a value or an error, never panics.
#[doc(hidden)]
pub fn fuzz_parsers(data: &[u8]) {
    if let Ok(args) = server::argv(data) {
        assert!(!args.is_empty() && !args[0].is_empty());
    }
    let mut m = [0u8; 32];
    let n = data.len().min(32);
    m[..n].copy_from_slice(&data[..n]);
    for at in [4, 8, 12] {
        let _ = le32(&m, at);
    }
}

fn le32(m: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
}

fn put32(m: &mut [u8], at: usize, v: u32) {
    m[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
