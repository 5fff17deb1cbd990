//! The caller's own limit on a blocking primitive (`Engine::limit`, 002's
//! completion statement): what is abandoned, what the peer sees, and that a
//! primitive that completes first is not touched.

mod common;
use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_queued_local_send_is_unqueued_at_its_limit() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[0].limit(now, client, now + 5 * MS).unwrap();
    net.advance(4 * MS);
    assert!(net.take(0, client).is_none(), "not before its limit");
    net.advance(2 * MS);
    assert_eq!(net.take_send(0, client), Err(Error::Deadline));
    assert_eq!(net.stats(0).deadlines, 1);
    // The message left the server's queue: its next Receive blocks.
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, server).is_none());
    // The client may call again at once.
    net.nodes[0].send(now, client, server, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(2));
}

#[test]
fn a_taken_local_send_fails_and_the_late_reply_finds_nobody() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[0].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[0].limit(now, client, now + MS).unwrap();
    net.settle();
    net.take_received(0, server);
    net.advance(2 * MS);
    assert_eq!(net.take_send(0, client), Err(Error::Deadline));
    let now = net.now;
    assert_eq!(net.nodes[0].reply(now, server, client, msg(9), None), Err(Error::NotAwaitingReply(client)));
}

#[test]
fn a_remote_send_is_cancelled_at_its_limit() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[1].limit(now, client, now + 3 * MS).unwrap();
    net.settle();
    net.advance(4 * MS);
    assert_eq!(net.take_send(1, client), Err(Error::Deadline));
    assert_eq!(net.stats(1).sent(PacketType::Cancel), 1);
    // The server's node dropped the cancelled message: a Receive finds nothing.
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, server).is_none());
    // No retransmission follows the cancelled send.
    let before = net.stats(1).sent(PacketType::Send);
    net.advance(Duration::from_secs(2));
    assert_eq!(net.stats(1).sent(PacketType::Send), before);
}

#[test]
fn a_receive_ends_at_its_limit() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[0].limit(now, server, now + MS).unwrap();
    net.advance(2 * MS);
    match net.take(0, server) {
        Some(Completion::Receive(Err(Error::Deadline))) => {}
        other => panic!("expected a receive deadline, got {other:?}"),
    }
    // A message sent afterwards waits for the next Receive.
    let now = net.now;
    net.nodes[0].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(3));
}

#[test]
fn a_primitive_that_completes_first_keeps_its_result() {
    let mut net = Net::new(2);
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[1].limit(now, client, now + 10 * MS).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
    // The stale limit of the finished Send does not end the next one.
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(3), SendOptions::default(), None).unwrap();
    net.advance(20 * MS);
    net.take_received(0, server);
    assert!(net.take(1, client).is_none(), "the second Send has no limit");
    assert_eq!(net.stats(1).deadlines, 0);
}

#[test]
fn a_limit_already_passed_abandons_at_once_and_an_idle_process_is_left_alone() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let now = net.now;
    net.nodes[0].limit(now, client, now).unwrap();
    assert!(net.take(0, client).is_none());
    net.nodes[0].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.nodes[0].limit(now, client, now).unwrap();
    net.settle();
    assert_eq!(net.take_send(0, client), Err(Error::Deadline));
    assert_eq!(net.stats(0).deadlines, 1, "the abandoned Send is counted, the idle process not");
    let stranger = Pid::new(7, 1);
    assert_eq!(net.nodes[0].limit(now, stranger, now), Err(Error::NotLocalProcess(stranger)));
}

#[test]
fn blocking_calls_within_one_limit_share_one_timer_entry() {
    let mut net = Net::new(1);
    let (server, client) = (net.proc(0), net.proc(0));
    let start = net.now;
    let before = net.stats(0).timer_entries;
    // A server loop within one long limit (002's `within` around it): every
    // Receive arms the limit again. Then a later limit, past the first.
    for (i, at) in
        (0..1000).map(|i| (i, start + Duration::from_secs(60))).chain([(1000, start + Duration::from_secs(90))])
    {
        let now = net.now;
        net.nodes[0].receive(now, server, None, 0).unwrap();
        net.nodes[0].limit(now, server, at).unwrap();
        net.nodes[0].send(now, client, server, msg(i as u8), SendOptions::default(), None).unwrap();
        net.settle();
        net.take_received(0, server);
        net.nodes[0].reply(now, server, client, msg(0), None).unwrap();
        net.settle();
        net.take_send(0, client).unwrap();
    }
    assert!(net.stats(0).timer_entries <= before + 2, "{} timer entries", net.stats(0).timer_entries);
    // The last limit still ends a Receive at its own time, not at the first's.
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[0].limit(now, server, start + Duration::from_secs(90)).unwrap();
    net.advance(Duration::from_secs(60) - (now - start) + MS);
    assert!(net.take(0, server).is_none(), "the first limit's entry does not end it");
    net.advance(Duration::from_secs(31));
    match net.take(0, server) {
        Some(Completion::Receive(Err(Error::Deadline))) => {}
        other => panic!("expected a receive deadline at the later limit, got {other:?}"),
    }
    assert_eq!(net.stats(0).deadlines, 1);
}
