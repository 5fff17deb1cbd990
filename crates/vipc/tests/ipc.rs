//! The primitives between nodes on loopback: Send/Receive/Reply, segments,
//! Forward, MoveTo/MoveFrom, SetPid/GetPid.

mod common;

use common::{cluster, cluster_with, packets, patient_timers, pattern};
use std::time::{Duration, Instant};
use vipc::{Access, Message, ProtocolError, Scope, SegmentRef, SendOptions};

fn msg(b: u8) -> Message {
    let mut m = [0u8; 32];
    m[0] = b;
    m[31] = b.wrapping_mul(3);
    m
}

#[test]
fn local_send_receive_reply() {
    let nodes = cluster(1);
    let n = &nodes[0];
    let (server, t) = n
        .spawn(|p| {
            let mut m = [0u8; 32];
            let from = p.receive(&mut m).unwrap();
            m[0] += 1;
            p.reply(&m, from).unwrap();
            from
        })
        .unwrap();
    let c = n.attach().unwrap();
    let mut m = msg(10);
    let before = packets(n);
    assert_eq!(c.send(&mut m, server).unwrap(), server);
    assert_eq!(m[0], 11);
    assert_eq!(m[31], 30);
    assert_eq!(t.join().unwrap(), c.pid());
    assert_eq!(packets(n), before, "a local exchange sends no packets");
    assert_eq!(n.stats().local_exchanges, 1);
}

#[test]
fn remote_send_receive_reply_is_two_packets() {
    let nodes = cluster_with(2, 1, patient_timers);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, t) = a
        .spawn(|p| {
            for _ in 0..5 {
                let mut m = [0u8; 32];
                let from = p.receive(&mut m).unwrap();
                m[0] = m[0].wrapping_add(1);
                p.reply(&m, from).unwrap();
            }
        })
        .unwrap();
    let c = b.attach().unwrap();
    let mut m = msg(1);
    c.send(&mut m, server).unwrap(); // warms the location cache
    assert_eq!(m[0], 2);
    for i in 0..4u8 {
        let before = packets(b);
        let mut m = msg(i);
        assert_eq!(c.send(&mut m, server).unwrap(), server);
        assert_eq!(m[0], i + 1);
        assert_eq!(packets(b) - before, 2, "send + reply");
    }
    t.join().unwrap();
    assert_eq!(b.stats().remote_exchanges, 5);
}

#[test]
fn receive_specific_takes_only_the_named_sender() {
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let server = a.attach().unwrap();
    let spid = server.pid();
    let (c1, t1) = b.spawn(move |p| p.send(&mut msg(1), spid).map(|_| ())).unwrap();
    std::thread::sleep(Duration::from_millis(30));
    let (c2, t2) = a.spawn(move |p| p.send(&mut msg(2), spid).map(|_| ())).unwrap();
    let mut m = [0u8; 32];
    assert_eq!(server.receive_specific(&mut m, c2).unwrap(), c2);
    assert_eq!(m[0], 2);
    server.reply(&m, c2).unwrap();
    assert_eq!(server.receive(&mut m).unwrap(), c1);
    assert_eq!(m[0], 1);
    server.reply(&m, c1).unwrap();
    t1.join().unwrap().unwrap();
    t2.join().unwrap().unwrap();
}

#[test]
fn appended_segment_arrives_with_the_message() {
    let nodes = cluster_with(2, 1, patient_timers);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, t) = a
        .spawn(|p| {
            let mut m = [0u8; 32];
            let mut buf = vec![0u8; 4096];
            let info = p.receive_with_segment(&mut m, &mut buf).unwrap();
            p.reply(&m, info.from).unwrap();
            (info, buf[..info.len].to_vec())
        })
        .unwrap();
    let c = b.attach().unwrap();
    c.send(&mut msg(0), vipc::services::kernel_pid(a.host_id())).unwrap(); // warm the cache
    let page = pattern(1000, 9);
    let p0 = packets(b);
    let mut m = msg(5);
    c.send_with(&mut m, server, Some(SegmentRef::Read(&page)), SendOptions::default()).unwrap();
    let (info, got) = t.join().unwrap();
    assert_eq!(info.from, c.pid());
    assert_eq!(info.len, 1000);
    assert_eq!(info.segment_size, 1000);
    assert_eq!(info.access, Access::READ);
    assert_eq!(got, page);
    assert_eq!(packets(b) - p0, 2, "a page write is 2 packets");
    assert_eq!(b.stats().retransmissions, 0);
}

