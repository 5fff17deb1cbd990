//! A tiny two-or-more-engine network for the engine's rule tests: direct
//! delivery on virtual time, with a hook to drop or duplicate datagrams.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;
use vipc_engine::*;

pub type Filter = Box<dyn FnMut(usize, &Destination, &[u8]) -> usize>;

pub struct Net {
    pub nodes: Vec<Engine>,
    pub now: Time,
    /// Per datagram: how many copies to deliver (0 = drop). Default 1.
    pub filter: Option<Filter>,
    pub events: Vec<(usize, Event)>,
    pub sent: usize,
    /// Buffers lent by processes to their pending lent moves, by (node, pid):
    /// lent data are appended to transmits from here, placements copied here.
    pub lent: HashMap<(usize, Pid), Vec<u8>>,
    pending: VecDeque<(usize, SocketAddr, Vec<u8>)>,
}

pub fn addr(i: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9000 + i as u16))
}

pub fn config(host: u16) -> Config {
    Config { host_id: HostIdConfig::Fixed(host), seed: host as u64, ..Config::default() }
}

impl Net {
    pub fn new(n: usize) -> Net {
        Net::with(n, |_| {})
    }

    pub fn with(n: usize, tweak: impl Fn(&mut Config)) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut c = config(i as u16 + 1);
                tweak(&mut c);
                Engine::new(c, Time::ZERO)
            })
            .collect();
        let mut net = Net {
            nodes,
            now: Time::ZERO,
            filter: None,
            events: Vec::new(),
            sent: 0,
            lent: HashMap::new(),
            pending: VecDeque::new(),
        };
        net.settle();
        net.events.clear();
        net
    }

    /// Moves every queued datagram and event until nothing is in flight (no time passes).
    pub fn settle(&mut self) {
        loop {
            for i in 0..self.nodes.len() {
                while let Some(mut t) = self.nodes[i].poll_transmit() {
                    self.sent += 1;
                    if let Some(l) = t.lent {
                        let buf = self.lent.get(&(i, l.pid)).expect("a lent transmit of a buffer that was lent");
                        t.bytes.extend_from_slice(&buf[l.offset..l.offset + l.len]);
                    }
                    let copies = match &mut self.filter {
                        Some(f) => f(i, &t.to, &t.bytes),
                        None => 1,
                    };
                    for _ in 0..copies {
                        match t.to {
                            Destination::Addr(a) => {
                                let j = (a.port() - 9000) as usize;
                                if j < self.nodes.len() {
                                    self.pending.push_back((j, addr(i), t.bytes.clone()));
                                }
                            }
                            Destination::Broadcast => {
                                for j in 0..self.nodes.len() {
                                    if j != i {
                                        self.pending.push_back((j, addr(i), t.bytes.clone()));
                                    }
                                }
                            }
                            // IP multicast to the group's address: the nodes with members hear it.
                            Destination::Group(g) => {
                                for j in 0..self.nodes.len() {
                                    if j != i && !self.nodes[j].group_members(g).is_empty() {
                                        self.pending.push_back((j, addr(i), t.bytes.clone()));
                                    }
                                }
                            }
                        }
                    }
                }
                while let Some(e) = self.nodes[i].poll_event() {
                    self.events.push((i, e));
                }
            }
            let Some((j, from, bytes)) = self.pending.pop_front() else { return };
            let now = self.now;
            self.nodes[j].handle_datagram(now, from, &bytes);
            if let Some((l, range)) = self.nodes[j].poll_placement() {
                let buf = self.lent.get_mut(&(j, l.pid)).expect("a placement into a buffer that was lent");
                buf[l.offset..l.offset + l.len].copy_from_slice(&bytes[range]);
            }
        }
    }

    /// Advances virtual time by `d`, firing timers on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.settle();
            let next = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    for n in &mut self.nodes {
                        n.handle_timeout(now);
                    }
                }
                _ => break,
            }
        }
        self.now = end;
        self.settle();
    }

    /// Takes the completion delivered to `pid` on node `i`, if any.
    pub fn take(&mut self, i: usize, pid: Pid) -> Option<Completion> {
        let idx =
            self.events.iter().position(|(n, e)| *n == i && matches!(e, Event::Wake { pid: p, .. } if *p == pid))?;
        match self.events.remove(idx).1 {
            Event::Wake { completion, .. } => Some(completion),
            _ => unreachable!(),
        }
    }

    pub fn take_received(&mut self, i: usize, pid: Pid) -> Received {
        match self.take(i, pid) {
            Some(Completion::Receive(Ok(r))) => r,
            other => panic!("expected a receive completion for {pid}, got {other:?}"),
        }
    }

    pub fn take_send(&mut self, i: usize, pid: Pid) -> Result<SendOutcome, Error> {
        match self.take(i, pid) {
            Some(Completion::Send(r)) => r,
            other => panic!("expected a send completion for {pid}, got {other:?}"),
        }
    }

    pub fn take_move(&mut self, i: usize, pid: Pid) -> Result<Vec<u8>, Error> {
        match self.take(i, pid) {
            Some(Completion::Move(r)) => r,
            other => panic!("expected a move completion for {pid}, got {other:?}"),
        }
    }

    pub fn proc(&mut self, i: usize) -> Pid {
        self.nodes[i].create_process().unwrap()
    }

    pub fn stats(&self, i: usize) -> Stats {
        self.nodes[i].stats()
    }
}

