//! Process groups (000 §6.3, §6.5): ids, membership, Send to a group in the
//! three reply modes, GetReply, and recovery from loss.

mod common;

use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::{Flags, Header, PacketType};

fn take_get_reply(net: &mut Net, i: usize, pid: Pid) -> Option<(Pid, Message)> {
    match net.take(i, pid) {
        Some(Completion::GetReply(r)) => r,
        other => panic!("expected a GetReply completion for {pid}, got {other:?}"),
    }
}

/// Every member in `members` (node, pid) receives one message from `from` and replies with its own pid's low byte.
fn members_reply(net: &mut Net, members: &[(usize, Pid)], from: Pid) {
    for &(i, m) in members {
        let r = net.take_received(i, m);
        assert_eq!(r.from, from);
        let now = net.now;
        net.nodes[i].reply(now, m, from, msg(m.local() as u8), None).unwrap();
        net.settle();
    }
}

/// Node 0: sender and one member; node 1: one member; node 2: two members; node 3: none.
fn setup() -> (Net, Pid, Pid, Vec<(usize, Pid)>) {
    setup_tweaked(|_| {})
}

/// The first Reply packet the network carries is lost.
fn lose_the_first_reply(net: &mut Net) {
    let mut lost = false;
    net.filter = Some(Box::new(move |_, _, bytes| {
        let reply = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Reply);
        if reply && !lost {
            lost = true;
            return 0;
        }
        1
    }));
}

/// [`setup`] with `tweak` applied to every node's configuration.
fn setup_tweaked(tweak: impl Fn(&mut Config)) -> (Net, Pid, Pid, Vec<(usize, Pid)>) {
    let mut net = Net::with(4, tweak);
    let group = net.nodes[1].allocate_group_id().unwrap();
    let sender = net.proc(0);
    let mut members = Vec::new();
    for i in [0, 1, 2, 2] {
        let m = net.proc(i);
        net.nodes[i].join_group(m, group).unwrap();
        net.nodes[i].receive(Time::ZERO, m, None, 0).unwrap();
        members.push((i, m));
    }
    (net, group, sender, members)
}

#[test]
fn group_ids_are_unique_and_well_known_ones_are_reserved() {
    let mut net = Net::new(2);
    let a = net.nodes[0].allocate_group_id().unwrap();
    let b = net.nodes[0].allocate_group_id().unwrap();
    let c = net.nodes[1].allocate_group_id().unwrap();
    assert!(a.is_group() && b.is_group() && c.is_group());
    assert!(a != b && a != c && b != c);
    let wk = well_known_group(7);
    assert!(wk.is_group());
    assert_eq!(wk.host(), WELL_KNOWN_GROUP_HOST);
    assert!([a, b, c].iter().all(|g| g.host() != WELL_KNOWN_GROUP_HOST), "never handed out");
}

#[test]
fn membership_rules() {
    let mut net = Net::new(2);
    let g = net.nodes[0].allocate_group_id().unwrap();
    let (p, q, remote) = (net.proc(0), net.proc(0), net.proc(1));
    assert_eq!(net.nodes[0].join_group(p, Pid::new(1, 1)), Err(Error::NotAGroup(Pid::new(1, 1))));
    assert_eq!(net.nodes[0].join_group(remote, g), Err(Error::NotLocalProcess(remote)));
    net.nodes[0].join_group(q, g).unwrap();
    net.nodes[0].join_group(p, g).unwrap();
    net.nodes[0].join_group(p, g).unwrap(); // twice: harmless
    assert_eq!(net.nodes[0].group_members(g), vec![p, q]);
    assert_eq!(net.stats(0).memberships, 2);
    net.nodes[0].leave_group(p, g).unwrap();
    assert_eq!(net.nodes[0].leave_group(p, g), Err(Error::NotMember { pid: p, group: g }));
    // A destroyed member leaves every group.
    let now = net.now;
    net.nodes[0].destroy_process(now, q).unwrap();
    assert!(net.nodes[0].group_members(g).is_empty());
    let mut small = Net::with(1, |c| c.max_memberships = 1);
    let (a, b) = (small.proc(0), small.proc(0));
    small.nodes[0].join_group(a, g).unwrap();
    assert_eq!(small.nodes[0].join_group(b, g), Err(Error::Limit("group memberships")));
}

