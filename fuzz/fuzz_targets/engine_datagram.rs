//! Fuzz target `engine_datagram`: one `vipc_engine::Engine` (fixed logical
//! host 1) with processes blocked in Receive, Send and GetPid, driven by a
//! script decoded from the fuzz input:
//!
//! - raw datagrams (arbitrary bytes),
//! - well-formed packets with fuzzed fields (MACed when the node has a key),
//! - answers to the engine's own recent packets (same sequence number, swapped
//!   source and destination, fuzzed type and fields), which reach the deep
//!   states: replies, replyPending, bulk-transfer data and acknowledgements,
//! - API calls of local processes (send, receive, reply, forward, moves,
//!   names, destruction and creation) and remote-memory calls (export,
//!   write, writev, read, CAS-II, import, inhibition, channels, unexport),
//! - the passage of time (timers fire as the runtime would fire them).
//!
//! Checked: no panic; every packet the engine emits parses and fits in
//! `max_packet`; every Wake belongs to a blocked process and each blocking call
//! is woken at most once, every remote-memory operation finishes at most once;
//! timers make progress; the stats gauges stay within the configured limits;
//! once traffic stops and every process is destroyed, no exchange, alien,
//! transfer or pending remote-memory operation is left.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::{HashSet, VecDeque};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;
use vipc_engine::{
    well_known_group, Access, AuthKey, Cas, Completion, Config, Descriptor, Destination, Engine, Event, HostIdConfig,
    Imported, MemOpId, Message, Notify, Pid, ProtectionGroup, Reliable, ReplyMode, Scope, Segment, SegmentId,
    SegmentOptions, SendOptions, Strided, Time,
};
use vipc_wire::{parse, to_vec, Flags, Header, PacketType, MAX_DATA};

/// Remote processes the script talks as (hosts 2 and 3, and the largest pid).
const PEERS: [Pid; 4] = [Pid::new(2, 1), Pid::new(2, 2), Pid::new(3, 1), Pid::new(0x7fff, 0xffff)];
/// Incarnations the fake peers use (so duplicates are recognisable).
const INCARNATIONS: [u16; 2] = [7, 8];
/// At most this many local processes exist at once in the script.
const MAX_LOCAL: usize = 8;

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data, at: 0 };
    let keyed = input.u8() & 1 == 1;
    let mut h = Harness::new(keyed);
    let mut steps = 0;
    while !input.done() && steps < 256 {
        h.step(&mut input);
        h.check_gauges();
        steps += 1;
    }
    h.quiesce();
});

/// The fuzz input, read front to back; zeros once exhausted.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let start = self.at.min(self.data.len());
        let end = (start + n).min(self.data.len());
        self.at = self.at.saturating_add(n);
        &self.data[start..end]
    }
    /// `n` bytes, the input's as far as it goes, then a pattern.
    fn filled(&mut self, n: usize) -> Vec<u8> {
        let mut v = self.bytes(n).to_vec();
        let k = v.len();
        v.extend((k..n).map(|i| i as u8));
        v
    }
    fn message(&mut self) -> Message {
        let mut m = [0u8; 32];
        let b = self.bytes(8);
        m[..b.len()].copy_from_slice(b);
        m
    }
}

fn peer_addr(i: usize) -> SocketAddr {
    // Only ever used as a value: nothing is sent anywhere.
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 86, 2 + (i % 4) as u8), 7700 + (i % 2) as u16))
}

struct Harness {
    e: Engine,
    cfg: Config,
    now: Time,
    key: Option<AuthKey>,
    /// Live local processes.
    locals: Vec<Pid>,
    /// Processes in a blocking call that has not been woken yet.
    blocked: HashSet<Pid>,
    /// Senders received by local processes (candidates for reply, moves, forward).
    senders: VecDeque<Pid>,
    /// Headers of the engine's recent packets and where they went.
    sent: VecDeque<(Header, Destination)>,
    /// The last datagram injected, for duplication.
    last_in: Option<(SocketAddr, Vec<u8>)>,
    /// Remote memory: local segments (exported or anonymous, maybe freed since).
    segments: Vec<SegmentId>,
    /// Remote memory: operations started and not finished or forgotten.
    mem_ops: HashSet<MemOpId>,
}

