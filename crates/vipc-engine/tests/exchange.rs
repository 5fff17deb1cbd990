//! The rules of Send/Receive/Reply/Forward and of the reliable exchange protocol.

mod common;
use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

fn seg(data: &[u8], access: Access) -> Option<Segment> {
    Some(Segment { data: data.to_vec(), access })
}

#[test]
fn remote_exchange_is_two_packets() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    // Teach node 1 where host 1 is, so the send is unicast, then count.
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!((r.from, r.forwarder, r.msg), (client, client, msg(1)));
    net.sent = 0;
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    let out = net.take_send(1, client).unwrap();
    assert_eq!((out.reply, out.replier), (msg(2), server));
    assert_eq!(net.sent, 1, "the reply is the only packet after the send");
    // A second exchange, host now cached: exactly 2 packets.
    net.sent = 0;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(4), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(4));
    assert_eq!(net.sent, 2);
    assert_eq!(net.stats(1).sent(PacketType::Send), 2);
}

#[test]
fn page_write_and_page_read_are_two_packets_each() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let page: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
    // Warm the location cache.
    net.nodes[1].send(now, client, server, msg(0), SendOptions::default(), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(0), None).unwrap();
    net.settle();
    net.take_send(1, client).unwrap();

    // Page write: the page rides in the Send; the receiver gets it in the same call.
    net.sent = 0;
    net.nodes[0].receive(now, server, None, 4096).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(&page, Access::READ)).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!(r.segment, page);
    assert_eq!((r.segment_size, r.access), (512, Access::READ));
    net.nodes[0].reply(now, server, client, msg(1), None).unwrap();
    net.settle();
    net.take_send(1, client).unwrap();
    assert_eq!(net.sent, 2);

    // Page read: the page rides in the Reply into the write-granted segment.
    net.sent = 0;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(2), SendOptions::default(), seg(&[0; 512], Access::WRITE)).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), Some((0, page.clone()))).unwrap();
    net.settle();
    let out = net.take_send(1, client).unwrap();
    assert_eq!(out.segment.unwrap().data, page);
    assert_eq!(net.sent, 2);
}

/// A page of `len` bytes written in a Send, then read back in a Reply, to a
/// peer whose location is known: returns the bytes that rode in the Send and
/// the outcome of the reply with the page (packets counted in `net.sent`).
fn page_write_then_read(net: &mut Net, len: usize) -> (usize, Result<(), Error>) {
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let page: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    // Warm the location cache: a Send to an unknown host is broadcast, with max_data appended.
    net.nodes[1].send(now, client, server, msg(0), SendOptions::default(), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(0), None).unwrap();
    net.settle();
    net.take_send(1, client).unwrap();
    net.sent = 0;
    net.nodes[0].receive(now, server, None, len).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(&page, Access::READ)).unwrap();
    net.settle();
    let got = net.take_received(0, server).segment;
    assert!(page.starts_with(&got), "the appended part is the start of the page");
    net.nodes[0].reply(now, server, client, msg(1), None).unwrap();
    net.settle();
    net.take_send(1, client).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(2), SendOptions::default(), seg(&vec![0; len], Access::WRITE)).unwrap();
    net.settle();
    net.take_received(0, server);
    let replied = net.nodes[0].reply(now, server, client, msg(2), Some((0, page.clone())));
    if replied.is_err() {
        net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    }
    net.settle();
    let out = net.take_send(1, client).unwrap();
    if replied.is_ok() {
        assert!(out.segment.unwrap().data == page, "the whole page rides in the Reply");
    }
    (got.len(), replied)
}

#[test]
fn segments_in_one_packet_are_as_large_as_the_path_allows() {
    // Loopback peers: an 8 KB page travels in one packet each way.
    let mut net = Net::with(2, |c| c.loopback_packet = Some(vipc_wire::MAX_DATAGRAM));
    assert_eq!(page_write_then_read(&mut net, 8192).0, 8192);
    assert_eq!(net.sent, 4, "2 packets per page write and per page read");
    assert_eq!(net.nodes[0].config().data_to(addr(1)), vipc_wire::MAX_DATA);
    // Without a loopback limit, max_packet (1472) holds: 1400 data bytes.
    let mut net = Net::new(2);
    let max = net.nodes[0].config().max_data();
    let (appended, replied) = page_write_then_read(&mut net, max);
    assert_eq!((appended, net.sent), (max, 4));
    replied.unwrap();
    let (appended, replied) = page_write_then_read(&mut net, max + 1);
    assert_eq!(appended, max, "the rest is left for MoveFrom");
    let e = replied.unwrap_err();
    assert!(matches!(e, Error::TooLarge { len, limit, .. } if len == max as u64 + 1 && limit == max as u64), "{e:?}");
}

#[test]
fn appended_data_is_buffered_for_a_receiver_not_yet_waiting() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(b"hello", Access::READ)).unwrap();
    net.settle();
    net.nodes[0].receive(now, server, None, 3).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!(r.segment, b"hel", "truncated to the receiver's capacity");
    assert_eq!(r.segment_size, 5);
}

#[test]
fn appended_data_beyond_the_buffer_limit_is_dropped_but_the_message_kept() {
    let mut net = Net::with(2, |c| c.buffer_limit = 100);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(&[9; 400], Access::READ)).unwrap();
    net.settle();
    net.nodes[0].receive(now, server, None, 1000).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!((r.msg, r.segment.len(), r.segment_size), (msg(1), 0, 400));
    assert_eq!(net.stats(0).appended_dropped, 1);
    // The receiver can still fetch it with MoveFrom.
    net.nodes[0].move_from(now, server, client, 0, 400).unwrap();
    net.settle();
    assert_eq!(net.take_move(0, server).unwrap(), vec![9; 400]);
}

