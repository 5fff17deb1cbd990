//! MoveTo/MoveFrom between nodes: streaming, selective retransmission, pacing, failure.

mod common;
use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

/// A filter that lets through only the first data packet of type `ptype` (and everything else).
fn first_only(ptype: PacketType) -> Filter {
    let mut seen = 0;
    Box::new(move |_, _, bytes: &[u8]| {
        let data = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == ptype);
        seen += usize::from(data);
        usize::from(!data || seen == 1)
    })
}

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

/// A peer that repeats what the other side already has makes no progress:
/// the stream still fails T_t after its last progress, on either side.
#[test]
fn repeated_chunks_or_acks_do_not_keep_a_stalled_stream_alive() {
    use std::cell::RefCell;
    use std::rc::Rc;
    // Both sides: the first packet of `kind` is kept, and from then on
    // every data packet is lost, so the stream stalls; the kept packet is
    // then replayed to its destination every 200 ms.
    for kind in [PacketType::MoveFromData, PacketType::MoveToAck] {
        let mut net = Net::new(2);
        let access = if kind == PacketType::MoveFromData { Access::READ } else { Access::WRITE };
        let (server, client) = exchange_with_segment(&mut net, 1 << 20, access);
        let kept: Rc<RefCell<Option<Vec<u8>>>> = Rc::default();
        let k = kept.clone();
        net.filter = Some(Box::new(move |_, _, bytes| {
            let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
            if t == kind && k.borrow().is_none() {
                *k.borrow_mut() = Some(bytes.to_vec());
                return 1;
            }
            let data = matches!(t, PacketType::MoveFromData | PacketType::MoveToData);
            usize::from(!data || k.borrow().is_none())
        }));
        let now = net.now;
        if kind == PacketType::MoveFromData {
            net.nodes[0].move_from(now, server, client, 0, 1 << 20).unwrap();
        } else {
            net.nodes[0].move_to(now, server, client, 0, vec![5; 1 << 20]).unwrap();
        }
        net.settle();
        let replay = kept.borrow().clone().expect("one packet of the stream got through");
        for _ in 0..8 {
            net.advance(Duration::from_millis(200));
            let now = net.now;
            net.nodes[0].handle_datagram(now, addr(1), &replay);
            net.settle();
        }
        assert_eq!(
            net.take_move(0, server),
            Err(Error::Timeout(client)),
            "{kind:?} replayed: fails within T_t + 0.6 s"
        );
    }
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

/// A lent MoveTo: the engine never holds the data; each data packet is a
/// header whose data the runtime appends from the mover's buffer.
#[test]
fn a_lent_move_to_sends_from_the_movers_buffer() {
    let mut net = Net::new(2);
    let size = 100_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::WRITE);
    let data = pattern(size, 42);
    net.lent.insert((0, server), data.clone());
    let now = net.now;
    net.nodes[0].move_to_lent(now, server, client, 0, size as u32).unwrap();
    let t = net.nodes[0].poll_transmit().expect("a first chunk");
    let lent = t.lent.expect("lent data");
    assert_eq!((lent.pid, lent.offset), (server, 0));
    assert_eq!(t.bytes.len(), vipc_wire::HEADER_LEN, "only the header is encoded");
    // The header announces the data the runtime appends.
    let mut whole = t.bytes.clone();
    whole.extend_from_slice(&data[..lent.len]);
    assert_eq!(vipc_wire::parse(&whole, None).unwrap().data, &data[..lent.len]);
    net.nodes[1].handle_datagram(now, addr(0), &whole); // delivered by hand; the net does the rest
    net.settle();
    net.take_move(0, server).expect("the lent move_to completes");
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    assert!(net.take_send(1, client).unwrap().segment.unwrap().data == data, "the data arrived intact");
}

