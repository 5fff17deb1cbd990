//! Items `ising` and `chandy_misra` of suite `rmem`: the applications of
//! 003 §6.3 (crate `vipc-rmem-apps`) on 1, 2 and 4 loopback nodes of this
//! process, each node's work on its own thread, all exchange by remote
//! memory. Each figure is beside the same program on one node, so 003's
//! speedups (Tables 6.3 and 6.4) are 1 / ratio.
//!
//! | record | what | baseline |
//! |---|---|---|
//! | `ising_80_p2`, `ising_80_p4` | one sweep of an 80×80 grid, µs | `ising_80_p1` |
//! | `ising_320_p2`, `ising_320_p4` | one sweep of a 320×320 grid, µs | `ising_320_p1` |
//! | `chandy_misra_{linear,random}_p{2,4}` | one vector through the 32-bit adder, µs | `chandy_misra_p1` |

use crate::error::{BenchError, Result};
use crate::ipc::Ctx;
use crate::probe::{interleave, Probe};
use std::cell::RefCell;
use std::time::Instant;
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

/// Vectors per simulation run of item `chandy_misra`.
const VECTORS: usize = 100;

fn app_err(e: vipc_rmem_apps::Error) -> BenchError {
    BenchError::Other(e.to_string())
}

/// `p` loopback nodes on hosts of their own.
fn nodes(ctx: &mut Ctx<'_>, p: usize) -> Result<Vec<Node>> {
    let first = ctx.host();
    (1..p).for_each(|_| {
        ctx.host();
    });
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
        let mut probes: Vec<Probe<'_>> = NODES
            .iter()
            .zip(&clusters)
            .map(|(&p, c)| {
                Probe::new(&format!("ising_{size}_p{p}"), n, move || {
                    let t = Instant::now();
                    c.borrow_mut().run(chunk).map_err(app_err)?;
                    Ok(t.elapsed().as_secs_f64() * 1e6 / chunk as f64)
                })
            })
            .collect();
        against_first(ctx, &mut probes, rounds, warm)?;
        drop(probes);
        // Every cluster ran the same sweeps from the same seed: the same grid.
        let grid = clusters[0].borrow().grid();
        if clusters.iter().any(|c| c.borrow().grid() != grid) {
            return Err(BenchError::Other(format!("rmem/ising: the {size}×{size} grids differ between node counts")));
        }
        let fetched: u64 = clusters.iter().flat_map(|c| c.borrow().stats()).map(|s| s.rows_fetched).sum();
        ctx.out.note(format!(
            "rmem/ising {size}×{size}: {fetched} rows read from a neighbour after rto (a row late or lost)"
        ));
    }
    Ok(())
}

/// Item `chandy_misra`: runs of [`VECTORS`] vectors through the adder, time per vector.
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