#[test]
fn local_rules_match_remote_rules() {
    let mut net = Net::new(1);
    let (a, b, c) = (net.proc(0), net.proc(0), net.proc(0));
    let now = net.now;
    let e = &mut net.nodes[0];
    assert_eq!(e.send(now, a, a, msg(0), SendOptions::default(), None), Err(Error::SendToSelf));
    assert_eq!(e.send(now, a, Pid::NONE, msg(0), SendOptions::default(), None), Err(Error::NullPid));
    assert_eq!(
        e.send(now, a, Pid(0x8000_0001), msg(0), SendOptions::default(), None),
        Err(Error::GroupId(Pid(0x8000_0001)))
    );
    assert_eq!(
        e.send(now, a, Pid::new(1, 999), msg(0), SendOptions::default(), None),
        Err(Error::NoSuchProcess(Pid::new(1, 999)))
    );
    assert_eq!(e.reply(now, b, a, msg(0), None), Err(Error::NotAwaitingReply(a)));
    e.send(now, a, b, msg(1), SendOptions::default(), seg(&[1, 2, 3, 4], Access::READ)).unwrap();
    assert_eq!(e.send(now, a, c, msg(0), SendOptions::default(), None), Err(Error::Busy(a)));
    // c is not the receiver: it may not reply, move or forward.
    assert_eq!(e.reply(now, c, a, msg(0), None), Err(Error::NotAwaitingReply(a)));
    e.receive(now, b, None, 2).unwrap();
    net.settle();
    let r = net.take_received(0, b);
    assert_eq!(r.segment, vec![1, 2]);
    let e = &mut net.nodes[0];
    assert_eq!(e.move_from(now, c, a, 0, 1), Err(Error::NotAwaitingReply(a)));
    assert_eq!(e.move_to(now, b, a, 0, vec![0]), Err(Error::NoAccess("write")));
    assert_eq!(e.move_from(now, b, a, 2, 3), Err(Error::OutOfSegment { offset: 2, len: 3, size: 4 }));
    assert_eq!(e.reply(now, b, a, msg(0), Some((0, vec![1]))), Err(Error::NoAccess("write")));
    e.move_from(now, b, a, 1, 3).unwrap();
    net.settle();
    assert_eq!(net.take_move(0, b).unwrap(), vec![2, 3, 4]);
    net.nodes[0].reply(now, b, a, msg(5), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(0, a).unwrap().reply, msg(5));
    assert_eq!(net.nodes[0].reply(now, b, a, msg(0), None), Err(Error::NotAwaitingReply(a)), "only one reply");
}

#[test]
fn receive_specific_waits_for_that_sender_only() {
    let mut net = Net::new(2);
    let (server, c1, c2) = (net.proc(0), net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].send(now, c1, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[1].send(now, c2, server, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    net.nodes[0].receive(now, server, Some(c2), 0).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).from, c2);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).from, c1);
    assert_eq!(net.nodes[0].receive(now, c1, Some(Pid::new(1, 77)), 0), Err(Error::Busy(c1)));
}

#[test]
fn send_to_a_missing_remote_process_is_nacked_at_once() {
    let mut net = Net::new(2);
    let client = net.proc(1);
    let now = net.now;
    net.nodes[1].send(now, client, Pid::new(1, 500), msg(0), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client), Err(Error::NoSuchProcess(Pid::new(1, 500))));
}

#[test]
fn a_dead_host_times_out_after_t_t_with_retransmissions() {
    let mut net = Net::new(2);
    let client = net.proc(1);
    net.filter = Some(Box::new(|_, _, _| 0)); // the network eats everything
    let now = net.now;
    net.nodes[1].send(now, client, Pid::new(1, 1), msg(0), SendOptions::default(), None).unwrap();
    net.advance(Duration::from_millis(990));
    assert!(net.take(1, client).is_none(), "not before T_t");
    net.advance(Duration::from_millis(20));
    assert_eq!(net.take_send(1, client), Err(Error::Timeout(Pid::new(1, 1))));
    let s = net.stats(1);
    assert_eq!(s.retransmissions, 49, "retransmitted every T_r until T_t: at 20, 40, …, 980 ms");
    assert_eq!(s.active_exchanges, 0);
}

#[test]
fn reply_pending_keeps_a_long_request_alive() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(0, server);
    net.advance(Duration::from_secs(5)); // five times T_t
    assert!(net.take(1, client).is_none(), "still waiting, not timed out");
    assert!(net.stats(0).sent(PacketType::ReplyPending) > 100);
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
}

#[test]
fn lost_reply_is_resent_from_the_cache_not_re_executed() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let mut replies_dropped = 0;
    net.filter = Some(Box::new(move |from, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        if from == 0 && t == PacketType::Reply && replies_dropped < 1 {
            replies_dropped += 1;
            0
        } else {
            1
        }
    }));
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.advance(Duration::from_millis(100));
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
    assert!(net.take(0, server).is_none(), "the server did not see the request twice");
    assert_eq!(net.stats(0).replies_resent, 1);
    // The sender's next message frees the cached reply.
    assert_eq!(net.stats(0).active_aliens, 1);
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(3));
    assert_eq!(net.stats(0).active_aliens, 1, "the new exchange replaced the cached reply");
}

#[test]
fn idempotent_request_is_re_executed_when_its_reply_is_lost() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let mut dropped = false;
    net.filter = Some(Box::new(move |from, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        if from == 0 && t == PacketType::Reply && !dropped {
            dropped = true;
            0
        } else {
            1
        }
    }));
    let opts = SendOptions { idempotent: true };
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), opts, None).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    assert_eq!(net.stats(0).active_aliens, 1);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.advance(Duration::from_millis(30));
    assert_eq!(net.take_received(0, server).msg, msg(1), "executed again");
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(3), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(3));
}

