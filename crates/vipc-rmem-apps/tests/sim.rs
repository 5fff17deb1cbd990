//! The Chandy–Misra simulation of the 32-bit adder on 1, 2 and 4 loopback
//! nodes makes exactly the output changes of the sequential event-driven
//! reference — hence the same sums and settle times — with linear and
//! random placement, with and without lost, duplicated and overtaken datagrams.

use std::time::Duration;
use vipc::FaultConfig;
use vipc_rmem_apps::loopback_nodes;
use vipc_rmem_apps::sim::{circuit::PERIOD, reference, Circuit, Placement, SimCluster, Vector};

/// Runs each batch on `p` nodes against the reference; the records written again.
fn simulate(p: usize, first: u16, placement: Placement, faults: &FaultConfig, batches: &[Vec<Vector>]) -> u64 {
    let c = Circuit::adder();
    let nodes = loopback_nodes(p, first, faults).expect("nodes");
    let mut cluster = SimCluster::start(&nodes, placement, |n| n.rto = Duration::from_millis(3)).expect("cluster");
    for vectors in batches {
        let want = reference::simulate(&c, vectors);
        let got = cluster.run(vectors).expect("run");
        assert_eq!(got, want, "{p} nodes, {placement:?}");
    }
    if p > 1 {
        // Linear placement is a pipeline: the last node sends nothing, the others do.
        assert!(cluster.stats().iter().filter(|s| s.records > 0).count() >= p - 1, "{:?}", cluster.stats());
    }
    cluster.stats().iter().map(|s| s.rewritten).sum()
}

#[test]
fn the_reference_adds_and_settles_within_a_period() {
    let c = Circuit::adder();
    let mut vectors = Vector::random(200, 3);
    vectors.push(Vector { a: u32::MAX, b: 1, cin: false }); // the carry through every bit
    vectors.push(Vector { a: 0, b: 0, cin: false });
    let out = reference::outcomes(&c, &vectors, &reference::simulate(&c, &vectors));
    for (v, o) in vectors.iter().zip(&out) {
        assert_eq!(o.sum, u64::from(v.a) + u64::from(v.b) + u64::from(v.cin), "{v:?}");
        assert!(o.settle < PERIOD, "{v:?}: {o:?}");
    }
    assert!(out[200].settle >= 32 * 4, "a full ripple settles late: {:?}", out[200]);
    assert!(out.iter().map(|o| o.settle).min() < out.iter().map(|o| o.settle).max());
}

#[test]
fn one_two_and_four_nodes_equal_the_reference() {
    let batches = [Vector::random(30, 1), Vector::random(30, 2)];
    for (k, p) in [1usize, 2, 4].into_iter().enumerate() {
        simulate(p, 200 + 10 * k as u16, Placement::Linear, &FaultConfig::default(), &batches);
        simulate(p, 230 + 10 * k as u16, Placement::Random(5), &FaultConfig::default(), &batches);
    }
}

#[test]
fn lost_duplicated_and_overtaken_records_change_nothing() {
    let faults = |seed| FaultConfig { loss: 0.15, duplicate: 0.02, reorder: 0.02, seed };
    let batches = [Vector::random(20, 7)];
    let again = simulate(2, 270, Placement::Random(9), &faults(1), &batches)
        + simulate(4, 280, Placement::Linear, &faults(2), &batches)
        + simulate(4, 290, Placement::Random(3), &faults(3), &batches);
    assert!(again > 0, "15% loss and no record written again");
}

#[test]
fn a_silent_node_fails_the_run_in_bounded_time() {
    let nodes = loopback_nodes(2, 300, &FaultConfig::default()).expect("nodes");
    let mut c =
        SimCluster::start(&nodes, Placement::Linear, |n| n.timeout = Duration::from_millis(500)).expect("cluster");
    drop(nodes);
    let t = std::time::Instant::now();
    assert!(c.run(&Vector::random(3, 1)).is_err());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}
