//! Network ports on three loopback nodes: a call reaches every importer,
//! results of any size come back keyed by node, a slow importer is named
//! as missing with the others' results kept, and misuse is a typed error.

use std::time::{Duration, Instant};
use vipc::Node;
use vipc_ports::{Error, NetPort};

/// `n` nodes (hosts 1..=n) that list each other as static peers, with full alive-host tables.
fn cluster(n: u16) -> Vec<Node> {
    let nodes = vipc::loopback_cluster(n as usize, 1, |_, _| {}).unwrap();
    let t = Instant::now();
    while nodes.iter().any(|x| x.alive_hosts().unwrap().hosts().count() + 1 < n as usize) {
        assert!(t.elapsed() < Duration::from_secs(5), "alive-host tables did not fill");
        std::thread::sleep(Duration::from_millis(10));
    }
    nodes
}

#[test]
fn a_call_reaches_every_importer_and_gathers_results_by_node() {
    let nodes = cluster(3);
    let port = NetPort::<u32, Vec<u8>>::new("bounds");
    for n in &nodes {
        let host = n.host_id();
        port.import(n, move |x: u32| vec![host as u8; x as usize]).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50)); // the importers join
    let me = nodes[0].attach().unwrap();
    for size in [3u32, 24, 25, 5000] {
        let got = port.call_all(&me, &size, Duration::from_secs(5)).unwrap().complete().unwrap();
        assert_eq!(got.len(), 3, "{size}: {got:?}");
        for (host, v) in got {
            assert_eq!(v, vec![host as u8; size as usize]);
        }
    }
}

/// Importers of `port` on `nodes` that answer with their host id.
fn hosts_answer(port: &NetPort<u64, u16>, nodes: &[Node]) {
    for n in nodes {
        let host = n.host_id();
        port.import(n, move |_| host).unwrap();
    }
}