/// A lent MoveFrom: the engine assembles nothing; each fresh chunk is a
/// placement the runtime copies into the mover's buffer.
#[test]
fn a_lent_move_from_places_every_chunk_in_the_movers_buffer() {
    let mut net = Net::new(2);
    let size = 300_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::READ);
    net.lent.insert((0, server), vec![0; size - 1000]);
    let now = net.now;
    net.nodes[0].move_from_lent(now, server, client, 1000, (size - 1000) as u32).unwrap();
    net.settle();
    assert_eq!(net.take_move(0, server), Ok(Vec::new()), "no data in the completion");
    assert!(net.lent[&(0, server)] == pattern(size, 7)[1000..], "every byte placed");
}

/// The runtime receives a lent move's next chunk in place where the engine
/// says it goes: that still holds after many finished moves, which stay in
/// the engine for T_t (a client reading file after file), more of them than
/// the engine would search.
#[test]
fn the_next_placement_is_known_after_many_finished_moves() {
    let mut net = Net::new(2);
    let size = 200_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::READ);
    net.lent.insert((0, server), vec![0; size]);
    for _ in 0..20 {
        let now = net.now;
        net.nodes[0].move_from_lent(now, server, client, 0, size as u32).unwrap();
        net.settle();
        assert_eq!(net.take_move(0, server), Ok(Vec::new()));
    }
    // One more, of which only the first data packet arrives.
    net.filter = Some(first_only(PacketType::MoveFromData));
    let now = net.now;
    net.nodes[0].move_from_lent(now, server, client, 0, size as u32).unwrap();
    net.settle();
    let chunk = net.nodes[0].config().max_data();
    assert_eq!(net.nodes[0].next_placement(server), Some((chunk, chunk)), "the second chunk, after the first");
}

#[test]
fn lent_moves_need_a_remote_client_and_no_key() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    let seg = Segment { data: vec![1; 10], access: Access::READ_WRITE };
    net.nodes[0].send(now, client, server, msg(1), SendOptions::default(), Some(seg)).unwrap();
    net.settle();
    net.take_received(0, server);
    assert!(matches!(net.nodes[0].move_to_lent(now, server, client, 0, 5), Err(Error::Unsupported(_))));
    assert!(matches!(net.nodes[0].move_from_lent(now, server, client, 0, 5), Err(Error::Unsupported(_))));
    // The ordinary calls still work afterwards: nothing was left blocked.
    net.nodes[0].move_to(now, server, client, 0, vec![9; 5]).unwrap();
    net.settle();
    assert_eq!(net.take_move(0, server), Ok(Vec::new()));

    let key = AuthKey::from_bytes([3; 32]);
    let mut net = Net::with(2, |c| c.key = Some(key.clone()));
    let (server, client) = exchange_with_segment(&mut net, 10, Access::WRITE);
    let now = net.now;
    assert!(matches!(net.nodes[0].move_to_lent(now, server, client, 0, 5), Err(Error::Unsupported(_))));
}

#[test]
fn loopback_peers_get_large_chunks_and_the_window_counts_bytes() {
    let mut net = Net::with(2, |c| {
        c.loopback_packet = Some(vipc_wire::MAX_DATAGRAM);
        c.window_bytes = 4 * vipc_wire::MAX_DATA;
    });
    let size = 1 << 20;
    let (server, client) = exchange_with_segment(&mut net, size, Access::WRITE);
    let chunk = net.nodes[0].config().data_to(addr(1));
    assert_eq!(chunk, vipc_wire::MAX_DATA, "the largest chunk a datagram holds");
    assert_eq!(net.nodes[0].config().window_chunks(chunk), 4);
    net.filter = Some(Box::new(|_, _, _| 0)); // nothing arrives: only the first window leaves
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, pattern(size, 5)).unwrap();
    net.settle();
    assert_eq!(net.stats(0).sent(PacketType::MoveToData), 4, "a window of 4 chunks of 64 KiB");
    net.filter = None;
    net.advance(Duration::from_millis(200));
    net.take_move(0, server).expect("completes once packets flow");
    let s = net.stats(0);
    assert_eq!(
        s.sent(PacketType::MoveToData),
        size.div_ceil(chunk) as u64 + s.retransmissions,
        "16 chunks, and resends"
    );
}