#[test]
fn reply_with_segment_writes_the_senders_buffer() {
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let page = pattern(1024, 4);
    let sent = page.clone();
    let (server, t) = a
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            assert_eq!(info.access, Access::WRITE);
            assert_eq!(info.segment_size, 2048);
            p.reply_with_segment(&m, info.from, 512, &sent).unwrap();
        })
        .unwrap();
    let c = b.attach().unwrap();
    let mut buf = vec![0xAAu8; 2048];
    c.send_with(&mut msg(1), server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
    t.join().unwrap();
    assert!(buf[..512].iter().all(|&x| x == 0xAA), "bytes before the offset untouched");
    assert_eq!(&buf[512..1536], &page[..]);
    assert!(buf[1536..].iter().all(|&x| x == 0xAA), "bytes after the data untouched");
}

#[test]
fn forward_reaches_a_third_node_and_the_reply_comes_from_there() {
    let nodes = cluster(3);
    let (final_srv, t3) = nodes[2]
        .spawn(|p| {
            let mut m = [0u8; 32];
            let mut buf = [0u8; 64];
            let info = p.receive_with_segment(&mut m, &mut buf).unwrap();
            m[1] = 0xF3;
            p.reply(&m, info.from).unwrap();
            info
        })
        .unwrap();
    let (fwd, t1) = nodes[0]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let from = p.receive(&mut m).unwrap();
            m[2] = 0xF1;
            p.forward(&m, from, final_srv).unwrap();
            // Once forwarded, the sender no longer awaits our reply.
            let e = p.reply(&m, from).unwrap_err();
            assert!(matches!(e, vipc::Error::Protocol(ProtocolError::NotAwaitingReply(_))), "{e}");
        })
        .unwrap();
    let c = nodes[1].attach().unwrap();
    let mut m = msg(7);
    let replier = c.send(&mut m, fwd).unwrap();
    assert_eq!(replier, final_srv);
    assert_eq!((m[0], m[1], m[2]), (7, 0xF3, 0xF1));
    let info = t3.join().unwrap();
    assert_eq!(info.from, c.pid());
    assert_eq!(info.forwarder, fwd);
    t1.join().unwrap();
}

#[test]
fn move_from_and_move_to_one_mebibyte_remote() {
    const N: usize = 1 << 20;
    let nodes = cluster(2);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, t) = a
        .spawn(|p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            assert_eq!(info.segment_size as usize, N);
            let mut data = vec![0u8; N];
            p.move_from(info.from, 0, &mut data).unwrap();
            let ok = data == pattern(N, 1);
            // A read past the end is refused.
            let mut one = [0u8; 1];
            let e = p.move_from(info.from, N as u32, &mut one).unwrap_err();
            assert!(matches!(e, vipc::Error::Protocol(ProtocolError::OutOfSegment { .. })), "{e}");
            for x in data.iter_mut() {
                *x = !*x;
            }
            p.move_to(info.from, 0, &data).unwrap();
            m[0] = ok as u8;
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    let c = b.attach().unwrap();
    let mut buf = pattern(N, 1);
    let mut m = [0u8; 32];
    let t0 = Instant::now();
    c.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut buf)), SendOptions::default()).unwrap();
    t.join().unwrap();
    assert_eq!(m[0], 1, "the server read the segment intact");
    let want: Vec<u8> = pattern(N, 1).iter().map(|x| !x).collect();
    assert!(buf == want, "the server's MoveTo arrived intact");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

