//! The remote-memory layers' servers against a hostile host (seeded,
//! deterministic choice of inputs): random bytes and mutated-valid records
//! (calls, packets, requests with good check words and lying fields)
//! written into the segments the RAPID server, the block receiver and the
//! cache server read, with and without the notify bit. After each batch the
//! server must still be running (its loop never returned an error nor
//! panicked), answer a valid client correctly within a bound, and its
//! serving calls must end near their own time limit.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, MemOutcome, RemoteSegment, SegmentName};
use vipc_rmem_layers::block::{BlockParams, BlockReceiver, BlockSender};
use vipc_rmem_layers::rapid::{RapidClient, RapidParams, RapidServer};
use vipc_rmem_layers::styles::{CacheClient, CacheParams, CacheServer};
use vipc_rmem_layers::{import_retrying, Error};

use vipc::testing::Rng;

/// A random segment name.
fn random_name(r: &mut Rng) -> SegmentName {
    r.bytes(16).try_into().unwrap()
}

const WAIT: Duration = Duration::from_secs(5);

fn seeds() -> u64 {
    std::env::var("HOSTILE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4)
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// The layers' check word (`check.rs`, not exported): CRC-32 of the seed
/// and each part with its length. A hostile host computes it as easily.
fn check(seed: u64, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seed.to_le_bytes());
    for part in parts {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()
}

/// `len` bytes at `offset` of a remote segment (a remote read).
fn read_remote(seg: &RemoteSegment, anon: &AnonSegment, offset: u32, len: u32) -> Option<Vec<u8>> {
    match seg.read(offset, len, (anon, 0), false).ok()?.wait(Duration::from_millis(500)) {
        Ok(MemOutcome::Read) => anon.to_vec(0, len as usize).ok(),
        _ => None,
    }
}

/// Random bytes at a random offset (biased to the start) of `seg`, ending inside it.
fn scribble(r: &mut Rng, seg: &RemoteSegment, avoid: &[std::ops::Range<u32>]) {
    let size = seg.size();
    let max = if r.chance(50) { 64 } else { 2048 };
    let len = (1 + r.below(max) as u32).min(size);
    let at = if r.chance(40) { r.below(128.min(u64::from(size - len) + 1)) } else { r.below(u64::from(size - len) + 1) }
        as u32;
    if avoid.iter().any(|a| at < a.end && a.start < at + len) {
        return;
    }
    let _ = seg.write(at, &r.bytes(len as usize), r.chance(60));
}

// ---------------------------------------------------------------- RAPID

/// The RAPID server's layout (`rapid/mod.rs`).
const R_HEADER: usize = 16;
const R_ARGS_AT: usize = 40;

fn r_stack(p: &RapidParams, i: usize) -> usize {
    (R_HEADER + 8 * p.slots).next_multiple_of(8) + i * (R_ARGS_AT + p.max_args).next_multiple_of(8)
}

/// A call with a good check word over lying fields.
#[allow(clippy::too_many_arguments)]
fn r_call(
    seq: u32,
    nonce: u32,
    proc: u32,
    len: u32,
    reply_to: SegmentName,
    args: &[u8],
    good_check: bool,
    r: &mut Rng,
) -> Vec<u8> {
    let seed = (u64::from(nonce) << 32) | u64::from(seq);
    let word = check(seed, &[&proc.to_le_bytes(), &len.to_le_bytes(), &reply_to, args]);
    let mut b = vec![0u8; R_ARGS_AT];
    put32(&mut b, 0, seq);
    put32(&mut b, 4, nonce);
    put32(&mut b, 8, proc);
    put32(&mut b, 12, len);
    put32(&mut b, 16, if good_check { word } else { r.next_u64() as u32 });
    b[24..40].copy_from_slice(&reply_to);
    b.extend_from_slice(args);
    b
}

fn echo_handler(proc: u32, args: &[u8]) -> Result<Vec<u8>, u32> {
    match proc {
        1 => Ok(args.iter().rev().copied().collect()),
        2 => Ok(vec![0xAB; args.first().map_or(0, |&n| usize::from(n) * 8)]),
        0 => Err(0), // status 0 as an error: the server must still answer a non-zero one
        _ => Err(proc),
    }
}

/// A thread serving `server` in rounds of `serve_for(50 ms)` until `stop`,
/// recording the longest round in milliseconds; it ends with the server.
fn serve_rapid(
    mut server: RapidServer,
) -> (Arc<AtomicBool>, Arc<AtomicU64>, thread::JoinHandle<Result<RapidServer, Error>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(AtomicU64::new(0));
    let (s, l) = (stop.clone(), longest.clone());
    let srv = thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            let t = Instant::now();
            server.serve_for(Duration::from_millis(50), echo_handler)?;
            l.fetch_max(t.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
        Ok(server)
    });
    (stop, longest, srv)
}

#[test]
fn hostile_writes_into_a_rapid_servers_stacks_leave_it_serving() {
    let nodes = cluster(2, 0x41, clean());
    let params = RapidParams { slots: 4, max_args: 256, max_result: 1024 };
    let server = RapidServer::export(&nodes[0], params).unwrap();
    let name = server.name();
    let (stop, longest, srv) = serve_rapid(server);
    let mut client = RapidClient::bind(&nodes[1], name, WAIT).unwrap();
    let mine = client.slot();
    // The hostile host: the server's segment, writable by any host, and a result segment of its own.
    let seg = import_retrying(&nodes[1], name, Access::READ_WRITE, WAIT).unwrap();
    let anon = nodes[1].anonymous_segment(64).unwrap();
    let opts = vipc::SegmentOptions {
        access: Access::WRITE,
        notify: vipc::Notify::Conditional,
        protection: vipc::ProtectionGroup::Any,
    };
    let sink = nodes[1].export_segment(16 + 1024, opts).unwrap();
    // The legitimate client's claim cell and stack are left alone (any host may
    // overwrite them: that client would then be told PeerGone, by design).
    let claim = (R_HEADER + 8 * mine) as u32;
    let stack = r_stack(&params, mine) as u32;
    let avoid = [claim..claim + 8, stack..stack + (R_ARGS_AT + params.max_args) as u32];
    // The hostile host claims the other stacks with nonces of its own.
    let mut held: Vec<(usize, u32)> = Vec::new();
    for i in (0..params.slots).filter(|&i| i != mine) {
        let nonce = 0x1000 + i as u32;
        if let Ok(MemOutcome::Cas(a)) =
            seg.cas((R_HEADER + 8 * i) as u32, 0, nonce, nonce, (&anon, 0)).unwrap().wait(WAIT)
        {
            if a.nonce == nonce {
                held.push((i, nonce));
            }
        }
    }
    assert!(!held.is_empty());
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..5 {
            let what = format!("rapid seed {seed} round {round}");
            for _ in 0..40 {
                if r.chance(30) {
                    scribble(&mut r, &seg, &avoid);
                    continue;
                }
                let (i, nonce) = held[r.below(held.len() as u64) as usize];
                let nonce = if r.chance(15) { r.next_u64() as u32 } else { nonce };
                let seq = match r.below(4) {
                    0 => 0,
                    1 => u32::MAX - r.below(3) as u32,
                    _ => r.next_u64() as u32,
                };
                let n = r.below(params.max_args as u64 + 1) as usize;
                let args = r.bytes(n);
                let len = match r.below(5) {
                    0 => r.next_u64() as u32,
                    1 => params.max_args as u32 + 1,
                    _ => args.len() as u32,
                };
                // Reply segments: its own, or none that exists (rarely: each
                // fresh name costs the server an import wait). Not the server's
                // own segment: its result would land on the header and the
                // claim cells, as any host's write may (PeerGone, by design).
                let reply_to = if r.chance(10) { random_name(&mut r) } else { sink.name() };
                let proc = if r.chance(80) { r.below(4) as u32 } else { r.next_u64() as u32 };
                let call = r_call(seq, nonce, proc, len, reply_to, &args, r.chance(85), &mut r);
                let _ = seg.write(r_stack(&params, i) as u32, &call, r.chance(80));
                if r.chance(10) {
                    thread::sleep(Duration::from_millis(2));
                }
            }
            // A valid call is answered correctly, within a bound.
            let t = Instant::now();
            let args: Vec<u8> = (0..100u8).collect();
            let got = client.call(1, &args, WAIT).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got, args.iter().rev().copied().collect::<Vec<u8>>(), "{what}");
            assert!(matches!(client.call(9, &[], WAIT), Err(Error::Status(9))), "{what}");
            assert!(t.elapsed() < WAIT, "{what}: {:?}", t.elapsed());
            assert!(!srv.is_finished(), "{what}: the server's loop ended");
        }
    }
    stop.store(true, Ordering::SeqCst);
    let server = srv.join().expect("the server thread panicked").expect("the server's loop failed");
    let s = server.stats();
    assert!(s.calls >= 2 * 5 * seeds(), "{s:?}");
    let longest = longest.load(Ordering::SeqCst);
    assert!(longest < 2_000, "a serve_for(50 ms) took {longest} ms");
}

