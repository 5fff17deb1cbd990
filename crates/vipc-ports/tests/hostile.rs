//! The typed-ports servers against a hostile client (seeded, deterministic
//! choice of inputs): the RPC server's loop, a node's port keeper and a
//! network port's importer get random and mutated-valid 32-byte requests
//! (kinds, flags, methods, fingerprints, lengths, message ids), with and
//! without segments of random sizes and access, from their own node and
//! another, some given up mid-exchange by a vanishing process. Each
//! request must be answered within a bound with a status of the protocol,
//! and after each batch the server must still answer valid calls correctly
//! with nothing left behind (processes on its node).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vipc::{Message, Node, Pid, Process, SegmentRef, SendOptions};
use vipc_ports::frame::{flags, kind, status, Request};
use vipc_ports::{within, Checkpoint, NetPort, Ports, Region};

use vipc::testing::Rng;

/// Random bytes of a random length below `max`.
fn bytes_below(r: &mut Rng, max: u64) -> Vec<u8> {
    let n = r.below(max) as usize;
    r.bytes(n)
}

/// A request must be answered within this (the servers here never wait on a handler for long).
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

fn seeds() -> u64 {
    std::env::var("HOSTILE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5)
}

fn two_nodes(first: u16) -> Vec<Node> {
    vipc::loopback_cluster(2, first, |_, cfg| cfg.engine.timeout = Duration::from_millis(300)).unwrap()
}

/// A request mutated from a valid one of `kinds` (fingerprints from `keys`), or random bytes.
fn hostile_request(r: &mut Rng, kinds: &[u8], keys: &[u64], methods: u16) -> (Message, Vec<u8>) {
    if r.chance(10) {
        return (r.bytes(32).try_into().unwrap(), Vec::new());
    }
    let kind = if r.chance(10) { r.next_u64() as u8 } else { kinds[r.below(kinds.len() as u64) as usize] };
    let flags = match r.below(5) {
        0 => r.next_u64() as u8,
        1 => flags::BULK,
        _ => r.below(6) as u8,
    };
    let method = if r.chance(20) { r.next_u64() as u16 } else { r.below(u64::from(methods) + 1) as u16 };
    let fingerprint = match r.below(6) {
        0 => r.next_u64(),
        1 => r.below(16), // a message id
        _ => keys[r.below(keys.len() as u64) as usize],
    };
    // Arguments: valid encodings of small values, random bytes, or lengths that lie.
    let args = match r.below(6) {
        0 => Vec::new(),
        1 => postcard::to_stdvec(&(r.next_u64() as u32)).unwrap(),
        2 => postcard::to_stdvec(&(r.next_u64() as u32, r.next_u64() as u32)).unwrap(),
        3 => bytes_below(r, 17),
        4 => bytes_below(r, 5000),
        _ => postcard::to_stdvec(&bytes_below(r, 3000)).unwrap(),
    };
    let len = match r.below(8) {
        0 => r.next_u64() as u32,
        1 => u32::MAX,
        2 => (args.len() as u32).wrapping_add(r.below(3) as u32),
        _ => args.len() as u32,
    };
    (Request { kind, flags, method, fingerprint, len }.encode(&args), args)
}

/// Sends `m` with `args` (or random bytes) as a segment of random size and
/// access (or none), bounded by `limit`; the reply, or the error.
fn send_hostile(p: &Process, to: Pid, m: &mut Message, args: &[u8], r: &mut Rng, limit: Duration) -> vipc::Result<Pid> {
    let mut buf = match r.below(5) {
        0 => Vec::new(),
        1 => bytes_below(r, 100_000),
        2 => bytes_below(r, 64),
        _ => {
            let mut b = args.to_vec();
            let extra = r.below(5000) as usize;
            b.resize(args.len() + extra, 0);
            b
        }
    };
    let seg = match (buf.is_empty(), r.below(4)) {
        (true, _) | (_, 0) => None,
        (_, 1) => Some(SegmentRef::Read(&buf[..])),
        (_, 2) => Some(SegmentRef::Write(&mut buf[..])),
        _ => Some(SegmentRef::ReadWrite(&mut buf[..])),
    };
    vipc::within(limit, || p.send_with(m, to, seg, SendOptions::default()))
}

/// Sends hostile requests to `to` from processes of `nodes`; every one must
/// be answered within [`ANSWER_WITHIN`] with a status of the protocol.
/// `local_kinds` are the kinds a process of `to`'s own node may send
/// (a local STOP or PORT_CLOSE is a trusted order, not an attack).
#[allow(clippy::too_many_arguments)]
fn hostile_batch(
    r: &mut Rng,
    nodes: &[Node],
    to: Pid,
    kinds: &[u8],
    local_kinds: &[u8],
    keys: &[u64],
    methods: u16,
    n: usize,
    what: &str,
) {
    for _ in 0..n {
        let node = &nodes[r.below(nodes.len() as u64) as usize];
        let local = node.host_id() == to.host();
        let (mut m, args) = hostile_request(r, if local { local_kinds } else { kinds }, keys, methods);
        if local && !local_kinds.contains(&m[0]) && (kind::CALL..=kind::STOP).contains(&m[0]) {
            m[0] = local_kinds[0];
        }
        let sent = m;
        if r.chance(10) {
            // A process that gives up at once and vanishes.
            let (node, sub) = (node.clone(), r.next_u64());
            thread::spawn(move || {
                let mut r = Rng::new(sub);
                let p = node.attach().unwrap();
                let limit = Duration::from_millis(r.below(20));
                let _ = send_hostile(&p, to, &mut m, &args, &mut r, limit);
            })
            .join()
            .unwrap();
            continue;
        }
        let p = node.attach().unwrap();
        match send_hostile(&p, to, &mut m, &args, r, ANSWER_WITHIN) {
            Ok(_) => assert!(m[0] <= status::UNDELIVERED, "{what}: status {} for {sent:02x?}", m[0]),
            Err(e) => panic!("{what}: {sent:02x?} not answered within {ANSWER_WITHIN:?}: {e}"),
        }
    }
}

#[vipc_ports::interface]
pub trait Calc {
    fn add(&self, a: u32, b: u32) -> u32;
    fn echo(&self, data: Vec<u8>) -> Vec<u8>;
    fn make(&self, n: u32) -> Vec<u8>;
    fn boom(&self, x: u8) -> u8;
}

struct CalcImpl;

impl Calc for CalcImpl {
    fn add(&self, a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    fn echo(&self, data: Vec<u8>) -> Vec<u8> {
        data
    }
    fn make(&self, n: u32) -> Vec<u8> {
        vec![7; n.min(200_000) as usize]
    }
    fn boom(&self, x: u8) -> u8 {
        assert!(x != 7, "seven");
        x
    }
}

#[test]
fn hostile_requests_to_an_rpc_server_are_answered_and_it_serves_on() {
    let nodes = two_nodes(0x3a1);
    let (server, _thread) = vipc_ports::rpc::spawn_server(&nodes[0], "calc", CalcServer(CalcImpl)).unwrap();
    let processes = nodes[0].stats().processes;
    let me = nodes[1].attach().unwrap();
    let calc = CalcClient::connect(&me, "calc").unwrap();
    let kinds = [kind::CALL, kind::CALL, kind::CALL, kind::FETCH, kind::STOP, kind::PORT_SEND];
    let local = [kind::CALL, kind::FETCH, kind::PORT_TAKE];
    let t = Instant::now();
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..6 {
            let what = format!("rpc seed {seed} round {round}");
            hostile_batch(&mut r, &nodes, server, &kinds, &local, &[CalcClient::FINGERPRINT], 4, 40, &what);
            assert_eq!(within(ANSWER_WITHIN, || calc.add(2, 3)).unwrap_or_else(|e| panic!("{what}: {e}")), 5);
            let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
            assert_eq!(within(ANSWER_WITHIN, || calc.echo(data.clone())).unwrap(), data, "{what}");
            assert_eq!(within(ANSWER_WITHIN, || calc.make(70_000)).unwrap(), vec![7; 70_000], "{what}");
            assert!(nodes[0].stats().processes <= processes, "{what}: {} processes", nodes[0].stats().processes);
        }
    }
    assert!(t.elapsed() < Duration::from_secs(60));
}

/// Serves `port` in a region on `node` until `stop`.
fn serve_port<T, R>(
    node: &Node,
    ports: &Arc<Ports>,
    port: vipc_ports::Port<T, R>,
    stop: &Arc<AtomicBool>,
    handler: impl Fn(T) -> R + Send + 'static,
) -> thread::JoinHandle<()>
where
    T: serde::de::DeserializeOwned + Send + 'static,
    R: serde::Serialize + Send + 'static,
{
    let (node, ports, stop) = (node.clone(), ports.clone(), stop.clone());
    thread::spawn(move || {
        let me = node.attach().unwrap();
        let mut r = Region::new(&me, &ports).on(&port, handler);
        while !stop.load(Ordering::Relaxed) {
            match within(Duration::from_millis(100), || r.serve_one()) {
                Ok(_) => {}
                Err(e) if e.is_deadline() => {}
                Err(e) => panic!("region: {e}"),
            }
        }
    })
}

fn port_key<T, R>(name: &str) -> u64 {
    vipc_ports::codec::fingerprint(&format!(
        "port {name}: {} -> {}",
        std::any::type_name::<T>(),
        std::any::type_name::<R>()
    ))
}

#[test]
fn hostile_requests_to_a_port_keeper_are_answered_and_it_serves_on() {
    let nodes = two_nodes(0x3b1);
    let ports = Arc::new(Ports::start(&nodes[0]).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let regions = [
        serve_port(&nodes[0], &ports, ports.open::<u32, u32>("hp").unwrap(), &stop, |x: u32| x.wrapping_add(1)),
        serve_port(&nodes[0], &ports, ports.open::<u8, ()>("hq").unwrap(), &stop, |_: u8| ()),
    ];
    let keeper = ports.keeper();
    thread::sleep(Duration::from_millis(100)); // the regions attach
    let processes = nodes[0].stats().processes;
    let far = Ports::start(&nodes[1]).unwrap();
    let me = nodes[1].attach().unwrap();
    let hp = far.connect::<u32, u32>(&me, "hp").unwrap();
    let keys = [port_key::<u32, u32>("hp"), port_key::<u8, ()>("hq"), port_key::<u32, u32>("nope")];
    let kinds = [
        kind::PORT_SEND,
        kind::PORT_SEND,
        kind::PORT_SEND,
        kind::PORT_DONE,
        kind::FETCH,
        kind::PORT_TAKE,
        kind::PORT_CLOSE,
        kind::CALL,
    ];
    let local = [kind::PORT_SEND, kind::PORT_DONE, kind::FETCH];
    let t = Instant::now();
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..6 {
            let what = format!("keeper seed {seed} round {round}");
            hostile_batch(&mut r, &nodes, keeper, &kinds, &local, &keys, 0, 40, &what);
            assert_eq!(within(ANSWER_WITHIN, || hp.call(&me, &41)).unwrap_or_else(|e| panic!("{what}: {e}")), 42);
            for cp in [Checkpoint::OnReceipt, Checkpoint::OnDelivery] {
                within(ANSWER_WITHIN, || hp.send(&me, &1, cp)).unwrap_or_else(|e| panic!("{what}: {cp:?}: {e}"));
            }
            assert!(regions.iter().all(|r| !r.is_finished()), "{what}: a region ended");
            assert!(nodes[0].stats().processes <= processes, "{what}: {} processes", nodes[0].stats().processes);
        }
    }
    assert!(t.elapsed() < Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    for r in regions {
        r.join().expect("a region panicked");
    }
}

#[test]
fn hostile_requests_to_a_network_port_importer_are_answered_and_it_serves_on() {
    let nodes = vipc::loopback_cluster(2, 0x3c1, |_, _| {}).unwrap();
    let t = Instant::now();
    while nodes.iter().any(|x| x.alive_hosts().unwrap().hosts().count() < 1) {
        assert!(t.elapsed() < Duration::from_secs(5), "alive-host tables did not fill");
        thread::sleep(Duration::from_millis(10));
    }
    let port = NetPort::<u32, u32>::new("hn");
    let importers: Vec<Pid> = nodes.iter().map(|n| port.import(n, |x: u32| x.wrapping_mul(3)).unwrap()).collect();
    thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let key = port_key::<u32, u32>("hn");
    let kinds = [kind::CALL, kind::CALL, kind::FETCH, kind::STOP, kind::NET_CALL];
    let local = [kind::CALL, kind::FETCH];
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..4 {
            let what = format!("importer seed {seed} round {round}");
            for &to in &importers {
                hostile_batch(&mut r, &nodes, to, &kinds, &local, &[key], 1, 20, &what);
            }
            // The same to the port's group, as a group Send from a process of its own
            // (never STOP: the group has a member on the sender's node, for which it is an order).
            let g = nodes[r.below(2) as usize].attach().unwrap();
            for _ in 0..10 {
                let (mut m, _) = hostile_request(&mut r, &local, &[key], 1);
                if m[0] == kind::STOP {
                    m[0] = kind::CALL;
                }
                let mode = [vipc::ReplyMode::None, vipc::ReplyMode::One, vipc::ReplyMode::Many][r.below(3) as usize];
                let _ = within(Duration::from_millis(500), || {
                    g.send_group(&mut m, vipc_ports::netport::port_group("hn"), mode, SendOptions::default())
                });
            }
            let got =
                port.call_all(&me, &5, ANSWER_WITHIN).unwrap().complete().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got.len(), 2, "{what}");
            assert!(got.values().all(|&v| v == 15), "{what}: {got:?}");
        }
    }
}

