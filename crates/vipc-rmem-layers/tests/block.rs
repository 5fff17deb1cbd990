//! Block transfer over real UDP on loopback: exact data with and without
//! injected loss, duplication and reordering, with one unit in flight or
//! several; packets larger than a datagram; garbage written into the
//! sender's acknowledgement segment; and typed errors, not hangs, when the
//! receiver goes away.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};
use vipc::{Access, SegmentName};
use vipc_rmem_layers::block::{BlockParams, BlockReceiver, BlockSender, SenderStats, MAX_WINDOW, WINDOW};
use vipc_rmem_layers::Error;

const WAIT: Duration = Duration::from_secs(20);

/// Receives `count` blocks on another thread; returns them.
fn receive(mut rx: BlockReceiver, count: usize) -> thread::JoinHandle<(BlockReceiver, Vec<Vec<u8>>)> {
    thread::spawn(move || {
        let blocks = (0..count).map(|_| rx.recv(WAIT).expect("recv")).collect();
        (rx, blocks)
    })
}

#[test]
fn blocks_arrive_exactly_without_retransmission_on_a_clean_network() {
    let nodes = cluster(2, 1, clean());
    let params = BlockParams { packet: 1000, unit: 16, max_block: 100_000 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    tx.set_patience(Duration::from_millis(500), 10); // a loaded machine is not a lossy network
    assert_eq!(tx.params(), params);
    let sizes = [0, 1, 999, 1000, 1001, 16_000, 16_001, 100_000];
    let blocks: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
    let t = receive(rx, blocks.len());
    for b in &blocks {
        tx.send(b, WAIT).unwrap();
    }
    let (rx, got) = t.join().unwrap();
    assert_eq!(got, blocks);
    assert_eq!(rx.blocks_received(), sizes.len() as u64);
    let s = tx.stats();
    let want: usize = sizes.iter().map(|&n| n.div_ceil(1000).max(1)).sum();
    assert_eq!((s.blocks, s.packets), (sizes.len() as u64, want as u64), "{s:?}");
    assert_eq!(s.retransmitted, 0, "{s:?}");
    assert!(s.acks >= 1, "{s:?}");
}

#[test]
fn blocks_arrive_exactly_under_loss_duplication_and_reordering() {
    let nodes = cluster(2, 11, lossy(0.1, 42));
    let params = BlockParams { packet: 1024, unit: 16, max_block: 256 << 10 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let blocks: Vec<Vec<u8>> = (0..6).map(|i| pattern((40 << 10) * (i + 1) + i * 7, i as u8)).collect();
    let t = receive(rx, blocks.len());
    for b in &blocks {
        tx.send(b, WAIT).unwrap();
    }
    let (_rx, got) = t.join().unwrap();
    for (i, (g, b)) in got.iter().zip(&blocks).enumerate() {
        assert!(g == b, "block {i} differs ({} against {} bytes)", g.len(), b.len());
    }
    let s = tx.stats();
    assert!(s.retransmitted > 0, "10% loss and nothing sent again: {s:?}");
    let first_copies: usize = blocks.iter().map(|b| b.len().div_ceil(1024)).sum();
    assert_eq!(s.packets - s.retransmitted, first_copies as u64, "{s:?}");
}

#[test]
fn packets_larger_than_a_datagram_are_taken_only_whole() {
    // 100,000-byte packets travel as two datagrams on loopback: under loss
    // a slot often holds half of a packet, which the check word rejects.
    let nodes = cluster(2, 21, lossy(0.15, 7));
    let params = BlockParams { packet: 100_000, unit: 4, max_block: 1 << 20 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let blocks: Vec<Vec<u8>> = (0..3).map(|i| pattern((1 << 20) - i * 1000, 0x40 + i as u8)).collect();
    let t = receive(rx, blocks.len());
    for b in &blocks {
        tx.send(b, WAIT).unwrap();
    }
    let (_rx, got) = t.join().unwrap();
    assert!(got == blocks, "blocks differ");
    assert!(tx.stats().retransmitted > 0, "{:?}", tx.stats());
}

#[test]
fn an_unexported_receiver_is_a_typed_error_not_a_hang() {
    let nodes = cluster(2, 31, clean());
    let rx = BlockReceiver::export(&nodes[0], BlockParams::default()).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    drop(rx);
    let t = Instant::now();
    match tx.send(&pattern(50_000, 1), WAIT) {
        Err(Error::PeerGone(why)) => assert!(why.contains("refuses"), "{why}"),
        other => panic!("expected PeerGone, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(2), "took {:?}", t.elapsed());
}

#[test]
fn a_stopped_receiver_node_is_a_typed_error_not_a_hang() {
    let nodes = cluster(2, 41, clean());
    let rx = BlockReceiver::export(&nodes[0], BlockParams::default()).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    tx.set_patience(Duration::from_millis(20), 5);
    nodes[0].shutdown();
    let t = Instant::now();
    match tx.send(&pattern(50_000, 1), WAIT) {
        Err(Error::PeerGone(why)) => assert!(why.contains("unanswered"), "{why}"),
        other => panic!("expected PeerGone, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(2), "took {:?}", t.elapsed());
    assert_eq!(tx.stats().probes, 5);
}

#[test]
fn a_receiver_with_no_sender_times_out_and_then_goes_on() {
    let nodes = cluster(2, 51, clean());
    let mut rx = BlockReceiver::export(&nodes[0], BlockParams::default()).unwrap();
    let t = Instant::now();
    assert!(matches!(rx.recv(Duration::from_millis(50)), Err(Error::Timeout)));
    assert!(t.elapsed() < Duration::from_secs(1));
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let data = pattern(30_000, 9);
    let t = receive(rx, 1);
    tx.send(&data, WAIT).unwrap();
    assert_eq!(t.join().unwrap().1, vec![data]);
}

#[test]
fn a_sender_with_no_receiver_thread_times_out() {
    // The receiver's node answers status reads (the segment exists) but no
    // thread takes the packets: the sender gives up at its deadline.
    let nodes = cluster(2, 61, clean());
    let rx = BlockReceiver::export(&nodes[0], BlockParams::default()).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let t = Instant::now();
    assert!(matches!(tx.send(&pattern(10_000, 2), Duration::from_millis(300)), Err(Error::Timeout)));
    assert!(t.elapsed() < Duration::from_secs(1), "took {:?}", t.elapsed());
    // A timeout does not mean "not delivered": every packet of the abandoned
    // block is in the segment, so a receiver that comes now takes it.
    let mut rx = rx;
    assert_eq!(rx.recv(WAIT).unwrap(), pattern(10_000, 2));
    let data = pattern(20_000, 3);
    let t = receive(rx, 1);
    tx.send(&data, WAIT).unwrap();
    assert_eq!(t.join().unwrap().1, vec![data]);
}

#[test]
fn a_new_sender_never_has_an_old_senders_packets_counted() {
    // Sender A writes a whole block (one unit) nobody takes; sender B (another
    // node) registers. The same block number and length, but A's packets
    // fail B's check words: the receiver takes nothing until B sends.
    let nodes = cluster(3, 71, clean());
    let mut rx = BlockReceiver::export(&nodes[0], BlockParams::default()).unwrap();
    let mut a = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    assert!(matches!(a.send(&pattern(10_000, 1), Duration::from_millis(100)), Err(Error::Timeout)));
    let mut b = BlockSender::connect(&nodes[2], rx.name(), WAIT).unwrap();
    assert!(matches!(rx.recv(Duration::from_millis(100)), Err(Error::Timeout)));
    let data = pattern(10_000, 2);
    let t = thread::spawn(move || {
        b.send(&data, WAIT).unwrap();
        data
    });
    let got = rx.recv(WAIT).unwrap();
    assert_eq!(got, t.join().unwrap());
    assert_eq!(rx.blocks_received(), 1);
}

/// Sends `blocks` through a fresh pair with `window` units in flight; checks
/// every byte and the packet accounting; returns the sender's stats.
fn windowed(
    faults: vipc::FaultConfig,
    first: u16,
    params: BlockParams,
    window: usize,
    blocks: &[Vec<u8>],
) -> SenderStats {
    let clean_net = faults.is_none();
    let nodes = cluster(2, first, faults);
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    if clean_net {
        tx.set_patience(Duration::from_millis(500), 10); // a loaded machine is not a lossy network
    }
    tx.set_window(window);
    assert_eq!(tx.window(), window);
    let t = receive(rx, blocks.len());
    for b in blocks {
        tx.send(b, WAIT).unwrap();
    }
    let (_rx, got) = t.join().unwrap();
    for (i, (g, b)) in got.iter().zip(blocks).enumerate() {
        assert!(g == b, "window {window}: block {i} differs ({} against {} bytes)", g.len(), b.len());
    }
    let s = tx.stats();
    let first_copies: usize = blocks.iter().map(|b| b.len().div_ceil(params.packet).max(1)).sum();
    assert_eq!(s.packets - s.retransmitted, first_copies as u64, "{s:?}");
    assert_eq!(s.blocks, blocks.len() as u64);
    s
}

#[test]
fn windowed_blocks_arrive_exactly_under_heavy_loss_and_duplication() {
    // Units of 4 packets: a 60 KiB block is 15 units, so 4 or 8 are in
    // flight at once and acknowledgements of several units cross.
    let params = BlockParams { packet: 1024, unit: 4, max_block: 128 << 10 };
    let blocks: Vec<Vec<u8>> = (0..8).map(|i| pattern((15 << 10) * (i % 4 + 1) + i * 13, 0x20 + i as u8)).collect();
    for (w, first) in [(4, 81), (8, 85), (MAX_WINDOW, 89)] {
        let faults = vipc::FaultConfig { loss: 0.15, duplicate: 0.1, reorder: 0.05, seed: 1000 + w as u64 };
        let s = windowed(faults, first, params, w, &blocks);
        assert!(s.retransmitted > 0, "15% loss and nothing sent again: {s:?}");
    }
}

#[test]
fn a_window_of_one_is_stop_and_wait() {
    // On a clean network each unit costs its packets and exactly one
    // bitmask, as before windows (a wider window may finish a block on its
    // final record before reading the bitmasks of units that crossed it);
    // under loss the data are still exact.
    let params = BlockParams { packet: 1000, unit: 4, max_block: 100_000 };
    let sizes = [0, 1, 3999, 4000, 4001, 50_000, 100_000];
    let blocks: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i as u8)).collect();
    let units: usize = sizes.iter().map(|&n| n.div_ceil(1000).max(1).div_ceil(4)).sum();
    for (w, first) in [(1, 91), (WINDOW, 94)] {
        let s = windowed(clean(), first, params, w, &blocks);
        assert_eq!((s.retransmitted, s.probes), (0, 0), "window {w}: {s:?}");
        if w == 1 {
            assert_eq!((s.acks, s.ignored_acks), (units as u64, 0), "{s:?}");
        } else {
            assert!((blocks.len() as u64..=units as u64).contains(&s.acks), "window {w}: {s:?}");
        }
    }
    windowed(lossy(0.1, 5), 97, params, 1, &blocks);
}

#[test]
fn garbage_in_the_acknowledgement_segment_is_ignored() {
    // A third host writes random bytes, notifying, all over the sender's
    // acknowledgement segment while blocks go through: none is taken for a
    // bitmask, every block arrives exact.
    let nodes = cluster(3, 101, clean());
    let params = BlockParams { packet: 1024, unit: 4, max_block: 64 << 10 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let header = vipc_rmem_layers::import_retrying(&nodes[2], rx.name(), Access::READ, WAIT).unwrap();
    let anon = nodes[2].anonymous_segment(64).unwrap();
    header.read(44, 16, (&anon, 0), false).unwrap().wait(WAIT).unwrap(); // the registration (H_REG)
    let name: SegmentName = anon.to_vec(0, 16).unwrap().try_into().unwrap();
    let acks = vipc_rmem_layers::import_retrying(&nodes[2], name, Access::WRITE, WAIT).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let vandal = thread::spawn(move || {
        let mut n = 0u64;
        while !s.load(Ordering::Relaxed) {
            let junk: Vec<u8> = (0..1 + n % 64).map(|i| (n * 131 + i * 7) as u8).collect();
            acks.write(((n * 37) % 448) as u32, &junk, true).unwrap();
            n += 1;
            thread::sleep(Duration::from_micros(200));
        }
        n
    });
    let blocks: Vec<Vec<u8>> = (0..10).map(|i| pattern(30_000 + i * 1000, i as u8)).collect();
    let t = receive(rx, blocks.len());
    for b in &blocks {
        tx.send(b, WAIT).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let written = vandal.join().unwrap();
    assert_eq!(t.join().unwrap().1, blocks);
    let st = tx.stats();
    assert!(written > 0 && st.ignored_acks > 0, "{written} junk writes: {st:?}");
}

#[test]
fn no_host_can_write_the_receivers_layout_or_status() {
    // A third host writes a status saying "block 1 done" and a bogus layout
    // into the receiver's header: refused (write-inhibited), read back
    // unchanged, counted by the receiver; the sender's block still arrives.
    let nodes = cluster(3, 103, clean());
    let params = BlockParams { packet: 1024, unit: 4, max_block: 64 << 10 };
    let rx = BlockReceiver::export(&nodes[0], params).unwrap();
    let seg = vipc_rmem_layers::import_retrying(&nodes[2], rx.name(), Access::READ_WRITE, WAIT).unwrap();
    let anon = nodes[2].anonymous_segment(64).unwrap();
    let header = |anon: &vipc::AnonSegment| {
        seg.read(0, 40, (anon, 0), false).unwrap().wait(WAIT).unwrap();
        anon.to_vec(0, 40).unwrap()
    };
    let before = header(&anon);
    let mut forged = [0u8; 24];
    forged[..4].copy_from_slice(&1u32.to_le_bytes()); // done: block 1
    seg.write(16, &forged, true).unwrap();
    seg.write(0, &[0xff; 16], false).unwrap();
    // A read after the writes sees them if they were applied (one sender, in order).
    assert_eq!(header(&anon), before, "a remote write changed the receiver's header");
    let mut tx = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
    let block = pattern(20_000, 3);
    let t = receive(rx, 1);
    tx.send(&block, WAIT).unwrap();
    let (rx, got) = t.join().unwrap();
    assert_eq!(got, vec![block]);
    assert_eq!(rx.refused_writes(), 2);
}

/// A sender that connects while its predecessor's last block completes has
/// its block delivered, not merely acknowledged: it numbered its first
/// block from the receiver's status before registering, the predecessor's
/// block took that number, and the receiver's "done" made the new sender's
/// `send` return Ok for a block the receiver ignored as old (2 of 8 rounds).
#[test]
fn a_sender_connecting_as_the_last_block_completes_gets_its_own_delivered() {
    let params = BlockParams { packet: 32 << 10, unit: 16, max_block: 8 << 20 };
    for round in 0..16u16 {
        let nodes = cluster(3, 471 + round * 3, clean());
        let mut rx = BlockReceiver::export(&nodes[0], params).unwrap();
        let mut a = BlockSender::connect(&nodes[1], rx.name(), WAIT).unwrap();
        a.set_window(16);
        assert!(matches!(a.send(&pattern(8 << 20, 1), Duration::from_millis(300)), Err(Error::Timeout)));
        let name = rx.name();
        let got_b = |r: &vipc_rmem_layers::Result<Vec<u8>>| matches!(r, Ok(d) if *d == pattern(1000, 2));
        // The first block received is A's or B's; if A's, B's must come next.
        let receiver = std::thread::spawn(move || {
            let first = rx.recv(WAIT);
            if got_b(&first) {
                true
            } else {
                got_b(&rx.recv(Duration::from_secs(2)))
            }
        });
        // B reads the receiver's header at varied moments around A's block completing.
        std::thread::sleep(Duration::from_micros(500 * u64::from(round % 8)));
        let mut b = BlockSender::connect(&nodes[2], name, WAIT).unwrap();
        let sent = b.send(&pattern(1000, 2), WAIT);
        let delivered = receiver.join().unwrap();
        assert!(sent.is_ok(), "round {round}: B's send: {sent:?}");
        assert!(delivered, "round {round}: B's send returned Ok, the receiver never got it");
        drop(a);
    }
}