/// Three movers on three nodes MoveTo 16 MiB each into processes of a
/// fourth at the same time, in 64 KiB loopback chunks: their windows fit
/// the receiving node's socket buffer together, so no chunk is lost and
/// none is sent twice (with windows of half the buffer each, even two
/// such streams overflowed it, and every lost chunk waited for T_r).
#[test]
fn moves_from_three_movers_at_once_fit_the_receivers_buffer() {
    const N: usize = 16 << 20;
    // The nodes' buffers are 8 MiB as root (forced) or under an `rmem_max`
    // of 4 MiB; a smaller buffer keeps windows of half of it (node.rs).
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max").ok().and_then(|s| s.trim().parse().ok());
    if !root && rmem_max.is_none_or(|m: usize| m < 4 << 20) {
        eprintln!("skipped: not root and net.core.rmem_max below 4 MiB, so three windows need not fit the buffer");
        return;
    }
    let nodes = cluster_with(4, 1, patient_timers);
    let data = std::sync::Arc::new(pattern(N, 5));
    let servers: Vec<_> = nodes[..3]
        .iter()
        .map(|n| {
            let data = data.clone();
            n.spawn(move |p| {
                let mut m = [0u8; 32];
                let info = p.receive_with_segment(&mut m, &mut []).unwrap();
                p.move_to(info.from, 0, &data).unwrap();
                p.reply(&m, info.from).unwrap();
            })
            .unwrap()
        })
        .collect();
    let clients: Vec<_> = servers
        .iter()
        .map(|(server, _)| {
            let (server, c) = (*server, nodes[3].attach().unwrap());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; N];
                c.send_with(&mut [0u8; 32], server, Some(SegmentRef::ReadWrite(&mut buf)), SendOptions::default())
                    .unwrap();
                buf
            })
        })
        .collect();
    for c in clients {
        assert!(c.join().unwrap() == *data, "the MoveTo arrived intact");
    }
    for (n, (_, t)) in nodes.iter().zip(servers) {
        t.join().unwrap();
        assert_eq!(n.stats().retransmissions, 0, "no chunk was lost");
    }
}

/// Moves in datagrams of an Ethernet frame's size (`max_packet`, as off
/// loopback) leave in runs of one system call each (UDP GSO) and arrive
/// in runs (UDP GRO), split by their headers, into a lent read-write
/// segment and in place into a lent write-only one: every byte as sent.
#[test]
fn moves_in_ethernet_sized_datagrams_go_and_arrive_in_runs() {
    const N: usize = 4 << 20;
    let nodes = cluster_with(2, 1, |_, c| c.engine.loopback_packet = None);
    let (a, b) = (&nodes[0], &nodes[1]);
    let (server, t) = a
        .spawn(|p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let mut data = vec![0u8; N];
            p.move_from(info.from, 0, &mut data).unwrap();
            let ok = data == pattern(N, 4);
            data.iter_mut().for_each(|x| *x = !*x);
            p.move_to(info.from, 0, &data).unwrap();
            m[0] = ok as u8;
            p.reply(&m, info.from).unwrap();
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            p.move_to(info.from, 0, &pattern(N, 5)).unwrap();
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    let c = b.attach().unwrap();
    let mut buf = pattern(N, 4);
    let mut m = [0u8; 32];
    c.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut buf)), SendOptions::default()).unwrap();
    assert_eq!(m[0], 1, "the server read the segment intact");
    assert!(buf.iter().zip(pattern(N, 4)).all(|(got, sent)| *got == !sent), "the MoveTo arrived intact");
    let mut into = vec![0u8; N];
    c.send_with(&mut m, server, Some(SegmentRef::Write(&mut into)), SendOptions::default()).unwrap();
    t.join().unwrap();
    assert!(into == pattern(N, 5), "the MoveTo into the lent write-only segment arrived intact");
    for n in [a, b] {
        let s = n.stats();
        assert!(s.runs_sent > 0 && s.runs_received > 0, "runs sent {}, received {}", s.runs_sent, s.runs_received);
    }
}