#[test]
fn the_first_reply_completes_the_send_and_get_reply_returns_the_others() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(9), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    // Every member on every node has the message, from the sender.
    members_reply(&mut net, &members, sender);
    let first = net.take_send(0, sender).unwrap();
    assert_eq!(first.replier, members[0].1, "the local member answered first");
    assert_eq!(first.reply, msg(members[0].1.local() as u8));
    let mut others = Vec::new();
    for _ in 0..3 {
        net.nodes[0].get_reply(now, sender, Duration::from_millis(50)).unwrap();
        net.settle();
        let (who, m) = take_get_reply(&mut net, 0, sender).expect("a queued reply");
        assert_eq!(m, msg(who.local() as u8));
        others.push(who);
    }
    others.sort();
    let mut want: Vec<Pid> = members[1..].iter().map(|(_, m)| *m).collect();
    want.sort();
    assert_eq!(others, want);
    // No more: GetReply waits its limit and says so.
    net.nodes[0].get_reply(now, sender, Duration::from_millis(50)).unwrap();
    net.advance(Duration::from_millis(49));
    assert!(net.take(0, sender).is_none(), "still waiting");
    net.advance(Duration::from_millis(2));
    assert_eq!(take_get_reply(&mut net, 0, sender), None);
    // One Send packet, to the group's address; one Reply per remote member; nothing retransmitted.
    assert_eq!(net.stats(0).sent(PacketType::Send), 1);
    assert_eq!(net.stats(0).received(PacketType::Reply), 3);
    assert_eq!(net.stats(0).retransmissions, 0);
    assert_eq!(net.stats(3).received(PacketType::Send), 0, "a node without members is not on the group address");
}

#[test]
fn get_reply_waits_for_a_late_reply_and_the_next_send_forgets_the_rest() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    members_reply(&mut net, &members[..2], sender);
    net.take_send(0, sender).unwrap();
    net.nodes[0].get_reply(now, sender, Duration::from_millis(500)).unwrap();
    net.settle();
    take_get_reply(&mut net, 0, sender).expect("the second reply was queued");
    net.nodes[0].get_reply(now, sender, Duration::from_millis(500)).unwrap();
    net.settle();
    assert!(net.take(0, sender).is_none());
    members_reply(&mut net, &members[2..3], sender);
    assert_eq!(take_get_reply(&mut net, 0, sender).map(|r| r.0), Some(members[2].1), "woken by the late reply");
    // A new Send (here to a process): the fourth member's reply is dropped.
    let p = net.proc(1);
    net.nodes[1].receive(now, p, None, 0).unwrap();
    net.nodes[0].send(now, sender, p, msg(2), SendOptions::default(), None).unwrap();
    net.settle();
    members_reply(&mut net, &members[3..], sender);
    net.take_received(1, p);
    net.nodes[1].reply(now, p, sender, msg(3), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(0, sender).unwrap().reply, msg(3));
    assert_eq!(net.nodes[0].get_reply(now, sender, Duration::ZERO), Err(Error::NoGroupSend));
}

#[test]
fn mode_one_drops_later_replies_and_mode_none_returns_at_once() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::One, SendOptions::default()).unwrap();
    net.settle();
    members_reply(&mut net, &members, sender);
    net.take_send(0, sender).unwrap();
    assert_eq!(net.stats(0).group_replies_dropped, 3);
    net.nodes[0].get_reply(now, sender, Duration::ZERO).unwrap();
    net.advance(Duration::from_millis(1));
    assert_eq!(take_get_reply(&mut net, 0, sender), None);

    for &(i, m) in &members {
        net.nodes[i].receive(net.now, m, None, 0).unwrap();
    }
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(2), ReplyMode::None, SendOptions::default()).unwrap();
    net.settle();
    let done = net.take_send(0, sender).unwrap();
    assert_eq!((done.replier, done.reply), (Pid::NONE, msg(2)), "a datagram: no reply awaited");
    members_reply(&mut net, &members, sender);
    // Replies that come anyway can be collected.
    net.nodes[0].get_reply(now, sender, Duration::ZERO).unwrap();
    net.settle();
    assert!(take_get_reply(&mut net, 0, sender).is_some());
    // Never retransmitted, even with no member anywhere.
    let lonely = net.nodes[0].allocate_group_id().unwrap();
    let now = net.now;
    net.nodes[0].send_group(now, sender, lonely, msg(3), ReplyMode::None, SendOptions::default()).unwrap();
    net.settle();
    net.take_send(0, sender).unwrap();
    let before = net.stats(0).sent(PacketType::Send);
    net.advance(Duration::from_secs(2));
    assert_eq!(net.stats(0).sent(PacketType::Send), before);
}