// ---------------------------------------------------------------- block transfer

/// The block receiver's layout (`block/mod.rs`).
const B_HEADER: usize = 64;
const B_TAG: usize = 16;
const B_REG: usize = 44;

#[test]
fn hostile_writes_into_a_block_receivers_segment_leave_it_receiving() {
    let nodes = cluster(2, 0x51, clean());
    let params = BlockParams { packet: 512, unit: 8, max_block: 16 * 1024 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let name = rx.name();
    let stop = Arc::new(AtomicBool::new(false));
    let blocks: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let (s, got) = (stop.clone(), blocks.clone());
    let recv = thread::spawn(move || {
        let mut rx = rx;
        while !s.load(Ordering::SeqCst) {
            let t = Instant::now();
            match rx.recv(Duration::from_millis(100)) {
                Ok(b) => got.lock().unwrap().push(b),
                Err(Error::Timeout) => {}
                Err(e) => return Err(e),
            }
            // A recv ends near its limit (an import of a hostile registration waits at most 500 ms).
            assert!(t.elapsed() < Duration::from_secs(2), "a recv(100 ms) took {:?}", t.elapsed());
        }
        Ok(rx)
    });
    let seg = import_retrying(&nodes[1], name, Access::READ_WRITE, WAIT).unwrap();
    let anon = nodes[1].anonymous_segment(64).unwrap();
    let slot = |i: usize| (B_HEADER + i * (B_TAG + params.packet)) as u32;
    let slots = params.max_block.div_ceil(params.packet);
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..4 {
            let what = format!("block seed {seed} round {round}");
            // The registered sender's id: any host reads it from the header.
            let reg = read_remote(&seg, &anon, (B_REG + 16) as u32, 4)
                .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
            for _ in 0..60 {
                match r.below(10) {
                    0..=2 => scribble(&mut r, &seg, &[]),
                    3 => {
                        // A registration of a sender that does not exist (rarely: each costs an import wait).
                        if r.chance(20) {
                            let mut reg = r.bytes(20);
                            if r.chance(30) {
                                put32(&mut reg, 16, 0);
                            }
                            let _ = seg.write(B_REG as u32, &reg, r.chance(70));
                        }
                    }
                    _ => {
                        // A packet with a good check word over lying fields.
                        let i = r.below(slots as u64 + 2) as usize;
                        let total = match r.below(5) {
                            0 => r.next_u64() as u32,
                            1 => params.max_block as u32 + r.below(2) as u32,
                            _ => r.below(params.max_block as u64 + 1) as u32,
                        };
                        let block = match r.below(4) {
                            0 => r.next_u64() as u32,
                            1 => 0,
                            _ => r.below(8) as u32,
                        };
                        let index = if r.chance(80) { i as u32 } else { r.next_u64() as u32 };
                        let len = r.below(params.packet as u64 + 1) as usize;
                        let data = r.bytes(len);
                        let seed = (u64::from(block) << 32) | u64::from(index & !(1 << 31));
                        let reg_used = if r.chance(80) { reg } else { r.next_u64() as u32 };
                        let word = check(seed, &[&reg_used.to_le_bytes(), &total.to_le_bytes(), &data]);
                        let mut b = vec![0u8; B_TAG];
                        put32(&mut b, 0, block);
                        put32(&mut b, 4, if r.chance(30) { index | 1 << 31 } else { index });
                        put32(&mut b, 8, total);
                        put32(&mut b, 12, if r.chance(90) { word } else { r.next_u64() as u32 });
                        b.extend_from_slice(&data);
                        let at = slot(i.min(slots - 1));
                        let end = (at as usize + b.len()).min(seg.size() as usize);
                        let _ = seg.write(at, &b[..end - at as usize], r.chance(70));
                    }
                }
            }
            // A sender that registers now gets its block through.
            assert!(!recv.is_finished(), "{what}: the receiving loop ended");
            let data = pattern(5000 + round * 1000 + seed as usize, seed as u8);
            let mut tx = BlockSender::connect(&nodes[1], name, WAIT).unwrap_or_else(|e| panic!("{what}: {e}"));
            tx.send(&data, WAIT).unwrap_or_else(|e| panic!("{what}: {e}"));
            let t = Instant::now();
            while !blocks.lock().unwrap().contains(&data) {
                assert!(t.elapsed() < WAIT, "{what}: the block never came out of recv");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let rx = recv.join().expect("the receiving thread panicked").expect("recv failed");
    assert!(rx.refused_writes() > 0, "writes into the layout were refused and counted");
}

// ---------------------------------------------------------------- file styles

const C_PARAMS: CacheParams = CacheParams { block: 4096, blocks: 4, slots: 2 };
const C_REQUEST: usize = 32;

#[test]
fn hostile_requests_to_a_cache_server_leave_it_serving() {
    let nodes = cluster(2, 0x61, clean());
    let mut server = CacheServer::export(&nodes[0], C_PARAMS).unwrap();
    for b in 0..C_PARAMS.blocks {
        server.fill(b, &pattern(C_PARAMS.block, b as u8)).unwrap();
    }
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(AtomicU64::new(0));
    let (s, l) = (stop.clone(), longest.clone());
    let srv = thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            let t = Instant::now();
            server.serve_for(Duration::from_millis(20))?;
            l.fetch_max(t.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
        Ok::<_, Error>(server)
    });
    let mut client = CacheClient::connect(&nodes[1], names, C_PARAMS, 1, WAIT).unwrap();
    client.set_rto(Duration::from_millis(200));
    let requests = import_retrying(&nodes[1], names.1, Access::WRITE, WAIT).unwrap();
    let opts = vipc::SegmentOptions {
        access: Access::WRITE,
        notify: vipc::Notify::Conditional,
        protection: vipc::ProtectionGroup::Any,
    };
    let sink = nodes[1].export_segment(16 + C_PARAMS.block, opts).unwrap();
    // Slot 1 is the client's (any host may overwrite it: its request is then written again).
    let client_slot = C_REQUEST as u32..2 * C_REQUEST as u32;
    let avoid = std::slice::from_ref(&client_slot);
    for seed in 1..=seeds() {
        let mut r = Rng::new(seed);
        for round in 0..5 {
            let what = format!("cache seed {seed} round {round}");
            for _ in 0..60 {
                if r.chance(30) {
                    scribble(&mut r, &requests, avoid);
                    continue;
                }
                let mut req = [0u8; C_REQUEST];
                put32(&mut req, 0, if r.chance(10) { 0 } else { r.next_u64() as u32 });
                put32(
                    &mut req,
                    4,
                    if r.chance(70) { r.below(C_PARAMS.blocks as u64 + 1) as u32 } else { r.next_u64() as u32 },
                );
                put32(
                    &mut req,
                    8,
                    if r.chance(70) { r.below(C_PARAMS.block as u64 + 2) as u32 } else { r.next_u64() as u32 },
                );
                put32(&mut req, 12, r.next_u64() as u32);
                // Reply segments: its own, the server's request area, or (rarely:
                // an import wait) none that exists. Not the server's cache: the
                // answer would land on block 0, as any host's write may.
                let name = match r.below(12) {
                    0 => random_name(&mut r),
                    1 => names.1,
                    _ => sink.name(),
                };
                req[16..].copy_from_slice(&name);
                let _ = requests.write(0, &req, r.chance(85));
                if r.chance(10) {
                    thread::sleep(Duration::from_millis(2));
                }
            }
            assert!(!srv.is_finished(), "{what}: the server's loop ended");
            // The hybrid styles return what the direct read sees.
            for b in 0..C_PARAMS.blocks {
                let direct = client.read_direct(b, 1000, WAIT).unwrap_or_else(|e| panic!("{what}: {e}"));
                for notify_last in [false, true] {
                    let got = client.read_hybrid(b, 1000, notify_last, WAIT).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(got, direct, "{what}: block {b}");
                }
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    srv.join().expect("the server thread panicked").expect("the server's loop failed");
    let longest = longest.load(Ordering::SeqCst);
    assert!(longest < 2_000, "a serve_for(20 ms) took {longest} ms");
}

/// FINDING (liveness): a call naming a reply segment that does not exist
/// holds the RAPID server's only thread in an import for up to 500 ms
/// (`IMPORT_WAIT`; `FailedImports` pauses a name, not a caller, so each
/// fresh name costs it again), and every write that comes meanwhile makes
/// `serve_stacks` serve the same stack again, without end and without
/// looking at `serve_for`'s limit. One hostile host holding one stack and
/// writing a well-formed call with a fresh name every 20 ms keeps the server
/// on its stack for ever: `serve_for(50 ms)` does not return, and a valid
/// client's call on the other stack is never served (it times out).
#[test]
fn bogus_reply_names_do_not_stall_a_rapid_server() {
    let nodes = cluster(2, 0x71, clean());
    let params = RapidParams { slots: 2, max_args: 64, max_result: 64 };
    let server = RapidServer::export(&nodes[0], params).unwrap();
    let name = server.name();
    let (stop, longest, srv) = serve_rapid(server);
    let mut client = RapidClient::bind(&nodes[1], name, WAIT).unwrap();
    assert_eq!(client.call(1, &[0, 1], WAIT).unwrap(), vec![1, 0], "served before the attack");
    // The hostile host claims the other stack and writes well-formed calls
    // (good check words) that name a fresh, non-existent reply segment.
    let seg = import_retrying(&nodes[1], name, Access::READ_WRITE, WAIT).unwrap();
    let anon = nodes[1].anonymous_segment(64).unwrap();
    let other = 1 - client.slot();
    let nonce = 0xbad;
    let cas = seg.cas((R_HEADER + 8 * other) as u32, 0, nonce, nonce, (&anon, 0)).unwrap().wait(WAIT);
    assert!(matches!(cas, Ok(MemOutcome::Cas(a)) if a.nonce == nonce), "{cas:?}");
    let hostile_stop = Arc::new(AtomicBool::new(false));
    let hs = hostile_stop.clone();
    let hostile = thread::spawn(move || {
        let mut r = Rng::new(5);
        let mut seq = 0u32;
        while !hs.load(Ordering::SeqCst) {
            seq += 1;
            let call = r_call(seq, nonce, 1, 4, random_name(&mut r), &[1, 2, 3, 4], true, &mut r);
            seg.write(r_stack(&params, other) as u32, &call, true).unwrap();
            thread::sleep(Duration::from_millis(20));
        }
    });
    thread::sleep(Duration::from_millis(200));
    let mut outcome = Ok(Duration::ZERO);
    for i in 0..5u8 {
        let t = Instant::now();
        match client.call(1, &[i, 1], Duration::from_secs(3)) {
            Ok(got) => {
                assert_eq!(got, vec![1, i]);
                outcome = outcome.map(|w: Duration| w.max(t.elapsed()));
            }
            Err(e) => {
                outcome = Err(format!("call {i}: {e} after {:?}", t.elapsed()));
                break;
            }
        }
    }
    hostile_stop.store(true, Ordering::SeqCst);
    hostile.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let t = Instant::now();
    srv.join().unwrap().unwrap();
    let longest = longest.load(Ordering::SeqCst).max(t.elapsed().as_millis() as u64);
    println!("valid calls: {outcome:?}; longest serve_for(50 ms): {longest} ms");
    let worst = outcome.unwrap_or_else(|e| panic!("a valid call behind the hostile stack failed: {e}"));
    assert!(worst < Duration::from_millis(300), "a valid call took {worst:?} behind the hostile stack");
    assert!(longest < 300, "a serve_for(50 ms) took {longest} ms");
}

/// FINDING (liveness): the cache server's `serve_for` drains its control
/// channel without looking at its limit, and each request naming a reply
/// segment that does not exist holds it 100 ms in an import (a fresh name
/// each time). A hostile host writing such a request every 20 ms into its
/// own request slot keeps `serve_for(20 ms)` from returning; the valid
/// client on the other slot is answered only behind the hostile backlog.
#[test]
fn bogus_reply_names_do_not_stall_a_cache_server() {
    let nodes = cluster(2, 0x75, clean());
    let mut server = CacheServer::export(&nodes[0], C_PARAMS).unwrap();
    server.fill(0, &pattern(C_PARAMS.block, 1)).unwrap();
    let names = server.names();
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(AtomicU64::new(0));
    let (s, l) = (stop.clone(), longest.clone());
    let srv = thread::spawn(move || {
        while !s.load(Ordering::SeqCst) {
            let t = Instant::now();
            server.serve_for(Duration::from_millis(20))?;
            l.fetch_max(t.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
        Ok::<_, Error>(())
    });
    let mut client = CacheClient::connect(&nodes[1], names, C_PARAMS, 1, WAIT).unwrap();
    client.set_rto(Duration::from_millis(200));
    assert_eq!(client.read_hybrid(0, 100, true, WAIT).unwrap(), pattern(100, 1), "served before the attack");
    let requests = import_retrying(&nodes[1], names.1, Access::WRITE, WAIT).unwrap();
    let hostile_stop = Arc::new(AtomicBool::new(false));
    let hs = hostile_stop.clone();
    let hostile = thread::spawn(move || {
        let mut r = Rng::new(6);
        let mut seq = 0u32;
        while !hs.load(Ordering::SeqCst) {
            seq += 1;
            let mut req = [0u8; C_REQUEST];
            put32(&mut req, 0, seq);
            put32(&mut req, 8, 16);
            req[16..].copy_from_slice(&random_name(&mut r));
            requests.write(0, &req, true).unwrap();
            thread::sleep(Duration::from_millis(20));
        }
    });
    thread::sleep(Duration::from_millis(300));
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(client.read_hybrid(0, 100, true, WAIT).unwrap(), pattern(100, 1));
        worst = worst.max(t.elapsed());
    }
    hostile_stop.store(true, Ordering::SeqCst);
    hostile.join().unwrap();
    stop.store(true, Ordering::SeqCst);
    let t = Instant::now();
    srv.join().unwrap().unwrap();
    let longest = longest.load(Ordering::SeqCst).max(t.elapsed().as_millis() as u64);
    println!("worst valid read {worst:?}; longest serve_for(20 ms) {longest} ms");
    assert!(longest < 500, "a serve_for(20 ms) took {longest} ms");
    assert!(worst < Duration::from_millis(500), "a valid read took {worst:?} behind the hostile requests");
}
