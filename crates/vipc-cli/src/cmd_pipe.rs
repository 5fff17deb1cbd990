//! `vipc pipe`: pipes as a service from the shell (crate `vipc-pipe`).
//!
//! ```sh
//! vipc pipe serve logs &                 # a node serving pipe "logs" (registered as pipe:logs)
//! vipc pipe read logs | wc -c &          # a reader, from any node
//! seq 100000 | vipc pipe write logs      # a writer, from any node; the reader gets EOF when it is done
//! ```

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use clap::{Args, Subcommand};
use std::io::{Read, Write};
use std::time::Duration;
use vipc::Node;
use vipc_pipe::{PipeConfig, PipeError, PipeReader, PipeServer, PipeWriter};

/// Flags of `vipc pipe`.
#[derive(Args, Debug)]
pub struct PipeArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Run a node serving pipe NAME (registered as pipe:NAME) until SIGINT/SIGTERM.
    Serve {
        /// The pipe's name (1 to 27 bytes).
        name: String,
        /// Bytes the pipe buffers (writers block when it is full).
        #[arg(long, default_value_t = 1 << 20)]
        capacity: usize,
        /// Milliseconds after which a silent reader or writer is taken for dead.
        #[arg(long, default_value_t = 5000)]
        lease_ms: u64,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Copy standard input into pipe NAME; readers get end of file when every writer is done.
    Write {
        /// The pipe's name.
        name: String,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Copy pipe NAME to standard output until end of file (waits for a writer if none has come yet).
    Read {
        /// The pipe's name.
        name: String,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Print pipe NAME's counters (buffered bytes, readers, writers, waiting requests).
    Stat {
        /// The pipe's name.
        name: String,
        #[command(flatten)]
        node: NodeArgs,
    },
}

fn pipe_error(name: &str, e: PipeError) -> CliError {
    match e {
        e if e.is_broken_pipe() => CliError(format!("pipe {name}: broken pipe (every reader has gone)")),
        // These name the pipe themselves.
        PipeError::BadName(_) | PipeError::NotFound(_) => CliError(e.to_string()),
        e => CliError(format!("pipe {name}: {e}")),
    }
}

/// Runs `vipc pipe ACTION`.
pub fn run(a: &PipeArgs) -> CliResult<()> {
    match &a.action {
        Action::Serve { name, capacity, lease_ms, node } => serve(name, *capacity, *lease_ms, node),
        Action::Write { name, node } => write(name, node),
        Action::Read { name, node } => read(name, node),
        Action::Stat { name, node } => stat(name, node),
    }
}

/// The configuration `vipc pipe serve` and `vipc node --pipe` use.
pub fn config(capacity: usize, lease_ms: u64) -> CliResult<PipeConfig> {
    if capacity == 0 || capacity > 1 << 30 {
        return Err("--capacity must be 1 byte to 1 GiB".into());
    }
    if lease_ms < 100 {
        return Err("--lease-ms must be at least 100".into());
    }
    let lease = Duration::from_millis(lease_ms);
    Ok(PipeConfig { capacity, lease, tick: (lease / 5).min(Duration::from_millis(500)), ..PipeConfig::default() })
}

/// Starts the servers of pipes `names` on `node`.
pub fn start_servers(node: &Node, names: &[String], cfg: &PipeConfig) -> CliResult<Vec<PipeServer>> {
    let servers = names
        .iter()
        .map(|n| PipeServer::start(node, n, cfg.clone()).map_err(|e| pipe_error(n, e)))
        .collect::<CliResult<Vec<_>>>()?;
    // Serving already (see `check_name_free`); dropped, they stop.
    for n in names {
        crate::cmd_node::check_name_free(node, &vipc_pipe::proto::service_name(n), &format!("pipe {n}"))?;
    }
    Ok(servers)
}

fn serve(name: &str, capacity: usize, lease_ms: u64, args: &NodeArgs) -> CliResult<()> {
    let cfg = config(capacity, lease_ms)?;
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .map_err(|e| CliError(format!("cannot install the signal handler: {e}")))?;
    let node = Node::start(args.build()?)?;
    let servers = start_servers(&node, &[name.to_string()], &cfg)?;
    say!("vipc pipe: serving {name} (pipe:{name}) on host {:#06x} listening on {}", node.host_id(), node.local_addr());
    let _ = std::io::stdout().flush();
    let _ = rx.recv();
    drop(servers);
    node.shutdown();
    Ok(())
}

fn write(name: &str, args: &NodeArgs) -> CliResult<()> {
    let node = Node::start(args.build()?)?;
    let mut w = PipeWriter::open(&node, name).map_err(|e| pipe_error(name, e))?;
    let mut buf = vec![0u8; w.capacity().min(vipc_pipe::WRITE_CHUNK)];
    let mut stdin = std::io::stdin().lock();
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CliError(format!("reading standard input: {e}"))),
        };
        w.write_all_chunks(&buf[..n]).map_err(|e| pipe_error(name, e))?;
    }
    w.close().map_err(|e| pipe_error(name, e))?;
    node.shutdown();
    Ok(())
}

fn read(name: &str, args: &NodeArgs) -> CliResult<()> {
    let node = Node::start(args.build()?)?;
    let mut r = PipeReader::open(&node, name).map_err(|e| pipe_error(name, e))?;
    let mut buf = vec![0u8; r.capacity().min(1 << 20)];
    let mut out = std::io::stdout().lock();
    loop {
        let n = r.read_chunk(&mut buf).map_err(|e| pipe_error(name, e))?;
        if n == 0 {
            break;
        }
        match out.write_all(&buf[..n]).and_then(|()| out.flush()) {
            Ok(()) => {}
            // The consumer went away (`vipc pipe read p | head`): close our end quietly.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(CliError(format!("writing standard output: {e}"))),
        }
    }
    r.close().map_err(|e| pipe_error(name, e))?;
    node.shutdown();
    Ok(())
}

fn stat(name: &str, args: &NodeArgs) -> CliResult<()> {
    let node = Node::start(args.build()?)?;
    let p = node.attach()?;
    let s = vipc_pipe::stat(&p, name).map_err(|e| pipe_error(name, e))?;
    say!(
        "pipe {name}: {} of {} bytes buffered, {} reader(s), {} writer(s), {} read(s) and {} write(s) waiting",
        s.buffered,
        s.capacity,
        s.readers,
        s.writers,
        s.held_reads,
        s.held_writes
    );
    drop(p);
    node.shutdown();
    Ok(())
}