#[test]
fn a_lost_send_is_retransmitted_and_members_get_it_once() {
    let (mut net, group, sender, members) = setup();
    // The first broadcast reaches node 2 only; node 1 and 3 lose it.
    let mut first = true;
    net.filter = Some(Box::new(move |from, to, _| {
        if from == 0 && *to == Destination::Group(group) && first {
            first = false;
            return 0;
        }
        1
    }));
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    // Nobody remote has it yet; nobody replies: the Send is retransmitted after T_r.
    net.advance(Duration::from_millis(25));
    assert_eq!(net.stats(0).retransmissions, 1);
    assert_eq!(net.stats(2).group_deliveries, 2, "each member of node 2 once");
    net.advance(Duration::from_millis(25));
    assert_eq!(net.stats(2).group_deliveries, 2, "a retransmission is no new message");
    assert!(net.stats(2).duplicates >= 2);
    members_reply(&mut net, &members[1..], sender);
    assert_eq!(net.take_send(0, sender).unwrap().replier, members[1].1, "the first to reply");
}

#[test]
fn a_slow_group_is_kept_alive_and_a_lost_reply_is_resent() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    // Only the remote members; the local one does not receive.
    net.nodes[0].leave_group(members[0].1, group).unwrap();
    lose_the_first_reply(&mut net);
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    // The members think for 3 × T_t: ReplyPending keeps the Send alive.
    net.advance(Duration::from_secs(3));
    assert!(net.take(0, sender).is_none(), "no timeout while members still owe replies");
    assert!(net.stats(0).received(PacketType::ReplyPending) > 0);
    let (i, m) = members[1];
    net.take_received(i, m);
    let now = net.now;
    net.nodes[i].reply(now, m, sender, msg(5), None).unwrap();
    net.settle();
    assert!(net.take(0, sender).is_none(), "the reply was lost");
    net.advance(Duration::from_millis(25));
    let out = net.take_send(0, sender).unwrap();
    assert_eq!((out.replier, out.reply), (m, msg(5)));
    assert!(net.stats(i).replies_resent >= 1, "answered from the cached reply");
}

#[test]
fn an_idempotent_group_send_whose_reply_was_lost_is_delivered_again() {
    let (mut net, group, sender, members) = setup();
    net.nodes[0].leave_group(members[0].1, group).unwrap();
    lose_the_first_reply(&mut net);
    let now = net.now;
    let opts = SendOptions { idempotent: true };
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::One, opts).unwrap();
    net.settle();
    let (i, m) = members[1];
    assert_eq!(net.take_received(i, m).msg, msg(1));
    net.nodes[i].reply(now, m, sender, msg(5), None).unwrap();
    net.nodes[i].receive(now, m, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, sender).is_none(), "the reply was lost (and, idempotent, not kept)");
    // The sender's retransmission delivers the message to that member again.
    net.advance(Duration::from_millis(25));
    assert_eq!(net.take_received(i, m).msg, msg(1), "executed again");
    let now = net.now;
    net.nodes[i].reply(now, m, sender, msg(6), None).unwrap();
    net.settle();
    let out = net.take_send(0, sender).unwrap();
    assert_eq!((out.replier, out.reply), (m, msg(6)));
    assert_eq!(net.stats(i).replies_resent, 0, "nothing was kept to resend");
}

/// Node 1 restarts (a new life, same host id) and its member joins again
/// and waits: the new member's pid.
fn restart_node_1(net: &mut Net, group: Pid) -> Pid {
    net.nodes[1] = Engine::new(Config { seed: 78, ..config(2) }, net.now);
    net.settle();
    let m = net.proc(1);
    net.nodes[1].join_group(m, group).unwrap();
    let now = net.now;
    net.nodes[1].receive(now, m, None, 0).unwrap();
    m
}

