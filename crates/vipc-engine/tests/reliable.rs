//! Reliable group Sends (004 ch. 3–4): the success and failure conditions
//! of K_REPLY, ALL_REPLY, K_DELIVER and ALL_DELIVER, acknowledgements from
//! every alive host, NACK, retransmission to the silent hosts, breath of
//! life, and the packet counts of 004 Fig. 17.

mod common;

use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

const PERIOD: Duration = Duration::from_millis(100);

struct Setup {
    net: Net,
    group: Pid,
    sender: Pid,
    /// (node, member): one on node 0 (the sender's), one on node 1, two on node 2; none on node 3.
    members: Vec<(usize, Pid)>,
}

fn setup_with(tweak: impl Fn(usize, &mut Config)) -> Setup {
    let mut net = Net::new(0);
    for i in 0..4 {
        let mut c = config(i as u16 + 1);
        c.alive_period = Some(PERIOD);
        tweak(i, &mut c);
        net.nodes.push(Engine::new(c, net.now));
    }
    net.advance(Duration::from_millis(20)); // every alive-host table is full
    net.events.clear();
    let group = net.nodes[0].allocate_group_id().unwrap();
    let sender = net.proc(0);
    let mut members = Vec::new();
    for i in [0, 1, 2, 2] {
        let m = net.proc(i);
        net.nodes[i].join_group(m, group).unwrap();
        let now = net.now;
        net.nodes[i].receive(now, m, None, 0).unwrap();
        members.push((i, m));
    }
    Setup { net, group, sender, members }
}

fn setup() -> Setup {
    setup_with(|_, _| {})
}

fn send(s: &mut Setup, mode: Reliable) {
    let now = s.net.now;
    s.net.nodes[0].send_reliable(now, s.sender, s.group, msg(7), mode, SendOptions::default()).unwrap();
    s.net.settle();
}

fn outcome(s: &mut Setup) -> Option<GroupOutcome> {
    match s.net.take(0, s.sender)? {
        Completion::Group(o) => Some(o),
        other => panic!("expected a group completion, got {other:?}"),
    }
}

/// Member `k` takes its message and replies with byte k.
fn reply(s: &mut Setup, k: usize) {
    let (i, m) = s.members[k];
    let r = s.net.take_received(i, m);
    assert_eq!((r.from, r.msg), (s.sender, msg(7)));
    let now = s.net.now;
    s.net.nodes[i].reply(now, m, s.sender, msg(k as u8), None).unwrap();
    s.net.settle();
}

/// Packets of the group protocol all nodes sent (no I-Am-Here).
fn group_packets(net: &Net) -> u64 {
    let types = [PacketType::Send, PacketType::Reply, PacketType::GroupAck, PacketType::ReplyPending];
    (0..net.nodes.len()).map(|i| types.iter().map(|t| net.stats(i).sent(*t)).sum::<u64>()).sum()
}

#[test]
fn all_reply_succeeds_when_every_member_of_the_snapshot_replied() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    for k in 0..3 {
        reply(&mut s, k);
        assert!(outcome(&mut s).is_none(), "not yet: {} of 4 replied", k + 1);
    }
    reply(&mut s, 3);
    let o = outcome(&mut s).expect("complete");
    assert!(o.met);
    assert_eq!((o.count, o.receivers, o.hosts_acked, o.hosts), (4, 4, 3, 3));
    assert_eq!((o.first_replier, o.reply), (s.members[0].1, msg(0)));
    // 004 Fig. 17, best case: N(1 + R + H) = 1 Send + 3 remote replies + 1 ACK 0.
    assert_eq!(group_packets(&s.net), 5);
    assert_eq!(s.net.stats(3).sent(PacketType::GroupAck), 1, "the host without members says ACK 0");
    // The other replies wait for GetReply.
    for _ in 0..3 {
        let now = s.net.now;
        s.net.nodes[0].get_reply(now, s.sender, Duration::ZERO).unwrap();
        s.net.settle();
        assert!(matches!(s.net.take(0, s.sender), Some(Completion::GetReply(Some(_)))));
    }
}