impl Harness {
    fn new(keyed: bool) -> Harness {
        let key = keyed.then(|| AuthKey::from_bytes([0x42; 32]));
        let cfg = Config {
            host_id: HostIdConfig::Fixed(1),
            max_aliens: 8,
            max_processes: MAX_LOCAL,
            max_names: 8,
            location_cache: 4,
            buffer_limit: 16 << 10,
            window: 8,
            key: key.clone(),
            seed: 1,
            alive_period: Some(Duration::from_millis(100)),
            max_memberships: 8,
            rmem_max_segments: 4,
            rmem_max_bytes: 64 << 10,
            rmem_max_ops: 8,
            rmem_control_queue: 4,
            rmem_data_queue: 4096,
            ..Config::default()
        };
        let mut h = Harness {
            e: Engine::new(cfg.clone(), Time::ZERO),
            cfg,
            now: Time::ZERO,
            key,
            locals: Vec::new(),
            blocked: HashSet::new(),
            senders: VecDeque::new(),
            sent: VecDeque::new(),
            last_in: None,
            segments: Vec::new(),
            mem_ops: HashSet::new(),
        };
        h.drain();
        // Two servers waiting in Receive, two clients in remote Sends, one GetPid.
        let [s1, s2, c1, c2, g] = [(); 5].map(|_| h.create().expect("a fresh node creates processes"));
        h.blocking(s1, |e, now| e.receive(now, s1, None, 4096));
        h.blocking(s2, |e, now| e.receive(now, s2, Some(PEERS[1]), 0));
        let seg = Segment { data: vec![0xab; 64 << 10], access: Access::READ_WRITE };
        h.blocking(c1, |e, now| e.send(now, c1, PEERS[0], [1; 32], SendOptions::default(), Some(seg)));
        let seg = Segment { data: vec![0xcd; 3000], access: Access::READ };
        h.blocking(c2, |e, now| e.send(now, c2, PEERS[2], [2; 32], SendOptions { idempotent: true }, Some(seg)));
        h.blocking(g, |e, now| e.get_pid(now, g, b"echo", Scope::Remote));
        let _ = h.e.set_pid(b"svc", s1, Scope::Any);
        h.drain();
        // Remote memory: a named segment peers may use, an anonymous one, and a read, a CAS-II and an import pending.
        let opts = SegmentOptions { access: Access::READ_WRITE, notify: Notify::Conditional, ..Default::default() };
        let named = h.e.export_segment(Some([0x11; 16]), 4096, opts).expect("room for a segment");
        let anon = h.e.export_segment(None, 1024, SegmentOptions::default()).expect("room for a segment");
        h.segments = vec![named, anon];
        let _ = h.e.segment_set_inhibit(named, 1024, 512, true);
        let peer = Imported { host: 2, desc: Descriptor { index: 0, generation: 1 }, size: 4096, access: Access::READ_WRITE };
        let now = h.now;
        let ops = [
            h.e.mem_read(now, &peer, 0, 1000, (anon, 0), false),
            h.e.mem_cas(now, &peer, 8, Cas { expect: 0, new: 1, nonce: 7 }, (anon, 1016), true),
            h.e.mem_import(now, [0x22; 16], Access::READ),
        ];
        h.mem_ops.extend(ops.into_iter().map(|r| r.expect("room for operations")));
        h.drain();
        h
    }

    fn create(&mut self) -> Option<Pid> {
        let p = self.e.create_process().ok()?;
        assert!(self.e.is_alive(p));
        assert!(!self.locals.contains(&p), "pid {p} handed out twice");
        self.locals.push(p);
        self.drain();
        Some(p)
    }

