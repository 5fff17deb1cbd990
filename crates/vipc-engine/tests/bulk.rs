//! MoveTo/MoveFrom between nodes: streaming, selective retransmission, pacing, failure.

mod common;
use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt ^ (i >> 9) as u8)).collect()
}

/// Client on node 1 sends to server on node 0 granting `access` to a segment of `size`; returns (server, client).
fn exchange_with_segment(net: &mut Net, size: usize, access: Access) -> (Pid, Pid) {
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    let seg = Segment { data: pattern(size, 7), access };
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), Some(seg)).unwrap();
    net.settle();
    net.take_received(0, server);
    (server, client)
}

fn move_to_and_reply(net: &mut Net, size: usize, budget: Duration) -> Vec<u8> {
    let (server, client) = exchange_with_segment(net, size, Access::WRITE);
    let data = pattern(size, 99);
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, data.clone()).unwrap();
    net.advance(budget);
    net.take_move(0, server).expect("move_to completes");
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.advance(Duration::from_millis(200));
    let seg = net.take_send(1, client).unwrap().segment.unwrap().data;
    assert!(seg == data, "moved data arrived intact");
    seg
}

#[test]
fn move_to_streams_without_per_packet_acks() {
    let mut net = Net::new(2);
    let size = 64 * 1024;
    let (server, client) = exchange_with_segment(&mut net, size, Access::WRITE);
    let before = net.stats(0).sent(PacketType::MoveToData);
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, pattern(size, 1)).unwrap();
    net.settle();
    net.take_move(0, server).unwrap();
    let data_packets = net.stats(0).sent(PacketType::MoveToData) - before;
    let chunk = net.nodes[0].config().max_data() as u64;
    assert_eq!(data_packets, (size as u64).div_ceil(chunk), "no retransmission on a clean network");
    let acks = net.stats(1).sent(PacketType::MoveToAck);
    assert!(acks * 8 <= data_packets, "{acks} acks for {data_packets} data packets");
}

#[test]
fn move_from_reads_the_granted_range() {
    let mut net = Net::new(2);
    let size = 200_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::READ);
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 1000, 150_000).unwrap();
    net.settle();
    assert!(net.take_move(0, server).unwrap() == pattern(size, 7)[1000..151_000]);
    assert_eq!(
        net.nodes[0].move_from(now, server, client, 150_000, 60_000),
        Err(Error::OutOfSegment { offset: 150_000, len: 60_000, size: 200_000 })
    );
    assert_eq!(net.nodes[0].move_to(now, server, client, 0, vec![1]), Err(Error::NoAccess("write")));
}

#[test]
fn move_to_survives_heavy_loss_with_selective_retransmission() {
    for seed in 0..5u64 {
        let mut net = Net::new(2);
        let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let size = 1 << 20;
        let (server, client) = exchange_with_segment(&mut net, size, Access::WRITE);
        net.filter = Some(Box::new(move |_, _, _| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            usize::from((state >> 33) % 100 >= 20) // 20% loss both ways
        }));
        let data = pattern(size, 3);
        let now = net.now;
        net.nodes[0].move_to(now, server, client, 0, data.clone()).unwrap();
        net.advance(Duration::from_secs(30));
        net.take_move(0, server).expect("completes under 20% loss");
        let now = net.now;
        net.nodes[0].reply(now, server, client, msg(0), None).unwrap();
        net.advance(Duration::from_secs(2));
        assert!(net.take_send(1, client).unwrap().segment.unwrap().data == data, "seed {seed}");
        let s = net.stats(0);
        let chunks = (size as u64).div_ceil(net.nodes[0].config().max_data() as u64);
        let sent = s.sent(PacketType::MoveToData);
        assert!(sent < chunks * 2, "selective: {sent} data packets for {chunks} chunks at 20% loss");
    }
}

#[test]
fn move_from_survives_loss() {
    let mut net = Net::new(2);
    let size = 300_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::READ);
    let mut n = 0u32;
    net.filter = Some(Box::new(move |_, _, _| {
        n += 1;
        usize::from(n % 7 != 0)
    }));
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 0, size as u32).unwrap();
    net.advance(Duration::from_secs(10));
    assert!(net.take_move(0, server).unwrap() == pattern(size, 7));
}

#[test]
fn the_window_bounds_data_in_flight() {
    let mut net = Net::with(2, |c| c.window = 16);
    let (server, client) = exchange_with_segment(&mut net, 1 << 20, Access::WRITE);
    net.filter = Some(Box::new(|_, _, _| 0)); // receiver never acks
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, vec![0; 1 << 20]).unwrap();
    net.settle();
    assert_eq!(net.stats(0).sent(PacketType::MoveToData), 16, "stops at the window without acks");
    net.advance(Duration::from_millis(1100));
    assert_eq!(net.take_move(0, server), Err(Error::Timeout(client)));
    assert_eq!(net.stats(0).active_transfers, 0);
}

#[test]
fn move_to_64_mib() {
    let mut net = Net::with(2, |c| c.max_packet = 60_000);
    move_to_and_reply(&mut net, 64 << 20, Duration::from_secs(5));
}

#[test]
fn mover_gets_an_error_when_the_client_is_destroyed() {
    let mut net = Net::new(2);
    let (server, client) = exchange_with_segment(&mut net, 100_000, Access::READ_WRITE);
    let now = net.now;
    net.nodes[1].destroy_process(now, client).unwrap();
    net.settle();
    assert_eq!(
        net.nodes[0].move_from(now, server, client, 0, 10),
        Err(Error::NotAwaitingReply(client)),
        "the cancel freed the alien"
    );
}

#[test]
fn state_is_freed_once_traffic_stops() {
    let mut net = Net::new(2);
    move_to_and_reply(&mut net, 100_000, Duration::from_secs(1));
    net.advance(Duration::from_secs(3));
    for i in 0..2 {
        let s = net.stats(i);
        assert_eq!((s.active_exchanges, s.active_aliens, s.active_transfers), (0, 0, 0), "node {i}");
    }
}

/// Bug B1 of the simulator: a MoveFrom meant for a client's earlier exchange
/// must be refused, not served from the segment of the client's next exchange.
#[test]
fn a_stale_move_never_touches_the_clients_next_exchange() {
    let mut net = Net::new(2);
    let (server, client) = exchange_with_segment(&mut net, 100, Access::READ);
    let held = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let keep = held.clone();
    net.filter = Some(Box::new(move |_, _, bytes| {
        if vipc_wire::parse(bytes, None).unwrap().header.ptype == PacketType::MoveFromRequest {
            *keep.borrow_mut() = bytes.to_vec();
        }
        0 // partition
    }));
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 0, 100).unwrap();
    net.advance(Duration::from_millis(1100));
    assert_eq!(net.take_send(1, client), Err(Error::Timeout(server)));
    net.filter = None;
    let now = net.now;
    let next = Segment { data: vec![0xbb; 100], access: Access::READ };
    net.nodes[1].send(now, client, server, msg(2), SendOptions::default(), Some(next)).unwrap();
    net.settle();
    let stale = held.borrow().clone();
    net.nodes[1].handle_datagram(now, addr(0), &stale);
    let answer = net.nodes[1].poll_transmit().expect("an answer to the stale request");
    let h = vipc_wire::parse(&answer.bytes, None).unwrap().header;
    assert_eq!(h.ptype, PacketType::NAck, "the stale MoveFrom was served from the next exchange's segment");
}
