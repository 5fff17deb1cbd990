//! Remote memory over real UDP on loopback (003, PROTOCOL §4.15): the
//! operations between nodes in one process, refusals, notification, and the
//! two properties that matter most — remote operations complete while every
//! thread of the exporting program is blocked, and CAS-II under contention
//! counts exactly.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use vipc::{Access, Error, MemOp, MemOutcome, Notify, ProtectionGroup, ProtocolError, Refusal, SegmentOptions};

const WAIT: Duration = Duration::from_secs(5);

fn rw() -> SegmentOptions {
    SegmentOptions { access: Access::READ_WRITE, ..Default::default() }
}

/// A segment of `size` bytes exported by `node`, filled with a pattern (returned).
fn filled(node: &vipc::Node, size: usize, salt: u8) -> (vipc::ExportedSegment, Vec<u8>) {
    let seg = node.export_segment(size, rw()).unwrap();
    let data = pattern(size, salt);
    seg.write(0, &data).unwrap();
    (seg, data)
}

/// `reader`'s handle of a segment whose node, `owner`, then shuts down:
/// reads of it are never answered.
fn import_from_gone_node(reader: &vipc::Node, owner: &vipc::Node) -> vipc::RemoteSegment {
    let seg = owner.export_segment(128 << 10, rw()).unwrap();
    let handle = reader.import_segment(seg.name(), Access::READ, WAIT).unwrap();
    drop(seg);
    owner.shutdown();
    handle
}

fn refusal(e: &Error) -> Option<Refusal> {
    match e.protocol() {
        Some(ProtocolError::Refused(r)) => Some(*r),
        _ => None,
    }
}