#[test]
fn a_group_send_begun_before_a_member_host_restarted_is_not_taken_again() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    assert_eq!(net.take_received(1, members[1].1).msg, msg(1), "the first life took it");
    net.advance(Duration::from_millis(5));
    let reborn = restart_node_1(&mut net, group);
    net.advance(Duration::from_millis(50)); // two retransmissions
    assert!(net.stats(0).retransmissions >= 2);
    assert!(net.take(1, reborn).is_none(), "the new life took the Send again");
    assert_eq!(net.stats(1).group_deliveries, 0);
    assert!(net.stats(1).restart_refusals >= 2, "{:?}", net.stats(1));
    // The Send goes on for the other members.
    members_reply(&mut net, &members[2..3], sender);
    assert_eq!(net.take_send(0, sender).unwrap().replier, members[2].1);
}

#[test]
fn a_group_send_begun_after_the_restart_is_taken_from_a_retransmission() {
    let (mut net, group, sender, _) = setup();
    net.advance(Duration::from_millis(5));
    let reborn = restart_node_1(&mut net, group);
    net.advance(Duration::from_millis(1));
    // The first transmission is lost: the new life hears only retransmissions.
    let mut first = true;
    net.filter = Some(Box::new(move |from, to, _| {
        let drop = from == 0 && matches!(to, Destination::Group(_)) && std::mem::take(&mut first);
        usize::from(!drop)
    }));
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(2), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    assert!(net.take(1, reborn).is_none(), "the first transmission was lost");
    net.advance(Duration::from_millis(25));
    assert_eq!(net.take_received(1, reborn).msg, msg(2));
    assert_eq!(net.stats(1).restart_refusals, 0);
}

#[test]
fn an_idempotent_group_send_is_taken_by_a_restarted_host_again() {
    let (mut net, group, sender, members) = setup();
    let now = net.now;
    let opts = SendOptions { idempotent: true };
    net.nodes[0].send_group(now, sender, group, msg(3), ReplyMode::Many, opts).unwrap();
    net.settle();
    assert_eq!(net.take_received(1, members[1].1).msg, msg(3));
    net.advance(Duration::from_millis(5));
    let reborn = restart_node_1(&mut net, group);
    net.advance(Duration::from_millis(25));
    assert_eq!(net.take_received(1, reborn).msg, msg(3), "at least once");
    assert_eq!(net.stats(1).restart_refusals, 0);
}

#[test]
fn replies_beyond_max_group_replies_are_dropped_and_counted() {
    let (mut net, group, sender, members) = setup_tweaked(|c| c.max_group_replies = 2);
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(9), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    members_reply(&mut net, &members, sender);
    net.take_send(0, sender).unwrap();
    net.nodes[0].get_reply(now, sender, Duration::from_millis(50)).unwrap();
    net.settle();
    assert!(take_get_reply(&mut net, 0, sender).is_some(), "the second reply is kept");
    net.nodes[0].get_reply(now, sender, Duration::from_millis(50)).unwrap();
    net.advance(Duration::from_millis(60));
    assert_eq!(take_get_reply(&mut net, 0, sender), None, "the third and fourth are not");
    assert_eq!(net.stats(0).group_replies_dropped, 2);
}

#[test]
fn a_group_without_members_times_out() {
    let mut net = Net::new(2);
    let g = net.nodes[1].allocate_group_id().unwrap();
    let s = net.proc(0);
    let now = net.now;
    net.nodes[0].send_group(now, s, g, msg(1), ReplyMode::One, SendOptions::default()).unwrap();
    net.advance(Duration::from_millis(999));
    assert!(net.take(0, s).is_none());
    net.advance(Duration::from_millis(30));
    assert_eq!(net.take_send(0, s), Err(Error::Timeout(g)));
}

