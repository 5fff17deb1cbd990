//! A parallel branch-and-bound search (000 §6.6.3): a 0/1 knapsack split
//! into subproblems that are started as processes on three nodes (remote
//! activation); whenever a worker finds a better solution it multicasts the
//! new bound to every node through a network port, and every worker prunes
//! with the best bound its node has heard. Run with
//! `cargo run --release -p vipc-ports --example search`.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig, Process};
use vipc_ports::{activate, Activator, NetPort};

const ITEMS: usize = 34;
/// Items fixed by the coordinator: 2^SPLIT subproblems.
const SPLIT: usize = 4;
const NODES: u16 = 3;

/// The instance: (weight, value), best value per weight first; and the capacity.
fn instance() -> (Vec<(u64, u64)>, u64) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut items: Vec<(u64, u64)> = (0..ITEMS).map(|_| (10 + next() % 90, 10 + next() % 90)).collect();
    items.sort_by(|a, b| (b.1 * a.0).cmp(&(a.1 * b.0)));
    let cap = items.iter().map(|i| i.0).sum::<u64>() / 2;
    (items, cap)
}

/// The optimum by dynamic programming, to check the search against.
fn optimum(items: &[(u64, u64)], cap: u64) -> u64 {
    let mut best = vec![0u64; cap as usize + 1];
    for &(w, v) in items {
        for c in (w as usize..=cap as usize).rev() {
            best[c] = best[c].max(best[c - w as usize] + v);
        }
    }
    best[cap as usize]
}

/// Upper bound of what items `i..` can add in `room`: the fractional relaxation.
fn bound(items: &[(u64, u64)], i: usize, room: u64) -> u64 {
    let (mut room, mut add) = (room, 0);
    for &(w, v) in &items[i..] {
        if w <= room {
            room -= w;
            add += v;
        } else {
            return add + v * room / w;
        }
    }
    add
}

/// One node's share: the best value it has heard of, and counters.
#[derive(Default)]
struct Shared {
    best: AtomicU64,
    explored: AtomicU64,
    multicasts: AtomicU64,
}

/// Depth-first search below `i`, pruning with the node's best bound; a
/// better solution is multicast to all nodes.
fn search(
    p: &Process,
    s: &Shared,
    port: &NetPort<u64, ()>,
    items: &[(u64, u64)],
    i: usize,
    room: u64,
    value: u64,
) -> u64 {
    s.explored.fetch_add(1, Ordering::Relaxed);
    if value > s.best.fetch_max(value, Ordering::Relaxed) {
        s.multicasts.fetch_add(1, Ordering::Relaxed);
        let _ = port.call_all(p, &value, Duration::from_millis(200));
    }
    if i == items.len() || value + bound(items, i, room) <= s.best.load(Ordering::Relaxed) {
        return value;
    }
    let (w, v) = items[i];
    let take = if w <= room { search(p, s, port, items, i + 1, room - w, value + v) } else { 0 };
    take.max(search(p, s, port, items, i + 1, room, value))
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub best: u64,
    pub optimum: u64,
    pub explored: u64,
    pub multicasts: u64,
    pub elapsed: Duration,
}

fn cluster() -> Vec<Node> {
    let socks: Vec<UdpSocket> = (0..NODES).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    let addrs: Vec<SocketAddr> = socks.iter().map(|s| s.local_addr().unwrap()).collect();
    drop(socks);
    (0..NODES).map(|i| Node::start(NodeConfig::fixed(i + 1, addrs[i as usize], addrs.clone())).unwrap()).collect()
}

pub fn run() -> Result<Report, vipc_ports::Error> {
    let nodes = cluster();
    while nodes.iter().any(|n| n.alive_hosts().map(|a| a.hosts().count() + 1 < NODES as usize).unwrap_or(true)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let port = Arc::new(NetPort::<u64, ()>::new("knapsack-bound"));
    let mut shares = Vec::new();
    let mut activators = Vec::new();
    for n in &nodes {
        let s = Arc::new(Shared::default());
        let heard = s.clone();
        port.import(n, move |b: u64| {
            heard.best.fetch_max(b, Ordering::Relaxed);
        })?;
        let act = Activator::start(n)?;
        let (s2, port2) = (s.clone(), port.clone());
        act.register("knapsack", move |p: &Process, prefix: u32| -> u64 {
            let (items, cap) = instance();
            let (mut room, mut value) = (cap, 0);
            for (i, &(w, v)) in items[..SPLIT].iter().enumerate() {
                if prefix >> i & 1 == 1 {
                    if w > room {
                        return 0;
                    }
                    room -= w;
                    value += v;
                }
            }
            search(p, &s2, &port2, &items, SPLIT, room, value)
        });
        shares.push(s);
        activators.push(act);
    }
    std::thread::sleep(Duration::from_millis(50)); // the importers join the port's group
    let me = nodes[0].attach()?;
    let t = Instant::now();
    let runs = (0..1u32 << SPLIT)
        .map(|prefix| activate::<u32, u64>(&me, 1 + (prefix % NODES as u32) as u16, "knapsack", &prefix))
        .collect::<Result<Vec<_>, _>>()?;
    let mut best = 0;
    for r in &runs {
        best = best.max(r.result(&me)?);
    }
    let elapsed = t.elapsed();
    let (items, cap) = instance();
    Ok(Report {
        best,
        optimum: optimum(&items, cap),
        explored: shares.iter().map(|s| s.explored.load(Ordering::Relaxed)).sum(),
        multicasts: shares.iter().map(|s| s.multicasts.load(Ordering::Relaxed)).sum(),
        elapsed,
    })
}

#[allow(dead_code)] // the tests include this file as a module and call `run`
fn main() {
    match run() {
        Ok(r) => {
            println!(
                "knapsack of {ITEMS} items on {NODES} nodes, {} subproblems: best {} (optimum {}), {} nodes explored, {} bounds multicast, {:.1} ms",
                1 << SPLIT,
                r.best,
                r.optimum,
                r.explored,
                r.multicasts,
                r.elapsed.as_secs_f64() * 1e3
            );
        }
        Err(e) => {
            eprintln!("search: {e}");
            std::process::exit(1);
        }
    }
}
