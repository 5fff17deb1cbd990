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

/// A node that shuts down says goodbye: the others drop it at once, not
/// after three silent periods of 100 ms (a silent host's detection is the
/// engine tests' `a_silent_host_is_declared_down_within_the_bound_and_not_before`).
#[test]
fn nodes_find_each_other_and_a_stopped_node_is_dropped_at_once() {
    let nodes = cluster(3);
    let all_up = wait_until(Duration::from_secs(5), || {
        sorted_hosts(&nodes[0]) == [2, 3] && sorted_hosts(&nodes[1]) == [1, 3] && sorted_hosts(&nodes[2]) == [1, 2]
    });
    let all_up = all_up.expect("every node hears the other two");
    let up_before = nodes[0].stats().hosts_up;
    nodes[2].shutdown();
    let down = wait_until(Duration::from_secs(5), || sorted_hosts(&nodes[0]) == [2] && sorted_hosts(&nodes[1]) == [1]);
    let down = down.expect("host 3 dropped by both");
    eprintln!("all up after {all_up:?}; host 3 down after {down:?}");
    assert!(down < Duration::from_millis(150), "dropped only after {down:?}: no goodbye");
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

/// Without multicast a broadcast goes by unicast to every alive host, one
/// copy per address: 40 hosts announced from one socket (forged, or one
/// address behind many ids) get one copy, not 40 (the hostile-network
/// audit measured 3 packets back per forged announcement).
#[test]
fn unicast_fan_out_sends_one_copy_per_address() {
    use vipc_wire::{Flags, Header, PacketType, Pid};
    let nodes = cluster(1);
    let fake = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    fake.set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let to = nodes[0].local_addr();
    let announce = || {
        for i in 0..40u16 {
            let mut h = Header::new(PacketType::IAmHere);
            (h.flags, h.incarnation, h.src) = (Flags(0), 1, Pid::new(0x6000 + i, 0));
            h.message[..4].copy_from_slice(&100u32.to_be_bytes());
            fake.send_to(&vipc_wire::to_vec(&h, &[], None), to).unwrap();
        }
    };
    announce();
    let heard = wait_until(Duration::from_secs(2), || sorted_hosts(&nodes[0]).len() == 40);
    assert!(heard.is_some(), "the node took the 40 announcements: {:?}", sorted_hosts(&nodes[0]));
    let mut buf = [0u8; 2048];
    while fake.recv_from(&mut buf).is_ok() {}
    // 350 ms: the node's own IAmHere goes out 3 or 4 times (every 100 ms).
    let (start, mut got) = (Instant::now(), 0);
    while start.elapsed() < Duration::from_millis(350) {
        if start.elapsed().as_millis() % 100 < 5 {
            announce(); // keep the 40 rows alive, and answered: they are no newcomers
        }
        got += usize::from(fake.recv_from(&mut buf).is_ok());
    }
    assert!(got >= 2, "no broadcast reached the fake hosts' address: the test tested nothing");
    assert!(got <= 10, "{got} datagrams to one address in 350 ms: a copy per row");
}