#[test]
fn group_send_misuse_is_a_typed_error() {
    let mut net = Net::new(2);
    let s = net.proc(0);
    let p = net.proc(1);
    let g = net.nodes[0].allocate_group_id().unwrap();
    let now = net.now;
    assert_eq!(
        net.nodes[0].send_group(now, s, p, msg(1), ReplyMode::One, SendOptions::default()),
        Err(Error::NotAGroup(p))
    );
    assert_eq!(net.nodes[0].send(now, s, g, msg(1), SendOptions::default(), None), Err(Error::GroupId(g)));
    assert_eq!(net.nodes[0].get_reply(now, s, Duration::ZERO), Err(Error::NoGroupSend));
    let outsider = Pid::new(9, 9);
    assert_eq!(
        net.nodes[0].send_group(now, outsider, g, msg(1), ReplyMode::One, SendOptions::default()),
        Err(Error::NotLocalProcess(outsider))
    );
    // A group Send packet with a read segment is delivered with its appended part.
    let mut h = vipc_wire::Header::new(PacketType::Send);
    h.src = Pid::new(2, 5);
    h.dst = g;
    h.seq = 1;
    h.incarnation = 3;
    h.total_len = 4;
    h.flags = vipc_wire::Flags(vipc_wire::Flags::SEG_READ);
    let m = net.proc(0);
    net.nodes[0].join_group(m, g).unwrap();
    let bytes = vipc_wire::to_vec(&h, &[1, 2, 3, 4], None);
    net.nodes[0].handle_datagram(now, addr(1), &bytes);
    assert_eq!(net.stats(0).malformed, 0);
    assert_eq!(net.stats(0).group_deliveries, 1);
    net.nodes[0].receive(now, m, None, 16).unwrap();
    net.settle();
    let r = net.take_received(0, m);
    assert_eq!((r.segment, r.segment_size), (vec![1, 2, 3, 4], 4));
}

/// The node listens on a group's multicast address exactly while it has a
/// local member: `GroupJoined` for the first, `GroupLeft` when the last leaves
/// or is destroyed; second members and repeated joins say nothing.
#[test]
fn group_address_events_follow_local_membership() {
    let mut net = Net::new(1);
    let g = well_known_group(3);
    let (a, b) = (net.proc(0), net.proc(0));
    let events = |net: &mut Net| {
        net.settle();
        let evs: Vec<Event> = net
            .events
            .drain(..)
            .map(|(_, e)| e)
            .filter(|e| matches!(e, Event::GroupJoined(_) | Event::GroupLeft(_)))
            .collect();
        evs
    };
    net.nodes[0].join_group(a, g).unwrap();
    assert_eq!(events(&mut net), vec![Event::GroupJoined(g)]);
    net.nodes[0].join_group(a, g).unwrap();
    net.nodes[0].join_group(b, g).unwrap();
    assert_eq!(events(&mut net), vec![]);
    net.nodes[0].leave_group(a, g).unwrap();
    assert_eq!(events(&mut net), vec![]);
    let now = net.now;
    net.nodes[0].destroy_process(now, b).unwrap();
    assert_eq!(events(&mut net), vec![Event::GroupLeft(g)]);
    assert_eq!(
        net.nodes[0].leave_group(b, g),
        Err(Error::NotMember { pid: b, group: g }),
        "destroyed: no longer a member"
    );
    assert_eq!(events(&mut net), vec![]);
}

/// A plain group Send goes to the group's address; a reliable one to the
/// broadcast channel, because every alive host must acknowledge it.
#[test]
fn plain_sends_go_to_the_group_address_and_reliable_ones_to_every_host() {
    // (Reliable sends need the alive-host service.)
    let (mut net, group, sender, _) = setup_tweaked(|c| c.alive_period = Some(Duration::from_millis(100)));
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    net.filter = Some(Box::new(move |from, to, bytes| {
        if from == 0 && vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Send) {
            log.borrow_mut().push(*to);
        }
        1
    }));
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::None, SendOptions::default()).unwrap();
    net.settle();
    assert_eq!(*seen.borrow(), vec![Destination::Group(group)]);
    seen.borrow_mut().clear();
    net.nodes[0].send_reliable(now, sender, group, msg(2), Reliable::KDeliver(1), SendOptions::default()).unwrap();
    net.settle();
    assert_eq!(seen.borrow().first(), Some(&Destination::Broadcast));
}