/// A K_REPLY decided before a replying host acknowledged (its ACK rides on
/// its last reply) still counts that host's repliers among the members
/// known to have the message: "2 replies of 1 member" is never reported.
#[test]
fn the_members_known_include_repliers_whose_host_has_not_acknowledged() {
    let mut s = setup();
    send(&mut s, Reliable::KReply(2));
    reply(&mut s, 2); // node 2 has two members: no ACK yet
    reply(&mut s, 0); // the sender's own node
    let o = outcome(&mut s).expect("two replies");
    assert!(o.met);
    assert_eq!((o.count, o.receivers, o.hosts_acked), (2, 2, 1), "{o:?}");
}

#[test]
fn k_reply_succeeds_at_k_and_fails_early_when_k_members_do_not_exist() {
    let mut s = setup();
    send(&mut s, Reliable::KReply(2));
    reply(&mut s, 1);
    assert!(outcome(&mut s).is_none());
    reply(&mut s, 2);
    let o = outcome(&mut s).expect("two replies");
    assert!(o.met && o.count == 2);
    assert_eq!(o.first_replier, s.members[1].1);

    let mut s = setup();
    send(&mut s, Reliable::KReply(10));
    for k in 0..4 {
        reply(&mut s, k);
    }
    let o = outcome(&mut s).expect("decided as soon as every host acknowledged");
    assert!(!o.met);
    assert_eq!((o.count, o.receivers), (4, 4));
    assert_eq!(s.net.stats(0).group_failures, 1);
}

/// Replies that come after a DELIVER-mode Send was decided on
/// acknowledgements all wait for GetReply: the first of them was kept as
/// the outcome's first reply, which had been delivered already, and lost.
#[test]
fn replies_after_a_deliver_outcome_all_reach_get_reply() {
    let mut s = setup();
    send(&mut s, Reliable::AllDeliver);
    let o = outcome(&mut s).expect("every host acknowledged at once");
    assert!(o.met && o.first_replier.is_none());
    for k in 0..4 {
        reply(&mut s, k);
    }
    let mut got = Vec::new();
    for _ in 0..5 {
        let now = s.net.now;
        s.net.nodes[0].get_reply(now, s.sender, Duration::ZERO).unwrap();
        s.net.settle();
        match s.net.take(0, s.sender) {
            Some(Completion::GetReply(Some((_, m)))) => got.push(m[0]),
            Some(Completion::GetReply(None)) => break,
            other => panic!("{other:?}"),
        }
    }
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3], "every member's reply");
}

#[test]
fn deliver_modes_count_deliveries_without_waiting_for_replies() {
    let mut s = setup();
    send(&mut s, Reliable::AllDeliver);
    let o = outcome(&mut s).expect("every host acknowledged at once");
    assert!(o.met);
    assert_eq!((o.count, o.hosts_acked), (4, 3));
    assert_eq!(group_packets(&s.net), 4, "1 Send and 3 ACKs");
    // Every member has it.
    for k in 0..4 {
        let (i, m) = s.members[k];
        assert_eq!(s.net.take_received(i, m).msg, msg(7));
    }

    let mut s = setup();
    send(&mut s, Reliable::KDeliver(5));
    let o = outcome(&mut s).expect("decided");
    assert!(!o.met && o.count == 4, "{o:?}");

    let mut s = setup();
    send(&mut s, Reliable::KDeliver(1));
    let o = outcome(&mut s).expect("the local member is enough");
    assert!(o.met);
    assert_eq!(s.net.stats(0).sent(PacketType::Send), 1, "still sent to the others");
}

#[test]
fn a_nack_fails_all_modes_but_k_can_still_succeed() {
    // Node 2 can hold one copy only: one of its two members misses the message.
    let mut s = setup_with(|i, c| {
        if i == 2 {
            c.max_aliens = 1;
        }
    });
    send(&mut s, Reliable::AllDeliver);
    let o = outcome(&mut s).expect("the NACK decides");
    assert!(!o.met);
    assert_eq!(s.net.stats(2).group_dropped, 1);
    assert!(s.net.stats(2).sent(PacketType::GroupAck) == 1);

    let mut s = setup_with(|i, c| {
        if i == 2 {
            c.max_aliens = 1;
        }
    });
    send(&mut s, Reliable::KDeliver(3));
    let o = outcome(&mut s).expect("decided");
    assert!(o.met && o.count == 3, "{o:?}");
}