#[test]
fn max_data_never_exceeds_what_a_datagram_holds() {
    let c = Config { max_packet: vipc_wire::MAX_DATAGRAM, ..Config::default() };
    assert_eq!(c.max_data(), vipc_wire::MAX_DATA);
    // Such a packet can be built: a reply segment of max_data bytes.
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    let (server, client) = exchange_with_segment(&mut net, vipc_wire::MAX_DATA, Access::WRITE);
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(3), Some((0, vec![7; vipc_wire::MAX_DATA]))).unwrap();
    net.settle();
    assert!(net.take_send(1, client).unwrap().segment.unwrap().data.iter().all(|b| *b == 7));
}

#[test]
fn recycled_buffers_carry_the_next_bulk_packets() {
    let mut net = Net::new(2);
    let size = 10_000;
    let (server, client) = exchange_with_segment(&mut net, size, Access::WRITE);
    let spare = Vec::with_capacity(64 << 10);
    let at = spare.as_ptr();
    net.nodes[0].recycle(spare);
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, pattern(size, 3)).unwrap();
    let t = net.nodes[0].poll_transmit().expect("a chunk");
    assert_eq!(t.bytes.as_ptr(), at, "the chunk was built in the recycled buffer");
}

/// Bug B4 of the simulator: a MoveFrom stream that reads in place from the
/// client's segment must end quietly (no panic) when the client's exchange
/// ends before the transfer does.
#[test]
fn a_move_from_outliving_its_exchange_ends_quietly() {
    let mut net = Net::new(2);
    let (server, client) = exchange_with_segment(&mut net, 300_000, Access::READ);
    // The client hears no replyPending (so its Send times out after T_t) while
    // the stream crawls on: only every tenth data packet gets through, and
    // the acknowledgements they provoke keep the stream alive past T_t.
    let mut n = 0u32;
    net.filter = Some(Box::new(move |_, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        n += 1;
        match t {
            PacketType::ReplyPending => 0,
            PacketType::MoveFromData => usize::from(n % 10 == 0),
            _ => 1,
        }
    }));
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 0, 300_000).unwrap();
    net.advance(Duration::from_millis(4000));
    assert_eq!(net.take_send(1, client), Err(Error::Timeout(server)));
    assert_eq!(
        net.take_move(0, server).map(|_| ()),
        Err(Error::Timeout(client)),
        "the mover learns the transfer failed"
    );
    assert_eq!(net.stats(1).active_transfers, 0, "the orphaned stream was dropped");
}

/// A client that lends its read-only segment: the engine copies only what
/// the Send packet appends, and MoveFrom chunks are lent transmits whose data
/// the runtime takes from the client's own memory.
#[test]
fn a_lending_client_serves_move_from_out_of_its_own_memory() {
    let mut net = Net::new(2);
    let (server, client, neighbour) = (net.proc(0), net.proc(1), net.proc(1));
    let size = 200_000;
    let data = pattern(size, 1);
    net.lent.insert((1, client), data.clone());
    let now = net.now;
    assert!(matches!(
        net.nodes[1].send_lending(now, client, neighbour, msg(1), SendOptions::default(), &data),
        Err(Error::Unsupported(_))
    ));
    net.nodes[0].receive(now, server, None, 1 << 20).unwrap();
    net.nodes[1].send_lending(now, client, server, msg(1), SendOptions::default(), &data).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!((r.segment_size as usize, r.access), (size, Access::READ));
    assert!(!r.segment.is_empty() && r.segment.len() < size, "one packet's worth appended: {}", r.segment.len());
    assert!(r.segment == data[..r.segment.len()]);
    net.nodes[0].move_from(now, server, client, 100, (size - 100) as u32).unwrap();
    net.settle();
    assert!(net.take_move(0, server).unwrap() == data[100..]);
}

