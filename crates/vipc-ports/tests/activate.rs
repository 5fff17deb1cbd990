//! Remote process activation between two loopback nodes.

use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig, Process};
use vipc_ports::{activate, Activator, Error};

fn two_nodes() -> (Node, Node) {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    (a, b)
}

#[test]
fn a_process_starts_on_the_other_node_at_once_and_its_result_comes_later() {
    let (a, b) = two_nodes();
    let act = Activator::start(&a).unwrap();
    act.register("square", |p: &Process, x: u64| {
        assert_eq!(p.pid().host(), 1, "runs as a process of the activator's node");
        std::thread::sleep(Duration::from_millis(400));
        x * x
    });
    act.register("bytes", |_: &Process, n: u32| vec![7u8; n as usize]);
    act.register("boom", |_: &Process, _: ()| -> u8 { panic!("activated to fail") });
    let me = b.attach().unwrap();
    let t = Instant::now();
    let runs: Vec<_> = (0..8u64).map(|i| activate::<u64, u64>(&me, 1, "square", &i).unwrap()).collect();
    assert!(t.elapsed() < Duration::from_millis(400), "activation does not wait for the process: {:?}", t.elapsed());
    let pids: std::collections::BTreeSet<_> = runs.iter().map(|r| r.pid).collect();
    assert_eq!(pids.len(), 8, "eight distinct processes");
    assert!(pids.iter().all(|p| p.host() == 1));
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r.result(&me).unwrap(), (i * i) as u64);
    }
    // One after another they would take 3.2 s.
    assert!(t.elapsed() < Duration::from_millis(2000), "the eight ran side by side: {:?}", t.elapsed());
    assert!(matches!(runs[0].result(&me), Err(Error::NotFound(_))), "a result is handed out once");
    for n in [0u32, 30, 100_000] {
        let r = activate::<u32, Vec<u8>>(&me, 1, "bytes", &n).unwrap();
        assert_eq!(r.result(&me).unwrap(), vec![7u8; n as usize]);
    }
    let r = activate::<(), u8>(&me, 1, "boom", &()).unwrap();
    assert!(matches!(r.result(&me), Err(Error::HandlerPanicked { .. })));
}

#[test]
fn unknown_kinds_hosts_and_types_are_typed_errors_and_waits_are_bounded() {
    let (a, b) = two_nodes();
    let act = Activator::start(&a).unwrap();
    act.register("sleep", |_: &Process, ms: u64| {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    });
    let me = b.attach().unwrap();
    assert!(matches!(activate::<u64, u64>(&me, 1, "nonesuch", &1), Err(Error::NotFound(_))));
    assert!(matches!(activate::<String, u64>(&me, 1, "sleep", &"x".into()), Err(Error::NotFound(_))));
    assert!(matches!(activate::<u64, u64>(&me, 9, "sleep", &1), Err(Error::NotFound(_))), "no activator on host 9");
    let r = activate::<u64, u64>(&me, 1, "sleep", &300).unwrap();
    let e = vipc::within(Duration::from_millis(50), || r.result(&me)).unwrap_err();
    assert!(e.is_deadline(), "{e}");
    assert_eq!(r.result(&me).unwrap(), 300, "asking again after giving up works");
}