    /// Runs a blocking call for `pid` (which must be free) and records it if accepted.
    fn blocking(&mut self, pid: Pid, call: impl FnOnce(&mut Engine, Time) -> Result<(), vipc_engine::Error>) {
        if self.blocked.contains(&pid) || !self.locals.contains(&pid) {
            return;
        }
        if call(&mut self.e, self.now).is_ok() {
            self.blocked.insert(pid);
        }
        self.drain();
    }

    /// Takes everything the engine has to say, checking it.
    fn drain(&mut self) {
        let mut n = 0;
        while let Some(t) = self.e.poll_transmit() {
            n += 1;
            assert!(n < 100_000, "poll_transmit does not run dry");
            assert!(
                t.bytes.len() <= self.cfg.max_packet,
                "a {}-byte datagram exceeds max_packet {}",
                t.bytes.len(),
                self.cfg.max_packet
            );
            let p = parse(&t.bytes, self.key.as_ref()).expect("the engine emits only valid packets");
            if self.sent.len() == 32 {
                self.sent.pop_front();
            }
            self.sent.push_back((p.header, t.to));
        }
        let mut n = 0;
        while let Some(ev) = self.e.poll_event() {
            n += 1;
            assert!(n < 100_000, "poll_event does not run dry");
            if let Event::MemDone(op) = ev {
                assert!(self.mem_ops.remove(&op), "MemDone for {op:?}, not pending");
                assert!(self.e.mem_poll(op).is_some(), "{op:?} announced but not finished");
                continue;
            }
            if let Event::Wake { pid, completion } = ev {
                assert!(self.blocked.remove(&pid), "wake of {pid}, which is not in a blocking call: {completion:?}");
                if let Completion::Receive(Ok(m)) = completion {
                    if self.senders.len() == 16 {
                        self.senders.pop_front();
                    }
                    self.senders.push_back(m.from);
                    assert!(m.segment.len() <= m.segment_size as usize, "appended data beyond the segment");
                }
            }
        }
    }

    /// Advances the clock to `until`, firing timers in order as a runtime would.
    fn advance(&mut self, until: Time) {
        let mut same = 0;
        let mut fired = 0;
        while let Some(t) = self.e.poll_timeout() {
            if t > until {
                break;
            }
            if t <= self.now {
                same += 1;
                assert!(same < 100, "timers due at {:?} do not make progress", self.now);
            } else {
                same = 0;
                self.now = t;
            }
            self.e.handle_timeout(self.now);
            self.drain();
            fired += 1;
            assert!(fired < 200_000, "timers keep firing");
        }
        self.now = self.now.max(until);
    }

    fn inject(&mut self, from: SocketAddr, bytes: Vec<u8>) {
        self.e.handle_datagram(self.now, from, &bytes);
        self.drain();
        self.last_in = Some((from, bytes));
    }

    fn encode(&self, h: &Header, data: &[u8]) -> Vec<u8> {
        to_vec(h, &data[..data.len().min(MAX_DATA)], self.key.as_ref())
    }

    fn pick_pid(&self, b: u8, input: &mut Input) -> Pid {
        match b % 8 {
            0 | 1 => self.locals.get(b as usize / 8 % self.locals.len().max(1)).copied().unwrap_or(Pid::NONE),
            2 | 3 => PEERS[b as usize / 8 % PEERS.len()],
            4 => self.senders.get(b as usize / 8 % self.senders.len().max(1)).copied().unwrap_or(PEERS[0]),
            5 => Pid::new(1, b as u16 / 8),
            6 => Pid::NONE,
            _ => Pid(input.u32()),
        }
    }

    /// The process a server acts on: mostly the sender it received last.
    fn pick_partner(&self, input: &mut Input) -> Pid {
        let b = input.u8();
        match self.senders.back() {
            Some(&p) if b < 0xc0 => p,
            _ => self.pick_pid(b, input),
        }
    }

    fn pick_local(&self, b: u8) -> Option<Pid> {
        (!self.locals.is_empty()).then(|| self.locals[b as usize % self.locals.len()])
    }