/// A Send lending its segment that a Forward brings back to the sender's
/// own node waits there until the engine has the whole segment
/// (`Event::FetchLent`), then reads like any local Send.
#[test]
fn a_lent_read_segment_forwarded_home_is_fetched_whole_once() {
    let mut net = Net::new(2);
    let (server, client, neighbour) = (net.proc(0), net.proc(1), net.proc(1));
    let size = 200_000;
    let data = pattern(size, 3);
    net.lent.insert((1, client), data.clone());
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].receive(now, neighbour, None, 1 << 20).unwrap();
    net.nodes[1].send_lending(now, client, server, msg(1), SendOptions::default(), &data).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].forward(now, server, client, neighbour, msg(2)).unwrap();
    net.settle();
    let asked = |net: &Net| {
        net.events.iter().filter(|(n, e)| *n == 1 && matches!(e, Event::FetchLent { pid } if *pid == client)).count()
    };
    assert_eq!(asked(&net), 1);
    assert!(net.take(1, neighbour).is_none(), "not received before the engine has the segment");
    net.nodes[1].lent_segment(now, client, &data[..size - 1]);
    net.settle();
    assert!(net.take(1, neighbour).is_none(), "a segment of the wrong size is ignored");
    net.nodes[1].lent_segment(now, client, &data);
    net.settle();
    let r = net.take_received(1, neighbour);
    assert_eq!((r.from, r.msg, r.segment_size as usize), (client, msg(2), size));
    assert!(r.segment == data);
    net.nodes[1].lent_segment(now, client, &data);
    net.settle();
    assert!(net.take(1, neighbour).is_none(), "given twice, received once");
    net.nodes[1].move_from(now, neighbour, client, 5, 1000).unwrap();
    net.settle();
    assert!(net.take_move(1, neighbour).unwrap() == data[5..1005]);
    net.nodes[1].reply(now, neighbour, client, msg(9), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(9));
    assert_eq!(asked(&net), 1);
}

#[test]
fn a_lent_write_segment_goes_to_remote_processes_only() {
    let mut net = Net::new(2);
    let (a, b) = (net.proc(0), net.proc(0));
    let now = net.now;
    assert!(matches!(
        net.nodes[0].send_lending_write(now, a, b, msg(1), SendOptions::default(), 100),
        Err(Error::Unsupported(_))
    ));
    // To a remote process, the Send announces the lent size and write access.
    let server = net.proc(1);
    net.nodes[1].receive(now, server, None, 0).unwrap();
    net.nodes[0].send_lending_write(now, a, server, msg(1), SendOptions::default(), 5000).unwrap();
    net.settle();
    let r = net.take_received(1, server);
    assert_eq!((r.segment_size, r.access, r.segment.len()), (5000, Access::WRITE, 0));
}

/// The first packet of `kind` node 0 sends, kept from node 1 (which gets
/// no packet of a stream): a model for forged ones.
fn first_packet_of(net: &mut Net, kind: PacketType) -> std::rc::Rc<std::cell::RefCell<Option<Vec<u8>>>> {
    let kept: std::rc::Rc<std::cell::RefCell<Option<Vec<u8>>>> = Default::default();
    let k = kept.clone();
    net.filter = Some(Box::new(move |from, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        if from == 0 && t == kind && k.borrow().is_none() {
            *k.borrow_mut() = Some(bytes.to_vec());
        }
        let stream = matches!(
            t,
            PacketType::MoveToData | PacketType::MoveFromData | PacketType::MoveFromRequest | PacketType::MoveToAck
        );
        usize::from(!stream)
    }));
    kept
}