#[test]
fn duplicated_sends_reach_the_receiver_once() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    net.filter = Some(Box::new(|_, _, _| 3));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, server).is_none());
    assert!(net.stats(0).duplicates >= 2);
}

#[test]
fn forward_within_a_node_and_across_nodes() {
    let mut net = Net::new(3);
    let (client, fwd, local_target, remote_target) = (net.proc(0), net.proc(1), net.proc(1), net.proc(2));
    let now = net.now;
    for (i, p) in [(1, fwd), (1, local_target), (2, remote_target)] {
        net.nodes[i].receive(now, p, None, 0).unwrap();
    }
    net.nodes[0].send(now, client, fwd, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(1, fwd);
    net.nodes[1].forward(now, fwd, client, local_target, msg(2)).unwrap();
    net.settle();
    let r = net.take_received(1, local_target);
    assert_eq!((r.from, r.forwarder, r.msg), (client, fwd, msg(2)));
    assert_eq!(net.nodes[1].reply(now, fwd, client, msg(0), None), Err(Error::NotAwaitingReply(client)));
    net.nodes[1].forward(now, local_target, client, remote_target, msg(3)).unwrap();
    net.settle();
    let r = net.take_received(2, remote_target);
    assert_eq!((r.from, r.forwarder, r.msg), (client, local_target, msg(3)));
    net.nodes[2].reply(now, remote_target, client, msg(4), None).unwrap();
    net.settle();
    let out = net.take_send(0, client).unwrap();
    assert_eq!((out.reply, out.replier), (msg(4), remote_target));
    // Retransmissions of the old exchange are answered without re-delivery.
    net.advance(Duration::from_millis(100));
    assert!(net.events.iter().all(|(_, e)| !matches!(e, Event::Wake { .. })));
}

#[test]
fn a_forward_to_nobody_to_a_group_or_to_the_sender_leaves_the_send_bound_for_its_receiver() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let headers: Rc<RefCell<Vec<vipc_wire::Header>>> = Rc::default();
    let seen = headers.clone();
    net.filter = Some(Box::new(move |_, _, bytes| {
        seen.borrow_mut().push(vipc_wire::parse(bytes, None).unwrap().header);
        1
    }));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    // A retransmission draws the server node's ReplyPending (and with it its incarnation).
    net.advance(Duration::from_millis(30));
    let of = |t: PacketType| headers.borrow().iter().find(|h| h.ptype == t).copied().expect("seen");
    let (send, pending) = (of(PacketType::Send), of(PacketType::ReplyPending));
    let now = net.now;
    for fwd in [Pid::NONE, Pid::new(0x8000 | 7, 1), client] {
        // As if the server's node had forwarded the Send to `fwd`.
        let mut h = vipc_wire::Header::new(PacketType::Forward);
        (h.incarnation, h.seq, h.src, h.dst, h.fwd) = (pending.incarnation, send.seq, server, client, fwd);
        let bytes = vipc_wire::to_vec(&h, &[], None);
        net.nodes[1].handle_datagram(now, addr(0), &bytes);
        net.settle();
    }
    assert!(net.stats(1).stray >= 3, "all three dropped");
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!((r.from, r.msg), (client, msg(1)), "the Send still reaches its receiver, unchanged");
    net.nodes[0].reply(net.now, server, client, msg(4), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().replier, server);
}

#[test]
fn a_lost_forward_packet_is_recovered() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut net = Net::new(3);
    let (client, fwd, target) = (net.proc(0), net.proc(1), net.proc(2));
    let forwards: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = forwards.clone();
    net.filter = Some(Box::new(move |_, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        if t == PacketType::Forward {
            seen.borrow_mut().push(bytes.to_vec());
            return usize::from(seen.borrow().len() > 1); // the first is lost
        }
        1
    }));
    let now = net.now;
    net.nodes[1].receive(now, fwd, None, 0).unwrap();
    net.nodes[2].receive(now, target, None, 0).unwrap();
    net.nodes[0].send(now, client, fwd, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(1, fwd);
    net.nodes[1].forward(now, fwd, client, target, msg(2)).unwrap();
    net.advance(Duration::from_millis(50));
    let r = net.take_received(2, target);
    assert_eq!((r.forwarder, r.msg), (fwd, msg(2)));
    let forwards = forwards.borrow();
    assert_eq!(forwards.len(), 2, "lost once, resent to the client's retransmission");
    assert_eq!(forwards[0], forwards[1], "encoded again byte for byte");
}

#[test]
fn destroying_a_receiver_fails_its_senders_at_once() {
    let mut net = Net::new(2);
    let (server, local_client, remote_client) = (net.proc(0), net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].send(now, local_client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[1].send(now, remote_client, server, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    net.nodes[0].destroy_process(now, server).unwrap();
    net.settle();
    assert_eq!(net.take_send(0, local_client), Err(Error::NoSuchProcess(server)));
    assert_eq!(net.take_send(1, remote_client), Err(Error::NoSuchProcess(server)));
    net.advance(Duration::from_millis(2100));
    assert_eq!(net.stats(0).active_aliens, 0, "the tombstone expires after 2 T_t");
    assert_eq!(net.nodes[0].destroy_process(now, server), Err(Error::NotLocalProcess(server)));
    assert_eq!(net.nodes[0].receive(now, server, None, 0), Err(Error::NotLocalProcess(server)));
}

#[test]
fn destroying_a_remote_sender_cancels_its_alien() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.stats(0).active_aliens, 1);
    net.nodes[1].destroy_process(now, client).unwrap();
    net.settle();
    assert_eq!(net.stats(1).active_exchanges, 0);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, server).is_none(), "the cancelled message is not delivered");
    net.advance(Duration::from_millis(2100));
    assert_eq!(net.stats(0).active_aliens, 0, "the tombstone expires after 2 T_t");
}

