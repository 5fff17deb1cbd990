//! Item `ising` of suite `rmem`: the Ising model of 003 §6.3.1 (crate
//! `vipc-rmem-apps`) on 1, 2 and 4 loopback nodes of this process, each
//! worker on its own thread, boundary rows exchanged by remote write. The
//! figure is the time of one sweep; the baseline is the same grid on one
//! node (no exchange at all), so 003's speedup (Table 6.3) is 1 / ratio.
//!
//! | record | baseline |
//! |---|---|
//! | `ising_80_p2`, `ising_80_p4` | `ising_80_p1` |
//! | `ising_320_p2`, `ising_320_p4` | `ising_320_p1` |

use crate::error::{BenchError, Result};
use crate::ipc::Ctx;
use crate::probe::{find, interleave, Probe};
use std::cell::RefCell;
use std::time::Instant;
use vipc::FaultConfig;
use vipc_rmem_apps::ising::{IsingCluster, IsingParams};
use vipc_rmem_apps::loopback_nodes;

/// Grid sizes, each with the sweeps one timed operation runs.
const GRIDS: [(usize, u64); 2] = [(80, 20), (320, 2)];
/// Node counts; the first is the baseline.
const NODES: [usize; 3] = [1, 2, 4];

fn app_err(e: vipc_rmem_apps::Error) -> BenchError {
    BenchError::Other(e.to_string())
}

/// Item `ising`.
pub fn ising(ctx: &mut Ctx<'_>) -> Result<()> {
    for (size, chunk) in GRIDS {
        let (rounds, n, warm) = ctx.scale(7, 10, 2);
        let params = IsingParams::new(size, 1);
        let mut nodes = Vec::new();
        let mut clusters = Vec::new();
        for p in NODES {
            let first = ctx.host();
            (1..p).for_each(|_| {
                ctx.host();
            });
            let ns = loopback_nodes(p, first, &FaultConfig::default()).map_err(app_err)?;
            clusters.push(RefCell::new(IsingCluster::start(&ns, &params, |_| {}).map_err(app_err)?));
            nodes.push(ns);
        }
        let name = |p: usize| format!("ising_{size}_p{p}");
        let mut probes: Vec<Probe<'_>> = NODES
            .iter()
            .zip(&clusters)
            .map(|(&p, c)| {
                Probe::new(&name(p), n, move || {
                    let t = Instant::now();
                    c.borrow_mut().run(chunk).map_err(app_err)?;
                    Ok(t.elapsed().as_secs_f64() * 1e6 / chunk as f64)
                })
            })
            .collect();
        interleave(&mut probes, rounds, warm)?;
        let base = find(&probes, &name(1))?.rounds.median();
        for p in &NODES[1..] {
            ctx.rec(&name(*p), find(&probes, &name(*p))?.rounds.median(), "us", &name(1), base);
        }
        drop(probes);
        // Every cluster ran the same sweeps from the same seed: the same grid.
        let grid = clusters[0].borrow().grid();
        if clusters.iter().any(|c| c.borrow().grid() != grid) {
            return Err(BenchError::Other(format!("rmem/ising: the {size}×{size} grids differ between node counts")));
        }
        let fetched: u64 = clusters.iter().flat_map(|c| c.borrow().stats()).map(|s| s.rows_fetched).sum();
        ctx.out.note(format!("rmem/ising {size}×{size}: {fetched} rows read again after a lost write"));
    }
    Ok(())
}
