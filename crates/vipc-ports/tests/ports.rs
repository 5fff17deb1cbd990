//! Ports, checkpoints and regions on loopback nodes: each checkpoint
//! returns at its own point, regions take the earliest message, share a
//! port, obey deadlines, and nothing is lost.

use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig, Process};
use vipc_ports::{within, Checkpoint, Error, Port, Ports, Region};

fn two_nodes() -> (Node, Node) {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    (a, b)
}

/// A flag one thread raises and others wait for (at most `PATIENCE`, so
/// that a checkpoint that waits for the wrong event fails instead of hanging).
#[derive(Default)]
struct Gate(std::sync::Mutex<bool>, std::sync::Condvar);

const PATIENCE: Duration = Duration::from_secs(10);

impl Gate {
    fn open(&self) {
        *self.0.lock().unwrap() = true;
        self.1.notify_all();
    }

    /// Waits for the gate; false if it stayed shut for `PATIENCE`.
    fn wait(&self) -> bool {
        let g = self.0.lock().unwrap();
        *self.1.wait_timeout_while(g, PATIENCE, |open| !*open).unwrap().0
    }

    fn is_open(&self) -> bool {
        *self.0.lock().unwrap()
    }
}

/// Sends with checkpoint `cp` from node `b` to a region on node `a` that
/// takes the message only once gate `take` opens and ends its handler only
/// once gate `finish` opens. A gate the send must not wait for is opened
/// after the send returned — a send that waited for it anyway would make the
/// region wait `PATIENCE` in vain —, one it must wait for by another thread
/// a while later. Returns, as of the send's return, whether the message
/// could have been taken (`take` open) and whether its handler had ended;
/// and whether the region ever waited in vain.
fn where_checkpoint_returns(cp: Checkpoint) -> ((bool, bool), bool) {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<u32, u32>("slow").unwrap();
    let (pa, aa) = (ports.clone(), a.clone());
    let (take, finish, handled) = (Arc::new(Gate::default()), Arc::new(Gate::default()), Arc::new(Gate::default()));
    let in_vain = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let (take, finish, handled, in_vain) = (take.clone(), finish.clone(), handled.clone(), in_vain.clone());
        thread::spawn(move || {
            let me = aa.attach().unwrap();
            if !take.wait() {
                in_vain.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            let mut r = Region::new(&me, &pa).on(&port, move |x: u32| {
                if !finish.wait() {
                    in_vain.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                handled.open();
                x + 1
            });
            r.serve_one().unwrap();
        })
    };
    let waits_for_take = matches!(cp, Checkpoint::OnDelivery | Checkpoint::OnReturn);
    let waits_for_handler = matches!(cp, Checkpoint::OnReturn);
    let later = {
        let (take, finish) = (take.clone(), finish.clone());
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            if waits_for_take {
                take.open();
            }
            if waits_for_handler {
                finish.open();
            }
        })
    };
    let sender_ports = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    let to = sender_ports.connect::<u32, u32>(&me, "slow").unwrap();
    to.send(&me, &41, cp).unwrap();
    let at_return = (take.is_open(), handled.is_open());
    take.open();
    finish.open();
    later.join().unwrap();
    server.join().unwrap();
    (at_return, in_vain.load(std::sync::atomic::Ordering::SeqCst))
}

#[test]
fn each_checkpoint_returns_at_its_own_point() {
    let cases = [
        (Checkpoint::Immediate, (false, false), "immediate waits for nothing"),
        (Checkpoint::OnReceipt, (false, false), "on-receipt waits for no region"),
        (Checkpoint::OnDelivery, (true, false), "on-delivery waits for the take, not the handler"),
        (Checkpoint::OnReturn, (true, true), "on-return waits for the handler"),
    ];
    for (cp, want, what) in cases {
        assert_eq!(where_checkpoint_returns(cp), (want, false), "{what}");
    }
}

