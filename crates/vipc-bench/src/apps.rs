//! Items `ising` and `chandy_misra` of suite `rmem`: the applications of
//! 003 §6.3 (crate `vipc-rmem-apps`) on 1, 2 and 4 loopback nodes, all
//! exchange by remote memory. Each figure is beside the same program on one
//! node, so 003's speedups (Tables 6.3 and 6.4) are 1 / ratio. Every node
//! of a figure is a thread of this process, except the `_procs` figures:
//! there each Ising worker is a separate OS process with a node of its own
//! (`bench-peer ising-worker`, [`crate::apps_procs`]), as 003's nodes were
//! separate machines.
//!
//! | record | what | baseline |
//! |---|---|---|
//! | `ising_80_p2`, `ising_80_p4` | one sweep of an 80×80 grid, workers as threads, µs | `ising_80_p1` |
//! | `ising_320_p2`, `ising_320_p4` | one sweep of a 320×320 grid, workers as threads, µs | `ising_320_p1` |
//! | `ising_{80,320}_p{2,4}_procs` | the same with each worker a process: the slowest worker's own time for a `RUN` of the sweeps, / sweeps, µs | `ising_{80,320}_p1` |
//! | `chandy_misra_{linear,random}_p{2,4}` | one vector through the 32-bit adder, µs | `chandy_misra_p1` |
//!
//! A `_procs` operation sends `RUN` to every worker at once and waits for
//! every `DONE`. Its time is the slowest worker's own (from reading `RUN`
//! to finishing its last sweep), not the driver's wall time: a worker that
//! starts early waits for its neighbours' rows, so the slowest one spans
//! the run, while the wall time adds the pipe round trip to each worker
//! and the bench's reader thread — the bench's control channel, not the
//! application (003 had none). The difference is reported as a note. After
//! the rounds every worker's digest of its rows must equal the same rows of
//! the one-node grid, else the item fails.
//!
//! The bar "4 nodes at least as fast as 1" reads `ising_80_p4_procs`: 003's
//! nodes were machines, and in one process the workers' nodes share one
//! scheduler and allocator (`ising_80_p4` stays, for comparison).

use crate::apps_procs::{IsingProcs, Sweeps};
use crate::error::{BenchError, Result};
use crate::ipc::Ctx;
use crate::probe::{interleave, Probe};
use std::cell::RefCell;
use std::time::{Duration, Instant};
use vipc::{FaultConfig, Node};
use vipc_rmem_apps::ising::{IsingCluster, IsingParams};
use vipc_rmem_apps::loopback_nodes;
use vipc_rmem_apps::sim::{reference, Circuit, Placement, SimCluster, Vector};

/// Grid sizes, each with the sweeps one timed operation runs (long enough
/// that starting the threads and filling the pipeline of neighbours do not
/// count) and the operations per round.
const GRIDS: [(usize, u64, usize); 2] = [(80, 50, 10), (320, 10, 4)];
/// Node counts; the first is the baseline.
const NODES: [usize; 3] = [1, 2, 4];
/// Worker counts of the `_procs` figures (one process, one node each).
const PROCS: [usize; 2] = [2, 4];
/// How long the workers in processes may take to answer one `RUN` (a
/// worker missing a ghost fails by itself after 10 s).
const DONE_TIMEOUT: Duration = Duration::from_secs(30);

/// Vectors per simulation run of item `chandy_misra`.
const VECTORS: usize = 100;

fn app_err(e: vipc_rmem_apps::Error) -> BenchError {
    BenchError::Other(e.to_string())
}

/// `p` host ids of their own: the first.
fn hosts(ctx: &mut Ctx<'_>, p: usize) -> u16 {
    let first = ctx.host();
    (1..p).for_each(|_| {
        ctx.host();
    });
    first
}

/// `p` loopback nodes on hosts of their own.
fn nodes(ctx: &mut Ctx<'_>, p: usize) -> Result<Vec<Node>> {
    let first = hosts(ctx, p);
    loopback_nodes(p, first, &FaultConfig::default()).map_err(app_err)
}

/// Runs the probes side by side and records each after the first against the first (one node).
fn against_first(ctx: &mut Ctx<'_>, probes: &mut [Probe<'_>], rounds: usize, warm: usize) -> Result<()> {
    interleave(probes, rounds, warm)?;
    let (base_name, base) = (probes[0].name.clone(), probes[0].rounds.median());
    for p in &probes[1..] {
        ctx.rec(&p.name, p.rounds.median(), "us", &base_name, base);
    }
    Ok(())
}

/// A run of workers in processes, with its last answers and the
/// driver's overhead (wall time − the slowest worker's time, µs) per operation.
struct Procs {
    procs: IsingProcs,
    last: Option<Sweeps>,
    overhead: Vec<f64>,
}

