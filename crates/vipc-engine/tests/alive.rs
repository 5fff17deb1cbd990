//! I-Am-Here (004 §4.2): the alive-host table's rules.

mod common;

use common::*;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::PacketType;

const PERIOD: Duration = Duration::from_millis(100);

fn alive_net(n: usize) -> Net {
    Net::with(n, |c| c.alive_period = Some(PERIOD))
}

fn hosts(net: &Net, i: usize) -> Vec<HostId> {
    let mut h: Vec<HostId> = net.nodes[i].alive_hosts().hosts().collect();
    h.sort_unstable();
    h
}

fn is_i_am_here(bytes: &[u8]) -> bool {
    vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.ptype == PacketType::IAmHere)
}

/// Events of kind HostUp/HostDown seen by node `i`, in order, as (up?, host).
fn changes(net: &Net, i: usize) -> Vec<(bool, HostId)> {
    net.events
        .iter()
        .filter(|(n, _)| *n == i)
        .filter_map(|(_, e)| match e {
            Event::HostUp { host, .. } => Some((true, *host)),
            Event::HostDown(host) => Some((false, *host)),
            _ => None,
        })
        .collect()
}

#[test]
fn hosts_learn_each_other_from_the_first_announcements() {
    let mut net = alive_net(3);
    net.advance(Duration::from_millis(11));
    assert_eq!(hosts(&net, 0), vec![2, 3]);
    assert_eq!(hosts(&net, 1), vec![1, 3]);
    assert_eq!(hosts(&net, 2), vec![1, 2]);
    assert_eq!(net.stats(0).alive_hosts, 2);
    assert_eq!(net.stats(0).hosts_up, 2);
}

#[test]
fn a_newcomer_fills_its_table_within_10_ms() {
    let mut net = alive_net(3);
    net.advance(Duration::from_millis(250));
    let mut c = config(4);
    c.alive_period = Some(PERIOD);
    net.nodes.push(Engine::new(c, net.now));
    // Its HELLO reaches everyone at once; their answers come within 10 ms, long before a period.
    net.advance(Duration::from_millis(10));
    assert_eq!(hosts(&net, 3), vec![1, 2, 3]);
    assert_eq!(hosts(&net, 0), vec![2, 3, 4]);
}

#[test]
fn a_silent_host_is_declared_down_within_the_bound_and_not_before() {
    let mut net = alive_net(3);
    net.advance(Duration::from_millis(500));
    let crashed = net.now;
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 2)));
    let mut declared = None;
    for _ in 0..100 {
        net.advance(Duration::from_millis(5));
        if !hosts(&net, 0).contains(&3) {
            declared = Some(net.now.since(crashed));
            break;
        }
    }
    let after = declared.expect("host 3 declared down");
    // Down after 3 silent periods, noticed at a tick (periods are up to 5% longer).
    assert!(after >= PERIOD * 2, "declared down too early: {after:?}");
    assert!(after <= PERIOD * 4 + PERIOD / 5, "declared down too late: {after:?}");
    assert_eq!(changes(&net, 0).last(), Some(&(false, 3)));
    assert_eq!(net.stats(0).hosts_down, 1);
    assert_eq!(hosts(&net, 0), vec![2], "the live host stays");
}

#[test]
fn two_lost_announcements_in_a_row_are_harmless() {
    let mut net = alive_net(2);
    net.advance(Duration::from_millis(50));
    let mut dropped = 0;
    net.filter = Some(Box::new(move |from, _, bytes| {
        if from == 1 && is_i_am_here(bytes) && dropped < 2 {
            dropped += 1;
            return 0;
        }
        1
    }));
    net.advance(Duration::from_secs(2));
    assert_eq!(hosts(&net, 0), vec![2]);
    assert_eq!(net.stats(0).hosts_down, 0);
}

#[test]
fn any_packet_from_a_host_shows_it_alive() {
    let mut net = alive_net(2);
    net.advance(Duration::from_millis(50));
    // Every announcement of node 1 is lost, but it keeps exchanging with node 0.
    net.filter = Some(Box::new(|from, _, bytes| usize::from(!(from == 1 && is_i_am_here(bytes)))));
    let (server, client) = (net.proc(0), net.proc(1));
    for _ in 0..20 {
        complete_exchange(&mut net, server, client);
        net.advance(Duration::from_millis(50));
    }
    assert_eq!(hosts(&net, 0), vec![2], "a second of exchanges, no announcement");
    // Silence now: it goes down.
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 1)));
    net.advance(Duration::from_millis(500));
    assert_eq!(hosts(&net, 0), Vec::<HostId>::new());
}