#[test]
fn a_functional_call_returns_the_result_from_another_node_in_every_size() {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<Vec<u8>, Vec<u8>>("rev").unwrap();
    let (pa, aa) = (ports.clone(), a.clone());
    let sizes = [0usize, 10, 100, 5000, 200_000];
    let server = thread::spawn(move || {
        let me = aa.attach().unwrap();
        let mut r = Region::new(&me, &pa).on(&port, |mut v: Vec<u8>| {
            v.reverse();
            v
        });
        for _ in 0..sizes.len() * 2 {
            r.serve_one().unwrap();
        }
    });
    let mine = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    let to = mine.connect::<Vec<u8>, Vec<u8>>(&me, "rev").unwrap();
    for _ in 0..2 {
        for n in sizes {
            let v: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut want = v.clone();
            want.reverse();
            assert_eq!(to.call(&me, &v).unwrap(), want, "{n} bytes");
        }
    }
    server.join().unwrap();
}

#[test]
fn a_region_takes_the_earliest_message_of_its_ports() {
    let (a, _b) = two_nodes();
    let ports = Ports::start(&a).unwrap();
    let (pa, pb) = (ports.open::<u8, ()>("a").unwrap(), ports.open::<u8, ()>("b").unwrap());
    let me = a.attach().unwrap();
    let (ta, tb) = (ports.connect::<u8, ()>(&me, "a").unwrap(), ports.connect::<u8, ()>(&me, "b").unwrap());
    // Arrival order: b1, a1, b2, a2.
    tb.send(&me, &1, Checkpoint::OnReceipt).unwrap();
    ta.send(&me, &1, Checkpoint::OnReceipt).unwrap();
    tb.send(&me, &2, Checkpoint::OnReceipt).unwrap();
    ta.send(&me, &2, Checkpoint::OnReceipt).unwrap();
    let server = a.attach().unwrap();
    let seen = std::cell::RefCell::new(Vec::new());
    let mut r = Region::new(&server, &ports)
        .on(&pa, |x| seen.borrow_mut().push(('a', x)))
        .on(&pb, |x| seen.borrow_mut().push(('b', x)));
    let branches: Vec<usize> = (0..4).map(|_| r.serve_one().unwrap()).collect();
    assert_eq!(branches, vec![1, 0, 1, 0]);
    assert_eq!(*seen.borrow(), vec![('b', 1), ('a', 1), ('b', 2), ('a', 2)]);
    // Only port a: b's later message waits, a's is served.
    tb.send(&me, &3, Checkpoint::OnReceipt).unwrap();
    ta.send(&me, &3, Checkpoint::OnReceipt).unwrap();
    drop(r);
    let mut only_a = Region::new(&server, &ports).on(&pa, |x| seen.borrow_mut().push(('a', x)));
    assert_eq!(only_a.serve_one().unwrap(), 0);
    assert_eq!(seen.borrow().last(), Some(&('a', 3)));
}

#[test]
fn several_regions_share_a_port_and_nothing_is_lost_or_doubled() {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = Arc::new(ports.open::<u32, u32>("shared").unwrap());
    let (tx, rx) = mpsc::channel();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let (ports, port, node, tx) = (ports.clone(), port.clone(), a.clone(), tx.clone());
        servers.push(thread::spawn(move || {
            let me = node.attach().unwrap();
            let mut r = Region::new(&me, &ports).on(&*port, |x: u32| {
                tx.send(x).unwrap();
                x * 2
            });
            // Serve until no message comes for a while.
            let mut n = 0;
            while within(Duration::from_millis(500), || r.serve_one()).is_ok() {
                n += 1;
            }
            n
        }));
    }
    drop(tx);
    let mine = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    let to = mine.connect::<u32, u32>(&me, "shared").unwrap();
    for i in 0..200u32 {
        assert_eq!(to.call(&me, &i).unwrap(), i * 2);
    }
    let counts: Vec<usize> = servers.into_iter().map(|s| s.join().unwrap()).collect();
    let got: Vec<u32> = rx.iter().collect();
    assert_eq!(got.len(), 200, "each message served once");
    assert_eq!(got.iter().copied().collect::<BTreeSet<_>>().len(), 200);
    assert_eq!(counts.iter().sum::<usize>(), 200);
    assert!(counts.iter().filter(|&&c| c > 0).count() >= 2, "shared among the regions: {counts:?}");
}