#[test]
fn group_addresses_are_deterministic_and_well_known_ones_are_readable() {
    let base = GROUP_ADDR_BASE;
    assert_eq!(group_multicast_addr(base, well_known_group(9)), std::net::Ipv4Addr::new(239, 86, 0, 9));
    assert_eq!(group_multicast_addr(base, well_known_group(0x1234)), std::net::Ipv4Addr::new(239, 86, 0x12, 0x34));
    // Allocated by host 0x0123, number 1: 1 ^ 0x2301.
    let g = Pid((0x8123 << 16) | 1);
    assert_eq!(group_multicast_addr(base, g), std::net::Ipv4Addr::new(239, 86, 0x23, 0x00));
    let other = std::net::Ipv4Addr::new(239, 200, 0, 0);
    assert_eq!(group_multicast_addr(other, well_known_group(9)), std::net::Ipv4Addr::new(239, 200, 0, 9));
    assert!(group_multicast_addr(base, g).is_multicast());
}

/// A segment of `n` bytes: byte i is `(i * 7 + seed) % 251`.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| ((i * 7 + seed as usize) % 251) as u8).collect()
}

/// Like [`setup`], but members take up to `capacity` bytes of an appended segment.
fn setup_with_capacity(capacity: usize) -> (Net, Pid, Pid, Vec<(usize, Pid)>) {
    let mut net = Net::new(3);
    let group = net.nodes[1].allocate_group_id().unwrap();
    let sender = net.proc(0);
    let mut members = Vec::new();
    for i in [0, 1, 2, 2] {
        let m = net.proc(i);
        net.nodes[i].join_group(m, group).unwrap();
        net.nodes[i].receive(Time::ZERO, m, None, capacity).unwrap();
        members.push((i, m));
    }
    (net, group, sender, members)
}

#[test]
fn members_on_every_node_read_a_group_sends_segment_until_it_completes() {
    let (mut net, group, sender, members) = setup_with_capacity(1024);
    let size = 200_000;
    let data = pattern(size, 3);
    let segment = Segment { data: data.clone(), access: Access::READ };
    let now = net.now;
    net.nodes[0]
        .send_group_with_segment(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default(), segment)
        .unwrap();
    net.settle();
    // Each member got the message with the first part of the segment and its size.
    for &(i, m) in &members {
        let r = net.take_received(i, m);
        assert_eq!((r.from, r.segment_size, r.access), (sender, size as u32, Access::READ));
        assert_eq!(r.segment, data[..1024], "the appended part, cut to the receiver's capacity");
    }
    // All of them MoveFrom different ranges at once (local and remote members alike).
    for (k, &(i, m)) in members.iter().enumerate() {
        let now = net.now;
        net.nodes[i].move_from(now, m, sender, (k * 40_000) as u32, 60_000).unwrap();
    }
    net.settle();
    for (k, &(i, m)) in members.iter().enumerate() {
        assert!(net.take_move(i, m).unwrap() == data[k * 40_000..k * 40_000 + 60_000], "member {k} read its range");
    }
    // MoveTo is refused: the segment grants no write, and a group never gets one by MoveTo.
    let (i, m) = members[1];
    let now = net.now;
    assert_eq!(net.nodes[i].move_to(now, m, sender, 0, vec![1; 10]), Err(Error::NoAccess("write")));
    assert_eq!(
        net.nodes[i].move_from(now, m, sender, 190_000, 20_000).unwrap_err(),
        Error::OutOfSegment { offset: 190_000, len: 20_000, size: size as u64 }
    );
    // The first reply completes the Send and returns the segment, unchanged.
    net.nodes[i].reply(now, m, sender, msg(2), None).unwrap();
    net.settle();
    let out = net.take_send(0, sender).unwrap();
    assert_eq!(out.replier, m);
    assert!(out.segment.expect("the segment comes back").data == data);
    // After that, reading is no longer allowed: locally refused, remotely refused by the sender's node.
    let (j, late) = members[2];
    let now = net.now;
    net.nodes[j].move_from(now, late, sender, 0, 100).unwrap();
    net.settle();
    assert_eq!(net.take_move(j, late), Err(Error::NotAwaitingReply(sender)));
    let (l, local) = members[0];
    assert_eq!(net.nodes[l].move_from(now, local, sender, 0, 100), Err(Error::NotAwaitingReply(sender)));
}