#[test]
fn a_host_that_dies_after_the_snapshot_fails_all_reply_but_not_k_reply() {
    for (mode, met) in [(Reliable::AllReply, false), (Reliable::KReply(2), true)] {
        let mut s = setup();
        // Node 2 dies: nothing from it arrives any more.
        s.net.filter = Some(Box::new(|from, _, _| usize::from(from != 2)));
        send(&mut s, mode);
        reply(&mut s, 0);
        reply(&mut s, 1);
        if met {
            assert!(outcome(&mut s).expect("K reached").met);
            continue;
        }
        s.net.advance(Duration::from_millis(900));
        assert!(outcome(&mut s).is_none(), "retrying node 2 within T_t");
        s.net.advance(Duration::from_millis(200));
        let o = outcome(&mut s).expect("given up after T_t");
        assert!(!o.met);
        assert_eq!((o.count, o.hosts_acked, o.hosts), (2, 2, 3));
    }
}

#[test]
fn a_host_that_restarts_within_a_send_is_a_nack_not_a_second_delivery() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 0);
    reply(&mut s, 2);
    reply(&mut s, 3);
    // Node 1's member took the message but its host restarts before it replies.
    let (_, taken) = s.members[1];
    assert_eq!(s.net.take_received(1, taken).msg, msg(7));
    s.net.advance(Duration::from_millis(5));
    let mut c = config(2);
    c.alive_period = Some(PERIOD);
    s.net.nodes[1] = Engine::new(Config { seed: 79, ..c }, s.net.now);
    s.net.settle();
    let reborn = s.net.proc(1);
    s.net.nodes[1].join_group(reborn, s.group).unwrap();
    let now = s.net.now;
    s.net.nodes[1].receive(now, reborn, None, 0).unwrap();
    s.net.advance(Duration::from_millis(25)); // the retransmission to node 1
    assert!(s.net.take(1, reborn).is_none(), "the new life took the Send again");
    let o = outcome(&mut s).expect("the restarted host's NACK decides");
    assert!(!o.met, "{o:?}");
    assert_eq!(s.net.stats(1).restart_refusals, 1);
}

#[test]
fn retransmissions_go_to_silent_hosts_only() {
    let mut s = setup();
    // The first Send does not reach node 2.
    let mut dropped = false;
    s.net.filter = Some(Box::new(move |from, to, bytes| {
        let is_send = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Send);
        if from == 0 && is_send && !dropped && *to == Destination::Broadcast {
            dropped = true;
            return 0; // (the harness fans a broadcast out itself: this drops it for everyone)
        }
        1
    }));
    send(&mut s, Reliable::AllDeliver);
    assert!(outcome(&mut s).is_none());
    s.net.advance(Duration::from_millis(21));
    // The retransmission went by unicast to each host that had not acknowledged: all three.
    assert_eq!(s.net.stats(0).sent(PacketType::Send), 1 + 3);
    let o = outcome(&mut s).expect("acknowledged after the retransmission");
    assert!(o.met && o.count == 4);

    // Now only node 3's ACK is lost: the retransmission goes to node 3 alone.
    let mut s = setup();
    let mut lost = false;
    s.net.filter = Some(Box::new(move |from, _, bytes| {
        let ack = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::GroupAck);
        if from == 3 && ack && !lost {
            lost = true;
            return 0;
        }
        1
    }));
    send(&mut s, Reliable::AllDeliver);
    assert!(outcome(&mut s).is_none());
    s.net.advance(Duration::from_millis(21));
    assert_eq!(s.net.stats(0).sent(PacketType::Send), 2, "one retransmission, to node 3");
    assert!(outcome(&mut s).expect("done").met);
    assert_eq!(s.net.stats(2).group_deliveries, 2, "node 2 got it once");
}

#[test]
fn lost_replies_are_resent_and_slow_members_are_kept_alive() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 0);
    reply(&mut s, 1);
    // Node 2's members think for 2 × T_t; ReplyPending keeps the Send alive.
    s.net.advance(Duration::from_secs(2));
    assert!(outcome(&mut s).is_none());
    assert!(s.net.stats(2).sent(PacketType::ReplyPending) > 0);
    // Its first reply is lost.
    let mut lost = false;
    s.net.filter = Some(Box::new(move |from, _, bytes| {
        let r = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Reply);
        if from == 2 && r && !lost {
            lost = true;
            return 0;
        }
        1
    }));
    reply(&mut s, 2);
    reply(&mut s, 3);
    assert!(outcome(&mut s).is_none(), "one of node 2's replies is missing");
    s.net.advance(Duration::from_millis(25));
    let o = outcome(&mut s).expect("the retransmission brought both replies again");
    assert!(o.met && o.count == 4, "{o:?}");
    assert!(s.net.stats(2).replies_resent >= 2);
}

