//! Times the Chandy–Misra simulation of the 32-bit adder on N loopback nodes:
//! `cargo run --release -p vipc-rmem-apps --example chandy_misra -- --nodes 4 --vectors 200 [--random]`
//! prints the time per vector, the records the links carried, and whether
//! the output changes equal the sequential reference's.

mod common;

use common::arg;
use std::time::Instant;
use vipc::FaultConfig;
use vipc_rmem_apps::loopback_nodes;
use vipc_rmem_apps::sim::{reference, Circuit, Placement, SimCluster, Vector};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (nodes, count) = (arg(&args, "--nodes", 4)?, arg(&args, "--vectors", 200)?);
    let placement = if args.iter().any(|a| a == "--random") { Placement::Random(1) } else { Placement::Linear };
    let vectors = Vector::random(count as usize, arg(&args, "--seed", 1)?);
    let cluster_nodes = loopback_nodes(nodes as usize, 1, &FaultConfig::default())?;
    let mut cluster = SimCluster::start(&cluster_nodes, placement, |_| {})?;
    let t = Instant::now();
    let trace = cluster.run(&vectors)?;
    let per_vector = t.elapsed() / count.max(1) as u32;
    println!("chandy-misra adder on {nodes} node(s), {placement:?}: {count} vectors, {per_vector:?} per vector");
    for (i, s) in cluster.stats().iter().enumerate() {
        println!("  node {i}: {} records written, {} again, {} sleeps", s.records, s.rewritten, s.sleeps);
    }
    let same = trace == reference::simulate(&Circuit::adder(), &vectors);
    println!("equals the sequential reference: {same}");
    if !same {
        return Err("the output changes differ from the sequential reference".into());
    }
    Ok(())
}
