//! Item `pipe`: throughput of a vipc pipe (000 §3.7, Table 3-13) against a
//! kernel pipe, a Unix socket pair and TCP on loopback, each moving the same
//! bytes from a writer thread to a reader thread.
//!
//! The vipc pipe runs in two configurations: all three parties on one node
//! (R-P-W) and each on its own node (R---P---W), where every byte crosses
//! the loopback twice.

use crate::error::{BenchError, Result};
use crate::vserver::node_config;
use std::io::{Read, Write};
use std::time::Instant;
use vipc::Node;
use vipc_pipe::{PipeConfig, PipeReader, PipeServer, PipeWriter};

/// Bytes per write of every writer (the vipc writer splits at its own chunk size).
const CHUNK: usize = 256 * 1024;

/// Moves `total` bytes through a writer/reader pair made by `make`: MB/s.
fn run_pair<W: Write + Send, R: Read + Send>(total: usize, w: W, r: R) -> Result<f64> {
    let data = vec![0x5au8; CHUNK];
    let t = Instant::now();
    let got = std::thread::scope(|s| -> Result<usize> {
        let writer = s.spawn(move || -> std::io::Result<()> {
            let mut w = w;
            let mut left = total;
            while left > 0 {
                let n = left.min(CHUNK);
                w.write_all(&data[..n])?;
                left -= n;
            }
            Ok(())
        });
        let mut r = r;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        writer.join().map_err(|_| BenchError::from("pipe writer panicked"))??;
        Ok(got)
    })?;
    if got != total {
        return Err(format!("pipe moved {got} of {total} bytes").into());
    }
    Ok(total as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn os_pipe(total: usize) -> Result<f64> {
    let (r, w) = rustix::pipe::pipe().map_err(std::io::Error::from)?;
    run_pair(total, std::fs::File::from(w), std::fs::File::from(r))
}

fn unix_pair(total: usize) -> Result<f64> {
    let (a, b) = std::os::unix::net::UnixStream::pair()?;
    run_pair(total, a, b)
}

fn tcp(total: usize) -> Result<f64> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let w = std::net::TcpStream::connect(l.local_addr()?)?;
    let (r, _) = l.accept()?;
    w.set_nodelay(true)?;
    run_pair(total, w, r)
}

fn vipc_pipe(total: usize, server: &Node, writer: &Node, reader: &Node, name: &str) -> Result<f64> {
    let e = |e: vipc_pipe::PipeError| BenchError::Other(format!("vipc pipe: {e}"));
    let _s = PipeServer::start(server, name, PipeConfig::default()).map_err(e)?;
    let r = PipeReader::open(reader, name).map_err(e)?;
    let w = PipeWriter::open(writer, name).map_err(e)?;
    run_pair(total, w, r)
}

/// Measures every pipe `rounds` times, round-robin; records medians against the kernel pipe.
pub fn run(out: &mut crate::Output, host: u16, total: usize, rounds: usize) -> Result<()> {
    let mut rec = |name: &str, v: f64, base: &str, bv: f64| {
        out.record(crate::Record::new(super::SUITE, name, v, "MB/s", base, bv));
    };
    let a = Node::start(node_config(host, vec![], None))?;
    let b = Node::start(node_config(host + 1, vec![a.local_addr()], None))?;
    let c = Node::start(node_config(host + 2, vec![a.local_addr(), b.local_addr()], None))?;
    let names = ["os", "unix", "tcp", "vipc_local", "vipc_remote"];
    let mut v: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds.max(1) {
        v[0].push(os_pipe(total)?);
        v[1].push(unix_pair(total)?);
        v[2].push(tcp(total)?);
        v[3].push(vipc_pipe(total, &a, &a, &a, &format!("bench-l{round}"))?);
        v[4].push(vipc_pipe(total, &a, &b, &c, &format!("bench-r{round}"))?);
    }
    let med: Vec<f64> = v.iter().map(|x| crate::stats::median(x)).collect();
    rec("files_pipe_unix_socket", med[1], "os_pipe", med[0]);
    rec("files_pipe_tcp", med[2], "os_pipe", med[0]);
    rec("files_pipe_vipc_local", med[3], "os_pipe", med[0]);
    rec("files_pipe_vipc_remote", med[4], "os_pipe", med[0]);
    rec("files_pipe_vipc_remote_vs_tcp", med[4], "tcp_loopback", med[2]);
    rec("files_pipe_vipc_remote_vs_unix", med[4], "unix_socket", med[1]);
    Ok(())
}
