//! Typed interfaces end to end on loopback nodes: marshalling in every size
//! class, the local path, version mismatch, panics, deadlines, bad input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig};
use vipc_ports::rpc::spawn_server;
use vipc_ports::Error;

#[vipc_ports::interface]
pub trait Store {
    /// Bytes of `len`, each `seed + i`.
    fn make(&self, len: u32, seed: u8) -> Vec<u8>;
    /// The sum of `data`'s bytes and its length.
    fn sum(&self, data: Vec<u8>) -> (u64, u32);
    /// `data` reversed.
    fn reverse(&self, data: Vec<u8>) -> Vec<u8>;
    /// `label`'s bytes, then `data`, then `tail` (byte vectors inside and last).
    fn join(&self, label: String, data: Vec<u8>, tail: Vec<u8>) -> Vec<u8>;
    fn nothing(&self);
    fn boom(&self, really: bool) -> u8;
    fn sleep(&self, ms: u64) -> u64;
}

struct Impl {
    calls: Arc<AtomicUsize>,
}

impl Store for Impl {
    fn make(&self, len: u32, seed: u8) -> Vec<u8> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
    }
    fn sum(&self, data: Vec<u8>) -> (u64, u32) {
        (data.iter().map(|&b| b as u64).sum(), data.len() as u32)
    }
    fn reverse(&self, mut data: Vec<u8>) -> Vec<u8> {
        data.reverse();
        data
    }
    fn join(&self, label: String, mut data: Vec<u8>, tail: Vec<u8>) -> Vec<u8> {
        let mut v = label.into_bytes();
        v.append(&mut data);
        v.extend_from_slice(&tail);
        v
    }
    fn nothing(&self) {}
    fn boom(&self, really: bool) -> u8 {
        assert!(!really, "asked to panic");
        1
    }
    fn sleep(&self, ms: u64) -> u64 {
        std::thread::sleep(Duration::from_millis(ms));
        ms
    }
}

#[allow(dead_code)] // only its client is used
mod v2 {
    /// The same interface name, another version.
    #[vipc_ports::interface(version = 2)]
    pub trait Store {
        fn make(&self, len: u32, seed: u8) -> Vec<u8>;
    }
}

fn nodes(n: u16) -> Vec<Node> {
    let first = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let peer = first.local_addr();
    let mut v = vec![first];
    for h in 2..=n {
        v.push(Node::start(NodeConfig::fixed(h, "127.0.0.1:0".parse().unwrap(), vec![peer])).unwrap());
    }
    v
}

fn expected(len: u32, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

fn start(node: &Node, name: &str) -> Arc<AtomicUsize> {
    let calls = Arc::new(AtomicUsize::new(0));
    spawn_server(node, name, StoreServer(Impl { calls: calls.clone() })).unwrap();
    calls
}

#[test]
fn remote_calls_in_every_size_class_return_the_right_values() {
    let n = nodes(2);
    let calls = start(&n[0], "store");
    let me = n[1].attach().unwrap();
    let s = StoreClient::connect(&me, "store").unwrap();
    // Small arguments and result: inside the messages, 2 packets a call.
    s.nothing().unwrap();
    let before = n[1].stats().ipc_packets();
    for _ in 0..10 {
        assert_eq!(s.make(3, 7).unwrap(), vec![7, 8, 9]);
    }
    assert_eq!(n[1].stats().ipc_packets() - before, 20, "one Send and one Reply per call");
    // Every size class of arguments and results, twice (the second call grants a segment at once).
    for len in [0u32, 16, 24, 25, 1000, 1500, 70_000, 300_000] {
        for _ in 0..2 {
            assert_eq!(s.make(len, len as u8).unwrap(), expected(len, len as u8), "result of {len} bytes");
        }
        let data = expected(len, 3);
        let sum: u64 = data.iter().map(|&b| b as u64).sum();
        assert_eq!(s.sum(data.clone()).unwrap(), (sum, len), "arguments of {len} bytes");
        let mut rev = data.clone();
        rev.reverse();
        assert_eq!(s.reverse(data).unwrap(), rev, "both of {len} bytes");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 10 + 16, "a large result never runs the handler twice");
    // A last byte vector travels as the segment when the other arguments fit
    // the request (a short label), encoded with them otherwise (a long one).
    for label in ["k", "a label longer than the sixteen inline bytes"] {
        for (mid, tail) in [(0usize, 0usize), (3, 40), (20, 5), (100, 70_000), (70_000, 300_000)] {
            let (data, end) = (expected(mid as u32, 1), expected(tail as u32, 2));
            let want: Vec<u8> = label.bytes().chain(data.iter().copied()).chain(end.iter().copied()).collect();
            assert_eq!(s.join(label.into(), data, end).unwrap(), want, "{label:?} {mid} {tail}");
        }
    }
}

/// A result whose MoveTo fails (the server's node loses 80% of its
/// datagrams, with T_t of 30 ms and a stream cap of about T_t) is a typed
/// error, not a caller waiting for ever; small results still come back.
#[test]
fn a_result_that_cannot_be_moved_is_an_error_not_a_wait() {
    let mut cfg = NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]);
    cfg.engine.timeout = Duration::from_millis(30);
    cfg.engine.min_stream_rate = u64::MAX;
    cfg.faults = vipc::FaultConfig { loss: 0.8, seed: 3, ..vipc::FaultConfig::default() };
    let server = Node::start(cfg).unwrap();
    let client = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![server.local_addr()])).unwrap();
    start(&server, "lossy-store");
    let me = client.attach().unwrap();
    // The lookup's answers are lost four times in five: a few lookups may be needed.
    let s = (0..10).find_map(|_| StoreClient::connect(&me, "lossy-store").ok()).expect("found in 10 lookups");
    assert_eq!(s.make(3, 7).unwrap(), vec![7, 8, 9]);
    let t = Instant::now();
    let r = vipc::within(Duration::from_secs(20), || s.make(4 << 20, 1));
    assert!(matches!(r, Err(Error::Undelivered(_))), "{:?} after {:?}", r.map(|v| v.len()), t.elapsed());
}

