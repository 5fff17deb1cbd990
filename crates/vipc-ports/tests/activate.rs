//! Remote process activation between two loopback nodes.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use vipc::{Node, NodeConfig, Process};
use vipc_ports::{activate, Activator, Error};

fn two_nodes() -> (Node, Node) {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    (a, b)
}

/// Where the activated processes meet: the count of those running, and
/// whether the test has let them finish.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    cv: Condvar,
}

#[test]
fn a_process_starts_on_the_other_node_at_once_and_its_result_comes_later() {
    let (a, b) = two_nodes();
    let act = Activator::start(&a).unwrap();
    let gate = Arc::new(Gate::default());
    let g = gate.clone();
    // Each process waits until all eight run at once and the test has opened
    // the gate — which it does only after every activation returned; a
    // process that waited in vain answers u64::MAX.
    act.register("square", move |p: &Process, x: u64| {
        assert_eq!(p.pid().host(), 1, "runs as a process of the activator's node");
        let mut s = g.state.lock().unwrap();
        s.0 += 1;
        g.cv.notify_all();
        let (s, _) = g.cv.wait_timeout_while(s, Duration::from_secs(20), |s| !(s.0 == 8 && s.1)).unwrap();
        if s.0 == 8 && s.1 {
            x * x
        } else {
            u64::MAX
        }
    });
    act.register("bytes", |_: &Process, n: u32| vec![7u8; n as usize]);
    act.register("boom", |_: &Process, _: ()| -> u8 { panic!("activated to fail") });
    let me = b.attach().unwrap();
    let runs: Vec<_> = (0..8u64).map(|i| activate::<u64, u64>(&me, 1, "square", &i).unwrap()).collect();
    gate.state.lock().unwrap().1 = true;
    gate.cv.notify_all();
    let pids: std::collections::BTreeSet<_> = runs.iter().map(|r| r.pid).collect();
    assert_eq!(pids.len(), 8, "eight distinct processes");
    assert!(pids.iter().all(|p| p.host() == 1));
    for (i, r) in runs.iter().enumerate() {
        let got = r.result(&me).unwrap();
        assert_eq!(got, (i * i) as u64, "process {i}: activation waited for it, or the eight did not run side by side");
    }
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
    // ... also once the process has ended meanwhile: its result was handed to
    // the wait given up, and lost.
    let r = activate::<u64, u64>(&me, 1, "sleep", &100).unwrap();
    let e = vipc::within(Duration::from_millis(20), || r.result(&me)).unwrap_err();
    assert!(e.is_deadline(), "{e}");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(r.result(&me).unwrap(), 100, "kept for the next ask");
}

#[test]
fn a_full_node_and_a_second_asker_are_answered_not_left_waiting() {
    // Room for the kernel server and its mover, the activator, and one activated process.
    let a = Node::start(NodeConfig {
        engine: vipc::EngineConfig { max_processes: 4, ..Default::default() },
        ..NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])
    })
    .unwrap();
    let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    let act = Activator::start(&a).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Mutex::new(rx);
    act.register("hold", move |_: &Process, x: u8| {
        let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(20));
        x
    });
    let me = b.attach().unwrap();
    let first = activate::<u8, u8>(&me, 1, "hold", &7).unwrap();
    let full = vipc::within(Duration::from_secs(5), || activate::<u8, u8>(&me, 1, "hold", &8));
    assert!(matches!(full, Err(Error::Full(_))), "{full:?}");
    // One asker waits for the result; a second is refused at once.
    let asker = b.attach().unwrap();
    let waiting = std::thread::scope(|s| {
        let t = s.spawn(|| first.result(&asker));
        std::thread::sleep(Duration::from_millis(100));
        let second = b.attach().unwrap();
        let r = vipc::within(Duration::from_secs(5), || first.result(&second));
        assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
        tx.send(()).unwrap();
        t.join().unwrap()
    });
    assert_eq!(waiting.unwrap(), 7);
}

/// Results nobody collects are kept up to 64 MiB in all, the oldest
/// forgotten beyond (4,096 of them of any size were kept).
#[test]
fn uncollected_results_are_bounded_in_bytes() {
    let (a, b) = two_nodes();
    let act = Activator::start(&a).unwrap();
    act.register("big", |_: &Process, n: u32| vec![7u8; n as usize]);
    let me = b.attach().unwrap();
    let runs: Vec<_> = (0..10)
        .map(|_| {
            let r = activate::<u32, Vec<u8>>(&me, 1, "big", &(7 << 20)).unwrap();
            std::thread::sleep(Duration::from_millis(200)); // it ends, its result kept
            r
        })
        .collect();
    assert_eq!(runs[9].result(&me).unwrap().len(), 7 << 20, "the newest is kept");
    assert!(matches!(runs[0].result(&me), Err(Error::NotFound(_))), "the oldest went: 70 MiB > 64 MiB");
    assert_eq!(runs[1].result(&me).unwrap().len(), 7 << 20, "the next one is kept: 63 MiB");
}

/// A result over 24 bytes (announced, then fetched) asked for under limits
/// that pass anywhere in between is never lost: a later ask gets it. The
/// activator forgets a result once announced, and the fetch was dropped
/// when the limit had passed: 152 of 153 such asks lost their result.
#[test]
fn a_large_result_asked_for_within_a_limit_is_never_lost() {
    let (a, b) = two_nodes();
    let act = Activator::start(&a).unwrap();
    act.register("bytes", |_: &Process, n: u32| vec![7u8; n as usize]);
    let me = b.attach().unwrap();
    let (mut gave_up, mut lost) = (0, Vec::new());
    for i in 0..150u64 {
        let r = activate::<u32, Vec<u8>>(&me, 1, "bytes", &100).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        match vipc_ports::within(Duration::from_micros(i * 7), || r.result(&me)) {
            Ok(v) => assert_eq!(v, vec![7u8; 100]),
            Err(e) if e.is_deadline() => {
                gave_up += 1;
                match r.result(&me) {
                    Ok(v) => assert_eq!(v, vec![7u8; 100]),
                    Err(e) => lost.push(e.to_string()),
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(lost.is_empty(), "{} of {gave_up} asks that gave up lost the result: {:?}", lost.len(), &lost[..1]);
}
