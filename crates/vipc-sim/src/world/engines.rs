//! Between the engines and the network: calls into an engine with its
//! node's clock, then hands its datagrams to the link model and keeps its
//! events for the simulation; lent buffers and lent segment memory; the
//! timer each engine asks for.

use super::{Ev, World};
use crate::check::Invariant;
use std::net::SocketAddr;
use std::ops::Range;
use vipc_engine::{AuthKey, Destination, Engine, Lent, Time, Transmit};
use vipc_wire::HEADER_LEN;

impl<E> World<E> {
    /// Calls into node `node`'s engine (with its local time), then collects
    /// its datagrams and events. The node must be up.
    pub fn with_engine<R>(&mut self, node: usize, f: impl FnOnce(&mut Engine, Time) -> R) -> R {
        let now = Time(self.now.0 + self.nodes[node].clock);
        let e = self.nodes[node].engine.as_mut().expect("engine of a live node");
        let r = f(e, now);
        self.collect(node);
        r
    }

    /// Hands a datagram from `from` to node `to`'s engine ([`feed`]) and keeps
    /// [`super::Node::appended_dropped`] up to date: a Send whose appended
    /// data the engine dropped is noted, a newer Send from that sender taken
    /// whole forgets it. A late copy of an older Send (reordered, or a
    /// retransmission) forgets nothing: the engine ignores it (seed 3966 of
    /// `crowded` failed when it did).
    pub(super) fn feed(&mut self, to: usize, from: SocketAddr, bytes: &[u8]) {
        let drops = |w: &World<E>| w.nodes[to].engine.as_ref().map_or(0, |e| e.stats().appended_dropped);
        let before = drops(self);
        self.with_engine(to, |e, now| feed(e, now, from, bytes));
        let dropped = drops(self) > before;
        if !dropped && self.nodes[to].appended_dropped.is_empty() {
            return;
        }
        let Ok(h) = vipc_wire::parse(bytes, self.key.as_ref()).map(|p| p.header) else { return };
        let noted = &mut self.nodes[to].appended_dropped;
        if dropped {
            noted.insert(h.src, h.seq);
        } else if h.ptype == vipc_wire::PacketType::Send
            && noted.get(&h.src).is_some_and(|&s| vipc_engine::seq_newer(h.seq, s))
        {
            noted.remove(&h.src);
        }
    }

    /// Sends `node`'s pending datagrams and queues its events for [`super::Driver::settle`].
    pub(super) fn collect(&mut self, node: usize) {
        loop {
            let Some(e) = self.nodes[node].engine.as_mut() else { return };
            let Some(t) = e.poll_transmit() else { break };
            self.transmit(node, t);
        }
        let n = &mut self.nodes[node];
        let Some(e) = n.engine.as_mut() else { return };
        while let Some(ev) = e.poll_event() {
            n.events.push_back(ev);
        }
    }

    /// Routes one datagram: a copy to every node it is addressed to, through the link model.
    fn transmit(&mut self, from: usize, t: Transmit) {
        let targets: Vec<usize> = match t.to {
            Destination::Addr(a) => self.nodes.iter().position(|n| n.addr == a).into_iter().collect(),
            Destination::Broadcast => (0..self.nodes.len()).filter(|&i| i != from).collect(),
            Destination::Group(g) => {
                (0..self.nodes.len()).filter(|&i| i != from && self.nodes[i].listening.contains(&g)).collect()
            }
        };
        self.trace(|| {
            let to = match t.to {
                Destination::Addr(a) => format!("n{}", a.port() as usize - 7000),
                Destination::Broadcast => "n*".to_string(),
                Destination::Group(g) => format!("group {g}"),
            };
            format!("n{from} -> {to} {}{}", describe(&t.bytes, None), if t.lent.is_some() { " +lent" } else { "" })
        });
        let mut bytes = t.bytes;
        if let Some(l) = t.lent {
            // The datagram is the header the engine built, then the lent bytes.
            match self.lent.get(&l.pid).and_then(|b| b.get(l.offset..l.offset.checked_add(l.len)?)) {
                Some(data) => bytes.extend_from_slice(data),
                None => {
                    let detail = format!("node {from} transmits {l:?} but {} lends no such bytes now", l.pid);
                    return self.fail_with(Invariant::DataIntact, detail);
                }
            }
        }
        let from_epoch = self.nodes[from].epoch;
        for (to, at) in self.net.route(self.now, from, &targets, bytes.len()) {
            if self.nodes[to].engine.is_none() {
                continue;
            }
            let to_epoch = self.nodes[to].epoch;
            self.queue.push(at, Ev::Deliver { to, to_epoch, from, from_epoch, bytes: bytes.clone() });
        }
        if let Some(e) = self.nodes[from].engine.as_mut() {
            e.recycle(bytes);
        }
    }

