//! Times the Ising model on N loopback nodes of this process:
//! `cargo run --release -p vipc-rmem-apps --example ising -- --nodes 4 --size 80 --sweeps 100`
//! prints the time per sweep, the exchange costs, and whether the grid
//! equals the sequential run's.

mod common;

use common::arg;
use std::time::Instant;
use vipc::FaultConfig;
use vipc_rmem_apps::ising::{model, IsingCluster, IsingParams};
use vipc_rmem_apps::loopback_nodes;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (nodes, size, sweeps) = (arg(&args, "--nodes", 4)?, arg(&args, "--size", 80)?, arg(&args, "--sweeps", 100)?);
    let params = IsingParams::new(size as usize, arg(&args, "--seed", 1)?);
    let cluster_nodes = loopback_nodes(nodes as usize, 1, &FaultConfig::default())?;
    let mut cluster = IsingCluster::start(&cluster_nodes, &params, |_| {})?;
    let t = Instant::now();
    cluster.run(sweeps)?;
    let per_sweep = t.elapsed() / sweeps.max(1) as u32;
    println!("ising {size}×{size} on {nodes} node(s): {sweeps} sweeps, {per_sweep:?} per sweep");
    for (rank, s) in cluster.stats().iter().enumerate() {
        println!("  rank {rank}: {} rows written, {} fetched again", s.rows_written, s.rows_fetched);
    }
    let same = cluster.grid() == model::reference(&params, sweeps);
    println!("equals the sequential run: {same}");
    if !same {
        return Err("the grid differs from the sequential run".into());
    }
    Ok(())
}
