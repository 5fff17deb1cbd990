//! The Ising workers of 003 §6.3.1 as separate OS processes, each its own
//! vipc node on loopback, as 003's nodes were separate machines: the peer
//! program `ising-worker` and [`IsingProcs`], which starts P of them and
//! drives them line by line (the `_procs` figures of item `ising`, and the
//! `vipc` binary's test of a run across processes).
//!
//! The protocol on the worker's stdin / stdout:
//!
//! | line in | answer |
//! |---|---|
//! | (start) | `READY name=HEX addr=IP:PORT host=H first=F rows=R` |
//! | `CONNECT above=HEX below=HEX` | `CONNECTED` (the neighbours' segments imported) |
//! | `RUN sweeps=N` | `DONE us=T digest=D half_sweeps=H first=F rows=R`: T the worker's own time for the N sweeps (µs), D [`model::digest`] of its rows after them (hex), H its half-sweeps so far |
//! | `STATS` | `STATS half_sweeps= rows_written= rows_fetched= empty_fetches=` ([`WorkerStats`]) |
//!
//! Any command that fails answers one line `ERROR …`; the worker exits when
//! its stdin closes.

use crate::error::{BenchError, Result};
use crate::peer::{announce, parse_fields, say, stdin_lines, Peer, PeerArgs, PeerExe};
use crate::rmem::{hex, unhex};
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig};
use vipc_rmem_apps::ising::{model, IsingParams, IsingWorker, WorkerConfig, WorkerStats};

/// The peer kind.
pub const KIND: &str = "ising-worker";

/// How long importing a neighbour's segment may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts at starting the workers: their ports are picked free, released
/// and bound again by the workers, so another program may take one between.
const START_ATTEMPTS: usize = 3;

/// `bench-peer ising-worker --rank R --workers P --size L --seed S --host H
/// --listen IP:PORT --peers A,B,…`: exports worker R of P of an L×L grid
/// (temperature as [`IsingParams::new`]) on a node with static peers
/// `--peers` (where the neighbours' segments are looked up), then serves
/// the commands of the module's table until stdin closes.
pub fn worker_peer(a: &PeerArgs) -> Result<()> {
    let listen: SocketAddr = a.opt("listen")?.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let peers: String = a.opt("peers")?.unwrap_or_default();
    let peers = peers.split(',').filter(|s| !s.is_empty()).map(|s| s.parse()).collect::<Result<Vec<_>, _>>();
    let peers = peers.map_err(|e| format!("bad --peers: {e}"))?;
    let node = Node::start(NodeConfig::fixed(a.get("host")?, listen, peers))?;
    let params = IsingParams::new(a.get("size")?, a.get("seed")?);
    let cfg = WorkerConfig::new(a.get("rank")?, a.get("workers")?);
    let mut w = IsingWorker::export(&node, &params, cfg).map_err(app_err)?;
    announce(&[
        ("name", hex(&w.name())),
        ("addr", node.local_addr().to_string()),
        ("host", node.host_id().to_string()),
        ("first", w.first_row().to_string()),
        ("rows", (w.rows().len() / params.size).to_string()),
    ]);
    let mut connected = cfg.workers == 1;
    for line in stdin_lines() {
        match command(&node, &mut w, params.size, &mut connected, &line) {
            Ok(out) => say(&out),
            Err(e) => say(&format!("ERROR rank {}: {e}", cfg.rank)),
        }
    }
    Ok(())
}

/// One command of the worker (the module's table).
/// `connected`: whether the neighbours are imported (a worker of several
/// that ran unconnected would take its own rows for its ghosts).
fn command(node: &Node, w: &mut IsingWorker, size: usize, connected: &mut bool, line: &str) -> Result<String> {
    let verb = line.split_whitespace().next().unwrap_or("");
    match verb {
        "CONNECT" => {
            let (above, below) = (unhex(&field::<String>(line, "above")?)?, unhex(&field::<String>(line, "below")?)?);
            w.connect(node, above, below, CONNECT_TIMEOUT).map_err(app_err)?;
            *connected = true;
            Ok("CONNECTED".into())
        }
        "RUN" => {
            let sweeps: u64 = field(line, "sweeps")?;
            if !*connected {
                return Err("RUN before CONNECT".into());
            }
            let t = Instant::now();
            w.run(sweeps).map_err(app_err)?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            let s = w.stats();
            Ok(format!(
                "DONE us={us:.1} digest={:016x} half_sweeps={} first={} rows={}",
                model::digest(w.rows()),
                s.half_sweeps,
                w.first_row(),
                w.rows().len() / size
            ))
        }
        "STATS" => {
            let s = w.stats();
            Ok(format!(
                "STATS half_sweeps={} rows_written={} rows_fetched={} empty_fetches={}",
                s.half_sweeps, s.rows_written, s.rows_fetched, s.empty_fetches
            ))
        }
        _ => Err(format!("unknown command {line:?} (CONNECT, RUN, STATS)").into()),
    }
}

