//! A key-value service behind a typed interface: a server on node 1, a
//! client on node 2 and one on node 1 itself (the local path). Run with
//! `cargo run --release -p vipc-ports --example kv`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig};

/// The service's interface: the client calls these as methods.
#[vipc_ports::interface]
pub trait KeyValue {
    /// Stores `value` under `key`; returns the value it replaced.
    fn put(&self, key: String, value: Vec<u8>) -> Option<Vec<u8>>;
    /// The value under `key`.
    fn get(&self, key: String) -> Option<Vec<u8>>;
    /// Removes `key`; returns its value.
    fn remove(&self, key: String) -> Option<Vec<u8>>;
    /// How many keys are stored.
    fn count(&self) -> u64;
}

/// The server's implementation: an ordinary Rust type.
#[derive(Default)]
struct Store(Mutex<BTreeMap<String, Vec<u8>>>);

impl KeyValue for Store {
    fn put(&self, key: String, value: Vec<u8>) -> Option<Vec<u8>> {
        self.0.lock().unwrap().insert(key, value)
    }
    fn get(&self, key: String) -> Option<Vec<u8>> {
        self.0.lock().unwrap().get(&key).cloned()
    }
    fn remove(&self, key: String) -> Option<Vec<u8>> {
        self.0.lock().unwrap().remove(&key)
    }
    fn count(&self) -> u64 {
        self.0.lock().unwrap().len() as u64
    }
}

/// What a run found.
#[derive(Debug)]
pub struct Report {
    pub keys: u64,
    pub big_value_ok: bool,
    pub remote_get_us: f64,
    pub local_get_us: f64,
}

fn median_us(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

pub fn run() -> Result<Report, vipc_ports::Error> {
    let n1 = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
    let n2 = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![n1.local_addr()]))?;
    vipc_ports::rpc::spawn_server(&n1, "kv", KeyValueServer(Store::default()))?;

    let me = n2.attach()?;
    let kv = KeyValueClient::connect(&me, "kv")?;
    for i in 0..1000 {
        kv.put(format!("key{i}"), format!("value {i}").into_bytes())?;
    }
    assert_eq!(kv.get("key7".into())?, Some(b"value 7".to_vec()));
    assert_eq!(kv.remove("key999".into())?, Some(b"value 999".to_vec()));
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    kv.put("big".into(), big.clone())?;
    let big_value_ok = kv.get("big".into())? == Some(big);

    let time = |kv: &KeyValueClient<'_>| -> Result<f64, vipc_ports::Error> {
        let mut t = Vec::new();
        for i in 0..2000 {
            let s = Instant::now();
            kv.get(format!("key{}", i % 900))?;
            t.push(s.elapsed());
        }
        Ok(median_us(t))
    };
    let remote_get_us = time(&kv)?;
    let local = n1.attach()?;
    let local_get_us = time(&KeyValueClient::connect(&local, "kv")?)?;
    Ok(Report { keys: kv.count()?, big_value_ok, remote_get_us, local_get_us })
}

#[allow(dead_code)] // the tests include this file as a module and call `run`
fn main() {
    match run() {
        Ok(r) => {
            println!("kv: {} keys stored from node 2; 1 MiB value round trip intact: {}", r.keys, r.big_value_ok);
            println!(
                "get: remote (node 2 -> 1) median {:.1} us, local (node 1) median {:.1} us",
                r.remote_get_us, r.local_get_us
            );
        }
        Err(e) => {
            eprintln!("kv: {e}");
            std::process::exit(1);
        }
    }
}
