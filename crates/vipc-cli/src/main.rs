//! `vipc`: run a node; run a command on another host; mount an export, or
//! copy, cat and list its files; send to a group; ping a process; read a
//! node's counters or its alive hosts; make a key; use a pipe; run the demo
//! cluster that exercises every primitive; run the benchmarks.

#![forbid(unsafe_code)]

/// `println!` that ends the program quietly when stdout is a closed pipe
/// (e.g. `vipc stat 1 | head`) instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            let _ = crate::OUTPUT_ERROR.set(e.to_string());
        }
    }};
}

/// The first error [`say!`] met writing standard output (a closed pipe
/// aside): the command then fails with it.
static OUTPUT_ERROR: std::sync::OnceLock<String> = std::sync::OnceLock::new();

mod cmd_bench;
mod cmd_cat;
mod cmd_cp;
mod cmd_exec;
mod cmd_group;
mod cmd_hosts;
mod cmd_keygen;
mod cmd_ls;
mod cmd_mount;
mod cmd_node;
mod cmd_ping;
mod cmd_pipe;
mod cmd_stat;
mod demo;
mod error;
mod fsremote;
mod opts;
mod target;

use clap::{Parser, Subcommand};
use opts::NodeArgs;
use std::path::PathBuf;
use std::process::ExitCode;