    /// Copies the bytes `to`'s engine places into lent buffers (a lent
    /// MoveFrom) out of the datagram it just handled. False on a violation.
    pub(super) fn place(&mut self, to: usize, bytes: &[u8]) -> bool {
        while let Some((l, range)) = self.nodes[to].engine.as_mut().and_then(|e| e.poll_placement()) {
            let src = bytes.get(range.clone());
            let dst = self.lent.get_mut(&l.pid).and_then(|b| b.get_mut(l.offset..l.offset.checked_add(l.len)?));
            match (src, dst) {
                (Some(s), Some(d)) if s.len() == d.len() => d.copy_from_slice(s),
                _ => {
                    self.fail_with(Invariant::DataIntact, misplaced(to, &range, bytes.len(), &l));
                    return false;
                }
            }
        }
        true
    }

    /// Queues a timer event for `node`'s engine's next timeout (engine time
    /// shifted by the node's clock), unless one armed at or before then will do.
    pub(super) fn arm_timer(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        let Some(t) = n.engine.as_ref().and_then(|e| e.poll_timeout()) else { return };
        let t = Time(t.0.saturating_sub(n.clock)).max(self.now);
        if n.timers.first().is_some_and(|&a| a <= t) {
            return;
        }
        n.timers.insert(t);
        let epoch = n.epoch;
        self.queue.push(t, Ev::Timer { node, epoch });
    }
}

/// Feeds a datagram as vipc's runtime receives one (`runtime/inplace.rs`):
/// with the memory of the segment the next read answer is expected in lent
/// by the engine, the datagram's first bytes landing just before the
/// expected place (those bytes saved and put back), and an answer's data
/// copied where the engine says (a copy onto themselves when they landed there).
fn feed(e: &mut Engine, now: Time, from: SocketAddr, bytes: &[u8]) {
    let Some(mut loan) = e.mem_lend() else { return e.handle_datagram(now, from, bytes) };
    let start = loan.at - HEADER_LEN;
    let landed = bytes.len().min(HEADER_LEN + loan.len);
    let saved = loan.mem[start..loan.at].to_vec();
    loan.mem[start..start + landed].copy_from_slice(&bytes[..landed]);
    let placed = if landed == bytes.len() {
        let placed = e.handle_datagram_lent(now, from, &loan.mem[start..start + landed]);
        placed.map(|(to, r)| (to, loan.mem[start + r.start..start + r.end].to_vec()))
    } else {
        e.handle_datagram_lent(now, from, bytes).map(|(to, r)| (to, bytes[r].to_vec()))
    };
    loan.mem[start..loan.at].copy_from_slice(&saved);
    if let Some((to, data)) = placed {
        loan.mem[to..to + data.len()].copy_from_slice(&data);
    }
    e.mem_return(loan);
}

fn misplaced(to: usize, range: &Range<usize>, len: usize, l: &Lent) -> String {
    format!("node {to} places bytes {range:?} of a {len}-byte datagram at {l:?}, which {} does not lend", l.pid)
}

/// One line describing a datagram, for traces.
pub fn describe(bytes: &[u8], key: Option<&AuthKey>) -> String {
    match vipc_wire::parse(bytes, key) {
        Ok(p) => {
            let h = p.header;
            format!(
                "{} seq={} {}->{} fwd={} flags={:#x} total={} la={} ra={} data={}",
                h.ptype.name(),
                h.seq,
                h.src,
                h.dst,
                h.fwd,
                h.flags.0,
                h.total_len,
                h.local_addr,
                h.remote_addr,
                p.data.len()
            )
        }
        Err(e) => format!("unparsable datagram of {} bytes: {e}", bytes.len()),
    }
}
