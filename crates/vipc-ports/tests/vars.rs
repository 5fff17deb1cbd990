//! Remote variables: whole and qualified reads from another node, typed
//! decoding, updates seen, and the occupied test with re-issue.

use serde::{Deserialize, Serialize};
use std::time::Duration;
use vipc::{Node, NodeConfig};
use vipc_ports::{Error, RemoteVars, Variables};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Cell {
    temp: f64,
    label: String,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Grid {
    generation: u64,
    rows: Vec<Vec<Cell>>,
}

fn grid(generation: u64) -> Grid {
    let rows = (0..4)
        .map(|r| {
            (0..5).map(|c| Cell { temp: (r * 10 + c) as f64 + generation as f64, label: format!("r{r}c{c}") }).collect()
        })
        .collect();
    Grid { generation, rows }
}

fn two_nodes() -> (Node, Node) {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    (a, b)
}

#[test]
fn whole_and_qualified_reads_decode_as_the_readers_types_and_see_updates() {
    let (a, b) = two_nodes();
    let vars = Variables::start(&a).unwrap();
    let mut g = vars.export("grid", 16 << 10, &grid(1)).unwrap();
    let _count = vars.export("count", 64, &42u32).unwrap();
    let me = b.attach().unwrap();
    let rv = RemoteVars::connect(&b, &me, 1).unwrap();
    assert_eq!(rv.read::<Grid>("grid", "").unwrap(), grid(1));
    assert_eq!(rv.read::<u32>("count", "").unwrap(), 42);
    assert_eq!(rv.read::<u64>("grid", ".generation").unwrap(), 1);
    assert_eq!(rv.read::<Cell>("grid", ".rows[2][3]").unwrap(), grid(1).rows[2][3]);
    assert_eq!(rv.read::<f64>("grid", ".rows[3][4].temp").unwrap(), 35.0);
    assert_eq!(rv.read::<String>("grid", ".rows[0][1].label").unwrap(), "r0c1");
    assert_eq!(rv.read::<Vec<Cell>>("grid", ".rows[1]").unwrap(), grid(1).rows[1]);
    g.set(&grid(7)).unwrap();
    assert_eq!(rv.read::<f64>("grid", ".rows[3][4].temp").unwrap(), 41.0, "the new value, through a new directory");
    assert_eq!(rv.reissued(), 1, "the cached directory was stale once");
    assert!(matches!(rv.read::<u64>("grid", ".rows[9]"), Err(Error::NotFound(_))));
    assert!(matches!(rv.read::<u64>("nothing", ""), Err(Error::NotFound(_))));
    assert!(matches!(rv.read::<u64>("grid", ".rows[0][0].label"), Err(Error::Decode(_))));
    assert!(matches!(vars.export("tiny", 4, &grid(1)), Err(Error::Encode(_))));
    assert!(matches!(vars.export("huge", usize::MAX, &1u8), Err(Error::Encode(_))), "no overflow");
}

#[test]
fn an_occupied_variable_is_re_read_until_its_owner_leaves_the_monitor() {
    let (a, b) = two_nodes();
    let vars = Variables::start(&a).unwrap();
    let mut v = vars.export("guarded", 256, &(1u32, 2u32)).unwrap();
    let me = b.attach().unwrap();
    let rv = RemoteVars::connect(&b, &me, 1).unwrap();
    assert_eq!(rv.read::<(u32, u32)>("guarded", "").unwrap(), (1, 2));
    v.occupy().unwrap();
    let owner = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        v.set(&(3u32, 4u32)).unwrap();
        v // still exported while the reader reads
    });
    // The reader never returns a value from inside the monitor: it re-issues until the new one.
    assert_eq!(rv.read::<(u32, u32)>("guarded", "").unwrap(), (3, 4));
    assert!(rv.reissued() >= 2, "re-issued while occupied: {}", rv.reissued());
    owner.join().unwrap();
}

#[test]
fn readers_racing_an_updating_owner_only_ever_see_whole_values() {
    let (a, b) = two_nodes();
    let vars = Variables::start(&a).unwrap();
    let mut v = vars.export("pair", 4096, &vec![0u64; 50]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let owner = std::thread::spawn(move || {
        let mut i = 0u64;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            i += 1;
            v.set(&vec![i; 50]).unwrap();
            std::thread::sleep(Duration::from_micros(200));
        }
        i
    });
    let me = b.attach().unwrap();
    let rv = RemoteVars::connect(&b, &me, 1).unwrap();
    for _ in 0..300 {
        let all: Vec<u64> = rv.read("pair", "").unwrap();
        assert!(all.iter().all(|x| *x == all[0]), "a torn value: {all:?}");
        let one: u64 = rv.read("pair", "[17]").unwrap();
        assert!(one >= all[0], "versions only grow: {one} after {}", all[0]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(owner.join().unwrap() > 10, "the owner kept updating");
}

#[test]
fn a_reader_holds_what_it_reads_not_what_the_exporter_declares() {
    let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    // The reader's node may hold 1 MiB of segments; the variable is declared at 16 MiB.
    let mut small = NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()]);
    small.engine.rmem_max_bytes = 1 << 20;
    let b = Node::start(small).unwrap();
    let vars = Variables::start(&a).unwrap();
    let _v = vars.export("roomy", 16 << 20, &grid(3)).unwrap();
    let me = b.attach().unwrap();
    let rv = RemoteVars::connect(&b, &me, 1).unwrap();
    assert_eq!(rv.read::<Grid>("roomy", "").unwrap(), grid(3));
    assert_eq!(rv.read::<u64>("roomy", ".generation").unwrap(), 3);
}

/// A variable dropped leaves the directory, and one exported again under
/// the same name is read through its new segment by a reader that had read
/// the old one (it kept the old segment and failed for ever).
#[test]
fn a_variable_exported_again_is_found_again_and_a_dropped_one_is_gone() {
    let (a, b) = two_nodes();
    let vars = Variables::start(&a).unwrap();
    let first = vars.export("count", 64, &1u32).unwrap();
    let me = b.attach().unwrap();
    let rv = RemoteVars::connect(&b, &me, 1).unwrap();
    assert_eq!(rv.read::<u32>("count", "").unwrap(), 1);
    drop(first);
    let again = vars.export("count", 64, &2u32).unwrap();
    assert_eq!(rv.read::<u32>("count", "").unwrap(), 2);
    drop(again);
    let fresh = RemoteVars::connect(&b, &me, 1).unwrap();
    assert!(matches!(fresh.read::<u32>("count", ""), Err(Error::NotFound(_))), "the name went with it");
    assert!(rv.read::<u32>("count", "").is_err());
}