#[test]
fn a_region_that_gave_up_loses_no_message() {
    let (a, _b) = two_nodes();
    let ports = Ports::start(&a).unwrap();
    let port = ports.open::<u8, ()>("patient").unwrap();
    let server = a.attach().unwrap();
    let got = std::cell::Cell::new(0u8);
    let mut r = Region::new(&server, &ports).on(&port, |x| got.set(x));
    let e = within(Duration::from_millis(50), || r.serve_one()).unwrap_err();
    assert!(e.is_deadline(), "{e}");
    // The keeper still lists the abandoned take; a message now must not vanish into it.
    let me = a.attach().unwrap();
    ports.connect::<u8, ()>(&me, "patient").unwrap().send(&me, &9, Checkpoint::OnReceipt).unwrap();
    assert_eq!(r.serve_one().unwrap(), 0);
    assert_eq!(got.get(), 9);
}

#[test]
fn wrong_names_types_and_failing_handlers_are_typed_errors() {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<u32, u32>("typed").unwrap();
    let (pa, aa) = (ports.clone(), a.clone());
    let server = thread::spawn(move || {
        let me = aa.attach().unwrap();
        let mut r = Region::new(&me, &pa).on(&port, |x: u32| {
            assert!(x != 13, "unlucky");
            x
        });
        for _ in 0..2 {
            r.serve_one().unwrap();
        }
    });
    let mine = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    assert!(matches!(mine.connect::<u32, u32>(&me, "absent"), Err(Error::NotFound(_))));
    let wrong = mine.connect::<String, u32>(&me, "typed").unwrap();
    assert!(matches!(wrong.call(&me, &"x".to_string()), Err(Error::NotFound(_))), "other types: another port");
    let to = mine.connect::<u32, u32>(&me, "typed").unwrap();
    assert!(matches!(to.call(&me, &13), Err(Error::HandlerPanicked { .. })));
    assert_eq!(to.call(&me, &14).unwrap(), 14);
    server.join().unwrap();
}

/// A port is opened once per `Ports`, and only its own `Ports` closes or
/// serves it: a second open aliased the first (closing either closed both),
/// and node B's `close` of node A's port closed B's port of that name.
#[test]
fn a_port_is_opened_once_and_closed_by_its_own_ports() {
    let (a, b) = two_nodes();
    let (pa, pb) = (Ports::start(&a).unwrap(), Ports::start(&b).unwrap());
    let first = pa.open::<u32, u32>("once").unwrap();
    assert!(matches!(pa.open::<u32, u32>("once"), Err(Error::AlreadyOpen(n)) if n == "once"));
    let other_types = pa.open::<String, u32>("once").expect("other types: another port of the name");
    let theirs = pb.open::<u32, u32>("once").unwrap();
    assert!(matches!(pb.close(&first), Err(Error::OtherPorts(n)) if n == "once"));
    let me = b.attach().unwrap();
    let mut r = Region::new(&me, &pb).on(&other_types, |x: String| x.len() as u32);
    assert!(matches!(r.serve_one(), Err(Error::OtherPorts(_))), "another node's port");
    // B's own port is untouched: still open, still found.
    assert!(pb.connect::<u32, u32>(&me, "once").is_ok());
    pb.close(&theirs).unwrap();
    assert!(matches!(pb.close(&theirs), Err(Error::NotFound(_))), "closed already");
    // A second Ports of one node cannot take over a name the first has open.
    let again = Ports::start(&a).unwrap();
    assert!(matches!(
        again.open::<u32, u32>("once"),
        Err(Error::Vipc(vipc::Error::Protocol(vipc::ProtocolError::NameTaken(k)))) if k == pa.keeper()
    ));
}