#[test]
fn a_restarted_host_is_down_then_up_again() {
    let mut net = alive_net(2);
    net.advance(Duration::from_millis(50));
    let seq = net.nodes[0].alive_hosts().seq;
    let mut c = config(2);
    c.alive_period = Some(PERIOD);
    c.seed = 99; // another incarnation
    net.nodes[1] = Engine::new(c, net.now);
    net.advance(Duration::from_millis(1));
    assert_eq!(hosts(&net, 0), vec![2]);
    assert_eq!(changes(&net, 0), vec![(false, 2), (true, 2)], "the old life down, the new one up");
    assert_eq!(net.nodes[0].alive_hosts().seq, seq.wrapping_add(2));
}

#[test]
fn rows_are_read_under_a_sequence_number_and_reused() {
    let mut net = alive_net(4);
    net.advance(Duration::from_millis(20));
    let view = net.nodes[0].alive_hosts();
    assert_eq!(view.rows.len(), 3);
    for (row, host) in view.rows.iter().enumerate() {
        assert_eq!(net.nodes[0].alive_host_at(row, view.seq), Ok(host.unwrap().host));
    }
    assert_eq!(net.nodes[0].alive_host_at(3, view.seq), Err(Error::NoSuchRow(3)));
    // Host 3 (row 1) falls silent: its row is freed, and old reads are stale.
    let row = view.rows.iter().position(|h| h.is_some_and(|h| h.host == 3)).unwrap();
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 2)));
    net.advance(Duration::from_millis(500));
    let after = net.nodes[0].alive_hosts();
    assert!(after.rows[row].is_none());
    assert!(matches!(net.nodes[0].alive_host_at(0, view.seq), Err(Error::StaleTable { .. })));
    assert_eq!(net.nodes[0].alive_host_at(row, after.seq), Err(Error::NoSuchRow(row)));
    // A newcomer takes the free row.
    net.filter = None;
    let mut c = config(9);
    c.alive_period = Some(PERIOD);
    net.nodes.push(Engine::new(c, net.now));
    net.advance(Duration::from_millis(11));
    assert_eq!(net.nodes[0].alive_hosts().rows[row].map(|h| h.host), Some(9));
}

#[test]
fn reset_forgets_every_host_and_relearns_them_at_once() {
    let mut net = alive_net(3);
    net.advance(Duration::from_millis(20));
    let now = net.now;
    net.nodes[0].reset_alive(now);
    assert_eq!(hosts(&net, 0), Vec::<HostId>::new());
    net.advance(Duration::from_millis(11));
    assert_eq!(hosts(&net, 0), vec![2, 3]);
}

#[test]
fn i_am_here_is_off_unless_configured() {
    let mut net = Net::new(2);
    net.advance(Duration::from_secs(1));
    assert_eq!(net.stats(0).sent(PacketType::IAmHere), 0);
    // An announcement from a node that has it on is ignored and counted as stray.
    let mut c = config(3);
    c.alive_period = Some(PERIOD);
    net.nodes.push(Engine::new(c, net.now));
    net.settle();
    assert_eq!(hosts(&net, 0), Vec::<HostId>::new());
    assert_eq!(net.stats(0).stray, 1);
}

#[test]
fn a_host_that_leaves_is_dropped_at_once_and_only_by_its_own_life() {
    let mut net = alive_net(3);
    net.advance(Duration::from_millis(250));
    net.events.clear();
    // Node 3 (host 3) shuts down: it says so, and both others drop it now.
    net.nodes[2].leave();
    net.settle();
    assert_eq!(hosts(&net, 0), vec![2]);
    assert_eq!(hosts(&net, 1), vec![1]);
    assert_eq!(changes(&net, 0), vec![(false, 3)]);
    assert_eq!(net.stats(0).hosts_down, 1);
    // A goodbye from a life the table does not hold changes nothing:
    // node 2 restarts, and its old life's goodbye arrives late.
    let mut c = config(2);
    c.alive_period = Some(PERIOD);
    let old = std::mem::replace(&mut net.nodes[1], Engine::new(Config { seed: 99, ..c }, net.now));
    net.advance(Duration::from_millis(20));
    assert_eq!(hosts(&net, 0), vec![2], "the new life is up");
    let mut old = old;
    old.leave();
    let leaving =
        |t: &Transmit| vipc_wire::parse(&t.bytes, None).is_ok_and(|p| p.header.flags.has(vipc_wire::Flags::LEAVING));
    let bye = std::iter::from_fn(|| old.poll_transmit()).find(leaving).expect("the old life's goodbye");
    net.nodes[0].handle_datagram(net.now, addr(1), &bye.bytes);
    assert_eq!(hosts(&net, 0), vec![2], "the new life stays");
}

