//! I-Am-Here over real loopback sockets: nodes find each other, a stopped
//! node is declared down, and the kernel server's three table services.

mod common;

use common::*;
use std::time::{Duration, Instant};
use vipc::services::{
    self, kernel_pid, OP_HOST_AT, OP_RESET_HOSTS, STATUS_LOCAL_ONLY, STATUS_NO_ROW, STATUS_OK, STATUS_STALE,
};
use vipc::{HostId, Node};

fn sorted_hosts(n: &Node) -> Vec<HostId> {
    let mut h: Vec<HostId> = n.alive_hosts().unwrap().hosts().collect();
    h.sort_unstable();
    h
}

/// Polls `cond` every 5 ms until it holds (returns how long it took) or `limit` passes.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn nodes_find_each_other_and_a_stopped_node_is_declared_down() {
    let nodes = cluster(3);
    let all_up = wait_until(Duration::from_secs(5), || {
        sorted_hosts(&nodes[0]) == [2, 3] && sorted_hosts(&nodes[1]) == [1, 3] && sorted_hosts(&nodes[2]) == [1, 2]
    });
    let all_up = all_up.expect("every node hears the other two");
    let up_before = nodes[0].stats().hosts_up;
    nodes[2].shutdown();
    let down = wait_until(Duration::from_secs(5), || sorted_hosts(&nodes[0]) == [2] && sorted_hosts(&nodes[1]) == [1]);
    let down = down.expect("host 3 declared down by both");
    eprintln!("all up after {all_up:?}; host 3 down after {down:?} (default: 3 periods of 100 ms)");
    assert!(down >= Duration::from_millis(200), "declared down before 2 silent periods: {down:?}");
    let s = nodes[0].stats();
    assert_eq!((s.hosts_down, s.hosts_up, s.alive_hosts), (1, up_before, 1));
}

#[test]
fn the_kernel_server_reads_rows_and_resets_the_table() {
    let nodes = cluster(3);
    wait_until(Duration::from_secs(5), || sorted_hosts(&nodes[1]).len() == 2).expect("node 2 hears both others");
    let me = nodes[0].attach().unwrap();
    // Node 2's table, read remotely through its kernel server, matches its own view.
    let remote = services::query_hosts(&me, 2).unwrap();
    let local = nodes[1].alive_hosts().unwrap();
    assert_eq!(remote.seq, local.seq);
    assert_eq!(remote.rows, local.rows);
    assert!(remote.rows.iter().flatten().all(|h| h.addr == nodes[h.host as usize - 1].local_addr()));
    // GET_IAH_HOST_NO: a row under the current sequence number; a free row; a stale number.
    let host_at = |seq: u32, row: u32| {
        let mut m = [0u8; 32];
        m[0] = OP_HOST_AT;
        m[4..8].copy_from_slice(&seq.to_le_bytes());
        m[8..12].copy_from_slice(&row.to_le_bytes());
        me.send(&mut m, kernel_pid(2)).unwrap();
        (m[0], u16::from_le_bytes([m[12], m[13]]))
    };
    let first = remote.rows[0].expect("row 0 is taken").host;
    assert_eq!(host_at(remote.seq, 0), (STATUS_OK, first));
    assert_eq!(host_at(remote.seq, 7).0, STATUS_NO_ROW);
    assert_eq!(host_at(remote.seq.wrapping_sub(1), 0).0, STATUS_STALE);
    // RESET: refused from another node; from its own, node 2 forgets both
    // hosts and has them back within moments.
    let mut m = [0u8; 32];
    m[0] = OP_RESET_HOSTS;
    me.send(&mut m, kernel_pid(2)).unwrap();
    assert_eq!(m[0], STATUS_LOCAL_ONLY);
    let mut m = [0u8; 32];
    m[0] = OP_RESET_HOSTS;
    nodes[1].attach().unwrap().send(&mut m, kernel_pid(2)).unwrap();
    assert_eq!(m[0], STATUS_OK);
    wait_until(Duration::from_secs(5), || sorted_hosts(&nodes[1]) == [1, 3]).expect("relearned");
    assert!(nodes[1].stats().hosts_up >= 4, "both hosts came up again after the reset");
    assert!(services::query_hosts(&me, 2).unwrap().seq != remote.seq);
}