/// A hostile mover: chunks smaller than any node sends (one flag per byte
/// of the segment to keep), and fresh stream seqs, each opening a stream
/// into (or out of) the same client's segment. Both are dropped as
/// malformed: at most 16 streams from one host per local process.
#[test]
fn a_mover_cannot_open_streams_without_end_or_of_tiny_chunks() {
    let mut net = Net::new(2);
    let (server, client) = exchange_with_segment(&mut net, 1 << 20, Access::READ_WRITE);
    let data = first_packet_of(&mut net, PacketType::MoveToData);
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, vec![5; 1 << 20]).unwrap();
    net.settle();
    let model = vipc_wire::parse(&data.borrow().clone().unwrap(), None).unwrap().header;
    let feed = |net: &mut Net, h: &vipc_wire::Header, bytes: &[u8]| {
        let now = net.now;
        net.nodes[1].handle_datagram(now, addr(0), &vipc_wire::to_vec(h, bytes, None));
    };
    let mut tiny = model;
    tiny.seq = 7_000;
    tiny.message[..4].copy_from_slice(&1u32.to_be_bytes());
    let malformed = net.stats(1).malformed;
    feed(&mut net, &tiny, &[1]);
    assert_eq!(net.stats(1).malformed, malformed + 1, "a 1-byte chunk of a 1 MiB transfer");
    assert_eq!(net.stats(1).active_transfers, 0);
    for i in 0..18 {
        let mut h = model;
        h.seq = 8_000 + i;
        feed(
            &mut net,
            &h,
            &vec![5; model.total_len.min(u32::from_be_bytes(model.message[..4].try_into().unwrap())) as usize],
        );
    }
    assert_eq!(net.stats(1).active_transfers, 16, "16 streams into the client's segment");
    assert_eq!(net.stats(1).malformed, malformed + 3, "the 17th and 18th dropped");

    // MoveFrom: the client's node would send out of the segment for each request.
    let mut net = Net::new(2);
    let (server, client) = exchange_with_segment(&mut net, 1 << 20, Access::READ_WRITE);
    let request = first_packet_of(&mut net, PacketType::MoveFromRequest);
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 0, 1 << 20).unwrap();
    net.settle();
    let model = vipc_wire::parse(&request.borrow().clone().unwrap(), None).unwrap().header;
    let malformed = net.stats(1).malformed;
    for i in 0..18 {
        let mut h = model;
        h.seq = 9_000 + i;
        feed(&mut net, &h, &[]);
    }
    assert_eq!(net.stats(1).active_transfers, 16, "16 streams out of the client's segment");
    assert_eq!(net.stats(1).malformed, malformed + 2, "the 17th and 18th dropped");
    // The segment checks come first: one outside the segment is refused with a NAck, as with no stream open.
    let nacks = net.stats(1).sent(PacketType::NAck);
    let mut h = model;
    h.seq = 9_100;
    h.local_addr = 1 << 20;
    feed(&mut net, &h, &[]);
    assert_eq!(net.stats(1).sent(PacketType::NAck), nacks + 1, "out of the segment: NAck");
    assert_eq!(net.stats(1).malformed, malformed + 2);
}

/// A MoveTo cut off by its mover's node restarting leaves a stream that
/// never finishes. The client's next exchange must not expect data where
/// that stream would have gone: the runtime receives the next datagram in
/// place there, in the new exchange's lent buffer, over data already placed
/// (a `vipc cp` across a server restart got 1,400-byte pieces of other
/// offsets).
#[test]
fn a_stream_of_an_ended_exchange_is_not_where_the_next_one_places() {
    let mut net = Net::new(2);
    let size = 200_000usize;
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.lent.insert((1, client), vec![0; size]);
    net.nodes[1].send_lending_write(now, client, server, msg(1), SendOptions::default(), size as u32).unwrap();
    net.settle();
    net.take_received(0, server);
    // Only the first data packet of the MoveTo arrives; then the server's node restarts.
    net.filter = Some(first_only(PacketType::MoveToData));
    let now = net.now;
    net.nodes[0].move_to(now, server, client, 0, pattern(size, 5)).unwrap();
    net.settle();
    let chunk = net.nodes[1].config().max_data();
    assert_eq!(net.nodes[1].next_placement(client), Some((chunk, chunk)), "the second chunk, after the first");
    net.filter = None;
    net.nodes[0] = Engine::new(Config { seed: 77, ..config(1) }, net.now);
    assert_eq!(net.proc(0), server, "the restarted node's first process has the old pid");
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.advance(Duration::from_millis(30)); // the client's Send is sent again, to the new node, which refuses it
    assert_eq!(net.take_send(1, client), Err(Error::ReceiverRestarted(server)));
    // The client's next exchange: none of its data came yet, so none is expected anywhere.
    let now = net.now;
    net.nodes[1].send_lending_write(now, client, server, msg(2), SendOptions::default(), size as u32).unwrap();
    assert_eq!(net.nodes[1].next_placement(client), None);
}