/// Bug B3 of the simulator: once a sender's newer Send was refused (nAck), a
/// late retransmission of its previous, already executed request must still
/// be recognised as stale and not executed again.
#[test]
fn a_late_duplicate_after_a_refused_send_is_not_executed_again() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let captured = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let keep = captured.clone();
    net.filter = Some(Box::new(move |_, _, bytes| {
        if vipc_wire::parse(bytes, None).unwrap().header.ptype == PacketType::Send && keep.borrow().is_empty() {
            *keep.borrow_mut() = bytes.to_vec();
        }
        1
    }));
    complete_exchange(&mut net, server, client);
    let now = net.now;
    net.nodes[1].send(now, client, Pid::new(1, 999), msg(3), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client), Err(Error::NoSuchProcess(Pid::new(1, 999))));
    net.nodes[0].receive(now, server, None, 0).unwrap();
    let late = captured.borrow().clone();
    net.nodes[0].handle_datagram(now, addr(1), &late);
    net.settle();
    assert!(net.take(0, server).is_none(), "the old request ran a second time");
}

#[test]
fn silent_senders_aliens_expire_after_t_t() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.filter = Some(Box::new(|_, _, _| 0)); // partition: the sender falls silent
    net.advance(Duration::from_millis(2100));
    assert_eq!(net.stats(0).active_aliens, 0);
    assert_eq!(net.take_send(1, client), Err(Error::Timeout(server)));
    assert_eq!(net.stats(1).active_exchanges, 0);
}

#[test]
fn get_pid_by_scope() {
    let mut net = Net::new(3);
    let (svc, asker0, asker1) = (net.proc(0), net.proc(0), net.proc(1));
    let now = net.now;
    assert_eq!(net.nodes[0].set_pid(b"", svc, Scope::Any), Err(Error::BadName));
    assert_eq!(net.nodes[0].set_pid(&[b'x'; 33], svc, Scope::Any), Err(Error::BadName));
    net.nodes[0].set_pid(b"files", svc, Scope::Any).unwrap();
    net.nodes[0].set_pid(b"private", svc, Scope::Local).unwrap();
    net.nodes[0].set_pid(b"public", svc, Scope::Remote).unwrap();
    let ask = |net: &mut Net, i: usize, p: Pid, name: &[u8], scope| {
        let now = net.now;
        net.nodes[i].get_pid(now, p, name, scope).unwrap();
        net.advance(Duration::from_millis(400));
        match net.take(i, p) {
            Some(Completion::GetPid(r)) => r,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(ask(&mut net, 0, asker0, b"files", Scope::Local), Some(svc));
    assert_eq!(ask(&mut net, 0, asker0, b"public", Scope::Local), None, "local lookups ignore remote-only entries");
    assert_eq!(ask(&mut net, 1, asker1, b"files", Scope::Any), Some(svc));
    assert_eq!(ask(&mut net, 1, asker1, b"public", Scope::Remote), Some(svc));
    assert_eq!(ask(&mut net, 1, asker1, b"private", Scope::Any), None, "local-scope entries are not answered remotely");
    assert_eq!(ask(&mut net, 1, asker1, b"nothing", Scope::Remote), None);
    net.nodes[0].destroy_process(now, svc).unwrap();
    assert_eq!(ask(&mut net, 1, asker1, b"files", Scope::Any), None, "dead processes are not answered");
}

/// A server claims its name: refused while another live process holds
/// it (set_pid would take it over), granted again once that one is gone.
#[test]
fn claim_name_refuses_a_live_holder() {
    let mut net = Net::new(1);
    let (first, second) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].claim_name(b"pipe:p", first, Scope::Any).unwrap();
    net.nodes[0].claim_name(b"pipe:p", first, Scope::Any).unwrap(); // its own: fine
    assert_eq!(net.nodes[0].claim_name(b"pipe:p", second, Scope::Any), Err(Error::NameTaken(first)));
    assert_eq!(net.nodes[0].claim_name(b"", second, Scope::Any), Err(Error::BadName));
    net.nodes[0].destroy_process(now, first).unwrap();
    net.nodes[0].claim_name(b"pipe:p", second, Scope::Any).unwrap();
    assert_eq!(net.nodes[0].registered(b"pipe:p", true), Some(second));
    // The first one's late unregistration leaves the second's name alone.
    assert!(!net.nodes[0].unset_pid(b"pipe:p", first));
    assert_eq!(net.nodes[0].registered(b"pipe:p", true), Some(second));
}

#[test]
fn host_allocation_avoids_ids_in_use() {
    // Node 0 holds id 1; a newcomer whose generator first proposes some id is
    // told off if that id is taken. Force the clash by giving node 0 every id
    // the newcomer could draw first: run many seeds and check all end distinct.
    for seed in 0..50u64 {
        let mut probe =
            Engine::new(Config { seed, host_alloc_wait: Duration::from_millis(100), ..Config::default() }, Time::ZERO);
        probe.handle_timeout(Time::ZERO);
        let first = match probe.poll_transmit() {
            Some(t) => vipc_wire::parse(&t.bytes, None).unwrap().header.src.host(),
            None => panic!("no announcement"),
        };
        let mut net = Net::with(1, |c| c.host_id = HostIdConfig::Fixed(first));
        net.nodes.push(Engine::new(
            Config { seed, host_alloc_wait: Duration::from_millis(100), ..Config::default() },
            net.now,
        ));
        net.advance(Duration::from_millis(400));
        let got = net.nodes[1].host().expect("allocated");
        assert_ne!(got, first, "seed {seed}: took an id in use");
        assert!(net.events.iter().any(|(i, e)| *i == 1 && *e == Event::HostReady(got)));
    }
}

#[test]
fn duplicate_fixed_host_id_is_reported() {
    let mut net = Net::with(2, |c| c.host_id = HostIdConfig::Fixed(7));
    net.nodes[1] = Engine::new(Config { host_id: HostIdConfig::Fixed(7), seed: 99, ..Config::default() }, net.now);
    net.advance(Duration::from_millis(600));
    assert!(
        net.events.iter().any(|(i, e)| *i == 1 && matches!(e, Event::HostConflict { host: 7, .. })),
        "{:?}",
        net.events
    );
}

#[test]
fn keyed_cluster_drops_unauthenticated_packets() {
    let key = AuthKey::from_bytes([5; 32]);
    let mut net = Net::with(2, |c| c.key = Some(key.clone()));
    net.nodes[1] = Engine::new(
        Config { host_id: HostIdConfig::Fixed(2), key: Some(AuthKey::from_bytes([6; 32])), ..Config::default() },
        net.now,
    );
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.advance(Duration::from_millis(1100));
    assert!(net.take(0, server).is_none(), "the wrong key made nothing happen");
    assert_eq!(net.take_send(1, client), Err(Error::Timeout(server)));
    assert!(net.stats(0).mac_failures > 10);
}

#[test]
fn garbage_is_counted_not_obeyed() {
    let mut net = Net::new(1);
    let now = net.now;
    let e = &mut net.nodes[0];
    e.handle_datagram(now, addr(5), b"");
    e.handle_datagram(now, addr(5), &[0xff; 100]);
    let mut v2 = vipc_wire::to_vec(&vipc_wire::Header::new(PacketType::Send), &[], None);
    v2[2] = 2;
    e.handle_datagram(now, addr(5), &v2);
    e.handle_datagram(now, addr(6), &v2);
    let s = e.stats();
    assert_eq!((s.malformed, s.bad_version), (2, 2));
    let mismatches = std::iter::from_fn(|| e.poll_event())
        .filter(|e| matches!(e, Event::VersionMismatch { version: 2, .. }))
        .count();
    assert_eq!(mismatches, 2, "reported once per address");
    assert!(e.poll_transmit().is_none());
}

/// Exchange timers reuse a pending heap entry of the same process (one
/// per exchange would pile up): the entry of an earlier exchange fires early
/// for the current one, which re-arms, and its retransmission still comes
/// exactly T_r after its Send.
#[test]
fn a_later_exchange_still_retransmits_t_r_after_its_send() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    complete_exchange(&mut net, server, client);
    net.advance(Duration::from_millis(5));
    net.filter = Some(Box::new(|_, _, _| 0)); // the second Send is lost, and every resend
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    net.advance(Duration::from_millis(19)); // t = 24 ms: the first exchange's entry (20 ms) has fired
    assert_eq!(net.stats(1).retransmissions, 0, "nothing before T_r after the second Send");
    net.advance(Duration::from_millis(2)); // t = 26 ms
    assert_eq!(net.stats(1).retransmissions, 1, "one resend at 25 ms");
    net.advance(Duration::from_millis(20));
    assert_eq!(net.stats(1).retransmissions, 2, "and every T_r after");
}