    fn step(&mut self, input: &mut Input) {
        let op = input.u8();
        match op % 16 {
            // Arbitrary bytes from some address.
            0 => {
                let n = input.u16() as usize % 2048;
                let bytes = input.bytes(n).to_vec();
                self.inject(peer_addr(op as usize / 16), bytes);
            }
            // A well-formed packet with fuzzed fields.
            1..=3 => {
                let sel = input.u8();
                let mut h = Header::new(PacketType::ALL[input.u8() as usize % PacketType::ALL.len()]);
                h.flags = Flags(input.u16());
                h.incarnation = if sel & 1 == 0 { INCARNATIONS[(sel >> 1) as usize & 1] } else { input.u16() };
                h.seq = if sel & 4 == 0 { (sel >> 3) as u32 % 4 } else { input.u32() };
                h.src = self.pick_pid(input.u8(), input);
                h.dst = self.pick_pid(input.u8(), input);
                h.fwd = if sel & 32 == 0 { h.src } else { self.pick_pid(input.u8(), input) };
                h.total_len = if sel & 64 == 0 { input.u16() as u32 } else { input.u32() };
                h.local_addr = input.u16() as u32;
                h.remote_addr = input.u16() as u32;
                h.message = input.message();
                let n = input.u16() as usize % 1500;
                let data = input.filled(n);
                let bytes = self.encode(&h, &data);
                self.inject(peer_addr(op as usize / 16), bytes);
            }
            // An answer to one of the engine's own recent packets.
            4..=7 => {
                if self.sent.is_empty() {
                    return;
                }
                let (orig, to) = self.sent[input.u8() as usize % self.sent.len()];
                let sel = input.u8();
                let ptype = match sel % 4 {
                    // The natural answers first.
                    0 => answer_type(orig.ptype),
                    _ => PacketType::ALL[input.u8() as usize % PacketType::ALL.len()],
                };
                let mut h = Header::new(ptype);
                h.incarnation = INCARNATIONS[(sel >> 2) as usize & 1];
                h.seq = orig.seq.wrapping_add(if sel & 8 == 0 { 0 } else { input.u8() as u32 });
                h.src = if orig.dst.is_none() || sel & 16 != 0 { PEERS[sel as usize % 3] } else { orig.dst };
                h.dst = orig.src;
                h.fwd = h.src;
                h.flags = Flags(if sel & 32 == 0 { orig.flags.0 & !Flags::MAC } else { input.u16() });
                h.message = if sel & 64 == 0 { orig.message } else { input.message() };
                let (total, local, remote) = natural_fields(&orig);
                if ptype == PacketType::MemWrite && sel & 128 == 0 {
                    h.flags = Flags(h.flags.0 | Flags::ANSWER);
                }
                match input.u8() % 4 {
                    0 => (h.total_len, h.local_addr, h.remote_addr) = (total, local, remote),
                    1 => (h.total_len, h.local_addr, h.remote_addr) = (total, remote, local),
                    2 => (h.total_len, h.local_addr, h.remote_addr) = (total, input.u32(), input.u32()),
                    _ => (h.total_len, h.local_addr, h.remote_addr) = (input.u32(), input.u32(), input.u32()),
                }
                let n = match input.u8() % 3 {
                    0 => 0,
                    1 => self.e.config().max_data().min(total as usize),
                    _ => input.u16() as usize % 1500,
                };
                let data = input.filled(n);
                let from = match to {
                    Destination::Addr(a) => a,
                    Destination::Broadcast | Destination::Group(_) => peer_addr(sel as usize),
                };
                let bytes = self.encode(&h, &data);
                self.inject(from, bytes);
            }
            // The same datagram again (duplicate).
            8 => {
                if let Some((from, bytes)) = self.last_in.clone() {
                    self.inject(from, bytes);
                }
            }
            // Time passes.
            9 | 10 => {
                let b = input.u8();
                let d = match b % 4 {
                    0 => Duration::from_millis(b as u64 / 4),
                    1 => self.cfg.retransmit,
                    2 => self.cfg.timeout,
                    _ => Duration::from_millis(b as u64 * 20),
                };
                self.advance(self.now + d);
            }
            // API calls of local processes.
            _ => self.api(input),
        }
    }