#[test]
fn only_the_first_replys_segment_is_written() {
    let (mut net, group, sender, members) = setup_with_capacity(0);
    let segment = Segment { data: vec![0; 64], access: Access::WRITE };
    let now = net.now;
    net.nodes[0]
        .send_group_with_segment(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default(), segment)
        .unwrap();
    net.settle();
    let remote = &members[1..];
    for &(i, m) in remote {
        let r = net.take_received(i, m);
        assert_eq!(
            (r.segment_size, r.access, r.segment.len()),
            (64, Access::WRITE, 0),
            "nothing appended to a write-only segment"
        );
    }
    // Replies bigger than the segment, or from a copy without write access, are refused at once.
    let (i, m) = remote[0];
    let now = net.now;
    assert!(matches!(
        net.nodes[i].reply(now, m, sender, msg(5), Some((60, vec![1; 10]))),
        Err(Error::OutOfSegment { .. })
    ));
    // Remote members reply, each with a segment; the first one's lands, the others' are dropped and counted.
    for (k, &(i, m)) in remote.iter().enumerate() {
        let now = net.now;
        net.nodes[i].reply(now, m, sender, msg(10 + k as u8), Some((8, vec![0xA0 + k as u8; 16]))).unwrap();
        net.settle();
    }
    let out = net.take_send(0, sender).unwrap();
    assert_eq!(out.replier, remote[0].1);
    let seg = out.segment.expect("the segment comes back").data;
    assert_eq!(seg[8..24], [0xA0; 16]);
    assert!(seg[..8].iter().chain(&seg[24..]).all(|&b| b == 0), "nothing outside the reply's range");
    assert_eq!(net.stats(0).group_segment_dropped, 2);
    // The local member's late reply with a segment is dropped too (the Send is over).
    let (l, local) = members[0];
    net.take_received(l, local);
    let now = net.now;
    net.nodes[l].reply(now, local, sender, msg(9), Some((0, vec![7; 4]))).unwrap();
    assert_eq!(net.stats(0).group_segment_dropped, 3);
}

#[test]
fn a_local_first_replier_writes_the_segment() {
    let (mut net, group, sender, members) = setup_with_capacity(0);
    let segment = Segment { data: vec![0; 32], access: Access::READ_WRITE };
    let now = net.now;
    net.nodes[0]
        .send_group_with_segment(now, sender, group, msg(1), ReplyMode::One, SendOptions::default(), segment)
        .unwrap();
    net.settle();
    let (l, local) = members[0];
    net.take_received(l, local);
    let now = net.now;
    net.nodes[l].move_from(now, local, sender, 0, 32).unwrap();
    net.settle();
    assert_eq!(net.take_move(l, local).unwrap(), vec![0; 32]);
    net.nodes[l].reply(now, local, sender, msg(3), Some((30, vec![9, 9]))).unwrap();
    net.settle();
    let out = net.take_send(0, sender).unwrap();
    assert_eq!(out.segment.unwrap().data[28..], [0, 0, 9, 9]);
}

#[test]
fn a_group_segment_needs_a_waiting_sender_and_wellformed_packets() {
    let (mut net, group, sender, _) = setup_with_capacity(0);
    let now = net.now;
    let segment = Segment { data: vec![0; 8], access: Access::READ };
    assert!(matches!(
        net.nodes[0].send_group_with_segment(
            now,
            sender,
            group,
            msg(1),
            ReplyMode::None,
            SendOptions::default(),
            segment
        ),
        Err(Error::Unsupported(_))
    ));
    // A group Send carrying data without read access, or more data than its segment, is dropped and counted.
    for (flags, total, data) in [(Flags(0), 0u32, vec![1u8; 4]), (Flags(0).with(Flags::SEG_READ, true), 2, vec![1; 4])]
    {
        let mut h = Header::new(PacketType::Send);
        h.flags = flags;
        h.seq = 77;
        h.src = Pid::new(9, 1);
        h.dst = group;
        h.fwd = h.src;
        h.total_len = total;
        let before = net.stats(1).malformed;
        let bytes = vipc_wire::to_vec(&h, &data, None);
        let now = net.now;
        net.nodes[1].handle_datagram(now, addr(0), &bytes);
        assert_eq!(net.stats(1).malformed, before + 1);
    }
}

