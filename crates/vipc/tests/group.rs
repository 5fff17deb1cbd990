//! Process groups over real loopback sockets: members on three nodes, a
//! Send to the group in each reply mode, GetReply, and leaving a group.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::time::Duration;
use vipc::{Error, Pid, Process, ReplyMode, SendOptions};

/// A member that answers every message with its pid in bytes 0..4, until its node stops.
fn member(p: Process, group: Pid) {
    p.join_group(group).unwrap();
    loop {
        let mut m = [0u8; 32];
        let from = match p.receive(&mut m) {
            Ok(f) => f,
            Err(Error::NodeStopped) => return,
            Err(e) => panic!("member receive: {e}"),
        };
        if m[0] == 0xFF {
            p.leave_group(group).unwrap();
        }
        m[0..4].copy_from_slice(&p.pid().0.to_le_bytes());
        let _ = p.reply(&m, from);
    }
}

fn replier_of(m: &[u8; 32]) -> Pid {
    Pid(u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
}

#[test]
fn a_send_to_a_group_reaches_members_on_every_node() {
    let nodes = cluster(3);
    let group = nodes[0].allocate_group_id().unwrap();
    let mut members = BTreeSet::new();
    for i in [0, 1, 1, 2] {
        let (pid, _) = nodes[i].spawn(move |p| member(p, group)).unwrap();
        members.insert(pid);
    }
    std::thread::sleep(Duration::from_millis(50)); // let every member join
    let me = nodes[0].attach().unwrap();

    // Many: the first reply returns the Send, GetReply the others.
    let mut m = [1u8; 32];
    let first = me.send_group(&mut m, group, ReplyMode::Many, SendOptions::default()).unwrap();
    assert_eq!(replier_of(&m), first, "the reply overwrote the message");
    let mut got = BTreeSet::from([first]);
    while let Some((who, r)) = me.get_reply(Duration::from_millis(500)).unwrap() {
        assert_eq!(replier_of(&r), who);
        assert!(got.insert(who), "{who} replied twice");
        if got.len() == members.len() {
            break;
        }
    }
    assert_eq!(got, members, "every member replied once");
    assert_eq!(me.get_reply(Duration::from_millis(20)).unwrap(), None, "no fifth reply");

    // One: later replies are dropped.
    let mut m = [2u8; 32];
    let first = me.send_group(&mut m, group, ReplyMode::One, SendOptions::default()).unwrap();
    assert!(members.contains(&first));
    assert_eq!(me.get_reply(Duration::from_millis(100)).unwrap(), None);

    // None: back at once; the replies can still be collected.
    let mut m = [3u8; 32];
    assert_eq!(me.send_group(&mut m, group, ReplyMode::None, SendOptions::default()).unwrap(), Pid::NONE);
    assert_eq!(m, [3u8; 32], "no reply overwrote the message");
    let mut late = BTreeSet::new();
    while let Some((who, _)) = me.get_reply(Duration::from_millis(500)).unwrap() {
        late.insert(who);
        if late.len() == members.len() {
            break;
        }
    }
    assert_eq!(late, members);

    // Every member leaves on message 0xFF: the next Send reaches nobody and times out.
    let mut m = [0xFF; 32];
    me.send_group(&mut m, group, ReplyMode::Many, SendOptions::default()).unwrap();
    while me.get_reply(Duration::from_millis(200)).unwrap().is_some() {}
    let mut m = [4u8; 32];
    let r = me.send_group(&mut m, group, ReplyMode::Many, SendOptions::default());
    assert!(matches!(r, Err(Error::Protocol(vipc::ProtocolError::Timeout(g))) if g == group), "{r:?}");
    let s = nodes[1].stats();
    assert!(s.group_deliveries >= 8 && s.memberships == 1, "only the kernel server is left: {s:?}");
}

#[test]
fn reliable_sends_count_every_member_of_the_hosts_alive() {
    use vipc::Reliable;
    let nodes = cluster(3);
    let group = nodes[0].allocate_group_id().unwrap();
    for i in [0, 1, 1, 2] {
        nodes[i].spawn(move |p| member(p, group)).unwrap();
    }
    // Every alive-host table is full and every member has joined.
    let full = |n: &vipc::Node| n.alive_hosts().unwrap().hosts().count() == 2;
    for _ in 0..200 {
        if nodes.iter().all(full) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(50));
    let me = nodes[0].attach().unwrap();
    let o = me.send_reliable(&[1; 32], group, Reliable::AllReply, SendOptions::default()).unwrap();
    assert!(o.met, "{o:?}");
    assert_eq!((o.count, o.receivers, o.hosts_acked, o.hosts), (4, 4, 2, 2));
    assert_eq!(replier_of(&o.reply), o.first_replier);
    let o = me.send_reliable(&[2; 32], group, Reliable::AllDeliver, SendOptions::default()).unwrap();
    assert!(o.met && o.count == 4, "{o:?}");
    let o = me.send_reliable(&[3; 32], group, Reliable::KReply(5), SendOptions::default()).unwrap();
    assert!(!o.met && o.count == 4, "only 4 members: {o:?}");

    // Node 3 stops; until it is declared down, ALL_REPLY fails (after T_t) while K_REPLY(3) succeeds.
    nodes[2].shutdown();
    let o = me.send_reliable(&[4; 32], group, Reliable::KReply(3), SendOptions::default()).unwrap();
    assert!(o.met && o.count >= 3, "{o:?}");
    let o = me.send_reliable(&[5; 32], group, Reliable::AllReply, SendOptions::default()).unwrap();
    if o.hosts == 2 {
        assert!(!o.met && o.count == 3 && o.hosts_acked == 1, "{o:?}");
    } else {
        // Declared down before the Send began: not part of "all".
        assert!(o.met && o.count == 3, "{o:?}");
    }
    // Once it is declared down, ALL_REPLY succeeds with the members left.
    std::thread::sleep(Duration::from_millis(500));
    let o = me.send_reliable(&[6; 32], group, Reliable::AllReply, SendOptions::default()).unwrap();
    assert!(o.met && (o.count, o.hosts) == (3, 1), "{o:?}");
}

/// Without multicast a group Send fans out by unicast to the static peers
/// *and* the hosts heard through I-Am-Here: node 2 lists nodes 0 and 1 as
/// peers, nodes 0 and 1 list only each other, so node 0 reaches node 2's
/// member only through its alive-host table.
#[test]
fn without_multicast_group_sends_fan_out_to_the_alive_hosts() {
    let addrs = free_addrs(3);
    let peers_of = |i: usize| match i {
        0 => vec![addrs[1]],
        1 => vec![addrs[0]],
        _ => vec![addrs[0], addrs[1]],
    };
    let nodes: Vec<vipc::Node> = (0..3)
        .map(|i| vipc::Node::start(vipc::NodeConfig::fixed(31 + i as u16, addrs[i], peers_of(i))).unwrap())
        .collect();
    let group = vipc::well_known_group(41);
    let (far, _) = nodes[2].spawn(move |p| member(p, group)).unwrap();
    let me = nodes[0].attach().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !me.alive_hosts().unwrap().hosts().any(|h| h == 33) {
        assert!(std::time::Instant::now() < deadline, "node 0 never heard node 2's I-Am-Here");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = nodes[0].stats();
    let mut m = [5u8; 32];
    let first = me.send_group(&mut m, group, ReplyMode::One, SendOptions::default()).unwrap();
    assert_eq!(first, far, "the member on the host known only as alive replied");
    assert_eq!(replier_of(&m), far);
    // One copy to the peer (node 1) and one to the alive host (node 2), counted as fan-out.
    let after = nodes[0].stats();
    let sends = after.sent(vipc::PacketType::Send) - before.sent(vipc::PacketType::Send);
    assert!(sends >= 1, "the group Send went out");
    assert!(after.unicast_fanout - before.unicast_fanout >= 2 * sends, "{before:?} {after:?}");
}

/// 000 §6.8 over real sockets: every member, on every node, reads the group
/// Send's segment with MoveFrom at the same time; only the first reply's
/// segment is written into it.
#[test]
fn members_share_a_read_segment_and_only_the_first_replier_writes() {
    use std::sync::{Arc, Barrier};
    use vipc::SegmentRef;
    let nodes = cluster(3);
    let group = nodes[0].allocate_group_id().unwrap();
    let homes = [0, 1, 2, 2];
    let all_read = Arc::new(Barrier::new(homes.len()));
    let size = 300_000;
    let expected: u64 = (0..size).map(|i| (i % 251) as u64).sum();
    for i in homes {
        let all_read = all_read.clone();
        nodes[i]
            .spawn(move |p| {
                p.join_group(group).unwrap();
                let mut m = [0u8; 32];
                let mut first_part = vec![0u8; 1000];
                let info = p.receive_with_segment(&mut m, &mut first_part).unwrap();
                assert_eq!((info.segment_size, info.len), (size as u32, 1000));
                let mut whole = vec![0u8; size];
                p.move_from(info.from, 0, &mut whole).unwrap();
                assert_eq!(whole[..1000], first_part[..], "the appended part is the segment's start");
                let refused = p.move_to(info.from, 0, &[1]).unwrap_err();
                assert!(matches!(refused.protocol(), Some(vipc_engine::Error::NoAccess(_))), "{refused}");
                all_read.wait(); // nobody replies before every member has read
                let sum: u64 = whole.iter().map(|&b| b as u64).sum();
                m[..8].copy_from_slice(&sum.to_le_bytes());
                p.reply_with_segment(&m, info.from, 0, &p.pid().0.to_le_bytes()).unwrap();
            })
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(50)); // let every member join
    let me = nodes[0].attach().unwrap();
    let mut segment: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut m = [0u8; 32];
    let first = me
        .send_group_with(&mut m, group, ReplyMode::Many, SegmentRef::ReadWrite(&mut segment), SendOptions::default())
        .unwrap();
    assert_eq!(u64::from_le_bytes(m[..8].try_into().unwrap()), expected, "the first replier read it all");
    assert_eq!(segment[..4], first.0.to_le_bytes(), "the first replier's segment landed");
    assert!(segment[4..].iter().enumerate().all(|(i, &b)| b == ((i + 4) % 251) as u8), "nothing else changed");
    let mut others = 0;
    while let Some((_, r)) = me.get_reply(Duration::from_millis(1000)).unwrap() {
        assert_eq!(u64::from_le_bytes(r[..8].try_into().unwrap()), expected);
        others += 1;
        if others == homes.len() - 1 {
            break;
        }
    }
    assert_eq!(others, homes.len() - 1, "every member read the whole segment and replied");
    assert_eq!(segment[..4], first.0.to_le_bytes(), "later replies' segments were dropped");
    let dropped = nodes[0].stats().group_segment_dropped;
    assert_eq!(dropped, 3);
}