#[test]
fn moves_need_the_granted_access() {
    let nodes = cluster(2);
    let (server, t) = nodes[0]
        .spawn(|p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let e = p.move_to(info.from, 0, b"nope").unwrap_err();
            assert!(matches!(e, vipc::Error::Protocol(ProtocolError::NoAccess(_))), "{e}");
            let mut buf = [0u8; 8];
            p.move_from(info.from, 0, &mut buf).unwrap();
            p.reply(&m, info.from).unwrap();
            buf
        })
        .unwrap();
    let c = nodes[1].attach().unwrap();
    c.send_with(&mut msg(0), server, Some(SegmentRef::Read(b"readonly")), SendOptions::default()).unwrap();
    assert_eq!(&t.join().unwrap(), b"readonly");
    // And no move at all to a process that is not awaiting our reply.
    let other = nodes[0].attach().unwrap();
    let e = other.move_to(c.pid(), 0, b"x").unwrap_err();
    assert!(matches!(e, vipc::Error::Protocol(ProtocolError::NotAwaitingReply(_))), "{e}");
}

#[test]
fn get_pid_local_remote_and_any() {
    let nodes = cluster(3);
    let svc = nodes[0].attach().unwrap();
    nodes[0].set_pid("svc", svc.pid(), Scope::Any).unwrap();
    let local_only = nodes[0].attach().unwrap();
    local_only.set_pid("hidden", local_only.pid(), Scope::Local).unwrap();

    assert_eq!(svc.get_pid("svc", Scope::Local).unwrap(), Some(svc.pid()));
    let c = nodes[2].attach().unwrap();
    assert_eq!(c.get_pid("svc", Scope::Remote).unwrap(), Some(svc.pid()));
    assert_eq!(c.get_pid("svc", Scope::Any).unwrap(), Some(svc.pid()));
    assert_eq!(c.get_pid("svc", Scope::Local).unwrap(), None);
    assert_eq!(c.get_pid("hidden", Scope::Any).unwrap(), None, "a local registration is not visible remotely");
    assert_eq!(c.get_pid("nobody", Scope::Any).unwrap(), None);
    let e = c.get_pid("", Scope::Local).unwrap_err();
    assert!(matches!(e, vipc::Error::Protocol(ProtocolError::BadName)), "{e}");
}

#[test]
fn kernel_server_is_process_one_and_reports_counters() {
    let nodes = cluster(2);
    let c = nodes[1].attach().unwrap();
    let h = nodes[0].host_id();
    vipc::services::ping_kernel(&c, h).unwrap();
    let fields = vipc::services::query_stats(&c, h).unwrap();
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|x| x.1);
    assert_eq!(fields.len(), nodes[0].stats().fields().len());
    assert!(get("packets_in.send").unwrap() >= 2, "{fields:?}");
    assert!(get("processes").unwrap() >= 1);
    assert_eq!(get("mac_failures"), Some(0));
    // An unknown operation gets status 1.
    let mut m = [0u8; 32];
    m[0] = 99;
    c.send(&mut m, vipc::services::kernel_pid(h)).unwrap();
    assert_eq!(m[0], vipc::services::STATUS_UNKNOWN_OP);
}

