//! The Ising model on 1, 2 and 4 loopback nodes equals the sequential
//! reference bit for bit, with and without lost, duplicated and overtaken
//! datagrams.

use std::time::Duration;
use vipc::FaultConfig;
use vipc_rmem_apps::ising::{model, IsingCluster, IsingParams};
use vipc_rmem_apps::loopback_nodes;

fn lossy(loss: f64, seed: u64) -> FaultConfig {
    FaultConfig { loss, duplicate: 0.02, reorder: 0.02, seed }
}

/// Runs `sweeps` sweeps in `chunks` calls on `p` nodes; the grid and the total cost.
fn run(p: usize, first_host: u16, params: &IsingParams, sweeps: u64, chunks: u64, faults: &FaultConfig) -> Vec<i8> {
    let nodes = loopback_nodes(p, first_host, faults).expect("nodes");
    let mut c = IsingCluster::start(&nodes, params, |cfg| cfg.rto = Duration::from_millis(3)).expect("cluster");
    for _ in 0..chunks {
        c.run(sweeps / chunks).expect("run");
    }
    let s = c.stats();
    assert!(s.iter().all(|w| w.half_sweeps == 2 * sweeps), "{s:?}");
    if p > 1 {
        assert!(s.iter().all(|w| w.rows_written == 4 * sweeps), "{s:?}");
    }
    c.grid()
}

#[test]
fn the_reference_changes_the_grid_and_lowers_its_energy() {
    let p = IsingParams::new(16, 5);
    let start = model::reference(&p, 0);
    let after = model::reference(&p, 20);
    assert_ne!(start, after);
    assert_ne!(model::reference(&IsingParams::new(16, 6), 20), after, "another seed, another run");
    let energy = |g: &[i8]| {
        let n = p.size;
        let mut e = 0.0;
        for i in 0..n {
            for j in 0..n {
                let s = f64::from(g[i * n + j]);
                e -= model::coupling(&p, i, j, false) * s * f64::from(g[i * n + (j + 1) % n]);
                e -= model::coupling(&p, i, j, true) * s * f64::from(g[((i + 1) % n) * n + j]);
            }
        }
        e
    };
    assert!(energy(&after) < energy(&start) - 10.0, "{} vs {}", energy(&after), energy(&start));
}

#[test]
fn one_two_and_four_nodes_equal_the_sequential_run() {
    let params = IsingParams::new(24, 11);
    let want = model::reference(&params, 12);
    for (k, p) in [1usize, 2, 4].into_iter().enumerate() {
        let got = run(p, 10 + 10 * k as u16, &params, 12, 3, &FaultConfig::default());
        assert_eq!(got, want, "{p} nodes");
    }
}

#[test]
fn bands_of_one_row_and_uneven_bands_work() {
    for (size, p) in [(4usize, 4usize), (10, 4), (6, 4)] {
        let params = IsingParams::new(size, 3);
        let got = run(p, 40 + size as u16 * 4, &params, 6, 1, &FaultConfig::default());
        assert_eq!(got, model::reference(&params, 6), "{size}×{size} on {p}");
    }
}

#[test]
fn lost_duplicated_and_overtaken_rows_change_nothing() {
    let params = IsingParams::new(32, 21);
    let want = model::reference(&params, 15);
    for (k, p) in [2usize, 4].into_iter().enumerate() {
        let nodes = loopback_nodes(p, 100 + 10 * k as u16, &lossy(0.15, 7 + k as u64)).expect("nodes");
        let mut c = IsingCluster::start(&nodes, &params, |cfg| cfg.rto = Duration::from_millis(3)).expect("cluster");
        c.run(15).expect("run");
        assert_eq!(c.grid(), want, "{p} nodes under 15% loss");
        let fetched: u64 = c.stats().iter().map(|s| s.rows_fetched).sum();
        assert!(fetched > 0, "15% loss and no row fetched again: {:?}", c.stats());
    }
}

#[test]
fn heavy_duplication_and_reordering_change_nothing() {
    let params = IsingParams::new(20, 4);
    let faults = FaultConfig { loss: 0.0, duplicate: 0.3, reorder: 0.3, seed: 9 };
    let nodes = loopback_nodes(4, 130, &faults).expect("nodes");
    let mut c = IsingCluster::start(&nodes, &params, |cfg| cfg.rto = Duration::from_millis(3)).expect("cluster");
    c.run(10).expect("run");
    assert_eq!(c.grid(), model::reference(&params, 10));
}

#[test]
fn bad_parameters_are_refused() {
    let nodes = loopback_nodes(4, 150, &FaultConfig::default()).expect("nodes");
    for size in [7usize, 2, 0] {
        let r = IsingCluster::start(&nodes, &IsingParams::new(size, 1), |_| {});
        assert!(matches!(r, Err(vipc_rmem_apps::Error::Params(_))), "{size}: {r:?}");
    }
}

#[test]
fn a_silent_neighbour_fails_the_run_in_bounded_time() {
    let params = IsingParams::new(8, 1);
    let nodes = loopback_nodes(2, 160, &FaultConfig::default()).expect("nodes");
    let mut c = IsingCluster::start(&nodes, &params, |cfg| {
        cfg.rto = Duration::from_millis(2);
        cfg.timeout = Duration::from_millis(300);
    })
    .expect("cluster");
    drop(nodes); // the nodes stop: no row can come
    let t = std::time::Instant::now();
    assert!(c.run(2).is_err());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn every_ghost_depth_equals_the_sequential_run() {
    // 32 rows over 4 nodes: 8 rows a band, so every depth up to 8 is kept;
    // 7 sweeps in runs of 2, 3 and 2, so exchanges straddle the runs.
    let params = IsingParams::new(32, 17);
    let want = model::reference(&params, 7);
    for (k, depth) in [1usize, 2, 3, 5, 8].into_iter().enumerate() {
        let nodes = loopback_nodes(4, 170 + 10 * k as u16, &FaultConfig::default()).expect("nodes");
        let mut c = IsingCluster::start(&nodes, &params, |cfg| {
            cfg.rto = Duration::from_millis(3);
            cfg.depth = depth;
        })
        .expect("cluster");
        for sweeps in [2, 3, 2] {
            c.run(sweeps).expect("run");
        }
        assert_eq!(c.grid(), want, "depth {depth}");
        // One exchange of `depth` rows to each side every `depth` half-sweeps.
        let rows = (14 / depth * depth * 2) as u64;
        assert!(c.stats().iter().all(|s| s.rows_written == rows), "depth {depth}: {:?}", c.stats());
    }
    let nodes = loopback_nodes(4, 230, &FaultConfig::default()).expect("nodes");
    let r = IsingCluster::start(&nodes, &params, |cfg| cfg.depth = 9);
    assert!(matches!(r, Err(vipc_rmem_apps::Error::Params(_))), "depth 9: {r:?}");
}