#[test]
fn the_dispatcher_takes_a_last_byte_vector_apart_from_the_other_arguments() {
    use vipc_ports::rpc::{Dispatch, DispatchError};
    let server = StoreServer(Impl { calls: Arc::default() });
    let mut out = Vec::new();
    // Method 2 is `reverse(data)`: no other argument, so an empty (zero-padded) head.
    server.dispatch_bulk(2, &[0; 16], vec![1, 2, 3], &mut out).unwrap();
    assert_eq!(out, vec![3, 2, 1], "a Vec<u8> result is its raw bytes");
    // Method 3 is `join(label, data, tail)`: the head is (label, data) encoded.
    let head = vipc_ports::codec::encode(&("ab", vipc_ports::serde_bytes::Bytes::new(&[9]))).unwrap();
    let mut padded = [0u8; 16];
    padded[..head.len()].copy_from_slice(&head);
    server.dispatch_bulk(3, &padded, vec![7, 7], &mut out).unwrap();
    assert_eq!(out, b"ab\x09\x07\x07".to_vec());
    assert!(matches!(server.dispatch_bulk(0, &[0; 16], vec![1], &mut out), Err(DispatchError::NoSuchMethod)));
    assert!(matches!(server.dispatch_bulk(3, &[0xff; 16], vec![], &mut out), Err(DispatchError::BadArguments(_))));
}

#[test]
fn a_call_on_the_same_node_takes_the_local_path() {
    let n = nodes(1);
    start(&n[0], "store-local");
    let me = n[0].attach().unwrap();
    let s = StoreClient::connect(&me, "store-local").unwrap();
    let before = n[0].stats();
    assert_eq!(s.make(5000, 1).unwrap(), expected(5000, 1));
    assert_eq!(s.sum(vec![1; 100]).unwrap(), (100, 100));
    let after = n[0].stats();
    assert_eq!(after.ipc_packets(), before.ipc_packets(), "no packet for a local call");
    assert!(after.local_exchanges >= before.local_exchanges + 3);
}