/// Item `ising`.
pub fn ising(ctx: &mut Ctx<'_>) -> Result<()> {
    for (size, chunk, per_round) in GRIDS {
        let (rounds, n, warm) = ctx.scale(7, per_round, 1);
        let params = IsingParams::new(size, 1);
        let mut held = Vec::new();
        let mut clusters = Vec::new();
        for p in NODES {
            let ns = nodes(ctx, p)?;
            clusters.push(RefCell::new(IsingCluster::start(&ns, &params, |_| {}).map_err(app_err)?));
            held.push(ns);
        }
        let mut procs = Vec::new();
        for p in PROCS {
            let first = hosts(ctx, p);
            let workers = IsingProcs::start(&ctx.exe, &params, p, first)?;
            procs.push(RefCell::new(Procs { procs: workers, last: None, overhead: Vec::new() }));
        }
        let threads = NODES.iter().zip(&clusters).map(|(&p, c)| {
            Probe::new(&format!("ising_{size}_p{p}"), n, move || {
                let t = Instant::now();
                c.borrow_mut().run(chunk).map_err(app_err)?;
                Ok(t.elapsed().as_secs_f64() * 1e6 / chunk as f64)
            })
        });
        // The slowest worker's own time: see the module's documentation.
        let processes = PROCS.iter().zip(&procs).map(|(&p, c)| {
            Probe::new(&format!("ising_{size}_p{p}_procs"), n, move || {
                let mut c = c.borrow_mut();
                let s = c.procs.run(chunk, DONE_TIMEOUT)?;
                c.overhead.push(s.wall_us - s.max_us());
                let per_sweep = s.max_us() / chunk as f64;
                c.last = Some(s);
                Ok(per_sweep)
            })
        });
        let mut probes: Vec<Probe<'_>> = threads.chain(processes).collect();
        against_first(ctx, &mut probes, rounds, warm)?;
        drop(probes);
        // Every cluster ran the same sweeps from the same seed: the same grid.
        let grid = clusters[0].borrow().grid();
        if clusters.iter().any(|c| c.borrow().grid() != grid) {
            return Err(BenchError::Other(format!("rmem/ising: the {size}×{size} grids differ between node counts")));
        }
        let half_sweeps = clusters[0].borrow().stats()[0].half_sweeps;
        let mut fetched: u64 = clusters.iter().flat_map(|c| c.borrow().stats()).map(|s| s.rows_fetched).sum();
        for (p, c) in PROCS.iter().zip(&procs) {
            let mut c = c.borrow_mut();
            let last = c.last.as_ref().ok_or("rmem/ising: the processes never ran")?;
            last.check(&grid, size, half_sweeps)
                .map_err(|e| format!("rmem/ising: {size}×{size} on {p} processes differs from one node: {e}"))?;
            fetched += c.procs.stats()?.iter().map(|s| s.rows_fetched).sum::<u64>();
            let mut overhead = c.overhead.clone();
            crate::stats::sort(&mut overhead);
            ctx.out.note(format!(
                "rmem/ising {size}×{size} on {p} processes: the driver's wall time exceeds the slowest worker's by {:.0} µs (median) per {chunk} sweeps",
                crate::stats::median(&overhead)
            ));
        }
        ctx.out.note(format!(
            "rmem/ising {size}×{size}: {fetched} rows read from a neighbour after rto (a row late or lost); the grids of threads and processes equal one node's"
        ));
    }
    Ok(())
}

/// Item `chandy_misra`: runs of `VECTORS` vectors through the adder, time per vector.
pub fn chandy_misra(ctx: &mut Ctx<'_>) -> Result<()> {
    let (rounds, n, warm) = ctx.scale(7, 5, 2);
    let vectors = Vector::random(VECTORS, 1);
    let want = reference::simulate(&Circuit::adder(), &vectors);
    let setups =
        [(1, Placement::Linear, "p1"), (2, Placement::Linear, "linear_p2"), (4, Placement::Linear, "linear_p4")];
    let setups =
        setups.into_iter().chain([(2, Placement::Random(1), "random_p2"), (4, Placement::Random(1), "random_p4")]);
    let mut held = Vec::new();
    let mut clusters = Vec::new();
    for (p, placement, name) in setups {
        let ns = nodes(ctx, p)?;
        clusters.push((name, RefCell::new(SimCluster::start(&ns, placement, |_| {}).map_err(app_err)?)));
        held.push(ns);
    }
    let mut probes: Vec<Probe<'_>> = clusters
        .iter()
        .map(|(name, c)| {
            let (vectors, want) = (&vectors, &want);
            Probe::new(&format!("chandy_misra_{name}"), n, move || {
                let t = Instant::now();
                let trace = c.borrow_mut().run(vectors).map_err(app_err)?;
                let per_vector = t.elapsed().as_secs_f64() * 1e6 / VECTORS as f64;
                if trace != *want {
                    return Err(BenchError::Other(format!("rmem/chandy_misra: {name} differs from the reference")));
                }
                Ok(per_vector)
            })
        })
        .collect();
    against_first(ctx, &mut probes, rounds, warm)?;
    drop(probes);
    let records: u64 = clusters.iter().flat_map(|c| c.1.borrow().stats()).map(|s| s.records).sum();
    let again: u64 = clusters.iter().flat_map(|c| c.1.borrow().stats()).map(|s| s.rewritten).sum();
    ctx.out.note(format!("rmem/chandy_misra: {records} records between nodes, {again} written again"));
    Ok(())
}
