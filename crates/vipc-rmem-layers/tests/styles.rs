//! The file-service transfer styles on loopback nodes: every style moves
//! exactly the cached bytes, the direct styles with no server thread
//! running, the hybrids also under loss, duplication and reordering.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use vipc_rmem_layers::styles::{CacheClient, CacheParams, CacheServer};
use vipc_rmem_layers::Error;

const WAIT: Duration = Duration::from_secs(10);
const PARAMS: CacheParams = CacheParams { block: 8192, blocks: 8, slots: 2 };

/// Serves hybrid requests on a thread until `stop`; returns how many it answered.
fn serve(mut server: CacheServer, stop: Arc<AtomicBool>) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += server.serve_for(Duration::from_millis(20)).unwrap();
        }
        n
    })
}

#[test]
fn direct_styles_move_exact_bytes_with_no_server_thread() {
    let nodes = cluster(2, 21, clean());
    let server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    for b in 0..PARAMS.blocks {
        server.fill(b, &pattern(PARAMS.block, b as u8)).unwrap();
    }
    // No thread serves: the server's node alone answers reads and applies writes.
    let client = CacheClient::connect(&nodes[1], server.names(), PARAMS, 0, WAIT).unwrap();
    for b in 0..PARAMS.blocks {
        assert_eq!(client.read_direct(b, PARAMS.block, WAIT).unwrap(), pattern(PARAMS.block, b as u8));
    }
    assert_eq!(client.read_direct(3, 100, WAIT).unwrap(), pattern(100, 3));
    client.write_direct(5, &pattern(PARAMS.block, 0xee)).unwrap();
    // A read issued after the write on a clean network sees it (one path, in order).
    assert_eq!(client.read_direct(5, PARAMS.block, WAIT).unwrap(), pattern(PARAMS.block, 0xee));
    assert!(matches!(client.read_direct(PARAMS.blocks, 1, WAIT), Err(Error::TooLarge { .. })));
    assert!(matches!(client.write_direct(0, &[0; PARAMS.block + 1]), Err(Error::TooLarge { .. })));
    drop(server);
}