/// Small packets are built in buffers the runtime handed back (a malloc
/// and a free per packet were a tenth of a small exchange's engine cost);
/// a buffer too small to be worth keeping is not reused.
#[test]
fn small_packets_are_encoded_into_recycled_buffers() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].recycle(Vec::with_capacity(100));
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    let first = net.nodes[1].poll_transmit().expect("the Send");
    assert!(first.bytes.capacity() >= 512, "not the 100-byte buffer: a fresh one of the pool's size");
    net.nodes[0].handle_datagram(now, addr(1), &first.bytes);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
    // A capacity no fresh buffer has: the next small packet shows where it was built.
    let spare = Vec::with_capacity(1000);
    let at = spare.as_ptr();
    net.nodes[1].recycle(spare);
    net.nodes[1].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    let second = net.nodes[1].poll_transmit().expect("the second Send");
    assert_eq!((second.bytes.as_ptr(), second.bytes.capacity()), (at, 1000), "built in the buffer handed back");
}

/// A sender's next exchange takes its previous one's place in a full alien
/// table (which it leaves as full as it was), while a new sender waits.
#[test]
fn a_full_alien_table_still_takes_a_known_senders_next_exchange() {
    let mut net = Net::with(3, |c| c.max_aliens = 1);
    let (server, a, b) = (net.proc(0), net.proc(1), net.proc(2));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, a, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(1));
    net.nodes[0].reply(now, server, a, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, a).unwrap().reply, msg(2));
    // The table holds a's cached reply: b is told to wait, a's next Send is taken.
    net.nodes[2].send(now, b, server, msg(3), SendOptions::default(), None).unwrap();
    net.settle();
    assert!(net.stats(0).sent(PacketType::ReplyPending) >= 1, "b waits: no room");
    net.nodes[1].send(now, a, server, msg(4), SendOptions::default(), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    let r = net.take_received(0, server);
    assert_eq!((r.from, r.msg), (a, msg(4)));
}