fn app_err(e: vipc_rmem_apps::Error) -> BenchError {
    BenchError::Other(e.to_string())
}

/// `key=value` of a command or answer line.
fn field<T: FromStr>(line: &str, key: &str) -> Result<T> {
    let f = parse_fields(line);
    let v = f.get(key).ok_or_else(|| format!("missing {key}= in {line:?}"))?;
    v.parse().map_err(|_| format!("bad {key}={v} in {line:?}").into())
}

/// One worker's answer to `RUN`.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    /// The worker's own time for the sweeps, µs.
    pub us: f64,
    /// [`model::digest`] of its rows.
    pub digest: u64,
    /// Its half-sweeps so far.
    pub half_sweeps: u64,
    /// Its first grid row.
    pub first: usize,
    /// How many rows it owns.
    pub rows: usize,
}

/// What one `RUN` of every worker gave.
#[derive(Clone, Debug)]
pub struct Sweeps {
    /// Each worker's answer, by rank.
    pub done: Vec<Done>,
    /// The driver's time from sending the first `RUN` to reading the last `DONE`, µs.
    pub wall_us: f64,
}

impl Sweeps {
    /// The slowest worker's own time, µs: the run's time without the pipes to the driver.
    pub fn max_us(&self) -> f64 {
        self.done.iter().map(|d| d.us).fold(0.0, f64::max)
    }

    /// Checks that the workers' bands tile `grid` (L×L, row-major, L = `size`) in rank
    /// order, that each has done `half_sweeps` half-sweeps and that its digest is that of the
    /// same rows of `grid`; the error names the first worker that differs.
    pub fn check(&self, grid: &[i8], size: usize, half_sweeps: u64) -> Result<()> {
        let mut next = 0;
        for (rank, d) in self.done.iter().enumerate() {
            let want = grid.get(d.first * size..(d.first + d.rows) * size).map(model::digest);
            let why = if d.first != next {
                format!("its rows start at {}, not {next}", d.first)
            } else if d.half_sweeps != half_sweeps {
                format!("{} half-sweeps, not {half_sweeps}", d.half_sweeps)
            } else if want != Some(d.digest) {
                let want = want.map_or_else(|| "(outside the grid)".to_string(), |w| format!("{w:016x}"));
                format!("rows {}..{} digest {:016x}, the grid's {want}", d.first, d.first + d.rows, d.digest)
            } else {
                next += d.rows;
                continue;
            };
            return Err(BenchError::Peer { name: format!("{KIND} {rank}"), msg: why });
        }
        match next == size {
            true => Ok(()),
            false => Err(format!("{KIND}: the workers' bands cover {next} of {size} rows").into()),
        }
    }
}

/// P Ising workers, each a `bench-peer ising-worker` process with a node of
/// its own, connected in a ring. Dropping it closes their stdin and kills them.
#[derive(Debug)]
pub struct IsingProcs {
    workers: Vec<Peer>,
}

