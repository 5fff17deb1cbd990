//! P workers on P nodes of one process, each run on its own thread: the
//! shape of the tests, the bench and the example.

use super::model::IsingParams;
use super::worker::{IsingWorker, WorkerConfig, WorkerStats};
use crate::{Error, Result};
use std::time::Duration;
use vipc::Node;

/// One worker per node, connected in a ring.
#[derive(Debug)]
pub struct IsingCluster {
    params: IsingParams,
    workers: Vec<IsingWorker>,
}

impl IsingCluster {
    /// Exports a worker on each of `nodes` (rank = position) and connects
    /// each to its neighbours; `tune` may change each worker's configuration.
    pub fn start(nodes: &[Node], params: &IsingParams, tune: impl Fn(&mut WorkerConfig)) -> Result<IsingCluster> {
        let p = nodes.len();
        let mut workers = Vec::with_capacity(p);
        for (rank, node) in nodes.iter().enumerate() {
            let mut cfg = WorkerConfig::new(rank, p);
            tune(&mut cfg);
            workers.push(IsingWorker::export(node, params, cfg)?);
        }
        let names: Vec<_> = workers.iter().map(|w| w.name()).collect();
        for (rank, w) in workers.iter_mut().enumerate() {
            w.connect(&nodes[rank], names[(rank + p - 1) % p], names[(rank + 1) % p], Duration::from_secs(5))?;
        }
        Ok(IsingCluster { params: *params, workers })
    }

    /// Runs `sweeps` more sweeps on every worker at once. The workers stay
    /// exported until the last has finished, so a neighbour may still read
    /// a missing row from one that is done.
    pub fn run(&mut self, sweeps: u64) -> Result<()> {
        if let [only] = self.workers.as_mut_slice() {
            return only.run(sweeps);
        }
        let results: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = self.workers.iter_mut().map(|w| s.spawn(move || w.run(sweeps))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(Error::Params("a worker panicked".into()))))
                .collect()
        });
        results.into_iter().collect()
    }

    /// The whole grid, gathered from the workers' bands.
    pub fn grid(&self) -> Vec<i8> {
        let mut grid = Vec::with_capacity(self.params.size * self.params.size);
        for w in &self.workers {
            grid.extend_from_slice(w.rows());
        }
        grid
    }

    /// Each worker's costs, by rank.
    pub fn stats(&self) -> Vec<WorkerStats> {
        self.workers.iter().map(|w| w.stats()).collect()
    }
}