/// A full alien table makes room for a new sender by dropping the record of
/// a finished exchange (here a Send refused for want of its receiver) that
/// has been quiet for T_r; one heard within T_r, or one holding a reply, is kept.
#[test]
fn a_full_alien_table_drops_a_quiet_refused_exchange_for_a_new_sender() {
    let mut net = Net::with(4, |c| c.max_aliens = 2);
    let (server, b, a, c) = (net.proc(0), net.proc(1), net.proc(2), net.proc(3));
    let nobody = Pid::new(server.host(), 999);
    let now = net.now;
    // a's Send is refused (no such process): the table keeps its tombstone.
    net.nodes[2].send(now, a, nobody, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(2, a), Err(Error::NoSuchProcess(nobody)));
    // b's request is taken and replied: the table keeps the reply.
    complete_exchange(&mut net, server, b);
    assert_eq!(net.stats(0).active_aliens, 2, "full");
    // Within T_r of the refusal c must wait; after it, a's tombstone makes room.
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[3].send(now, c, server, msg(4), SendOptions::default(), None).unwrap();
    net.settle();
    assert!(net.take(0, server).is_none(), "a's refusal was too recent to forget");
    assert_eq!(net.stats(0).aliens_evicted, 0);
    net.advance(Duration::from_millis(25)); // c retransmits after T_r
    let r = net.take_received(0, server);
    assert_eq!((r.from, r.msg), (c, msg(4)));
    assert_eq!(net.stats(0).aliens_evicted, 1);
    assert_eq!(net.stats(0).active_aliens, 2, "b's reply is still kept");
}

/// The server keeps a reply's header and segment data, not its packet: the
/// Reply resent to a duplicate Send is encoded again, byte for byte the
/// packet that was lost, segment data included.
#[test]
fn a_resent_reply_is_the_lost_packet_byte_for_byte() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let replies: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = replies.clone();
    net.filter = Some(Box::new(move |from, _, bytes| {
        let t = vipc_wire::parse(bytes, None).unwrap().header.ptype;
        if from == 0 && t == PacketType::Reply {
            seen.borrow_mut().push(bytes.to_vec());
            return usize::from(seen.borrow().len() > 1); // the first is lost
        }
        1
    }));
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(&[0; 64], Access::WRITE)).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), Some((8, vec![7; 40]))).unwrap();
    net.advance(Duration::from_millis(100));
    let out = net.take_send(1, client).unwrap();
    assert_eq!(out.reply, msg(2));
    let data = out.segment.expect("the segment comes back").data;
    assert!(data[8..48].iter().all(|b| *b == 7) && data[..8].iter().all(|b| *b == 0));
    let replies = replies.borrow();
    assert_eq!(replies.len(), 2, "lost once, resent once");
    assert_eq!(replies[0], replies[1]);
    assert_eq!(net.stats(0).replies_resent, 1);
}

/// ReceiveSpecific from itself is refused (it would wait for ever, as a
/// Send to itself would), and one from a local process ends when that
/// process is destroyed (it waited for ever).
#[test]
fn a_receive_from_itself_is_refused_and_one_from_a_process_that_dies_ends() {
    let mut net = Net::new(1);
    let (a, b) = (net.proc(0), net.proc(0));
    let now = net.now;
    assert_eq!(net.nodes[0].receive(now, a, Some(a), 0), Err(Error::ReceiveFromSelf));
    net.nodes[0].receive(now, a, Some(b), 0).unwrap();
    net.nodes[0].destroy_process(now, b).unwrap();
    net.settle();
    assert!(matches!(net.take(0, a), Some(Completion::Receive(Err(Error::NoSuchProcess(p)))) if p == b));
    net.nodes[0].receive(now, a, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, a).is_none(), "a plain Receive still waits");
}

/// UnsetPid removes a name only if it is still the caller's: a server that
/// stops leaves the name a newer one took over.
#[test]
fn unset_pid_removes_only_ones_own_registration() {
    let mut net = Net::new(1);
    let (old, new) = (net.proc(0), net.proc(0));
    let e = &mut net.nodes[0];
    e.set_pid(b"svc", old, Scope::Any).unwrap();
    e.set_pid(b"svc", new, Scope::Any).unwrap();
    assert!(!e.unset_pid(b"svc", old), "no longer the old one's");
    assert_eq!(e.registered(b"svc", false), Some(new));
    assert!(e.unset_pid(b"svc", new));
    assert_eq!(e.registered(b"svc", false), None);
}

/// ReplyRoom: what a Reply to the sender may carry in its packet — a
/// packet's data to a remote node (1,400 bytes by default), a loopback
/// packet's to a local sender, nothing to one that awaits no reply here.
#[test]
fn reply_room_is_what_the_reply_packet_to_the_sender_can_carry() {
    let mut net = Net::new(2);
    let (server, local, remote) = (net.proc(0), net.proc(0), net.proc(1));
    let now = net.now;
    assert_eq!(net.nodes[0].reply_room(remote), 0, "awaits nothing yet");
    net.nodes[1].send(now, remote, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).from, remote);
    assert_eq!(net.nodes[0].reply_room(remote), 1_400);
    net.nodes[0].send(now, local, server, msg(2), SendOptions::default(), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).from, local);
    assert_eq!(net.nodes[0].reply_room(local), Config::default().local_data());
}

/// Node 0 (host 1) restarts: a fresh engine with the same host id and another incarnation.
fn restart_node_0(net: &mut Net) {
    net.nodes[0] = Engine::new(Config { seed: 77, ..config(1) }, net.now);
}

/// A client on node 1 sends a non-idempotent request to a server on node 0,
/// which takes it and is still working on it. With `known`, the two nodes
/// exchanged a message before, so the client knows the server's incarnation
/// from the start.
fn request_in_progress(net: &mut Net, known: bool, opts: SendOptions) -> (Pid, Pid) {
    let (server, client) = (net.proc(0), net.proc(1));
    if known {
        complete_exchange(net, server, client);
    }
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(2), opts, None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(2));
    (server, client)
}

/// The restarted node's server replies msg(`b`): the client has it, and the
/// new life refused nothing.
fn replied_without_refusal(net: &mut Net, server: Pid, client: Pid, b: u8) {
    let now = net.now;
    net.nodes[0].reply(now, server, client, msg(b), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(b));
    assert_eq!(net.stats(0).restart_refusals, 0);
}