impl IsingProcs {
    /// Starts `workers` worker processes for `params` (hosts `first_host`,
    /// `first_host + 1`, …) on free loopback ports, each with every other as a
    /// static peer, and connects each to its neighbours.
    pub fn start(exe: &PeerExe, params: &IsingParams, workers: usize, first_host: u16) -> Result<IsingProcs> {
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match IsingProcs::try_start(exe, params, workers, first_host) {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| "ising-worker: not started".into()))
    }

    fn try_start(exe: &PeerExe, params: &IsingParams, p: usize, first_host: u16) -> Result<IsingProcs> {
        let addrs = vipc::free_loopback_addrs(p)?;
        let peers = addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let mut procs = IsingProcs { workers: Vec::with_capacity(p) };
        for (rank, addr) in addrs.iter().enumerate() {
            let args = [
                ("rank", rank.to_string()),
                ("workers", p.to_string()),
                ("size", params.size.to_string()),
                ("seed", params.seed.to_string()),
                ("host", (first_host + rank as u16).to_string()),
                ("listen", addr.to_string()),
                ("peers", peers.clone()),
            ];
            let args: Vec<String> = args.into_iter().flat_map(|(k, v)| [format!("--{k}"), v]).collect();
            procs.workers.push(Peer::spawn(exe, KIND, &args)?);
        }
        let names = procs.workers.iter().map(|w| w.field("name").map(str::to_string)).collect::<Result<Vec<_>>>()?;
        for (rank, w) in procs.workers.iter_mut().enumerate() {
            let (above, below) = (&names[(rank + p - 1) % p], &names[(rank + 1) % p]);
            w.send_line(&format!("CONNECT above={above} below={below}"))?;
        }
        // Every worker is told before any answers: an import waits for the neighbour's node only.
        for rank in 0..p {
            procs.answer(rank, "CONNECTED", CONNECT_TIMEOUT * 2)?;
        }
        Ok(procs)
    }

    /// How many workers.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// True with no workers (never, once started).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Worker `rank`'s next line, which must start with `verb`; an `ERROR` line or silence is an error.
    fn answer(&mut self, rank: usize, verb: &str, timeout: Duration) -> Result<String> {
        let line = self.workers[rank].read_line(timeout)?;
        match line.split_whitespace().next() {
            Some(v) if v == verb => Ok(line),
            _ => {
                Err(BenchError::Peer { name: format!("{KIND} {rank}"), msg: format!("expected {verb}, got {line:?}") })
            }
        }
    }

    /// Runs `sweeps` more sweeps on every worker at once: `RUN` to each,
    /// then each one's `DONE`, waiting at most `timeout` for each.
    pub fn run(&mut self, sweeps: u64, timeout: Duration) -> Result<Sweeps> {
        let t = Instant::now();
        for w in &mut self.workers {
            w.send_line(&format!("RUN sweeps={sweeps}"))?;
        }
        let mut lines = Vec::with_capacity(self.workers.len());
        for rank in 0..self.workers.len() {
            lines.push(self.answer(rank, "DONE", timeout)?);
        }
        let wall_us = t.elapsed().as_secs_f64() * 1e6;
        let done = lines.iter().map(|l| parse_done(l)).collect::<Result<Vec<_>>>()?;
        Ok(Sweeps { done, wall_us })
    }

    /// Each worker's [`WorkerStats`], by rank.
    pub fn stats(&mut self) -> Result<Vec<WorkerStats>> {
        for w in &mut self.workers {
            w.send_line("STATS")?;
        }
        (0..self.workers.len())
            .map(|rank| {
                let l = self.answer(rank, "STATS", CONNECT_TIMEOUT)?;
                Ok(WorkerStats {
                    half_sweeps: field(&l, "half_sweeps")?,
                    rows_written: field(&l, "rows_written")?,
                    rows_fetched: field(&l, "rows_fetched")?,
                    empty_fetches: field(&l, "empty_fetches")?,
                })
            })
            .collect()
    }
}

fn parse_done(l: &str) -> Result<Done> {
    let digest: String = field(l, "digest")?;
    let digest = u64::from_str_radix(&digest, 16).map_err(|_| format!("bad digest in {l:?}"))?;
    let (us, half_sweeps, first, rows) =
        (field(l, "us")?, field(l, "half_sweeps")?, field(l, "first")?, field(l, "rows")?);
    Ok(Done { us, digest, half_sweeps, first, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_lines_parse_and_bands_are_checked_against_the_grid() {
        let grid: Vec<i8> = (0..16).map(|k| if k % 3 == 0 { 1 } else { -1 }).collect();
        let line = |first: usize, h: u64| {
            let d = model::digest(&grid[first * 4..(first + 2) * 4]);
            format!("DONE us=12.5 digest={d:016x} half_sweeps={h} first={first} rows=2")
        };
        let done =
            |lines: &[String]| Sweeps { done: lines.iter().map(|l| parse_done(l).unwrap()).collect(), wall_us: 1.0 };
        assert_eq!(parse_done(&line(2, 6)).unwrap().us, 12.5);
        assert!(done(&[line(0, 6), line(2, 6)]).check(&grid, 4, 6).is_ok());
        let err = |s: Sweeps| s.check(&grid, 4, 6).unwrap_err().to_string();
        assert!(err(done(&[line(0, 6), line(2, 4)])).contains("ising-worker 1: 4 half-sweeps, not 6"));
        assert!(err(done(&[line(2, 6), line(0, 6)])).contains("ising-worker 0: its rows start at 2, not 0"));
        assert!(err(done(&[line(0, 6)])).contains("cover 2 of 4 rows"));
        let mut other = grid.clone();
        other[9] = -other[9];
        assert!(done(&[line(0, 6), line(2, 6)])
            .check(&other, 4, 6)
            .unwrap_err()
            .to_string()
            .contains("ising-worker 1: rows 2..4"));
        assert!(parse_done("DONE us=1 digest=xyz half_sweeps=0 first=0 rows=1").is_err());
    }
}
