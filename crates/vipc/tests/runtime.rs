//! The runtime's threading: leader/follower reading of the socket, wake-ups
//! of waiting processes, polling, and the zero-copy moves when another
//! thread reads the socket.

mod common;

use common::{cluster, cluster_with, pattern};
use std::time::{Duration, Instant};
use vipc::{AuthKey, Message, Pid, SegmentRef, SendOptions};

fn msg(b: u8) -> Message {
    let mut m = [0u8; 32];
    m[0] = b;
    m
}

/// Many processes of one node wait at once, past several retransmissions:
/// whichever thread reads the socket, every reply reaches its process (a
/// process leaving with the reader token free must hand it on).
#[test]
fn many_waiting_clients_of_one_node_all_get_their_replies() {
    let n = 100;
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, t) = a
        .spawn(move |p| {
            let mut froms = Vec::new();
            for _ in 0..n {
                let mut m = [0u8; 32];
                froms.push((p.receive(&mut m).unwrap(), m[0]));
            }
            std::thread::sleep(Duration::from_millis(300)); // > T_r: retransmissions, ReplyPending
            for (f, b) in froms {
                p.reply(&msg(b.wrapping_add(1)), f).unwrap();
            }
        })
        .unwrap();
    let threads: Vec<_> = (0..n as u8)
        .map(|i| {
            let p = b.attach().unwrap();
            std::thread::spawn(move || {
                let mut m = msg(i);
                p.send(&mut m, server).map(|_| m[0])
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        assert_eq!(t.join().unwrap().unwrap(), i as u8 + 1, "client {i} got its own reply");
    }
    t.join().unwrap();
}

/// Several client threads of one node exchange with one remote server at
/// once: each reply goes to the process that sent the request.
#[test]
fn concurrent_clients_each_get_their_own_replies() {
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, _t) = a
        .spawn(|p| loop {
            let mut m = [0u8; 32];
            let Ok(from) = p.receive(&mut m) else { return };
            m[1] = m[0] ^ 0x5a;
            let _ = p.reply(&m, from);
        })
        .unwrap();
    let threads: Vec<_> = (0..6u8)
        .map(|c| {
            let p = b.attach().unwrap();
            std::thread::spawn(move || {
                for i in 0..150u8 {
                    let mut m = msg(c.wrapping_mul(40).wrapping_add(i));
                    let sent = m[0];
                    p.send(&mut m, server).unwrap();
                    assert_eq!((m[0], m[1]), (sent, sent ^ 0x5a));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(b.stats().remote_exchanges, 6 * 150);
}

/// With `poll_spin`, local and remote exchanges and moves work as without.
#[test]
fn polling_nodes_exchange_and_move() {
    let nodes = cluster_with(2, 1, |_, c| c.poll_spin = Some(Duration::from_micros(100)));
    let (a, b) = (&nodes[0], &nodes[1]);
    let echo = vipc::services::spawn_echo(a, None).unwrap();
    let local = a.attach().unwrap();
    let remote = b.attach().unwrap();
    for i in 0..200u8 {
        let mut m = msg(i);
        local.send(&mut m, echo).unwrap();
        assert_eq!(m[0], i);
        let mut m = msg(i);
        remote.send(&mut m, echo).unwrap();
        assert_eq!(m[0], i);
    }
    let data = pattern(300_000, 3);
    let mut seg = data.clone();
    remote.send_with(&mut msg(1), echo, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
    assert!(seg == data, "echoed through MoveFrom and MoveTo");
}

/// With `poll_spin`, a call whose completion is there at once (a Receive
/// that finds a message queued, a local GetPid) returns at once: it spun
/// the whole `poll_spin` before taking it.
#[test]
fn a_polling_call_complete_at_once_does_not_spin() {
    let nodes = cluster_with(1, 1, |_, c| c.poll_spin = Some(Duration::from_millis(300)));
    let server = nodes[0].attach().unwrap();
    let to = server.pid();
    let client = nodes[0].attach().unwrap();
    let sender = std::thread::spawn(move || client.send(&mut msg(1), to).unwrap());
    std::thread::sleep(Duration::from_millis(50)); // the message is queued
    let mut m = [0u8; 32];
    let t = Instant::now();
    let from = server.receive(&mut m).unwrap();
    assert!(t.elapsed() < Duration::from_millis(100), "a queued message took {:?}", t.elapsed());
    server.reply(&m, from).unwrap();
    sender.join().unwrap();
    server.set_pid("polled", to, vipc::Scope::Local).unwrap();
    let t = Instant::now();
    assert_eq!(server.get_pid("polled", vipc::Scope::Local).unwrap(), Some(to));
    assert!(t.elapsed() < Duration::from_millis(100), "a local GetPid took {:?}", t.elapsed());
}

/// A process used from two threads: while one waits in Receive, the other
/// forwards a message it received to the process itself. The waiting thread
/// gets it (it slept on: the wake-up was skipped as if the forwarding
/// thread were the one to take it).
#[test]
fn a_forward_to_itself_from_another_thread_wakes_the_waiting_thread() {
    let nodes = cluster(1);
    let p = std::sync::Arc::new(nodes[0].attach().unwrap());
    let me = p.pid();
    let client = nodes[0].attach().unwrap();
    let sender = std::thread::spawn(move || {
        let mut m = msg(3);
        client.send(&mut m, me).unwrap();
        m[0]
    });
    // The first receive takes the client's message; then a thread waits in a
    // second receive while this one forwards the message to the process.
    let mut m = [0u8; 32];
    let from = p.receive(&mut m).unwrap();
    let (done, result) = std::sync::mpsc::channel();
    let q = p.clone();
    std::thread::spawn(move || {
        let mut m = [0u8; 32];
        let got = vipc::within(Duration::from_secs(2), || q.receive(&mut m));
        done.send((got, m[0])).unwrap();
    });
    std::thread::sleep(Duration::from_millis(100)); // asleep in its receive
    p.forward(&m, from, me).unwrap();
    // It slept on past its own deadline: bounded here.
    let (got, first) = result.recv_timeout(Duration::from_secs(5)).expect("the waiting thread never woke");
    assert_eq!((got.unwrap(), first), (from, 3), "the forwarded message reached the waiting thread");
    p.reply(&msg(4), from).unwrap();
    assert_eq!(sender.join().unwrap(), 4);
}

/// With a key, a MoveTo cannot send from the mover's buffer (the MAC needs
/// the data): it takes the copying path; both directions still work.
#[test]
fn keyed_nodes_move_both_ways() {
    let key = AuthKey::from_bytes([9; 32]);
    let nodes = cluster_with(2, 1, |_, c| c.key = Some(key.clone()));
    let (a, b) = (&nodes[0], &nodes[1]);
    let echo = vipc::services::spawn_echo(a, None).unwrap();
    let data = pattern(500_000, 11);
    let mut seg = data.clone();
    let c = b.attach().unwrap();
    c.send_with(&mut msg(1), echo, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
    assert!(seg == data);
    assert_eq!(a.stats().mac_failures + b.stats().mac_failures, 0);
}

/// A keyed MoveTo goes the copying way, but the mover still reads its
/// acknowledgements off the socket itself: left to the node's background
/// thread, which waits 2 ms (its grace) before it reads a socket nobody
/// reads, every keyed MoveTo took at least 2 ms (1 MiB: 2.1 ms against 0.3
/// unkeyed). A one-chunk MoveTo takes about 0.1 ms; the bound is half the grace.
#[test]
fn a_keyed_mover_reads_its_acknowledgements_itself() {
    let key = AuthKey::from_bytes([9; 32]);
    let nodes = cluster_with(2, 1, |_, c| c.key = Some(key.clone()));
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, _t) = a
        .spawn(|p| {
            let data = vec![0x5a; 60_000];
            loop {
                let mut m = [0u8; 32];
                let Ok(from) = p.receive(&mut m) else { return };
                p.move_to(from, 0, &data).unwrap();
                p.reply(&m, from).unwrap();
            }
        })
        .unwrap();
    let c = b.attach().unwrap();
    let mut seg = vec![0u8; 60_000];
    let mut times: Vec<Duration> = (0..31)
        .map(|_| {
            let t = std::time::Instant::now();
            c.send_with(&mut msg(1), server, Some(SegmentRef::Write(&mut seg)), SendOptions::default()).unwrap();
            t.elapsed()
        })
        .collect();
    assert!(seg.iter().all(|&b| b == 0x5a));
    times.sort();
    assert!(times[15] < Duration::from_millis(1), "median {:?}: the mover waited for the background thread", times[15]);
}

/// A mover whose node's socket is read by another process (the leader):
/// the leader queues the mover's chunks (to send, or to place in its
/// buffer) and wakes it, since only the mover's thread touches its buffer.
#[test]
fn moves_work_when_another_process_reads_the_socket() {
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    // A slow server on b keeps a process of a waiting (and reading a's socket).
    let (slow, _s) = b
        .spawn(|p| {
            let mut m = [0u8; 32];
            let from = p.receive(&mut m).unwrap();
            std::thread::sleep(Duration::from_millis(600));
            p.reply(&m, from).unwrap();
        })
        .unwrap();
    let (_q, waiting) = a
        .spawn(move |p| {
            let mut m = msg(7);
            p.send(&mut m, slow).map(|_| ())
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let size = 700_000;
    let (mover, t) = a
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let mut buf = vec![0u8; size];
            p.move_from(info.from, 0, &mut buf).unwrap();
            for x in buf.iter_mut() {
                *x = x.wrapping_add(1);
            }
            p.move_to(info.from, 0, &buf).unwrap();
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    let data = pattern(size, 5);
    let mut seg = data.clone();
    let c = b.attach().unwrap();
    c.send_with(&mut msg(1), mover, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
    t.join().unwrap();
    assert!(seg.iter().zip(&data).all(|(s, d)| *s == d.wrapping_add(1)), "read, changed and written back");
    waiting.join().unwrap().unwrap();
    let _: Pid = mover;
}

/// A MoveFrom is received in place (each chunk's datagram straight into the
/// mover's buffer) when the expected chunk comes; under loss, duplicates and
/// reordering other datagrams come instead — earlier chunks again, later
/// ones, acknowledgements — and must still land where they belong, with the
/// bytes the in-place reads borrow put back.
#[test]
fn move_from_in_place_under_loss_duplicates_and_reordering() {
    let nodes = cluster_with(2, 1, |i, c| {
        c.faults = vipc::FaultConfig { loss: 0.1, duplicate: 0.1, reorder: 0.1, seed: 40 + i as u64 };
        c.engine.timeout = Duration::from_secs(5);
    });
    let (server, t) = nodes[0]
        .spawn(|p| {
            let mut got = Vec::new();
            for n in [4 << 20, 3 * 65_000 + 17] {
                let mut m = [0u8; 32];
                let from = p.receive(&mut m).unwrap();
                let mut data = vec![0u8; n];
                p.move_from(from, 0, &mut data).unwrap();
                p.reply(&m, from).unwrap();
                got.push(data);
            }
            got
        })
        .unwrap();
    let c = nodes[1].attach().unwrap();
    let mut want = Vec::new();
    for (n, salt) in [(4 << 20, 3u8), (3 * 65_000 + 17, 9)] {
        // Read-write: not lent, so its chunks go through the fault injector.
        let mut seg = pattern(n, salt);
        c.send_with(&mut msg(1), server, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
        want.push(seg);
    }
    let got = t.join().unwrap();
    assert!(got == want, "the moved bytes differ");
    let (a, b) = (nodes[0].stats(), nodes[1].stats());
    assert!(b.retransmissions > 0 && a.duplicates > 0, "loss and duplicates were injected");
}
