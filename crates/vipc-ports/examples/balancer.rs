//! A load balancer that uses all four completion checkpoints (002 §4.2):
//! node 1 hands jobs to worker nodes 2 and 3 (node 3 is slower).
//!
//! - `OnDelivery` is the flow control: a dispatcher per worker node sends
//!   the next job only when a worker process has taken the previous one,
//!   so the faster node ends up with more jobs.
//! - `Immediate` logs each dispatch to node 1's log port without waiting.
//! - `OnReceipt` carries each result back to node 1's result port: the
//!   worker goes on as soon as node 1 holds it.
//! - `OnReturn` asks each worker node, at the end, how many jobs it did.
//!
//! Run with `cargo run --release -p vipc-ports --example balancer`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use vipc::{Node, NodeConfig};
use vipc_ports::{within, Checkpoint, Ports, Region};

const JOBS: u64 = 120;
const WORKERS_PER_NODE: usize = 2;

/// The job: how many primes are below `n`.
fn primes_below(n: u64) -> u64 {
    (2..n).filter(|&k| (2..).take_while(|d| d * d <= k).all(|d| k % d != 0)).count() as u64
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    /// Jobs each worker node did (asked with OnReturn calls).
    pub per_node: BTreeMap<u16, u64>,
    /// Results that came back, all checked.
    pub results: usize,
    /// Log lines node 1 received through Immediate sends.
    pub logged: u64,
}

/// A worker node: `WORKERS_PER_NODE` processes in a region on its `jobs` and `stats` ports.
fn worker(node: &Node, extra: Duration) -> Result<Arc<Ports>, vipc_ports::Error> {
    let host = node.host_id();
    let ports = Arc::new(Ports::start(node)?);
    let jobs = Arc::new(ports.open::<(u64, u64), ()>(&format!("jobs@{host}"))?);
    let stats = Arc::new(ports.open::<(), u64>(&format!("stats@{host}"))?);
    let done = Arc::new(AtomicU64::new(0));
    for _ in 0..WORKERS_PER_NODE {
        let (ports, jobs, stats, done, node) = (ports.clone(), jobs.clone(), stats.clone(), done.clone(), node.clone());
        std::thread::spawn(move || -> Result<(), vipc_ports::Error> {
            let me = node.attach()?;
            let results = ports.connect::<(u64, u64), ()>(&me, "results")?;
            let mut region = Region::new(&me, &ports)
                .on(&jobs, |(id, n): (u64, u64)| {
                    std::thread::sleep(extra);
                    let r = primes_below(n);
                    done.fetch_add(1, Ordering::Relaxed);
                    // OnReceipt: go on as soon as node 1 holds the result.
                    if let Err(e) = results.send(&me, &(id, r), Checkpoint::OnReceipt) {
                        eprintln!("worker {host}: result {id} lost: {e}");
                    }
                })
                .on(&stats, |()| done.load(Ordering::Relaxed));
            region.serve()
        });
    }
    Ok(ports)
}

pub fn run() -> Result<Report, vipc_ports::Error> {
    let n1 = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
    let peers = vec![n1.local_addr()];
    let n2 = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), peers.clone()))?;
    let n3 = Node::start(NodeConfig::fixed(3, "127.0.0.1:0".parse().unwrap(), peers))?;
    let front = Ports::start(&n1)?;
    let log = front.open::<String, ()>("log")?;
    let results = front.open::<(u64, u64), ()>("results")?;
    let _w2 = worker(&n2, Duration::ZERO)?;
    let _w3 = worker(&n3, Duration::from_millis(2))?;

    // The next job to hand out, shared by the two dispatchers.
    let next = AtomicU64::new(0);
    let got = RefCell::new(BTreeMap::new());
    let logged = Cell::new(0u64);
    std::thread::scope(|s| -> Result<(), vipc_ports::Error> {
        for host in [2u16, 3] {
            let (front, next, n1) = (&front, &next, &n1);
            s.spawn(move || -> Result<(), vipc_ports::Error> {
                let me = n1.attach()?;
                let jobs = front.connect::<(u64, u64), ()>(&me, &format!("jobs@{host}"))?;
                let log = front.connect::<String, ()>(&me, "log")?;
                loop {
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    if id >= JOBS {
                        return Ok(());
                    }
                    // OnDelivery: returns once a worker process of `host` took the job.
                    jobs.send(&me, &(id, 2000 + id * 10), Checkpoint::OnDelivery)?;
                    log.send(&me, &format!("job {id} taken on node {host}"), Checkpoint::Immediate)?;
                }
            });
        }
        // Node 1's collector: results and log lines, the earliest first.
        let me = n1.attach()?;
        let mut region = Region::new(&me, &front)
            .on(&results, |(id, r): (u64, u64)| {
                got.borrow_mut().insert(id, r);
            })
            .on(&log, |_line: String| logged.set(logged.get() + 1));
        while (got.borrow().len() as u64) < JOBS || logged.get() < JOBS {
            within(Duration::from_secs(10), || region.serve_one())?;
        }
        Ok(())
    })?;
    let got = got.into_inner();
    for (id, r) in &got {
        assert_eq!(*r, primes_below(2000 + id * 10), "job {id}");
    }
    // OnReturn: each worker node says how many jobs it did.
    let me = n1.attach()?;
    let mut per_node = BTreeMap::new();
    for host in [2u16, 3] {
        per_node.insert(host, front.connect::<(), u64>(&me, &format!("stats@{host}"))?.call(&me, &())?);
    }
    Ok(Report { per_node, results: got.len(), logged: logged.get() })
}

#[allow(dead_code)] // the tests include this file as a module and call `run`
fn main() {
    match run() {
        Ok(r) => println!(
            "balancer: {} jobs, {} results checked, {} log lines; jobs per node (node 3 is slower): {:?}",
            JOBS, r.results, r.logged, r.per_node
        ),
        Err(e) => {
            eprintln!("balancer: {e}");
            std::process::exit(1);
        }
    }
}
