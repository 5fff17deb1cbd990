//! Failures: nonexistent and destroyed processes, dead nodes, misuse,
//! shutdown, authentication, lossy networks, configuration errors.

mod common;

use common::{cluster, cluster_with, pattern, short_timers};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc::{AuthKey, Error, FaultConfig, Node, NodeConfig, PacketType, Pid, ProtocolError, SegmentRef, SendOptions};

fn is(e: &Error, f: impl Fn(&ProtocolError) -> bool) -> bool {
    matches!(e, Error::Protocol(p) if f(p))
}

#[test]
fn nonexistent_pids_fail_with_no_such_process() {
    let nodes = cluster(2);
    let c = nodes[1].attach().unwrap();
    let e = c.send(&mut [0; 32], Pid::new(nodes[1].host_id(), 777)).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::NoSuchProcess(_))), "{e}");
    let nacks = nodes[1].stats().received(PacketType::NAck);
    let e = c.send(&mut [0; 32], Pid::new(nodes[0].host_id(), 777)).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::NoSuchProcess(_))), "remote: nAck, {e}");
    assert_eq!(nodes[1].stats().received(PacketType::NAck), nacks + 1, "answered by an nAck");
    assert_eq!(nodes[1].stats().timeouts, 0, "not by a timeout");
    let e = c.send(&mut [0; 32], Pid::NONE).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::NullPid)), "{e}");
    let e = c.send(&mut [0; 32], c.pid()).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::SendToSelf)), "{e}");
}

#[test]
fn dead_node_times_out_within_tt() {
    let nodes = cluster_with(2, 1, |_, c| short_timers(c));
    let echo = vipc::services::spawn_echo(&nodes[0], None).unwrap();
    let c = nodes[1].attach().unwrap();
    c.send(&mut [0; 32], echo).unwrap();
    nodes[0].shutdown();
    let t = Instant::now();
    let e = c.send(&mut [0; 32], echo).unwrap_err();
    let took = t.elapsed();
    assert!(is(&e, |p| matches!(p, ProtocolError::Timeout(_))), "{e}");
    assert!(took >= Duration::from_millis(250), "{took:?}");
    assert!(took < Duration::from_millis(300 + 700), "T_t is 300 ms, took {took:?}");
    assert!(nodes[1].stats().timeouts >= 1);
}