#[test]
fn two_nodes_write_read_cas_and_writev() {
    let nodes = cluster(2);
    let seg = nodes[0].export_segment(512 << 10, rw()).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    assert_eq!((remote.host(), remote.size(), remote.access()), (nodes[0].host_id(), 512 << 10, Access::READ_WRITE));

    // 100 KiB in one write (2 packets of up to 65,419 bytes on loopback), read back in one read.
    let data = pattern(100 << 10, 3);
    remote.write(1000, &data, false).unwrap();
    let local = nodes[1].anonymous_segment(128 << 10).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let op = remote.read(1000, data.len() as u32, (&local, 7), false).unwrap();
        assert_eq!(op.wait(WAIT).unwrap(), MemOutcome::Read);
        if local.to_vec(7, data.len()).unwrap() == data {
            break;
        }
        assert!(Instant::now() < deadline, "the write never showed up");
    }
    assert_eq!(seg.to_vec(1000, data.len()).unwrap(), data);

    // Strided: one byte of each 1 KiB row, 200 rows.
    let column: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    remote.writev(150_000, 1024, 1, &column, false).unwrap();
    let op = remote.read(150_000, 1, (&local, 0), false).unwrap(); // a round trip after the writev
    op.wait(WAIT).unwrap();
    for i in 0..200u32 {
        assert_eq!(seg.to_vec(150_000 + i * 1024, 2).unwrap(), [i as u8, 0]);
    }

    // CAS-II: poll until done.
    let mut op = remote.cas(64, 0, 5, 0x0201, (&local, 0)).unwrap();
    let answer = loop {
        if let Some(MemOutcome::Cas(a)) = op.poll().unwrap() {
            break a;
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    assert_eq!((answer.value, answer.nonce), (0, 0x0201));
    assert_eq!(local.to_vec(0, 8).unwrap(), answer.to_bytes());
    let cell = seg.cas_cell(64).unwrap();
    assert_eq!((cell.value, cell.nonce), (5, 0x0201));
    let s = nodes[0].stats();
    assert!(s.rmem_writes_applied >= 3 && s.rmem_reads_served >= 2 && s.rmem_cas_served == 1);
    assert_eq!(nodes[1].stats().rmem_ops_pending, 0);
}

#[test]
fn refusals_reach_the_requester_as_typed_errors() {
    let nodes = cluster(3);
    let only3 = SegmentOptions { protection: ProtectionGroup::Hosts(vec![3]), ..rw() };
    let seg = nodes[0].export_segment(64, only3).unwrap();
    let e = nodes[1].import_segment(seg.name(), Access::READ, WAIT).unwrap_err();
    assert_eq!(refusal(&e), Some(Refusal::NotInGroup));
    let remote = nodes[2].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    let local = nodes[2].anonymous_segment(64).unwrap();
    assert!(matches!(remote.read(60, 8, (&local, 0), false), Err(Error::Protocol(ProtocolError::OutOfSegment { .. }))));
    assert!(matches!(remote.cas(4, 0, 1, 1, (&local, 0)), Err(e) if refusal(&e) == Some(Refusal::Misaligned)));

    // Unexported: the handle is stale, the owner refuses and says so.

    seg.unexport();
    let op = remote.read(0, 8, (&local, 0), false).unwrap();
    assert_eq!(refusal(&op.wait(WAIT).unwrap_err()), Some(Refusal::UnknownSegment));
    assert_eq!(nodes[0].stats().rmem_refused[Refusal::UnknownSegment.index()], 1);
}

/// A read or CAS into a segment of another node: refused. Segment ids are
/// per node, so the reading node would have put the answer in whatever it
/// holds under that id (here a segment it exports) and called it done.
#[test]
fn a_destination_of_another_node_is_refused() {
    let nodes = cluster(2);
    let (seg, _) = filled(&nodes[0], 64, 1);
    let victim = nodes[1].export_segment(64, rw()).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    let elsewhere = nodes[0].anonymous_segment(64).unwrap();
    assert!(matches!(remote.read(0, 8, (&elsewhere, 0), false), Err(Error::OtherNode(_))));
    assert!(matches!(remote.cas(0, 0, 1, 1, (&elsewhere, 0)), Err(Error::OtherNode(_))));
    assert_eq!(victim.to_vec(0, 64).unwrap(), vec![0u8; 64], "nothing landed anywhere");
}

#[test]
fn unknown_names_fail_after_rmem_timeout() {
    let nodes = cluster_with(2, 1, |_, c| c.engine.rmem_timeout = Duration::from_millis(100));
    let _seg = nodes[0].export_segment(64, rw()).unwrap();
    let start = Instant::now();
    let e = nodes[1].import_segment([7; 16], Access::READ, WAIT).unwrap_err();
    assert_eq!(refusal(&e), Some(Refusal::UnknownName));
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(nodes[0].stats().rmem_refused[Refusal::UnknownName.index()] >= 1);
    let anon = nodes[1].anonymous_segment(8).unwrap();
    assert_eq!(anon.size(), 8);
    assert!(matches!(nodes[1].anonymous_segment(0), Err(Error::Protocol(ProtocolError::TooLarge { .. }))));
}

#[test]
fn notifications_wake_the_exporter_only_when_asked() {
    let nodes = cluster(2);
    let seg = nodes[0].export_segment(64, SegmentOptions { notify: Notify::Conditional, ..rw() }).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    remote.write(0, &[1; 8], false).unwrap();
    assert!(!seg.wait_record(Duration::from_millis(100)).unwrap(), "no notify bit: no notification");
    assert_eq!(seg.to_vec(0, 8).unwrap(), [1; 8], "but the data are there");
    remote.write(8, &[2; 8], true).unwrap();
    assert!(seg.wait_record(WAIT).unwrap());
    let r = seg.poll_control().unwrap().unwrap();
    assert_eq!((r.op, r.from, r.offset, r.len), (MemOp::Write, nodes[1].host_id(), 8, 8));
    // Write-inhibited: queued with its data on the data channel until the exporter applies it.
    seg.set_protection(16, 8, true).unwrap();
    remote.write(16, &[3; 8], false).unwrap();
    assert!(seg.wait_record(WAIT).unwrap());
    let d = seg.poll_data().unwrap().unwrap();
    assert_eq!(seg.to_vec(16, 8).unwrap(), [0; 8]);
    seg.apply(&d).unwrap();
    assert_eq!(seg.to_vec(16, 8).unwrap(), [3; 8]);
    assert!(seg.poll_control().unwrap().is_none() && seg.poll_data().unwrap().is_none());
    // A record (made by hand) reaching past the end is refused whole: its first piece was written.
    let past = vipc::DataRecord { from: 2, offset: 48, stride: 16, elem: 8, data: vec![7; 16] };
    let e = seg.apply(&past).unwrap_err();
    assert!(matches!(e, Error::Protocol(ProtocolError::OutOfSegment { offset: 64, len: 8, size: 64 })), "{e}");
    assert_eq!(seg.to_vec(48, 8).unwrap(), [0; 8], "nothing written");
}

/// A record wakes the waiters of its own segment, all of them, and no
/// other: a waiter on another segment sleeps on until its timeout.
#[test]
fn a_record_wakes_the_waiters_of_its_own_segment() {
    let nodes = cluster(2);
    let opts = SegmentOptions { notify: Notify::Always, ..rw() };
    let (a, b) = (nodes[0].export_segment(64, opts.clone()).unwrap(), nodes[0].export_segment(64, opts).unwrap());
    let remote_a = nodes[1].import_segment(a.name(), Access::READ_WRITE, WAIT).unwrap();
    let remote_b = nodes[1].import_segment(b.name(), Access::READ_WRITE, WAIT).unwrap();
    let quiet = Duration::from_millis(400);
    std::thread::scope(|s| {
        let on_a: Vec<_> = (0..2).map(|_| s.spawn(|| (a.wait_record(WAIT).unwrap(), Instant::now()))).collect();
        let on_b = s.spawn(|| {
            let start = Instant::now();
            (b.wait_record(quiet).unwrap(), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        let sent = Instant::now();
        remote_a.write(0, &[1; 8], false).unwrap();
        for w in on_a {
            let (got, at) = w.join().unwrap();
            assert!(got && at.duration_since(sent) < Duration::from_secs(2), "a waiter on A missed A's record");
        }
        let (got, waited) = on_b.join().unwrap();
        assert!(!got && waited >= quiet, "B's waiter returned {got} after {waited:?} though B has no record");
    });
    remote_b.write(0, &[2; 8], false).unwrap();
    assert!(b.wait_record(WAIT).unwrap());
    assert_eq!(b.poll_control().unwrap().map(|r| r.offset), Some(0));
}

/// The exporting program's only threads are blocked on a barrier the whole
/// time: the node's runtime alone applies thousands of remote writes, serves
/// reads (verified) and performs CAS-IIs.
#[test]
fn remote_operations_complete_while_every_owner_thread_is_blocked() {
    let nodes = cluster(2);
    let seg = nodes[0].export_segment(64 << 10, rw()).unwrap();
    let name = seg.name();
    let barrier = Arc::new(Barrier::new(3));
    let released = Arc::new(AtomicBool::new(false));
    // The owner: a thread holding the segment, and a V process, both blocked.
    let owner = {
        let (barrier, released) = (barrier.clone(), released.clone());
        std::thread::spawn(move || {
            barrier.wait();
            assert!(released.load(Ordering::SeqCst), "the owner ran only after the remote work was done");
            seg
        })
    };
    let (_, server) = nodes[0]
        .spawn({
            let (barrier, released) = (barrier.clone(), released.clone());
            move |_p| {
                barrier.wait();
                assert!(released.load(Ordering::SeqCst));
            }
        })
        .unwrap();

    let remote = nodes[1].import_segment(name, Access::READ_WRITE, WAIT).unwrap();
    let local = nodes[1].anonymous_segment(64 << 10).unwrap();
    let start = Instant::now();
    let (mut writes, mut reads, mut cas) = (0u64, 0u64, 0u64);
    for round in 0..40u32 {
        // 100 writes of 16 bytes, then one read of the whole region, verified.
        for i in 0..100u32 {
            let v = (round * 100 + i).to_be_bytes();
            let mut rec = [0u8; 16];
            for c in rec.chunks_mut(4) {
                c.copy_from_slice(&v);
            }
            remote.write(i * 16, &rec, false).unwrap();
            writes += 1;
        }
        let op = remote.read(0, 1600, (&local, 0), false).unwrap();
        op.wait(WAIT).unwrap();
        reads += 1;
        let got = local.to_vec(0, 1600).unwrap();
        for i in 0..100u32 {
            let v = (round * 100 + i).to_be_bytes();
            assert_eq!(&got[i as usize * 16..i as usize * 16 + 4], &v, "round {round} write {i}");
        }
        // 25 reads of single records and 25 CAS-IIs incrementing a counter.
        for i in 0..25u32 {
            let op = remote.read(i * 16 + 4, 4, (&local, 4096), false).unwrap();
            op.wait(WAIT).unwrap();
            reads += 1;
            assert_eq!(local.to_vec(4096, 4).unwrap(), (round * 100 + i).to_be_bytes());
            let n = round * 25 + i;
            let a = remote.cas(8192, n, n + 1, n + 1, (&local, 8)).unwrap().wait_cas(WAIT).unwrap();
            assert_eq!((a.value, a.nonce), (n, n + 1), "uncontended CAS-II succeeds");
            cas += 1;
        }
    }
    let elapsed = start.elapsed();
    let s = nodes[0].stats();
    assert_eq!((s.rmem_writes_applied, s.rmem_reads_served, s.rmem_cas_served), (writes, reads, cas));
    assert!(writes + reads + cas >= 6000);
    eprintln!(
        "{} writes, {} reads, {} CAS-IIs in {:?} with every owner thread blocked ({:.1} µs per read or CAS-II round trip)",
        writes,
        reads,
        cas,
        elapsed,
        elapsed.as_secs_f64() * 1e6 / (reads + cas) as f64
    );
    released.store(true, Ordering::SeqCst);
    barrier.wait();
    server.join().unwrap();
    let seg = owner.join().unwrap();
    assert_eq!(seg.cas_cell(8192).unwrap().value, cas as u32);
}

/// Several hosts (two threads each) and the owner itself increment one
/// counter with CAS-II, retrying with the same nonce; the total is exact.
#[test]
fn cas_contention_counts_exactly() {
    const PER_THREAD: u32 = 150;
    let nodes = cluster(4);
    let seg = nodes[0].export_segment(64, rw()).unwrap();
    let name = seg.name();
    let mut threads = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for t in 0..2u32 {
            let node = node.clone();
            let owner_handle = (n == 0).then(|| seg.handle());
            threads.push(std::thread::spawn(move || {
                let remote = match owner_handle {
                    Some(h) => h, // the owner's own CAS-IIs take the local path
                    None => node.import_segment(name, Access::READ_WRITE, WAIT).unwrap(),
                };
                let local = node.anonymous_segment(8).unwrap();
                let (mut expect, mut attempts) = (0u32, 0u32);
                for i in 0..PER_THREAD {
                    let nonce = (n as u32) << 24 | t << 20 | (i + 1);
                    loop {
                        attempts += 1;
                        match remote.cas(0, expect, expect + 1, nonce, (&local, 0)).unwrap().wait_cas(WAIT) {
                            Ok(a) if a.nonce == nonce => {
                                expect += 1; // our swap: the cell now holds expect + 1
                                break;
                            }
                            Ok(a) => expect = a.value,
                            Err(e) => panic!("CAS-II failed: {e}"), // retry with the same nonce would go here
                        }
                    }
                }
                attempts
            }));
        }
    }
    let attempts: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let total = PER_THREAD * 2 * nodes.len() as u32;
    assert_eq!(seg.cas_cell(0).unwrap().value, total);
    eprintln!("{total} increments by CAS-II from {} hosts took {attempts} attempts", nodes.len());
}

#[test]
fn a_segment_exported_at_a_chosen_name_is_imported_by_it_and_the_name_is_taken_once() {
    let nodes = cluster(2);
    let name = [0x42u8; 16];
    let seg = nodes[0].export_segment_named(name, 256, rw()).unwrap();
    assert_eq!(seg.name(), name);
    seg.write(8, b"known").unwrap();
    let again = nodes[0].export_segment_named(name, 256, rw());
    assert!(
        matches!(again, Err(Error::Protocol(ProtocolError::Unsupported(_)))),
        "a second export at the same name must fail: {:?}",
        again.err()
    );
    let remote = nodes[1].import_segment(name, Access::READ, WAIT).unwrap();
    let local = nodes[1].anonymous_segment(16).unwrap();
    remote.read(8, 5, (&local, 0), false).unwrap().wait(WAIT).unwrap();
    assert_eq!(local.to_vec(0, 5).unwrap(), b"known");
    // Unexported, the name is free again.
    drop(seg);
    nodes[0].export_segment_named(name, 64, rw()).unwrap();
}

/// A writer faster than the network waits once more than the send-queue
/// limit is queued unsent, instead of growing the queue without bound; small
/// writes never wait.
#[test]
fn a_writer_faster_than_the_network_is_throttled() {
    let nodes = cluster(2);
    let seg = nodes[0].export_segment(1 << 20, rw()).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    for i in 0..1000u32 {
        remote.write(0, &i.to_le_bytes(), false).unwrap();
    }
    assert_eq!(nodes[1].stats().writes_throttled, 0, "4 KB in all never reaches the limit");
    // 96 MiB in writes queued for the sender thread (smaller than
    // DIRECT_WRITE), issued back to back: encoding runs faster than sending.
    let data = pattern(vipc::DIRECT_WRITE / 2, 5);
    for _ in 0..(96 << 20) / data.len() {
        remote.write(0, &data, false).unwrap();
    }
    assert!(nodes[1].stats().writes_throttled > 0, "{:?}", nodes[1].stats());
    // The node still works: a read after the writes comes back. Reads are
    // not retried underneath (003), and its request or answer may be lost
    // in the flood the owner is still draining (CI once saw that): the
    // caller retries, as a user of reads does.
    let local = nodes[1].anonymous_segment(8).unwrap();
    let mut tries = 0;
    while let Err(e) = remote.read(0, 8, (&local, 0), false).unwrap().wait(WAIT) {
        tries += 1;
        assert!(tries < 5 && matches!(e.protocol(), Some(ProtocolError::Timeout(_))), "{e}");
    }
}

/// A large write, sent by the writer straight from its buffer, goes after
/// the small writes queued before it: never overtaken by them, the last
/// write wins every time.
#[test]
fn a_write_sent_from_the_buffer_follows_the_queued_ones() {
    let nodes = cluster(2);
    let seg = nodes[0].export_segment(1 << 20, rw()).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    let local = nodes[1].anonymous_segment(8).unwrap();
    let before = nodes[1].stats().sent(vipc::PacketType::MemWrite);
    for round in 0..100u8 {
        for _ in 0..8 {
            remote.write(0, &[round ^ 0xff; 8], false).unwrap(); // queued for the sender thread
        }
        remote.write(0, &vec![round; vipc::DIRECT_WRITE], false).unwrap(); // sent by this thread
        remote.read(0, 8, (&local, 0), false).unwrap().wait(WAIT).unwrap();
        assert_eq!(local.to_vec(0, 8).unwrap(), [round; 8], "round {round}: a queued write came after");
    }
    assert_eq!(nodes[1].stats().sent(vipc::PacketType::MemWrite) - before, 100 * 10, "one datagram each, 64 KiB: two");
}

/// Large read answers leave the owner straight from its segment and land
/// straight in the reader's anonymous segment (their header in the bytes
/// just before, which are put back): the data arrive whole at any
/// destination offset, including 0, and the bytes around the destination
/// keep what earlier reads put there.
#[test]
fn large_answers_go_from_segment_to_segment_without_copies() {
    let nodes = cluster(2);
    let (seg, data) = filled(&nodes[0], 256 << 10, 9);
    let remote = nodes[1].import_segment(seg.name(), Access::READ, WAIT).unwrap();
    let local = nodes[1].anonymous_segment(200 << 10).unwrap();
    let read = |at: u32, len: u32, into: u32| remote.read(at, len, (&local, into), false).unwrap().wait(WAIT).unwrap();
    // A small answer first, just before where the large one goes: the
    // large one's header lands on it while receiving.
    read(5, 100, 1000);
    for (at, len, into) in [(0u32, 65_536u32, 1100u32), (777, 100_000, 70_000), (64, 20_000, 0), (1, 30_000, 174_000)] {
        read(at, len, into);
        let got = local.to_vec(into, len as usize).unwrap();
        assert!(got == data[at as usize..(at + len) as usize], "read {len} at {at} into {into} arrived wrong");
        if into == 1100 {
            assert_eq!(local.to_vec(1000, 100).unwrap(), data[5..105], "bytes before a destination were not put back");
        }
    }
    // Neither path is certain for a given answer (the one that arrives while
    // the background thread receives with nothing lent is copied; one that
    // finds another thread sending is queued), but in 30 more some take them.
    for _ in 0..30 {
        read(0, 65_536, 0);
    }
    assert!(local.to_vec(0, 65_536).unwrap() == data[..65_536]);
    let (owner, reader) = (nodes[0].stats(), nodes[1].stats());
    assert!(owner.rmem_answers_from_segment > 0, "{owner:?}");
    assert!(reader.rmem_answers_in_place > 0, "{reader:?}");
}

/// The runtime guesses which answer comes next (the oldest pending read);
/// a datagram that is another answer lands in that read's missing bytes
/// and is copied where it belongs — from there, or from the receive buffer
/// when it is longer than the guess — and the bytes under the guessed
/// header are put back. Here the guessed read waits on a node that is gone
/// (every read received in place, the 10-byte guess included).
#[test]
fn an_answer_other_than_the_expected_one_lands_where_it_belongs() {
    let nodes = cluster_with(3, 1, |_, c| c.engine.rmem_lend_min = 0);
    let (live, data) = filled(&nodes[0], 128 << 10, 4);
    let reader = &nodes[1];
    let from_live = reader.import_segment(live.name(), Access::READ, WAIT).unwrap();
    let from_dead = import_from_gone_node(reader, &nodes[2]);

    let guessed = reader.anonymous_segment(128 << 10).unwrap();
    let other = reader.anonymous_segment(128 << 10).unwrap();
    // What the guessed segment holds before the read that never finishes.
    from_live.read(0, 300, (&guessed, 0), false).unwrap().wait(WAIT).unwrap();
    for (guess_len, len) in [(65_536u32, 1_000u32), (10, 40_000), (20_000, 65_000)] {
        let pending = from_dead.read(0, guess_len, (&guessed, 300), false).unwrap();
        from_live.read(50, len, (&other, 3), false).unwrap().wait(WAIT).unwrap();
        assert!(other.to_vec(3, len as usize).unwrap() == data[50..50 + len as usize], "{len} bytes arrived wrong");
        assert_eq!(guessed.to_vec(0, 300).unwrap(), data[..300], "the bytes under a guessed header changed");
        drop(pending);
    }
}

/// Answers that are not where the runtime expected the next one are
/// copied where they belong: out of order or twice (the owner's datagrams
/// are reordered and duplicated), copied within the lent memory; longer
/// than the reader's own packets (node 3 sends at most 20,000 bytes and
/// guesses so), joined in the receive buffer and copied from there.
#[test]
fn answers_other_than_the_expected_ones_land_where_they_belong() {
    let faults = vipc::FaultConfig { loss: 0.0, duplicate: 0.3, reorder: 0.3, seed: 7 };
    let nodes = cluster_with(3, 1, |k, c| match k {
        0 => c.faults = faults.clone(),
        2 => c.engine.loopback_packet = Some(20_000),
        _ => {}
    });
    let (seg, data) = filled(&nodes[0], 512 << 10, 6);
    for reader in &nodes[1..] {
        let remote = reader.import_segment(seg.name(), Access::READ, WAIT).unwrap();
        let local = reader.anonymous_segment(512 << 10).unwrap();
        for i in 0..40usize {
            let (at, len, into) = (i * 101, 150_000 + i * 997, i * 13 % 1000);
            remote.read(at as u32, len as u32, (&local, into as u32), false).unwrap().wait(WAIT).unwrap();
            let got = local.to_vec(into as u32, len).unwrap();
            assert!(
                got == data[at..at + len],
                "host {}, read {i}: {len} bytes at {at} arrived wrong",
                reader.host_id()
            );
        }
    }
}

/// Answers in datagrams of an Ethernet frame's size (`max_packet`, as off
/// loopback) arrive in runs (UDP GRO) into the lent destination, split by
/// their headers: every byte where it belongs.
#[test]
fn answers_in_ethernet_sized_datagrams_arrive_in_runs() {
    let nodes = cluster_with(2, 1, |_, c| c.engine.loopback_packet = None);
    let (seg, data) = filled(&nodes[0], 1 << 20, 8);
    let reader = &nodes[1];
    let remote = reader.import_segment(seg.name(), Access::READ, WAIT).unwrap();
    let local = reader.anonymous_segment(1 << 20).unwrap();
    for (at, len) in [(0usize, 1usize << 20), (1000, 300_000), (77, 65_000)] {
        remote.read(at as u32, len as u32, (&local, 0), false).unwrap().wait(WAIT).unwrap();
        assert!(local.to_vec(0, len).unwrap() == data[at..at + len], "{len} bytes from {at}");
    }
    let s = reader.stats();
    assert!(s.runs_received > 0 && s.rmem_answers_in_place > 0, "{s:?}");
    assert!(nodes[0].stats().runs_sent > 0);
}

/// Reading a segment whose memory is lent to a receive that would wait
/// long (its answer never comes, and no other datagram arrives) ends that
/// receive instead of waiting for it (up to 100 ms each time).
#[test]
fn reading_a_segment_lent_to_a_receive_does_not_wait_for_it() {
    let nodes = cluster_with(3, 1, |_, c| {
        c.engine.alive_period = None;
        c.engine.rmem_timeout = Duration::from_secs(10);
    });
    let reader = &nodes[1];
    let from_dead = import_from_gone_node(reader, &nodes[2]);
    let local = reader.anonymous_segment(64 << 10).unwrap();
    let pending = from_dead.read(0, 32 << 10, (&local, 0), false).unwrap();
    let mut waited = Duration::ZERO;
    for _ in 0..5 {
        // Long enough for the background thread to be receiving with the memory lent again.
        std::thread::sleep(Duration::from_millis(250));
        let start = Instant::now();
        assert_eq!(local.to_vec(40 << 10, 16).unwrap(), [0; 16]);
        waited += start.elapsed();
    }
    // A read that waited for the receive to end would take its whole poll
    // (RECV_POLL, 100 ms): five of them half a second.
    assert!(waited < Duration::from_millis(250), "5 reads of the segment took {waited:?}");
    drop(pending);
}

/// Threads reading concurrently into segments of their own (whichever
/// thread holds the socket receives into whichever segment is lent), while
/// another thread keeps reading those segments locally: every read arrives
/// whole, and nobody waits long.
#[test]
fn concurrent_readers_and_local_reads_of_their_segments() {
    let nodes = cluster(2);
    let (seg, data) = filled(&nodes[0], 1 << 20, 8);
    let data = Arc::new(data);
    let reader = nodes[1].clone();
    let locals: Vec<_> = (0..4).map(|_| Arc::new(reader.anonymous_segment(256 << 10).unwrap())).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let peeker = {
        let (locals, stop) = (locals.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut peeks = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for l in &locals {
                    l.to_vec(0, 64).unwrap();
                    peeks += 1;
                }
            }
            peeks
        })
    };
    let threads: Vec<_> = locals
        .iter()
        .enumerate()
        .map(|(t, local)| {
            let (node, local, data, name) = (reader.clone(), local.clone(), data.clone(), seg.name());
            std::thread::spawn(move || {
                let remote = node.import_segment(name, Access::READ, WAIT).unwrap();
                for i in 0..100usize {
                    let len = 1 + (i * 7919 + t * 104_729) % 200_000;
                    let at = (i * 4_099 + t * 65_537) % ((1 << 20) - len);
                    let into = (i * 31) % (256 * 1024 - len);
                    remote.read(at as u32, len as u32, (&local, into as u32), false).unwrap().wait(WAIT).unwrap();
                    assert!(local.to_vec(into as u32, len).unwrap() == data[at..at + len], "thread {t}, read {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(peeker.join().unwrap() > 0);
}

/// A node whose own thread has just stopped a tight loop of remote reads
/// (its background reader backs off while processes keep taking the token)
/// still has its socket read, and serves a peer's read, within a few
/// milliseconds: 2.4–2.5 ms here; at most GRACE plus the longest back-off.
#[test]
fn a_node_serves_peers_at_once_after_its_own_tight_loop_stops() {
    let nodes = cluster(2);
    let (far, _) = filled(&nodes[1], 4096, 1);
    let (near, near_data) = filled(&nodes[0], 4096, 2);
    let from_0 = nodes[0].import_segment(far.name(), Access::READ, WAIT).unwrap();
    let from_1 = nodes[1].import_segment(near.name(), Access::READ, WAIT).unwrap();
    let (into_0, into_1) = (nodes[0].anonymous_segment(4096).unwrap(), nodes[1].anonymous_segment(4096).unwrap());
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(60) {
            from_0.read(0, 8, (&into_0, 0), false).unwrap().wait(WAIT).unwrap();
        }
        let t = Instant::now();
        from_1.read(0, 64, (&into_1, 0), false).unwrap().wait(WAIT).unwrap();
        slowest = slowest.max(t.elapsed());
        assert_eq!(into_1.to_vec(0, 64).unwrap(), near_data[..64]);
    }
    // The bound has room for a loaded machine; a reader left asleep would take T_r (20 ms) and more.
    assert!(slowest < Duration::from_millis(200), "slowest {slowest:?}");
}

/// A host that knows a segment's name, on a node without a key, could read
/// 128,000 bytes (or 4 GiB) with one 72-byte request whose source address
/// names someone else. The node answers a large read only to an address
/// that proved itself: here, a bare UDP socket gets one 72-byte MemNack
/// with its token, then nothing; with the token, the whole read (two
/// datagrams of up to 65,419 data bytes, within a socket's default
/// receive buffer).
#[test]
fn a_large_read_is_answered_only_to_an_address_that_proved_itself() {
    use vipc_wire::rmem::{Descriptor, ImportFields, ImportReplyFields, NackFields, ReadFields};
    use vipc_wire::{Header, PacketType, Pid};
    let nodes = cluster(1);
    let (seg, _) = filled(&nodes[0], 1 << 20, 3);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let to = nodes[0].local_addr();
    let request = |ptype, seq, fill: &dyn Fn(&mut Header)| {
        let mut h = Header::new(ptype);
        (h.incarnation, h.seq, h.src, h.dst) = (5, seq, Pid::new(900, 0), Pid::new(nodes[0].host_id(), 0));
        fill(&mut h);
        sock.send_to(&vipc_wire::to_vec(&h, &[], None), to).unwrap();
    };
    let mut buf = vec![0u8; 65_536];
    let mut next =
        || sock.recv(&mut buf).ok().map(|n| vipc_wire::parse(&buf[..n], None).map(|p| (p.header, p.data.len())));

    request(PacketType::MemImport, 1, &|h| ImportFields { name: seg.name(), access: 1 }.put(h));
    let (h, _) = next().expect("an import reply").unwrap();
    let desc = ImportReplyFields::get(&h).desc;
    let read = |seq, token| {
        let dest = Descriptor { index: 0, generation: 1 };
        request(PacketType::MemRead, seq, &|h| {
            ReadFields { source: desc, offset: 0, len: 128_000, dest, dest_offset: 0, token }.put(h)
        });
    };

    read(2, 0);
    let (h, len) = next().expect("a MemNack").unwrap();
    let nack = NackFields::get(&h);
    assert_eq!((h.ptype, len, nack.reason), (PacketType::MemNack, 0, Refusal::Unvalidated as u8));
    assert!(next().is_none(), "nothing but the MemNack");

    read(3, nack.token);
    let mut got = 0;
    while let Some(Ok((h, len))) = next() {
        assert_eq!((h.ptype, h.seq), (PacketType::MemWrite, 3));
        got += len;
    }
    assert_eq!(got, 128_000, "the whole read, to the address that proved itself");
    assert_eq!(nodes[0].stats().rmem_refused[Refusal::Unvalidated.index()], 1);
}

/// A writer streaming remote writes keeps the send queue full; whichever
/// thread happens to be sending it (the timer thread, the socket's reader,
/// a process finishing a call, a shutdown) must not be kept at it for as
/// long as the writer writes: timers, other processes' calls and shutdown
/// go on meanwhile.
#[test]
fn a_streaming_writer_does_not_hold_up_the_rest_of_the_node() {
    let nodes = std::sync::Arc::new(cluster(2));
    let seg = nodes[0].export_segment(1 << 20, rw()).unwrap();
    let remote = nodes[1].import_segment(seg.name(), Access::READ_WRITE, WAIT).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let data = vec![7u8; 32 << 10];
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if remote.write((n % 32) as u32 * (32 << 10), &data, false).is_err() {
                    break; // the node stopped
                }
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let p = nodes[1].attach().unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..50 {
        let t = Instant::now();
        let r = vipc::within(Duration::from_millis(10), || p.receive(&mut [0u8; 32]));
        assert!(r.unwrap_err().is_deadline());
        worst = worst.max(t.elapsed());
    }
    // Calls that flush the queue as they end, many of them.
    let mut slowest = Duration::ZERO;
    for _ in 0..20_000 {
        let t = Instant::now();
        p.get_pid("nobody", vipc::Scope::Local).unwrap();
        slowest = slowest.max(t.elapsed());
    }
    let t = Instant::now();
    nodes[1].shutdown();
    let shutdown = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    assert!(writes > 100, "the writer wrote {writes} times");
    assert!(worst < Duration::from_millis(300), "a 10 ms receive took {worst:?} beside the writer");
    assert!(slowest < Duration::from_millis(200), "a local GetPid took {slowest:?} beside the writer");
    assert!(shutdown < Duration::from_millis(500), "shutdown took {shutdown:?}");
}