/// FINDING: the keeper forgets a process's earlier requests when it sends
/// again (`forget_waiting`) but not its abandoned PORT_TAKE. A region that
/// gave up its wait (`within`) and whose process then makes a port call of
/// its own to the same keeper (granting a result segment, as a call site
/// does once it has seen a result over 24 bytes) has that call answered by
/// the delivery of a message of the region's port: the call returns the
/// other port's message as its result, and that message is lost (taken
/// out of the keeper, served by no region).
#[test]
fn a_region_that_gave_up_does_not_take_a_message_into_its_processs_next_call() {
    let nodes = two_nodes(0x3d1);
    let ports = Arc::new(Ports::start(&nodes[0]).unwrap());
    let work = ports.open::<Vec<u8>, ()>("work").unwrap();
    let other = ports.open::<u8, Vec<u8>>("other").unwrap();
    // "other" is served on another thread, slowly; its results are 100 bytes.
    let stop = Arc::new(AtomicBool::new(false));
    let server = serve_port(&nodes[0], &ports, other, &stop, |x: u8| {
        thread::sleep(Duration::from_millis(300));
        vec![x; 100]
    });
    let p = nodes[0].attach().unwrap();
    let to = ports.connect::<u8, Vec<u8>>(&p, "other").unwrap();
    // A first call: the call site learns that results are large.
    assert_eq!(within(ANSWER_WITHIN, || to.call(&p, &1)).unwrap(), vec![1; 100]);
    let seen = std::cell::RefCell::new(None);
    {
        let mut region = Region::new(&p, &ports).on(&work, |x| *seen.borrow_mut() = Some(x));
        let e = within(Duration::from_millis(50), || region.serve_one()).unwrap_err();
        assert!(e.is_deadline(), "{e}");
    }
    // The same process calls "other" again; meanwhile a message for "work" arrives.
    let n1 = nodes[1].clone();
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        let far = Ports::start(&n1).unwrap();
        let me = n1.attach().unwrap();
        far.connect::<Vec<u8>, ()>(&me, "work").unwrap().send(&me, &vec![9u8; 40], Checkpoint::OnReceipt).unwrap();
    });
    let result = within(ANSWER_WITHIN, || to.call(&p, &2));
    sender.join().unwrap();
    // The "work" message is still there for the next region on it.
    let mut region = Region::new(&p, &ports).on(&work, |x| *seen.borrow_mut() = Some(x));
    let served = within(Duration::from_secs(1), || region.serve_one());
    drop(region);
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
    println!("the call returned {result:?}; the next region on \"work\": {served:?}");
    assert_eq!(result.unwrap(), vec![2; 100], "the call's own result");
    assert!(served.is_ok(), "the work message was lost: {served:?}");
    assert_eq!(*seen.borrow(), Some(vec![9u8; 40]));
}

