//! Discovery over the loopback multicast group: logical-host allocation by
//! announcement–complaint, location by broadcast, remote GetPid — no static peers.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;
use vipc::{Multicast, Node, NodeConfig, Scope};

/// A group of its own for each test run, so parallel runs do not hear each other.
fn random_group() -> SocketAddrV4 {
    let r: u32 = rand_u32();
    SocketAddrV4::new(Ipv4Addr::new(239, 255, (r >> 8) as u8, r as u8 | 1), 20_000 + (r >> 16) as u16 % 40_000)
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    h.finish() as u32
}

fn config(group: SocketAddrV4) -> NodeConfig {
    let mut cfg = NodeConfig::default();
    cfg.broadcast.multicast = Some(Multicast { group, ..Multicast::default() });
    cfg.engine.host_alloc_wait = Duration::from_millis(200);
    cfg
}

#[test]
fn nodes_allocate_distinct_hosts_and_find_each_other_over_multicast() {
    let group = random_group();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(config(group)).unwrap()).collect();
    let mut hosts: Vec<u16> = nodes.iter().map(Node::host_id).collect();
    hosts.sort();
    hosts.dedup();
    assert_eq!(hosts.len(), 3, "distinct logical hosts: {hosts:?}");
    assert!(hosts.iter().all(|&h| (1..=0x7fff).contains(&h)));

    let echo = vipc::services::spawn_echo(&nodes[0], Some("mc-echo")).unwrap();
    let c = nodes[2].attach().unwrap();
    assert_eq!(c.get_pid("mc-echo", Scope::Remote).unwrap(), Some(echo));
    let mut m = [9u8; 32];
    assert_eq!(c.send(&mut m, echo).unwrap(), echo);
    assert_eq!(m, [9u8; 32]);
    // Host 2's kernel server, never contacted before: located by broadcast.
    let c2 = nodes[0].attach().unwrap();
    vipc::services::ping_kernel(&c2, nodes[1].host_id()).unwrap();

    // A node on another group hears none of it.
    let mut other = random_group();
    while other == group {
        other = random_group();
    }
    let loner = Node::start(config(other)).unwrap();
    let l = loner.attach().unwrap();
    assert_eq!(l.get_pid("mc-echo", Scope::Remote).unwrap(), None);
}

/// A member of `g` on `node` that answers every message with sevens.
fn spawn_sevens(node: &Node, g: vipc::Pid) -> vipc::Pid {
    let (member, _) = node
        .spawn(move |p| {
            p.join_group(g).unwrap();
            while let Ok(from) = p.receive(&mut [0u8; 32]) {
                let _ = p.reply(&[7u8; 32], from);
            }
        })
        .unwrap();
    member
}

/// With multicast, a plain group Send goes to the group's own address: the
/// node with a member hears it, a node without one does not (its socket never
/// joined that address).
#[test]
fn group_sends_go_to_the_group_address_and_only_member_nodes_hear_them() {
    use vipc::{ReplyMode, SendOptions};
    let group = random_group();
    let nodes: Vec<Node> = (0..3).map(|_| Node::start(config(group)).unwrap()).collect();
    let g = vipc::well_known_group(0x4242);
    let member = spawn_sevens(&nodes[1], g);
    let sends_in = |n: &Node| n.stats().packets_in[vipc_wire::PacketType::Send.index()];
    let me = nodes[0].attach().unwrap();
    let mut m = [1u8; 32];
    // The member may not have joined yet: the Send is retransmitted until a reply.
    assert_eq!(me.send_group(&mut m, g, ReplyMode::One, SendOptions::default()).unwrap(), member);
    assert_eq!(m, [7u8; 32]);
    assert!(sends_in(&nodes[1]) >= 1);
    assert_eq!(sends_in(&nodes[2]), 0, "a node without members heard the group's Send");
    assert_eq!(nodes[0].stats().unicast_fanout, 0, "with multicast nothing is fanned out");
}

/// Second byte of a message that makes [`spawn_adder`]'s member exit.
const EXIT: u8 = 0xEE;