/// A hostile client's node that sends one fresh 64-byte chunk of a MoveFrom
/// (or acknowledges one more chunk of a MoveTo) just before each T_t makes
/// progress, so T_t alone would hold the mover for hours (1 MiB: 4.5 h).
/// The stream's cap fails it at T_t + 1 MiB / 256 KiB/s = 5 s.
#[test]
fn a_peer_dripping_chunks_or_acks_cannot_hold_a_mover_past_the_streams_cap() {
    use std::cell::Cell;
    use std::rc::Rc;
    const TOTAL: u32 = 1 << 20;
    for kind in [PacketType::MoveFromRequest, PacketType::MoveToData] {
        let mut net = Net::new(2);
        let client_life = Rc::new(Cell::new(0u16));
        let life = client_life.clone();
        net.filter = Some(Box::new(move |from, _, bytes| {
            if from == 1 {
                life.set(vipc_wire::parse(bytes, None).unwrap().header.incarnation);
            }
            1
        }));
        let (server, client) = exchange_with_segment(&mut net, TOTAL as usize, Access::READ_WRITE);
        let first = first_packet_of(&mut net, kind);
        let now = net.now;
        let started = now;
        if kind == PacketType::MoveFromRequest {
            net.nodes[0].move_from(now, server, client, 0, TOTAL).unwrap();
        } else {
            net.nodes[0].move_to(now, server, client, 0, vec![5; TOTAL as usize]).unwrap();
        }
        net.settle();
        let model = vipc_wire::parse(&first.borrow().clone().unwrap(), None).unwrap().header;
        let mut drip = 0u32;
        let failed_at = loop {
            net.advance(Duration::from_millis(900));
            if let Some(done) = net.take(0, server) {
                assert_eq!(done, Completion::Move(Err(Error::Timeout(client))), "{kind:?}");
                break net.now - started;
            }
            assert!(net.now - started < Duration::from_secs(30), "{kind:?}: still held after 30 s");
            let mut h = vipc_wire::Header::new(if kind == PacketType::MoveFromRequest {
                PacketType::MoveFromData
            } else {
                PacketType::MoveToAck
            });
            (h.incarnation, h.seq, h.src, h.dst, h.fwd) = (client_life.get(), model.seq, client, server, client);
            h.total_len = TOTAL;
            if kind == PacketType::MoveFromRequest {
                // Fresh chunk `drip` of 64 bytes.
                h.local_addr = model.local_addr;
                h.remote_addr = drip * 64;
                h.message[..4].copy_from_slice(&64u32.to_be_bytes());
                h.message[4..8].copy_from_slice(&model.message[4..8]);
                let packet = vipc_wire::to_vec(&h, &[9; 64], None);
                let now = net.now;
                net.nodes[0].handle_datagram(now, addr(1), &packet);
            } else {
                // One more chunk acknowledged.
                h.local_addr = drip + 1;
                let packet = vipc_wire::to_vec(&h, &[], None);
                let now = net.now;
                net.nodes[0].handle_datagram(now, addr(1), &packet);
            }
            drip += 1;
        };
        assert!(drip >= 4, "{kind:?}: the drip was taken as progress ({drip} drops)");
        assert!(
            (Duration::from_secs(5)..=Duration::from_millis(5_900)).contains(&failed_at),
            "{kind:?}: failed after {failed_at:?}, not at the 5 s cap (within one drip interval)"
        );
        assert_eq!(net.stats(0).slow_streams, 1, "{kind:?}");
        assert_eq!(net.stats(0).malformed, 0, "{kind:?}: the forged packets were valid");
    }
}

