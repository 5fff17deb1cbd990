//! P simulation nodes on P vipc nodes of one process, each run on its own
//! thread: the shape of the tests, the bench and the example.

use super::circuit::{Circuit, Placement, Vector};
use super::node::{SimNode, SimStats};
use super::reference::OutputEvent;
use crate::{Error, Result};
use std::time::Duration;
use vipc::Node;

/// One simulation node per vipc node, every one linked to every other.
#[derive(Debug)]
pub struct SimCluster {
    sims: Vec<SimNode>,
}

impl SimCluster {
    /// Places the adder's gates on `nodes` and connects them; `tune` may change each node's settings.
    pub fn start(nodes: &[Node], placement: Placement, tune: impl Fn(&mut SimNode)) -> Result<SimCluster> {
        let circuit = Circuit::adder();
        let mut sims = Vec::with_capacity(nodes.len());
        for (me, node) in nodes.iter().enumerate() {
            let mut s = SimNode::export(node, &circuit, placement, me, nodes.len())?;
            tune(&mut s);
            sims.push(s);
        }
        let names: Vec<_> = sims.iter().map(SimNode::name).collect();
        for (s, node) in sims.iter_mut().zip(nodes) {
            s.connect(node, &names, Duration::from_secs(5))?;
        }
        Ok(SimCluster { sims })
    }

    /// Simulates the vectors on every node at once; the changes of the sum's
    /// gates in (time, gate) order. The nodes stay exported until the last
    /// is done, so a late acknowledgement can still be read from any.
    pub fn run(&mut self, vectors: &[Vector]) -> Result<Vec<OutputEvent>> {
        let results: Vec<Result<Vec<OutputEvent>>> = if let [only] = self.sims.as_mut_slice() {
            vec![only.run(vectors)]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = self.sims.iter_mut().map(|n| s.spawn(move || n.run(vectors))).collect();
                let join = |h: std::thread::ScopedJoinHandle<'_, _>| {
                    h.join().unwrap_or_else(|_| Err(Error::Params("a node panicked".into())))
                };
                handles.into_iter().map(join).collect()
            })
        };
        let mut trace = Vec::new();
        for r in results {
            trace.extend(r?);
        }
        trace.sort_unstable();
        Ok(trace)
    }

    /// Each node's costs, by index.
    pub fn stats(&self) -> Vec<SimStats> {
        self.sims.iter().map(SimNode::stats).collect()
    }
}