#[test]
fn an_ack_from_a_host_outside_the_snapshot_is_ignored() {
    let mut s = setup();
    let seq = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = seq.clone();
    s.net.filter = Some(Box::new(move |from, _, bytes| {
        if let Ok(p) = vipc_wire::parse(bytes, None) {
            if from == 0 && p.header.ptype == PacketType::Send {
                seen.set(p.header.seq);
            }
        }
        1
    }));
    send(&mut s, Reliable::AllReply);
    // Host 9 came up after the Send began: its ACK 0 counts for nothing.
    let mut h = vipc_wire::Header::new(PacketType::GroupAck);
    h.src = Pid::new(9, 0);
    h.dst = s.sender;
    h.seq = seq.get();
    h.incarnation = 5;
    let bytes = vipc_wire::to_vec(&h, &[], None);
    let (now, before) = (s.net.now, s.net.stats(0).duplicates);
    s.net.nodes[0].handle_datagram(now, addr(8), &bytes);
    assert_eq!(s.net.stats(0).duplicates, before + 1);
    for k in 0..4 {
        reply(&mut s, k);
    }
    let o = outcome(&mut s).expect("done");
    assert!(o.met);
    assert_eq!((o.hosts_acked, o.hosts, o.receivers), (3, 3, 4));
}

#[test]
fn misuse_is_a_typed_error() {
    let mut s = setup();
    let now = s.net.now;
    let (sender, group) = (s.sender, s.group);
    let e = s.net.nodes[0].send_reliable(now, sender, group, msg(1), Reliable::KReply(0), SendOptions::default());
    assert_eq!(e, Err(Error::BadK(0)));
    let e =
        s.net.nodes[0].send_reliable(now, sender, group, msg(1), Reliable::KDeliver(MAX_K + 1), SendOptions::default());
    assert_eq!(e, Err(Error::BadK(MAX_K + 1)));
    let p = s.members[1].1;
    let e = s.net.nodes[0].send_reliable(now, sender, p, msg(1), Reliable::AllReply, SendOptions::default());
    assert_eq!(e, Err(Error::NotAGroup(p)));
    // A reliable Send packet with an unknown mode is dropped as malformed.
    let mut h = vipc_wire::Header::new(PacketType::Send);
    h.flags = vipc_wire::Flags(vipc_wire::Flags::RELIABLE);
    h.src = Pid::new(3, 9);
    h.dst = group;
    h.seq = 1;
    h.incarnation = 1;
    h.local_addr = 9 << 24;
    let bytes = vipc_wire::to_vec(&h, &[], None);
    s.net.nodes[1].handle_datagram(now, addr(2), &bytes);
    assert_eq!(s.net.stats(1).malformed, 1);
    // Without the alive-host service a node knows no other host: "all members" would be its own.
    let mut net = Net::new(1);
    let (sender, member) = (net.proc(0), net.proc(0));
    net.nodes[0].join_group(member, group).unwrap();
    let e = net.nodes[0].send_reliable(now, sender, group, msg(1), Reliable::AllReply, SendOptions::default());
    assert_eq!(e, Err(Error::NoAliveService));
}

#[test]
fn regression_b5_replies_from_outside_the_snapshot_never_cover_a_missing_one() {
    let mut s = setup();
    let seq = std::rc::Rc::new(std::cell::Cell::new(0));
    let seen = seq.clone();
    s.net.filter = Some(Box::new(move |from, _, bytes| {
        if let Ok(p) = vipc_wire::parse(bytes, None) {
            if from == 0 && p.header.ptype == PacketType::Send {
                seen.set(p.header.seq);
            }
        }
        1
    }));
    send(&mut s, Reliable::AllReply);
    // A process on host 9 (not in the snapshot) replies; then three of the four members.
    let mut h = vipc_wire::Header::new(PacketType::Reply);
    (h.src, h.dst, h.seq, h.incarnation) = (Pid::new(9, 1), s.sender, seq.get(), 5);
    let now = s.net.now;
    s.net.nodes[0].handle_datagram(now, addr(8), &vipc_wire::to_vec(&h, &[], None));
    for k in 0..3 {
        reply(&mut s, k);
    }
    assert!(outcome(&mut s).is_none(), "member 3 has not replied");
    reply(&mut s, 3);
    let o = outcome(&mut s).expect("now every member replied");
    assert!(o.met && o.count == 4, "{o:?}");
}