/// The restarted node's server waits for requests again: it must get none.
fn restarted_server_waits(net: &mut Net, server: Pid) {
    restart_node_0(net);
    assert_eq!(net.proc(0), server, "the restarted node's first process has the old pid");
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
}

#[test]
fn a_request_taken_by_a_receiver_that_restarts_is_not_carried_out_again() {
    // The node restarts before the client heard anything of this exchange:
    // the client knew the receiver's incarnation from its earlier traffic.
    let mut net = Net::new(2);
    let (server, client) = request_in_progress(&mut net, true, SendOptions::default());
    restarted_server_waits(&mut net, server);
    net.advance(Duration::from_millis(30)); // one retransmission
    assert_eq!(net.take_send(1, client), Err(Error::ReceiverRestarted(server)));
    assert!(net.take(0, server).is_none(), "the new life did not take the request");
    assert_eq!(net.stats(0).restart_refusals, 1);
}

#[test]
fn the_receiver_incarnation_is_learned_from_reply_pending() {
    // No traffic before: the first Send went out on the broadcast channel,
    // and its early ReplyPending is lost: the client learns who took it from
    // the ReplyPending to a retransmission.
    let mut net = Net::new(2);
    let mut lost = false;
    net.filter = Some(Box::new(move |from, _, bytes: &[u8]| {
        let pending = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::ReplyPending);
        let drop = from == 0 && pending && !lost;
        lost |= drop;
        usize::from(!drop)
    }));
    let (server, client) = request_in_progress(&mut net, false, SendOptions::default());
    assert_eq!(net.stats(1).received(PacketType::ReplyPending), 0, "the early one lost");
    net.advance(Duration::from_millis(50));
    assert!(net.stats(1).received(PacketType::ReplyPending) >= 1);
    assert!(net.take(1, client).is_none(), "still waiting");
    restarted_server_waits(&mut net, server);
    net.advance(Duration::from_millis(30));
    assert_eq!(net.take_send(1, client), Err(Error::ReceiverRestarted(server)));
    assert!(net.take(0, server).is_none(), "the new life did not take the request");
}

#[test]
fn a_request_sent_on_the_broadcast_channel_learns_its_receiver_at_once() {
    // No traffic before, and the node restarts before any retransmission:
    // the ReplyPending that answered the first transmission (EARLY_PENDING) named
    // the life that took it. Without it the client would name the first
    // life it heard of since, here the new one, which would take it again.
    let mut net = Net::new(2);
    let (server, client) = request_in_progress(&mut net, false, SendOptions::default());
    assert_eq!(net.stats(1).received(PacketType::ReplyPending), 1, "answered at once");
    restarted_server_waits(&mut net, server);
    net.advance(Duration::from_millis(30));
    assert_eq!(net.take_send(1, client), Err(Error::ReceiverRestarted(server)));
    assert!(net.take(0, server).is_none(), "the new life did not take the request");
    // An idempotent request, or one whose receiver's address is known, gets no early ReplyPending.
    let mut net = Net::new(2);
    request_in_progress(&mut net, false, SendOptions { idempotent: true });
    assert_eq!(net.stats(1).received(PacketType::ReplyPending), 0);
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    complete_exchange(&mut net, server, client); // itself broadcast, and answered at once
    let before = net.stats(1).received(PacketType::ReplyPending);
    assert_eq!(before, 1);
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(2));
    assert_eq!(net.stats(1).received(PacketType::ReplyPending), before, "sent to the known address");
}

#[test]
fn an_idempotent_request_is_carried_out_again_by_a_restarted_receiver() {
    let mut net = Net::new(2);
    let (server, client) = request_in_progress(&mut net, true, SendOptions { idempotent: true });
    restarted_server_waits(&mut net, server);
    net.advance(Duration::from_millis(30));
    assert_eq!(net.take_received(0, server).msg, msg(2), "at least once: executed again");
    replied_without_refusal(&mut net, server, client, 3);
}

#[test]
fn a_request_first_sent_after_the_receiver_restarted_is_taken() {
    // The client still holds the old incarnation, but a first transmission
    // cannot be a copy of one the old life took; its retransmissions are
    // answered by the new life, whose incarnation the client learns.
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    complete_exchange(&mut net, server, client);
    restarted_server_waits(&mut net, server);
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(2));
    net.advance(Duration::from_millis(100)); // retransmissions, answered with ReplyPending
    assert!(net.take(1, client).is_none(), "still waiting, not refused");
    replied_without_refusal(&mut net, server, client, 4);
}

#[test]
fn a_restarted_node_gives_its_processes_other_pids_but_the_first() {
    let mut old = Engine::new(config(1), Time::ZERO);
    let mut new = Engine::new(Config { seed: 77, ..config(1) }, Time::ZERO);
    let lives: Vec<Vec<Pid>> =
        [&mut old, &mut new].into_iter().map(|e| (0..50).map(|_| e.create_process().unwrap()).collect()).collect();
    assert_eq!(lives[0][0], Pid::new(1, 1), "the kernel server's pid every node knows");
    assert_eq!(lives[1][0], Pid::new(1, 1));
    for life in &lives {
        assert!(life[1..].windows(2).all(|w| w[1].local() == w[0].local().wrapping_add(1).max(2)), "in order");
    }
    assert!(lives[1][1..].iter().all(|p| !lives[0].contains(p)), "none of the previous life's: {lives:?}");
}