#[test]
fn hybrid_styles_return_the_block_and_answer_once_per_request_on_a_clean_network() {
    let nodes = cluster(2, 23, clean());
    let server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    for b in 0..PARAMS.blocks {
        server.fill(b, &pattern(PARAMS.block, b as u8)).unwrap();
    }
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve(server, stop.clone());
    let mut client = CacheClient::connect(&nodes[1], names, PARAMS, 1, WAIT).unwrap();
    client.set_rto(Duration::from_millis(500)); // a loaded machine is not a lossy network
    let mut calls = 0;
    for notify_last in [false, true] {
        for b in 0..PARAMS.blocks {
            let len = PARAMS.block - b * 100;
            assert_eq!(client.read_hybrid(b, len, notify_last, WAIT).unwrap(), pattern(len, b as u8));
            calls += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let served = t.join().unwrap();
    assert_eq!(served as u64, calls + client.retransmitted, "one answer per request written");
    assert_eq!(client.retransmitted, 0, "a clean network needs no retransmission");
    assert!(matches!(CacheClient::connect(&nodes[1], names, PARAMS, 2, WAIT), Err(Error::NoFreeSlot)));
}

#[test]
fn hybrid_styles_return_exact_bytes_under_loss_duplication_and_reordering() {
    let nodes = cluster(2, 25, lossy(0.15, 7));
    let server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    for b in 0..PARAMS.blocks {
        server.fill(b, &pattern(PARAMS.block, b as u8 ^ 0x55)).unwrap();
    }
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve(server, stop.clone());
    let mut client = CacheClient::connect(&nodes[1], names, PARAMS, 0, WAIT).unwrap();
    for i in 0..60 {
        let b = i % PARAMS.blocks;
        let got = client.read_hybrid(b, PARAMS.block, i % 2 == 0, WAIT).unwrap();
        assert!(got == pattern(PARAMS.block, b as u8 ^ 0x55), "request {i}: wrong bytes");
    }
    assert!(client.retransmitted > 0, "15% loss must have cost some request a retransmission");
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

#[test]
fn a_hybrid_request_to_a_server_that_never_serves_times_out() {
    let nodes = cluster(2, 27, clean());
    let server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    let mut client = CacheClient::connect(&nodes[1], server.names(), PARAMS, 0, WAIT).unwrap();
    let t = std::time::Instant::now();
    assert!(matches!(client.read_hybrid(0, 10, true, Duration::from_millis(200)), Err(Error::Timeout)));
    assert!(t.elapsed() < Duration::from_secs(2), "bounded: {:?}", t.elapsed());
}

#[test]
fn a_request_naming_a_reply_segment_nobody_exports_does_not_stop_the_server() {
    let nodes = cluster(2, 27, clean());
    let mut server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    server.fill(0, &pattern(PARAMS.block, 0)).unwrap();
    let (_, requests) = server.names();
    let slot = nodes[1].import_segment(requests, vipc::Access::WRITE, WAIT).unwrap();
    // {seq 1, block 0, 100 bytes, no notify} and a reply segment name nobody exports.
    let mut req = [0u8; 32];
    req[0] = 1;
    req[8] = 100;
    req[16..32].fill(0xab);
    slot.write(0, &req, true).unwrap();
    assert_eq!(server.serve_for(Duration::from_secs(2)).unwrap(), 0, "not answered, and no error");
    // It still serves a real client.
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve(server, stop.clone());
    let mut client = CacheClient::connect(&nodes[1], names, PARAMS, 1, WAIT).unwrap();
    assert_eq!(client.read_hybrid(0, 100, false, WAIT).unwrap(), pattern(100, 0));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

/// What a caller may pass: `Duration::MAX` as "no limit" (it panicked,
/// adding to `Instant::now()`), a zero RTO (every hybrid read timed out:
/// no answer was looked at before the request went again), and a block
/// past the cache or data longer than a block (`fill` wrote block 0, or
/// cut the data short, without a word).
#[test]
fn unbounded_timeouts_a_zero_rto_and_bad_blocks_are_taken_as_meant() {
    let nodes = cluster(2, 25, clean());
    let server = CacheServer::export(&nodes[0], PARAMS).unwrap();
    server.fill(1, &pattern(PARAMS.block, 1)).unwrap();
    assert!(matches!(server.fill(PARAMS.blocks, &[1]), Err(Error::TooLarge { .. })));
    assert!(matches!(server.fill(usize::MAX / PARAMS.block, &[1]), Err(Error::TooLarge { .. })));
    assert!(matches!(server.fill(0, &[1; PARAMS.block + 1]), Err(Error::TooLarge { .. })));
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let t = serve(server, stop.clone());
    let mut client = CacheClient::connect(&nodes[1], names, PARAMS, 0, Duration::MAX).unwrap();
    assert_eq!(client.read_direct(1, 100, Duration::MAX).unwrap(), pattern(100, 1));
    client.set_rto(Duration::ZERO);
    assert_eq!(client.read_hybrid(1, 100, false, Duration::MAX).unwrap(), pattern(100, 1));
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

/// Read-only reads from two threads of one client each get their own block
/// (every answer lands at the start of the client's one anonymous segment:
/// 613 of 4,000 returned the other thread's block).
#[test]
fn concurrent_direct_reads_each_get_their_own_block() {
    let params = CacheParams { block: 8192, blocks: 4, slots: 1 };
    let nodes = cluster(2, 451, clean());
    let server = CacheServer::export(&nodes[0], params).unwrap();
    for b in 0..params.blocks {
        server.fill(b, &pattern(params.block, b as u8 + 1)).unwrap();
    }
    let client = Arc::new(CacheClient::connect(&nodes[1], server.names(), params, 0, WAIT).unwrap());
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let c = client.clone();
            thread::spawn(move || {
                (0..2000)
                    .filter(|_| c.read_direct(t, params.block, WAIT).unwrap() != pattern(params.block, t as u8 + 1))
                    .count()
            })
        })
        .collect();
    let wrong: usize = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wrong, 0, "{wrong} of 4000 reads returned bytes of another block");
}

/// Under 15% loss every read-only read succeeds within the caller's time:
/// the engine never retries a read, the style does (11 of 40 failed after
/// the engine's 1 s, with the caller allowing 10 s).
#[test]
fn direct_reads_are_read_again_when_lost() {
    let params = CacheParams { block: 1024, blocks: 4, slots: 1 };
    let nodes = cluster(2, 461, lossy(0.15, 3));
    let server = CacheServer::export(&nodes[0], params).unwrap();
    server.fill(1, &pattern(1024, 9)).unwrap();
    let client = CacheClient::connect(&nodes[1], server.names(), params, 0, WAIT).unwrap();
    for i in 0..40 {
        assert_eq!(client.read_direct(1, 1024, WAIT).unwrap(), pattern(1024, 9), "read {i}");
    }
}