#[test]
fn regression_b7_a_reply_that_acknowledges_a_short_host_is_a_nack() {
    let mut s = setup_with(|i, c| {
        if i == 2 {
            c.max_aliens = 1;
        }
    });
    // Node 2's GroupAck (the NACK) is lost; its member's reply acknowledges instead.
    s.net.filter = Some(Box::new(|from, _, bytes| {
        let ack = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::GroupAck);
        usize::from(!(from == 2 && ack))
    }));
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 0);
    reply(&mut s, 1);
    // Whichever member of node 2 got the copy replies.
    for k in [2, 3] {
        let (i, m) = s.members[k];
        if let Some(Completion::Receive(Ok(r))) = s.net.take(i, m) {
            let now = s.net.now;
            s.net.nodes[i].reply(now, m, r.from, msg(k as u8), None).unwrap();
            s.net.settle();
        }
    }
    let o = outcome(&mut s).expect("decided by the acknowledging reply");
    assert!(!o.met, "a member of node 2 got no copy: {o:?}");
}

#[test]
fn the_callers_limit_ends_a_reliable_send_with_what_it_reached_and_names_the_missing_hosts() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    let now = s.net.now;
    s.net.nodes[0].limit(now, s.sender, now + Duration::from_millis(5)).unwrap();
    reply(&mut s, 0); // the local member
    reply(&mut s, 2); // one of node 2's two members
    assert!(outcome(&mut s).is_none());
    s.net.advance(Duration::from_millis(6));
    let o = outcome(&mut s).expect("ended by the limit");
    assert!(!o.met);
    assert_eq!(o.count, 2);
    // Node 1 (host 2) has not replied, node 2 (host 3) replied for one of its two members.
    assert_eq!(s.net.nodes[0].reliable_missing(s.sender), Some(vec![2, 3]));
    assert_eq!(s.net.stats(0).deadlines, 1);
    // A send that is not reliable reports nothing.
    let other = s.net.proc(0);
    assert_eq!(s.net.nodes[0].reliable_missing(other), None);
}

/// A host of the snapshot that acknowledges again with a member count near
/// u32::MAX (only a hostile or broken node would): the receivers' sum
/// saturates instead of overflowing (a panic in a debug build).
#[test]
fn an_ack_with_a_huge_member_count_saturates_the_sum() {
    let mut s = setup();
    let acks = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = acks.clone();
    s.net.filter = Some(Box::new(move |from, _, bytes| {
        if let Ok(p) = vipc_wire::parse(bytes, None) {
            if from == 3 && p.header.ptype == PacketType::GroupAck {
                seen.borrow_mut().push(p.header);
            }
        }
        1
    }));
    send(&mut s, Reliable::AllReply);
    let mut h = *acks.borrow().first().expect("node 3, without members, said ACK 0");
    h.local_addr = u32::MAX;
    let bytes = vipc_wire::to_vec(&h, &[], None);
    let now = s.net.now;
    s.net.nodes[0].handle_datagram(now, addr(3), &bytes);
    s.net.settle();
    for k in 0..4 {
        reply(&mut s, k);
    }
    s.net.advance(Duration::from_secs(2));
    let o = outcome(&mut s).expect("done");
    assert_eq!(o.receivers, u32::MAX, "{o:?}");
    assert!(!o.met, "the member count it claimed never replied: {o:?}");
}