#[test]
fn every_local_id_is_handed_out_once_and_then_again_when_free() {
    let mut e = Engine::new(Config { max_processes: u16::MAX as usize, ..config(1) }, Time::ZERO);
    let mut seen = std::collections::HashSet::new();
    while let Ok(p) = e.create_process() {
        assert!(p.local() != 0 && seen.insert(p), "{p} handed out twice");
    }
    assert_eq!(seen.len(), u16::MAX as usize - 1, "all but one id (the limit)");
    let never = (1..=u16::MAX).map(|l| Pid::new(1, l)).find(|p| !seen.contains(p)).unwrap();
    let free = [never, Pid::new(1, 300), Pid::new(1, 301)];
    for p in &free[1..] {
        e.destroy_process(Time::ZERO, *p).unwrap();
    }
    let again = [e.create_process().unwrap(), e.create_process().unwrap()];
    assert!(again[0] != again[1] && again.iter().all(|p| free.contains(p)), "{again:?} of the free {free:?}");
}

/// The Send of node 1's `client` to node 0's `server`, as sent, and the
/// server's Reply with 1,000 bytes of segment data (delivered).
fn exchange_with_reply_data(net: &mut Net, key: Option<vipc_wire::AuthKey>) -> Vec<u8> {
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let sends = record_sends(net, key);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), seg(&[0; 1000], Access::WRITE)).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), Some((0, vec![7; 1000]))).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
    net.filter = None;
    let send = sends.borrow()[0].clone();
    send
}

/// A duplicate of a Send whose reply carried segment data is answered with
/// that reply again — at the address the Send came from, whatever address
/// the duplicate claims: a host that forges its source cannot make the
/// reply's data land on someone else.
#[test]
fn a_reply_is_resent_where_the_send_came_from_not_where_a_duplicate_claims() {
    let mut net = Net::new(2);
    let send = exchange_with_reply_data(&mut net, None);
    let victim: std::net::SocketAddr = "192.0.2.7:4000".parse().unwrap();
    for from in [victim, addr(1)] {
        let now = net.now;
        net.nodes[0].handle_datagram(now, from, &send);
        let out: Vec<Transmit> = std::iter::from_fn(|| net.nodes[0].poll_transmit()).collect();
        assert_eq!(out.len(), 1, "the reply again");
        assert_eq!(out[0].to, Destination::Addr(addr(1)), "to the client's node, not to {from}");
        assert!(out[0].bytes.len() >= vipc_wire::HEADER_LEN + 1000);
    }
    assert_eq!(net.stats(0).replies_resent, 2);
}

/// With a key, a duplicate's source is a key holder's: the reply goes to
/// it, so a client whose address changed mid-exchange still gets it.
#[test]
fn with_a_key_a_reply_is_resent_to_the_duplicates_source() {
    let key = vipc_wire::AuthKey::from_bytes([3; 32]);
    let mut net = Net::with(2, |c| c.key = Some(key.clone()));
    let send = exchange_with_reply_data(&mut net, Some(key));
    let moved: std::net::SocketAddr = "192.0.2.7:4000".parse().unwrap();
    let now = net.now;
    net.nodes[0].handle_datagram(now, moved, &send);
    let out: Vec<Transmit> = std::iter::from_fn(|| net.nodes[0].poll_transmit()).collect();
    assert_eq!(out.len(), 1, "the reply again");
    assert_eq!(out[0].to, Destination::Addr(moved));
}

/// A Send claiming the client's node restarted (another incarnation of its
/// pid), from another address than the client's, does not replace the
/// alien of a request being served: the client's next retransmission would
/// then have run the request a second time. Dropped as stray.
#[test]
fn a_forged_restart_from_elsewhere_does_not_run_a_request_twice() {
    let mut net = Net::new(3);
    let (server, client, send) = served_send(&mut net, None);
    let now = net.now;
    // The forgery: the client's Send with another incarnation, from node 2's address.
    let mut h = vipc_wire::parse(&send, None).unwrap().header;
    h.incarnation = h.incarnation.wrapping_add(1);
    let mut forged = Vec::new();
    vipc_wire::encode(&h, &[], None, &mut forged);
    let strays = net.stats(0).stray;
    net.nodes[0].handle_datagram(now, addr(2), &forged);
    assert_eq!(net.stats(0).stray, strays + 1);
    // The server waits for its next request; the client retransmits meanwhile.
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.advance(Duration::from_millis(50));
    assert!(net.take(0, server).is_none(), "the request ran a second time");
    // The first one is still answered.
    net.nodes[0].reply(net.now, server, client, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
}

/// A NAck or a ReplyPending about an exchange counts only from the host of
/// its receiver: from any other host (which may know the seq: a Send that
/// went to the broadcast channel) a NAck would end the Send, and
/// ReplyPendings would keep an exchange with a dead host alive for ever.
#[test]
fn nacks_and_reply_pendings_from_another_host_are_stray() {
    let mut net = Net::new(3);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let sends = record_sends(&mut net, None);
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    let seq = seq_of(&sends.borrow()[0]);
    // Node 0 goes silent (as if down); node 2 forges.
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 0)));
    let forged = |ptype| forge(ptype, (seq, Pid::new(3, 9), client), &[], |_| {});
    let strays = net.stats(1).stray;
    net.nodes[1].handle_datagram(now, addr(2), &forged(PacketType::NAck));
    net.settle();
    assert!(net.take(1, client).is_none(), "a NAck from another host ended the Send");
    // Every 400 ms a ReplyPending from node 2: the Send still fails at T_t.
    let mut failed = None;
    for _ in 0..10 {
        net.advance(Duration::from_millis(400));
        let now = net.now;
        net.nodes[1].handle_datagram(now, addr(2), &forged(PacketType::ReplyPending));
        net.settle();
        if let Some(c) = net.take(1, client) {
            failed = Some(c);
            break;
        }
    }
    assert!(matches!(failed, Some(Completion::Send(Err(_)))), "{failed:?}");
    assert!(net.stats(1).stray >= strays + 2);
}