#[test]
fn destroying_a_receiver_fails_its_waiting_senders() {
    let nodes = cluster(3);
    for (victim_node, sender_node) in [(0, 0), (0, 1)] {
        let victim = nodes[victim_node].attach().unwrap();
        let vpid = victim.pid();
        let (_, t) = nodes[sender_node]
            .spawn(move |p| {
                let r = p.send(&mut [0; 32], vpid);
                (r, Instant::now())
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let dropped = Instant::now();
        drop(victim);
        let (r, at) = t.join().unwrap();
        let e = r.unwrap_err();
        assert!(is(&e, |p| matches!(p, ProtocolError::NoSuchProcess(_) | ProtocolError::Destroyed(_))), "{e}");
        assert!(at.duration_since(dropped) < Duration::from_millis(500), "at once, not after T_t");
        let c = nodes[2].attach().unwrap();
        let e = c.send(&mut [0; 32], vpid).unwrap_err();
        assert!(is(&e, |p| matches!(p, ProtocolError::NoSuchProcess(_))), "{e}");
    }
}

#[test]
fn misuse_is_a_typed_error() {
    let nodes = cluster(2);
    let p = Arc::new(nodes[0].attach().unwrap());
    let other = nodes[0].attach().unwrap();
    let e = p.reply(&[0; 32], other.pid()).unwrap_err();
    assert!(is(&e, |x| matches!(x, ProtocolError::NotAwaitingReply(_))), "{e}");
    let third = nodes[0].attach().unwrap();
    let e = p.forward(&[0; 32], other.pid(), third.pid()).unwrap_err();
    assert!(is(&e, |x| matches!(x, ProtocolError::NotAwaitingReply(_))), "{e}");
    let mut b = [0u8; 4];
    let e = p.move_from(other.pid(), 0, &mut b).unwrap_err();
    assert!(is(&e, |x| matches!(x, ProtocolError::NotAwaitingReply(_))), "{e}");
    let e = p.set_pid("", other.pid(), vipc::Scope::Any).unwrap_err();
    assert!(is(&e, |x| matches!(x, ProtocolError::BadName)), "{e}");
    // Two threads in one process: the second blocking call is refused.
    let p2 = p.clone();
    let t = std::thread::spawn(move || p2.receive(&mut [0; 32]));
    std::thread::sleep(Duration::from_millis(50));
    let e = p.receive(&mut [0; 32]).unwrap_err();
    assert!(is(&e, |x| matches!(x, ProtocolError::Busy(_))), "{e}");
    // Shutting the node down unblocks the first receive.
    nodes[0].shutdown();
    assert!(matches!(t.join().unwrap(), Err(Error::NodeStopped)));
}

/// Two threads sending as one process for 3 s: every reply is the caller's
/// own, an overlapping call is refused Busy, and neither thread hangs. The
/// second call was taken in the moment between the first's completion and
/// its collection, and the two then shared one slot: one waited for ever
/// (past any `within`), or took the other's reply (runtime stress helper).
#[test]
fn two_threads_of_one_process_never_share_a_reply() {
    let nodes = cluster(2);
    let echo = vipc::services::spawn_echo(&nodes[1], None).unwrap();
    let local_echo = vipc::services::spawn_echo(&nodes[0], None).unwrap();
    let p = Arc::new(nodes[0].attach().unwrap());
    let until = Instant::now() + Duration::from_secs(3);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    for (t, to) in [echo, local_echo].into_iter().enumerate() {
        let (p, done) = (p.clone(), done_tx.clone());
        std::thread::spawn(move || {
            let mut replies = 0u64;
            while Instant::now() < until {
                let mut m = [t as u8; 32];
                m[1..9].copy_from_slice(&replies.to_le_bytes());
                let sent = m;
                match p.send(&mut m, to) {
                    Ok(_) => {
                        assert_eq!(m, sent, "thread {t} got another call's reply");
                        replies += 1;
                    }
                    Err(e) => assert!(is(&e, |x| matches!(x, ProtocolError::Busy(_))), "thread {t}: {e}"),
                }
            }
            let _ = done.send(replies);
        });
    }
    let mut replies = 0;
    for _ in 0..2 {
        // A thread that panicked drops its sender without sending: Err here too.
        replies += done_rx.recv_timeout(Duration::from_secs(30)).expect("a thread hung or failed");
    }
    assert!(replies > 0);
}

#[test]
fn shutdown_wakes_blocked_calls_with_node_stopped() {
    let nodes = cluster(1);
    let (_, t) = nodes[0].spawn(|p| p.receive(&mut [0; 32])).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let s = Instant::now();
    nodes[0].shutdown();
    let r = t.join().unwrap();
    assert!(matches!(r, Err(Error::NodeStopped)), "{r:?}");
    assert!(s.elapsed() < Duration::from_secs(1));
    assert!(matches!(nodes[0].attach(), Err(Error::NodeStopped)));
}

#[test]
fn a_node_with_the_wrong_key_cannot_make_a_keyed_node_do_anything() {
    let good = AuthKey::from_bytes([7; 32]);
    let bad = AuthKey::from_bytes([8; 32]);
    let nodes = cluster_with(3, 1, |i, c| {
        short_timers(c);
        c.key = match i {
            0 | 1 => Some(good.clone()),
            _ => Some(bad.clone()),
        };
    });
    let echo = vipc::services::spawn_echo(&nodes[0], Some("echo")).unwrap();
    // Same key: works.
    let friend = nodes[1].attach().unwrap();
    friend.send(&mut [1; 32], echo).unwrap();
    // Wrong key: nothing happens; the keyed node counts MAC failures.
    let before = nodes[0].stats();
    let intruder = nodes[2].attach().unwrap();
    let e = intruder.send(&mut [2; 32], echo).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::Timeout(_))), "{e}");
    assert_eq!(intruder.get_pid("echo", vipc::Scope::Remote).unwrap(), None);
    let after = nodes[0].stats();
    assert!(after.mac_failures > before.mac_failures, "{} -> {}", before.mac_failures, after.mac_failures);
    // (Host-id and I-Am-Here announcements of the good nodes may still arrive: look at the rest.)
    assert_eq!(after.ipc_received(), before.ipc_received(), "no packet from the intruder was accepted");
    // And an unkeyed node fares no better.
    let open = Node::start(NodeConfig::fixed(9, "127.0.0.1:0".parse().unwrap(), vec![nodes[0].local_addr()]));
    let open = open.unwrap();
    let mut cfg = open.attach().unwrap();
    let e = cfg.send(&mut [3; 32], echo).unwrap_err();
    assert!(is(&e, |p| matches!(p, ProtocolError::Timeout(_))), "{e}");
    cfg = friend;
    cfg.send(&mut [4; 32], echo).unwrap();
}

