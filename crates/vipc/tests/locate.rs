//! Server location through the kernel servers' well-known group (000 §6.6).

mod common;

use common::*;
use std::time::{Duration, Instant};
use vipc::locate::{locate, locate_query, resolve, KERNEL_SERVER_GROUP};
use vipc::Scope;

#[test]
fn the_kernel_servers_group_finds_a_service_on_any_node() {
    let nodes = cluster(3);
    let echo = vipc::services::spawn_echo(&nodes[2], None).unwrap();
    nodes[2].set_pid("located-echo", echo, Scope::Any).unwrap();
    let hidden = vipc::services::spawn_echo(&nodes[2], None).unwrap();
    nodes[2].set_pid("local-only", hidden, Scope::Local).unwrap();
    let me = nodes[0].attach().unwrap();
    // Every node has heard the others (the query waits for all their answers).
    let deadline = Instant::now() + Duration::from_secs(5);
    while me.alive_hosts().unwrap().hosts().count() < 2 {
        assert!(Instant::now() < deadline, "the other nodes never became alive");
        std::thread::sleep(Duration::from_millis(20));
    }

    let got = locate(&me, "located-echo", Duration::from_secs(2)).unwrap();
    assert_eq!(got, Some(echo));
    let mut m = [4u8; 32];
    assert_eq!(me.send(&mut m, echo).unwrap(), echo, "the located pid serves");

    // Every kernel server says "not here": the answer comes before the limit.
    let start = Instant::now();
    assert_eq!(locate(&me, "nobody-has-this", Duration::from_secs(3)).unwrap(), None);
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    // A name registered for local lookups only is not given to other nodes.
    assert_eq!(locate(&me, "local-only", Duration::from_millis(500)).unwrap(), None);
    let there = nodes[2].attach().unwrap();
    assert_eq!(locate(&there, "local-only", Duration::from_millis(500)).unwrap(), Some(hidden));

    assert_eq!(resolve(&me, "located-echo").unwrap(), Some(echo));
    assert!(locate_query("").is_err());
    assert!(locate_query(&"x".repeat(31)).is_err());
    assert_eq!(nodes[1].stats().memberships, 1, "the kernel server is a member of {KERNEL_SERVER_GROUP}");
}

/// Answers lost on the way are asked for again: with half of the server
/// node's datagrams dropped, the query still finds the service.
#[test]
fn a_lost_answer_is_asked_for_again() {
    let nodes = cluster_with(3, 40, |i, cfg| {
        if i == 2 {
            cfg.faults.loss = 0.5;
        }
    });
    let echo = vipc::services::spawn_echo(&nodes[2], None).unwrap();
    nodes[2].set_pid("lossy-echo", echo, Scope::Any).unwrap();
    let me = nodes[0].attach().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while me.alive_hosts().unwrap().hosts().count() < 2 {
        assert!(Instant::now() < deadline, "the other nodes never became alive");
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..5 {
        assert_eq!(locate(&me, "lossy-echo", Duration::from_secs(5)).unwrap(), Some(echo));
    }
}