/// A member's kept reply is resent, for a duplicate of the group Send, to
/// the sender's node the copy came from — never to the address a forged
/// duplicate claims.
#[test]
fn a_kept_group_reply_is_resent_to_the_senders_node_only() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let (mut net, group, sender, members) = setup();
    net.nodes[0].leave_group(members[0].1, group).unwrap();
    let sends: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = sends.clone();
    net.filter = Some(Box::new(move |from, _, bytes| match vipc_wire::parse(bytes, None).map(|p| p.header.ptype) {
        Ok(PacketType::Send) if from == 0 => {
            seen.borrow_mut().push(bytes.to_vec());
            1
        }
        Ok(PacketType::Reply) => 0, // every reply lost: the members keep theirs
        _ => 1,
    }));
    let now = net.now;
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::Many, SendOptions::default()).unwrap();
    net.settle();
    let (i, m) = members[1];
    net.take_received(i, m);
    net.nodes[i].reply(now, m, sender, msg(5), None).unwrap();
    net.settle();
    let send = sends.borrow()[0].clone();
    let victim: std::net::SocketAddr = "192.0.2.7:4000".parse().unwrap();
    let before = net.stats(i).replies_resent;
    net.nodes[i].handle_datagram(now, victim, &send);
    let replies: Vec<Transmit> = std::iter::from_fn(|| net.nodes[i].poll_transmit())
        .filter(|t| vipc_wire::parse(&t.bytes, None).is_ok_and(|p| p.header.ptype == PacketType::Reply))
        .collect();
    assert_eq!(replies.len(), 1, "the kept reply again");
    assert_eq!(replies[0].to, Destination::Addr(addr(0)), "to the sender's node, not to the forged source");
    assert_eq!(net.stats(i).replies_resent, before + 1);
}

/// A local member that works longer than T_t keeps a plain group Send
/// alive, as a remote member's node does with ReplyPending: it timed out,
/// and its copy expired under it.
#[test]
fn a_slow_local_member_keeps_a_group_send_alive() {
    let mut net = Net::new(1);
    let group = well_known_group(78);
    let member = net.proc(0);
    net.nodes[0].join_group(member, group).unwrap();
    let sender = net.proc(0);
    let now = net.now;
    net.nodes[0].receive(now, member, None, 0).unwrap();
    net.nodes[0].send_group(now, sender, group, msg(1), ReplyMode::One, SendOptions::default()).unwrap();
    net.settle();
    let _ = net.take_received(0, member);
    net.advance(Duration::from_millis(3500));
    assert!(net.take(0, sender).is_none(), "timed out while its local member worked");
    let now = net.now;
    net.nodes[0].reply(now, member, sender, msg(2), None).unwrap();
    net.settle();
    let r = net.take_send(0, sender).expect("the member's reply completes it");
    assert_eq!((r.replier, r.reply), (member, msg(2)));
}

/// A destroyed sender's group Send is withdrawn from the local members that
/// have not taken it, as its one-to-one Sends are (a reliable one's copy
/// would otherwise wait for ever, and its reply go nowhere).
#[test]
fn a_destroyed_senders_group_send_is_withdrawn_from_local_members() {
    let mut net = Net::with(1, |c| c.alive_period = Some(Duration::from_millis(100)));
    let group = well_known_group(81);
    let (member, sender) = (net.proc(0), net.proc(0));
    net.nodes[0].join_group(member, group).unwrap();
    let now = net.now;
    net.nodes[0].send_reliable(now, sender, group, msg(1), Reliable::AllDeliver, SendOptions::default()).unwrap();
    net.settle();
    assert!(matches!(net.take(0, sender), Some(Completion::Group(o)) if o.met));
    assert_eq!(net.stats(0).group_copies, 1);
    net.nodes[0].destroy_process(now, sender).unwrap();
    assert_eq!(net.stats(0).group_copies, 0, "the copy went with its sender");
    net.nodes[0].receive(now, member, None, 0).unwrap();
    net.settle();
    assert!(net.take(0, member).is_none(), "the member gets nothing from a destroyed sender");
}