/// Transparent message passing for a cluster: the V kernel's IPC over UDP.
#[derive(Parser, Debug)]
#[command(
    name = "vipc",
    version,
    about = "vipc: transparent message passing for a cluster (the V kernel IPC over UDP)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a node hosting the kernel server and the echo service (name `echo`) until SIGINT/SIGTERM.
    Node {
        /// Also serve pipe NAME (registered as pipe:NAME; repeatable), as `vipc pipe serve` does.
        #[arg(long = "pipe", value_name = "NAME")]
        pipes: Vec<String>,
        /// Serve directory DIR as file-service export NAME (registered as fs:NAME; `:ro` = read-only; repeatable).
        #[arg(long = "export", value_name = "NAME=DIR[:ro]")]
        exports: Vec<String>,
        /// Run a member of GROUP that answers every message (a well-known group number or a group id; repeatable).
        #[arg(long = "member", value_name = "GROUP", value_parser = cmd_group::parse_group_id)]
        members: Vec<vipc::Pid>,
        /// Run a team server: anyone who can reach this node may run commands here as this user
        /// (`vipc exec`); use it with --key or on a trusted network only.
        #[arg(long)]
        team: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Run a command on the least loaded host with a team server (or --on HOST), with its output
    /// and exit status; Ctrl-C reaches the remote command.
    Exec {
        /// Run on this logical host (decimal or 0x hex) instead of the least loaded one.
        #[arg(long, value_parser = opts::parse_host)]
        on: Option<u16>,
        /// How long to collect the team servers' load answers (ms, at most an hour).
        #[arg(long, default_value_t = 50, value_parser = opts::parse_wait_ms)]
        deadline_ms: u64,
        /// How long to listen for the alive hosts first (ms, at most an hour).
        #[arg(long, default_value_t = 200, value_parser = opts::parse_wait_ms)]
        listen_ms: u64,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
        command: Vec<String>,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Mount a file server's export with FUSE (SERVER:EXPORT, SERVER = the server node's IP:PORT or empty)
    /// until SIGINT/SIGTERM; a stale mount left on MOUNTPOINT by a crashed `vipc mount` is cleaned up first.
    Mount(cmd_mount::MountArgs),
    /// Send to a process group: reply modes none/one/many, or reliable all-reply, k-reply=K, all-deliver, k-deliver=K.
    Gsend {
        /// The group: a well-known group number (1-65535) or a group id like 8001.0001.
        #[arg(value_name = "GROUP", value_parser = cmd_group::parse_group_id)]
        to: vipc::Pid,
        /// none, one, many, all-reply, k-reply=K, all-deliver or k-deliver=K.
        #[arg(long, default_value = "many", value_parser = cmd_group::parse_mode)]
        mode: cmd_group::Mode,
        /// Number of Sends.
        #[arg(short = 'c', long, default_value_t = 1,
              value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=u64::from(u32::MAX)))]
        count: u32,
        /// How long to listen for the alive hosts before sending (ms, at most an hour).
        #[arg(long, default_value_t = 200, value_parser = opts::parse_wait_ms)]
        listen_ms: u64,
        /// Pause between Sends (ms, at most an hour).
        #[arg(long, default_value_t = 0, value_parser = opts::parse_wait_ms)]
        interval_ms: u64,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Measure exchange latency with a process (a pid like 0012.0003, or a name such as `echo`).
    Ping {
        /// The process: HOST.LOCAL in hex, or a registered name.
        target: String,
        /// Number of exchanges.
        #[arg(short = 'c', long, default_value_t = 100)]
        count: u32,
        /// Bytes of read-write segment sent with each message and written back by the echo service.
        #[arg(long, default_value_t = 0)]
        size: usize,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Print a node's counters (TARGET: a logical host id, a pid, or a name).
    Stat {
        /// Logical host (decimal or 0x hex), pid (HOST.LOCAL) or registered name.
        target: String,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// List the hosts alive (I-Am-Here): this command's node's view, or TARGET's node's.
    Hosts {
        /// A logical host id, pid or registered name whose node's table to read.
        target: Option<String>,
        /// Without TARGET: how long to listen for announcements (ms, at most an hour).
        #[arg(long, default_value_t = 200, value_parser = opts::parse_wait_ms)]
        listen_ms: u64,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Write a fresh random cluster key (hex) to FILE, readable by the owner only.
    Keygen {
        /// The key file to create.
        file: PathBuf,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Start a 3-node cluster on loopback in this process and exercise every primitive.
    Demo,
    /// Benchmarks: vipc beside raw UDP/TCP, a condvar, ZeroMQ and gRPC (table, JSON lines, report, plots).
    Bench(cmd_bench::BenchArgs),
    /// Copy a file to, from or between exports (SRC and DST: NAME:PATH or a local path).
    Cp {
        /// The file to copy.
        src: String,
        /// Where to copy it (an existing directory: into it, under the same name).
        dst: String,
        /// Continue a partial copy: keep the bytes DST already has and copy the rest.
        #[arg(long)]
        resume: bool,
        /// No progress bar and no summary line.
        #[arg(short, long)]
        quiet: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Write a file of an export (NAME:PATH) to stdout.
    Cat {
        /// The file: NAME:PATH.
        file: String,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// List a directory of an export (NAME:PATH; NAME: is its root).
    Ls {
        /// The directory or file: NAME:PATH.
        path: String,
        /// Long format: mode, links, owner, group, size, mtime (local time, to the minute), name.
        #[arg(short = 'l')]
        long: bool,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Pipes as a service: `serve NAME`, `write NAME` (from stdin), `read NAME` (to stdout), `stat NAME`.
    Pipe(cmd_pipe::PipeArgs),
    /// Internal: a baseline server or client that `vipc bench` runs as a separate process.
    #[command(hide = true)]
    BenchPeer {
        /// The peer's kind and arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Warnings and errors, but fuser's session's warning: its only one is its
/// own unmount of a mount somebody unmounted from outside (`fusermount3
/// -u`), which fails and is no fault; `vipc mount` reports its unmounts itself.
const DEFAULT_LOG: &str = "warn,fuser::session=error";

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIPC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .try_init();
}

/// Clap's usage error on one line: what is wrong, with what it names on the
/// lines below (the missing arguments, a tip), without the usage summary.
fn usage_error_line(text: &str) -> String {
    let parts: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = parts.join(" ").replace(" tip: ", "; ");
    match line.strip_prefix("error: ").unwrap_or(&line) {
        "" => "invalid arguments".to_string(),
        rest => rest.to_string(),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::*;
            if matches!(e.kind(), DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand) {
                match e.print() {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return ExitCode::SUCCESS, // `| head`
                    Err(e) => {
                        eprintln!("vipc: error: cannot write to standard output: {e}");
                        return ExitCode::FAILURE;
                    }
                    Ok(()) => {}
                }
                return if e.kind() == DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            eprintln!("vipc: error: {}", usage_error_line(&e.to_string()));
            return ExitCode::from(2);
        }
    };
    init_tracing();
    let r = match &cli.cmd {
        Cmd::Node { node, pipes, exports, members, team } => cmd_node::run(node, pipes, exports, members, *team),
        Cmd::Exec { on, deadline_ms, listen_ms, command, node } => {
            let ms = std::time::Duration::from_millis;
            match cmd_exec::run(command, *on, ms(*deadline_ms), ms(*listen_ms), node) {
                // A status no process can exit with is the team server's error, not a success.
                Ok(code) => match u8::try_from(code) {
                    Ok(c) => return ExitCode::from(c),
                    Err(_) => Err(error::CliError(format!("the team server reported exit status {code}"))),
                },
                Err(e) => Err(e),
            }
        }
        Cmd::Gsend { to, mode, count, listen_ms, interval_ms, node } => {
            let ms = std::time::Duration::from_millis;
            cmd_group::run(*to, *mode, *count, ms(*listen_ms), ms(*interval_ms), node)
        }
        Cmd::Cp { src, dst, resume, quiet, node } => cmd_cp::run(src, dst, *resume, *quiet, node),
        Cmd::Cat { file, node } => cmd_cat::run(file, node),
        Cmd::Mount(a) => cmd_mount::run(a),
        Cmd::Ls { path, long, node } => cmd_ls::run(path, *long, node),
        Cmd::Ping { target, count, size, node } => cmd_ping::run(target, *count, *size, node),
        Cmd::Stat { target, node } => cmd_stat::run(target, node),
        Cmd::Hosts { target, listen_ms, node } => {
            cmd_hosts::run(target.as_deref(), std::time::Duration::from_millis(*listen_ms), node)
        }
        Cmd::Keygen { file, force } => cmd_keygen::run(file, *force),
        Cmd::Demo => demo::run(),
        Cmd::Bench(a) => cmd_bench::run(a),
        Cmd::Pipe(a) => cmd_pipe::run(a),
        Cmd::BenchPeer { args } => cmd_bench::peer(args),
    };
    let r = r.and_then(|()| match OUTPUT_ERROR.get() {
        Some(e) => Err(error::CliError(format!("cannot write to standard output: {e}"))),
        None => Ok(()),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vipc: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_keeps_what_it_names_on_one_line() {
        let missing = "error: the following required arguments were not provided:\n  <TARGET>\n\nUsage: vipc ping <TARGET>\n\nFor more information, try '--help'.\n";
        assert_eq!(usage_error_line(missing), "the following required arguments were not provided: <TARGET>");
        let typo = "error: unexpected argument '--cout' found\n\n  tip: a similar argument exists: '--count'\n\nUsage: vipc ping --count <COUNT> <TARGET>\n";
        assert_eq!(usage_error_line(typo), "unexpected argument '--cout' found; a similar argument exists: '--count'");
        assert_eq!(usage_error_line(""), "invalid arguments");
    }
}