/// `client` on node 1 sends `server` on node 0 msg(1) and has its reply, msg(2).
pub fn complete_exchange(net: &mut Net, server: Pid, client: Pid) {
    let now = net.now;
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), None).unwrap();
    net.settle();
    net.take_received(0, server);
    net.nodes[0].reply(now, server, client, msg(2), None).unwrap();
    net.settle();
    assert_eq!(net.take_send(1, client).unwrap().reply, msg(2));
}

pub fn msg(b: u8) -> Message {
    [b; 32]
}

/// Records every Send node 1 puts on the wire (each delivered as usual).
pub fn record_sends(net: &mut Net, key: Option<vipc_wire::AuthKey>) -> std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>> {
    let sends: std::rc::Rc<std::cell::RefCell<Vec<Vec<u8>>>> = Default::default();
    let seen = sends.clone();
    net.filter = Some(Box::new(move |from, _, bytes| {
        if from == 1 && vipc_wire::parse(bytes, key.as_ref()).unwrap().header.ptype == vipc_wire::PacketType::Send {
            seen.borrow_mut().push(bytes.to_vec());
        }
        1
    }));
    sends
}

/// Node 0's `server` has received node 1's `client`'s Send of `msg(1)` with
/// `segment`: the two pids and the Send as it went on the wire.
pub fn served_send(net: &mut Net, segment: Option<Segment>) -> (Pid, Pid, Vec<u8>) {
    let (server, client) = (net.proc(0), net.proc(1));
    let now = net.now;
    let sends = record_sends(net, None);
    net.nodes[0].receive(now, server, None, 0).unwrap();
    net.nodes[1].send(now, client, server, msg(1), SendOptions::default(), segment).unwrap();
    net.settle();
    assert_eq!(net.take_received(0, server).msg, msg(1));
    net.filter = None;
    let send = sends.borrow()[0].clone();
    (server, client, send)
}

/// The sequence number of an unkeyed packet.
pub fn seq_of(packet: &[u8]) -> u32 {
    vipc_wire::parse(packet, None).unwrap().header.seq
}

/// An unkeyed packet of `ptype` from `src` to `dst` with sequence number
/// `seq` (`fwd` = `src`, some incarnation), `edit` setting the other fields.
pub fn forge(
    ptype: vipc_wire::PacketType,
    (seq, src, dst): (u32, Pid, Pid),
    data: &[u8],
    edit: impl FnOnce(&mut vipc_wire::Header),
) -> Vec<u8> {
    let mut h = vipc_wire::Header::new(ptype);
    (h.seq, h.src, h.dst, h.fwd, h.incarnation) = (seq, src, dst, src, 77);
    edit(&mut h);
    let mut out = Vec::new();
    vipc_wire::encode(&h, data, None, &mut out);
    out
}