/// Replies kept for a reliable group Send are resent, for a retransmission,
/// to the sender's node the copies came from — a forged retransmission
/// cannot aim them at another address.
#[test]
fn kept_replies_of_a_reliable_send_go_back_to_the_senders_node_only() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut s = setup();
    let sends: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = sends.clone();
    s.net.filter = Some(Box::new(move |from, _, bytes| match vipc_wire::parse(bytes, None).map(|p| p.header.ptype) {
        Ok(PacketType::Send) if from == 0 => {
            seen.borrow_mut().push(bytes.to_vec());
            1
        }
        Ok(PacketType::Reply) if from == 2 => 0, // node 2's replies are lost: kept there
        _ => 1,
    }));
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 2);
    reply(&mut s, 3);
    let send = sends.borrow()[0].clone();
    let victim: std::net::SocketAddr = "192.0.2.7:4000".parse().unwrap();
    let now = s.net.now;
    s.net.nodes[2].handle_datagram(now, victim, &send);
    let replies: Vec<Transmit> = std::iter::from_fn(|| s.net.nodes[2].poll_transmit())
        .filter(|t| vipc_wire::parse(&t.bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Reply))
        .collect();
    assert_eq!(replies.len(), 2, "both kept replies again");
    assert!(replies.iter().all(|t| t.to == Destination::Addr(addr(0))), "to the sender's node only");
}

/// The first packet of type `t` that node `from` sends is lost.
fn lose_first(s: &mut Setup, from: usize, t: PacketType) {
    let mut lost = false;
    s.net.filter = Some(Box::new(move |node, _, bytes| {
        let hit = node == from && vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == t);
        if hit && !lost {
            lost = true;
            return 0;
        }
        1
    }));
}

/// Members `ks` that got the message reply to it (on a host that had no
/// room for every member, one of them did not).
fn reply_where_held(s: &mut Setup, ks: &[usize]) {
    for &k in ks {
        let (i, m) = s.members[k];
        if let Some(Completion::Receive(Ok(_))) = s.net.take(i, m) {
            let now = s.net.now;
            s.net.nodes[i].reply(now, m, s.sender, msg(k as u8), None).unwrap();
            s.net.settle();
        }
    }
}

/// A host that could not give every member a copy (a NACK) still resends
/// the replies of those that got one, and keeps the Send alive while they
/// work: it answered every retransmission with the NACK alone, so a lost
/// reply from it was never recovered and a slow member there timed the
/// Send out.
#[test]
fn a_host_that_nacked_still_resends_replies_and_keeps_slow_members_alive() {
    let short = |i: usize, c: &mut Config| {
        if i == 2 {
            c.max_aliens = 1;
        }
    };
    let mut s = setup_with(short);
    lose_first(&mut s, 2, PacketType::Reply);
    send(&mut s, Reliable::KReply(3));
    reply(&mut s, 0);
    reply(&mut s, 1);
    reply_where_held(&mut s, &[2, 3]);
    s.net.advance(Duration::from_millis(100));
    let o = outcome(&mut s).expect("decided");
    assert!(o.met && o.count == 3, "three members replied, K = 3: {o:?}");
    assert!(s.net.stats(2).replies_resent >= 1);

    let mut s = setup_with(short);
    send(&mut s, Reliable::KReply(3));
    reply(&mut s, 0);
    reply(&mut s, 1);
    s.net.advance(Duration::from_millis(1500));
    assert!(outcome(&mut s).is_none(), "node 2's member still works: kept alive past T_t");
    assert!(s.net.stats(2).sent(PacketType::ReplyPending) > 0);
    reply_where_held(&mut s, &[2, 3]);
    assert!(outcome(&mut s).expect("its reply decides").met);
}

/// Members that leave the group after they got the message still count:
/// a reply lost before its member left is resent, and a DELIVER host whose
/// acknowledgement was lost acknowledges the copy of a member that left.
#[test]
fn members_that_left_after_the_message_still_count() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 0);
    reply(&mut s, 1);
    lose_first(&mut s, 2, PacketType::Reply);
    reply(&mut s, 2);
    let (i, m) = s.members[2];
    s.net.nodes[i].leave_group(m, s.group).unwrap();
    reply(&mut s, 3);
    s.net.advance(Duration::from_millis(300));
    let o = outcome(&mut s).expect("decided");
    assert!(o.met && o.count == 4, "all four members replied: {o:?}");

    let mut s = setup();
    lose_first(&mut s, 1, PacketType::GroupAck);
    send(&mut s, Reliable::KDeliver(4));
    let (i, m) = s.members[1];
    s.net.nodes[i].leave_group(m, s.group).unwrap();
    s.net.advance(Duration::from_millis(300));
    let o = outcome(&mut s).expect("decided");
    assert!(o.met && o.count == 4, "four members have it: {o:?}");
    assert!(matches!(s.net.take(i, m), Some(Completion::Receive(Ok(_)))), "and the one that left receives it");
}