    fn api(&mut self, input: &mut Input) {
        let b = input.u8();
        let Some(me) = self.pick_local(b) else {
            let _ = self.create();
            return;
        };
        let action = input.u8() % 16;
        if self.blocked.contains(&me) && action != 10 {
            return; // a blocked thread makes no calls, but it can be destroyed
        }
        let now = self.now;
        match action {
            0 => {
                let only = (b & 0x80 != 0).then(|| self.pick_pid(input.u8(), input));
                let cap = input.u16() as usize;
                self.blocking(me, |e, now| e.receive(now, me, only, cap));
            }
            1 | 2 => {
                let to = self.pick_pid(input.u8(), input);
                let msg = input.message();
                let flags = input.u8();
                let segment = (flags & 3 != 0).then(|| Segment {
                    data: input.filled(input_len(flags)),
                    access: Access { read: flags & 1 != 0, write: flags & 2 != 0 },
                });
                let opts = SendOptions { idempotent: flags & 4 != 0 };
                self.blocking(me, |e, now| e.send(now, me, to, msg, opts, segment));
            }
            3 | 4 => {
                let to = self.pick_partner(input);
                let msg = input.message();
                let seg = match input.u8() % 3 {
                    0 => None,
                    _ => {
                        let off = input.u16() as u32;
                        let n = input.u16() as usize % 1500;
                        Some((off, input.filled(n)))
                    }
                };
                let _ = self.e.reply(now, me, to, msg, seg);
                self.drain();
            }
            5 => {
                let sender = self.pick_partner(input);
                let to = self.pick_pid(input.u8(), input);
                let msg = input.message();
                let _ = self.e.forward(now, me, sender, to, msg);
                self.drain();
            }
            6 => {
                let dest = self.pick_partner(input);
                let off = input.u16() as u32;
                let n = input_len(input.u8());
                let data = input.filled(n);
                self.blocking(me, |e, now| e.move_to(now, me, dest, off, data));
            }
            7 => {
                let src = self.pick_partner(input);
                let off = input.u16() as u32;
                let len = input_len(input.u8()) as u32;
                self.blocking(me, |e, now| e.move_from(now, me, src, off, len));
            }
            8 => {
                let name = input.bytes(1 + (b as usize % 40)).to_vec();
                let scope = scope(input.u8());
                self.blocking(me, |e, now| e.get_pid(now, me, &name, scope));
            }
            9 => {
                let name = input.bytes(1 + (b as usize % 40)).to_vec();
                let pid = self.pick_pid(input.u8(), input);
                let _ = self.e.set_pid(&name, pid, scope(input.u8()));
                self.drain();
            }
            10 => self.destroy(me),
            11 => self.rmem(input),
            12 => {
                let g = well_known_group(1 + u16::from(b % 3));
                let _ = if b & 0x40 != 0 { self.e.leave_group(me, g) } else { self.e.join_group(me, g) };
                self.drain();
            }
            13 => {
                let g = well_known_group(1 + u16::from(b % 3));
                let mode = [ReplyMode::None, ReplyMode::One, ReplyMode::Many][input.u8() as usize % 3];
                let msg = input.message();
                self.blocking(me, |e, now| e.send_group(now, me, g, msg, mode, SendOptions::default()));
            }
            14 => {
                let g = well_known_group(1 + u16::from(b % 3));
                let k = u32::from(input.u8() % 4);
                let mode = [Reliable::KReply(k), Reliable::AllReply, Reliable::KDeliver(k), Reliable::AllDeliver]
                    [input.u8() as usize % 4];
                let msg = input.message();
                self.blocking(me, |e, now| e.send_reliable(now, me, g, msg, mode, SendOptions::default()));
            }
            15 => {
                let limit = Duration::from_millis(u64::from(input.u8()));
                self.blocking(me, |e, now| e.get_reply(now, me, limit));
            }
            _ => {
                if self.locals.len() < MAX_LOCAL {
                    let _ = self.create();
                }
            }
        }
    }