#[test]
fn echo_service_echoes_message_and_segment() {
    let nodes = cluster(2);
    let echo = vipc::services::spawn_echo(&nodes[0], Some("echo")).unwrap();
    let c = nodes[1].attach().unwrap();
    assert_eq!(c.get_pid("echo", Scope::Any).unwrap(), Some(echo));
    let mut m = msg(42);
    c.send(&mut m, echo).unwrap();
    assert_eq!(m, msg(42));
    // Small read-write segment: appended, written back with the reply.
    let mut small = pattern(500, 2);
    let want = small.clone();
    c.send_with(&mut m, echo, Some(SegmentRef::ReadWrite(&mut small)), SendOptions::default()).unwrap();
    assert_eq!(small, want);
    // Large read-write segment: MoveFrom + MoveTo.
    let mut big = pattern(300_000, 3);
    let want = big.clone();
    c.send_with(&mut m, echo, Some(SegmentRef::ReadWrite(&mut big)), SendOptions::default()).unwrap();
    assert_eq!(big, want);
    // Larger than a piece: moved in pieces (the echo never holds the whole segment).
    let mut huge = pattern(2 * vipc::services::ECHO_PIECE + 100, 4);
    let want = huge.clone();
    let requests = || nodes[0].stats().sent(vipc::PacketType::MoveFromRequest);
    let resent = || nodes[0].stats().retransmissions;
    let (before, resent_before) = (requests(), resent());
    c.send_with(&mut m, echo, Some(SegmentRef::ReadWrite(&mut huge)), SendOptions::default()).unwrap();
    assert!(huge == want);
    // A request not answered within T_r (a loaded machine) is sent again.
    let (sent, again) = (requests() - before, resent() - resent_before);
    assert!((3..=3 + again).contains(&sent), "two whole pieces and the rest: {sent} requests, {again} resent");
}

#[test]
fn idempotent_sends_complete() {
    let nodes = cluster(2);
    let echo = vipc::services::spawn_echo(&nodes[0], None).unwrap();
    let c = nodes[1].attach().unwrap();
    for i in 0..20 {
        let mut m = msg(i);
        c.send_with(&mut m, echo, None, SendOptions { idempotent: true }).unwrap();
        assert_eq!(m, msg(i));
    }
}