/// A reliable Send's local member that works longer than T_t keeps the
/// Send alive (as a remote one's ReplyPending does): it timed out.
#[test]
fn a_slow_local_member_keeps_a_reliable_send_alive() {
    let mut net = Net::with(1, |c| c.alive_period = Some(PERIOD));
    let group = well_known_group(79);
    let member = net.proc(0);
    net.nodes[0].join_group(member, group).unwrap();
    let sender = net.proc(0);
    let now = net.now;
    net.nodes[0].receive(now, member, None, 0).unwrap();
    net.nodes[0].send_reliable(now, sender, group, msg(1), Reliable::KReply(1), SendOptions::default()).unwrap();
    net.settle();
    let _ = net.take_received(0, member);
    net.advance(Duration::from_millis(2500));
    assert!(net.take(0, sender).is_none(), "timed out while its local member worked");
    let now = net.now;
    net.nodes[0].reply(now, member, sender, msg(2), None).unwrap();
    net.settle();
    match net.take(0, sender) {
        Some(Completion::Group(o)) => assert!(o.met && o.count == 1, "{o:?}"),
        other => panic!("{other:?}"),
    }
}

/// A copy acknowledged as delivered stays queued until its member takes
/// it: it was withdrawn 2·T_t after the sender's last packet.
#[test]
fn a_delivered_copy_waits_for_a_busy_member() {
    let mut net = Net::with(2, |c| c.alive_period = Some(PERIOD));
    net.advance(Duration::from_millis(20));
    let group = well_known_group(80);
    let member = net.proc(0);
    net.nodes[0].join_group(member, group).unwrap();
    let sender = net.proc(1);
    let now = net.now;
    net.nodes[1].send_reliable(now, sender, group, msg(1), Reliable::AllDeliver, SendOptions::default()).unwrap();
    net.settle();
    match net.take(1, sender) {
        Some(Completion::Group(o)) => assert!(o.met && o.count == 1, "{o:?}"),
        other => panic!("{other:?}"),
    }
    net.advance(Duration::from_millis(5000));
    let now = net.now;
    net.nodes[0].receive(now, member, None, 0).unwrap();
    net.settle();
    assert!(matches!(net.take(0, member), Some(Completion::Receive(Ok(_)))), "the delivered message was withdrawn");
}

/// A host silent for T_t is given up even while another host keeps the
/// Send alive: its copy expires 2·T_t after the last retransmission it
/// heard, and a retransmission after that made a new copy — the member got
/// the same (non-idempotent) message twice.
#[test]
fn a_host_silent_for_t_t_is_given_up_not_delivered_to_twice() {
    let mut s = setup();
    send(&mut s, Reliable::AllReply);
    reply(&mut s, 0);
    // Node 1 is cut off (all but I-Am-Here) after its member replies; its reply is lost.
    let cut = std::rc::Rc::new(std::cell::Cell::new(true));
    let c = cut.clone();
    s.net.filter = Some(Box::new(move |from, to, bytes| {
        let alive = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::IAmHere);
        usize::from(!(c.get() && !alive && (from == 1 || *to == Destination::Addr(addr(1)))))
    }));
    reply(&mut s, 1);
    let (i, m) = s.members[1];
    let now = s.net.now;
    s.net.nodes[i].receive(now, m, None, 0).unwrap();
    // Node 2's members work on (ReplyPending keeps the Send alive); node 1 is given up after T_t.
    s.net.advance(Duration::from_millis(1200));
    let o = outcome(&mut s).expect("node 1 silent for T_t: ALL fails");
    assert!(!o.met, "{o:?}");
    assert!(s.net.nodes[0].reliable_missing(s.sender).unwrap().contains(&2));
    cut.set(false);
    s.net.advance(Duration::from_millis(3000));
    assert!(s.net.take(i, m).is_none(), "node 1's member got the message a second time");
    assert_eq!(s.net.stats(1).group_deliveries, 1);
}