#[test]
fn a_late_answer_to_an_abandoned_send_does_not_end_the_next_one() {
    let (a, _b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<u8, ()>("orphans").unwrap();
    let (pa, aa) = (ports.clone(), a.clone());
    let (tx, rx) = mpsc::channel();
    let sender = thread::spawn(move || {
        let me = aa.attach().unwrap();
        let to = pa.connect::<u8, ()>(&me, "orphans").unwrap();
        let e = within(Duration::from_millis(50), || to.send(&me, &1, Checkpoint::OnDelivery)).unwrap_err();
        assert!(e.is_deadline(), "{e}");
        tx.send(Instant::now()).unwrap();
        to.send(&me, &2, Checkpoint::OnDelivery).unwrap();
        Instant::now()
    });
    let started = rx.recv().unwrap();
    let me = a.attach().unwrap();
    let seen = std::cell::RefCell::new(Vec::new());
    let mut r = Region::new(&me, &ports).on(&port, |x| seen.borrow_mut().push(x));
    thread::sleep(Duration::from_millis(100));
    r.serve_one().unwrap(); // the orphan: still served, but answers nobody
    thread::sleep(Duration::from_millis(300));
    let second_taken = Instant::now();
    r.serve_one().unwrap();
    let returned = sender.join().unwrap();
    assert_eq!(*seen.borrow(), vec![1, 2]);
    assert!(
        returned >= second_taken,
        "the second send returned {:?} after it began, before its message was taken",
        returned - started
    );
}

/// Port `name` of `u8` messages opened on node `a`, and on node `b` its own
/// Ports (for Immediate sends) and a process to send from.
struct Across {
    a: Node,
    _b: Node,
    ports: Ports,
    port: Port<u8, ()>,
    far: Ports,
    me: Process,
}

fn across(name: &str) -> Across {
    let (a, b) = two_nodes();
    let ports = Ports::start(&a).unwrap();
    let port = ports.open::<u8, ()>(name).unwrap();
    let (far, me) = (Ports::start(&b).unwrap(), b.attach().unwrap());
    Across { a, _b: b, ports, port, far, me }
}

#[test]
fn a_keeper_holds_at_most_max_held_messages_then_senders_hear_it_is_full() {
    let Across { a, _b, ports, port, far, me } = across("full");
    let to = far.connect::<u8, ()>(&me, "full").unwrap();
    for i in 0..vipc_ports::MAX_HELD {
        to.send(&me, &(i as u8), Checkpoint::OnReceipt).unwrap();
    }
    match to.send(&me, &0, Checkpoint::OnReceipt) {
        Err(Error::Full(name)) => assert_eq!(name, "port full"),
        other => panic!("expected Full, got {other:?}"),
    }
    // A region takes one: there is room for one more.
    let server = a.attach().unwrap();
    let mut r = Region::new(&server, &ports).on(&port, |_| ());
    r.serve_one().unwrap();
    to.send(&me, &1, Checkpoint::OnReceipt).unwrap();
    assert!(matches!(to.send(&me, &2, Checkpoint::OnReceipt), Err(Error::Full(_))));
}

#[test]
fn a_region_without_a_port_of_its_node_fails_instead_of_waiting_forever() {
    let (a, b) = two_nodes();
    let (here, there) = (Ports::start(&a).unwrap(), Ports::start(&b).unwrap());
    let theirs = there.open::<u8, ()>("elsewhere").unwrap();
    let server = a.attach().unwrap();
    let r = within(Duration::from_secs(5), || Region::new(&server, &here).serve_one());
    assert!(matches!(r, Err(Error::NotFound(_))), "no branch: {r:?}");
    let r = within(Duration::from_secs(5), || Region::new(&server, &here).on(&theirs, |_| ()).serve_one());
    assert!(matches!(r, Err(Error::OtherPorts(_))), "another node's port: {r:?}");
}

#[test]
fn immediate_sends_beyond_the_couriers_queue_are_counted_undelivered_at_once() {
    // Everything bound: the port stays open until the node goes.
    let Across { a, _b, ports: _ports, port: _port, far, me } = across("gone");
    let to = far.connect::<u8, ()>(&me, "gone").unwrap();
    a.shutdown(); // every courier Send now takes T_t to fail
    let t = Instant::now();
    for _ in 0..4096 + 100 {
        to.send(&me, &1, Checkpoint::Immediate).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(5), "sends never wait for the courier");
    assert!(far.undelivered() >= 99, "{} counted", far.undelivered());
}

/// A handler that outlasts the server's own deadline still answers its
/// OnReturn caller: the result is handed back outside the deadline (before,
/// it was dropped and the caller waited for ever).
#[test]
fn a_result_finished_after_the_servers_deadline_still_reaches_its_caller() {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<u32, u32>("late").unwrap();
    let (pa, aa) = (ports.clone(), a.clone());
    let server = thread::spawn(move || {
        let me = aa.attach().unwrap();
        let mut r = Region::new(&me, &pa).on(&port, |x: u32| {
            thread::sleep(Duration::from_millis(150));
            x * 2
        });
        within(Duration::from_millis(100), || r.serve_one())
    });
    let mine = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    let to = mine.connect::<u32, u32>(&me, "late").unwrap();
    let got = within(Duration::from_secs(5), || to.call(&me, &21));
    assert_eq!(got.unwrap(), 42);
    assert_eq!(server.join().unwrap().unwrap(), 0, "the branch that ran");
}

/// Closing a port ends what waits on it: a sender waiting for its message
/// to be taken, a region waiting on it alone; its name goes, so senders no
/// longer find it, and opening and closing many ports never fills the
/// node's names.
#[test]
fn closing_a_port_ends_its_waiters_and_frees_its_name() {
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    // A region waiting on a port alone.
    let alone = Arc::new(ports.open::<u64, ()>("alone").unwrap());
    let (pa, aa, waited_on) = (ports.clone(), a.clone(), alone.clone());
    let region = thread::spawn(move || {
        let p = aa.attach().unwrap();
        within(PATIENCE, || Region::new(&p, &pa).on(&waited_on, |_| ()).serve_one())
    });
    thread::sleep(Duration::from_millis(100));
    ports.close(&alone).unwrap();
    assert!(matches!(region.join().unwrap(), Err(Error::NotFound(_))), "the region waiting on it alone");
    // A sender waiting for its message to be taken.
    let port = ports.open::<u32, u32>("closing").unwrap();
    let mine = Ports::start(&b).unwrap();
    let me = b.attach().unwrap();
    let to = mine.connect::<u32, u32>(&me, "closing").unwrap();
    let closer = {
        let ports = ports.clone();
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            ports.close(&port).unwrap();
        })
    };
    let r = within(PATIENCE, || to.send(&me, &2, Checkpoint::OnDelivery));
    closer.join().unwrap();
    assert!(matches!(r, Err(Error::NotFound(_))), "the waiting sender: {r:?}");
    assert!(matches!(mine.connect::<u32, u32>(&me, "closing"), Err(Error::NotFound(_))), "the name is gone");
    for i in 0..1500 {
        let p = ports.open::<u32, ()>(&format!("churn-{i}")).unwrap();
        ports.close(&p).unwrap();
    }
}