#[test]
fn a_slow_importer_is_named_missing_and_the_others_results_are_kept() {
    let nodes = cluster(3);
    let port = NetPort::<u64, u16>::new("slowpoke");
    hosts_answer(&port, &nodes[..2]);
    port.import(&nodes[2], |ms| {
        std::thread::sleep(Duration::from_millis(ms));
        3
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let t = Instant::now();
    let g = port.call_all(&me, &600, Duration::from_millis(150)).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(600),
        "the limit, not the slow member, ends the call: {:?}",
        t.elapsed()
    );
    assert_eq!(g.results.into_iter().collect::<Vec<_>>(), vec![(1, 1), (2, 2)]);
    assert_eq!(g.missing, vec![3]);
    let g = port.call_all(&me, &600, Duration::from_millis(150)).unwrap();
    match g.complete() {
        Err(Error::Missing { missing, answered: 2 }) => assert_eq!(missing, vec![3]),
        other => panic!("expected host 3 missing, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(1300)); // the slow importer drains its two calls
    let g = port.call_all(&me, &0, Duration::from_secs(5)).unwrap();
    assert_eq!(g.complete().unwrap().len(), 3);
}

#[test]
fn nodes_without_importers_are_not_missing_and_large_messages_are_refused() {
    let nodes = cluster(3);
    let port = NetPort::<String, u8>::new("sparse");
    port.import(&nodes[1], |s: String| s.len() as u8).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let g = port.call_all(&me, &"abc".to_string(), Duration::from_secs(5)).unwrap();
    assert_eq!(g.complete().unwrap().into_iter().collect::<Vec<_>>(), vec![(2, 3)]);
    let long = "x".repeat(40);
    assert!(matches!(port.call_all(&me, &long, Duration::from_secs(1)), Err(Error::Encode(_))));
    // Another port's importers on the same group would not answer for this one.
    let other = NetPort::<String, u32>::new("sparse");
    let g = other.call_all(&me, &"abc".to_string(), Duration::from_millis(200)).unwrap();
    assert!(g.results.is_empty(), "other types, other port: {g:?}");
}

#[test]
fn an_importer_answering_garbage_is_named_missing_and_the_others_results_are_kept() {
    let nodes = cluster(3);
    let port = NetPort::<u64, u16>::new("garbled");
    hosts_answer(&port, &nodes[..2]);
    // On host 3, a member of the port's group that answers every call "OK"
    // with three bytes that are no u16 (an unfinished varint).
    let group = vipc_ports::netport::port_group("garbled");
    let (_liar, _t) = nodes[2]
        .spawn(move |p| {
            p.join_group(group).unwrap();
            let mut m = [0u8; 32];
            while let Ok(from) = p.receive(&mut m) {
                let mut a = [0u8; 32];
                a[4] = 3;
                a[8..11].fill(0xff);
                let _ = p.reply(&a, from);
            }
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let g = port.call_all(&me, &0, Duration::from_secs(5)).unwrap();
    assert_eq!(g.results.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(g.missing, vec![3]);
}

/// An importer whose handler panics is named missing, and the call is not
/// complete (it counted as neither answering nor missing: `complete()` was Ok).
#[test]
fn an_importer_whose_handler_panics_is_named_missing() {
    let nodes = cluster(3);
    let port = NetPort::<u64, u16>::new("panicky");
    hosts_answer(&port, &nodes[..2]);
    port.import(&nodes[2], |_| -> u16 { panic!("importer on host 3 fails") }).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let g = port.call_all(&me, &0, Duration::from_secs(5)).unwrap();
    assert_eq!(g.results.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(g.missing, vec![3]);
    assert!(g.complete().is_err());
}

#[test]
fn an_importer_stopped_is_no_longer_called_and_only_its_own_node_stops_it() {
    let nodes = cluster(2);
    let port = NetPort::<u64, u16>::new("stoppable");
    let importers: Vec<_> = nodes.iter().map(|n| (n.host_id(), port.import(n, move |_| 7).unwrap())).collect();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    assert_eq!(port.call_all(&me, &1, Duration::from_secs(5)).unwrap().complete().unwrap().len(), 2);
    let (host, importer) = importers[1];
    assert!(port.unimport(&nodes[0], importer).is_err(), "another node's importer is not ours to stop");
    let processes = nodes[1].stats().processes;
    port.unimport(&nodes[1], importer).unwrap();
    let t = Instant::now();
    while nodes[1].stats().processes >= processes {
        assert!(t.elapsed() < Duration::from_secs(5), "the importer's process did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = port.call_all(&me, &1, Duration::from_secs(5)).unwrap().complete().unwrap();
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![nodes[0].host_id()], "host {host} no longer answers");
}

/// An importer that cannot join the port's group (the node's memberships
/// are full) is an error of `import`: it returned a pid whose process had
/// already ended, and calls then found nobody.
#[test]
fn an_import_that_cannot_join_is_an_error() {
    let node = Node::start({
        let mut cfg = vipc::NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]);
        cfg.engine.max_memberships = 1; // the kernel server's group takes it
        cfg
    })
    .unwrap();
    let before = node.stats().processes;
    let port = NetPort::<u64, u64>::new("crowded");
    let r = port.import(&node, |x| x + 1);
    assert!(matches!(r, Err(Error::Vipc(vipc::Error::Protocol(vipc::ProtocolError::Limit(_))))), "{r:?}");
    assert_eq!(node.stats().processes, before, "no process left");
}

/// A node one of whose two importers fails is missing, though the other
/// answered (it was not: only hosts with no result at all were).
#[test]
fn a_host_one_of_whose_importers_failed_is_missing() {
    let nodes = cluster(2);
    let port = NetPort::<u64, u64>::new("twice");
    port.import(&nodes[1], |x| x).unwrap();
    port.import(&nodes[1], |x| if x > 0 { panic!("this importer fails") } else { x }).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let g = port.call_all(&me, &7, Duration::from_secs(2)).unwrap();
    assert_eq!(g.missing, vec![2], "{g:?}");
}