/// A member spawned on `node` that joins `g` and answers every message with
/// its first byte plus one, until a message says [`EXIT`].
fn spawn_adder(node: &Node, g: vipc::Pid) -> vipc::Pid {
    node.spawn(move |p| {
        p.join_group(g).unwrap();
        let mut m = [0u8; 32];
        while let Ok(from) = p.receive(&mut m) {
            m[0] = m[0].wrapping_add(1);
            let _ = p.reply(&m, from);
            if m[1] == EXIT {
                return;
            }
        }
    })
    .unwrap()
    .0
}

/// A member blocked in Receive whose messages come by multicast reads the
/// multicast socket itself (the multicast token): after the first messages,
/// group Sends reach it without a hand-off from the multicast thread.
#[test]
fn a_multicast_hot_member_reads_its_group_sends_itself() {
    use vipc::{ReplyMode, SendOptions};
    let group = random_group();
    let nodes: Vec<Node> = (0..2).map(|_| Node::start(config(group)).unwrap()).collect();
    let g = vipc::well_known_group(0x4243);
    let member = spawn_adder(&nodes[1], g);
    let me = nodes[0].attach().unwrap();
    let sends = 200u64;
    for i in 0..sends {
        let mut m = [0u8; 32];
        m[0] = i as u8;
        assert_eq!(me.send_group(&mut m, g, ReplyMode::One, SendOptions::default()).unwrap(), member);
        assert_eq!(m[0], (i as u8).wrapping_add(1), "send {i}");
    }
    let direct = nodes[1].stats().multicast_by_receiver;
    assert!(direct >= sends / 2, "only {direct} of {sends} group Sends were read by their member");
}

/// The member holding the multicast token is woken at once for a message
/// that does not come by multicast (here a local Send), not when its wait
/// on the socket times out; and when it is gone, the multicast thread reads
/// the group's Sends again.
#[test]
fn the_multicast_token_holder_hears_other_messages_and_its_exit_frees_the_token() {
    use std::time::Instant;
    use vipc::{ReplyMode, SendOptions};
    let group = random_group();
    // No announcements: nothing but the test's own datagrams ends the holder's wait.
    let quiet = || {
        let mut c = config(group);
        c.engine.alive_period = None;
        c
    };
    let nodes: Vec<Node> = (0..2).map(|_| Node::start(quiet()).unwrap()).collect();
    let g = vipc::well_known_group(0x4244);
    let member = spawn_adder(&nodes[1], g);
    let remote = nodes[0].attach().unwrap();
    let warm = |n: u64| {
        for _ in 0..n {
            remote.send_group(&mut [0u8; 32], g, ReplyMode::One, SendOptions::default()).unwrap();
        }
    };
    warm(20);
    let before = nodes[1].stats().multicast_by_receiver;
    warm(5);
    assert!(nodes[1].stats().multicast_by_receiver > before, "the member does not hold the multicast token");
    // Now the member waits on the multicast socket: a local Send must wake it.
    let local = nodes[1].attach().unwrap();
    let mut times = Vec::new();
    for i in 0..10u8 {
        let mut m = [i; 32];
        let t = Instant::now();
        local.send(&mut m, member).unwrap();
        times.push(t.elapsed());
        assert_eq!(m[0], i + 1);
        warm(2); // the member takes the token again
    }
    // Unwoken, the holder would wait for its poll of the socket to end
    // (RECV_POLL, 100 ms: no announcements here): a Send slower than half of
    // that was not woken. One such is allowed for a stall of this machine.
    let slow = times.iter().filter(|t| **t > Duration::from_millis(50)).count();
    assert!(slow <= 1, "local Sends to the token holder took {times:?}");
    // The member exits with the token: a new member's first messages come
    // by the multicast thread again.
    warm(2);
    let mut bye = [0u8; 32];
    bye[1] = EXIT;
    remote.send_group(&mut bye, g, ReplyMode::One, SendOptions::default()).unwrap();
    let second = spawn_adder(&nodes[1], g);
    for _ in 0..5 {
        let mut m = [0u8; 32];
        assert_eq!(remote.send_group(&mut m, g, ReplyMode::One, SendOptions::default()).unwrap(), second);
    }
}