#[test]
fn two_hundred_exchanges_under_twenty_percent_loss() {
    let nodes = cluster_with(2, 1, |i, c| {
        c.faults = FaultConfig { loss: 0.2, duplicate: 0.05, reorder: 0.05, seed: 11 + i as u64 };
        c.engine.timeout = Duration::from_secs(3);
    });
    let echo = vipc::services::spawn_echo(&nodes[0], None).unwrap();
    let c = nodes[1].attach().unwrap();
    for i in 0..200u32 {
        let mut m = [0u8; 32];
        m[..4].copy_from_slice(&i.to_le_bytes());
        let sent = m;
        c.send(&mut m, echo).unwrap_or_else(|e| panic!("exchange {i}: {e}"));
        assert_eq!(m, sent);
    }
    // A bulk transfer under the same loss.
    let mut big = pattern(256 * 1024, 5);
    let want = big.clone();
    c.send_with(&mut [0; 32], echo, Some(SegmentRef::ReadWrite(&mut big)), SendOptions::default()).unwrap();
    assert_eq!(big, want);
    let s = nodes[1].stats();
    assert!(s.retransmissions > 0, "loss was injected");
    assert_eq!(s.remote_exchanges, 201);
}

#[test]
fn a_duplicate_fixed_host_id_is_reported_at_start() {
    let nodes = cluster(1);
    let mut cfg = NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![nodes[0].local_addr()]);
    cfg.conflict_grace = Duration::from_millis(200);
    match Node::start(cfg) {
        Err(Error::HostConflict { host, addr }) => {
            assert_eq!(host, 1);
            assert_eq!(addr, nodes[0].local_addr());
            assert_eq!(
                Error::HostConflict { host, addr }.to_string(),
                format!("logical host 0x0001 is already in use by {addr}")
            );
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(n) => panic!("started host {} despite the conflict", n.host_id()),
    }
}

