//! `vipc cat NAME:PATH`: a remote file to stdout, without a mount.

use crate::error::{CliError, CliResult};
use crate::fsremote::{connect, fs_error, remote};
use crate::opts::NodeArgs;
use std::io::Write;
use vipc::Node;

/// Writes the remote file `spec` to stdout.
pub fn run(spec: &str, args: &NodeArgs) -> CliResult<()> {
    let (export, path) = remote(spec)?;
    let node = Node::start(args.build()?)?;
    let c = connect(&node, &export, &args.peers)?;
    let (h, _) = c.open(&path, libc::O_RDONLY, 0).map_err(|e| fs_error(spec, e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    loop {
        let n = c.read(h, off, &mut buf).map_err(|e| fs_error(spec, e))?;
        if n == 0 {
            break;
        }
        match out.write_all(&buf[..n]) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
            Err(e) => return Err(stdout_error(e)),
            Ok(()) => {}
        }
        off += n as u64;
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(stdout_error(e)),
        _ => {}
    }
    let _ = c.close(h);
    drop(c);
    node.shutdown();
    Ok(())
}

fn stdout_error(e: std::io::Error) -> CliError {
    CliError(format!("cannot write to standard output: {e}"))
}