/// A member that read the multicast socket while waiting in Receive, then
/// took the unicast socket's reader token in the same wait, gives the
/// multicast token back: broadcasts (name lookups) are still read while it
/// waits. It kept it, and nobody read the multicast socket until a unicast
/// message came for it (found by a soak test in namespaces, after `vipc
/// exec`).
#[test]
fn a_member_waiting_on_the_unicast_socket_leaves_the_multicast_socket_to_others() {
    use vipc::{ReplyMode, SendOptions};
    let group = random_group();
    let nodes: Vec<Node> = (0..2).map(|_| Node::start(config(group)).unwrap()).collect();
    let g = vipc::well_known_group(0x4343);
    let member = spawn_sevens(&nodes[1], g);
    nodes[1].set_pid("waits-on-unicast", member, Scope::Any).unwrap();
    // A slow server on node 0: a Send to it holds node 1's unicast reader token a while.
    let (slow, _) = nodes[0]
        .spawn(|p| {
            while let Ok(from) = p.receive(&mut [0u8; 32]) {
                std::thread::sleep(Duration::from_millis(150));
                let _ = p.reply(&[0u8; 32], from);
                // A broadcast right behind the reply: it ends the member's
                // poll of the multicast socket just as the reader token is free.
                let _ = p.get_pid("nobody-by-this-name", Scope::Remote);
            }
        })
        .unwrap();
    let me = nodes[0].attach().unwrap();
    let other = nodes[1].attach().unwrap();
    // The member hot on both sockets, then waiting in Receive while
    // another process of its node reads the unicast socket: it reads the
    // multicast socket, and takes the unicast one once the other is done.
    let waiting = std::thread::spawn(move || other.send(&mut [1u8; 32], slow).map(drop));
    std::thread::sleep(Duration::from_millis(20));
    me.send_group(&mut [1u8; 32], g, ReplyMode::One, SendOptions::default()).unwrap();
    me.send(&mut [1u8; 32], member).unwrap();
    waiting.join().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(400)); // the slow server's lookup ends
    let mut unanswered = 0;
    for _ in 0..5 {
        if me.get_pid("waits-on-unicast", Scope::Remote).unwrap() != Some(member) {
            unanswered += 1;
        }
    }
    assert_eq!(unanswered, 0, "lookups of a name on the member's node went unanswered");
}

/// A member of 40 groups hears every one of them: a socket holds only
/// `igmp_max_memberships` addresses (20 by default, the broadcast channel
/// one of them), and Sends to the groups past that were lost (the 19th and
/// later of 24 timed out while `join_group` had said Ok). Leaving them all
/// leaves every address: the node hears none of the groups afterwards.
#[test]
fn a_member_of_many_groups_hears_all_of_them() {
    use vipc::{ReplyMode, SendOptions};
    let group = random_group();
    let mut cfg = config(group);
    cfg.engine.timeout = Duration::from_millis(500);
    let nodes: Vec<Node> = (0..2).map(|_| Node::start(cfg.clone()).unwrap()).collect();
    let groups: Vec<vipc::Pid> = (0..40u16).map(|i| vipc::well_known_group(1000 + i)).collect();
    let (joined, leave) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let gs = groups.clone();
    let (member, _) = nodes[1]
        .spawn(move |p| {
            for g in &gs {
                p.join_group(*g).unwrap();
            }
            joined.0.send(()).unwrap();
            let mut m = [0u8; 32];
            while let Ok(from) = p.receive(&mut m) {
                let _ = p.reply(&[7u8; 32], from);
                if m[0] == 0xEE {
                    for g in &gs {
                        p.leave_group(*g).unwrap();
                    }
                    leave.0.send(()).unwrap();
                }
            }
        })
        .unwrap();
    joined.1.recv().unwrap();
    let me = nodes[0].attach().unwrap();
    let unanswered: Vec<_> = groups
        .iter()
        .filter(|&&g| me.send_group(&mut [1u8; 32], g, ReplyMode::One, SendOptions::default()).ok() != Some(member))
        .collect();
    assert!(unanswered.is_empty(), "group Sends unanswered: {unanswered:?}");
    me.send(&mut [0xEE; 32], member).unwrap();
    leave.1.recv().unwrap();
    for g in [groups[0], groups[39]] {
        let r = me.send_group(&mut [1u8; 32], g, ReplyMode::One, SendOptions::default());
        assert!(r.is_err(), "a group left still answered: {r:?}");
    }
}