#[test]
fn configuration_errors_are_clear() {
    let nodes = cluster(1);
    let taken = nodes[0].local_addr();
    let e = Node::start(NodeConfig::fixed(5, taken, vec![])).unwrap_err();
    assert!(matches!(&e, Error::Bind { addr, .. } if *addr == taken), "{e}");
    assert!(e.to_string().contains("in use"), "{e}");
    let e = Node::start(NodeConfig::fixed(0, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    let v6 = NodeConfig { listen: "[::1]:0".parse().unwrap(), ..NodeConfig::default() };
    let e = Node::start(v6).unwrap_err();
    assert!(matches!(e, Error::Config(_)), "{e}");
    // Times that would never end, end at once, overflow the clock, or
    // time a slow server's Send out before its first retransmission.
    let base = || NodeConfig::fixed(6, "127.0.0.1:0".parse().unwrap(), vec![]);
    let mut bad = Vec::new();
    for (what, tweak) in [
        ("timeout", (|c: &mut NodeConfig| c.engine.timeout = Duration::MAX) as fn(&mut NodeConfig)),
        ("retransmit", |c| c.engine.retransmit = Duration::ZERO),
        ("longer than retransmit", |c| c.engine.timeout = c.engine.retransmit),
        ("alive_period", |c| c.engine.alive_period = Some(Duration::ZERO)),
        ("conflict_grace", |c| c.conflict_grace = Duration::MAX),
        ("poll_spin", |c| c.poll_spin = Some(Duration::MAX)),
    ] {
        let mut c = base();
        tweak(&mut c);
        match Node::start(c) {
            Err(Error::Config(m)) if m.contains(what) => {}
            other => bad.push(format!("{what}: {other:?}")),
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
fn a_wait_of_duration_max_is_no_limit_not_a_panic() {
    let nodes = cluster(1);
    let p = nodes[0].attach().unwrap();
    let opts = vipc::SegmentOptions { access: vipc::Access::READ_WRITE, ..Default::default() };
    let seg = nodes[0].export_segment(4096, opts).unwrap();
    // Nothing arrives: the caller's `within` bounds it, and the inner MAX does not overflow.
    let t = std::time::Instant::now();
    let r = vipc::within(Duration::from_millis(30), || seg.wait_record(Duration::MAX));
    assert!(r.as_ref().is_err_and(|e| e.is_deadline()), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(vipc::locate::locate(&p, "nobody-here", Duration::MAX).unwrap().is_none());
}

#[test]
fn reading_past_a_local_segment_is_an_error_before_anything_is_allocated() {
    let nodes = cluster(1);
    let opts = vipc::SegmentOptions { access: vipc::Access::READ_WRITE, ..Default::default() };
    let seg = nodes[0].export_segment(4096, opts).unwrap();
    for (offset, len) in [(0, usize::MAX), (4000, 97), (u32::MAX, 1)] {
        let e = seg.to_vec(offset, len).unwrap_err();
        assert!(matches!(e, Error::Protocol(ProtocolError::OutOfSegment { .. })), "{offset}+{len}: {e}");
    }
    assert_eq!(seg.to_vec(4000, 96).unwrap().len(), 96);
}

/// A service started under a name that cannot be registered: BadName, and
/// no process is left running unregistered.
#[test]
fn a_service_with_a_bad_name_is_refused_before_it_starts() {
    let nodes = cluster(1);
    let before = nodes[0].stats().processes;
    for name in ["", "a name far longer than the thirty-two bytes a name may have"] {
        let e = vipc::services::spawn_echo(&nodes[0], Some(name)).unwrap_err();
        assert!(is(&e, |p| matches!(p, ProtocolError::BadName)), "{name:?}: {e}");
    }
    assert_eq!(nodes[0].stats().processes, before, "no process left behind");
}

/// Datagrams from the node's own address — its wake-ups of the background
/// thread blocked reading the socket, sent when a process comes to read it
/// after a pause — are skipped and counted, like every datagram that is not
/// a packet for the engine.
#[test]
fn the_nodes_own_wake_ups_are_counted_as_its_own_datagrams() {
    let nodes = cluster(2);
    let echo = vipc::services::spawn_echo(&nodes[1], None).unwrap();
    let p = nodes[0].attach().unwrap();
    let before = nodes[0].stats().own_datagrams;
    // On a loaded machine the background thread may not be in its read yet
    // when the process comes: try until one wake-up was needed.
    let t = Instant::now();
    while nodes[0].stats().own_datagrams == before && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20)); // past GRACE: the background thread reads the socket
        let mut m = [0u8; 32];
        p.send(&mut m, echo).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(nodes[0].stats().own_datagrams > before, "{:?}", nodes[0].stats());
}

/// A host lends the kernel server a segment for its counters and never
/// acknowledges the MoveTo that writes them (1,472-byte packets: the text
/// does not fit in the reply). Only the kernel mover waits out T_t: the
/// kernel server still answers pings at once, and the counters are served
/// again once that move has failed.
#[test]
fn a_requester_that_never_acknowledges_a_move_does_not_stall_the_kernel_server() {
    use vipc_wire::{Flags, Header};
    let nodes = cluster_with(2, 1, |_, c| c.engine.loopback_packet = None);
    let target = nodes[0].host_id();
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    silent.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut h = Header::new(PacketType::Send);
    (h.incarnation, h.seq, h.src, h.dst) = (9, 1, Pid::new(700, 1), vipc::services::kernel_pid(target));
    h.flags = Flags(0).with(Flags::SEG_WRITE, true);
    h.total_len = 64 << 10;
    h.message[0] = vipc::services::OP_STATS;
    silent.send_to(&vipc_wire::to_vec(&h, &[], None), nodes[0].local_addr()).unwrap();
    let mut buf = [0u8; 2048];
    let n = silent.recv(&mut buf).expect("the move begins");
    assert_eq!(vipc_wire::parse(&buf[..n], None).unwrap().header.ptype, PacketType::MoveToData);

    let c = nodes[1].attach().unwrap();
    let t = Instant::now();
    vipc::services::ping_kernel(&c, target).unwrap();
    let ping = t.elapsed();
    assert!(ping < Duration::from_millis(300), "a ping waited {ping:?} behind the stalled move");
    let fields = vipc::services::query_stats(&c, target).unwrap();
    assert!(fields.iter().any(|(n, v)| n == "timeouts" && *v == 1), "the silent move failed: {fields:?}");
}