/// Only processes of the port's node take its messages, and only the
/// process that took a message says how its handler ended: message ids are
/// sequential, and another host's PORT_DONE forged an `OnReturn` caller's
/// result (its PORT_TAKE took messages).
#[test]
fn another_host_can_neither_take_messages_nor_forge_a_result() {
    use vipc_ports::frame::{kind, status, Request};
    let (a, b) = two_nodes();
    let ports = Arc::new(Ports::start(&a).unwrap());
    let port = ports.open::<u32, u32>("guarded").unwrap();
    let keeper = ports.keeper();
    let stranger = b.attach().unwrap();
    let take = Request { kind: kind::PORT_TAKE, flags: 0, method: 0, fingerprint: 0, len: 0 };
    let mut m = take.encode(&[]);
    stranger.send(&mut m, keeper).unwrap();
    assert_eq!(m[0], status::NOT_A_REQUEST, "a take from another host");
    let (pa, aa) = (ports.clone(), a.clone());
    let server = thread::spawn(move || {
        let me = aa.attach().unwrap();
        let mut r = Region::new(&me, &pa).on(&port, |x: u32| {
            thread::sleep(Duration::from_millis(300));
            x + 1
        });
        r.serve_one().unwrap();
    });
    let b2 = b.clone();
    let caller = thread::spawn(move || {
        let mine = Ports::start(&b2).unwrap();
        let me = b2.attach().unwrap();
        let to = mine.connect::<u32, u32>(&me, "guarded").unwrap();
        to.call(&me, &41).unwrap()
    });
    thread::sleep(Duration::from_millis(100)); // taken, its handler running
    let forged = vipc_ports::codec::encode(&999u32).unwrap();
    for id in 0..8 {
        let done =
            Request { kind: kind::PORT_DONE, flags: status::OK, method: 0, fingerprint: id, len: forged.len() as u32 };
        let mut m = done.encode(&forged);
        stranger.send(&mut m, keeper).unwrap();
    }
    assert_eq!(caller.join().unwrap(), 42, "the handler's result, not the forged one");
    server.join().unwrap();
}