/// The client's node streams a MoveFrom to the request's source, so it
/// takes a request only from where the exchange's Send went: one forged by
/// a host that knows the exchange (here, with the real request's fields)
/// from another address gets nothing and is counted `stray`; the server's
/// own request is served as ever, also after a forged packet redirected
/// the client's retransmissions. (The first exchange with a host whose
/// address is not yet known goes to the broadcast channel, and leaves the
/// source unchecked: here node 1 has heard from node 0 before.)
#[test]
fn a_move_from_request_is_taken_only_from_where_the_send_went() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    complete_exchange(&mut net, server, client);
    let (server, client) = exchange_with_segment(&mut net, 1 << 20, Access::READ);
    let requests: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = requests.clone();
    net.filter = Some(Box::new(move |_, _, bytes: &[u8]| {
        if vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::MoveFromRequest) {
            seen.borrow_mut().push(bytes.to_vec());
            return 0; // the real requests are held back
        }
        1
    }));
    let now = net.now;
    net.nodes[0].move_from(now, server, client, 0, 1 << 20).unwrap();
    net.settle();
    let request = requests.borrow()[0].clone();

    // (A port the test network delivers to nobody.)
    let victim: std::net::SocketAddr = "192.0.2.7:9100".parse().unwrap();
    let stray = net.stats(1).stray;
    net.nodes[1].handle_datagram(now, victim, &request);
    let sent = std::iter::from_fn(|| net.nodes[1].poll_transmit()).count();
    assert_eq!((sent, net.stats(1).stray - stray), (0, 1), "nothing streamed to a forged source");
    // That forged packet also moved host 1 to the victim in node 1's
    // location cache: the client's retransmissions now go there. The
    // exchange still takes requests only from where its Send first went.
    net.advance(Duration::from_millis(30));
    assert!(net.stats(1).retransmissions > 0);
    net.nodes[1].handle_datagram(net.now, victim, &request);
    let sent = std::iter::from_fn(|| net.nodes[1].poll_transmit()).count();
    assert_eq!((sent, net.stats(1).stray - stray), (0, 2), "nor after the Send was redirected");

    net.filter = None;
    let now = net.now;
    net.nodes[1].handle_datagram(now, addr(0), &request);
    net.advance(Duration::from_millis(100));
    assert_eq!(net.take_move(0, server).unwrap(), pattern(1 << 20, 7), "the server's own request is served");
}

/// The receiver of the client's Send (a hostile server) opening tiny MoveTo
/// streams as fast as it can: each finishes at once and is kept for T_t
/// against late duplicates, so the finished ones were not capped (5,000
/// packets, 5,000 streams, each new one scanning them all). Now at most 256
/// finished ones per host and process.
#[test]
fn finished_move_to_streams_are_capped() {
    let mut net = Net::new(2);
    let (server, client, send) = served_send(&mut net, Some(Segment { data: vec![0; 1000], access: Access::WRITE }));
    let (now, exchange) = (net.now, seq_of(&send));
    for seq in 0..2_000u32 {
        let out = forge(PacketType::MoveToData, (1_000_000 + seq, server, client), &[5; 64], |h| {
            h.total_len = 64;
            h.message[0..4].copy_from_slice(&64u32.to_be_bytes());
            h.message[4..8].copy_from_slice(&exchange.to_be_bytes());
        });
        net.nodes[1].handle_datagram(now, addr(0), &out);
    }
    let kept = net.stats(1).active_transfers;
    assert!((200..=256 + 16).contains(&kept), "{kept} streams kept");
}

/// A MoveFromRequest of no bytes is never sent (such a MoveFrom completes
/// on the mover's node): it is malformed, not a stream that can only expire.
#[test]
fn a_move_from_request_of_nothing_is_malformed() {
    let mut net = Net::new(2);
    let (server, client, send) = served_send(&mut net, Some(Segment { data: vec![1; 1000], access: Access::READ }));
    let (now, exchange) = (net.now, seq_of(&send));
    let out = forge(PacketType::MoveFromRequest, (5, server, client), &[], |h| {
        h.message[4..8].copy_from_slice(&exchange.to_be_bytes());
    });
    let malformed = net.stats(1).malformed;
    net.nodes[1].handle_datagram(now, addr(0), &out);
    assert_eq!(net.stats(1).malformed, malformed + 1);
    assert_eq!(net.stats(1).active_transfers, 0);
}