    /// A remote-memory call (none blocks).
    fn rmem(&mut self, input: &mut Input) {
        let now = self.now;
        let b = input.u8();
        let seg = self.segments.get(b as usize / 16 % self.segments.len().max(1)).copied().unwrap_or_default();
        let target = Imported {
            host: [1, 2, 3][input.u8() as usize % 3],
            desc: if b & 1 == 0 { seg } else { Descriptor::from_u32(input.u32()) },
            size: input.u16() as u32 * 4,
            access: Access { read: b & 2 == 0, write: b & 4 == 0 },
        };
        let (offset, len) = (input.u16() as u32, input.u16() as u32 % 5000);
        let notify = b & 8 != 0;
        let started = match input.u8() % 12 {
            0 => {
                let data = input.filled(len as usize);
                let _ = self.e.mem_write(&target, offset, &data, notify);
                None
            }
            1 => {
                let shape = Strided { stride: input.u8() as u32, elem: input.u8() as u32 % 64 };
                let data = input.filled(len as usize);
                let _ = self.e.mem_writev(&target, offset, shape, &data, notify);
                None
            }
            2 => Some(self.e.mem_read(now, &target, offset, len, (seg, input.u16() as u32), notify)),
            3 => {
                let cas = Cas { expect: input.u8() as u32, new: input.u8() as u32, nonce: input.u32() };
                Some(self.e.mem_cas(now, &target, offset & !7, cas, (seg, input.u16() as u32), notify))
            }
            4 => {
                let mut name = [0x11; 16];
                name[0] = input.u8() % 3;
                Some(self.e.mem_import(now, name, target.access))
            }
            5 => {
                if let Some(&op) = self.mem_ops.iter().next() {
                    self.e.mem_forget(op);
                    self.mem_ops.remove(&op);
                }
                None
            }
            6 => {
                let _ = self.e.segment_set_inhibit(seg, offset, len, b & 16 != 0);
                None
            }
            7 => {
                while let Ok(Some(_)) = self.e.segment_poll_control(seg) {}
                while let Ok(Some(_)) = self.e.segment_poll_data(seg) {}
                None
            }
            8 => {
                let _ = self.e.unexport_segment(seg);
                None
            }
            9 => {
                let name = (b & 16 != 0).then(|| [input.u8() % 3; 16]);
                let protection = match input.u8() % 3 {
                    0 => ProtectionGroup::Any,
                    1 => ProtectionGroup::Hosts(vec![2]),
                    _ => ProtectionGroup::Hosts(vec![1, 3]),
                };
                let notify = [Notify::Never, Notify::Always, Notify::Conditional][input.u8() as usize % 3];
                let opts = SegmentOptions { access: target.access, notify, protection };
                if let Ok(id) = self.e.export_segment(name, 1 + len as usize * 4, opts) {
                    self.segments.push(id);
                }
                None
            }
            10 => {
                let mut buf = vec![0; len as usize];
                let _ = self.e.segment_read(seg, offset, &mut buf);
                let _ = self.e.segment_write(seg, offset, &buf);
                None
            }
            _ => {
                for op in self.mem_ops.clone() {
                    assert!(self.e.mem_pending(op), "{op:?} finished without MemDone");
                }
                None
            }
        };
        if let Some(Ok(op)) = started {
            assert!(self.mem_ops.insert(op), "{op:?} handed out twice");
        }
        self.drain();
    }

    fn destroy(&mut self, pid: Pid) {
        let r = self.e.destroy_process(self.now, pid);
        assert!(r.is_ok(), "destroying live process {pid}: {r:?}");
        assert!(!self.e.is_alive(pid));
        self.locals.retain(|&p| p != pid);
        // Its blocked call is abandoned: no completion may follow.
        self.blocked.remove(&pid);
        self.drain();
    }