/// A close that fails (no process can be attached on a full node) leaves
/// the port open, to be closed again: it was taken out of the table first,
/// so its held messages and waiting senders were stranded and a second
/// close said `NotFound`.
#[test]
fn a_close_that_fails_leaves_the_port_open() {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let ports = Ports::start(&a).unwrap();
    let port = ports.open::<u32, u32>("full").unwrap();
    let mut held = Vec::new();
    while let Ok(p) = a.attach() {
        held.push(p);
    }
    assert!(ports.close(&port).is_err(), "no process to tell the keeper with");
    held.pop();
    ports.close(&port).expect("still open, closed now");
}

/// A region over 450 ports serves them (its port list, 10 bytes a port,
/// overran the 4 KiB buffer it was copied into: a panic past 410 ports).
#[test]
fn a_region_over_many_ports_serves_them() {
    let (a, _b) = two_nodes();
    let ports = Ports::start(&a).unwrap();
    let opened: Vec<Port<u32, u32>> = (0..450).map(|i| ports.open(&format!("p{i}")).unwrap()).collect();
    let me = a.attach().unwrap();
    thread::scope(|sc| {
        let t = sc.spawn(|| {
            let caller = a.attach().unwrap();
            let port = ports.connect::<u32, u32>(&caller, "p449").unwrap();
            within(Duration::from_secs(5), || port.call(&caller, &20)).unwrap()
        });
        let mut region = Region::new(&me, &ports);
        for p in &opened {
            region = region.on(p, |x: u32| x + 1);
        }
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            within(Duration::from_secs(5), || region.serve_one())
        }));
        assert!(matches!(served, Ok(Ok(_))), "serve_one over 450 ports: {served:?}");
        assert_eq!(t.join().unwrap(), 21);
    });
}

/// Closing an old handle of a port closed and opened again under its name
/// is `NotFound` and leaves the new port open (it closed the new port:
/// both handles carry the same key).
#[test]
fn closing_an_old_handle_again_leaves_the_port_opened_since() {
    let (a, _b) = two_nodes();
    let ports = Ports::start(&a).unwrap();
    let old = ports.open::<u32, ()>("jobs").unwrap();
    ports.close(&old).unwrap();
    let new = ports.open::<u32, ()>("jobs").unwrap();
    assert!(matches!(ports.close(&old), Err(Error::NotFound(_))), "PORTS.md: closing it again is NotFound");
    let me = a.attach().unwrap();
    assert!(ports.connect::<u32, ()>(&me, "jobs").is_ok(), "the new port is still found");
    ports.close(&new).unwrap();
}