/// FINDING: a process of the keeper's node that takes an `OnReturn`
/// message with a raw PORT_TAKE and then vanishes without PORT_DONE leaves
/// the message's sender waiting for ever (here: until its own 3 s limit):
/// the keeper keeps the sender in `serving` with no bound and never learns
/// that the taker is gone. (A `Region` always sends DONE; a raw client, or
/// a taker destroyed before it answers, does not.)
#[test]
fn a_sender_whose_taker_vanished_is_answered_not_left_waiting() {
    let nodes = two_nodes(0x3e1);
    let ports = Ports::start(&nodes[0]).unwrap();
    let _port = ports.open::<u32, u32>("orphaned").unwrap();
    let keeper = ports.keeper();
    let n1 = nodes[1].clone();
    let sender = thread::spawn(move || {
        let far = Ports::start(&n1).unwrap();
        let me = n1.attach().unwrap();
        let to = far.connect::<u32, u32>(&me, "orphaned").unwrap();
        let t = Instant::now();
        let r = within(ANSWER_WITHIN, || to.call(&me, &5));
        (r, t.elapsed())
    });
    thread::sleep(Duration::from_millis(100)); // the message is held
    {
        // The thief: a raw take of the port, answered with the message, then gone.
        let thief = nodes[0].attach().unwrap();
        let list = vipc_ports::codec::encode(&vec![port_key::<u32, u32>("orphaned")]).unwrap();
        let mut m = Request { kind: kind::PORT_TAKE, flags: 0, method: 0, fingerprint: 0, len: list.len() as u32 }
            .encode(&list);
        let mut buf = vec![0u8; 4096];
        thief.send_with(&mut m, keeper, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
        assert_eq!(m[0], status::OK, "the thief took the message");
        assert_eq!(m[8 + 16], 3, "an OnReturn message: its sender waits for the DONE");
    }
    let (r, took) = sender.join().unwrap();
    println!("the sender's call ended after {took:?} with {r:?}");
    assert!(!matches!(&r, Err(e) if e.is_deadline()), "the sender waited until its own limit: {r:?} after {took:?}");
}