/// Nodes announcing every `periods[i]` milliseconds.
fn announcing_every(periods: &[u64]) -> Net {
    let mut net = Net::new(0);
    for (i, p) in periods.iter().enumerate() {
        let mut c = config(i as u16 + 1);
        c.alive_period = Some(Duration::from_millis(*p));
        net.nodes.push(Engine::new(c, net.now));
    }
    net
}

/// A host announcing a longer period than ours is given its own periods
/// before it is declared down (a live host announcing every 400 ms was
/// declared down, and up again, 9 times in 4 s by a host announcing every
/// 100 ms); a huge announced period counts as ten of ours.
#[test]
fn a_host_is_declared_down_after_its_own_announced_periods() {
    let mut net = announcing_every(&[100, 400]);
    net.advance(Duration::from_secs(4));
    assert_eq!(changes(&net, 0), vec![(true, 2)], "node 2 is up all along");
    assert_eq!(net.stats(0).hosts_down, 0);
    // Silent (last heard at most 420 ms ago), it goes down after 3 of its
    // periods, 1.2 s, at our next tick.
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 1)));
    net.advance(Duration::from_millis(700));
    assert_eq!(changes(&net, 0), vec![(true, 2)], "not before 3 of its periods");
    net.advance(Duration::from_millis(1000));
    assert_eq!(changes(&net, 0), vec![(true, 2), (false, 2)]);
}

#[test]
fn an_announced_period_counts_at_most_ten_of_ours() {
    let mut net = announcing_every(&[100, 100_000]);
    // Node 2 announces once at its start, then not for 100 s: it is down after 3 × 1 s.
    net.advance(Duration::from_millis(2900));
    assert_eq!(changes(&net, 0), vec![(true, 2)]);
    net.advance(Duration::from_millis(300));
    assert_eq!(changes(&net, 0), vec![(true, 2), (false, 2)]);
}

/// Two announcing nodes, and one periodic announcement of node 2 held
/// back (not delivered): to deliver late.
fn two_nodes_and_a_held_announcement() -> (Net, Vec<u8>) {
    let mut net = alive_net(2);
    net.advance(Duration::from_millis(250));
    let held = std::rc::Rc::new(std::cell::RefCell::new(None));
    let h = held.clone();
    net.filter = Some(Box::new(move |from, _, bytes| {
        if from == 1 && h.borrow().is_none() && is_i_am_here(bytes) {
            *h.borrow_mut() = Some(bytes.to_vec());
            return 0;
        }
        1
    }));
    net.advance(Duration::from_millis(110));
    net.filter = None;
    let late = held.borrow().clone().expect("an announcement of node 2");
    (net, late)
}

/// An announcement a host sent just before its goodbye but that arrives
/// after it does not bring the host back (it did for 3 periods, and a
/// reliable Send begun then waited T_t for a host that had left); its next
/// life does come back at once.
#[test]
fn an_announcement_overtaken_by_its_goodbye_does_not_bring_the_host_back() {
    let (mut net, late) = two_nodes_and_a_held_announcement();
    net.nodes[1].leave();
    net.settle();
    assert_eq!(hosts(&net, 0), Vec::<HostId>::new(), "gone at its goodbye");
    net.nodes[0].handle_datagram(net.now, addr(1), &late);
    assert_eq!(hosts(&net, 0), Vec::<HostId>::new(), "the late announcement of the life that left");
    // Its next life is up at once.
    let mut c = config(2);
    c.alive_period = Some(PERIOD);
    net.nodes[1] = Engine::new(Config { seed: 77, ..c }, net.now);
    net.advance(Duration::from_millis(20));
    assert_eq!(hosts(&net, 0), vec![2]);
}

/// An announcement of a host's previous life that arrives after its new
/// life's does not replace the new one (the row flapped down and up, and
/// the new life's packets did not count as heard until its next one).
#[test]
fn an_old_lifes_late_announcement_does_not_replace_the_new_life() {
    let (mut net, late) = two_nodes_and_a_held_announcement();
    let mut c = config(2);
    c.alive_period = Some(PERIOD);
    net.nodes[1] = Engine::new(Config { seed: 77, ..c }, net.now);
    net.advance(Duration::from_millis(20));
    net.events.clear();
    net.nodes[0].handle_datagram(net.now, addr(1), &late);
    net.settle();
    assert_eq!(changes(&net, 0), vec![], "no flap");
    assert_eq!(hosts(&net, 0), vec![2]);
}