#[test]
fn ipv6_loopback_with_static_peers() {
    let probe = std::net::UdpSocket::bind("[::1]:0");
    let Ok(probe) = probe else {
        vipc::testing::skipped("no IPv6 loopback");
        return;
    };
    drop(probe);
    let a = vipc::Node::start(vipc::NodeConfig::fixed(1, "[::1]:0".parse().unwrap(), vec![])).unwrap();
    let b = vipc::Node::start(vipc::NodeConfig::fixed(2, "[::1]:0".parse().unwrap(), vec![a.local_addr()])).unwrap();
    let echo = vipc::services::spawn_echo(&a, Some("echo6")).unwrap();
    let c = b.attach().unwrap();
    assert_eq!(c.get_pid("echo6", Scope::Remote).unwrap(), Some(echo));
    let mut m = msg(6);
    assert_eq!(c.send(&mut m, echo).unwrap(), echo);
    assert_eq!(m, msg(6));
    // Node 1's alive-host table read through its kernel server names node 2
    // by its IPv6 address (it read 0.0.0.0:0).
    let deadline = Instant::now() + Duration::from_secs(5);
    let row_of_b = loop {
        let table = vipc::services::query_hosts(&c, 1).unwrap();
        if let Some(row) = table.rows.iter().flatten().find(|h| h.host == 2) {
            break *row;
        }
        assert!(Instant::now() < deadline, "node 1 never listed node 2: {table:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(row_of_b.addr, b.local_addr());
}

#[test]
fn sixty_four_mebibytes_both_ways() {
    const N: usize = 64 << 20;
    let nodes = cluster(2);
    let echo = vipc::services::spawn_echo(&nodes[0], None).unwrap();
    let c = nodes[1].attach().unwrap();
    let mut big = pattern(N, 8);
    let t = Instant::now();
    c.send_with(&mut [0; 32], echo, Some(SegmentRef::ReadWrite(&mut big)), SendOptions::default()).unwrap();
    let took = t.elapsed();
    assert!(big == pattern(N, 8), "64 MiB came back intact");
    eprintln!("64 MiB MoveFrom + MoveTo in {took:?}");
}

/// A write-only segment sent to a remote process is lent, not copied: the
/// receiver's MoveTo and its reply's segment land straight in the caller's
/// buffer and the bytes nobody wrote keep what the caller had there — also
/// when the exchange is forwarded back to a process on the caller's own node,
/// whose writes reach the buffer through the lending thread.
#[test]
fn a_lent_write_segment_gets_exactly_what_receivers_write() {
    let nodes = cluster(2);
    // On node 2 (the client's node): writes 4 bytes by MoveTo, then replies with 2 more.
    let (local_writer, local_thread) = nodes[1]
        .spawn(|p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            assert_eq!((info.segment_size, info.access), (300_000, Access::WRITE));
            p.move_to(info.from, 200_000, &[7, 7, 7, 7]).unwrap();
            p.reply_with_segment(&m, info.from, 299_998, &[9, 9]).unwrap();
        })
        .unwrap();
    // On node 1: MoveTo of a large range, a reply segment, then the next
    // request is forwarded to the writer on node 2.
    let (server, server_thread) = nodes[0]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            p.move_to(info.from, 1000, &pattern(150_000, 3)).unwrap();
            p.reply_with_segment(&m, info.from, 10, &[1, 2, 3]).unwrap();
            let from = p.receive(&mut m).unwrap();
            p.forward(&m, from, local_writer).unwrap();
        })
        .unwrap();
    let me = nodes[1].attach().unwrap();
    let mut buf = vec![0xEEu8; 300_000];
    let mut m = msg(1);
    me.send_with(&mut m, server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
    assert_eq!(buf[10..13], [1, 2, 3]);
    assert!(buf[1000..151_000] == pattern(150_000, 3)[..]);
    let untouched = buf[..10].iter().chain(&buf[13..1000]).chain(&buf[151_000..]);
    assert!(untouched.into_iter().all(|&b| b == 0xEE), "bytes nobody wrote keep their value");
    // Forwarded to a process on the caller's node: its writes come as local placements.
    let mut m = msg(2);
    assert_eq!(
        me.send_with(&mut m, server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap(),
        local_writer
    );
    assert_eq!(buf[200_000..200_004], [7; 4]);
    assert_eq!(buf[299_998..], [9, 9]);
    assert_eq!(buf[199_999], 0xEE);
    server_thread.join().unwrap();
    local_thread.join().unwrap();
}

/// A MoveTo into a lent write segment that the mover gives up (its deadline)
/// before replying: datagrams that arrive meanwhile are received where the
/// next chunk was expected, and must not stay there. The Send succeeded with
/// another datagram's bytes in a range nobody wrote (runtime stress helper).
#[test]
fn bytes_no_mover_wrote_stay_the_callers_after_a_move_given_up() {
    const LEN: usize = 48 << 20;
    let nodes = cluster(2);
    let client_addr = nodes[1].local_addr();
    let (cut_tx, cut_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (mover, mover_thread) = nodes[0]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let data = vec![0x22u8; LEN];
            // One move may finish before the coarse clock sees the deadline
            // (48 MiB take about as long as its lag): move again until cut.
            let cut =
                vipc::within(Duration::from_millis(1), || (0..100).try_for_each(|_| p.move_to(info.from, 0, &data)));
            cut_tx.send(cut.is_err()).unwrap();
            go_rx.recv().unwrap();
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    let client = nodes[1].attach().unwrap();
    let sender = std::thread::spawn(move || {
        let mut buf = vec![0x11u8; LEN];
        let mut m = msg(1);
        client.send_with(&mut m, mover, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
        buf
    });
    assert!(cut_rx.recv().unwrap(), "100 MoveTos of 48 MiB were not cut by their 1 ms deadline");
    // Foreign datagrams while the client waits for its reply (dropped as malformed there).
    let noise = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..20 {
        noise.send_to(&[0x5a; 1200], client_addr).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    go_tx.send(()).unwrap();
    let buf = sender.join().unwrap();
    mover_thread.join().unwrap();
    let foreign = buf.iter().position(|&b| b != 0x11 && b != 0x22);
    assert_eq!(foreign, None, "a byte neither the caller's nor the mover's");
    assert!(nodes[1].stats().malformed >= 1, "the noise reached the client's node");
}

/// A read-only segment sent to a remote process is lent, not copied: the
/// receiver's MoveFrom reads the caller's buffer — also when the exchange is
/// forwarded back to a process on the caller's own node, which then gets
/// the whole segment from the lending thread.
#[test]
fn a_lent_read_segment_is_read_where_the_caller_keeps_it() {
    let nodes = cluster(2);
    let data = pattern(300_000, 5);
    let expected = data.clone();
    // On node 2 (the client's node): the whole segment, appended and by MoveFrom.
    let (local_reader, local_thread) = nodes[1]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let mut head = vec![0u8; 100_000];
            let info = p.receive_with_segment(&mut m, &mut head).unwrap();
            assert_eq!((info.segment_size, info.access), (300_000, Access::READ));
            assert_eq!(info.len, 100_000, "a local receiver gets as much as it has room for");
            assert!(head == expected[..100_000]);
            let mut rest = vec![0u8; 200_000];
            p.move_from(info.from, 100_000, &mut rest).unwrap();
            assert!(rest == expected[100_000..]);
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    // On node 1: MoveFrom of the whole segment, then the next request goes to the reader on node 2.
    let (server, server_thread) = nodes[0]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let mut all = vec![0u8; 300_000];
            p.move_from(info.from, 0, &mut all).unwrap();
            p.reply(&m, info.from).unwrap();
            let from = p.receive(&mut m).unwrap();
            p.forward(&m, from, local_reader).unwrap();
            all
        })
        .unwrap();
    let me = nodes[1].attach().unwrap();
    me.send_with(&mut msg(1), server, Some(SegmentRef::Read(&data)), SendOptions::default()).unwrap();
    assert_eq!(
        me.send_with(&mut msg(2), server, Some(SegmentRef::Read(&data)), SendOptions::default()).unwrap(),
        local_reader
    );
    assert!(server_thread.join().unwrap() == data);
    local_thread.join().unwrap();
}

/// Two threads of one node wait at once for MoveTos into their lent
/// buffers: one reads the socket and hands the other its datagrams
/// (through reused buffers); over many rounds with a fresh pattern each,
/// every buffer gets exactly its own bytes.
#[test]
fn concurrent_lent_buffers_each_get_exactly_their_own_bytes() {
    const LEN: usize = 600_000;
    const ROUNDS: u8 = 12;
    let nodes = cluster(2);
    let servers: Vec<_> = (0..2u8)
        .map(|k| {
            nodes[0]
                .spawn(move |p| {
                    let mut m = [0u8; 32];
                    while let Ok(info) = p.receive_with_segment(&mut m, &mut []) {
                        p.move_to(info.from, 0, &pattern(LEN, m[0].wrapping_mul(2).wrapping_add(k))).unwrap();
                        p.reply(&m, info.from).unwrap();
                    }
                })
                .unwrap()
                .0
        })
        .collect();
    std::thread::scope(|s| {
        for (k, &server) in servers.iter().enumerate() {
            let node = &nodes[1];
            s.spawn(move || {
                let me = node.attach().unwrap();
                let mut buf = vec![0u8; LEN];
                for round in 0..ROUNDS {
                    let mut m = msg(round);
                    me.send_with(&mut m, server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
                    let want = pattern(LEN, round.wrapping_mul(2).wrapping_add(k as u8));
                    assert!(buf == want, "client {k} round {round}: bytes of another buffer or round");
                }
            });
        }
    });
}