    fn check_gauges(&self) {
        let s = self.e.stats();
        let c = &self.cfg;
        assert_eq!(s.processes, self.locals.len() as u64, "processes gauge");
        assert!(s.processes <= c.max_processes as u64);
        assert!(s.active_exchanges <= s.processes, "{} exchanges for {} processes", s.active_exchanges, s.processes);
        assert!(s.active_aliens <= c.max_aliens as u64, "{} aliens, limit {}", s.active_aliens, c.max_aliens);
        assert!(
            s.active_transfers <= 2 * (s.processes + c.max_aliens as u64),
            "{} transfers for {} processes and {} aliens",
            s.active_transfers,
            s.processes,
            s.active_aliens
        );
        for p in &self.locals {
            assert!(self.e.is_alive(*p), "{p} died on its own");
        }
        assert!(s.rmem_segments <= c.rmem_max_segments as u64 && s.rmem_bytes <= c.rmem_max_bytes as u64);
        assert!(s.rmem_ops_pending <= c.rmem_max_ops as u64);
        assert_eq!(s.rmem_ops_pending, self.mem_ops.len() as u64, "pending remote-memory operations");
    }

    /// Traffic stops: timers run out, every process is destroyed, and no
    /// protocol state may be left.
    fn quiesce(&mut self) {
        let tt = self.cfg.timeout;
        self.advance(self.now + tt * 5);
        for p in self.locals.clone() {
            self.destroy(p);
        }
        self.advance(self.now + tt * 5);
        self.check_gauges();
        let s = self.e.stats();
        assert_eq!(s.active_exchanges, 0, "exchanges left after quiescence");
        assert_eq!(s.active_aliens, 0, "aliens left after quiescence");
        assert_eq!(s.active_transfers, 0, "transfers left after quiescence");
        assert_eq!(s.group_copies, 0, "copies of group messages left after quiescence");
        assert_eq!(s.memberships, 0, "memberships of destroyed processes left");
        assert_eq!(s.rmem_ops_pending, 0, "remote-memory operations never finished");
        assert!(self.blocked.is_empty());
    }
}

/// A segment or move length: mostly small, sometimes several packets, at most 64 KiB.
fn input_len(b: u8) -> usize {
    match b % 4 {
        0 => b as usize,
        1 => 1400 + b as usize,
        2 => (b as usize) << 8,
        _ => 64 << 10,
    }
}

fn scope(b: u8) -> Scope {
    [Scope::Local, Scope::Remote, Scope::Any][b as usize % 3]
}

/// The packet type a peer would answer `t` with.
fn answer_type(t: PacketType) -> PacketType {
    use PacketType::*;
    match t {
        HostRequest => HostComplaint,
        Send => Reply,
        Forward => Send,
        GetPid => GetPidReply,
        MoveToData => MoveToAck,
        MoveFromRequest => MoveFromData,
        MoveFromData => MoveFromAck,
        MoveToAck | MoveFromAck => MoveToData,
        IAmHere => IAmHere,
        Reply | NAck | ReplyPending | GetPidReply | HostComplaint | Cancel | GroupAck => Send,
        MemRead | MemCas => MemWrite,
        MemImport => MemImportReply,
        MemWrite | MemWritev | MemNack | MemImportReply => MemNack,
    }
}

/// The (total_len, local_addr, remote_addr) a peer's natural answer to
/// `orig` carries: a read or CAS-II is answered into its destination.
fn natural_fields(orig: &Header) -> (u32, u32, u32) {
    let m = |i: usize| u32::from_be_bytes([orig.message[i], orig.message[i + 1], orig.message[i + 2], orig.message[i + 3]]);
    match orig.ptype {
        PacketType::MemRead => (orig.total_len, m(0), m(4)),
        PacketType::MemCas => (8, m(12), m(16)),
        _ => (orig.total_len, orig.local_addr, orig.remote_addr),
    }
}