#[test]
fn a_different_version_is_a_clear_error() {
    let n = nodes(2);
    let calls = start(&n[0], "store-v");
    let me = n[1].attach().unwrap();
    let old = v2::StoreClient::connect(&me, "store-v").unwrap();
    match old.make(4, 0) {
        Err(Error::Mismatch { interface: "Store", client, server }) => {
            assert_eq!((client, server), (v2::StoreClient::FINGERPRINT, StoreClient::FINGERPRINT));
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert_ne!(v2::StoreClient::FINGERPRINT, StoreClient::FINGERPRINT);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing ran");
}

#[test]
fn a_panicking_handler_is_an_error_and_the_server_lives_on() {
    let n = nodes(2);
    start(&n[0], "store-boom");
    let me = n[1].attach().unwrap();
    let s = StoreClient::connect(&me, "store-boom").unwrap();
    assert!(matches!(s.boom(true), Err(Error::HandlerPanicked { interface: "Store", method: 5 })));
    assert_eq!(s.boom(false).unwrap(), 1);
}

#[test]
fn within_bounds_a_call_and_the_next_call_works() {
    let n = nodes(2);
    start(&n[0], "store-slow");
    let me = n[1].attach().unwrap();
    let s = StoreClient::connect(&me, "store-slow").unwrap();
    let t = Instant::now();
    let e = vipc_ports::within(Duration::from_millis(50), || s.sleep(400)).unwrap_err();
    assert!(e.is_deadline(), "{e}");
    assert!(t.elapsed() < Duration::from_millis(400), "the limit, not the 400 ms call, ended it: {:?}", t.elapsed());
    std::thread::sleep(Duration::from_millis(400)); // the server finishes the abandoned call
    assert_eq!(s.sleep(1).unwrap(), 1);
}

#[test]
fn unknown_names_and_foreign_messages_are_typed_errors() {
    let n = nodes(2);
    start(&n[0], "store-x");
    let me = n[1].attach().unwrap();
    assert!(matches!(StoreClient::connect(&me, "nobody-here"), Err(Error::NotFound(name)) if name == "nobody-here"));
    let s = StoreClient::connect(&me, "store-x").unwrap();
    // A message that is not a call is answered NOT_A_REQUEST; the server serves on.
    let mut m = [0xABu8; 32];
    me.send(&mut m, s.server()).unwrap();
    assert_eq!(m[0], vipc_ports::frame::status::NOT_A_REQUEST);
    // A call whose length claims a segment that is not there: BAD_ARGUMENTS.
    let req = vipc_ports::frame::Request {
        kind: vipc_ports::frame::kind::CALL,
        flags: 0,
        method: 1,
        fingerprint: StoreClient::FINGERPRINT,
        len: 5000,
    };
    let mut m = req.encode(&[]);
    me.send(&mut m, s.server()).unwrap();
    assert_eq!(m[0], vipc_ports::frame::status::BAD_ARGUMENTS);
    // The same with the byte vector apart (flag BULK): BAD_ARGUMENTS.
    let mut m = vipc_ports::frame::Request { flags: vipc_ports::frame::flags::BULK, method: 2, ..req }.encode(&[]);
    me.send(&mut m, s.server()).unwrap();
    assert_eq!(m[0], vipc_ports::frame::status::BAD_ARGUMENTS);
    // Arguments that do not decode as the method's: BAD_ARGUMENTS too.
    let mut m = vipc_ports::frame::Request { len: 2, ..req }.encode(&[0xff, 0xff]);
    me.send(&mut m, s.server()).unwrap();
    assert_eq!(m[0], vipc_ports::frame::status::BAD_ARGUMENTS);
    assert_eq!(s.make(2, 5).unwrap(), vec![5, 6]);
}

/// A second server under a name a live one holds is refused and leaves no
/// process (it took the name over; a refused name left a server running).
#[test]
fn a_name_is_served_once() {
    let n = nodes(1);
    start(&n[0], "store-once");
    let running = n[0].stats().processes;
    let again = spawn_server(&n[0], "store-once", StoreServer(Impl { calls: Arc::default() }));
    assert!(matches!(again, Err(Error::Vipc(vipc::Error::Protocol(vipc::ProtocolError::NameTaken(_))))), "{again:?}");
    let bad = spawn_server(&n[0], &"x".repeat(33), StoreServer(Impl { calls: Arc::default() }));
    assert!(bad.is_err());
    assert_eq!(n[0].stats().processes, running, "nothing left running");
    // One variable directory and one activator per node.
    let _vars = vipc_ports::Variables::start(&n[0]).unwrap();
    assert!(vipc_ports::Variables::start(&n[0]).is_err());
    let _activator = vipc_ports::Activator::start(&n[0]).unwrap();
    assert!(vipc_ports::Activator::start(&n[0]).is_err());
}

proptest::proptest! {
    /// Bytes from the network — requests, answers, arguments, port lists,
    /// variable directories — are decoded or refused, never a panic.
    #[test]
    fn parsers_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        vipc_ports::vars::fuzz_parsers(&data);
    }
}

/// Arguments named like the generated dispatcher's own variables (`out`,
/// and `bulk` in a method whose last argument is bytes) compile and reach
/// the handler (they did not compile: the dispatcher's names were shadowed).
#[vipc_ports::interface]
pub trait Named {
    fn copy(&self, out: u32) -> u32;
    fn store(&self, bulk: String, data: Vec<u8>) -> usize;
}

struct NamedImpl;

impl Named for NamedImpl {
    fn copy(&self, out: u32) -> u32 {
        out + 1
    }
    fn store(&self, bulk: String, data: Vec<u8>) -> usize {
        bulk.len() * 1000 + data.len()
    }
}

#[test]
fn arguments_may_have_the_dispatchers_names() {
    let n = nodes(2);
    spawn_server(&n[0], "named", NamedServer(NamedImpl)).unwrap();
    let p = n[1].attach().unwrap();
    let c = NamedClient::connect(&p, "named").unwrap();
    assert_eq!(c.copy(41).unwrap(), 42);
    assert_eq!(c.store("abc".into(), vec![0; 5000]).unwrap(), 3 * 1000 + 5000);
}
